//! DNSCrypt's encrypted queries and responses (the DNSCrypt v2 protocol specification,
//! dnscrypt.info/protocol), over UDP and TCP. The certificate fetch before them is plain DNS
//! and is labelled by dns.rs.
//!
//! Why: DNSCrypt moves name resolution out of sight of DNS monitoring, often on port 443 where
//! a port guess would call it QUIC. Everything is encrypted except two things the specification
//! fixes: a response starts with the resolver magic `r6fnvWj8`, and a query is
//! `client-magic (8) | client public key (32) | client nonce half (12) | ciphertext`, where the
//! ciphertext is the padded query plus a 16-byte authenticator. So a client packet can only
//! make the flow a candidate (it must be long enough); the response's magic decides. Over TCP each message has a 2-byte length prefix.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const RESOLVER_MAGIC: &[u8; 8] = b"r6fnvWj8";
/// Client magic, public key and nonce half before the ciphertext.
const QUERY_HEADER: usize = 8 + 32 + 12;
/// The authenticator (Poly1305 tag) after the padded query.
const TAG: usize = 16;
/// A response: magic, the full nonce (24), then the tag and at least a DNS header (12).
const MIN_RESPONSE: usize = 8 + 24 + TAG + 12;

/// The message of a packet: over TCP, after a length prefix that must equal the rest.
fn message<'a>(p: &Pkt<'a>) -> Option<&'a [u8]> {
    match p.l4 {
        L4::Udp => Some(p.payload),
        L4::Tcp => {
            let b = p.payload;
            let len = usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?]));
            (b.len() == len + 2).then(|| &b[2..])
        }
    }
}

/// A query is long enough for its header, tag and a padded query (at least 64 bytes; the
/// exact padding rule differs between versions and clients, and IP fragmentation cuts the
/// datagram, so it is not checked).
fn query_fits(m: &[u8]) -> bool {
    m.len() >= QUERY_HEADER + TAG + 64
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    let Some(m) = message(p) else {
        return Verdict::No;
    };
    if p.from_client {
        // Only the length can be checked; the response decides (a few packets at most).
        if query_fits(m) && p.index < 4 {
            Verdict::Unsure
        } else {
            Verdict::No
        }
    } else if m.len() >= MIN_RESPONSE && m.starts_with(RESOLVER_MAGIC) {
        Proto::DNSCRYPT.is(true)
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    fn query(len: usize) -> Vec<u8> {
        let mut q = vec![0x5a; len];
        q[..8].copy_from_slice(b"q6fnvWj8"); // a client magic: any 8 bytes
        q
    }

    fn response(len: usize) -> Vec<u8> {
        let mut r = vec![0xa5; len];
        r[..8].copy_from_slice(RESOLVER_MAGIC);
        r
    }

    #[test]
    fn query_then_response() {
        for (ends, framing) in [(udp(40000, 443), 0), (tcp(40000, 443), 2)] {
            let min = if ends.l4 == L4::Udp { 256 } else { 64 };
            let frame = |mut m: Vec<u8>| {
                if framing == 2 {
                    let mut f = (m.len() as u16).to_be_bytes().to_vec();
                    f.append(&mut m);
                    f
                } else {
                    m
                }
            };
            let q = frame(query(QUERY_HEADER + min + TAG));
            let r = frame(response(200));
            let mut f = Flow::default();
            assert_eq!(detect(&ends.pkt(&q, true, 0), &mut f), Verdict::Unsure);
            assert_eq!(
                detect(&ends.pkt(&r, false, 1), &mut f),
                Proto::DNSCRYPT.is(true)
            );
        }
    }

    #[test]
    fn not_dnscrypt() {
        let mut f = Flow::default();
        let e = udp(40000, 443);
        // A query too short to hold its header, tag and a padded query.
        for len in [QUERY_HEADER + TAG + 63, 20] {
            assert_eq!(detect(&e.pkt(&query(len), true, 0), &mut f), Verdict::No);
        }
        // A response without the magic, or too short to hold a DNS message.
        let mut r = response(200);
        r[0] = b'R';
        assert_eq!(detect(&e.pkt(&r, false, 1), &mut f), Verdict::No);
        assert_eq!(detect(&e.pkt(&response(40), false, 1), &mut f), Verdict::No);
        // Over TCP a length prefix that does not match the segment.
        let mut t = vec![0x01, 0x00];
        t.extend(response(200));
        assert_eq!(
            detect(&tcp(40000, 443).pkt(&t, false, 1), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x0d45_c0de);
        let random: Vec<Vec<u8>> = (0..3000).map(|round| rng.bytes(round % 400)).collect();
        Fuzz::new(&[udp(40000, 443), tcp(40000, 443)])
            .seeds([response(100), query(QUERY_HEADER + 256 + TAG)])
            .payloads(random)
            .run(detect);
    }
}
