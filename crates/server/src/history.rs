//! The REST API over the data directory (`--data-dir`): time series, and the flow history with
//! the queries of `sonde query` (flows of a host/port/application in a time range, top hosts and
//! applications over a range). Each request opens the files afresh, so it sees what the writer
//! has checkpointed, and runs on a blocking thread: a long scan never holds up the async ones.
//! With `--history clickhouse://…` the same requests are answered from ClickHouse (every
//! probe's flows), and `exporter=ADDR` picks one probe's.

use crate::{bad, internal, query_number, ApiError, AppState, Shared};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sonde_export::{format_addr, FlowWriter, Format};
use sonde_history::filter_text::FilterText;
use sonde_history::query::{self, Metric};
use sonde_history::store::{Filter, FlowReader};
use sonde_probe::{ClickHouseHistory, Origin, StoredPlace};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Most rows one history request returns.
const MAX_LIMIT: usize = 1000;

fn data_dir(s: &AppState, what: &str) -> Result<PathBuf, ApiError> {
    s.info.data_dir.clone().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!("no {what}: sonde was started without --data-dir"),
        )
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The filters of a history request (`from`, `to`, `host`, `port`, `proto`, `app`).
fn filter_of(q: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    FilterText {
        from: get("from"),
        to: get("to"),
        host: get("host"),
        port: get("port"),
        proto: get("proto"),
        app: get("app"),
    }
    .parse(now_ms(), |f| format!("{f}="))
    .map_err(bad)
}

/// `country=` and `asn=`: flows with either end placed there. A `--data-dir` history looks the
/// places up by `--geoip-dir` as the flows are read (the store keeps addresses only); the
/// ClickHouse history selects on the places its rows were written with (schema version 3),
/// which `origin` carries.
fn place_of(
    s: &AppState,
    q: &HashMap<String, String>,
    src: &Source,
    filter: &mut Filter,
    origin: &mut Origin,
) -> Result<(), ApiError> {
    let (country, asn) = crate::parse_geo_params(q)?;
    if country.is_none() && asn.is_none() {
        return Ok(());
    }
    if matches!(src, Source::ClickHouse(_)) {
        origin.place = Some(StoredPlace { country, asn });
        return Ok(());
    }
    let Some(geo) = s.view.geo() else {
        return Err(bad(crate::NO_GEO.to_string()));
    };
    let what = match (country, asn) {
        (Some(c), Some(a)) => format!("country {c}, AS{a}"),
        (Some(c), None) => format!("country {c}"),
        (None, Some(a)) => format!("AS{a}"),
        (None, None) => String::new(),
    };
    filter.place = Some(sonde_history::store::EndTest {
        what,
        test: Arc::new(geo.place_test(country, asn)),
    });
    Ok(())
}

/// Where the flow history is read from.
enum Source {
    Dir(PathBuf),
    ClickHouse(Arc<ClickHouseHistory>),
}

fn source(s: &AppState, what: &str) -> Result<Source, ApiError> {
    match &s.info.flow_history {
        Some(h) => Ok(Source::ClickHouse(h.clone())),
        None => data_dir(s, what).map(Source::Dir),
    }
}

/// `exporter=ADDR`: flows a probe or exporter sent (ClickHouse history only: the local store is
/// one probe's).
fn origin_of(q: &HashMap<String, String>, src: &Source) -> Result<Origin, ApiError> {
    let Some(text) = q.get("exporter").filter(|v| !v.is_empty()) else {
        return Ok(Origin::default());
    };
    if matches!(src, Source::Dir(_)) {
        return Err(bad(
            "exporter=: this sonde's history is its own (--data-dir); start it with \
             --history clickhouse://… to read several probes'"
                .to_string(),
        ));
    }
    let ip = text
        .parse()
        .map_err(|_| bad(format!("exporter={text:?}: give an IP address")))?;
    Ok(Origin {
        exporter: Some(ip),
        ..Origin::default()
    })
}

/// `offset` and `limit` (at most [`MAX_LIMIT`]).
fn page_of(q: &HashMap<String, String>, default_limit: usize) -> Result<(usize, usize), ApiError> {
    let num = |k: &str, default: usize| {
        query_number::<usize>(q, k, "a whole number expected").map(|n| n.unwrap_or(default))
    };
    let limit = num("limit", default_limit)?;
    if limit == 0 || limit > MAX_LIMIT {
        return Err(bad(format!("limit={limit}: use 1 to {MAX_LIMIT}")));
    }
    // Pages past this are refused rather than scanned to (and `offset + limit` stays small).
    let offset = num("offset", 0)?;
    if offset > MAX_OFFSET {
        return Err(bad(format!(
            "offset={offset}: at most {MAX_OFFSET}; narrow the range or the filters instead"
        )));
    }
    Ok((offset, limit))
}

/// The deepest page a history request may ask for.
const MAX_OFFSET: usize = 10_000_000;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(internal)
}

/// `GET /api/v1/history/flows?from=&to=&host=&port=&proto=&app=&offset=&limit=`: stored flows,
/// oldest first, with the keys of `--flows-out` (and of `sonde query flows --format jsonl`).
pub(crate) async fn flows(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let src = source(&s, "flow history")?;
    let mut filter = filter_of(&q)?;
    let mut origin = origin_of(&q, &src)?;
    place_of(&s, &q, &src, &mut filter, &mut origin)?;
    let (offset, limit) = page_of(&q, 50)?;
    let local = s.view.local_networks().clone();
    let geo = s.view.geo().cloned();
    let body = blocking(move || {
        // One more than the page, to tell whether another page follows.
        let mut rows = match src {
            Source::Dir(dir) => {
                let reader = FlowReader::open(&dir).map_err(|e| e.to_string())?;
                query::flows(&reader, &filter, offset, limit + 1)
                    .map_err(|e| e.to_string())?
                    .0
            }
            Source::ClickHouse(h) => h.flows(&filter, origin, offset, limit + 1)?,
        };
        let more = rows.len() > limit;
        rows.truncate(limit);
        // The store keeps no locality: stored flows are classified against the local
        // networks as they are now, as the engine classifies live ones, so FLOW_DIRECTION
        // comes out as in --flows-out.
        if !local.is_empty() {
            for r in &mut rows {
                r.flow.locality = sonde_flow::locality::of(&local, &r.flow.key);
            }
        }
        let mut lines = Vec::new();
        // Countries and AS numbers are not stored either: looked up now, as for live flows.
        let mut w = FlowWriter::new(&mut lines, Format::Json).with_geo(geo);
        for r in &rows {
            w.write(r).map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())?;
        drop(w);
        let lines = String::from_utf8(lines).map_err(|e| e.to_string())?;
        let mut body = String::with_capacity(lines.len() + 64);
        body.push_str("{\"flows\":[");
        for (i, line) in lines.lines().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(line);
        }
        body.push_str(&format!(
            "],\"offset\":{offset},\"limit\":{limit},\"more\":{more}}}"
        ));
        Ok(body)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// `GET /api/v1/history/top/{hosts|apps}?from=&to=&…&sort=bytes|packets|flows&offset=&limit=`:
/// hosts (either end of a flow) or applications ranked by their flows' traffic in the range.
pub(crate) async fn top(
    State(s): Shared,
    Path(what): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let hosts = match what.as_str() {
        "hosts" => true,
        "apps" => false,
        "exporters" => return top_exporters(s, q).await,
        _ => {
            return Err(bad(format!(
                "top/{what}: use top/hosts, top/apps or top/exporters"
            )))
        }
    };
    let src = source(&s, "flow history")?;
    let mut filter = filter_of(&q)?;
    let mut origin = origin_of(&q, &src)?;
    place_of(&s, &q, &src, &mut filter, &mut origin)?;
    let (offset, limit) = page_of(&q, 10)?;
    let by = match q.get("sort").map_or("bytes", String::as_str) {
        "bytes" => Metric::Bytes,
        "packets" => Metric::Packets,
        "flows" => Metric::Flows,
        other => return Err(bad(format!("sort={other:?}: use bytes, packets or flows"))),
    };
    let rows = blocking(move || {
        let row = |name: String, t: &query::Totals| {
            json!({ "name": name, "flows": t.flows, "packets": t.packets, "bytes": t.bytes })
        };
        let n = offset + limit;
        let rows: Vec<Value> = if hosts {
            let top = match &src {
                Source::Dir(dir) => {
                    let reader = FlowReader::open(dir).map_err(|e| e.to_string())?;
                    query::top_hosts(&reader, &filter, by, n)
                        .map_err(|e| e.to_string())?
                        .0
                }
                Source::ClickHouse(h) => h.top_hosts(&filter, origin, by, n)?,
            };
            top.iter()
                .skip(offset)
                .map(|((addr, v, vlan), t)| {
                    let mut a = String::new();
                    format_addr(&mut a, addr, *v);
                    let mut r = row(a, t);
                    r["vlan"] = json!(vlan);
                    r
                })
                .collect()
        } else {
            let top = match &src {
                Source::Dir(dir) => {
                    let reader = FlowReader::open(dir).map_err(|e| e.to_string())?;
                    query::top_apps(&reader, &filter, by, n)
                        .map_err(|e| e.to_string())?
                        .0
                }
                Source::ClickHouse(h) => h.top_apps(&filter, origin, by, n)?,
            };
            top.iter()
                .skip(offset)
                .map(|(app, t)| row(query::app_name(*app), t))
                .collect()
        };
        Ok(rows)
    })
    .await?;
    Ok(Json(json!({ "rows": rows, "offset": offset, "limit": limit })).into_response())
}

/// `GET /api/v1/history/top/exporters?from=&to=`: the probes and exporters whose flows are in
/// the ClickHouse history, by traffic (`name` is empty for flows a probe measured itself
/// without saying which it is). A local store is one probe's: no rows.
async fn top_exporters(s: Arc<AppState>, q: HashMap<String, String>) -> Result<Response, ApiError> {
    let Source::ClickHouse(h) = source(&s, "flow history")? else {
        return Ok(Json(json!({ "rows": [] })).into_response());
    };
    let filter = filter_of(&q)?;
    let rows = blocking(move || h.exporters(&filter)).await?;
    let rows: Vec<Value> = rows
        .iter()
        .map(|(ip, t)| {
            json!({
                "name": ip.map(|i| i.to_string()).unwrap_or_default(),
                "flows": t.flows, "packets": t.packets, "bytes": t.bytes,
            })
        })
        .collect();
    Ok(Json(json!({ "rows": rows })).into_response())
}

/// `GET /api/v1/series?family=interface&key=total&from=UNIX&to=UNIX&resolution=auto`: a time
/// series from the data directory (gaps are `null`).
pub(crate) async fn series(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    use sonde_history::series::{Family, Resolution, SeriesReader};
    if let Some(h) = s.info.flow_history.clone() {
        return series_clickhouse(h, q).await;
    }
    let dir = data_dir(&s, "time series")?;
    let family_name = q.get("family").map_or("interface", String::as_str);
    let family = Family::from_name(family_name).ok_or_else(|| {
        bad(format!(
            "family={family_name:?}: use interface, hosts, apps, exporters or filters"
        ))
    })?;
    let key = q.get("key").cloned().unwrap_or_else(|| "total".into());
    let num = |k: &str| query_number::<u64>(&q, k, "Unix seconds expected");
    let (from, to) = (num("from")?, num("to")?);
    let res_name = q
        .get("resolution")
        .map_or("auto", String::as_str)
        .to_string();
    let res = match res_name.as_str() {
        "auto" => None,
        name => Some(
            Resolution::ALL
                .into_iter()
                .find(|r| r.name() == name)
                .ok_or_else(|| bad(format!("resolution={name:?}: use 1s, 1m, 1h, 1d or auto")))?,
        ),
    };
    let result = blocking(move || {
        let mut r = SeriesReader::open(&dir).map_err(|e| e.to_string())?;
        let newest = r.committed().map_err(|e| e.to_string())?.unwrap_or(0);
        let to = to.unwrap_or(newest + 1);
        let from = from.unwrap_or(to.saturating_sub(3600));
        let (res, points) = match res {
            None => r.read_auto(family, &key, from, to),
            Some(res) => r.read(family, &key, res, from, to).map(|p| (res, p)),
        }
        .map_err(|e| e.to_string())?;
        let pts: Vec<Value> = points
            .iter()
            .map(|p| match &p.sample {
                None => json!({ "t": p.t, "value": null }),
                Some(x) => json!({
                    "t": p.t,
                    "value": x.sum.to_array(),
                    "min": x.min.to_array(),
                    "max": x.max.to_array(),
                    "seconds": x.seconds,
                }),
            })
            .collect();
        Ok(json!({
            "family": family.name(),
            "key": key,
            "resolution": res.name(),
            "from": from,
            "to": to,
            "metrics": ["bytes_in", "bytes_out", "packets_in", "packets_out", "flows"],
            "points": pts,
        }))
    })
    .await?;
    Ok(Json(result).into_response())
}

/// `/api/v1/series` from ClickHouse's flows: the interface's, a host's or an application's
/// traffic per minute, hour or day (by flow start), gaps `null` as from the local store.
async fn series_clickhouse(
    h: Arc<ClickHouseHistory>,
    q: HashMap<String, String>,
) -> Result<Response, ApiError> {
    use sonde_probe::SeriesOf;
    let family = q
        .get("family")
        .map_or("interface", String::as_str)
        .to_string();
    let key = q.get("key").cloned().unwrap_or_else(|| "total".into());
    let of = match family.as_str() {
        "interface" => SeriesOf::Total,
        "hosts" => {
            let (addr, vlan) = key.split_once('@').unwrap_or((&key, "0"));
            let n = sonde_history::filter_text::parse_network(addr)
                .ok()
                .filter(|n| n.prefix == if n.ip_version == 4 { 32 } else { 128 })
                .ok_or_else(|| bad(format!("key={key:?}: give a host address (with @VLAN)")))?;
            let vlan = vlan
                .parse()
                .map_err(|_| bad(format!("key={key:?}: the VLAN after @ is a number")))?;
            SeriesOf::Host(n.addr, n.ip_version, vlan)
        }
        "apps" => SeriesOf::App(key.clone()),
        other => {
            return Err(bad(format!(
                "family={other:?}: the ClickHouse history (--history) has interface, hosts and apps"
            )))
        }
    };
    let num = |k: &str| query_number::<u64>(&q, k, "Unix seconds expected");
    let to = num("to")?.unwrap_or(now_ms() / 1000 + 1);
    let from = num("from")?.unwrap_or(to.saturating_sub(3600));
    let span = to.saturating_sub(from);
    let (res, step) = match q.get("resolution").map_or("auto", String::as_str) {
        "auto" if span <= 6 * 3600 => ("1m", 60),
        "auto" if span <= 14 * 86_400 => ("1h", 3600),
        "auto" => ("1d", 86_400),
        "1s" => ("1s", 1),
        "1m" => ("1m", 60),
        "1h" => ("1h", 3600),
        "1d" => ("1d", 86_400),
        other => {
            return Err(bad(format!(
                "resolution={other:?}: use 1s, 1m, 1h, 1d or auto"
            )))
        }
    };
    if span / step > 100_000 {
        return Err(bad(format!(
            "from={from}&to={to} at {res}: more than 100000 points; pick a coarser resolution"
        )));
    }
    let filter = Filter {
        from_ms: Some(from * 1000),
        to_ms: Some(to * 1000),
        ..Filter::default()
    };
    let origin = origin_of(&q, &Source::ClickHouse(h.clone()))?;
    let points = blocking(move || h.series(&filter, origin, &of, step)).await?;
    let mut at = points.iter().peekable();
    let mut pts = Vec::new();
    let mut t = from / step * step;
    while t < to {
        // A flow that started before `from` but lasted into it lands before the first step.
        while at.peek().is_some_and(|p| p.0 < t) {
            at.next();
        }
        pts.push(match at.peek() {
            Some((pt, v)) if *pt == t => json!({ "t": t, "value": v, "seconds": step }),
            _ => json!({ "t": t, "value": null }),
        });
        t += step;
    }
    Ok(Json(json!({
        "family": family,
        "key": key,
        "resolution": res,
        "from": from,
        "to": to,
        "metrics": ["bytes_in", "bytes_out", "packets_in", "packets_out", "flows"],
        "points": pts,
    }))
    .into_response())
}
