//! `sonde`: the command-line probe. Only flags and glue live here; the work is in the library
//! crates (wire → capture → flow → probe → export).
//!
//! Flags follow tcpdump/ntopng/nProbe: `-r FILE`, `-i IFACE`, `-f 'BPF'`, `--threads N`. Every
//! failure ends as one `sonde: error: …` line on stderr and a non-zero exit code.

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches};
use cli::{Cli, DpiArg, FormatArg, OnOff, ReplayArg, TableFullArg};
use sonde_capture::{synthetic::fix_ipv4_checksum, PcapWriter, SyntheticSource, SyntheticSpec};
use sonde_dpi::{Backend, DpiConfig, Services, NDPI_AVAILABLE};
use sonde_export::Format;
use sonde_flow::{EngineConfig, FullPolicy, ShardStats};
use sonde_probe::sinks::{self, QueueRequest, RecordSink};
use sonde_probe::{
    format_count, stats_line, summary_json, CollectSource, ExportTarget, FlowExportSink,
    HistorySink, Input, ProbeConfig, Replay, SinkPlan, ZmqSink,
};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod cli;
mod config_file;
mod query;
mod user;

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

/// A network sink's URL without its queue options (`?when_full=block&queue=256`), and what
/// they ask for.
fn split_queue_options(text: &str, flag: &str) -> Result<(String, QueueRequest)> {
    QueueRequest::split(text).map_err(|e| anyhow::anyhow!("{flag} {e}"))
}

/// `sonde sinks`: every kind of flow sink, how to ask for it and what its queue does when full.
fn print_sinks() {
    println!("{:<11} {:<12} {:<9} how", "sink", "when full", "options");
    for k in sonde_probe::sinks::SINKS {
        println!(
            "{:<11} {:<12} {:<9} {}\n{:<34} {}",
            k.name,
            k.when_full.name(),
            if k.options { "yes" } else { "no" },
            k.usage,
            "",
            k.what
        );
    }
    println!(
        "\nQueue options go after the URL: ?when_full=block|drop_newest&queue=BATCHES (default {}).\n\
         'when full' is the default on live inputs (-i, --collect); on a file or synthetic input\n\
         every sink blocks unless its URL says otherwise.",
        sonde_probe::sinks::DEFAULT_QUEUE_BATCHES
    );
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
    // `sonde query …` reads a data directory, `sonde user …` edits the users file, `sonde
    // config …` checks or prints a config file; everything else runs the probe.
    let sub = std::env::args_os().nth(1);
    if sub.as_ref().is_some_and(|a| a == "sinks") {
        print_sinks();
        return ExitCode::SUCCESS;
    }
    if sub.as_ref().is_some_and(|a| a == "schema") {
        // The flow record's fields: JSON key, kind, unit, group, IPFIX element, history;
        // `--json` as /api/v1/schema answers.
        match std::env::args().nth(2).as_deref() {
            None => print!("{}", sonde_export::schema::markdown()),
            Some("--json") => println!("{:#}", sonde_export::schema::json()),
            Some(other) => {
                eprintln!("sonde: error: schema {other}: unknown option; use 'sonde schema' (Markdown) or 'sonde schema --json'");
                return ExitCode::from(2);
            }
        }
        return ExitCode::SUCCESS;
    }
    if sub
        .as_ref()
        .is_some_and(|a| a == "query" || a == "user" || a == "config")
    {
        let args = std::env::args_os().skip(1);
        let done = match sub.as_ref().and_then(|a| a.to_str()) {
            Some("query") => query::run(args),
            Some("user") => user::run(args),
            _ => config_command(args.skip(1).collect()),
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
    let cli = match parse_flags(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("sonde: error: {} (see 'sonde --help')", clap_error_line(&e));
            return ExitCode::from(2);
        }
    };
    let cli = match with_config_file(cli) {
        Ok(c) => c,
        Err(e) => return report_error(e),
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => report_error(e),
    }
}

fn report_error(e: anyhow::Error) -> ExitCode {
    let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    eprintln!("sonde: error: {}", msg.join(": "));
    ExitCode::FAILURE
}

/// `sonde config example` prints a commented file; `sonde config check FILE [FLAGS…]` reads
/// it (with any flags, as a run would) and checks every setting without starting anything.
fn config_command(args: Vec<std::ffi::OsString>) -> Result<()> {
    const USAGE: &str = "usage: sonde config example | sonde config check FILE [FLAGS…]";
    match args.first().and_then(|a| a.to_str()) {
        Some("example") if args.len() == 1 => {
            print!("{}", config_file::EXAMPLE);
            Ok(())
        }
        Some("check") if args.len() >= 2 => {
            let mut argv: Vec<std::ffi::OsString> = vec!["sonde".into(), "--config".into()];
            argv.extend(args[1..].iter().cloned());
            let flags = parse_flags(argv).map_err(|e| anyhow::anyhow!(clap_error_line(&e)))?;
            let cli = with_config_file(flags)?;
            let p = prepare(&cli)?;
            let sinks = p.cfg.extra_sinks.len()
                + usize::from(p.cfg.flows_out.is_some())
                + usize::from(p.cfg.hosts_out.is_some());
            println!(
                "{}: ok (input {}, {} shard(s), {} flow/host sink(s){}{})",
                args[1].to_string_lossy(),
                p.source_name,
                p.cfg.threads * p.cfg.inputs.len(),
                sinks,
                cli.http
                    .map(|a| format!(", web console on {a}"))
                    .unwrap_or_default(),
                cli.data_dir
                    .as_ref()
                    .map(|d| format!(", history in {}", d.display()))
                    .unwrap_or_default(),
            );
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// The flags, and which of them the command line gave (the config file fills the others).
struct Flags {
    cli: Cli,
    matches: clap::ArgMatches,
}

fn parse_flags<I, T>(args: I) -> Result<Flags, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Cli::command().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok(Flags { cli, matches })
}

/// clap's message spans several lines: the part before its usage and tips, on one line (a
/// missing argument is named on the line after the first).
fn clap_error_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let what: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.trim_start().starts_with("tip:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    what.join(" ").trim_start_matches("error: ").to_string()
}

/// `--config FILE` laid under the flags, then the input rules checked on the result.
fn with_config_file(flags: Flags) -> Result<Cli> {
    let Flags { mut cli, matches } = flags;
    if let Some(path) = cli.config.clone() {
        let file = config_file::load(&path)?;
        let base = path.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        config_file::apply(file, &base, &mut cli, &matches);
    }
    let others = !cli.interface.is_empty() || cli.synthetic.is_some() || !cli.collect.is_empty();
    match (cli.read.is_some(), others) {
        (false, false) => bail!(
            "no input: give -r FILE, -i IFACE, --synthetic SPEC or --collect SOURCE (or an \
             [input] section in --config FILE)"
        ),
        (true, true) => bail!(
            "{}-r FILE is read alone (it replays its own time and ends by itself): drop -i, \
             --synthetic and --collect (or [input]'s interface, synthetic and collect), or run \
             a second sonde for them",
            cli.config
                .as_deref()
                .map(|p| format!("{}: ", p.display()))
                .unwrap_or_default()
        ),
        _ => Ok(cli),
    }
}

/// What the flags (and the config file) amount to, checked: everything but the start.
struct Prepared {
    cfg: ProbeConfig,
    source_name: String,
    is_file: bool,
    stats_every: Option<Duration>,
}

/// Checks every setting and builds the probe's configuration; nothing is opened or started
/// (`sonde config check` stops here).
fn prepare(cli: &Cli) -> Result<Prepared> {
    let mut inputs = Vec::new();
    let mut names = Vec::new();
    if let Some(p) = &cli.read {
        inputs.push(Input::File(p.clone()));
        names.push(p.display().to_string());
    }
    for i in &cli.interface {
        inputs.push(Input::Live(i.clone()));
        names.push(format!("interface {i}"));
    }
    if let Some(s) = &cli.synthetic {
        inputs.push(Input::Synthetic(SyntheticSpec::parse(s)?));
        names.push(format!("synthetic {s}"));
    }
    if !cli.collect.is_empty() {
        let sources: Result<Vec<_>, String> = cli
            .collect
            .iter()
            .map(|s| CollectSource::parse(s))
            .collect();
        inputs.push(Input::Collect(sources.map_err(anyhow::Error::msg)?));
        names.push(format!("collector {}", cli.collect.join(" ")));
    }
    if inputs.is_empty() {
        bail!("no input: give -r FILE, -i IFACE, --synthetic SPEC or --collect SOURCE");
    }
    if cli.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if cli.idle_timeout == 0 {
        bail!("--idle-timeout must be at least 1 second");
    }
    let source_name = names.join(" + ");
    let is_live = inputs.iter().any(Input::is_live);
    let is_file = cli.read.is_some();
    let mut cfg = ProbeConfig::with_inputs(inputs);
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
    cfg.dpi = dpi_config(cli)?;
    for text in &cli.export {
        let (url, req) = split_queue_options(text, "--export")?;
        let target = ExportTarget::parse(&url).map_err(anyhow::Error::msg)?;
        let kind = target.kind();
        let queue = sinks::registered(kind).queue(req, is_live);
        cfg.extra_sinks.push(SinkPlan {
            kind,
            queue,
            make: std::sync::Arc::new(move || {
                FlowExportSink::open(target.clone()).map(|s| Box::new(s) as Box<dyn RecordSink>)
            }),
        });
    }
    for text in &cli.zmq_export {
        let (endpoint, req) = split_queue_options(text, "--zmq-export")?;
        let queue = sinks::registered("zmq").queue(req, is_live);
        cfg.extra_sinks.push(SinkPlan {
            kind: "zmq",
            queue,
            make: std::sync::Arc::new(move || {
                ZmqSink::connect(&endpoint).map(|s| Box::new(s) as Box<dyn RecordSink>)
            }),
        });
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
        cfg.extra_sinks.push(SinkPlan {
            kind: "history",
            queue: sinks::registered("history").queue(QueueRequest::default(), is_live),
            make: std::sync::Arc::new(move || {
                HistorySink::open(&dir, retention).map(|s| Box::new(s) as Box<dyn RecordSink>)
            }),
        });
    }
    cfg.analytics = analytics_settings(cli)?;
    cfg.duration = match cli.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => {
            bail!("--duration must be a positive number of seconds")
        }
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let stats_every = match cli.stats_interval {
        Some(s) if s < 0.0 || !s.is_finite() => {
            bail!("--stats-interval must be 0 or a positive number of seconds")
        }
        Some(0.0) => None,
        Some(s) => Some(Duration::from_secs_f64(s)),
        None if is_live && !cli.quiet => Some(Duration::from_secs(1)),
        None => None,
    };

    Ok(Prepared {
        cfg,
        source_name,
        is_file,
        stats_every,
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    if let (Some(path), Some(spec)) = (&cli.write, &cli.synthetic) {
        return write_synthetic(&SyntheticSpec::parse(spec)?, path, cli.quiet);
    }
    let Prepared {
        mut cfg,
        source_name,
        is_file,
        stats_every: interval,
    } = prepare(&cli)?;
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
        let v = summary_json(&summary, &source_name, summary.shards.len());
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
