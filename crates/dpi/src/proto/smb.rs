//! SMB over TCP (direct hosting on 445, or NetBIOS session service on 139): a NetBIOS
//! session message (type 0x00, 17- or 24-bit length) whose payload starts with `\xffSMB`
//! (SMBv1, MS-CIFS), `\xfeSMB` (SMB2/3, MS-SMB2 2.2.1: StructureSize 64), `\xfdSMB` (SMB3
//! transform header of an encrypted message, MS-SMB2 2.2.41: 52 bytes, Flags /
//! EncryptionAlgorithm 0x0001) or `\xfcSMB` (SMB 3.1.1 compression transform, MS-SMB2 2.2.42:
//! CompressionAlgorithm 0..=5, Flags 0 (unchained) or 1 (chained)). The fields after the magic
//! are checked where the packet holds them; the length may exceed the packet (a large message,
//! or a flow seen from its middle, whose first packet starting a message decides).
//!
//! Any port: the 8 bytes `00 len len len xx S M B` are specific. On 139 and 445 a first packet
//! that does not start a message (a capture that begins inside one, a keep-alive `0x85`) leaves
//! the flow undecided for [`MAX_UNSURE`] packets, so the next message header can decide.
//!
//! A NetBIOS session request (type 0x81 with two first-level-encoded names, as a client sends
//! first on port 139) is labelled `Proto::NETBIOS` alone, as nDPI does.
//!
//! The label follows nDPI: protocol NetBIOS with SMBv1 or SMBv23 as the application
//! (`10.16/NetBIOS.SMBv1`, `10.41/NetBIOS.SMBv23`) for SMB in a session message on 139 and on
//! 445 alike (smbv1.pcap and smb_deletefile.pcap are on 445); encrypted and compressed SMB3
//! are SMB2-family messages, so `SMBv23`. The detector sets `f.l7.app` and answers with
//! `Proto::NETBIOS`.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict};

/// Packets a flow on 139/445 may stay undecided before a message header shows.
const MAX_UNSURE: u8 = 4;

/// Smallest SMB header after the 4-byte NetBIOS header: SMBv1 32 bytes, SMB2 64, transform 52,
/// compression transform 16.
fn min_len(kind: u8) -> usize {
    match kind {
        0xff => 32,
        0xfe => 64,
        0xfd => 52,
        _ => 16,
    }
}

/// Little-endian u16 at `at` of the SMB header `h`, when the packet holds it.
fn le16(h: &[u8], at: usize) -> Option<u16> {
    h.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// The fixed fields after the magic, where present (`h` starts at the SMB magic).
fn header_ok(kind: u8, h: &[u8]) -> bool {
    match kind {
        // StructureSize.
        0xfe => le16(h, 4).is_none_or(|v| v == 64),
        // Flags (3.1.1) / EncryptionAlgorithm (3.0): 0x0001, AES-128-CCM for 3.0.
        0xfd => le16(h, 42).is_none_or(|v| v == 1),
        // CompressionAlgorithm (NONE, LZNT1, LZ77, LZ77+Huffman, Pattern_V1, LZ4) and Flags.
        0xfc => le16(h, 8).is_none_or(|v| v <= 5) && le16(h, 10).is_none_or(|v| v <= 1),
        _ => true,
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
    // Mid-session on the SMB ports: the next packet may start a message.
    let undecided = || {
        if (p.has_port(445) || p.has_port(139)) && p.index + 1 < MAX_UNSURE {
            Verdict::Unsure
        } else {
            Verdict::No
        }
    };
    match d.first() {
        Some(0) => {}
        Some(0x81) if p.from_client && p.index == 0 && is_session_request(d) => {
            return Proto::NETBIOS.is(true);
        }
        _ => return undecided(),
    }
    let Some(&[_, l1, l2, l3, kind, s, m, b]) = d.get(..8) else {
        // A cut NetBIOS header: wait for a longer payload only on the first packets.
        return if d.len() < 8 && p.index < 2 {
            Verdict::Unsure
        } else {
            undecided()
        };
    };
    if !matches!(kind, 0xfc..=0xff) || [s, m, b] != *b"SMB" || !header_ok(kind, &d[4..]) {
        return undecided();
    }
    let len = (usize::from(l1) << 16) | (usize::from(l2) << 8) | usize::from(l3);
    if len < min_len(kind) {
        return undecided();
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
    const NBSS: Ends = tcp(50927, 139);
    const ODD: Ends = tcp(50927, 4445);

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
        // Transform header (encrypted SMB3), Flags 0x0001.
        let mut t = hex("00000040fd534d42");
        t.resize(68, 0);
        t[46] = 1;
        let mut f = Flow::default();
        assert_eq!(
            detect(&SMB.pkt(&t, true, 0), &mut f),
            Proto::NETBIOS.is(true)
        );
        assert_eq!(f.l7.app, Proto::SMBV23);
    }

    #[test]
    fn smb3_encrypted_and_compressed_on_both_ports() {
        // Transform header: magic, signature (16), nonce (16), OriginalMessageSize, reserved,
        // Flags 0x0001, SessionId; the encrypted message follows.
        let mut enc = hex("000001a0fd534d42");
        enc.resize(4 + 52, 0x5a);
        enc[4 + 40..4 + 44].copy_from_slice(&[0, 0, 1, 0]);
        enc.extend([0xa7; 100]);
        // Compression header, unchained: OriginalCompressedSegmentSize 0x1000, LZ77 (2),
        // Flags 0, Offset 0x70.
        let comp = hex("00000400fc534d4200100000020000007000000000000000");
        // SMB2 NEGOTIATE response cut after 24 bytes of its 64-byte header.
        let v2 = hex("000000f8fe534d424000010000000000000001000100000000000000");
        for e in [SMB, NBSS, ODD] {
            for d in [&enc, &comp, &v2] {
                let mut f = Flow::default();
                assert_eq!(
                    detect(&e.pkt(d, false, 0), &mut f),
                    Proto::NETBIOS.is(true),
                    "{e:?} {d:02x?}"
                );
                assert_eq!(f.l7.app, Proto::SMBV23);
            }
        }
    }

    #[test]
    fn mid_session() {
        // The capture starts inside a large READ response (smb_frags.pcap frame 6), then the
        // next message starts a segment: its length (0x10078) exceeds the packet.
        let c: Conv = vec![
            (false, hex("2a6ca457ae3e808c6a0b47f36e12748fa9d91be8")),
            (false, hex(V2)),
        ];
        let mut c = c;
        c[1].1[1] = 0x01; // 0x010178 bytes
        for e in [SMB, NBSS] {
            let mut f = Flow::default();
            let v = feed(detect, e, &mut f, &c);
            assert_eq!(v, [Verdict::Unsure, Proto::NETBIOS.is(true)]);
            assert_eq!(f.l7.app, Proto::SMBV23);
        }
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
            detect(&ODD.pkt(&bad, true, 0), &mut Flow::default()),
            Verdict::No
        );
        let v = feed(detect, SMB, &mut Flow::default(), &vec![(true, bad); 4]);
        assert_eq!(v.last(), Some(&Verdict::No));
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
            // SMB2 with a StructureSize other than 64; transform with flags 2; compression
            // with algorithm 9.
            hex("00000078fe534d4241000100"),
            {
                let mut t = hex("00000040fd534d42");
                t.resize(68, 0);
                t[46] = 2;
                t
            },
            hex("00000040fc534d4200100000090000000000000000"),
            // A NetBIOS session message holding something else (0xfb 'SMB', or text).
            hex("00000040fb534d4240000100"),
            hex("00000010474554202f20485454502f312e310d0a"),
        ] {
            // Off the SMB ports: out at once.
            let mut f = Flow::default();
            assert_eq!(
                detect(&ODD.pkt(&d, true, 0), &mut f),
                Verdict::No,
                "{d:02x?}"
            );
            assert_eq!(f.l7.app, Proto::UNKNOWN);
            // On 445 and 139: a few packets undecided (a capture may start inside a message).
            for e in [SMB, NBSS] {
                let mut f = Flow::default();
                let v = feed(detect, e, &mut f, &vec![(true, d.clone()); 6]);
                assert_eq!(v.len(), usize::from(MAX_UNSURE), "{d:02x?}");
                assert_eq!(v.last(), Some(&Verdict::No), "{d:02x?}");
                assert_eq!(f.l7.app, Proto::UNKNOWN);
            }
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
