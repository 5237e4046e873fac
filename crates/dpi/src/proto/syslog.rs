//! Syslog over UDP (RFC 3164 BSD syslog, RFC 5424 with RFC 5426) and over TCP (RFC 6587:
//! octet counting `LEN SP MSG` or newline framing; ports 514, 601, and 6514 without TLS).
//!
//! Why: logs sent in clear are worth seeing (and often leak). Every message starts with
//! `<PRI>`, PRI 0..=191 in 1 to 3 digits without a leading zero (except `<0>`). On the syslog
//! ports that plus printable text after it is enough (RFC 3164 allows any text); on other
//! ports the header must be strict: an RFC 5424 `VERSION SP TIMESTAMP SP` (`-` or a full
//! date) or an RFC 3164 `Mmm dd hh:mm:ss ` timestamp. A TCP capture that starts inside a
//! message is given a few more segments on the syslog ports.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const UDP_PORTS: [u16; 1] = [514];
const TCP_PORTS: [u16; 3] = [514, 601, 6514];

/// Printable characters looked at after `<PRI>`, and how many there must be at least.
const TEXT_LOOK: usize = 16;
const TEXT_MIN: usize = 4;

/// The length of a `<PRI>` at the start of `b`.
fn pri(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'<') {
        return None;
    }
    let digits = b[1..]
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if !(1..=3).contains(&digits) || b.get(1 + digits) != Some(&b'>') {
        return None;
    }
    let d = &b[1..1 + digits];
    if d[0] == b'0' && digits > 1 {
        return None;
    }
    let v = d.iter().fold(0u32, |v, c| v * 10 + u32::from(c - b'0'));
    (v <= 191).then_some(digits + 2)
}

fn printable(c: u8) -> bool {
    (0x20..0x7f).contains(&c) || c == b'\t'
}

/// Text after PRI: up to [`TEXT_LOOK`] printable bytes before any line end, at least
/// [`TEXT_MIN`].
fn text(b: &[u8]) -> bool {
    let look = &b[..b.len().min(TEXT_LOOK)];
    let line = look
        .iter()
        .position(|c| matches!(c, b'\n' | b'\r' | 0))
        .unwrap_or(look.len());
    line >= TEXT_MIN && look[..line].iter().all(|&c| printable(c))
}

fn digits(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(u8::is_ascii_digit)
}

/// RFC 5424: `VERSION SP TIMESTAMP SP`, VERSION 1..=999 without a leading zero, TIMESTAMP
/// `-` or `YYYY-MM-DDT`.
fn rfc5424(b: &[u8]) -> bool {
    let v = b.iter().take(4).take_while(|c| c.is_ascii_digit()).count();
    if !(1..=3).contains(&v) || b[0] == b'0' || b.get(v) != Some(&b' ') {
        return false;
    }
    let t = &b[v + 1..];
    if t.starts_with(b"- ") {
        return t.len() > 2 && text(&t[2..]);
    }
    let Some(d) = t.get(..11) else {
        return false;
    };
    digits(&d[..4])
        && d[4] == b'-'
        && digits(&d[5..7])
        && d[7] == b'-'
        && digits(&d[8..10])
        && d[10] == b'T'
}

/// RFC 3164: `Mmm dd hh:mm:ss ` (day padded with a space, or with a zero as many senders do).
fn bsd_timestamp(b: &[u8]) -> bool {
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let Some(t) = b.get(..16) else {
        return false;
    };
    MONTHS.contains(&&t[..3])
        && t[3] == b' '
        && (t[4] == b' ' || (b'0'..=b'3').contains(&t[4]))
        && t[5].is_ascii_digit()
        && t[6] == b' '
        && digits(&t[7..9])
        && t[9] == b':'
        && digits(&t[10..12])
        && t[12] == b':'
        && digits(&t[13..15])
        && t[15] == b' '
}

/// One syslog message at the start of `b` (after any TCP octet count).
fn message(b: &[u8], on_port: bool) -> bool {
    let Some(n) = pri(b) else {
        return false;
    };
    let rest = &b[n..];
    rfc5424(rest) || bsd_timestamp(rest) || (on_port && text(rest))
}

/// RFC 6587 octet counting: `MSG-LEN SP`, MSG-LEN without a leading zero.
fn octet_count(b: &[u8]) -> Option<usize> {
    let n = b.iter().take(7).take_while(|c| c.is_ascii_digit()).count();
    ((1..=6).contains(&n) && b[0] != b'0' && b.get(n) == Some(&b' ')).then_some(n + 1)
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    let b = p.payload;
    let on_port = match p.l4 {
        L4::Udp => UDP_PORTS.iter().any(|&q| p.has_port(q)),
        L4::Tcp => TCP_PORTS.iter().any(|&q| p.has_port(q)),
    };
    let framed = p.l4 == L4::Tcp && octet_count(b).is_some_and(|n| message(&b[n..], on_port));
    if message(b, on_port) || framed {
        return Proto::SYSLOG.is(true);
    }
    // A TCP capture may start inside a message: the next segments may start one.
    if p.l4 == L4::Tcp && on_port && p.index < 3 {
        Verdict::Unsure
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // syslog.pcap frame 1: RFC 3164 with a BSD timestamp (514 -> 514), first 80 bytes.
    const BSD: &str = "3c32363e4a616e2030312030303a30313a3437206e6236206e62643a2030313d373b30333d39352e3133362e3234322e35343b30343d4e42362d4658432d72323b30353d453041314437313843323730";
    // syslog.pcap frame 3: RFC 3164 free text (`<134>854 08/20/2013-19:05:23 CONFIG ...`).
    const FREE: &str = "3c3133343e3835342030382f32302f323031332d31393a30353a323320434f4e46494720514c413233585820504349444556303320446973634c6f6f";
    // syslog.pcap frame 81: RFC 5424 over TCP with newline framing (49948 -> 52173), first
    // 64 bytes.
    const V5424: &str = "3c32323e3120323032312d30342d31385431343a35313a34382b30343a3030206950686f6e65372c3220636f6d2e6474732e66726565666972657468202d202d";

    #[test]
    fn syslog_messages() {
        for (h, e) in [
            (BSD, udp(514, 514)),
            (FREE, udp(40000, 514)),
            (BSD, udp(40000, 5140)),
            (V5424, tcp(49948, 52173)),
            (V5424, udp(40000, 514)),
        ] {
            let b = hex(h);
            let mut f = Flow::default();
            assert_eq!(
                detect(&e.pkt(&b, true, 0), &mut f),
                Proto::SYSLOG.is(true),
                "{h}"
            );
        }
        // RFC 6587 octet counting on 601, RFC 5424 example 1 with a NILVALUE timestamp.
        for m in [
            &b"87 <34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - 'su root' failed"[..],
            b"<0>1 - host app - - - hello",
            b"<165>Aug 24 05:34:00 CST 1987 mymachine myproc[10]: test",
        ] {
            let mut f = Flow::default();
            let v = detect(&tcp(40000, 601).pkt(m, true, 0), &mut f);
            assert_eq!(v, Proto::SYSLOG.is(true), "{}", String::from_utf8_lossy(m));
        }
    }

    #[test]
    fn not_syslog() {
        let mut f = Flow::default();
        // Free text off the syslog ports; bad PRIs; no text; XML; a DNS query on 514.
        let free = hex(FREE);
        assert_eq!(
            detect(&udp(4000, 5000).pkt(&free, true, 0), &mut f),
            Verdict::No
        );
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for m in [
            &b"<192>Jan  1 00:00:00 host x"[..],
            b"<01>hello world",
            b"<1234>hello world",
            b"<>hello world",
            b"<13>",
            b"<13>ab\x01\x02\x03",
            b"<?xml version=\"1.0\"?>",
            &dns,
        ] {
            assert_eq!(detect(&udp(514, 514).pkt(m, true, 0), &mut f), Verdict::No);
        }
        // TCP on 514 gives a capture that starts mid-message a few segments, then gives up.
        let mut f = Flow::default();
        let mid = b"continued text without a header";
        assert_eq!(
            detect(&tcp(40000, 514).pkt(mid, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&tcp(40000, 514).pkt(mid, true, 3), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x514);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 120)).collect();
        Fuzz::new(&[udp(514, 514), tcp(40000, 601), udp(1, 2)])
            .seeds([BSD, FREE, V5424].map(hex))
            .payloads(random)
            .run(detect);
    }
}
