//! RTP and RTCP (RFC 3550) over UDP.
//!
//! One packet proves little (any payload whose first byte is 0x80..=0xBF passes the version
//! test), so a flow is labelled only after two consistent packets in the same direction:
//! * RTP: version 2, payload type 0..=34 or 96..=127 (the marker bit apart), the CSRC list and
//!   header extension inside the payload, then the same SSRC and a sequence number 1..=16
//!   ahead;
//! * RTCP: version 2, first packet type SR/RR/SDES/BYE/APP (200..=204), every length field of
//!   the compound packet inside the payload, then the same sender SSRC.
//!
//! Like nDPI, flows towards a port below 1024 are left alone. STUN is tried before this
//! detector, so WebRTC/ICE flows that start with STUN are never claimed here.
//!
//! `Scratch::rtp` keeps the first packet of a pair ([`RtpFirst`]: direction, RTP or RTCP, the
//! low 13 bits of its SSRC, its sequence number).

use crate::ids::Proto;
use crate::types::{Flow, Pkt, RtpFirst, Verdict};

/// The bits of the SSRC compared between the two packets of a pair.
const SSRC_MASK: u32 = 0x1fff;

/// Largest sequence number step accepted between the two packets (losses, reordering).
const MAX_SEQ_STEP: u16 = 16;
/// Payload packets after which an unconfirmed flow is given up.
const MAX_INDEX: u8 = 8;
/// Sub-packets of a compound RTCP packet walked at most.
const MAX_RTCP_PARTS: usize = 16;

fn be16(d: &[u8], at: usize) -> Option<u16> {
    match *d.get(at..at.checked_add(2)?)? {
        [a, b] => Some(u16::from_be_bytes([a, b])),
        _ => None,
    }
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    match *d.get(at..at.checked_add(4)?)? {
        [a, b, c, e] => Some(u32::from_be_bytes([a, b, c, e])),
        _ => None,
    }
}

/// An RTP header: returns (sequence number, SSRC).
fn rtp_header(d: &[u8]) -> Option<(u16, u32)> {
    let b0 = *d.first()?;
    let b1 = *d.get(1)?;
    if b0 >> 6 != 2 {
        return None;
    }
    let pt = b1 & 0x7f;
    if !(pt <= 34 || (96..=127).contains(&pt)) {
        return None;
    }
    let csrc = usize::from(b0 & 0x0f);
    let mut header = 12 + 4 * csrc;
    if b0 & 0x10 != 0 {
        // Header extension: 16-bit profile, 16-bit length in 32-bit words.
        let words = usize::from(be16(d, header + 2)?);
        header = header.checked_add(4 + 4 * words)?;
    }
    if header > d.len() {
        return None;
    }
    Some((be16(d, 2)?, be32(d, 8)?))
}

/// A compound RTCP packet: returns the first sub-packet's sender SSRC.
fn rtcp_header(d: &[u8]) -> Option<u32> {
    let b0 = *d.first()?;
    let b1 = *d.get(1)?;
    if b0 >> 6 != 2 || !(200..=204).contains(&b1) {
        return None;
    }
    let mut off = 0usize;
    for _ in 0..MAX_RTCP_PARTS {
        if off >= d.len() {
            break;
        }
        let v = *d.get(off)?;
        let pt = *d.get(off + 1)?;
        // RTCP packet types: 192..=223 (SR, RR, SDES, BYE, APP, feedback, XR, …).
        if v >> 6 != 2 || !(192..=223).contains(&pt) {
            // Past the first sub-packet (checked above): SRTCP's encrypted part or trailer.
            return be32(d, 4);
        }
        let len = (usize::from(be16(d, off + 2)?) + 1) * 4;
        if off + len > d.len() {
            return None;
        }
        off += len;
    }
    be32(d, 4)
}

fn record(from_client: bool, rtcp: bool, ssrc: u32, seq: u16) -> RtpFirst {
    RtpFirst {
        from_client,
        rtcp,
        ssrc_low: (ssrc & SSRC_MASK) as u16,
        seq,
    }
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let b0 = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    if b0 >> 6 != 2 {
        // A short probe/keep-alive may precede the media (version bits 0): look once more.
        let probe = p.index == 0 && b0 >> 6 == 0 && d.len() <= 20;
        return if probe && p.server_port >= 1024 {
            Verdict::Unsure
        } else {
            Verdict::No
        };
    }
    if p.server_port < 1024 || p.index >= MAX_INDEX {
        return Verdict::No;
    }
    let (rtcp, ssrc, seq) = if let Some(ssrc) = rtcp_header(d) {
        (true, ssrc, 0u16)
    } else if let Some((seq, ssrc)) = rtp_header(d) {
        (false, ssrc, seq)
    } else {
        return Verdict::No;
    };
    let now = record(p.from_client, rtcp, ssrc, seq);
    let prev = f.scratch.rtp;
    if let Some(prev) = prev.filter(|p| {
        p.from_client == now.from_client && p.rtcp == now.rtcp && p.ssrc_low == now.ssrc_low
    }) {
        if rtcp {
            return Proto::RTCP.is(true);
        }
        let step = seq.wrapping_sub(prev.seq);
        if (1..=MAX_SEQ_STEP).contains(&step) {
            return Proto::RTP.is(true);
        }
    }
    // First packet of a direction, or a new stream: (re)start from this one, unless the other
    // direction is waiting for its second packet.
    let other_dir = prev.is_some_and(|p| p.from_client != now.from_client);
    if !other_dir {
        f.scratch.rtp = Some(now);
    }
    Verdict::Unsure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // sip.pcap frames 95, 96 (PCMA, flow 192.168.1.2:30000 -> :40392, nDPI: RTP), first bytes.
    const SIP_95: &str = "80086fae000004d83796cb71d5d5d5d5d5d5d5d5d5d5d5d5";
    const SIP_96: &str = "80086faf000005783796cb716e6815146a14141569606e6a";
    // sip.pcap frame 104: RTCP SR + SDES + BYE (one packet, nDPI: Unknown).
    const SIP_104: &str = "80c800063796cb7142c907ca5efac603000024c3000000090000060c81ca000b3796cb71011d31313839343239372d3434333261396638403139322e3136382e312e3206055349505053000081cb00063796cb711073657373696f6e2073687574646f776e000000";
    // rtp.pcapng frames 7 (padding, marker) and 11 (flow 6000 -> 6000, H.263, nDPI: RTP).
    const RTP_7: &str = "a0a20116000a1694000016460070000075ad3b743b1ce0cc";
    const RTP_11: &str = "80a2011a000a2f300000164600700000617f5b582f42d9d0";
    // rtp.pcapng frames 83, 84, 85 (flow :55402 -> :6008, nDPI: RTP after 4 packets).
    const RTP_83: &str = "0100000000000000000000000000011c";
    const RTP_84: &str = "816fcdd21e5131ffb80974d80000011c480be455bf14987c";
    const RTP_85: &str = "816fcdd31e5135bfb80974d80000011c4806e379c12458";

    #[test]
    fn sip_pcap_rtp() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&hex(SIP_95), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&hex(SIP_96), true, 1), &mut f),
            Proto::RTP.is(true)
        );
    }

    #[test]
    fn rtp_pcapng() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 6000).pkt(&hex(RTP_7), true, 0), &mut f),
            Verdict::Unsure
        );
        // Sequence 0x0116 -> 0x011a: four ahead.
        assert_eq!(
            detect(&udp(30000, 6000).pkt(&hex(RTP_11), true, 1), &mut f),
            Proto::RTP.is(true)
        );
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 6008).pkt(&hex(RTP_83), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 6008).pkt(&hex(RTP_84), true, 1), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 6008).pkt(&hex(RTP_85), true, 2), &mut f),
            Proto::RTP.is(true)
        );
    }

    #[test]
    fn rtcp() {
        let sr = hex(SIP_104);
        assert_eq!(rtcp_header(&sr), Some(0x3796_cb71));
        let mut f = Flow::default();
        // One RTCP packet is not enough (nDPI leaves this single-packet flow Unknown).
        assert_eq!(
            detect(&udp(30000, 40393).pkt(&sr, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 40393).pkt(&sr, true, 1), &mut f),
            Proto::RTCP.is(true)
        );
        // A length field running past the payload.
        let mut bad = sr.clone();
        bad[3] = 0x40;
        assert_eq!(rtcp_header(&bad), None);
    }

    #[test]
    fn negatives() {
        // Different SSRCs, or a sequence jump, do not confirm.
        let a = hex(SIP_95);
        let b = hex(RTP_11);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&a, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&b, true, 1), &mut f),
            Verdict::Unsure
        );
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&a, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&a, true, 1), &mut f),
            Verdict::Unsure
        );
        // The other direction does not confirm either.
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&hex(SIP_95), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&udp(30000, 40392).pkt(&hex(SIP_96), false, 1), &mut f),
            Verdict::Unsure
        );
        // A DNS query, a QUIC long header (0xc0), a SIP request: No at once.
        for d in [
            hex("8f1a0100000100000000000003777777"),
            hex("c000000001088394c8f03e5157080000"),
            b"REGISTER sip:sip.cybercity.dk SIP/2.0\r\n".to_vec(),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(30000, 5000).pkt(&d, true, 0), &mut f),
                Verdict::No
            );
        }
        // Payload type 72..=95 is neither RTP nor RTCP's 200..=204.
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &udp(30000, 5000).pkt(&hex("80500001000000000000000100000000"), true, 0),
                &mut f
            ),
            Verdict::No
        );
        // Towards a well-known port.
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(30000, 53).pkt(&a, true, 0), &mut f),
            Verdict::No
        );
        // CSRC count past the payload.
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &udp(30000, 5000).pkt(&hex("8f080001000000000000000100000000"), true, 0),
                &mut f
            ),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        // Random bytes with version 2, a third of them with an RTCP packet type.
        let mut rng = Rng::new(0x2545_f491);
        let random: Vec<Vec<u8>> = (0..300)
            .map(|n| {
                let mut v = rng.bytes(n % 64);
                if let Some(b) = v.first_mut() {
                    *b = 0x80 | (*b & 0x3f);
                }
                if n % 3 == 0 {
                    if let Some(b) = v.get_mut(1) {
                        *b = 200 + (*b % 5);
                    }
                }
                v
            })
            .collect();
        Fuzz::new(&[udp(30000, 5000)])
            .seeds([SIP_95, SIP_96, SIP_104, RTP_7, RTP_11, RTP_83, RTP_84].map(hex))
            .seeds([hex("90080001000000000000000100ffffff")])
            .flow(vec![(true, hex(RTP_83)), (true, hex(RTP_84))])
            .payloads(random)
            .run(detect);
    }
}
