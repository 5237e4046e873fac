//! Measurement for BENCHMARKS.md §21: 10 minutes of a busy link (1,000 flows/s, full
//! blocks), then "top hosts over the last 10 minutes", as the console asks.
mod common;

use sonde_history::query;
use sonde_history::store::{Filter, FlowReader, FlowStore, Retention};
use std::time::Instant;

fn record(i: u32) -> sonde_flow::FlowRecord {
    common::record(i, 1000, 20_000, 500)
}

fn main() {
    // A directory of its own, removed at the end.
    let dir = std::env::temp_dir().join(format!("sonde-busy-10min-{}", std::process::id()));
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    for sec in 0..600u32 {
        for j in 0..1000 {
            s.append(&record(sec * 1000 + j)).unwrap();
        }
        s.checkpoint().unwrap();
    }
    drop(s);
    let reader = FlowReader::open(&dir).unwrap();
    let filter = Filter {
        from_ms: Some(1_700_000_000_000),
        ..Filter::default()
    };
    query::top_hosts(&reader, &filter, query::Metric::Bytes, 10).unwrap();
    let n = 10;
    let t = Instant::now();
    for _ in 0..n {
        query::top_hosts(&reader, &filter, query::Metric::Bytes, 10).unwrap();
    }
    println!(
        "top hosts over 600k flows: {:.1} ms per query",
        t.elapsed().as_secs_f64() * 1000.0 / n as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
