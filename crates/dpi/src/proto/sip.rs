//! SIP (RFC 3261) over UDP or TCP: a request line `METHOD sip:… SIP/2.0` or a status line
//! `SIP/2.0 NNN …` at the start of the payload. The first line goes to `meta.banner`; for a
//! request, the host of the Request-URI (`sip:user@host:port;params` → `host`) goes to
//! `meta.server_name`. Keep-alives (CRLFs, as RFC 5626 sends them) before the first message
//! leave the flow undecided.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict};

const METHODS: &[&[u8]] = &[
    b"INVITE",
    b"REGISTER",
    b"OPTIONS",
    b"ACK",
    b"BYE",
    b"CANCEL",
    b"SUBSCRIBE",
    b"NOTIFY",
    b"MESSAGE",
    b"INFO",
    b"PRACK",
    b"UPDATE",
    b"REFER",
    b"PUBLISH",
];

/// Longest first line looked at.
const MAX_LINE: usize = 1024;

/// First line of `d` without CR/LF, at most [`MAX_LINE`] bytes.
fn line(d: &[u8]) -> &[u8] {
    let d = d.get(..d.len().min(MAX_LINE)).unwrap_or_default();
    let end = d
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(d.len());
    d.get(..end).unwrap_or_default()
}

/// `SIP/2.0 NNN` (a space or the end after the code).
fn is_status(l: &[u8]) -> bool {
    l.starts_with(b"SIP/2.0 ")
        && l.get(8..11)
            .is_some_and(|c| c.iter().all(u8::is_ascii_digit))
        && matches!(l.get(11), None | Some(b' '))
}

/// `METHOD SP Request-URI SP SIP/2.0`: returns the Request-URI.
fn request_uri(l: &[u8]) -> Option<&[u8]> {
    let m = METHODS
        .iter()
        .find(|m| l.starts_with(m) && l.get(m.len()) == Some(&b' '))?;
    let rest = l.get(m.len() + 1..)?;
    let uri_end = rest.iter().position(|&b| b == b' ')?;
    let uri = rest.get(..uri_end)?;
    let version = rest.get(uri_end + 1..)?;
    if version != b"SIP/2.0" {
        return None;
    }
    let scheme_ok = [&b"sip:"[..], b"sips:", b"tel:"].iter().any(|s| {
        uri.len() > s.len()
            && uri
                .get(..s.len())
                .is_some_and(|h| h.eq_ignore_ascii_case(s))
    });
    scheme_ok.then_some(uri)
}

/// Host part of a `sip:`/`sips:` URI: after the scheme and an optional `user@`, up to
/// `:port`, `;params`, `?headers` (an IPv6 reference keeps its brackets' content).
fn uri_host(uri: &[u8]) -> Option<&[u8]> {
    let colon = uri.iter().position(|&b| b == b':')?;
    let scheme = uri.get(..colon)?;
    if !(scheme.eq_ignore_ascii_case(b"sip") || scheme.eq_ignore_ascii_case(b"sips")) {
        return None;
    }
    let rest = uri.get(colon + 1..)?;
    let rest = match rest.iter().position(|&b| b == b'@') {
        Some(at) => rest.get(at + 1..)?,
        None => rest,
    };
    let host = if rest.first() == Some(&b'[') {
        let close = rest.iter().position(|&b| b == b']')?;
        rest.get(1..close)?
    } else {
        let end = rest
            .iter()
            .position(|&b| matches!(b, b':' | b';' | b'?' | b'>'))
            .unwrap_or(rest.len());
        rest.get(..end)?
    };
    let ok = !host.is_empty()
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    ok.then_some(host)
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let first = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    // Cheap first-byte filter: 'S' (status) or a method's initial.
    if !matches!(
        first,
        b'S' | b'I' | b'R' | b'O' | b'A' | b'B' | b'C' | b'N' | b'M' | b'P' | b'U'
    ) {
        // Keep-alives: CRLF or CRLFCRLF, or 4 zero bytes some clients send.
        let keepalive = d.len() <= 4 && d.iter().all(|&b| matches!(b, b'\r' | b'\n' | 0));
        return if keepalive && p.index < 4 {
            Verdict::Unsure
        } else {
            Verdict::No
        };
    }
    let l = line(d);
    if is_status(l) {
        if f.meta.banner.is_none() {
            f.meta.banner = Some(wire_string(l));
        }
        return Proto::SIP.is(true);
    }
    let uri = match request_uri(l) {
        Some(u) => u,
        None => return Verdict::No,
    };
    if f.meta.banner.is_none() {
        f.meta.banner = Some(wire_string(l));
    }
    if f.meta.server_name.is_none() {
        if let Some(h) = uri_host(uri) {
            f.meta.server_name = Some(wire_string(h).to_ascii_lowercase());
        }
    }
    Proto::SIP.is(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // sip.pcap frame 1 (first 120 bytes of the REGISTER) and frame 2 (first 60 bytes of the 401).
    const REGISTER: &str = "5245474953544552207369703a7369702e6379626572636974792e646b205349502f322e300d0a5669613a205349502f322e302f554450203139322e3136382e312e323b6272616e63683d7a39684734624b6e703135313234383733372d34366561373135653139322e3136382e312e323b72706f72740d0a";
    const UNAUTHORIZED: &str = "5349502f322e302034303120556e617574686f72697a65640d0a43616c6c2d49443a203537383232323732392d3436363564373735403537383232323733322d34363635643737320d0a";
    // sip.pcap frame 95: RTP (nDPI: RTP, not SIP).
    const RTP_95: &str = "80086fae000004d83796cb71d5d5d5d5d5d5d5d5";

    #[test]
    fn sip_pcap() {
        let mut f = Flow::default();
        let v = detect(
            &ends(L4::Udp, 5060, 5060).pkt(&hex(REGISTER), true, 0),
            &mut f,
        );
        assert_eq!(v, Proto::SIP.is(true));
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("REGISTER sip:sip.cybercity.dk SIP/2.0")
        );
        assert_eq!(f.meta.server_name.as_deref(), Some("sip.cybercity.dk"));
        let mut f = Flow::default();
        let v = detect(
            &ends(L4::Udp, 5060, 5060).pkt(&hex(UNAUTHORIZED), false, 0),
            &mut f,
        );
        assert_eq!(v, Proto::SIP.is(true));
        assert_eq!(f.meta.banner.as_deref(), Some("SIP/2.0 401 Unauthorized"));
        assert_eq!(f.meta.server_name, None);
        // Same over TCP.
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &ends(L4::Tcp, 5060, 5060).pkt(&hex(REGISTER), true, 0),
                &mut f
            ),
            Proto::SIP.is(true)
        );
    }

    #[test]
    fn uri_hosts() {
        assert_eq!(
            uri_host(b"sip:alice@atlanta.com;transport=tcp"),
            Some(&b"atlanta.com"[..])
        );
        assert_eq!(
            uri_host(b"sips:bob@[2001:db8::1]:5061"),
            Some(&b"2001:db8::1"[..])
        );
        assert_eq!(uri_host(b"sip:10.0.0.1:5060"), Some(&b"10.0.0.1"[..]));
        assert_eq!(uri_host(b"tel:+1-201-555-0123"), None);
        assert_eq!(uri_host(b"sip:"), None);
        let mut f = Flow::default();
        let inv = b"INVITE tel:+12015550123 SIP/2.0\r\n";
        assert_eq!(
            detect(&ends(L4::Udp, 5060, 5060).pkt(inv, true, 0), &mut f),
            Proto::SIP.is(true)
        );
        assert_eq!(f.meta.server_name, None);
    }

    #[test]
    fn keepalive_then_request() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Tcp, 5060, 5060).pkt(b"\r\n\r\n", true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(
                &ends(L4::Tcp, 5060, 5060).pkt(&hex(REGISTER), true, 1),
                &mut f
            ),
            Proto::SIP.is(true)
        );
    }

    #[test]
    fn negatives() {
        for d in [
            hex(RTP_95),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            b"OPTIONS * HTTP/1.1\r\n\r\n".to_vec(),
            b"OPTIONS rtsp://cam/stream RTSP/1.0\r\n".to_vec(),
            b"SSH-2.0-OpenSSH_8.9\r\n".to_vec(),
            b"SIP/2.0\r\n".to_vec(),
            b"INVITE sip:x SIP/2.1\r\n".to_vec(),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&ends(L4::Udp, 5060, 5060).pkt(&d, true, 0), &mut f),
                Verdict::No,
                "{d:?}"
            );
            assert_eq!(f.meta.banner, None);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0xdead_beef);
        let random: Vec<Vec<u8>> = (0..200).map(|n| rng.bytes(n % 64)).collect();
        Fuzz::new(&[ends(L4::Udp, 5060, 5060)])
            .seeds([REGISTER, UNAUTHORIZED, RTP_95].map(hex))
            .seeds([
                b"INVITE sips:[::1 SIP/2.0".to_vec(),
                b"BYE sip:@;x SIP/2.0\r\n".to_vec(),
            ])
            .payloads(random)
            .run(detect);
    }
}
