//! SNMP over UDP (RFC 1157 v1, RFC 3416 v2c, RFC 3412 v3).
//!
//! Why: SNMP polls and traps are the management plane of network gear; seeing who polls what
//! (and with which version: v1/v2c send the community in clear) matters to operators.
//!
//! The message is a BER SEQUENCE holding `INTEGER version` (0, 1 or 3) then, for v1/v2c, an
//! `OCTET STRING community` and a PDU with a context tag `0xa0..=0xa8`; for v3, the
//! `msgGlobalData` SEQUENCE starting with `INTEGER msgID`. The outer length must match the
//! datagram exactly, except on ports 161/162 where a capture may have cut it.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// Longest community string accepted.
const MAX_COMMUNITY: usize = 128;

/// Reads a BER tag + definite length at `at`; returns (tag, content start, content length).
fn tlv(b: &[u8], at: usize) -> Option<(u8, usize, usize)> {
    let tag = *b.get(at)?;
    let first = *b.get(at + 1)?;
    match first {
        0..=0x7f => Some((tag, at + 2, usize::from(first))),
        0x81 => Some((tag, at + 3, usize::from(*b.get(at + 2)?))),
        0x82 => {
            let s = b.get(at + 2..at + 4)?;
            Some((tag, at + 4, usize::from(u16::from_be_bytes([s[0], s[1]]))))
        }
        _ => None, // longer forms are not used by SNMP over UDP datagrams
    }
}

fn valid(p: &Pkt<'_>) -> bool {
    let b = p.payload;
    let Some((0x30, start, len)) = tlv(b, 0) else {
        return false;
    };
    let on_port = p.has_port(161) || p.has_port(162);
    let end = start + len;
    if end != b.len() && !(on_port && end > b.len()) {
        return false;
    }
    // version INTEGER, one byte: 0 (v1), 1 (v2c), 3 (v3).
    let version = match b.get(start..start + 3) {
        Some(&[0x02, 0x01, v]) => v,
        _ => return false,
    };
    let next = start + 3;
    match version {
        0 | 1 => {
            let Some((0x04, c_start, c_len)) = tlv(b, next) else {
                return false;
            };
            if c_len > MAX_COMMUNITY {
                return false;
            }
            let Some(community) = b.get(c_start..c_start + c_len) else {
                return false;
            };
            if !community.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
                return false;
            }
            let Some((tag, pdu_start, pdu_len)) = tlv(b, c_start + c_len) else {
                return false;
            };
            // GetRequest .. Report (0xa4 is the v1 Trap, 0xa7 the v2 Trap).
            (0xa0..=0xa8).contains(&tag) && (pdu_start + pdu_len == end)
        }
        3 => {
            // msgGlobalData: SEQUENCE { INTEGER msgID, INTEGER msgMaxSize, OCTET STRING flags,
            // INTEGER securityModel }.
            let Some((0x30, g_start, g_len)) = tlv(b, next) else {
                return false;
            };
            let Some((0x02, id_start, id_len)) = tlv(b, g_start) else {
                return false;
            };
            (1..=5).contains(&id_len)
                && id_start + id_len < g_start + g_len
                && g_start + g_len < end
        }
        _ => false,
    }
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp || p.payload.first() != Some(&0x30) {
        return Verdict::No;
    }
    if valid(p) {
        Proto::SNMP.is(true)
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // snmp.pcap frames 1 (v1 GetNextRequest), 6 (v2c GetResponse), 17 (v3 discovery).
    const V1: &str =
        "302902010004067075626c6963a11c02044b781a6e020100020100300e300c06082b060102010105000500";
    const V2C: &str = "303702010104067075626c6963a22a02045067d65c020100020100301c301a06082b06010201010600040e476c6f626f6d616e746963734851";
    const V3: &str = "303e020103301102046c9af56e020300ffe30401040201030410300e0400020100020100040004000400301404000400a00e0204750558880201000201003000";

    #[test]
    fn snmp_versions() {
        for h in [V1, V2C, V3] {
            let b = hex(h);
            for (c, s) in [(43015, 161), (4000, 5000)] {
                let mut f = Flow::default();
                assert_eq!(
                    detect(&udp(c, s).pkt(&b, true, 0), &mut f),
                    Proto::SNMP.is(true),
                    "{h}"
                );
            }
        }
    }

    #[test]
    fn cut_only_on_snmp_ports() {
        let b = hex(V2C);
        let cut = &b[..b.len() - 5];
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(43015, 161).pkt(cut, true, 0), &mut f),
            Proto::SNMP.is(true)
        );
        assert_eq!(
            detect(&udp(4000, 5000).pkt(cut, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_snmp() {
        let mut f = Flow::default();
        // Version 2 does not exist; a length that lies; a DNS query (dns.pcap frame 4).
        let mut v2 = hex(V1);
        v2[4] = 2;
        let mut lie = hex(V1);
        lie[1] = 0x30;
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [&v2[..], &lie[..], &dns[..], &hex(V1)[..3]] {
            assert_eq!(
                detect(&udp(4000, 5000).pkt(b, true, 0), &mut f),
                Verdict::No
            );
        }
    }

    #[test]
    fn never_panics() {
        // A SEQUENCE with a version INTEGER (0..=3) and random bytes after.
        let mut rng = Rng::new(0x2468_ace1);
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|round| {
                let mut b = rng.bytes(120);
                b[..7].copy_from_slice(&[0x30, 0x82, 0x00, 0x40, 0x02, 1, (round % 4) as u8]);
                b.truncate(round % 120);
                b
            })
            .collect();
        Fuzz::new(&[udp(4000, 161), udp(4000, 5000)])
            .seeds([V1, V2C, V3].map(hex))
            .payloads(random)
            .run(detect);
    }
}
