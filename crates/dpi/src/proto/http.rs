//! HTTP/1.x over TCP (RFC 9112).
//!
//! Why: plain HTTP still carries software updates, APIs and proxies (CONNECT); its request line
//! and headers name the server (`Host`), the client software (`User-Agent`) and the content.
//! The detector recognises a request line `METHOD SP target SP HTTP/1.x` with a known method,
//! or a flow whose first payload is a status line `HTTP/1.x NNN`. It keeps the flow after the
//! request to read the response status (and its `Content-Type`), then it is done.
//!
//! Headers are read line by line from what the segment holds; a line cut by the end of the
//! segment is ignored, and later client segments before the response are read for the headers
//! still missing (a request whose headers span segments).

use crate::ids::Proto;
use crate::meta::Http;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};

/// Methods recognised in a request line (RFC 9110, WebDAV, UPnP/GENA).
const METHODS: &[&[u8]] = &[
    b"GET",
    b"POST",
    b"HEAD",
    b"PUT",
    b"DELETE",
    b"OPTIONS",
    b"PATCH",
    b"CONNECT",
    b"TRACE",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
    b"LOCK",
    b"UNLOCK",
    b"SEARCH",
    b"REPORT",
    b"MKCALENDAR",
    b"NOTIFY",
    b"SUBSCRIBE",
    b"UNSUBSCRIBE",
];

/// Methods common enough that a request line cut before its version is still taken as HTTP.
const COMMON: &[&[u8]] = &[
    b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"PATCH", b"CONNECT",
];

/// Header lines looked at per segment at most.
const MAX_LINES: usize = 64;

/// Splits off the first line (without CR LF). `complete` is false when the segment ends
/// before the line's LF.
fn line(b: &[u8]) -> (&[u8], &[u8], bool) {
    match b.iter().position(|&c| c == b'\n') {
        Some(i) => {
            let l = &b[..i];
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            (l, b.get(i + 1..).unwrap_or(&[]), true)
        }
        None => (b, &[], false),
    }
}

/// `HTTP/1.x` followed by nothing (request line) or by a space (status line).
fn is_version(v: &[u8]) -> bool {
    matches!(v, [b'H', b'T', b'T', b'P', b'/', b'1', b'.', d] if d.is_ascii_digit())
}

/// The `NNN` of a status line `HTTP/1.x NNN reason`.
fn status_code(l: &[u8]) -> Option<u16> {
    let (v, rest) = (l.get(..8)?, l.get(8..)?);
    if !is_version(v) || rest.first() != Some(&b' ') {
        return None;
    }
    let d = rest.get(1..4)?;
    if !d.iter().all(u8::is_ascii_digit) || d[0] < b'1' || d[0] > b'5' {
        return None;
    }
    if let Some(&c) = rest.get(4) {
        if c != b' ' && c != b'\r' {
            return None;
        }
    }
    Some(d.iter().fold(0u16, |a, &c| a * 10 + u16::from(c - b'0')))
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    v.get(start..end).unwrap_or(&[])
}

/// `name: value` → (name, trimmed value) when `name` is a header token.
fn header(l: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = l.iter().position(|&c| c == b':')?;
    let name = &l[..colon];
    if name.is_empty()
        || !name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_'))
    {
        return None;
    }
    Some((name, trim(l.get(colon + 1..).unwrap_or(&[]))))
}

/// Which headers a pass may set.
#[derive(Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// Reads header lines from `b` into `http`; returns true when the empty line ending the
/// header block was seen.
fn headers(mut b: &[u8], http: &mut Http, side: Side) -> bool {
    for _ in 0..MAX_LINES {
        if b.is_empty() {
            return false;
        }
        let (l, rest, complete) = line(b);
        if !complete {
            return false; // cut by the end of the segment: its value may be partial
        }
        if l.is_empty() {
            return true;
        }
        b = rest;
        let Some((name, value)) = header(l) else {
            continue;
        };
        let slot = match side {
            Side::Request if name.eq_ignore_ascii_case(b"host") => &mut http.host,
            Side::Request if name.eq_ignore_ascii_case(b"user-agent") => &mut http.user_agent,
            Side::Request if name.eq_ignore_ascii_case(b"content-type") => &mut http.content_type,
            // The response's type says what the flow carries: it wins over the request's.
            Side::Response if name.eq_ignore_ascii_case(b"content-type") => {
                http.content_type = Some(wire_string(value));
                continue;
            }
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(wire_string(value));
        }
    }
    false
}

/// `host[:port]` or `[v6]:port` → host.
fn strip_port(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match h.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|c| c.is_ascii_digit()) => {
            name
        }
        _ => h,
    }
}

fn set_server_name(f: &mut Flow) {
    let Some(http) = f.meta.http.as_ref() else {
        return;
    };
    let from = http.host.as_deref().or_else(|| {
        // CONNECT names its destination in the target when no Host header came.
        (http.method.as_deref() == Some("CONNECT"))
            .then_some(http.url.as_deref())
            .flatten()
    });
    if let Some(h) = from {
        let name = strip_port(h);
        if !name.is_empty() {
            f.meta.server_name = Some(name.to_string());
        }
    }
}

/// A request line: (method, target, complete-with-version). `None` when not a request.
fn request_line(b: &[u8]) -> Option<(&'static [u8], &[u8], bool)> {
    let sp = b.iter().take(12).position(|&c| c == b' ')?;
    let method = *METHODS.iter().find(|m| **m == &b[..sp])?;
    let (l, _, complete) = line(b.get(sp + 1..)?);
    match l.iter().rposition(|&c| c == b' ') {
        Some(i) if complete || is_version(l.get(i + 1..).unwrap_or(&[])) => {
            let target = &l[..i];
            let ok = is_version(l.get(i + 1..)?) && !target.is_empty() && !target.contains(&b' ');
            ok.then_some((method, target, true))
        }
        _ => {
            // The segment ends inside the request line (a very long URL): accept only the
            // common methods with a target that looks like one.
            let ok = !complete
                && COMMON.contains(&method)
                && (l.first() == Some(&b'/') || l.starts_with(b"http://"))
                && !l.contains(&b' ')
                && l.len() >= 16;
            ok.then_some((method, l, false))
        }
    }
}

fn first_packet(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let b = p.payload;
    let c = b.first().copied().unwrap_or(0);
    if !c.is_ascii_uppercase() {
        return Verdict::No;
    }
    if c == b'H' && b.starts_with(b"HTTP/1.") {
        // Seen from the response on: the request was missed.
        let (l, rest, _) = line(b);
        let Some(code) = status_code(l) else {
            return Verdict::No;
        };
        let mut http = Http {
            status: code,
            ..Http::default()
        };
        headers(rest, &mut http, Side::Response);
        f.meta.http = Some(Box::new(http));
        return Proto::HTTP.is(true);
    }
    let Some((method, target, complete)) = request_line(b) else {
        return Verdict::No;
    };
    let mut http = Http {
        method: Some(wire_string(method)),
        url: Some(wire_string(target)),
        ..Http::default()
    };
    if complete {
        let (_, rest, _) = line(b);
        headers(rest, &mut http, Side::Request);
    }
    f.meta.http = Some(Box::new(http));
    f.scratch.http_request_ns = p.ts_ns;
    set_server_name(f);
    let proto = if method == b"CONNECT" {
        Proto::HTTP_CONNECT
    } else {
        Proto::HTTP
    };
    proto.is(false)
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let Some(http) = f.meta.http.as_mut() else {
        return first_packet(p, f);
    };
    let proto = f.l7.proto;
    let b = p.payload;
    if f.scratch.http_tunnel_open {
        return super::tls::inner(p, f, proto);
    }
    if !p.from_client {
        let (l, rest, _) = line(b);
        if let Some(code) = status_code(l) {
            http.status = code;
            let asked = f.scratch.http_request_ns;
            if http.response_time_us == 0 && asked != 0 {
                // The first status line (a 100 Continue too): the server has answered.
                let us = p.ts_ns.saturating_sub(asked) / 1000;
                http.response_time_us = us.clamp(1, u32::MAX as u64) as u32;
            }
            headers(rest, http, Side::Response);
            if proto == Proto::HTTP_CONNECT && (200..300).contains(&code) {
                // The tunnel is open: what follows is usually TLS, whose metadata we want.
                f.scratch.http_tunnel_open = true;
                return proto.is(false);
            }
            // 1xx (100 Continue) is interim: the final status follows.
            return proto.is(code >= 200);
        }
        // Not a status line (e.g. a CONNECT tunnel's bytes): nothing more to learn.
        return proto.is(true);
    }
    // A later client segment before the response: the rest of the request headers, unless it
    // is the next pipelined request or a body.
    if (http.host.is_none() || http.user_agent.is_none()) && request_line(b).is_none() {
        headers(b, http, Side::Request);
        set_server_name(f);
    }
    proto.is(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const HTTP: Ends = tcp(42170, 80);

    // http.pcapng frames 4 (request) and 6 (response, cut here after the headers).
    const REQ: &str = "474554202f20485454502f312e310d0a486f73743a20676f6f676c652e636f6d0d0a557365722d4167656e743a206375726c2f372e36382e300d0a4163636570743a202a2f2a0d0a0d0a";
    const RESP: &str = "485454502f312e3120333031204d6f766564205065726d616e656e746c790d0a4c6f636174696f6e3a20687474703a2f2f7777772e676f6f676c652e636f6d2f0d0a436f6e74656e742d547970653a20746578742f68746d6c3b20636861727365743d5554462d380d0a446174653a205475652c203235204a616e20323032322031363a35303a343120474d540d0a";

    #[test]
    fn request_and_response() {
        let mut f = Flow::default();
        let req = hex(REQ);
        assert_eq!(
            detect(&HTTP.pkt(&req, true, 0), &mut f),
            Proto::HTTP.is(false)
        );
        f.l7.proto = Proto::HTTP; // what the engine does on `Is`
        assert_eq!(f.meta.server_name.as_deref(), Some("google.com"));
        let resp = hex(RESP);
        assert_eq!(
            detect(&HTTP.pkt(&resp, false, 1), &mut f),
            Proto::HTTP.is(true)
        );
        // tshark: http.host, http.request.method, http.request.uri, http.user_agent,
        // http.response.code, http.content_type
        let h = f.meta.http.as_ref().unwrap();
        assert_eq!(h.method.as_deref(), Some("GET"));
        assert_eq!(h.url.as_deref(), Some("/"));
        assert_eq!(h.host.as_deref(), Some("google.com"));
        assert_eq!(h.user_agent.as_deref(), Some("curl/7.68.0"));
        assert_eq!(h.status, 301);
        assert_eq!(h.content_type.as_deref(), Some("text/html; charset=UTF-8"));
        // The testkit's packets are 1 ms apart.
        assert_eq!(h.response_time_us, 1000);
    }

    #[test]
    fn no_response_time_without_the_request() {
        let mut f = Flow::default();
        let resp = hex(RESP);
        assert_eq!(
            detect(&HTTP.pkt(&resp, false, 3), &mut f),
            Proto::HTTP.is(true)
        );
        let h = f.meta.http.as_ref().unwrap();
        assert_eq!((h.status, h.response_time_us), (301, 0));
    }

    // http_connect.pcap frames 4 (CONNECT apache.org:443) and 11 (HTTP/1.0 200).
    const CONNECT: &str = "434f4e4e454354206170616368652e6f72673a34343320485454502f312e310d0a557365722d4167656e743a204d6f7a696c6c612f352e30202857696e646f7773204e542031302e303b2057696e36343b207836343b2072763a39322e3029204765636b6f2f32303130303130312046697265666f782f39322e300d0a50726f78792d436f6e6e656374696f6e3a206b6565702d616c6976650d0a436f6e6e656374696f6e3a206b6565702d616c6976650d0a486f73743a206170616368652e6f72673a3434330d0a0d0a";
    const CONNECT_OK: &str = "485454502f312e302032303020436f6e6e656374696f6e2045737461626c69736865640d0a50726f78792d6167656e743a204170616368652f322e342e343120285562756e7475290d0a0d0a";

    #[test]
    fn connect() {
        let mut f = Flow::default();
        let c = hex(CONNECT);
        assert_eq!(
            detect(&HTTP.pkt(&c, true, 0), &mut f),
            Proto::HTTP_CONNECT.is(false)
        );
        f.l7.proto = Proto::HTTP_CONNECT;
        assert_eq!(f.meta.server_name.as_deref(), Some("apache.org"));
        let ok = hex(CONNECT_OK);
        // The tunnel opened: the detector stays on for the TLS handshake inside (its SNI is
        // checked end to end against tshark in tests/system/test_dpi_metadata.py).
        assert_eq!(
            detect(&HTTP.pkt(&ok, false, 1), &mut f),
            Proto::HTTP_CONNECT.is(false)
        );
        assert_eq!(
            detect(&HTTP.pkt(b"not tls", true, 2), &mut f),
            Proto::HTTP_CONNECT.is(true)
        );
        let h = f.meta.http.as_ref().unwrap();
        assert_eq!(h.url.as_deref(), Some("apache.org:443"));
        assert_eq!(h.host.as_deref(), Some("apache.org:443"));
        assert_eq!(
            h.user_agent.as_deref(),
            Some("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:92.0) Gecko/20100101 Firefox/92.0")
        );
        assert_eq!(h.status, 200);
    }

    #[test]
    fn headers_in_next_segment() {
        let req = hex(REQ);
        // The request line alone, then the headers in the next segment.
        let mut f = Flow::default();
        assert_eq!(
            detect(&HTTP.pkt(&req[..16], true, 0), &mut f),
            Proto::HTTP.is(false)
        );
        f.l7.proto = Proto::HTTP;
        assert!(f.meta.http.as_ref().unwrap().host.is_none());
        assert_eq!(
            detect(&HTTP.pkt(&req[16..], true, 1), &mut f),
            Proto::HTTP.is(false)
        );
        let h = f.meta.http.as_ref().unwrap();
        assert_eq!(h.host.as_deref(), Some("google.com"));
        assert_eq!(h.user_agent.as_deref(), Some("curl/7.68.0"));
        assert_eq!(f.meta.server_name.as_deref(), Some("google.com"));
        // Cut inside the Host line: the partial line is not taken, the rest is read.
        let mut f = Flow::default();
        assert_eq!(
            detect(&HTTP.pkt(&req[..30], true, 0), &mut f),
            Proto::HTTP.is(false)
        );
        assert_eq!(
            detect(&HTTP.pkt(&req[30..], true, 1), &mut f),
            Verdict::Is {
                proto: f.l7.proto,
                done: false
            }
        );
        let h = f.meta.http.as_ref().unwrap();
        assert_eq!(h.host, None);
        assert_eq!(h.user_agent.as_deref(), Some("curl/7.68.0"));
    }

    #[test]
    fn response_first() {
        let mut f = Flow::default();
        let resp = hex(RESP);
        assert_eq!(
            detect(&HTTP.pkt(&resp, true, 0), &mut f),
            Proto::HTTP.is(true)
        );
        assert_eq!(f.meta.http.as_ref().unwrap().status, 301);
    }

    #[test]
    fn not_http() {
        let samples: [&[u8]; 6] = [
            b"SSH-2.0-OpenSSH_8.2p1\r\n",
            b"220 smtp.example.com ESMTP\r\n",
            b"OPTIONS sip:bob@example.com SIP/2.0\r\nVia: x\r\n\r\n",
            b"OPTIONS rtsp://example.com/a RTSP/1.0\r\nCSeq: 1\r\n\r\n",
            b"GETTING / HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        ];
        for s in samples {
            let mut f = Flow::default();
            assert_eq!(detect(&HTTP.pkt(s, true, 0), &mut f), Verdict::No, "{s:?}");
        }
        assert_eq!(strip_port("[::1]:8080"), "::1");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("a.b:80"), "a.b");
    }

    #[test]
    fn never_panics() {
        // Mostly printable bytes, with line breaks and colons, after "GET " or "HTTP", to reach
        // the header parser.
        let mut rng = Rng::new(0x9e37_79b9);
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|round| {
                let mut b: Vec<u8> = (0..round % 300)
                    .map(|_| b" :\r\nHTTP/1.GET"[rng.below(14)])
                    .collect();
                let head: &[u8] = if round % 2 == 0 { b"GET " } else { b"HTTP" };
                let n = b.len().min(4);
                b[..n].copy_from_slice(&head[..n]);
                b
            })
            .collect();
        Fuzz::new(&[HTTP])
            .seeds([hex(REQ), hex(RESP), hex(CONNECT), hex(CONNECT_OK)])
            .flow(vec![(true, hex(REQ)), (false, hex(RESP))])
            .flow(vec![
                (true, hex(CONNECT)),
                (false, hex(CONNECT_OK)),
                (true, hex("16030100a8010000a403035cef9e29f7")),
            ])
            .payloads(random)
            .run(detect);
    }
}
