//! Measurement for BENCHMARKS.md §21: an hour of a quiet link, one checkpoint a second,
//! 5 flows a second; then the console's "last 10 minutes" history queries.
mod common;

use sonde_history::query;
use sonde_history::store::{Filter, FlowReader, FlowStore, Retention};
use std::time::Instant;

fn record(i: u32) -> sonde_flow::FlowRecord {
    common::record(i, 5, 5000, 100)
}

fn main() {
    // A directory of its own, removed at the end.
    let dir = std::env::temp_dir().join(format!("sonde-quiet-hour-{}", std::process::id()));
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    let seconds = 3600u32;
    for sec in 0..seconds {
        for j in 0..5 {
            s.append(&record(sec * 5 + j)).unwrap();
        }
        s.checkpoint().unwrap();
    }
    println!("history bytes after {seconds} s: {}", s.bytes());
    drop(s);
    let last_ms = record(seconds * 5 - 1).flow.last_ns / 1_000_000;
    let filter = Filter {
        from_ms: Some(last_ms - 600_000),
        ..Filter::default()
    };
    let reader = FlowReader::open(&dir).unwrap();
    let time = |name: &str, f: &dyn Fn()| {
        let n = 50;
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        println!(
            "{name}: {:.2} ms per query",
            t.elapsed().as_secs_f64() * 1000.0 / n as f64
        );
    };
    time("top hosts, last 10 min", &|| {
        query::top_hosts(&reader, &filter, query::Metric::Bytes, 10).unwrap();
    });
    time("flows, last 10 min, 100", &|| {
        query::flows(&reader, &filter, 0, 100).unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
}
