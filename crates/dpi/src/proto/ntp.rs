//! NTP over UDP (RFC 5905; control messages, mode 6, RFC 9327; ntpd's private mode 7).
//!
//! Why: time sync is ubiquitous background traffic, and mode 6/7 answers (monlist) are a
//! classic amplification vector worth labelling. NTP has no magic number, so the detector wants
//! port 123 on one side and then checks the header strictly: version 1..=4, a mode, and for
//! modes 1..=5 a 48-byte packet with a stratum of at most 16; for modes 6 and 7 the header's
//! counts must agree with the packet size; the clock fields must be a clock's (precision of
//! at most a second, root delay and dispersion under 256 s). One packet is enough.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// Largest data part of a mode 6 or 7 message (ntpd: 468 / 500 bytes).
const MAX_CONTROL_DATA: usize = 500;

fn be16(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 2)?;
    Some(usize::from(u16::from_be_bytes([s[0], s[1]])))
}

fn valid(b: &[u8]) -> bool {
    let Some(&first) = b.first() else {
        return false;
    };
    let version = (first >> 3) & 0x07;
    let mode = first & 0x07;
    if !(1..=4).contains(&version) {
        return false;
    }
    match mode {
        1..=5 => {
            // Header (48) plus optional extension fields and MAC, all in 32-bit words.
            let Some(&stratum) = b.get(1) else {
                return false;
            };
            let poll = b.get(2).map_or(0, |&p| p as i8);
            let precision = b.get(3).map_or(0, |&p| p as i8);
            // Root delay and dispersion are 16.16 seconds: a real clock's are far below 256 s
            // (the delay may be slightly negative), which random bytes rarely are.
            let (delay_hi, dispersion_hi) = (b.get(4).copied(), b.get(8).copied());
            b.len() >= 48
                && b.len() & 3 == 0
                && stratum <= 16
                && (-8..=17).contains(&poll)
                && (-32..=0).contains(&precision)
                && matches!(delay_hi, Some(0 | 0xff))
                && dispersion_hi == Some(0)
        }
        6 => {
            // R E M op | sequence | status | association id | offset | count, then data padded
            // to 32 bits, then an optional MAC (key id and an MD5 or SHA-1 digest).
            let (Some(&op), Some(count)) = (b.get(1), be16(b, 10)) else {
                return false;
            };
            let opcode = op & 0x1f;
            let response = op & 0x80 != 0;
            // A request has neither the error nor the more bit.
            let flags_ok = response || op & 0x60 == 0;
            let body = 12 + count.div_ceil(4) * 4;
            (1..=12).contains(&opcode)
                && flags_ok
                && count <= MAX_CONTROL_DATA
                && (b.len() == body || b.len() == body + 20 || b.len() == body + 24)
        }
        7 => {
            // R M VN mode | A seq | implementation | request | err+items | mbz+item size.
            let (Some(&imp), Some(items), Some(size)) = (b.get(2), be16(b, 4), be16(b, 6)) else {
                return false;
            };
            let err = items >> 12;
            let (items, size) = (items & 0x0fff, size & 0x0fff);
            matches!(imp, 0 | 2 | 3)
                && err <= 7
                && size <= MAX_CONTROL_DATA
                && items * size <= MAX_CONTROL_DATA
                && b.len() >= 8 + items * size
        }
        _ => false,
    }
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp || !p.has_port(123) {
        return Verdict::No;
    }
    if valid(p.payload) {
        Proto::NTP.is(true)
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // NTPv4.pcap frame 1: v4 client request (123 -> 123).
    const V4: &str = "230207eb00000450000003ab83bc03dfd94f51c33165b860d944575530336fd0d944575531b4e978d94f51f42d26e2f4";
    // android.pcap frames 93 (v3 client, port 45863 -> 123) and 94 (server reply).
    const V3_REQ: &str = "1b000000000000000000000000000000000000000000000000000000000000000000000000000000e1fcd68ee3126ecc";
    const V3_RESP: &str = "1c0100ec000000000000000c474f4f47e1fcd6d356f0a848e1fcd68ee3126ecce1fcd6d356f0a849e1fcd6d356f0a84b";
    // NTPv2.pcap frame 1: mode 7 MON_GETLIST_1 reply, 5 items of 72 bytes (123 -> 80).
    const V2_MODE7: &str = "970e032a00050048000000000000103a000000000000018848ef596dac100c65000000010c02070200000000000000000000000000000000000000000000000000000000000000000000000000000000000000010000106700000000000000c740bb9f0dac100c6500000001bb1c07020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000010c400000000000006ba504829d2ac100c65000000012ada07020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000010d800000000000005b35f5ab80bac100c6500000001005007020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000010db0000000000000591477ba6f6ac100c65000000010050070200000000000000000000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn ntp_packets() {
        for (h, c, s) in [
            (V4, 123, 123),
            (V3_REQ, 45863, 123),
            (V3_RESP, 45863, 123),
            (V2_MODE7, 123, 80),
        ] {
            let b = hex(h);
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(c, s).pkt(&b, true, 0), &mut f),
                Proto::NTP.is(true),
                "{h}"
            );
        }
        // A mode 6 READVAR request (12-byte header, no data) as `ntpq -c rv` sends it.
        let rv = hex("160200010000000000000000");
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 123).pkt(&rv, true, 0), &mut f),
            Proto::NTP.is(true)
        );
    }

    #[test]
    fn not_ntp() {
        let mut f = Flow::default();
        // Right bytes, no port 123.
        assert_eq!(
            detect(&udp(4000, 5000).pkt(&hex(V4), true, 0), &mut f),
            Verdict::No
        );
        // On port 123: a DNS query (dns.pcap frame 4), a short packet, version 0 or 7.
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        let mut v0 = hex(V4);
        v0[0] = 0x03;
        let mut v7 = hex(V4);
        v7[0] = 0x3b;
        let mut mode7_lies = hex(V2_MODE7);
        mode7_lies[5] = 0x09; // 9 items of 72 bytes do not fit in the packet
        for b in [&dns[..], &hex(V4)[..40], &v0[..], &v7[..], &mode7_lies[..]] {
            assert_eq!(detect(&udp(123, 123).pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1357_9bdf);
        let random: Vec<Vec<u8>> = (0..3000).map(|round| rng.bytes(round % 200)).collect();
        Fuzz::new(&[udp(123, 123)])
            .seeds([V4, V3_REQ, V3_RESP, V2_MODE7].map(hex))
            .payloads(random)
            .run(detect);
    }
}
