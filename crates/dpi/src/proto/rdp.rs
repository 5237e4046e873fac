//! RDP (MS-RDPBCGR 2.2.1.1, 2.2.1.2): the TPKT-framed (`03 00 len`) X.224 Connection Request
//! opening the flow, carrying a routing cookie (`Cookie: mstshash=user`) and/or an RDP
//! Negotiation Request (type 0x01, length 8); or, when only the server's side is seen first,
//! the X.224 Connection Confirm with an RDP Negotiation Response (0x02) or Failure (0x03).
//! An X.224 request or confirm with neither is RDP only on port 3389 (other ISO-on-TCP users,
//! e.g. S7comm on port 102, send COTP parameters there). The cookie line goes to
//! `meta.banner`.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict};

const COOKIE: &[u8] = b"Cookie: ";
const RDP_PORT: u16 = 3389;

/// The variable part of an X.224 CR/CC inside a TPKT: returns (code, variable part).
fn x224(d: &[u8]) -> Option<(u8, &[u8])> {
    let &[3, 0, lh, ll, li, code, dst_hi, dst_lo, _, _, class] = d.get(..11)? else {
        return None;
    };
    let tpkt_len = usize::from(u16::from_be_bytes([lh, ll]));
    let code = code & 0xf0;
    if usize::from(li) + 5 != tpkt_len || tpkt_len < 11 || class & 0xf0 != 0 {
        return None;
    }
    if code == 0xe0 && (dst_hi, dst_lo) != (0, 0) {
        return None;
    }
    // The variable part, cut to what the payload holds.
    let end = tpkt_len.min(d.len());
    Some((code, d.get(11..end)?))
}

/// An RDP negotiation structure of `kind` (type byte, flags, 16-bit LE length 8).
fn is_neg(v: &[u8], kind: u8) -> bool {
    matches!(v, [t, _, 8, 0, ..] if *t == kind)
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    if d.first() != Some(&3) || p.index > 1 {
        return Verdict::No;
    }
    let Some((code, var)) = x224(d) else {
        return Verdict::No;
    };
    let on_port = p.server_port == RDP_PORT;
    match code {
        0xe0 if p.from_client => {
            if var.starts_with(COOKIE) {
                let end = var
                    .iter()
                    .position(|&b| b == b'\r' || b == b'\n')
                    .unwrap_or(var.len());
                if f.meta.banner.is_none() {
                    f.meta.banner = Some(wire_string(var.get(..end).unwrap_or_default()));
                }
                Proto::RDP.is(true)
            } else if is_neg(var, 1) || (var.is_empty() && on_port) {
                Proto::RDP.is(true)
            } else {
                Verdict::No
            }
        }
        0xd0 if !p.from_client => {
            if is_neg(var, 2) || is_neg(var, 3) || (var.is_empty() && on_port) {
                Proto::RDP.is(true)
            } else {
                Verdict::No
            }
        }
        _ => Verdict::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // rdp.pcap frame 4 (X.224 CR with rdpNegReq) and frame 5 (CC with rdpNegRsp).
    const CR: &str = "030000130ee00000000000010008000b000000";
    const CC: &str = "030000130ed00000123400021f080008000000";

    #[test]
    fn rdp_pcap() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(52494, 3389).pkt(&hex(CR), true, 0), &mut f),
            Proto::RDP.is(true)
        );
        assert_eq!(f.meta.banner, None);
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(52494, 3389).pkt(&hex(CC), false, 0), &mut f),
            Proto::RDP.is(true)
        );
        // The same on another port.
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(52494, 13389).pkt(&hex(CR), true, 0), &mut f),
            Proto::RDP.is(true)
        );
    }

    #[test]
    fn cookie() {
        // MS-RDPBCGR 4.1.1 example: CR with cookie "mstshash=eltons" and rdpNegReq.
        let cr = hex("0300002c27e00000000000436f6f6b69653a206d737473686173683d656c746f6e730d0a0100080000000000");
        assert_eq!(cr.len(), 44);
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(52494, 3389).pkt(&cr, true, 0), &mut f),
            Proto::RDP.is(true)
        );
        assert_eq!(f.meta.banner.as_deref(), Some("Cookie: mstshash=eltons"));
    }

    #[test]
    fn negatives() {
        for (d, c) in [
            // S7comm COTP CR (parameters 0xc1/0xc2/0xc0) on port 102.
            (hex("0300001611e00000001400c1020100c2020102c0010a"), true),
            // The CR from the wrong side, the CC from the client.
            (hex(CR), false),
            (hex(CC), true),
            // Bad length indicator.
            (hex("030000130fe00000000000010008000b000000"), true),
            // TLS ClientHello (rdp.pcap frame 7), an SMB negotiate.
            (hex("16030100a8010000a403035cef9e29f7"), true),
            (hex("0000002fff534d4272000000001805d8"), true),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&tcp(52494, 102).pkt(&d, c, 0), &mut f),
                Verdict::No,
                "{d:02x?}"
            );
        }
        // Empty CR on port 102 is not RDP, on 3389 it is.
        let bare = hex("0300000b06e00000000000");
        assert_eq!(
            detect(&tcp(52494, 102).pkt(&bare, true, 0), &mut Flow::default()),
            Verdict::No
        );
        assert_eq!(
            detect(&tcp(52494, 3389).pkt(&bare, true, 0), &mut Flow::default()),
            Proto::RDP.is(true)
        );
    }

    #[test]
    fn never_panics() {
        // Random bytes with a TPKT version and an X.224 CR or CC code.
        let mut rng = Rng::new(0x0f0f_1234);
        let random: Vec<Vec<u8>> = (0..200)
            .map(|n| {
                let mut v = rng.bytes(n % 48);
                if v.len() > 5 {
                    v[0] = 3;
                    v[1] = 0;
                    v[5] = if n % 2 == 0 { 0xe0 } else { 0xd0 };
                }
                v
            })
            .collect();
        Fuzz::new(&[tcp(52494, 3389)])
            .seeds([CR, CC].map(hex))
            .seeds([hex(
                "0300002c27e00000000000436f6f6b69653a206d737473686173683d656c746f6e73",
            )])
            .payloads(random)
            .run(detect);
    }
}
