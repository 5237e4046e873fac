//! SSDP, UPnP discovery over UDP (UPnP Device Architecture 2.0, section 1; multicast
//! 239.255.255.250 / ff0x::c, port 1900).
//!
//! Why: SSDP is constant LAN chatter and a known amplification vector. The requests are
//! HTTP-over-UDP with their own request lines, `M-SEARCH * HTTP/1.1` and `NOTIFY * HTTP/1.1`,
//! which nothing else sends: they are enough on any port. A search response is a plain
//! `HTTP/1.1 200 OK` over UDP, sent unicast from any port of the device to the port the search
//! came from (so usually neither side is 1900): it counts with both the `ST:` and `USN:`
//! header lines the specification requires of it, or with one of them on port 1900. One
//! packet is enough.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// Longest header block looked at for the response's `ST:`/`USN:` lines.
const MAX_HEAD: usize = 2048;

/// Whether the header block has an `ST:` line and a `USN:` line.
fn ssdp_headers(b: &[u8]) -> (bool, bool) {
    let head = &b[..b.len().min(MAX_HEAD)];
    let (mut st, mut usn) = (false, false);
    for line in head.split(|&c| c == b'\n').skip(1) {
        let l = |p: &[u8]| line.len() >= p.len() && line[..p.len()].eq_ignore_ascii_case(p);
        st |= l(b"ST:");
        usn |= l(b"USN:");
    }
    (st, usn)
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    let b = p.payload;
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    if b.starts_with(b"M-SEARCH * HTTP/1.1\r\n") || b.starts_with(b"NOTIFY * HTTP/1.1\r\n") {
        return Proto::SSDP.is(true);
    }
    if b.starts_with(b"HTTP/1.1 200 OK\r\n") {
        let (st, usn) = ssdp_headers(b);
        if (st && usn) || (p.has_port(1900) && (st || usn)) {
            return Proto::SSDP.is(true);
        }
    }
    Verdict::No
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    /// UPnP Device Architecture 2.0, 1.3.2: a multicast search.
    const SEARCH: &[u8] = b"M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 2\r\nST: ssdp:all\r\n\r\n";
    /// 1.2.2: an advertisement.
    const NOTIFY: &[u8] = b"NOTIFY * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nCACHE-CONTROL: max-age=1800\r\nLOCATION: http://192.168.1.1:5000/rootDesc.xml\r\nNT: upnp:rootdevice\r\nNTS: ssdp:alive\r\nUSN: uuid:1234::upnp:rootdevice\r\n\r\n";
    /// 1.3.3: a search response.
    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=1800\r\nEXT:\r\nLOCATION: http://192.168.1.1:5000/rootDesc.xml\r\nSERVER: Linux UPnP/1.1 MiniUPnPd/2.0\r\nST: upnp:rootdevice\r\nUSN: uuid:1234::upnp:rootdevice\r\n\r\n";

    #[test]
    fn ssdp_packets() {
        for (b, e, c) in [
            (SEARCH, udp(50000, 1900), true),
            (NOTIFY, udp(1900, 1900), true),
            (RESPONSE, udp(50000, 1900), false),
            // anyconnect-vpn.pcap (nDPI 4.2's tests): a search response between two
            // ephemeral ports, with ST and USN.
            (RESPONSE, udp(38616, 61328), false),
            // A unicast search to a device's own port.
            (SEARCH, udp(50000, 2869), true),
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&e.pkt(b, c, 0), &mut f), Proto::SSDP.is(true));
        }
    }

    #[test]
    fn not_ssdp() {
        let mut f = Flow::default();
        // A response away from port 1900; an HTTP response without SSDP headers; SIP NOTIFY;
        // a cut request line; TCP.
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let sip = b"NOTIFY sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n\r\n";
        let st_only = b"HTTP/1.1 200 OK\r\nST: upnp:rootdevice\r\n\r\n";
        for (b, e) in [
            (&st_only[..], udp(50000, 8080)),
            (&plain[..], udp(50000, 1900)),
            (&sip[..], udp(5060, 1900)),
            (&SEARCH[..12], udp(50000, 1900)),
        ] {
            assert_eq!(detect(&e.pkt(b, false, 0), &mut f), Verdict::No);
        }
        assert_eq!(
            detect(&tcp(50000, 1900).pkt(SEARCH, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1900);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 200)).collect();
        Fuzz::new(&[udp(50000, 1900)])
            .seeds([SEARCH, NOTIFY, RESPONSE].map(|s| s.to_vec()))
            .payloads(random)
            .run(detect);
    }
}
