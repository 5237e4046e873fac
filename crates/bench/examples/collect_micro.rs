//! The collector's decoder, alone and with the flow engine, on the datagrams of `make bench`
//! section 5, in nanoseconds per record (best of 5, one thread): a quick A/B tool for changes
//! to `crates/flowproto` or the engine's collected path. The speed figures that count are
//! section 5's, against nfcapd and nfacctd.
//!
//! `cargo run --release -p sonde-bench --example collect_micro [decode|engine|engine-new]`: with
//! an argument, only that loop, many times over (for `perf record`).

use sonde_bench::{collector_clock, decode_into_engine, flow_datagrams, RecordMix};
use sonde_flowproto::decode::{Collector, Config};
use sonde_flowproto::encode::ExportFormat;
use std::time::Instant;

const RECORDS: u64 = 500_000;

/// Decodes every datagram; returns the records decoded.
fn decode(dgrams: &[Vec<u8>]) -> usize {
    let exporter = "127.0.0.1:2055".parse().expect("address");
    let mut c = Collector::new(Config::default());
    let (mut flows, mut samples) = (Vec::new(), Vec::new());
    let mut n = 0;
    for d in dgrams {
        let _ = c.decode(exporter, d, collector_clock(d), &mut flows, &mut samples);
        n += flows.len();
        flows.clear();
    }
    n
}

fn best_ns_per_record(runs: usize, f: impl Fn() -> u64) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(f(), RECORDS, "every record decoded");
            t.elapsed().as_secs_f64() * 1e9 / RECORDS as f64
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let mode = std::env::args().nth(1);
    if let Some(mode) = mode {
        let (mix, repeat) = match mode.as_str() {
            "decode" => (RecordMix::Repeated, 40),
            "engine" => (RecordMix::Repeated, 10),
            "engine-new" => (RecordMix::AllNew, 10),
            other => {
                eprintln!("collect_micro: unknown mode {other:?} (decode, engine, engine-new)");
                std::process::exit(2);
            }
        };
        let d = flow_datagrams(ExportFormat::Ipfix, RECORDS, mix);
        for _ in 0..repeat {
            if mode == "decode" {
                decode(&d);
            } else {
                decode_into_engine(&d);
            }
        }
        return;
    }
    for (name, format) in [
        ("v9", ExportFormat::NetflowV9),
        ("IPFIX", ExportFormat::Ipfix),
    ] {
        for mix in [RecordMix::AllNew, RecordMix::Repeated] {
            let d = flow_datagrams(format, RECORDS, mix);
            let dec = best_ns_per_record(5, || decode(&d) as u64);
            let all = best_ns_per_record(5, || decode_into_engine(&d));
            println!(
                "{name:5} {:32}: decode {dec:6.1} ns/record, decode + flow engine {all:6.1} ns/record",
                mix.name()
            );
        }
    }
}
