//! The REST API over the data directory (`--data-dir`): time series, and the flow history with
//! the queries of `sonde query` (flows of a host/port/application in a time range, top hosts and
//! applications over a range). Each request opens the files afresh, so it sees what the writer
//! has checkpointed, and runs on a blocking thread: a long scan never holds up the async ones.

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
use std::collections::HashMap;
use std::path::PathBuf;

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

/// `offset` and `limit` (at most [`MAX_LIMIT`]).
fn page_of(q: &HashMap<String, String>, default_limit: usize) -> Result<(usize, usize), ApiError> {
    let num = |k: &str, default: usize| {
        query_number::<usize>(q, k, "a whole number expected").map(|n| n.unwrap_or(default))
    };
    let limit = num("limit", default_limit)?;
    if limit == 0 || limit > MAX_LIMIT {
        return Err(bad(format!("limit={limit}: use 1 to {MAX_LIMIT}")));
    }
    Ok((num("offset", 0)?, limit))
}

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
    let dir = data_dir(&s, "flow history")?;
    let filter = filter_of(&q)?;
    let (offset, limit) = page_of(&q, 50)?;
    let body = blocking(move || {
        let reader = FlowReader::open(&dir).map_err(|e| e.to_string())?;
        // One more than the page, to tell whether another page follows.
        let (mut rows, _) =
            query::flows(&reader, &filter, offset, limit + 1).map_err(|e| e.to_string())?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let mut lines = Vec::new();
        let mut w = FlowWriter::new(&mut lines, Format::Json);
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
        _ => return Err(bad(format!("top/{what}: use top/hosts or top/apps"))),
    };
    let dir = data_dir(&s, "flow history")?;
    let filter = filter_of(&q)?;
    let (offset, limit) = page_of(&q, 10)?;
    let by = match q.get("sort").map_or("bytes", String::as_str) {
        "bytes" => Metric::Bytes,
        "packets" => Metric::Packets,
        "flows" => Metric::Flows,
        other => return Err(bad(format!("sort={other:?}: use bytes, packets or flows"))),
    };
    let rows = blocking(move || {
        let reader = FlowReader::open(&dir).map_err(|e| e.to_string())?;
        let row = |name: String, t: &query::Totals| {
            json!({ "name": name, "flows": t.flows, "packets": t.packets, "bytes": t.bytes })
        };
        let rows: Vec<Value> = if hosts {
            let (top, _) = query::top_hosts(&reader, &filter, by, offset + limit)
                .map_err(|e| e.to_string())?;
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
            let (top, _) = query::top_apps(&reader, &filter, by, offset + limit)
                .map_err(|e| e.to_string())?;
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

/// `GET /api/v1/series?family=interface&key=total&from=UNIX&to=UNIX&resolution=auto`: a time
/// series from the data directory (gaps are `null`).
pub(crate) async fn series(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    use sonde_history::series::{Family, Resolution, SeriesReader};
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
