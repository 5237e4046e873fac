//! DNS, mDNS and LLMNR over UDP (RFC 1035, RFC 6762, RFC 4795).
//!
//! Why: the name a client resolves tells what it is about to talk to, often before any other
//! payload of that conversation. The detector checks the 12-byte header, walks the first
//! question name (compression pointers bounded), and on a response reads the rcode and up to
//! [`MAX_ANSWERS`] A/AAAA/CNAME/PTR answers. It keeps the flow after a query to see the response.
//!
//! On ports 53/5353/5355 a plausible header and a well-formed first question are enough (the
//! rest may be cut by the snaplen or by IP fragmentation); on any other port the whole message
//! must parse exactly to its last byte.

use crate::ids::Proto;
use crate::meta::Dns;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Answers kept from a response.
const MAX_ANSWERS: usize = 8;
/// Longest name on the wire (RFC 1035 §2.3.4); our text form has one byte less.
const MAX_NAME: usize = 255;
/// Compression pointers followed per name at most.
const MAX_HOPS: usize = 16;
/// Records walked per message at most (questions + answers + authority + additional).
const MAX_RECORDS: usize = 64;

/// Header fields the detector uses.
#[derive(Clone, Copy, Debug)]
struct Header {
    response: bool,
    opcode: u8,
    rcode: u8,
    qd: u16,
    an: u16,
    ns: u16,
    ar: u16,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn header(b: &[u8]) -> Option<Header> {
    let flags = be16(b, 2)?;
    Some(Header {
        response: flags & 0x8000 != 0,
        opcode: ((flags >> 11) & 0x0f) as u8,
        rcode: (flags & 0x000f) as u8,
        qd: be16(b, 4)?,
        an: be16(b, 6)?,
        ns: be16(b, 8)?,
        ar: be16(b, 10)?,
    })
}

/// Reads the name at `at` into `out` (dotted text, without the root dot). Returns the offset
/// just after the name in the message (after the first pointer when compressed) and the text
/// length, or `None` when malformed or cut.
fn read_name(msg: &[u8], at: usize, out: &mut [u8; MAX_NAME]) -> Option<(usize, usize)> {
    let mut pos = at;
    let mut end_after: Option<usize> = None;
    let mut len = 0usize;
    let mut hops = 0usize;
    // A name has at most 128 labels; the bound keeps the loop finite whatever the bytes.
    for _ in 0..(MAX_NAME + MAX_HOPS) {
        let l = *msg.get(pos)? as usize;
        match l & 0xc0 {
            0x00 => {
                if l == 0 {
                    return Some((end_after.unwrap_or(pos + 1), len));
                }
                let label = msg.get(pos + 1..pos + 1 + l)?;
                let sep = usize::from(len != 0);
                if len + sep + l > MAX_NAME - 1 {
                    return None;
                }
                if sep == 1 {
                    out[len] = b'.';
                    len += 1;
                }
                out.get_mut(len..len + l)?.copy_from_slice(label);
                len += l;
                pos += 1 + l;
            }
            0xc0 => {
                let ptr = (be16(msg, pos)? & 0x3fff) as usize;
                hops += 1;
                // Pointers go backwards (to an earlier name): no loops, bounded hops.
                if hops > MAX_HOPS || ptr >= pos {
                    return None;
                }
                if end_after.is_none() {
                    end_after = Some(pos + 2);
                }
                pos = ptr;
            }
            _ => return None, // 0x40 / 0x80: obsolete or reserved label types
        }
    }
    None
}

/// Skips a name without keeping it.
fn skip_name(msg: &[u8], at: usize) -> Option<usize> {
    let mut buf = [0u8; MAX_NAME];
    read_name(msg, at, &mut buf).map(|(end, _)| end)
}

fn is_dns_port(p: &Pkt<'_>) -> Option<Proto> {
    if p.has_port(5353) {
        Some(Proto::MDNS)
    } else if p.has_port(5355) {
        Some(Proto::LLMNR)
    } else if p.has_port(53) {
        Some(Proto::DNS)
    } else {
        None
    }
}

/// Header plausibility: opcode QUERY/IQUERY/STATUS/NOTIFY/UPDATE, rcode ≤ 10, bounded counts.
fn plausible(h: &Header, proto: Option<Proto>) -> bool {
    if !matches!(h.opcode, 0 | 1 | 2 | 4 | 5) || h.rcode > 10 {
        return false;
    }
    if !h.response && h.rcode != 0 {
        return false;
    }
    let mdns = proto == Some(Proto::MDNS);
    let records = u32::from(h.qd) + u32::from(h.an) + u32::from(h.ns) + u32::from(h.ar);
    if records == 0 || records > MAX_RECORDS as u32 {
        return false;
    }
    if mdns {
        // mDNS announcements carry no question; queries may carry known answers.
        return h.qd <= 32;
    }
    if !(1..=4).contains(&h.qd) {
        return false;
    }
    if !h.response {
        // A query asks; it carries at most an EDNS OPT / TSIG / update records.
        return h.an == 0 || h.opcode == 5 || h.opcode == 4;
    }
    true
}

/// Walks one resource record from `at`; returns the offset after it and (type, rdata range).
fn rr(msg: &[u8], at: usize) -> Option<(usize, u16, usize, usize)> {
    let p = skip_name(msg, at)?;
    let rtype = be16(msg, p)?;
    let rdlen = be16(msg, p + 8)? as usize;
    let start = p + 10;
    let end = start + rdlen;
    Some((end, rtype, start, end))
}

/// NetBIOS name service (ports 137/138) uses the DNS message format with names encoded as 32
/// letters `A`..=`P`: not ours.
fn netbios(p: &Pkt<'_>, m: &Parsed) -> bool {
    p.has_port(137)
        || p.has_port(138)
        || (m.name_len == 32 && m.name[..32].iter().all(|c| (b'A'..=b'P').contains(c)))
}

/// The result of reading one message.
struct Parsed {
    h: Header,
    /// First question's name (text), its length, and qtype, when `has_question`.
    name: [u8; MAX_NAME],
    name_len: usize,
    qtype: u16,
    has_question: bool,
    /// True when every counted record was walked and the message ends exactly there.
    exact: bool,
}

fn parse(msg: &[u8], proto: Option<Proto>) -> Option<Parsed> {
    let h = header(msg)?;
    if !plausible(&h, proto) {
        return None;
    }
    let mut out = Parsed {
        h,
        name: [0u8; MAX_NAME],
        name_len: 0,
        qtype: 0,
        has_question: false,
        exact: false,
    };
    let mut pos = 12usize;
    for q in 0..h.qd {
        let (end, len) = if q == 0 {
            read_name(msg, pos, &mut out.name)?
        } else {
            match skip_name(msg, pos) {
                Some(e) => (e, 0),
                None => return Some(out),
            }
        };
        let qtype = be16(msg, end);
        let qclass = be16(msg, end + 2);
        if q == 0 {
            let (qtype, qclass) = (qtype?, qclass?);
            // IN (with mDNS's unicast-response bit), CH, HS, NONE (update), ANY.
            if !matches!(qclass & 0x7fff, 1 | 3 | 4 | 254 | 255) || qtype == 0 {
                return None;
            }
            out.name_len = len;
            out.qtype = qtype;
            out.has_question = true;
        }
        pos = end + 4;
    }
    let rrs = usize::from(h.an) + usize::from(h.ns) + usize::from(h.ar);
    for _ in 0..rrs {
        match rr(msg, pos) {
            Some((end, _, _, _)) if end <= msg.len() => pos = end,
            _ => return Some(out),
        }
    }
    out.exact = pos == msg.len();
    Some(out)
}

/// Fills rcode and answers from a response.
fn read_answers(msg: &[u8], h: &Header, dns: &mut Dns) {
    dns.rcode = Some(h.rcode);
    let mut pos = 12usize;
    for _ in 0..h.qd.min(MAX_RECORDS as u16) {
        match skip_name(msg, pos) {
            Some(e) => pos = e + 4,
            None => return,
        }
    }
    for _ in 0..h.an.min(MAX_RECORDS as u16) {
        if dns.answers.len() >= MAX_ANSWERS {
            return;
        }
        let Some((end, rtype, start, rend)) = rr(msg, pos) else {
            return;
        };
        let Some(rdata) = msg.get(start..rend) else {
            return;
        };
        match rtype {
            1 => {
                if let Ok(a) = <[u8; 4]>::try_from(rdata) {
                    dns.answers.push(Ipv4Addr::from(a).to_string());
                }
            }
            28 => {
                if let Ok(a) = <[u8; 16]>::try_from(rdata) {
                    dns.answers.push(Ipv6Addr::from(a).to_string());
                }
            }
            5 | 12 => {
                let mut buf = [0u8; MAX_NAME];
                if let Some((_, len)) = read_name(msg, start, &mut buf) {
                    dns.answers.push(wire_string(&buf[..len]));
                }
            }
            _ => {}
        }
        pos = end;
    }
}

/// The encrypted-DNS service whose certificate a query asks for: `2.dnscrypt-cert.…` (any
/// case) is the name DNSCrypt v2 certificates are published under; Avast SecureDNS, a
/// DNSCrypt service nDPI names apart, publishes its own as `2.securedns.…`.
fn dnscrypt_cert(name: &[u8]) -> Option<Proto> {
    let starts = |p: &[u8]| name.len() > p.len() && name[..p.len()].eq_ignore_ascii_case(p);
    if starts(b"2.dnscrypt-cert.") {
        Some(Proto::DNSCRYPT)
    } else if starts(b"2.securedns.") {
        Some(Proto::AVAST_SECUREDNS)
    } else {
        None
    }
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let msg = p.payload;
    if p.l4 != L4::Udp || msg.len() < 17 {
        return Verdict::No;
    }
    let port_proto = is_dns_port(p);
    let owned = f.meta.dns.is_some();
    let Some(m) = parse(msg, port_proto) else {
        // A later non-DNS packet in an owned flow just ends the look.
        return if owned {
            Verdict::Is {
                proto: f.l7.proto,
                done: true,
            }
        } else {
            Verdict::No
        };
    };
    // DNSCrypt's clients fetch the resolver's certificate as a TXT record named
    // `2.dnscrypt-cert.<provider>` over plain DNS, before the encrypted queries; the name is
    // enough even when the message is cut (the padded query is often IP-fragmented).
    let dnscrypt =
        (m.has_question && m.h.opcode == 0 && port_proto.is_none_or(|p| p == Proto::DNS))
            .then(|| dnscrypt_cert(&m.name[..m.name_len]))
            .flatten();
    if port_proto.is_none()
        && dnscrypt.is_none()
        && !(m.exact && m.has_question && m.h.opcode == 0 && !netbios(p, &m))
    {
        return Verdict::No;
    }
    let proto = dnscrypt.unwrap_or(port_proto.unwrap_or(Proto::DNS));
    if owned {
        // We own the flow: waiting for the response to the query already recorded.
        if !m.h.response {
            return proto.is(false);
        }
        if let Some(dns) = f.meta.dns.as_mut() {
            read_answers(msg, &m.h, dns);
        }
        return proto.is(true);
    }
    let mut dns = Dns {
        is_mdns: proto == Proto::MDNS,
        ..Dns::default()
    };
    if m.has_question {
        let name = wire_string(&m.name[..m.name_len]);
        dns.qtype = m.qtype;
        if !name.is_empty() {
            f.meta.server_name = Some(name.clone());
        }
        dns.query = Some(name);
    }
    let response = m.h.response;
    if response {
        read_answers(msg, &m.h, &mut dns);
    }
    f.meta.dns = Some(Box::new(dns));
    // mDNS traffic is mostly multicast announcements with no reply to wait for.
    proto.is(response || proto == Proto::MDNS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // dns.pcap frames 4 (query) and 5 (response): e7.whatsapp.net, 8 A records.
    const Q_WA: &str = "784301000001000000000000026537087768617473617070036e65740000010001";
    const R_WA: &str = "784381800001000800000000026537087768617473617070036e65740000010001c00c00010001000001eb0004a92ddbebc00c00010001000001eb0004a92f288ec00c00010001000001eb0004a92df879c00c00010001000001eb00046ca8b0eac00c00010001000001eb0004a92df8bdc00c00010001000001eb0004a92df8b4c00c00010001000001eb0004a935514fc00c00010001000001eb0004a92ddbe8";
    // dns.pcap frame 1: a response seen first (AAAA www.l.google.com, no answers).
    const R_GOOGLE: &str = "dca28180000100000000000003777777016c06676f6f676c6503636f6d00001c0001";

    #[test]
    fn dnscrypt_certificate_queries() {
        // A TXT query for 2.dnscrypt-cert.example.org, on 443 and on 53, whole and cut short
        // (an IP fragment of a padded query); the same name on mDNS stays mDNS.
        let mut q = hex("12340100000100000000000001320d646e7363727970742d6365727407");
        q.extend(b"example\x03org\x00\x00\x10\x00\x01");
        // The cut one claims an additional record (EDNS padding) that is not there.
        let mut cut = q.clone();
        cut[11] = 1;
        for (port, msg) in [(443, &q[..]), (53, &q[..]), (443, &cut[..])] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(40000, port).pkt(msg, true, 0), &mut f),
                Proto::DNSCRYPT.is(false),
                "port {port}, {} bytes",
                msg.len()
            );
        }
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(5353, 5353).pkt(&q, true, 0), &mut f),
            Proto::MDNS.is(true)
        );
        // avast_securedns.pcapng (nDPI 4.2's tests): 2.SeCURednS.aVasT.CoM, TXT.
        let mut avast = hex("9a2b0100000100000000000001320953");
        avast.extend(b"eCURednS\x05aVasT\x03CoM\x00\x00\x10\x00\x01");
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(57970, 443).pkt(&avast, true, 0), &mut f),
            Proto::AVAST_SECUREDNS.is(false)
        );
        // Not the certificate name: an ordinary query on 443 cut short is not claimed.
        let mut other = cut.clone();
        other[13] = b'3';
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 443).pkt(&other, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn query_then_response() {
        let mut f = Flow::default();
        let q = hex(Q_WA);
        let r = hex(R_WA);
        assert_eq!(
            detect(&udp(47255, 53).pkt(&q, true, 0), &mut f),
            Proto::DNS.is(false)
        );
        assert_eq!(f.meta.server_name.as_deref(), Some("e7.whatsapp.net"));
        assert_eq!(
            detect(&udp(47255, 53).pkt(&r, false, 1), &mut f),
            Proto::DNS.is(true)
        );
        let dns = f.meta.dns.as_ref().unwrap();
        assert_eq!(dns.query.as_deref(), Some("e7.whatsapp.net"));
        assert_eq!(dns.qtype, 1);
        assert_eq!(dns.rcode, Some(0));
        // tshark -e dns.a
        assert_eq!(
            dns.answers,
            [
                "169.45.219.235",
                "169.47.40.142",
                "169.45.248.121",
                "108.168.176.234",
                "169.45.248.189",
                "169.45.248.180",
                "169.53.81.79",
                "169.45.219.232"
            ]
        );
    }

    #[test]
    fn response_first() {
        let mut f = Flow::default();
        let r = hex(R_GOOGLE);
        // The flow's "client" is the server here: first packet seen came from port 53.
        assert_eq!(
            detect(&udp(53, 32795).pkt(&r, true, 0), &mut f),
            Proto::DNS.is(true)
        );
        let dns = f.meta.dns.as_ref().unwrap();
        assert_eq!(dns.query.as_deref(), Some("www.l.google.com"));
        assert_eq!(dns.qtype, 28);
        assert_eq!(dns.rcode, Some(0));
        assert!(dns.answers.is_empty());
    }

    // dns_fragmented.pcap frame 6: AAAA answers with compression (pa.weberlab.de).
    #[test]
    fn aaaa_and_cnames() {
        // Synthetic response built from the rules: www.a.b CNAME x.a.b, x.a.b AAAA ::1.
        let r = hex(concat!(
            "12348180000100020000000003777777016101620000010001",
            "c00c0005000100000010000401 78c010",
            "c025001c000100000010001000000000000000000000000000000001"
        )
        .replace(' ', "")
        .as_str());
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 53).pkt(&r, false, 0), &mut f),
            Proto::DNS.is(true)
        );
        assert_eq!(f.meta.dns.as_ref().unwrap().answers, ["x.a.b", "::1"]);
    }

    #[test]
    fn mdns_and_llmnr_ports() {
        let q = hex(Q_WA);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(5353, 5353).pkt(&q, true, 0), &mut f),
            Proto::MDNS.is(true)
        );
        assert!(f.meta.dns.as_ref().unwrap().is_mdns);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(50000, 5355).pkt(&q, true, 0), &mut f),
            Proto::LLMNR.is(false)
        );
    }

    #[test]
    fn other_port_needs_exact_message() {
        let q = hex(Q_WA);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 5000).pkt(&q, true, 0), &mut f),
            Proto::DNS.is(false)
        );
        let mut cut = q.clone();
        cut.truncate(q.len() - 1);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 5000).pkt(&cut, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_dns() {
        // NTPv4.pcap frame 1 and a STUN binding request header (RFC 5389 form).
        let ntp = hex("230207eb00000450000003ab83bc03dfd94f51c33165b860d944575530336fd0d944575531b4e978d94f51f42d26e2f4");
        let stun = hex("000100002112a442a1b2c3d4e5f6a7b8c9d0e1f2");
        for b in [&ntp[..], &stun[..], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(40000, 123).pkt(b, true, 0), &mut f),
                Verdict::No
            );
        }
        // NetBIOS name query (1kxun.pcap frame 39, port 137): DNS format, but not DNS.
        let nb = hex("b1e6011000010000000000002046484641454245454341434143414341434143414341434143414341434141410000200001");
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(137, 137).pkt(&nb, true, 0), &mut f),
            Verdict::No
        );
        // Pointer loop on port 53.
        let lp = hex("000001000001000000000000c00c00010001");
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(40000, 53).pkt(&lp, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        // A plausible response header (8 answers) with a random body, to reach the name walker.
        let mut rng = Rng::new(0x1234_5678);
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|round| {
                let mut b = vec![0, 0, 0x81, 0x80, 0, 1, 0, 8, 0, 0, 0, 0];
                b.extend(rng.bytes(round % 588));
                b
            })
            .collect();
        Fuzz::new(&[udp(40000, 53), udp(5353, 5353), udp(40000, 9999)])
            .seeds([hex(Q_WA), hex(R_WA), hex(R_GOOGLE)])
            .flow(vec![(true, hex(Q_WA)), (false, hex(R_WA))])
            .payloads(random)
            .run(detect);
    }
}
