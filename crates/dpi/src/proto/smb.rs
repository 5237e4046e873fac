//! SMB over TCP (direct hosting on 445, or NetBIOS session service on 139): a NetBIOS
//! session message (type 0x00, 17- or 24-bit length) whose payload starts with `\xffSMB`
//! (SMBv1), `\xfeSMB` (SMB2/3) or `\xfdSMB` (SMB3 transform, encrypted).
//!
//! A NetBIOS session request (type 0x81 with two first-level-encoded names, as a client sends
//! first on port 139) is labelled `Proto::NETBIOS` alone, as nDPI does.
//!
//! The label follows nDPI: protocol NetBIOS with SMBv1 or SMBv23 as the application
//! (`10.16/NetBIOS.SMBv1`, `10.41/NetBIOS.SMBv23`); the detector sets `f.l7.app` and answers
//! with `Proto::NETBIOS`.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict};

/// Smallest SMB header after the 4-byte NetBIOS header: SMBv1 32 bytes, SMB2 64, transform 52.
fn min_len(kind: u8) -> usize {
    match kind {
        0xff => 32,
        0xfe => 64,
        _ => 52,
    }
}

/// A NetBIOS session request: `81 00 len`, then the called name, 0x20 and 32 letters
/// `A`..=`P` (RFC 1001 first-level encoding) ending with a zero-length label.
fn is_session_request(d: &[u8]) -> bool {
    let Some(&[0x81, 0, lh, ll, 0x20]) = d.get(..5) else {
        return false;
    };
    let len = usize::from(u16::from_be_bytes([lh, ll]));
    len >= 68
        && d.get(5..37)
            .is_some_and(|n| n.iter().all(|b| (b'A'..=b'P').contains(b)))
        && d.get(37) == Some(&0)
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    match d.first() {
        Some(0) => {}
        Some(0x81) if p.from_client && p.index == 0 && is_session_request(d) => {
            return Proto::NETBIOS.is(true);
        }
        _ => return Verdict::No,
    }
    let Some(&[_, l1, l2, l3, kind, s, m, b]) = d.get(..8) else {
        // A cut NetBIOS header: wait for a longer payload only on the first packets.
        return if d.len() < 8 && p.index < 2 {
            Verdict::Unsure
        } else {
            Verdict::No
        };
    };
    if !matches!(kind, 0xfd..=0xff) || [s, m, b] != *b"SMB" {
        return Verdict::No;
    }
    let len = (usize::from(l1) << 16) | (usize::from(l2) << 8) | usize::from(l3);
    if len < min_len(kind) {
        return Verdict::No;
    }
    f.l7.app = if kind == 0xff {
        Proto::SMBV1
    } else {
        Proto::SMBV23
    };
    Proto::NETBIOS.is(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const SMB: Ends = tcp(50927, 445);

    // smbv1.pcap frame 1 (Negotiate Protocol request, first 48 of 137 bytes: cut payload).
    const V1: &str = "00000085ff534d4272000000001853c00000000000000000000000000000fffe00004000006200025043204e4554574f";
    // smb_frags.pcap frame 3 (Negotiate, 51 bytes, whole).
    const V1_FRAGS: &str = "0000002fff534d4272000000001805d8000000000000000000000000ffff0100ffff0100000c00024e54204c4d20302e313200";
    // smb_deletefile.pcap frame 1 (first 72 of 380 bytes).
    const V2: &str = "00000178fe534d4240000100000000000500000100000000980000009c0f000000000000fffe0000110000001d0000000028000000000000000000000000000000000000";

    #[test]
    fn corpus() {
        for (h, app) in [
            (V1, Proto::SMBV1),
            (V1_FRAGS, Proto::SMBV1),
            (V2, Proto::SMBV23),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&SMB.pkt(&hex(h), true, 0), &mut f),
                Proto::NETBIOS.is(true)
            );
            assert_eq!(f.l7.app, app);
        }
        // Transform header (encrypted SMB3).
        let mut t = hex("00000040fd534d42");
        t.resize(68, 0);
        let mut f = Flow::default();
        assert_eq!(
            detect(&SMB.pkt(&t, true, 0), &mut f),
            Proto::NETBIOS.is(true)
        );
        assert_eq!(f.l7.app, Proto::SMBV23);
    }

    #[test]
    fn session_request() {
        // netbios.pcap: session request from 10.19.71.184:55489 to :139 (nDPI: NetBIOS).
        let d = hex("8100004420454a4543454a45474549464244424442464846444441444344444341434143410020464345504644454745494642444144484648464444414441444543414341414100");
        let mut f = Flow::default();
        assert_eq!(
            detect(&SMB.pkt(&d, true, 0), &mut f),
            Proto::NETBIOS.is(true)
        );
        assert_eq!(f.l7.app, Proto::UNKNOWN);
        // A broken name.
        let mut bad = d.clone();
        bad[10] = b'z';
        assert_eq!(
            detect(&SMB.pkt(&bad, true, 0), &mut Flow::default()),
            Verdict::No
        );
    }

    #[test]
    fn negatives() {
        for d in [
            // smb_frags.pcap frame 6: a continuation segment of a large message.
            hex("2a6ca457ae3e808c6a0b47f36e12748fa9d91be8"),
            // TLS ClientHello; RDP TPKT (rdp.pcap frame 4).
            hex("16030100a8010000a403035cef9e29f7"),
            hex("030000130ee00000000000010008000b000000"),
            // NetBIOS session request (type 0x81), keep-alive (0x85).
            hex("81000044204648464146"), // cut session request
            hex("85000000"),
            // Right magic, impossible length.
            hex("00000004ff534d4272000000"),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&SMB.pkt(&d, true, 0), &mut f),
                Verdict::No,
                "{d:02x?}"
            );
            assert_eq!(f.l7.app, Proto::UNKNOWN);
        }
        // Cut NetBIOS header on the first packet: undecided.
        let mut f = Flow::default();
        assert_eq!(
            detect(&SMB.pkt(&hex("00000085ff"), true, 0), &mut f),
            Verdict::Unsure
        );
    }

    #[test]
    fn never_panics() {
        // Random bytes after a NetBIOS session message type (0) or session request (0x81).
        let mut rng = Rng::new(0x1357_9bdf);
        let random: Vec<Vec<u8>> = (0..400)
            .map(|n| {
                let mut v = rng.bytes(n / 2 % 80);
                if let Some(b) = v.first_mut() {
                    *b = if n % 2 == 0 { 0 } else { 0x81 };
                }
                v
            })
            .collect();
        Fuzz::new(&[SMB])
            .seeds([V1, V1_FRAGS, V2].map(hex))
            .seeds([hex(
                "8100004420454a4543454a45474549464244424442464846444441444344444341434143410020",
            )])
            .payloads(random)
            .run(detect);
    }
}
