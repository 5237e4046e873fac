//! Logins, sessions, API tokens and roles.
//!
//! - People log in at `POST /api/v1/login` and get a session cookie (`HttpOnly`,
//!   `SameSite=Strict`, `Secure` under TLS). Sessions live in memory: a restart logs everyone out.
//! - Scripts send `Authorization: Bearer TOKEN` (tokens from `sonde user token`).
//! - `viewer` reads everything; `admin` also manages users (`/api/v1/admin/…`).
//! - Logins are throttled per client (an IPv4 address, an IPv6 /64) and user name: an attempt
//!   is counted *before* its password is hashed, so a burst of concurrent attempts cannot pass
//!   the limit; after [`MAX_FAILURES`] failures the pair waits, twice as long after each further
//!   failure (1 s up to [`LOCKOUT`]). A stranger's failures from elsewhere never lock the admin
//!   out. At most [`MAX_HASHES`] password hashes run at once (each takes ~19 MiB): past that a
//!   login is answered 503 at once. Refused logins are counted in `/metrics`.
//!
//! With `--no-auth` (loopback addresses only) every request acts as an admin.

use crate::users::{self, Kind, Role, Users};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const COOKIE: &str = "sonde_session";
/// A session ends after this long without a request.
pub const IDLE: Duration = Duration::from_secs(12 * 3600);
pub const MAX_FAILURES: u32 = 5;
/// The longest wait between attempts of a client and user that keeps failing.
pub const LOCKOUT: Duration = Duration::from_secs(60);
/// Password hashes running at once, at most (argon2's default takes ~19 MiB each).
pub const MAX_HASHES: usize = 4;

/// Logins refused before any hash (throttled, or too many hashes running) and logins that
/// failed, since the start, for `/metrics`.
pub static LOGINS_THROTTLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static LOGINS_BUSY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static LOGINS_FAILED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static LOGINS_OK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The client as the throttle counts it: an IPv4 address, or the /64 of an IPv6 address (one
/// host usually has a whole /64).
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
        v4 => v4,
    }
}

/// Failures and attempts in flight of one (client, user name).
#[derive(Clone, Copy, Debug)]
struct Attempts {
    failures: u32,
    in_flight: u32,
    last_failure: Instant,
}

impl Attempts {
    /// How long this pair must still wait before its next attempt (zero: go ahead).
    fn wait(&self) -> Duration {
        let counted = self.failures + self.in_flight;
        if counted < MAX_FAILURES {
            return Duration::ZERO;
        }
        // 1 s after the 5th failure, then 2, 4, ... up to LOCKOUT; attempts in flight count
        // as failures until they are decided.
        let step = (counted - MAX_FAILURES).min(16);
        let backoff = Duration::from_secs(1u64 << step).min(LOCKOUT);
        backoff.saturating_sub(self.last_failure.elapsed())
    }
}
/// Sessions and failure records are bounded: the oldest go first.
const MAX_SESSIONS: usize = 10_000;
const MAX_FAILURE_RECORDS: usize = 10_000;

/// Who is asking, as the auth layer found out; handlers read it from the request extensions.
#[derive(Clone, Debug)]
pub struct Identity {
    /// None with `--no-auth`.
    pub user: Option<String>,
    pub role: Role,
    /// Whether this identity came from a session cookie (state changes then need a same-origin
    /// check) rather than a token or `--no-auth`.
    pub by_cookie: bool,
}

struct Session {
    user: String,
    role: Role,
    last_used: Instant,
    created: Instant,
}

/// A session ends this long after its login, used or not: a stolen cookie does not last.
pub const MAX_SESSION_AGE: Duration = Duration::from_secs(7 * 86_400);

/// The server's auth state.
pub struct Auth {
    /// None: `--no-auth`.
    users: Option<Mutex<Users>>,
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<(IpAddr, String), Attempts>>,
    /// The users file's stamp when last read, and when it was last checked.
    seen: Mutex<(Option<users::Stamp>, Instant)>,
    /// Password hashes running now (bounded by [`MAX_HASHES`]).
    hashing: std::sync::atomic::AtomicUsize,
    /// Cookies get `Secure` when the server speaks TLS.
    secure: bool,
}

impl Auth {
    pub fn new(users: Option<Users>, secure: bool) -> Arc<Auth> {
        let stamp = users.as_ref().and_then(|u| users::stamp(&u.path));
        Arc::new(Auth {
            users: users.map(Mutex::new),
            sessions: Mutex::new(HashMap::new()),
            seen: Mutex::new((stamp, Instant::now())),
            failures: Mutex::new(HashMap::new()),
            hashing: std::sync::atomic::AtomicUsize::new(0),
            secure,
        })
    }

    pub fn enabled(&self) -> bool {
        self.users.is_some()
    }

    /// Whether the server speaks TLS.
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// The users, re-read when the file changed (checked at most twice a second): a user or
    /// token deleted with `sonde user del` is refused at once, one added works at once.
    fn users(&self) -> Option<std::sync::MutexGuard<'_, Users>> {
        let m = self.users.as_ref()?;
        let mut u = m.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.1.elapsed() >= Duration::from_millis(500) {
            seen.1 = Instant::now();
            let now = users::stamp(&u.path);
            if now != seen.0 {
                seen.0 = now;
                drop(seen);
                self.reload(&mut u);
            }
        }
        Some(u)
    }

    /// Reads the users file again; sessions of users gone or whose role changed end. A file
    /// that no longer reads keeps the users as they were (and says so once).
    fn reload(&self, u: &mut Users) {
        match Users::load(&u.path) {
            Ok(new) => {
                let gone: Vec<String> = u
                    .entries
                    .iter()
                    .filter(|e| e.kind == Kind::User)
                    .filter(|e| {
                        new.user(&e.name)
                            .is_none_or(|n| n.role != e.role || n.hash != e.hash)
                    })
                    .map(|e| e.name.clone())
                    .collect();
                *u = new;
                for name in gone {
                    self.end_sessions_of(&name);
                }
            }
            Err(e) => eprintln!("sonde: users file changed but does not read, kept as it was: {e}"),
        }
    }

    /// Whether the credentials of a long request (an event stream) still hold.
    pub(crate) fn still_valid(&self, headers: &HeaderMap) -> bool {
        self.identify(headers).is_some()
    }

    fn identify(&self, headers: &HeaderMap) -> Option<Identity> {
        let Some(users) = self.users() else {
            return Some(Identity {
                user: None,
                role: Role::Admin,
                by_cookie: false,
            });
        };
        if let Some(token) = bearer(headers) {
            return users.token(token).map(|e| Identity {
                user: Some(e.name.clone()),
                role: e.role,
                by_cookie: false,
            });
        }
        drop(users);
        let id = cookie(headers, COOKIE)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let s = sessions.get_mut(id)?;
        if s.last_used.elapsed() > IDLE || s.created.elapsed() > MAX_SESSION_AGE {
            sessions.remove(id);
            return None;
        }
        s.last_used = Instant::now();
        Some(Identity {
            user: Some(s.user.clone()),
            role: s.role,
            by_cookie: true,
        })
    }

    /// Counts an attempt of `user` from `ip` before its password is checked: Err(wait) when
    /// the pair must wait first. A granted attempt must be ended with [`Auth::end_attempt`].
    fn begin_attempt(&self, ip: IpAddr, user: &str) -> Result<(), Duration> {
        let key = (client_key(ip), user.to_string());
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() >= MAX_FAILURE_RECORDS && !f.contains_key(&key) {
            f.retain(|_, a| a.in_flight > 0 || a.last_failure.elapsed() < LOCKOUT);
            if f.len() >= MAX_FAILURE_RECORDS {
                // Full of live records: a new pair waits rather than growing the table.
                return Err(Duration::from_secs(1));
            }
        }
        let a = f.entry(key).or_insert(Attempts {
            failures: 0,
            in_flight: 0,
            last_failure: Instant::now(),
        });
        // A quiet pair starts over.
        if a.in_flight == 0 && a.last_failure.elapsed() >= LOCKOUT * 2 {
            a.failures = 0;
        }
        let wait = a.wait();
        if wait > Duration::ZERO {
            return Err(wait);
        }
        a.in_flight += 1;
        Ok(())
    }

    /// An attempt that was counted but never checked (the server was busy): not a failure.
    fn give_back_attempt(&self, ip: IpAddr, user: &str) {
        let key = (client_key(ip), user.to_string());
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = f.get_mut(&key) {
            a.in_flight = a.in_flight.saturating_sub(1);
        }
    }

    fn end_attempt(&self, ip: IpAddr, user: &str, ok: bool) {
        let key = (client_key(ip), user.to_string());
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            f.remove(&key);
            return;
        }
        if let Some(a) = f.get_mut(&key) {
            a.in_flight = a.in_flight.saturating_sub(1);
            a.failures = a.failures.saturating_add(1);
            a.last_failure = Instant::now();
        }
    }

    fn new_session(&self, user: &str, role: Role) -> Result<String, String> {
        let id = users::random_hex(32)?;
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if s.len() >= MAX_SESSIONS {
            s.retain(|_, v| v.last_used.elapsed() < IDLE);
            if s.len() >= MAX_SESSIONS {
                if let Some(oldest) = s
                    .iter()
                    .min_by_key(|(_, v)| v.last_used)
                    .map(|(k, _)| k.clone())
                {
                    s.remove(&oldest);
                }
            }
        }
        s.insert(
            id.clone(),
            Session {
                user: user.to_string(),
                role,
                last_used: Instant::now(),
                created: Instant::now(),
            },
        );
        Ok(id)
    }

    /// Ends every session of `user` (deleted, or its password or role changed).
    fn end_sessions_of(&self, user: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, s| s.user != user);
    }

    fn set_cookie(&self, value: &str, max_age: Option<u64>) -> HeaderValue {
        let mut c = format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict");
        if let Some(a) = max_age {
            c.push_str(&format!("; Max-Age={a}"));
        }
        if self.secure {
            c.push_str("; Secure");
        }
        HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn err(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// A refused request, as a small error value (a whole `Response` is large to pass around).
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        err(self.0, &self.1)
    }
}

/// What a path needs: nothing (the console's files, health, login), any role, or admin.
fn needs(path: &str) -> Option<Role> {
    if path.starts_with("/api/v1/admin/") || path == "/api/v1/admin" {
        Some(Role::Admin)
    } else if path.starts_with("/api/") || path == "/metrics" {
        match path {
            "/api/v1/health" | "/api/v1/login" | "/api/v1/logout" => None,
            _ => Some(Role::Viewer),
        }
    } else {
        None
    }
}

/// A state change carried by a cookie must come from the console's own origin (SameSite=Strict
/// already stops most cross-site requests; this also covers old browsers and same-site hosts).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true; // not a browser's cross-origin request
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest == host)
}

/// Whether a `Host` header names this machine's loopback: `localhost`, `127.x.x.x`, `[::1]`,
/// with or without a port. Without logins (`--no-auth`, loopback only) any other name is a web
/// page's domain re-pointed at 127.0.0.1 (DNS rebinding), reading the API through a browser.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(h) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true; // HTTP/1.0 without Host: not a browser's request
    };
    let h = h.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        h.rsplit_once(':').map_or(h, |(n, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                n
            } else {
                h
            }
        })
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The middleware in front of every route.
pub async fn layer(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    if !auth.enabled() && !loopback_host(req.headers()) {
        return err(
            StatusCode::FORBIDDEN,
            "this Host is refused: without logins (--no-auth) sonde answers only to loopback names \
             (localhost, 127.0.0.1, [::1]); a page whose domain points at 127.0.0.1 must not read it",
        );
    }
    let path = req.uri().path().to_string();
    let identity = auth.identify(req.headers());
    if let Some(need) = needs(&path) {
        let Some(id) = &identity else {
            return err(
                StatusCode::UNAUTHORIZED,
                "log in first (POST /api/v1/login) or send 'Authorization: Bearer TOKEN'",
            );
        };
        if need == Role::Admin && id.role != Role::Admin {
            return err(StatusCode::FORBIDDEN, "this needs the admin role");
        }
        let changes = !matches!(*req.method(), Method::GET | Method::HEAD);
        if changes && id.by_cookie && !same_origin(req.headers()) {
            return err(StatusCode::FORBIDDEN, "cross-origin request refused");
        }
    }
    if let Some(id) = identity {
        req.extensions_mut().insert(id);
    }
    next.run(req).await
}

/// The client's address, for counting failed logins.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

impl Connected<axum::serve::IncomingStream<'_, crate::conn::Listener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, crate::conn::Listener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

impl Connected<axum::serve::IncomingStream<'_, crate::tls::TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, crate::tls::TlsListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// A hash to check when the user does not exist, so that answering takes as long.
fn dummy_hash() -> &'static str {
    static H: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    H.get_or_init(|| users::hash_password("not a password of anyone").unwrap_or_default())
}

fn field<'a>(body: &'a Value, key: &str) -> Result<&'a str, Refusal> {
    body.get(key).and_then(Value::as_str).ok_or_else(|| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!("the JSON body needs a string {key:?}"),
        )
    })
}

/// `POST /api/v1/login` `{"user": .., "password": ..}`.
pub async fn login(
    State(auth): State<Arc<Auth>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    Json(body): Json<Value>,
) -> Response {
    if !auth.enabled() {
        return Json(json!({ "user": null, "role": "admin", "auth": false })).into_response();
    }
    use std::sync::atomic::Ordering::Relaxed;
    let (user, password) = match (field(&body, "user"), field(&body, "password")) {
        (Ok(u), Ok(p)) => (u.to_string(), p.to_string()),
        (Err(r), _) | (_, Err(r)) => return r.into_response(),
    };
    // Counted before the slow hash: a burst cannot get more attempts than the limit.
    if let Err(wait) = auth.begin_attempt(peer.ip(), &user) {
        LOGINS_THROTTLED.fetch_add(1, Relaxed);
        let mut r = err(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many failed logins for this user from {}: wait {} s",
                peer.ip(),
                wait.as_secs() + 1
            ),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs() + 1));
        return r;
    }
    // Decided as a failure unless it succeeds, also when the client goes away mid-hash.
    let mut attempt = AttemptGuard {
        auth: &auth,
        ip: peer.ip(),
        user: &user,
        outcome: Outcome::Failed,
    };
    // A bounded number of hashes at once: memory stays bounded whatever the burst.
    let slot = HashSlot(&auth.hashing);
    if auth.hashing.fetch_add(1, Relaxed) >= MAX_HASHES {
        // Not the client's failure: its attempt is given back.
        attempt.outcome = Outcome::NotTried;
        drop(slot);
        LOGINS_BUSY.fetch_add(1, Relaxed);
        let mut r = err(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many logins at once: try again in a second",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    let entry = auth.users().and_then(|u| u.user(&user).cloned());
    // The hash is checked even for an unknown user, so timing does not tell which names exist.
    let hash = entry
        .as_ref()
        .map_or_else(|| dummy_hash().to_string(), |e| e.hash.clone());
    let ok = tokio::task::spawn_blocking(move || users::verify_password(&hash, &password))
        .await
        .unwrap_or(false);
    drop(slot);
    let ok = ok && entry.is_some();
    if ok {
        attempt.outcome = Outcome::Ok;
    }
    drop(attempt);
    let Some(entry) = entry.filter(|_| ok) else {
        LOGINS_FAILED.fetch_add(1, Relaxed);
        return err(StatusCode::UNAUTHORIZED, "wrong user name or password");
    };
    LOGINS_OK.fetch_add(1, Relaxed);
    let id = match auth.new_session(&entry.name, entry.role) {
        Ok(id) => id,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    let mut r = Json(json!({ "user": entry.name, "role": entry.role.name(), "auth": true }))
        .into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, auth.set_cookie(&id, None));
    r
}

/// One running password hash; the count goes down when it is dropped (also when the client
/// goes away and the handler is cancelled).
struct HashSlot<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for HashSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

enum Outcome {
    Ok,
    Failed,
    /// Refused before hashing for a reason that is not the client's (the server was busy).
    NotTried,
}

/// A counted login attempt, decided when dropped.
struct AttemptGuard<'a> {
    auth: &'a Auth,
    ip: IpAddr,
    user: &'a str,
    outcome: Outcome,
}

impl Drop for AttemptGuard<'_> {
    fn drop(&mut self) {
        match self.outcome {
            Outcome::Ok => self.auth.end_attempt(self.ip, self.user, true),
            Outcome::Failed => self.auth.end_attempt(self.ip, self.user, false),
            Outcome::NotTried => self.auth.give_back_attempt(self.ip, self.user),
        }
    }
}

/// `POST /api/v1/logout`: ends the session (if any) and clears the cookie.
pub async fn logout(State(auth): State<Arc<Auth>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        auth.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, auth.set_cookie("", Some(0)));
    r
}

/// `GET /api/v1/me`.
pub async fn me(State(auth): State<Arc<Auth>>, Extension(id): Extension<Identity>) -> Response {
    Json(json!({ "user": id.user, "role": id.role.name(), "auth": auth.enabled() })).into_response()
}

/// Runs `change` on the users file and saves it; the admin API's common part.
fn edit_users<T>(
    auth: &Auth,
    change: impl FnOnce(&mut Users) -> Result<T, Refusal>,
) -> Result<T, Refusal> {
    let Some(mut users) = auth.users() else {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "sonde runs with --no-auth: there are no users to manage".into(),
        ));
    };
    // Under the file's lock and from the file as it is now: a change made with `sonde user`
    // meanwhile is kept, and a deleted entry never comes back.
    let _lock =
        users::lock(&users.path).map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    auth.reload(&mut users);
    let out = change(&mut users)?;
    users
        .save()
        .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    *auth.seen.lock().unwrap_or_else(|e| e.into_inner()) =
        (users::stamp(&users.path), Instant::now());
    Ok(out)
}

fn role_of(body: &Value) -> Result<Role, Refusal> {
    let r = field(body, "role")?;
    Role::parse(r).ok_or_else(|| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!("role {r:?}: use admin or viewer"),
        )
    })
}

/// `GET /api/v1/admin/users`: names and roles (never hashes).
pub async fn list_users(State(auth): State<Arc<Auth>>) -> Response {
    let Some(users) = auth.users() else {
        return Json(json!({ "users": [], "tokens": [] })).into_response();
    };
    let of = |kind: Kind| -> Vec<Value> {
        users
            .entries
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| json!({ "name": e.name, "role": e.role.name() }))
            .collect()
    };
    Json(json!({ "users": of(Kind::User), "tokens": of(Kind::Token) })).into_response()
}

/// `POST /api/v1/admin/users` `{"name", "role", "password"}`: adds a user or replaces one.
pub async fn add_user(State(auth): State<Arc<Auth>>, Json(body): Json<Value>) -> Response {
    let parsed = (|| -> Result<_, Refusal> {
        Ok((
            field(&body, "name")?,
            role_of(&body)?,
            field(&body, "password")?,
        ))
    })();
    let (name, role, password) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let (name, password) = (name.to_string(), password.to_string());
    // Hashing is slow on purpose: off the runtime thread.
    let auth2 = auth.clone();
    let name2 = name.clone();
    let done = tokio::task::spawn_blocking(move || {
        edit_users(&auth2, |u| {
            // Demoting the last admin would leave nobody to manage users (as deleting it).
            let admins = u
                .entries
                .iter()
                .filter(|e| e.kind == Kind::User && e.role == Role::Admin)
                .count();
            let is_admin = u.user(&name2).is_some_and(|e| e.role == Role::Admin);
            if is_admin && role != Role::Admin && admins == 1 {
                return Err(Refusal(
                    StatusCode::CONFLICT,
                    "this is the last admin: add another admin before making it a viewer".into(),
                ));
            }
            u.set_user(&name2, role, &password)
                .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
        })
    })
    .await;
    match done {
        Ok(Ok(())) => {
            auth.end_sessions_of(&name);
            (
                StatusCode::CREATED,
                Json(json!({ "name": name, "role": role.name() })),
            )
                .into_response()
        }
        Ok(Err(r)) => r.into_response(),
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `DELETE /api/v1/admin/users/{name}`; an admin cannot delete the last admin.
pub async fn delete_user(State(auth): State<Arc<Auth>>, Path(name): Path<String>) -> Response {
    let done = edit_users(&auth, |u| {
        let Some(e) = u.user(&name) else {
            return Err(Refusal(
                StatusCode::NOT_FOUND,
                format!("no user {name:?}: see GET /api/v1/admin/users"),
            ));
        };
        let admins = u
            .entries
            .iter()
            .filter(|e| e.kind == Kind::User && e.role == Role::Admin)
            .count();
        if e.role == Role::Admin && admins == 1 {
            return Err(Refusal(
                StatusCode::CONFLICT,
                "this is the last admin: add another admin first".into(),
            ));
        }
        u.remove(Kind::User, &name);
        Ok(())
    });
    match done {
        Ok(()) => {
            auth.end_sessions_of(&name);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(r) => r.into_response(),
    }
}

/// `POST /api/v1/admin/tokens` `{"name", "role"}`: a new API token, shown only in this answer.
pub async fn add_token(State(auth): State<Arc<Auth>>, Json(body): Json<Value>) -> Response {
    let parsed = (|| -> Result<_, Refusal> { Ok((field(&body, "name")?, role_of(&body)?)) })();
    let (name, role) = match parsed {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    match edit_users(&auth, |u| {
        u.add_token(name, role)
            .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
    }) {
        Ok(token) => (
            StatusCode::CREATED,
            Json(json!({ "name": name, "role": role.name(), "token": token })),
        )
            .into_response(),
        Err(r) => r.into_response(),
    }
}

/// `DELETE /api/v1/admin/tokens/{name}`.
pub async fn delete_token(State(auth): State<Arc<Auth>>, Path(name): Path<String>) -> Response {
    match edit_users(&auth, |u| {
        if u.remove(Kind::Token, &name) {
            Ok(())
        } else {
            Err(Refusal(StatusCode::NOT_FOUND, format!("no token {name:?}")))
        }
    }) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_need_the_right_role() {
        assert_eq!(needs("/"), None);
        assert_eq!(needs("/assets/index-abc.js"), None);
        assert_eq!(needs("/api/v1/health"), None);
        assert_eq!(needs("/api/v1/login"), None);
        assert_eq!(needs("/api/v1/hosts"), Some(Role::Viewer));
        assert_eq!(needs("/api/v1/nonexistent"), Some(Role::Viewer));
        assert_eq!(needs("/metrics"), Some(Role::Viewer));
        assert_eq!(needs("/api/v1/admin/users"), Some(Role::Admin));
        assert_eq!(needs("/api/v1/admin/users/bob"), Some(Role::Admin));
    }

    #[test]
    fn cookies_and_origins_are_read_strictly() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; sonde_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "sonde"), None);
        h.insert(header::HOST, "127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!same_origin(&h));
    }

    #[test]
    fn sessions_end_after_their_absolute_lifetime() {
        let users = Users {
            path: std::path::PathBuf::from("/nonexistent/users"),
            entries: Vec::new(),
        };
        let auth = Auth::new(Some(users), false);
        let id = auth.new_session("root", Role::Admin).unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, format!("{COOKIE}={id}").parse().unwrap());
        assert!(auth.identify(&h).is_some());
        if let Some(old) = Instant::now().checked_sub(MAX_SESSION_AGE + Duration::from_secs(1)) {
            auth.sessions.lock().unwrap().get_mut(&id).unwrap().created = old;
            assert!(
                auth.identify(&h).is_none(),
                "a week-old session is over, used or not"
            );
        }
    }

    #[test]
    fn only_loopback_hosts_without_logins() {
        let ok = |h: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, h.parse().unwrap());
            loopback_host(&m)
        };
        for h in [
            "localhost",
            "localhost:3000",
            "127.0.0.1:3000",
            "127.1.2.3",
            "[::1]:3000",
            "[::1]",
            "LOCALHOST.",
            "app.localhost:80",
        ] {
            assert!(ok(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:3000",
            "10.0.0.1:3000",
            "127.0.0.1.evil.example",
            "[2001:db8::1]:80",
            "localhost.evil.example",
        ] {
            assert!(!ok(h), "{h}");
        }
        assert!(loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn attempts_are_counted_before_they_are_decided() {
        let auth = Auth::new(None, false);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        // A burst: only MAX_FAILURES attempts in flight at once for one client and user.
        for _ in 0..MAX_FAILURES {
            assert!(auth.begin_attempt(ip, "admin").is_ok());
        }
        assert!(auth.begin_attempt(ip, "admin").is_err());
        // Another user from there, and the same user from elsewhere, are not held up.
        assert!(auth.begin_attempt(ip, "bob").is_ok());
        assert!(auth
            .begin_attempt("10.0.0.2".parse().unwrap(), "admin")
            .is_ok());
        for _ in 0..MAX_FAILURES {
            auth.end_attempt(ip, "admin", false);
        }
        let wait = auth.begin_attempt(ip, "admin").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
    }

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client_key(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn backoff_doubles_up_to_the_lockout() {
        let at = Instant::now();
        let w = |failures| {
            Attempts {
                failures,
                in_flight: 0,
                last_failure: at,
            }
            .wait()
        };
        assert_eq!(w(MAX_FAILURES - 1), Duration::ZERO);
        assert!(w(MAX_FAILURES) <= Duration::from_secs(1));
        assert!(w(MAX_FAILURES + 2) > Duration::from_secs(3));
        assert!(w(MAX_FAILURES + 30) <= LOCKOUT);
    }
}
