//! Binary encoding of flow records ([`FlowRecord`]) for the history files on disk.
//!
//! **This is an on-disk format, and this is layout version 2** ([`VERSION`], stored in every
//! record; version 1 records are still read). Any change to the fixed part (a field added,
//! removed, moved, widened or given a new meaning, a new enum number) must bump the version
//! and keep a decoder for the old one, or files already written will be misread. Metadata
//! fields are not such a change: each has its own tag in `sonde_dpi::meta::FIELDS`, and a new
//! field is a new tag that older records simply lack.
//!
//! A record is self-delimiting: it starts with its own length, so a reader can skip it without
//! decoding it. Integers are little-endian and fixed width; enums are stored as their numbers
//! (`as u8`), protocol and application as nDPI's `u16`.
//!
//! ```text
//! offset size
//!      0    4  record length in bytes, these 4 included
//!      4    1  version (2; 1 is read)
//!      5    1  flags: 0x01 client is side a      0x02 DPI done
//!                     0x04 short addresses        0x08 collected section follows
//!                     0x10 exporter section       0x20 meta section
//!      6    8  first_ns          \
//!     14    8  last_ns            |
//!     22    1  IP version         |
//!     23    1  IP protocol        |  the summary prefix: everything decode_summary
//!     24    2  VLAN               |  reads, fixed fields first
//!     26    2  port a             |
//!     28    2  port b             |
//!     30    2  L7 protocol        |
//!     32    2  L7 application     |
//!     34   16  packets a→b, b→a   |
//!     50   16  bytes a→b, b→a     |
//!     66 8|32  address a, b      /   4 bytes each with the short-addresses flag, else 16
//!  then the fixed tail (50 bytes):
//!          1+1+1+1  end reason, TCP state, tunnel, TOS
//!          1+1      L7 category, L7 confidence
//!          2        TCP flags a, b
//!          2        ICMP type and code
//!          4        fragments
//!          4×4      retransmits a, b; out of order a, b
//!          4+4      client RTT µs, server RTT µs
//!          6+6      MAC a, MAC b
//!  then, each only when its flag is set:
//!    collected  input interface u32, output interface u32, sampling u32
//!    exporter   family u8 (4 or 6), address (4 or 16), port u16,
//!               [IPv6 only: flowinfo u32, scope id u32], observation domain u32
//!    meta       (tag u8, value) pairs up to the end of the record, each tag at most once
//! ```
//!
//! Version 2 meta: the tag is a field's `sonde_dpi::meta::Field::tag`, and its kind says what
//! follows: a wire string is a u16 byte length and that many UTF-8 bytes, a list is a u16
//! count and its strings, a number is an unsigned LEB128 varint. Tag 60
//! (`sonde_dpi::meta::EXTRA_TAG`) is a list of (name, value) string pairs: a collected flow's
//! uninterpreted fields. The codec names no field: it walks the table.
//!
//! Version 1 meta (read only, [`v1_tag`]): tags strictly increasing; a section tag (HTTP, TLS,
//! DNS, DHCP, SSH) says the section is present and carries its numbers; the section's strings
//! follow under their own tags.
//!
//! ```text
//!   1 server name   2 banner   3 QUIC version u32
//!  10 HTTP: status u16                     11-15 method, URL, host, user agent, content type
//!  20 TLS: client version u16, server version u16, cipher u16
//!                                          21-26 SNI, ALPN, JA3, JA4, JA3S, certificate names
//!  30 DNS: qtype u16, has rcode u8 (0|1), rcode u8, is mDNS u8 (0|1)
//!                                          31 query   32 answers (list of strings)
//!  40 DHCP: message type u8                41-42 host name, vendor class
//!  50 SSH (no value)                       51-54 client banner, server banner, HASSH client, server
//!  60 extra: list of (name, value) string pairs
//! ```
//!
//! Not stored, because no output reads them and they only mean something inside a running
//! shard: sequence tracking, pending host counters, host slots, `live`, `has_ext`,
//! `syn_ns`/`synack_ns`, `last_was_retransmit`, and the shard-local exporter index (the
//! exporter's address is stored). Decoding gives those their [`Flow::default`] and
//! [`FlowExt::default`] values, with `live` false and `record_start_ns` equal to `first_ns`.

use sonde_dpi::meta::{self, Dhcp, Dns, Http, Kind, Ssh, Tls, Value, EXTRA_TAG};
use sonde_dpi::{Category, Confidence, Meta, Proto, L7};
use sonde_flow::flow::TcpState;
use sonde_flow::{EndReason, Flow, FlowExt, FlowKey, FlowRecord};
use sonde_wire::Tunnel;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The layout version written into every record.
pub const VERSION: u8 = 2;
/// The oldest layout version still read.
pub const OLDEST_VERSION: u8 = 1;

/// Bytes before the addresses (the fixed part of the summary prefix).
const PREFIX_LEN: usize = 66;
/// Bytes of the fixed tail after the addresses.
const TAIL_LEN: usize = 50;
/// The smallest record: short (IPv4) addresses and no optional section.
pub const MIN_RECORD_LEN: usize = PREFIX_LEN + 2 * 4 + TAIL_LEN;
/// The largest record the encoder writes and the decoder accepts. Real records are a few
/// hundred bytes; the bound lets a reader tell a corrupt length from a record, and the
/// encoder stops adding list items (DNS answers, extra pairs) before a record reaches it.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// Longest string stored (u16 length); longer ones are cut on a char boundary.
const MAX_STR_LEN: usize = u16::MAX as usize;
/// Most items stored in a list (u16 count).
const MAX_LIST_LEN: usize = u16::MAX as usize;

/// Bits of the flags byte.
mod flag {
    pub const CLIENT_IS_A: u8 = 0x01;
    pub const DPI_DONE: u8 = 0x02;
    /// IPv4 addresses stored as 4 bytes (the other 12 of the key's 16 are zero).
    pub const SHORT_ADDRS: u8 = 0x04;
    pub const COLLECTED: u8 = 0x08;
    pub const EXPORTER: u8 = 0x10;
    pub const META: u8 = 0x20;
    pub const ALL: u8 = 0x3f;
}

/// Layout version 1's meta tags, in the order they were written (its decoder requires
/// increasing tags, which also puts each section's tag before its strings). Frozen: version 2
/// takes its tags from `sonde_dpi::meta::FIELDS`.
mod v1_tag {
    pub const SERVER_NAME: u8 = 1;
    pub const BANNER: u8 = 2;
    pub const QUIC_VERSION: u8 = 3;
    pub const HTTP: u8 = 10;
    pub const HTTP_METHOD: u8 = 11;
    pub const HTTP_URL: u8 = 12;
    pub const HTTP_HOST: u8 = 13;
    pub const HTTP_USER_AGENT: u8 = 14;
    pub const HTTP_CONTENT_TYPE: u8 = 15;
    pub const TLS: u8 = 20;
    pub const TLS_SNI: u8 = 21;
    pub const TLS_ALPN: u8 = 22;
    pub const TLS_JA3: u8 = 23;
    pub const TLS_JA4: u8 = 24;
    pub const TLS_JA3S: u8 = 25;
    pub const TLS_CERT_NAMES: u8 = 26;
    pub const DNS: u8 = 30;
    pub const DNS_QUERY: u8 = 31;
    pub const DNS_ANSWERS: u8 = 32;
    pub const DHCP: u8 = 40;
    pub const DHCP_HOSTNAME: u8 = 41;
    pub const DHCP_VENDOR_CLASS: u8 = 42;
    pub const SSH: u8 = 50;
    pub const SSH_CLIENT_BANNER: u8 = 51;
    pub const SSH_SERVER_BANNER: u8 = 52;
    pub const SSH_HASSH_CLIENT: u8 = 53;
    pub const SSH_HASSH_SERVER: u8 = 54;
    pub const EXTRA: u8 = 60;
}

/// Why bytes could not be decoded as a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// The buffer ends before the record does.
    Truncated { needed: usize, available: usize },
    /// The length field is not a possible record length.
    BadLength(u32),
    /// The record was written in another layout version.
    UnsupportedVersion(u8),
    /// A field runs past the record's stated length.
    Overrun,
    /// A field holds a number no record has (a flag, an enum, a boolean).
    BadValue { field: &'static str, value: u64 },
    /// A meta string is not UTF-8.
    BadUtf8 { tag: u8 },
    /// A meta field is unknown, repeated, out of order, or outside its section.
    BadMeta { tag: u8, problem: &'static str },
    /// Bytes are left after the record's last field.
    TrailingBytes(usize),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Truncated { needed, available } => write!(
                f,
                "flow record truncated: it needs {needed} bytes, the buffer has {available} \
                 (an incomplete write, or a read at the wrong offset)"
            ),
            CodecError::BadLength(n) => write!(
                f,
                "flow record length {n} is outside {MIN_RECORD_LEN}..={MAX_RECORD_LEN} bytes \
                 (corrupt data, or not the start of a record)"
            ),
            CodecError::UnsupportedVersion(v) => write!(
                f,
                "flow record layout version {v} is not supported, this build reads versions \
                 {OLDEST_VERSION} to {VERSION} (written by a newer sonde, or not the start of a \
                 record)"
            ),
            CodecError::Overrun => {
                write!(
                    f,
                    "a field runs past the end of the flow record (corrupt record)"
                )
            }
            CodecError::BadValue { field, value } => {
                write!(f, "invalid {field} {value} in flow record (corrupt record)")
            }
            CodecError::BadUtf8 { tag } => write!(
                f,
                "meta field {tag} of a flow record is not valid UTF-8 (corrupt record)"
            ),
            CodecError::BadMeta { tag, problem } => {
                write!(
                    f,
                    "meta field {tag} of a flow record {problem} (corrupt record)"
                )
            }
            CodecError::TrailingBytes(n) => write!(
                f,
                "{n} bytes left after the last field of a flow record (corrupt record)"
            ),
        }
    }
}

impl std::error::Error for CodecError {}

/// What query filters need of a record, read from its fixed prefix without building strings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub first_ms: u64,
    pub last_ms: u64,
    pub key: FlowKey,
    pub l7_proto: u16,
    pub l7_app: u16,
    /// Both directions.
    pub bytes: u64,
    /// Both directions.
    pub packets: u64,
    pub client_is_a: bool,
}

/// Appends one record for `r` to `out`.
///
/// Strings longer than 65535 bytes are cut (on a char boundary), lists (DNS answers, extra
/// pairs) keep at most 65535 items and only as many as fit in [`MAX_RECORD_LEN`]: bounds real
/// records are far from.
pub fn encode(r: &FlowRecord, out: &mut Vec<u8>) {
    let start = out.len();
    let f = &r.flow;
    let x = &r.ext;
    let k = &f.key;
    let short_addrs = k.ip_version == 4 && k.addr_a[4..] == [0; 12] && k.addr_b[4..] == [0; 12];
    let collected = x.in_if != 0 || x.out_if != 0 || f.sampling != 0;
    let flags = [
        (f.client_is_a, flag::CLIENT_IS_A),
        (f.dpi_done, flag::DPI_DONE),
        (short_addrs, flag::SHORT_ADDRS),
        (collected, flag::COLLECTED),
        (r.exporter.is_some(), flag::EXPORTER),
        (r.meta.is_some(), flag::META),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .fold(0, |flags, (_, bit)| flags | bit);

    out.put_u32(0); // the length, filled in at the end
    out.push(VERSION);
    out.push(flags);

    // The summary prefix.
    out.put_u64(f.first_ns);
    out.put_u64(f.last_ns);
    out.push(k.ip_version);
    out.push(k.proto);
    out.put_u16(k.vlan);
    out.put_u16(k.port_a);
    out.put_u16(k.port_b);
    out.put_u16(f.l7.proto.0);
    out.put_u16(f.l7.app.0);
    for n in f.pkts.into_iter().chain(f.bytes) {
        out.put_u64(n);
    }
    let addr_len = if short_addrs { 4 } else { 16 };
    out.extend_from_slice(&k.addr_a[..addr_len]);
    out.extend_from_slice(&k.addr_b[..addr_len]);

    // The fixed tail.
    out.extend_from_slice(&[
        r.reason as u8,
        f.tcp_state as u8,
        f.tunnel as u8,
        f.tos,
        f.l7.category as u8,
        f.l7.confidence as u8,
        f.tcp_flags[0],
        f.tcp_flags[1],
    ]);
    out.put_u16(f.icmp_type_code);
    for n in [
        f.fragments,
        x.retransmits[0],
        x.retransmits[1],
        x.out_of_order[0],
        x.out_of_order[1],
        x.rtt_client_us,
        x.rtt_server_us,
    ] {
        out.put_u32(n);
    }
    out.extend_from_slice(&f.mac_a);
    out.extend_from_slice(&f.mac_b);

    if collected {
        for n in [x.in_if, x.out_if, f.sampling] {
            out.put_u32(n);
        }
    }
    if let Some((addr, domain)) = r.exporter {
        encode_exporter(addr, domain, out);
    }
    if let Some(m) = &r.meta {
        encode_meta(m, out, start);
    }

    let len = out.len() - start;
    debug_assert!((MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len));
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

fn encode_exporter(addr: SocketAddr, domain: u32, out: &mut Vec<u8>) {
    match addr {
        SocketAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.ip().octets());
            out.put_u16(a.port());
        }
        SocketAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.ip().octets());
            out.put_u16(a.port());
            out.put_u32(a.flowinfo());
            out.put_u32(a.scope_id());
        }
    }
    out.put_u32(domain);
}

fn encode_meta(m: &Meta, out: &mut Vec<u8>, record_start: usize) {
    for f in meta::FIELDS {
        let Some(v) = (f.get)(m) else { continue };
        out.push(f.tag);
        match v {
            Value::Text(s) => out.put_str(s),
            Value::Number(n) => out.put_varint(n),
            Value::List(items) => put_list(out, record_start, items, |out, s| out.put_str(s)),
        }
    }
    if !m.extra.is_empty() {
        out.push(EXTRA_TAG);
        put_list(out, record_start, &m.extra, |out, (name, value)| {
            out.put_str(name);
            out.put_str(value);
        });
    }
}

/// A u16 count and the items that fit: at most [`MAX_LIST_LEN`], and only while the record
/// stays within [`MAX_RECORD_LEN`] (everything else in a record is bounded well below it).
fn put_list<T>(
    out: &mut Vec<u8>,
    record_start: usize,
    items: &[T],
    put_item: impl Fn(&mut Vec<u8>, &T),
) {
    let count_at = out.len();
    out.put_u16(0);
    let mut count: u16 = 0;
    for item in items.iter().take(MAX_LIST_LEN) {
        let before = out.len();
        put_item(out, item);
        if out.len() - record_start > MAX_RECORD_LEN {
            out.truncate(before);
            break;
        }
        count += 1;
    }
    out[count_at..count_at + 2].copy_from_slice(&count.to_le_bytes());
}

/// Little-endian appends.
trait Put {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    /// A u16 length and the UTF-8 bytes.
    fn put_str(&mut self, s: &str);
    /// Unsigned LEB128: 7 bits a byte, low first, the high bit says more follow.
    fn put_varint(&mut self, v: u64);
}

impl Put for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_str(&mut self, s: &str) {
        // Cut on a char boundary, so what is stored is still UTF-8.
        let mut end = s.len().min(MAX_STR_LEN);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.put_u16(end as u16);
        self.extend_from_slice(&s.as_bytes()[..end]);
    }
    fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

/// Decodes the record at the start of `buf`; returns it and its length in bytes (where the
/// next record starts).
pub fn decode(buf: &[u8]) -> Result<(FlowRecord, usize), CodecError> {
    let (p, mut r) = read_prefix(buf)?;

    let reason = r.number("end reason", |n| {
        EndReason::ALL.into_iter().find(|e| *e as u8 == n)
    })?;
    let tcp_state = r.number("TCP state", TcpState::from_number)?;
    let tunnel = r.number("tunnel", Tunnel::from_number)?;
    let tos = r.u8()?;
    let category = r.number("L7 category", Category::from_number)?;
    let confidence = r.number("L7 confidence", Confidence::from_number)?;
    let tcp_flags = r.array()?;
    let icmp_type_code = r.u16()?;
    let fragments = r.u32()?;
    let retransmits = [r.u32()?, r.u32()?];
    let out_of_order = [r.u32()?, r.u32()?];
    let rtt_client_us = r.u32()?;
    let rtt_server_us = r.u32()?;
    let mac_a = r.array()?;
    let mac_b = r.array()?;

    let (in_if, out_if, sampling) = if p.has(flag::COLLECTED) {
        (r.u32()?, r.u32()?, r.u32()?)
    } else {
        (0, 0, 0)
    };
    let exporter = if p.has(flag::EXPORTER) {
        Some(decode_exporter(&mut r)?)
    } else {
        None
    };
    let meta = if p.has(flag::META) {
        Some(Box::new(if p.version == 1 {
            decode_meta_v1(&mut r)?
        } else {
            decode_meta(&mut r)?
        }))
    } else {
        None
    };
    let len = r.finish()?;

    let flow = Flow {
        key: p.key,
        first_ns: p.first_ns,
        last_ns: p.last_ns,
        record_start_ns: p.first_ns,
        pkts: p.pkts,
        bytes: p.bytes,
        mac_a,
        mac_b,
        tcp_flags,
        tcp_state,
        client_is_a: p.has(flag::CLIENT_IS_A),
        tunnel,
        tos,
        icmp_type_code,
        live: false,
        fragments,
        l7: L7 {
            proto: Proto(p.l7_proto),
            app: Proto(p.l7_app),
            category,
            confidence,
        },
        dpi_done: p.has(flag::DPI_DONE),
        sampling,
        ..Flow::default()
    };
    let ext = FlowExt {
        rtt_server_us,
        rtt_client_us,
        retransmits,
        out_of_order,
        in_if,
        out_if,
        ..FlowExt::default()
    };
    let record = FlowRecord {
        flow,
        ext,
        reason,
        meta,
        exporter,
    };
    Ok((record, len))
}

/// Decodes only the fixed prefix of the record at the start of `buf` (which must still hold
/// the whole record); returns the summary and the record's length in bytes.
pub fn decode_summary(buf: &[u8]) -> Result<(Summary, usize), CodecError> {
    let (p, r) = read_prefix(buf)?;
    let summary = Summary {
        first_ms: p.first_ns / 1_000_000,
        last_ms: p.last_ns / 1_000_000,
        key: p.key,
        l7_proto: p.l7_proto,
        l7_app: p.l7_app,
        // Saturating: a corrupt record must not overflow.
        bytes: p.bytes[0].saturating_add(p.bytes[1]),
        packets: p.pkts[0].saturating_add(p.pkts[1]),
        client_is_a: p.has(flag::CLIENT_IS_A),
    };
    Ok((summary, r.rec.len()))
}

/// The fields of the summary prefix.
struct Prefix {
    version: u8,
    flags: u8,
    first_ns: u64,
    last_ns: u64,
    key: FlowKey,
    l7_proto: u16,
    l7_app: u16,
    pkts: [u64; 2],
    bytes: [u64; 2],
}

impl Prefix {
    fn has(&self, bit: u8) -> bool {
        self.flags & bit != 0
    }
}

/// Checks the record's length and version and reads its prefix; the reader is left on the
/// fixed tail and covers exactly the record.
fn read_prefix(buf: &[u8]) -> Result<(Prefix, Reader<'_>), CodecError> {
    let &[l0, l1, l2, l3, version, ..] = buf else {
        return Err(CodecError::Truncated {
            needed: 5,
            available: buf.len(),
        });
    };
    // The version first: a record of another version may have other lengths.
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(CodecError::UnsupportedVersion(version));
    }
    let stated = u32::from_le_bytes([l0, l1, l2, l3]);
    let len = stated as usize;
    if !(MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(CodecError::BadLength(stated));
    }
    let Some(rec) = buf.get(..len) else {
        return Err(CodecError::Truncated {
            needed: len,
            available: buf.len(),
        });
    };
    let mut r = Reader { rec, pos: 5 };

    let flags = r.u8()?;
    if flags & !flag::ALL != 0 {
        return Err(CodecError::BadValue {
            field: "flags",
            value: flags as u64,
        });
    }
    let first_ns = r.u64()?;
    let last_ns = r.u64()?;
    let ip_version = r.u8()?;
    let proto = r.u8()?;
    let vlan = r.u16()?;
    let port_a = r.u16()?;
    let port_b = r.u16()?;
    let l7_proto = r.u16()?;
    let l7_app = r.u16()?;
    let pkts = [r.u64()?, r.u64()?];
    let bytes = [r.u64()?, r.u64()?];
    let addr_len = if flags & flag::SHORT_ADDRS != 0 {
        4
    } else {
        16
    };
    let mut addr_a = [0u8; 16];
    addr_a[..addr_len].copy_from_slice(r.take(addr_len)?);
    let mut addr_b = [0u8; 16];
    addr_b[..addr_len].copy_from_slice(r.take(addr_len)?);

    let key = FlowKey {
        addr_a,
        addr_b,
        port_a,
        port_b,
        proto,
        ip_version,
        vlan,
    };
    let prefix = Prefix {
        version,
        flags,
        first_ns,
        last_ns,
        key,
        l7_proto,
        l7_app,
        pkts,
        bytes,
    };
    Ok((prefix, r))
}

fn decode_exporter(r: &mut Reader) -> Result<(SocketAddr, u32), CodecError> {
    let addr = match r.u8()? {
        4 => {
            let ip = Ipv4Addr::from(r.array::<4>()?);
            let port = r.u16()?;
            SocketAddr::V4(SocketAddrV4::new(ip, port))
        }
        6 => {
            let ip = Ipv6Addr::from(r.array::<16>()?);
            let port = r.u16()?;
            let flowinfo = r.u32()?;
            let scope_id = r.u32()?;
            SocketAddr::V6(SocketAddrV6::new(ip, port, flowinfo, scope_id))
        }
        family => {
            return Err(CodecError::BadValue {
                field: "exporter address family",
                value: family as u64,
            })
        }
    };
    Ok((addr, r.u32()?))
}

/// Reads meta fields up to the end of the record (layout version 2).
fn decode_meta(r: &mut Reader) -> Result<Meta, CodecError> {
    let mut m = Meta::default();
    let mut seen = [0u64; 4];
    while !r.at_end() {
        let t = r.u8()?;
        let bit = 1u64 << (t % 64);
        if seen[t as usize / 64] & bit != 0 {
            return Err(CodecError::BadMeta {
                tag: t,
                problem: "is repeated",
            });
        }
        seen[t as usize / 64] |= bit;
        if t == EXTRA_TAG {
            m.extra = r.list(|r| Ok((r.string(t)?, r.string(t)?)))?;
            continue;
        }
        let Some(f) = meta::field_by_tag(t) else {
            return Err(CodecError::BadMeta {
                tag: t,
                problem: "is unknown (written by a newer sonde?)",
            });
        };
        // Accepted only when the field reads back as stored, so that whatever decodes
        // re-encodes to the same bytes (a 0 where 0 means "none" is refused).
        let ok = match f.kind {
            Kind::WireText => {
                let s = r.string(t)?;
                (f.set)(&mut m, Value::Text(&s)) && (f.get)(&m) == Some(Value::Text(&s))
            }
            Kind::WireList => {
                let l = r.list(|r| r.string(t))?;
                (f.set)(&mut m, Value::List(&l)) && (f.get)(&m) == Some(Value::List(&l))
            }
            Kind::Code | Kind::Duration | Kind::Flag => {
                let n = Value::Number(r.varint()?);
                (f.set)(&mut m, n) && (f.get)(&m) == Some(n)
            }
        };
        if !ok {
            return Err(CodecError::BadMeta {
                tag: t,
                problem: "holds a value out of its range",
            });
        }
    }
    Ok(m)
}

/// Reads layout version 1's meta fields up to the end of the record.
fn decode_meta_v1(r: &mut Reader) -> Result<Meta, CodecError> {
    let mut m = Meta::default();
    let mut last_tag = 0;
    while !r.at_end() {
        let t = r.u8()?;
        // Increasing tags: no field twice, and every section before its strings.
        if t <= last_tag {
            return Err(CodecError::BadMeta {
                tag: t,
                problem: "is repeated or out of order",
            });
        }
        last_tag = t;
        match t {
            v1_tag::SERVER_NAME => m.server_name = Some(r.string(t)?),
            v1_tag::BANNER => m.banner = Some(r.string(t)?),
            v1_tag::QUIC_VERSION => m.quic_version = Some(r.u32()?),

            v1_tag::HTTP => {
                let status = r.u16()?;
                m.http = Some(Box::new(Http {
                    status,
                    ..Http::default()
                }));
            }
            v1_tag::HTTP_METHOD => section(&mut m.http, t)?.method = Some(r.string(t)?),
            v1_tag::HTTP_URL => section(&mut m.http, t)?.url = Some(r.string(t)?),
            v1_tag::HTTP_HOST => section(&mut m.http, t)?.host = Some(r.string(t)?),
            v1_tag::HTTP_USER_AGENT => section(&mut m.http, t)?.user_agent = Some(r.string(t)?),
            v1_tag::HTTP_CONTENT_TYPE => section(&mut m.http, t)?.content_type = Some(r.string(t)?),

            v1_tag::TLS => {
                let client_version = r.u16()?;
                let server_version = r.u16()?;
                let cipher = r.u16()?;
                m.tls = Some(Box::new(Tls {
                    client_version,
                    server_version,
                    cipher,
                    ..Tls::default()
                }));
            }
            v1_tag::TLS_SNI => section(&mut m.tls, t)?.sni = Some(r.string(t)?),
            v1_tag::TLS_ALPN => section(&mut m.tls, t)?.alpn = Some(r.string(t)?),
            v1_tag::TLS_JA3 => section(&mut m.tls, t)?.ja3 = Some(r.string(t)?),
            v1_tag::TLS_JA4 => section(&mut m.tls, t)?.ja4 = Some(r.string(t)?),
            v1_tag::TLS_JA3S => section(&mut m.tls, t)?.ja3s = Some(r.string(t)?),
            v1_tag::TLS_CERT_NAMES => section(&mut m.tls, t)?.cert_names = Some(r.string(t)?),

            v1_tag::DNS => {
                let qtype = r.u16()?;
                let has_rcode = r.boolean("DNS rcode presence")?;
                let rcode = r.u8()?;
                let is_mdns = r.boolean("mDNS flag")?;
                if !has_rcode && rcode != 0 {
                    return Err(CodecError::BadValue {
                        field: "absent DNS rcode",
                        value: rcode as u64,
                    });
                }
                m.dns = Some(Box::new(Dns {
                    qtype,
                    rcode: has_rcode.then_some(rcode),
                    is_mdns,
                    ..Dns::default()
                }));
            }
            v1_tag::DNS_QUERY => section(&mut m.dns, t)?.query = Some(r.string(t)?),
            v1_tag::DNS_ANSWERS => {
                let dns = section(&mut m.dns, t)?;
                dns.answers = r.list(|r| r.string(t))?;
            }

            v1_tag::DHCP => {
                let msg_type = r.u8()?;
                m.dhcp = Some(Box::new(Dhcp {
                    msg_type,
                    ..Dhcp::default()
                }));
            }
            v1_tag::DHCP_HOSTNAME => section(&mut m.dhcp, t)?.hostname = Some(r.string(t)?),
            v1_tag::DHCP_VENDOR_CLASS => section(&mut m.dhcp, t)?.vendor_class = Some(r.string(t)?),

            v1_tag::SSH => m.ssh = Some(Box::new(Ssh::default())),
            v1_tag::SSH_CLIENT_BANNER => section(&mut m.ssh, t)?.client_banner = Some(r.string(t)?),
            v1_tag::SSH_SERVER_BANNER => section(&mut m.ssh, t)?.server_banner = Some(r.string(t)?),
            v1_tag::SSH_HASSH_CLIENT => section(&mut m.ssh, t)?.hassh_client = Some(r.string(t)?),
            v1_tag::SSH_HASSH_SERVER => section(&mut m.ssh, t)?.hassh_server = Some(r.string(t)?),

            v1_tag::EXTRA => m.extra = r.list(|r| Ok((r.string(t)?, r.string(t)?)))?,

            _ => {
                return Err(CodecError::BadMeta {
                    tag: t,
                    problem: "is unknown",
                })
            }
        }
    }
    Ok(m)
}

/// The section a meta string belongs to; its tag, lower and so read earlier, created it.
fn section<T>(s: &mut Option<Box<T>>, tag: u8) -> Result<&mut T, CodecError> {
    s.as_deref_mut().ok_or(CodecError::BadMeta {
        tag,
        problem: "comes without its section",
    })
}

/// Bounds-checked little-endian reads over one record.
struct Reader<'a> {
    /// The record, exactly as long as its length field says.
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.rec.len())
            .ok_or(CodecError::Overrun)?;
        let bytes = &self.rec[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// An unsigned LEB128 number of at most 10 bytes that fits in a u64.
    fn varint(&mut self) -> Result<u64, CodecError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = (b & 0x7f) as u64;
            if i == 9 && bits > 1 {
                break;
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::BadValue {
            field: "varint",
            value: v,
        })
    }

    fn boolean(&mut self, field: &'static str) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(CodecError::BadValue {
                field,
                value: n as u64,
            }),
        }
    }

    /// An enum stored as its number.
    fn number<T>(
        &mut self,
        field: &'static str,
        from_number: impl FnOnce(u8) -> Option<T>,
    ) -> Result<T, CodecError> {
        let n = self.u8()?;
        from_number(n).ok_or(CodecError::BadValue {
            field,
            value: n as u64,
        })
    }

    /// A u16 length and that many UTF-8 bytes (allocated only once they are known to be there).
    fn string(&mut self, tag: u8) -> Result<String, CodecError> {
        let len = self.u16()? as usize;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| CodecError::BadUtf8 { tag })
    }

    /// A u16 count and that many items.
    fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, CodecError>,
    ) -> Result<Vec<T>, CodecError> {
        let count = self.u16()?;
        // Grown item by item rather than reserved from the count: a corrupt count must not
        // claim memory the record's bytes cannot fill.
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(item(self)?);
        }
        Ok(items)
    }

    fn at_end(&self) -> bool {
        self.pos == self.rec.len()
    }

    /// The record's length, once every byte of it has been read.
    fn finish(&self) -> Result<usize, CodecError> {
        match self.rec.len() - self.pos {
            0 => Ok(self.rec.len()),
            left => Err(CodecError::TrailingBytes(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_export::{FlowWriter, Format};
    use sonde_flow::flow::SeqTrack;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut x = [0; 16];
        x[..4].copy_from_slice(&a);
        x
    }

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<Ipv6Addr>().unwrap().octets()
    }

    /// A TCP flow over IPv4 as the engine hands it over, with per-packet state that the
    /// codec must not store.
    fn tcp_v4() -> FlowRecord {
        let flow = Flow {
            key: FlowKey {
                addr_a: v4([10, 0, 0, 1]),
                addr_b: v4([192, 168, 1, 20]),
                port_a: 443,
                port_b: 51234,
                proto: 6,
                ip_version: 4,
                vlan: 0,
            },
            first_ns: 1_700_000_000_123_456_789,
            last_ns: 1_700_000_042_987_654_321,
            record_start_ns: 1_700_000_000_123_456_789,
            pkts: [12, 9],
            bytes: [9000, 1200],
            tcp_flags: [0x1b, 0x1b],
            tcp_state: TcpState::Closed,
            client_is_a: false,
            mac_a: [0x00, 0x1b, 0x21, 0x3c, 0x4d, 0x5e],
            mac_b: [0xf0, 0x9f, 0xc2, 0x11, 0x22, 0x33],
            tos: 0x28,
            // Per-packet state.
            pending_bytes: [5, 6],
            pending_pkts: [1, 2],
            hosts: [3, 4],
            live: true,
            has_ext: true,
            last_was_retransmit: true,
            ..Flow::default()
        };
        let ext = FlowExt {
            rtt_client_us: 1234,
            rtt_server_us: 20_500,
            retransmits: [2, 0],
            out_of_order: [0, 1],
            // Per-packet state.
            syn_ns: 7,
            synack_ns: 8,
            seq: [SeqTrack {
                next_seq: 99,
                advanced_at: 5,
            }; 2],
            ..FlowExt::default()
        };
        FlowRecord {
            ext,
            flow,
            reason: EndReason::TcpEnd,
            meta: None,
            exporter: None,
        }
    }

    /// ICMPv6 in a tunnel, fragmented, with the highest number of every enum (of version 1:
    /// CAPWAP came later; `enum_numbers_map_back` checks its number).
    fn icmp_v6() -> FlowRecord {
        let mut r = tcp_v4();
        r.flow.key = FlowKey {
            addr_a: v6("2001:db8::1"),
            addr_b: v6("2001:db8:ffff::42"),
            port_a: 0,
            port_b: 0,
            proto: 58,
            ip_version: 6,
            vlan: 4094,
        };
        r.flow.icmp_type_code = 0x8000;
        r.flow.tunnel = Tunnel::IpInIp;
        r.flow.tcp_state = TcpState::Closed;
        r.flow.fragments = 3;
        r.flow.client_is_a = true;
        r.flow.dpi_done = true;
        r.flow.l7 = L7 {
            proto: Proto::ICMPV6,
            app: Proto(0),
            category: Category::IotScada,
            confidence: Confidence::Port,
        };
        r.reason = EndReason::EndOfCapture;
        r
    }

    /// A flow received from a NetFlow exporter.
    fn collected() -> FlowRecord {
        let mut r = tcp_v4();
        r.flow.exporter = 1;
        r.ext.in_if = 3;
        r.ext.out_if = 70_000;
        r.flow.sampling = 100;
        r.flow.tunnel = Tunnel::Vxlan;
        r.reason = EndReason::ActiveTimeout;
        r.exporter = Some(("192.0.2.7:2055".parse().unwrap(), 7));
        r
    }

    /// DPI done, every meta field set, values as hostile as the wire allows.
    // Every section ends with `..default()`: fields added later are covered by the
    // every-field test through the table, so a new field needs no edit here.
    #[allow(clippy::needless_update)]
    fn full_meta() -> FlowRecord {
        let mut r = tcp_v4();
        r.flow.key.ip_version = 6;
        r.flow.key.addr_a = v6("fe80::1");
        r.flow.key.addr_b = v6("2a00:1450:4007:80c::200e");
        r.flow.dpi_done = true;
        r.flow.l7 = L7 {
            proto: Proto::TLS,
            app: Proto::GOOGLE,
            category: Category::Web,
            confidence: Confidence::Dpi,
        };
        r.meta = Some(Box::new(Meta {
            server_name: Some("<script>alert(1)</script>".into()),
            http: Some(Box::new(Http {
                method: Some("GET".into()),
                url: Some("/a,b?q=\"quote\"&x=<y>".into()),
                host: Some("exämple.Ünïcode.test".into()),
                user_agent: Some("=cmd|' /C calc'!A0".into()),
                content_type: Some("text/html; charset=\"utf-8\"".into()),
                status: 404,
                ..Http::default()
            })),
            tls: Some(Box::new(Tls {
                client_version: 0x0304,
                server_version: 0x0303,
                sni: Some("日本語.example".into()),
                alpn: Some("h2,http/1.1".into()),
                ja3: Some("e7d705a3286e19ea42f587b344ee6865".into()),
                ja4: Some("t13d1516h2_8daaf6152771_e5627efa2ab1".into()),
                ja3s: Some("15af977ce25de452b96affa2addb1036".into()),
                cert_names: Some("*.google.com,google.com,\"x\",😀".into()),
                cipher: 0x1301,
                ..Tls::default()
            })),
            quic_version: Some(0x0000_0001),
            dns: Some(Box::new(Dns {
                query: Some("\\back\\slash.example".into()),
                qtype: 28,
                rcode: Some(3),
                answers: vec!["2001:db8::7".into(), "cname,with,commas".into(), "".into()],
                is_mdns: true,
                ..Dns::default()
            })),
            dhcp: Some(Box::new(Dhcp {
                hostname: Some("Ålesund-PC".into()),
                vendor_class: Some("MSFT 5.0".into()),
                msg_type: 8,
                ..Dhcp::default()
            })),
            ssh: Some(Box::new(Ssh {
                client_banner: Some("SSH-2.0-OpenSSH_9.6 <b>".into()),
                server_banner: Some("SSH-2.0-dropbear".into()),
                hassh_client: Some("ec7378c1a92f5a8dde7e8b7a1ddf33d1".into()),
                hassh_server: Some("b12d2871a1189eff20364cf5333619ee".into()),
                ..Ssh::default()
            })),
            banner: Some("220 smtp.example ESMTP \"ready\" — ok".into()),
            extra: Vec::new(),
            // A collected record's AS numbers (one of them past 16 bits).
            src_as: 15169,
            dst_as: 4_200_000_000,
        }));
        r
    }

    /// A collected flow with fields sonde does not interpret, one of them a name sonde has.
    fn with_extra() -> FlowRecord {
        let mut r = collected();
        r.exporter = Some((
            SocketAddr::V6(SocketAddrV6::new(
                "fe80::9".parse().unwrap(),
                4739,
                0x12345,
                3,
            )),
            0xdead_beef,
        ));
        r.flow.dpi_done = true;
        r.flow.l7.proto = Proto::HTTP;
        r.meta = Some(Box::new(Meta {
            server_name: Some("a.example".into()),
            extra: vec![
                ("SERVER_NAME".into(), "shadowed".into()),
                ("IE0.1f".into(), "0a0b".into()),
                ("</script><b>\"k\"".into(), "v,\u{1}=1+2".into()),
                ("".into(), "".into()),
            ],
            ..Meta::default()
        }));
        r
    }

    /// Sections present but empty (not stored: no field to write, so they decode as absent),
    /// and an IPv4 key with bytes past the first four.
    fn odd() -> FlowRecord {
        let mut r = tcp_v4();
        r.flow.key.addr_b[15] = 1;
        r.meta = Some(Box::new(Meta {
            http: Some(Box::default()),
            tls: Some(Box::default()),
            dns: Some(Box::default()),
            dhcp: Some(Box::default()),
            ssh: Some(Box::default()),
            ..Meta::default()
        }));
        r
    }

    fn samples() -> Vec<FlowRecord> {
        let mut empty_meta = tcp_v4();
        empty_meta.meta = Some(Box::default());
        vec![
            tcp_v4(),
            icmp_v6(),
            collected(),
            full_meta(),
            with_extra(),
            odd(),
            empty_meta,
            FlowRecord {
                flow: Flow::default(),
                ext: FlowExt::default(),
                reason: EndReason::IdleTimeout,
                meta: None,
                exporter: None,
            },
        ]
    }

    fn encoded(r: &FlowRecord) -> Vec<u8> {
        let mut out = Vec::new();
        encode(r, &mut out);
        out
    }

    fn text(r: &FlowRecord, format: Format) -> String {
        let mut w = FlowWriter::new(Vec::new(), format);
        w.write(r).unwrap();
        String::from_utf8(w.into_inner()).unwrap()
    }

    /// What decoding must give back for `f`: the stored fields, the rest as documented.
    fn as_stored(f: &Flow) -> Flow {
        let new = Flow::default();
        Flow {
            record_start_ns: f.first_ns,
            pending_bytes: new.pending_bytes,
            pending_pkts: new.pending_pkts,
            hosts: new.hosts,
            live: false,
            has_ext: false,
            last_was_retransmit: new.last_was_retransmit,
            exporter: new.exporter,
            ..*f
        }
    }

    /// The same for the TCP and collector fields: all but the shard's own tracking.
    fn ext_as_stored(x: &FlowExt) -> FlowExt {
        let new = FlowExt::default();
        FlowExt {
            syn_ns: new.syn_ns,
            synack_ns: new.synack_ns,
            seq: new.seq,
            ..*x
        }
    }

    fn summary_of(r: &FlowRecord) -> Summary {
        let f = &r.flow;
        Summary {
            first_ms: f.first_ns / 1_000_000,
            last_ms: f.last_ns / 1_000_000,
            key: f.key,
            l7_proto: f.l7.proto.0,
            l7_app: f.l7.app.0,
            bytes: f.bytes[0] + f.bytes[1],
            packets: f.pkts[0] + f.pkts[1],
            client_is_a: f.client_is_a,
        }
    }

    fn assert_same_record(original: &FlowRecord, decoded: &FlowRecord) {
        assert_eq!(
            text(original, Format::Json),
            text(decoded, Format::Json),
            "JSON"
        );
        assert_eq!(
            text(original, Format::Csv),
            text(decoded, Format::Csv),
            "CSV"
        );
        // Debug covers every Flow field, so a field added to Flow and not stored fails here.
        assert_eq!(
            format!("{:?}", as_stored(&original.flow)),
            format!("{:?}", decoded.flow)
        );
        assert_eq!(ext_as_stored(&original.ext), decoded.ext);
        assert_eq!(original.reason, decoded.reason);
        assert_eq!(
            original.meta.as_deref().map(meta_as_stored),
            decoded.meta.as_deref().cloned()
        );
        assert_eq!(original.exporter, decoded.exporter);
    }

    /// What version 2 keeps of a record's metadata: every field the table reads, and the
    /// extra pairs (an empty section has no field, so it is not kept).
    fn meta_as_stored(m: &Meta) -> Meta {
        let mut kept = Meta {
            extra: m.extra.clone(),
            ..Meta::default()
        };
        for f in meta::FIELDS {
            if let Some(v) = (f.get)(m) {
                assert!((f.set)(&mut kept, v), "{}", f.key);
            }
        }
        kept
    }

    #[test]
    fn metadata_with_every_field_round_trips_exactly() {
        for r in [full_meta(), with_extra()] {
            assert_eq!(decode(&encoded(&r)).unwrap().0.meta, r.meta);
        }
        // Every field of the table, set through its own setter.
        let mut m = Meta::default();
        let list = ["a".to_string(), "b,c".to_string()];
        for f in meta::FIELDS {
            let v = match f.kind {
                Kind::WireText => Value::Text(f.key),
                Kind::WireList => Value::List(&list),
                Kind::Flag => Value::Number(1),
                Kind::Code | Kind::Duration => Value::Number(200),
            };
            assert!((f.set)(&mut m, v), "{}", f.key);
        }
        let mut r = tcp_v4();
        r.meta = Some(Box::new(m));
        assert_eq!(decode(&encoded(&r)).unwrap().0.meta, r.meta);
    }

    /// Records written by layout version 1 (the samples below, encoded by the build before
    /// version 2) still decode to the same records.
    #[test]
    fn version_1_records_still_decode() {
        let v1: &[u8] = include_bytes!("v1_records.bin");
        let mut at = 0;
        for r in samples() {
            assert_eq!(v1[at + 4], 1, "version byte");
            let (decoded, used) = decode(&v1[at..]).unwrap();
            let (summary, _) = decode_summary(&v1[at..]).unwrap();
            assert_eq!(summary, summary_of(&r));
            assert_eq!(
                format!("{:?}", as_stored(&r.flow)),
                format!("{:?}", decoded.flow)
            );
            assert_eq!(ext_as_stored(&r.ext), decoded.ext);
            // Version 1 kept empty sections; the record is exactly what was written (the AS
            // numbers came after it: the samples have them, version 1's bytes do not).
            let mut want = r.meta.clone();
            if let Some(m) = want.as_deref_mut() {
                (m.src_as, m.dst_as) = (0, 0);
            }
            assert_eq!(decoded.meta, want);
            assert_eq!(decoded.exporter, r.exporter);
            at += used;
        }
        assert_eq!(at, v1.len());
    }

    #[test]
    fn a_meta_value_the_encoder_cannot_write_is_an_error() {
        // HTTP status 0 means "none": the encoder never writes it, so the decoder refuses it
        // (a record that decodes re-encodes to the same bytes).
        let mut r = tcp_v4();
        r.meta = Some(Box::new(Meta {
            http: Some(Box::new(Http {
                status: 200,
                ..Http::default()
            })),
            ..Meta::default()
        }));
        let mut enc = encoded(&r);
        let n = enc.len();
        assert_eq!(
            &enc[n - 3..],
            &[meta::field("HTTP_RET_CODE").unwrap().tag, 0xc8, 0x01]
        );
        enc[n - 2] = 0;
        enc[n - 1] = 0;
        enc.pop();
        enc[..4].copy_from_slice(&(n as u32 - 1).to_le_bytes());
        assert!(matches!(
            decode(&enc).unwrap_err(),
            CodecError::BadMeta { problem, .. } if problem.contains("range")
        ));
    }

    #[test]
    fn round_trip_gives_the_same_output() {
        for r in samples() {
            let mut buf = vec![0xAA; 3]; // encode appends
            encode(&r, &mut buf);
            let enc = &buf[3..];
            let (decoded, used) = decode(enc).unwrap();
            assert_eq!(used, enc.len());
            assert_same_record(&r, &decoded);
            assert_eq!(decode_summary(enc).unwrap(), (summary_of(&r), enc.len()));
        }
        // The hostile strings did reach the outputs, escaped.
        let json = text(&decode(&encoded(&full_meta())).unwrap().0, Format::Json);
        assert!(
            json.contains("\"SERVER_NAME\":\"\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\"")
        );
        assert!(json.contains("日本語.example"));
    }

    #[test]
    fn typical_record_size() {
        // IPv4 TCP without meta: the smallest record.
        assert_eq!(encoded(&tcp_v4()).len(), MIN_RECORD_LEN);
        assert_eq!(MIN_RECORD_LEN, 124);
        assert_eq!(encoded(&collected()).len(), 124 + 12 + 11);
    }

    #[test]
    fn concatenated_records_decode_in_sequence() {
        let records = samples();
        let mut buf = Vec::new();
        for r in &records {
            encode(r, &mut buf);
        }
        let (mut at, mut summaries_at) = (0, 0);
        for r in &records {
            let (decoded, used) = decode(&buf[at..]).unwrap();
            assert_same_record(r, &decoded);
            at += used;
            let (summary, used) = decode_summary(&buf[summaries_at..]).unwrap();
            assert_eq!(summary, summary_of(r));
            summaries_at += used;
        }
        assert_eq!((at, summaries_at), (buf.len(), buf.len()));
    }

    #[test]
    fn every_truncation_is_an_error() {
        for r in samples() {
            let enc = encoded(&r);
            for cut in 0..enc.len() {
                assert!(decode(&enc[..cut]).is_err(), "cut at {cut}");
                assert!(decode_summary(&enc[..cut]).is_err(), "cut at {cut}");
                // The same cut with a length field that agrees, so the fields themselves are
                // cut: an error, or (cut between meta fields) a shorter valid record.
                let mut short = enc[..cut].to_vec();
                if cut >= 4 {
                    short[..4].copy_from_slice(&(cut as u32).to_le_bytes());
                }
                if let Ok((_, used)) = decode(&short) {
                    assert_eq!(used, cut);
                }
                let _ = decode_summary(&short);
            }
        }
    }

    #[test]
    fn random_mutations_never_panic() {
        let encodings: Vec<Vec<u8>> = samples().iter().map(encoded).collect();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            // xorshift64
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut decoded_ok = 0;
        for _ in 0..5000 {
            let mut buf = encodings[next() as usize % encodings.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = next() as usize % buf.len();
                if next() % 2 == 0 {
                    buf[at] ^= 1 << (next() % 8);
                } else {
                    buf[at] = next() as u8;
                }
            }
            let _ = decode_summary(&buf);
            if let Ok((r, used)) = decode(&buf) {
                assert!(used <= buf.len());
                // Whatever decodes re-encodes to the same record.
                let again = decode(&encoded(&r)).unwrap().0;
                assert_eq!(format!("{r:?}"), format!("{again:?}"));
                decoded_ok += 1;
            }
        }
        // Most mutations hit counters, which any value is valid for.
        assert!(decoded_ok > 1000, "{decoded_ok}");
        // Plain garbage, some of it with a plausible length and version.
        for _ in 0..2000 {
            let len = next() as usize % 400;
            let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 5 && next() % 2 == 0 {
                buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
                buf[4] = VERSION;
            }
            let _ = decode(&buf);
            let _ = decode_summary(&buf);
        }
    }

    #[test]
    fn corrupt_fields_give_clear_errors() {
        let enc = encoded(&tcp_v4());
        let tail = PREFIX_LEN + 8;
        let patched = |at: usize, v: u8| {
            let mut b = enc.clone();
            b[at] = v;
            decode(&b).unwrap_err()
        };
        assert_eq!(patched(4, 3), CodecError::UnsupportedVersion(3));
        assert_eq!(patched(4, 0), CodecError::UnsupportedVersion(0));
        assert_eq!(
            patched(5, 0x80),
            CodecError::BadValue {
                field: "flags",
                value: 0x80
            }
        );
        assert_eq!(
            patched(tail, 9),
            CodecError::BadValue {
                field: "end reason",
                value: 9
            }
        );
        assert_eq!(
            patched(tail + 4, 25),
            CodecError::BadValue {
                field: "L7 category",
                value: 25
            }
        );
        assert_eq!(patched(0, 0), CodecError::BadLength(0));
        let mut huge = enc.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge).unwrap_err(), CodecError::BadLength(u32::MAX));
        let mut longer = enc.clone();
        longer[..4].copy_from_slice(&(enc.len() as u32 + 2).to_le_bytes());
        longer.extend_from_slice(&[0, 0]);
        assert_eq!(decode(&longer).unwrap_err(), CodecError::TrailingBytes(2));

        // A meta string that is not UTF-8, and meta fields out of order.
        let mut r = tcp_v4();
        r.meta = Some(Box::new(Meta {
            server_name: Some("ab".into()),
            banner: Some("cd".into()),
            ..Meta::default()
        }));
        let enc = encoded(&r);
        let mut bad = enc.clone();
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert_eq!(
            decode(&bad).unwrap_err(),
            CodecError::BadUtf8 {
                tag: meta::field("L7_BANNER").unwrap().tag
            }
        );
        let mut swapped = enc.clone();
        swapped[n - 5] = meta::field("SERVER_NAME").unwrap().tag; // the banner's tag
        assert!(matches!(
            decode(&swapped).unwrap_err(),
            CodecError::BadMeta { tag: 1, .. }
        ));
        for e in [
            CodecError::Truncated {
                needed: 124,
                available: 3,
            },
            CodecError::Overrun,
            CodecError::BadUtf8 { tag: 12 },
        ] {
            assert!(e.to_string().len() > 20, "{e}");
        }
    }

    #[test]
    fn overlong_strings_and_lists_are_cut() {
        // 'é' is two bytes and straddles the 65535-byte limit.
        let long = format!("{}é{}", "a".repeat(MAX_STR_LEN - 1), "b".repeat(10));
        let mut r = tcp_v4();
        r.meta = Some(Box::new(Meta {
            server_name: Some(long.clone()),
            // Far more than MAX_RECORD_LEN in all.
            extra: (0..300)
                .map(|i| (format!("k{i}"), "v".repeat(65_000)))
                .collect(),
            ..Meta::default()
        }));
        let enc = encoded(&r);
        assert!(enc.len() <= MAX_RECORD_LEN);
        let (d, used) = decode(&enc).unwrap();
        assert_eq!(used, enc.len());
        let m = d.meta.unwrap();
        assert_eq!(m.server_name.as_deref(), Some(&long[..MAX_STR_LEN - 1]));
        let original = &r.meta.as_ref().unwrap().extra;
        assert!(m.extra.len() > 200 && m.extra.len() < original.len());
        assert_eq!(m.extra[..], original[..m.extra.len()]);
    }

    #[test]
    fn enum_numbers_map_back() {
        let count = |f: &dyn Fn(u8) -> Option<u8>| {
            (0..=255u8)
                .filter(|&n| f(n).inspect(|&m| assert_eq!(m, n)).is_some())
                .count()
        };
        assert_eq!(count(&|n| TcpState::from_number(n).map(|s| s as u8)), 6);
        assert_eq!(count(&|n| Tunnel::from_number(n).map(|t| t as u8)), 6);
        assert_eq!(count(&|n| Confidence::from_number(n).map(|c| c as u8)), 3);
        assert_eq!(count(&|n| Category::from_number(n).map(|c| c as u8)), 25);
    }
}
