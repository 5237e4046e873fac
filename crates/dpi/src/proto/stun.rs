//! STUN/TURN over UDP and TCP (RFC 5389/8489, RFC 5766, classic RFC 3489).
//!
//! Why: STUN opens almost every WebRTC and VoIP call (WhatsApp, Teams, Zoom, Meet…), so it
//! marks the start of real-time media flows. The detector checks the 20-byte header: two zero
//! bits, a known method and class, the magic cookie `0x2112A442`, and a length that matches
//! the datagram, which is enough on any port (WhatsApp and MS-TURN send lengths that are not
//! multiples of 4, so alignment is not asked for there). Where the length cannot be matched
//! (TCP), it must be a multiple of 4 and the attributes must walk cleanly. The cookie-less
//! RFC 3489 form is only taken on the usual STUN ports, for Binding and Shared Secret messages
//! with a clean attribute walk. Over TCP a message may start the segment or follow an RFC 4571
//! two-byte frame length.
//!
//! After recognising the flow it keeps reading a few more STUN messages for a REALM attribute
//! (a TURN server's domain, e.g. `turn.l.google.com`), which becomes the server name as in
//! nDPI. Telling which application a call belongs to is the service mapping's job, not this
//! detector's.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};

const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xa4, 0x42];
/// REALM attribute.
const ATTR_REALM: usize = 0x0014;
/// Attributes walked per message at most.
const MAX_ATTRS: usize = 64;
/// Payload packets of the flow after which we stop looking for a REALM.
const REALM_UNTIL_INDEX: u8 = 7;
/// Ports the cookie-less classic form is accepted on (STUN/TURN, Google's STUN servers).
const CLASSIC_PORTS: &[u16] = &[3478, 3479, 5349, 19302, 19305];

fn be16(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 2)?;
    Some(usize::from(u16::from_be_bytes([s[0], s[1]])))
}

/// A STUN message found in a payload.
struct Message<'a> {
    /// The attributes (what of them the payload holds).
    attrs: &'a [u8],
}

/// Method from a message type (the class bits C0 = 0x010 and C1 = 0x100 removed).
fn method(t: usize) -> usize {
    (t & 0x000f) | ((t & 0x00e0) >> 1) | ((t & 0x3e00) >> 2)
}

/// Walks attributes; true when they are well formed and, if `whole`, fill `attrs` exactly.
fn attrs_ok(attrs: &[u8], whole: bool, classic: bool) -> bool {
    let mut pos = 0usize;
    for _ in 0..MAX_ATTRS {
        if pos == attrs.len() {
            return true;
        }
        let (Some(t), Some(len)) = (be16(attrs, pos), be16(attrs, pos + 2)) else {
            return !whole; // cut inside an attribute header
        };
        // Classic attributes must have a type (Zoom sends its own 0x0101 on 3478).
        if classic && t == 0 {
            return false;
        }
        let next = pos + 4 + len.div_ceil(4) * 4;
        if next > attrs.len() {
            return !whole;
        }
        pos = next;
    }
    false
}

/// Parses the message at `b[at..]`. `exact`: the message must end with the payload.
fn message(b: &[u8], at: usize, exact: bool, classic_ok: bool) -> Option<Message<'_>> {
    let h = b.get(at..at + 20)?;
    if h[0] & 0xc0 != 0 {
        return None;
    }
    let t = usize::from(u16::from_be_bytes([h[0], h[1]]));
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let available = b.len() - at - 20;
    if (exact && len != available) || len > 2048 {
        return None;
    }
    let cookie = h[4..8] == MAGIC_COOKIE;
    // Cookie and exact datagram length are strong evidence: WhatsApp and MS-TURN send lengths
    // that are not multiples of 4 and unpadded attributes, so then the attributes are not
    // checked. Otherwise the RFC's alignment and the attribute walk are required.
    let lax = cookie && exact;
    if len % 4 != 0 && !lax {
        return None;
    }
    let m = method(t);
    if cookie {
        // Binding, Allocate, Refresh, Send, Data, CreatePermission, ChannelBind, Connect,
        // ConnectionBind, ConnectionAttempt (RFC 5389, 5766, 6062). Indications (class 0x010)
        // exist for Binding, Send and Data only.
        if !(m == 1 || (3..=0x0c).contains(&m)) {
            return None;
        }
        if t & 0x0110 == 0x0010 && !matches!(m, 1 | 6 | 7) {
            return None;
        }
    } else {
        // Classic Binding / Shared Secret request, success and error responses.
        if !classic_ok || !matches!(t, 0x0001 | 0x0101 | 0x0111 | 0x0002 | 0x0102 | 0x0112) {
            return None;
        }
    }
    let whole = len <= available;
    let attrs = b.get(at + 20..at + 20 + len.min(available))?;
    if !lax && !attrs_ok(attrs, whole, !cookie) {
        return None;
    }
    if !cookie && t != 0x0001 && attrs.is_empty() {
        return None; // a classic response always carries attributes
    }
    Some(Message { attrs })
}

fn find<'a>(p: &Pkt<'a>) -> Option<Message<'a>> {
    let b = p.payload;
    let classic_ok = CLASSIC_PORTS.iter().any(|&port| p.has_port(port));
    match p.l4 {
        L4::Udp => message(b, 0, true, classic_ok),
        // A segment may hold part of a message, or several: no exact length. Try the bare
        // message, then RFC 4571 framing (a 2-byte length of the whole message).
        L4::Tcp => message(b, 0, false, classic_ok).or_else(|| {
            let framed = be16(b, 0)?;
            let inner = be16(b, 4)?;
            (framed == inner + 20)
                .then(|| message(b, 2, false, classic_ok))
                .flatten()
        }),
    }
}

/// The REALM of a message, when it looks like a domain name.
fn realm(m: &Message<'_>) -> Option<String> {
    let a = m.attrs;
    let mut pos = 0usize;
    for _ in 0..MAX_ATTRS {
        let (t, len) = (be16(a, pos)?, be16(a, pos + 2)?);
        if t == ATTR_REALM {
            let v = a.get(pos + 4..pos + 4 + len)?;
            let name_like = !v.is_empty()
                && v.contains(&b'.')
                && v.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'));
            return name_like.then(|| wire_string(v));
        }
        pos += 4 + len.div_ceil(4) * 4;
    }
    None
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let owned = f.l7.proto == Proto::STUN;
    // Cheap reject: a STUN message (or an RFC 4571 frame length of one) starts with 00..3f.
    if !owned && p.payload.first().is_none_or(|&c| c & 0xc0 != 0) {
        return Verdict::No;
    }
    let Some(m) = find(p) else {
        if owned && is_dtls_record(p.payload) {
            // ICE then DTLS (WebRTC, Zoom, Meet): the media session is DTLS, as nDPI says.
            return Proto::DTLS.is(true);
        }
        return if owned {
            Proto::STUN.is(p.index >= REALM_UNTIL_INDEX)
        } else {
            Verdict::No
        };
    };
    if let Some(r) = realm(&m) {
        f.meta.server_name = Some(r);
    }
    // Stay on to see whether DTLS follows the connectivity checks.
    Proto::STUN.is(p.index >= REALM_UNTIL_INDEX)
}

/// A DTLS 1.0/1.2/1.3 record: content type 20..=23 (handshake, alert, ...), version fe ff/fd/fc.
fn is_dtls_record(d: &[u8]) -> bool {
    matches!(d, [20..=23, 0xfe, 0xfc..=0xff, ..]) && d.len() >= 13
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // stun.pcap frame 3: TCP, RFC 4571 framed Binding request (Skype/Teams), port 42000.
    const TCP_FRAMED: &str = "0068000100542112a442f3439453b698fb2950bb06ed000600092f7049303a546f4564000000002400046e6bfcff80290008000000000004c2d18054000132000000807000040000000300080014fe92876ad46d7b797d42eb8d79a805faf31d72d1802800040200fc47";
    // stun.pcap frames 16 (Binding request to Google, port 3478) and 19 (Allocate error
    // response with REALM turn.l.google.com).
    const UDP_BINDING: &str = "000100002112a44253486b6846386f6477677956";
    const UDP_REALM: &str = "0113003c2112a442536e4c665278533665516e540009000400000401001400117475726e2e6c2e676f6f676c652e636f6d000000001500186d6168366f4f746c33364c46346d774b3061775559413d3d";

    #[test]
    fn tcp_framed_binding() {
        let b = hex(TCP_FRAMED);
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Tcp, 41588, 42000).pkt(&b, true, 0), &mut f),
            Proto::STUN.is(false)
        );
        // Split across segments: the first part alone is still a STUN message start.
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Tcp, 41588, 42000).pkt(&b[..40], true, 0), &mut f),
            Proto::STUN.is(false)
        );
    }

    #[test]
    fn udp_binding_then_realm() {
        let b = hex(UDP_BINDING);
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 3478).pkt(&b, true, 0), &mut f),
            Proto::STUN.is(false)
        );
        f.l7.proto = Proto::STUN; // the engine's doing on `Is`
        let r = hex(UDP_REALM);
        // The realm is read; the detector stays on to see whether DTLS follows.
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 3478).pkt(&r, true, 1), &mut f),
            Proto::STUN.is(false)
        );
        // nDPI's Hostname/SNI and tshark's stun.att.realm.
        assert_eq!(f.meta.server_name.as_deref(), Some("turn.l.google.com"));
        // A DTLS ClientHello record header after the checks: the flow is DTLS.
        let mut dtls = vec![0x16, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40];
        dtls.extend_from_slice(&[0u8; 64]);
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 3478).pkt(&dtls, true, 2), &mut f),
            Proto::DTLS.is(true)
        );
    }

    // whatsapp_login_call.pcap frame 229: Allocate with a length (106) not a multiple of 4.
    const WHATSAPP_ALLOCATE: &str = "0003006a2112a44200003b3286c4457797766905400000660100a9f60dfaaa48953ad2d0af75625fa16c6c36178c427d406022bed8dba2b1882db68b15472daad2b08f2ba1f21403a5f6b2e87a50530b4af6e00c7d10314492a8791e24422a320e701b448031b8407241da42cd9a7927335047b93473e832e712387ddd53";

    #[test]
    fn whatsapp_unaligned_length() {
        let b = hex(WHATSAPP_ALLOCATE);
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 3478).pkt(&b, true, 0), &mut f),
            Proto::STUN.is(false)
        );
        // One byte less and the length no longer matches.
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &ends(L4::Udp, 41588, 3478).pkt(&b[..b.len() - 1], true, 0),
                &mut f
            ),
            Verdict::No
        );
    }

    #[test]
    fn classic_only_on_stun_ports() {
        // zoom.pcap frame 46: cookie-less Binding request to port 3478 (nDPI: STUN.Zoom).
        let classic = hex("00010018c15dae63585d14392e582c260403bf30010100143132333435363738393031323334353637383900");
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 3478).pkt(&classic, true, 0), &mut f),
            Proto::STUN.is(false)
        );
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 41588, 9999).pkt(&classic, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_stun() {
        let mut f = Flow::default();
        let mut bad_len = hex(UDP_BINDING);
        bad_len[3] ^= 0x04;
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        let ntp = hex("1b000000000000000000000000000000000000000000000000000000000000000000000000000000e1fcd68ee3126ecc");
        for b in [&bad_len[..], &dns[..], &ntp[..], &hex(UDP_BINDING)[..19]] {
            assert_eq!(
                detect(&ends(L4::Udp, 41588, 3478).pkt(b, true, 0), &mut f),
                Verdict::No
            );
        }
    }

    #[test]
    fn never_panics() {
        // A binding-response-like header whose length matches, with random attributes.
        let mut rng = Rng::new(0x5555_aaaa);
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|round| {
                let n = 20 + (round % 180);
                let mut b = rng.bytes(n);
                b[..8].copy_from_slice(&[0x01, 0x13, 0, (n - 20) as u8, 0x21, 0x12, 0xa4, 0x42]);
                b
            })
            .collect();
        let mut owned = Flow::default();
        owned.l7.proto = Proto::STUN;
        Fuzz::new(&[udp(41588, 3478), tcp(41588, 3478)])
            .seeds([TCP_FRAMED, UDP_BINDING, UDP_REALM, WHATSAPP_ALLOCATE].map(hex))
            .payloads(random)
            .start(owned)
            .run(detect);
    }
}
