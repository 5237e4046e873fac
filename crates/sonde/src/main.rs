//! `sonde`: the command-line probe. Only flags and glue live here; the work is in the library
//! crates (wire → capture → flow → probe → export). A run is flags → settings (cli.rs, the
//! config file laid under them, settings.rs checks everything into a `ProbeConfig`) → start
//! (`sonde_probe::start` builds every source and sink, or says which one cannot be) → run
//! (this file: the stats lines, the progress bar, the summary). Subcommands are in
//! commands.rs, query.rs and user.rs.
//!
//! Flags follow tcpdump/ntopng/nProbe: `-r FILE`, `-i IFACE`, `-f 'BPF'`, `--threads N`. Every
//! failure ends as one `sonde: error: …` line on stderr and a non-zero exit code.

use anyhow::{Context, Result};
use cli::Cli;
use settings::{clap_error_line, parse_flags, prepare, server_guard, with_config_file, Prepared};
use sonde_capture::SyntheticSpec;
use sonde_flow::ShardStats;
use sonde_probe::{format_count, stats_line, summary_json};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod cli;
mod commands;
mod config_file;
mod query;
mod settings;
mod user;

fn main() -> ExitCode {
    // `sonde query …` reads a data directory, `sonde user …` edits the users file, `sonde
    // config …` checks or prints a config file; everything else runs the probe.
    let sub = std::env::args_os().nth(1);
    if sub.as_ref().is_some_and(|a| a == "sinks") {
        commands::print_sinks();
        return ExitCode::SUCCESS;
    }
    if sub.as_ref().is_some_and(|a| a == "sources") {
        commands::print_sources();
        return ExitCode::SUCCESS;
    }
    if sub.as_ref().is_some_and(|a| a == "zmq-keygen") {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return commands::zmq_keygen_command(&args);
    }
    if sub.as_ref().is_some_and(|a| a == "geoip") {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return commands::geoip_command(&args);
    }
    if sub.as_ref().is_some_and(|a| a == "schema") {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return commands::schema_command(&args);
    }
    if sub
        .as_ref()
        .is_some_and(|a| a == "query" || a == "user" || a == "config")
    {
        let args = std::env::args_os().skip(1);
        let done = match sub.as_ref().and_then(|a| a.to_str()) {
            Some("query") => query::run(args),
            Some("user") => user::run(args),
            _ => commands::config_command(args.skip(1).collect()),
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
        commands::print_threshold_keys();
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

fn run(cli: Cli) -> Result<ExitCode> {
    if let (Some(path), Some(spec)) = (&cli.write, &cli.synthetic) {
        return commands::write_synthetic(&SyntheticSpec::parse(spec)?, path, cli.quiet);
    }
    let Prepared {
        mut cfg,
        source_name,
        is_file,
        stats_every: interval,
    } = prepare(&cli)?;
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    return_free_memory_now_and_then();
    cfg.linger = cli.http.is_some();
    if cli.http.is_some() {
        raise_open_files();
    }
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
    // Checked before the probe starts: a wrong URL is one error line, not a console without
    // history.
    let flow_history = cli
        .history
        .as_deref()
        .map(|u| sonde_probe::ClickHouseHistory::open(u).map(std::sync::Arc::new))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let probe = sonde_probe::start(cfg)?;
    if !cli.quiet {
        for (name, backend) in probe.view().capture_backends() {
            eprintln!("sonde: capturing on {name} through {backend}");
        }
    }
    let server = match bound {
        Some(addr) => {
            let info = sonde_server::ServerInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                source: source_name.clone(),
                data_dir: cli.data_dir.clone(),
                flow_history,
                traffic_clock: is_file,
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
                // A shard's line: what its own socket's ring dropped (the interface's own
                // drops are the whole interface's, in the total).
                let shard_drops = probe.view().capture_drops_by_shard();
                let mut lines = Vec::new();
                let mut total = ShardStats::default();
                let mut total_prev = ShardStats::default();
                for (i, (n, p)) in now.iter().zip(&prev).enumerate() {
                    let dropped = shard_drops.get(i).map_or(0, |d| d.dropped);
                    lines.push(stats_line(&format!("shard{i}"), n, p, dt, dropped));
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
    if let (false, Some(files)) = (cli.quiet, &summary.trigger_files) {
        for f in files {
            eprintln!(
                "sonde: trigger capture {}: {} packets{}{}{}",
                f.path.display(),
                format_count(f.packets),
                if f.dropped > 0 {
                    format!(", {} dropped", format_count(f.dropped))
                } else {
                    String::new()
                },
                f.truncated_by
                    .map(|c| format!(
                        ", cut by --trigger-max-{}",
                        if c.name() == "bytes" { "mb" } else { "seconds" }
                    ))
                    .unwrap_or_default(),
                f.error
                    .as_ref()
                    .map(|e| format!(", error: {e}"))
                    .unwrap_or_default(),
            );
        }
    }
    if let (false, Some(e)) = (cli.quiet, &summary.egress) {
        let c = e.counts;
        eprintln!(
            "sonde: egress: {} forwarded ({} bytes), {} shunted, {} dropped{}",
            format_count(c.forwarded),
            format_count(c.forwarded_bytes),
            format_count(c.shunted),
            format_count(c.dropped),
            match e.files.len() {
                0 => String::new(),
                n => format!(", {n} pcap file{} kept", if n == 1 { "" } else { "s" }),
            }
        );
    }
    if let Some(e) = summary.egress.as_ref().and_then(|e| e.errors.first()) {
        // Dropped frames are counted; what made them drop is said once.
        eprintln!("sonde: egress: {e}");
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

/// Seconds between two hand-backs of free heap memory (`SONDE_MALLOC_TRIM_S`; 0: never).
const MALLOC_TRIM_S: u64 = 10;

/// Hands the heap's free pages back to the system every [`MALLOC_TRIM_S`] seconds (glibc).
///
/// Why: glibc's malloc keeps what a thread frees in that thread's arena for its next
/// allocation, and returns it to the system only from the top of an arena. The web API and the
/// analytics make large short-lived buffers on many threads (a query's JSON, a snapshot), so
/// the free space held grows with the hours while the live heap stays flat: in the soak test
/// at 22 minutes, one `malloc_trim(0)` took RSS from 917 to 471 MiB (BENCHMARKS.md §19).
/// `malloc_trim(0)` releases the free pages inside every arena (`madvise`), not only the top.
fn return_free_memory_now_and_then() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let every = match std::env::var("SONDE_MALLOC_TRIM_S") {
            Ok(v) => match v.trim().parse::<u64>() {
                Ok(s) => s,
                Err(_) => {
                    eprintln!(
                        "sonde: warning: SONDE_MALLOC_TRIM_S={v:?} is not a number of seconds; \
                         using {MALLOC_TRIM_S}"
                    );
                    MALLOC_TRIM_S
                }
            },
            Err(_) => MALLOC_TRIM_S,
        };
        if every == 0 {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(every));
                // SAFETY: malloc_trim takes no pointers; it locks each arena while it works.
                unsafe {
                    libc::malloc_trim(0);
                }
            });
    }
}

/// Raises the soft limit of open files to the hard one: the web server holds a descriptor per
/// connection, and the common soft limit of 1024 is within reach of a few idle clients.
fn raise_open_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit fill and read a valid rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max.min(1 << 20);
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
