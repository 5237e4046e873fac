//! RADIUS over UDP (RFC 2865 authentication, RFC 2866 accounting, RFC 5176 dynamic
//! authorization).
//!
//! Why: RADIUS carries network logins (user names, NAS addresses) and is worth labelling on
//! any port. It has no magic number, so the header is checked strictly: a known code, a
//! length field equal to the datagram's size (20..=4096), and attributes (type, length >= 2)
//! that end exactly at that length. On ports other than 1812/1813/1645/1646/3799 the packet
//! must also carry at least one attribute and no attribute of type 0. One packet is enough.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const PORTS: [u16; 5] = [1812, 1813, 1645, 1646, 3799];

/// Access-Request/Accept/Reject, Accounting-Request/Response, Access-Challenge,
/// Status-Server/Client, Disconnect and CoA Request/ACK/NAK.
fn known_code(c: u8) -> bool {
    matches!(c, 1..=5 | 11..=13 | 40..=45)
}

/// The number of attributes when `b` is a whole RADIUS packet.
fn attributes(b: &[u8]) -> Option<(usize, bool)> {
    let (&code, Some(len)) = (b.first()?, b.get(2..4)) else {
        return None;
    };
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    if !known_code(code) || !(20..=4096).contains(&len) || len != b.len() {
        return None;
    }
    let (mut at, mut n, mut type0) = (20, 0, false);
    while at < len {
        let (&t, &l) = (b.get(at)?, b.get(at + 1)?);
        if l < 2 {
            return None;
        }
        type0 |= t == 0;
        at += usize::from(l);
        n += 1;
    }
    (at == len).then_some((n, type0))
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    let on_port = PORTS.iter().any(|&port| p.has_port(port));
    match attributes(p.payload) {
        Some((n, type0)) if on_port || (n > 0 && !type0) => Proto::RADIUS.is(true),
        _ => Verdict::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    /// RFC 2865 section 7.1: Access-Request for user "nemo" (PAP), built from the RFC's
    /// example: User-Name, User-Password (16 bytes), NAS-IP-Address, NAS-Port.
    const ACCESS_REQ: &str = "010000380f403f9473978057bd83d5cb98f4227a01066e656d6f02120dbe708d93d413ce3196e43f782a0aee0406c0a80110050600000003";
    /// RFC 2865 section 7.1: the Access-Accept answer (Service-Type, Login-Service,
    /// Login-IP-Host).
    const ACCESS_ACCEPT: &str =
        "020000260409e36f2ad7ce9b9a9b48f9f11d7d4e060600000001 0f06 00000000 0e06c0a80103";
    /// RFC 2866: Accounting-Response with no attributes (20 bytes).
    const ACCT_RESP: &str = "0501001411223344556677889900aabbccddeeff";

    #[test]
    fn radius_packets() {
        for (h, port) in [(ACCESS_REQ, 1812), (ACCESS_ACCEPT, 1645), (ACCT_RESP, 1813)] {
            let b = hex(h);
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(40000, port).pkt(&b, true, 0), &mut f),
                Proto::RADIUS.is(true),
                "{h}"
            );
        }
        // With attributes, also on another port.
        let mut f = Flow::default();
        let b = hex(ACCESS_REQ);
        assert_eq!(
            detect(&udp(40000, 18120).pkt(&b, true, 0), &mut f),
            Proto::RADIUS.is(true)
        );
    }

    #[test]
    fn not_radius() {
        let mut f = Flow::default();
        // No attributes off the RADIUS ports.
        assert_eq!(
            detect(&udp(4000, 5000).pkt(&hex(ACCT_RESP), true, 0), &mut f),
            Verdict::No
        );
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        let req = hex(ACCESS_REQ);
        let mut bad_code = req.clone();
        bad_code[0] = 6;
        let mut bad_attr = req.clone();
        bad_attr[21] = 1; // attribute length 1
        let mut long_attr = req.clone();
        long_attr[21] = 7; // walks past the end
        let mut extra = req.clone();
        extra.push(0); // length field no longer matches
        for b in [
            &dns[..],
            &req[..40],
            &bad_code[..],
            &bad_attr[..],
            &long_attr[..],
            &extra[..],
            &[][..],
        ] {
            assert_eq!(
                detect(&udp(1812, 1812).pkt(b, true, 0), &mut f),
                Verdict::No
            );
        }
        assert_eq!(
            detect(&tcp(1812, 1812).pkt(&req, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x2865);
        let random: Vec<Vec<u8>> = (0..3000).map(|round| rng.bytes(round % 200)).collect();
        Fuzz::new(&[udp(40000, 1812), udp(4000, 5000)])
            .seeds([ACCESS_REQ, ACCESS_ACCEPT, ACCT_RESP].map(hex))
            .payloads(random)
            .run(detect);
    }
}
