//! Logins, sessions, API tokens and roles.
//!
//! - People log in at `POST /api/v1/login` and get a session cookie (`HttpOnly`,
//!   `SameSite=Strict`, `Secure` under TLS). Sessions live in memory: a restart logs everyone out.
//! - Scripts send `Authorization: Bearer TOKEN` (tokens from `sonde user token`).
//! - `viewer` reads everything; `admin` also manages users (`/api/v1/admin/…`).
//! - Failed logins are counted per client address; after [`MAX_FAILURES`] the address waits
//!   [`LOCKOUT`] before it may try again.
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
pub const LOCKOUT: Duration = Duration::from_secs(30);
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
}

/// The server's auth state.
pub struct Auth {
    /// None: `--no-auth`.
    users: Option<Mutex<Users>>,
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    /// Cookies get `Secure` when the server speaks TLS.
    secure: bool,
}

impl Auth {
    pub fn new(users: Option<Users>, secure: bool) -> Arc<Auth> {
        Arc::new(Auth {
            users: users.map(Mutex::new),
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            secure,
        })
    }

    pub fn enabled(&self) -> bool {
        self.users.is_some()
    }

    fn users(&self) -> Option<std::sync::MutexGuard<'_, Users>> {
        self.users
            .as_ref()
            .map(|u| u.lock().unwrap_or_else(|e| e.into_inner()))
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
        if s.last_used.elapsed() > IDLE {
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

    /// Whether `ip` is locked out after too many failures, and for how long still.
    fn locked(&self, ip: IpAddr) -> Option<Duration> {
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let (n, at) = f.get(&ip)?;
        (*n >= MAX_FAILURES && at.elapsed() < LOCKOUT).then(|| LOCKOUT - at.elapsed())
    }

    fn failed(&self, ip: IpAddr) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() >= MAX_FAILURE_RECORDS {
            f.retain(|_, (_, at)| at.elapsed() < LOCKOUT);
        }
        let e = f.entry(ip).or_insert((0, Instant::now()));
        if e.1.elapsed() >= LOCKOUT {
            *e = (0, Instant::now());
        }
        e.0 += 1;
        e.1 = Instant::now();
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

/// The middleware in front of every route.
pub async fn layer(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
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
    if let Some(wait) = auth.locked(peer.ip()) {
        return err(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many failed logins from {}: wait {} s",
                peer.ip(),
                wait.as_secs() + 1
            ),
        );
    }
    let (user, password) = match (field(&body, "user"), field(&body, "password")) {
        (Ok(u), Ok(p)) => (u.to_string(), p.to_string()),
        (Err(r), _) | (_, Err(r)) => return r.into_response(),
    };
    let entry = auth.users().and_then(|u| u.user(&user).cloned());
    // The hash is checked even for an unknown user, so timing does not tell which names exist.
    let hash = entry
        .as_ref()
        .map_or_else(|| dummy_hash().to_string(), |e| e.hash.clone());
    let ok = tokio::task::spawn_blocking(move || users::verify_password(&hash, &password))
        .await
        .unwrap_or(false);
    let Some(entry) = entry.filter(|_| ok) else {
        auth.failed(peer.ip());
        return err(StatusCode::UNAUTHORIZED, "wrong user name or password");
    };
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
    let out = change(&mut users)?;
    users
        .save()
        .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e))?;
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
    fn failures_lock_an_address_out() {
        let auth = Auth::new(None, false);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..MAX_FAILURES - 1 {
            auth.failed(ip);
        }
        assert!(auth.locked(ip).is_none());
        auth.failed(ip);
        assert!(auth.locked(ip).is_some());
        assert!(auth.locked("10.0.0.2".parse().unwrap()).is_none());
    }
}
