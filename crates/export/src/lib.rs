//! Flow and host records as text: JSON lines with nProbe/ntopng key names, or CSV.
//!
//! Why this crate exists: every sink that speaks text (files, later ZMQ and Kafka) must name
//! fields the way the ntop tools do, so their parsers and dashboards work unchanged. Records are
//! formatted into one reused `String` per writer; nothing here runs on the packet path (the
//! probe runs writers on their own thread).
//!
//! Direction follows nProbe: `SRC` is the flow's client, `IN_*` counts client→server and
//! `OUT_*` server→client. Bytes are IP bytes (header included), as in NetFlow.

pub mod ingest;
pub mod ntopng;
pub mod proto;
pub mod schema;
pub mod tlv;

use sonde_dpi::meta::Value;
use sonde_flow::{Flow, FlowRecord, Host};
use sonde_geo::GeoDb;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

/// Column order for CSV (and key order for JSON): the keys of [`schema::FIELDS`].
pub const FLOW_COLUMNS: &[&str] = &schema::keys();

pub fn format_addr(out: &mut String, addr: &[u8; 16], ip_version: u8) {
    if ip_version == 4 {
        // Four small numbers from a table, into one buffer pushed once (a flow record has
        // two addresses, and the writer runs once per record).
        let mut text = [0u8; 15];
        let mut n = 0;
        for (i, &octet) in addr[..4].iter().enumerate() {
            if i > 0 {
                text[n] = b'.';
                n += 1;
            }
            let [len, digits @ ..] = OCTETS[octet as usize];
            // Three bytes always fit: at most 12 are used before the last octet.
            text[n..n + 3].copy_from_slice(&digits);
            n += len as usize;
        }
        // SAFETY: only ASCII digits and dots were written.
        out.push_str(unsafe { std::str::from_utf8_unchecked(&text[..n]) });
    } else {
        let _ = write!(out, "{}", Ipv6Addr::from(*addr));
    }
}

/// The address of a flow or host key as an `IpAddr`.
pub fn ip_addr(addr: &[u8; 16], ip_version: u8) -> IpAddr {
    if ip_version == 4 {
        IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*addr))
    }
}

/// Each byte in decimal: its length, then its digits (unused ones 0).
const OCTETS: [[u8; 4]; 256] = {
    let mut t = [[0u8; 4]; 256];
    let mut i = 0;
    while i < 256 {
        let (h, d, u) = ((i / 100) as u8, (i / 10 % 10) as u8, (i % 10) as u8);
        t[i] = if i >= 100 {
            [3, b'0' + h, b'0' + d, b'0' + u]
        } else if i >= 10 {
            [2, b'0' + d, b'0' + u, 0]
        } else {
            [1, b'0' + u, 0, 0]
        };
        i += 1;
    }
    t
};

pub fn format_mac(out: &mut String, m: &[u8; 6]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [b':'; 17];
    for (i, b) in m.iter().enumerate() {
        text[3 * i] = HEX[(b >> 4) as usize];
        text[3 * i + 1] = HEX[(b & 15) as usize];
    }
    // SAFETY: only ASCII hex digits and colons are in it.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&text) });
}

/// Appends `n` in decimal.
#[inline]
fn push_number(out: &mut String, n: u64) {
    if n < 10 {
        // Most of a record's counters are 0 or 1 (no retransmission, no fragment, one packet).
        out.push((b'0' + n as u8) as char);
    } else {
        out.push_str(itoa::Buffer::new().format(n));
    }
}

/// Appends microseconds as milliseconds with three decimals (what `{:.3}` writes of
/// `us / 1000.0`, without the float formatting).
fn push_millis(out: &mut String, us: u32) {
    push_number(out, (us / 1000) as u64);
    let frac = us % 1000;
    let text = [
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ];
    // SAFETY: a dot and three ASCII digits.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&text) });
}

/// What a field's value is, for the writers: a JSON number, or a string to escape. A
/// collected record's fields sonde did not interpret have their names from the wire too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Number,
    /// A string that may hold anything (it came off the wire, or from a file): escaped.
    Text,
    /// A string sonde wrote itself from numbers or its own names (an address, a MAC, a
    /// label): nothing in it needs an escape, so none is looked for.
    Plain,
    /// A producer's key and value, both escaped.
    Foreign,
}

/// A flow seen from the client's side: the values every output format shares.
struct View<'a> {
    f: &'a Flow,
    c: usize,
}

impl<'a> View<'a> {
    fn of(f: &'a Flow) -> View<'a> {
        View {
            f,
            c: f.client_dir(),
        }
    }
    fn s(&self) -> usize {
        1 - self.c
    }
    fn client_addr(&self) -> &'a [u8; 16] {
        self.f.ends().client_addr
    }
    fn server_addr(&self) -> &'a [u8; 16] {
        self.f.ends().server_addr
    }
    fn ports(&self) -> (u16, u16) {
        let e = self.f.ends();
        (e.client_port, e.server_port)
    }
    fn macs(&self) -> ([u8; 6], [u8; 6]) {
        self.f.macs()
    }
}

/// A field's name and, for the schema's own fields, its JSON key as written after another
/// field, spelled out at compile time (`,"IN_PKTS":`; `,"L7_PROTO_NAME":"` for a string): the
/// JSON writer copies one constant instead of building each key from pieces.
#[derive(Clone, Copy)]
struct Key {
    name: &'static str,
    /// `,"NAME":`, or "" for a name only known at run time (metadata fields).
    json: &'static str,
    /// `,"NAME":"`, or "".
    json_str: &'static str,
}

macro_rules! key {
    ($name:literal) => {
        Key {
            name: $name,
            json: concat!(",\"", $name, "\":"),
            json_str: concat!(",\"", $name, "\":\""),
        }
    };
}

impl Key {
    fn named(name: &'static str) -> Key {
        Key {
            name,
            json: "",
            json_str: "",
        }
    }
}

/// Where a record's fields go, in [`FLOW_COLUMNS`] order: [`JsonFields`] writes them straight
/// into a JSON line, [`Callback`] hands each to a closure as text (CSV, tests).
trait Fields {
    /// A value `fmt` appends to the buffer it is given.
    fn formatted(&mut self, key: Key, cell: Cell, fmt: impl FnOnce(&mut String));
    /// A field a producer sent that sonde did not interpret: name and value are escaped.
    fn foreign(&mut self, name: &str, value: &str);

    fn value(&mut self, key: Key, cell: Cell, v: &str) {
        self.formatted(key, cell, |b| b.push_str(v));
    }

    #[inline(always)]
    fn number(&mut self, key: Key, n: u64) {
        self.formatted(key, Cell::Number, |b| push_number(b, n));
    }
}

/// Writes fields into a JSON object under construction: each key is its [`Key::json`]
/// constant, each value formatted in place (only strings that may need an escape go through
/// a scratch buffer).
struct JsonFields<'a> {
    line: &'a mut String,
    scratch: &'a mut String,
}

impl JsonFields<'_> {
    #[inline(always)]
    fn open(&mut self, key: Key, quoted: bool) {
        let constant = if quoted { key.json_str } else { key.json };
        if !constant.is_empty() {
            self.line.push_str(constant);
        } else {
            self.line.push_str(",\"");
            self.line.push_str(key.name);
            self.line.push_str(if quoted { "\":\"" } else { "\":" });
        }
    }
}

impl Fields for JsonFields<'_> {
    #[inline(always)]
    fn formatted(&mut self, key: Key, cell: Cell, fmt: impl FnOnce(&mut String)) {
        match cell {
            Cell::Number | Cell::Plain => {
                let quoted = cell == Cell::Plain;
                self.open(key, quoted);
                fmt(self.line);
                if quoted {
                    self.line.push('"');
                }
            }
            Cell::Text | Cell::Foreign => {
                // Escaped from a buffer of its own: the escape scan reads it whole.
                let mut text = std::mem::take(self.scratch);
                text.clear();
                fmt(&mut text);
                self.value(key, cell, &text);
                *self.scratch = text;
            }
        }
    }

    #[inline(always)]
    fn value(&mut self, key: Key, cell: Cell, v: &str) {
        match cell {
            Cell::Number => {
                self.open(key, false);
                self.line.push_str(v);
            }
            Cell::Plain => {
                self.open(key, true);
                self.line.push_str(v);
                self.line.push('"');
            }
            Cell::Text | Cell::Foreign => {
                self.open(key, true);
                push_json_str(self.line, v);
                self.line.push('"');
            }
        }
    }

    fn foreign(&mut self, name: &str, value: &str) {
        self.line.push_str(",\"");
        push_json_str(self.line, name);
        self.line.push_str("\":\"");
        push_json_str(self.line, value);
        self.line.push('"');
    }
}

/// Hands each field to a closure as `(name, value, cell)`, the value formatted into a reused
/// buffer.
struct Callback<F> {
    buf: String,
    field: F,
}

impl<F: FnMut(&str, Option<&str>, Cell)> Fields for Callback<F> {
    fn formatted(&mut self, key: Key, cell: Cell, fmt: impl FnOnce(&mut String)) {
        self.buf.clear();
        fmt(&mut self.buf);
        (self.field)(key.name, Some(&self.buf), cell);
    }

    fn value(&mut self, key: Key, cell: Cell, v: &str) {
        (self.field)(key.name, Some(v), cell);
    }

    fn foreign(&mut self, name: &str, value: &str) {
        (self.field)(name, Some(value), Cell::Foreign);
    }
}

/// Passes fields on, noting their names (to leave out a producer's fields of the same name).
struct Noting<'a, S> {
    inner: &'a mut S,
    names: Vec<&'static str>,
}

impl<S: Fields> Fields for Noting<'_, S> {
    fn formatted(&mut self, key: Key, cell: Cell, fmt: impl FnOnce(&mut String)) {
        self.names.push(key.name);
        self.inner.formatted(key, cell, fmt);
    }

    fn foreign(&mut self, name: &str, value: &str) {
        self.inner.foreign(name, value);
    }
}

/// Appends one value per column of [`FLOW_COLUMNS`] via `field(name, value, cell)` (the
/// columns that do not apply, such as IPv6 addresses of an IPv4 flow, are left out).
fn flow_fields(r: &FlowRecord, geo: Option<&GeoDb>, field: impl FnMut(&str, Option<&str>, Cell)) {
    record_fields(
        r,
        geo,
        &mut Callback {
            buf: String::with_capacity(48),
            field,
        },
    );
}

/// A record's fields, sonde's own and then a producer's others, into `out`.
#[inline(always)]
fn record_fields(r: &FlowRecord, geo: Option<&GeoDb>, out: &mut impl Fields) {
    match r.meta.as_deref() {
        Some(m) if !m.extra.is_empty() => {
            // A collected flow with fields sonde did not interpret: they follow, except the
            // names the record already has (a producer's SERVER_NAME, say, when sonde has one).
            let mut noting = Noting {
                inner: out,
                names: Vec::new(),
            };
            own_fields(r, geo, &mut noting);
            let seen = noting.names;
            for (k, v) in &m.extra {
                if !seen.iter().any(|n| n == k) {
                    out.foreign(k, v);
                }
            }
        }
        _ => own_fields(r, geo, out),
    }
}

/// The fields sonde itself knows for a record (their names are the schema's: no escaping).
#[inline(always)]
fn own_fields(r: &FlowRecord, geo: Option<&GeoDb>, out: &mut impl Fields) {
    let f = &r.flow;
    let x = &r.ext;
    let v = View::of(f);
    let (c, s) = (v.c, v.s());
    let ip_version = f.key.ip_version;
    let (src, dst) = (v.client_addr(), v.server_addr());
    if ip_version == 4 {
        out.formatted(key!("IPV4_SRC_ADDR"), Cell::Plain, |b| {
            format_addr(b, src, 4)
        });
        out.formatted(key!("IPV4_DST_ADDR"), Cell::Plain, |b| {
            format_addr(b, dst, 4)
        });
    } else {
        out.formatted(key!("IPV6_SRC_ADDR"), Cell::Plain, |b| {
            format_addr(b, src, 6)
        });
        out.formatted(key!("IPV6_DST_ADDR"), Cell::Plain, |b| {
            format_addr(b, dst, 6)
        });
    }
    let (sport, dport) = v.ports();
    let ms = |ns: u64| ns / 1_000_000;
    out.number(key!("L4_SRC_PORT"), sport as u64);
    out.number(key!("L4_DST_PORT"), dport as u64);
    out.number(key!("PROTOCOL"), f.key.proto as u64);
    out.number(key!("IP_PROTOCOL_VERSION"), ip_version as u64);
    out.number(key!("VLAN_ID"), f.key.vlan as u64);
    out.number(key!("IN_PKTS"), f.pkts[c]);
    out.number(key!("IN_BYTES"), f.bytes[c]);
    out.number(key!("OUT_PKTS"), f.pkts[s]);
    out.number(key!("OUT_BYTES"), f.bytes[s]);
    out.number(key!("FIRST_SWITCHED"), f.first_ns / 1_000_000_000);
    out.number(key!("LAST_SWITCHED"), f.last_ns / 1_000_000_000);
    out.number(key!("FLOW_START_MILLISECONDS"), ms(f.first_ns));
    out.number(key!("FLOW_END_MILLISECONDS"), ms(f.last_ns));
    out.number(key!("TCP_FLAGS"), (f.tcp_flags[0] | f.tcp_flags[1]) as u64);
    out.number(key!("CLIENT_TCP_FLAGS"), f.tcp_flags[c] as u64);
    out.number(key!("SERVER_TCP_FLAGS"), f.tcp_flags[s] as u64);
    out.number(key!("RETRANSMITTED_IN_PKTS"), x.retransmits[c] as u64);
    out.number(key!("RETRANSMITTED_OUT_PKTS"), x.retransmits[s] as u64);
    out.number(key!("OOORDER_IN_PKTS"), x.out_of_order[c] as u64);
    out.number(key!("OOORDER_OUT_PKTS"), x.out_of_order[s] as u64);
    out.formatted(key!("CLIENT_NW_LATENCY_MS"), Cell::Number, |b| {
        push_millis(b, x.rtt_client_us)
    });
    out.formatted(key!("SERVER_NW_LATENCY_MS"), Cell::Number, |b| {
        push_millis(b, x.rtt_server_us)
    });
    out.number(key!("SRC_TOS"), f.tos as u64);
    out.number(key!("ICMP_TYPE"), f.icmp_type_code as u64);
    let (cm, sm) = v.macs();
    out.formatted(key!("IN_SRC_MAC"), Cell::Plain, |b| format_mac(b, &cm));
    out.formatted(key!("IN_DST_MAC"), Cell::Plain, |b| format_mac(b, &sm));
    out.value(key!("TUNNEL"), Cell::Plain, f.tunnel.name());
    out.number(key!("FRAGMENTS"), f.fragments as u64);
    out.value(key!("FLOW_END_REASON"), Cell::Plain, r.reason.name());
    if f.classified() {
        // With --local-networks only.
        out.value(key!("FLOW_DIRECTION"), Cell::Plain, f.direction().name());
    }
    if let Some(g) = geo {
        geo_fields(r, g, out);
    }
    if f.sampling > 0 {
        // A collected flow: where it came from.
        if let Some((addr, _)) = r.exporter {
            let k = if addr.is_ipv4() {
                key!("EXPORTER_IPV4_ADDRESS")
            } else {
                key!("EXPORTER_IPV6_ADDRESS")
            };
            out.formatted(k, Cell::Plain, |b| {
                let _ = write!(b, "{}", addr.ip());
            });
        }
        out.number(key!("INPUT_SNMP"), x.in_if as u64);
        out.number(key!("OUTPUT_SNMP"), x.out_if as u64);
        out.number(key!("SAMPLING_INTERVAL"), f.sampling as u64);
    }
    if f.dpi_done {
        let l7 = &f.l7;
        out.formatted(key!("L7_PROTO"), Cell::Plain, |b| l7.push_number(b));
        // Names may come from libndpi, whose list a user can extend: escaped.
        out.formatted(key!("L7_PROTO_NAME"), Cell::Text, |b| l7.push_name(b));
        out.value(key!("L7_CATEGORY"), Cell::Plain, l7.category.name());
        out.value(key!("L7_CONFIDENCE"), Cell::Plain, l7.confidence.name());
    }
    if let Some(m) = r.meta.as_deref() {
        meta_fields(m, out);
    }
}

/// With --geoip-dir: AS numbers (0 is "not known", as nProbe writes it), and countries and
/// cities where known.
fn geo_fields(r: &FlowRecord, g: &GeoDb, out: &mut impl Fields) {
    let v = View::of(&r.flow);
    let ip_version = r.flow.key.ip_version;
    let (a, b) = (
        ip_addr(v.client_addr(), ip_version),
        ip_addr(v.server_addr(), ip_version),
    );
    let (ga, gb) = (g.lookup(a), g.lookup(b));
    // An exporter's AS numbers (in the metadata, written with it) win: a router knows its BGP
    // table.
    let (src_as, dst_as) = r.meta.as_deref().map_or((0, 0), |m| (m.src_as, m.dst_as));
    if g.has_asns() {
        for (k, n, given) in [
            (key!("SRC_AS"), ga.asn, src_as),
            (key!("DST_AS"), gb.asn, dst_as),
        ] {
            if given == 0 {
                out.number(k, n as u64);
            }
        }
    }
    for (k, c) in [
        (key!("SRC_IP_COUNTRY"), ga.country),
        (key!("DST_IP_COUNTRY"), gb.country),
    ] {
        if let Some(c) = c {
            out.value(k, Cell::Text, c.as_str());
        }
    }
    if g.has_cities() {
        for (k, ip) in [(key!("SRC_IP_CITY"), a), (key!("DST_IP_CITY"), b)] {
            if let Some(city) = g.city(ip) {
                out.value(k, Cell::Text, city);
            }
        }
    }
}

/// What DPI learned (or a producer sent), every field of [`sonde_dpi::meta::FIELDS`] the
/// flow has. Strings from the wire are passed as they are (capped, no control characters):
/// the writers escape them.
fn meta_fields(m: &sonde_dpi::Meta, out: &mut impl Fields) {
    for fld in sonde_dpi::meta::FIELDS {
        let k = Key::named(fld.key);
        match (fld.get)(m) {
            None => {}
            Some(Value::Text(s)) => out.value(k, Cell::Text, s),
            Some(Value::Number(n)) => out.number(k, n),
            Some(Value::List(items)) => out.formatted(k, Cell::Text, |b| {
                // The items joined by commas.
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        b.push(',');
                    }
                    b.push_str(item);
                }
            }),
        }
    }
}

/// Bytes that start an escape in [`push_json_str`] (or may: 0xe2 starts U+2028 and U+2029).
static ESCAPE_START: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[0x7f] = true;
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t[0xe2] = true;
    t
};

/// Appends `v` as the inside of a JSON string. Besides what JSON requires, `<`, `>` and `&` are
/// escaped too: values that came off the wire stay inert if the line is embedded in HTML.
pub fn push_json_str(line: &mut String, v: &str) {
    // Runs of bytes that need no escape are copied whole (most values are all such bytes).
    // Every byte that starts an escape is ASCII or the first of U+2028/U+2029's three, so the
    // runs end on character boundaries.
    let b = v.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        // The common case: a table lookup per byte until one that may need an escape.
        if !ESCAPE_START[b[i] as usize] {
            i += 1;
            continue;
        }
        let c = b[i];
        let esc: Option<(&str, usize)> = match c {
            b'"' => Some(("\\\"", 1)),
            b'\\' => Some(("\\\\", 1)),
            b'<' => Some(("\\u003c", 1)),
            b'>' => Some(("\\u003e", 1)),
            b'&' => Some(("\\u0026", 1)),
            0xe2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xa8) => {
                Some(("\\u2028", 3))
            }
            0xe2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xa9) => {
                Some(("\\u2029", 3))
            }
            c if c < 0x20 || c == 0x7f => {
                line.push_str(&v[run..i]);
                let _ = write!(line, "\\u{:04x}", c);
                i += 1;
                run = i;
                continue;
            }
            _ => None,
        };
        match esc {
            Some((text, len)) => {
                line.push_str(&v[run..i]);
                line.push_str(text);
                i += len;
                run = i;
            }
            None => i += 1,
        }
    }
    line.push_str(&v[run..]);
}

/// Appends `v` as one CSV cell: quoted when it holds a separator, quote or line break, and with
/// a leading `'` when it starts like a spreadsheet formula (`=`, `+`, `-`, `@`), so a value from
/// the wire cannot run as a formula when the file is opened.
pub fn push_csv_cell(line: &mut String, v: &str) {
    let formula = v.starts_with(['=', '+', '-', '@']) && v.parse::<f64>().is_err();
    let quote = formula || v.contains([',', '"', '\n', '\r']);
    if quote {
        line.push('"');
    }
    if formula {
        line.push('\'');
    }
    for c in v.chars() {
        if c == '"' {
            line.push('"');
        }
        line.push(c);
    }
    if quote {
        line.push('"');
    }
}

/// A flow record as the NetFlow/IPFIX encoder takes it: client → server forward, as in the
/// JSON output. AS numbers are an exporter's when the record was collected with them, else
/// the GeoIP databases' (`geo`), else 0.
pub fn export_flow(r: &FlowRecord, geo: Option<&GeoDb>) -> sonde_flowproto::ExportFlow {
    let f = &r.flow;
    let v = View::of(f);
    let (s, c) = (v.s(), v.c);
    let (sport, dport) = v.ports();
    let (cm, sm) = v.macs();
    let l7 = &f.l7;
    sonde_flowproto::ExportFlow {
        ip_version: f.key.ip_version,
        src: *v.client_addr(),
        dst: *v.server_addr(),
        sport,
        dport,
        proto: f.key.proto,
        packets: f.pkts[c],
        bytes: f.bytes[c],
        rev_packets: f.pkts[s],
        rev_bytes: f.bytes[s],
        first_ms: f.first_ns / 1_000_000,
        last_ms: f.last_ns / 1_000_000,
        tcp_flags: f.tcp_flags[c],
        rev_tcp_flags: f.tcp_flags[s],
        tos: f.tos,
        vlan: f.key.vlan,
        src_mac: cm,
        dst_mac: sm,
        icmp_type_code: f.icmp_type_code,
        // One number: the application when known (nDPI numbers both in one space), else the
        // protocol; the name says both (`TLS.Google`).
        app_id: if l7.app.is_known() {
            l7.app.0
        } else {
            l7.proto.0
        } as u32,
        app_name: if f.dpi_done && (l7.proto.is_known() || l7.app.is_known()) {
            l7.name()
        } else {
            String::new()
        },
        end_reason: r.reason.ipfix_code(),
        src_as: as_of(r, geo, v.client_addr(), |m| m.src_as),
        dst_as: as_of(r, geo, v.server_addr(), |m| m.dst_as),
    }
}

/// Where a record's two ends are, as the columnar and binary exports store it: AS numbers
/// (an exporter's when collected with them, else the databases', else 0) and countries (the
/// databases', `None` when not placed or without `--geoip-dir`). `src` is the client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Places {
    pub src_as: u32,
    pub dst_as: u32,
    pub src_country: Option<sonde_geo::Country>,
    pub dst_country: Option<sonde_geo::Country>,
}

/// The [`Places`] of a record's client and server.
pub fn places(r: &FlowRecord, geo: Option<&GeoDb>) -> Places {
    let v = View::of(&r.flow);
    let country =
        |addr: &[u8; 16]| geo.and_then(|g| g.country(ip_addr(addr, r.flow.key.ip_version)));
    Places {
        src_as: as_of(r, geo, v.client_addr(), |m| m.src_as),
        dst_as: as_of(r, geo, v.server_addr(), |m| m.dst_as),
        src_country: country(v.client_addr()),
        dst_country: country(v.server_addr()),
    }
}

/// One end's AS number for export: the collected one, else the databases'.
fn as_of(
    r: &FlowRecord,
    geo: Option<&GeoDb>,
    addr: &[u8; 16],
    given: fn(&sonde_dpi::Meta) -> u32,
) -> u32 {
    match r.meta.as_deref().map_or(0, given) {
        0 => geo.map_or(0, |g| g.asn(ip_addr(addr, r.flow.key.ip_version))),
        n => n,
    }
}

/// Writes flow records to any `Write`, one line each.
pub struct FlowWriter<W: Write> {
    out: W,
    format: Format,
    /// The record being written; in batched mode ([`FlowWriter::batched`]), every record not
    /// yet handed to `out`.
    line: String,
    /// Batched mode: `line` goes to `out` once it holds this many bytes (0: after every record).
    batch_bytes: usize,
    header_done: bool,
    written: u64,
    geo: Option<Arc<GeoDb>>,
    /// JSON: a value that may need an escape, formatted before it is escaped into `line`.
    scratch: String,
    /// CSV: this record's cells, escaped, one after the other, and each column's range in it.
    csv_cells: String,
    csv_spans: Vec<(usize, usize)>,
}

impl<W: Write> FlowWriter<W> {
    pub fn new(out: W, format: Format) -> FlowWriter<W> {
        FlowWriter {
            out,
            format,
            line: String::with_capacity(1024),
            batch_bytes: 0,
            header_done: false,
            written: 0,
            geo: None,
            scratch: String::new(),
            csv_cells: String::new(),
            csv_spans: Vec::new(),
        }
    }

    /// Adds the country and AS of both ends to every record (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<Arc<GeoDb>>) -> FlowWriter<W> {
        self.geo = geo;
        self
    }

    /// Formats records one after the other into one buffer and hands `out` `bytes` at a time
    /// (at least), instead of one line per `write`: for a file behind a `BufWriter` of at most
    /// `bytes`, the text goes to the kernel without being copied again. The last records stay
    /// here until [`FlowWriter::flush`].
    pub fn batched(mut self, bytes: usize) -> FlowWriter<W> {
        self.batch_bytes = bytes;
        self.line.reserve(bytes + 4096);
        self
    }

    pub fn write(&mut self, r: &FlowRecord) -> io::Result<()> {
        if self.batch_bytes == 0 {
            self.line.clear();
        }
        // Where this record starts in `line` (after the records still pending, if batched).
        let start = self.line.len();
        match self.format {
            Format::Json => {
                let mut json = JsonFields {
                    line: &mut self.line,
                    scratch: &mut self.scratch,
                };
                record_fields(r, self.geo.as_deref(), &mut json);
                // Every field was written after a comma: the first one's becomes the brace.
                if self.line.len() == start {
                    self.line.push('{');
                } else {
                    debug_assert!(self.line[start..].starts_with(','));
                    // SAFETY: the byte is the ASCII ',' every field starts with; an ASCII
                    // byte in its place keeps the string UTF-8.
                    unsafe { self.line.as_bytes_mut()[start] = b'{' };
                }
                self.line.push_str("}\n");
            }
            Format::Csv => {
                if !self.header_done {
                    // Ahead of any record: none is pending before the first.
                    self.out.write_all(FLOW_COLUMNS.join(",").as_bytes())?;
                    self.out.write_all(b"\n")?;
                    self.header_done = true;
                }
                // Each value goes into one reused buffer, its range noted under its column.
                let (cells, spans) = (&mut self.csv_cells, &mut self.csv_spans);
                cells.clear();
                spans.clear();
                spans.resize(FLOW_COLUMNS.len(), (0, 0));
                // Fields come in the columns' order: look from where the last one was.
                let mut next = 0;
                flow_fields(r, self.geo.as_deref(), |name, value, _| {
                    let Some(v) = value else { return };
                    let found = (next..FLOW_COLUMNS.len())
                        .chain(0..next)
                        .find(|&i| FLOW_COLUMNS[i] == name);
                    if let Some(i) = found {
                        let at = cells.len();
                        push_csv_cell(cells, v);
                        spans[i] = (at, cells.len());
                        next = i + 1;
                    }
                });
                for (i, &(from, to)) in spans.iter().enumerate() {
                    if i > 0 {
                        self.line.push(',');
                    }
                    self.line.push_str(&cells[from..to]);
                }
                self.line.push('\n');
            }
        }
        self.written += 1;
        if self.line.len() >= self.batch_bytes {
            self.out.write_all(self.line.as_bytes())?;
            self.line.clear();
        }
        Ok(())
    }

    /// The output, after the last record (for writers into a buffer; not batched, or
    /// flushed).
    pub fn into_inner(self) -> W {
        debug_assert!(self.batch_bytes == 0 || self.line.is_empty());
        self.out
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// The output so far (a caller writing one record per message empties it in between).
    /// A batched writer's last records are not in it until [`FlowWriter::flush`].
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Hands `out` the records still pending (batched mode), then flushes it.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.batch_bytes > 0 && !self.line.is_empty() {
            self.out.write_all(self.line.as_bytes())?;
            self.line.clear();
        }
        self.out.flush()
    }
}

/// One host as a JSON line (keys in the style of ntopng's host JSON).
pub fn host_json(line: &mut String, h: &Host) {
    line.push_str("{\"IP_ADDR\":\"");
    format_addr(line, &h.key.addr, h.key.ip_version);
    let _ = write!(line, "\",\"VLAN_ID\":{}", h.key.vlan);
    if let Some(local) = h.local {
        // With --local-networks only.
        let _ = write!(line, ",\"LOCAL\":{local}");
    }
    if h.has_mac {
        line.push_str(",\"MAC\":\"");
        format_mac(line, &h.mac);
        line.push('"');
    }
    let _ = writeln!(
        line,
        ",\"SENT_PKTS\":{},\"SENT_BYTES\":{},\"RCVD_PKTS\":{},\"RCVD_BYTES\":{},\"FLOWS_AS_CLIENT\":{},\"FLOWS_AS_SERVER\":{},\"FIRST_SEEN\":{},\"LAST_SEEN\":{},\"PURGED\":{}}}",
        h.sent_pkts,
        h.sent_bytes,
        h.rcvd_pkts,
        h.rcvd_bytes,
        h.flows_as_client,
        h.flows_as_server,
        h.first_ns / 1_000_000_000,
        h.last_ns / 1_000_000_000,
        // A purged host's record is final; it may come back later as a new record.
        !h.live
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_flow::{EndReason, FlowKey};

    fn record() -> FlowRecord {
        let mut key = FlowKey {
            ip_version: 4,
            proto: 6,
            port_a: 80,
            port_b: 40000,
            ..Default::default()
        };
        key.addr_a[..4].copy_from_slice(&[10, 0, 0, 1]);
        key.addr_b[..4].copy_from_slice(&[10, 0, 0, 9]);
        let mut flow = Flow {
            key,
            client_is_a: false,
            pkts: [3, 5],
            bytes: [300, 500],
            ..Flow::default()
        };
        flow.first_ns = 1_700_000_000_123_000_000;
        flow.last_ns = 1_700_000_001_456_000_000;
        flow.tcp_flags = [0x12, 0x02];
        FlowRecord {
            flow,
            ext: sonde_flow::FlowExt {
                rtt_client_us: 1500,
                ..Default::default()
            },
            reason: EndReason::IdleTimeout,
            meta: None,
            exporter: None,
        }
    }

    /// [`record`] between public addresses: client 1.0.0.9, server 1.0.0.1.
    fn public() -> FlowRecord {
        let mut r = record();
        r.flow.key.addr_a[..4].copy_from_slice(&[1, 0, 0, 1]);
        r.flow.key.addr_b[..4].copy_from_slice(&[1, 0, 0, 9]);
        r
    }

    /// A record whose DPI metadata came off the wire with markup, quotes, a formula and
    /// control characters in it, and a producer's field sonde does not know, name and value.
    fn hostile() -> FlowRecord {
        let mut r = record();
        r.flow.dpi_done = true;
        r.flow.l7.proto = sonde_dpi::Proto::HTTP;
        r.meta = Some(Box::new(sonde_dpi::Meta {
            server_name: Some("<script>alert(\"x\")</script>".into()),
            http: Some(Box::new(sonde_dpi::meta::Http {
                url: Some("/a,b\\c\u{1}".into()),
                user_agent: Some("=cmd|' /C calc'!A0".into()),
                ..Default::default()
            })),
            extra: vec![("<b onmouseover=\"x\">".into(), "<i>&".into())],
            ..Default::default()
        }));
        r
    }

    /// A record with every metadata field set (through the table's setters), collected from
    /// an exporter.
    fn everything() -> FlowRecord {
        use sonde_dpi::meta::{Kind, FIELDS};
        let mut r = record();
        r.flow.locality = sonde_flow::locality::CLASSIFIED | sonde_flow::locality::B;
        r.flow.dpi_done = true;
        r.flow.sampling = 1;
        r.exporter = Some(("10.1.1.1:2055".parse().unwrap(), 0));
        let mut m = sonde_dpi::Meta::default();
        let answers = ["1.2.3.4".to_string()];
        for f in FIELDS {
            let v = match f.kind {
                Kind::WireText => Value::Text(f.key),
                Kind::WireList => Value::List(&answers),
                _ => Value::Number(1),
            };
            assert!((f.set)(&mut m, v), "{}", f.key);
        }
        r.meta = Some(Box::new(m));
        r
    }

    #[test]
    fn numbers_addresses_and_macs_read_as_std_formats_them() {
        let mut out = String::new();
        for us in (0..3000).chain([999_999, 1_000_000, 4_294_967, u32::MAX]) {
            out.clear();
            push_millis(&mut out, us);
            assert_eq!(out, format!("{:.3}", us as f64 / 1000.0), "{us} us");
        }
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = seed.to_be_bytes();
            let mut addr = [0u8; 16];
            addr[..8].copy_from_slice(&b);
            out.clear();
            format_addr(&mut out, &addr, 4);
            assert_eq!(out, Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string());
            out.clear();
            format_mac(&mut out, &[b[2], b[3], b[4], b[5], b[6], b[7]]);
            let want = format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[2], b[3], b[4], b[5], b[6], b[7]
            );
            assert_eq!(out, want);
            out.clear();
            push_number(&mut out, seed >> (seed % 64));
            assert_eq!(out, (seed >> (seed % 64)).to_string());
        }
    }

    #[test]
    fn the_writer_writes_exactly_the_schema_keys() {
        let mut v6 = record();
        v6.flow.key.ip_version = 6;
        v6.flow.key.addr_a = [0x20; 16];
        let mut v6_exported = everything();
        v6_exported.exporter = Some(("[2001:db8::1]:2055".parse().unwrap(), 0));
        let mut seen: Vec<String> = Vec::new();
        let geo = test_geo();
        for r in [record(), v6, everything(), v6_exported, public()] {
            flow_fields(&r, Some(&geo), |name, value, cell| {
                if let (Some(_), Some(f)) = (value, schema::field(name)) {
                    let is_str = cell != Cell::Number;
                    assert_eq!(is_str, f.json_string(), "{name}: written as a string?");
                }
                if value.is_some() && !seen.iter().any(|s| s == name) {
                    seen.push(name.to_string());
                }
            });
        }
        for name in &seen {
            assert!(
                schema::field(name).is_some(),
                "{name} is written but not in the schema"
            );
        }
        for f in schema::FIELDS {
            assert!(
                seen.iter().any(|s| s == f.key),
                "{} is in the schema but never written",
                f.key
            );
        }
    }

    /// The JSON writer (keys spelled out at compile time, values formatted in place) writes
    /// what the field list says, in its order: each name once, each value as the list gives
    /// it, numbers as numbers.
    #[test]
    fn json_lines_hold_the_field_list() {
        let mut v6 = everything();
        v6.flow.key.ip_version = 6;
        v6.flow.key.addr_a = [0x20; 16];
        let geo = Arc::new(test_geo());
        for r in [record(), v6, everything(), hostile(), public()] {
            let mut want: Vec<(String, serde_json::Value)> = Vec::new();
            flow_fields(&r, Some(&geo), |name, value, cell| {
                let v = value.unwrap();
                let v = if cell == Cell::Number {
                    serde_json::from_str(v).unwrap()
                } else {
                    serde_json::Value::String(v.to_string())
                };
                want.push((name.to_string(), v));
            });
            let mut w = FlowWriter::new(Vec::new(), Format::Json).with_geo(Some(geo.clone()));
            w.write(&r).unwrap();
            let line = String::from_utf8(w.into_inner()).unwrap();
            assert!(line.starts_with('{') && line.ends_with("}\n"), "{line}");
            let got: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&line).unwrap();
            let got: Vec<(String, serde_json::Value)> = got.into_iter().collect();
            assert_eq!(got.len(), want.len(), "a key written twice? {line}");
            let mut sorted = want.clone();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(got, sorted);
            // In the list's order too.
            let at = |k: &str| {
                let mut key = String::new();
                push_json_str(&mut key, k);
                line.find(&format!("\"{key}\":")).unwrap()
            };
            assert!(want.windows(2).all(|p| at(&p[0].0) < at(&p[1].0)), "{line}");
        }
    }

    /// 1.0.0.0/24 is in DE; 1.0.0.0–1.0.0.5 is AS 64500.
    fn test_geo() -> GeoDb {
        // One directory per call: tests run in parallel threads of one process.
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("sonde-export-geo-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("country-ipv4.csv"), "1.0.0.0,1.0.0.255,DE\n").unwrap();
        std::fs::write(d.join("asn-ipv4.csv"), "1.0.0.0,1.0.0.5,64500,Test AS\n").unwrap();
        // Countries and cities from a City database (preferred over the ranges above, which
        // agree): 1.0.0.0/24 DE, Köln; written by scripts/make-city-mmdb.pl.
        let city = concat!(env!("CARGO_MANIFEST_DIR"), "/../geo/testdata/city.mmdb");
        std::fs::copy(city, d.join("GeoLite2-City.mmdb")).unwrap();
        let db = GeoDb::open_dir(&d).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        db
    }

    #[test]
    fn places_are_the_json_fields_in_protobuf_and_read_back_as_collected_as() {
        let geo = test_geo();
        let r = public(); // client 1.0.0.9, server 1.0.0.1
        let de = sonde_geo::Country::parse("DE");
        let want = Places {
            src_as: 0,
            dst_as: 64500,
            src_country: de,
            dst_country: de,
        };
        assert_eq!(places(&r, Some(&geo)), want);
        assert_eq!(places(&r, None), Places::default());
        let m = proto::message(&r, Some(&geo));
        assert_eq!(
            (
                m.src_as,
                m.dst_as,
                m.src_country.as_str(),
                m.dst_country.as_str()
            ),
            (0, 64500, "DE", "DE")
        );
        // An exporter's AS wins; both numbers come back to a collector once each.
        let mut collected = public();
        collected.meta = Some(Box::new(sonde_dpi::Meta {
            src_as: 64501,
            ..Default::default()
        }));
        assert_eq!(places(&collected, Some(&geo)).src_as, 64501);
        let mut bytes = Vec::new();
        proto::encode(&collected, Some(&geo), &mut bytes);
        let c = proto::decode(&bytes).unwrap();
        let pairs: Vec<_> = c
            .extra_text
            .iter()
            .filter(|(k, _)| k.ends_with("_AS"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(pairs, [("SRC_AS", "64501"), ("DST_AS", "64500")]);
    }

    #[test]
    fn geo_fields_are_each_ends_own_and_only_with_a_database() {
        let json = |w: FlowWriter<Vec<u8>>, r: &FlowRecord| {
            let mut w = w;
            w.write(r).unwrap();
            serde_json::from_slice::<serde_json::Value>(&w.into_inner()).unwrap()
        };
        let r = public(); // client 1.0.0.9, server 1.0.0.1
        let v = json(FlowWriter::new(Vec::new(), Format::Json), &r);
        for k in [
            "SRC_AS",
            "DST_AS",
            "SRC_IP_COUNTRY",
            "DST_IP_COUNTRY",
            "SRC_IP_CITY",
        ] {
            assert!(v.get(k).is_none(), "{k} without --geoip-dir");
        }
        let geo = Some(Arc::new(test_geo()));
        let v = json(
            FlowWriter::new(Vec::new(), Format::Json).with_geo(geo.clone()),
            &r,
        );
        assert_eq!(v["SRC_AS"], 0, "{v}");
        assert_eq!(v["DST_AS"], 64500, "{v}");
        assert_eq!(v["SRC_IP_COUNTRY"], "DE");
        assert_eq!(v["DST_IP_COUNTRY"], "DE");
        assert_eq!(
            (&v["SRC_IP_CITY"], &v["DST_IP_CITY"]),
            (&"Köln".into(), &"Köln".into())
        );
        // An exporter's AS wins over the database's, and is written once.
        let mut collected = public();
        collected.meta = Some(Box::new(sonde_dpi::Meta {
            src_as: 64501,
            ..Default::default()
        }));
        let mut w = FlowWriter::new(Vec::new(), Format::Json).with_geo(geo.clone());
        w.write(&collected).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(text.matches("\"SRC_AS\"").count(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["SRC_AS"].as_u64(), v["DST_AS"].as_u64()),
            (Some(64501), Some(64500))
        );
        let mut outside = public();
        outside.flow.key.addr_b[..4].copy_from_slice(&[9, 9, 9, 9]);
        let v = json(
            FlowWriter::new(Vec::new(), Format::Json).with_geo(geo),
            &outside,
        );
        assert!(v.get("SRC_IP_COUNTRY").is_none(), "{v}");
        assert_eq!(v["SRC_AS"], 0);
    }

    /// The escaping as one rule per character, to check the byte-run version against.
    fn json_str_by_char(v: &str) -> String {
        let mut line = String::new();
        for c in v.chars() {
            match c {
                '"' => line.push_str("\\\""),
                '\\' => line.push_str("\\\\"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    let _ = write!(line, "\\u{:04x}", c as u32);
                }
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let _ = write!(line, "\\u{:04x}", c as u32);
                }
                c => line.push(c),
            }
        }
        line
    }

    #[test]
    fn json_strings_escape_as_the_per_character_rule_does() {
        let mut cases: Vec<String> = [
            "",
            "plain",
            "\"",
            "a\\b",
            "<script>&amp;</script>",
            "\u{1}\u{1f}\u{7f}x",
            "\n\r\t",
            "\u{2028}\u{2029}",
            "\u{2027}\u{202a}€",
            "日本語😀",
            "ends with \u{e2}",
            "x\u{2028}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Random strings over a small alphabet of every kind of character.
        let alphabet: Vec<char> = "a\"\\<>&\u{0}\u{1f}\u{7f}\u{80}é€\u{2028}\u{2029}\u{2026}😀 "
            .chars()
            .collect();
        // The state moves on for every string, so an empty one does not repeat for good.
        let mut x = 0x2545_f491_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize
        };
        for _ in 0..2000 {
            let s = (0..next() % 12)
                .map(|_| alphabet[next() % alphabet.len()])
                .collect();
            cases.push(s);
        }
        for s in cases {
            let mut got = String::from("prefix");
            push_json_str(&mut got, &s);
            assert_eq!(got, format!("prefix{}", json_str_by_char(&s)), "{s:?}");
            let back: String = serde_json::from_str(&format!("\"{}\"", &got[6..])).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn wire_strings_are_escaped_in_json() {
        let mut w = FlowWriter::new(Vec::new(), Format::Json);
        w.write(&hostile()).unwrap();
        let text = String::from_utf8(w.out).unwrap();
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert!(!text.contains('\u{1}'), "{text}");
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["SERVER_NAME"], "<script>alert(\"x\")</script>");
        assert_eq!(v["HTTP_URL"], "/a,b\\c\u{1}");
        assert_eq!(v["L7_PROTO_NAME"], "HTTP");
        assert_eq!(
            v["<b onmouseover=\"x\">"], "<i>&",
            "a producer's key, escaped"
        );
    }

    #[test]
    fn wire_strings_are_quoted_in_csv() {
        let mut w = FlowWriter::new(Vec::new(), Format::Csv);
        w.write(&hostile()).unwrap();
        let text = String::from_utf8(w.out).unwrap();
        let row = text.lines().nth(1).unwrap();
        assert!(row.contains("\"/a,b\\c\u{1}\""), "{row}");
        // A formula from the wire is neutralised: quoted, with a leading apostrophe.
        assert!(row.contains("\"'=cmd|' /C calc'!A0\""), "{row}");
    }

    #[test]
    fn json_uses_client_as_source() {
        let mut w = FlowWriter::new(Vec::new(), Format::Json);
        w.write(&record()).unwrap();
        let text = String::from_utf8(w.out).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["IPV4_SRC_ADDR"], "10.0.0.9");
        assert_eq!(v["IPV4_DST_ADDR"], "10.0.0.1");
        assert_eq!(v["L4_SRC_PORT"], 40000);
        assert_eq!(v["L4_DST_PORT"], 80);
        assert_eq!(
            (v["IN_PKTS"].as_u64(), v["IN_BYTES"].as_u64()),
            (Some(5), Some(500))
        );
        assert_eq!(
            (v["OUT_PKTS"].as_u64(), v["OUT_BYTES"].as_u64()),
            (Some(3), Some(300))
        );
        assert_eq!(v["CLIENT_TCP_FLAGS"], 2);
        assert_eq!(v["SERVER_TCP_FLAGS"], 0x12);
        assert_eq!(v["TCP_FLAGS"], 0x12);
        assert_eq!(v["FIRST_SWITCHED"], 1_700_000_000u64);
        assert_eq!(v["FLOW_START_MILLISECONDS"], 1_700_000_000_123u64);
        assert_eq!(v["CLIENT_NW_LATENCY_MS"], 1.5);
        assert_eq!(v["FLOW_END_REASON"], "idle_timeout");
        assert!(v.get("IPV6_SRC_ADDR").is_none());
    }

    #[test]
    fn direction_and_locality_are_written_with_local_networks_only() {
        use sonde_flow::locality::{A, B, CLASSIFIED};
        let json = |r: &FlowRecord| {
            let mut w = FlowWriter::new(Vec::new(), Format::Json);
            w.write(r).unwrap();
            serde_json::from_str::<serde_json::Value>(String::from_utf8(w.out).unwrap().trim())
                .unwrap()
        };
        let mut r = record();
        assert!(json(&r).get("FLOW_DIRECTION").is_none());
        // The client is end b (10.0.0.9).
        for (bits, want) in [(0, "transit"), (B, "out"), (A, "in"), (A | B, "internal")] {
            r.flow.locality = CLASSIFIED | bits;
            assert_eq!(json(&r)["FLOW_DIRECTION"], want, "{bits}");
        }
        let mut h = Host::default();
        let host = |h: &Host| {
            let mut line = String::new();
            host_json(&mut line, h);
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        };
        assert!(host(&h).get("LOCAL").is_none());
        h.local = Some(true);
        assert_eq!(host(&h)["LOCAL"], true);
        h.local = Some(false);
        assert_eq!(host(&h)["LOCAL"], false);
    }

    #[test]
    fn csv_has_header_and_all_columns() {
        let mut w = FlowWriter::new(Vec::new(), Format::Csv);
        w.write(&record()).unwrap();
        w.write(&record()).unwrap();
        let text = String::from_utf8(w.out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].split(',').count(), FLOW_COLUMNS.len());
        assert_eq!(lines[1].split(',').count(), FLOW_COLUMNS.len());
        assert!(lines[1].starts_with("10.0.0.9,10.0.0.1,,,40000,80,6,4,"));
    }

    #[test]
    fn numbers_format_as_std_does() {
        for n in (0..=1000).chain([9_999, u32::MAX as u64, u64::MAX - 1, u64::MAX]) {
            let mut got = String::from("x");
            push_number(&mut got, n);
            assert_eq!(got, format!("x{n}"));
        }
    }

    #[test]
    fn ipv4_addresses_format_as_std_does() {
        for o in 0..=255u8 {
            for addr in [
                [o, 0, 9, 255],
                [255, o, 10, 0],
                [1, 99, o, 100],
                [0, 0, 0, o],
            ] {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&addr);
                let mut got = String::from("x");
                format_addr(&mut got, &a, 4);
                assert_eq!(got, format!("x{}", Ipv4Addr::from(addr)));
            }
        }
    }

    #[test]
    fn a_batched_writer_writes_the_same_bytes_in_chunks() {
        let records = [record(), hostile(), record(), hostile(), record()];
        for format in [Format::Json, Format::Csv] {
            let mut one = FlowWriter::new(Vec::new(), format);
            for r in &records {
                one.write(r).unwrap();
            }
            let expected = one.into_inner();
            // A chunk smaller than a record, one of about two, and one larger than them all.
            for chunk in [1, 1500, 1 << 20] {
                let mut w = FlowWriter::new(Vec::new(), format).batched(chunk);
                for r in &records {
                    w.write(r).unwrap();
                }
                if chunk == 1 << 20 {
                    // No record before the flush (CSV's header goes first, at once).
                    let header = match format {
                        Format::Json => 0,
                        Format::Csv => FLOW_COLUMNS.join(",").len() + 1,
                    };
                    assert_eq!(w.get_mut().len(), header);
                }
                w.flush().unwrap();
                assert_eq!(w.written(), 5);
                assert_eq!(w.into_inner(), expected, "{format:?}, chunk {chunk}");
            }
        }
    }
}
