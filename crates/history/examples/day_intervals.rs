//! Measurement for BENCHMARKS.md §21: a whole day of 30 s intervals (2,880 lines of top
//! lists), then the console's "last 10 minutes" intervals query.
use serde_json::json;
use sonde_history::analytics::{read, Kind, Writer};
use std::time::Instant;

fn main() {
    // A directory of its own, removed at the end.
    let dir = std::env::temp_dir().join(format!("sonde-day-intervals-{}", std::process::id()));
    let day0 = 1_764_028_800u64; // a UTC midnight
    let mut w = Writer::open(&dir, 0).unwrap();
    for i in 0..2880u64 {
        let start = day0 + i * 30;
        let list = |k: &str| {
            (0..25).map(|j| json!({"host": format!("10.0.{}.{}", j, i % 250), "packets": i * j, "bytes": i * j * 100, k: j})).collect::<Vec<_>>()
        };
        let flows = (0..25).map(|j| json!({"client": format!("10.0.0.{j}"), "server": "192.0.2.1", "client_port": 40000 + j, "server_port": 443, "proto": "tcp", "app": "TLS.Google", "packets": j, "bytes": j * 1000})).collect::<Vec<_>>();
        let v = json!({"start": start, "end": start + 30, "talkers": list("a"), "destinations": list("b"), "flows": flows, "syn": list("c"), "scanners": list("d"), "packets": i, "bytes": i});
        w.append(Kind::Intervals, start, &v).unwrap();
    }
    w.sync(day0 + 86_399).unwrap();
    let size: u64 = std::fs::read_dir(dir.join("analytics"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let to = day0 + 86_400;
    let t = Instant::now();
    let got = read(&dir, Kind::Intervals, "start", to - 600, to)
        .unwrap()
        .len();
    let first = t.elapsed().as_secs_f64() * 1000.0;
    let n = 20;
    let t = Instant::now();
    for _ in 0..n {
        read(&dir, Kind::Intervals, "start", to - 600, to).unwrap();
    }
    println!("day file {size} bytes; last 10 min ({got} intervals): first query {first:.1} ms, then {:.2} ms per query", t.elapsed().as_secs_f64() * 1000.0 / n as f64);
    let _ = std::fs::remove_dir_all(&dir);
}
