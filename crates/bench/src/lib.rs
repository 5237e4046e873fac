//! Pieces of `sonde-bench`: running a program and measuring it from the outside (CPU seconds and
//! peak resident memory from `wait4`), reading what the peers print, and markdown tables.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One finished run of a program, measured by the parent.
#[derive(Debug, Clone)]
pub struct Measured {
    /// `exit 0`, `exit 3`, `signal 9`, ...
    pub status: String,
    pub success: bool,
    pub timed_out: bool,
    pub wall_s: f64,
    /// User and system CPU seconds of the child and of every descendant it waited for.
    pub user_s: f64,
    pub sys_s: f64,
    /// Peak resident set of the child (or of its largest waited-for descendant), in bytes.
    pub max_rss_bytes: u64,
    /// The end of standard output and standard error (at most [`KEEP_OUTPUT`] bytes each).
    pub stdout: String,
    pub stderr: String,
}

impl Measured {
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }

    /// A one-line reason for a failed run, for a table cell.
    pub fn failure(&self) -> String {
        let mut why = if self.timed_out {
            "timed out".to_string()
        } else {
            self.status.clone()
        };
        let last = last_line(&self.stderr).or_else(|| last_line(&self.stdout));
        if let Some(line) = last {
            why.push_str(": ");
            why.push_str(line);
        }
        cell(&why)
    }
}

fn last_line(s: &str) -> Option<&str> {
    s.lines().map(str::trim).rfind(|l| !l.is_empty())
}

/// How much of each output stream is kept.
pub const KEEP_OUTPUT: u64 = 256 * 1024;

/// Runs `argv` in its own process group with stdin from /dev/null and stdout/stderr into files in
/// `scratch`, waits for it with `wait4` and returns its wall time, CPU time and peak RSS. A run
/// longer than `limit` is killed (the whole group) and reported as timed out.
pub fn run_measured(argv: &[String], scratch: &Path, limit: Duration) -> io::Result<Measured> {
    std::fs::create_dir_all(scratch)?;
    let out_path = scratch.join("stdout");
    let err_path = scratch.join("stderr");
    let out = File::create(&out_path)?;
    let err = File::create(&err_path)?;
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    // A forked child inherits this process's peak RSS in its own ru_maxrss (the kernel keeps
    // the pre-exec high-water mark), so below this figure ru_maxrss says nothing about the
    // child: the peak is then taken from polling /proc instead.
    let inherited = own_peak_rss();
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and changes nothing else.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    let start = Instant::now();
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    let mut polled_rss = 0u64;
    let mut last_poll = Instant::now() - Duration::from_secs(1);
    loop {
        if last_poll.elapsed() >= Duration::from_millis(10) {
            polled_rss = polled_rss.max(tree_peak_rss(pid as u32));
            last_poll = Instant::now();
        }
        // SAFETY: pid is our own child, status and ru are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if !timed_out && start.elapsed() > limit {
            timed_out = true;
            // SAFETY: the child has not been reaped yet, so its group id is still ours to signal.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let wall_s = start.elapsed().as_secs_f64();
    drop(child);
    // Processes the child left behind (pmacct's plugins write their cache after the core has
    // exited) are ours to reap, as a subreaper: they get a grace period to finish, and their
    // CPU time and peak RSS count too. What is still running after it is killed.
    let grace_end = Instant::now()
        + if timed_out {
            Duration::ZERO
        } else {
            LEFTOVER_GRACE
        };
    let mut killed = false;
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: rusage is plain old data; zeroed is a valid value.
        let mut ru2: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for members of the process group we created; st and ru2 are valid.
        let r = unsafe { libc::wait4(-pid, &mut st, libc::WNOHANG, &mut ru2) };
        if r > 0 {
            ru.ru_utime = add_tv(ru.ru_utime, ru2.ru_utime);
            ru.ru_stime = add_tv(ru.ru_stime, ru2.ru_stime);
            ru.ru_maxrss = ru.ru_maxrss.max(ru2.ru_maxrss);
            continue;
        }
        if r < 0 {
            break; // ECHILD: none left in the group
        }
        if !killed && Instant::now() >= grace_end {
            killed = true;
            // SAFETY: signalling a process group we created; ESRCH when it is empty is fine.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        polled_rss = polled_rss.max(tree_peak_rss(pid as u32));
        std::thread::sleep(Duration::from_millis(2));
    }
    let (desc, success) = if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        (format!("exit {code}"), code == 0)
    } else if libc::WIFSIGNALED(status) {
        (format!("signal {}", libc::WTERMSIG(status)), false)
    } else {
        (format!("status {status}"), false)
    };
    Ok(Measured {
        status: desc,
        success: success && !timed_out,
        timed_out,
        wall_s,
        user_s: tv_secs(ru.ru_utime),
        sys_s: tv_secs(ru.ru_stime),
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: match (ru.ru_maxrss.max(0) as u64) * 1024 {
            r if r > inherited + (1 << 20) => r,
            _ if polled_rss > 0 => polled_rss,
            r => r,
        },
        stdout: read_tail(&out_path)?,
        stderr: read_tail(&err_path)?,
    })
}

/// VmHWM of a process from /proc (0 when unreadable).
fn peak_rss_of(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| find_number(&t, "VmHWM:"))
        .map_or(0, |kib| kib * 1024)
}

fn own_peak_rss() -> u64 {
    peak_rss_of("self")
}

/// The largest VmHWM among `pid` and its descendants (a peer run under `timeout`, plugins).
fn tree_peak_rss(pid: u32) -> u64 {
    let mut best = peak_rss_of(&pid.to_string());
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for c in children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
    {
        best = best.max(tree_peak_rss(c));
    }
    best
}

/// How long processes a measured command leaves behind may run on before they are killed.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(15);

fn add_tv(a: libc::timeval, b: libc::timeval) -> libc::timeval {
    let us = a.tv_usec + b.tv_usec;
    libc::timeval {
        tv_sec: a.tv_sec + b.tv_sec + us / 1_000_000,
        tv_usec: us % 1_000_000,
    }
}

fn tv_secs(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

/// The last [`KEEP_OUTPUT`] bytes of a file, lossily as UTF-8.
pub fn read_tail(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    if len > KEEP_OUTPUT {
        f.seek(SeekFrom::Start(len - KEEP_OUTPUT))?;
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Finds `program` in PATH, /usr/sbin or /sbin (some peers live in sbin, which a non-root PATH
/// may lack).
pub fn which(program: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The first integer after `label` on a line of `text` (thousands separators and spaces skipped).
/// `find_number("IP packets:   1000 of 1000", "IP packets:")` is `Some(1000)`.
pub fn find_number(text: &str, label: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let at = line.find(label)?;
        let rest = line[at + label.len()..].trim_start();
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// The records in the nfdump files of `dir` (`nfdump -R DIR -q -o csv`, one line each).
pub fn nfdump_records(dir: &Path) -> Result<u64, String> {
    std::process::Command::new("nfdump")
        .arg("-R")
        .arg(dir)
        .args(["-q", "-o", "csv"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(','))
                .count() as u64
        })
        .map_err(|e| format!("nfdump: {e}"))
}

/// Sums the `PACKETS` column of pmacct's CSV output; returns (packets, rows).
pub fn pmacct_csv_totals(csv: &str) -> Option<(u64, u64)> {
    let mut lines = csv.lines();
    let header = lines.next()?;
    let col = header.split(',').position(|h| h.trim() == "PACKETS")?;
    let mut packets = 0u64;
    let mut rows = 0u64;
    // With print_output_file_append every purge repeats the header.
    for line in lines.filter(|l| !l.trim().is_empty() && *l != header) {
        packets += line.split(',').nth(col)?.trim().parse::<u64>().ok()?;
        rows += 1;
    }
    Some((packets, rows))
}

/// Makes text safe for a markdown table cell: one line, no pipes, not too long.
pub fn cell(s: &str) -> String {
    let one: String = s
        .chars()
        .map(|c| match c {
            '|' => '/',
            '\n' | '\r' | '\t' => ' ',
            c => c,
        })
        .collect();
    let one = one.trim();
    if one.chars().count() > 120 {
        let cut: String = one.chars().take(117).collect();
        format!("{cut}...")
    } else {
        one.to_string()
    }
}

/// A markdown table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: AsRef<str>>(header: &[S]) -> Self {
        Table {
            header: header.iter().map(|h| h.as_ref().to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let line = |cells: &[String]| {
            let mut l = String::from("|");
            for c in cells {
                l.push(' ');
                l.push_str(c);
                l.push_str(" |");
            }
            l.push('\n');
            l
        };
        s.push_str(&line(&self.header));
        s.push_str(&line(&vec!["---".to_string(); self.header.len()]));
        for r in &self.rows {
            let mut r = r.clone();
            r.resize(self.header.len(), String::new());
            s.push_str(&line(&r));
        }
        s
    }
}

/// Bytes as MiB or GiB, e.g. `437.1 MiB`, `1.52 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    let mib = b as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

/// A count with thousands separators: `1,000,000`.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    // The first group has 1 to 3 digits, every later one 3.
    let first = s.len() - (s.len() - 1) / 3 * 3;
    out.push_str(&s[..first]);
    for group in s.as_bytes()[first..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).unwrap_or_default());
    }
    out
}

/// Packets per second in millions, with a precision that suits the magnitude.
pub fn fmt_mpps(pps: f64) -> String {
    let m = pps / 1e6;
    if m >= 10.0 {
        format!("{m:.1}")
    } else if m >= 0.1 {
        format!("{m:.2}")
    } else {
        format!("{m:.3}")
    }
}

/// `100`, `1k`, `10k`, `1M`: how sonde's `--synthetic` accepts them and the paper writes them.
pub fn short_count(n: u64) -> String {
    if n >= 1_000_000 && n / 1_000_000 * 1_000_000 == n {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n / 1000 * 1000 == n {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// The median of the values (the lower middle one for an even count); `None` when empty.
pub fn median_by<T: Clone>(items: &[T], key: impl Fn(&T) -> f64) -> Option<T> {
    let mut v: Vec<&T> = items.iter().collect();
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    v.get(v.len().saturating_sub(1) / 2).map(|t| (*t).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_after_labels() {
        let ndpi = "\tIP packets:            1000000       of 1000000 packets total\n\tUnique flows:          10000\n";
        assert_eq!(find_number(ndpi, "IP packets:"), Some(1_000_000));
        assert_eq!(find_number(ndpi, "Unique flows:"), Some(10_000));
        assert_eq!(
            find_number("Packets processed: 1,234\n", "Packets processed:"),
            Some(1234)
        );
        assert_eq!(find_number("nothing here", "Packets:"), None);
    }

    #[test]
    fn pmacct_csv() {
        let csv = "SRC_IP,DST_IP,SRC_PORT,DST_PORT,PROTOCOL,PACKETS,BYTES\n\
                   10.0.0.1,10.0.0.2,1024,80,udp,100,5000\n\
                   SRC_IP,DST_IP,SRC_PORT,DST_PORT,PROTOCOL,PACKETS,BYTES\n\
                   10.0.0.3,10.0.0.4,1025,80,udp,50,2500\n";
        assert_eq!(pmacct_csv_totals(csv), Some((150, 2)));
        assert_eq!(pmacct_csv_totals("A,B\n1,2\n"), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_count(100_000), "100,000");
        assert_eq!(fmt_count(12_345_678), "12,345,678");
        assert_eq!(short_count(100), "100");
        assert_eq!(short_count(10_000), "10k");
        assert_eq!(short_count(1_000_000), "1M");
        assert_eq!(fmt_bytes(512 * 1024 * 1024), "512.0 MiB");
        assert_eq!(fmt_bytes(3 * 1024 * 1024 * 1024 / 2), "1.50 GiB");
        assert_eq!(fmt_mpps(33_270_000.0), "33.3");
        assert_eq!(fmt_mpps(660_000.0), "0.66");
        assert_eq!(cell("a|b\nc"), "a/b c");
    }

    #[test]
    fn table_and_median() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["1".into()]);
        assert_eq!(t.to_markdown(), "| a | b |\n| --- | --- |\n| 1 |  |\n");
        assert_eq!(median_by(&[3.0, 1.0, 2.0], |x| *x), Some(2.0));
        assert_eq!(median_by(&[4.0, 1.0], |x| *x), Some(1.0));
        assert_eq!(median_by::<f64>(&[], |x| *x), None);
    }

    #[test]
    fn measures_a_child() {
        let dir = std::env::temp_dir().join(format!("sonde-bench-test-{}", std::process::id()));
        let argv: Vec<String> = ["sh", "-c", "echo out; echo err >&2; exit 3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let m = run_measured(&argv, &dir, Duration::from_secs(10)).unwrap();
        assert!(!m.success);
        assert_eq!(m.status, "exit 3");
        assert_eq!(m.stdout.trim(), "out");
        assert!(m.failure().contains("err"));
        assert!(m.max_rss_bytes > 0);
        let argv: Vec<String> = ["sleep", "5"].iter().map(|s| s.to_string()).collect();
        let m = run_measured(&argv, &dir, Duration::from_millis(200)).unwrap();
        assert!(m.timed_out && !m.success);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Which flows the collector benchmark's records describe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RecordMix {
    /// Every record a different flow from a different client (the worst case for a collector
    /// that keeps flows and hosts: each record creates a flow and a host).
    AllNew,
    /// Each flow exported in 10 records (as a router's active timeout does), among 20k clients
    /// and 500 servers: steady state, flows and hosts mostly known.
    Repeated,
}

impl RecordMix {
    pub fn name(self) -> &'static str {
        match self {
            RecordMix::AllNew => "every record a new flow",
            RecordMix::Repeated => "10 records per flow, 20k clients",
        }
    }
}

/// NetFlow v9 and IPFIX datagrams (made by sonde's encoder: 25–30 records each) for the
/// collector benchmark.
pub fn flow_datagrams(
    format: sonde_flowproto::encode::ExportFormat,
    records: u64,
    mix: RecordMix,
) -> Vec<Vec<u8>> {
    use sonde_flowproto::encode::{Exporter, ExporterConfig};
    let mut e = Exporter::new(ExporterConfig::new(format));
    let mut out = Vec::new();
    let mut batch = Vec::with_capacity(1000);
    let t0 = 1_700_000_000_000u64;
    let distinct = (records / 10).max(1);
    for i in 0..records {
        let (client, server, sport) = match mix {
            RecordMix::AllNew => (i as u32, i as u32 % 65536, 1024 + (i % 60000) as u16),
            RecordMix::Repeated => {
                let flow = i % distinct;
                (
                    (flow % 20_000) as u32,
                    (flow % 500) as u32,
                    1024 + (flow / 20_000) as u16,
                )
            }
        };
        let mut f = sonde_flowproto::ExportFlow {
            ip_version: 4,
            sport,
            dport: 443,
            proto: 6,
            packets: 10 + i % 7,
            bytes: 1500 + i % 1000,
            first_ms: t0 + i / 1000,
            last_ms: t0 + i / 1000 + 500,
            tcp_flags: 0x1b,
            ..Default::default()
        };
        f.src[..4].copy_from_slice(&(0x0a00_0000u32 + client).to_be_bytes());
        f.dst[..4].copy_from_slice(&(0xc0a8_0000u32 + server).to_be_bytes());
        batch.push(f);
        if batch.len() == batch.capacity() {
            // Exported when the batch's last flow has ended, as a router does (a v9 record
            // ending after the header's uptime would read as 49.7 days old).
            e.encode(&batch, t0 + i / 1000 + 500, &mut out);
            batch.clear();
        }
    }
    e.encode(&batch, t0 + records / 1000 + 500, &mut out);
    out
}

/// Packets in the records `flow_datagrams` makes (for collectors that report sums).
/// Packets per run of the speed grid at `hosts` hosts (fewer where each run is slower), so
/// that the grid and the sections measured against it run the same traffic.
pub fn grid_packets(hosts: u64, quick: bool) -> u64 {
    if quick {
        5_000_000
    } else if hosts <= 10_000 {
        50_000_000
    } else if hosts <= 100_000 {
        30_000_000
    } else {
        20_000_000
    }
}

pub fn packets_sent(records: u64) -> u64 {
    (0..records).map(|i| 10 + i % 7).sum()
}

/// The export time in a NetFlow v9 / IPFIX header, in ms (the receiver's clock for the record).
pub fn collector_clock(d: &[u8]) -> u64 {
    let secs = |at: usize| {
        d.get(at..at + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64)
    };
    match d.get(..2) {
        Some([0, 9]) => secs(8) * 1000,
        _ => secs(4) * 1000,
    }
}

/// sonde's collector decoder and one flow engine, as a collecting shard runs them (decode,
/// merge, ticks, emptying the table at the end), on this thread; returns the records the
/// engine took.
pub fn decode_into_engine(dgrams: &[Vec<u8>]) -> u64 {
    use sonde_flowproto::decode::{Collector, Config};
    let exporter = "127.0.0.1:2055".parse().expect("address");
    let mut collector = Collector::new(Config::default());
    let mut engine = sonde_flow::Engine::new(sonde_flow::EngineConfig {
        max_flows: 4 << 20,
        max_hosts: 4 << 20,
        ..Default::default()
    });
    let (mut flows, mut samples, mut expired) = (Vec::new(), Vec::new(), Vec::new());
    for d in dgrams {
        let now_ms = collector_clock(d);
        let _ = collector.decode(exporter, d, now_ms, &mut flows, &mut samples);
        engine.ingest_flows(&flows, now_ms * 1_000_000);
        flows.clear();
        engine.tick_if_due(engine.now_ns());
        engine.take_expired(&mut expired);
        expired.clear();
    }
    // In the shard's chunk size (probe/src/shard.rs).
    while engine.flush_some(sonde_flow::EndReason::EndOfCapture, 1 << 13) > 0 {
        engine.take_expired(&mut expired);
        expired.clear();
    }
    engine.stats().collected_records
}
