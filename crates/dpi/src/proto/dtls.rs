//! DTLS over UDP on its own (RFC 6347 DTLS 1.2, RFC 4347 1.0, RFC 9147 1.3): VPN clients,
//! CoAP, WebRTC without a STUN exchange first (stun.rs labels DTLS that follows STUN checks).
//!
//! Why: DTLS carries VPN tunnels (AnyConnect, OpenConnect), IoT and media; without it those
//! flows stay unknown. The first flight is checked strictly, so one packet is enough:
//! - a record header: content type handshake (22), version `fe ff` (1.0) or `fe fd` (1.2 and
//!   1.3's first flight), epoch 0, a 48-bit sequence number, and a length that ends exactly at
//!   the datagram's end or at the start of a further record;
//! - inside it a handshake header: ClientHello (1), ServerHello (2), HelloVerifyRequest (3),
//!   Certificate (11) or ServerHelloDone (14)... whose fragment (offset, length) lies within the
//!   message and fills the record exactly;
//! - a ClientHello or HelloVerifyRequest fragment starting at offset 0 must begin with a DTLS
//!   client version.
//!
//! A flow joined after the handshake shows only application data (type 23) of a non-zero
//! epoch: two such records from one side with the same epoch and rising sequence numbers.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const RECORD_HEADER: usize = 13;
const HANDSHAKE_HEADER: usize = 12;
/// Payload packets looked at for a second application-data record.
const MAX_UNSURE: u8 = 6;

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |v, &x| v << 8 | u64::from(x))
}

fn dtls_version(hi: u8, lo: u8) -> bool {
    hi == 0xfe && matches!(lo, 0xff | 0xfd | 0xfc)
}

/// A record at the start of `b`: (content type, epoch, sequence number, the record's bytes
/// after its header). The record must end within `b`.
fn record(b: &[u8]) -> Option<(u8, u16, u64, &[u8])> {
    let h = b.get(..RECORD_HEADER)?;
    if !dtls_version(h[1], h[2]) {
        return None;
    }
    let epoch = u16::from_be_bytes([h[3], h[4]]);
    let seq = be(&h[5..11]);
    let len = usize::from(u16::from_be_bytes([h[11], h[12]]));
    let body = b.get(RECORD_HEADER..RECORD_HEADER + len)?;
    Some((h[0], epoch, seq, body))
}

/// A handshake record of the first flight (epoch 0) whose message header is consistent.
fn first_flight(body: &[u8]) -> bool {
    let Some(h) = body.get(..HANDSHAKE_HEADER) else {
        return false;
    };
    let msg_type = h[0];
    let length = be(&h[1..4]);
    let offset = be(&h[6..9]);
    let fragment = be(&h[9..12]);
    if !matches!(msg_type, 1 | 2 | 3 | 4 | 11 | 12 | 13 | 14 | 15 | 16 | 20)
        || length == 0
        || offset + fragment > length
        || body.len() as u64 != HANDSHAKE_HEADER as u64 + fragment
    {
        return false;
    }
    // The hellos and HelloVerifyRequest start with a DTLS version.
    if matches!(msg_type, 1..=3) && offset == 0 {
        return body
            .get(HANDSHAKE_HEADER..HANDSHAKE_HEADER + 2)
            .is_some_and(|v| dtls_version(v[0], v[1]));
    }
    true
}

/// The datagram's records tile it exactly (DTLS packs several records into one datagram).
fn records_tile(b: &[u8]) -> bool {
    let mut at = 0;
    for _ in 0..8 {
        let Some((_, _, _, body)) = b.get(at..).and_then(record) else {
            return false;
        };
        at += RECORD_HEADER + body.len();
        if at == b.len() {
            return true;
        }
    }
    false
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    let b = p.payload;
    let Some((kind, epoch, seq, body)) = record(b) else {
        return Verdict::No;
    };
    if !records_tile(b) {
        return Verdict::No;
    }
    if kind == 22 && epoch == 0 {
        return if first_flight(body) {
            Proto::DTLS.is(true)
        } else {
            Verdict::No
        };
    }
    if kind != 23 || epoch == 0 || p.index >= MAX_UNSURE {
        return Verdict::No;
    }
    let d = usize::from(!p.from_client);
    match f.scratch.dtls[d] {
        Some((e, s)) if e == epoch && seq > s && seq - s <= 64 => Proto::DTLS.is(true),
        Some(_) => Verdict::No,
        None => {
            f.scratch.dtls[d] = Some((epoch, seq));
            Verdict::Unsure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    /// A DTLS 1.2 record holding a whole ClientHello (version fe fd, 40 bytes of body).
    fn client_hello() -> Vec<u8> {
        let mut hello = vec![0xfe, 0xfd];
        hello.extend([0x11; 32]); // random
        hello.extend([0, 0, 0, 2, 0xc0, 0x2b, 1, 0]); // session id, cookie, suites, methods
        let n = hello.len() as u8;
        let mut hs = vec![1, 0, 0, n, 0, 0, 0, 0, 0, 0, 0, n];
        hs.extend(hello);
        let mut rec = vec![22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, hs.len() as u8];
        rec.extend(hs);
        rec
    }

    fn app_data(epoch: u16, seq: u8) -> Vec<u8> {
        let mut r = vec![23, 0xfe, 0xfd];
        r.extend(epoch.to_be_bytes());
        r.extend([0, 0, 0, 0, 0, seq, 0, 40]);
        r.extend([0x5a; 40]);
        r
    }

    #[test]
    fn first_flight_on_any_port() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(39347, 44443).pkt(&client_hello(), true, 0), &mut f),
            Proto::DTLS.is(true)
        );
        // Two records in one datagram (a ClientHello then a ChangeCipherSpec-like record).
        let mut two = client_hello();
        two.extend([20, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1]);
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(1, 2).pkt(&two, true, 0), &mut f),
            Proto::DTLS.is(true)
        );
    }

    #[test]
    fn joined_after_the_handshake() {
        let e = udp(50000, 4433);
        let mut f = Flow::default();
        let conv = vec![(true, app_data(1, 7)), (true, app_data(1, 8))];
        assert_eq!(
            feed(detect, e, &mut f, &conv),
            vec![Verdict::Unsure, Proto::DTLS.is(true)]
        );
        // Another epoch, or the sequence going back.
        for second in [app_data(2, 8), app_data(1, 6)] {
            let mut f = Flow::default();
            let conv = vec![(true, app_data(1, 7)), (true, second)];
            assert_eq!(
                feed(detect, e, &mut f, &conv),
                vec![Verdict::Unsure, Verdict::No]
            );
        }
    }

    #[test]
    fn not_dtls() {
        let e = udp(40000, 443);
        let mut cut = client_hello();
        cut.pop();
        let mut tls_version = client_hello();
        tls_version[1..3].copy_from_slice(&[3, 3]);
        let mut epoch1_hello = client_hello();
        epoch1_hello[4] = 1;
        let mut bad_fragment = client_hello();
        bad_fragment[13 + 11] += 1; // fragment longer than the record
        let mut hello_tls_inside = client_hello();
        hello_tls_inside[13 + 12..13 + 14].copy_from_slice(&[3, 3]);
        let mut trailing = client_hello();
        trailing.push(0);
        for b in [
            &cut,
            &tls_version,
            &epoch1_hello,
            &bad_fragment,
            &hello_tls_inside,
            &trailing,
            &app_data(0, 1),
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&e.pkt(b, true, 0), &mut f), Verdict::No, "{b:02x?}");
        }
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(40000, 443).pkt(&client_hello(), true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0xd715_0001);
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|round| {
                let mut b = rng.bytes(round % 200);
                if round % 2 == 0 && b.len() > 3 {
                    b[0] = 22;
                    b[1] = 0xfe;
                    b[2] = 0xfd;
                }
                b
            })
            .collect();
        Fuzz::new(&[udp(40000, 4433)])
            .seeds([client_hello(), app_data(1, 1)])
            .payloads(random)
            .run(detect);
    }
}
