//! HTTP/2 over cleartext TCP ("h2c", RFC 9113), and gRPC on it.
//!
//! Why: gRPC services and proxies between services speak HTTP/2 without TLS; HTTP/1's
//! detector sees none of it. nDPI 4.2 has no HTTP/2 number, so such flows are labelled HTTP
//! (`Proto::HTTP`) with `meta.http.version = "h2c"`; HTTP/2 inside TLS (ALPN `h2`) stays TLS.
//!
//! Rules:
//! * the client's connection preface `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (24 bytes, may be cut
//!   over segments), and if bytes follow in the packet, a SETTINGS frame header first;
//! * a flow seen from its middle: two consecutive valid frame headers (in one packet, or the
//!   second where the first frame's length says it starts in the direction's next packet), or
//!   one whole SETTINGS frame (not an ACK) of known parameters with valid values, alone in its
//!   packet (a server's first frame when the preface was missed).
//!
//! A frame header is valid when its length is at most 16384 (the default
//! SETTINGS_MAX_FRAME_SIZE; a peer that raised it is missed mid-session), its type is one of
//! RFC 9113's (0..=9), its flags are the ones defined for the type, the stream id's reserved
//! bit is 0, the stream id is 0 exactly for the connection frames (SETTINGS, PING, GOAWAY),
//! and the fixed lengths hold (PRIORITY 5, RST_STREAM 4, PING 8, WINDOW_UPDATE 4, SETTINGS a
//! multiple of 6, GOAWAY at least 8).
//!
//! gRPC: after recognition the detector reads frames from either side for a few packets;
//! a HEADERS or CONTINUATION block holding `application/grpc`, as a literal or in HPACK's
//! Huffman code (the first 10 bytes of its encoding, which also cover `application/grpc+proto`),
//! sets `meta.http.content_type` to `application/grpc`. A content type sent only as an index
//! into HPACK's dynamic table (after an earlier request we did not see) is missed.

use crate::ids::Proto;
use crate::meta::Http;
use crate::types::{Flow, Pkt, Verdict, L4};

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_MAX_FRAME_SIZE's initial value.
const MAX_FRAME: usize = 16384;
/// Packets a flow may stay undecided (a frame header seen, the next one not yet).
const MAX_UNSURE: u8 = 4;
/// Packets read for a gRPC content type after recognition.
const MAX_GRPC_PACKETS: u8 = 8;
/// Frames walked per packet at most.
const MAX_FRAMES: usize = 64;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const CONTINUATION: u8 = 9;

/// `application/grp` and the first bits of `c` in HPACK's Huffman code (RFC 7541 appendix B).
const GRPC_HUFFMAN: &[u8] = &[0x1d, 0x75, 0xd0, 0x62, 0x0d, 0x26, 0x3d, 0x4c, 0x4d, 0x65];
const GRPC: &[u8] = b"application/grpc";

/// A frame header (RFC 9113 section 4.1).
#[derive(Clone, Copy, Debug)]
struct Frame {
    len: usize,
    ty: u8,
    flags: u8,
}

/// The valid frame header at the start of `b` (9 bytes), or `None`.
fn frame(b: &[u8]) -> Option<Frame> {
    let h = b.get(..9)?;
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    let (ty, flags) = (h[3], h[4]);
    if h[5] & 0x80 != 0 || len > MAX_FRAME {
        return None;
    }
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
    let on_stream = stream != 0;
    let ok = match ty {
        DATA => flags & !0x09 == 0 && on_stream,
        HEADERS => flags & !0x2d == 0 && on_stream,
        2 => flags == 0 && len == 5 && on_stream, // PRIORITY
        3 => flags == 0 && len == 4 && on_stream, // RST_STREAM
        SETTINGS => {
            flags & !0x01 == 0 && !on_stream && len.is_multiple_of(6) && (flags == 0 || len == 0)
        }
        5 => flags & !0x0c == 0 && on_stream && len >= 4, // PUSH_PROMISE
        6 => flags & !0x01 == 0 && !on_stream && len == 8, // PING
        7 => flags == 0 && !on_stream && len >= 8,        // GOAWAY
        8 => flags == 0 && len == 4,                      // WINDOW_UPDATE
        CONTINUATION => flags & !0x04 == 0 && on_stream,
        _ => false,
    };
    ok.then_some(Frame { len, ty, flags })
}

/// A whole SETTINGS frame's parameters: at least one, each of a known id with a valid value.
fn settings_ok(body: &[u8]) -> bool {
    !body.is_empty()
        && body.len().is_multiple_of(6)
        && body.chunks(6).all(|s| {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                1 | 3 | 6 => true, // HEADER_TABLE_SIZE, MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE
                2 | 8 | 9 => v <= 1, // ENABLE_PUSH, ENABLE_CONNECT_PROTOCOL, NO_RFC7540_PRIORITIES
                4 => v <= 0x7fff_ffff, // INITIAL_WINDOW_SIZE
                5 => (16384..=16_777_215).contains(&v), // MAX_FRAME_SIZE
                _ => false,
            }
        })
}

/// What walking one packet's frames found.
#[derive(Default)]
struct Walk {
    /// Valid frame headers read (the first may have been announced by an earlier packet).
    headers: usize,
    /// Bytes of the last frame beyond this packet.
    beyond: usize,
    grpc: bool,
    /// The packet is exactly one whole SETTINGS frame with valid parameters.
    lone_settings: bool,
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Walks the frames of `b` (starting at a frame header); `None` when a header is not valid.
fn walk(b: &[u8]) -> Option<Walk> {
    let mut w = Walk::default();
    let mut at = 0;
    for _ in 0..MAX_FRAMES {
        let Some(rest) = b.get(at..).filter(|r| !r.is_empty()) else {
            break;
        };
        if rest.len() < 9 {
            // A header cut by the segment's end: its bytes so far must fit one.
            if rest.len() >= 3 {
                let len = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8);
                if len > MAX_FRAME {
                    return None;
                }
            }
            break;
        }
        let fr = frame(rest)?;
        w.headers += 1;
        let body = &rest[9..];
        let have = body.len().min(fr.len);
        if matches!(fr.ty, HEADERS | CONTINUATION) {
            let block = &body[..have];
            w.grpc |= contains(block, GRPC) || contains(block, GRPC_HUFFMAN);
        }
        if fr.ty == SETTINGS && fr.flags == 0 && at == 0 && body.len() == fr.len {
            w.lone_settings = settings_ok(body);
        }
        if body.len() < fr.len {
            w.beyond = fr.len - body.len();
            break;
        }
        at += 9 + fr.len;
    }
    Some(w)
}

fn recognise(f: &mut Flow, grpc: bool) {
    let http = f.meta.http.get_or_insert_with(Box::<Http>::default);
    http.version = Some("h2c".to_string());
    if grpc {
        http.content_type = Some(String::from_utf8_lossy(GRPC).into_owned());
    }
}

fn is_h2c(f: &Flow) -> bool {
    f.l7.proto == Proto::HTTP
        && f.meta
            .http
            .as_ref()
            .is_some_and(|h| h.version.as_deref() == Some("h2c"))
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let dir = usize::from(!p.from_client);
    let owner = is_h2c(f);
    let st = &mut f.scratch.h2;
    // Bytes of this packet that belong to a frame announced earlier in this direction.
    let skip = st.beyond[dir] as usize;
    let mut b = p.payload;
    if owner {
        // Owner: look for gRPC's content type.
        let done = p.index + 1 >= MAX_GRPC_PACKETS;
        if b.starts_with(PREFACE) {
            b = &b[PREFACE.len()..];
        } else if skip > 0 {
            if b.len() <= skip {
                st.beyond[dir] = (skip - b.len()) as u32;
                return Proto::HTTP.is(done);
            }
            b = &b[skip..];
        }
        match walk(b) {
            Some(w) => {
                f.scratch.h2.beyond[dir] = w.beyond as u32;
                if w.grpc {
                    recognise(f, true);
                    return Proto::HTTP.is(true);
                }
            }
            None => return Proto::HTTP.is(true),
        }
        return Proto::HTTP.is(done);
    }
    // The client's preface, possibly cut.
    let matched = usize::from(st.preface);
    // (Either direction: without the handshake the capture may have the sides swapped.)
    if matched > 0 || b.first() == Some(&b'P') {
        let want = &PREFACE[matched..];
        let n = want.len().min(b.len());
        if b.get(..n) == Some(&want[..n]) && (matched > 0 || n >= 3) {
            if n < want.len() {
                st.preface = (matched + n) as u8;
                return Verdict::Unsure;
            }
            st.preface = PREFACE.len() as u8;
            let rest = &b[n..];
            // A SETTINGS frame must come first.
            if rest.len() >= 4 && rest[3] != SETTINGS {
                return Verdict::No;
            }
            let Some(w) = walk(rest) else {
                return Verdict::No;
            };
            f.scratch.h2.beyond[dir] = w.beyond as u32;
            recognise(f, w.grpc);
            return Proto::HTTP.is(w.grpc);
        }
        if matched > 0 {
            return Verdict::No;
        }
    }
    // A flow seen from its middle.
    if skip > 0 {
        if b.len() <= skip {
            st.beyond[dir] = (skip - b.len()) as u32;
            return if p.index + 1 < MAX_UNSURE {
                Verdict::Unsure
            } else {
                Verdict::No
            };
        }
        b = &b[skip..];
    }
    let Some(w) = walk(b) else {
        return Verdict::No;
    };
    let before = usize::from(skip > 0);
    if w.headers + before >= 2 || w.lone_settings {
        f.scratch.h2.beyond[dir] = w.beyond as u32;
        recognise(f, w.grpc);
        return Proto::HTTP.is(w.grpc);
    }
    if w.headers == 1 && w.beyond > 0 && p.index + 1 < MAX_UNSURE {
        f.scratch.h2.beyond[dir] = w.beyond as u32;
        return Verdict::Unsure;
    }
    Verdict::No
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const H2C: Ends = tcp(32850, 18080);

    // curl 7.88 --http2-prior-knowledge http://127.0.0.1:18080/x against hypercorn 0.17,
    // recorded with tcpdump on lo: preface + SETTINGS + WINDOW_UPDATE, HEADERS (GET), the
    // server's SETTINGS, SETTINGS ACKs, the response HEADERS and DATA.
    const CURL: &str = "c 505249202a20485454502f322e300d0a0d0a534d0d0a0d0a00001204000000000000030000006400040200000000020000000000000408000000000001ff0001
c 0000220105000000018204022f7886418b089d5c0b8170dc0bc0781f7a8825b650c3abbcf2e153032a2f2a
s 00002a04000000000000010000100000020000000000040000ffff000500004000000800000001000300000064000600010000
c 000000040100000000
s 000000040100000000
s 00002d010400000001885f87497ca58ae819aa6196df3dbf4a09c5349fba82009c502cdc643702e298b46f76899fd565b087b2a5a717
s 00000500000000000168656c6c6f";

    // python-h2 4.x client: POST /grpc.health.v1.Health/Check with content-type
    // application/grpc (HPACK Huffman) to the same server; its response names the type too.
    const GRPC_REQ: &str = "00003e010400000001834495626b2b22f394742675fb857c651d099d8bd3949d7f86418b089d5c0b8170dc0bc0781f5f8b1d75d0620d263d4c4d65644082497f864d833505b11f0000050001000000010000000000";
    const GRPC_PREFACE: &str = "505249202a20485454502f322e300d0a0d0a534d0d0a0d0a00002a04000000000000010000100000020000000100040000ffff000500004000000800000000000300000064000600010000";
    const GRPC_RESP: &str = "000031010400000001885f8b1d75d0620d263d4c4d65646196df3dbf4a09c5349fba82009c502cdc643702e298b46f76899fd565b087b2a5a717";
    const SERVER_SETTINGS: &str = "00002a04000000000000010000100000020000000000040000ffff000500004000000800000001000300000064000600010000";

    fn run(e: Ends, c: &Conv) -> (Vec<Verdict>, Flow) {
        let mut f = Flow::default();
        (feed(detect, e, &mut f, c), f)
    }

    fn version(f: &Flow) -> Option<&str> {
        f.meta.http.as_ref()?.version.as_deref()
    }

    fn content_type(f: &Flow) -> Option<&str> {
        f.meta.http.as_ref()?.content_type.as_deref()
    }

    #[test]
    fn curl_prior_knowledge() {
        let (v, f) = run(H2C, &packets(CURL));
        assert_eq!(v[0], Proto::HTTP.is(false));
        assert_eq!(version(&f), Some("h2c"));
        assert_eq!(content_type(&f), None);
        // The preface cut over two segments.
        let c = packets(CURL);
        let (a, b) = c[0].1.split_at(10);
        let cut: Conv = vec![(true, a.to_vec()), (true, b.to_vec())];
        let (v, f) = run(H2C, &cut);
        assert_eq!(v, [Verdict::Unsure, Proto::HTTP.is(false)]);
        assert_eq!(version(&f), Some("h2c"));
    }

    #[test]
    fn grpc() {
        let c: Conv = vec![
            (true, hex(GRPC_PREFACE)),
            (false, hex(SERVER_SETTINGS)),
            (true, hex(GRPC_REQ)),
        ];
        let (v, f) = run(H2C, &c);
        assert_eq!(v.last(), Some(&Proto::HTTP.is(true)));
        assert_eq!(content_type(&f), Some("application/grpc"));
        // Seen from the middle: the response HEADERS then DATA in one packet.
        let mut resp = hex(GRPC_RESP);
        resp.extend(hex("00000500000000000168656c6c6f"));
        let (v, f) = run(H2C, &vec![(false, resp)]);
        assert_eq!(v, [Proto::HTTP.is(true)]);
        assert_eq!(content_type(&f), Some("application/grpc"));
        // A literal (not Huffman-coded) content type.
        let mut lit = hex("0000120104000000015f10");
        lit.extend(GRPC);
        lit.extend(hex("0000050001000000010000000000"));
        let (v, f) = run(H2C, &vec![(true, lit)]);
        assert_eq!(v, [Proto::HTTP.is(true)]);
        assert_eq!(content_type(&f), Some("application/grpc"));
    }

    #[test]
    fn mid_session() {
        // The server's SETTINGS alone (the preface missed).
        let (v, f) = run(H2C, &vec![(false, hex(SERVER_SETTINGS))]);
        assert_eq!(v, [Proto::HTTP.is(false)]);
        assert_eq!(version(&f), Some("h2c"));
        // A DATA frame longer than its packet, then the next frame header where its length
        // says (16 bytes of DATA: 6 in the first packet, 10 in the second).
        let c: Conv = vec![
            (false, hex("000010000000000003616263646566")),
            (false, hex("6768696a6b6c6d6e6f70000000040100000000")),
        ];
        let (v, _) = run(H2C, &c);
        assert_eq!(v, [Verdict::Unsure, Proto::HTTP.is(false)]);
        // The response HEADERS + DATA + trailers of curl's exchange.
        let c = packets(CURL);
        let mut two = c[5].1.clone();
        two.extend(&c[6].1);
        let (v, _) = run(H2C, &vec![(false, two)]);
        assert_eq!(v, [Proto::HTTP.is(false)]);
    }

    #[test]
    fn not_http2() {
        let c = packets(CURL);
        let mut bad_preface = c[0].1.clone();
        bad_preface[24 + 3] = 1; // HEADERS instead of SETTINGS after the preface
        for (from_client, d) in [
            // HTTP/1 request and response, and an HTTP/1 request with a PRI-like start.
            (true, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            (
                false,
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec(),
            ),
            (true, b"PRI * HTTP/1.1\r\n\r\n".to_vec()),
            (true, bad_preface),
            // TLS ClientHello offering ALPN h2 (tls_firefox.txt's first bytes).
            (
                true,
                hex("1603010200010001fc0303946bf125d520b848e57d09c375afa7295beb220cd1"),
            ),
            // TLS application data.
            (false, hex("1703030040a1b2c3d4e5f6")),
            // SSH, SMTP.
            (false, b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()),
            (false, b"220 mail.example.com ESMTP\r\n".to_vec()),
            // DNS over TCP (length 0x001c), SMB2 in a NetBIOS session message.
            (
                true,
                hex("001c784301000001000000000000026537087768617473617070036e65740000010001"),
            ),
            (true, hex("00000078fe534d424000010000000000")),
            // Zeros; a lone SETTINGS ACK; a single frame alone (one header is not enough).
            (true, vec![0; 64]),
            (false, hex("000000040100000000")),
            (true, hex("000000040100000000")),
            (false, hex("00000500000000000168656c6c6f")),
            // A SETTINGS frame with an unknown parameter.
            (false, hex("00000604000000000000ff00000001")),
        ] {
            let (v, _) = run(H2C, &vec![(from_client, d.clone())]);
            assert_eq!(v, [Verdict::No], "{d:02x?}");
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x0bad_cafe);
        let random: Vec<Vec<u8>> = (0..1500)
            .map(|n| {
                let mut v = hex("0000080600000000");
                v.truncate(n % 9);
                v.extend(rng.bytes(n % 70));
                v
            })
            .collect();
        Fuzz::new(&[H2C])
            .flow(packets(CURL))
            .seeds([GRPC_PREFACE, GRPC_REQ, GRPC_RESP].map(hex))
            .payloads(random)
            .run(detect);
    }
}
