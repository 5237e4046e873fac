//! IPsec key exchange and NAT traversal over UDP: IKEv2 (RFC 7296, IKE_INTERMEDIATE RFC
//! 9242) and IKEv1/ISAKMP (RFC 2408, 2409) on port 500; on port 4500 (RFC 3948) the same
//! behind a four-zero-byte non-ESP marker and ESP-in-UDP; the one-byte NAT keepalive 0xff is
//! passed over (anything could send one byte).
//!
//! Why: IPsec VPNs. The IKE header (28 bytes) is checked strictly: a non-zero initiator SPI,
//! major version 1 or 2 (minor 0), an exchange type valid for that version, no reserved flag
//! bits, a length equal to the datagram's, and a chain of payloads (generic headers: next
//! payload, flags, length >= 4) of valid types that ends exactly there (an IKEv2 SK payload,
//! or an IKEv1 message with its encryption flag, ends the walk: the rest is ciphertext). ESP
//! alone (SPI, sequence number, ciphertext) is too weak, so two packets of one direction must
//! carry the same SPI and a sequence number that went up.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const IKE_HEADER: usize = 28;

/// Packets looked at for a second ESP packet.
const MAX_UNSURE: u8 = 8;

/// How far an ESP sequence number may move between two packets of one direction.
const MAX_SEQ_STEP: u32 = 1 << 16;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Payload types: IKEv1 (RFC 2408 1..=13, GDOI RFC 6407 14..=19, NAT-T RFC 3947 20..=21)
/// and IKEv2 (RFC 7296 and later, 33..=54); 128..=255 are private use in both.
fn payload_type(major: u8, t: u8) -> bool {
    match major {
        1 => matches!(t, 1..=21 | 128..=255),
        _ => matches!(t, 33..=54 | 128..=255),
    }
}

/// A whole IKE message.
fn ike(b: &[u8]) -> bool {
    let Some(h) = b.get(..IKE_HEADER) else {
        return false;
    };
    let (next, version, exchange, flags) = (h[16], h[17], h[18], h[19]);
    let len = be32(&h[24..28]) as usize;
    let (major, minor) = (version >> 4, version & 0x0f);
    let header_ok = h[..8] != [0; 8]
        && minor == 0
        && len == b.len()
        && match major {
            // Base, Identity protection, Authentication only, Aggressive, Informational;
            // Quick mode, New group mode, and 34 as some stacks send.
            1 => matches!(exchange, 1..=5 | 32..=34) && flags & 0xf8 == 0,
            // IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA, INFORMATIONAL, IKE_INTERMEDIATE.
            2 => matches!(exchange, 34..=37 | 43) && flags & 0xc7 == 0,
            _ => false,
        };
    if !header_ok {
        return false;
    }
    // IKEv1 with the encryption flag: the payloads are ciphertext in cipher blocks.
    if major == 1 && flags & 1 != 0 {
        return next != 0 && payload_type(1, next) && (len - IKE_HEADER).is_multiple_of(8);
    }
    let (mut at, mut next) = (IKE_HEADER, next);
    while next != 0 {
        if !payload_type(major, next) {
            return false;
        }
        let Some(g) = b.get(at..at + 4) else {
            return false;
        };
        let plen = usize::from(u16::from_be_bytes([g[2], g[3]]));
        if plen < 4 {
            return false;
        }
        let encrypted = major == 2 && matches!(next, 46 | 53);
        at += plen;
        if encrypted {
            // SK/SKF: its next-payload names the first inner payload; it is the last one.
            return at == len;
        }
        next = g[0];
    }
    at == len && at > IKE_HEADER
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let b = p.payload;
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    if p.has_port(500) {
        return if ike(b) {
            Proto::IPSEC.is(true)
        } else {
            Verdict::No
        };
    }
    if !p.has_port(4500) {
        return Verdict::No;
    }
    match b {
        // A NAT keepalive is one byte anything could send: it leaves the flow to the next
        // packet (a flow of keepalives only gets the port guess, IPSec).
        [0xff] => return Verdict::Unsure,
        [0, 0, 0, 0, ike_msg @ ..] => {
            return if ike(ike_msg) {
                Proto::IPSEC.is(true)
            } else {
                Verdict::No
            };
        }
        _ => {}
    }
    // ESP: SPI (1..=255 are reserved), sequence number from 1, then at least an IV or the
    // trailer and an integrity check value.
    if b.len() < 20 {
        return Verdict::No;
    }
    let (spi, seq) = (be32(&b[..4]), be32(&b[4..8]));
    if spi < 256 || seq == 0 {
        return Verdict::No;
    }
    let dir = usize::from(!p.from_client);
    if let Some((s, q)) = f.scratch.esp[dir] {
        return if s == spi && seq > q && seq - q <= MAX_SEQ_STEP {
            Proto::IPSEC.is(true)
        } else {
            Verdict::No
        };
    }
    f.scratch.esp[dir] = Some((spi, seq));
    Verdict::unsure_within(p, MAX_UNSURE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // ipsec_isakmp_esp.pcap frame 17: IKEv2 IKE_SA_INIT response (500 -> 10500), a Notify
    // (COOKIE) only.
    const SA_INIT_RESP: &str = "b64ef32131a4895200000000000000002920222000000000000000340000001800004006000155739f613a70f771484cb7a6aa3f";
    // ipsec_isakmp_esp.pcap frame 1 (first 96 bytes): IKE_AUTH behind the non-ESP marker on
    // 4500; the SK payload's length (0x0310) covers the rest of the 812-byte message, so
    // the test builds the whole message from it.
    const AUTH_HEAD: &str =
        "00000000b64ef32131a4895286babd39048869552e202308000000010000032c23000310";
    // ipsec_isakmp_esp.pcap frames 7 and 8: ESP, SPI 0x04888fe4, sequence 1 and 2 (first 50
    // bytes).
    const ESP1: &str = "04888fe400000001ebb003de6868ab030f434570c3f6eea189e9578c1413f49b3294687616c504a8c59b430423687e626645";
    const ESP2: &str = "04888fe400000002d2fec6986b54d3129592507c177d68be9a7197e047d1ee3aa2e338ecc65f908d3003dff446bc2bae1329";

    fn auth() -> Vec<u8> {
        let mut b = hex(AUTH_HEAD);
        b.resize(4 + 812, 0x5a);
        b
    }

    /// RFC 2409 main mode, first message: header and one SA payload of 52 bytes
    /// (DOI, situation, a proposal with one transform).
    fn v1_main_mode() -> Vec<u8> {
        let mut b = hex("1122334455667788 0000000000000000 01 10 02 00 00000000 00000050");
        b.extend(hex("0000 0034 00000001 00000001"));
        b.extend(hex("0000 0028 01 01 0001 0000 0020 01 01 0000 800b0001 800c7080 80010005 80030001 80020002 80040002"));
        b
    }

    #[test]
    fn ike_messages() {
        for (b, e) in [
            (hex(SA_INIT_RESP), udp(10500, 500)),
            (v1_main_mode(), udp(500, 500)),
            (auth(), udp(14500, 4500)),
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&e.pkt(&b, true, 0), &mut f), Proto::IPSEC.is(true));
        }
    }

    #[test]
    fn keepalive_waits_for_the_next_packet() {
        let e = udp(14500, 4500);
        let mut f = Flow::default();
        let conv = vec![(true, vec![0xff]), (true, auth())];
        assert_eq!(
            feed(detect, e, &mut f, &conv),
            vec![Verdict::Unsure, Proto::IPSEC.is(true)]
        );
    }

    #[test]
    fn esp_in_udp() {
        let e = udp(14500, 4500);
        let mut f = Flow::default();
        let conv = vec![(true, hex(ESP1)), (true, hex(ESP2))];
        assert_eq!(
            feed(detect, e, &mut f, &conv),
            vec![Verdict::Unsure, Proto::IPSEC.is(true)]
        );
        // Another SPI, or the sequence going back, is not a session.
        let mut other = hex(ESP2);
        other[3] ^= 1;
        for conv in [
            vec![(true, hex(ESP1)), (true, other)],
            vec![(true, hex(ESP2)), (true, hex(ESP1))],
        ] {
            let mut f = Flow::default();
            assert_eq!(
                feed(detect, e, &mut f, &conv),
                vec![Verdict::Unsure, Verdict::No]
            );
        }
        // Not on port 500 or another port.
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(1, 500).pkt(&hex(ESP1), true, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect(&udp(1, 2).pkt(&[0xff], true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_ike() {
        let good = hex(SA_INIT_RESP);
        let mut zero_spi = good.clone();
        zero_spi[..8].fill(0);
        let mut v3 = good.clone();
        v3[17] = 0x30;
        let mut v1_exchange = good.clone();
        v1_exchange[17] = 0x10; // IKEv1 with IKEv2's exchange 34 and payload 41
        let mut bad_len = good.clone();
        bad_len[27] += 1;
        let mut bad_payload = good.clone();
        bad_payload[16] = 30;
        let mut short_payload = good.clone();
        short_payload[31] = 0x10; // the Notify ends before the message
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [
            &good[..40],
            &zero_spi[..],
            &v3[..],
            &v1_exchange[..],
            &bad_len[..],
            &bad_payload[..],
            &short_payload[..],
            &dns[..],
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&udp(500, 500).pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x7296);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 120)).collect();
        Fuzz::new(&[udp(500, 500), udp(14500, 4500)])
            .seeds([hex(SA_INIT_RESP), v1_main_mode(), auth()])
            .flow(vec![(true, hex(ESP1)), (true, hex(ESP2))])
            .cut_step(7)
            .payloads(random)
            .run(detect);
    }
}
