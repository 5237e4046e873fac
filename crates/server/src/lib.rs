//! The HTTP server inside `sonde` (`--http ADDR:PORT`): a JSON REST API under `/api/v1/` over
//! a running probe (interface counters and rates, hosts and flows with server-side sorting,
//! filtering and paging), its OpenAPI document, and Prometheus metrics at `/metrics`.
//!
//! It runs on its own thread with a single-threaded runtime, so it never takes a core from the
//! shards; snapshots of hosts and flows are taken by each shard between two batches.
//!
//! It also serves the web console (embedded, see [`console`]), behind logins ([`auth`], users in
//! [`users`]) and optionally TLS ([`tls`]). Without logins (`--no-auth`) it only listens on
//! loopback addresses: [`check_addr`] refuses others.

mod alerts;
mod analytics;
pub mod auth;
mod conn;
pub mod console;
mod history;
mod params;
pub mod snapshot;
pub mod tls;
pub mod users;

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use snapshot::AddrText;
use sonde_analytics::Network;
use sonde_dpi::dnscache::flow_addr_u128;
use sonde_dpi::meta::Value as MetaValue;
use sonde_dpi::Meta;
use sonde_flow::host::HostKey;
use sonde_flow::{FlowKey, FlowRow, Host, ShardStats};
use sonde_geo::GeoDb;
use sonde_probe::ProbeView;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The OpenAPI document served at `/api/v1/openapi.json`.
const OPENAPI: &str = include_str!("openapi.json");
/// Page sizes are capped: a page is for people and scripts, not a dump.
pub const MAX_LIMIT: usize = 10_000;

/// Refuses addresses other than loopback when logins are off: traffic data must not be exposed
/// to anyone who can reach the port.
pub fn check_addr(addr: &SocketAddr, logins: bool) -> Result<(), String> {
    if logins || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "--http {addr} with --no-auth: without logins sonde listens only on loopback \
             (127.0.0.1 or ::1); drop --no-auth to require logins (users in --users FILE)"
        ))
    }
}

/// How the server guards itself.
#[derive(Default)]
pub struct Guard {
    /// The users file; None is `--no-auth`.
    pub users: Option<users::Users>,
    /// `--https-cert` / `--https-key`.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

/// What the server tells about itself.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    pub version: String,
    /// The probe's input, as the summary names it (`file x.pcap`, `interface eth0`, ...).
    pub source: String,
    /// The data directory (`--data-dir`), for time series.
    pub data_dir: Option<std::path::PathBuf>,
    /// `--history clickhouse://…`: flow history and series from ClickHouse instead.
    pub flow_history: Option<Arc<sonde_probe::ClickHouseHistory>>,
    /// The input is a file: the live charts follow its packets' time (a 2017 capture replayed
    /// today is charted in 2017, as its history is), not the clock.
    pub traffic_clock: bool,
}

pub(crate) struct AppState {
    view: ProbeView,
    /// The hosts and flows of the last second, shared by the requests that read them.
    cache: snapshot::Cache,
    /// Pages already answered from that snapshot.
    memo: snapshot::Memo,
    info: ServerInfo,
    /// The last counters an `/interface` request saw, for rates between two requests.
    last: Mutex<Option<(Instant, ShardStats)>>,
}

/// A running server; dropping it (or [`Server::stop`]) shuts it down.
pub struct Server {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn stop(mut self) {
        self.shutdown_now();
    }

    fn shutdown_now(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}

/// A listening socket, bound before the probe starts so a busy port is reported at once.
pub struct Bound {
    listener: std::net::TcpListener,
    pub addr: SocketAddr,
}

/// Checks and binds `addr`.
pub fn bind(addr: SocketAddr, logins: bool) -> Result<Bound, String> {
    check_addr(&addr, logins)?;
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        format!("--http {addr}: cannot listen ({e}); is the port in use? pick another with --http")
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("--http {addr}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("--http {addr}: {e}"))?;
    Ok(Bound { listener, addr })
}

/// Serves the API over `view` on a thread of its own.
pub fn start(
    bound: Bound,
    view: ProbeView,
    info: ServerInfo,
    guard: Guard,
) -> Result<Server, String> {
    let Bound {
        listener: std_listener,
        addr: bound,
    } = bound;
    let state = Arc::new(AppState {
        cache: snapshot::Cache::new(view.clone()),
        memo: snapshot::Memo::default(),
        view,
        info,
        last: Mutex::new(None),
    });
    let Guard { users, tls } = guard;
    let auth = auth::Auth::new(users, tls.is_some());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            below_packet_threads();
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .on_thread_start(below_packet_threads)
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("sonde: error: http server: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("sonde: error: http server: {e}");
                        return;
                    }
                };
                let app = router(state, auth).into_make_service_with_connect_info::<auth::Peer>();
                let stop = async {
                    let _ = rx.await;
                };
                let _ = match tls {
                    None => {
                        axum::serve(conn::Listener::new(listener), app)
                            .with_graceful_shutdown(stop)
                            .await
                    }
                    Some(cfg) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                        match tls::TlsListener::new(listener, acceptor) {
                            Ok(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
                            Err(e) => {
                                eprintln!("sonde: error: https server: {e}");
                                return;
                            }
                        }
                    }
                };
            });
        })
        .map_err(|e| format!("cannot start the http thread: {e}"))?;
    Ok(Server {
        addr: bound,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

fn router(state: Arc<AppState>, auth: Arc<auth::Auth>) -> Router {
    let accounts = Router::new()
        .route("/api/v1/login", post(auth::login))
        .route("/api/v1/logout", post(auth::logout))
        .route("/api/v1/me", get(auth::me))
        .route(
            "/api/v1/admin/users",
            get(auth::list_users).post(auth::add_user),
        )
        .route("/api/v1/admin/users/{name}", delete(auth::delete_user))
        .route("/api/v1/admin/tokens", post(auth::add_token))
        .route("/api/v1/admin/tokens/{name}", delete(auth::delete_token))
        .with_state(auth.clone());
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/interface", get(interface))
        .route("/api/v1/sinks", get(sinks))
        .route("/api/v1/hosts", get(hosts))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/hosts/{ip}", get(host))
        .route("/api/v1/top/{what}", get(top))
        .route("/api/v1/series", get(history::series))
        .route("/api/v1/history/flows", get(history::flows))
        .route("/api/v1/history/top/{what}", get(history::top))
        .route("/api/v1/anomalies", get(analytics::anomalies))
        .route("/api/v1/interval", get(analytics::interval))
        .route("/api/v1/filtersets", get(analytics::filtersets))
        .route(
            "/api/v1/history/intervals",
            get(analytics::history_intervals),
        )
        .route(
            "/api/v1/history/intervals/top/{list}",
            get(analytics::history_top),
        )
        .route(
            "/api/v1/history/anomalies",
            get(analytics::history_anomalies),
        )
        .route("/api/v1/alerts", get(alerts::list))
        .route("/api/v1/alerts/exclusions", get(alerts::exclusions))
        .route(
            "/api/v1/admin/alerts/exclusions",
            post(alerts::add_exclusion),
        )
        .route(
            "/api/v1/admin/alerts/exclusions/{id}",
            delete(alerts::delete_exclusion),
        )
        .route("/api/v1/admin/alerts/{id}/ack", post(alerts::ack))
        .route(
            "/api/v1/admin/alerts/{id}/captures/{name}",
            get(alerts::capture),
        )
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/schema", get(schema))
        .route("/metrics", get(metrics))
        .route("/api/{*rest}", any(not_found))
        .fallback(console::serve)
        .with_state(state.clone())
        .merge(accounts)
        .merge(
            Router::new()
                .route("/api/v1/events", get(events))
                .with_state((state, auth.clone())),
        )
        // Inside the login check: a stranger gets 401 whatever the query says.
        .layer(middleware::from_fn(params::layer))
        .layer(middleware::from_fn_with_state(auth.clone(), auth::layer))
        .layer(middleware::map_response(safety_headers))
        .layer(middleware::map_response_with_state(auth, tls_headers))
}

/// Headers every answer carries: no MIME sniffing, no framing, no referrer leaks.
async fn safety_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // API answers (sessions, new tokens, traffic data) are never kept by a cache; the
    // console's files keep their own caching headers.
    if h.get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
        && !h.contains_key(header::CACHE_CONTROL)
    {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

/// Under TLS, browsers are told to keep to HTTPS (HSTS, a year).
async fn tls_headers(State(auth): State<Arc<auth::Auth>>, mut r: Response) -> Response {
    if auth.secure() {
        r.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    r
}

pub(crate) type Shared = State<Arc<AppState>>;

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// A request the API cannot answer, and why (a small error type: handlers use `?`).
pub(crate) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

pub(crate) fn bad(message: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message)
}

/// The query parameter `k` as a number, None when absent; a 400 naming it (and saying what
/// was `expected`) when it is not one.
pub(crate) fn query_number<T: std::str::FromStr>(
    q: &std::collections::HashMap<String, String>,
    k: &str,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    q.get(k)
        .map(|v| {
            v.parse::<T>()
                .map_err(|_| bad(format!("{k}={v:?}: {expected}")))
        })
        .transpose()
}

pub(crate) fn internal(message: String) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, message)
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint: see /api/v1/openapi.json".into(),
    )
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn health(State(s): Shared) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "version": s.info.version,
        "source": s.info.source,
        "uptime_s": s.view.uptime().as_secs_f64(),
        "history": s.info.data_dir.is_some() || s.info.flow_history.is_some(),
    }))
}

fn total(view: &ProbeView) -> ShardStats {
    let mut t = ShardStats::default();
    for s in view.shard_stats() {
        t.merge(&s);
    }
    t
}

async fn interface(State(s): Shared) -> Json<Value> {
    let t = total(&s.view);
    let now = Instant::now();
    let rates = {
        let mut last = s.last.lock().unwrap_or_else(|e| e.into_inner());
        let r = last.as_ref().and_then(|(then, prev)| {
            let dt = now.duration_since(*then).as_secs_f64();
            (dt > 0.0).then(|| {
                (
                    t.packets.saturating_sub(prev.packets) as f64 / dt,
                    t.wire_bytes.saturating_sub(prev.wire_bytes) as f64 * 8.0 / dt,
                    sonde_flow::Direction::ALL.map(|d| {
                        let i = d as usize;
                        t.directions.bytes[i].saturating_sub(prev.directions.bytes[i]) as f64 * 8.0
                            / dt
                    }),
                )
            })
        });
        *last = Some((now, t));
        r
    };
    let drops = s.view.capture_drops();
    let backends = s.view.capture_backends();
    let local = s.view.local_networks();
    Json(json!({
        "source": s.info.source,
        "packets": t.packets,
        "bytes": t.wire_bytes,
        "ip_packets": t.ip_packets,
        "ip_bytes": t.ip_bytes,
        "non_ip": t.non_ip,
        "malformed": t.malformed.iter().sum::<u64>(),
        "dropped": t.dropped.iter().sum::<u64>(),
        "table_full_dropped": t.dropped[sonde_flow::DropReason::FlowTableFull as usize],
        "filtered": t.dropped[sonde_flow::DropReason::Filtered as usize],
        "capture_dropped": drops.dropped,
        "interface_dropped": drops.if_dropped,
        "inputs": s.view.capture_drops_by_input().iter().map(|(name, d)| json!({
            "name": name,
            "capture": backends.iter().find(|(n, _)| n == name).map(|(_, b)| b),
            "received": d.received,
            "capture_dropped": d.dropped,
            "interface_dropped": d.if_dropped,
        })).collect::<Vec<_>>(),
        "shard_capture_dropped": s.view.capture_drops_by_shard().iter().map(|d| d.dropped).collect::<Vec<_>>(),
        "egress": s.view.egress().map(|e| json!({
            "forwarded": e.forwarded,
            "forwarded_bytes": e.forwarded_bytes,
            "shunted": e.shunted,
            "dropped": e.dropped,
        })),
        "flows_active": t.active_flows,
        "flows_created": t.flows_created,
        "hosts_active": t.active_hosts,
        // Since the previous request (null on the first).
        "packets_per_s": rates.map(|r| r.0),
        "bits_per_s": rates.map(|r| r.1),
        // With --local-networks (else an empty list and nulls): the networks, and the IP
        // bytes and packets of flows by direction, with their rate since the previous request.
        "local_networks": local.list().iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        // With --geoip-dir: what the databases give (the console shows its geo views then).
        "geoip": s.view.geo().map(|g| json!({
            "countries": g.has_countries(),
            "asns": g.has_asns(),
            "cities": g.has_cities(),
        })),
        "directions": (!local.is_empty()).then(|| {
            let mut m = serde_json::Map::new();
            for d in sonde_flow::Direction::ALL {
                let i = d as usize;
                m.insert(d.name().into(), json!({
                    "packets": t.directions.packets[i],
                    "bytes": t.directions.bytes[i],
                    "bits_per_s": rates.map(|r| r.2[i]),
                }));
            }
            Value::Object(m)
        }),
    }))
}

/// Paging and sorting parameters every list takes.
fn page(q: &HashMap<String, String>) -> Result<(usize, usize, bool), ApiError> {
    let num = |k: &str, default: usize| -> Result<usize, ApiError> {
        match q.get(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| bad(format!("{k}={v:?}: not a non-negative number"))),
        }
    };
    let offset = num("offset", 0)?;
    let limit = num("limit", 50)?.min(MAX_LIMIT);
    let desc = match q.get("order").map(String::as_str) {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(o) => return Err(bad(format!("order={o:?}: use asc or desc"))),
    };
    Ok((offset, limit, desc))
}

fn addr_text(addr: &[u8; 16], v: u8) -> String {
    let mut s = String::new();
    sonde_export::format_addr(&mut s, addr, v);
    s
}

/// Names a host's JSON carries at most (a CDN address can have thousands).
const MAX_HOST_NAMES: usize = 8;

/// Adds to each host's JSON the names clients resolved to its address with DNS, sorted, at
/// most [`MAX_HOST_NAMES`]: one pass over the DNS cache for the whole page. Attacker data:
/// JSON strings, shown by the console as text only.
fn add_names(view: &ProbeView, hosts: &[&Host], out: &mut [Value]) {
    let Some(dns) = view.dns_names() else {
        return;
    };
    let mut names: HashMap<u128, std::collections::BTreeSet<String>> = hosts
        .iter()
        .map(|h| {
            (
                flow_addr_u128(&h.key.addr, h.key.ip_version),
                Default::default(),
            )
        })
        .collect();
    dns.for_each(|addr, n| {
        if let Some(set) = names.get_mut(&addr) {
            set.insert(n.to_string());
        }
    });
    for (h, v) in hosts.iter().zip(out.iter_mut()) {
        let set = &names[&flow_addr_u128(&h.key.addr, h.key.ip_version)];
        let list: Vec<&String> = set.iter().take(MAX_HOST_NAMES).collect();
        v["names"] = json!(list);
    }
}

/// The address of a host as an `IpAddr`.
fn host_ip(h: &Host) -> std::net::IpAddr {
    sonde_export::ip_addr(&h.key.addr, h.key.ip_version)
}

/// Country, AS number and AS name of `ip` as JSON fields named `{prefix}country`, … (nulls
/// when the databases do not know it); nothing without `--geoip-dir`.
fn put_geo(v: &mut Value, prefix: &str, geo: Option<&GeoDb>, ip: std::net::IpAddr) {
    let Some(g) = geo else { return };
    let found = g.lookup(ip);
    v[format!("{prefix}country")] = json!(found.country.map(|c| c.to_string()));
    v[format!("{prefix}asn")] = json!((found.asn != 0).then_some(found.asn));
    v[format!("{prefix}as_name")] = json!(g.as_name(found.asn, ip));
    if g.has_cities() {
        v[format!("{prefix}city")] = json!(g.city(ip));
    }
}

fn host_json(h: &Host, geo: Option<&GeoDb>) -> Value {
    let mut mac = String::new();
    if h.has_mac {
        sonde_export::format_mac(&mut mac, &h.mac);
    }
    let mut v = json!({
        "ip": addr_text(&h.key.addr, h.key.ip_version),
        "vlan": h.key.vlan,
        "mac": if h.has_mac { Value::from(mac) } else { Value::Null },
        "sent_bytes": h.sent_bytes,
        "sent_packets": h.sent_pkts,
        "rcvd_bytes": h.rcvd_bytes,
        "rcvd_packets": h.rcvd_pkts,
        "flows_as_client": h.flows_as_client,
        "flows_as_server": h.flows_as_server,
        "active_flows": h.active_flows,
        // TCP segments it sent again, over all its flows so far.
        "retransmits_sent": h.retransmits_sent,
        // And the segments its peers sent it again.
        "retransmits_rcvd": h.retransmits_rcvd,
        // In --local-networks (false when none are set).
        "local": h.local == Some(true),
        "first_seen": h.first_ns / 1_000_000_000,
        "last_seen": h.last_ns / 1_000_000_000,
    });
    put_geo(&mut v, "", geo, host_ip(h));
    v
}

/// `GET /api/v1/hosts?sort=bytes&order=desc&offset=0&limit=50&q=10.0.&net=10.0.0.0/8`
async fn hosts(
    State(s): Shared,
    uri: axum::http::Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (offset, limit, desc) = page(&q)?;
    type Key = fn(&Host) -> u64;
    let key: Key = match q.get("sort").map(String::as_str).unwrap_or("bytes") {
        "bytes" => |h| h.sent_bytes + h.rcvd_bytes,
        "packets" => |h| h.sent_pkts + h.rcvd_pkts,
        "sent_bytes" => |h| h.sent_bytes,
        "rcvd_bytes" => |h| h.rcvd_bytes,
        "flows" => |h| (h.flows_as_client + h.flows_as_server) as u64,
        "active_flows" => |h| h.active_flows as u64,
        "retransmits" => |h| h.retransmits_sent as u64,
        "retransmits_rcvd" => |h| h.retransmits_rcvd as u64,
        "first_seen" => |h| h.first_ns,
        "last_seen" => |h| h.last_ns,
        other => {
            return Err(bad(format!(
                "sort={other:?}: use bytes, packets, sent_bytes, rcvd_bytes, flows, \
                     active_flows, retransmits, retransmits_rcvd, first_seen or last_seen"
            )))
        }
    };
    let text = q
        .get("q")
        .filter(|t| !t.is_empty())
        .map(|t| AddrText::new(t));
    let net = q
        .get("net")
        .map(|n| Network::parse_prefix(n))
        .transpose()
        .map_err(bad)?;
    let app = app_param(&q)?;
    let local = local_param(&q)?;
    let (country, asn) = geo_params(&s.view, &q)?;
    let name = q
        .get("name")
        .filter(|t| !t.is_empty())
        .map(|t| t.to_ascii_lowercase());
    let snap = s.cache.get().await.map_err(internal)?;
    let request = format!("hosts?{}", uri.query().unwrap_or(""));
    if let Some(answer) = s.memo.get(&snap, &request) {
        return Ok(Json(answer).into_response());
    }
    // With app=: the hosts at either end of a live flow of that application.
    let app_hosts: Option<hashbrown::HashSet<HostKey>> = app.map(|a| {
        let mut set = hashbrown::HashSet::new();
        for f in snap.flows().filter(|f| is_app(f, a)) {
            let (version, vlan) = (f.key.ip_version, f.key.vlan);
            for addr in [f.key.addr_a, f.key.addr_b] {
                set.insert(HostKey {
                    addr,
                    ip_version: version,
                    vlan,
                });
            }
        }
        set
    });
    // With name=: the addresses some client resolved a name containing it to.
    let named: Option<hashbrown::HashSet<u128>> = name.map(|needle| {
        let mut set = hashbrown::HashSet::new();
        if let Some(dns) = s.view.dns_names() {
            dns.for_each(|addr, n| {
                if n.to_ascii_lowercase().contains(&needle) {
                    set.insert(addr);
                }
            });
        }
        set
    });
    let (total, rows) = snapshot::page(
        &[&snap.hosts],
        |h| {
            let (a, v) = (&h.key.addr, h.key.ip_version);
            net.as_ref().is_none_or(|n| n.contains_addr(a, v))
                && local.is_none_or(|l| (h.local == Some(true)) == l)
                && geo_matches(&s.view, country, asn, h)
                && text.as_ref().is_none_or(|t| t.matches(a, v))
                && app_hosts.as_ref().is_none_or(|s| s.contains(&h.key))
                && named
                    .as_ref()
                    .is_none_or(|s| s.contains(&flow_addr_u128(a, v)))
        },
        key,
        desc,
        offset,
        limit,
    );
    let geo = s.view.geo().map(|g| &**g);
    let mut page: Vec<Value> = rows.iter().map(|h| host_json(h, geo)).collect();
    add_names(&s.view, &rows, &mut page);
    let answer = json!({ "total": total, "offset": offset, "limit": limit, "hosts": page });
    s.memo.put(&snap, request, answer.clone());
    Ok(Json(answer).into_response())
}

/// A page of flows as JSON, with what DPI learned about each (asked of the shards for these
/// flows only).
async fn flows_json(view: &ProbeView, page: Vec<FlowRow>) -> Result<Vec<Value>, ApiError> {
    let v = view.clone();
    let keys: Vec<FlowKey> = page.iter().map(|f| f.key).collect();
    let (metas, tcp) = tokio::task::spawn_blocking(move || (v.flow_meta(&keys), v.flow_tcp(&keys)))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(page
        .iter()
        .zip(metas)
        .zip(tcp)
        .map(|((f, m), t)| {
            let mut v = flow_json(f, m.as_deref(), view.geo().map(|g| &**g));
            put_tcp(&mut v, f, t.as_ref());
            v
        })
        .collect())
}

/// A TCP flow's retransmitted and out-of-order packets per side and its handshake's round
/// trip halves (milliseconds; null until seen); nothing for other flows.
fn put_tcp(v: &mut Value, f: &FlowRow, t: Option<&sonde_flow::TcpHealth>) {
    let Some(t) = t else { return };
    let (c, s) = (f.client_dir(), 1 - f.client_dir());
    let ms = |us: u32| (us > 0).then(|| f64::from(us) / 1000.0);
    v["client_retransmits"] = json!(t.retransmits[c]);
    v["server_retransmits"] = json!(t.retransmits[s]);
    v["client_out_of_order"] = json!(t.out_of_order[c]);
    v["server_out_of_order"] = json!(t.out_of_order[s]);
    v["rtt_client_ms"] = json!(ms(t.rtt_client_us));
    v["rtt_server_ms"] = json!(ms(t.rtt_server_us));
}

/// A host's TCP health over its live flows (at most [`TCP_FLOWS_MAX`], the largest):
/// retransmitted and out-of-order packets it sent and received, and the median round trip of
/// the handshakes (both halves) it took part in.
fn host_tcp(view: &ProbeView, me: &Network, flows: &[&FlowRow]) -> Value {
    let tcp_flows: Vec<&FlowRow> = flows
        .iter()
        .copied()
        .filter(|f| f.key.proto == 6)
        .take(TCP_FLOWS_MAX)
        .collect();
    let keys: Vec<FlowKey> = tcp_flows.iter().map(|f| f.key).collect();
    let health = view.flow_tcp(&keys);
    let (mut sent, mut rcvd, mut ooo_sent, mut ooo_rcvd) = (0u64, 0u64, 0u64, 0u64);
    let mut rtts: Vec<u32> = Vec::new();
    for (f, t) in tcp_flows.iter().zip(&health) {
        let Some(t) = t else { continue };
        // The direction index whose packets this host sent.
        let mine = usize::from(!me.contains_addr(&f.key.addr_a, f.key.ip_version));
        sent += u64::from(t.retransmits[mine]);
        rcvd += u64::from(t.retransmits[1 - mine]);
        ooo_sent += u64::from(t.out_of_order[mine]);
        ooo_rcvd += u64::from(t.out_of_order[1 - mine]);
        if t.rtt_client_us > 0 && t.rtt_server_us > 0 {
            rtts.push(t.rtt_client_us + t.rtt_server_us);
        }
    }
    rtts.sort_unstable();
    json!({
        "flows": health.iter().filter(|t| t.is_some()).count(),
        "retransmits_sent": sent,
        "retransmits_rcvd": rcvd,
        "out_of_order_sent": ooo_sent,
        "out_of_order_rcvd": ooo_rcvd,
        "handshakes": rtts.len(),
        "rtt_median_ms": rtts.get(rtts.len() / 2).map(|&us| f64::from(us) / 1000.0),
    })
}

/// The most TCP flows of one host whose health the host page adds up.
const TCP_FLOWS_MAX: usize = 10_000;

fn flow_json(f: &FlowRow, meta: Option<&Meta>, geo: Option<&GeoDb>) -> Value {
    let c = f.client_dir();
    let s = 1 - c;
    let e = f.ends();
    let (ca, sa, cp, sp) = (e.client_addr, e.server_addr, e.client_port, e.server_port);
    let mut v = json!({
        "client": addr_text(ca, f.key.ip_version),
        "client_port": cp,
        "server": addr_text(sa, f.key.ip_version),
        "server_port": sp,
        "protocol": f.key.proto,
        "vlan": f.key.vlan,
        // in, out, internal or transit (every flow when no network is local).
        "direction": f.direction().name(),
        "application": if f.dpi_done { Value::from(f.l7.name()) } else { Value::Null },
        "client_bytes": f.bytes[c],
        "client_packets": f.pkts[c],
        "server_bytes": f.bytes[s],
        "server_packets": f.pkts[s],
        "first_seen_ms": f.first_ns / 1_000_000,
        "last_seen_ms": f.last_ns / 1_000_000,
        "info": flow_info(meta),
        "meta": flow_meta(meta),
    });
    let ip = |a| sonde_export::ip_addr(a, f.key.ip_version);
    put_geo(&mut v, "client_", geo, ip(ca));
    put_geo(&mut v, "server_", geo, ip(sa));
    v
}

/// Every metadata field the flow has, under its schema key (`GET /api/v1/schema`): generated
/// from `sonde_dpi::meta::FIELDS`, so a new field shows here without a line of this file.
/// Strings are attacker data, like `info`'s.
fn flow_meta(meta: Option<&Meta>) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(m) = meta {
        for f in sonde_dpi::meta::FIELDS {
            let v = match (f.get)(m) {
                None => continue,
                Some(MetaValue::Text(s)) => Value::from(s),
                Some(MetaValue::Number(n)) => Value::from(n),
                Some(MetaValue::List(l)) => Value::from(l.to_vec()),
            };
            out.insert(f.key.into(), v);
        }
    }
    Value::Object(out)
}

/// `GET /api/v1/schema`: the flow record's fields (`sonde schema` as JSON).
async fn schema() -> Json<Value> {
    Json(sonde_export::schema::json())
}

/// The names DPI read off the wire. Attacker data: passed as JSON strings (capped, control
/// characters replaced at capture); the console only ever shows them as text.
fn flow_info(meta: Option<&Meta>) -> Value {
    let mut info = serde_json::Map::new();
    let Some(m) = meta else {
        return Value::Object(info);
    };
    let mut put = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            info.insert(k.into(), Value::from(v.as_str()));
        }
    };
    put("server_name", &m.server_name);
    if let Some(h) = &m.http {
        put("http_host", &h.host);
        put("http_url", &h.url);
        put("user_agent", &h.user_agent);
    }
    if let Some(t) = &m.tls {
        put("tls_sni", &t.sni);
    }
    if let Some(d) = &m.dns {
        put("dns_query", &d.query);
    }
    Value::Object(info)
}

/// `GET /api/v1/flows?host=10.0.0.1&port=443&proto=6&app=TLS&sort=bytes&limit=50`
async fn flows(
    State(s): Shared,
    uri: axum::http::Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let (offset, limit, desc) = page(&q)?;
    type Key = fn(&FlowRow) -> u64;
    let key: Key = match q.get("sort").map(String::as_str).unwrap_or("bytes") {
        "bytes" => |f| f.bytes[0] + f.bytes[1],
        "packets" => |f| f.pkts[0] + f.pkts[1],
        "first_seen" => |f| f.first_ns,
        "last_seen" => |f| f.last_ns,
        other => {
            return Err(bad(format!(
                "sort={other:?}: use bytes, packets, first_seen or last_seen"
            )))
        }
    };
    let num = |k: &str| query_number::<u64>(&q, k, "not a number");
    let (port, proto, vlan) = (num("port")?, num("proto")?, num("vlan")?);
    // A host is an address (either end) or a prefix.
    let host = q
        .get("host")
        .map(|h| Network::parse_prefix(h))
        .transpose()
        .map_err(bad)?;
    let app = app_param(&q)?;
    let direction = direction_param(&q)?;
    let snap = s.cache.get().await.map_err(internal)?;
    let request = format!("flows?{}", uri.query().unwrap_or(""));
    if let Some(answer) = s.memo.get(&snap, &request) {
        return Ok(Json(answer).into_response());
    }
    let (total, rows) = snapshot::page(
        &snap.flow_slices(),
        |f| {
            let k = &f.key;
            port.is_none_or(|p| u64::from(k.port_a) == p || u64::from(k.port_b) == p)
                && proto.is_none_or(|p| u64::from(k.proto) == p)
                && vlan.is_none_or(|v| u64::from(k.vlan) == v)
                && app.is_none_or(|a| is_app(f, a))
                && direction.is_none_or(|d| f.direction() == d)
                && host.as_ref().is_none_or(|h| {
                    h.contains_addr(&k.addr_a, k.ip_version)
                        || h.contains_addr(&k.addr_b, k.ip_version)
                })
        },
        key,
        desc,
        offset,
        limit,
    );
    let page = flows_json(&s.view, rows.into_iter().copied().collect()).await?;
    let answer = json!({ "total": total, "offset": offset, "limit": limit, "flows": page });
    s.memo.put(&snap, request, answer.clone());
    Ok(Json(answer).into_response())
}

/// `local=true|false|all`: hosts in the local networks, the others, or every host.
fn local_param(q: &HashMap<String, String>) -> Result<Option<bool>, ApiError> {
    match q.get("local").map(String::as_str) {
        None | Some("") | Some("all") => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(o) => Err(bad(format!("local={o:?}: use true, false or all"))),
    }
}

/// `country=US` and `asn=15169`: hosts located there (with `--geoip-dir`; without, asking is
/// an error that says so).
pub(crate) fn geo_params(
    view: &ProbeView,
    q: &HashMap<String, String>,
) -> Result<(Option<sonde_geo::Country>, Option<u32>), ApiError> {
    let (country, asn) = parse_geo_params(q)?;
    if (country.is_some() || asn.is_some()) && view.geo().is_none() {
        return Err(bad(NO_GEO.to_string()));
    }
    Ok((country, asn))
}

/// `country=` and `asn=`, checked for form only.
pub(crate) fn parse_geo_params(
    q: &HashMap<String, String>,
) -> Result<(Option<sonde_geo::Country>, Option<u32>), ApiError> {
    let country = match q.get("country").map(String::as_str) {
        None | Some("") => None,
        Some(c) => Some(sonde_geo::Country::parse(c).ok_or_else(|| {
            bad(format!(
                "country={c:?}: use a two-letter country code (US, DE, …)"
            ))
        })?),
    };
    let asn = match q.get("asn").map(String::as_str) {
        None | Some("") => None,
        Some(a) => Some(
            sonde_geo::parse_asn(a)
                .ok_or_else(|| bad(format!("asn={a:?}: use an AS number (15169 or AS15169)")))?,
        ),
    };
    Ok((country, asn))
}

pub(crate) const NO_GEO: &str =
    "no GeoIP database: start sonde with --geoip-dir DIR (`make geoip` fetches free ones)";

fn geo_matches(
    view: &ProbeView,
    country: Option<sonde_geo::Country>,
    asn: Option<u32>,
    h: &Host,
) -> bool {
    if country.is_none() && asn.is_none() {
        return true;
    }
    let Some(g) = view.geo() else { return false };
    let ip = host_ip(h);
    country.is_none_or(|c| g.country(ip) == Some(c)) && asn.is_none_or(|a| g.asn(ip) == a)
}

/// `direction=in|out|internal|transit`: flows of that direction.
fn direction_param(q: &HashMap<String, String>) -> Result<Option<sonde_flow::Direction>, ApiError> {
    match q.get("direction").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(d) => sonde_flow::Direction::from_name(d)
            .map(Some)
            .ok_or_else(|| bad(format!("direction={d:?}: use in, out, internal or transit"))),
    }
}

/// `app=TLS` or `app=91`: an application id, as a protocol or a service on top.
fn app_param(q: &HashMap<String, String>) -> Result<Option<u16>, ApiError> {
    let Some(a) = q.get("app") else {
        return Ok(None);
    };
    a.parse::<u16>()
        .ok()
        .or_else(|| sonde_dpi::Proto::from_name(a).map(|p| p.0))
        .map(Some)
        .ok_or_else(|| bad(format!("app={a:?}: not an application sonde knows")))
}

/// The flow's settled label is application `a`, as its protocol or as the service on top.
fn is_app(f: &FlowRow, a: u16) -> bool {
    f.dpi_done && (f.l7.proto.0 == a || f.l7.app.0 == a)
}

/// Adds `f`'s bytes (both ways) and one flow to `key`'s row of `t`.
fn tally<K: std::hash::Hash + Eq>(t: &mut HashMap<K, (u64, u64)>, key: K, f: &FlowRow) {
    let e = t.entry(key).or_default();
    e.0 += f.bytes[0] + f.bytes[1];
    e.1 += 1;
}

/// Rows of a tally, largest first (ties by name), at most `n`.
fn ranked(t: HashMap<String, (u64, u64)>, label: &str, n: usize) -> Vec<Value> {
    let mut v: Vec<(String, (u64, u64))> = t.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .take(n)
        .map(|(k, (bytes, flows))| json!({ label: k, "bytes": bytes, "flows": flows }))
        .collect()
}

/// The `n` largest rows of a tally by bytes (with room for ties at the edge), keyed by text.
fn top_n<K: Ord>(
    t: impl IntoIterator<Item = (K, (u64, u64))>,
    n: usize,
    text: impl Fn(&K) -> String,
) -> HashMap<String, (u64, u64)> {
    let mut v: Vec<(K, (u64, u64))> = t.into_iter().collect();
    if v.len() > n {
        // Ties at the edge are broken by key, so the same rows come back every time.
        if let Some(last) = n.checked_sub(1) {
            v.select_nth_unstable_by(last, |a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
        }
        v.truncate(n);
    }
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    for (k, (bytes, flows)) in v {
        let e = out.entry(text(&k)).or_default();
        e.0 += bytes;
        e.1 += flows;
    }
    out
}

/// The label of a (dpi done, protocol, application) tally key, as [`app_name`] gives it.
fn app_label(&(done, proto, app): &(bool, u16, u16)) -> String {
    if done {
        sonde_dpi::L7 {
            proto: sonde_dpi::Proto(proto),
            app: sonde_dpi::Proto(app),
            ..Default::default()
        }
        .name()
    } else {
        "Unknown".into()
    }
}

fn app_name(f: &FlowRow) -> String {
    if f.dpi_done {
        f.l7.name()
    } else {
        "Unknown".into()
    }
}

/// `GET /api/v1/hosts/{ip}`: one host (each VLAN it was seen on), its flows, peers,
/// applications and server ports.
async fn host(
    State(s): Shared,
    axum::extract::Path(ip): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let me = match ip.parse::<std::net::IpAddr>() {
        Ok(_) => Network::parse_prefix(&ip).map_err(bad)?,
        Err(_) => return Err(bad(format!("{ip:?} is not an IP address"))),
    };
    let snap = s.cache.get().await.map_err(internal)?;
    let mine_hosts: Vec<&Host> = snap
        .hosts
        .iter()
        .filter(|h| me.contains_addr(&h.key.addr, h.key.ip_version))
        .collect();
    let geo = s.view.geo().map(|g| &**g);
    let mut mine: Vec<Value> = mine_hosts.iter().map(|h| host_json(h, geo)).collect();
    add_names(&s.view, &mine_hosts, &mut mine);
    if mine.is_empty() {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no live host {ip}"),
        ));
    }
    let mut fl: Vec<&FlowRow> = Vec::new();
    let (mut peers, mut apps, mut ports) = (HashMap::new(), HashMap::new(), HashMap::new());
    for f in snap.flows() {
        let k = &f.key;
        let peer = if me.contains_addr(&k.addr_a, k.ip_version) {
            &k.addr_b
        } else if me.contains_addr(&k.addr_b, k.ip_version) {
            &k.addr_a
        } else {
            continue;
        };
        fl.push(f);
        tally(&mut peers, addr_text(peer, k.ip_version), f);
        tally(&mut apps, app_name(f), f);
        let sp = f.ends().server_port;
        tally(&mut ports, format!("{}/{}", sp, f.key.proto), f);
    }
    fl.sort_by(|a, b| (b.bytes[0] + b.bytes[1]).cmp(&(a.bytes[0] + a.bytes[1])));
    let tcp = {
        let (v, fl) = (
            s.view.clone(),
            fl.iter().map(|f| **f).collect::<Vec<FlowRow>>(),
        );
        tokio::task::spawn_blocking(move || host_tcp(&v, &me, &fl.iter().collect::<Vec<_>>()))
            .await
            .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    };
    Ok(Json(json!({
        "host": mine,
        "tcp": tcp,
        "flows_total": fl.len(),
        "flows": flows_json(&s.view, fl.iter().take(100).map(|f| **f).collect()).await?,
        "peers": ranked(peers, "ip", 50),
        "applications": ranked(apps, "application", 50),
        "server_ports": ranked(ports, "port", 50),
    }))
    .into_response())
}

/// `GET /api/v1/top/{talkers|destinations|applications|ports|protocols}?n=10`.
async fn top(
    State(s): Shared,
    axum::extract::Path(what): axum::extract::Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let n = match q.get("n") {
        None => 10,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| bad(format!("n={v:?}: not a non-negative number")))?
            .min(MAX_LIMIT),
    };
    if ![
        "talkers",
        "destinations",
        "applications",
        "ports",
        "protocols",
        "countries",
        "asns",
    ]
    .contains(&what.as_str())
    {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "no top list {what:?}: talkers, destinations, applications, ports, protocols, \
                 countries or asns"
            ),
        ));
    }
    if what == "countries" || what == "asns" {
        return top_places(&s, &what, n, local_param(&q)?).await;
    }
    // Split by --local-networks: hosts local or remote (talkers, destinations), flows of a
    // direction (the others).
    let local = local_param(&q)?;
    let direction = direction_param(&q)?;
    let snap = s.cache.get().await.map_err(internal)?;
    let flows = || {
        snap.flows()
            .filter(move |f| direction.is_none_or(|d| f.direction() == d))
    };
    // Tallied by numeric keys; only the rows shown are turned into text.
    let rows = match what.as_str() {
        "talkers" | "destinations" => {
            let sent = what == "talkers";
            // hashbrown's default hasher: std's SipHash takes a second over a million hosts.
            let mut t: hashbrown::HashMap<([u8; 16], u8), (u64, u64)> =
                hashbrown::HashMap::with_capacity(snap.hosts.len());
            for h in snap
                .hosts
                .iter()
                .filter(|h| local.is_none_or(|l| (h.local == Some(true)) == l))
            {
                let e = t.entry((h.key.addr, h.key.ip_version)).or_default();
                e.0 += if sent { h.sent_bytes } else { h.rcvd_bytes };
                e.1 += u64::from(if sent {
                    h.flows_as_client
                } else {
                    h.flows_as_server
                });
            }
            ranked(top_n(t, n, |(a, v)| addr_text(a, *v)), "ip", n)
        }
        "applications" => {
            let mut t = HashMap::new();
            for f in flows() {
                tally(&mut t, (f.dpi_done, f.l7.proto.0, f.l7.app.0), f);
            }
            ranked(top_n(t, n, app_label), "application", n)
        }
        "ports" => {
            let mut t = HashMap::new();
            for f in flows() {
                let sp = f.ends().server_port;
                tally(&mut t, (sp, f.key.proto), f);
            }
            ranked(top_n(t, n, |(p, proto)| format!("{p}/{proto}")), "port", n)
        }
        _ => {
            let mut t = HashMap::new();
            for f in flows() {
                tally(&mut t, f.key.proto, f);
            }
            ranked(top_n(t, n, u8::to_string), "protocol", n)
        }
    };
    Ok(Json(json!({ "top": what, "rows": rows })).into_response())
}

/// `GET /api/v1/top/countries` and `…/asns`: the countries (ASes) whose live hosts sent and
/// received the most bytes, with how many hosts each has; `unknown` sums the hosts the
/// databases place nowhere (private and reserved addresses, say).
async fn top_places(
    s: &AppState,
    what: &str,
    n: usize,
    local: Option<bool>,
) -> Result<Response, ApiError> {
    let Some(geo) = s.view.geo().cloned() else {
        return Err(ApiError(StatusCode::NOT_FOUND, NO_GEO.to_string()));
    };
    let snap = s.cache.get().await.map_err(internal)?;
    let by_as = what == "asns";
    // (bytes, hosts, an address of it for the AS name), by country code or AS number.
    let mut t: hashbrown::HashMap<u32, (u64, u64, std::net::IpAddr)> = hashbrown::HashMap::new();
    let (mut unknown_bytes, mut unknown_hosts) = (0u64, 0u64);
    for h in snap
        .hosts
        .iter()
        .filter(|h| local.is_none_or(|l| (h.local == Some(true)) == l))
    {
        let ip = host_ip(h);
        let key = if by_as {
            geo.asn(ip)
        } else {
            geo.country(ip).map_or(0, sonde_geo::pack_country)
        };
        let bytes = h.sent_bytes + h.rcvd_bytes;
        if key == 0 {
            unknown_bytes += bytes;
            unknown_hosts += 1;
            continue;
        }
        let e = t.entry(key).or_insert((0, 0, ip));
        e.0 += bytes;
        e.1 += 1;
    }
    let mut v: Vec<(u32, (u64, u64, std::net::IpAddr))> = t.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    let rows: Vec<Value> = v
        .into_iter()
        .take(n)
        .map(|(k, (bytes, hosts, ip))| {
            if by_as {
                json!({ "asn": k, "name": geo.as_name(k, ip), "bytes": bytes, "hosts": hosts })
            } else {
                let code = sonde_geo::unpack_country(k).map(|c| c.to_string());
                json!({ "country": code, "bytes": bytes, "hosts": hosts })
            }
        })
        .collect();
    Ok(Json(json!({
        "top": what,
        "rows": rows,
        "unknown": { "bytes": unknown_bytes, "hosts": unknown_hosts },
    }))
    .into_response())
}

/// `GET /api/v1/events`: Server-Sent Events, one `interface` event a second with the
/// counters of `/api/v1/interface` and the rates over that second, for live charts.
async fn events(
    State((s, auth)): State<(Arc<AppState>, Arc<auth::Auth>)>,
    headers: axum::http::HeaderMap,
) -> axum::response::sse::Sse<
    impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let view = s.view.clone();
    let traffic_clock = s.info.traffic_clock;
    let start = (Instant::now(), total(&view), 0.0);
    let stream = futures_util::stream::unfold(start, move |(then, prev, prev_time)| {
        let view = view.clone();
        let (auth, headers) = (auth.clone(), headers.clone());
        async move {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            // The stream ends with the session or token that opened it (logout, a deleted
            // user or token, an expired session).
            if !auth.still_valid(&headers) {
                return None;
            }
            let now = Instant::now();
            let t = total(&view);
            let dt = now.duration_since(then).as_secs_f64().max(1e-9);
            // The time of this point: for a file, the newest packet's, moving on with the clock
            // through a quiet second (so it is charted as zero, not skipped); else the clock's.
            let time = if traffic_clock && t.last_packet_ns > 0 {
                (t.last_packet_ns as f64 / 1e9).max(prev_time + dt)
            } else {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64())
            };
            let data = json!({
                "t": time,
                "packets": t.packets,
                "bytes": t.wire_bytes,
                "flows_active": t.active_flows,
                "hosts_active": t.active_hosts,
                "dropped": t.dropped.iter().sum::<u64>(),
                // The overload signals apart from what a filter rejected: packets the
                // kernel dropped for lack of room in sonde's rings, and packets the full flow
                // table could not take.
                "capture_dropped": view.capture_drops().dropped,
                "table_full_dropped": t.dropped[sonde_flow::DropReason::FlowTableFull as usize],
                "packets_per_s": t.packets.saturating_sub(prev.packets) as f64 / dt,
                "bits_per_s": t.wire_bytes.saturating_sub(prev.wire_bytes) as f64 * 8.0 / dt,
                // With --local-networks: the IP bit rate of each flow direction (the counts
                // move as flows pass them on, once a second of traffic).
                "direction_bits_per_s": (!view.local_networks().is_empty()).then(|| {
                    let mut m = serde_json::Map::new();
                    for d in sonde_flow::Direction::ALL {
                        let i = d as usize;
                        let b = t.directions.bytes[i].saturating_sub(prev.directions.bytes[i]);
                        m.insert(d.name().into(), json!(b as f64 * 8.0 / dt));
                    }
                    Value::Object(m)
                }),
            });
            let event = Event::default().event("interface").data(data.to_string());
            Some((Ok(event), (now, t, time)))
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Lowers the calling thread's CPU priority (nice 10): where the API's threads and the packet
/// threads share a core, the scheduler then gives the packets the time and the API the rest.
/// A failure only leaves the priority as it was.
fn below_packet_threads() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take plain integers and only touch this thread's nice
    // value (per thread on Linux).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

/// Prometheus text format, one series per shard and the totals.
async fn metrics(State(s): Shared) -> Response {
    use std::fmt::Write;
    let shards = s.view.shard_stats();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, get: &dyn Fn(&ShardStats) -> u64| {
        let _ = writeln!(
            out,
            "# HELP sonde_{name} {help}\n# TYPE sonde_{name} {kind}"
        );
        for (i, st) in shards.iter().enumerate() {
            let _ = writeln!(out, "sonde_{name}{{shard=\"{i}\"}} {}", get(st));
        }
    };
    family("packets_total", "counter", "Packets seen.", &|s| s.packets);
    family("bytes_total", "counter", "Bytes on the wire.", &|s| {
        s.wire_bytes
    });
    family(
        "ip_packets_total",
        "counter",
        "IP packets counted in flows.",
        &|s| s.ip_packets,
    );
    family(
        "ip_bytes_total",
        "counter",
        "IP bytes counted in flows.",
        &|s| s.ip_bytes,
    );
    family("malformed_total", "counter", "Malformed packets.", &|s| {
        s.malformed.iter().sum()
    });
    family(
        "dropped_total",
        "counter",
        "Packets dropped by sonde (table full, filtered).",
        &|s| s.dropped.iter().sum(),
    );
    family("flows_created_total", "counter", "Flows created.", &|s| {
        s.flows_created
    });
    family("flows_active", "gauge", "Flows in the flow tables.", &|s| {
        s.active_flows
    });
    family(
        "hosts_active",
        "gauge",
        "Hosts in a shard's host table.",
        &|s| s.active_hosts,
    );
    family(
        "table_memory_bytes",
        "gauge",
        "Memory of the flow and host tables.",
        &|s| s.table_memory,
    );
    let _ = writeln!(
        out,
        "# HELP sonde_shard_reader_seconds_total Time the shard spent copying snapshots for \
         the API instead of processing packets.\n# TYPE sonde_shard_reader_seconds_total counter"
    );
    for (i, st) in shards.iter().enumerate() {
        let secs = st.reader_ns as f64 / 1e9;
        let _ = writeln!(
            out,
            "sonde_shard_reader_seconds_total{{shard=\"{i}\"}} {secs}"
        );
    }
    if !s.view.local_networks().is_empty() {
        // Every shard summed: both ways of each flow under its direction.
        let mut t = sonde_flow::DirectionCounts::default();
        for st in &shards {
            t.merge(&st.directions);
        }
        for (name, what, v) in [
            ("packets", "Packets", &t.packets),
            ("bytes", "IP bytes", &t.bytes),
        ] {
            let _ = writeln!(
                out,
                "# HELP sonde_direction_{name}_total {what} of flows by direction (--local-networks; \
                 in: remote client to local server, out: local to remote, internal, transit; \
                 both ways of a flow under its direction).\n\
                 # TYPE sonde_direction_{name}_total counter"
            );
            for d in sonde_flow::Direction::ALL {
                let _ = writeln!(
                    out,
                    "sonde_direction_{name}_total{{direction=\"{}\"}} {}",
                    d.name(),
                    v[d as usize]
                );
            }
        }
    }
    let d = s.view.capture_drops();
    let _ = writeln!(
        out,
        "# HELP sonde_capture_dropped_total Packets the capture dropped (kernel buffer full).\n\
         # TYPE sonde_capture_dropped_total counter\nsonde_capture_dropped_total {}\n\
         # HELP sonde_interface_dropped_total Packets the interface dropped.\n\
         # TYPE sonde_interface_dropped_total counter\nsonde_interface_dropped_total {}",
        d.dropped, d.if_dropped
    );
    capture_metrics(&mut out, &s.view);
    sink_metrics(&mut out, s.view.sinks());
    if let Some(a) = s.view.analytics() {
        analytics::metrics(&mut out, a);
    }
    alerts::metrics(&mut out, &s);
    {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = writeln!(
            out,
            "# HELP sonde_logins_total Login attempts by outcome: ok, failed (wrong user or password), throttled (refused before any check: too many failures of that client and user), busy (refused: too many password checks at once).\n\
             # TYPE sonde_logins_total counter\n\
             sonde_logins_total{{outcome=\"ok\"}} {}\n\
             sonde_logins_total{{outcome=\"failed\"}} {}\n\
             sonde_logins_total{{outcome=\"throttled\"}} {}\n\
             sonde_logins_total{{outcome=\"busy\"}} {}",
            auth::LOGINS_OK.load(Relaxed),
            auth::LOGINS_FAILED.load(Relaxed),
            auth::LOGINS_THROTTLED.load(Relaxed),
            auth::LOGINS_BUSY.load(Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP sonde_https_refused_handshakes_total HTTPS connections closed before their handshake: a client over its share of handshakes in progress, or every slot taken.\n\
             # TYPE sonde_https_refused_handshakes_total counter\n\
             sonde_https_refused_handshakes_total {}",
            tls::REFUSED_HANDSHAKES.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sonde_http_refused_connections_total HTTP connections closed at once: their client (or everyone) held the most connections allowed.\n\
             # TYPE sonde_http_refused_connections_total counter\n\
             sonde_http_refused_connections_total {}\n\
             # HELP sonde_http_idle_closed_total HTTP connections closed after 120 s without a byte read or written.\n\
             # TYPE sonde_http_idle_closed_total counter\n\
             sonde_http_idle_closed_total {}",
            conn::REFUSED.load(Relaxed),
            conn::IDLE_CLOSED.load(Relaxed)
        );
    }
    if let Some(t) = s.view.trigger() {
        t.metrics(&mut out);
    }
    if let Some(e) = s.view.egress() {
        let _ = write!(
            out,
            "\n# HELP sonde_egress_packets_total Packets offered to egress, by what became of them: forwarded (to the pcap ring or interface), shunted (not chosen), dropped (chosen, but a destination could not take them).\n\
             # TYPE sonde_egress_packets_total counter\n\
             sonde_egress_packets_total{{action=\"forwarded\"}} {}\n\
             sonde_egress_packets_total{{action=\"shunted\"}} {}\n\
             sonde_egress_packets_total{{action=\"dropped\"}} {}\n\
             # HELP sonde_egress_forwarded_bytes_total Captured bytes of the packets egress forwarded.\n\
             # TYPE sonde_egress_forwarded_bytes_total counter\n\
             sonde_egress_forwarded_bytes_total {}\n",
            e.forwarded, e.shunted, e.dropped, e.forwarded_bytes
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// `GET /api/v1/sinks`: every flow output (file, IPFIX, Kafka, ClickHouse, …) with its
/// counters: what it was offered, dropped at its queue, wrote, holds not yet stored (an
/// outage buffers there), could not deliver, and whether it stopped on an error.
async fn sinks(State(s): Shared) -> Json<Value> {
    use std::sync::atomic::Ordering::Relaxed;
    let rows: Vec<Value> = s
        .view
        .sinks()
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "offered": l.offered.load(Relaxed),
                "queue_dropped": l.queue_dropped.load(Relaxed),
                "written": l.written.load(Relaxed),
                "pending": l.pending.load(Relaxed),
                "dropped": l.dropped.load(Relaxed),
                "failed": l.failed.load(Relaxed),
            })
        })
        .collect();
    Json(json!({ "sinks": rows }))
}

/// Kernel drops per live interface and per shard: the first sign of overload (packets a BPF
/// filter rejected in the kernel are in none of these).
fn capture_metrics(out: &mut String, view: &sonde_probe::ProbeView) {
    use std::fmt::Write;
    let (live, shards) = view.live_capture_drops();
    if !live.is_empty() {
        let _ = writeln!(
            out,
            "# HELP sonde_input_capture_info What reads each live interface (--capture): ring, pcap, or xdp with its mode.\n\
             # TYPE sonde_input_capture_info gauge"
        );
        for (name, backend) in view.capture_backends() {
            let _ = writeln!(
                out,
                "sonde_input_capture_info{{interface=\"{}\",capture=\"{}\"}} 1",
                analytics::prom_escape(&name),
                analytics::prom_escape(&backend)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sonde_input_received_total Packets the kernel delivered to sonde's sockets, per interface.\n\
             # TYPE sonde_input_received_total counter\n\
             # HELP sonde_input_capture_dropped_total Packets the kernel dropped for lack of room in sonde's rings, per interface.\n\
             # TYPE sonde_input_capture_dropped_total counter\n\
             # HELP sonde_input_interface_dropped_total Packets the interface itself dropped, per interface.\n\
             # TYPE sonde_input_interface_dropped_total counter"
        );
        for (name, d) in &live {
            let name = analytics::prom_escape(name);
            let _ = writeln!(
                out,
                "sonde_input_received_total{{interface=\"{name}\"}} {}\n\
                 sonde_input_capture_dropped_total{{interface=\"{name}\"}} {}\n\
                 sonde_input_interface_dropped_total{{interface=\"{name}\"}} {}",
                d.received, d.dropped, d.if_dropped
            );
        }
        let _ = writeln!(
            out,
            "# HELP sonde_shard_capture_dropped_total Packets the kernel dropped for lack of room in a shard's ring.\n\
             # TYPE sonde_shard_capture_dropped_total counter"
        );
        for (i, d) in &shards {
            let _ = writeln!(
                out,
                "sonde_shard_capture_dropped_total{{shard=\"{i}\"}} {}",
                d.dropped
            );
        }
    }
}

/// Every flow sink's counters while it runs, labelled by the sink's name (a URL or a path:
/// quotes and backslashes escaped as the exposition format asks).
fn sink_metrics(out: &mut String, sinks: &[std::sync::Arc<sonde_probe::sink_queue::SinkLive>]) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let label = |n: &str| {
        n.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', " ")
    };
    type Get = fn(&sonde_probe::sink_queue::SinkLive) -> u64;
    let families: [(&str, &str, &str, Get); 6] = [
        ("sink_offered_records_total", "counter", "Records offered to the sink's queue.", |l| l.offered.load(Relaxed)),
        ("sink_queue_dropped_records_total", "counter", "Records dropped because the sink's queue was full or the sink had failed.", |l| l.queue_dropped.load(Relaxed)),
        ("sink_written_records_total", "counter", "Records the sink took.", |l| l.written.load(Relaxed)),
        ("sink_dropped_total", "counter", "What the destination could not take (failed deliveries, rows not stored), in the sink's unit.", |l| l.dropped.load(Relaxed)),
        ("sink_pending_records", "gauge", "Records the sink holds that are not at the destination yet (buffered during an outage, not yet acknowledged).", |l| l.pending.load(Relaxed)),
        ("sink_failed", "gauge", "1 when the sink stopped on an error.", |l| l.failed.load(Relaxed) as u64),
    ];
    for (name, kind, help, get) in families {
        let _ = writeln!(
            out,
            "# HELP sonde_{name} {help}\n# TYPE sonde_{name} {kind}"
        );
        for l in sinks {
            let _ = writeln!(
                out,
                "sonde_{name}{{sink=\"{}\"}} {}",
                label(&l.name),
                get(l)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_addr;

    #[test]
    fn exposed_addresses_need_logins() {
        let any: std::net::SocketAddr = "0.0.0.0:3000".parse().unwrap();
        let lo: std::net::SocketAddr = "[::1]:3000".parse().unwrap();
        assert!(check_addr(&any, false).is_err());
        assert!(check_addr(&any, true).is_ok());
        assert!(check_addr(&lo, false).is_ok());
    }
}
