//! ntopng's ZMQ framing, as nProbe speaks it to ntopng: every message has two parts, a small
//! binary header (the topic, a version, a message id…) and the payload (JSON flow objects,
//! optionally zlib-compressed). The layouts are described, with their sources, in
//! `docs/zmq-interop.md`; this module encodes and decodes them and converts nProbe's numeric
//! JSON keys. Nothing here touches a socket: `sonde-probe`'s ZMQ sink and collector do.

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use serde_json::{Map, Value};
use std::io::{Read, Write};

/// The topic field's size in the 24-, 28- and 36-byte headers (NUL-padded text).
pub const TOPIC_LEN: usize = 16;
/// `version` of a header whose msg_id is in host order (ntopng: ZMQ_COMPATIBILITY_MSG_VERSION).
pub const VERSION_COMPAT: u8 = 1;
/// `version` of a JSON payload with a network-order msg_id (ntopng: ZMQ_MSG_VERSION).
pub const VERSION_JSON: u8 = 2;
/// `version` of a TLV payload (nDPI serializer; ntopng: ZMQ_MSG_VERSION_TLV).
pub const VERSION_TLV: u8 = 3;
/// `version` of the 36-byte header, whose flags say TLV or compressed.
pub const VERSION_4: u8 = 4;
/// Flag of the 36-byte header: the payload is TLV.
pub const V4_FLAG_TLV: u8 = 2;
/// Flag of the 36-byte header: the payload is zlib-compressed.
pub const V4_FLAG_COMPRESSED: u8 = 4;

/// A header layout, told apart by its length (ntopng does the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// 40 bytes: topic[32], version u32, size u32 (both host order); no message id.
    V0,
    /// 24 bytes: topic[16], version u8, source_id u8, size u16, msg_id u32 (network order).
    V1,
    /// 28 bytes: topic[16], version u8, pad, size u16, msg_id u32 (network order), source_id u32.
    V2,
    /// 36 bytes: topic[16], version u8 (4), flags u8, pad[2], uncompressed size u32, compressed
    /// size u32 (host order), msg_id u32, source_id u32 (network order).
    V4,
}

impl Layout {
    pub fn size(self) -> usize {
        match self {
            Layout::V0 => 40,
            Layout::V1 => 24,
            Layout::V2 => 28,
            Layout::V4 => 36,
        }
    }

    /// The layout `--zmq-export …&header=` names: `v1` (24 bytes) or `v4` (36 bytes).
    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "v1" | "1" => Some(Layout::V1),
            "v4" | "4" => Some(Layout::V4),
            _ => None,
        }
    }
}

/// A decoded header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub layout: Layout,
    /// The topic up to its first NUL: `flow`, `event`, `counter`, `template`, `option`,
    /// `hello`, … (ntopng looks at its first letter only).
    pub topic: String,
    pub version: u32,
    pub flags: u8,
    /// Which probe sent it (0 when the layout has none).
    pub source_id: u32,
    /// The sender's message counter (0: none; ntopng counts the gaps as drops).
    pub msg_id: u32,
}

impl Header {
    /// Whether the topic is `flow` (ntopng: its first letter is `f`).
    pub fn is_flow(&self) -> bool {
        self.topic.starts_with('f')
    }

    /// Whether the payload is TLV (nDPI's serializer) rather than JSON.
    pub fn is_tlv(&self) -> bool {
        match self.layout {
            Layout::V4 => self.flags & V4_FLAG_TLV != 0,
            _ => self.version == VERSION_TLV as u32,
        }
    }
}

fn put_topic(out: &mut [u8], topic: &str) {
    let t = topic.as_bytes();
    let n = t.len().min(TOPIC_LEN - 1); // always NUL-terminated
    out[..n].copy_from_slice(&t[..n]);
}

/// What a payload is, for its header: JSON or TLV (nDPI's serializer), compressed or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadKind {
    pub tlv: bool,
    pub compressed: bool,
}

/// Encodes a header for a payload of `uncompressed` bytes sent as `wire` bytes.
pub fn encode_header(
    layout: Layout,
    topic: &str,
    msg_id: u32,
    source_id: u32,
    kind: PayloadKind,
    uncompressed: usize,
    wire: usize,
) -> Vec<u8> {
    let version = if kind.tlv { VERSION_TLV } else { VERSION_JSON };
    let mut h = vec![0u8; layout.size()];
    match layout {
        Layout::V0 => {
            let t = topic.as_bytes();
            let n = t.len().min(31);
            h[..n].copy_from_slice(&t[..n]);
            h[32..36].copy_from_slice(&(version as u32).to_le_bytes());
            h[36..40].copy_from_slice(&(wire.min(u32::MAX as usize) as u32).to_le_bytes());
        }
        Layout::V1 => {
            put_topic(&mut h, topic);
            h[16] = version;
            h[17] = source_id as u8;
            h[18..20].copy_from_slice(&(wire.min(u16::MAX as usize) as u16).to_le_bytes());
            h[20..24].copy_from_slice(&msg_id.to_be_bytes());
        }
        Layout::V2 => {
            put_topic(&mut h, topic);
            h[16] = version;
            h[18..20].copy_from_slice(&(wire.min(u16::MAX as usize) as u16).to_le_bytes());
            h[20..24].copy_from_slice(&msg_id.to_be_bytes());
            h[24..28].copy_from_slice(&source_id.to_le_bytes());
        }
        Layout::V4 => {
            put_topic(&mut h, topic);
            h[16] = VERSION_4;
            h[17] = if kind.compressed {
                V4_FLAG_COMPRESSED
            } else {
                0
            } | if kind.tlv { V4_FLAG_TLV } else { 0 };
            let size = |n: usize| (n.min(u32::MAX as usize) as u32).to_le_bytes();
            h[20..24].copy_from_slice(&size(uncompressed));
            h[24..28].copy_from_slice(&size(wire));
            h[28..32].copy_from_slice(&msg_id.to_be_bytes());
            h[32..36].copy_from_slice(&source_id.to_be_bytes());
        }
    }
    h
}

fn topic_of(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let a: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Decodes a header part. Errors say what is wrong and what would fix it.
pub fn decode_header(b: &[u8]) -> Result<Header, String> {
    let layout = match b.len() {
        40 => Layout::V0,
        24 => Layout::V1,
        28 => Layout::V2,
        36 => Layout::V4,
        n => {
            return Err(format!(
                "a header part of {n} bytes is none of ntopng's layouts (24, 28, 36 or 40 \
                 bytes): the producer does not speak ntopng's framing (drop format=ntopng to \
                 read sonde's plain JSON messages)"
            ))
        }
    };
    let topic_len = if layout == Layout::V0 { 32 } else { TOPIC_LEN };
    let mut h = Header {
        layout,
        topic: topic_of(&b[..topic_len]),
        version: 0,
        flags: 0,
        source_id: 0,
        msg_id: 0,
    };
    match layout {
        Layout::V0 => h.version = u32_at(b, 32, false),
        Layout::V1 => {
            h.version = b[16] as u32;
            h.source_id = b[17] as u32;
            // Version 1 carries the message id in the sender's (host) order.
            h.msg_id = u32_at(b, 20, h.version != VERSION_COMPAT as u32);
        }
        Layout::V2 => {
            h.version = b[16] as u32;
            h.msg_id = u32_at(b, 20, h.version != VERSION_COMPAT as u32);
            // ntopng reads this one without a byte-order conversion.
            h.source_id = u32_at(b, 24, false);
        }
        Layout::V4 => {
            h.version = b[16] as u32;
            h.flags = b[17];
            h.msg_id = u32_at(b, 28, true);
            h.source_id = u32_at(b, 32, true);
        }
    }
    let known = match layout {
        Layout::V4 => h.version == VERSION_4 as u32,
        _ => (VERSION_COMPAT as u32..=VERSION_TLV as u32).contains(&h.version),
    };
    if !known {
        return Err(format!(
            "header version {} is not one sonde knows for a {}-byte header (1, 2 or 3; 4 in the \
             36-byte one): is the producer newer than this sonde?",
            h.version,
            b.len()
        ));
    }
    Ok(h)
}

/// Compresses a JSON payload the way ntopng expects for `layout`: the 24/28/40-byte layouts
/// mark a compressed payload by a first byte 0 before the zlib stream; the 36-byte one by its
/// flag alone.
pub fn compress(json: &[u8], layout: Layout) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() / 4 + 16);
    if layout != Layout::V4 {
        out.push(0);
    }
    let mut z = ZlibEncoder::new(out, flate2::Compression::default());
    z.write_all(json).expect("writing to memory");
    z.finish().expect("writing to memory")
}

/// Flow records one TLV payload may hold.
pub const MAX_TLV_RECORDS: usize = 100_000;

/// The JSON of a payload part: decompressed when the header or the payload says it is
/// compressed (up to `max` bytes: a larger result is an error, not an allocation); a TLV
/// payload (nDPI's serializer, [`crate::tlv`]) read into the JSON array its records make.
pub fn payload_json<'a>(
    h: &Header,
    payload: &'a [u8],
    max: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    // ntopng reads a version 3 (TLV) payload of the short headers as it comes: no zlib
    // marker there; the 36-byte header's flags say both.
    let zlib = match h.layout {
        Layout::V4 => h.flags & V4_FLAG_COMPRESSED != 0,
        _ => !h.is_tlv() && payload.first() == Some(&0),
    };
    let bytes = unzip(payload, zlib, max)?;
    if !h.is_tlv() {
        return Ok(bytes);
    }
    let records = crate::tlv::decode(&bytes, MAX_TLV_RECORDS)
        .map_err(|e| format!("the TLV payload (nDPI's serializer) is damaged: {e}"))?;
    let json = serde_json::to_vec(&records).map_err(|e| e.to_string())?;
    if json.len() > max {
        return Err(format!(
            "the TLV payload makes more than {max} bytes of flows, the collector's limit: have \
             the producer send smaller batches"
        ));
    }
    Ok(std::borrow::Cow::Owned(json))
}

/// `payload`, or the zlib stream in it inflated (up to `max` bytes).
fn unzip(payload: &[u8], zlib: bool, max: usize) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    if !zlib {
        return Ok(std::borrow::Cow::Borrowed(payload));
    }
    // A leading 0 marker is skipped in either layout (a zlib stream never starts with 0).
    let stream = match payload.first() {
        Some(0) => &payload[1..],
        _ => payload,
    };
    let mut out = Vec::new();
    ZlibDecoder::new(stream)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            format!(
                "the payload is marked compressed but is not a zlib stream ({e}): the \
                 producer's compression is not ntopng's zlib"
            )
        })?;
    if out.len() > max {
        return Err(format!(
            "the payload decompresses to more than {max} bytes, the collector's limit: have \
             the producer send smaller batches"
        ));
    }
    Ok(std::borrow::Cow::Owned(out))
}

/// A flow object with nProbe's numeric keys where [`crate::schema::NPROBE_IDS`] has one (the
/// other keys keep their labels).
pub fn to_numeric_keys(o: Map<String, Value>) -> Map<String, Value> {
    o.into_iter()
        .map(|(k, v)| match crate::schema::nprobe_id(&k) {
            Some(id) => (id.to_string(), v),
            None => (k, v),
        })
        .collect()
}

/// A flow object with labels for nProbe's numeric keys, and how many numeric keys sonde has
/// no label for (kept, under their number).
pub fn to_label_keys(o: Map<String, Value>) -> (Map<String, Value>, usize) {
    let mut unknown = 0;
    let mut out = Map::with_capacity(o.len());
    for (k, v) in o {
        if !k.is_empty() && k.bytes().all(|c| c.is_ascii_digit()) {
            match k.parse().ok().and_then(crate::schema::key_of_nprobe_id) {
                Some(label) => {
                    out.entry(label.to_string()).or_insert(v);
                }
                None => {
                    unknown += 1;
                    out.insert(k, v);
                }
            }
        } else {
            out.insert(k, v);
        }
    }
    (out, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The 24-byte header, written out by hand from the layout in docs/zmq-interop.md.
    const V1_FLOW: [u8; 24] = [
        b'f', b'l', b'o', b'w', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // topic[16]
        2, // version: JSON
        7, // source_id
        0x34, 0x12, // size, sender's order (little-endian here)
        0x00, 0x00, 0x01, 0x02, // msg_id 258, network order
    ];

    /// The 36-byte header, by hand: compressed, 1000 bytes of JSON sent as 300.
    const V4_FLOW: [u8; 36] = [
        b'f', b'l', b'o', b'w', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // topic[16]
        4, // version
        4, // flags: compressed
        0, 0, // pad
        0xe8, 0x03, 0, 0, // uncompressed size 1000, little-endian
        0x2c, 0x01, 0, 0, // compressed size 300, little-endian
        0, 0, 0, 9, // msg_id 9, network order
        0, 0, 0, 3, // source_id 3, network order
    ];

    #[test]
    fn encodes_the_documented_bytes() {
        assert_eq!(
            encode_header(
                Layout::V1,
                "flow",
                258,
                7,
                PayloadKind::default(),
                0x1234,
                0x1234
            ),
            V1_FLOW
        );
        assert_eq!(
            encode_header(
                Layout::V4,
                "flow",
                9,
                3,
                PayloadKind {
                    tlv: false,
                    compressed: true
                },
                1000,
                300
            ),
            V4_FLOW
        );
        // The size field of the 24-byte header saturates (ntopng does not read it).
        let h = encode_header(
            Layout::V1,
            "flow",
            1,
            0,
            PayloadKind::default(),
            100_000,
            100_000,
        );
        assert_eq!(&h[18..20], &[0xff, 0xff]);
        // TLV: version 3 in the short layouts, the TLV flag in the 36-byte one; each reads back.
        let tlv = PayloadKind {
            tlv: true,
            compressed: false,
        };
        for layout in [Layout::V0, Layout::V1, Layout::V2, Layout::V4] {
            let h = decode_header(&encode_header(layout, "flow", 5, 1, tlv, 10, 10)).unwrap();
            assert!(h.is_tlv() && h.is_flow(), "{layout:?}");
        }
        // A topic is cut to 15 bytes and stays NUL-terminated.
        let h = encode_header(
            Layout::V1,
            "a-very-long-topic-name",
            1,
            0,
            PayloadKind::default(),
            0,
            0,
        );
        assert_eq!(&h[..16], b"a-very-long-top\0");
    }

    #[test]
    fn tlv_payloads_read_as_the_json_of_their_records() {
        let mut tlv = crate::tlv::HEADER.to_vec();
        for o in [
            json!({"8": 167772161u32, "1": 1200, "57591": "TLS"}),
            json!({"8": 1}),
        ] {
            crate::tlv::encode_record(o.as_object().unwrap(), &mut tlv);
        }
        let want = json!([{"1": 1200, "57591": "TLS", "8": 167772161u32}, {"8": 1}]);
        let kind = PayloadKind {
            tlv: true,
            compressed: false,
        };
        let h = decode_header(&encode_header(Layout::V1, "flow", 1, 0, kind, 0, 0)).unwrap();
        let got = payload_json(&h, &tlv, 1 << 20).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&got).unwrap(), want);
        // The 36-byte header: TLV and compressed.
        let kind = PayloadKind {
            tlv: true,
            compressed: true,
        };
        let h = decode_header(&encode_header(Layout::V4, "flow", 1, 0, kind, 0, 0)).unwrap();
        let zipped = compress(&tlv, Layout::V4);
        let got = payload_json(&h, &zipped, 1 << 20).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&got).unwrap(), want);
        // Damaged, or larger than the cap once read.
        let e = payload_json(&h, &compress(&tlv[..9], Layout::V4), 1 << 20).unwrap_err();
        assert!(e.contains("TLV payload") && e.contains("damaged"), "{e}");
        let e = payload_json(&h, &zipped, 30).unwrap_err();
        assert!(e.contains("more than 30 bytes"), "{e}");
    }

    #[test]
    fn decodes_hand_written_headers_of_every_layout() {
        let h = decode_header(&V1_FLOW).unwrap();
        assert_eq!(
            (h.layout, h.topic.as_str(), h.version, h.source_id, h.msg_id),
            (Layout::V1, "flow", 2, 7, 258)
        );
        assert!(h.is_flow() && !h.is_tlv());
        let h = decode_header(&V4_FLOW).unwrap();
        assert_eq!(
            (h.layout, h.flags, h.source_id, h.msg_id),
            (Layout::V4, 4, 3, 9)
        );
        // Version 1: the message id in host (little-endian) order.
        let mut compat = V1_FLOW;
        compat[16] = 1;
        assert_eq!(decode_header(&compat).unwrap().msg_id, 0x0201_0000);
        // 28 bytes: msg_id in network order, source_id as ntopng reads it (no conversion).
        let mut v2 = [0u8; 28];
        v2[..7].copy_from_slice(b"counter");
        v2[16] = 2;
        v2[20..24].copy_from_slice(&[0, 0, 0, 5]);
        v2[24..28].copy_from_slice(&[6, 0, 0, 0]);
        let h = decode_header(&v2).unwrap();
        assert_eq!(
            (h.layout, h.topic.as_str(), h.msg_id, h.source_id),
            (Layout::V2, "counter", 5, 6)
        );
        assert!(!h.is_flow());
        // 40 bytes, the legacy one: topic[32], version and size u32, no message id.
        let mut v0 = [0u8; 40];
        v0[..5].copy_from_slice(b"event");
        v0[32] = 2;
        v0[36] = 10;
        let h = decode_header(&v0).unwrap();
        assert_eq!(
            (h.layout, h.topic.as_str(), h.version, h.msg_id),
            (Layout::V0, "event", 2, 0)
        );
        // TLV: by version in the short layouts, by flag in the 36-byte one.
        let mut tlv = V1_FLOW;
        tlv[16] = 3;
        assert!(decode_header(&tlv).unwrap().is_tlv());
        let mut tlv4 = V4_FLOW;
        tlv4[17] = V4_FLAG_TLV;
        assert!(decode_header(&tlv4).unwrap().is_tlv());
    }

    #[test]
    fn bad_headers_say_what_is_wrong() {
        let e = decode_header(b"[{\"IPV4_SRC_ADDR\":1}]").unwrap_err();
        assert!(
            e.contains("none of ntopng's layouts") && e.contains("drop format=ntopng"),
            "{e}"
        );
        let mut v = V1_FLOW;
        v[16] = 9;
        assert!(decode_header(&v).unwrap_err().contains("version 9"));
        let mut v = V4_FLOW;
        v[16] = 2;
        assert!(decode_header(&v).unwrap_err().contains("version 2"));
    }

    #[test]
    fn compression_round_trips_and_is_bounded() {
        let json = br#"[{"8":"10.0.0.1","12":"10.0.0.2"}]"#.repeat(50);
        let v1 = decode_header(&V1_FLOW).unwrap();
        let z = compress(&json, Layout::V1);
        assert_eq!(
            z[0], 0,
            "the 24-byte layout marks compression by a leading 0"
        );
        assert_eq!(z[1], 0x78, "then a zlib stream");
        assert!(z.len() < json.len() / 4);
        assert_eq!(&*payload_json(&v1, &z, 1 << 20).unwrap(), &json[..]);
        // Uncompressed JSON passes as it is.
        assert!(matches!(
            payload_json(&v1, &json, 1 << 20).unwrap(),
            std::borrow::Cow::Borrowed(_)
        ));
        let v4 = decode_header(&V4_FLOW).unwrap();
        let z4 = compress(&json, Layout::V4);
        assert_eq!(z4[0], 0x78, "the 36-byte layout has no marker byte");
        assert_eq!(&*payload_json(&v4, &z4, 1 << 20).unwrap(), &json[..]);
        // A zlib stream made by hand (stored block): 78 01, then BFINAL+stored, LEN, NLEN,
        // the bytes, and their Adler-32 (a = 1 + 91 + 93 = 0xb9, b = 92 + 185 = 0x115).
        let by_hand = [
            0, 0x78, 0x01, 0x01, 2, 0, 0xfd, 0xff, b'[', b']', 0x01, 0x15, 0x00, 0xb9,
        ];
        assert_eq!(&*payload_json(&v1, &by_hand, 100).unwrap(), b"[]");
        // Larger than the limit once decompressed: refused, not allocated.
        let e = payload_json(&v1, &z, 100).unwrap_err();
        assert!(e.contains("more than 100 bytes"), "{e}");
        let e = payload_json(&v1, &[0, 1, 2, 3], 100).unwrap_err();
        assert!(e.contains("not a zlib stream"), "{e}");
        let mut tlv = V1_FLOW;
        tlv[16] = 3;
        let e = payload_json(&decode_header(&tlv).unwrap(), b"x", 100).unwrap_err();
        assert!(e.contains("TLV"), "{e}");
    }

    #[test]
    fn numeric_keys_both_ways() {
        let o: Map<String, Value> = serde_json::from_str(
            r#"{"IPV4_SRC_ADDR":"10.0.0.1","OUT_BYTES":5,"SERVER_NAME":"x","L7_PROTO_NAME":"DNS"}"#,
        )
        .unwrap();
        let n = to_numeric_keys(o.clone());
        let keys: std::collections::BTreeSet<&str> = n.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["8", "23", "57591", "SERVER_NAME"].into_iter().collect()
        );
        let (back, unknown) = to_label_keys(n);
        assert_eq!((back, unknown), (o, 0));
        // An id sonde cannot name is kept under its number and counted.
        let o: Map<String, Value> =
            serde_json::from_str(r#"{"8":"10.0.0.1","12":"10.0.0.2","99999":1,"58500":"x"}"#)
                .unwrap();
        let (l, unknown) = to_label_keys(o);
        assert_eq!(unknown, 2);
        assert_eq!(l["IPV4_SRC_ADDR"], "10.0.0.1");
        assert_eq!(l["99999"], 1);
    }

    #[test]
    fn the_fuzz_seeds_are_whole_messages_of_every_layout() {
        // crates/export/fuzz's ntopng_zmq target starts from these: each must reach the flow
        // decoder (header length byte, header, payload), or fuzzing starts at the header.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/ntopng_zmq");
        let mut layouts = std::collections::BTreeSet::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let (header, payload) = data[1..].split_at(data[0] as usize);
            let h = decode_header(header).unwrap();
            assert!(h.is_flow(), "{}", path.display());
            let json = payload_json(&h, payload, 1 << 20).unwrap();
            let r = crate::ingest::flows_from_ntopng_json(&json);
            assert_eq!(
                (r.flows.len(), r.errors.len()),
                (1, 0),
                "{}",
                path.display()
            );
            layouts.insert(format!("{:?}", h.layout));
        }
        assert_eq!(layouts.len(), 4, "{layouts:?}");
    }
}
