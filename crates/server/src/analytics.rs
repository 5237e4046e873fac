//! The REST API over the traffic analytics: detections (`/api/v1/anomalies`), the last
//! interval's top-N and anomaly lists (`/api/v1/interval`), filter-set counts
//! (`/api/v1/filtersets`), and the same from the data directory over any time range
//! (`/api/v1/history/intervals…`, `/api/v1/history/anomalies`).
//!
//! Every string in these answers that came off the wire (addresses are formatted here, names
//! come from the detectors) is JSON-escaped by serde; the console inserts them as text.

use crate::{bad, query_number, ApiError, AppState, Shared};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sonde_history::analytics::{self as store, Kind, LISTS};
use sonde_probe::AnalyticsView;
use std::collections::HashMap;

/// Most rows one analytics request returns.
const MAX_LIMIT: usize = 1000;

fn view(s: &AppState) -> Result<&AnalyticsView, ApiError> {
    s.view.analytics().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "analytics are off (sonde was started with --analytics off)".into(),
        )
    })
}

fn limit_of(q: &HashMap<String, String>, default: usize) -> Result<usize, ApiError> {
    let limit = query_number::<usize>(q, "limit", "a whole number expected")?.unwrap_or(default);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(bad(format!("limit={limit}: use 1 to {MAX_LIMIT}")));
    }
    Ok(limit)
}

/// The detection types, for checking `type=`.
use sonde_analytics::DETECTION_TYPES as TYPES;

fn type_of(q: &HashMap<String, String>) -> Result<Option<String>, ApiError> {
    match q.get("type").filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) if TYPES.contains(&t.as_str()) => Ok(Some(t.clone())),
        Some(t) => Err(bad(format!("type={t:?}: use one of {}", TYPES.join(", ")))),
    }
}

/// `GET /api/v1/anomalies?type=&limit=`: detections in progress, and the latest record of
/// each recent one (newest first), with counts by type since the start.
pub(crate) async fn anomalies(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let v = view(&s)?;
    let kind = type_of(&q)?;
    let limit = limit_of(&q, 100)?;
    let keep = |r: &&Value| kind.as_deref().is_none_or(|k| r["type"] == k);
    let live = v.live.lock().unwrap_or_else(|e| e.into_inner());
    let mut active: Vec<Value> = live
        .active
        .iter()
        .map(|a| a.as_ref())
        .filter(keep)
        .cloned()
        .collect();
    active.sort_by(|a, b| b["first_seen"].as_u64().cmp(&a["first_seen"].as_u64()));
    let recent: Vec<Value> = live
        .recent
        .iter()
        .rev()
        .filter(keep)
        .take(limit)
        .cloned()
        .collect();
    Ok(Json(json!({
        "active": active,
        "recent": recent,
        "totals": live.detections_total,
    }))
    .into_response())
}

/// `GET /api/v1/interval`: the last merged interval (top talkers, destinations, ports,
/// applications and flows; SYN senders, scanners, ICMP errors), and the worm graph (noisy
/// hosts per interval) of the last intervals.
pub(crate) async fn interval(State(s): Shared) -> Result<Response, ApiError> {
    let v = view(&s)?;
    let live = v.live.lock().unwrap_or_else(|e| e.into_inner());
    let worm: Vec<Value> = live
        .worm
        .iter()
        .map(|(t, n)| json!({"start": t, "noisy_hosts": n}))
        .collect();
    Ok(Json(json!({
        "interval_s": v.config.interval_s,
        "top_n": v.config.top_n,
        "interval": live.interval.as_deref(),
        "worm": worm,
    }))
    .into_response())
}

/// `GET /api/v1/filtersets?seconds=N`: each set with its expressions (label, expression,
/// whether the native matcher evaluates it, totals since the start) and the counts of the
/// last N seconds (default 300), expressions in declaration order.
pub(crate) async fn filtersets(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let v = view(&s)?;
    let seconds = query_number::<usize>(&q, "seconds", "a number of seconds expected")?
        .unwrap_or(300)
        .min(3600);
    let Some(sets) = v.filter_sets() else {
        return Ok(Json(json!({ "sets": [], "seconds": [] })).into_response());
    };
    let live = v.live.lock().unwrap_or_else(|e| e.into_inner());
    let at = |c: &sonde_analytics::FilterCounts, i: usize| {
        (
            c.packets.get(i).copied().unwrap_or(0),
            c.bytes.get(i).copied().unwrap_or(0),
        )
    };
    let mut out: Vec<Value> = Vec::new();
    for name in &sets.sets {
        let exprs: Vec<Value> = sets
            .order
            .iter()
            .filter(|&&i| sets.exprs[i].set == *name)
            .map(|&i| {
                let e = &sets.exprs[i];
                let (p, b) = at(&live.filter_totals, i);
                json!({
                    "label": e.label, "expr": e.text, "native": e.native.is_some(),
                    "packets": p, "bytes": b,
                })
            })
            .collect();
        out.push(json!({ "name": name, "expressions": exprs }));
    }
    let n = live.filter_seconds.len();
    let rows: Vec<Value> = live
        .filter_seconds
        .iter()
        .skip(n.saturating_sub(seconds))
        .map(|(t, c)| {
            let counts: Vec<[u64; 2]> = sets
                .order
                .iter()
                .map(|&i| {
                    let (p, b) = at(c, i);
                    [p, b]
                })
                .collect();
            json!({ "t": t, "counts": counts })
        })
        .collect();
    Ok(Json(json!({ "sets": out, "seconds": rows })).into_response())
}

/// `from` and `to` (the filter text of `sonde query`: Unix seconds, dates, `-2h`), as Unix
/// seconds; by default everything kept (as `/api/v1/history/flows`).
pub(crate) fn range_of(q: &HashMap<String, String>) -> Result<(u64, u64), ApiError> {
    use sonde_history::filter_text::parse_time;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let get = |k: &str, default: u64| -> Result<u64, ApiError> {
        match q.get(k).filter(|v| !v.is_empty()) {
            Some(v) => parse_time(v, now_ms)
                .map(|ms| ms / 1000)
                .map_err(|e| bad(format!("{k}={v:?}: {e}"))),
            None => Ok(default),
        }
    };
    let to = get("to", now_ms / 1000 + 1)?;
    let from = get("from", 0)?;
    if from >= to {
        return Err(bad(format!("from={from} is not before to={to}")));
    }
    Ok((from, to))
}

fn data_dir(s: &AppState) -> Result<std::path::PathBuf, ApiError> {
    s.info.data_dir.clone().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "no analytics history: sonde was started without --data-dir".into(),
        )
    })
}

/// Runs a read of the analytics store off the async workers.
async fn blocking<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| crate::internal(e.to_string()))?
        .map_err(crate::internal)
}

/// `GET /api/v1/history/intervals?from=&to=&offset=&limit=`: stored intervals (their whole
/// lists), oldest first.
pub(crate) async fn history_intervals(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let dir = data_dir(&s)?;
    let (from, to) = range_of(&q)?;
    let limit = limit_of(&q, 100)?;
    let offset = query_number::<usize>(&q, "offset", "a whole number expected")?.unwrap_or(0);
    let page = blocking(move || {
        store::read_page(
            &dir,
            Kind::Intervals,
            "start",
            from,
            to,
            offset,
            limit,
            |_| true,
        )
    })
    .await?;
    Ok(Json(json!({
        "from": from, "to": to, "intervals": page.rows, "offset": offset, "limit": limit,
        "more": page.more,
    }))
    .into_response())
}

/// `GET /api/v1/history/intervals/top/{talkers|destinations|ports|apps|flows}?from=&to=&sort=&limit=`:
/// the entries of one list added up over the stored intervals of a range. `intervals_cut`
/// counts the intervals whose list was cut at `--top-n` (0: every sum is exact).
pub(crate) async fn history_top(
    State(s): Shared,
    Path(list): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if !LISTS.contains(&list.as_str()) {
        return Err(bad(format!(
            "top/{list}: use one of {}",
            LISTS.map(|l| format!("top/{l}")).join(", ")
        )));
    }
    let dir = data_dir(&s)?;
    let (from, to) = range_of(&q)?;
    let limit = limit_of(&q, 10)?;
    let sort = q.get("sort").map_or("bytes", String::as_str).to_string();
    if !["bytes", "packets", "flows"].contains(&sort.as_str())
        || (sort == "flows" && !matches!(list.as_str(), "ports" | "apps"))
    {
        return Err(bad(format!(
            "sort={sort:?}: use bytes or packets (flows for ports and apps)"
        )));
    }
    let (top, cut, intervals) = blocking(move || {
        let mut top = store::TopOver::new(&list);
        store::scan(&dir, Kind::Intervals, "start", from, to, |r| {
            top.add(&r.parse()?);
            Ok(true)
        })?;
        let intervals = top.intervals();
        let (rows, cut) = top.finish(&sort, limit);
        Ok((rows, cut, intervals))
    })
    .await?;
    Ok(Json(json!({
        "from": from, "to": to, "rows": top, "intervals": intervals, "intervals_cut": cut,
    }))
    .into_response())
}

/// `GET /api/v1/history/anomalies?from=&to=&type=&offset=&limit=`: stored detection records
/// (a `start` and an `end` record per detection), oldest first.
pub(crate) async fn history_anomalies(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let dir = data_dir(&s)?;
    let (from, to) = range_of(&q)?;
    let kind = type_of(&q)?;
    let limit = limit_of(&q, 100)?;
    let offset = query_number::<usize>(&q, "offset", "a whole number expected")?.unwrap_or(0);
    let page = blocking(move || {
        // Only the page's records are parsed whole; the others are read for their type.
        let keep = |r: &store::RawRecord| match &kind {
            None => true,
            Some(k) => r.field("type").is_some_and(|t| t == k.as_str()),
        };
        store::read_page(
            &dir,
            Kind::Detections,
            "last_seen",
            from,
            to,
            offset,
            limit,
            keep,
        )
    })
    .await?;
    Ok(Json(json!({
        "from": from, "to": to, "detections": page.rows, "offset": offset, "limit": limit,
        "more": page.more,
    }))
    .into_response())
}

/// The analytics part of `/metrics`.
pub(crate) fn metrics(out: &mut String, v: &AnalyticsView) {
    use std::fmt::Write;
    let live = v.live.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(sets) = v.filter_sets() {
        let _ = writeln!(
            out,
            "# HELP sonde_filter_packets_total Packets matching a filter-set expression.\n\
             # TYPE sonde_filter_packets_total counter"
        );
        let label = |i: usize| {
            let e = &sets.exprs[i];
            format!(
                "set=\"{}\",label=\"{}\"",
                prom_escape(&e.set),
                prom_escape(&e.label)
            )
        };
        for &i in &sets.order {
            let p = live.filter_totals.packets.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "sonde_filter_packets_total{{{}}} {p}", label(i));
        }
        let _ = writeln!(
            out,
            "# HELP sonde_filter_bytes_total Bytes (on the wire) of the packets matching a \
             filter-set expression.\n# TYPE sonde_filter_bytes_total counter"
        );
        for &i in &sets.order {
            let b = live.filter_totals.bytes.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "sonde_filter_bytes_total{{{}}} {b}", label(i));
        }
    }
    let _ = writeln!(
        out,
        "# HELP sonde_detections_total Detections started, by type.\n\
         # TYPE sonde_detections_total counter"
    );
    for t in TYPES {
        let n = live.detections_total.get(t).copied().unwrap_or(0);
        let _ = writeln!(out, "sonde_detections_total{{type=\"{t}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP sonde_detections_active Detections in progress.\n\
         # TYPE sonde_detections_active gauge\nsonde_detections_active {}",
        live.active.len()
    );
    let noisy = live.worm.back().map_or(0, |w| w.1);
    let _ = writeln!(
        out,
        "# HELP sonde_noisy_hosts Noisy (worm-like) hosts in the last interval.\n\
         # TYPE sonde_noisy_hosts gauge\nsonde_noisy_hosts {noisy}"
    );
    let _ = writeln!(
        out,
        "# HELP sonde_analytics_late_reports_total Shard reports that arrived after their \
         second or interval was merged without them.\n\
         # TYPE sonde_analytics_late_reports_total counter\nsonde_analytics_late_reports_total {}",
        live.late_reports
    );
}

/// A Prometheus label value: backslash, quote and newline escaped.
pub(crate) fn prom_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
