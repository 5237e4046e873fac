//! The other direction: flow records in nProbe/ntopng JSON (as `--flows-out` and the ZMQ
//! publisher write them, or as any producer speaking that format sends them) back into
//! [`CollectedFlow`]s, so one sonde can collect another's flows. Keys sonde does not interpret
//! are kept (`extra_text`) and shown in the collector's records, not dropped.

use serde_json::{Map, Value};
use sonde_flowproto::CollectedFlow;
use std::net::IpAddr;

/// Keys read into the record's fields (everything else is kept as extra text): the schema's
/// fields marked `ingest`. Keys the producer derives from these (times in seconds, TCP flags
/// per side, …) are read too, but not needed.
const KNOWN: &[&str] = &crate::schema::ingest_keys();

/// Why a JSON object is not a flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestError(pub String);

impl std::fmt::Display for IngestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads one flow object. Needs the two addresses; everything else is optional.
pub fn flow_from_json(o: &Map<String, Value>) -> Result<CollectedFlow, IngestError> {
    let text = |k: &str| o.get(k).and_then(Value::as_str);
    let num = |k: &str| -> u64 {
        match o.get(k) {
            Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
            _ => 0,
        }
    };
    // An IPv4 address as text, or as the number nDPI's TLV serializer carries it.
    let v4 = |k: &str| -> Option<String> {
        match o.get(k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| std::net::Ipv4Addr::from(n).to_string()),
            _ => None,
        }
    };
    let v6 = |k: &str| text(k).map(str::to_string);
    let (src, dst) = match (v4("IPV4_SRC_ADDR"), v4("IPV4_DST_ADDR")) {
        (Some(s), Some(d)) => (s, d),
        _ => match (v6("IPV6_SRC_ADDR"), v6("IPV6_DST_ADDR")) {
            (Some(s), Some(d)) => (s, d),
            _ => {
                return Err(IngestError(
                    "no IPV4_SRC_ADDR/IPV4_DST_ADDR or IPV6_SRC_ADDR/IPV6_DST_ADDR".into(),
                ))
            }
        },
    };
    let parse = |a: &str| -> Result<IpAddr, IngestError> {
        a.parse()
            .map_err(|_| IngestError(format!("'{a}' is not an IP address")))
    };
    let (src, dst) = (parse(&src)?, parse(&dst)?);
    let mut c = CollectedFlow {
        ip_version: if src.is_ipv4() { 4 } else { 6 },
        sport: num("L4_SRC_PORT") as u16,
        dport: num("L4_DST_PORT") as u16,
        proto: num("PROTOCOL") as u8,
        vlan: num("VLAN_ID") as u16,
        packets: num("IN_PKTS"),
        bytes: num("IN_BYTES"),
        rev_packets: num("OUT_PKTS"),
        rev_bytes: num("OUT_BYTES"),
        // Per side when the producer says (sonde and nProbe do), else both sides OR-ed.
        tcp_flags: if o.contains_key("CLIENT_TCP_FLAGS") {
            num("CLIENT_TCP_FLAGS")
        } else {
            num("TCP_FLAGS")
        } as u8,
        rev_tcp_flags: num("SERVER_TCP_FLAGS") as u8,
        icmp_type_code: num("ICMP_TYPE") as u16,
        tos: num("SRC_TOS") as u8,
        in_if: num("INPUT_SNMP") as u32,
        out_if: num("OUTPUT_SNMP") as u32,
        sampling: num("SAMPLING_INTERVAL").max(1) as u32,
        app_name: text("L7_PROTO_NAME")
            .filter(|n| *n != "Unknown")
            .map(str::to_string),
        ..CollectedFlow::default()
    };
    set_addr(&mut c.src, src);
    set_addr(&mut c.dst, dst);
    c.first_ms = match num("FLOW_START_MILLISECONDS") {
        0 => num("FIRST_SWITCHED") * 1000,
        ms => ms,
    };
    c.last_ms = match num("FLOW_END_MILLISECONDS") {
        0 => num("LAST_SWITCHED") * 1000,
        ms => ms,
    };
    // Where the flow was measured (a collected flow's exporter, or the probe that said so).
    c.exporter = text("EXPORTER_IPV4_ADDRESS")
        .or_else(|| text("EXPORTER_IPV6_ADDRESS"))
        .and_then(|a| a.parse::<IpAddr>().ok())
        .map(|ip| std::net::SocketAddr::new(ip, 0));
    c.end_reason = text("FLOW_END_REASON").and_then(end_reason);
    c.src_mac = text("IN_SRC_MAC").and_then(parse_mac);
    c.dst_mac = text("IN_DST_MAC").and_then(parse_mac);
    for (k, v) in o {
        if KNOWN.contains(&k.as_str()) {
            continue;
        }
        let v = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        c.extra_text.push((k.clone(), v));
    }
    Ok(c)
}

/// `FLOW_END_REASON`'s text as the number of [`sonde_flow::EndReason`].
pub fn end_reason(name: &str) -> Option<u8> {
    sonde_flow::EndReason::ALL
        .into_iter()
        .find(|r| r.name() == name)
        .map(|r| r as u8)
}

fn set_addr(out: &mut [u8; 16], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => *out = v6.octets(),
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// Reads a message of flows: a JSON array of flow objects, one object, or JSON lines.
/// Returns the flows and how many entries were not flows (each with its reason counted once).
pub fn flows_from_message(msg: &[u8]) -> (Vec<CollectedFlow>, Vec<IngestError>) {
    let mut flows = Vec::new();
    let mut errors = Vec::new();
    let mut take = |v: Value| match v {
        Value::Object(o) => match flow_from_json(&o) {
            Ok(f) => flows.push(f),
            Err(e) => errors.push(e),
        },
        other => errors.push(IngestError(format!(
            "expected a flow object, got {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                _ => "null or a boolean",
            }
        ))),
    };
    match serde_json::from_slice::<Value>(msg) {
        Ok(Value::Array(items)) => items.into_iter().for_each(&mut take),
        Ok(v) => take(v),
        Err(_) => {
            for line in msg.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let v = serde_json::from_slice::<Value>(line)
                    .unwrap_or_else(|e| Value::String(format!("not JSON: {e}")));
                take(v);
            }
        }
    }
    (flows, errors)
}

/// What one ntopng-format message held: its flows, the entries that were not flows, and how
/// many numeric keys sonde has no label for ([`crate::ntopng::to_label_keys`]).
#[derive(Debug, Default)]
pub struct NtopngFlows {
    pub flows: Vec<CollectedFlow>,
    pub errors: Vec<IngestError>,
    pub unknown_keys: u64,
}

/// Reads the JSON of an ntopng-format `flow` message (nProbe's, or sonde's with
/// `format=ntopng`): an array of flow objects or one object, with nProbe's numeric keys
/// (read through [`crate::schema::NPROBE_IDS`]) or labels, or both.
pub fn flows_from_ntopng_json(json: &[u8]) -> NtopngFlows {
    let mut out = NtopngFlows::default();
    let items = match serde_json::from_slice::<Value>(json) {
        Ok(Value::Array(items)) => items,
        Ok(v) => vec![v],
        Err(e) => {
            out.errors.push(IngestError(format!(
                "the flow payload is not JSON ({e}): a TLV or encrypted payload, or not nProbe's \
                 JSON"
            )));
            return out;
        }
    };
    for v in items {
        match v {
            Value::Object(o) => {
                let (o, unknown) = crate::ntopng::to_label_keys(o);
                out.unknown_keys += unknown as u64;
                match flow_from_json(&o) {
                    Ok(f) => out.flows.push(f),
                    Err(e) => out.errors.push(e),
                }
            }
            _ => out
                .errors
                .push(IngestError("expected a flow object in the array".into())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_as_numbers_are_read_as_nprobes_tlv_sends_them() {
        let o = serde_json::json!({"IPV4_SRC_ADDR": 167772169u32, "IPV4_DST_ADDR": "10.0.0.1",
                                   "PROTOCOL": 6});
        let f = flow_from_json(o.as_object().unwrap()).unwrap();
        assert_eq!(
            (&f.src[..4], &f.dst[..4]),
            (&[10, 0, 0, 9][..], &[10, 0, 0, 1][..])
        );
        let o = serde_json::json!({"IPV4_SRC_ADDR": 1u64 << 32, "IPV4_DST_ADDR": 1});
        assert!(
            flow_from_json(o.as_object().unwrap()).is_err(),
            "not a 32-bit number"
        );
    }

    #[test]
    fn reads_nprobe_keys_and_keeps_unknown_ones() {
        let msg = br#"[{"IPV4_SRC_ADDR":"10.0.0.9","IPV4_DST_ADDR":"10.0.0.1","L4_SRC_PORT":40000,
            "L4_DST_PORT":443,"PROTOCOL":6,"IN_PKTS":5,"IN_BYTES":500,"OUT_PKTS":3,"OUT_BYTES":300,
            "FLOW_START_MILLISECONDS":1700000000123,"FLOW_END_MILLISECONDS":1700000001456,
            "L7_PROTO_NAME":"TLS.Google","IN_SRC_MAC":"02:00:00:00:00:01","NPROBE_CUSTOM":"x<y",
            "EXPORTER_IPV4_ADDRESS":"192.0.2.5"},
            {"IPV6_SRC_ADDR":"2001:db8::1","IPV6_DST_ADDR":"2001:db8::2","PROTOCOL":17,
            "EXPORTER_IPV6_ADDRESS":"2001:db8::5"},
            {"IPV4_SRC_ADDR":"not-an-ip","IPV4_DST_ADDR":"10.0.0.1"}, 7]"#;
        let (flows, errors) = flows_from_message(msg);
        assert_eq!(flows.len(), 2);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let f = &flows[0];
        assert_eq!(
            (f.ip_version, &f.src[..4], f.sport, f.dport),
            (4, &[10, 0, 0, 9][..], 40000, 443)
        );
        assert_eq!(
            (f.packets, f.bytes, f.rev_packets, f.rev_bytes),
            (5, 500, 3, 300)
        );
        assert_eq!(
            (f.first_ms, f.last_ms),
            (1_700_000_000_123, 1_700_000_001_456)
        );
        assert_eq!(f.app_name.as_deref(), Some("TLS.Google"));
        assert_eq!(f.src_mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            f.extra_text,
            vec![("NPROBE_CUSTOM".to_string(), "x<y".to_string())]
        );
        assert_eq!(flows[1].ip_version, 6);
        assert_eq!(f.exporter, Some("192.0.2.5:0".parse().unwrap()));
        assert_eq!(flows[1].exporter, Some("[2001:db8::5]:0".parse().unwrap()));
    }

    #[test]
    fn reads_nprobe_numeric_keys() {
        // As nProbe sends flows without --json-labels (ids of ntopng's label map); 57591 is
        // L7_PROTO_NAME, 99999 an id sonde has no label for.
        let msg = br#"[{"8":"192.0.2.1","12":"192.0.2.2","7":53000,"11":53,"4":17,"1":"120",
            "2":2,"23":300,"24":3,"152":1700000000000,"153":1700000000500,"57591":"DNS",
            "99999":"x","SERVER_NAME":"example.org"},
            {"27":"2001:db8::1","28":"2001:db8::2","4":6,"22":1700000000,"21":1700000002},
            {"8":"192.0.2.1"}, "oops"]"#;
        let r = flows_from_ntopng_json(msg);
        assert_eq!((r.flows.len(), r.errors.len(), r.unknown_keys), (2, 2, 1));
        let f = &r.flows[0];
        assert_eq!(
            (&f.src[..4], &f.dst[..4], f.sport, f.dport, f.proto),
            (&[192, 0, 2, 1][..], &[192, 0, 2, 2][..], 53000, 53, 17)
        );
        assert_eq!(
            (f.bytes, f.packets, f.rev_bytes, f.rev_packets),
            (120, 2, 300, 3)
        );
        assert_eq!(
            (f.first_ms, f.last_ms),
            (1_700_000_000_000, 1_700_000_000_500)
        );
        assert_eq!(f.app_name.as_deref(), Some("DNS"));
        assert!(f
            .extra_text
            .contains(&("99999".to_string(), "x".to_string())));
        assert!(f
            .extra_text
            .contains(&("SERVER_NAME".to_string(), "example.org".to_string())));
        let g = &r.flows[1];
        assert_eq!(
            (g.ip_version, g.first_ms, g.last_ms),
            (6, 1_700_000_000_000, 1_700_000_002_000)
        );
        let r = flows_from_ntopng_json(b"\x01\x02 not json");
        assert!(r.errors[0].0.contains("not JSON"), "{:?}", r.errors);
    }

    #[test]
    fn json_lines_and_garbage() {
        let (flows, errors) = flows_from_message(
            b"{\"IPV4_SRC_ADDR\":\"1.1.1.1\",\"IPV4_DST_ADDR\":\"2.2.2.2\"}\n{oops\n",
        );
        assert_eq!((flows.len(), errors.len()), (1, 1));
        let (flows, errors) = flows_from_message(b"\xff\xfe garbage");
        assert_eq!((flows.len(), errors.len()), (0, 1));
    }
}
