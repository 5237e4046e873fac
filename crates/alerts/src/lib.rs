//! The alert engine: one place every alert goes through, whoever raised it (the analytics'
//! detections, the probe's built-in checks, user scripts), so that alerts are few,
//! deduplicated and easy to silence.
//!
//! Why this crate exists: ntopng's users complain most about alert floods and about not being
//! able to silence a known host. The rules that prevent both live here, apart from the sources
//! and the outputs (store, notifications, trigger capture), and are tested on their own.
//!
//! * An alert is keyed by (type, entity). It is *engaged* while its condition holds and
//!   *released* when the condition stops; a release is confirmed only after `hold_s` seconds
//!   without the condition coming back, so a condition that flaps is one alert (with a `flaps`
//!   count), not hundreds.
//! * Rate limits: per type a token bucket (`type_burst` at once, then `type_per_minute`), and
//!   per (type, entity) at most `entity_per_hour` new alerts an hour. What they refuse is
//!   counted by type, and an `alerts.suppressed` alert for the type stays engaged while it goes
//!   on (one per type, so the warning cannot flood either).
//! * Exclusions (by type or type prefix, host, network, application) refuse new alerts and
//!   release the engaged ones they match at once.
//!
//! The engine is a plain state machine driven by its caller's clock (`now`, Unix seconds): the
//! same input gives the same alerts, which makes replayed captures and tests deterministic. It
//! returns [`Event`]s; the caller sends them to the store, `--alerts-out`, notifications and
//! trigger capture. Records follow the alert contract (`ARCHITECTURE.md`, "Alerts").

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;

/// Alert severities, lowest first (syslog's names).
pub const SEVERITIES: [&str; 5] = ["info", "notice", "warning", "error", "critical"];

/// Released alerts kept in memory for the API (the store keeps them all).
const RECENT: usize = 1000;
/// (type, entity) pairs whose recent alert starts are remembered for the per-entity limit.
const ENTITY_HISTORY: usize = 100_000;

/// A severity's rank (0 = info), or None for an unknown name.
pub fn severity_rank(s: &str) -> Option<usize> {
    SEVERITIES.iter().position(|x| *x == s)
}

/// The rules' settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Seconds a released condition must stay away before the release is final.
    pub hold_s: u64,
    /// New alerts of one type allowed at once...
    pub type_burst: u32,
    /// ...and then per minute.
    pub type_per_minute: u32,
    /// New alerts of one type about one entity allowed per hour.
    pub entity_per_hour: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            hold_s: 30,
            type_burst: 20,
            type_per_minute: 10,
            entity_per_hour: 6,
        }
    }
}

/// A source's request to engage (or refresh) an alert.
#[derive(Clone, Debug, Default)]
pub struct Raise {
    pub kind: String,
    /// host | flow | interface | exporter | filter | type
    pub entity_kind: String,
    pub entity: String,
    pub severity: String,
    pub summary: String,
    pub source: String,
    pub evidence: Value,
    /// Fields copied to the top level of the record (a detection's `host`, `vlan`,
    /// `direction`, `first_seen`, `last_seen`, `targets`, an application's `app`...).
    pub extra: Map<String, Value>,
    /// When the condition was first seen (Unix seconds).
    pub at: u64,
}

/// A source's report that a condition stopped.
#[derive(Clone, Debug, Default)]
pub struct Release {
    pub kind: String,
    pub entity: String,
    pub at: u64,
    /// Fields to update in the record (a detection's final evidence, `last_seen`...).
    pub evidence: Option<Value>,
    pub extra: Map<String, Value>,
}

/// What happened to an alert (the record is the alert after the event).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Engaged(Value),
    Released(Value),
    Acked(Value),
}

impl Event {
    pub fn record(&self) -> &Value {
        match self {
            Event::Engaged(v) | Event::Released(v) | Event::Acked(v) => v,
        }
    }
}

/// What an exclusion matches; every field given must match.
#[derive(Clone, Debug, PartialEq)]
pub struct Exclusion {
    pub id: u64,
    /// A type (`scan.port`) or a prefix ending in `*` (`scan.*`).
    pub kind: Option<String>,
    pub host: Option<IpAddr>,
    pub network: Option<(IpAddr, u8)>,
    pub app: Option<String>,
    pub comment: String,
    pub created: u64,
    pub by: String,
}

impl Exclusion {
    /// Parses `type=scan.*,host=10.0.0.1,net=10.0.0.0/8,app=DNS,comment=…` (the CLI's and the
    /// config file's form); errors say which part is wrong.
    pub fn parse(text: &str) -> Result<Exclusion, String> {
        let mut v = Map::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, val) = part.split_once('=').ok_or_else(|| {
                format!("{part:?}: use KEY=VALUE with KEY one of type, host, net, app, comment")
            })?;
            v.insert(k.trim().to_string(), json!(val.trim()));
        }
        Exclusion::from_json(&Value::Object(v))
    }

    /// From the API's JSON body `{"type":..,"host":..,"net":..,"app":..,"comment":..}`.
    pub fn from_json(v: &Value) -> Result<Exclusion, String> {
        let obj = v
            .as_object()
            .ok_or("an exclusion is a JSON object with type, host, net, app, comment")?;
        for k in obj.keys() {
            if !["type", "host", "net", "network", "app", "comment", "id"].contains(&k.as_str()) {
                return Err(format!(
                    "unknown exclusion field {k:?}: use type, host, net, app, comment"
                ));
            }
        }
        let text = |k: &str| -> Result<Option<String>, String> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) if s.len() > 200 => {
                    Err(format!("{k}: at most 200 characters"))
                }
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("{k}: a string expected")),
            }
        };
        let kind = text("type")?;
        if let Some(k) = &kind {
            let body = k.strip_suffix('*').unwrap_or(k);
            if !body
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(format!(
                    "type={k:?}: an alert type (scan.port) or a prefix ending in * (scan.*)"
                ));
            }
        }
        let host = match text("host")? {
            None => None,
            Some(h) => Some(
                h.parse::<IpAddr>()
                    .map_err(|_| format!("host={h:?}: an IPv4 or IPv6 address expected"))?,
            ),
        };
        let net = text("net")?.or(text("network")?);
        let network = match net {
            None => None,
            Some(n) => Some(parse_network(&n)?),
        };
        let app = text("app")?;
        if kind.is_none() && host.is_none() && network.is_none() && app.is_none() {
            return Err(
                "an exclusion needs at least one of type, host, net, app (it would silence everything)"
                    .into(),
            );
        }
        Ok(Exclusion {
            id: 0,
            kind,
            host,
            network,
            app,
            comment: text("comment")?.unwrap_or_default(),
            created: 0,
            by: String::new(),
        })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": self.kind,
            "host": self.host.map(|h| h.to_string()),
            "net": self.network.map(|(a, l)| format!("{a}/{l}")),
            "app": self.app,
            "comment": self.comment,
            "created": self.created,
            "by": self.by,
        })
    }

    /// Whether the alert `record` (type, entity, host, app) is excluded.
    pub fn matches(&self, record: &Value) -> bool {
        let kind = record["type"].as_str().unwrap_or("");
        if let Some(k) = &self.kind {
            let ok = match k.strip_suffix('*') {
                Some(prefix) => kind.starts_with(prefix),
                None => kind == k,
            };
            if !ok {
                return false;
            }
        }
        if self.host.is_some() || self.network.is_some() {
            let ip = record["host"]
                .as_str()
                .or_else(|| {
                    (record["entity"]["kind"] == "host")
                        .then(|| record["entity"]["value"].as_str())
                        .flatten()
                })
                .and_then(|h| h.parse::<IpAddr>().ok());
            let Some(ip) = ip else { return false };
            if self.host.is_some_and(|h| h != ip) {
                return false;
            }
            if let Some((net, len)) = self.network {
                if !in_network(ip, net, len) {
                    return false;
                }
            }
        }
        if let Some(app) = &self.app {
            let a = record["app"].as_str().unwrap_or("");
            // `TLS` matches `TLS` and `TLS.Google`; `Google` matches `TLS.Google`.
            if !(a == app || a.split('.').any(|p| p == app)) {
                return false;
            }
        }
        true
    }
}

/// Parses `10.0.0.0/8` or `2001:db8::/32`.
pub fn parse_network(n: &str) -> Result<(IpAddr, u8), String> {
    let bad = || format!("net={n:?}: a network like 10.0.0.0/8 or 2001:db8::/32 expected");
    let (a, l) = n.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

/// Whether `ip` is in `net/len` (never across address families).
pub fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let (a, b, bits) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (u32::from(a) as u128, u32::from(b) as u128, 32 - len as u32)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128 - len as u32),
        _ => return false,
    };
    let mask = if bits >= 128 { 0 } else { u128::MAX << bits };
    a & mask == b & mask
}

/// An engaged alert.
#[derive(Clone, Debug)]
struct Alert {
    record: Map<String, Value>,
    /// When its release was reported (the hold runs from there); None while it holds.
    releasing: Option<u64>,
}

/// A type's token bucket and what it refused.
#[derive(Clone, Debug, Default)]
struct Bucket {
    tokens: f64,
    at: u64,
    refusing_since: Option<u64>,
    last_refused: u64,
    refused_now: u64,
}

/// Counters since the start, by type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub engaged: BTreeMap<String, u64>,
    pub released: BTreeMap<String, u64>,
    /// Raises refused by the type's rate limit.
    pub rate_limited: BTreeMap<String, u64>,
    /// Raises refused by the per-entity limit.
    pub entity_limited: BTreeMap<String, u64>,
    /// Raises refused by an exclusion.
    pub excluded: BTreeMap<String, u64>,
    /// Conditions that came back during a release's hold (merged into the engaged alert).
    pub flaps: BTreeMap<String, u64>,
}

fn bump(m: &mut BTreeMap<String, u64>, k: &str) {
    *m.entry(k.to_string()).or_insert(0) += 1;
}

/// The engine (one per probe).
pub struct Engine {
    cfg: Config,
    next_id: u64,
    next_exclusion: u64,
    engaged: HashMap<(String, String), Alert>,
    recent: VecDeque<Value>,
    buckets: HashMap<String, Bucket>,
    /// Start times of the last alerts per (type, entity), for the per-entity limit.
    entity_starts: HashMap<(String, String), VecDeque<u64>>,
    exclusions: Vec<Exclusion>,
    pub counters: Counters,
}

impl Engine {
    /// `first_id`: the next alert id (one past the largest in the store).
    pub fn new(cfg: Config, first_id: u64) -> Engine {
        Engine {
            cfg,
            next_id: first_id.max(1),
            next_exclusion: 1,
            engaged: HashMap::new(),
            recent: VecDeque::new(),
            buckets: HashMap::new(),
            entity_starts: HashMap::new(),
            exclusions: Vec::new(),
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Engages an alert, or refreshes the engaged one of the same type and entity.
    pub fn raise(&mut self, r: Raise) -> Vec<Event> {
        let key = (r.kind.clone(), r.entity.clone());
        let mut out = Vec::new();
        if let Some(a) = self.engaged.get_mut(&key) {
            // The same condition again: one alert, refreshed (a flap when it was releasing).
            if a.releasing.take().is_some() {
                bump(&mut self.counters.flaps, &r.kind);
                let f = a.record.get("flaps").and_then(Value::as_u64).unwrap_or(0);
                a.record.insert("flaps".into(), json!(f + 1));
            }
            refresh(&mut a.record, &r);
            return out;
        }
        let record = self.new_record(&r);
        let probe = Value::Object(record.clone());
        if self.exclusions.iter().any(|x| x.matches(&probe)) {
            bump(&mut self.counters.excluded, &r.kind);
            return out;
        }
        if !self.entity_allows(&key, r.at) {
            bump(&mut self.counters.entity_limited, &r.kind);
            return out;
        }
        if !self.type_allows(&r.kind, r.at, &mut out) {
            bump(&mut self.counters.rate_limited, &r.kind);
            return out;
        }
        let mut record = record;
        record.insert("id".into(), json!(self.next_id));
        self.next_id += 1;
        self.entity_starts
            .entry(key.clone())
            .or_default()
            .push_back(r.at);
        bump(&mut self.counters.engaged, &r.kind);
        out.push(Event::Engaged(Value::Object(record.clone())));
        self.engaged.insert(
            key,
            Alert {
                record,
                releasing: None,
            },
        );
        out
    }

    /// Reports that a condition stopped: the alert is released once `hold_s` passes without
    /// it coming back ([`Engine::tick`]). Unknown alerts (refused ones) are ignored.
    pub fn release(&mut self, r: Release) -> Vec<Event> {
        let key = (r.kind.clone(), r.entity.clone());
        if let Some(a) = self.engaged.get_mut(&key) {
            if let Some(ev) = r.evidence {
                a.record.insert("evidence".into(), ev);
            }
            for (k, v) in r.extra {
                a.record.insert(k, v);
            }
            a.record
                .insert("last_seen".into(), json!(r.at.max(last_seen(&a.record))));
            if a.releasing.is_none() {
                a.releasing = Some(r.at);
            }
        }
        if self.cfg.hold_s == 0 {
            return self.tick(r.at);
        }
        Vec::new()
    }

    /// Confirms releases whose hold has passed, and ends `alerts.suppressed` alerts whose
    /// type has not been refused for a minute.
    pub fn tick(&mut self, now: u64) -> Vec<Event> {
        let hold = self.cfg.hold_s;
        let mut due: Vec<((String, String), u64)> = self
            .engaged
            .iter()
            .filter_map(|(k, a)| {
                let at = a.releasing?;
                (now >= at.saturating_add(hold)).then(|| (k.clone(), at))
            })
            .collect();
        due.sort_by_key(|(k, _)| self.engaged[k].record["id"].as_u64());
        let mut out = Vec::new();
        for (k, at) in due {
            if let Some(a) = self.engaged.remove(&k) {
                out.push(self.finish(a.record, at, None));
            }
        }
        let quiet: Vec<String> = self
            .buckets
            .iter()
            .filter(|(_, b)| b.refusing_since.is_some() && now >= b.last_refused + 60)
            .map(|(k, _)| k.clone())
            .collect();
        for kind in quiet {
            if let Some(b) = self.buckets.get_mut(&kind) {
                b.refusing_since = None;
                b.refused_now = 0;
            }
            let key = ("alerts.suppressed".to_string(), kind);
            if let Some(a) = self.engaged.remove(&key) {
                out.push(self.finish(a.record, now, None));
            }
        }
        out
    }

    /// Releases everything at once (the end of a run).
    pub fn finish_all(&mut self, now: u64) -> Vec<Event> {
        let mut all: Vec<Alert> = self.engaged.drain().map(|(_, a)| a).collect();
        all.sort_by_key(|a| a.record["id"].as_u64());
        all.into_iter()
            .map(|a| {
                let at = a.releasing.unwrap_or(now.max(last_seen(&a.record)));
                self.finish(a.record, at, None)
            })
            .collect()
    }

    /// Marks an alert (engaged or recent) acknowledged.
    pub fn ack(&mut self, id: u64, by: &str, now: u64) -> Option<Event> {
        let mark = |r: &mut Map<String, Value>| {
            r.insert("acked_by".into(), json!(by));
            r.insert("acked_at".into(), json!(now));
        };
        for a in self.engaged.values_mut() {
            if a.record["id"].as_u64() == Some(id) {
                mark(&mut a.record);
                return Some(Event::Acked(Value::Object(a.record.clone())));
            }
        }
        for r in self.recent.iter_mut() {
            if r["id"].as_u64() == Some(id) {
                if let Some(o) = r.as_object_mut() {
                    mark(o);
                }
                return Some(Event::Acked(r.clone()));
            }
        }
        None
    }

    /// Adds an exclusion; the engaged alerts it matches are released at once.
    pub fn exclude(&mut self, mut x: Exclusion, now: u64) -> (Exclusion, Vec<Event>) {
        if x.id == 0 {
            x.id = self.next_exclusion;
        }
        self.next_exclusion = self.next_exclusion.max(x.id + 1);
        if x.created == 0 {
            x.created = now;
        }
        let mut hit: Vec<(String, String)> = self
            .engaged
            .iter()
            .filter(|(_, a)| x.matches(&Value::Object(a.record.clone())))
            .map(|(k, _)| k.clone())
            .collect();
        hit.sort_by_key(|k| self.engaged[k].record["id"].as_u64());
        let mut out = Vec::new();
        for k in hit {
            if let Some(a) = self.engaged.remove(&k) {
                out.push(self.finish(a.record, now, Some(x.id)));
            }
        }
        self.exclusions.push(x.clone());
        (x, out)
    }

    /// Removes an exclusion; false when there is none with that id.
    pub fn unexclude(&mut self, id: u64) -> bool {
        let n = self.exclusions.len();
        self.exclusions.retain(|x| x.id != id);
        n != self.exclusions.len()
    }

    pub fn exclusions(&self) -> &[Exclusion] {
        &self.exclusions
    }

    /// Engaged alerts (newest first).
    pub fn engaged(&self) -> Vec<Value> {
        let mut v: Vec<&Alert> = self.engaged.values().collect();
        v.sort_by_key(|a| std::cmp::Reverse(a.record["id"].as_u64()));
        v.into_iter()
            .map(|a| {
                let mut r = a.record.clone();
                if let Some(at) = a.releasing {
                    r.insert("releasing_since".into(), json!(at));
                }
                Value::Object(r)
            })
            .collect()
    }

    /// Released alerts of this run kept in memory (oldest first).
    pub fn recent(&self) -> &VecDeque<Value> {
        &self.recent
    }

    pub fn engaged_count(&self) -> usize {
        self.engaged.len()
    }

    fn new_record(&self, r: &Raise) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in &r.extra {
            m.insert(k.clone(), v.clone());
        }
        m.insert("id".into(), json!(0));
        m.insert("type".into(), json!(r.kind));
        let severity = if severity_rank(&r.severity).is_some() {
            r.severity.as_str()
        } else {
            "warning"
        };
        m.insert("severity".into(), json!(severity));
        m.insert(
            "entity".into(),
            json!({"kind": r.entity_kind, "value": r.entity}),
        );
        if r.entity_kind == "host" && !m.contains_key("host") {
            m.insert("host".into(), json!(r.entity));
        }
        m.insert("state".into(), json!("engaged"));
        m.insert("event".into(), json!("start"));
        m.insert("start".into(), json!(r.at));
        m.insert("end".into(), Value::Null);
        if !m.contains_key("first_seen") {
            m.insert("first_seen".into(), json!(r.at));
        }
        if !m.contains_key("last_seen") {
            m.insert("last_seen".into(), json!(r.at));
        }
        m.insert("summary".into(), json!(r.summary));
        m.insert("source".into(), json!(r.source));
        m.insert("evidence".into(), r.evidence.clone());
        m.insert("flaps".into(), json!(0));
        m
    }

    fn finish(
        &mut self,
        mut record: Map<String, Value>,
        at: u64,
        excluded_by: Option<u64>,
    ) -> Event {
        record.insert("state".into(), json!("released"));
        record.insert("event".into(), json!("end"));
        let start = record["start"].as_u64().unwrap_or(0);
        record.insert("end".into(), json!(at.max(start)));
        if let Some(x) = excluded_by {
            record.insert("released_by".into(), json!(format!("exclusion {x}")));
        }
        let kind = record["type"].as_str().unwrap_or("").to_string();
        bump(&mut self.counters.released, &kind);
        let v = Value::Object(record);
        self.recent.push_back(v.clone());
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        Event::Released(v)
    }

    fn entity_allows(&mut self, key: &(String, String), at: u64) -> bool {
        if self.entity_starts.len() >= ENTITY_HISTORY && !self.entity_starts.contains_key(key) {
            // Forget pairs with nothing in the last hour (a flood of entities cannot grow this).
            self.entity_starts
                .retain(|_, v| v.back().is_some_and(|t| t + 3600 > at));
            if self.entity_starts.len() >= ENTITY_HISTORY {
                self.entity_starts.clear();
            }
        }
        let Some(starts) = self.entity_starts.get_mut(key) else {
            return true;
        };
        while starts.front().is_some_and(|t| t + 3600 <= at) {
            starts.pop_front();
        }
        (starts.len() as u32) < self.cfg.entity_per_hour
    }

    fn type_allows(&mut self, kind: &str, at: u64, out: &mut Vec<Event>) -> bool {
        if kind == "alerts.suppressed" {
            return true;
        }
        let (burst, rate) = (self.cfg.type_burst as f64, self.cfg.type_per_minute as f64);
        let b = self.buckets.entry(kind.to_string()).or_insert(Bucket {
            tokens: burst,
            at,
            ..Bucket::default()
        });
        if at > b.at {
            b.tokens = (b.tokens + (at - b.at) as f64 * rate / 60.0).min(burst);
            b.at = at;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return true;
        }
        b.last_refused = at;
        b.refused_now += 1;
        let refused = b.refused_now;
        let first = b.refusing_since.is_none();
        let since = *b.refusing_since.get_or_insert(at);
        let key = ("alerts.suppressed".to_string(), kind.to_string());
        let evidence = json!({"type": kind, "refused": refused, "since": since,
            "burst": self.cfg.type_burst, "per_minute": self.cfg.type_per_minute});
        let summary = format!(
            "too many {kind} alerts: {refused} refused since {since} (limit {} at once, then {} a minute)",
            self.cfg.type_burst, self.cfg.type_per_minute
        );
        if first || !self.engaged.contains_key(&key) {
            out.extend(self.raise(Raise {
                kind: "alerts.suppressed".into(),
                entity_kind: "type".into(),
                entity: kind.to_string(),
                severity: "warning".into(),
                summary,
                source: "engine".into(),
                evidence,
                extra: Map::new(),
                at,
            }));
        } else if let Some(a) = self.engaged.get_mut(&key) {
            a.record.insert("evidence".into(), evidence);
            a.record.insert("summary".into(), json!(summary));
            a.record.insert("last_seen".into(), json!(at));
        }
        false
    }
}

fn last_seen(r: &Map<String, Value>) -> u64 {
    r.get("last_seen").and_then(Value::as_u64).unwrap_or(0)
}

/// A refresh keeps the alert's identity and start, and takes the newer evidence.
fn refresh(record: &mut Map<String, Value>, r: &Raise) {
    record.insert("evidence".into(), r.evidence.clone());
    if !r.summary.is_empty() {
        record.insert("summary".into(), json!(r.summary));
    }
    if let (Some(new), Some(old)) = (
        severity_rank(&r.severity),
        record
            .get("severity")
            .and_then(Value::as_str)
            .and_then(severity_rank),
    ) {
        if new > old {
            record.insert("severity".into(), json!(r.severity));
        }
    }
    for (k, v) in &r.extra {
        if k != "first_seen" {
            record.insert(k.clone(), v.clone());
        }
    }
    let seen = last_seen(record).max(r.at);
    record.insert("last_seen".into(), json!(seen));
}

/// The store's view of alerts: events (start, end, ack records) folded by id into the latest
/// record of each alert, newest first. Alerts that overlap `[from, to)` are kept.
pub fn fold(events: impl IntoIterator<Item = Value>, from: u64, to: u64) -> Vec<Value> {
    let mut by_id: BTreeMap<u64, Value> = BTreeMap::new();
    for e in events {
        let Some(id) = e["id"].as_u64() else { continue };
        let keep_ack = by_id.get(&id).and_then(|old| {
            old.get("acked_by")
                .map(|b| (b.clone(), old.get("acked_at").cloned()))
        });
        let mut e = e;
        if let (Some((by, at)), Some(o)) = (keep_ack, e.as_object_mut()) {
            o.entry("acked_by").or_insert(by);
            if let Some(at) = at {
                o.entry("acked_at").or_insert(at);
            }
        }
        if let Some(o) = e.as_object_mut() {
            o.remove("at");
            if o.get("event").and_then(Value::as_str) == Some("ack") {
                o.insert(
                    "event".into(),
                    json!(if o["state"] == "released" {
                        "end"
                    } else {
                        "start"
                    }),
                );
            }
        }
        by_id.insert(id, e);
    }
    by_id
        .into_values()
        .rev()
        .filter(|a| {
            let start = a["start"].as_u64().unwrap_or(0);
            let end = a["end"].as_u64().unwrap_or(u64::MAX);
            start < to && end >= from
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raise(kind: &str, host: &str, at: u64) -> Raise {
        Raise {
            kind: kind.into(),
            entity_kind: "host".into(),
            entity: host.into(),
            severity: "warning".into(),
            summary: format!("{kind} {host}"),
            source: "test".into(),
            evidence: json!({"n": at}),
            extra: Map::new(),
            at,
        }
    }

    fn rel(kind: &str, host: &str, at: u64) -> Release {
        Release {
            kind: kind.into(),
            entity: host.into(),
            at,
            ..Release::default()
        }
    }

    fn engaged(ev: &[Event]) -> Vec<u64> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Engaged(v) => v["id"].as_u64(),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn engage_refresh_release_after_hold() {
        let mut e = Engine::new(Config::default(), 1);
        let ev = e.raise(raise("scan.port", "10.0.0.1", 100));
        assert_eq!(engaged(&ev), vec![1]);
        assert_eq!(ev[0].record()["state"], "engaged");
        assert_eq!(ev[0].record()["host"], "10.0.0.1");
        assert!(e.raise(raise("scan.port", "10.0.0.1", 101)).is_empty());
        assert_eq!(e.engaged()[0]["evidence"]["n"], 101);
        assert!(e.release(rel("scan.port", "10.0.0.1", 110)).is_empty());
        assert!(e.tick(139).is_empty(), "released before the hold passed");
        let ev = e.tick(140);
        assert_eq!(ev.len(), 1);
        let r = ev[0].record();
        assert_eq!(
            (r["state"].as_str(), r["end"].as_u64()),
            (Some("released"), Some(110))
        );
        assert_eq!(r["start"], 100);
        assert_eq!(e.engaged_count(), 0);
    }

    #[test]
    fn a_flapping_condition_is_one_alert() {
        let mut e = Engine::new(Config::default(), 1);
        let mut starts = 0;
        for i in 0..100u64 {
            starts += engaged(&e.raise(raise("ddos", "10.0.0.9", 1000 + i * 10))).len();
            e.release(rel("ddos", "10.0.0.9", 1000 + i * 10 + 5));
            assert!(e.tick(1000 + i * 10 + 9).is_empty());
        }
        assert_eq!(starts, 1);
        assert_eq!(e.counters.flaps["ddos"], 99);
        let ev = e.tick(2100);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].record()["flaps"], 99);
    }

    #[test]
    fn type_rate_limit_bounds_a_flood_and_says_so() {
        let cfg = Config {
            type_burst: 5,
            type_per_minute: 6,
            ..Config::default()
        };
        let mut e = Engine::new(cfg, 1);
        let mut alerts = Vec::new();
        // 10,000 scanners over 100 seconds.
        for i in 0..10_000u64 {
            let at = 1000 + i / 100;
            for ev in e.raise(raise(
                "scan.ip",
                &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                at,
            )) {
                alerts.push(ev);
            }
        }
        let scans = alerts
            .iter()
            .filter(|a| a.record()["type"] == "scan.ip")
            .count();
        // 5 at once, then 6 a minute over the 99 s that follow: 5 + 9 (floor(99 * 0.1)).
        assert_eq!(scans, 5 + 9);
        let meta: Vec<_> = alerts
            .iter()
            .filter(|a| a.record()["type"] == "alerts.suppressed")
            .collect();
        assert_eq!(meta.len(), 1, "one suppression alert for the type");
        assert_eq!(e.counters.rate_limited["scan.ip"], 10_000 - 14);
        let sup = e
            .engaged()
            .into_iter()
            .find(|a| a["type"] == "alerts.suppressed")
            .unwrap();
        assert_eq!(sup["evidence"]["refused"], 10_000 - 14);
        // A quiet minute ends it.
        let ev = e.tick(1099 + 60);
        assert!(ev.iter().any(|a| a.record()["type"] == "alerts.suppressed"));
    }

    #[test]
    fn per_entity_limit() {
        let cfg = Config {
            hold_s: 0,
            entity_per_hour: 3,
            ..Config::default()
        };
        let mut e = Engine::new(cfg, 1);
        let mut n = 0;
        for i in 0..10 {
            n += engaged(&e.raise(raise("noisy_host", "10.0.0.2", 100 + i * 600))).len();
            e.release(rel("noisy_host", "10.0.0.2", 150 + i * 600));
        }
        // Starts at 100, 700, 1300 fill the hour; 1900, 2500, 3100 are refused; at 3700,
        // 4300 and 4900 the oldest start is an hour old each time; 5500 is refused again.
        assert_eq!(n, 6);
        assert_eq!(e.counters.entity_limited["noisy_host"], 4);
    }

    #[test]
    fn exclusions_refuse_and_release_at_once() {
        let mut e = Engine::new(Config::default(), 1);
        e.raise(raise("scan.port", "10.1.2.3", 10));
        e.raise(raise("ddos", "10.1.2.3", 10));
        e.raise(raise("scan.port", "192.168.0.1", 10));
        let x = Exclusion::parse("type=scan.*, net=10.0.0.0/8, comment=known scanner").unwrap();
        let (x, ev) = e.exclude(x, 20);
        assert_eq!(x.id, 1);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].record()["released_by"], "exclusion 1");
        assert_eq!(ev[0].record()["end"], 20);
        assert_eq!(e.engaged_count(), 2);
        assert!(e.raise(raise("scan.ip", "10.9.9.9", 21)).is_empty());
        assert_eq!(e.counters.excluded["scan.ip"], 1);
        assert_eq!(engaged(&e.raise(raise("ddos", "10.9.9.9", 21))).len(), 1);
        assert!(e.unexclude(1));
        assert_eq!(engaged(&e.raise(raise("scan.ip", "10.9.9.9", 22))).len(), 1);
    }

    #[test]
    fn exclusion_parse_errors_say_what_is_wrong() {
        for (text, says) in [
            ("", "at least one"),
            ("host=10.0.0.300", "host="),
            ("net=10.0.0.0/33", "net="),
            ("nope=1", "unknown exclusion field"),
            ("type=scan port", "type="),
            ("host", "KEY=VALUE"),
        ] {
            let e = Exclusion::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let x = Exclusion::parse("host=2001:db8::1,app=DNS").unwrap();
        assert!(x.matches(&json!({"type": "t", "host": "2001:db8::1", "app": "DNS"})));
        assert!(!x.matches(&json!({"type": "t", "host": "2001:db8::1", "app": "TLS"})));
        assert!(x.matches(&json!({"type": "t", "host": "2001:db8::1", "app": "DNS.Google"})));
        let v6 = Exclusion::parse("net=2001:db8::/32").unwrap();
        assert!(
            v6.matches(&json!({"type": "t", "entity": {"kind": "host", "value": "2001:db8:5::1"}}))
        );
        assert!(!v6.matches(&json!({"type": "t", "host": "10.0.0.1"})));
    }

    #[test]
    fn ack_and_fold() {
        let mut e = Engine::new(
            Config {
                hold_s: 0,
                ..Config::default()
            },
            7,
        );
        let a = e.raise(raise("ddos", "10.0.0.1", 100));
        let ack = e.ack(7, "admin", 105).unwrap();
        let r = e.release(rel("ddos", "10.0.0.1", 120));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].record()["acked_by"], "admin");
        let mut events = vec![
            a[0].record().clone(),
            ack.record().clone(),
            r[0].record().clone(),
        ];
        for ev in events.iter_mut() {
            ev["at"] = json!(1);
        }
        let f = fold(events.clone(), 0, 1000);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0]["state"], "released");
        assert_eq!(f[0]["acked_by"], "admin");
        assert!(fold(events.clone(), 121, 1000).is_empty());
        assert_eq!(fold(events, 120, 1000).len(), 1);
    }

    #[test]
    fn finish_all_releases_in_order() {
        let mut e = Engine::new(Config::default(), 1);
        e.raise(raise("a", "h1", 1));
        e.raise(raise("b", "h2", 2));
        let ev = e.finish_all(50);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].record()["id"], 1);
        assert_eq!(ev[1].record()["end"], 50);
    }
}
