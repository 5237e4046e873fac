//! `sonde`: the command-line probe. Only flags and glue live here; the work is in the library
//! crates (wire → capture → flow → probe → export).
//!
//! Flags follow tcpdump/ntopng/nProbe: `-r FILE`, `-i IFACE`, `-f 'BPF'`, `--threads N`. Every
//! failure ends as one `sonde: error: …` line on stderr and a non-zero exit code.

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use sonde_capture::{synthetic::fix_ipv4_checksum, PcapWriter, SyntheticSource, SyntheticSpec};
use sonde_dpi::{Backend, DpiConfig, Services, NDPI_AVAILABLE};
use sonde_export::Format;
use sonde_flow::{EngineConfig, FullPolicy, ShardStats};
use sonde_probe::sinks::RecordSink;
use sonde_probe::{
    format_count, stats_line, summary_json, CollectSource, ExportTarget, FlowExportSink,
    HistorySink, Input, ProbeConfig, Replay, ZmqSink,
};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod query;
mod user;

#[derive(Parser, Debug)]
#[command(
    name = "sonde",
    version,
    about = "Real-time network traffic monitor: packets in, exact flows and hosts out"
)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["read", "interface", "synthetic", "collect"]))]
struct Cli {
    /// Read packets from a pcap or pcapng file.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    read: Option<PathBuf>,
    /// Capture live on an interface (needs root or CAP_NET_RAW).
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    interface: Option<String>,
    /// Forge traffic in memory: hosts=N,size=BYTES[,packets=P][,random-src][,seed=S]
    /// [,payload=zero|http|tls|dns|mix].
    #[arg(long, value_name = "SPEC")]
    synthetic: Option<String>,
    /// Collect flows instead of capturing packets: udp://ADDR:PORT (NetFlow v5/v9, IPFIX,
    /// sFlow), tcp://ADDR:PORT (IPFIX over TCP), zmq+tcp://ADDR:PORT (JSON flows from
    /// --zmq-export); may be given several times. Runs until Ctrl-C or --duration.
    #[arg(long, value_name = "SOURCE")]
    collect: Vec<String>,
    /// Export expired flows to a collector: netflow5://HOST:PORT, netflow9://HOST:PORT,
    /// ipfix://HOST:PORT (UDP) or ipfix+tcp://HOST:PORT; may be given several times.
    #[arg(long, value_name = "TARGET")]
    export: Vec<String>,
    /// Push expired flows as JSON to a collector over ZMQ (tcp://HOST:PORT of another sonde's
    /// --collect zmq+tcp://…).
    #[arg(long, value_name = "ENDPOINT")]
    zmq_export: Vec<String>,
    /// Capture filter in tcpdump syntax, e.g. 'tcp port 443'.
    #[arg(short = 'f', long = "filter", value_name = "BPF")]
    filter: Option<String>,
    /// With --synthetic: write the generated packets to a pcap file and exit.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        requires = "synthetic"
    )]
    write: Option<PathBuf>,
    /// Shards (one per core); both directions of a flow always go to the same shard.
    #[arg(long, default_value_t = 1, value_name = "N")]
    threads: usize,
    /// Read a file as fast as possible, or paced by its timestamps.
    #[arg(long, value_enum, default_value_t = ReplayArg::Fast)]
    replay: ReplayArg,
    /// Write expired flows to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    flows_out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = FormatArg::Json)]
    flows_format: FormatArg,
    /// Write hosts as JSON lines: each purged host (idle and flowless) when it goes, then
    /// every remaining host, merged across shards, at the end.
    #[arg(long, value_name = "FILE")]
    hosts_out: Option<PathBuf>,
    /// Serve the web console (/), the REST API (/api/v1/…, OpenAPI at /api/v1/openapi.json)
    /// and Prometheus metrics (/metrics) on ADDR:PORT, e.g. 127.0.0.1:3000. Logins are
    /// required (see --users). With a file or synthetic input, sonde keeps serving what it
    /// counted after the end, until Ctrl-C or --duration.
    #[arg(long, value_name = "ADDR:PORT")]
    http: Option<std::net::SocketAddr>,
    /// The users of the console and the API (default ~/.config/sonde/users). When it has no
    /// user, sonde creates 'admin' with a generated password and prints it once. Manage it with
    /// 'sonde user add|del|token|list'.
    #[arg(long, value_name = "FILE")]
    users: Option<PathBuf>,
    /// Serve the console and the API without logins: allowed on loopback addresses only.
    #[arg(long)]
    no_auth: bool,
    /// Speak HTTPS on --http with this PEM certificate chain (with --https-key).
    #[arg(long, value_name = "FILE", requires = "https_key")]
    https_cert: Option<PathBuf>,
    /// The PEM private key of --https-cert.
    #[arg(long, value_name = "FILE", requires = "https_cert")]
    https_key: Option<PathBuf>,
    /// Keep history in DIR: every expired flow, and per-second time series of the traffic, each
    /// application and each host (made durable every second; query them with
    /// 'sonde query --data-dir DIR flows|hosts|apps|series').
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Time series retention, in rows of each resolution: 1 s,1 min,1 h,1 day (default
    /// 3600,10080,8760,1826: an hour, a week, a year, five years).
    #[arg(long, value_name = "S,M,H,D")]
    series_retention: Option<String>,
    /// Flow history retention: delete flows older than this many days (0: no age limit).
    #[arg(long, default_value_t = 30.0, value_name = "DAYS")]
    history_max_age: f64,
    /// Flow history retention: keep at most this many GiB (0: no size limit).
    #[arg(long, default_value_t = 10.0, value_name = "GIB")]
    history_max_size: f64,
    /// Write the final summary as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Print a stats line per shard every SECS seconds (0: never). Default: 1 for live capture.
    #[arg(long, value_name = "SECS")]
    stats_interval: Option<f64>,
    /// Seconds without packets after which a flow is expired.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    idle_timeout: u64,
    /// Seconds after which a long flow is exported and its counters restarted (0: never).
    #[arg(long, default_value_t = 1800, value_name = "SECS")]
    active_timeout: u64,
    /// Flow table capacity (all shards together); accepts k/M suffixes.
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    max_flows: usize,
    /// Host table capacity (all shards together); accepts k/M suffixes.
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    max_hosts: usize,
    /// When the flow table is full: evict the longest-idle flows, or drop new ones.
    #[arg(long, value_enum, default_value_t = TableFullArg::Evict)]
    table_full: TableFullArg,
    /// Stop a live or synthetic run after SECS seconds.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Application detection: off, builtin (sonde's own detectors) or ndpi.
    #[arg(long, value_enum, default_value_t = DpiArg::Builtin)]
    dpi: DpiArg,
    /// Extra service rules (host names and address blocks → application), in the format of
    /// crates/dpi/data/services.txt; may be given several times.
    #[arg(long, value_name = "FILE")]
    dpi_services: Vec<PathBuf>,
    /// Count the packets and bytes matching labelled tcpdump expressions, one chart per set:
    /// 'NAME=LABEL:EXPR;LABEL:EXPR…', e.g. 'web=http:tcp port 80;tls:tcp port 443'; may be
    /// given several times.
    #[arg(long, value_name = "SPEC")]
    filter_set: Vec<String>,
    /// Length of the top-N and anomaly lists' interval, in seconds (Ourmon's 30 s lists).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    top_interval: u64,
    /// Entries kept per top-N list and interval.
    #[arg(long, default_value_t = 25, value_name = "N")]
    top_n: usize,
    /// A detection threshold, [NETWORK:]KEY=VALUE, e.g. ddos.pps=50k or
    /// 10.0.0.0/8:ddos.mbps=5000 (value 'off' turns a check off); may be given several times.
    /// 'sonde --threshold help' lists the keys.
    #[arg(long, value_name = "[NET:]KEY=VALUE")]
    threshold: Vec<String>,
    /// Write detections (scans, floods, DDoS, ICMP errors, noisy hosts) as JSON lines to FILE
    /// ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    alerts_out: Option<PathBuf>,
    /// Traffic analytics (top-N and anomaly lists, detections, filter-sets): on or off.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    analytics: OnOff,
    /// No progress bar and no summary on stderr (errors are still printed).
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ReplayArg {
    Fast,
    Realtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DpiArg {
    Off,
    Builtin,
    Ndpi,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Json,
    Csv,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TableFullArg {
    Evict,
    Drop,
}

fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        _ => (&t[..], 1),
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n * mult),
        _ => Err(format!(
            "'{s}' is not a positive count (examples: 500000, 500k, 2M)"
        )),
    }
}

fn dpi_config(cli: &Cli) -> Result<Option<DpiConfig>> {
    let backend = match cli.dpi {
        DpiArg::Off => return Ok(None),
        DpiArg::Builtin => Backend::Builtin,
        DpiArg::Ndpi if !NDPI_AVAILABLE => bail!(
            "--dpi ndpi: this sonde was built without the nDPI backend; use --dpi builtin, or \
             rebuild with 'cargo build --release --features ndpi' (needs Debian's libndpi-dev)"
        ),
        DpiArg::Ndpi => Backend::Ndpi,
    };
    let mut services = Services::builtin();
    for path in &cli.dpi_services {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--dpi-services: cannot read '{}'", path.display()))?;
        services.load(&path.display().to_string(), &text)?;
    }
    Ok(Some(DpiConfig {
        backend,
        services: std::sync::Arc::new(services),
        ..DpiConfig::default()
    }))
}

/// The analytics flags: filter-sets compiled (a bad expression is an error naming its set
/// and label), thresholds parsed, outputs named.
fn analytics_settings(cli: &Cli) -> Result<Option<sonde_probe::AnalyticsSettings>> {
    use sonde_analytics::{AnalyticsConfig, FilterSetSpec, FilterSets, Thresholds};
    if cli.analytics == OnOff::Off {
        if !cli.filter_set.is_empty() || !cli.threshold.is_empty() || cli.alerts_out.is_some() {
            bail!(
                "--analytics off contradicts --filter-set, --threshold and --alerts-out: drop one or the other"
            );
        }
        return Ok(None);
    }
    if cli.top_interval == 0 || cli.top_interval > 3600 {
        bail!("--top-interval must be between 1 and 3600 seconds");
    }
    if cli.top_n == 0 || cli.top_n > 10_000 {
        bail!("--top-n must be between 1 and 10000");
    }
    let specs = cli
        .filter_set
        .iter()
        .map(|t| FilterSetSpec::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    let filter_sets = if specs.is_empty() {
        None
    } else {
        Some(std::sync::Arc::new(FilterSets::compile(&specs)?))
    };
    let thresholds = Thresholds::parse(&cli.threshold).map_err(anyhow::Error::msg)?;
    let history = cli.data_dir.clone().map(|d| {
        let max_age = (cli.history_max_age.max(0.0) * 86_400.0) as u64;
        (d, max_age)
    });
    Ok(Some(sonde_probe::AnalyticsSettings {
        config: AnalyticsConfig {
            interval_s: cli.top_interval,
            top_n: cli.top_n,
            thresholds,
            filter_sets,
            shards: cli.threads.max(1),
        },
        alerts_out: cli.alerts_out.clone(),
        history,
    }))
}

/// `sonde --threshold help`: the keys, their meaning and defaults.
fn print_threshold_keys() {
    println!("--threshold [NETWORK:]KEY=VALUE (VALUE: a number with k/M/G, or off)\n");
    for k in sonde_analytics::config::KEYS.iter() {
        let d = k.default.map_or("off".to_string(), |v| v.to_string());
        println!("  {:<20} default {:<8} {}", k.name, d, k.what);
    }
}

/// Loads (or, on first start, creates) the users file and the TLS files for `--http`.
fn server_guard(cli: &Cli) -> Result<sonde_server::Guard> {
    use sonde_server::users::{self, Role, Users};
    let tls = match (&cli.https_cert, &cli.https_key) {
        (Some(c), Some(k)) => Some(sonde_server::tls::config(c, k).map_err(anyhow::Error::msg)?),
        _ => None,
    };
    if cli.no_auth {
        if cli.users.is_some() {
            bail!("--users and --no-auth contradict each other: drop one");
        }
        return Ok(sonde_server::Guard { users: None, tls });
    }
    let path = cli.users.clone().unwrap_or_else(users::default_path);
    let mut list = Users::load(&path).map_err(anyhow::Error::msg)?;
    if !list.has_users() {
        let password = users::new_password().map_err(anyhow::Error::msg)?;
        list.set_user("admin", Role::Admin, &password)
            .map_err(anyhow::Error::msg)?;
        list.save().map_err(anyhow::Error::msg)?;
        // Printed once: only the hash is kept.
        eprintln!(
            "sonde: first start: created user \"admin\" with password {password} (kept hashed in \
             {}; change it with 'sonde user add admin --role admin')",
            path.display()
        );
    }
    Ok(sonde_server::Guard {
        users: Some(list),
        tls,
    })
}

fn main() -> ExitCode {
    // `sonde query …` reads a data directory, `sonde user …` edits the users file; everything
    // else runs the probe.
    let sub = std::env::args_os().nth(1);
    if sub.as_ref().is_some_and(|a| a == "query" || a == "user") {
        let args = std::env::args_os().skip(1);
        let done = if sub.is_some_and(|a| a == "query") {
            query::run(args)
        } else {
            user::run(args)
        };
        return match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
                eprintln!("sonde: error: {}", msg.join(": "));
                ExitCode::FAILURE
            }
        };
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .windows(2)
        .any(|w| w[0] == "--threshold" && w[1] == "help")
    {
        print_threshold_keys();
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's message spans several lines: keep the part before its usage and tips on
            // one line (a missing argument is named on the line after the first).
            let text = e.to_string();
            let what: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.trim_start().starts_with("tip:"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let what = what.join(" ");
            let what = what.trim_start_matches("error: ");
            eprintln!("sonde: error: {what} (see 'sonde --help')");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("sonde: error: {}", msg.join(": "));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let input = if let Some(p) = &cli.read {
        Input::File(p.clone())
    } else if let Some(i) = &cli.interface {
        Input::Live(i.clone())
    } else if let Some(s) = &cli.synthetic {
        Input::Synthetic(SyntheticSpec::parse(s)?)
    } else if !cli.collect.is_empty() {
        let sources: Result<Vec<_>, String> = cli
            .collect
            .iter()
            .map(|s| CollectSource::parse(s))
            .collect();
        Input::Collect(sources.map_err(anyhow::Error::msg)?)
    } else {
        bail!("no input: give -r FILE, -i IFACE or --synthetic SPEC");
    };
    if let (Some(path), Input::Synthetic(spec)) = (&cli.write, &input) {
        return write_synthetic(spec, path, cli.quiet);
    }
    if cli.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if cli.idle_timeout == 0 {
        bail!("--idle-timeout must be at least 1 second");
    }
    let source_name = match &input {
        Input::File(p) => p.display().to_string(),
        Input::Live(i) => format!("interface {i}"),
        Input::Synthetic(_) => format!("synthetic {}", cli.synthetic.as_deref().unwrap_or("")),
        Input::Collect(_) => format!("collector {}", cli.collect.join(" ")),
    };
    let is_live = matches!(input, Input::Live(_) | Input::Collect(_));
    let is_file = matches!(input, Input::File(_));
    let mut cfg = ProbeConfig::new(input);
    cfg.filter = cli.filter.clone();
    cfg.threads = cli.threads;
    cfg.replay = match cli.replay {
        ReplayArg::Fast => Replay::Fast,
        ReplayArg::Realtime => Replay::Realtime,
    };
    cfg.engine = EngineConfig {
        max_flows: cli.max_flows,
        max_hosts: cli.max_hosts,
        idle_timeout_ns: cli.idle_timeout * 1_000_000_000,
        active_timeout_ns: cli.active_timeout * 1_000_000_000,
        full_policy: match cli.table_full {
            TableFullArg::Evict => FullPolicy::EvictIdle,
            TableFullArg::Drop => FullPolicy::Drop,
        },
        ..EngineConfig::default()
    };
    let format = match cli.flows_format {
        FormatArg::Json => Format::Json,
        FormatArg::Csv => Format::Csv,
    };
    cfg.flows_out = cli.flows_out.clone().map(|p| (p, format));
    cfg.hosts_out = cli.hosts_out.clone();
    cfg.dpi = dpi_config(&cli)?;
    for text in &cli.export {
        let target = ExportTarget::parse(text).map_err(anyhow::Error::msg)?;
        cfg.extra_sinks.push(std::sync::Arc::new(move || {
            FlowExportSink::open(target.clone()).map(|s| Box::new(s) as Box<dyn RecordSink>)
        }));
    }
    for endpoint in &cli.zmq_export {
        let endpoint = endpoint.clone();
        cfg.extra_sinks.push(std::sync::Arc::new(move || {
            ZmqSink::connect(&endpoint).map(|s| Box::new(s) as Box<dyn RecordSink>)
        }));
    }
    if let Some(dir) = cli.data_dir.clone() {
        let ok = |x: f64| x >= 0.0 && x.is_finite();
        if !ok(cli.history_max_age) || !ok(cli.history_max_size) {
            bail!("--history-max-age and --history-max-size must be 0 or positive numbers");
        }
        let retention = sonde_history::store::Retention {
            max_age_ms: (cli.history_max_age * 86_400_000.0) as u64,
            max_bytes: (cli.history_max_size * (1u64 << 30) as f64) as u64,
            ..Default::default()
        };
        let mut series = sonde_history::series::Config::default();
        if let Some(text) = &cli.series_retention {
            let rows: Vec<u32> = text
                .split(',')
                .map(|v| v.trim().parse::<u32>())
                .collect::<Result<_, _>>()
                .ok()
                .filter(|v: &Vec<u32>| v.len() == 4)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--series-retention '{text}': give four row counts, for 1 s, 1 min, 1 h \
                         and 1 day, e.g. 3600,10080,8760,1826"
                    )
                })?;
            series.slots = [rows[0], rows[1], rows[2], rows[3]];
        }
        cfg.series = Some((dir.clone(), series));
        cfg.extra_sinks.push(std::sync::Arc::new(move || {
            HistorySink::open(&dir, retention).map(|s| Box::new(s) as Box<dyn RecordSink>)
        }));
    }
    cfg.analytics = analytics_settings(&cli)?;
    cfg.duration = match cli.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => {
            bail!("--duration must be a positive number of seconds")
        }
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let interval = match cli.stats_interval {
        Some(s) if s < 0.0 || !s.is_finite() => {
            bail!("--stats-interval must be 0 or a positive number of seconds")
        }
        Some(0.0) => None,
        Some(s) => Some(Duration::from_secs_f64(s)),
        None if is_live && !cli.quiet => Some(Duration::from_secs(1)),
        None => None,
    };

    let deadline = cfg.duration.map(|d| Instant::now() + d);
    cfg.linger = cli.http.is_some();
    // Bound before anything starts: an exposed address or a busy port is reported at once.
    let bound = cli
        .http
        .map(|a| sonde_server::bind(a, !cli.no_auth))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let guard = match cli.http {
        Some(_) => server_guard(&cli)?,
        None => sonde_server::Guard::default(),
    };
    let probe = sonde_probe::start(cfg)?;
    let server = match bound {
        Some(addr) => {
            let info = sonde_server::ServerInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                source: source_name.clone(),
                data_dir: cli.data_dir.clone(),
            };
            let scheme = if cli.https_cert.is_some() {
                "https"
            } else {
                "http"
            };
            let s =
                sonde_server::start(addr, probe.view(), info, guard).map_err(anyhow::Error::msg)?;
            if !cli.quiet {
                eprintln!(
                    "sonde: web console on {scheme}://{}/ (REST API under /api/v1/)",
                    s.addr
                );
            }
            Some(s)
        }
        None => None,
    };
    let stop = probe.stop_flag();
    ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
        .context("cannot install the Ctrl-C handler")?;

    let bar = (is_file && !cli.quiet && std::io::stderr().is_terminal()).then(|| {
        let (_, len) = probe.progress().unwrap_or((0, 0));
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut prev: Vec<ShardStats> = probe.shard_stats();
    let mut last = Instant::now();
    while !probe.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        if let (Some(b), Some((done, _))) = (&bar, probe.progress()) {
            b.set_position(done);
            let pkts: u64 = probe.shard_stats().iter().map(|s| s.packets).sum();
            b.set_message(format!("{} packets", format_count(pkts)));
        }
        if let Some(iv) = interval {
            if last.elapsed() >= iv {
                let now = probe.shard_stats();
                let dt = last.elapsed();
                let drops = probe.capture_drops();
                let mut lines = Vec::new();
                let mut total = ShardStats::default();
                let mut total_prev = ShardStats::default();
                for (i, (n, p)) in now.iter().zip(&prev).enumerate() {
                    lines.push(stats_line(&format!("shard{i}"), n, p, dt, 0));
                    total.merge(n);
                    total_prev.merge(p);
                }
                lines.push(stats_line(
                    "total",
                    &total,
                    &total_prev,
                    dt,
                    drops.dropped + drops.if_dropped,
                ));
                for l in lines {
                    match &bar {
                        Some(b) => b.println(l),
                        None => eprintln!("{l}"),
                    }
                }
                prev = now;
                last = Instant::now();
            }
        }
        // join() enforces --duration; leave the loop when it is reached.
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let summary = probe.join()?;
    drop(server);

    if let Some(path) = &cli.stats_json {
        let v = summary_json(&summary, &source_name, cli.threads);
        let mut out = open_text_output(path)?;
        serde_json::to_writer_pretty(&mut out, &v)
            .with_context(|| format!("cannot write '{}'", path.display()))?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    let t = &summary.total;
    if !cli.quiet {
        let secs = summary.elapsed.as_secs_f64();
        eprintln!(
            "sonde: {} packets ({} to flows, {} not IP, {} malformed, {} dropped), {} flows, {} hosts in {:.2} s ({:.2} Mpps)",
            format_count(t.packets),
            format_count(t.ip_packets),
            format_count(t.non_ip),
            format_count(t.malformed_total()),
            format_count(t.dropped_total()),
            format_count(t.flows_created),
            format_count(summary.distinct_hosts as u64),
            secs,
            if secs > 0.0 { t.packets as f64 / secs / 1e6 } else { 0.0 }
        );
    }
    if let Some(e) = &summary.error {
        eprintln!("sonde: error: {e}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn open_text_output(path: &std::path::Path) -> Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdout().lock()));
    }
    let f = std::fs::File::create(path)
        .with_context(|| format!("cannot create '{}'", path.display()))?;
    Ok(Box::new(std::io::BufWriter::new(f)))
}

/// The generator: P synthetic packets into a classic pcap, 1 µs apart, for peers to read.
fn write_synthetic(spec: &SyntheticSpec, path: &std::path::Path, quiet: bool) -> Result<ExitCode> {
    let Some(total) = spec.packets else {
        bail!("-w needs a packet count: add packets=P to --synthetic");
    };
    let mut w = PcapWriter::create(path, sonde_wire::LinkType::Ethernet)
        .with_context(|| format!("cannot create '{}'", path.display()))?;
    let mut src = SyntheticSource::new(spec.clone(), 0, 1);
    let start_ns: u64 = 1_700_000_000_000_000_000;
    let mut frame = Vec::new();
    let mut i: u64 = 0;
    while let Some(f) = src.next(start_ns + i * 1000) {
        frame.clear();
        frame.extend_from_slice(f.data);
        fix_ipv4_checksum(&mut frame);
        w.write(f.ts_ns, f.wire_len, &frame)
            .with_context(|| format!("cannot write '{}'", path.display()))?;
        i += 1;
    }
    w.finish()
        .with_context(|| format!("cannot write '{}'", path.display()))?;
    if !quiet {
        eprintln!(
            "sonde: wrote {} packets to {}",
            format_count(total),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
