//! TLS over TCP: the ClientHello (SNI, ALPN, offered versions, JA3, JA4), the ServerHello
//! (chosen version and cipher, JA3S) and, for TLS 1.2 and older, the names of the server
//! certificate (subject CN and subjectAltName DNS names).
//!
//! Handshake bytes are reassembled per direction in `Scratch::tls[0 client / 1 server]`: records
//! may span TCP segments and a handshake message may span records. Each buffer starts with a
//! small state header ([`HDR`] bytes, see the `ST_*`/`OFF_*` constants), then holds the
//! handshake-layer bytes (record headers stripped) not consumed yet. A direction's stream is only
//! started on a packet whose payload begins with a record header, so a capture that starts
//! mid-stream (lost segment) resynchronises on the next record-aligned packet.
//!
//! The ClientHello parser is shared with QUIC ([`parse_client_hello`]).

use crate::ids::Proto;
use crate::meta::Meta;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4, MAX_STR};
use md5::{Digest, Md5};
use sha2::Sha256;

/// Cap of one direction's reassembly buffer (state header included).
const CAP: usize = 16 * 1024;
/// Bytes of state kept at the start of each direction's buffer.
const HDR: usize = 8;
/// Header byte 0: state flags.
const OFF_FLAGS: usize = 0;
/// Header bytes 1..3: bytes left in the current record (big endian).
const OFF_REM: usize = 1;
/// Header byte 3: bytes of a record header split across segments kept in 4..8.
const OFF_PEND: usize = 3;
const OFF_PEND_BYTES: usize = 4;

/// The direction's stream has been started (the buffer holds the header).
const ST_INIT: u8 = 0x01;
/// The current record is a handshake record (its bytes are kept).
const ST_HS_REC: u8 = 0x02;
/// This direction's hello (ClientHello / ServerHello) has been parsed.
const ST_HELLO: u8 = 0x04;
/// Nothing more to learn from this direction.
const ST_DONE: u8 = 0x08;
/// A non-handshake record (ChangeCipherSpec, alert, application data) was seen: what follows is
/// encrypted, stop keeping handshake bytes.
const ST_ENCRYPTED: u8 = 0x10;
/// The buffer hit its cap: later bytes were dropped.
const ST_FULL: u8 = 0x20;

/// Largest TLS record payload accepted (2^14 plus expansion).
const MAX_RECORD: usize = 16384 + 2048;

const HS_CLIENT_HELLO: u8 = 1;
const HS_SERVER_HELLO: u8 = 2;
const HS_CERTIFICATE: u8 = 11;
const HS_SERVER_HELLO_DONE: u8 = 14;

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let d = usize::from(!p.from_client);
    let started =
        flags(&f.scratch.tls[0]) & ST_INIT != 0 || flags(&f.scratch.tls[1]) & ST_INIT != 0;
    if !started {
        // The flow's first payload (for this detector) must look like TLS.
        if looks_like_sslv2_client_hello(p.payload) && p.from_client {
            return sslv2_client_hello(p.payload, f);
        }
        if !is_record_start(p.payload, true) {
            if is_app_data_start(p.payload) {
                // A capture that starts after the handshake: TLS, nothing to read.
                return Proto::TLS.is(true);
            }
            return Verdict::No;
        }
    }
    let before = recognised(f);
    let st = flags(&f.scratch.tls[d]);
    if st & ST_DONE == 0 {
        if st & ST_INIT == 0 && is_record_start(p.payload, true) {
            init(&mut f.scratch.tls[d]);
        }
        if flags(&f.scratch.tls[d]) & ST_INIT != 0 {
            if feed(&mut f.scratch.tls[d], p.payload).is_err() {
                set_flags(&mut f.scratch.tls[d], ST_DONE);
            }
            let ok = if p.from_client {
                client_messages(f)
            } else {
                server_messages(f)
            };
            if !ok && !before && !recognised(f) {
                return Verdict::No;
            }
        }
    }
    if !recognised(f) {
        return Verdict::Unsure;
    }
    let server_done = flags(&f.scratch.tls[1]) & ST_DONE != 0;
    Proto::TLS.is(server_done)
}

/// TLS inside a flow another detector owns (after SMTP/IMAP/POP3 STARTTLS, or through an HTTP
/// CONNECT tunnel): the handshake's metadata is read as for TLS, the label stays `outer`.
pub(crate) fn inner(p: &Pkt<'_>, f: &mut Flow, outer: Proto) -> Verdict {
    match detect(p, f) {
        Verdict::Is { done, .. } => outer.is(done),
        Verdict::Unsure => outer.is(false),
        Verdict::No => outer.is(true),
    }
}

/// True once a hello of either side was parsed (the flow is TLS).
fn recognised(f: &Flow) -> bool {
    (flags(&f.scratch.tls[0]) | flags(&f.scratch.tls[1])) & ST_HELLO != 0
}

fn flags(b: &[u8]) -> u8 {
    b.get(OFF_FLAGS).copied().unwrap_or(0)
}

fn set_flags(b: &mut [u8], bits: u8) {
    if let Some(x) = b.get_mut(OFF_FLAGS) {
        *x |= bits;
    }
}

fn init(b: &mut Vec<u8>) {
    b.clear();
    b.resize(HDR, 0);
    set_flags(b, ST_INIT);
}

/// A TLS record header at the start of `p`: content type (handshake only when `handshake`),
/// version 3.0 to 3.4, and a plausible length.
fn is_record_start(p: &[u8], handshake: bool) -> bool {
    // A segment may stop inside the header: check the bytes that are there.
    let Some(&t) = p.first() else {
        return false;
    };
    let type_ok = if handshake {
        t == 22
    } else {
        (20..=23).contains(&t)
    };
    if !type_ok || p.get(1).is_some_and(|&v0| v0 != 3) || p.get(2).is_some_and(|&v1| v1 > 4) {
        return false;
    }
    match (p.get(3), p.get(4)) {
        (Some(&a), Some(&b)) => {
            let len = usize::from(u16::from_be_bytes([a, b]));
            len > 0 && len <= MAX_RECORD && p.get(5).is_none_or(|&h| h == 1 || h == 2)
        }
        _ => true,
    }
}

/// Application data or alert records of TLS 1.0 to 1.3 at the start of `p`: a valid header whose length
/// agrees with the payload (ends with it, goes on in the next segment, or is followed by
/// another record header).
fn is_app_data_start(p: &[u8]) -> bool {
    let Some(&[t, 3, v, a, b]) = p.get(..5) else {
        return false;
    };
    if t != 21 && t != 23 {
        return false;
    }
    let len = usize::from(u16::from_be_bytes([a, b]));
    if !(1..=4).contains(&v) || len == 0 || len > MAX_RECORD {
        return false;
    }
    let end = 5 + len;
    match p.len().cmp(&end) {
        std::cmp::Ordering::Equal => true,
        std::cmp::Ordering::Less => p.len() >= 512,
        std::cmp::Ordering::Greater => match p.get(end..end + 3) {
            Some(&[t, 3, v2]) => (20..=23).contains(&t) && v2 <= 4,
            _ => false,
        },
    }
}

/// Appends the handshake bytes of `payload` (records stripped) to `b`.
fn feed(b: &mut Vec<u8>, payload: &[u8]) -> Result<(), ()> {
    if b.len() < HDR {
        return Err(());
    }
    let mut i = 0usize;
    let mut rounds = 0u32;
    while i < payload.len() && rounds < 1024 {
        rounds += 1;
        let st = flags(b);
        let rem = usize::from(u16::from_be_bytes([b[OFF_REM], b[OFF_REM + 1]]));
        if rem > 0 {
            let take = rem.min(payload.len() - i);
            if st & ST_HS_REC != 0 && st & ST_ENCRYPTED == 0 {
                let room = CAP.saturating_sub(b.len());
                let keep = take.min(room);
                if let Some(bytes) = payload.get(i..i + keep) {
                    b.extend_from_slice(bytes);
                }
                if keep < take {
                    set_flags(b, ST_FULL);
                }
            }
            let left = (rem - take) as u16;
            b[OFF_REM..OFF_REM + 2].copy_from_slice(&left.to_be_bytes());
            i += take;
            continue;
        }
        // A record header, possibly split across segments.
        let pend = usize::from(b[OFF_PEND]).min(4);
        let mut hdr = [0u8; 5];
        hdr[..pend].copy_from_slice(&b[OFF_PEND_BYTES..OFF_PEND_BYTES + pend]);
        let need = 5 - pend;
        let avail = payload.len() - i;
        if avail < need {
            b[OFF_PEND_BYTES + pend..OFF_PEND_BYTES + pend + avail].copy_from_slice(&payload[i..]);
            b[OFF_PEND] = (pend + avail) as u8;
            return Ok(());
        }
        hdr[pend..].copy_from_slice(&payload[i..i + need]);
        i += need;
        b[OFF_PEND] = 0;
        let len = u16::from_be_bytes([hdr[3], hdr[4]]);
        if !(20..=24).contains(&hdr[0]) || hdr[1] != 3 || usize::from(len) > MAX_RECORD {
            return Err(());
        }
        if hdr[0] == 22 {
            b[OFF_FLAGS] |= ST_HS_REC;
        } else {
            b[OFF_FLAGS] &= !ST_HS_REC;
            b[OFF_FLAGS] |= ST_ENCRYPTED;
        }
        b[OFF_REM..OFF_REM + 2].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// The first buffered handshake message: (type, declared body length, body bytes available).
fn first_msg(b: &[u8]) -> Option<(u8, usize, &[u8])> {
    let h = b.get(HDR..HDR + 4)?;
    let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
    let avail = b.get(HDR + 4..)?;
    Some((h[0], len, avail.get(..len).unwrap_or(avail)))
}

/// Removes the first handshake message (of body length `len`) from the buffer.
fn consume(b: &mut Vec<u8>, len: usize) {
    let end = HDR.saturating_add(4).saturating_add(len).min(b.len());
    b.drain(HDR..end);
}

/// Handles the client's buffered messages; false when they cannot be TLS.
fn client_messages(f: &mut Flow) -> bool {
    let b = &f.scratch.tls[0];
    let st = flags(b);
    if st & ST_HELLO != 0 {
        return true;
    }
    let Some((t, len, body)) = first_msg(b) else {
        if st & ST_DONE != 0 {
            return false;
        }
        return true;
    };
    if t != HS_CLIENT_HELLO {
        set_flags(&mut f.scratch.tls[0], ST_DONE);
        return false;
    }
    if body.len() < len {
        if st & (ST_FULL | ST_DONE) != 0 {
            // Too long to keep whole (or broken stream): TLS, without the details.
            set_flags(&mut f.scratch.tls[0], ST_HELLO | ST_DONE);
            f.scratch.tls[0].truncate(HDR);
        }
        return true;
    }
    let ok = parse_client_hello(body, false, &mut f.meta);
    let sni = f.meta.tls.as_ref().and_then(|t| t.sni.as_deref());
    if ok && sni.is_some_and(super::tor::is_tor_sni) {
        // Tor's link handshake: nDPI's `TLS.Tor`.
        f.l7.app = Proto::TOR;
    }
    let b = &mut f.scratch.tls[0];
    set_flags(b, ST_HELLO | ST_DONE);
    b.truncate(HDR);
    b.shrink_to(HDR);
    ok
}

/// Handles the server's buffered messages; false when they cannot be TLS.
fn server_messages(f: &mut Flow) -> bool {
    for _ in 0..16 {
        let st = flags(&f.scratch.tls[1]);
        if st & ST_DONE != 0 {
            break;
        }
        let Some((t, len, body)) = first_msg(&f.scratch.tls[1]) else {
            if st & ST_ENCRYPTED != 0 {
                set_flags(&mut f.scratch.tls[1], ST_DONE);
            }
            break;
        };
        let complete = body.len() >= len;
        if st & ST_HELLO == 0 {
            if t != HS_SERVER_HELLO {
                set_flags(&mut f.scratch.tls[1], ST_DONE);
                return false;
            }
            if !complete {
                if st & (ST_FULL | ST_ENCRYPTED) != 0 {
                    set_flags(&mut f.scratch.tls[1], ST_DONE);
                    return false;
                }
                break;
            }
            let tls13 = parse_server_hello(body, &mut f.meta);
            let Some(tls13) = tls13 else {
                set_flags(&mut f.scratch.tls[1], ST_DONE);
                return false;
            };
            set_flags(&mut f.scratch.tls[1], ST_HELLO);
            consume(&mut f.scratch.tls[1], len);
            if tls13 {
                set_flags(&mut f.scratch.tls[1], ST_DONE);
            }
            continue;
        }
        match t {
            HS_CERTIFICATE => {
                if let Some(names) = first_certificate(body).and_then(cert_names) {
                    f.meta.tls.get_or_insert_with(Box::default).cert_names = Some(names);
                    set_flags(&mut f.scratch.tls[1], ST_DONE);
                } else if complete || st & (ST_FULL | ST_ENCRYPTED) != 0 {
                    // Parsed whole and no names, or can never complete: give up.
                    set_flags(&mut f.scratch.tls[1], ST_DONE);
                }
                break;
            }
            HS_SERVER_HELLO_DONE => {
                set_flags(&mut f.scratch.tls[1], ST_DONE);
                break;
            }
            _ => {
                if !complete {
                    if st & (ST_FULL | ST_ENCRYPTED) != 0 {
                        set_flags(&mut f.scratch.tls[1], ST_DONE);
                    }
                    break;
                }
                consume(&mut f.scratch.tls[1], len);
            }
        }
    }
    if flags(&f.scratch.tls[1]) & ST_DONE != 0 {
        let b = &mut f.scratch.tls[1];
        b.truncate(HDR);
        b.shrink_to(HDR);
    }
    true
}

/// An SSL 2.0-format ClientHello (as old clients send for compatibility): 2-byte length with
/// the high bit set, message type 1, version 2.0 or 3.x.
fn looks_like_sslv2_client_hello(p: &[u8]) -> bool {
    match p.get(..5) {
        Some(&[b0, b1, 1, v0, v1]) => {
            let len = usize::from(b0 & 0x7f) << 8 | usize::from(b1);
            b0 & 0x80 != 0 && len >= 9 && ((v0 == 3 && v1 <= 3) || (v0 == 0 && v1 == 2))
        }
        _ => false,
    }
}

fn sslv2_client_hello(p: &[u8], f: &mut Flow) -> Verdict {
    let version = match p.get(3..5) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => return Verdict::No,
    };
    f.meta.tls.get_or_insert_with(Box::default).client_version = version;
    let b = &mut f.scratch.tls[0];
    init(b);
    set_flags(b, ST_HELLO | ST_DONE);
    Proto::TLS.is(false)
}

// ---------------------------------------------------------------------------------------------
// Small bounds-checked reader.

struct Rd<'a> {
    b: &'a [u8],
}

impl<'a> Rd<'a> {
    fn new(b: &'a [u8]) -> Self {
        Rd { b }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (h, t) = (self.b.get(..n)?, self.b.get(n..)?);
        self.b = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let s = self.take(2)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }
    /// A vector with an `n`-byte length prefix (n = 1 or 2).
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
    fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

/// GREASE values (RFC 8701): 0x?a?a with both bytes equal.
fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && (v >> 8) == (v & 0xff)
}

fn u16s(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    b.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]]))
}

/// Writes `v` in decimal into the hash.
fn put_dec(h: &mut Md5, v: u16) {
    let mut buf = [0u8; 5];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    h.update(&buf[i..]);
}

/// Writes a dash-separated decimal list into the hash (GREASE removed).
fn put_dec_list(h: &mut Md5, vals: impl Iterator<Item = u16>) {
    let mut first = true;
    for v in vals.filter(|v| !is_grease(*v)) {
        if !first {
            h.update(b"-");
        }
        first = false;
        put_dec(h, v);
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex4(v: u16) -> [u8; 4] {
    [
        HEX[usize::from(v >> 12)],
        HEX[usize::from((v >> 8) & 15)],
        HEX[usize::from((v >> 4) & 15)],
        HEX[usize::from(v & 15)],
    ]
}

fn hex_string(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// Writes a comma-separated 4-hex-digit list into the hash.
fn put_hex_list(h: &mut Sha256, vals: &[u16]) {
    for (i, v) in vals.iter().enumerate() {
        if i > 0 {
            h.update(b",");
        }
        h.update(hex4(*v));
    }
}

/// A small fixed-capacity list of u16 (no allocation).
struct List<const N: usize> {
    v: [u16; N],
    n: usize,
    /// Items seen, including those beyond the capacity.
    seen: usize,
}

impl<const N: usize> List<N> {
    fn new() -> Self {
        List {
            v: [0; N],
            n: 0,
            seen: 0,
        }
    }
    fn push(&mut self, x: u16) {
        self.seen += 1;
        if let Some(slot) = self.v.get_mut(self.n) {
            *slot = x;
            self.n += 1;
        }
    }
    fn items(&self) -> &[u16] {
        &self.v[..self.n]
    }
    fn sort(&mut self) {
        self.v[..self.n].sort_unstable();
    }
}

/// JA4's two-character TLS version.
fn ja4_version(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 | 0x0200 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// First 12 hex digits of a SHA-256, or twelve zeros when nothing was hashed.
fn sha12(h: Sha256, empty: bool) -> String {
    if empty {
        return "000000000000".to_string();
    }
    let d = h.finalize();
    hex_string(&d[..6])
}

/// Parses a ClientHello message body (after the 4-byte handshake header) and fills
/// `meta.tls` (client version, SNI, ALPN, JA3, JA4) and `meta.server_name`. `quic` selects
/// JA4's `q` prefix instead of `t`. False when the body is not a well-formed ClientHello.
pub(crate) fn parse_client_hello(body: &[u8], quic: bool, meta: &mut Meta) -> bool {
    let mut r = Rd::new(body);
    let Some(legacy_version) = r.u16() else {
        return false;
    };
    if r.take(32).is_none() || r.vec8().is_none() {
        return false;
    }
    let Some(ciphers) = r.vec16() else {
        return false;
    };
    if ciphers.len() % 2 != 0 || r.vec8().is_none() {
        return false;
    }
    // Extensions are optional (old clients).
    let exts = if r.is_empty() {
        &[][..]
    } else {
        r.vec16().unwrap_or(&[])
    };

    let mut ext_types: List<128> = List::new();
    let mut sni: Option<&[u8]> = None;
    let mut alpn: Option<&[u8]> = None;
    let mut groups: &[u8] = &[];
    let mut point_formats: &[u8] = &[];
    let mut sig_algs: &[u8] = &[];
    let mut versions: &[u8] = &[];
    let mut has_sni = false;
    let mut er = Rd::new(exts);
    let mut guard = 0;
    while !er.is_empty() && guard < 256 {
        guard += 1;
        let (Some(t), Some(data)) = (er.u16(), er.vec16()) else {
            break;
        };
        if is_grease(t) {
            continue;
        }
        ext_types.push(t);
        let mut d = Rd::new(data);
        match t {
            0x0000 => {
                has_sni = true;
                if let Some(list) = d.vec16() {
                    let mut lr = Rd::new(list);
                    for _ in 0..8 {
                        let (Some(kind), Some(name)) = (lr.u8(), lr.vec16()) else {
                            break;
                        };
                        if kind == 0 && sni.is_none() {
                            sni = Some(name);
                        }
                    }
                }
            }
            0x0010 => alpn = d.vec16(),
            0x000a => groups = d.vec16().unwrap_or(&[]),
            0x000b => point_formats = d.vec8().unwrap_or(&[]),
            0x000d => sig_algs = d.vec16().unwrap_or(&[]),
            0x002b => versions = d.vec8().unwrap_or(&[]),
            _ => {}
        }
    }

    let offered = || u16s(versions).filter(|v| !is_grease(*v));
    // JA4 takes the numerically highest; the metadata ranks TLS 1.3 drafts (0x7fXX) below 1.3.
    let ja4_ver = offered().max().unwrap_or(legacy_version);
    let rank = |v: u16| {
        if v >> 8 == 0x7f {
            0x0303_8000 | u32::from(v & 0xff)
        } else {
            u32::from(v) << 16
        }
    };
    let best_version = offered().max_by_key(|v| rank(*v)).unwrap_or(legacy_version);

    // JA3: SSLVersion,Ciphers,Extensions,EllipticCurves,EcPointFormats (decimal, GREASE out).
    let mut h = Md5::new();
    put_dec(&mut h, legacy_version);
    h.update(b",");
    put_dec_list(&mut h, u16s(ciphers));
    h.update(b",");
    put_dec_list(&mut h, ext_types.items().iter().copied());
    h.update(b",");
    put_dec_list(&mut h, u16s(groups));
    h.update(b",");
    put_dec_list(&mut h, point_formats.iter().map(|&x| u16::from(x)));
    let ja3 = hex_string(&h.finalize());

    // JA4.
    let mut cl: List<256> = List::new();
    for c in u16s(ciphers).filter(|c| !is_grease(*c)) {
        cl.push(c);
    }
    let mut ja4 = String::with_capacity(40);
    ja4.push(if quic { 'q' } else { 't' });
    ja4.push_str(ja4_version(ja4_ver));
    ja4.push(if has_sni { 'd' } else { 'i' });
    push2(&mut ja4, cl.seen);
    push2(&mut ja4, ext_types.seen);
    let first_alpn = alpn
        .and_then(|a| Rd::new(a).vec8())
        .filter(|a| !a.is_empty());
    match first_alpn {
        Some(a) => {
            let (f0, l0) = (a[0], a[a.len() - 1]);
            if f0.is_ascii_alphanumeric() && l0.is_ascii_alphanumeric() {
                ja4.push(char::from(f0));
                ja4.push(char::from(l0));
            } else {
                ja4.push(char::from(HEX[usize::from(f0 >> 4)]));
                ja4.push(char::from(HEX[usize::from(l0 & 15)]));
            }
        }
        None => ja4.push_str("00"),
    }
    ja4.push('_');
    cl.sort();
    let mut hb = Sha256::new();
    put_hex_list(&mut hb, cl.items());
    ja4.push_str(&sha12(hb, cl.n == 0));
    ja4.push('_');
    let mut el: List<128> = List::new();
    for &e in ext_types.items() {
        if e != 0x0000 && e != 0x0010 {
            el.push(e);
        }
    }
    el.sort();
    let mut sl: List<128> = List::new();
    for s in u16s(sig_algs).filter(|s| !is_grease(*s)) {
        sl.push(s);
    }
    let mut hc = Sha256::new();
    put_hex_list(&mut hc, el.items());
    if sl.n > 0 {
        hc.update(b"_");
        put_hex_list(&mut hc, sl.items());
    }
    ja4.push_str(&sha12(hc, el.n == 0 && sl.n == 0));

    // ALPN list, comma-joined.
    let alpn_str = alpn.map(|a| {
        let mut out = [0u8; MAX_STR];
        let mut n = 0usize;
        let mut ar = Rd::new(a);
        for _ in 0..32 {
            let Some(p) = ar.vec8() else { break };
            let extra = usize::from(n > 0);
            if n + extra + p.len() > out.len() {
                break;
            }
            if n > 0 {
                out[n] = b',';
                n += 1;
            }
            out[n..n + p.len()].copy_from_slice(p);
            n += p.len();
        }
        wire_string(&out[..n])
    });

    let sni_str = sni.filter(|s| !s.is_empty()).map(wire_string);
    let t = meta.tls.get_or_insert_with(Box::default);
    t.client_version = best_version;
    t.sni = sni_str.clone();
    t.alpn = alpn_str;
    t.ja3 = Some(ja3);
    t.ja4 = Some(ja4);
    if sni_str.is_some() {
        meta.server_name = sni_str;
    }
    true
}

fn push2(s: &mut String, n: usize) {
    let n = n.min(99);
    s.push(char::from(b'0' + (n / 10) as u8));
    s.push(char::from(b'0' + (n % 10) as u8));
}

/// Parses a ServerHello body: fills version, cipher and JA3S. Returns whether the server chose
/// TLS 1.3 (the rest of its handshake is encrypted), or `None` when malformed.
fn parse_server_hello(body: &[u8], meta: &mut Meta) -> Option<bool> {
    let mut r = Rd::new(body);
    let legacy_version = r.u16()?;
    r.take(32)?;
    r.vec8()?;
    let cipher = r.u16()?;
    r.u8()?;
    let exts = if r.is_empty() {
        &[][..]
    } else {
        r.vec16().unwrap_or(&[])
    };
    let mut h = Md5::new();
    put_dec(&mut h, legacy_version);
    h.update(b",");
    put_dec(&mut h, cipher);
    h.update(b",");
    let mut version = legacy_version;
    let mut er = Rd::new(exts);
    let mut first = true;
    for _ in 0..128 {
        let (Some(t), Some(data)) = (er.u16(), er.vec16()) else {
            break;
        };
        if t == 0x002b {
            if let Some(v) = Rd::new(data).u16() {
                version = v;
            }
        }
        if is_grease(t) {
            continue;
        }
        if !first {
            h.update(b"-");
        }
        first = false;
        put_dec(&mut h, t);
    }
    let t = meta.tls.get_or_insert_with(Box::default);
    t.server_version = version;
    t.cipher = cipher;
    t.ja3s = Some(hex_string(&h.finalize()));
    // 0x7fXX: TLS 1.3 drafts.
    Some(version >= 0x0304 || version >> 8 == 0x7f)
}

/// The DER bytes of the first certificate of a (possibly partial) Certificate message body,
/// when they are all there.
fn first_certificate(body: &[u8]) -> Option<&[u8]> {
    let mut r = Rd::new(body);
    r.take(3)?; // list length
    let l = r.take(3)?;
    let n = usize::from(l[0]) << 16 | usize::from(l[1]) << 8 | usize::from(l[2]);
    r.take(n)
}

/// One DER TLV: (tag, content, rest). Single-byte tags, definite lengths up to 4 bytes.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let l0 = *b.get(1)?;
    let (len, hl) = if l0 < 0x80 {
        (usize::from(l0), 2usize)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = len << 8 | usize::from(*b.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = hl.checked_add(len)?;
    Some((tag, b.get(hl..end)?, b.get(end..)?))
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];

/// Subject CN and subjectAltName dNSNames of a DER certificate, comma-joined and capped.
fn cert_names(cert: &[u8]) -> Option<String> {
    let (t, c, _) = der(cert)?;
    if t != 0x30 {
        return None;
    }
    let (t, tbs, _) = der(c)?;
    if t != 0x30 {
        return None;
    }
    let (t, _, mut rest) = der(tbs)?;
    if t == 0xa0 {
        rest = der(rest)?.2; // serial number
    }
    rest = der(rest)?.2; // signature algorithm
    rest = der(rest)?.2; // issuer
    rest = der(rest)?.2; // validity
    let (t, subject, r) = der(rest)?;
    if t != 0x30 {
        return None;
    }
    rest = der(r)?.2; // subject public key info
    let mut extensions: &[u8] = &[];
    for _ in 0..4 {
        let Some((t, c, r)) = der(rest) else { break };
        if t == 0xa3 {
            extensions = c;
        }
        rest = r;
    }

    let mut out = [0u8; MAX_STR];
    let mut n = 0usize;
    let mut cn: &[u8] = &[];
    // Subject: SEQUENCE OF SET OF SEQUENCE { OID, value }.
    let mut rdns = subject;
    for _ in 0..32 {
        let Some((_, set, r)) = der(rdns) else { break };
        rdns = r;
        let mut atvs = set;
        for _ in 0..8 {
            let Some((_, atv, r2)) = der(atvs) else { break };
            atvs = r2;
            if let Some((0x06, oid, v)) = der(atv) {
                if oid == OID_CN && cn.is_empty() {
                    if let Some((_, val, _)) = der(v) {
                        cn = val;
                    }
                }
            }
        }
    }
    append_name(&mut out, &mut n, cn);
    // Extensions: [3] { SEQUENCE OF Extension { OID, critical?, OCTET STRING } }.
    if let Some((0x30, mut exts, _)) = der(extensions) {
        for _ in 0..64 {
            let Some((_, ext, r)) = der(exts) else { break };
            exts = r;
            let Some((0x06, oid, mut e)) = der(ext) else {
                continue;
            };
            if oid != OID_SAN {
                continue;
            }
            if let Some((0x01, _, r)) = der(e) {
                e = r;
            }
            let Some((0x04, octets, _)) = der(e) else {
                break;
            };
            let Some((0x30, mut names, _)) = der(octets) else {
                break;
            };
            for _ in 0..1024 {
                let Some((t, name, r)) = der(names) else {
                    break;
                };
                names = r;
                if t == 0x82 && name != cn {
                    append_name(&mut out, &mut n, name);
                }
            }
            break;
        }
    }
    (n > 0).then(|| wire_string(&out[..n]))
}

/// Appends `name` (and a comma before it) when it fits whole.
fn append_name(out: &mut [u8; MAX_STR], n: &mut usize, name: &[u8]) {
    if name.is_empty() {
        return;
    }
    let extra = usize::from(*n > 0);
    if *n + extra + name.len() > out.len() {
        return;
    }
    if *n > 0 {
        out[*n] = b',';
        *n += 1;
    }
    out[*n..*n + name.len()].copy_from_slice(name);
    *n += name.len();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const TLS: Ends = tcp(51000, 443);

    fn run(pkts: &[(bool, Vec<u8>)], f: &mut Flow) -> Vec<Verdict> {
        crate::proto::testkit::feed(detect, TLS, f, pkts)
    }

    fn tls(f: &Flow) -> &crate::meta::Tls {
        f.meta.tls.as_ref().expect("tls metadata")
    }

    // Values from tshark (tls.handshake.extensions_server_name, .ja3, .ja3s,
    // .extensions_alpn_str) and nDPI's .out (JA4, ServerNames) for the same flows.

    #[test]
    fn tls13_client_and_server_hello() {
        // tls_esni_sni_both.pcap, first flow.
        let p = packets(include_str!("testdata/tls_esni_sni_both.txt"));
        let mut f = Flow::default();
        let v = run(&p, &mut f);
        assert_eq!(v[0], Proto::TLS.is(false));
        assert_eq!(*v.last().unwrap(), Proto::TLS.is(true));
        let name = "these-are-not-the-droids-youre-looking-for.com";
        assert_eq!(f.meta.server_name.as_deref(), Some(name));
        let t = tls(&f);
        assert_eq!(t.sni.as_deref(), Some(name));
        assert_eq!(t.ja3.as_deref(), Some("077d20c3f8c5a1f091dc937c515b69c1"));
        assert_eq!(
            t.ja4.as_deref(),
            Some("t13d031100_55b375c5d22e_77359c92d649")
        );
        assert_eq!(t.ja3s.as_deref(), Some("d75f9129bb5d05492a65ff78e081bcb2"));
        assert_eq!(t.client_version, 0x0304);
        assert_eq!(t.server_version, 0x0304);
        assert_eq!(t.cipher, 0x1303); // TLS_CHACHA20_POLY1305_SHA256
        assert_eq!(t.alpn, None);
        assert_eq!(t.cert_names, None);
    }

    #[test]
    fn tor_link_handshake() {
        // tor.pcap, 192.168.1.252:51112 -> 38.229.70.53:443 (nDPI: 91.163/TLS.Tor): the
        // ClientHello names www.q4cyamnc6mtokjurvdclt.com.
        let p = packets(include_str!("testdata/tls_tor.txt"));
        let mut f = Flow::default();
        let v = run(&p, &mut f);
        assert!(matches!(
            v.last(),
            Some(Verdict::Is {
                proto: Proto::TLS,
                ..
            })
        ));
        assert_eq!(f.l7.app, Proto::TOR);
        assert_eq!(
            tls(&f).sni.as_deref(),
            Some("www.q4cyamnc6mtokjurvdclt.com")
        );
        // An ordinary name stays plain TLS.
        let p = packets(include_str!("testdata/tls_firefox.txt"));
        let mut f = Flow::default();
        run(&p, &mut f);
        assert_eq!(f.l7.app, Proto::UNKNOWN);
    }

    #[test]
    fn firefox_ja4_and_tls12_certificate() {
        // 443-firefox.pcap: TLS 1.3 offered, 1.2 chosen, certificate in clear.
        let p = packets(include_str!("testdata/tls_firefox.txt"));
        let mut f = Flow::default();
        let v = run(&p, &mut f);
        assert_eq!(*v.last().unwrap(), Proto::TLS.is(true));
        let t = tls(&f);
        assert_eq!(t.sni.as_deref(), Some("www.ntop.org"));
        assert_eq!(t.alpn.as_deref(), Some("h2,http/1.1"));
        assert_eq!(t.ja3.as_deref(), Some("b20b44b18b853ef29ab773e921b03422"));
        assert_eq!(
            t.ja4.as_deref(),
            Some("t13d1814h2_29a2cd9e9f10_d267a5f792d4")
        );
        assert_eq!(t.ja3s.as_deref(), Some("3653a20186a5b490426131a611e01992"));
        assert_eq!(t.client_version, 0x0304);
        assert_eq!(t.server_version, 0x0303);
        assert_eq!(t.cipher, 0xcca8);
        assert_eq!(t.cert_names.as_deref(), Some("www.ntop.org"));
    }

    #[test]
    fn certificate_spanning_segments() {
        // long_tls_certificate.pcap: the certificate spans several TCP segments and records.
        let p = packets(include_str!("testdata/tls_long_certificate.txt"));
        let mut f = Flow::default();
        let v = run(&p, &mut f);
        assert_eq!(v[0], Proto::TLS.is(false));
        assert_eq!(*v.last().unwrap(), Proto::TLS.is(true));
        let t = tls(&f);
        assert_eq!(t.sni.as_deref(), Some("beacon-api.aliyuncs.com"));
        assert_eq!(t.ja3.as_deref(), Some("2a26b1a62e40d25d4de3babc9d532f30"));
        assert_eq!(
            t.ja4.as_deref(),
            Some("t12d6707h2_2955a3196ffa_c83f907a73d3")
        );
        assert_eq!(t.ja3s.as_deref(), Some("eee3d2bf5f17d17548ac36ba1872951f"));
        assert_eq!(t.cipher, 0xc02b);
        let names = t.cert_names.as_deref().unwrap();
        assert!(names.starts_with("*.aliyun.com,manager.channel.aliyun.com,*.ace.aliyun.com,"));
        assert!(names.len() <= MAX_STR);
    }

    #[test]
    fn netflix_san_list() {
        let p = packets(include_str!("testdata/tls_netflix.txt"));
        let mut f = Flow::default();
        run(&p, &mut f);
        let t = tls(&f);
        assert_eq!(t.sni.as_deref(), Some("api-global.netflix.com"));
        assert_eq!(
            t.alpn.as_deref(),
            Some("h2,h2-16,h2-15,h2-14,spdy/3.1,spdy/3,http/1.1")
        );
        assert_eq!(t.ja3.as_deref(), Some("c07cb55f88702033a8f52c046d23e0b2"));
        assert_eq!(
            t.ja4.as_deref(),
            Some("t12d1909h2_b5dc49c6fcca_2cdefc264be7")
        );
        assert_eq!(t.ja3s.as_deref(), Some("303951d4c50efb2e991652225a6f02b1"));
        // Subject CN, then nDPI's ServerNames (the SAN list) without the CN repeated.
        assert_eq!(
            t.cert_names.as_deref(),
            Some(
                "api.netflix.com,api-latam.netflix.com,htmltvui.netflix.com,api-eu.netflix.com,\
                 uiboot.netflix.com,api-global.netflix.com,api-user.netflix.com,api-us.netflix.com"
            )
        );
    }

    #[test]
    fn client_hello_split_at_every_byte() {
        // The same ClientHello cut into two segments at every position.
        let p = packets(include_str!("testdata/tls_esni_sni_both.txt"));
        let ch = &p[0].1;
        for cut in 1..ch.len() {
            let mut f = Flow::default();
            let a = detect(&TLS.pkt(&ch[..cut], true, 0), &mut f);
            assert_eq!(a, Verdict::Unsure, "cut {cut}");
            let b = detect(&TLS.pkt(&ch[cut..], true, 1), &mut f);
            assert_eq!(b, Proto::TLS.is(false), "cut {cut}");
            assert_eq!(
                tls(&f).ja3.as_deref(),
                Some("077d20c3f8c5a1f091dc937c515b69c1")
            );
        }
    }

    #[test]
    fn sslv2_client_hello() {
        // google_ssl.pcap frame 4: an SSL 2.0-format ClientHello offering TLS 1.0.
        let ch = hex(
            "807c01030100630000001000003900003800003500001600001300000a0700c000003300003200002f03\
             0080000066000005000004010080080080000063000062000061000015000012000009060040000065\
             000064000060000014000011000008000006040080000003020080447674058ab9c9a5abbb06702cc6cf1f",
        );
        let mut f = Flow::default();
        assert_eq!(detect(&TLS.pkt(&ch, true, 0), &mut f), Proto::TLS.is(false));
        assert_eq!(tls(&f).client_version, 0x0301);
    }

    #[test]
    fn mid_stream_application_data() {
        // tls-appdata.pcap: the capture starts after the handshake.
        let rec = hex(&format!("170303009a{}", "ab".repeat(0x9a)));
        let mut f = Flow::default();
        assert_eq!(detect(&TLS.pkt(&rec, true, 0), &mut f), Proto::TLS.is(true));
        // The length must agree with the payload.
        let mut f = Flow::default();
        assert_eq!(detect(&TLS.pkt(&rec[..100], true, 0), &mut f), Verdict::No);
    }

    #[test]
    fn other_protocols_are_no() {
        let http = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
        let ssh = b"SSH-2.0-OpenSSH_8.9\r\n";
        let smtp = b"220 mail.example.com ESMTP\r\n";
        for p in [
            &http[..],
            &ssh[..],
            &smtp[..],
            &[0x16, 2][..],
            &[0x16, 3, 9][..],
            &[][..],
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&TLS.pkt(p, true, 0), &mut f), Verdict::No);
        }
        // A handshake record whose first message is not a hello.
        let mut f = Flow::default();
        let bad = hex("16030300040b000000");
        assert_eq!(detect(&TLS.pkt(&bad, true, 0), &mut f), Verdict::No);
        // UDP is not ours.
        let p = packets(include_str!("testdata/tls_esni_sni_both.txt"));
        let mut f = Flow::default();
        let mut u = TLS.pkt(&p[0].1, true, 0);
        u.l4 = L4::Udp;
        assert_eq!(detect(&u, &mut f), Verdict::No);
    }

    #[test]
    fn grease_and_ja4_helpers() {
        assert!(is_grease(0x0a0a) && is_grease(0xfafa) && !is_grease(0x0a1a));
        assert_eq!(ja4_version(0x0304), "13");
        assert_eq!(ja4_version(0x7f1c), "00");
    }

    #[test]
    fn never_panics() {
        let flows = [
            include_str!("testdata/tls_esni_sni_both.txt"),
            include_str!("testdata/tls_firefox.txt"),
            include_str!("testdata/tls_long_certificate.txt"),
            include_str!("testdata/tls_netflix.txt"),
        ];
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        // Random bytes, with a TLS-looking start or not.
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                let len = rng.below(600);
                let mut b = rng.bytes(len);
                if rng.next().is_multiple_of(2) && b.len() >= 6 {
                    b[..3].copy_from_slice(&[0x16, 3, rng.below(5) as u8]);
                    b[5] = 1 + rng.below(2) as u8;
                }
                b
            })
            .collect();
        let mut fuzz = Fuzz::new(&[TLS])
            .payloads(random)
            .mutations(300)
            .check(|f| assert!(f.scratch.tls[0].len() <= CAP && f.scratch.tls[1].len() <= CAP));
        for text in flows {
            fuzz = fuzz.flow(packets(text));
        }
        fuzz.run(detect);
        for text in flows {
            // Mutated ClientHello bodies straight into the parser.
            let ch = &packets(text)[0].1;
            for _ in 0..2000 {
                let mut b = ch.get(9..).unwrap_or(&[]).to_vec();
                for _ in 0..(1 + rng.next() % 6) {
                    let at = rng.below(b.len());
                    if let Some(x) = b.get_mut(at) {
                        *x = rng.next() as u8;
                    }
                }
                let cut = rng.below(b.len() + 1);
                let mut m = Meta::default();
                parse_client_hello(&b[..cut], rng.next().is_multiple_of(2), &mut m);
                if let Some(t) = &m.tls {
                    assert!(t.alpn.as_ref().is_none_or(|a| a.len() <= 4 * MAX_STR));
                }
            }
        }
        // Random DER into the certificate walker.
        for _ in 0..3000 {
            let len = rng.below(300);
            let _ = cert_names(&rng.bytes(len));
        }
    }
}
