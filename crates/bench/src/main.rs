//! `sonde-bench`: measures sonde the way the ntopng paper measured ntopng (Fig. 10 speed grid,
//! Fig. 14 memory), runs sonde side by side with the Debian peers (nfpcapd, ndpiReader,
//! softflowd, pmacctd) on the same pcap files, checks multi-shard scaling and a random-source
//! flood against bounded tables. Every number is measured from the outside: CPU seconds are the
//! child's user+sys time and memory its peak RSS, both from `wait4`.
//!
//! Usage: sonde-bench [--quick] [--out FILE] [--sonde PATH] [--data-dir DIR] [--no-peers]
//!                    [--only grid,memory,dpi,peers,collect,scaling,attack,series,history,api,
//!                            analytics,detect,history-clickhouse]
//!                    [--repeats N]

use serde_json::Value;

mod analytics_bench;
mod api_bench;
mod clickhouse_bench;
mod detect_bench;
mod history_bench;
mod series_bench;
use sonde_bench::{
    cell, flow_datagrams, fmt_bytes, fmt_count, fmt_mpps, grid_packets, median_by, packets_sent,
    pmacct_csv_totals, run_measured, short_count, which, Measured, RecordMix, Table,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SECTIONS: [&str; 13] = [
    "grid",
    "memory",
    "dpi",
    "peers",
    "collect",
    "scaling",
    "attack",
    "series",
    "history",
    "api",
    "analytics",
    "detect",
    "history-clickhouse",
];
/// Sections that run only when `--only` names them: they need a ClickHouse server and take many
/// minutes.
const OPT_IN: [&str; 1] = ["history-clickhouse"];
const GIB: u64 = 1024 * 1024 * 1024;
const SONDE_LIMIT: Duration = Duration::from_secs(600);
const PEER_LIMIT: Duration = Duration::from_secs(600);

struct Opts {
    quick: bool,
    out: Option<PathBuf>,
    sonde: PathBuf,
    data_dir: PathBuf,
    only: Vec<String>,
    repeats: usize,
    /// Only sonde, no peers (for quick A/B runs of two sonde builds; section 5 for now).
    no_peers: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: sonde-bench [--quick] [--out FILE] [--sonde PATH] [--data-dir DIR] \
         [--only {}] [--repeats N] [--no-peers]",
        SECTIONS.join(",")
    );
    std::process::exit(2);
}

fn parse_args() -> Opts {
    let mut quick = false;
    let mut out = None;
    let mut sonde = None;
    let mut data_dir = PathBuf::from("bench-data");
    let mut only: Vec<String> = SECTIONS
        .iter()
        .filter(|s| !OPT_IN.contains(s))
        .map(|s| s.to_string())
        .collect();
    let mut repeats = None;
    let mut no_peers = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("sonde-bench: {name} needs a value");
                usage()
            })
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--out" => out = Some(PathBuf::from(value("--out"))),
            "--sonde" => sonde = Some(PathBuf::from(value("--sonde"))),
            "--data-dir" => data_dir = PathBuf::from(value("--data-dir")),
            "--only" => {
                only = value("--only")
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect();
                if let Some(bad) = only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    eprintln!("sonde-bench: unknown section {bad:?}");
                    usage();
                }
            }
            "--repeats" => {
                repeats = Some(value("--repeats").parse().unwrap_or_else(|_| usage()));
            }
            "--no-peers" => no_peers = true,
            "-h" | "--help" => usage(),
            other => {
                eprintln!("sonde-bench: unknown argument {other:?}");
                usage();
            }
        }
    }
    // By default the sonde next to this program (both are built into target/release).
    let sonde = sonde.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("sonde")))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("target/release/sonde"))
    });
    Opts {
        quick,
        out,
        sonde,
        data_dir,
        only,
        repeats: repeats.unwrap_or(if quick { 1 } else { 3 }).max(1),
        no_peers,
    }
}

/// One run of sonde with its own summary.
#[derive(Clone)]
struct SondeRun {
    m: Measured,
    stats: Option<Value>,
    /// Why the run does not count (failed, no summary, wrong packet count).
    error: Option<String>,
}

impl SondeRun {
    fn stat(&self, pointer: &str) -> Option<u64> {
        let v = self.stats.as_ref()?.pointer(pointer)?;
        v.as_u64().or_else(|| v.as_f64().map(|f| f as u64))
    }
    fn stat_s(&self, pointer: &str) -> String {
        self.stat(pointer)
            .map(fmt_count)
            .unwrap_or_else(|| "?".into())
    }
    fn packets(&self) -> u64 {
        self.stat("/packets").unwrap_or(0)
    }
    fn cpu_pps(&self) -> f64 {
        self.packets() as f64 / self.m.cpu_s().max(1e-9)
    }
    fn wall_pps(&self) -> f64 {
        self.packets() as f64 / self.m.wall_s.max(1e-9)
    }
}

struct Bench {
    opts: Opts,
    scratch: PathBuf,
    report: String,
    runs: usize,
}

impl Bench {
    fn emit(&mut self, text: &str) {
        print!("{text}");
        let _ = io::stdout().flush();
        self.report.push_str(text);
        if let Some(out) = &self.opts.out {
            if let Err(e) = std::fs::write(out, &self.report) {
                eprintln!("sonde-bench: cannot write {}: {e}", out.display());
            }
        }
    }

    fn progress(&self, msg: &str) {
        eprintln!("[sonde-bench] {msg}");
    }

    fn next_scratch(&mut self) -> PathBuf {
        self.runs += 1;
        let d = self.scratch.join(format!("run{}", self.runs));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Runs sonde with `args` plus `--stats-json FILE -q`; checks that it exited cleanly and,
    /// when `expect_packets` is given, that it counted exactly that many packets.
    fn sonde(&mut self, args: &[String], expect_packets: Option<u64>) -> SondeRun {
        let dir = self.next_scratch();
        let json = dir.join("stats.json");
        let mut argv = vec![self.opts.sonde.display().to_string()];
        argv.extend(args.iter().cloned());
        argv.extend([
            "--stats-json".into(),
            json.display().to_string(),
            "-q".into(),
        ]);
        let m = match run_measured(&argv, &dir, SONDE_LIMIT) {
            Ok(m) => m,
            Err(e) => {
                return SondeRun {
                    m: failed_measure(&e.to_string()),
                    stats: None,
                    error: Some(cell(&format!("cannot run sonde: {e}"))),
                }
            }
        };
        let stats: Option<Value> = std::fs::read(&json)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let mut run = SondeRun {
            m,
            stats,
            error: None,
        };
        if !run.m.success {
            run.error = Some(run.m.failure());
        } else if run.stats.is_none() {
            run.error = Some("no --stats-json summary written".into());
        } else if let Some(want) = expect_packets {
            if run.packets() != want {
                run.error = Some(format!(
                    "counted {} packets, expected {}",
                    fmt_count(run.packets()),
                    fmt_count(want)
                ));
            }
        }
        if let Some(e) = &run.error {
            self.progress(&format!("sonde {} failed: {e}", args.join(" ")));
        }
        run
    }

    /// Runs the same sonde command `repeats` times and keeps the run with the median CPU time.
    fn sonde_median(&mut self, args: &[String], expect: Option<u64>) -> SondeRun {
        let mut runs = Vec::new();
        for _ in 0..self.opts.repeats {
            let r = self.sonde(args, expect);
            if r.error.is_some() {
                return r;
            }
            runs.push(r);
        }
        median_by(&runs, |r| r.m.cpu_s()).expect("at least one run")
    }

    /// Runs the same sonde command `repeats` times and keeps the run with the shortest wall
    /// time: the one least disturbed by other work on the machine.
    fn sonde_fastest(&mut self, args: &[String], expect: Option<u64>) -> SondeRun {
        let mut best: Option<SondeRun> = None;
        for _ in 0..self.opts.repeats {
            let r = self.sonde(args, expect);
            if r.error.is_some() {
                return r;
            }
            if best.as_ref().is_none_or(|b| r.m.wall_s < b.m.wall_s) {
                best = Some(r);
            }
        }
        best.expect("at least one run")
    }
}

fn failed_measure(why: &str) -> Measured {
    Measured {
        status: why.to_string(),
        success: false,
        timed_out: false,
        wall_s: 0.0,
        user_s: 0.0,
        sys_s: 0.0,
        max_rss_bytes: 0,
        stdout: String::new(),
        stderr: why.to_string(),
    }
}

fn synth(hosts: u64, size: u64, packets: u64) -> String {
    format!(
        "hosts={},size={size},packets={}",
        short_count(hosts),
        short_count(packets)
    )
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn header(b: &Bench) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_string())
        .unwrap_or_else(|| "?".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| sonde_bench::find_number(&m, "MemTotal:"))
        .map(|kb| fmt_bytes(kb * 1024))
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]).unwrap_or_default();
    let commit = command_output("git", &["rev-parse", "--short", "HEAD"]).unwrap_or("?".into());
    let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    let version = command_output(&b.opts.sonde.display().to_string(), &["--version"])
        .unwrap_or_else(|| "? (cannot run it)".into());
    let mut peers = Vec::new();
    for pkg in ["nfdump", "libndpi-bin", "softflowd", "pmacct"] {
        let v = command_output("dpkg-query", &["-W", "-f", "${Version}", pkg])
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "not installed".into());
        peers.push(format!("{pkg} {v}"));
    }
    let argv: Vec<String> = std::env::args().collect();
    let mut h = String::new();
    let _ = writeln!(
        h,
        "# sonde benchmarks{}\n",
        if b.opts.quick { " (quick)" } else { "" }
    );
    let _ = writeln!(h, "- date: {date}");
    let _ = writeln!(h, "- command: `{}`", argv.join(" "));
    let _ = writeln!(
        h,
        "- machine: {} CPUs ({model}), {mem} RAM, Linux {kernel}; load average at start {}",
        nproc(),
        loadavg()
    );
    let _ = writeln!(
        h,
        "- sonde: `{}` {version}, commit {commit}{}",
        b.opts.sonde.display(),
        if dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    );
    let _ = writeln!(h, "- peers (Debian packages): {}", peers.join(", "));
    let _ = writeln!(
        h,
        "- method: CPU seconds are the child process's user+sys time and max RSS its peak \
         resident set, both from `wait4(2)` (they include the child's own waited-for children); \
         wall time is measured by sonde-bench around the process, start-up and exit included. \
         Mpps/CPU-s = packets / CPU seconds / 10^6. Sonde cells with several runs show the run \
         with the median CPU time of {}.\n",
        b.opts.repeats
    );
    h
}

// ---------------------------------------------------------------------------------------------
// 1. Fig. 10 grid

fn grid(b: &mut Bench) {
    let (sizes, hosts): (Vec<u64>, Vec<u64>) = if b.opts.quick {
        (vec![64, 1500], vec![100, 10_000, 1_000_000])
    } else {
        (
            vec![64, 128, 512, 1500],
            vec![100, 1000, 10_000, 100_000, 1_000_000],
        )
    };
    let quick = b.opts.quick;
    let packets = |h: u64| grid_packets(h, quick);
    let mut results: BTreeMap<(u64, u64), SondeRun> = BTreeMap::new();
    for &h in &hosts {
        for &size in &sizes {
            let p = packets(h);
            b.progress(&format!("grid: hosts={h} size={size} packets={p}"));
            let args = vec!["--synthetic".to_string(), synth(h, size, p)];
            let r = b.sonde_median(&args, Some(p));
            results.insert((h, size), r);
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 1. Speed grid (ntopng paper, Fig. 10): one shard, synthetic in-memory traffic\n"
    );
    let _ = writeln!(
        out,
        "`sonde --synthetic hosts=H,size=S,packets=P --stats-json FILE -q` (one shard). Packets \
         per run: {}.\n",
        if b.opts.quick {
            "5M".to_string()
        } else {
            "50M up to 10k hosts, 30M at 100k, 20M at 1M".to_string()
        }
    );
    let mut head = vec!["hosts".to_string()];
    head.extend(sizes.iter().map(|s| format!("{s} B")));
    for (title, wall) in [
        ("Mpps per CPU-second of the sonde process", false),
        ("Mpps over wall time (process start to exit)", true),
    ] {
        let _ = writeln!(out, "{title}:\n");
        let mut t = Table::new(&head);
        for &h in &hosts {
            let mut row = vec![short_count(h)];
            for &size in &sizes {
                let r = &results[&(h, size)];
                row.push(match &r.error {
                    Some(e) => format!("failed: {e}"),
                    None => fmt_mpps(if wall { r.wall_pps() } else { r.cpu_pps() }),
                });
            }
            t.row(row);
        }
        let _ = writeln!(out, "{}", t.to_markdown());
    }
    let _ = writeln!(out, "Every run:\n");
    let mut t = Table::new(&[
        "hosts",
        "size",
        "packets",
        "CPU s (user+sys)",
        "wall s",
        "Mpps/CPU-s",
        "wall Mpps",
        "flows",
        "hosts seen",
        "max RSS",
    ]);
    for &h in &hosts {
        for &size in &sizes {
            let r = &results[&(h, size)];
            t.row(vec![
                short_count(h),
                size.to_string(),
                r.stat_s("/packets"),
                format!("{:.2} ({:.2}+{:.2})", r.m.cpu_s(), r.m.user_s, r.m.sys_s),
                format!("{:.2}", r.m.wall_s),
                fmt_mpps(r.cpu_pps()),
                fmt_mpps(r.wall_pps()),
                r.stat_s("/flows/created"),
                r.stat_s("/hosts/distinct"),
                fmt_bytes(r.m.max_rss_bytes),
            ]);
        }
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    b.emit(&out);
}

// ---------------------------------------------------------------------------------------------
// 2. Fig. 14 memory

fn memory(b: &mut Bench) {
    let hosts = [100u64, 1000, 10_000, 100_000, 1_000_000];
    let mut rows = Vec::new();
    for &h in &hosts {
        let p = if b.opts.quick {
            (5 * h).max(1_000_000)
        } else {
            (10 * h).max(2_000_000)
        };
        b.progress(&format!("memory: hosts={h} packets={p}"));
        let args = vec!["--synthetic".to_string(), synth(h, 64, p)];
        rows.push((h, p, b.sonde(&args, Some(p))));
    }
    let base = rows
        .first()
        .filter(|r| r.2.error.is_none())
        .map(|r| r.2.m.max_rss_bytes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 2. Memory (ntopng paper, Fig. 14): peak RSS by number of hosts\n"
    );
    let _ = writeln!(
        out,
        "`sonde --synthetic hosts=H,size=64,packets=P --stats-json FILE -q` with P = {} \
         (every flow seen several times), default table capacities (2M flows, 2M hosts). \
         \"Bytes per flow\" is (RSS − RSS at 100 hosts) / flows.\n",
        if b.opts.quick {
            "max(5×H, 1M)"
        } else {
            "max(10×H, 2M)"
        }
    );
    let mut t = Table::new(&[
        "hosts",
        "packets",
        "flows",
        "hosts seen",
        "max RSS (wait4)",
        "max RSS (sonde's summary)",
        "bytes per flow",
        "under 1 GiB",
    ]);
    for (h, p, r) in &rows {
        if let Some(e) = &r.error {
            t.row(vec![short_count(*h), fmt_count(*p), format!("failed: {e}")]);
            continue;
        }
        let flows = r.stat("/flows/created").unwrap_or(0);
        let per_flow = match base {
            Some(base) if flows > 1000 => format!(
                "{:.0}",
                r.m.max_rss_bytes.saturating_sub(base) as f64 / flows as f64
            ),
            _ => "-".into(),
        };
        t.row(vec![
            short_count(*h),
            fmt_count(*p),
            fmt_count(flows),
            r.stat_s("/hosts/distinct"),
            fmt_bytes(r.m.max_rss_bytes),
            r.stat("/max_rss_bytes")
                .map(fmt_bytes)
                .unwrap_or_else(|| "?".into()),
            per_flow,
            if r.m.max_rss_bytes < GIB { "yes" } else { "no" }.into(),
        ]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    b.emit(&out);
}

// ---------------------------------------------------------------------------------------------
// 3. Peers on the same pcap files

/// What a tool's own output says it processed.
struct Check {
    /// Some(true): it reports every packet; Some(false): it reports a different count; None:
    /// nothing to check.
    ok: Option<bool>,
    text: String,
}

fn check_packets(tool_packets: Option<u64>, flows: Option<u64>, want: u64, how: &str) -> Check {
    let flows = flows
        .map(|f| format!(", {} flows", fmt_count(f)))
        .unwrap_or_default();
    match tool_packets {
        Some(p) if p == want => Check {
            ok: Some(true),
            text: format!("yes: {} packets{flows} ({how})", fmt_count(p)),
        },
        Some(p) => Check {
            ok: Some(false),
            text: format!(
                "NO: {} of {} packets{flows} ({how})",
                fmt_count(p),
                fmt_count(want)
            ),
        },
        None => Check {
            ok: None,
            text: format!("unverified: no packet count found ({how})"),
        },
    }
}

struct PeerRun {
    tool: &'static str,
    /// Err: why there is no measurement (not installed, failed, ...).
    result: Result<(Measured, Check), String>,
}

impl PeerRun {
    fn cpu_pps(&self, packets: u64) -> Option<f64> {
        match &self.result {
            Ok((m, c)) if c.ok != Some(false) => Some(packets as f64 / m.cpu_s().max(1e-9)),
            _ => None,
        }
    }
}

fn ensure_pcap(b: &mut Bench, hosts: u64, packets: u64) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&b.opts.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", b.opts.data_dir.display()))?;
    let name = format!(
        "synth-hosts{}-size64-packets{}.pcap",
        short_count(hosts),
        short_count(packets)
    );
    let path = b.opts.data_dir.join(name);
    // pcap file header + per packet a 16-byte record header and the 64-byte frame.
    let want_len = 24 + packets * (16 + 64);
    if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(want_len) {
        b.progress(&format!("peers: reusing {}", path.display()));
        return Ok(path);
    }
    b.progress(&format!("peers: writing {}", path.display()));
    let tmp = path.with_extension("pcap.tmp");
    let dir = b.next_scratch();
    let argv = vec![
        b.opts.sonde.display().to_string(),
        "--synthetic".into(),
        synth(hosts, 64, packets),
        "-w".into(),
        tmp.display().to_string(),
        "-q".into(),
    ];
    let m = run_measured(&argv, &dir, SONDE_LIMIT).map_err(|e| e.to_string())?;
    if !m.success {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("sonde -w failed: {}", m.failure()));
    }
    let len = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    if len != want_len {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "sonde -w wrote {len} bytes, expected {want_len} (24 + {packets} × 80)"
        ));
    }
    std::fs::rename(&tmp, &path).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Reads the whole file once so that every tool finds it in the page cache.
fn warm_cache(path: &Path) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open(path) {
        let mut buf = vec![0u8; 1 << 20];
        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
    }
}

fn run_peer(
    b: &mut Bench,
    tool: &'static str,
    pcap: &Path,
    hosts: u64,
    packets: u64,
    sink_port: u16,
) -> PeerRun {
    let fail = |why: String| PeerRun {
        tool,
        result: Err(cell(&why)),
    };
    let dir = b.next_scratch();
    let pcap_s = pcap.display().to_string();
    let bin = match tool {
        "sonde" => Some(b.opts.sonde.clone()),
        "nfpcapd" => which("nfpcapd"),
        "ndpiReader" => which("ndpiReader"),
        "softflowd" => which("softflowd"),
        "pmacctd" => which("pmacctd"),
        _ => None,
    };
    let Some(bin) = bin else {
        return fail(format!(
            "not installed (run scripts/setup-bench-deps.sh): no {tool} in PATH"
        ));
    };
    let bin = bin.display().to_string();
    let work = dir.join("work");
    if let Err(e) = std::fs::create_dir_all(&work) {
        return fail(format!("cannot create {}: {e}", work.display()));
    }
    let argv: Vec<String> = match tool {
        "sonde" => vec![
            bin,
            "-r".into(),
            pcap_s.clone(),
            "--stats-json".into(),
            work.join("stats.json").display().to_string(),
            "-q".into(),
        ],
        "nfpcapd" => vec![
            bin,
            "-r".into(),
            pcap_s.clone(),
            "-w".into(),
            work.display().to_string(),
        ],
        "ndpiReader" => vec![bin, "-i".into(), pcap_s.clone()],
        "softflowd" => vec![
            bin,
            "-r".into(),
            pcap_s.clone(),
            "-n".into(),
            format!("127.0.0.1:{sink_port}"),
            "-m".into(),
            "2000000".into(),
            "-c".into(),
            "none".into(),
            "-p".into(),
            work.join("softflowd.pid").display().to_string(),
        ],
        "pmacctd" => {
            let conf = work.join("pmacctd.conf");
            let csv = work.join("pmacct.csv");
            // The print plugin keeps every 5-tuple in memory and writes it once at exit; bigger
            // core→plugin buffers than the defaults, or pmacctd mostly waits on the pipe.
            // The default cache (16411 entries) makes the plugin so slow at 1M flows that the
            // core exits first and most of the data is lost; a bigger one at high flow counts.
            let cache = match hosts {
                0..=50_000 => String::new(),
                50_001..=500_000 => "print_cache_entries: 65521\n".to_string(),
                _ => "print_cache_entries: 262139\n".to_string(),
            };
            let text = format!(
                "daemonize: false\n\
                 pcap_savefile: {pcap_s}\n\
                 aggregate: src_host,dst_host,src_port,dst_port,proto\n\
                 plugins: print\n\
                 print_output: csv\n\
                 print_output_file: {}\n\
                 print_refresh_time: 86400\n\
                 plugin_buffer_size: 65536\n\
                 plugin_pipe_size: 67108864\n\
                 print_output_file_append: true\n\
                 {cache}\
                 pidfile: {}\n",
                csv.display(),
                work.join("pmacctd.pid").display()
            );
            if let Err(e) = std::fs::write(&conf, text) {
                return fail(format!("cannot write {}: {e}", conf.display()));
            }
            vec![bin, "-f".into(), conf.display().to_string()]
        }
        _ => return fail(format!("unknown tool {tool}")),
    };
    b.progress(&format!("peers: {}", argv.join(" ")));
    let m = match run_measured(&argv, &dir, PEER_LIMIT) {
        Ok(m) => m,
        Err(e) => return fail(format!("cannot run {tool}: {e}")),
    };
    if !m.success {
        return fail(format!("failed: {}", m.failure()));
    }
    let check = match tool {
        "sonde" => {
            let stats: Option<Value> = std::fs::read(work.join("stats.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let get = |p: &str| stats.as_ref().and_then(|s| s.pointer(p)?.as_u64());
            check_packets(
                get("/packets"),
                get("/flows/created"),
                packets,
                "--stats-json",
            )
        }
        "nfpcapd" => {
            // nfdump reads back what nfpcapd wrote (not timed).
            match which("nfdump").and_then(|nfdump| {
                Command::new(nfdump)
                    .arg("-R")
                    .arg(&work)
                    .arg("-I")
                    .output()
                    .ok()
            }) {
                Some(o) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    check_packets(
                        sonde_bench::find_number(&text, "Packets:"),
                        sonde_bench::find_number(&text, "Flows:"),
                        packets,
                        "nfdump -R DIR -I",
                    )
                }
                None => Check {
                    ok: None,
                    text: "unverified: cannot run nfdump".into(),
                },
            }
        }
        "ndpiReader" => check_packets(
            sonde_bench::find_number(&m.stdout, "IP packets:"),
            sonde_bench::find_number(&m.stdout, "Unique flows:"),
            packets,
            "its traffic statistics",
        ),
        "softflowd" => {
            let all = format!("{}\n{}", m.stdout, m.stderr);
            check_packets(
                sonde_bench::find_number(&all, "Packets processed:"),
                sonde_bench::find_number(&all, "Flows expired:"),
                packets,
                "its exit statistics",
            )
        }
        "pmacctd" => match std::fs::read_to_string(work.join("pmacct.csv"))
            .ok()
            .and_then(|csv| pmacct_csv_totals(&csv))
        {
            Some((p, rows)) => check_packets(Some(p), Some(rows), packets, "print plugin CSV"),
            None => check_packets(None, None, packets, "no print plugin CSV"),
        },
        _ => unreachable!(),
    };
    // Flow files, CSVs and outputs can be large: drop them now.
    let _ = std::fs::remove_dir_all(&dir);
    PeerRun {
        tool,
        result: Ok((m, check)),
    }
}

fn peers(b: &mut Bench) {
    let (hosts, packets): (Vec<u64>, u64) = if b.opts.quick {
        (vec![100, 10_000, 1_000_000], 1_000_000)
    } else {
        (vec![100, 10_000, 100_000, 1_000_000], 5_000_000)
    };
    let tools = ["sonde", "nfpcapd", "ndpiReader", "softflowd", "pmacctd"];
    // softflowd must export somewhere: a local UDP socket that nobody reads (the kernel drops
    // what overflows its buffer), so that no ICMP errors come back.
    let sink = UdpSocket::bind("127.0.0.1:0").ok();
    let sink_port = sink
        .as_ref()
        .and_then(|s| s.local_addr().ok())
        .map(|a| a.port())
        .unwrap_or(9);
    let mut results: Vec<(u64, Result<Vec<PeerRun>, String>)> = Vec::new();
    for &h in &hosts {
        let runs = match ensure_pcap(b, h, packets) {
            Ok(pcap) => {
                warm_cache(&pcap);
                Ok(tools
                    .iter()
                    .map(|t| run_peer(b, t, &pcap, h, packets, sink_port))
                    .collect())
            }
            Err(e) => Err(cell(&e)),
        };
        results.push((h, runs));
    }
    drop(sink);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 4. sonde and its peers on the same pcap files\n\n\
         Files: `{}/synth-hostsH-size64-packets{}.pcap`, written by `sonde --synthetic \
         hosts=H,size=64,packets={} -w FILE` (64-byte UDP frames, about H flows). One run per \
         tool and file, file in the page cache. Commands:\n",
        b.opts.data_dir.display(),
        short_count(packets),
        short_count(packets)
    );
    for c in [
        "sonde -r FILE --stats-json JSON -q",
        "nfpcapd -r FILE -w DIR            (checked with: nfdump -R DIR -I)",
        "ndpiReader -i FILE                (nDPI 4.2 with its default DPI; checked with its printed totals)",
        "softflowd -r FILE -n 127.0.0.1:PORT -m 2000000 -c none -p PIDFILE   (checked with its exit statistics)",
        "pmacctd -f CONF                   (pcap_savefile FILE, print plugin, 5-tuple CSV; checked by summing PACKETS)",
        "                                  (CONF: plugin_buffer_size 64 KiB, plugin_pipe_size 64 MiB; print_cache_entries",
        "                                   65521 above 50k hosts, 262139 above 500k, else the default 16411)",
    ] {
        let _ = writeln!(out, "    {c}");
    }
    let _ = writeln!(out);

    // Matrix of Mpps per CPU-second.
    let mut head = vec!["tool".to_string()];
    head.extend(hosts.iter().map(|h| format!("{} hosts", short_count(*h))));
    let cell_of = |h: u64, tool: &str, f: &dyn Fn(&PeerRun) -> String| -> String {
        match results.iter().find(|(hh, _)| *hh == h).map(|(_, r)| r) {
            Some(Ok(runs)) => runs
                .iter()
                .find(|r| r.tool == tool)
                .map(f)
                .unwrap_or_default(),
            Some(Err(e)) => format!("no file: {e}"),
            None => String::new(),
        }
    };
    let sonde_pps = |h: u64| -> Option<f64> {
        let runs = results.iter().find(|(hh, _)| *hh == h)?.1.as_ref().ok()?;
        runs.iter()
            .find(|r| r.tool == "sonde")
            .and_then(|r| r.cpu_pps(packets))
    };
    let _ = writeln!(
        out,
        "Mpps per CPU-second (user+sys of the whole process):\n"
    );
    let mut t = Table::new(&head);
    for tool in tools {
        let mut row = vec![tool.to_string()];
        for &h in &hosts {
            row.push(cell_of(h, tool, &|r| match &r.result {
                Ok((m, c)) => {
                    let v = fmt_mpps(packets as f64 / m.cpu_s().max(1e-9));
                    if c.ok == Some(false) {
                        format!("{v} (count wrong)")
                    } else {
                        v
                    }
                }
                Err(e) => e.clone(),
            }));
        }
        t.row(row);
    }
    let _ = writeln!(out, "{}", t.to_markdown());

    let _ = writeln!(out, "Max RSS:\n");
    let mut t = Table::new(&head);
    for tool in tools {
        let mut row = vec![tool.to_string()];
        for &h in &hosts {
            row.push(cell_of(h, tool, &|r| match &r.result {
                Ok((m, _)) => fmt_bytes(m.max_rss_bytes),
                Err(_) => "-".into(),
            }));
        }
        t.row(row);
    }
    let _ = writeln!(out, "{}", t.to_markdown());

    let _ = writeln!(
        out,
        "sonde's speed over each peer's (packets per CPU-second, sonde ÷ peer):\n"
    );
    let mut t = Table::new(&head);
    for tool in tools.iter().filter(|t| **t != "sonde") {
        let mut row = vec![tool.to_string()];
        for &h in &hosts {
            let sp = sonde_pps(h);
            row.push(cell_of(h, tool, &|r| match (sp, r.cpu_pps(packets)) {
                (Some(s), Some(p)) => format!("{:.1}×", s / p),
                _ => "-".into(),
            }));
        }
        t.row(row);
    }
    let _ = writeln!(out, "{}", t.to_markdown());

    let _ = writeln!(out, "Every run:\n");
    let mut t = Table::new(&[
        "hosts",
        "tool",
        "Mpps/CPU-s",
        "CPU s (user+sys)",
        "wall s",
        "max RSS",
        "processed every packet?",
    ]);
    for (h, runs) in &results {
        match runs {
            Err(e) => t.row(vec![short_count(*h), "-".into(), format!("no file: {e}")]),
            Ok(runs) => {
                for r in runs {
                    match &r.result {
                        Ok((m, c)) => t.row(vec![
                            short_count(*h),
                            r.tool.into(),
                            fmt_mpps(packets as f64 / m.cpu_s().max(1e-9)),
                            format!("{:.2} ({:.2}+{:.2})", m.cpu_s(), m.user_s, m.sys_s),
                            format!("{:.2}", m.wall_s),
                            fmt_bytes(m.max_rss_bytes),
                            cell(&c.text),
                        ]),
                        Err(e) => t.row(vec![
                            short_count(*h),
                            r.tool.into(),
                            e.clone(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                        ]),
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    b.emit(&out);
}

// ---------------------------------------------------------------------------------------------
// 4. Scaling with shards

/// The cost of application detection: the same synthetic traffic with real payloads (HTTP GET,
/// TLS ClientHello, DNS query: `payload=mix`) with DPI off, sonde's built-in detectors and nDPI.
fn dpi(b: &mut Bench) {
    let packets: u64 = if b.opts.quick { 5_000_000 } else { 20_000_000 };
    let hosts: &[u64] = if b.opts.quick {
        &[100, 100_000]
    } else {
        &[100, 10_000, 100_000, 1_000_000]
    };
    let modes = ["off", "builtin", "ndpi"];
    let mut t = Table::new(&[
        "hosts",
        "DPI off Mpps/CPU-s",
        "builtin Mpps/CPU-s",
        "builtin vs off",
        "ndpi Mpps/CPU-s",
        "ndpi vs off",
        "RSS off / builtin / ndpi",
    ]);
    for &h in hosts {
        let mut res = Vec::new();
        for mode in modes {
            b.progress(&format!("dpi: hosts={h} --dpi {mode}"));
            let args = vec![
                "--synthetic".to_string(),
                format!(
                    "hosts={},packets={},payload=mix",
                    short_count(h),
                    short_count(packets)
                ),
                "--dpi".into(),
                mode.into(),
            ];
            res.push(b.sonde_median(&args, Some(packets)));
        }
        let rate = |r: &SondeRun| -> Option<f64> { r.error.is_none().then(|| r.cpu_pps()) };
        let show = |r: &SondeRun| match (&r.error, rate(r)) {
            (Some(e), _) => cell(e),
            (None, Some(p)) => fmt_mpps(p),
            _ => "?".into(),
        };
        let ratio = |r: &SondeRun| match (rate(r), rate(&res[0])) {
            (Some(a), Some(o)) if o > 0.0 => format!("{:+.1}%", (a / o - 1.0) * 100.0),
            _ => "-".into(),
        };
        t.row(vec![
            short_count(h),
            show(&res[0]),
            show(&res[1]),
            ratio(&res[1]),
            show(&res[2]),
            ratio(&res[2]),
            format!(
                "{} / {} / {}",
                fmt_bytes(res[0].m.max_rss_bytes),
                fmt_bytes(res[1].m.max_rss_bytes),
                fmt_bytes(res[2].m.max_rss_bytes)
            ),
        ]);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 3. Cost of application detection\n\n`sonde --synthetic hosts=H,packets={},payload=mix \
         --dpi off|builtin|ndpi` (one shard; flows carry an HTTP GET, a TLS ClientHello with SNI or \
         a DNS query, each to its well-known port; every packet of a flow repeats its first \
         payload, so TCP segments after the first are retransmissions, which DPI skips). \
         Mpps per CPU-second, median of {} runs; \"vs off\" is the change against DPI off in \
         the same run.\n",
        short_count(packets),
        b.opts.repeats
    );
    out.push_str(&t.to_markdown());
    b.emit(&out);
}

/// What a collector kept: records, CPU seconds, peak RSS.
type Stored = (u64, f64, u64);

/// sonde's collector decoder and flow engine on one thread, without sockets or threads: what
/// one core does with the records (decode, flow and host tables, final flush). CPU time is
/// this thread's.
fn in_process(dgrams: &[Vec<u8>]) -> Stored {
    let thread_cpu = || {
        // SAFETY: rusage is plain old data, filled by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD with a valid pointer.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    let cpu0 = thread_cpu();
    let records = sonde_bench::decode_into_engine(dgrams);
    (records, thread_cpu() - cpu0, 0)
}

/// Sends `dgrams` to 127.0.0.1:`port`, paced so that a collector keeping up loses none
/// (`per_ms` datagrams per millisecond).
fn send_paced(dgrams: &[Vec<u8>], port: u16, per_ms: usize) -> io::Result<f64> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    let start = Instant::now();
    for (i, d) in dgrams.iter().enumerate() {
        s.send_to(d, ("127.0.0.1", port))?;
        if i % per_ms.max(1) == per_ms.max(1) - 1 {
            let due = Duration::from_millis((i / per_ms.max(1)) as u64 + 1);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

fn wait_udp_bound(port: u16) {
    let t0 = Instant::now();
    while UdpSocket::bind(("127.0.0.1", port)).is_ok() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
}

/// Collector speed: the same NetFlow v9 / IPFIX datagrams replayed over UDP on 127.0.0.1 to sonde
/// (`--collect`, decoding into its flow model), nfcapd (writing nfdump files) and nfacctd
/// (pmacct, print plugin): records per CPU-second of each collector process.
fn collect(b: &mut Bench) {
    use sonde_flowproto::encode::ExportFormat;
    let flows: u64 = if b.opts.quick { 500_000 } else { 2_000_000 };
    // 40 datagrams per ms is ~1.1M records/s: every collector keeps up, so CPU per record
    // compares the decoders, not their loss.
    let per_ms = 40;
    let mut t = Table::new(&[
        "format",
        "collector",
        "records sent",
        "records stored",
        "CPU s",
        "records / CPU-s",
        "sonde's ratio",
        "max RSS",
    ]);
    for (mix, (fname, format)) in [RecordMix::AllNew, RecordMix::Repeated]
        .into_iter()
        .flat_map(|m| {
            [
                ("NetFlow v9", ExportFormat::NetflowV9),
                ("IPFIX", ExportFormat::Ipfix),
            ]
            .map(|f| (m, f))
        })
    {
        let fname = &format!("{fname}, {}", mix.name());
        b.progress(&format!(
            "collect: encoding {} {fname} records",
            fmt_count(flows)
        ));
        let dgrams = flow_datagrams(format, flows, mix);
        let secs = (dgrams.len() / per_ms / 1000) as u64 + 6;
        let mut results: Vec<(String, Result<Stored, String>)> = Vec::new();
        for tool in ["sonde", "nfcapd", "nfacctd"] {
            b.progress(&format!("collect: {fname} → {tool}"));
            let dir = b.next_scratch();
            let port = UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.local_addr())
                .map(|a| a.port())
                .unwrap_or(29999);
            let stats = dir.join("stats.json");
            let argv: Vec<String> = match tool {
                "sonde" => vec![
                    b.opts.sonde.display().to_string(),
                    "--collect".into(),
                    format!("udp://127.0.0.1:{port}"),
                    "--duration".into(),
                    secs.to_string(),
                    "--dpi".into(),
                    "off".into(),
                    // Room for every record's flow: this measures decoding, not eviction.
                    "--max-flows".into(),
                    "4M".into(),
                    "--max-hosts".into(),
                    "4M".into(),
                    "--stats-json".into(),
                    stats.display().to_string(),
                    "-q".into(),
                ],
                "nfcapd" => {
                    let _ = std::fs::create_dir_all(dir.join("nf"));
                    vec![
                        "timeout".into(),
                        "-s".into(),
                        "TERM".into(),
                        secs.to_string(),
                        "nfcapd".into(),
                        "-w".into(),
                        dir.join("nf").display().to_string(),
                        "-p".into(),
                        port.to_string(),
                        "-b".into(),
                        "127.0.0.1".into(),
                    ]
                }
                _ => {
                    let conf = dir.join("nfacctd.conf");
                    let text = format!(
                        "daemonize: false\nnfacctd_ip: 127.0.0.1\nnfacctd_port: {port}\n\
                         plugins: print\naggregate: src_host,dst_host,src_port,dst_port,proto\n\
                         print_output: csv\nprint_output_file: {}\nprint_refresh_time: 86400\n\
                         print_cache_entries: 262139\nprint_output_file_append: true\n\
                         plugin_buffer_size: 65536\n\
                         plugin_pipe_size: 67108864\n",
                        dir.join("pm.csv").display()
                    );
                    // (The scratch directory does not exist yet: run_measured makes it.)
                    if let Err(e) =
                        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&conf, text))
                    {
                        results.push((tool.into(), Err(format!("cannot write {conf:?}: {e}"))));
                        continue;
                    }
                    // pmacct shuts down (and writes its cache) on SIGINT, not SIGTERM.
                    vec![
                        "timeout".into(),
                        "-s".into(),
                        "INT".into(),
                        secs.to_string(),
                        "nfacctd".into(),
                        "-f".into(),
                        conf.display().to_string(),
                    ]
                }
            };
            if tool != "sonde" && b.opts.no_peers {
                results.push((tool.into(), Err("skipped (--no-peers)".into())));
                continue;
            }
            if tool != "sonde" && which(tool).is_none() {
                results.push((tool.into(), Err(format!("{tool} not installed"))));
                continue;
            }
            let run = std::thread::scope(|sc| {
                let h = sc.spawn(|| run_measured(&argv, &dir, SONDE_LIMIT));
                wait_udp_bound(port);
                let sent = send_paced(&dgrams, port, per_ms);
                (h.join(), sent)
            });
            let stored: Result<u64, String> = match tool {
                "sonde" => std::fs::read(&stats)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v.pointer("/collected/records")?.as_u64())
                    .ok_or_else(|| "no summary".to_string()),
                "nfcapd" => sonde_bench::nfdump_records(&dir.join("nf")),
                // Rows are 5-tuples: with repeated flows, the records are counted by packets.
                _ => std::fs::read_to_string(dir.join("pm.csv"))
                    .map_err(|e| e.to_string())
                    .and_then(|t| match mix {
                        RecordMix::AllNew => Ok(t.lines().count().saturating_sub(1) as u64),
                        RecordMix::Repeated => pmacct_csv_totals(&t)
                            .map(|(pkts, _)| {
                                (flows as u128 * pkts as u128 / packets_sent(flows) as u128) as u64
                            })
                            .ok_or_else(|| "unreadable CSV".to_string()),
                    }),
            };
            let r = match (run.0, stored) {
                (Ok(Ok(m)), Ok(n)) => Ok((n, m.cpu_s(), m.max_rss_bytes)),
                (Ok(Err(e)), _) => Err(cell(&e.to_string())),
                (Err(_), _) => Err("panicked".into()),
                (_, Err(e)) => Err(cell(&e)),
            };
            results.push((tool.into(), r));
        }
        b.progress(&format!(
            "collect: {fname} → sonde's decoder and flow tables in process"
        ));
        results.push((
            "sonde, in process (no sockets)".into(),
            Ok(in_process(&dgrams)),
        ));
        let sonde_rate = match &results[0].1 {
            Ok((n, cpu, _)) => Some(*n as f64 / cpu.max(1e-9)),
            _ => None,
        };
        for (tool, r) in &results {
            match r {
                Ok((n, cpu, rss)) => {
                    let rate = *n as f64 / cpu.max(1e-9);
                    t.row(vec![
                        fname.into(),
                        tool.clone(),
                        fmt_count(flows),
                        fmt_count(*n),
                        format!("{cpu:.2}"),
                        format!("{:.2}M", rate / 1e6),
                        match sonde_rate {
                            Some(sr) if !tool.starts_with("sonde") => format!("{:.1}×", sr / rate),
                            _ => "-".into(),
                        },
                        if *rss == 0 {
                            "-".into()
                        } else {
                            fmt_bytes(*rss)
                        },
                    ]);
                }
                Err(e) => t.row(vec![
                    fname.into(),
                    tool.clone(),
                    fmt_count(flows),
                    e.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]),
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 5. Flow collection: NetFlow v9 and IPFIX decoding\n\n{} flow records (25–30 per \
         datagram, made by sonde's encoder; either every record a different flow from a \
         different client, or each flow in 10 records among 20k clients and 500 servers, as \
         active-timeout exports of long flows give) sent over UDP on 127.0.0.1 \
         at {} datagrams per ms to each collector in turn: `sonde --collect udp://… --dpi off \
         --max-flows 4M --max-hosts 4M` (records decoded into its flow and host tables), nfcapd (writing nfdump files) and \
         nfacctd (pmacct, print plugin keyed by 5-tuple). \"records stored\": what the collector \
         kept (sonde's decoded count, `nfdump` rows, pmacct's printed rows; with repeated flows, \
         whose records pmacct adds into one row per flow, its packets over the packets sent, \
         in records). CPU seconds include \
         the idle second or so each waits before and after; records per CPU-second is stored \
         records over CPU time (with the CPU of processes a collector leaves behind, such as \
         pmacct's plugins, which get 15 s to write their cache). \"sonde, in process\": the same \
         datagrams through sonde's decoder and flow engine on one thread of the benchmark itself, \
         no sockets or thread hand-off (that thread's CPU time): what one core does.\n",
        fmt_count(flows),
        per_ms
    );
    out.push_str(&t.to_markdown());
    b.emit(&out);
}

fn scaling(b: &mut Bench) {
    let packets: u64 = if b.opts.quick { 10_000_000 } else { 50_000_000 };
    let max_threads = nproc().max(2);
    let mut rows = Vec::new();
    for threads in 1..=max_threads {
        b.progress(&format!("scaling: threads={threads}"));
        let args = vec![
            "--synthetic".to_string(),
            synth(10_000, 64, packets),
            "--threads".into(),
            threads.to_string(),
        ];
        rows.push((threads, b.sonde_fastest(&args, Some(packets))));
    }
    // Control: as many independent one-shard processes as CPUs, all at once; their combined
    // rate is what this machine gives to parallel work, whatever sonde does.
    let copies = nproc().max(2);
    b.progress(&format!(
        "scaling: {copies} independent one-shard processes at once"
    ));
    let argv: Vec<String> = vec![
        b.opts.sonde.display().to_string(),
        "--synthetic".into(),
        synth(10_000, 64, packets),
        "-q".into(),
    ];
    // Kept: the repetition that ended soonest, as for the rows above.
    let mut best: Option<(Vec<io::Result<Measured>>, f64)> = None;
    for _ in 0..b.opts.repeats {
        let dirs: Vec<PathBuf> = (0..copies).map(|_| b.next_scratch()).collect();
        let start = Instant::now();
        let control: Vec<io::Result<Measured>> = std::thread::scope(|sc| {
            let handles: Vec<_> = dirs
                .iter()
                .map(|d| {
                    let argv = &argv;
                    sc.spawn(move || run_measured(argv, d, SONDE_LIMIT))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("thread panicked")))
                })
                .collect()
        });
        let control_wall = start.elapsed().as_secs_f64();
        let failed = control.iter().any(|r| !matches!(r, Ok(m) if m.success));
        if failed || best.as_ref().is_none_or(|(_, w)| control_wall < *w) {
            best = Some((control, control_wall));
        }
        if failed {
            break;
        }
    }
    let (control, control_wall) = best.expect("at least one repetition");
    let control_row: Result<(f64, f64), String> = control
        .iter()
        .map(|r| match r {
            Ok(m) if m.success => Ok(m.cpu_s()),
            Ok(m) => Err(m.failure()),
            Err(e) => Err(cell(&e.to_string())),
        })
        .sum::<Result<f64, String>>()
        .map(|cpu| (cpu, (copies as u64 * packets) as f64 / control_wall));

    let base = rows
        .first()
        .filter(|r| r.1.error.is_none())
        .map(|r| r.1.wall_pps());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 6. Scaling with shards\n\n`sonde --synthetic hosts=10k,size=64,packets={} --threads N \
         --stats-json FILE -q` on {} CPUs; the run with the shortest wall time of {}.\n",
        short_count(packets),
        nproc(),
        b.opts.repeats
    );
    let mut t = Table::new(&[
        "threads",
        "wall s",
        "CPU s (user+sys)",
        "wall Mpps",
        "Mpps/CPU-s",
        "speedup (wall)",
        "flows",
    ]);
    for (threads, r) in &rows {
        if let Some(e) = &r.error {
            t.row(vec![threads.to_string(), format!("failed: {e}")]);
            continue;
        }
        t.row(vec![
            threads.to_string(),
            format!("{:.2}", r.m.wall_s),
            format!("{:.2}", r.m.cpu_s()),
            fmt_mpps(r.wall_pps()),
            fmt_mpps(r.cpu_pps()),
            base.map(|b0| format!("{:.2}×", r.wall_pps() / b0))
                .unwrap_or_else(|| "-".into()),
            r.stat_s("/flows/created"),
        ]);
    }
    match control_row {
        Ok((cpu, pps)) => t.row(vec![
            format!("control: {copies} separate 1-shard processes at once"),
            format!("{control_wall:.2}"),
            format!("{cpu:.2}"),
            fmt_mpps(pps),
            fmt_mpps((copies as u64 * packets) as f64 / cpu.max(1e-9)),
            base.map(|b0| format!("{:.2}×", pps / b0))
                .unwrap_or_else(|| "-".into()),
            "-".into(),
        ]),
        Err(e) => t.row(vec![
            format!("control: {copies} separate 1-shard processes at once"),
            format!("failed: {e}"),
        ]),
    }
    let _ = writeln!(out, "{}", t.to_markdown());
    let _ = writeln!(
        out,
        "The control row runs {copies} independent copies of the one-shard command at the same \
         time (each with all the packets); its rate is their packets together over the time \
         until the last one ends, i.e. what this machine gives to parallel work.\n"
    );
    if nproc() < 2 {
        let _ = writeln!(
            out,
            "Only {} CPU here: more threads than CPUs share it.\n",
            nproc()
        );
    }
    b.emit(&out);
}

// ---------------------------------------------------------------------------------------------
// 5. Random-source flood against bounded tables

fn attack(b: &mut Bench) {
    let packets: u64 = if b.opts.quick {
        10_000_000
    } else {
        100_000_000
    };
    let args = vec![
        "--synthetic".to_string(),
        format!(
            "hosts=1000000,size=64,packets={},random-src",
            short_count(packets)
        ),
        "--max-flows".into(),
        "1M".into(),
        "--max-hosts".into(),
        "1M".into(),
    ];
    b.progress(&format!("attack: {}", args.join(" ")));
    let r = b.sonde(&args, Some(packets));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 7. Random-source flood against bounded tables\n\n`sonde {} --stats-json FILE -q`: \
         every packet a new source, so new flows and hosts never stop coming; the tables are \
         capped at 1M flows and 1M hosts (evict the longest-idle flow when full). Cap checked: \
         max RSS under 1 GiB.\n",
        args.join(" ")
    );
    match &r.error {
        Some(e) => {
            let _ = writeln!(out, "failed: {e}\n");
        }
        None => {
            let mut t = Table::new(&["measure", "value"]);
            let rows: Vec<(&str, String)> = vec![
                ("packets", r.stat_s("/packets")),
                ("wall s", format!("{:.2}", r.m.wall_s)),
                ("CPU s (user+sys)", format!("{:.2}", r.m.cpu_s())),
                ("Mpps/CPU-s", fmt_mpps(r.cpu_pps())),
                ("wall Mpps", fmt_mpps(r.wall_pps())),
                ("max RSS (wait4)", fmt_bytes(r.m.max_rss_bytes)),
                ("flows created", r.stat_s("/flows/created")),
                ("flows evicted", r.stat_s("/flows/ended/evicted")),
                (
                    "flows ended at end of run",
                    r.stat_s("/flows/ended/end_of_capture"),
                ),
                (
                    "packets dropped (flow table full)",
                    r.stat_s("/dropped/flow_table_full"),
                ),
                ("hosts created", r.stat_s("/hosts/created")),
                (
                    "host table full (hosts not tracked)",
                    r.stat_s("/hosts/table_full"),
                ),
                (
                    "RSS under 1 GiB",
                    if r.m.max_rss_bytes < GIB { "yes" } else { "NO" }.into(),
                ),
            ];
            for (k, v) in rows {
                t.row(vec![k.to_string(), v]);
            }
            let _ = writeln!(out, "{}", t.to_markdown());
        }
    }
    b.emit(&out);
}

fn main() {
    let opts = parse_args();
    if !opts.sonde.is_file() {
        eprintln!(
            "sonde-bench: no sonde binary at {} (build it: cargo build --release -p sonde, or \
             pass --sonde PATH)",
            opts.sonde.display()
        );
        std::process::exit(1);
    }
    let scratch = std::env::temp_dir().join(format!("sonde-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&scratch) {
        eprintln!("sonde-bench: cannot create {}: {e}", scratch.display());
        std::process::exit(1);
    }
    let mut b = Bench {
        opts,
        scratch: scratch.clone(),
        report: String::new(),
        runs: 0,
    };
    let started = Instant::now();
    let h = header(&b);
    b.emit(&h);
    let only = b.opts.only.clone();
    for section in SECTIONS {
        if !only.iter().any(|o| o == section) {
            continue;
        }
        let t0 = Instant::now();
        match section {
            "grid" => grid(&mut b),
            "memory" => memory(&mut b),
            "dpi" => dpi(&mut b),
            "peers" => peers(&mut b),
            "collect" => collect(&mut b),
            "scaling" => scaling(&mut b),
            "attack" => attack(&mut b),
            "series" => {
                b.progress("series: time series writes, sonde and rrdtool");
                let text = series_bench::run(b.opts.quick, &b.scratch).unwrap_or_else(|e| {
                    format!("## 8. Time series writes against rrdtool\n\nfailed: {e}\n")
                });
                b.emit(&text);
            }
            "history" => {
                b.progress("history: flow history ingest and queries");
                let text = history_bench::run(b.opts.quick, &b.scratch)
                    .unwrap_or_else(|e| format!("## 9. Flow history\n\nfailed: {e}\n"));
                b.emit(&text);
                b.progress("history: the same flows in nfdump");
                let text = history_bench::run_peer(b.opts.quick, &b.opts.sonde, &b.scratch)
                    .unwrap_or_else(|e| {
                        format!("### 9b. The same flows in nfdump\n\nfailed: {e}\n")
                    });
                b.emit(&text);
            }
            "api" => {
                b.progress("api: REST API latency at 1M hosts and flows, and packets under load");
                let text = api_bench::run(b.opts.quick, b.opts.repeats, &b.opts.sonde, &b.scratch)
                    .unwrap_or_else(|e| format!("## 10. REST API speed\n\nfailed: {e}\n"));
                b.emit(&text);
            }
            "analytics" => analytics_bench::run(&mut b),
            "detect" => {
                b.progress(
                    "detect: DDoS detection side by side with FastNetMon (replayed attacks)",
                );
                let text = detect_bench::run(
                    b.opts.quick,
                    b.opts.repeats,
                    &b.opts.sonde,
                    &b.opts.data_dir,
                    &b.scratch,
                )
                .unwrap_or_else(|e| {
                    format!("## 12. DDoS detection side by side with FastNetMon\n\nfailed: {e}\n")
                });
                b.emit(&text);
            }
            "history-clickhouse" => {
                b.progress(
                    "history-clickhouse: History questions, ClickHouse beside the local store",
                );
                let text =
                    clickhouse_bench::run(b.opts.quick, b.opts.repeats, &b.opts.sonde, &b.scratch)
                        .unwrap_or_else(|e| {
                            format!(
                        "## 15. Flow history queries: ClickHouse beside the local store\n\n\
                         failed: {e}\n"
                    )
                        });
                b.emit(&text);
            }
            _ => unreachable!(),
        }
        b.progress(&format!(
            "{section} done in {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
    }
    let tail = format!(
        "Benchmark took {:.0} s; load average at the end {}.\n",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    b.emit(&tail);
    let _ = std::fs::remove_dir_all(&scratch);
    if let Some(out) = &b.opts.out {
        b.progress(&format!("wrote {}", out.display()));
    }
}
