//! User scripts (`--script FILE.lua`, `sonde_scripts`) inside the probe: one thread owns the
//! Lua states, ticks them once a second with the alert hub's clock, answers their questions
//! from the probe's live view, and hands the alerts they raise to the hub. Ended flows reach
//! `on_flow` hooks through a flow sink and a bounded channel: when the scripts fall behind,
//! flows are dropped and counted, never the packets.

use crate::alerts::AlertHub;
use crate::sinks::{RecordSink, SinkReport};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde_json::{json, Map, Value};
use sonde_flow::FlowRecord;
use sonde_scripts::{Action, FlowInfo, HostInfo, ProbeData, Scripts};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ended flows waiting for `on_flow` hooks.
const FLOW_QUEUE: usize = 65_536;

/// What the scripts thread shares with the rest of the probe.
#[derive(Default)]
pub struct ScriptsLive {
    /// Ended flows dropped because the scripts were behind.
    pub flows_dropped: AtomicU64,
    pub flows_handed: AtomicU64,
    /// The scripts' status (name, enabled, why disabled, calls, time), as JSON.
    pub status: std::sync::Mutex<Vec<Value>>,
}

fn addr_text(a: &[u8; 16], v: u8) -> String {
    sonde_analytics::types::addr_text(a, v)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A flow as scripts see it, from what records and live rows both hold.
fn flow_info(
    key: &sonde_flow::FlowKey,
    client_is_a: bool,
    (pkts, bytes): ([u64; 2], [u64; 2]),
    (first_ns, last_ns): (u64, u64),
    l7: &sonde_dpi::L7,
    meta: Option<&sonde_dpi::Meta>,
    end_reason: &str,
) -> FlowInfo {
    let c = usize::from(!client_is_a);
    let e = key.ends(c);
    FlowInfo {
        proto: key.proto,
        client: addr_text(e.client_addr, key.ip_version),
        server: addr_text(e.server_addr, key.ip_version),
        client_port: e.client_port,
        server_port: e.server_port,
        vlan: key.vlan,
        app: l7.name(),
        packets: [pkts[c], pkts[1 - c]],
        bytes: [bytes[c], bytes[1 - c]],
        first_seen: secs(first_ns),
        last_seen: secs(last_ns),
        end_reason: end_reason.to_string(),
        server_name: meta.and_then(|m| m.server_name.clone()),
        dns_query: meta
            .and_then(|m| m.dns.as_ref())
            .and_then(|d| d.query.clone()),
    }
}

fn record_info(r: &FlowRecord) -> FlowInfo {
    let f = &r.flow;
    flow_info(
        &f.key,
        f.client_is_a,
        (f.pkts, f.bytes),
        (f.first_ns, f.last_ns),
        &f.l7,
        r.meta.as_deref(),
        r.reason.name(),
    )
}

/// The flow sink that feeds `on_flow` hooks.
pub(crate) struct ScriptFlows {
    tx: Sender<FlowInfo>,
    live: Arc<ScriptsLive>,
}

impl RecordSink for ScriptFlows {
    fn name(&self) -> String {
        "scripts (on_flow)".into()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> std::io::Result<()> {
        for r in batch {
            match self.tx.try_send(record_info(r)) {
                Ok(()) => {
                    self.live.flows_handed.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.live.flows_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<SinkReport> {
        Ok(SinkReport {
            name: self.name(),
            records: self.live.flows_handed.load(Ordering::Relaxed),
            dropped: self.live.flows_dropped.load(Ordering::Relaxed),
            ..SinkReport::default()
        })
    }

    fn dropped(&self) -> u64 {
        self.live.flows_dropped.load(Ordering::Relaxed)
    }
}

/// The probe's answers to a script's questions, taken from the live view.
struct Data<'a> {
    view: &'a crate::ProbeView,
}

impl ProbeData for Data<'_> {
    fn hosts(&mut self) -> Vec<HostInfo> {
        self.view
            .snapshot_hosts_into(Vec::new())
            .into_iter()
            .map(|h| {
                let ip = sonde_analytics::types::ip_of(&h.key.addr, h.key.ip_version);
                HostInfo {
                    ip: ip.to_string(),
                    vlan: h.key.vlan,
                    mac: h.has_mac.then(|| {
                        h.mac
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(":")
                    }),
                    sent_bytes: h.sent_bytes,
                    rcvd_bytes: h.rcvd_bytes,
                    sent_packets: h.sent_pkts,
                    rcvd_packets: h.rcvd_pkts,
                    flows_as_client: h.flows_as_client.into(),
                    flows_as_server: h.flows_as_server.into(),
                    active_flows: h.active_flows.into(),
                    first_seen: h.first_ns / 1_000_000_000,
                    last_seen: h.last_ns / 1_000_000_000,
                    name: None,
                }
            })
            .collect()
    }

    fn flows(&mut self) -> Vec<FlowInfo> {
        let parts = self.view.snapshot_flows_into(Vec::new());
        let rows: Vec<&sonde_flow::FlowRow> = parts.iter().flatten().collect();
        // What DPI learned (server names, DNS queries), asked of the shards in one request.
        let keys: Vec<sonde_flow::FlowKey> = rows.iter().map(|r| r.key).collect();
        let metas = self.view.flow_meta(&keys);
        rows.into_iter()
            .zip(metas)
            .map(|(r, meta)| {
                flow_info(
                    &r.key,
                    r.client_is_a,
                    (r.pkts, r.bytes),
                    (r.first_ns, r.last_ns),
                    &r.l7,
                    meta.as_deref(),
                    "",
                )
            })
            .collect()
    }

    fn interface(&mut self) -> Value {
        let mut t = sonde_flow::ShardStats::default();
        for s in self.view.shard_stats() {
            t.merge(&s);
        }
        let d = self.view.capture_drops();
        json!({
            "packets": t.packets, "bytes": t.wire_bytes, "ip_packets": t.ip_packets,
            "ip_bytes": t.ip_bytes, "active_flows": t.active_flows, "active_hosts": t.active_hosts,
            "flows_created": t.flows_created, "malformed": t.malformed_total(),
            "capture_received": d.received, "capture_dropped": d.dropped,
            "interface_dropped": d.if_dropped,
        })
    }

    fn filter_sets(&mut self) -> Value {
        let Some(a) = self.view.analytics() else {
            return json!({});
        };
        let Some(sets) = a.filter_sets() else {
            return json!({});
        };
        let live = a.live.lock().unwrap_or_else(|e| e.into_inner());
        crate::report::filter_sets_json(sets, &live.filter_totals)
    }

    fn top(&mut self, what: &str, n: usize) -> Value {
        let Some(a) = self.view.analytics() else {
            return json!([]);
        };
        let live = a.live.lock().unwrap_or_else(|e| e.into_inner());
        let Some(iv) = live.interval.as_deref() else {
            return json!([]);
        };
        let list = match what {
            "hosts" => "talkers",
            "applications" => "apps",
            other => other,
        };
        match iv.get(list).and_then(Value::as_array) {
            Some(rows) => Value::Array(rows.iter().take(n).cloned().collect()),
            None => json!([]),
        }
    }
}

fn apply(hub: &AlertHub, actions: Vec<Action>, now: u64) {
    for a in actions {
        match a {
            Action::Engage {
                kind,
                entity_kind,
                entity,
                severity,
                summary,
                evidence,
                source,
            } => hub.raise(sonde_alerts::Raise {
                kind,
                entity_kind,
                entity,
                severity,
                summary,
                source,
                evidence,
                extra: Map::new(),
                at: now,
            }),
            Action::Release { kind, entity, .. } => hub.release(sonde_alerts::Release {
                kind,
                entity,
                at: now,
                ..Default::default()
            }),
        }
    }
}

fn status_json(s: &Scripts) -> Vec<Value> {
    s.status()
        .into_iter()
        .map(|st| {
            json!({
                "name": st.name, "path": st.path.display().to_string(), "enabled": st.enabled,
                "disabled_reason": st.disabled_reason, "calls": st.calls, "errors": st.errors,
                "total_ns": st.total_ns, "max_ns": st.max_ns, "memory_bytes": st.memory_bytes,
            })
        })
        .collect()
}

/// A flow sink for `on_flow` hooks (when a script has one) and the channel it feeds.
pub(crate) fn flow_channel(live: &Arc<ScriptsLive>) -> (Box<dyn RecordSink>, Receiver<FlowInfo>) {
    let (tx, rx) = crossbeam_channel::bounded(FLOW_QUEUE);
    (
        Box::new(ScriptFlows {
            tx,
            live: live.clone(),
        }),
        rx,
    )
}

/// Starts the scripts thread: hooks once a second until `stop`, then the flows still queued.
pub(crate) fn start(
    mut scripts: Scripts,
    hub: Arc<AlertHub>,
    view: crate::ProbeView,
    flows: Option<Receiver<FlowInfo>>,
    live: Arc<ScriptsLive>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("scripts".into())
        .spawn(move || {
            let mut next = Instant::now();
            loop {
                let stopping = stop.load(Ordering::Relaxed);
                if let Some(rx) = &flows {
                    // Ended flows until the next tick (all of them when stopping).
                    let until = if stopping { Instant::now() } else { next };
                    loop {
                        let r = if stopping {
                            rx.try_recv().ok()
                        } else {
                            rx.recv_deadline(until).ok()
                        };
                        let Some(f) = r else { break };
                        let acts = scripts.on_flow(&f);
                        apply(&hub, acts, hub.now());
                    }
                } else if !stopping {
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
                if stopping {
                    break;
                }
                if Instant::now() >= next {
                    next += Duration::from_secs(1);
                    let now = hub.now();
                    let acts = scripts.tick(now, &mut Data { view: &view });
                    apply(&hub, acts, now);
                    *live.status.lock().unwrap_or_else(|e| e.into_inner()) = status_json(&scripts);
                }
            }
            *live.status.lock().unwrap_or_else(|e| e.into_inner()) = status_json(&scripts);
        })
        .map_err(|e| format!("cannot start the scripts thread: {e}"))
}
