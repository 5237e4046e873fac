//! Human and machine readable reports: the periodic Cento-style line and the final JSON summary.

use crate::run::Summary;
use serde_json::{json, Map, Value};
use sonde_flow::{DropReason, EndReason, ShardStats};
use sonde_wire::MALFORMED_REASONS;
use std::time::Duration;

/// 1234567 → "1'234'567", the grouping Cento's stats lines use.
pub fn format_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\'');
        }
        out.push(c);
    }
    out
}

/// `[shard0] [5'077'577 pps/3.49 Gbps][100/100/0 act/exp/drop flows][0/0 RX/TX pkt drops]`, the
/// rate being the change since `prev` over `dt`.
pub fn stats_line(
    name: &str,
    now: &ShardStats,
    prev: &ShardStats,
    dt: Duration,
    capture_drops: u64,
) -> String {
    let secs = dt.as_secs_f64().max(1e-9);
    let pps = (now.packets.saturating_sub(prev.packets)) as f64 / secs;
    let gbps = (now.wire_bytes.saturating_sub(prev.wire_bytes)) as f64 * 8.0 / secs / 1e9;
    format!(
        "[{name}] [{} pps/{:.2} Gbps][{}/{}/{} act/exp/drop flows][{}/{} hosts/malformed][{} RX pkt drops]",
        format_count(pps as u64),
        gbps,
        format_count(now.active_flows),
        format_count(now.flows_ended_total()),
        format_count(now.dropped[DropReason::FlowTableFull as usize]),
        format_count(now.active_hosts),
        format_count(now.malformed_total()),
        format_count(capture_drops),
    )
}

fn cpu_and_rss() -> (f64, u64) {
    // SAFETY: getrusage fills the zeroed struct we pass; RUSAGE_SELF is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe {
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // VmHWM is this process's own peak; ru_maxrss also holds the peak of the process that
    // forked it (Linux copies it across exec), so a sonde started by a large parent would
    // report the parent's size.
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        hwm.unwrap_or(ru.ru_maxrss as u64) * 1024,
    )
}

/// One input's line of the summary: what its shards counted and what the kernel said.
fn input_json(i: &crate::InputReport) -> Value {
    json!({
        "name": i.name,
        "capture_backend": i.capture_backend,
        "packets": i.stats.packets,
        "wire_bytes": i.stats.wire_bytes,
        "flows_created": i.stats.flows_created,
        "capture": {
            "received": i.capture.received,
            "dropped": i.capture.dropped,
            "if_dropped": i.capture.if_dropped,
        },
    })
}

/// Packets and bytes by flow direction: `{"in": {"packets": P, "bytes": B}, "out": …}`.
pub fn directions_json(d: &sonde_flow::DirectionCounts) -> Value {
    let mut m = Map::new();
    for dir in sonde_flow::Direction::ALL {
        let i = dir as usize;
        m.insert(
            dir.name().into(),
            json!({ "packets": d.packets[i], "bytes": d.bytes[i] }),
        );
    }
    Value::Object(m)
}

/// The final summary written by `--stats-json`. Every packet read appears once in
/// `ip_packets`, `non_ip`, `malformed.total` or `dropped.total`.
pub fn summary_json(s: &Summary, source: &str, threads: usize) -> Value {
    let t = &s.total;
    let (cpu_s, max_rss) = cpu_and_rss();
    let mut malformed = Map::new();
    for (i, name) in MALFORMED_REASONS.iter().enumerate() {
        malformed.insert((*name).to_string(), json!(t.malformed[i]));
    }
    malformed.insert("total".into(), json!(t.malformed_total()));
    let mut dropped = Map::new();
    for r in DropReason::ALL {
        dropped.insert(r.name().to_string(), json!(t.dropped[r as usize]));
    }
    dropped.insert(
        "capture".into(),
        json!(s.capture.dropped + s.capture.if_dropped),
    );
    dropped.insert("total".into(), json!(t.dropped_total()));
    let mut ended = Map::new();
    for r in EndReason::ALL {
        ended.insert(r.name().to_string(), json!(t.flows_ended[r as usize]));
    }
    let elapsed = s.elapsed.as_secs_f64();
    let mut summary = json!({
        "source": source,
        "threads": threads,
        "packets": t.packets,
        "wire_bytes": t.wire_bytes,
        "ip_packets": t.ip_packets,
        "ip_bytes": t.ip_bytes,
        "non_ip": t.non_ip,
        "malformed": malformed,
        "dropped": dropped,
        "fragments": t.fragments,
        "fragments_unmatched": t.fragments_unmatched,
        "tunneled": t.tunneled,
        "flows": {
            "created": t.flows_created,
            "active": t.active_flows,
            "ended": ended,
            "exported": s.flows_written,
        },
        "hosts": {
            "distinct": s.distinct_hosts,
            "created": t.hosts_created,
            "purged": t.hosts_purged,
            "table_full": t.hosts_table_full,
        },
        "capture": {
            "received": s.capture.received,
            "dropped": s.capture.dropped,
            "if_dropped": s.capture.if_dropped,
        },
        "collected": {
            "messages": s.collector_messages,
            "decoded": s.collector_records,
            "errors": s.collector_errors,
            "connections_refused": s.collector_connections_refused,
            "refused_sources": s.collector_refused_sources,
            "failed_handshakes": s.collector_failed_handshakes,
            "suspect": s.collector_suspect,
            "retimed": s.collector_retimed,
            "skipped_topics": s.collector_skipped_topics,
            "unknown_keys": s.collector_unknown_keys,
            "lost_messages": s.collector_lost_messages,
            "records": t.collected_records,
            "samples": t.collected_samples,
            "packets": t.collected_packets,
            "bytes": t.collected_bytes,
        },
        "exporters": s.exporters.iter().map(|x| { let e = &x.stats; serde_json::json!({
            "exporter": x.addr.to_string(),
            // Keyed by ifIndex (as a string: JSON object keys), wire strings as given.
            "interface_names": x.interface_names.iter()
                .map(|(i, n)| (i.to_string(), serde_json::Value::from(n.as_str())))
                .collect::<serde_json::Map<_, _>>(),
            "interface_counters": x.interface_counters.iter().map(|(i, c)| (i.to_string(), serde_json::json!({
                "speed": c.speed,
                "status": c.status,
                "in_octets": c.in_octets,
                "in_packets": c.in_packets,
                "in_discards": c.in_discards,
                "in_errors": c.in_errors,
                "out_octets": c.out_octets,
                "out_packets": c.out_packets,
                "out_discards": c.out_discards,
                "out_errors": c.out_errors,
            }))).collect::<serde_json::Map<_, _>>(),
            "datagrams": e.datagrams,
            "records": e.records,
            "option_records": e.option_records,
            "templates": {
                "received": e.templates_received,
                "active": e.templates_active,
                "withdrawn": e.templates_withdrawn,
                "expired": e.templates_expired,
                "rejected": e.templates_rejected,
            },
            "lost_records": e.lost_records,
            "lost_packets": e.lost_packets,
            "lost_datagrams": e.lost_datagrams,
            "parse_errors": e.parse_errors,
            "no_template_sets": e.no_template_sets,
            "flow_samples": e.flow_samples,
            "counter_samples": e.counter_samples,
        })}).collect::<Vec<_>>(),
        "sinks": s.sinks.iter().map(|r| serde_json::json!({
            "name": r.name,
            "records": r.records,
            "messages": r.messages,
            "dropped": r.dropped,
            "offered": r.offered,
            "queue_dropped": r.queue_dropped,
            "when_full": r.when_full.name(),
        })).collect::<Vec<_>>(),
        "series": s.series.as_ref().map(|r| serde_json::json!({
            "dir": r.dir.display().to_string(),
            "seconds": r.seconds,
            "refused_seconds": r.refused_seconds,
            "refused_keys": r.refused_keys,
            "reused_columns": r.reused_columns,
            "host_columns": r.host_columns,
        })),
        "host_cache": s.host_cache.as_ref().map(|r| serde_json::json!({
            "stored": r.stored,
            "restored": r.restored,
            "cached": r.cached,
            "evicted": r.evicted,
        })),
        // With --local-networks only: packets and bytes of the flows of each direction (both
        // ways of a flow under its direction; they add up to ip_packets and ip_bytes).
        "local_networks": (!s.local_networks.is_empty())
            .then(|| s.local_networks.list().iter().map(|n| n.to_string()).collect::<Vec<_>>()),
        "directions": (!s.local_networks.is_empty()).then(|| directions_json(&t.directions)),
        "filter_sets": s.filter_sets.as_ref().map(|(sets, counts)| filter_sets_json(sets, counts)),
        "analytics": s.analytics.as_ref().map(|a| serde_json::json!({
            "detections": a.detections,
            "intervals": a.intervals,
            "seconds": a.seconds,
            "late_reports": a.late_reports,
        })),
        "alerts": s.alerts,
        "trigger": s.trigger_files.as_ref().map(|files| serde_json::json!({
            "rings": s.trigger_rings,
            "files": files.iter().map(|f| serde_json::json!({
                "alert_id": f.alert_id,
                "type": f.alert_type,
                "name": f.name,
                "path": f.path.display().to_string(),
                "link": f.link,
                "packets": f.packets,
                "bytes": f.bytes,
                "dropped": f.dropped,
                "complete": f.complete,
                "truncated_by": f.truncated_by.map(|c| c.name()),
                "error": f.error,
            })).collect::<Vec<_>>(),
        })),
        "egress": s.egress.as_ref().map(|e| serde_json::json!({
            "offered": e.counts.offered,
            "forwarded": e.counts.forwarded,
            "forwarded_bytes": e.counts.forwarded_bytes,
            "shunted": e.counts.shunted,
            "dropped": e.counts.dropped,
            "files": e.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "files_deleted": e.files_deleted,
            "errors": e.errors,
        })),
        "table_memory_bytes": t.table_memory,
        "elapsed_s": elapsed,
        "cpu_s": cpu_s,
        "pps": if elapsed > 0.0 { t.packets as f64 / elapsed } else { 0.0 },
        "max_rss_bytes": max_rss,
        "error": s.error.as_ref().map(|e| e.to_string()),
    });
    // Out of the macro above, which is at its recursion limit.
    summary["inputs"] = s.inputs.iter().map(input_json).collect();
    summary
}

/// `{SET: {LABEL: {packets, bytes}}}`, sets and labels in the order they were declared.
pub fn filter_sets_json(
    sets: &sonde_analytics::FilterSets,
    counts: &sonde_analytics::FilterCounts,
) -> Value {
    let mut out = Map::new();
    for &i in &sets.order {
        let e = &sets.exprs[i];
        let set = out
            .entry(e.set.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = set {
            m.insert(
                e.label.clone(),
                json!({
                    "packets": counts.packets.get(i).copied().unwrap_or(0),
                    "bytes": counts.bytes.get(i).copied().unwrap_or(0),
                }),
            );
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(1000), "1'000");
        assert_eq!(format_count(132_125_746), "132'125'746");
    }
}
