//! `make bench` section 10: the REST API (`--http`) at 1M hosts and 1M flows. Issue 5's
//! target: a sorted, filtered page of 50 hosts and of 50 flows answered in under 50 ms at the
//! median, and packet processing losing under 5% throughput while the API serves 20 requests
//! per second. sonde runs as a child process serving on 127.0.0.1; requests go over TCP through
//! a minimal HTTP/1.1 client (one connection per request, timed from connect to the last byte).
//! There is no peer here (ntopng is not installable on this machine): the figures are absolute,
//! against the targets.

use serde_json::Value;
use sonde_bench::{fmt_bytes, fmt_count, fmt_mpps, short_count, Table};
use std::fmt::Write as _;
use std::io::{self, Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Hosts (and flows: the synthetic flow j goes from host j to host j+1) of every run.
const HOSTS: u64 = 1_000_000;
/// Packets of the loaded state: 5.5 per flow, so byte counts differ (5 or 6 packets).
const LOAD_PACKETS: u64 = 5_500_000;
/// The targets.
const TARGET_MEDIAN_MS: f64 = 50.0;
const TARGET_LOSS: f64 = 0.05;
const LOAD_RATE: f64 = 20.0;
/// At most this many requests in flight during the load (the load is bounded).
const LOAD_IN_FLIGHT: usize = 4;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The filtered pages of the issue, used for both measures.
const HOSTS_PAGE: &str = "/api/v1/hosts?sort=bytes&order=desc&q=10.1.&offset=0&limit=50";
const FLOWS_PAGE: &str = "/api/v1/flows?port=1500&sort=bytes&order=desc&offset=0&limit=50";

/// What the latency table asks, in order: (label, path, list key in the reply).
const LATENCY_REQUESTS: [(&str, &str, &str); 5] = [
    (
        "hosts: q=10.1. (address contains), sort=bytes desc, limit 50",
        HOSTS_PAGE,
        "hosts",
    ),
    (
        "hosts: no filter, sort=bytes desc, limit 50",
        "/api/v1/hosts?sort=bytes&order=desc&offset=0&limit=50",
        "hosts",
    ),
    (
        "flows: port=1500, sort=bytes desc, limit 50",
        FLOWS_PAGE,
        "flows",
    ),
    (
        "flows: no filter, sort=bytes desc, limit 50",
        "/api/v1/flows?sort=bytes&order=desc&offset=0&limit=50",
        "flows",
    ),
    (
        "flows: host=10.1.2.3 (one host's flows), sort=bytes desc, limit 50",
        "/api/v1/flows?host=10.1.2.3&sort=bytes&order=desc&offset=0&limit=50",
        "flows",
    ),
];

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client

struct Reply {
    status: u16,
    body: Vec<u8>,
    ms: f64,
}

/// `GET path` on a new connection (`Connection: close`), the whole reply read.
fn get(addr: SocketAddr, path: &str) -> io::Result<Reply> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    s.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
             User-Agent: sonde-bench\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let mut raw = Vec::with_capacity(64 * 1024);
    s.read_to_end(&mut raw)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let mut body = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(Reply { status, body, ms })
}

/// A chunked HTTP body (`Transfer-Encoding: chunked`) joined, or None if it is cut short.
pub(crate) fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

fn get_json(addr: SocketAddr, path: &str) -> Result<(Value, f64, usize), String> {
    let r = get(addr, path).map_err(|e| format!("GET {path}: {e}"))?;
    if r.status != 200 {
        return Err(format!(
            "GET {path}: HTTP {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body[..r.body.len().min(200)])
        ));
    }
    let v = serde_json::from_slice(&r.body).map_err(|e| format!("GET {path}: {e}"))?;
    Ok((v, r.ms, r.body.len()))
}

// ---------------------------------------------------------------------------------------------
// sonde as a child process

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// `--no-auth` where this sonde has logins (an older build serves without them).
fn auth_args(sonde: &Path) -> Vec<String> {
    let help = Command::new(sonde)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if help.contains("--no-auth") {
        vec!["--no-auth".into()]
    } else {
        Vec::new()
    }
}

struct Sonde {
    child: Child,
    addr: SocketAddr,
    stats: PathBuf,
    stderr: PathBuf,
    started: Instant,
}

impl Sonde {
    /// Starts `sonde --synthetic SPEC --http 127.0.0.1:PORT` and waits until it answers.
    fn start(sonde: &Path, spec: &str, extra: &[String], dir: &Path) -> Result<Sonde, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let stats = dir.join("stats.json");
        let stderr = dir.join("stderr");
        let mut args: Vec<String> = vec![
            "--synthetic".into(),
            spec.into(),
            "--http".into(),
            addr.to_string(),
            "--stats-json".into(),
            stats.display().to_string(),
            "-q".into(),
        ];
        args.extend(extra.iter().cloned());
        let child = Command::new(sonde)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", sonde.display()))?;
        let mut s = Sonde {
            child,
            addr,
            stats,
            stderr,
            started: Instant::now(),
        };
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!(
                    "sonde {} exited ({status}) before serving: {}",
                    args.join(" "),
                    s.stderr_tail()
                ));
            }
            if matches!(get(addr, "/api/v1/health"), Ok(r) if r.status == 200) {
                return Ok(s);
            }
            if s.started.elapsed() > Duration::from_secs(30) {
                return Err(format!("sonde does not answer on {addr} after 30 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr_tail(&self) -> String {
        let e = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        e.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_string()
    }

    fn interface(&self) -> Result<Value, String> {
        get_json(self.addr, "/api/v1/interface").map(|(v, _, _)| v)
    }

    fn packets(&self) -> Result<u64, String> {
        self.interface()?
            .get("packets")
            .and_then(Value::as_u64)
            .ok_or_else(|| "no packets in /api/v1/interface".into())
    }

    /// Resident and peak resident memory (VmRSS, VmHWM) in bytes.
    fn rss(&self) -> (u64, u64) {
        let st = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let kb = |label: &str| sonde_bench::find_number(&st, label).unwrap_or(0) * 1024;
        (kb("VmRSS:"), kb("VmHWM:"))
    }

    /// CPU seconds so far of sonde's threads: (shard threads, the http thread, all threads).
    fn cpu(&self) -> (f64, f64, f64) {
        let pid = self.child.id();
        // SAFETY: sysconf only reads a configuration value.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let mut shard = 0.0;
        let mut http = 0.0;
        let total = proc_cpu(&format!("/proc/{pid}/stat"))
            .map(|(_, t)| t / ticks)
            .unwrap_or(0.0);
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.filter_map(Result::ok) {
                let Some((name, cpu)) = proc_cpu(&t.path().join("stat").display().to_string())
                else {
                    continue;
                };
                if name.starts_with("shard") {
                    shard += cpu / ticks;
                } else if name == "http" {
                    http += cpu / ticks;
                }
            }
        }
        (shard, http, total)
    }

    /// Stops sonde (SIGINT, as Ctrl-C) and returns its `--stats-json` summary.
    fn stop(mut self) -> Result<Value, String> {
        // SAFETY: signals our own child, which has not been waited for yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    return Err(format!("sonde ended with {status}: {}", self.stderr_tail()))
                }
                Ok(None) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err("sonde did not stop within 120 s of SIGINT".into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(e.to_string()),
            }
        }
        let b = std::fs::read(&self.stats).map_err(|e| format!("no --stats-json summary: {e}"))?;
        serde_json::from_slice(&b).map_err(|e| format!("bad --stats-json summary: {e}"))
    }
}

impl Drop for Sonde {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The command name and user+system clock ticks of a /proc/…/stat file.
fn proc_cpu(path: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let name = stat[stat.find('(')? + 1..stat.rfind(')')?].to_string();
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

// ---------------------------------------------------------------------------------------------
// Statistics

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    quantile(&s, 0.5)
}

fn ms(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Latency over the loaded state

struct Latency {
    label: &'static str,
    path: &'static str,
    times: Vec<f64>,
    total: Option<u64>,
    page: usize,
    bytes: usize,
    error: Option<String>,
}

fn latency(
    sonde: &Path,
    auth: &[String],
    dir: &Path,
    quick: bool,
    out: &mut String,
) -> Result<(), String> {
    let spec = format!(
        "hosts={},size=64,packets={}",
        short_count(HOSTS),
        short_count(LOAD_PACKETS)
    );
    // The same requests, at most this many each, and at most this long (at least 11).
    let (max_n, budget) = if quick {
        (21, Duration::from_secs(15))
    } else {
        (101, Duration::from_secs(45))
    };
    progress(&format!("api: loading {spec}"));
    let s = Sonde::start(sonde, &spec, auth, dir)?;
    let t0 = Instant::now();
    loop {
        if s.packets()? >= LOAD_PACKETS {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            return Err("loading took over 300 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let load_s = s.started.elapsed().as_secs_f64();
    let iface = s.interface()?;
    let (rss_loaded, _) = s.rss();
    let mut rows = Vec::new();
    for (label, path, list) in LATENCY_REQUESTS {
        progress(&format!("api: latency of {path}"));
        let mut l = Latency {
            label,
            path,
            times: Vec::new(),
            total: None,
            page: 0,
            bytes: 0,
            error: None,
        };
        let start = Instant::now();
        while l.times.len() < max_n && (l.times.len() < 11 || start.elapsed() < budget) {
            match get_json(s.addr, path) {
                Ok((v, t, bytes)) => {
                    l.times.push(t);
                    l.total = v.get("total").and_then(Value::as_u64);
                    l.page = v.get(list).and_then(Value::as_array).map_or(0, Vec::len);
                    l.bytes = bytes;
                }
                Err(e) => {
                    l.error = Some(e);
                    break;
                }
            }
        }
        rows.push(l);
    }
    let (rss_after, hwm) = s.rss();
    let (shard_cpu, http_cpu, total_cpu) = s.cpu();
    let summary = s.stop()?;

    let _ = writeln!(
        out,
        "### Latency: pages of 50 over 1M hosts and 1M flows\n\n`sonde --synthetic {spec} \
         --http 127.0.0.1:PORT{} --stats-json FILE -q` (one shard): 1M hosts talking over 1M UDP \
         flows (5 or 6 packets each), loaded in {load_s:.1} s; the input then ends and sonde \
         keeps serving its state (no packets arrive during these requests). Each request is \
         made {max_n} times in a row (fewer, at least 11, where that takes over {} s), on a new \
         TCP connection each time; time from connect to the last byte of the reply. \"matched\": \
         the reply's `total` (rows that pass the filter, of which the page shows 50).\n",
        auth.iter().map(|a| format!(" {a}")).collect::<String>(),
        budget.as_secs()
    );
    let mut t = Table::new(&[
        "request",
        "n",
        "median ms",
        "p90 ms",
        "max ms",
        "matched",
        "rows in page",
        "reply bytes",
        "target: median < 50 ms",
    ]);
    for l in &rows {
        let mut sorted = l.times.clone();
        sorted.sort_by(f64::total_cmp);
        let med = quantile(&sorted, 0.5);
        t.row(vec![
            format!("{} `{}`", l.label, l.path),
            sorted.len().to_string(),
            ms(med),
            ms(quantile(&sorted, 0.9)),
            ms(sorted.last().copied().unwrap_or(f64::NAN)),
            l.total.map(fmt_count).unwrap_or_else(|| "?".into()),
            l.page.to_string(),
            fmt_count(l.bytes as u64),
            match &l.error {
                Some(e) => format!("failed: {}", sonde_bench::cell(e)),
                None if med < TARGET_MEDIAN_MS => "yes".into(),
                None => format!("NO ({:.0}× over)", med / TARGET_MEDIAN_MS),
            },
        ]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    let n = |p: &str| {
        iface
            .pointer(p)
            .and_then(Value::as_u64)
            .map(fmt_count)
            .unwrap_or_else(|| "?".into())
    };
    let mut t = Table::new(&["state", "value"]);
    for (k, v) in [
        (
            "live flows (`/api/v1/interface` flows_active)",
            n("/flows_active"),
        ),
        ("live hosts (hosts_active)", n("/hosts_active")),
        (
            "sonde RSS when loaded, before the requests",
            fmt_bytes(rss_loaded),
        ),
        ("sonde RSS after the requests", fmt_bytes(rss_after)),
        ("sonde peak RSS (VmHWM)", fmt_bytes(hwm)),
        (
            "sonde CPU s over the whole run: shard thread, http thread, all",
            format!("{shard_cpu:.1}, {http_cpu:.1}, {total_cpu:.1}"),
        ),
        (
            "table memory (summary `table_memory_bytes`)",
            summary
                .get("table_memory_bytes")
                .and_then(Value::as_u64)
                .map(fmt_bytes)
                .unwrap_or_else(|| "?".into()),
        ),
    ] {
        t.row(vec![k.into(), v]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Packet processing with and without API load

#[derive(Default)]
struct Load {
    done: u64,
    failed: u64,
    times: Vec<f64>,
    first_error: Option<String>,
}

/// Requests on a fixed schedule of `rate` per second for `window`, alternating `paths`, at
/// most [`LOAD_IN_FLIGHT`] at once: a late request goes as soon as a slot is free, and never
/// more than the schedule has by then (bounded, open loop).
fn api_load(addr: SocketAddr, paths: &[&str], rate: f64, window: Duration) -> Load {
    let next = AtomicU64::new(0);
    let result = Mutex::new(Load::default());
    let t0 = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate);
    std::thread::scope(|sc| {
        for _ in 0..LOAD_IN_FLIGHT {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let due = period * i as u32;
                if due >= window {
                    break;
                }
                let now = t0.elapsed();
                if now >= window {
                    break;
                }
                if due > now {
                    std::thread::sleep(due - now);
                }
                let path = paths[i as usize % paths.len()];
                let r = get_json(addr, path);
                let mut res = result.lock().unwrap_or_else(|e| e.into_inner());
                match r {
                    Ok((_, t, _)) => {
                        res.done += 1;
                        res.times.push(t);
                    }
                    Err(e) => {
                        res.failed += 1;
                        res.first_error.get_or_insert(e);
                    }
                }
            });
        }
    });
    result.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// What sonde says about itself at one moment: packets, the shard's time spent answering the
/// API (`sonde_shard_reader_seconds_total`), CPU seconds of its threads.
struct Probe {
    at: Instant,
    packets: u64,
    reader_s: f64,
    cpu: (f64, f64, f64),
}

impl Sonde {
    fn probe(&self) -> Result<Probe, String> {
        let packets = self.packets()?;
        let r = get(self.addr, "/metrics").map_err(|e| format!("GET /metrics: {e}"))?;
        let text = String::from_utf8_lossy(&r.body);
        let reader_s = text
            .lines()
            .filter(|l| l.starts_with("sonde_shard_reader_seconds_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        Ok(Probe {
            at: Instant::now(),
            packets,
            reader_s,
            cpu: self.cpu(),
        })
    }
}

/// One measured window: with or without the API load.
struct Window {
    loaded: bool,
    secs: f64,
    packets: u64,
    reader_s: f64,
    shard_cpu: f64,
    http_cpu: f64,
    load: Option<Load>,
}

impl Window {
    fn between(a: &Probe, b: &Probe, loaded: bool, load: Option<Load>) -> Window {
        Window {
            loaded,
            secs: (b.at - a.at).as_secs_f64(),
            packets: b.packets.saturating_sub(a.packets),
            reader_s: b.reader_s - a.reader_s,
            shard_cpu: b.cpu.0 - a.cpu.0,
            http_cpu: b.cpu.1 - a.cpu.1,
            load,
        }
    }

    fn pps(&self) -> f64 {
        self.packets as f64 / self.secs.max(1e-9)
    }
}

/// Alternating windows with and without the API load on one running sonde: this machine's
/// throughput drifts by ±10% over seconds (other tenants), more than the effect measured, so
/// each loaded window is compared with the unloaded window next to it, in the order
/// unloaded-loaded, then loaded-unloaded (ABBA), which cancels a steady drift.
fn throughput_windows(
    sonde: &Path,
    auth: &[String],
    dir: &Path,
    pairs: usize,
    window: Duration,
) -> Result<Vec<Window>, String> {
    let spec = format!("hosts={},size=64", short_count(HOSTS));
    let mut extra = auth.to_vec();
    // A safety net: the run is stopped with SIGINT after the windows.
    extra.extend(["--duration".into(), "1200".into()]);
    let s = Sonde::start(sonde, &spec, &extra, dir)?;
    // Warm-up: every flow and host created (each flow has had its first packets).
    let t0 = Instant::now();
    while s.packets()? < 2 * HOSTS {
        if t0.elapsed() > Duration::from_secs(120) {
            return Err("fewer than 2M packets after 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut windows = Vec::new();
    for i in 0..pairs {
        progress(&format!("api: throughput, pair {} of {pairs}", i + 1));
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for loaded in order {
            let a = s.probe()?;
            let load = if loaded {
                Some(api_load(
                    s.addr,
                    &[HOSTS_PAGE, FLOWS_PAGE],
                    LOAD_RATE,
                    window,
                ))
            } else {
                std::thread::sleep(window);
                None
            };
            let b = s.probe()?;
            windows.push(Window::between(&a, &b, loaded, load));
        }
    }
    s.stop()?;
    Ok(windows)
}

fn throughput(
    sonde: &Path,
    auth: &[String],
    scratch: &Path,
    quick: bool,
    repeats: usize,
    out: &mut String,
) -> Result<(), String> {
    let (pairs, window) = if quick {
        (6, Duration::from_secs(2))
    } else {
        (8 * repeats.max(2), Duration::from_secs(3))
    };
    let windows = throughput_windows(sonde, auth, &scratch.join("api-throughput"), pairs, window)?;
    let _ = writeln!(
        out,
        "### Packet processing under API load\n\n`sonde --synthetic hosts=1M,size=64 --http \
         127.0.0.1:PORT{} --stats-json FILE -q` (one shard, no packet limit). Once 2M packets \
         are in (all 1M flows and hosts live) and one more second has passed, {pairs} pairs of \
         {} s windows are measured on that one running sonde: in one window of each pair a \
         bounded load runs, {LOAD_RATE} requests per second on a fixed schedule, alternating \
         `{HOSTS_PAGE}` and `{FLOWS_PAGE}`, at most {LOAD_IN_FLIGHT} in flight (a late request \
         goes when a slot frees, never ahead of the schedule); in the other, no request. Pairs \
         run unloaded-loaded, then loaded-unloaded, and so on. Packets are sonde's own counters \
         (`/api/v1/interface`) at both ends of a window; \"shard time for the API\" is \
         `sonde_shard_reader_seconds_total` from `/metrics` (the time the packet thread spent \
         copying snapshots for the API), as a share of the window; CPU seconds from /proc. \
         {} CPUs: the shard thread takes one; the http thread, the request load and this \
         program share the other.\n",
        auth.iter().map(|a| format!(" {a}")).collect::<String>(),
        window.as_secs(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let mut t = Table::new(&[
        "pair",
        "no load Mpps",
        "20 req/s Mpps",
        "lost",
        "requests done (failed)",
        "request median ms",
        "p90 ms",
        "shard time for the API",
        "shard CPU s (no load, load)",
        "http thread CPU s",
    ]);
    let mut losses = Vec::new();
    let mut all_times = Vec::new();
    let (mut done, mut failed, mut first_error) = (0u64, 0u64, None);
    let (mut reader_s, mut loaded_s) = (0.0, 0.0);
    for (i, pair) in windows.chunks(2).enumerate() {
        let (Some(idle), Some(busy)) = (
            pair.iter().find(|w| !w.loaded),
            pair.iter().find(|w| w.loaded),
        ) else {
            continue;
        };
        let loss = 1.0 - busy.pps() / idle.pps();
        losses.push(loss);
        reader_s += busy.reader_s;
        loaded_s += busy.secs;
        let (d, f, med, p90) = match &busy.load {
            Some(l) => {
                done += l.done;
                failed += l.failed;
                if first_error.is_none() {
                    first_error.clone_from(&l.first_error);
                }
                all_times.extend_from_slice(&l.times);
                let mut s = l.times.clone();
                s.sort_by(f64::total_cmp);
                (
                    l.done,
                    l.failed,
                    ms(quantile(&s, 0.5)),
                    ms(quantile(&s, 0.9)),
                )
            }
            None => (0, 0, "-".into(), "-".into()),
        };
        t.row(vec![
            (i + 1).to_string(),
            fmt_mpps(idle.pps()),
            fmt_mpps(busy.pps()),
            format!("{:.1}%", loss * 100.0),
            format!("{d} ({f})"),
            med,
            p90,
            format!(
                "{:.1} ms/s ({:.2}%)",
                busy.reader_s / busy.secs * 1e3,
                busy.reader_s / busy.secs * 100.0
            ),
            format!("{:.2}, {:.2}", idle.shard_cpu, busy.shard_cpu),
            format!("{:.2}", busy.http_cpu),
        ]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    let pick = |loaded: bool, f: fn(&Window) -> f64| {
        median(
            &windows
                .iter()
                .filter(|w| w.loaded == loaded)
                .map(f)
                .collect::<Vec<_>>(),
        )
    };
    let (base, under) = (pick(false, Window::pps), pick(true, Window::pps));
    let mut sorted_losses = losses.clone();
    sorted_losses.sort_by(f64::total_cmp);
    let paired = median(&losses);
    let share = reader_s / loaded_s.max(1e-9);
    all_times.sort_by(f64::total_cmp);
    let verdict = |l: f64| if l < TARGET_LOSS { "yes" } else { "NO" }.to_string();
    let mut t = Table::new(&["measure", "value", "target: < 5% lost"]);
    t.row(vec![
        "median Mpps: no load → 20 req/s".into(),
        format!(
            "{} → {} ({:.1}% lost)",
            fmt_mpps(base),
            fmt_mpps(under),
            (1.0 - under / base) * 100.0
        ),
        verdict(1.0 - under / base),
    ]);
    t.row(vec![
        "throughput lost, median of the pairs (quartiles)".into(),
        format!(
            "{:.1}% ({:.1}% … {:.1}%)",
            paired * 100.0,
            quantile(&sorted_losses, 0.25) * 100.0,
            quantile(&sorted_losses, 0.75) * 100.0
        ),
        verdict(paired),
    ]);
    t.row(vec![
        "shard time spent on the API under load (the direct cost to packets)".into(),
        format!("{:.2}%", share * 100.0),
        verdict(share),
    ]);
    t.row(vec![
        "requests done (failed), median and p90 ms".into(),
        format!(
            "{done} ({failed}{}), {} ms, {} ms",
            first_error
                .map(|e| format!(": {}", sonde_bench::cell(&e)))
                .unwrap_or_default(),
            ms(quantile(&all_times, 0.5)),
            ms(quantile(&all_times, 0.9))
        ),
        "-".into(),
    ]);
    let _ = writeln!(out, "{}", t.to_markdown());
    Ok(())
}

fn progress(msg: &str) {
    eprintln!("[sonde-bench] {msg}");
}

pub fn run(quick: bool, repeats: usize, sonde: &Path, scratch: &Path) -> Result<String, String> {
    let auth = auth_args(sonde);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 10. REST API speed (issue 5)\n\nTargets: with 1M hosts and 1M flows, a sorted, \
         filtered page of 50 hosts and of 50 flows answered in under {TARGET_MEDIAN_MS} ms at \
         the median; packet processing loses under {:.0}% throughput during a bounded load of \
         {LOAD_RATE} API requests per second on 127.0.0.1. No peer is measured: ntopng, the \
         tool this API follows, is not installable on this machine, so the figures are absolute \
         and set against the targets.\n",
        TARGET_LOSS * 100.0
    );
    let dir = scratch.join("api-latency");
    if let Err(e) = latency(sonde, &auth, &dir, quick, &mut out) {
        let _ = writeln!(out, "Latency: failed: {e}\n");
    }
    if let Err(e) = throughput(sonde, &auth, scratch, quick, repeats, &mut out) {
        let _ = writeln!(out, "Throughput under load: failed: {e}\n");
    }
    Ok(out)
}
