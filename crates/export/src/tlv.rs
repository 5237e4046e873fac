//! nDPI's TLV serialization, the binary payload nProbe sends ntopng over ZMQ instead of JSON
//! (ntopng's `ZMQ_MSG_VERSION_TLV`). Written from nDPI's public `ndpi_typedefs.h` (the type
//! numbers) and checked byte for byte against Debian's libndpi 4.2 (`tests/system/
//! test_zmq_chain.py` serializes and deserializes with it); see `docs/zmq-interop.md`.
//!
//! ```text
//! buffer:  version u8 (1) | format u8 (1: TLV) | items…
//! item:    type u8 = key type << 4 | value type, then the key, then the value
//! keys:    0 none (markers) | 2 uint8 | 3 uint16 | 4 uint32 | 11 string
//! values:  1 end of record (no key, no value) | 2-5 uint8/16/32/64 | 6-9 int8/16/32/64 |
//!          10 float (4 bytes, little-endian as the producer's memory holds it) | 11 string |
//!          12 start of block, 14 start of list (no key: a string name) |
//!          13 end of block, 15 end of list (nothing)
//! numbers: big-endian; a producer writes the smallest type that holds the value
//! strings:  length u16 big-endian, then the bytes
//! ```
//!
//! A flow is the items up to an end of record; its keys are nProbe's element ids (numbers) or
//! labels, as in the JSON payload, so [`decode`] gives the same objects the JSON path reads.
//! Blocks and lists (nested objects nProbe does not send for flows) are skipped.

use serde_json::{Map, Number, Value};

/// The buffer's first two bytes: serializer version 1, format TLV.
pub const HEADER: [u8; 2] = [1, 1];

const END_OF_RECORD: u8 = 1;
const UINT8: u8 = 2;
const UINT16: u8 = 3;
const UINT32: u8 = 4;
const UINT64: u8 = 5;
const INT8: u8 = 6;
const INT16: u8 = 7;
const INT32: u8 = 8;
const INT64: u8 = 9;
const FLOAT: u8 = 10;
const STRING: u8 = 11;
const START_OF_BLOCK: u8 = 12;
const END_OF_BLOCK: u8 = 13;
const START_OF_LIST: u8 = 14;
const END_OF_LIST: u8 = 15;

/// Nesting deeper than this is refused (a producer's flows are flat).
const MAX_DEPTH: usize = 16;

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!(
                "the TLV payload ends inside an item (byte {} of {}, {n} more needed)",
                self.at,
                self.b.len()
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| v << 8 | u64::from(b)))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.uint(2)? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    /// A key of `kind`, as the JSON payload would name it.
    fn key(&mut self, kind: u8) -> Result<String, String> {
        match kind {
            UINT8 => self.uint(1).map(|k| k.to_string()),
            UINT16 => self.uint(2).map(|k| k.to_string()),
            UINT32 => self.uint(4).map(|k| k.to_string()),
            STRING => self.string(),
            k => Err(format!(
                "key type {k} at byte {}: keys are numbers or strings",
                self.at
            )),
        }
    }

    fn value(&mut self, kind: u8) -> Result<Value, String> {
        let signed = |v: u64, bits: u32| -> Value {
            let shift = 64 - bits;
            (((v << shift) as i64) >> shift).into()
        };
        Ok(match kind {
            UINT8 => self.uint(1)?.into(),
            UINT16 => self.uint(2)?.into(),
            UINT32 => self.uint(4)?.into(),
            UINT64 => self.uint(8)?.into(),
            INT8 => signed(self.uint(1)?, 8),
            INT16 => signed(self.uint(2)?, 16),
            INT32 => signed(self.uint(4)?, 32),
            INT64 => signed(self.uint(8)?, 64),
            FLOAT => {
                let b: [u8; 4] = self.take(4)?.try_into().expect("4 bytes");
                Number::from_f64(f64::from(f32::from_le_bytes(b)))
                    .map_or(Value::Null, Value::Number)
            }
            STRING => Value::String(self.string()?),
            v => return Err(format!("value type {v} at byte {}", self.at)),
        })
    }
}

/// The records of a TLV buffer, as JSON objects keyed as the JSON payload is; at most
/// `max_records` (more is an error, not an allocation).
pub fn decode(b: &[u8], max_records: usize) -> Result<Vec<Map<String, Value>>, String> {
    if b.len() < 2 || b[..2] != HEADER {
        return Err(format!(
            "not an nDPI TLV buffer: it starts {:02x?}, not version 1 and format 1 (TLV)",
            &b[..b.len().min(2)]
        ));
    }
    let mut r = Reader { b, at: 2 };
    let mut records = Vec::new();
    let mut record = Map::new();
    let mut depth = 0usize;
    while r.at < b.len() {
        let t = r.take(1)?[0];
        let (key_type, value_type) = (t >> 4, t & 0x0f);
        match value_type {
            END_OF_RECORD if depth == 0 => {
                if records.len() == max_records {
                    return Err(format!(
                        "more than {max_records} records in one payload, the collector's limit"
                    ));
                }
                records.push(std::mem::take(&mut record));
            }
            START_OF_BLOCK | START_OF_LIST => {
                r.string()?;
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("blocks nested deeper than {MAX_DEPTH}"));
                }
            }
            END_OF_BLOCK | END_OF_LIST => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("an end of block with no block, at byte {}", r.at))?;
            }
            END_OF_RECORD => return Err("an end of record inside a block".into()),
            _ => {
                let key = r.key(key_type)?;
                let value = r.value(value_type)?;
                if depth == 0 {
                    record.insert(key, value);
                }
            }
        }
    }
    // A last record without its end marker still counts.
    if !record.is_empty() {
        records.push(record);
    }
    Ok(records)
}

/// Appends one record: its keys as numbers where they are (nProbe's element ids), else as
/// strings; numbers in the smallest type that holds them, as nDPI writes them; text cut at
/// 65,535 bytes; objects and lists as JSON text; nulls left out. Then the end of record.
pub fn encode_record(o: &Map<String, Value>, out: &mut Vec<u8>) {
    for (k, v) in o {
        let (key_type, key): (u8, Vec<u8>) = match k.parse::<u32>() {
            Ok(n) if n <= 0xff => (UINT8, vec![n as u8]),
            Ok(n) if n <= 0xffff => (UINT16, (n as u16).to_be_bytes().to_vec()),
            Ok(n) => (UINT32, n.to_be_bytes().to_vec()),
            Err(_) => (STRING, string_bytes(k)),
        };
        let (value_type, value): (u8, Vec<u8>) = match v {
            Value::Null => continue,
            Value::Bool(b) => (UINT8, vec![u8::from(*b)]),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => unsigned(u),
                (None, Some(i)) => signed(i),
                _ => (
                    FLOAT,
                    (n.as_f64().unwrap_or(0.0) as f32).to_le_bytes().to_vec(),
                ),
            },
            Value::String(s) => match ipv4_number(k, s) {
                Some(n) => unsigned(n.into()),
                None => (STRING, string_bytes(s)),
            },
            other => (STRING, string_bytes(&other.to_string())),
        };
        out.push(key_type << 4 | value_type);
        out.extend_from_slice(&key);
        out.extend_from_slice(&value);
    }
    out.push(END_OF_RECORD);
}

/// The IPv4 address elements nProbe serializes as 32-bit numbers (the address read as a
/// big-endian integer, what ntopng's TLV parser expects): source, destination, next hops,
/// exporter and post-NAT addresses, by element id or label. Other strings stay strings.
const IPV4_ELEMENTS: [(&str, &str); 8] = [
    ("8", "IPV4_SRC_ADDR"),
    ("12", "IPV4_DST_ADDR"),
    ("15", "IPV4_NEXT_HOP"),
    ("18", "BGP_IPV4_NEXT_HOP"),
    ("130", "EXPORTER_IPV4_ADDRESS"),
    ("225", "POST_NAT_SRC_IPV4_ADDR"),
    ("226", "POST_NAT_DST_IPV4_ADDR"),
    ("47", "MPLS_TOP_LABEL_IP_ADDR"),
];

fn ipv4_number(key: &str, value: &str) -> Option<u32> {
    IPV4_ELEMENTS
        .iter()
        .any(|(id, label)| key == *id || key == *label)
        .then(|| value.parse::<std::net::Ipv4Addr>().ok().map(u32::from))
        .flatten()
}

fn unsigned(u: u64) -> (u8, Vec<u8>) {
    if u <= 0xff {
        (UINT8, vec![u as u8])
    } else if u <= 0xffff {
        (UINT16, (u as u16).to_be_bytes().to_vec())
    } else if u <= 0xffff_ffff {
        (UINT32, (u as u32).to_be_bytes().to_vec())
    } else {
        (UINT64, u.to_be_bytes().to_vec())
    }
}

fn signed(i: i64) -> (u8, Vec<u8>) {
    if i8::try_from(i).is_ok() {
        (INT8, (i as i8).to_be_bytes().to_vec())
    } else if i16::try_from(i).is_ok() {
        (INT16, (i as i16).to_be_bytes().to_vec())
    } else if i32::try_from(i).is_ok() {
        (INT32, (i as i32).to_be_bytes().to_vec())
    } else {
        (INT64, i.to_be_bytes().to_vec())
    }
}

/// Length (u16, big-endian) and bytes, cut at a character boundary to fit.
fn string_bytes(s: &str) -> Vec<u8> {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = Vec::with_capacity(2 + end);
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What libndpi 4.2's serializer wrote (`ndpi_serialize_uint32_uint32(8, 0x0a000001)`,
    /// `(4, 6)`, `(7, 443)`, `uint32_uint64(1, 5e9)`, `uint32_string(57591, "TLS")`,
    /// `string_uint32("SRC_AS", 15169)`, `string_string("K", "v")`, `uint32_int32(9, -2)`,
    /// end of record, `(8, 1)`, end of record), printed by a C program linked with it.
    const NDPI_BYTES: &str = "0101 24080a000001 220406 230701bb 25010000000 12a05f200 \
        3be0f70003544c53 b300065352435f41533b41 bb00014b000176 2609fe 01 220801 01";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn reads_what_libndpi_wrote() {
        let records = decode(&hex(NDPI_BYTES), 10).unwrap();
        assert_eq!(
            Value::from(records),
            json!([
                {"8": 0x0a000001, "4": 6, "7": 443, "1": 5_000_000_000u64, "57591": "TLS",
                 "SRC_AS": 15169, "K": "v", "9": -2},
                {"8": 1}
            ])
        );
    }

    #[test]
    fn writes_what_libndpi_writes_and_reads_it_back() {
        let first = json!({"8": 0x0a000001, "4": 6, "7": 443, "1": 5_000_000_000u64,
                           "57591": "TLS", "SRC_AS": 15169, "K": "v", "9": -2});
        let mut out = HEADER.to_vec();
        // In libndpi's order (serde_json's maps keep keys sorted, so one key at a time).
        let order = ["8", "4", "7", "1", "57591", "SRC_AS", "K", "9"];
        let mut body = Vec::new();
        for k in order {
            let mut one = Map::new();
            one.insert(k.into(), first[k].clone());
            encode_record(&one, &mut body);
            body.pop(); // one record in the end
        }
        body.push(END_OF_RECORD);
        let mut second = Map::new();
        second.insert("8".into(), 1.into());
        encode_record(&second, &mut body);
        out.extend_from_slice(&body);
        assert_eq!(out, hex(NDPI_BYTES));
        let back = decode(&out, 10).unwrap();
        assert_eq!(Value::Object(back[0].clone()), first);
    }

    #[test]
    fn ipv4_addresses_go_as_numbers_as_nprobe_sends_them() {
        let mut out = Vec::new();
        let rec = json!({"8": "10.0.0.1", "IPV4_DST_ADDR": "192.0.2.7", "27": "2001:db8::1",
                         "SERVER_NAME": "10.0.0.2", "12": "not an address"});
        encode_record(rec.as_object().unwrap(), &mut out);
        let mut framed = HEADER.to_vec();
        framed.extend_from_slice(&out);
        let back = decode(&framed, 1).unwrap();
        assert_eq!(
            Value::Object(back[0].clone()),
            json!({"8": 0x0a000001u32, "IPV4_DST_ADDR": 0xc0000207u32, "27": "2001:db8::1",
                   "SERVER_NAME": "10.0.0.2", "12": "not an address"})
        );
        // The same bytes libndpi writes for ndpi_serialize_uint32_uint32(8, 0x0a000001).
        assert!(out.windows(6).any(|w| w == [0x24, 8, 10, 0, 0, 1]));
    }

    #[test]
    fn blocks_floats_and_long_text() {
        // libndpi: uint32_float(5, 1.5), uint32_uint32(100000, 7), uint32_int64(3, -5e9),
        // a block "blk" and a list "lst" each holding (2, 3), end of record.
        let b = hex(
            "0101 2a050000c03f 42000186a007 2903fffffffed5fa0e00 0c0003626c6b 220203 0d \
             0e00036c7374 220203 0f 01",
        );
        let r = decode(&b, 10).unwrap();
        assert_eq!(
            Value::Object(r[0].clone()),
            json!({"5": 1.5, "100000": 7, "3": -5_000_000_000i64})
        );
        let long = "é".repeat(40_000);
        let mut out = HEADER.to_vec();
        encode_record(
            &json!({"NAME": long}).as_object().unwrap().clone(),
            &mut out,
        );
        let back = decode(&out, 1).unwrap();
        let s = back[0]["NAME"].as_str().unwrap();
        assert!(s.len() <= 65_535 && s.len() > 65_000 && long.starts_with(s));
    }

    #[test]
    fn damaged_buffers_are_errors_not_panics() {
        assert!(decode(b"", 10).unwrap_err().contains("not an nDPI TLV"));
        assert!(decode(&[1, 2, 0x22], 10)
            .unwrap_err()
            .contains("not an nDPI TLV"));
        assert!(decode(&hex("0101 2408 0a00"), 10)
            .unwrap_err()
            .contains("ends inside"));
        assert!(decode(&hex("0101 0d"), 10)
            .unwrap_err()
            .contains("no block"));
        assert!(decode(&hex("0101 01 0300"), 10)
            .unwrap_err()
            .contains("key type 0"));
        assert!(decode(&hex("0101 f2 00 01"), 10)
            .unwrap_err()
            .contains("key type 15"));
        let many = hex(&format!("0101{}", "220801 01 ".repeat(3)));
        assert!(decode(&many, 2).unwrap_err().contains("more than 2"));
        assert_eq!(decode(&many, 3).unwrap().len(), 3);
        let deep = hex(&format!("0101{}", "0c0000 ".repeat(MAX_DEPTH + 1)));
        assert!(decode(&deep, 3).unwrap_err().contains("nested"));
    }
}
