//! `--config FILE`: the same settings as the flags, in TOML. The file is read into [`File`]
//! (every key optional, unknown keys refused), then laid under the flags: a flag given on the
//! command line wins, a list flag (`--export`, `--threshold`, …) adds to the file's list, and
//! an input flag (`-r`, `-i`, `--synthetic`, `--collect`) replaces the file's input. What
//! follows is the flags' own path, so a run described by a file and the same run described by
//! flags are the same run.
//!
//! Values are checked as they are read, with the parser the flag uses, so an error names the
//! file, the line and the key (`sonde.toml line 7, key flows.max_flows: …`).

use crate::cli::{Cli, DpiArg, FormatArg, OnOff, ReplayArg, TableFullArg};
use anyhow::{anyhow, Context, Result};
use clap::parser::ValueSource;
use clap::ArgMatches;
use serde::{Deserialize, Deserializer};
use std::path::{Path, PathBuf};

/// The whole file. Sections follow the README's grouping of the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub input: InputSection,
    #[serde(default)]
    pub flows: FlowsSection,
    #[serde(default)]
    pub dpi: DpiSection,
    #[serde(default)]
    pub output: OutputSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub history: HistorySection,
    #[serde(default)]
    pub analytics: AnalyticsSection,
    #[serde(default)]
    pub alerts: AlertsSection,
    #[serde(default)]
    pub trigger: TriggerSection,
    #[serde(default)]
    pub egress: EgressSection,
}

/// `[egress]`: the packets of chosen flows to a pcap ring or an interface (`--egress-*`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSection {
    pub pcap_dir: Option<PathBuf>,
    pub iface: Option<String>,
    pub bpf: Option<String>,
    /// `["10.0.0.0/8", "192.0.2.7"]`, `"10.0.0.0/8,192.0.2.7"` or `"@hosts.txt"`.
    #[serde(default, deserialize_with = "egress_hosts")]
    pub hosts: Option<crate::cli::EgressHosts>,
    /// `["DNS", "TLS"]` or `"DNS,TLS"`.
    #[serde(default, deserialize_with = "egress_apps")]
    pub apps: Option<crate::cli::EgressApps>,
    /// `"forward"` or `"shunt"`.
    pub undecided: Option<crate::cli::UndecidedArg>,
    pub shunt_after: Option<u64>,
    #[serde(default, deserialize_with = "positive_whole")]
    pub file_mb: Option<u64>,
    #[serde(default, deserialize_with = "positive_whole")]
    pub files: Option<u64>,
}

fn egress_hosts<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::cli::EgressHosts>, D::Error> {
    let items = one_or_many(d)?.unwrap_or_default();
    crate::cli::parse_egress_hosts(&items.join(","))
        .map(Some)
        .map_err(custom)
}

fn egress_apps<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::cli::EgressApps>, D::Error> {
    let items = one_or_many(d)?.unwrap_or_default();
    crate::cli::parse_egress_apps(&items.join(","))
        .map(Some)
        .map_err(custom)
}

/// `[trigger]`: trigger capture (`--trigger-*`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSection {
    /// `["syn_flood", "ddos:both"]`, each as `--trigger-capture` takes it.
    #[serde(default, deserialize_with = "trigger_rules")]
    pub capture: Option<Vec<Vec<sonde_trigger::Rule>>>,
    pub dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "trigger_pre")]
    pub pre: Option<f64>,
    #[serde(default, deserialize_with = "positive_whole")]
    pub max_mb: Option<u64>,
    #[serde(default, deserialize_with = "positive_whole")]
    pub max_seconds: Option<u64>,
    #[serde(default, deserialize_with = "ring_mb")]
    pub ring_mb: Option<u64>,
}

fn trigger_rules<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<Vec<sonde_trigger::Rule>>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    v.iter()
        .map(|s| crate::cli::parse_trigger_rules(s))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(custom)
}

fn trigger_pre<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    crate::cli::parse_trigger_pre(&v.to_string())
        .map(Some)
        .map_err(custom)
}

fn positive_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = u64::deserialize(d)?;
    crate::cli::parse_positive_u64(&v.to_string())
        .map(Some)
        .map_err(custom)
}

fn ring_mb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = u64::deserialize(d)?;
    crate::cli::parse_ring_mb(&v.to_string())
        .map(Some)
        .map_err(custom)
}

fn block_kb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = u64::deserialize(d)?;
    crate::cli::parse_block_kb(&v.to_string())
        .map(Some)
        .map_err(custom)
}

fn block_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = u64::deserialize(d)?;
    crate::cli::parse_block_ms(&v.to_string())
        .map(Some)
        .map_err(custom)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSection {
    pub read: Option<PathBuf>,
    #[serde(default, deserialize_with = "one_or_many")]
    pub interface: Option<Vec<String>>,
    #[serde(default, deserialize_with = "synthetic_spec")]
    pub synthetic: Option<String>,
    #[serde(default, deserialize_with = "collect_sources")]
    pub collect: Option<Vec<String>>,
    pub filter: Option<String>,
    pub replay: Option<ReplayArg>,
    #[serde(default, deserialize_with = "threads")]
    pub threads: Option<usize>,
    /// `--cpus`: "2-9" or "0,2,4-7".
    #[serde(default, deserialize_with = "cpus")]
    pub cpus: Option<crate::cli::CpuList>,
    /// `--capture`: "auto", "ring", "xdp" or "pcap".
    pub capture: Option<crate::cli::CaptureArg>,
    #[serde(default, deserialize_with = "ring_mb")]
    pub capture_ring_mb: Option<u64>,
    #[serde(default, deserialize_with = "block_kb")]
    pub capture_block_kb: Option<u64>,
    #[serde(default, deserialize_with = "block_ms")]
    pub capture_block_ms: Option<u64>,
    #[serde(default, deserialize_with = "positive_seconds")]
    pub duration: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowsSection {
    #[serde(default, deserialize_with = "whole_seconds")]
    pub idle_timeout: Option<u64>,
    pub active_timeout: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub max_flows: Option<usize>,
    #[serde(default, deserialize_with = "count")]
    pub max_hosts: Option<usize>,
    pub table_full: Option<TableFullArg>,
    /// `["10.0.0.0/8", "2001:db8::/32"]` (each item may be a comma list, as the flag takes).
    #[serde(default, deserialize_with = "local_networks")]
    pub local_networks: Option<Vec<sonde_analytics::Networks>>,
    /// `--geoip-dir`.
    pub geoip_dir: Option<PathBuf>,
}

fn local_networks<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<sonde_analytics::Networks>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    v.iter()
        .map(|s| crate::cli::parse_local_networks(s))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(custom)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpiSection {
    pub mode: Option<DpiArg>,
    pub services: Option<Vec<PathBuf>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    pub flows: Option<PathBuf>,
    pub flows_format: Option<FormatArg>,
    pub hosts: Option<PathBuf>,
    pub stats_json: Option<PathBuf>,
    #[serde(default, deserialize_with = "seconds_or_zero")]
    pub stats_interval: Option<f64>,
    pub quiet: Option<bool>,
    /// Flow export to collectors (`--export`): URLs, or tables with `to` and queue options.
    #[serde(default, deserialize_with = "export_targets")]
    pub export: Option<Vec<String>>,
    #[serde(default, deserialize_with = "zmq_endpoints")]
    pub zmq_export: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    #[serde(default, deserialize_with = "socket_addr")]
    pub listen: Option<std::net::SocketAddr>,
    pub users: Option<PathBuf>,
    pub no_auth: Option<bool>,
    pub https_cert: Option<PathBuf>,
    pub https_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySection {
    pub data_dir: Option<PathBuf>,
    /// `--history`: clickhouse://HOST:PORT/DB[?table=T].
    pub url: Option<String>,
    #[serde(default, deserialize_with = "seconds_or_zero")]
    pub max_age_days: Option<f64>,
    #[serde(default, deserialize_with = "seconds_or_zero")]
    pub max_size_gib: Option<f64>,
    #[serde(default, deserialize_with = "series_retention")]
    pub series_retention: Option<String>,
    pub series_reuse_after: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub host_cache_max: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsSection {
    pub out: Option<PathBuf>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub limits: Option<String>,
    pub hosts: Option<PathBuf>,
    #[serde(default)]
    pub notify: Vec<String>,
    #[serde(default)]
    pub scripts: Vec<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalyticsSection {
    pub enabled: Option<bool>,
    pub top_interval: Option<u64>,
    pub top_n: Option<usize>,
    /// Kept for old files: `[alerts] out` is the same.
    pub alerts_out: Option<PathBuf>,
    #[serde(default, deserialize_with = "thresholds")]
    pub thresholds: Option<Vec<String>>,
    #[serde(default)]
    pub filter_set: Vec<FilterSetTable>,
}

/// `[[analytics.filter_set]]`: `name` and `match = ["LABEL: EXPR", …]`; the expressions are
/// compiled by libpcap as the file is read.
#[derive(Debug)]
pub struct FilterSetTable {
    pub spec: String,
}

impl<'de> Deserialize<'de> for FilterSetTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            name: String,
            #[serde(rename = "match")]
            lines: Vec<String>,
        }
        let raw = Raw::deserialize(d)?;
        if let Some(l) = raw.lines.iter().find(|l| l.contains(';')) {
            return Err(serde::de::Error::custom(format!(
                "'{l}': one expression per string (no ';')"
            )));
        }
        let spec = format!("{}={}", raw.name, raw.lines.join(";"));
        let parsed =
            sonde_analytics::FilterSetSpec::parse(&spec).map_err(serde::de::Error::custom)?;
        sonde_analytics::FilterSets::compile(std::slice::from_ref(&parsed))
            .map_err(serde::de::Error::custom)?;
        Ok(FilterSetTable { spec })
    }
}

// Value checks: each runs the flag's own parser, so the file and the flag accept the same
// values and say the same thing about a bad one.

fn custom<E: serde::de::Error>(msg: impl std::fmt::Display) -> E {
    E::custom(msg)
}

fn synthetic_spec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    sonde_capture::SyntheticSpec::parse(&s).map_err(custom)?;
    Ok(Some(s))
}

fn collect_sources<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    for s in &v {
        sonde_probe::CollectSource::parse(s).map_err(custom)?;
    }
    Ok(Some(v))
}

/// A string, or a list of strings (`interface = "eth0"` or `interface = ["eth0", "eth1"]`).
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    match OneOrMany::deserialize(d).map_err(|_| {
        custom("give a name or a list of names, e.g. \"eth0\" or [\"eth0\", \"eth1\"]")
    })? {
        OneOrMany::One(s) => Ok(Some(vec![s])),
        OneOrMany::Many(v) => Ok(Some(v)),
    }
}

fn cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<crate::cli::CpuList>, D::Error> {
    let s = String::deserialize(d)?;
    crate::cli::parse_cpu_list(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn threads<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(custom("threads must be at least 1")),
        n => Ok(Some(n)),
    }
}

fn positive_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    if v > 0.0 && v.is_finite() {
        Ok(Some(v))
    } else {
        Err(custom(format!("{v}: give a positive number of seconds")))
    }
}

fn seconds_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    if v >= 0.0 && v.is_finite() {
        Ok(Some(v))
    } else {
        Err(custom(format!("{v}: give 0 or a positive number")))
    }
}

fn whole_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(custom("must be at least 1 second")),
        n => Ok(Some(n)),
    }
}

/// A count: an integer, or a string with a k/M suffix as the flags take it ("2M").
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Count {
        Number(i64),
        Text(String),
    }
    let text = match Count::deserialize(d)? {
        Count::Number(n) => n.to_string(),
        Count::Text(t) => t,
    };
    crate::cli::parse_count(&text).map(Some).map_err(custom)
}

fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::net::SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse()
        .map(Some)
        .map_err(|_| custom(format!("'{s}' is not ADDR:PORT, e.g. 127.0.0.1:3000")))
}

fn series_retention<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let rows = Vec::<u32>::deserialize(d)?;
    if rows.len() != 4 {
        return Err(custom(
            "give four row counts, for 1 s, 1 min, 1 h and 1 day, e.g. [3600, 10080, 8760, 1826]",
        ));
    }
    Ok(Some(
        rows.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(","),
    ))
}

fn thresholds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    for line in &v {
        sonde_analytics::Thresholds::parse(std::slice::from_ref(line)).map_err(custom)?;
    }
    Ok(Some(v))
}

/// A network sink: its URL, or a table with the URL and its queue options:
/// `{ to = "ipfix://127.0.0.1:4739", when_full = "block", queue = 256 }`. Either way it
/// becomes the URL the flag takes (`ipfix://…?when_full=block&queue=256`).
fn sink_urls<'de, D: Deserializer<'de>>(
    d: D,
    check: fn(&str) -> Result<(), String>,
) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Url(String),
        Table(SinkTable),
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SinkTable {
        to: String,
        when_full: Option<String>,
        queue: Option<u64>,
    }
    let mut out = Vec::new();
    for e in Vec::<Entry>::deserialize(d)? {
        let url = match e {
            Entry::Url(u) => u,
            Entry::Table(t) => {
                let mut opts = Vec::new();
                if let Some(w) = t.when_full {
                    opts.push(format!("when_full={w}"));
                }
                if let Some(q) = t.queue {
                    opts.push(format!("queue={q}"));
                }
                if opts.is_empty() {
                    t.to
                } else {
                    // After the URL's own options (kafka://…?format=protobuf), if it has any.
                    let sep = if t.to.contains('?') { '&' } else { '?' };
                    format!("{}{sep}{}", t.to, opts.join("&"))
                }
            }
        };
        check(&url).map_err(custom)?;
        out.push(url);
    }
    Ok(Some(out))
}

/// `export = ["ipfix://127.0.0.1:4739", { to = "netflow9://…", when_full = "block" }]`.
fn export_targets<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    sink_urls(d, |u| sonde_probe::ExportSpec::parse(u).map(|_| ()))
}

/// `zmq_export = ["tcp://127.0.0.1:5556", { to = "tcp://…", queue = 16 }]`.
fn zmq_endpoints<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    sink_urls(d, |u| {
        let (u, _) = sonde_probe::sinks::QueueRequest::split(u)?;
        if u.starts_with("tcp://") {
            Ok(())
        } else {
            Err(format!("'{u}': expected tcp://HOST:PORT of a collector"))
        }
    })
}

/// Reads and checks a config file. The error names the file, the line and the key.
pub fn load(path: &Path) -> Result<File> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--config: cannot read '{}'", path.display()))?;
    parse(&text).map_err(|e| anyhow!("{}{e}", path.display()))
}

/// Parses the text of a config file; an error starts with " line N, key K: ".
pub fn parse(text: &str) -> Result<File, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| locate(text, &e, ""))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        locate(text, e.inner(), if key == "." { "" } else { &key })
    })
}

/// " line N, key K: MESSAGE" from a toml error (its span says where).
fn locate(text: &str, e: &toml::de::Error, key: &str) -> String {
    let mut out = String::new();
    if let Some(span) = e.span() {
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        out.push_str(&format!(" line {line}"));
    }
    if !key.is_empty() {
        out.push_str(&format!(", key {key}"));
    }
    let mut msg = e.message().trim().replace('\n', " ");
    // serde names Rust types; say what to write instead.
    for (rust, plain) in [
        ("expected usize", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
    ] {
        msg = msg.replace(rust, plain);
    }
    format!("{out}: {msg}")
}

/// Lays the file under the flags: what the command line did not say comes from the file.
/// Relative paths in the file are taken from the file's directory.
pub fn apply(file: File, base: &Path, cli: &mut Cli, m: &ArgMatches) {
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
    let path = |p: PathBuf| -> PathBuf {
        if p.as_os_str() == "-" || p.is_absolute() {
            p
        } else {
            base.join(p)
        }
    };
    macro_rules! set {
        ($field:ident, $value:expr) => {
            if !given(stringify!($field)) {
                if let Some(v) = $value {
                    cli.$field = v;
                }
            }
        };
    }
    macro_rules! set_opt {
        ($field:ident, $value:expr) => {
            if !given(stringify!($field)) {
                if let Some(v) = $value {
                    cli.$field = Some(v);
                }
            }
        };
    }
    macro_rules! add {
        ($field:ident, $value:expr) => {
            if let Some(v) = $value {
                let mut v: Vec<_> = v.into_iter().collect();
                v.append(&mut cli.$field);
                cli.$field = v;
            }
        };
    }

    let i = file.input;
    // An input on the command line replaces the file's.
    let flag_input = ["read", "interface", "synthetic", "collect"]
        .iter()
        .any(|id| given(id));
    if !flag_input {
        cli.read = i.read.map(path);
        cli.interface = i.interface.unwrap_or_default();
        cli.synthetic = i.synthetic;
        cli.collect = i.collect.unwrap_or_default();
    }
    set_opt!(filter, i.filter);
    set!(replay, i.replay);
    set!(threads, i.threads);
    set_opt!(cpus, i.cpus);
    set!(capture, i.capture);
    set!(capture_ring_mb, i.capture_ring_mb);
    set!(capture_block_kb, i.capture_block_kb);
    set!(capture_block_ms, i.capture_block_ms);
    set_opt!(duration, i.duration);

    let f = file.flows;
    set!(idle_timeout, f.idle_timeout);
    set!(active_timeout, f.active_timeout);
    set!(max_flows, f.max_flows);
    set!(max_hosts, f.max_hosts);
    set!(table_full, f.table_full);
    add!(local_networks, f.local_networks);
    set_opt!(geoip_dir, f.geoip_dir.map(path));

    set!(dpi, file.dpi.mode);
    add!(
        dpi_services,
        file.dpi.services.map(|v| v.into_iter().map(path))
    );

    let o = file.output;
    set_opt!(flows_out, o.flows.map(path));
    set!(flows_format, o.flows_format);
    set_opt!(hosts_out, o.hosts.map(path));
    set_opt!(stats_json, o.stats_json.map(path));
    set_opt!(stats_interval, o.stats_interval);
    set!(quiet, o.quiet);
    add!(export, o.export);
    add!(zmq_export, o.zmq_export);

    let h = file.http;
    set_opt!(http, h.listen);
    set_opt!(users, h.users.map(path));
    set!(no_auth, h.no_auth);
    set_opt!(https_cert, h.https_cert.map(path));
    set_opt!(https_key, h.https_key.map(path));

    let h = file.history;
    set_opt!(data_dir, h.data_dir.map(path));
    set_opt!(history, h.url);
    set!(history_max_age, h.max_age_days);
    set!(history_max_size, h.max_size_gib);
    set_opt!(series_retention, h.series_retention);
    set!(series_reuse_after, h.series_reuse_after);
    set!(host_cache_max, h.host_cache_max);

    let a = file.analytics;
    set!(
        analytics,
        a.enabled.map(|on| if on { OnOff::On } else { OnOff::Off })
    );
    set!(top_interval, a.top_interval);
    set!(top_n, a.top_n);
    set_opt!(alerts_out, a.alerts_out.map(path));
    add!(threshold, a.thresholds);
    add!(filter_set, Some(a.filter_set.into_iter().map(|t| t.spec)));

    let a = file.alerts;
    set_opt!(alerts_out, a.out.map(path));
    add!(alert_exclude, Some(a.exclude));
    set_opt!(alert_limits, a.limits);
    set_opt!(alert_hosts, a.hosts.map(path));
    add!(notify, Some(a.notify));
    add!(script, Some(a.scripts.into_iter().map(path)));
    let t = file.trigger;
    add!(trigger_capture, t.capture);
    set_opt!(trigger_dir, t.dir.map(path));
    set!(trigger_pre, t.pre);
    set!(trigger_max_mb, t.max_mb);
    set!(trigger_max_seconds, t.max_seconds);
    set!(trigger_ring_mb, t.ring_mb);
    let e = file.egress;
    set_opt!(egress_pcap, e.pcap_dir.map(path));
    set_opt!(egress_iface, e.iface);
    set_opt!(egress_bpf, e.bpf);
    set_opt!(egress_hosts, e.hosts);
    set_opt!(egress_app, e.apps);
    set!(egress_undecided, e.undecided);
    set!(egress_shunt_after, e.shunt_after);
    set!(egress_file_mb, e.file_mb);
    set!(egress_files, e.files);
}

/// `sonde config example`: every section, with the defaults, commented.
pub const EXAMPLE: &str = include_str!("../sonde.example.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_parses() {
        parse(EXAMPLE).unwrap();
    }

    #[test]
    fn an_unknown_key_names_its_line_and_key() {
        let e = parse("[flows]\nidle_timeout = 30\nmax_flow = 5\n").unwrap_err();
        assert!(e.starts_with(" line 3, key flows"), "{e}");
        assert!(e.contains("max_flow"), "{e}");
        let e = parse("[flow]\n").unwrap_err();
        assert!(e.starts_with(" line 1"), "{e}");
        assert!(e.contains("flow"), "{e}");
    }

    #[test]
    fn a_bad_value_names_its_line_key_and_the_flag_parser_message() {
        let e = parse("\n[flows]\nmax_flows = \"2X\"\n").unwrap_err();
        assert!(e.starts_with(" line 3, key flows.max_flows"), "{e}");
        assert!(e.contains("not a positive count"), "{e}");
        let e = parse("[analytics]\nthresholds = [\"ddos.nope=3\"]\n").unwrap_err();
        assert!(e.starts_with(" line 2, key analytics.thresholds"), "{e}");
        let e =
            parse("[[analytics.filter_set]]\nname = \"web\"\nmatch = [\"http: tcp prot 80\"]\n")
                .unwrap_err();
        assert!(e.contains("web") && e.contains("http"), "{e}");
        let e = parse("[input]\nreplay = \"slow\"\n").unwrap_err();
        assert!(e.starts_with(" line 2, key input.replay"), "{e}");
        let e = parse("[input]\ncpus = \"4-2\"\n").unwrap_err();
        assert!(e.starts_with(" line 2, key input.cpus"), "{e}");
        assert!(e.contains("not a CPU number or a range"), "{e}");
        let ok = parse("[input]\ncpus = \"0,2-3\"\n").unwrap();
        assert_eq!(ok.input.cpus, Some(crate::cli::CpuList(vec![0, 2, 3])));
    }

    #[test]
    fn capture_settings_are_checked_like_the_flags() {
        let e = parse("[input]\ncapture = \"dpdk\"\n").unwrap_err();
        assert!(e.starts_with(" line 2, key input.capture"), "{e}");
        let e = parse("[input]\ncapture_block_kb = 1000\n").unwrap_err();
        assert!(
            e.contains("input.capture_block_kb") && e.contains("power of two"),
            "{e}"
        );
        let e = parse("[input]\ncapture_block_ms = 0\n").unwrap_err();
        assert!(e.contains("input.capture_block_ms"), "{e}");
        let ok =
            parse("[input]\ncapture = \"xdp\"\ncapture_ring_mb = 128\ncapture_block_kb = 256\n")
                .unwrap();
        assert!(matches!(
            ok.input.capture,
            Some(crate::cli::CaptureArg::Xdp)
        ));
        assert_eq!(ok.input.capture_ring_mb, Some(128));
        assert_eq!(ok.input.capture_block_kb, Some(256));
        let e = parse("[flows\n").unwrap_err();
        assert!(e.starts_with(" line 1"), "{e}");
    }

    #[test]
    fn interfaces_are_one_name_or_a_list() {
        let one = parse("[input]\ninterface = \"eth0\"\n").unwrap();
        assert_eq!(one.input.interface, Some(vec!["eth0".to_string()]));
        let two = parse("[input]\ninterface = [\"eth0\", \"eth1\"]\n").unwrap();
        assert_eq!(
            two.input.interface,
            Some(vec!["eth0".into(), "eth1".into()])
        );
        let e = parse("[input]\ninterface = 3\n").unwrap_err();
        assert!(e.starts_with(" line 2, key input.interface"), "{e}");
    }

    #[test]
    fn egress_keys_use_the_flags_parsers() {
        let f = parse(
            "[egress]\npcap_dir = \"out\"\nhosts = [\"10.0.0.0/8\", \"192.0.2.7\"]\napps = \"DNS,TLS\"\nundecided = \"shunt\"\n",
        )
        .unwrap();
        assert_eq!(f.egress.hosts.map(|h| h.0.len()), Some(2));
        assert_eq!(f.egress.apps.map(|a| a.0.len()), Some(2));
        assert_eq!(f.egress.undecided, Some(crate::cli::UndecidedArg::Shunt));
        let e = parse("[egress]\nhosts = [\"10.0.0.1/8\"]\n").unwrap_err();
        assert!(e.starts_with(" line 2, key egress.hosts"), "{e}");
        assert!(e.contains("write 10.0.0.0/8"), "{e}");
        let e = parse("[egress]\napps = [\"NoSuchApp\"]\n").unwrap_err();
        assert!(e.starts_with(" line 2, key egress.apps"), "{e}");
        let e = parse("[egress]\nundecided = \"maybe\"\n").unwrap_err();
        assert!(e.starts_with(" line 2, key egress.undecided"), "{e}");
    }

    #[test]
    fn trigger_keys_use_the_flags_parsers() {
        let f =
            parse("[trigger]\ncapture = [\"syn_flood,ddos:both\"]\ndir = \"caps\"\npre = 2.5\n")
                .unwrap();
        assert_eq!(f.trigger.capture.map(|c| c[0].len()), Some(2));
        assert_eq!(f.trigger.pre, Some(2.5));
        let e = parse("[trigger]\ncapture = [\"ddos:sideways\"]\n").unwrap_err();
        assert!(e.starts_with(" line 2, key trigger.capture"), "{e}");
        let e = parse("[trigger]\nring_mb = 0\n").unwrap_err();
        assert!(e.contains("trigger.ring_mb"), "{e}");
    }

    #[test]
    fn counts_take_numbers_and_suffixes() {
        let f = parse("[flows]\nmax_flows = 500000\nmax_hosts = \"2k\"\n").unwrap();
        assert_eq!(f.flows.max_flows, Some(500_000));
        assert_eq!(f.flows.max_hosts, Some(2_000));
        let f = parse("[history]\nhost_cache_max = \"500k\"\n").unwrap();
        assert_eq!(f.history.host_cache_max, Some(500_000));
    }
}
