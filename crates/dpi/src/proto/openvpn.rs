//! OpenVPN over UDP and TCP (TCP: each packet has a 2-byte length prefix). The wire format
//! is OpenVPN's own (`ssl_pkt.h`, `ssl.c` of the reference implementation; the "OpenVPN
//! protocol" draft, draft-openvpn-protocol): an opcode in the high 5 bits of the first byte
//! and a key id in the low 3, then for control packets an 8-byte session id, with tls-auth an
//! HMAC and a replay packet id and time, an ACK array (count, packet ids, the peer's session
//! id), and the message packet id; with tls-crypt everything after the session id, packet id
//! and time is encrypted.
//!
//! Why: a common VPN, often on 443 or a chosen port; no magic number, so the handshake must
//! hang together:
//! - The client's hard reset (opcode 1, 7 or 10, key id 0) in one of the three layouts:
//!   plain (ACK count 0, message packet id 0), tls-auth with a 16- to 64-byte HMAC (replay
//!   packet id 1..=16, a plausible Unix time, ACK count 0, message packet id 0) or tls-crypt
//!   (replay packet id 1..=16 and a plausible time, room for the tag).
//! - Then the server's hard reset (opcode 2 or 8, key id 0) with a non-zero session id of
//!   its own: in the plain and tls-auth layouts its ACK array names the client's session id;
//!   with tls-crypt its packet id and time must be plausible. On TCP both length prefixes
//!   must match the segment exactly.
//! - A capture that holds one direction only: a hard reset (a client's, or a server's with
//!   its ACK array in one of the layouts) followed by the same side's P_CONTROL_V1 or
//!   P_ACK_V1 with the same session id.
//! - A capture that starts mid-session: P_DATA_V2 packets (opcode 9) with the same first
//!   byte and 3-byte peer id (at most 0xffff, or 0xffffff for none), at least 3 of them, from
//!   both sides, each different from the one before and not printable text.

use crate::ids::Proto;
use crate::types::{Flow, OpenVpnReset, Pkt, Verdict, L4};

const CLIENT_RESETS: [u8; 3] = [1, 7, 10];
const SERVER_RESETS: [u8; 2] = [2, 8];
const P_CONTROL_V1: u8 = 4;
const P_ACK_V1: u8 = 5;
const P_DATA_V2: u8 = 9;

/// HMAC sizes of tls-auth: MD5, SHA1, SHA224, SHA256, SHA384, SHA512.
const HMAC_SIZES: [u8; 6] = [16, 20, 28, 32, 48, 64];
const PLAIN: u8 = 0;
const TLS_CRYPT: u8 = 255;

/// Bytes of tls-crypt's authentication tag.
const TLS_CRYPT_TAG: usize = 32;

/// The replay packet id of a hard reset: 1, or a little more after retransmissions.
const MAX_RESET_PID: u32 = 16;

/// Plausible times in a replay id: 2010-01-01 to 2100-01-01.
const TIME_MIN: u32 = 1_262_304_000;
const TIME_MAX: u32 = 4_102_444_800;

/// Packets looked at before giving up.
const MAX_UNSURE: u8 = 9;

/// P_DATA_V2 packets needed mid-session.
const DATA_PACKETS: u8 = 3;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// tls-auth's or tls-crypt's replay id at `at`: packet id and time.
fn replay_id(b: &[u8], at: usize) -> bool {
    let (Some(pid), Some(time)) = (be32(b, at), be32(b, at + 4)) else {
        return false;
    };
    (1..=MAX_RESET_PID).contains(&pid) && (TIME_MIN..=TIME_MAX).contains(&time)
}

/// The layout of a hard reset (after the opcode byte and session id at 1..9): where its
/// ACK array starts must read as a client's (`acks == 0`: none) or a server's (1..=8
/// packet ids and the peer's session id), followed by message packet id 0.
fn layout(b: &[u8], server: bool) -> Option<u8> {
    let acks_ok = |at: usize| {
        let Some(&n) = b.get(at) else {
            return false;
        };
        let n = usize::from(n);
        let pid = if server {
            if !(1..=8).contains(&n) {
                return false;
            }
            at + 1 + 4 * n + 8
        } else {
            if n != 0 {
                return false;
            }
            at + 1
        };
        b.get(pid..pid + 4) == Some(&[0; 4][..])
    };
    // Plain, maybe with a small early-negotiation TLV.
    if b.len() <= 40 + 64 && acks_ok(9) {
        return Some(PLAIN);
    }
    for h in HMAC_SIZES {
        let at = 9 + usize::from(h);
        if replay_id(b, at) && acks_ok(at + 8) {
            return Some(h);
        }
    }
    (b.len() > 17 + TLS_CRYPT_TAG && replay_id(b, 9)).then_some(TLS_CRYPT)
}

/// Does the server hard reset `b` answer the client's reset with session id `sid`?
fn server_answers(b: &[u8], sid: &[u8; 8], layout: u8) -> bool {
    let own = &b[1..9];
    if own == [0; 8] || own == sid {
        return false;
    }
    // Where the ACK array starts.
    let acks = match layout {
        PLAIN => 9,
        TLS_CRYPT => return b.len() > 17 + TLS_CRYPT_TAG && replay_id(b, 9),
        h => {
            let at = 9 + usize::from(h);
            if !replay_id(b, at) {
                return false;
            }
            at + 8
        }
    };
    let Some(&n) = b.get(acks) else {
        return false;
    };
    let remote = acks + 1 + 4 * usize::from(n);
    (1..=8).contains(&n) && b.get(remote..remote + 8) == Some(&sid[..])
}

/// A P_DATA_V2 peer id as servers assign them: an index into the client table (at most
/// 65535 clients), or 0xffffff for none.
fn peer_id(b: &[u8]) -> bool {
    b[1] == 0 || b[1..4] == [0xff; 3]
}

/// Encrypted bytes: the first 20 after the header are not all printable text (a text
/// protocol whose first letter reads as opcode 9, `H` to `O`, is not OpenVPN).
fn ciphertext(b: &[u8]) -> bool {
    !b.iter()
        .take(20)
        .all(|c| (0x20..0x7f).contains(c) || c.is_ascii_whitespace())
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    // On TCP, the packet behind its length prefix; resets must fill the segment exactly.
    let (b, exact) = match p.l4 {
        L4::Udp => (p.payload, true),
        L4::Tcp => {
            let Some(len) = p.payload.get(..2) else {
                return Verdict::No;
            };
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let rest = &p.payload[2..];
            (&rest[..len.min(rest.len())], len == rest.len())
        }
    };
    let Some(&first) = b.first() else {
        return Verdict::No;
    };
    let (opcode, key_id) = (first >> 3, first & 7);
    let st = &mut f.scratch.openvpn;
    let reset = key_id == 0 && exact && b.len() >= 9;
    let client_reset = reset && CLIENT_RESETS.contains(&opcode);
    let server_reset = reset && SERVER_RESETS.contains(&opcode);
    let v = if let Some(r) = st.reset {
        let sid = r.session_id;
        let same_session = b.get(1..9) == Some(&sid[..]);
        if p.from_client == r.from_client {
            if key_id == 0 && matches!(opcode, P_CONTROL_V1 | P_ACK_V1) && same_session {
                // The sender goes on with the session its reset opened (a capture may hold
                // one direction only).
                return Proto::OPENVPN.is(true);
            }
            if (client_reset || server_reset) && same_session {
                // The reset resent.
                Verdict::Unsure
            } else {
                Verdict::No
            }
        } else if !r.server && server_reset {
            if server_answers(b, &sid, r.layout) {
                return Proto::OPENVPN.is(true);
            }
            Verdict::No
        } else if r.server {
            // The client of a capture that missed its reset: the server's own packets decide.
            Verdict::Unsure
        } else {
            Verdict::No
        }
    } else if st.data.is_none() && (client_reset || server_reset) && b[1..9] != [0; 8] {
        match layout(b, server_reset) {
            Some(layout) => {
                let mut session_id = [0; 8];
                session_id.copy_from_slice(&b[1..9]);
                st.reset = Some(OpenVpnReset {
                    session_id,
                    layout,
                    from_client: p.from_client,
                    server: server_reset,
                });
                Verdict::Unsure
            }
            None => Verdict::No,
        }
    } else if opcode == P_DATA_V2 && b.len() >= 24 && peer_id(b) && ciphertext(&b[4..]) {
        let peer = [b[1], b[2], b[3]];
        let dir = if p.from_client { 1 } else { 2 };
        let sample = [b[4], b[5], b[6], b[7]];
        match st.data {
            None => {
                st.data = Some((first, peer));
                st.data_count = 1;
                st.data_dirs = dir;
                st.data_last = sample;
                Verdict::Unsure
            }
            Some(d) if d == (first, peer) && sample != st.data_last => {
                st.data_last = sample;
                st.data_count = st.data_count.saturating_add(1);
                st.data_dirs |= dir;
                if st.data_count >= DATA_PACKETS && st.data_dirs == 3 {
                    return Proto::OPENVPN.is(true);
                }
                Verdict::Unsure
            }
            Some(_) => Verdict::No,
        }
    } else {
        Verdict::No
    };
    if v == Verdict::Unsure && p.index >= MAX_UNSURE {
        Verdict::No
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // openvpn.pcap frames 1 and 2: plain hard resets V2 (60201 -> 443, UDP).
    const PLAIN_C: &str = "38334857703d96db390000000000";
    const PLAIN_S: &str = "40d31c3a6964602fa00100000000334857703d96db3900000000";
    // openvpn.pcap frames 220 and 222: tls-auth (SHA1 HMAC) over TCP (60140 -> 443).
    const AUTH_C: &str =
        "002a3892b8af4a777fc742781024c276d9a1a8c2321879a02264b3ccbc807700000001577e73b30000000000";
    const AUTH_S: &str = "003640d916c4860cb1d8cfa373cfd663159fc0253b52973b189f7f6cb9df8b00000001577e737d010000000092b8af4a777fc74200000000";
    // openvpn.pcap frames 618 and 620: tls-crypt over TCP (36138 -> 443).
    const CRYPT_C: &str = "0036382a56d979d99eccf40000000163cf4ff5b89824b0aa4e93c089c1e24af5443766b5cab18c23c17d51081eb196a229085eec179d0d88";
    const CRYPT_S: &str = "0042402f64c09039de36230000000163cf4ff53036751e70bae8a84698d78c132edcf685ea93abfb4eda16e29f47208abaeeb8b2c6d71c379474de67682231f35717fb54";
    // openvpn.pcap frame 661: tls-auth with a SHA512 HMAC (41133 -> 443, UDP).
    const AUTH512_C: &str = "389753568924842f7ba6451d00b204542cec1183d286579c7a0d1b4e77c933bd1e44c778043835399e46c15b986f91d1883467f203c379ef843943c991f4d7fa22093a4bff93864fb800000001669fcf310000000000";

    fn two(c: &str, s: &str) -> Conv {
        vec![(true, hex(c)), (false, hex(s))]
    }

    #[test]
    fn handshakes() {
        for (conv, e) in [
            (two(PLAIN_C, PLAIN_S), udp(60201, 443)),
            (two(AUTH_C, AUTH_S), tcp(60140, 443)),
            (two(CRYPT_C, CRYPT_S), tcp(36138, 443)),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                feed(detect, e, &mut f, &conv),
                vec![Verdict::Unsure, Proto::OPENVPN.is(true)]
            );
        }
        let mut f = Flow::default();
        let b = hex(AUTH512_C);
        assert_eq!(
            detect(&udp(41133, 443).pkt(&b, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(f.scratch.openvpn.reset.map(|r| r.layout), Some(64));
    }

    /// openvpn.pcap frames 1, 3 (the client's side, 60201 -> 443; NAT makes the two
    /// directions two flows) and 2, 5 (the server's side, 443 -> 60201).
    #[test]
    fn one_direction() {
        let ack = "28334857703d96db390100000000d31c3a6964602fa0";
        let control = "20d31c3a6964602fa00100000001334857703d96db390000000116030300";
        for (reset, next) in [(PLAIN_C, ack), (PLAIN_S, control)] {
            let mut f = Flow::default();
            let conv = vec![(true, hex(reset)), (true, hex(next))];
            assert_eq!(
                feed(detect, udp(60201, 443), &mut f, &conv),
                vec![Verdict::Unsure, Proto::OPENVPN.is(true)]
            );
        }
        // Another session id goes nowhere.
        let mut other = hex(ack);
        other[2] ^= 1;
        let mut f = Flow::default();
        let conv = vec![(true, hex(PLAIN_C)), (true, other)];
        assert_eq!(
            feed(detect, udp(60201, 443), &mut f, &conv),
            vec![Verdict::Unsure, Verdict::No]
        );
    }

    #[test]
    fn mid_session_data() {
        let e = udp(51146, 1194);
        let data = |c: u8| {
            let mut d = hex("48000003");
            d.extend([c; 40]);
            d
        };
        let conv = vec![(true, data(1)), (true, data(2)), (false, data(3))];
        let mut f = Flow::default();
        assert_eq!(
            feed(detect, e, &mut f, &conv),
            vec![Verdict::Unsure, Verdict::Unsure, Proto::OPENVPN.is(true)]
        );
        // One direction only, or another peer id, is not enough.
        let mut f = Flow::default();
        let conv = vec![(true, data(1)), (true, data(2)), (true, data(3))];
        assert_eq!(
            feed(detect, e, &mut f, &conv).last(),
            Some(&Verdict::Unsure)
        );
        let mut other = data(3);
        other[3] = 4;
        let conv = vec![(true, data(1)), (false, other)];
        let mut f = Flow::default();
        assert_eq!(feed(detect, e, &mut f, &conv).last(), Some(&Verdict::No));
        // The same packet again (a text protocol repeating itself), text, a large peer id.
        let conv = vec![(true, data(1)), (false, data(1))];
        let mut f = Flow::default();
        assert_eq!(feed(detect, e, &mut f, &conv).last(), Some(&Verdict::No));
        let mut f = Flow::default();
        let text = b"INVITE sip:bob@example.com SIP/2.0\r\n";
        assert_eq!(detect(&e.pkt(text, true, 0), &mut f), Verdict::No);
        let mut big = data(1);
        big[1] = 1;
        assert_eq!(detect(&e.pkt(&big, true, 0), &mut f), Verdict::No);
    }

    #[test]
    fn not_openvpn() {
        // A server reset that acknowledges another session; a TCP prefix that does not
        // match; a client reset with a non-zero key id; the server's reset first.
        let mut wrong_ack = hex(PLAIN_S);
        wrong_ack[14] ^= 1;
        let mut long_prefix = hex(AUTH_C);
        long_prefix[1] += 1;
        let mut key1 = hex(PLAIN_C);
        key1[0] |= 1;
        for (conv, e) in [
            (vec![(true, hex(PLAIN_C)), (false, wrong_ack)], udp(1, 2)),
            (vec![(true, long_prefix)], tcp(1, 2)),
            (vec![(true, key1)], udp(1, 2)),
            (
                vec![(false, hex(PLAIN_S)), (false, hex(PLAIN_C))],
                udp(1, 2),
            ),
        ] {
            let mut f = Flow::default();
            assert_eq!(feed(detect, e, &mut f, &conv).last(), Some(&Verdict::No));
        }
        // A QUIC Initial's first bytes and a TLS ClientHello over TCP.
        let quic = hex("c300000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f3991c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df621230c83711b39343fa028cab7");
        let tls = hex("16030100c8010000c40303");
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(1, 443).pkt(&quic, true, 0), &mut f),
            Verdict::No
        );
        let mut f = Flow::default();
        assert_eq!(detect(&tcp(1, 443).pkt(&tls, true, 0), &mut f), Verdict::No);
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1194);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 120)).collect();
        Fuzz::new(&[udp(60201, 443), tcp(60140, 443)])
            .flow(two(PLAIN_C, PLAIN_S))
            .flow(two(AUTH_C, AUTH_S))
            .flow(two(CRYPT_C, CRYPT_S))
            .seeds([hex(AUTH512_C)])
            .payloads(random)
            .run(detect);
    }
}
