//! `sonde query`: reads the flow history of a data directory (a running or a stopped sonde's).

use anyhow::{bail, Result};
use clap::{Parser, Subcommand, ValueEnum};
use sonde_export::{format_addr, push_json_str, FlowWriter, Format};
use sonde_history::filter_text::{civil_from_days, parse_time, FilterText};
use sonde_history::query::{self, Metric, Totals};
use sonde_history::store::{Filter, FlowReader};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "sonde query",
    about = "Query the flow history a sonde keeps with --data-dir"
)]
pub struct QueryCli {
    /// The data directory (what sonde was started with as --data-dir).
    #[arg(long, value_name = "DIR", default_value = "sonde-data", global = true)]
    data_dir: PathBuf,
    /// Read flows, hosts and apps from ClickHouse instead (what '--export clickhouse://'
    /// wrote, every probe's): clickhouse://HOST:PORT/DB[?table=T].
    #[arg(long, value_name = "URL", global = true)]
    history: Option<String>,
    /// GeoIP databases (as sonde's --geoip-dir): flows get SRC_AS, DST_AS, SRC_IP_COUNTRY and
    /// DST_IP_COUNTRY, and --country/--asn filter by them.
    #[arg(long, value_name = "DIR", global = true)]
    geoip_dir: Option<PathBuf>,
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Flows that match the filters, in the order they ended (oldest first).
    Flows(Common),
    /// Hosts by the traffic of their flows (either end) in the range.
    Hosts(Ranked),
    /// Applications by traffic in the range.
    Apps(Ranked),
    /// A time series: the interface's ("total"), a host's or an application's traffic per
    /// interval, with gaps where nothing was recorded.
    Series(SeriesArgs),
    /// Top talkers, destinations, ports, applications or flows over a range, from the
    /// analytics' per-interval lists (e.g. `top ports --from 2026-11-17T03:00Z --to
    /// 2026-11-17T03:10Z`).
    Top(TopArgs),
    /// Detections (scans, floods, DDoS, ICMP errors, noisy hosts) over a range.
    Anomalies(AnomalyArgs),
    /// Alerts (engaged and released, every source) that overlap a range, newest first.
    Alerts(AlertArgs),
}

#[derive(Parser, Debug)]
struct AlertArgs {
    /// Alerts active at some time in this range: Unix seconds, 2026-11-23T08:00:00Z,
    /// 2026-11-23, or relative to now (-15m, -2h, -7d). Default: everything kept.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// An alert type (ddos, scan.port, capture.drops, script.NAME...) or a prefix (scan.*).
    #[arg(long = "type", value_name = "TYPE")]
    kind: Option<String>,
    /// This severity and above: info, notice, warning, error, critical.
    #[arg(long)]
    severity: Option<String>,
    /// Alerts about this entity (a host's address, an interface...).
    #[arg(long)]
    entity: Option<String>,
    /// engaged, released or all.
    #[arg(long, default_value = "all")]
    state: String,
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = OutFormat::Table)]
    format: OutFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ListArg {
    Talkers,
    Destinations,
    Ports,
    Apps,
    Flows,
}

#[derive(Parser, Debug)]
struct TopArgs {
    /// Which list.
    #[arg(value_enum)]
    list: ListArg,
    /// Intervals starting in this range: Unix seconds, 2026-11-23T08:00:00Z, 2026-11-23, or
    /// relative to now (-15m, -2h, -7d). Default: everything kept.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// bytes, packets, or (ports and apps) flows.
    #[arg(long, value_enum, default_value_t = SortArg::Bytes)]
    sort: SortArg,
    #[arg(long, default_value_t = 10)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = OutFormat::Table)]
    format: OutFormat,
}

#[derive(Parser, Debug)]
struct AnomalyArgs {
    /// Detection records (start and end events) in this range; default: everything kept.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// scan.ip, scan.port, syn_flood, ddos, icmp_errors or noisy_host.
    #[arg(long = "type", value_name = "TYPE")]
    kind: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = OutFormat::Table)]
    format: OutFormat,
}

#[derive(Parser, Debug)]
struct SeriesArgs {
    #[arg(long, value_enum, default_value_t = FamilyArg::Interface)]
    family: FamilyArg,
    /// The series: "total" for the interface, an address (with @VLAN) for a host, a label
    /// (TLS.Google, DNS, Unknown) for an application. The interface's gauges (value in
    /// BYTES_IN): gauge:active_flows, gauge:active_hosts, gauge:drops (flow table full),
    /// gauge:capture_drops (the kernel's, all live interfaces) and gauge:capture_drops:IFACE;
    /// with several inputs, input:IFACE is one input's traffic.
    #[arg(long, default_value = "total")]
    key: String,
    /// List the family's series keys instead.
    #[arg(long)]
    list: bool,
    /// Default: the last hour of what was recorded.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// 1s, 1m, 1h, 1d, or auto (the finest that still holds --from).
    #[arg(long, default_value = "auto")]
    resolution: String,
    #[arg(long, value_enum, default_value_t = OutFormat::Table)]
    format: OutFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FamilyArg {
    Interface,
    Hosts,
    Apps,
    Exporters,
    /// Filter-set expressions (key SET/LABEL): packets and bytes in PACKETS_IN and BYTES_IN.
    Filters,
}

#[derive(Parser, Debug)]
struct Common {
    /// Flows overlapping this range: Unix seconds, 2026-11-23T08:00:00Z, 2026-11-23, or
    /// relative to now: -90s, -15m, -2h, -7d.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    from: Option<String>,
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    to: Option<String>,
    /// An address or a network (10.0.0.0/8, 2001:db8::/32) at either end.
    #[arg(long, value_name = "ADDR[/LEN]")]
    host: Option<String>,
    /// A port at either end.
    #[arg(long)]
    port: Option<u16>,
    /// tcp, udp, icmp, icmpv6, sctp or a protocol number.
    #[arg(long)]
    proto: Option<String>,
    /// An application or protocol name (TLS, Google, DNS) or nDPI number.
    #[arg(long)]
    app: Option<String>,
    /// Only what this probe or exporter sent (with --history clickhouse://…).
    #[arg(long, value_name = "ADDR")]
    exporter: Option<std::net::IpAddr>,
    /// Flows with either end in this country (ISO 3166 code, e.g. US); needs --geoip-dir (a
    /// ClickHouse history selects on the places its rows were written with).
    #[arg(long, value_name = "CC")]
    country: Option<String>,
    /// Flows with either end in this AS (15169 or AS15169); needs --geoip-dir (as --country).
    #[arg(long, value_name = "ASN")]
    asn: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Rows to skip first (paging).
    #[arg(long, default_value_t = 0)]
    offset: usize,
    #[arg(long, value_enum, default_value_t = OutFormat::Table)]
    format: OutFormat,
}

#[derive(Parser, Debug)]
struct Ranked {
    #[command(flatten)]
    common: Common,
    /// What to rank by.
    #[arg(long, value_enum, default_value_t = SortArg::Bytes)]
    sort: SortArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutFormat {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line; flows have the keys of --flows-out.
    Jsonl,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SortArg {
    Bytes,
    Packets,
    Flows,
}

pub fn run(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<()> {
    let cli = match QueryCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Ok(());
            }
            // The message without clap's usage lines; a list (the missing arguments) joined.
            let text = e.to_string();
            let said: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            let said = if said.is_empty() {
                "invalid arguments".to_string()
            } else {
                said.join(" ")
            };
            bail!(
                "{} (see 'sonde query --help')",
                said.trim_start_matches("error: ")
            );
        }
    };
    if cli.history.is_some()
        && matches!(
            cli.what,
            What::Series(_) | What::Top(_) | What::Anomalies(_) | What::Alerts(_)
        )
    {
        bail!(
            "--history: 'sonde query' reads flows, hosts and apps from ClickHouse; series, top \
             and anomalies come from a --data-dir (the REST API's /api/v1/series reads \
             ClickHouse too)"
        );
    }
    if let What::Series(a) = &cli.what {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        series(&cli.data_dir, a, &mut out)?;
        out.flush()?;
        return Ok(());
    }
    if let What::Top(a) = &cli.what {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        top(&cli.data_dir, a, &mut out)?;
        out.flush()?;
        return Ok(());
    }
    if let What::Alerts(a) = &cli.what {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        alerts(&cli.data_dir, a, &mut out)?;
        out.flush()?;
        return Ok(());
    }
    if let What::Anomalies(a) = &cli.what {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        anomalies(&cli.data_dir, a, &mut out)?;
        out.flush()?;
        return Ok(());
    }
    let source = match &cli.history {
        Some(url) => Source::ClickHouse(
            sonde_probe::ClickHouseHistory::open(url).map_err(anyhow::Error::msg)?,
        ),
        None => Source::Dir(FlowReader::open(&cli.data_dir).map_err(anyhow::Error::msg)?),
    };
    let geo = cli
        .geoip_dir
        .as_deref()
        .map(|d| sonde_geo::GeoDb::open_dir(d).map(std::sync::Arc::new))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match cli.what {
        What::Flows(c) => {
            check_origin(&c, &source)?;
            let filter = filter_of(&c, now_ms, geo.as_ref(), &source)?;
            let flows = match &source {
                Source::Dir(reader) => {
                    query::flows(reader, &filter, c.offset, c.limit)
                        .map_err(anyhow::Error::msg)?
                        .0
                }
                Source::ClickHouse(h) => h
                    .flows(&filter, origin(&c)?, c.offset, c.limit)
                    .map_err(anyhow::Error::msg)?,
            };
            match c.format {
                OutFormat::Jsonl => {
                    let mut w = FlowWriter::new(&mut out, Format::Json).with_geo(geo.clone());
                    for r in &flows {
                        w.write(r)?;
                    }
                    w.flush()?;
                }
                OutFormat::Table => flows_table(&mut out, &flows)?,
            }
        }
        What::Hosts(r) => {
            check_origin(&r.common, &source)?;
            let filter = filter_of(&r.common, now_ms, geo.as_ref(), &source)?;
            let n = r.common.offset + r.common.limit;
            let top = match &source {
                Source::Dir(reader) => {
                    query::top_hosts(reader, &filter, metric(r.sort), n)
                        .map_err(anyhow::Error::msg)?
                        .0
                }
                Source::ClickHouse(h) => h
                    .top_hosts(&filter, origin(&r.common)?, metric(r.sort), n)
                    .map_err(anyhow::Error::msg)?,
            };
            let rows = top
                .into_iter()
                .skip(r.common.offset)
                .map(|((addr, v, vlan), t)| {
                    let mut a = String::new();
                    format_addr(&mut a, &addr, v);
                    ((a, vlan), t)
                });
            ranked_out(&mut out, r.common.format, "HOST", rows.collect())?;
        }
        What::Apps(r) => {
            check_origin(&r.common, &source)?;
            let filter = filter_of(&r.common, now_ms, geo.as_ref(), &source)?;
            let n = r.common.offset + r.common.limit;
            let top = match &source {
                Source::Dir(reader) => {
                    query::top_apps(reader, &filter, metric(r.sort), n)
                        .map_err(anyhow::Error::msg)?
                        .0
                }
                Source::ClickHouse(h) => h
                    .top_apps(&filter, origin(&r.common)?, metric(r.sort), n)
                    .map_err(anyhow::Error::msg)?,
            };
            let rows = top
                .into_iter()
                .skip(r.common.offset)
                .map(|(app, t)| ((query::app_name(app), 0), t));
            ranked_out(&mut out, r.common.format, "APPLICATION", rows.collect())?;
        }
        What::Series(_) | What::Top(_) | What::Anomalies(_) | What::Alerts(_) => {
            unreachable!("handled above")
        }
    }
    out.flush()?;
    Ok(())
}

fn series(dir: &std::path::Path, a: &SeriesArgs, out: &mut impl Write) -> Result<()> {
    use sonde_history::series::{Family, Resolution, SeriesReader};
    let family = match a.family {
        FamilyArg::Interface => Family::Interface,
        FamilyArg::Hosts => Family::Hosts,
        FamilyArg::Apps => Family::Apps,
        FamilyArg::Exporters => Family::Exporters,
        FamilyArg::Filters => Family::Filters,
    };
    let mut r = SeriesReader::open(dir).map_err(anyhow::Error::msg)?;
    if a.list {
        for k in r.keys(family).map_err(anyhow::Error::msg)? {
            writeln!(out, "{}", printable(&k))?;
        }
        return Ok(());
    }
    let Some(newest) = r.committed().map_err(anyhow::Error::msg)? else {
        bail!("{}: no time series recorded yet", dir.display());
    };
    let to = time_arg(&a.to, "--to")?.unwrap_or(newest + 1);
    let from = time_arg(&a.from, "--from")?.unwrap_or(to.saturating_sub(3600));
    if from >= to {
        bail!("--from must be before --to");
    }
    let (res, points) = match a.resolution.as_str() {
        "auto" => r.read_auto(family, &a.key, from, to),
        name => {
            let res = Resolution::ALL
                .into_iter()
                .find(|r| r.name() == name)
                .ok_or_else(|| {
                    anyhow::anyhow!("--resolution '{name}': use 1s, 1m, 1h, 1d or auto")
                })?;
            r.read(family, &a.key, res, from, to).map(|p| (res, p))
        }
    }
    .map_err(anyhow::Error::msg)?;
    const NAMES: [&str; 5] = [
        "BYTES_IN",
        "BYTES_OUT",
        "PACKETS_IN",
        "PACKETS_OUT",
        "FLOWS",
    ];
    match a.format {
        OutFormat::Table => {
            writeln!(
                out,
                "{:<24}  {:>14}  {:>14}  {:>12}  {:>12}  {:>8}",
                "TIME", NAMES[0], NAMES[1], NAMES[2], NAMES[3], NAMES[4]
            )?;
            for p in &points {
                let t = format_time(p.t * 1000);
                match &p.sample {
                    None => writeln!(out, "{t:<24}  {:>14}", "-")?,
                    Some(s) => {
                        let v = s.sum.to_array();
                        writeln!(
                            out,
                            "{t:<24}  {:>14}  {:>14}  {:>12}  {:>12}  {:>8}",
                            v[0], v[1], v[2], v[3], v[4]
                        )?
                    }
                }
            }
        }
        OutFormat::Jsonl => {
            for p in &points {
                let mut line = format!("{{\"TIME\":{},\"RESOLUTION\":\"{}\"", p.t, res.name());
                match &p.sample {
                    None => line.push_str(",\"GAP\":true"),
                    Some(s) => {
                        for (prefix, m) in [("", &s.sum), ("MIN_", &s.min), ("MAX_", &s.max)] {
                            if !prefix.is_empty() && res == Resolution::Second {
                                continue;
                            }
                            for (n, v) in NAMES.iter().zip(m.to_array()) {
                                line.push_str(&format!(",\"{prefix}{n}\":{v}"));
                            }
                        }
                        line.push_str(&format!(",\"SECONDS\":{}", s.seconds));
                    }
                }
                line.push('}');
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

/// A `--from`/`--to` value as Unix seconds (the forms of `parse_time`).
fn time_arg(t: &Option<String>, flag: &str) -> Result<Option<u64>> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    t.as_deref()
        .map(|t| {
            parse_time(t, now_ms)
                .map(|ms| ms / 1000)
                .map_err(|e| anyhow::anyhow!("{flag} '{t}': {e}"))
        })
        .transpose()
}

/// `--from`/`--to` as Unix seconds (default: everything kept).
fn range(from: &Option<String>, to: &Option<String>) -> Result<(u64, u64)> {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let to = time_arg(to, "--to")?.unwrap_or(now_s + 1);
    let from = time_arg(from, "--from")?.unwrap_or(0);
    if from >= to {
        bail!("--from must be before --to");
    }
    Ok((from, to))
}

fn top(dir: &std::path::Path, a: &TopArgs, out: &mut impl Write) -> Result<()> {
    use sonde_history::analytics::{scan, Kind, TopOver};
    let (from, to) = range(&a.from, &a.to)?;
    let list = match a.list {
        ListArg::Talkers => "talkers",
        ListArg::Destinations => "destinations",
        ListArg::Ports => "ports",
        ListArg::Apps => "apps",
        ListArg::Flows => "flows",
    };
    let sort = match a.sort {
        SortArg::Bytes => "bytes",
        SortArg::Packets => "packets",
        SortArg::Flows if matches!(a.list, ListArg::Ports | ListArg::Apps) => "flows",
        SortArg::Flows => {
            bail!("--sort flows: only ports and apps count flows; use bytes or packets")
        }
    };
    if !dir.is_dir() {
        bail!(
            "{}: no such data directory (give sonde's --data-dir with --data-dir)",
            dir.display()
        );
    }
    let mut top = TopOver::new(list);
    scan(dir, Kind::Intervals, "start", from, to, |r| {
        top.add(&r.parse()?);
        Ok(true)
    })
    .map_err(anyhow::Error::msg)?;
    let intervals = top.intervals();
    let (rows, cut) = top.finish(sort, a.limit);
    match a.format {
        OutFormat::Jsonl => {
            for r in &rows {
                writeln!(out, "{r}")?;
            }
        }
        OutFormat::Table => {
            let name = |r: &serde_json::Value| -> String {
                let f = |k: &str| {
                    r[k].as_str()
                        .map(printable)
                        .unwrap_or_else(|| r[k].to_string())
                };
                match list {
                    "talkers" | "destinations" => f("host"),
                    "ports" => format!("{}/{}", f("proto"), f("port")),
                    "apps" => f("app"),
                    _ => format!(
                        "{} {}:{} -> {}:{}",
                        f("proto"),
                        f("client"),
                        f("client_port"),
                        f("server"),
                        f("server_port")
                    ),
                }
            };
            writeln!(
                out,
                "{:<60}  {:>10}  {:>12}  {:>16}",
                list.to_uppercase(),
                "FLOWS",
                "PACKETS",
                "BYTES"
            )?;
            for r in &rows {
                let n = |k: &str| r[k].as_u64().map_or("-".to_string(), |v| v.to_string());
                writeln!(
                    out,
                    "{:<60}  {:>10}  {:>12}  {:>16}",
                    name(r),
                    n("flows"),
                    n("packets"),
                    n("bytes")
                )?;
            }
            writeln!(
                out,
                "# {} intervals from {} to {}{}",
                intervals,
                format_time(from * 1000),
                format_time(to * 1000),
                if cut > 0 {
                    format!(
                        "; {cut} of them kept only their top entries, so sums may miss what ranked lower there"
                    )
                } else {
                    String::new()
                }
            )?;
        }
    }
    Ok(())
}

fn alerts(dir: &std::path::Path, a: &AlertArgs, out: &mut impl Write) -> Result<()> {
    use sonde_history::analytics::{read, Kind};
    if !["all", "engaged", "released"].contains(&a.state.as_str()) {
        bail!("--state '{}': use engaged, released or all", a.state);
    }
    let min_severity = match &a.severity {
        None => 0,
        Some(s) => sonde_alerts::severity_rank(s).ok_or_else(|| {
            anyhow::anyhow!(
                "--severity '{s}': use one of {}",
                sonde_alerts::SEVERITIES.join(", ")
            )
        })?,
    };
    let (from, to) = range(&a.from, &a.to)?;
    if !dir.is_dir() {
        bail!(
            "{}: no such data directory (give sonde's --data-dir with --data-dir)",
            dir.display()
        );
    }
    let events = read(dir, Kind::Alerts, "at", from.saturating_sub(86_400), to)
        .map_err(anyhow::Error::msg)?;
    let rows = sonde_alerts::fold(events, from, to);
    let kind_ok = |t: &str| match a.kind.as_deref() {
        None => true,
        Some(k) => match k.strip_suffix('*') {
            Some(p) => t.starts_with(p),
            None => t == k,
        },
    };
    let rows = rows
        .iter()
        .filter(|r| kind_ok(r["type"].as_str().unwrap_or("")))
        .filter(|r| a.state == "all" || r["state"] == a.state.as_str())
        .filter(|r| {
            r["severity"]
                .as_str()
                .and_then(sonde_alerts::severity_rank)
                .unwrap_or(0)
                >= min_severity
        })
        .filter(|r| {
            a.entity
                .as_deref()
                .is_none_or(|e| r["entity"]["value"] == e || r["host"] == e)
        })
        .take(a.limit);
    match a.format {
        OutFormat::Jsonl => {
            for r in rows {
                writeln!(out, "{r}")?;
            }
        }
        OutFormat::Table => {
            writeln!(
                out,
                "{:>6}  {:<8}  {:<8}  {:<16}  {:<32}  {:<24}  {:<24}  SUMMARY",
                "ID", "STATE", "SEVERITY", "TYPE", "ENTITY", "START", "END"
            )?;
            for r in rows {
                let s = |v: &serde_json::Value| v.as_str().map(printable).unwrap_or_default();
                let t = |k: &str| {
                    r[k].as_u64()
                        .map_or("-".to_string(), |v| format_time(v * 1000))
                };
                writeln!(
                    out,
                    "{:>6}  {:<8}  {:<8}  {:<16}  {:<32}  {:<24}  {:<24}  {}",
                    r["id"].as_u64().unwrap_or(0),
                    s(&r["state"]),
                    s(&r["severity"]),
                    s(&r["type"]),
                    s(&r["entity"]["value"]),
                    t("start"),
                    t("end"),
                    s(&r["summary"]),
                )?;
            }
        }
    }
    Ok(())
}

fn anomalies(dir: &std::path::Path, a: &AnomalyArgs, out: &mut impl Write) -> Result<()> {
    use sonde_analytics::DETECTION_TYPES as TYPES;
    use sonde_history::analytics::{read, Kind};
    if let Some(k) = &a.kind {
        if !TYPES.contains(&k.as_str()) {
            bail!("--type '{k}': use one of {}", TYPES.join(", "));
        }
    }
    let (from, to) = range(&a.from, &a.to)?;
    if !dir.is_dir() {
        bail!(
            "{}: no such data directory (give sonde's --data-dir with --data-dir)",
            dir.display()
        );
    }
    let rows = read(dir, Kind::Detections, "last_seen", from, to).map_err(anyhow::Error::msg)?;
    let rows = rows
        .iter()
        .filter(|r| a.kind.as_deref().is_none_or(|k| r["type"] == k))
        .take(a.limit);
    match a.format {
        OutFormat::Jsonl => {
            for r in rows {
                writeln!(out, "{r}")?;
            }
        }
        OutFormat::Table => {
            writeln!(
                out,
                "{:>6}  {:<6}  {:<12}  {:<40}  {:<24}  {:<24}  {:>8}",
                "ID", "EVENT", "TYPE", "HOST", "FIRST SEEN", "LAST SEEN", "TARGETS"
            )?;
            for r in rows {
                let s = |k: &str| r[k].as_str().map(printable).unwrap_or_default();
                let t = |k: &str| format_time(r[k].as_u64().unwrap_or(0) * 1000);
                writeln!(
                    out,
                    "{:>6}  {:<6}  {:<12}  {:<40}  {:<24}  {:<24}  {:>8}",
                    r["id"].as_u64().unwrap_or(0),
                    s("event"),
                    s("type"),
                    s("host"),
                    t("first_seen"),
                    t("last_seen"),
                    r["targets"]
                        .as_u64()
                        .map_or("".to_string(), |v| v.to_string()),
                )?;
            }
        }
    }
    Ok(())
}

/// Where `flows`, `hosts` and `apps` read.
enum Source {
    Dir(FlowReader),
    ClickHouse(sonde_probe::ClickHouseHistory),
}

/// `--exporter` reads what ClickHouse holds of several probes; a data directory is one's.
fn check_origin(c: &Common, source: &Source) -> Result<()> {
    if c.exporter.is_some() && matches!(source, Source::Dir(_)) {
        bail!(
            "--exporter: a data directory holds one sonde's own flows; use --history \
             clickhouse://… to read several probes'"
        );
    }
    Ok(())
}

/// What only the ClickHouse history filters by in SQL: the exporter, and `--country`/`--asn` on
/// the places its rows were written with.
fn origin(c: &Common) -> Result<sonde_probe::Origin> {
    let (country, asn) = place_args(c)?;
    Ok(sonde_probe::Origin {
        exporter: c.exporter,
        place: (country.is_some() || asn.is_some())
            .then_some(sonde_probe::StoredPlace { country, asn }),
    })
}

/// `--country` and `--asn`, checked for form.
fn place_args(c: &Common) -> Result<(Option<sonde_geo::Country>, Option<u32>)> {
    let country = c
        .country
        .as_deref()
        .map(|t| {
            sonde_geo::Country::parse(t).ok_or_else(|| {
                anyhow::anyhow!("--country '{t}': use a two-letter code (US, DE, …)")
            })
        })
        .transpose()?;
    let asn = c
        .asn
        .as_deref()
        .map(|t| {
            sonde_geo::parse_asn(t)
                .ok_or_else(|| anyhow::anyhow!("--asn '{t}': use an AS number (15169 or AS15169)"))
        })
        .transpose()?;
    Ok((country, asn))
}

fn metric(s: SortArg) -> Metric {
    match s {
        SortArg::Bytes => Metric::Bytes,
        SortArg::Packets => Metric::Packets,
        SortArg::Flows => Metric::Flows,
    }
}

fn filter_of(
    c: &Common,
    now_ms: u64,
    geo: Option<&std::sync::Arc<sonde_geo::GeoDb>>,
    source: &Source,
) -> Result<Filter> {
    let text = FilterText {
        from: c.from.as_deref(),
        to: c.to.as_deref(),
        host: c.host.as_deref(),
        port: None,
        proto: c.proto.as_deref(),
        app: c.app.as_deref(),
    };
    let mut filter = text
        .parse(now_ms, |f| format!("--{f}"))
        .map_err(anyhow::Error::msg)?;
    filter.port = c.port;
    let (country, asn) = place_args(c)?;
    // The ClickHouse history selects on its stored places instead (see `origin`).
    if (country.is_some() || asn.is_some()) && !matches!(source, Source::ClickHouse(_)) {
        let Some(geo) = geo else {
            bail!("--country and --asn need --geoip-dir DIR (the databases sonde runs with)");
        };
        filter.place = Some(sonde_history::store::EndTest {
            what: format!("{country:?} {asn:?}"),
            test: std::sync::Arc::new(geo.place_test(country, asn)),
        });
    }
    Ok(filter)
}

/// `2026-11-23T08:00:00.123Z`.
fn format_time(ms: u64) -> String {
    let (y, m, d) = civil_from_days((ms / 86_400_000) as i64);
    let rem = ms % 86_400_000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

fn flows_table(out: &mut impl Write, flows: &[sonde_flow::FlowRecord]) -> Result<()> {
    writeln!(
        out,
        "{:<24}  {:>9}  {:<5}  {:<47}  {:<47}  {:<20}  {:>10}  {:>14}",
        "START", "DURATION", "PROTO", "CLIENT", "SERVER", "APPLICATION", "PACKETS", "BYTES"
    )?;
    for r in flows {
        let f = &r.flow;
        let c = f.client_dir();
        let (ca, sa, cp, sp) = if c == 0 {
            (&f.key.addr_a, &f.key.addr_b, f.key.port_a, f.key.port_b)
        } else {
            (&f.key.addr_b, &f.key.addr_a, f.key.port_b, f.key.port_a)
        };
        let end = |a: &[u8; 16], p: u16| {
            let mut s = String::new();
            format_addr(&mut s, a, f.key.ip_version);
            if f.key.ip_version == 6 {
                format!("[{s}]:{p}")
            } else {
                format!("{s}:{p}")
            }
        };
        let app = if f.dpi_done {
            f.l7.name()
        } else {
            String::new()
        };
        writeln!(
            out,
            "{:<24}  {:>8.3}s  {:<5}  {:<47}  {:<47}  {:<20}  {:>10}  {:>14}",
            format_time(f.first_ns / 1_000_000),
            f.last_ns.saturating_sub(f.first_ns) as f64 / 1e9,
            proto_name(f.key.proto),
            end(ca, cp),
            end(sa, sp),
            printable(&app),
            f.pkts[0] + f.pkts[1],
            f.bytes[0] + f.bytes[1],
        )?;
    }
    Ok(())
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "TCP".into(),
        17 => "UDP".into(),
        1 => "ICMP".into(),
        58 => "ICMP6".into(),
        132 => "SCTP".into(),
        n => n.to_string(),
    }
}

/// Wire-derived text for a terminal: control characters (escape sequences) are not passed.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn ranked_out(
    out: &mut impl Write,
    format: OutFormat,
    what: &str,
    rows: Vec<((String, u16), Totals)>,
) -> Result<()> {
    match format {
        OutFormat::Table => {
            writeln!(
                out,
                "{what:<40}  {:>5}  {:>10}  {:>12}  {:>16}",
                "VLAN", "FLOWS", "PACKETS", "BYTES"
            )?;
            for ((name, vlan), t) in rows {
                writeln!(
                    out,
                    "{:<40}  {vlan:>5}  {:>10}  {:>12}  {:>16}",
                    printable(&name),
                    t.flows,
                    t.packets,
                    t.bytes
                )?;
            }
        }
        OutFormat::Jsonl => {
            for ((name, vlan), t) in rows {
                let mut line = format!("{{\"{what}\":\"");
                push_json_str(&mut line, &name);
                line.push('"');
                if what == "HOST" {
                    line.push_str(&format!(",\"VLAN_ID\":{vlan}"));
                }
                line.push_str(&format!(
                    ",\"FLOWS\":{},\"PACKETS\":{},\"BYTES\":{}}}",
                    t.flows, t.packets, t.bytes
                ));
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_utc() {
        assert_eq!(format_time(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_time(951_868_800_000), "2000-03-01T00:00:00.000Z");
    }
}
