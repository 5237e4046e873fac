//! `sonde-bench --only history-clickhouse` (opt-in, section 15): the History page's questions
//! over about 10M flows, asked of the local store (`--data-dir`) and of ClickHouse
//! (`--history clickhouse://`), both filled by the same sonde run.
//!
//! The dataset: a classic pcap written here, one request and one reply per flow over a day of
//! packet time (a campus-like mix: 20k clients with a skewed share, 1000 servers with a
//! steeper one; TLS with an SNI, DNS queries and HTTP GETs whose names give eight
//! applications), read once by `sonde -r FILE --export clickhouse://…?when_full=block
//! --data-dir DIR`. Replies are captured as headers only with their real length on the wire,
//! so the file stays small while byte counts vary. ClickHouse is Debian's server started by
//! `scripts/clickhouse-server.sh` on 127.0.0.1 and stopped at the end.
//!
//! The questions are asked as the user asks them: one `sonde query` process each (`--data-dir`
//! or `--history`), wall time with process start; the traffic series, which `sonde query`
//! reads only from a data directory, from a sonde serving `/api/v1/series` with `--history`
//! (ClickHouse) and from `sonde query series` (the local store's series files).

use sonde_bench::{fmt_bytes, fmt_count, run_measured};
use std::fmt::Write as _;
use std::io::{self, BufWriter, Read, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// 2026-11-24T00:00:00Z: the dataset's first second; it spans one day.
const T0: u64 = 1_795_478_400;
const SPAN_S: u64 = 86_400;
/// 21k hosts: the local store's per-host series files (4096 hosts a block, a row per block
/// and second of traffic) stay near 7 GB for the day.
const CLIENTS: f64 = 20_000.0;
const SERVERS: f64 = 1_000.0;
/// Seven-letter names in place of the templates' "example" (so the DNS labels keep their
/// lengths): their applications come from sonde's service rules.
const NAMES: [&[u8; 7]; 8] = [
    b"youtube", b"netflix", b"twitter", b"spotify", b"dropbox", b"discord", b"outlook", b"example",
];
/// The client whose flows question (d) pages: index 2000 of the skewed population (about 79
/// flows per million).
const ONE_CLIENT: &str = "10.1.7.208";

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The request frames sonde's generator makes (`payload=mix`): HTTP, TLS and DNS, by port.
fn templates(sonde: &Path, dir: &Path) -> Result<[Vec<u8>; 3], String> {
    let file = dir.join("templates.pcap");
    let o = Command::new(sonde)
        .args([
            "--synthetic",
            "hosts=3,size=60,packets=3,payload=mix",
            "-q",
            "-w",
        ])
        .arg(&file)
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "sonde -w: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let b = std::fs::read(&file).map_err(|e| e.to_string())?;
    let mut at = 24;
    let (mut http, mut tls, mut dns) = (None, None, None);
    while at + 16 <= b.len() {
        let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = b[at + 16..at + 16 + len].to_vec();
        at += 16 + len;
        match u16::from_be_bytes([f[36], f[37]]) {
            80 => http = Some(f),
            443 => tls = Some(f),
            53 => dns = Some(f),
            _ => {}
        }
    }
    match (http, tls, dns) {
        (Some(h), Some(t), Some(d)) => Ok([h, t, d]),
        _ => Err("sonde -w payload=mix: not the three expected frames".into()),
    }
}

/// Writes the dataset: `flows` flows, request then reply, evenly over the day.
fn write_pcap(path: &Path, flows: u64, tpl: &[Vec<u8>; 3]) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65_535u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    w.write_all(&h)?;
    // Each template with each name, ready to stamp.
    let named: Vec<Vec<Vec<u8>>> = tpl
        .iter()
        .map(|t| {
            NAMES
                .iter()
                .map(|n| {
                    let mut f = t.clone();
                    let mut i = 0;
                    while i + 7 <= f.len() {
                        if &f[i..i + 7] == b"example" {
                            f[i..i + 7].copy_from_slice(*n);
                        }
                        i += 1;
                    }
                    f
                })
                .collect()
        })
        .collect();
    let gap_ns = SPAN_S * 1_000_000_000 / flows;
    let mut frame = Vec::with_capacity(2048);
    let mut bytes = 24u64;
    let mut record = |w: &mut BufWriter<std::fs::File>, t_ns: u64, f: &[u8], wire: u32| {
        let mut r = [0u8; 16];
        r[0..4].copy_from_slice(&((t_ns / 1_000_000_000) as u32).to_le_bytes());
        r[4..8].copy_from_slice(&((t_ns % 1_000_000_000 / 1000) as u32).to_le_bytes());
        r[8..12].copy_from_slice(&(f.len() as u32).to_le_bytes());
        r[12..16].copy_from_slice(&wire.to_le_bytes());
        bytes += 16 + f.len() as u64;
        w.write_all(&r).and_then(|_| w.write_all(f))
    };
    for i in 0..flows {
        let x = splitmix(i);
        let y = splitmix(x);
        let u = |v: u64| (v & 0xffff_ffff) as f64 / 4_294_967_296.0;
        let client = 0x0a01_0000u32 + (u(x).powi(2) * CLIENTS) as u32;
        let server = 0xc0a8_0001u32 + (u(x >> 32).powi(3) * SERVERS) as u32;
        // Half TLS, a quarter DNS, a quarter HTTP.
        let kind = match y % 4 {
            0 | 1 => 1,
            2 => 2,
            _ => 0,
        };
        let name = (y >> 8) as usize % NAMES.len();
        let sport = 1024 + ((y >> 16) % 60_000) as u16;
        let t = (T0 * 1_000_000_000) + i * gap_ns;
        // The request, whole.
        frame.clear();
        frame.extend_from_slice(&named[kind][name]);
        frame[26..30].copy_from_slice(&client.to_be_bytes());
        frame[30..34].copy_from_slice(&server.to_be_bytes());
        frame[34..36].copy_from_slice(&sport.to_be_bytes());
        sonde_capture::synthetic::fix_ipv4_checksum(&mut frame);
        let wire = frame.len() as u32;
        record(&mut w, t, &frame, wire)?;
        // The reply: headers only, its length on the wire 60 to 1500 bytes.
        let tcp = frame[23] == 6;
        let hdr = 14 + 20 + if tcp { 20 } else { 8 };
        let wire = 60 + ((y >> 32) % 1441) as u32;
        frame.truncate(hdr);
        frame[16..18].copy_from_slice(&((wire - 14) as u16).to_be_bytes());
        frame[26..30].copy_from_slice(&server.to_be_bytes());
        frame[30..34].copy_from_slice(&client.to_be_bytes());
        let dport = [frame[36], frame[37]];
        frame[36..38].copy_from_slice(&sport.to_be_bytes());
        frame[34..36].copy_from_slice(&dport);
        if tcp {
            frame[47] = 0x10; // ACK
        } else {
            frame[38..40].copy_from_slice(&((wire - 34) as u16).to_be_bytes());
        }
        sonde_capture::synthetic::fix_ipv4_checksum(&mut frame);
        record(&mut w, t + gap_ns / 2, &frame, wire)?;
    }
    w.flush()?;
    Ok(bytes)
}

/// The ClickHouse server of the section; stopped when dropped.
struct ClickHouse {
    pid: i32,
    http: String,
}

impl ClickHouse {
    fn start(dir: &Path) -> Result<ClickHouse, String> {
        let script = [
            "scripts/clickhouse-server.sh",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/clickhouse-server.sh"
            ),
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("scripts/clickhouse-server.sh not found")?;
        let o = Command::new(&script)
            .arg(dir)
            .env("CLICKHOUSE_PARENT_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let text = String::from_utf8_lossy(&o.stdout);
        let field = |k: &str| {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_string)
        };
        match (o.status.success(), field("HTTP="), field("PID=")) {
            (true, Some(http), Some(pid)) => Ok(ClickHouse {
                pid: pid.parse().map_err(|_| format!("PID={pid}"))?,
                http,
            }),
            _ => Err(format!(
                "clickhouse-server.sh: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        }
    }

    /// One SQL statement over HTTP; the answer's text.
    fn sql(&self, q: &str) -> Result<String, String> {
        let addr: SocketAddr = self.http.parse().map_err(|e| format!("{e}"))?;
        let body = http(addr, "POST", "/", q.as_bytes())?;
        if body.0 != 200 {
            return Err(format!("{q}: HTTP {}: {}", body.0, body.1.trim()));
        }
        Ok(body.1)
    }

    fn version(&self) -> String {
        self.sql("SELECT version()")
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on the server this section started (it may be our child
        // through the subreaper flag run_measured sets; reaping it then is harmless).
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            // SAFETY: as above; WNOHANG never blocks.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG) };
            if unsafe { libc::kill(self.pid, 0) } != 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// A minimal HTTP/1.1 request on a new connection: (status, body).
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Result<(u16, String), String> {
    let err = |e: io::Error| format!("{method} {path}: {e}");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(err)?;
    s.set_read_timeout(Some(Duration::from_secs(600)))
        .map_err(err)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(err)?;
    s.write_all(body).map_err(err)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(err)?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let mut b = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        b = crate::api_bench::dechunk(&b).ok_or("bad chunked body")?;
    }
    Ok((status, String::from_utf8_lossy(&b).into_owned()))
}

/// A sonde serving the REST API from ClickHouse (`--history`); killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    fn start(sonde: &Path, history: &str) -> Result<Served, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        // Its own input is two synthetic packets (it serves on after its input ends).
        let child = Command::new(sonde)
            .args([
                "--synthetic",
                "hosts=2,packets=2",
                "--no-auth",
                "-q",
                "--http",
            ])
            .arg(addr.to_string())
            .args(["--history", history])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut s = Served { child, addr };
        let t = Instant::now();
        loop {
            if let Ok((200, b)) = http(addr, "GET", "/api/v1/health", b"") {
                if b.contains("\"history\":true") {
                    return Ok(s);
                }
            }
            if t.elapsed() > Duration::from_secs(30) || s.child.try_wait().ok().flatten().is_some()
            {
                return Err("sonde --history --http: did not serve".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes allocated on disk to every file under `dir` (as `du`: the series ring files are
/// sparse).
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// User+system seconds of a process so far (`/proc/PID/stat`, 100 ticks a second).
fn proc_cpu_s(pid: i32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Fields 14 and 15 of stat(5); `rest` starts at field 3.
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn sorted(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One way of asking a question: a process to run or a REST path to get.
enum Ask {
    Cli(Vec<String>),
    Rest(SocketAddr, String),
}

impl Ask {
    /// Runs it once: wall milliseconds and the answer's text.
    fn once(&self) -> Result<(f64, String), String> {
        let t = Instant::now();
        let out = match self {
            Ask::Cli(argv) => {
                let o = Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("{}: {e}", argv[0]))?;
                if !o.status.success() {
                    return Err(format!(
                        "{}: {}",
                        argv[1..].join(" "),
                        String::from_utf8_lossy(&o.stderr).trim()
                    ));
                }
                String::from_utf8_lossy(&o.stdout).into_owned()
            }
            Ask::Rest(addr, path) => {
                let (status, body) = http(*addr, "GET", path, b"")?;
                if status != 200 {
                    return Err(format!("GET {path}: HTTP {status}: {body}"));
                }
                body
            }
        };
        Ok((t.elapsed().as_secs_f64() * 1e3, out))
    }
}

/// Rows of an answer: JSON lines, or the points of a REST series.
fn rows(text: &str) -> usize {
    if text.starts_with('{') && text.contains("\"points\"") {
        return serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| {
                v["points"]
                    .as_array()
                    .map(|p| p.iter().filter(|p| !p["value"].is_null()).count())
            })
            .unwrap_or(0);
    }
    text.lines().filter(|l| !l.trim().is_empty()).count()
}

pub fn run(quick: bool, repeats: usize, sonde: &Path, scratch: &Path) -> Result<String, String> {
    let flows: u64 = if quick { 1_000_000 } else { 10_000_000 };
    let n = repeats.max(5);
    let dir = scratch.join("history-clickhouse");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let progress = |m: &str| eprintln!("[sonde-bench] history-clickhouse: {m}");

    progress(&format!("writing {} flows to a pcap", fmt_count(flows)));
    let tpl = templates(sonde, &dir)?;
    let pcap = dir.join("flows.pcap");
    let t = Instant::now();
    let pcap_bytes = write_pcap(&pcap, flows, &tpl).map_err(|e| e.to_string())?;
    progress(&format!(
        "{} written in {:.0} s",
        fmt_bytes(pcap_bytes),
        t.elapsed().as_secs_f64()
    ));

    let ch = ClickHouse::start(&dir.join("clickhouse"))?;
    let ch_version = ch.version();
    let url = format!("clickhouse://{}/benchdb", ch.http);
    let data = dir.join("data");
    progress("one sonde run into both stores");
    let stats = dir.join("stats.json");
    let argv: Vec<String> = [
        sonde.display().to_string(),
        "-r".into(),
        pcap.display().to_string(),
        "--export".into(),
        format!("{url}?when_full=block"),
        "--data-dir".into(),
        data.display().to_string(),
        "--history-max-age".into(),
        "0".into(),
        "--history-max-size".into(),
        "0".into(),
        "--idle-timeout".into(),
        "60".into(),
        "--active-timeout".into(),
        "0".into(),
        "--stats-json".into(),
        stats.display().to_string(),
        "-q".into(),
    ]
    .to_vec();
    let ch_cpu0 = proc_cpu_s(ch.pid);
    let m = run_measured(&argv, &dir.join("run"), Duration::from_secs(3600))
        .map_err(|e| e.to_string())?;
    if !m.success {
        return Err(format!(
            "sonde -r … --export … --data-dir …: {}",
            m.failure()
        ));
    }
    let ch_cpu = proc_cpu_s(ch.pid) - ch_cpu0;
    let _ = std::fs::remove_file(&pcap);
    let st: serde_json::Value = std::fs::read(&stats)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("no --stats-json summary")?;
    let created = st
        .pointer("/flows/created")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let ch_rows: u64 = ch
        .sql("SELECT count() FROM benchdb.flows")?
        .trim()
        .parse()
        .map_err(|_| "count() is not a number")?;
    let part_bytes = |table_filter: &str| -> Result<u64, String> {
        ch.sql(&format!(
            "SELECT sum(bytes) FROM system.parts WHERE database = 'benchdb' AND active{table_filter}"
        ))?
        .trim()
        .parse()
        .map_err(|_| "sum(bytes) is not a number".to_string())
    };
    // The questions start once the server's background merges of the new parts are done.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(600) {
        if ch.sql("SELECT count() FROM system.merges")?.trim() == "0" {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let ch_parts = ch
        .sql("SELECT count() FROM system.parts WHERE database = 'benchdb' AND table = 'flows' AND active")?
        .trim()
        .to_string();
    let ch_flows_bytes = part_bytes(" AND table = 'flows'")?;
    let ch_all_bytes = part_bytes("")?;
    let local_flows_bytes = du(&data.join("flows"));
    let local_all_bytes = du(&data);
    progress(&format!(
        "stored: {} flows created, {} rows in ClickHouse; ingest {:.0} s wall",
        fmt_count(created),
        fmt_count(ch_rows),
        m.wall_s
    ));

    // The questions.
    let served = Served::start(sonde, &url)?;
    let hour = (T0 + SPAN_S / 2).to_string();
    let hour_end = (T0 + SPAN_S / 2 + 3600).to_string();
    let ten_end = (T0 + SPAN_S / 2 + 600).to_string();
    let q = |source: &[&str], args: &[&str]| -> Ask {
        let mut v = vec![sonde.display().to_string(), "query".into()];
        v.extend(source.iter().map(|s| s.to_string()));
        v.extend(args.iter().map(|s| s.to_string()));
        v.extend(["--format".into(), "jsonl".into()]);
        Ask::Cli(v)
    };
    let data_s = data.display().to_string();
    let local: &[&str] = &["--data-dir", &data_s];
    let remote: &[&str] = &["--history", &url];
    let both = |args: &[&str]| (q(local, args), q(remote, args));
    let (from_s, to_s) = (T0.to_string(), (T0 + SPAN_S).to_string());
    let series_local = |res: &str| {
        q(
            &[],
            &[
                "series",
                "--data-dir",
                &data_s,
                "--from",
                &from_s,
                "--to",
                &to_s,
                "--resolution",
                res,
            ],
        )
    };
    let series_ch = |res: &str| {
        Ask::Rest(
            served.addr,
            format!("/api/v1/series?family=interface&key=total&from={from_s}&to={to_s}&resolution={res}"),
        )
    };
    // A flow page that differs between the stores is checked against the other store's first
    // 1000 rows of the same question: both may be right where flows end at the same time.
    let wide = |args: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        if let Some(i) = v.iter().position(|a| *a == "--limit") {
            v[i + 1] = "1000";
        }
        both(&v)
    };
    let d_args = ["flows", "--host", ONE_CLIENT, "--limit", "50"];
    let e_args = [
        "flows", "--port", "53", "--from", &hour, "--to", &ten_end, "--limit", "50",
    ];
    let wides = [wide(&d_args), wide(&e_args)];
    let cases: Vec<(&str, Ask, Ask)> = vec![
        {
            let (a, b) = both(&["hosts", "--limit", "10"]);
            ("(a) top 10 hosts, everything", a, b)
        },
        {
            let (a, b) = both(&["hosts", "--from", &hour, "--to", &hour_end, "--limit", "10"]);
            ("(b) top 10 hosts, one hour (12:00-13:00)", a, b)
        },
        {
            let (a, b) = both(&["apps", "--limit", "10"]);
            ("(c) top 10 applications, everything", a, b)
        },
        {
            let (a, b) = both(&d_args);
            ("(d) flows of one host, everything, first 50", a, b)
        },
        {
            let (a, b) = both(&e_args);
            ("(e) flows with port 53, 10 minutes, first 50", a, b)
        },
        (
            "(f) traffic series of the day, per minute (1440 points)",
            series_local("1m"),
            series_ch("1m"),
        ),
        (
            "(f) traffic series of the day, per hour (24 points)",
            series_local("1h"),
            series_ch("1h"),
        ),
        (
            "process start alone (`sonde --version`)",
            Ask::Cli(vec![sonde.display().to_string(), "--version".into()]),
            Ask::Cli(vec![sonde.display().to_string(), "--version".into()]),
        ),
    ];
    let load_before = loadavg();
    let mut table = String::new();
    for (name, a, b) in &cases {
        progress(name);
        let time = |ask: &Ask| -> Result<(f64, f64, String), String> {
            let (first, out) = ask.once()?;
            let mut times = vec![first];
            for _ in 1..n {
                times.push(ask.once()?.0);
            }
            Ok((median(times), first, out))
        };
        let (lm, lfirst, lout) = time(a)?;
        let (cm, cfirst, cout) = time(b)?;
        let same = if name.starts_with("(f)") {
            "-".to_string()
        } else if name.starts_with("process") {
            String::new()
        } else if lout == cout {
            "yes".into()
        } else if sorted(&lout) == sorted(&cout) {
            "same rows, other order".into()
        } else {
            let (wl, wc) = &wides[if name.starts_with("(d)") { 0 } else { 1 }];
            let (wl, wc) = (wl.once()?.1, wc.once()?.1);
            let within = |page: &str, all: &str| {
                let all: std::collections::HashSet<&str> = all.lines().collect();
                page.lines().all(|l| all.contains(l))
            };
            if within(&lout, &wc) && within(&cout, &wl) {
                "other rows: each page is within the other store's first 1000".into()
            } else {
                "**no**".into()
            }
        };
        let _ = writeln!(
            table,
            "| {name} | {} | {lm:.0} | {lfirst:.0} | {} | {cm:.0} | {cfirst:.0} | {:.1}× | {same} |",
            rows(&lout),
            rows(&cout),
            cm / lm.max(1e-9),
        );
    }
    let load_after = loadavg();
    drop(served);
    drop(ch);
    let _ = std::fs::remove_dir_all(&dir);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 15. Flow history queries over {} flows: ClickHouse beside the local store \
         (issue 16)\n",
        fmt_count(flows)
    );
    let _ = writeln!(
        out,
        "{} flows (a request and a reply each, evenly over one day of packet time: 20k \
         clients and 1000 servers with skewed shares, half TLS, a quarter DNS, a quarter HTTP, \
         eight host names) in a pcap of {}, read by one `sonde -r FILE --export \
         {url}?when_full=block --data-dir DIR --history-max-age 0 --history-max-size 0 \
         --idle-timeout 60 --active-timeout 0` ({:.0} s wall, {:.0} CPU s for sonde, {ch_cpu:.0} CPU s for the ClickHouse server). \
         ClickHouse {ch_version} (Debian) on 127.0.0.1 on the same machine, server defaults \
         of `scripts/clickhouse-server.sh`. Each question asked {n} times as the user asks it: \
         one `sonde query --data-dir DIR …` or `sonde query --history clickhouse://… …` \
         process (`--format jsonl`), wall time with process start; the series from `sonde \
         query series` (the local store's per-minute/hour series files) and from \
         `GET /api/v1/series` of a sonde serving `--history` (ClickHouse sums the flows by \
         start minute). Milliseconds; \"same\": both printed the same lines. Load average \
         (1, 5, 15 min) {load_before} before the questions, {load_after} after.\n",
        fmt_count(flows),
        fmt_bytes(pcap_bytes),
        m.wall_s,
        m.cpu_s(),
    );
    let _ = writeln!(
        out,
        "| store | flow records | flows on disk | bytes per flow | everything on disk |\n\
         | --- | --- | --- | --- | --- |\n\
         | local (`--data-dir`) | {} created | {} | {:.0} | {} (with series files) |\n\
         | ClickHouse `benchdb` | {} rows | {} (`flows`, {ch_parts} parts) | {:.0} | {} (with rollup tables) |\n",
        fmt_count(created),
        fmt_bytes(local_flows_bytes),
        local_flows_bytes as f64 / created.max(1) as f64,
        fmt_bytes(local_all_bytes),
        fmt_count(ch_rows),
        fmt_bytes(ch_flows_bytes),
        ch_flows_bytes as f64 / ch_rows.max(1) as f64,
        fmt_bytes(ch_all_bytes),
    );
    let _ = writeln!(
        out,
        "| question over {} flows | local rows | local median ms | local first ms | ClickHouse rows | \
         ClickHouse median ms | ClickHouse first ms | ClickHouse ÷ local | same |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        fmt_count(flows)
    );
    out.push_str(&table);
    out.push('\n');
    Ok(out)
}
