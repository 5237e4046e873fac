//! The REST API over alerts: engaged and past alerts with filters and paging
//! (`/api/v1/alerts`), acknowledgements and exclusions (admin, under `/api/v1/admin/alerts`).
//!
//! Past alerts come from the data directory's alert store (every run's), or, without one, from
//! the run's memory. Every string here may have come off the wire (hosts, a script's evidence);
//! serde escapes it for JSON and the console inserts it as text.

use crate::auth::Identity;
use crate::{bad, query_number, ApiError, AppState, Shared};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use sonde_history::analytics::{self as store, Kind};
use sonde_probe::AlertHub;
use std::collections::HashMap;
use std::sync::Arc;

const MAX_LIMIT: usize = 1000;

fn hub(s: &AppState) -> Result<&Arc<AlertHub>, ApiError> {
    s.view
        .alerts()
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, "this run has no alerts".into()))
}

/// The filters of `/api/v1/alerts` (and `sonde query alerts`), checked.
struct Filter {
    state: String,
    kind: Option<String>,
    severity: Option<usize>,
    entity: Option<String>,
    source: Option<String>,
}

impl Filter {
    fn parse(q: &HashMap<String, String>) -> Result<Filter, ApiError> {
        let get = |k: &str| q.get(k).filter(|v| !v.is_empty()).cloned();
        let state = get("state").unwrap_or_else(|| "all".into());
        if !["all", "engaged", "released"].contains(&state.as_str()) {
            return Err(bad(format!(
                "state={state:?}: use engaged, released or all"
            )));
        }
        let severity = match get("severity") {
            None => None,
            Some(s) => Some(sonde_alerts::severity_rank(&s).ok_or_else(|| {
                bad(format!(
                    "severity={s:?}: use one of {} (that severity and above)",
                    sonde_alerts::SEVERITIES.join(", ")
                ))
            })?),
        };
        Ok(Filter {
            state,
            kind: get("type"),
            severity,
            entity: get("entity").or(get("host")),
            source: get("source"),
        })
    }

    fn keeps(&self, a: &Value) -> bool {
        if self.state != "all" && a["state"] != self.state.as_str() {
            return false;
        }
        if let Some(k) = &self.kind {
            let t = a["type"].as_str().unwrap_or("");
            let ok = match k.strip_suffix('*') {
                Some(p) => t.starts_with(p),
                None => t == k,
            };
            if !ok {
                return false;
            }
        }
        if let Some(min) = self.severity {
            let s = a["severity"]
                .as_str()
                .and_then(sonde_alerts::severity_rank)
                .unwrap_or(0);
            if s < min {
                return false;
            }
        }
        if let Some(e) = &self.entity {
            if a["entity"]["value"] != e.as_str() && a["host"] != e.as_str() {
                return false;
            }
        }
        if let Some(src) = &self.source {
            if a["source"] != src.as_str() {
                return false;
            }
        }
        true
    }
}

/// `GET /api/v1/alerts?state=&type=&severity=&entity=&source=&from=&to=&offset=&limit=`:
/// the engaged alerts (all of them that match, newest first) and a page of every alert that
/// matches and overlaps the range (engaged first, then by start, newest first); counters since
/// the start of the run.
pub(crate) async fn list(
    State(s): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let hub = hub(&s)?.clone();
    let f = Filter::parse(&q)?;
    let (from, to) = crate::analytics::range_of(&q)?;
    let limit = query_number::<usize>(&q, "limit", "a whole number expected")?.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(bad(format!("limit={limit}: use 1 to {MAX_LIMIT}")));
    }
    let offset = query_number::<usize>(&q, "offset", "a whole number expected")?.unwrap_or(0);
    let (engaged, recent) = hub.live();
    let mut all: Vec<Value> = match hub.data_dir() {
        Some(dir) => {
            let dir = dir.to_path_buf();
            let lo = from.saturating_sub(86_400);
            let events =
                tokio::task::spawn_blocking(move || store::read(&dir, Kind::Alerts, "at", lo, to))
                    .await
                    .map_err(|e| crate::internal(e.to_string()))?
                    .map_err(crate::internal)?;
            sonde_alerts::fold(events, from, to)
        }
        None => recent,
    };
    // The live record of an engaged alert is fresher than its stored start.
    let live_ids: Vec<u64> = engaged.iter().filter_map(|a| a["id"].as_u64()).collect();
    all.retain(|a| !a["id"].as_u64().is_some_and(|id| live_ids.contains(&id)));
    let engaged: Vec<Value> = engaged
        .into_iter()
        .filter(|a| {
            let start = a["start"].as_u64().unwrap_or(0);
            start < to && f.keeps(a)
        })
        .collect();
    all.retain(|a| f.keeps(a));
    all.sort_by(|a, b| b["start"].as_u64().cmp(&a["start"].as_u64()));
    let mut rows: Vec<Value> = engaged.clone();
    rows.extend(all);
    // (captures are added to the page's rows below)
    let total = rows.len();
    let more = total > offset.saturating_add(limit);
    let mut page: Vec<Value> = rows.into_iter().skip(offset).take(limit).collect();
    let mut engaged = engaged;
    for a in page.iter_mut().chain(engaged.iter_mut()) {
        if let Some(c) = a["id"].as_u64().and_then(|id| captures_of(&s, id)) {
            a["captures"] = c;
        }
    }
    let c = hub.counters();
    Ok(Json(json!({
        "from": from, "to": to, "engaged": engaged, "alerts": page, "total": total,
        "offset": offset, "limit": limit, "more": more,
        "counters": {
            "engaged": c.engaged, "released": c.released, "rate_limited": c.rate_limited,
            "entity_limited": c.entity_limited, "excluded": c.excluded, "flaps": c.flaps,
        },
    }))
    .into_response())
}

/// `GET /api/v1/alerts/exclusions`: every exclusion (those from the command line or the config
/// file are not removable).
pub(crate) async fn exclusions(State(s): Shared) -> Result<Response, ApiError> {
    let hub = hub(&s)?;
    Ok(Json(json!({ "exclusions": hub.exclusions() })).into_response())
}

fn who(id: &Option<Extension<Identity>>) -> String {
    id.as_ref()
        .and_then(|Extension(i)| i.user.clone())
        .unwrap_or_else(|| "admin".into())
}

/// `POST /api/v1/admin/alerts/exclusions` `{"type":..,"host":..,"net":..,"app":..,"comment":..}`:
/// takes effect at once (engaged alerts it matches are released) and is kept in the data
/// directory across restarts.
pub(crate) async fn add_exclusion(
    State(s): Shared,
    id: Option<Extension<Identity>>,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    let hub = hub(&s)?;
    let x = sonde_alerts::Exclusion::from_json(&body).map_err(bad)?;
    let v = hub.exclude(x, &who(&id)).map_err(crate::internal)?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

/// `DELETE /api/v1/admin/alerts/exclusions/{id}`.
pub(crate) async fn delete_exclusion(
    State(s): Shared,
    Path(xid): Path<u64>,
) -> Result<Response, ApiError> {
    let hub = hub(&s)?;
    if hub.unexclude(xid).map_err(crate::internal)? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no removable exclusion {xid} (those given at start stay for the run)"),
        ))
    }
}

/// `POST /api/v1/admin/alerts/{id}/ack`: marks an alert of this run acknowledged.
pub(crate) async fn ack(
    State(s): Shared,
    id: Option<Extension<Identity>>,
    Path(aid): Path<u64>,
) -> Result<Response, ApiError> {
    let hub = hub(&s)?;
    match hub.ack(aid, &who(&id)) {
        Some(v) => Ok(Json(v).into_response()),
        None => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no alert {aid} in this run's memory (engaged or among the last released)"),
        )),
    }
}

/// The alerts' part of `/metrics`.
pub(crate) fn metrics(out: &mut String, s: &AppState) {
    if let Some(h) = s.view.alerts() {
        h.metrics(out);
    }
}

/// The trigger-capture files of an alert, for its record (`captures`).
pub(crate) fn captures_of(s: &AppState, id: u64) -> Option<Value> {
    let t = s.view.trigger()?;
    let files: Vec<Value> = t
        .files(id)
        .into_iter()
        .map(|f| {
            json!({"name": f.name, "packets": f.packets, "bytes": f.bytes,
                "complete": f.complete, "truncated_by": f.truncated_by.map(|c| c.name()),
                "dropped": f.dropped})
        })
        .collect();
    (!files.is_empty()).then_some(Value::Array(files))
}

/// `GET /api/v1/admin/alerts/{id}/captures/{name}`: a trigger-capture file of the alert, as
/// `application/vnd.tcpdump.pcap` (admin: packets hold whatever the wire carried). Only a
/// name that trigger capture lists for that alert is served, so no path reaches elsewhere.
pub(crate) async fn capture(
    State(s): Shared,
    Path((aid, name)): Path<(u64, String)>,
) -> Result<Response, ApiError> {
    use axum::http::header;
    let t = s.view.trigger().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "trigger capture is off (see --trigger-capture)".into(),
        )
    })?;
    let Some(f) = t.files(aid).into_iter().find(|f| f.name == name) else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("alert {aid} has no capture named {name:?}"),
        ));
    };
    let path = f.path.clone();
    let file = tokio::task::spawn_blocking(move || std::fs::File::open(&path))
        .await
        .map_err(|e| crate::internal(e.to_string()))?
        .map_err(|e| crate::internal(format!("cannot read the capture: {e}")))?;
    // Read in chunks on a blocking thread; the answer streams them (files reach 100 MB).
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = file;
        loop {
            let mut buf = vec![0u8; 1 << 16];
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(buf.into())).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "application/vnd.tcpdump.pcap".to_string(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", f.name),
            ),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}
