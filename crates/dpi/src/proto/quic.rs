//! QUIC over UDP: the client's Initial packets.
//!
//! * IETF QUIC v1, v2 (RFC 9369) and its draft 00, drafts 23–34 and Facebook's mvfst versions: the Initial
//!   packets are decrypted with the keys every observer can derive from the Destination
//!   Connection ID (RFC 9001 §5.2), the CRYPTO frames are reassembled in offset order into
//!   `Scratch::quic_crypto` (the ClientHello may span several Initial packets) and the
//!   ClientHello is parsed by [`super::tls::parse_client_hello`] (SNI, ALPN, JA3, JA4 with `q`).
//! * Google QUIC T050/T051 (TLS inside, own salts) likewise; Q050 (own salt, CHLO inside).
//! * Google QUIC Q024–Q046: the CHLO is in clear; its `SNI` and `UAID` tags give the server
//!   name and the user agent (kept in `Meta::banner`).
//!
//! `Scratch::quic_crypto` starts with [`QHDR`] bytes of state (flags, then the byte ranges of
//! the CRYPTO stream received so far), followed by the CRYPTO stream bytes at their offsets.

use crate::ids::Proto;
use crate::meta::Meta;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];
const SALT_DRAFT22: [u8; 20] = [
    0x7f, 0xbc, 0xdb, 0x0e, 0x7c, 0x66, 0xbb, 0xe9, 0x19, 0x3a, 0x96, 0xcd, 0x21, 0x51, 0x9e, 0xbd,
    0x7a, 0x02, 0x64, 0x4a,
];
const SALT_DRAFT23: [u8; 20] = [
    0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7, 0xd2, 0x43, 0x2b, 0xb4, 0x63, 0x65,
    0xbe, 0xf9, 0xf5, 0x02,
];
const SALT_DRAFT29: [u8; 20] = [
    0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0,
    0x43, 0x90, 0xa8, 0x99,
];
const SALT_Q050: [u8; 20] = [
    0x50, 0x45, 0x74, 0xef, 0xd0, 0x66, 0xfe, 0x2f, 0x9d, 0x94, 0x5c, 0xfc, 0xdb, 0xd3, 0xa7, 0xf0,
    0xd3, 0xb5, 0x6b, 0x45,
];
const SALT_T050: [u8; 20] = [
    0x7f, 0xf5, 0x79, 0xe5, 0xac, 0xd0, 0x72, 0x91, 0x55, 0x80, 0x30, 0x4c, 0x43, 0xa2, 0x36, 0x7c,
    0x60, 0x48, 0x83, 0x10,
];
const SALT_T051: [u8; 20] = [
    0x7a, 0x4e, 0xde, 0xf4, 0xe7, 0xcc, 0xee, 0x5f, 0xa4, 0x50, 0x6c, 0x19, 0x12, 0x4f, 0xc8, 0xcc,
    0xda, 0x6e, 0x03, 0x3d,
];

const V1: u32 = 0x0000_0001;
const V2: u32 = 0x6b33_43cf;
/// draft-ietf-quic-v2-00: its own salt and v2's key labels, v1's packet types (checked by
/// decrypting nDPI's quic-v2-00.pcapng: the AEAD tag verifies only with these).
const V2_DRAFT_00: u32 = 0xff02_0000;
const SALT_V2_DRAFT_00: [u8; 20] = [
    0xa7, 0x07, 0xc2, 0x03, 0xa5, 0x9b, 0x47, 0x18, 0x4a, 0x1d, 0x62, 0xca, 0x57, 0x04, 0x06, 0xea,
    0x7a, 0xe3, 0xe5, 0xd3,
];
const Q046: u32 = 0x5130_3436;
const Q050: u32 = 0x5130_3530;
const T050: u32 = 0x5430_3530;
const T051: u32 = 0x5430_3531;

/// How a version's Initial packets are protected and what they carry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Encrypted Initial packets carrying a TLS ClientHello. `v2_types`: RFC 9369's packet
    /// types (Initial is 1); `v2_labels`: its key labels ("quicv2 key"). RFC 9369 has both,
    /// its first draft only the labels.
    Tls {
        salt: &'static [u8; 20],
        v2_types: bool,
        v2_labels: bool,
    },
    /// Google Q050: encrypted, CHLO inside.
    Q050,
    /// Google Q046: long header, CHLO in clear.
    Q046,
    /// 0x?a?a?a?a: a client forcing version negotiation; its Initial cannot be read.
    Reserved,
}

fn version_kind(v: u32) -> Option<Kind> {
    let tls = |salt| {
        Some(Kind::Tls {
            salt,
            v2_types: false,
            v2_labels: false,
        })
    };
    match v {
        V1 => tls(&SALT_V1),
        V2 => Some(Kind::Tls {
            salt: &SALT_V2,
            v2_types: true,
            v2_labels: true,
        }),
        V2_DRAFT_00 => Some(Kind::Tls {
            salt: &SALT_V2_DRAFT_00,
            v2_types: false,
            v2_labels: true,
        }),
        0xff00_0017..=0xff00_001c => tls(&SALT_DRAFT23),
        0xff00_001d..=0xff00_0020 => tls(&SALT_DRAFT29),
        0xff00_0021..=0xff00_0022 => tls(&SALT_V1),
        0xface_b001 => tls(&SALT_DRAFT22),
        0xface_b002 | 0xface_b00e => tls(&SALT_DRAFT23),
        0xface_b000..=0xface_b0ff => tls(&SALT_V1),
        T050 => tls(&SALT_T050),
        T051 => tls(&SALT_T051),
        Q050 => Some(Kind::Q050),
        Q046 => Some(Kind::Q046),
        _ if v & 0x0f0f_0f0f == 0x0a0a_0a0a => Some(Kind::Reserved),
        _ => None,
    }
}

/// Cap of the CRYPTO reassembly buffer (state header included).
const CAP: usize = 16 * 1024;
const MAX_RANGES: usize = 16;
/// State header of `quic_crypto`: flags, range count, ranges (start, end as u16 pairs).
const QHDR: usize = 2 + MAX_RANGES * 4;
const F_INIT: u8 = 0x01;
/// Nothing more to learn (ClientHello parsed, or given up).
const F_DONE: u8 = 0x02;
/// At least one Initial packet was decrypted.
const F_DECRYPTED: u8 = 0x04;

/// Largest QUIC packet decrypted (bigger ones are recognised but not read).
const MAX_PKT: usize = 4096;

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    let pl = p.payload;
    let Some(&b0) = pl.first() else {
        return Verdict::No;
    };
    if f.scratch.quic_crypto.is_empty() {
        // First payload of the flow: it must be a QUIC long header with a known version, or a
        // legacy Google QUIC packet with its version.
        if b0 & 0x80 == 0 {
            return legacy_gquic(pl, f);
        }
        let Some(v) = get_u32(pl, 1) else {
            return Verdict::No;
        };
        let Some(kind) = version_kind(v) else {
            return Verdict::No;
        };
        if !long_header_ok(pl, kind) {
            return Verdict::No;
        }
        f.meta.quic_version = Some(v);
        let b = &mut f.scratch.quic_crypto;
        b.resize(QHDR, 0);
        b[0] = F_INIT;
        if kind == Kind::Q046 {
            set_flag(f, F_DONE);
            if let Some(chlo) = pl.get(30..).and_then(|c| legacy_stream_data(c, 46)) {
                parse_chlo(chlo, &mut f.meta);
            }
            return Proto::QUIC.is(true);
        }
        if !p.from_client {
            set_flag(f, F_DONE);
            return Proto::QUIC.is(true);
        }
    }
    if flags(f) & F_DONE != 0 {
        return Proto::QUIC.is(true);
    }
    if !p.from_client {
        return Proto::QUIC.is(false);
    }
    client_datagram(pl, f);
    Proto::QUIC.is(flags(f) & F_DONE != 0)
}

fn flags(f: &Flow) -> u8 {
    f.scratch.quic_crypto.first().copied().unwrap_or(0)
}

fn set_flag(f: &mut Flow, bit: u8) {
    if let Some(x) = f.scratch.quic_crypto.first_mut() {
        *x |= bit;
    }
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// QUIC variable-length integer at `*i`; advances `*i`.
fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let first = *b.get(*i)?;
    let n = 1usize << (first >> 6);
    let s = b.get(*i..i.checked_add(n)?)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &s[1..] {
        v = v << 8 | u64::from(x);
    }
    *i += n;
    Some(v)
}

/// Sanity of a first long-header packet: connection ID lengths, and for a client Initial of a
/// reserved version, the minimum datagram size.
fn long_header_ok(pl: &[u8], kind: Kind) -> bool {
    match kind {
        Kind::Q046 => {
            let b0 = pl.first().copied().unwrap_or(0);
            pl.len() >= 1200 && b0 & 0x43 == 0x43 && b0 & 0x30 == 0 && pl.get(5) == Some(&0x50)
        }
        Kind::Reserved => pl.len() >= 1200 && pl.first().is_some_and(|b| b & 0x40 != 0),
        _ => {
            let Some(&dl) = pl.get(5) else { return false };
            let Some(&sl) = pl.get(6 + usize::from(dl)) else {
                return false;
            };
            dl <= 20 && sl <= 20 && pl.len() > 7 + usize::from(dl) + usize::from(sl)
        }
    }
}

/// Walks the (possibly coalesced) long-header packets of a client datagram.
fn client_datagram(pl: &[u8], f: &mut Flow) {
    let mut at = 0usize;
    for _ in 0..4 {
        let Some(pkt) = pl.get(at..) else { return };
        let Some(&b0) = pkt.first() else { return };
        if b0 & 0x80 == 0 {
            // A short-header (1-RTT) packet: the handshake is over for the client.
            set_flag(f, F_DONE);
            return;
        }
        let Some(v) = get_u32(pkt, 1) else { return };
        let kind = match version_kind(v) {
            Some(Kind::Tls {
                salt,
                v2_types,
                v2_labels,
            }) => (salt, v2_types, v2_labels, false),
            Some(Kind::Q050) => (&SALT_Q050, false, false, true),
            _ => return,
        };
        let (salt, v2_types, v2_labels, chlo) = kind;
        let Some(&dl) = pkt.get(5) else { return };
        let dl = usize::from(dl);
        let Some(dcid) = pkt.get(6..6 + dl) else {
            return;
        };
        let Some(&sl) = pkt.get(6 + dl) else { return };
        let mut i = 7 + dl + usize::from(sl);
        let ptype = (b0 >> 4) & 3;
        let initial = if v2_types { 1 } else { 0 };
        if ptype == initial {
            let Some(tok) = varint(pkt, &mut i) else {
                return;
            };
            let Some(j) = usize::try_from(tok).ok().and_then(|t| i.checked_add(t)) else {
                return;
            };
            i = j;
        } else if ptype == 3 && !v2_types || ptype == 0 && v2_types {
            return; // Retry: no length, nothing for us
        }
        let Some(len) = varint(pkt, &mut i).and_then(|l| usize::try_from(l).ok()) else {
            return;
        };
        let Some(end) = i.checked_add(len) else {
            return;
        };
        if ptype == initial {
            match pkt.get(..end) {
                Some(whole) => initial_packet(whole, i, dcid, salt, v2_labels, chlo, f),
                // Cut by the capture: it will not get better.
                None if flags(f) & F_DECRYPTED == 0 => set_flag(f, F_DONE),
                None => {}
            }
            if flags(f) & F_DONE != 0 {
                return;
            }
        }
        at = match at.checked_add(end) {
            Some(a) => a,
            None => return,
        };
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(hk: &Hkdf<Sha256>, label: &[u8], out: &mut [u8]) -> Option<()> {
    let mut info = [0u8; 64];
    let full = 6 + label.len();
    let n = 2 + 1 + full + 1;
    if n > info.len() {
        return None;
    }
    info[..2].copy_from_slice(&u16::try_from(out.len()).ok()?.to_be_bytes());
    info[2] = u8::try_from(full).ok()?;
    info[3..9].copy_from_slice(b"tls13 ");
    info[9..9 + label.len()].copy_from_slice(label);
    info[9 + label.len()] = 0;
    hk.expand(&info[..n], out).ok()
}

/// Removes header protection and decrypts one Initial packet (`pkt` ends where its Length
/// field says; `pn_offset` is where the packet number starts). Returns the plaintext range in
/// `buf`.
fn decrypt_initial(
    pkt: &[u8],
    pn_offset: usize,
    dcid: &[u8],
    salt: &[u8; 20],
    v2_labels: bool,
    buf: &mut [u8; MAX_PKT],
) -> Option<(usize, usize)> {
    let (_, hk) = Hkdf::<Sha256>::extract(Some(salt), dcid);
    let mut secret = [0u8; 32];
    expand_label(&hk, b"client in", &mut secret)?;
    let hk = Hkdf::<Sha256>::from_prk(&secret).ok()?;
    let (lk, liv, lhp): (&[u8], &[u8], &[u8]) = if v2_labels {
        (b"quicv2 key", b"quicv2 iv", b"quicv2 hp")
    } else {
        (b"quic key", b"quic iv", b"quic hp")
    };
    let mut key = [0u8; 16];
    let mut iv = [0u8; 12];
    let mut hp = [0u8; 16];
    expand_label(&hk, lk, &mut key)?;
    expand_label(&hk, liv, &mut iv)?;
    expand_label(&hk, lhp, &mut hp)?;

    let sample = pkt.get(pn_offset.checked_add(4)?..pn_offset.checked_add(20)?)?;
    let mut block = aes::Block::clone_from_slice(sample);
    Aes128::new(&hp.into()).encrypt_block(&mut block);
    let b0 = pkt.first()? ^ (block[0] & 0x0f);
    let pn_len = usize::from(b0 & 3) + 1;
    let hdr_len = pn_offset + pn_len;
    if pkt.len() < hdr_len + 16 || pkt.len() > buf.len() {
        return None;
    }
    buf[..pkt.len()].copy_from_slice(pkt);
    buf[0] = b0;
    let mut pn = 0u64;
    for k in 0..pn_len {
        let x = buf[pn_offset + k] ^ block[1 + k];
        buf[pn_offset + k] = x;
        pn = pn << 8 | u64::from(x);
    }
    let mut nonce = iv;
    for (k, byte) in pn.to_be_bytes().iter().enumerate() {
        nonce[4 + k] ^= byte;
    }
    let ct_end = pkt.len() - 16;
    let mut tag = [0u8; 16];
    tag.copy_from_slice(&pkt[ct_end..]);
    let (aad, rest) = buf.split_at_mut(hdr_len);
    let ct = rest.get_mut(..ct_end - hdr_len)?;
    Aes128Gcm::new(&key.into())
        .decrypt_in_place_detached(Nonce::from_slice(&nonce), aad, ct, Tag::from_slice(&tag))
        .ok()?;
    Some((hdr_len, ct_end))
}

fn initial_packet(
    pkt: &[u8],
    pn_offset: usize,
    dcid: &[u8],
    salt: &[u8; 20],
    v2_labels: bool,
    gquic: bool,
    f: &mut Flow,
) {
    let mut buf = [0u8; MAX_PKT];
    let Some((start, end)) = decrypt_initial(pkt, pn_offset, dcid, salt, v2_labels, &mut buf)
    else {
        // Not readable (cut by the capture, or not a real Initial): recognised, no details.
        if flags(f) & F_DECRYPTED == 0 {
            set_flag(f, F_DONE);
        }
        return;
    };
    set_flag(f, F_DECRYPTED);
    let Some(plain) = buf.get(start..end) else {
        return;
    };
    let is_q050 = f.meta.quic_version == Some(Q050) || gquic;
    let mut i = 0usize;
    for _ in 0..256 {
        let Some(&t) = plain.get(i) else { break };
        match t {
            0x00 => {
                // A run of PADDING.
                i += plain
                    .get(i..)
                    .map_or(1, |r| r.iter().take_while(|&&x| x == 0).count());
            }
            0x01 => i += 1,
            0x02 | 0x03 => {
                i += 1;
                if skip_ack(plain, &mut i, t == 0x03).is_none() {
                    break;
                }
            }
            0x40 | 0x60 if is_q050 || is_gquic_tls(f) => i += if t == 0x40 { 6 } else { 9 },
            0x06 | 0x08 => {
                if t == 0x08 && !(is_q050 || is_gquic_tls(f)) {
                    break;
                }
                i += 1;
                let (Some(off), Some(len)) = (varint(plain, &mut i), varint(plain, &mut i)) else {
                    break;
                };
                let Some(len) = usize::try_from(len).ok() else {
                    break;
                };
                let Some(data) = i.checked_add(len).and_then(|e| plain.get(i..e)) else {
                    break;
                };
                i += len;
                if is_q050 {
                    if off == 0 && parse_chlo(data, &mut f.meta) {
                        set_flag(f, F_DONE);
                        return;
                    }
                } else if !crypto_insert(&mut f.scratch.quic_crypto, off, data) {
                    set_flag(f, F_DONE);
                    return;
                }
            }
            _ => break,
        }
    }
    if is_q050 {
        return;
    }
    crypto_try_hello(f);
}

fn is_gquic_tls(f: &Flow) -> bool {
    matches!(f.meta.quic_version, Some(T050 | T051))
}

fn skip_ack(b: &[u8], i: &mut usize, ecn: bool) -> Option<()> {
    varint(b, i)?; // largest acknowledged
    varint(b, i)?; // delay
    let ranges = varint(b, i)?;
    varint(b, i)?; // first range
    for _ in 0..ranges.min(64) {
        varint(b, i)?;
        varint(b, i)?;
    }
    if ranges > 64 {
        return None;
    }
    if ecn {
        for _ in 0..3 {
            varint(b, i)?;
        }
    }
    Some(())
}

fn load_ranges(b: &[u8], r: &mut [(u16, u16); MAX_RANGES + 1]) -> usize {
    let n = usize::from(b.get(1).copied().unwrap_or(0)).min(MAX_RANGES);
    for (k, slot) in r.iter_mut().enumerate().take(n) {
        let at = 2 + 4 * k;
        if let Some(s) = b.get(at..at + 4) {
            *slot = (
                u16::from_be_bytes([s[0], s[1]]),
                u16::from_be_bytes([s[2], s[3]]),
            );
        }
    }
    n
}

/// Stores CRYPTO bytes at `off`; false when they cannot be kept (too far, too fragmented).
fn crypto_insert(b: &mut Vec<u8>, off: u64, data: &[u8]) -> bool {
    if data.is_empty() {
        return true;
    }
    let Some(start) = usize::try_from(off).ok() else {
        return false;
    };
    let Some(end) = start.checked_add(data.len()) else {
        return false;
    };
    if QHDR + end > CAP || b.len() < QHDR {
        return false;
    }
    if b.len() < QHDR + end {
        b.resize(QHDR + end, 0);
    }
    b[QHDR + start..QHDR + end].copy_from_slice(data);
    let mut r = [(0u16, 0u16); MAX_RANGES + 1];
    let mut n = load_ranges(b, &mut r);
    // Both fit in u16: end <= CAP.
    r[n] = (start as u16, end as u16);
    n += 1;
    r[..n].sort_unstable();
    let mut m = 0usize;
    for k in 1..n {
        if r[k].0 <= r[m].1 {
            r[m].1 = r[m].1.max(r[k].1);
        } else {
            m += 1;
            r[m] = r[k];
        }
    }
    let n = m + 1;
    if n > MAX_RANGES {
        return false;
    }
    b[1] = n as u8;
    for (k, &(s, e)) in r.iter().enumerate().take(n) {
        let at = 2 + 4 * k;
        b[at..at + 2].copy_from_slice(&s.to_be_bytes());
        b[at + 2..at + 4].copy_from_slice(&e.to_be_bytes());
    }
    true
}

/// Parses the ClientHello once the CRYPTO stream holds it whole.
fn crypto_try_hello(f: &mut Flow) {
    let b = &f.scratch.quic_crypto;
    let mut r = [(0u16, 0u16); MAX_RANGES + 1];
    if load_ranges(b, &mut r) == 0 || r[0].0 != 0 {
        return;
    }
    let have = usize::from(r[0].1);
    let Some(h) = b.get(QHDR..QHDR + 4) else {
        return;
    };
    if h[0] != 1 {
        set_flag(f, F_DONE);
        return;
    }
    let len = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
    if QHDR + 4 + len > CAP {
        set_flag(f, F_DONE);
        return;
    }
    if have < 4 + len {
        return;
    }
    if let Some(body) = b.get(QHDR + 4..QHDR + 4 + len) {
        // The stream buffer is only read here; parse needs `meta` mutably.
        let mut meta = std::mem::take(&mut f.meta);
        super::tls::parse_client_hello(body, true, &mut meta);
        f.meta = meta;
    }
    set_flag(f, F_DONE);
    let b = &mut f.scratch.quic_crypto;
    b.truncate(QHDR);
    b.shrink_to(QHDR);
}

/// Google QUIC before Q046 (no long header bit): public flags with version and 8-byte
/// connection ID, the version at 9, the CHLO in clear.
fn legacy_gquic(pl: &[u8], f: &mut Flow) -> Verdict {
    let Some(&b0) = pl.first() else {
        return Verdict::No;
    };
    if b0 & 0x49 != 0x09 || b0 & 0x30 != 0 || pl.len() < 1200 {
        return Verdict::No;
    }
    let Some(&[q, z, d1, d2]) = pl.get(9..13) else {
        return Verdict::No;
    };
    if q != b'Q' || z != b'0' || !(b'2'..=b'4').contains(&d1) || !d2.is_ascii_digit() {
        return Verdict::No;
    }
    let minor = (d1 - b'0') * 10 + (d2 - b'0');
    if let Some(v) = get_u32(pl, 9) {
        f.meta.quic_version = Some(v);
    }
    let b = &mut f.scratch.quic_crypto;
    b.resize(QHDR, 0);
    b[0] = F_INIT | F_DONE;
    let start = if minor <= 33 { 27 } else { 26 };
    if let Some(chlo) = pl.get(start..).and_then(|c| legacy_stream_data(c, minor)) {
        parse_chlo(chlo, &mut f.meta);
    }
    Proto::QUIC.is(true)
}

/// The data of the first gQUIC stream frame (stream 1) of a cleartext packet payload.
fn legacy_stream_data(c: &[u8], minor: u8) -> Option<&[u8]> {
    let mut i = c.iter().take(64).position(|&x| x != 0)?;
    let mut t = *c.get(i)?;
    if t == 0x40 || t == 0x60 {
        i += if t == 0x40 { 6 } else { 9 };
        t = *c.get(i)?;
    }
    if t != 0xa0 && t != 0xa4 {
        return None;
    }
    let mut off_len = usize::from((t & 0x1c) >> 2);
    if off_len > 0 {
        off_len += 1;
    }
    if *c.get(i + 1)? != 1 {
        return None;
    }
    i += 2 + off_len;
    let l = c.get(i..i + 2)?;
    let len = if minor >= 39 {
        u16::from_be_bytes([l[0], l[1]])
    } else {
        u16::from_le_bytes([l[0], l[1]])
    };
    i += 2;
    c.get(i..i + usize::from(len))
}

/// Reads the `SNI` and `UAID` tags of a gQUIC CHLO. False when it is not a CHLO.
fn parse_chlo(d: &[u8], meta: &mut Meta) -> bool {
    if d.get(..4) != Some(b"CHLO") {
        return false;
    }
    let Some(&[n0, n1]) = d.get(4..6) else {
        return false;
    };
    let n = usize::from(u16::from_le_bytes([n0, n1])).min(256);
    let base = 8 + 8 * n;
    let mut prev = 0usize;
    for k in 0..n {
        let Some(e) = d.get(8 + 8 * k..16 + 8 * k) else {
            break;
        };
        let end = u32::from_le_bytes([e[4], e[5], e[6], e[7]]) as usize;
        if end < prev {
            break;
        }
        let Some(val) = d.get(base + prev..base.saturating_add(end)) else {
            break;
        };
        match &e[..4] {
            b"SNI\0" if !val.is_empty() => meta.server_name = Some(wire_string(val)),
            b"UAID" if !val.is_empty() => meta.banner = Some(wire_string(val)),
            _ => {}
        }
        prev = end;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const QUIC: Ends = udp(51000, 443);

    /// Feeds packets the way the engine does (stops on `No` or `done`); returns the verdicts.
    fn run(text: &str) -> (Flow, Vec<Verdict>) {
        let mut f = Flow::default();
        let v = feed(detect, QUIC, &mut f, &packets(text));
        (f, v)
    }

    fn tls(f: &Flow) -> &crate::meta::Tls {
        f.meta.tls.as_ref().expect("tls metadata")
    }

    // SNI, ALPN and JA3 as tshark decodes them (it decrypts the Initial packets:
    // tls.handshake.extensions_server_name, .extensions_alpn_str, .ja3), SNI as nDPI's .out.

    #[test]
    fn draft29() {
        let (f, v) = run(include_str!("testdata/quic_draft29.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(0xff00_001d));
        assert_eq!(f.meta.server_name.as_deref(), Some("localhost"));
        let t = tls(&f);
        assert_eq!(t.sni.as_deref(), Some("localhost"));
        assert_eq!(t.alpn.as_deref(), Some("h3-29"));
        assert_eq!(t.ja3.as_deref(), Some("b3e43d74f4b790abca2f5fe7dd06e7cf"));
        // nDPI prints q13d0512h3_…: it takes ALPN's first two characters; FoxIO's JA4 takes
        // the first and last ("h3-29" gives "h9"). The hashes agree.
        assert_eq!(
            t.ja4.as_deref(),
            Some("q13d0512h9_d55e91d5c3b2_cd318bf3b157")
        );
        assert_eq!(t.client_version, 0x0304);
    }

    #[test]
    fn v2() {
        let (f, v) = run(include_str!("testdata/quic_v2.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(0x6b33_43cf));
        assert_eq!(f.meta.server_name.as_deref(), Some("test"));
        assert_eq!(tls(&f).alpn.as_deref(), Some("h3"));
        assert_eq!(
            tls(&f).ja3.as_deref(),
            Some("5e685944fc983af5eabcc813add3dca1")
        );
    }

    /// draft-ietf-quic-v2-00 (0xff020000), nDPI's quic-v2-00.pcapng: v1's packet types.
    #[test]
    fn v2_draft_00() {
        let (f, v) = run(include_str!("testdata/quic_v2_draft00.txt"));
        assert_eq!(f.meta.quic_version, Some(0xff02_0000));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert!(
            tls(&f).alpn.as_deref().unwrap_or("").starts_with("h3-34"),
            "{:?}",
            tls(&f)
        );
    }

    #[test]
    fn mvfst_draft27() {
        let (f, v) = run(include_str!("testdata/quic_mvfst27.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(0xface_b002));
        assert_eq!(f.meta.server_name.as_deref(), Some("graph.facebook.com"));
        let t = tls(&f);
        assert_eq!(t.alpn.as_deref(), Some("h3-fb-05"));
        assert_eq!(t.ja3.as_deref(), Some("61d8a93ff379660087082a82411f19a2"));
        // Offers TLS 1.3 and a 1.3 draft: 1.3 is the highest.
        assert_eq!(t.client_version, 0x0304);
    }

    #[test]
    fn t051() {
        let (f, v) = run(include_str!("testdata/quic_t051.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(T051));
        assert_eq!(f.meta.server_name.as_deref(), Some("www.google.com"));
        assert_eq!(tls(&f).alpn.as_deref(), Some("h3-T051"));
        assert_eq!(
            tls(&f).ja3.as_deref(),
            Some("92e76078d514999cd950474995dab2b5")
        );
    }

    #[test]
    fn q050_chlo() {
        let (f, v) = run(include_str!("testdata/quic_q050.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(Q050));
        assert_eq!(
            f.meta.server_name.as_deref(),
            Some("www.googletagmanager.com")
        );
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("Chrome/83.0.4103.101 Android 8.0.0; LDN-L21")
        );
        assert_eq!(f.meta.tls, None);
    }

    #[test]
    fn q046_chlo() {
        let (f, v) = run(include_str!("testdata/quic_q046.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(Q046));
        assert_eq!(f.meta.server_name.as_deref(), Some("i.ytimg.com"));
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("Chrome/80.0.3987.132 Windows NT 6.3; Win64; x64")
        );
    }

    #[test]
    fn q035_chlo() {
        // youtube_quic.pcap: legacy header without the long-header bit.
        let (f, v) = run(include_str!("testdata/quic_q035.txt"));
        assert_eq!(v, [Proto::QUIC.is(true)]);
        assert_eq!(f.meta.quic_version, Some(0x5130_3335));
        assert_eq!(
            f.meta.server_name.as_deref(),
            Some("pagead2.googlesyndication.com")
        );
    }

    #[test]
    fn chrome_0rtt_first_and_scattered_crypto_frames() {
        // quic_0RTT.pcap: two 0-RTT packets, then the Initial whose ClientHello is cut into
        // CRYPTO frames out of order (Chrome). nDPI also needs 3 packets.
        let (f, v) = run(include_str!("testdata/quic_0rtt_chrome.txt"));
        assert_eq!(
            v,
            [
                Proto::QUIC.is(false),
                Proto::QUIC.is(false),
                Proto::QUIC.is(true)
            ]
        );
        assert_eq!(f.meta.quic_version, Some(1));
        assert_eq!(f.meta.server_name.as_deref(), Some("ssl.gstatic.com"));
        assert_eq!(tls(&f).alpn.as_deref(), Some("h3"));
        assert_eq!(
            tls(&f).ja3.as_deref(),
            Some("06b6b2a2cba0b7deeaaa6a3d8374d627")
        );
        assert!(tls(&f).ja4.as_deref().unwrap().starts_with("q13d"));
    }

    #[test]
    fn client_hello_over_two_initial_packets() {
        // Re-splits a real ClientHello: stores its CRYPTO stream in two halves, second first.
        let p = packets(include_str!("testdata/quic_draft29.txt"));
        let mut f = Flow::default();
        detect(&QUIC.pkt(&p[0].1, true, 0), &mut f);
        assert!(tls(&f).sni.is_some());
        // Build the stream again from the decrypted packet.
        let pl = &p[0].1;
        let dl = usize::from(pl[5]);
        let dcid = &pl[6..6 + dl];
        let sl = usize::from(pl[6 + dl]);
        let mut i = 7 + dl + sl;
        let tok = varint(pl, &mut i).unwrap() as usize;
        i += tok;
        let len = varint(pl, &mut i).unwrap() as usize;
        let mut buf = [0u8; MAX_PKT];
        let (s, e) =
            decrypt_initial(&pl[..i + len], i, dcid, &SALT_DRAFT29, false, &mut buf).unwrap();
        let plain = &buf[s..e];
        assert_eq!(plain[0], 0x06);
        let mut j = 1;
        assert_eq!(varint(plain, &mut j), Some(0));
        let clen = varint(plain, &mut j).unwrap() as usize;
        let stream = &plain[j..j + clen];
        let mut g = Flow::default();
        g.scratch.quic_crypto.resize(QHDR, 0);
        g.scratch.quic_crypto[0] = F_INIT;
        let half = clen / 2;
        assert!(crypto_insert(
            &mut g.scratch.quic_crypto,
            half as u64,
            &stream[half..]
        ));
        crypto_try_hello(&mut g);
        assert_eq!(g.meta.tls, None);
        assert!(crypto_insert(
            &mut g.scratch.quic_crypto,
            0,
            &stream[..half]
        ));
        crypto_try_hello(&mut g);
        assert_eq!(g.meta.server_name.as_deref(), Some("localhost"));
        assert_eq!(g.meta.tls, f.meta.tls);
    }

    #[test]
    fn other_protocols_are_no() {
        // A DNS query (dns.pcap style), an RTP packet, a short long-header packet of an
        // unknown version, and nothing.
        let dns = hex("a0f401000001000000000000047469");
        let rtp = hex("8000000100000000deadbeef0102030405060708");
        let unknown = hex("c0123456780800000000000000000000");
        for p in [&dns[..], &rtp[..], &unknown[..], &[][..], &[0xc0][..]] {
            let mut f = Flow::default();
            assert_eq!(detect(&QUIC.pkt(p, true, 0), &mut f), Verdict::No);
        }
        // A QUIC payload over TCP.
        let p = packets(include_str!("testdata/quic_draft29.txt"));
        let mut f = Flow::default();
        let mut t = QUIC.pkt(&p[0].1, true, 0);
        t.l4 = L4::Tcp;
        assert_eq!(detect(&t, &mut f), Verdict::No);
    }

    #[test]
    fn cut_initial_is_quic_without_name() {
        // Cut by the capture: the header says QUIC, the payload cannot be decrypted.
        let p = packets(include_str!("testdata/quic_draft29.txt"));
        let mut f = Flow::default();
        assert_eq!(
            detect(&QUIC.pkt(&p[0].1[..300], true, 0), &mut f),
            Proto::QUIC.is(true)
        );
        assert_eq!(f.meta.quic_version, Some(0xff00_001d));
        assert_eq!(f.meta.server_name, None);
    }

    #[test]
    fn never_panics() {
        let flows = [
            include_str!("testdata/quic_draft29.txt"),
            include_str!("testdata/quic_v2.txt"),
            include_str!("testdata/quic_mvfst27.txt"),
            include_str!("testdata/quic_q046.txt"),
            include_str!("testdata/quic_q050.txt"),
            include_str!("testdata/quic_t051.txt"),
            include_str!("testdata/quic_q035.txt"),
            include_str!("testdata/quic_0rtt_chrome.txt"),
        ];
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
        // Every byte of the header (the first 64) changed once.
        let mut headers = Vec::new();
        for text in flows {
            for (_, b) in packets(text) {
                for at in 0..b.len().min(64) {
                    let mut m = b.clone();
                    m[at] ^= (rng.next() as u8) | 1;
                    headers.push(m);
                }
            }
        }
        // Random bytes, half of them with a known version, to go deeper.
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                let len = rng.below(1400);
                let mut b = rng.bytes(len);
                if rng.next().is_multiple_of(2) && b.len() >= 7 {
                    b[0] |= 0xc0;
                    let v: u32 = [V1, V2, Q046, Q050, T051, 0xff00_001d][rng.below(6)];
                    b[1..5].copy_from_slice(&v.to_be_bytes());
                    b[5] = rng.below(21) as u8;
                }
                b
            })
            .collect();
        // Decryption is not cheap: prefixes in steps.
        let mut fuzz = Fuzz::new(&[QUIC])
            .cut_step(7)
            .payloads(headers)
            .payloads(random)
            .check(|f| assert!(f.scratch.quic_crypto.len() <= CAP));
        for text in flows {
            fuzz = fuzz.flow(packets(text));
        }
        fuzz.run(detect);
        // Random CRYPTO fragments into the reassembler.
        for _ in 0..3000 {
            let mut b = vec![F_INIT; 1];
            b.resize(QHDR, 0);
            for _ in 0..40 {
                let off = rng.next() % 20000;
                let len = rng.below(700);
                let data = rng.bytes(len);
                crypto_insert(&mut b, off, &data);
                assert!(b.len() <= CAP);
            }
        }
        // Random CHLOs.
        for _ in 0..3000 {
            let len = rng.below(300);
            let mut b = rng.bytes(len);
            if b.len() >= 4 {
                b[..4].copy_from_slice(b"CHLO");
            }
            parse_chlo(&b, &mut Meta::default());
        }
    }
}
