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
        ext: Default::default(),
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

/// A store in `dir` (emptied first) with no retention limit.
fn fresh_store(dir: &Path) -> Result<FlowStore, String> {
    let _ = std::fs::remove_dir_all(dir);
    FlowStore::open(
        dir,
        Retention {
            max_age_ms: 0,
            max_bytes: 0,
            ..Retention::default()
        },
    )
    .map_err(|e| e.to_string())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(quick: bool, scratch: &Path) -> Result<String, String> {
    let flows: u64 = if quick { 2_000_000 } else { 100_000_000 };
    let dir = scratch.join("history-bench");
    let err = |e: sonde_history::store::StoreError| e.to_string();
    // Records are made before timing: only the store's work is measured.
    let mut store = fresh_store(&dir)?;
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

/// The same flows side by side with nfdump (Debian), the flow history peer: sonde's `FlowStore`
/// and nfcapd store `flows` one-way flows (`record`, with the reply direction left out, as
/// NetFlow exports them), nfcapd receiving them as IPFIX over UDP from sonde's encoder. Then the
/// same questions asked of both as a user asks them: `sonde query` and `nfdump -R` processes,
/// wall time, median of 5. The all-time top hosts of both must agree (a check that both stored
/// the same flows), or the table says they do not.
pub fn run_peer(quick: bool, sonde: &Path, scratch: &Path) -> Result<String, String> {
    use sonde_flowproto::encode::{ExportFormat, Exporter, ExporterConfig};
    use std::process::Command;
    let flows: u64 = if quick { 1_000_000 } else { 10_000_000 };
    let Some(nfdump) = sonde_bench::which("nfdump") else {
        return Err("nfdump not installed (scripts/setup-bench-deps.sh)".into());
    };
    let one_way = |i: u64| {
        let mut r = record(i);
        r.flow.pkts[1] = 0;
        r.flow.bytes[1] = 0;
        r
    };
    // sonde: the library's append, as section 9's ingest above.
    let dir = scratch.join("history-peer-sonde");
    let err = |e: sonde_history::store::StoreError| e.to_string();
    let mut store = fresh_store(&dir)?;
    let (mut cpu, mut i) = (0.0, 0);
    while i < flows {
        let batch: Vec<FlowRecord> = (i..(i + 1_000_000).min(flows)).map(one_way).collect();
        let c0 = thread_cpu_s();
        for r in &batch {
            store.append(r).map_err(err)?;
        }
        store.checkpoint().map_err(err)?;
        cpu += thread_cpu_s() - c0;
        i += 1_000_000;
    }
    drop(store);
    let sonde_bytes = dir_bytes(&dir.join("flows"));

    // nfcapd: the same flows as IPFIX datagrams.
    let mut e = Exporter::new(ExporterConfig::new(ExportFormat::Ipfix));
    let mut dgrams = Vec::new();
    let mut batch = Vec::with_capacity(1000);
    for i in 0..flows {
        let f = one_way(i).flow;
        let mut x = sonde_flowproto::ExportFlow {
            ip_version: 4,
            sport: f.key.port_a,
            dport: f.key.port_b,
            proto: f.key.proto,
            packets: f.pkts[0],
            bytes: f.bytes[0],
            first_ms: f.first_ns / 1_000_000,
            last_ms: f.last_ns / 1_000_000,
            ..Default::default()
        };
        x.src[..4].copy_from_slice(&f.key.addr_a[..4]);
        x.dst[..4].copy_from_slice(&f.key.addr_b[..4]);
        batch.push(x);
        if batch.len() == batch.capacity() || i + 1 == flows {
            let export_ms = batch.iter().map(|x| x.last_ms).max().unwrap_or(0);
            e.encode(&batch, export_ms, &mut dgrams);
            batch.clear();
        }
    }
    let nf_dir = scratch.join("history-peer-nfdump");
    let _ = std::fs::remove_dir_all(&nf_dir);
    std::fs::create_dir_all(nf_dir.join("nf")).map_err(|e| e.to_string())?;
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // 10 datagrams per ms (~270k records/s): slow enough that nfcapd loses none.
    let per_ms = 10;
    let secs = dgrams.len() / per_ms / 1000 + 6;
    let argv: Vec<String> = [
        "timeout",
        "-s",
        "TERM",
        &secs.to_string(),
        "nfcapd",
        "-w",
        &nf_dir.join("nf").display().to_string(),
        "-p",
        &port.to_string(),
        "-b",
        "127.0.0.1",
        // A 4 MiB socket buffer (sonde's collector asks for 8 MiB), so bursts are not lost.
        "-B",
        "4194304",
    ]
    .map(String::from)
    .to_vec();
    let nfcapd = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            sonde_bench::run_measured(&argv, &nf_dir, std::time::Duration::from_secs(600))
        });
        crate::wait_udp_bound(port);
        let _ = crate::send_paced(&dgrams, port, per_ms);
        h.join()
    })
    .map_err(|_| "nfcapd run panicked".to_string())?
    .map_err(|e| e.to_string())?;
    let nf_bytes = dir_bytes(&nf_dir.join("nf"));
    let nf_count = sonde_bench::nfdump_records(&nf_dir.join("nf"))?;

    // The questions, as each tool is asked them.
    let span_s = flows / FLOWS_PER_SECOND;
    let t0_s = 1_700_000_000u64;
    let tenth = t0_s + span_s * 9 / 10;
    let nf_time = |s: u64| {
        // nfdump -t takes local time: the commands run with TZ=UTC.
        let days = (s / 86_400) as i64;
        let (y, m, d) = sonde_history::filter_text::civil_from_days(days);
        format!(
            "{y:04}/{m:02}/{d:02}.{:02}:{:02}:{:02}",
            s % 86_400 / 3600,
            s % 3600 / 60,
            s % 60
        )
    };
    let window = format!("{}-{}", nf_time(tenth), nf_time(t0_s + span_s + 10));
    let client = "10.1.16.146";
    let sq = |args: &[&str]| -> Vec<String> {
        let mut v = vec![
            sonde.display().to_string(),
            "query".into(),
            "--data-dir".into(),
            dir.display().to_string(),
        ];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let nq = |args: &[&str]| -> Vec<String> {
        let mut v = vec![
            nfdump.display().to_string(),
            "-R".into(),
            nf_dir.join("nf").display().to_string(),
        ];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let from = tenth.to_string();
    let host_filter = format!("host {client}");
    let cases: Vec<(&str, Vec<String>, Vec<String>)> = vec![
        (
            "flows of one client (all time, first 100)",
            sq(&[
                "flows", "--host", client, "--limit", "100", "--format", "jsonl",
            ]),
            nq(&["-q", "-o", "csv", "-c", "100", &host_filter]),
        ),
        (
            "flows to port 22 in the last 10% of the time (first 100)",
            sq(&[
                "flows", "--port", "22", "--from", &from, "--limit", "100", "--format", "jsonl",
            ]),
            nq(&["-q", "-o", "csv", "-c", "100", "-t", &window, "port 22"]),
        ),
        (
            "top 10 hosts by bytes, all time",
            sq(&["hosts", "--limit", "10", "--format", "jsonl"]),
            nq(&["-q", "-o", "csv", "-s", "ip/bytes", "-n", "10"]),
        ),
        (
            "top 10 hosts by bytes, last 10% of the time",
            sq(&[
                "hosts", "--from", &from, "--limit", "10", "--format", "jsonl",
            ]),
            nq(&[
                "-q", "-o", "csv", "-s", "ip/bytes", "-n", "10", "-t", &window,
            ]),
        ),
    ];
    let mut rows = String::new();
    let mut outputs = Vec::new();
    for (name, s_argv, n_argv) in &cases {
        let cell = |argv: &[String]| -> Result<(f64, String), String> {
            let mut times = Vec::new();
            let mut out = String::new();
            for _ in 0..5 {
                let t = Instant::now();
                let o = Command::new(&argv[0])
                    .args(&argv[1..])
                    .env("TZ", "UTC")
                    .output()
                    .map_err(|e| format!("{}: {e}", argv[0]))?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
                if !o.status.success() {
                    return Err(format!(
                        "{} failed: {}",
                        argv[0],
                        String::from_utf8_lossy(&o.stderr).trim()
                    ));
                }
                out = String::from_utf8_lossy(&o.stdout).into_owned();
            }
            Ok((median(times), out))
        };
        let (s_ms, s_out) = cell(s_argv)?;
        let (n_ms, n_out) = cell(n_argv)?;
        // Records and statistics rows start with a time; the csv header with letters.
        let lines = |t: &str| {
            t.lines()
                .filter(|l| l.contains(',') && l.starts_with(|c: char| c.is_ascii_digit()))
                .count()
        };
        let _ = writeln!(
            rows,
            "| {name} | {} | {s_ms:.0} | {} | {n_ms:.0} | {:.1}× |",
            s_out.lines().count(),
            lines(&n_out),
            n_ms / s_ms.max(1e-9)
        );
        outputs.push((s_out, n_out));
    }
    // The check: both tools' all-time top 10 byte counts.
    let sonde_top: Vec<u64> = outputs[2]
        .0
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["BYTES"].as_u64())
        .collect();
    let nf_top = nfdump_top_bytes(&outputs[2].1);
    let agree = if !sonde_top.is_empty() && sonde_top == nf_top {
        "the all-time top 10 hosts have the same byte counts in both".to_string()
    } else {
        format!("the all-time top 10 differ: sonde {sonde_top:?}, nfdump {nf_top:?}")
    };
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&nf_dir);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### 9b. The same flows in nfdump (same run)\n\n{} one-way flows (the generator above, \
         reply direction left out). sonde: `FlowStore` appends on one thread, records in \
         memory. nfcapd (nfdump {}): the same flows as IPFIX datagrams from sonde's encoder, \
         over UDP on 127.0.0.1 at 10 datagrams per ms into a 4 MiB socket buffer (`-B`); its CPU time (wait4) includes \
         receiving and decoding, which sonde's row does not. Queries: one `sonde query` or \
         `nfdump -R` process each, wall time (process start included), median of 5, page \
         cache warm; nfdump's time window (`-t`) covers the same last 10%. Check: {agree}.\n",
        sonde_bench::fmt_count(flows),
        nfdump_version(),
    );
    let _ = writeln!(
        out,
        "| store | flows stored | CPU s | flows / CPU-s | bytes on disk | bytes per flow |\n\
         | --- | --- | --- | --- | --- | --- |\n\
         | sonde `FlowStore` | {} | {cpu:.2} | {:.2}M | {} | {:.0} |\n\
         | nfcapd (receive, decode, store) | {} | {:.2} | {:.2}M | {} | {:.0} |\n",
        sonde_bench::fmt_count(flows),
        flows as f64 / cpu.max(1e-9) / 1e6,
        sonde_bench::fmt_bytes(sonde_bytes),
        sonde_bytes as f64 / flows as f64,
        sonde_bench::fmt_count(nf_count),
        nfcapd.cpu_s(),
        nf_count as f64 / nfcapd.cpu_s().max(1e-9) / 1e6,
        sonde_bench::fmt_bytes(nf_bytes),
        nf_bytes as f64 / nf_count.max(1) as f64,
    );
    let _ = writeln!(
        out,
        "| query over {} flows | sonde rows | sonde ms | nfdump rows | nfdump ms | nfdump ÷ sonde |\n\
         | --- | --- | --- | --- | --- | --- |",
        sonde_bench::fmt_count(flows)
    );
    out.push_str(&rows);
    Ok(out)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The byte column of `nfdump -s ip/bytes -o csv`: the header names the columns.
fn nfdump_top_bytes(csv: &str) -> Vec<u64> {
    let mut lines = csv.lines().filter(|l| l.contains(','));
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let Some(col) = header.split(',').position(|h| h.trim() == "byt") else {
        return Vec::new();
    };
    lines
        .filter_map(|l| l.split(',').nth(col)?.trim().parse::<u64>().ok())
        .collect()
}

/// The Debian package's version (`nfdump -V` prints a build name).
fn nfdump_version() -> String {
    std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "nfdump"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "version unknown".into(),
            |o| String::from_utf8_lossy(&o.stdout).into_owned(),
        )
}
