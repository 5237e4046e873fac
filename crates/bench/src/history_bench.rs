//! `make bench` section 9: the flow history (`--data-dir`): ingest rate on one core, disk bytes
//! per flow, and the listed queries over what was stored.

use sonde_flow::{EndReason, Flow, FlowKey, FlowRecord};
use sonde_history::query::{self, Metric};
use sonde_history::store::{Filter, FlowReader, FlowStore, Network, Retention};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Client and server populations of the generated flows (a campus-like mix: many clients, few
/// servers, a handful of applications).
const CLIENTS: u32 = 100_000;
const SERVERS: u32 = 2_000;
/// Flows per second of flow time.
const FLOWS_PER_SECOND: u64 = 100_000;

fn record(i: u64) -> FlowRecord {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let client = (x >> 20) as u32 % CLIENTS;
    let server = (x >> 40) as u32 % SERVERS;
    let (port, proto, app) = match (x >> 8) % 4 {
        0 => (443, 6, (91, 126)),
        1 => (53, 17, (5, 0)),
        2 => (80, 6, (7, 0)),
        _ => (22, 6, (92, 0)),
    };
    let mut key = FlowKey {
        proto,
        ip_version: 4,
        port_a: 1024 + (x % 60_000) as u16,
        port_b: port,
        ..FlowKey::default()
    };
    key.addr_a[..4].copy_from_slice(&(0x0a00_0000 + client).to_be_bytes());
    key.addr_b[..4].copy_from_slice(&(0xc0a8_0000 + server).to_be_bytes());
    let t = 1_700_000_000_000_000_000 + i * (1_000_000_000 / FLOWS_PER_SECOND);
    let mut flow = Flow {
        key,
        first_ns: t,
        last_ns: t + (x % 2_000_000_000),
        pkts: [x % 20 + 1, x % 15 + 1],
        bytes: [(x % 20 + 1) * 700, (x % 15 + 1) * 900],
        dpi_done: true,
        ..Flow::default()
    };
    flow.l7.proto = sonde_dpi::Proto(app.0);
    flow.l7.app = sonde_dpi::Proto(app.1);
    FlowRecord {
        flow,
        reason: EndReason::IdleTimeout,
        meta: None,
        exporter: None,
    }
}

/// A query of the benchmark: returns the number of rows it produced.
type Query<'a> = Box<dyn Fn() -> Result<u64, String> + 'a>;

fn thread_cpu_s() -> f64 {
    // SAFETY: rusage is plain old data, filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(quick: bool, scratch: &Path) -> Result<String, String> {
    let flows: u64 = if quick { 2_000_000 } else { 100_000_000 };
    let dir = scratch.join("history-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let err = |e: sonde_history::store::StoreError| e.to_string();
    // Records are made before timing: only the store's work is measured.
    let mut store = FlowStore::open(
        &dir,
        Retention {
            max_age_ms: 0,
            max_bytes: 0,
            ..Retention::default()
        },
    )
    .map_err(err)?;
    let chunk = 1_000_000u64;
    let mut cpu = 0.0;
    let mut wall = 0.0;
    let mut i = 0;
    while i < flows {
        let batch: Vec<FlowRecord> = (i..(i + chunk).min(flows)).map(record).collect();
        let (c0, t0) = (thread_cpu_s(), Instant::now());
        for (n, r) in batch.iter().enumerate() {
            store.append(r).map_err(err)?;
            // A checkpoint (fdatasync) per 500k flows: one a second at the target rate.
            if (n + 1) % 500_000 == 0 {
                store.checkpoint().map_err(err)?;
            }
        }
        store.checkpoint().map_err(err)?;
        cpu += thread_cpu_s() - c0;
        wall += t0.elapsed().as_secs_f64();
        i += chunk;
    }
    drop(store);
    // Everything in the directory: segments and their totals files.
    let bytes: u64 = std::fs::read_dir(dir.join("flows"))
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();

    let reader = FlowReader::open(&dir).map_err(err)?;
    let span_ms = flows * 1000 / FLOWS_PER_SECOND;
    let t0_ms = 1_700_000_000_000;
    let last_tenth = Some(t0_ms + span_ms * 9 / 10);
    let mut one_client = Network {
        addr: [0; 16],
        ip_version: 4,
        prefix: 32,
    };
    one_client.addr[..4].copy_from_slice(&(0x0a00_0000u32 + 4242).to_be_bytes());
    let queries: Vec<(&str, Query)> = vec![
        (
            "flows of one client (all time, first 100)",
            Box::new(|| {
                let f = Filter {
                    host: Some(one_client),
                    ..Filter::default()
                };
                Ok(query::flows(&reader, &f, 0, 100).map_err(err)?.0.len() as u64)
            }),
        ),
        (
            "flows to port 22 in the last 10% of the time (first 100)",
            Box::new(|| {
                let f = Filter {
                    port: Some(22),
                    from_ms: last_tenth,
                    ..Filter::default()
                };
                Ok(query::flows(&reader, &f, 0, 100).map_err(err)?.0.len() as u64)
            }),
        ),
        (
            "top 10 hosts by bytes, all time",
            Box::new(|| {
                let (t, _) = query::top_hosts(&reader, &Filter::default(), Metric::Bytes, 10)
                    .map_err(err)?;
                Ok(t.len() as u64)
            }),
        ),
        (
            "top 10 hosts by bytes, last 10% of the time",
            Box::new(|| {
                let f = Filter {
                    from_ms: last_tenth,
                    ..Filter::default()
                };
                let (t, _) = query::top_hosts(&reader, &f, Metric::Bytes, 10).map_err(err)?;
                Ok(t.len() as u64)
            }),
        ),
        (
            "top 10 applications by bytes, all time",
            Box::new(|| {
                let (t, _) =
                    query::top_apps(&reader, &Filter::default(), Metric::Bytes, 10).map_err(err)?;
                Ok(t.len() as u64)
            }),
        ),
    ];
    let mut rows = String::new();
    for (name, q) in &queries {
        let mut times = Vec::new();
        let mut n = 0;
        for _ in 0..5 {
            let t = Instant::now();
            n = q()?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let _ = writeln!(
            rows,
            "| {name} | {n} | {:.1} | {:.1} |",
            median(times.clone()),
            times.iter().copied().fold(0.0, f64::max)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 9. Flow history: ingest and queries\n\n{} generated flow records ({}k clients, {}k \
         servers, four applications, {}k flows per second of flow time, no DPI metadata) \
         appended to a `FlowStore` (what `--data-dir` writes) on one thread, with a checkpoint \
         (`fdatasync`) every 500k records; CPU time of that thread, which also writes each \
         closed segment's totals file (bytes on disk include those). Then each query run 5 times \
         through the library (`sonde query` does the same), page cache warm; milliseconds.\n",
        sonde_bench::fmt_count(flows),
        CLIENTS / 1000,
        SERVERS / 1000,
        FLOWS_PER_SECOND / 1000
    );
    let _ = writeln!(
        out,
        "| flows stored | CPU s | wall s | flows / CPU-s | bytes on disk | bytes per flow |\n\
         | --- | --- | --- | --- | --- | --- |\n\
         | {} | {cpu:.2} | {wall:.2} | {:.2}M | {} | {:.0} |\n",
        sonde_bench::fmt_count(flows),
        flows as f64 / cpu.max(1e-9) / 1e6,
        sonde_bench::fmt_bytes(bytes),
        bytes as f64 / flows as f64
    );
    let _ = writeln!(
        out,
        "| query over {} flows | rows | median ms | max ms |\n| --- | --- | --- | --- |",
        sonde_bench::fmt_count(flows)
    );
    out.push_str(&rows);
    Ok(out)
}
