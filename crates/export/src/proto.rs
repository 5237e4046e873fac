//! Flow records as protobuf: the `sonde.flow.v1.Flow` message of
//! `crates/export/proto/sonde_flow_v1.proto`, one flow per message (Kafka's
//! `?format=protobuf`, the compact binary form GoFlow2 and Akvorado use beside JSON). The
//! struct below is that file's message for prost; a system test decodes sonde's messages with
//! `protoc --decode` against the file, so the two cannot drift apart unseen.

use sonde_flow::FlowRecord;
use sonde_flowproto::CollectedFlow;
use std::collections::BTreeMap;

/// The version this build writes (`schema_version`).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct FlowMessage {
    #[prost(uint32, tag = "1")]
    pub schema_version: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub src_addr: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub dst_addr: Vec<u8>,
    #[prost(uint32, tag = "4")]
    pub src_port: u32,
    #[prost(uint32, tag = "5")]
    pub dst_port: u32,
    #[prost(uint32, tag = "6")]
    pub protocol: u32,
    #[prost(uint32, tag = "7")]
    pub vlan: u32,
    #[prost(uint64, tag = "8")]
    pub in_packets: u64,
    #[prost(uint64, tag = "9")]
    pub in_bytes: u64,
    #[prost(uint64, tag = "10")]
    pub out_packets: u64,
    #[prost(uint64, tag = "11")]
    pub out_bytes: u64,
    #[prost(uint64, tag = "12")]
    pub first_ms: u64,
    #[prost(uint64, tag = "13")]
    pub last_ms: u64,
    #[prost(uint32, tag = "14")]
    pub client_tcp_flags: u32,
    #[prost(uint32, tag = "15")]
    pub server_tcp_flags: u32,
    #[prost(uint32, tag = "16")]
    pub tos: u32,
    #[prost(uint32, tag = "17")]
    pub icmp_type: u32,
    #[prost(string, tag = "18")]
    pub end_reason: String,
    #[prost(string, tag = "19")]
    pub l7_proto: String,
    #[prost(string, tag = "20")]
    pub l7_proto_name: String,
    #[prost(string, tag = "21")]
    pub l7_category: String,
    #[prost(bytes = "vec", tag = "22")]
    pub exporter_addr: Vec<u8>,
    #[prost(uint32, tag = "23")]
    pub in_if: u32,
    #[prost(uint32, tag = "24")]
    pub out_if: u32,
    #[prost(uint32, tag = "25")]
    pub sampling: u32,
    #[prost(bytes = "vec", tag = "26")]
    pub src_mac: Vec<u8>,
    #[prost(bytes = "vec", tag = "27")]
    pub dst_mac: Vec<u8>,
    #[prost(uint32, tag = "28")]
    pub retransmitted_in_packets: u32,
    #[prost(uint32, tag = "29")]
    pub retransmitted_out_packets: u32,
    #[prost(uint32, tag = "30")]
    pub src_as: u32,
    #[prost(uint32, tag = "31")]
    pub dst_as: u32,
    #[prost(string, tag = "32")]
    pub src_country: String,
    #[prost(string, tag = "33")]
    pub dst_country: String,
    #[prost(btree_map = "string, string", tag = "40")]
    pub meta: BTreeMap<String, String>,
}

fn addr_bytes(addr: &[u8; 16], ip_version: u8) -> Vec<u8> {
    if ip_version == 4 {
        addr[..4].to_vec()
    } else {
        addr.to_vec()
    }
}

/// The message of one flow record, seen from its client (as the JSON form is), with the
/// places of its ends from `geo` (`--geoip-dir`).
pub fn message(r: &FlowRecord, geo: Option<&sonde_geo::GeoDb>) -> FlowMessage {
    let places = crate::places(r, geo);
    let country = |c: Option<sonde_geo::Country>| c.map(|c| c.to_string()).unwrap_or_default();
    let f = &r.flow;
    let (c, s) = (f.client_dir(), 1 - f.client_dir());
    let e = f.ends();
    let (ca, sa, cp, sp) = (e.client_addr, e.server_addr, e.client_port, e.server_port);
    let (cm, sm) = f.macs();
    let mut meta = BTreeMap::new();
    if let Some(m) = r.meta.as_deref() {
        // The record's own fields win over a producer's extra pair of the same name.
        for (k, v) in sonde_dpi::meta::text_pairs(m) {
            meta.entry(k.to_string()).or_insert(v);
        }
    }
    FlowMessage {
        schema_version: SCHEMA_VERSION,
        src_addr: addr_bytes(ca, f.key.ip_version),
        dst_addr: addr_bytes(sa, f.key.ip_version),
        src_port: cp.into(),
        dst_port: sp.into(),
        protocol: f.key.proto.into(),
        vlan: f.key.vlan.into(),
        in_packets: f.pkts[c],
        in_bytes: f.bytes[c],
        out_packets: f.pkts[s],
        out_bytes: f.bytes[s],
        first_ms: f.first_ns / 1_000_000,
        last_ms: f.last_ns / 1_000_000,
        client_tcp_flags: f.tcp_flags[c].into(),
        server_tcp_flags: f.tcp_flags[s].into(),
        tos: f.tos.into(),
        icmp_type: f.icmp_type_code.into(),
        end_reason: r.reason.name().to_string(),
        l7_proto: if f.dpi_done {
            f.l7.number()
        } else {
            String::new()
        },
        l7_proto_name: if f.dpi_done {
            f.l7.name()
        } else {
            String::new()
        },
        l7_category: if f.dpi_done {
            f.l7.category.name().to_string()
        } else {
            String::new()
        },
        exporter_addr: match r.exporter {
            Some((std::net::SocketAddr::V4(a), _)) => a.ip().octets().to_vec(),
            Some((std::net::SocketAddr::V6(a), _)) => a.ip().octets().to_vec(),
            None => Vec::new(),
        },
        in_if: r.ext.in_if,
        out_if: r.ext.out_if,
        sampling: f.sampling,
        src_mac: cm.to_vec(),
        dst_mac: sm.to_vec(),
        retransmitted_in_packets: r.ext.retransmits[c],
        retransmitted_out_packets: r.ext.retransmits[s],
        src_as: places.src_as,
        dst_as: places.dst_as,
        src_country: country(places.src_country),
        dst_country: country(places.dst_country),
        meta,
    }
}

/// Appends field `exporter_addr` to an encoded message: a later field wins in protobuf, so this
/// names the probe of a record that has no exporter of its own.
pub fn append_exporter(ip: std::net::IpAddr, out: &mut Vec<u8>) {
    use prost::Message;
    let m = FlowMessage {
        exporter_addr: match ip {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        },
        ..FlowMessage::default()
    };
    m.encode(out).expect("a Vec grows");
}

/// Appends the encoded message of `r` to `out`.
pub fn encode(r: &FlowRecord, geo: Option<&sonde_geo::GeoDb>, out: &mut Vec<u8>) {
    // Vec<u8> grows as needed: encoding cannot fail.
    let _ = prost::Message::encode(&message(r, geo), out);
}

/// Appends one encoded Flow to a `FlowBatch` being built (field 1, length-delimited).
pub fn push_to_batch(flow: &[u8], batch: &mut Vec<u8>) {
    batch.push(0x0A);
    prost::encoding::encode_varint(flow.len() as u64, batch);
    batch.extend_from_slice(flow);
}

/// Reads a Kafka message of the protobuf form: one `Flow`, or a `FlowBatch` of them (its
/// first byte is 0x0A). Returns the flows and how many items were not flows.
pub fn decode_message(bytes: &[u8]) -> (Vec<CollectedFlow>, usize) {
    if bytes.first() != Some(&0x0A) {
        return match decode(bytes) {
            Ok(f) => (vec![f], 0),
            Err(_) => (Vec::new(), 1),
        };
    }
    let (mut flows, mut errors) = (Vec::new(), 0);
    let mut rest = bytes;
    while let Some((&tag, after)) = rest.split_first() {
        let mut buf = after;
        let len = match prost::encoding::decode_varint(&mut buf) {
            Ok(n) if tag == 0x0A && n as usize <= buf.len() => n as usize,
            // A broken frame: the rest cannot be cut into flows.
            _ => return (flows, errors + 1),
        };
        match decode(&buf[..len]) {
            Ok(f) => flows.push(f),
            Err(_) => errors += 1,
        }
        rest = &buf[len..];
    }
    (flows, errors)
}

/// Why bytes are not a flow message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads one message as a collected flow (the other direction of [`encode`]): metadata travel
/// as text pairs, which the flow engine turns back into typed fields.
pub fn decode(bytes: &[u8]) -> Result<CollectedFlow, ProtoError> {
    let m: FlowMessage = prost::Message::decode(bytes)
        .map_err(|e| ProtoError(format!("not a sonde.flow.v1.Flow message: {e}")))?;
    let ip_version = match (m.src_addr.len(), m.dst_addr.len()) {
        (4, 4) => 4,
        (16, 16) => 6,
        (a, b) => {
            return Err(ProtoError(format!(
                "addresses of {a} and {b} bytes: both must be 4 (IPv4) or 16 (IPv6)"
            )))
        }
    };
    let mut c = CollectedFlow {
        ip_version,
        sport: m.src_port as u16,
        dport: m.dst_port as u16,
        proto: m.protocol as u8,
        vlan: m.vlan as u16,
        packets: m.in_packets,
        bytes: m.in_bytes,
        rev_packets: m.out_packets,
        rev_bytes: m.out_bytes,
        first_ms: m.first_ms,
        last_ms: m.last_ms,
        tcp_flags: m.client_tcp_flags as u8,
        rev_tcp_flags: m.server_tcp_flags as u8,
        icmp_type_code: m.icmp_type as u16,
        tos: m.tos as u8,
        in_if: m.in_if,
        out_if: m.out_if,
        sampling: m.sampling.max(1),
        app_name: Some(m.l7_proto_name).filter(|n| !n.is_empty() && n != "Unknown"),
        src_mac: <[u8; 6]>::try_from(m.src_mac.as_slice()).ok(),
        dst_mac: <[u8; 6]>::try_from(m.dst_mac.as_slice()).ok(),
        extra_text: m.meta.into_iter().collect(),
        end_reason: crate::ingest::end_reason(&m.end_reason),
        ..CollectedFlow::default()
    };
    // AS numbers travel as fields; a producer's metadata pair of the same name wins.
    for (key, n) in [("SRC_AS", m.src_as), ("DST_AS", m.dst_as)] {
        if n != 0 && !c.extra_text.iter().any(|(k, _)| k == key) {
            c.extra_text.push((key.to_string(), n.to_string()));
        }
    }
    c.src[..m.src_addr.len()].copy_from_slice(&m.src_addr);
    c.dst[..m.dst_addr.len()].copy_from_slice(&m.dst_addr);
    // Where the flow was measured (a collected flow's exporter, or the probe that said so).
    c.exporter = match m.exporter_addr.len() {
        4 => <[u8; 4]>::try_from(m.exporter_addr.as_slice())
            .ok()
            .map(|b| std::net::SocketAddr::from((b, 0))),
        16 => <[u8; 16]>::try_from(m.exporter_addr.as_slice())
            .ok()
            .map(|b| std::net::SocketAddr::from((b, 0))),
        _ => None,
    };
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_dpi::meta::Value;
    use sonde_flow::{EndReason, Flow, FlowKey};

    fn record() -> FlowRecord {
        let mut key = FlowKey {
            proto: 6,
            ip_version: 4,
            port_a: 443,
            port_b: 51234,
            ..FlowKey::default()
        };
        key.addr_a[..4].copy_from_slice(&[10, 0, 0, 1]);
        key.addr_b[..4].copy_from_slice(&[192, 168, 1, 20]);
        let mut flow = Flow {
            key,
            first_ns: 1_700_000_000_123_456_789,
            last_ns: 1_700_000_042_987_654_321,
            pkts: [12, 9],
            bytes: [9000, 1200],
            tcp_flags: [0x1b, 0x12],
            client_is_a: false,
            ..Flow::default()
        };
        flow.mac_b = [2, 0, 0, 0, 0, 7];
        let mut m = sonde_dpi::Meta::default();
        (sonde_dpi::meta::field("TLS_SERVER_NAME").unwrap().set)(
            &mut m,
            Value::Text("example.org"),
        );
        (sonde_dpi::meta::field("TLS_VERSION").unwrap().set)(&mut m, Value::Number(0x0304));
        FlowRecord {
            flow,
            ext: Default::default(),
            reason: EndReason::IdleTimeout,
            meta: Some(Box::new(m)),
            exporter: None,
        }
    }

    #[test]
    fn a_batch_reads_back_as_its_flows_and_a_broken_one_is_counted() {
        let (mut one, mut batch) = (Vec::new(), Vec::new());
        encode(&record(), None, &mut one);
        assert_eq!(one[0], 0x08, "a Flow starts with its schema version");
        assert_eq!(decode_message(&one).0.len(), 1);
        for _ in 0..3 {
            push_to_batch(&one, &mut batch);
        }
        push_to_batch(b"\x12\x01", &mut batch); // addresses of 1 byte: not a flow
        let (flows, errors) = decode_message(&batch);
        assert_eq!((flows.len(), errors), (3, 1));
        assert_eq!(flows[2].bytes, 1200);
        batch.truncate(batch.len() - 3);
        batch.push(0x0A);
        batch.push(0x7f); // a frame longer than what is left
        assert_eq!(decode_message(&batch).1, 1);
    }

    #[test]
    fn a_probe_address_appended_reads_back_as_the_exporter() {
        let mut bytes = Vec::new();
        encode(&record(), None, &mut bytes);
        assert_eq!(decode(&bytes).unwrap().exporter, None);
        append_exporter("10.0.0.9".parse().unwrap(), &mut bytes);
        let c = decode(&bytes).unwrap();
        assert_eq!(c.exporter, Some("10.0.0.9:0".parse().unwrap()));
        assert_eq!(c.bytes, 1200, "the rest of the message is untouched");
        let mut v6 = Vec::new();
        encode(&record(), None, &mut v6);
        append_exporter("2001:db8::9".parse().unwrap(), &mut v6);
        assert_eq!(
            decode(&v6).unwrap().exporter,
            Some("[2001:db8::9]:0".parse().unwrap())
        );
    }

    #[test]
    fn a_record_reads_back_from_its_client() {
        let mut bytes = Vec::new();
        encode(&record(), None, &mut bytes);
        let c = decode(&bytes).unwrap();
        assert_eq!(c.ip_version, 4);
        assert_eq!((&c.src[..4], c.sport), (&[192, 168, 1, 20][..], 51234));
        assert_eq!((&c.dst[..4], c.dport), (&[10, 0, 0, 1][..], 443));
        assert_eq!(
            (c.packets, c.bytes, c.rev_packets, c.rev_bytes),
            (9, 1200, 12, 9000)
        );
        assert_eq!((c.tcp_flags, c.rev_tcp_flags), (0x12, 0x1b));
        assert_eq!(
            (c.first_ms, c.last_ms),
            (1_700_000_000_123, 1_700_000_042_987)
        );
        assert_eq!(c.src_mac, Some([2, 0, 0, 0, 0, 7]));
        assert_eq!(
            c.extra_text,
            vec![
                ("TLS_SERVER_NAME".to_string(), "example.org".to_string()),
                ("TLS_VERSION".to_string(), "772".to_string())
            ]
        );
    }

    #[test]
    fn bad_bytes_are_an_error_not_a_panic() {
        assert!(decode(&[0xff, 0xff, 0xff]).is_err());
        // A valid message with a 3-byte address.
        let m = FlowMessage {
            src_addr: vec![1, 2, 3],
            dst_addr: vec![1, 2, 3, 4],
            ..FlowMessage::default()
        };
        let e = decode(&prost::Message::encode_to_vec(&m)).unwrap_err();
        assert!(e.0.contains("3 and 4 bytes"), "{e}");
    }
}
