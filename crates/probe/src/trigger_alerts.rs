//! Until the alert engine calls trigger capture itself: the analytics detections, turned into
//! the alert contract's shape (/work/notes/alert-contract.md), engage and release captures.
//! One small [`Output`] of the analytics merger; the alert engine replaces it.

use serde_json::{json, Value};
use sonde_analytics::merge::Output;
use sonde_trigger::TriggerCapture;

pub(crate) struct TriggerAlerts(pub TriggerCapture);

/// A detection record (`event` start/end, `type`, `host`, `first_seen`, `last_seen`,
/// `evidence`, `direction`) as an alert record.
pub(crate) fn alert_record(d: &Value) -> Option<Value> {
    let (state, end) = match d["event"].as_str()? {
        "start" => ("engaged", Value::Null),
        "end" => ("released", d["last_seen"].clone()),
        _ => return None,
    };
    let mut a = json!({
        "id": d["id"].as_u64()?,
        "type": d["type"].as_str()?,
        "severity": "warning",
        "entity": {"kind": "host", "value": d["host"]},
        "state": state,
        "event": d["event"],
        "start": d["first_seen"],
        "end": end,
        "summary": format!("{} of {}", d["type"].as_str()?, d["host"].as_str().unwrap_or("?")),
        "source": "analytics",
        "evidence": d["evidence"],
        "host": d["host"],
    });
    for k in ["direction", "vlan", "targets"] {
        if !d[k].is_null() {
            a[k] = d[k].clone();
        }
    }
    Some(a)
}

impl Output for TriggerAlerts {
    fn detection(&mut self, record: &Value) {
        if let Some(a) = alert_record(record) {
            self.0.on_alert(&a);
        }
    }

    fn interval(&mut self, _summary: &Value) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detections_become_alert_records() {
        let d = json!({"id": 4, "type": "syn_flood", "event": "start", "host": "10.0.0.3",
                       "first_seen": 100, "last_seen": 101, "direction": "in",
                       "evidence": {"top_sources": [{"host": "10.0.0.77"}]}});
        let a = alert_record(&d).unwrap();
        assert_eq!(a["state"], "engaged");
        assert_eq!(a["entity"], json!({"kind": "host", "value": "10.0.0.3"}));
        assert_eq!(a["start"], 100);
        assert_eq!(a["end"], Value::Null);
        assert_eq!(a["direction"], "in");
        assert_eq!(a["evidence"]["top_sources"][0]["host"], "10.0.0.77");
        let mut e = d.clone();
        e["event"] = json!("end");
        e["last_seen"] = json!(110);
        let a = alert_record(&e).unwrap();
        assert_eq!(
            (a["state"].as_str(), a["end"].as_u64()),
            (Some("released"), Some(110))
        );
        assert!(alert_record(&json!({"event": "active", "id": 1, "type": "x"})).is_none());
    }
}
