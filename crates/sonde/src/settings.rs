//! From the command line to the probe's configuration (ripgrep's low-level → high-level
//! arguments): the flags as clap parses them, the config file laid under them, the input
//! rules, then every setting checked and turned into a [`ProbeConfig`]. Nothing is opened or
//! started here (`sonde config check` stops after [`prepare`]).

use crate::cli::{CaptureArg, Cli, DpiArg, FormatArg, OnOff, ReplayArg, TableFullArg};
use crate::config_file;
use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches};
use sonde_capture::{CaptureBackend, SyntheticSpec};
use sonde_dpi::{Backend, DpiConfig, Services, NDPI_AVAILABLE};
use sonde_export::Format;
use sonde_flow::{EngineConfig, FullPolicy};
use sonde_probe::sinks::{self, QueueRequest, RecordSink};
use sonde_probe::{
    CollectSource, ExportSpec, HistorySink, Input, ProbeConfig, Replay, SinkPlan, ZmqSink,
};
use std::time::Duration;

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
        if !cli.filter_set.is_empty() || !cli.threshold.is_empty() {
            bail!(
                "--analytics off contradicts --filter-set and --threshold: drop one or the other"
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
        history,
    }))
}

/// The alert flags: exclusions and limits parsed, the list of hosts read (errors name the
/// flag and what to write instead).
fn alert_settings(cli: &Cli) -> Result<sonde_probe::AlertSettings> {
    let exclusions = cli
        .alert_exclude
        .iter()
        .map(|t| {
            sonde_alerts::Exclusion::parse(t)
                .map_err(|e| anyhow::anyhow!("--alert-exclude {t:?}: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut engine = sonde_alerts::Config::default();
    let mut silent = None;
    if let Some(text) = &cli.alert_limits {
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                anyhow::anyhow!(
                    "--alert-limits {part:?}: use hold=SECS, burst=N, per_minute=N, per_entity_hour=N or exporter_silent=SECS (whole numbers)"
                )
            };
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let n: u64 = v.trim().parse().map_err(|_| bad())?;
            let small = || u32::try_from(n).map_err(|_| bad());
            match k.trim() {
                "hold" => engine.hold_s = n,
                "burst" => engine.type_burst = small()?.max(1),
                "per_minute" => engine.type_per_minute = small()?,
                "per_entity_hour" => engine.entity_per_hour = small()?.max(1),
                "exporter_silent" => silent = Some(n.max(1)),
                _ => return Err(bad()),
            }
        }
    }
    let mut checks = sonde_probe::CheckSettings {
        history_cap: (cli.history_max_size.max(0.0) * (1u64 << 30) as f64) as u64,
        ..Default::default()
    };
    if let Some(s) = silent {
        checks.exporter_silent_s = s;
    }
    if let Some(p) = &cli.alert_hosts {
        checks.listed = sonde_probe::alerts::read_list(p).map_err(anyhow::Error::msg)?;
        checks.listed_file = Some(p.clone());
    }
    let notify = cli
        .notify
        .iter()
        .map(|u| sonde_notify::parse(u).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    Ok(sonde_probe::AlertSettings {
        notify,
        notify_options: Default::default(),
        scripts: cli.script.clone(),
        script_limits: Default::default(),
        engine,
        exclusions,
        alerts_out: cli.alerts_out.clone(),
        history: cli.data_dir.clone().map(|d| {
            let max_age = (cli.history_max_age.max(0.0) * 86_400.0) as u64;
            (d, max_age)
        }),
        checks,
    })
}

/// Trigger capture: the rules of every --trigger-capture, and the directory checked now.
fn trigger_settings(cli: &Cli) -> Result<Option<sonde_trigger::TriggerConfig>> {
    let rules: Vec<sonde_trigger::Rule> = cli.trigger_capture.iter().flatten().cloned().collect();
    if rules.is_empty() {
        if cli.trigger_dir.is_some() {
            bail!("--trigger-dir is only used with --trigger-capture TYPE: add it, or drop --trigger-dir");
        }
        return Ok(None);
    }
    let mut kinds: Vec<&str> = rules.iter().map(|r| r.kind.as_str()).collect();
    kinds.sort_unstable();
    if let Some(w) = kinds.windows(2).find(|w| w[0] == w[1]) {
        bail!("--trigger-capture: '{}' is given twice", w[0]);
    }
    let Some(dir) = cli.trigger_dir.clone() else {
        bail!("--trigger-capture needs --trigger-dir DIR (where the pcap files go)");
    };
    sonde_trigger::check_dir(&dir).map_err(|e| anyhow::anyhow!("--trigger-dir {e}"))?;
    let mut t = sonde_trigger::TriggerConfig::new(rules, dir);
    t.pre_ns = (cli.trigger_pre * 1e9) as u64;
    t.max_bytes = cli.trigger_max_mb.saturating_mul(sonde_trigger::MIB);
    t.max_seconds = cli.trigger_max_seconds;
    t.ring_bytes = (cli.trigger_ring_mb * sonde_trigger::MIB) as usize;
    Ok(Some(t))
}

/// Egress: the selectors and destinations of the `--egress-*` flags (None when no
/// destination is given; a selector without one is a mistake said now).
fn egress_settings(cli: &Cli, dpi: bool) -> Result<Option<sonde_egress::EgressConfig>> {
    if cli.egress_pcap.is_none() && cli.egress_iface.is_none() {
        let selector = [
            (cli.egress_bpf.is_some(), "--egress-bpf"),
            (cli.egress_hosts.is_some(), "--egress-hosts"),
            (cli.egress_app.is_some(), "--egress-app"),
            (cli.egress_shunt_after > 0, "--egress-shunt-after"),
        ]
        .into_iter()
        .find(|(given, _)| *given);
        if let Some((_, flag)) = selector {
            bail!("{flag} chooses packets for egress, which needs a destination: add --egress-pcap DIR or --egress-iface IFACE");
        }
        return Ok(None);
    }
    if cli.egress_app.is_some() && !dpi {
        bail!("--egress-app selects flows by their application, which needs DPI: drop --dpi off");
    }
    Ok(Some(sonde_egress::EgressConfig {
        bpf: cli.egress_bpf.clone(),
        hosts: cli.egress_hosts.clone().map(|h| h.0).unwrap_or_default(),
        apps: cli.egress_app.clone().map(|a| a.0).unwrap_or_default(),
        undecided: match cli.egress_undecided {
            crate::cli::UndecidedArg::Forward => sonde_egress::Undecided::Forward,
            crate::cli::UndecidedArg::Shunt => sonde_egress::Undecided::Shunt,
        },
        shunt_after: cli.egress_shunt_after,
        pcap_dir: cli.egress_pcap.clone(),
        file_bytes: cli.egress_file_mb.saturating_mul(1 << 20),
        files: cli.egress_files.min(1 << 20) as usize,
        iface: cli.egress_iface.clone(),
    }))
}

/// Loads (or, on first start, creates) the users file and the TLS files for `--http`.
pub(crate) fn server_guard(cli: &Cli) -> Result<sonde_server::Guard> {
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

/// The flags, and which of them the command line gave (the config file fills the others).
pub(crate) struct Flags {
    pub(crate) cli: Cli,
    pub(crate) matches: clap::ArgMatches,
}

pub(crate) fn parse_flags<I, T>(args: I) -> Result<Flags, clap::Error>
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
pub(crate) fn clap_error_line(e: &clap::Error) -> String {
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
pub(crate) fn with_config_file(flags: Flags) -> Result<Cli> {
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
pub(crate) struct Prepared {
    pub(crate) cfg: ProbeConfig,
    pub(crate) source_name: String,
    pub(crate) is_file: bool,
    pub(crate) stats_every: Option<Duration>,
}

/// Checks every setting and builds the probe's configuration; nothing is opened or started
/// (`sonde config check` stops here).
pub(crate) fn prepare(cli: &Cli) -> Result<Prepared> {
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
    cfg.cpus = cli.cpus.as_ref().map(|c| c.0.clone());
    cfg.live.backend = match cli.capture {
        CaptureArg::Auto => CaptureBackend::Auto,
        CaptureArg::Ring => CaptureBackend::Ring,
        CaptureArg::Xdp => CaptureBackend::Xdp,
        CaptureArg::Pcap => CaptureBackend::Pcap,
    };
    cfg.live.ring_bytes = (cli.capture_ring_mb << 20) as usize;
    cfg.live.ring_block_bytes = (cli.capture_block_kb << 10) as usize;
    cfg.live.block_ms = cli.capture_block_ms as i32;
    cfg.replay = match cli.replay {
        ReplayArg::Fast => Replay::Fast,
        ReplayArg::Realtime => Replay::Realtime,
        ReplayArg::Loop => Replay::Loop,
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
    cfg.local_networks = cli
        .local_networks
        .iter()
        .flat_map(|n| n.list().iter().copied())
        .collect::<Vec<_>>()
        .into();
    if let Some(dir) = &cli.geoip_dir {
        let db = sonde_geo::GeoDb::open_dir(dir).map_err(anyhow::Error::msg)?;
        eprintln!("sonde: {}", db.describe());
        cfg.geo = Some(std::sync::Arc::new(db));
    }
    cfg.flows_out = cli.flows_out.clone().map(|p| (p, format));
    cfg.hosts_out = cli.hosts_out.clone();
    cfg.dpi = dpi_config(cli)?;
    for text in &cli.export {
        let spec = ExportSpec::parse(text).map_err(anyhow::Error::msg)?;
        cfg.extra_sinks
            .push(spec.with_geo(cfg.geo.clone()).plan(is_live));
    }
    for text in &cli.zmq_export {
        let (endpoint, req) = QueueRequest::split_allowing(text, ZmqSink::OPTIONS)
            .map_err(|e| anyhow::anyhow!("--zmq-export {e}"))?;
        // A bad key file or option is named at start, not when the sink starts.
        ZmqSink::check(&endpoint).map_err(anyhow::Error::msg)?;
        let queue = sinks::registered("zmq").queue(req, is_live);
        let geo = cfg.geo.clone();
        cfg.extra_sinks.push(SinkPlan {
            kind: "zmq",
            queue,
            make: std::sync::Arc::new(move || {
                ZmqSink::connect(&endpoint)
                    .map(|s| Box::new(s.with_geo(geo.clone())) as Box<dyn RecordSink>)
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
        if cli.series_reuse_after != 0 && cli.series_reuse_after < 120 {
            bail!(
                "--series-reuse-after {}: give 0 (never reuse a series column) or at least 120 \
                 seconds",
                cli.series_reuse_after
            );
        }
        series.reuse_after = cli.series_reuse_after;
        cfg.series = Some((dir.clone(), series));
        if cli.host_cache_max > sonde_history::hostcache::MAX_ENTRIES_LIMIT {
            bail!(
                "--host-cache-max {}: at most {}",
                cli.host_cache_max,
                sonde_history::hostcache::MAX_ENTRIES_LIMIT
            );
        }
        cfg.host_cache_max = cli.host_cache_max;
        cfg.extra_sinks.push(SinkPlan {
            kind: "history",
            queue: sinks::registered("history").queue(QueueRequest::default(), is_live),
            make: std::sync::Arc::new(move || {
                HistorySink::open(&dir, retention).map(|s| Box::new(s) as Box<dyn RecordSink>)
            }),
        });
    }
    cfg.analytics = analytics_settings(cli)?;
    cfg.alerts = Some(alert_settings(cli)?);
    cfg.trigger = trigger_settings(cli)?;
    cfg.egress = egress_settings(cli, cfg.dpi.is_some())?;
    if cfg.trigger.is_some() && cfg.analytics.is_none() {
        bail!("--trigger-capture needs the analytics (their detections start captures): drop --analytics off");
    }
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
