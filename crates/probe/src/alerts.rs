//! The probe's alerts: one [`AlertHub`] takes what every source raises (the analytics'
//! detections, the built-in checks below, user scripts), runs it through the engine
//! (`sonde_alerts`: flap merging, rate limits, exclusions), and hands each event to the
//! outputs: the store in the data directory, `--alerts-out`, notifications, trigger capture.
//!
//! Clocks: the analytics report the traffic's own time (a replayed capture keeps its dates),
//! so once they have, the hub's clock follows them; without analytics it is the wall clock.
//! The checks thread ticks once a wall-clock second and stamps what it raises with the hub's
//! clock, so an alert's start and end are in one time base.

use serde_json::{json, Map, Value};
use sonde_alerts::{Engine, Event, Exclusion, Raise, Release};
use sonde_history::analytics::{self as store, Kind};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The alerts of a run: the engine's rules, exclusions from the command line, outputs, checks.
#[derive(Clone, Debug, Default)]
pub struct AlertSettings {
    pub engine: sonde_alerts::Config,
    /// Exclusions given at start (`--alert-exclude`, the config file): not stored, not removable.
    pub exclusions: Vec<Exclusion>,
    /// Alert events as JSON lines (`-` for standard output).
    pub alerts_out: Option<PathBuf>,
    /// The data directory and its retention in seconds (0: none).
    pub history: Option<(PathBuf, u64)>,
    pub checks: CheckSettings,
    /// Where to notify (`--notify`), parsed.
    pub notify: Vec<sonde_notify::Target>,
    pub notify_options: sonde_notify::Options,
    /// User scripts (`--script`), loaded when the probe starts.
    pub scripts: Vec<PathBuf>,
    pub script_limits: sonde_scripts::Limits,
}

/// The built-in checks' limits.
#[derive(Clone, Debug)]
pub struct CheckSettings {
    /// capture.drops: kernel drops above this share of the packets over the last 10 s.
    pub drop_ratio: f64,
    /// host.listed: addresses and networks whose appearance in the host table is an alert.
    pub listed: Vec<(IpAddr, u8)>,
    /// The file `listed` came from (for evidence).
    pub listed_file: Option<PathBuf>,
    /// disk.near_cap: the flow history's size cap (bytes, 0: none).
    pub history_cap: u64,
    /// exporter.silent: seconds without a datagram from an exporter that was sending.
    pub exporter_silent_s: u64,
}

impl Default for CheckSettings {
    fn default() -> CheckSettings {
        CheckSettings {
            drop_ratio: 0.01,
            listed: Vec::new(),
            listed_file: None,
            history_cap: 0,
            exporter_silent_s: 60,
        }
    }
}

/// Where engine events go.
pub trait AlertOutput: Send {
    fn event(&mut self, ev: &Event);
    /// Once a second, and at the end: make what was written durable.
    fn sync(&mut self, _now: u64) {}
}

struct Inner {
    engine: Engine,
    outputs: Vec<Box<dyn AlertOutput>>,
    /// The traffic's clock, once the analytics have reported a second.
    stream_clock: Option<u64>,
    /// Exclusions added through the API (stored in the data directory).
    stored: Vec<u64>,
}

/// The probe's alerts, shared by sources, the checks thread and the API.
pub struct AlertHub {
    inner: Mutex<Inner>,
    data_dir: Option<PathBuf>,
    /// Notifications (`--notify`): engaged and released alerts, delivered by its own threads.
    notifier: Mutex<Option<sonde_notify::Notifier>>,
    /// The notifications' counters once they finished.
    notify_final: Mutex<Vec<sonde_notify::TargetStats>>,
    /// User scripts' state, when there are scripts.
    pub scripts: Option<Arc<crate::scripts_run::ScriptsLive>>,
}

fn wall_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const EXCLUSIONS_FILE: &str = "alert-exclusions.json";

impl AlertHub {
    /// Opens the store (closing alerts a killed run left engaged), loads stored exclusions,
    /// opens `--alerts-out`. Errors name the flag or file.
    pub fn open(
        s: &AlertSettings,
        scripts: Option<Arc<crate::scripts_run::ScriptsLive>>,
    ) -> Result<Arc<AlertHub>, String> {
        let mut outputs: Vec<Box<dyn AlertOutput>> = Vec::new();
        let mut first_id = 1;
        let mut stored_exclusions = Vec::new();
        let mut closing = Vec::new();
        if let Some((dir, max_age)) = &s.history {
            let past = store::read(dir, Kind::Alerts, "at", 0, u64::MAX)
                .map_err(|e| format!("--data-dir: alerts: {e}"))?;
            first_id = past
                .iter()
                .filter_map(|r| r["id"].as_u64())
                .max()
                .unwrap_or(0)
                + 1;
            // A run killed with alerts engaged never wrote their end: close them now, at the
            // last time the store knew of.
            for a in sonde_alerts::fold(past, 0, u64::MAX) {
                if a["state"] == "engaged" {
                    closing.push(a);
                }
            }
            let w = store::Writer::open(dir, *max_age)
                .map_err(|e| format!("--data-dir {}: alerts: {e}", dir.display()))?;
            outputs.push(Box::new(StoreOut { w, failed: None }));
            let path = dir.join(EXCLUSIONS_FILE);
            if path.exists() {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| format!("'{}': not JSON ({e}); move it aside", path.display()))?;
                for x in v.as_array().into_iter().flatten() {
                    let mut e = Exclusion::from_json(x)
                        .map_err(|e| format!("'{}': {e}", path.display()))?;
                    e.id = x["id"].as_u64().unwrap_or(0);
                    e.created = x["created"].as_u64().unwrap_or(0);
                    e.by = x["by"].as_str().unwrap_or("").to_string();
                    stored_exclusions.push(e);
                }
            }
        }
        if let Some(p) = &s.alerts_out {
            outputs.push(Box::new(FileOut {
                out: open_out(p)?,
                failed: None,
            }));
        }
        let mut engine = Engine::new(s.engine.clone(), first_id);
        let now = wall_now();
        for x in &s.exclusions {
            engine.exclude(
                Exclusion {
                    by: "command line".into(),
                    ..x.clone()
                },
                now,
            );
        }
        let mut stored = Vec::new();
        for x in stored_exclusions {
            let (x, _) = engine.exclude(x, now);
            stored.push(x.id);
        }
        // An unreachable SMTP server or a missing program is an error now, not at the first alert.
        let notifier = if s.notify.is_empty() {
            None
        } else {
            Some(sonde_notify::Notifier::start(
                s.notify.clone(),
                s.notify_options.clone(),
            )?)
        };
        let hub = Arc::new(AlertHub {
            notifier: Mutex::new(notifier),
            notify_final: Mutex::new(Vec::new()),
            scripts,
            inner: Mutex::new(Inner {
                engine,
                outputs,
                stream_clock: None,
                stored,
            }),
            data_dir: s.history.as_ref().map(|(d, _)| d.clone()),
        });
        {
            let mut i = hub.lock();
            for mut a in closing {
                let end = a["last_seen"].as_u64().or(a["start"].as_u64()).unwrap_or(0);
                if let Some(o) = a.as_object_mut() {
                    o.insert("state".into(), json!("released"));
                    o.insert("event".into(), json!("end"));
                    o.insert("end".into(), json!(end));
                    o.insert("released_by".into(), json!("restart"));
                }
                for o in i.outputs.iter_mut() {
                    o.event(&Event::Released(a.clone()));
                }
            }
        }
        Ok(hub)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an output (notifications, trigger capture) before the run starts.
    pub fn add_output(&self, o: Box<dyn AlertOutput>) {
        self.lock().outputs.push(o);
    }

    /// The hub's clock (see the module's comment).
    pub fn now(&self) -> u64 {
        self.lock().stream_clock.unwrap_or_else(wall_now)
    }

    fn dispatch(&self, i: &mut Inner, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let notifier = self.notifier.lock().unwrap_or_else(|e| e.into_inner());
        for ev in &events {
            for o in i.outputs.iter_mut() {
                o.event(ev);
            }
            if let (Some(n), Event::Engaged(r) | Event::Released(r)) = (notifier.as_ref(), ev) {
                n.send(r);
            }
        }
    }

    pub fn raise(&self, r: Raise) {
        let mut i = self.lock();
        let ev = i.engine.raise(r);
        self.dispatch(&mut i, ev);
    }

    pub fn release(&self, r: Release) {
        let mut i = self.lock();
        let ev = i.engine.release(r);
        self.dispatch(&mut i, ev);
    }

    /// The traffic's clock moved (the analytics merged a second).
    pub fn stream_tick(&self, second: u64) {
        let mut i = self.lock();
        if i.stream_clock.is_some_and(|c| c >= second) {
            return;
        }
        i.stream_clock = Some(second);
        let ev = i.engine.tick(second);
        self.dispatch(&mut i, ev);
    }

    /// Once a wall-clock second: confirms releases (on the wall clock when there is no
    /// traffic clock) and makes the outputs durable.
    pub fn wall_tick(&self) {
        let mut i = self.lock();
        let now = i.stream_clock.unwrap_or_else(wall_now);
        if i.stream_clock.is_none() {
            let ev = i.engine.tick(now);
            self.dispatch(&mut i, ev);
        }
        for o in i.outputs.iter_mut() {
            o.sync(now);
        }
    }

    /// The end of the run: every alert is released, the outputs are synced.
    pub fn finish(&self) {
        let mut i = self.lock();
        let now = i.stream_clock.unwrap_or_else(wall_now);
        let ev = i.engine.finish_all(now);
        self.dispatch(&mut i, ev);
        for o in i.outputs.iter_mut() {
            o.sync(now);
        }
        drop(i);
        // What is queued gets a few seconds to go out; a dead endpoint cannot hold the exit.
        let n = self
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(n) = n {
            let stats = n.finish(Duration::from_secs(5));
            *self.notify_final.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        }
    }

    /// Engaged alerts (newest first) and this run's released ones (newest first).
    pub fn live(&self) -> (Vec<Value>, Vec<Value>) {
        let i = self.lock();
        (
            i.engine.engaged(),
            i.engine.recent().iter().rev().cloned().collect(),
        )
    }

    pub fn counters(&self) -> sonde_alerts::Counters {
        self.lock().engine.counters.clone()
    }

    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    pub fn exclusions(&self) -> Vec<Value> {
        let i = self.lock();
        i.engine
            .exclusions()
            .iter()
            .map(|x| {
                let mut v = x.to_json();
                v["removable"] = json!(i.stored.contains(&x.id));
                v
            })
            .collect()
    }

    /// Adds an exclusion from the API: it takes effect now (engaged alerts it matches are
    /// released) and is stored in the data directory when there is one.
    pub fn exclude(&self, x: Exclusion, by: &str) -> Result<Value, String> {
        let mut i = self.lock();
        let now = i.stream_clock.unwrap_or_else(wall_now);
        let (x, ev) = i.engine.exclude(
            Exclusion {
                by: by.to_string(),
                created: wall_now(),
                ..x
            },
            now,
        );
        i.stored.push(x.id);
        self.dispatch(&mut i, ev);
        self.save_exclusions(&i)?;
        Ok(x.to_json())
    }

    /// Removes an exclusion added through the API; None when there is none with that id.
    pub fn unexclude(&self, id: u64) -> Result<bool, String> {
        let mut i = self.lock();
        if !i.stored.contains(&id) {
            return Ok(false);
        }
        i.engine.unexclude(id);
        i.stored.retain(|x| *x != id);
        self.save_exclusions(&i)?;
        Ok(true)
    }

    fn save_exclusions(&self, i: &Inner) -> Result<(), String> {
        let Some(dir) = &self.data_dir else {
            return Ok(());
        };
        let list: Vec<Value> = i
            .engine
            .exclusions()
            .iter()
            .filter(|x| i.stored.contains(&x.id))
            .map(Exclusion::to_json)
            .collect();
        let path = dir.join(EXCLUSIONS_FILE);
        let tmp = dir.join(format!("{EXCLUSIONS_FILE}.tmp"));
        let r = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(serde_json::to_string_pretty(&list)?.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        r.map_err(|e| format!("cannot write '{}': {e}", path.display()))
    }

    /// Acknowledges an alert of this run; None when it is not known.
    pub fn ack(&self, id: u64, by: &str) -> Option<Value> {
        let mut i = self.lock();
        let now = i.stream_clock.unwrap_or_else(wall_now);
        let ev = i.engine.ack(id, by, now)?;
        let v = ev.record().clone();
        self.dispatch(&mut i, vec![ev]);
        Some(v)
    }
}

/// Events as they happen in the data directory (with the retention of the analytics).
struct StoreOut {
    w: store::Writer,
    failed: Option<String>,
}

impl AlertOutput for StoreOut {
    fn event(&mut self, ev: &Event) {
        let mut v = ev.record().clone();
        let (name, at) = match ev {
            Event::Engaged(r) => ("start", r["start"].as_u64()),
            Event::Released(r) => ("end", r["end"].as_u64()),
            Event::Acked(r) => ("ack", r["acked_at"].as_u64()),
        };
        let at = at.unwrap_or(0);
        v["event"] = json!(name);
        v["at"] = json!(at);
        if let Err(e) = self.w.append(Kind::Alerts, at, &v) {
            self.failed.get_or_insert(format!("alerts store: {e}"));
        }
    }

    fn sync(&mut self, now: u64) {
        if let Err(e) = self.w.sync(now) {
            self.failed.get_or_insert(format!("alerts store: {e}"));
        }
        if let Some(e) = self.failed.take() {
            eprintln!("sonde: {e}");
        }
    }
}

/// Trigger capture: engaged alerts of the chosen types start a capture, releases end it.
pub(crate) struct TriggerOut(pub sonde_trigger::TriggerCapture);

impl AlertOutput for TriggerOut {
    fn event(&mut self, ev: &Event) {
        if let Event::Engaged(r) | Event::Released(r) = ev {
            self.0.on_alert(r);
        }
    }
}

/// `--alerts-out`: every engage and release as a JSON line, flushed at once.
struct FileOut {
    out: Box<dyn Write + Send>,
    failed: Option<std::io::Error>,
}

impl AlertOutput for FileOut {
    fn event(&mut self, ev: &Event) {
        if matches!(ev, Event::Acked(_)) {
            return;
        }
        let mut line = ev.record().to_string();
        line.push('\n');
        if let Err(e) = self
            .out
            .write_all(line.as_bytes())
            .and_then(|_| self.out.flush())
        {
            if self.failed.is_none() {
                eprintln!("sonde: --alerts-out: cannot write: {e}");
                self.failed = Some(e);
            }
        }
    }
}

fn open_out(path: &Path) -> Result<Box<dyn Write + Send>, String> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdout()));
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("--alerts-out: cannot write '{}': {e}", path.display()))?;
    Ok(Box::new(f))
}

// ---------------------------------------------------------------------------------------------
// The analytics' detections as alerts
// ---------------------------------------------------------------------------------------------

/// The severity of a detection type.
fn detection_severity(kind: &str) -> &'static str {
    match kind {
        "ddos" | "syn_flood" => "error",
        "scan.ip" | "scan.port" | "noisy_host" => "warning",
        _ => "notice",
    }
}

fn detection_summary(r: &Value) -> String {
    let kind = r["type"].as_str().unwrap_or("");
    let host = r["host"].as_str().unwrap_or("?");
    let ev = &r["evidence"];
    match kind {
        "scan.ip" => format!(
            "{host} scans addresses: {} targets",
            r["targets"].as_u64().unwrap_or(0)
        ),
        "scan.port" => format!(
            "{host} scans ports: {} targets",
            r["targets"].as_u64().unwrap_or(0)
        ),
        "ddos" | "syn_flood" => {
            let dir = if r["direction"] == "out" {
                "from"
            } else {
                "toward"
            };
            let crossed: Vec<String> = ev["crossed"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{} {}/s (threshold {})",
                        c["metric"].as_str().unwrap_or(""),
                        c["peak"],
                        c["threshold"]
                    )
                })
                .collect();
            format!("{kind} {dir} {host}: {}", crossed.join(", "))
        }
        "icmp_errors" => format!("{host}: many ICMP errors"),
        "noisy_host" => format!("{host} opens many connections that fail (worm-like)"),
        _ => format!("{kind} {host}"),
    }
}

fn detection_key(r: &Value) -> (String, String) {
    let kind = r["type"].as_str().unwrap_or("").to_string();
    let mut entity = r["host"].as_str().unwrap_or("").to_string();
    if let Some(v) = r["vlan"].as_u64() {
        entity = format!("{entity}@{v}");
    }
    // A host can be a DDoS victim and a source at once: two alerts.
    if let Some(d) = r["direction"].as_str() {
        if d == "out" {
            entity = format!("{entity} (out)");
        }
    }
    (kind, entity)
}

fn detection_extra(r: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    for k in [
        "host",
        "vlan",
        "direction",
        "network",
        "first_seen",
        "last_seen",
        "targets",
    ] {
        if let Some(v) = r.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    if let Some(id) = r.get("id") {
        m.insert("detection_id".into(), id.clone());
    }
    m
}

/// Feeds the analytics' detection records into the hub.
pub(crate) struct DetectionFeed {
    pub hub: Arc<AlertHub>,
}

impl sonde_analytics::merge::Output for DetectionFeed {
    fn detection(&mut self, r: &Value) {
        let (kind, entity) = detection_key(r);
        if r["event"] == "end" {
            self.hub.release(Release {
                kind,
                entity,
                at: r["last_seen"].as_u64().unwrap_or(0),
                evidence: Some(r["evidence"].clone()),
                extra: detection_extra(r),
            });
        } else {
            let severity = detection_severity(&kind).to_string();
            self.hub.raise(Raise {
                summary: detection_summary(r),
                entity_kind: "host".into(),
                severity,
                source: "analytics".into(),
                evidence: r["evidence"].clone(),
                extra: detection_extra(r),
                at: r["first_seen"].as_u64().unwrap_or(0),
                kind,
                entity,
            });
        }
    }

    fn interval(&mut self, _summary: &Value) {}

    fn second(&mut self, second: u64, _filters: &sonde_analytics::FilterCounts) {
        self.hub.stream_tick(second);
    }
}

// ---------------------------------------------------------------------------------------------
// Built-in checks
// ---------------------------------------------------------------------------------------------

/// What the checks remember between ticks.
#[derive(Default)]
struct CheckState {
    /// (wall second, received, dropped) of the last seconds.
    capture: std::collections::VecDeque<(u64, u64, u64)>,
    flow_table_full: Option<u64>,
    host_table_full: Option<u64>,
    /// Seconds each table has been quiet since its last refusal.
    quiet: [u64; 2],
    listed_seen: std::collections::HashSet<String>,
    last_hosts_scan: u64,
    last_disk_check: u64,
    /// Per exporter: datagrams and records lost as last seen, when its datagrams last grew,
    /// and when it last lost records.
    exporters: std::collections::HashMap<std::net::SocketAddr, ExporterSeen>,
}

#[derive(Clone, Copy, Default)]
struct ExporterSeen {
    datagrams: u64,
    lost: u64,
    last_sent: u64,
    last_loss: Option<u64>,
    silent: bool,
}

/// The checks thread: built-in checks and the hub's wall tick, once a second until `stop`.
pub(crate) fn start_checks(
    hub: Arc<AlertHub>,
    view: crate::ProbeView,
    settings: CheckSettings,
    interface: String,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("alerts".into())
        .spawn(move || {
            let mut st = CheckState::default();
            let mut tick = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                tick += 1;
                if !tick.is_multiple_of(5) {
                    continue;
                }
                let wall = wall_now();
                check_capture(&hub, &view, &settings, &interface, &mut st, wall);
                check_tables(&hub, &view, &mut st);
                check_exporters(&hub, &view, &settings, &mut st, wall);
                if !settings.listed.is_empty() && wall >= st.last_hosts_scan + 5 {
                    st.last_hosts_scan = wall;
                    check_listed(&hub, &view, &settings, &mut st);
                }
                if wall >= st.last_disk_check + 30 {
                    st.last_disk_check = wall;
                    check_disk(&hub, &settings);
                }
                hub.wall_tick();
            }
        })
        .map_err(|e| format!("cannot start the alerts thread: {e}"))
}

fn check_capture(
    hub: &AlertHub,
    view: &crate::ProbeView,
    s: &CheckSettings,
    interface: &str,
    st: &mut CheckState,
    wall: u64,
) {
    let d = view.capture_drops();
    st.capture
        .push_back((wall, d.received, d.dropped + d.if_dropped));
    while st.capture.len() > 11 {
        st.capture.pop_front();
    }
    let (Some(first), Some(last)) = (st.capture.front(), st.capture.back()) else {
        return;
    };
    let received = last.1.saturating_sub(first.1);
    let dropped = last.2.saturating_sub(first.2);
    let seen = received + dropped;
    let ratio = if seen == 0 {
        0.0
    } else {
        dropped as f64 / seen as f64
    };
    let now = hub.now();
    if dropped >= 100 && ratio >= s.drop_ratio {
        hub.raise(Raise {
            kind: "capture.drops".into(),
            entity_kind: "interface".into(),
            entity: interface.to_string(),
            severity: "warning".into(),
            summary: format!(
                "{interface}: the kernel dropped {dropped} of {seen} packets in the last {} s ({:.1}%)",
                last.0 - first.0,
                ratio * 100.0
            ),
            source: "check".into(),
            evidence: json!({"dropped": dropped, "received": received, "seconds": last.0 - first.0,
                "ratio": ratio, "threshold": s.drop_ratio}),
            extra: Map::new(),
            at: now,
        });
    } else if dropped == 0 {
        hub.release(Release {
            kind: "capture.drops".into(),
            entity: interface.to_string(),
            at: now,
            ..Release::default()
        });
    }
}

fn check_tables(hub: &AlertHub, view: &crate::ProbeView, st: &mut CheckState) {
    let stats = view.shard_stats();
    let flows_refused: u64 = stats
        .iter()
        .map(|s| s.dropped[sonde_flow::DropReason::FlowTableFull as usize])
        .sum();
    let hosts_refused: u64 = stats.iter().map(|s| s.hosts_table_full).sum();
    let active_flows: u64 = stats.iter().map(|s| s.active_flows).sum();
    let active_hosts: u64 = stats.iter().map(|s| s.active_hosts).sum();
    let now = hub.now();
    for (i, (name, total, active, last)) in [
        (
            "flows",
            flows_refused,
            active_flows,
            &mut st.flow_table_full,
        ),
        (
            "hosts",
            hosts_refused,
            active_hosts,
            &mut st.host_table_full,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let before = last.replace(total);
        let grew = before.is_some_and(|b| total > b);
        if grew {
            st.quiet[i] = 0;
            let what = if name == "flows" {
                "packets that would have opened a flow were dropped"
            } else {
                "flows were created without their host"
            };
            hub.raise(Raise {
                kind: "table.full".into(),
                entity_kind: "interface".into(),
                entity: name.into(),
                severity: "warning".into(),
                summary: format!(
                    "the {name} table is full ({active} entries): {} {what} in the last second",
                    total - before.unwrap_or(0)
                ),
                source: "check".into(),
                evidence: json!({"table": name, "active": active, "refused_total": total,
                    "refused_last_second": total - before.unwrap_or(0)}),
                extra: Map::new(),
                at: now,
            });
        } else {
            st.quiet[i] += 1;
            if st.quiet[i] == 10 {
                hub.release(Release {
                    kind: "table.full".into(),
                    entity: name.into(),
                    at: now,
                    ..Release::default()
                });
            }
        }
    }
}

/// exporter.silent (an exporter that was sending has sent nothing for `exporter_silent_s`
/// seconds) and collector.gap (its sequence numbers say records or datagrams were lost in the
/// last second; released after a minute without loss). Wall-clock seconds: exporters send on
/// the wall clock, whatever time their records carry.
fn check_exporters(
    hub: &AlertHub,
    view: &crate::ProbeView,
    s: &CheckSettings,
    st: &mut CheckState,
    wall: u64,
) {
    let now = hub.now();
    for (addr, x) in view.exporters() {
        let lost = x.lost_records + x.lost_packets + x.lost_datagrams;
        let seen = st.exporters.entry(addr).or_insert(ExporterSeen {
            datagrams: x.datagrams,
            lost,
            last_sent: wall,
            ..Default::default()
        });
        let entity = addr.to_string();
        if x.datagrams > seen.datagrams {
            seen.datagrams = x.datagrams;
            seen.last_sent = wall;
            if seen.silent {
                seen.silent = false;
                hub.release(Release {
                    kind: "exporter.silent".into(),
                    entity: entity.clone(),
                    at: now,
                    ..Release::default()
                });
            }
        } else if !seen.silent && wall >= seen.last_sent + s.exporter_silent_s {
            seen.silent = true;
            hub.raise(Raise {
                kind: "exporter.silent".into(),
                entity_kind: "exporter".into(),
                entity: entity.clone(),
                severity: "warning".into(),
                summary: format!(
                    "exporter {entity} has sent nothing for {} s (after {} datagrams)",
                    wall - seen.last_sent,
                    x.datagrams
                ),
                source: "check".into(),
                evidence: json!({"datagrams": x.datagrams, "records": x.records,
                    "silent_s": wall - seen.last_sent, "threshold_s": s.exporter_silent_s}),
                extra: Map::new(),
                at: now,
            });
        }
        if lost > seen.lost {
            let new = lost - seen.lost;
            seen.lost = lost;
            seen.last_loss = Some(wall);
            hub.raise(Raise {
                kind: "collector.gap".into(),
                entity_kind: "exporter".into(),
                entity: entity.clone(),
                severity: "notice".into(),
                summary: format!(
                    "exporter {entity}: its sequence numbers say {new} lost in the last second ({lost} in all)"
                ),
                source: "check".into(),
                evidence: json!({"lost_records": x.lost_records, "lost_packets": x.lost_packets,
                    "lost_datagrams": x.lost_datagrams, "lost_last_second": new,
                    "sequence_resets": x.sequence_resets}),
                extra: Map::new(),
                at: now,
            });
        } else if seen.last_loss.is_some_and(|t| wall >= t + 60) {
            seen.last_loss = None;
            hub.release(Release {
                kind: "collector.gap".into(),
                entity,
                at: now,
                ..Release::default()
            });
        }
    }
}

fn check_listed(hub: &AlertHub, view: &crate::ProbeView, s: &CheckSettings, st: &mut CheckState) {
    let hosts = view.snapshot_hosts_into(Vec::new());
    let now = hub.now();
    let mut seen = std::collections::HashSet::new();
    for h in &hosts {
        let ip = sonde_analytics::types::ip_of(&h.key.addr, h.key.ip_version);
        let Some((net, len)) = s
            .listed
            .iter()
            .find(|(n, l)| sonde_alerts::in_network(ip, *n, *l))
        else {
            continue;
        };
        let text = ip.to_string();
        seen.insert(text.clone());
        hub.raise(Raise {
            kind: "host.listed".into(),
            entity_kind: "host".into(),
            entity: text.clone(),
            severity: "error".into(),
            summary: format!("{text} is in the traffic and on the list ({net}/{len})"),
            source: "check".into(),
            evidence: json!({
                "listed_as": format!("{net}/{len}"),
                "list": s.listed_file.as_ref().map(|p| p.display().to_string()),
                "sent_bytes": h.sent_bytes, "rcvd_bytes": h.rcvd_bytes,
                "flows_as_client": h.flows_as_client, "flows_as_server": h.flows_as_server,
            }),
            extra: Map::new(),
            at: now,
        });
    }
    for gone in st.listed_seen.difference(&seen) {
        hub.release(Release {
            kind: "host.listed".into(),
            entity: gone.clone(),
            at: now,
            ..Release::default()
        });
    }
    st.listed_seen = seen;
}

/// disk.near_cap: the file system of the data directory has less room left than the flow
/// history may still take (its cap minus what it holds), or less than 5% free.
fn check_disk(hub: &AlertHub, s: &CheckSettings) {
    let Some(dir) = hub.data_dir() else { return };
    let Some((free, total)) = fs_space(dir) else {
        return;
    };
    let used = dir_size(&dir.join("flows"));
    let want = s.history_cap.saturating_sub(used);
    let low = free < total / 20 || (s.history_cap > 0 && free < want);
    let now = hub.now();
    let entity = dir.display().to_string();
    if low {
        hub.raise(Raise {
            kind: "disk.near_cap".into(),
            entity_kind: "interface".into(),
            entity: entity.clone(),
            severity: "warning".into(),
            summary: format!(
                "{entity}: {} MiB free of {} MiB; the flow history holds {} MiB{}",
                free >> 20,
                total >> 20,
                used >> 20,
                if s.history_cap > 0 {
                    format!(" of its {} MiB cap", s.history_cap >> 20)
                } else {
                    String::new()
                }
            ),
            source: "check".into(),
            evidence: json!({"free_bytes": free, "total_bytes": total, "history_bytes": used,
                "history_cap_bytes": s.history_cap}),
            extra: Map::new(),
            at: now,
        });
    } else {
        hub.release(Release {
            kind: "disk.near_cap".into(),
            entity,
            at: now,
            ..Release::default()
        });
    }
}

fn fs_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let f = st.f_frsize as u64;
    Some((st.f_bavail as u64 * f, st.f_blocks as u64 * f))
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Reads a list of addresses and networks for host.listed: one per line, `#` comments.
pub fn read_list(path: &Path) -> Result<Vec<(IpAddr, u8)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--alert-hosts: cannot read '{}': {e}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "--alert-hosts {} line {}: {line:?} is not an address or a network (10.0.0.1, 10.0.0.0/8, 2001:db8::/32)",
                path.display(),
                n + 1
            )
        };
        let net = match line.parse::<IpAddr>() {
            Ok(ip) => (ip, if ip.is_ipv4() { 32 } else { 128 }),
            Err(_) => sonde_alerts::parse_network(line).map_err(|_| bad())?,
        };
        out.push(net);
    }
    Ok(out)
}

impl AlertHub {
    /// What the hub wrote and refused, for the summary.
    pub fn report(&self) -> Value {
        let c = self.counters();
        let notify: Vec<Value> = self
            .notify_stats()
            .into_iter()
            .map(|t| {
                json!({"target": t.name, "sent": t.sent, "failures": t.failures,
                    "retries": t.retries, "dropped": t.dropped, "given_up": t.given_up,
                    "queued": t.queued, "last_error": t.last_error})
            })
            .collect();
        let scripts = self
            .scripts
            .as_ref()
            .map(|s| s.status.lock().unwrap_or_else(|e| e.into_inner()).clone());
        json!({
            "engaged": c.engaged, "released": c.released, "rate_limited": c.rate_limited,
            "entity_limited": c.entity_limited, "excluded": c.excluded, "flaps": c.flaps,
            "notify": notify, "scripts": scripts,
        })
    }

    /// Each notification target's counters (live, or final after the run).
    pub fn notify_stats(&self) -> Vec<sonde_notify::TargetStats> {
        match self
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(n) => n.stats(),
            None => self
                .notify_final
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Prometheus text for `/metrics`.
    pub fn metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        sonde_notify::write_metrics(&self.notify_stats(), out);
        if let Some(s) = &self.scripts {
            let _ = writeln!(
                out,
                "# HELP sonde_script_flows_dropped_total Ended flows the scripts' on_flow hooks were too slow to take.\n# TYPE sonde_script_flows_dropped_total counter\nsonde_script_flows_dropped_total {}",
                s.flows_dropped.load(Ordering::Relaxed)
            );
            let st = s.status.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(out, "# HELP sonde_script_enabled Whether a script is still running (0: disabled after an error or overrun).\n# TYPE sonde_script_enabled gauge");
            for v in st.iter() {
                let _ = writeln!(
                    out,
                    "sonde_script_enabled{{script=\"{}\"}} {}",
                    label(v["name"].as_str().unwrap_or("")),
                    u8::from(v["enabled"] == true)
                );
            }
        }
        let c = self.counters();
        for (name, help, m) in [
            (
                "sonde_alerts_engaged_total",
                "Alerts engaged, by type.",
                &c.engaged,
            ),
            (
                "sonde_alerts_released_total",
                "Alerts released, by type.",
                &c.released,
            ),
            (
                "sonde_alerts_rate_limited_total",
                "Raises refused by the per-type rate limit.",
                &c.rate_limited,
            ),
            (
                "sonde_alerts_entity_limited_total",
                "Raises refused by the per-entity hourly limit.",
                &c.entity_limited,
            ),
            (
                "sonde_alerts_excluded_total",
                "Raises refused by an exclusion.",
                &c.excluded,
            ),
            (
                "sonde_alerts_flaps_total",
                "Conditions that came back while their release was held.",
                &c.flaps,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, v) in m {
                let _ = writeln!(out, "{name}{{type=\"{}\"}} {v}", label(k));
            }
        }
        let n = self.lock().engine.engaged_count();
        let _ = writeln!(
            out,
            "# HELP sonde_alerts_engaged Alerts engaged now.\n# TYPE sonde_alerts_engaged gauge\nsonde_alerts_engaged {n}"
        );
    }
}

/// A Prometheus label value: backslash, quote and newline escaped as the text format asks.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
