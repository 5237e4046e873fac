//! Fuzzes every built-in detector alone over a short flow: the first input byte picks the
//! detector (its index in `sonde_dpi::proto::DETECTORS`, modulo their number), the rest is the
//! flow (input layout: `src/lib.rs`). A new detector needs no edit here.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sonde_dpi_fuzz::run_detectors(data));
