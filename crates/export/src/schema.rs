//! The flow record's schema as data: every field of a flow record once, with its nProbe/ntopng
//! JSON key, its unit, the metadata it belongs to, its IPFIX element and where the history
//! keeps it. The flow's own fields are listed here; the metadata fields come from
//! [`sonde_dpi::meta::FIELDS`], whose rows also carry the code that reads and sets them, so
//! the JSON/CSV writers, the JSON ingest, the history codec and the REST answers walk that
//! table instead of naming fields. The JSON/CSV column order ([`crate::FLOW_COLUMNS`]) and the
//! keys the JSON ingest reads are generated from this table; the IPFIX templates and the JSON
//! writer are checked against it in tests. `sonde schema` prints it, `/api/v1/schema` serves it.

/// What kind of value a field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Address,
    Port,
    Count,
    /// A time: seconds or milliseconds since the Unix epoch (see the unit).
    Time,
    /// A duration or latency.
    Duration,
    /// A bit set (TCP flags).
    Flags,
    /// A small number with a fixed meaning (protocol, version, VLAN, type).
    Code,
    Mac,
    /// A name from a fixed list (end reason, tunnel, category, confidence).
    Name,
    /// Text from the wire (attacker data: escaped by every writer).
    WireText,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Address => "address",
            Kind::Port => "port",
            Kind::Count => "count",
            Kind::Time => "time",
            Kind::Duration => "duration",
            Kind::Flags => "flags",
            Kind::Code => "code",
            Kind::Mac => "mac",
            Kind::Name => "name",
            Kind::WireText => "wire text",
        }
    }
}

/// Where the flow history keeps a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// In the record's fixed part.
    Fixed,
    /// In the record's metadata, under this tag (`sonde_dpi::meta::Field::tag`).
    Meta(u8),
    /// Not kept (derived from other fields when read back).
    Derived,
}

/// An IPFIX information element: (element id, enterprise number; 29305 = RFC 5103 reverse).
pub type Element = (u16, u32);

#[derive(Clone, Copy)]
pub struct Field {
    /// The nProbe/ntopng JSON key (and CSV column).
    pub key: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    /// The group it belongs to: `flow`, `collector` (collected flows only), `geo` (with
    /// `--geoip-dir`), `l7` (the label),
    /// or the protocol whose metadata it is.
    pub group: &'static str,
    /// The IPFIX element sonde's exporter writes it as, if it does.
    pub ipfix: Option<Element>,
    pub stored: Stored,
    /// Read back by the JSON ingest (one sonde collecting another's `--zmq-export`).
    pub ingest: bool,
    pub what: &'static str,
}

const REV: u32 = 29305;

#[allow(clippy::too_many_arguments)] // one row of the table, in its column order
const fn f(
    key: &'static str,
    kind: Kind,
    unit: &'static str,
    group: &'static str,
    ipfix: Option<Element>,
    stored: Stored,
    ingest: bool,
    what: &'static str,
) -> Field {
    Field {
        key,
        kind,
        unit,
        group,
        ipfix,
        stored,
        ingest,
        what,
    }
}

use sonde_dpi::meta;
use Kind::*;
use Stored::*;

/// The flow's own fields (the metadata follow, from [`sonde_dpi::meta::FIELDS`]).
#[rustfmt::skip]
const FLOW: &[Field] = &[
    f("IPV4_SRC_ADDR", Address, "", "flow", Some((8, 0)), Fixed, true, "client address (IPv4 flows)"),
    f("IPV4_DST_ADDR", Address, "", "flow", Some((12, 0)), Fixed, true, "server address (IPv4 flows)"),
    f("IPV6_SRC_ADDR", Address, "", "flow", Some((27, 0)), Fixed, true, "client address (IPv6 flows)"),
    f("IPV6_DST_ADDR", Address, "", "flow", Some((28, 0)), Fixed, true, "server address (IPv6 flows)"),
    f("L4_SRC_PORT", Port, "", "flow", Some((7, 0)), Fixed, true, "client port"),
    f("L4_DST_PORT", Port, "", "flow", Some((11, 0)), Fixed, true, "server port"),
    f("PROTOCOL", Code, "", "flow", Some((4, 0)), Fixed, true, "IP protocol number"),
    f("IP_PROTOCOL_VERSION", Code, "", "flow", Some((60, 0)), Fixed, true, "4 or 6"),
    f("VLAN_ID", Code, "", "flow", Some((58, 0)), Fixed, true, "outer VLAN id (0: none)"),
    f("IN_PKTS", Count, "packets", "flow", Some((2, 0)), Fixed, true, "client to server packets"),
    f("IN_BYTES", Count, "bytes", "flow", Some((1, 0)), Fixed, true, "client to server IP bytes"),
    f("OUT_PKTS", Count, "packets", "flow", Some((2, REV)), Fixed, true, "server to client packets"),
    f("OUT_BYTES", Count, "bytes", "flow", Some((1, REV)), Fixed, true, "server to client IP bytes"),
    f("FIRST_SWITCHED", Time, "s", "flow", None, Derived, true, "first packet, seconds since the epoch"),
    f("LAST_SWITCHED", Time, "s", "flow", None, Derived, true, "last packet, seconds since the epoch"),
    f("FLOW_START_MILLISECONDS", Time, "ms", "flow", Some((152, 0)), Fixed, true, "first packet, milliseconds since the epoch"),
    f("FLOW_END_MILLISECONDS", Time, "ms", "flow", Some((153, 0)), Fixed, true, "last packet, milliseconds since the epoch"),
    f("TCP_FLAGS", Flags, "", "flow", None, Derived, true, "TCP flags of both directions, OR-ed"),
    f("CLIENT_TCP_FLAGS", Flags, "", "flow", Some((6, 0)), Fixed, true, "TCP flags the client sent"),
    f("SERVER_TCP_FLAGS", Flags, "", "flow", Some((6, REV)), Fixed, true, "TCP flags the server sent"),
    f("RETRANSMITTED_IN_PKTS", Count, "packets", "flow", None, Fixed, false, "client to server TCP retransmissions"),
    f("RETRANSMITTED_OUT_PKTS", Count, "packets", "flow", None, Fixed, false, "server to client TCP retransmissions"),
    f("OOORDER_IN_PKTS", Count, "packets", "flow", None, Fixed, false, "client to server TCP packets out of order"),
    f("OOORDER_OUT_PKTS", Count, "packets", "flow", None, Fixed, false, "server to client TCP packets out of order"),
    f("CLIENT_NW_LATENCY_MS", Duration, "ms", "flow", None, Fixed, false, "client side of the TCP handshake's round trip"),
    f("SERVER_NW_LATENCY_MS", Duration, "ms", "flow", None, Fixed, false, "server side of the TCP handshake's round trip"),
    f("SRC_TOS", Code, "", "flow", Some((5, 0)), Fixed, true, "IP type of service of the first packet"),
    f("ICMP_TYPE", Code, "", "flow", Some((32, 0)), Fixed, true, "ICMP type * 256 + code (IPFIX 139 for ICMPv6)"),
    f("IN_SRC_MAC", Mac, "", "flow", Some((56, 0)), Fixed, true, "client MAC address"),
    f("IN_DST_MAC", Mac, "", "flow", Some((80, 0)), Fixed, true, "server MAC address"),
    f("TUNNEL", Name, "", "flow", None, Fixed, false, "tunnel the flow was carried in (gtp, gre, vxlan, …)"),
    f("FRAGMENTS", Count, "packets", "flow", None, Fixed, false, "IP fragments"),
    f("FLOW_END_REASON", Name, "", "flow", Some((136, 0)), Fixed, true, "why the flow was exported"),
    f("FLOW_DIRECTION", Name, "", "flow", None, Derived, false, "in, out, internal or transit by --local-networks, client to server (only with it; not kept in the history)"),
    f("SRC_IP_COUNTRY", Name, "", "geo", None, Derived, false, "client's country (ISO 3166 code) by --geoip-dir, when known"),
    f("DST_IP_COUNTRY", Name, "", "geo", None, Derived, false, "server's country (ISO 3166 code) by --geoip-dir, when known"),
    f("SRC_IP_CITY", Name, "", "geo", None, Derived, false, "client's city by a City database in --geoip-dir, when known"),
    f("DST_IP_CITY", Name, "", "geo", None, Derived, false, "server's city by a City database in --geoip-dir, when known"),
    f("EXPORTER_IPV4_ADDRESS", Address, "", "collector", None, Fixed, true, "exporter of a collected flow, or the probe that measured it (IPv4)"),
    f("EXPORTER_IPV6_ADDRESS", Address, "", "collector", None, Fixed, true, "exporter of a collected flow, or the probe that measured it (IPv6)"),
    f("INPUT_SNMP", Code, "", "collector", None, Fixed, true, "input interface index (NetFlow v9 element 10; not in IPFIX export)"),
    f("OUTPUT_SNMP", Code, "", "collector", None, Fixed, true, "output interface index (NetFlow v9 element 14; not in IPFIX export)"),
    f("SAMPLING_INTERVAL", Count, "", "collector", None, Fixed, true, "1 in N sampling the counters were scaled by"),
    f("L7_PROTO", Name, "", "l7", Some((95, 0)), Fixed, true, "application as nDPI numbers (protocol.service)"),
    f("L7_PROTO_NAME", Name, "", "l7", Some((96, 0)), Derived, true, "application name (TLS.Google, …)"),
    f("L7_CATEGORY", Name, "", "l7", None, Fixed, true, "application category"),
    f("L7_CONFIDENCE", Name, "", "l7", None, Fixed, true, "how the label was found (dpi, port, dns cache, …)"),
];

/// The numeric keys of nProbe's JSON (what it sends to ntopng over ZMQ without
/// `--json-labels`): each key's NetFlow v9 / nProbe element id, as ntopng maps labels to ids
/// (`addMapping` in ntopng's `src/ParserInterface.cpp`, see docs/zmq-interop.md). Not the
/// IPFIX elements of [`Field::ipfix`]: NetFlow v9 numbers the server-to-client counters 23 and
/// 24 and the first/last switched times 22 and 21. Keys missing here have no id there and travel
/// by label in either key style.
#[rustfmt::skip]
pub const NPROBE_IDS: &[(&str, u32)] = &[
    ("IN_BYTES", 1), ("IN_PKTS", 2), ("PROTOCOL", 4), ("SRC_TOS", 5), ("TCP_FLAGS", 6),
    ("L4_SRC_PORT", 7), ("IPV4_SRC_ADDR", 8), ("INPUT_SNMP", 10), ("L4_DST_PORT", 11),
    ("IPV4_DST_ADDR", 12), ("OUTPUT_SNMP", 14), ("SRC_AS", 16), ("DST_AS", 17),
    ("LAST_SWITCHED", 21), ("FIRST_SWITCHED", 22),
    ("OUT_BYTES", 23), ("OUT_PKTS", 24), ("IPV6_SRC_ADDR", 27), ("IPV6_DST_ADDR", 28),
    ("ICMP_TYPE", 32), ("SAMPLING_INTERVAL", 34), ("IN_SRC_MAC", 56), ("VLAN_ID", 58),
    ("IP_PROTOCOL_VERSION", 60), ("IN_DST_MAC", 80), ("EXPORTER_IPV4_ADDRESS", 130),
    ("EXPORTER_IPV6_ADDRESS", 131), ("FLOW_START_MILLISECONDS", 152),
    ("FLOW_END_MILLISECONDS", 153), ("RETRANSMITTED_IN_PKTS", 57581),
    ("RETRANSMITTED_OUT_PKTS", 57582), ("OOORDER_IN_PKTS", 57583), ("OOORDER_OUT_PKTS", 57584),
    ("L7_PROTO", 57590), ("L7_PROTO_NAME", 57591), ("CLIENT_NW_LATENCY_MS", 57595),
    ("SERVER_NW_LATENCY_MS", 57596), ("HTTP_URL", 57652), ("HTTP_RET_CODE", 57653),
    ("HTTP_MIME", 57656), ("HTTP_HOST", 57659), ("DNS_QUERY", 57677), ("DNS_QUERY_TYPE", 57679),
    ("DNS_RET_CODE", 57680), ("DHCP_CLIENT_NAME", 57827), ("HTTP_METHOD", 57832),
    ("DHCP_MESSAGE_TYPE", 57901),
];

/// A key's nProbe element id ([`NPROBE_IDS`]).
pub fn nprobe_id(key: &str) -> Option<u32> {
    NPROBE_IDS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|&(_, id)| id)
}

/// The key of an nProbe element id ([`NPROBE_IDS`]).
pub fn key_of_nprobe_id(id: u32) -> Option<&'static str> {
    NPROBE_IDS.iter().find(|&&(_, i)| i == id).map(|&(k, _)| k)
}

impl Field {
    /// Whether the JSON writer writes the value as a JSON string (else as a number).
    pub fn json_string(&self) -> bool {
        matches!(self.kind, Address | Mac | Name | WireText)
    }
}

/// The number of fields.
pub const COUNT: usize = FLOW.len() + META.len();

const META: &[meta::Field] = meta::FIELDS;

/// Every field, in the JSON key and CSV column order: the flow's own, then the metadata.
pub const FIELDS: &[Field] = &all_fields();

const fn all_fields() -> [Field; COUNT] {
    let mut out = [FLOW[0]; COUNT];
    let mut i = 0;
    while i < FLOW.len() {
        out[i] = FLOW[i];
        i += 1;
    }
    let mut j = 0;
    while j < META.len() {
        let m = &META[j];
        let kind = match m.kind {
            meta::Kind::WireText | meta::Kind::WireList => WireText,
            meta::Kind::Code | meta::Kind::Flag => Code,
            meta::Kind::Duration => Duration,
        };
        // The AS numbers are the one metadata the NetFlow/IPFIX export writes.
        let ipfix = match m.tag {
            61 => Some((16, 0)),
            62 => Some((17, 0)),
            _ => None,
        };
        // Read back by the ingest into the record's metadata (`Field::set`).
        out[i + j] = f(
            m.key,
            kind,
            m.unit,
            m.group,
            ipfix,
            Meta(m.tag),
            true,
            m.what,
        );
        j += 1;
    }
    out
}

/// The keys, in order: [`crate::FLOW_COLUMNS`].
pub const fn keys() -> [&'static str; COUNT] {
    let mut out = [""; COUNT];
    let mut i = 0;
    while i < COUNT {
        out[i] = FIELDS[i].key;
        i += 1;
    }
    out
}

const fn ingest_count() -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FLOW.len() {
        if FLOW[i].ingest {
            n += 1;
        }
        i += 1;
    }
    n
}

/// How many keys the JSON ingest reads into a record's fixed fields.
pub const INGEST_COUNT: usize = ingest_count();

/// The keys the JSON ingest reads into a record's fixed fields. The others travel as text to
/// the flow engine, which reads the metadata keys among them (`sonde_dpi::meta::field`) and
/// keeps the rest as extra text.
pub const fn ingest_keys() -> [&'static str; INGEST_COUNT] {
    let mut out = [""; INGEST_COUNT];
    let (mut i, mut n) = (0, 0);
    while i < FLOW.len() {
        if FLOW[i].ingest {
            out[n] = FLOW[i].key;
            n += 1;
        }
        i += 1;
    }
    out
}

/// The field of a key.
pub fn field(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.key == key)
}

/// The table as Markdown (`sonde schema`).
pub fn markdown() -> String {
    let mut out = String::from(
        "| key | kind | unit | group | IPFIX element | history | ingest | meaning |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for f in FIELDS {
        let ipfix = match f.ipfix {
            Some((id, 0)) => id.to_string(),
            Some((id, pen)) => format!("{pen}/{id}"),
            None => "-".into(),
        };
        let stored = match f.stored {
            Fixed => "fixed".to_string(),
            Meta(t) => format!("meta tag {t}"),
            Derived => "derived".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            f.key,
            f.kind.name(),
            f.unit,
            f.group,
            ipfix,
            stored,
            if f.ingest { "yes" } else { "no" },
            f.what
        ));
    }
    out
}

/// The table as JSON (`/api/v1/schema`, `sonde schema --json`): one object per field.
pub fn json() -> serde_json::Value {
    let rows: Vec<serde_json::Value> = FIELDS
        .iter()
        .map(|f| {
            let (stored, tag) = match f.stored {
                Fixed => ("fixed", None),
                Meta(t) => ("meta", Some(t)),
                Derived => ("derived", None),
            };
            serde_json::json!({
                "key": f.key,
                "kind": f.kind.name(),
                "unit": f.unit,
                "group": f.group,
                "ipfix": f.ipfix.map(|(id, pen)| serde_json::json!({"id": id, "enterprise": pen})),
                "stored": stored,
                "tag": tag,
                "ingest": f.ingest,
                "what": f.what,
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique() {
        for (i, a) in FIELDS.iter().enumerate() {
            assert!(FIELDS[i + 1..].iter().all(|b| b.key != a.key), "{}", a.key);
        }
    }

    #[test]
    fn nprobe_ids_name_schema_keys_once() {
        for (i, (k, id)) in NPROBE_IDS.iter().enumerate() {
            assert!(field(k).is_some(), "{k} is not a schema key");
            assert!(
                NPROBE_IDS[i + 1..]
                    .iter()
                    .all(|(k2, id2)| k2 != k && id2 != id),
                "{k}"
            );
            assert_eq!(key_of_nprobe_id(*id), Some(*k));
        }
        // The NetFlow v9 numbers, not IPFIX's reverse elements.
        assert_eq!(
            (nprobe_id("OUT_BYTES"), nprobe_id("OUT_PKTS")),
            (Some(23), Some(24))
        );
        assert_eq!(nprobe_id("SERVER_NAME"), None);
    }

    #[test]
    fn the_ipfix_templates_carry_exactly_the_elements_the_schema_names() {
        let mut want: Vec<Element> = FIELDS.iter().filter_map(|f| f.ipfix).collect();
        // ICMPv6 rides in ICMP_TYPE's field; the templates use its own element.
        want.push((139, 0));
        want.sort_unstable();
        want.dedup();
        let mut got = sonde_flowproto::encode::ipfix_elements();
        got.sort_unstable();
        assert_eq!(got, want);
    }
}
