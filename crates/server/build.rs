// The console's files are embedded from console/dist (built by `make console`): rebuild when
// they appear or change, even if this crate's sources did not.
fn main() {
    println!("cargo:rerun-if-changed=../../console/dist");
}
