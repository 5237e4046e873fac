//! WireGuard over UDP, any port (WireGuard whitepaper, section 5.4; the Linux and
//! wireguard-go message layouts).
//!
//! Why: WireGuard is a common VPN, usually on a chosen port. Every message starts with a
//! type byte and three zero bytes; the handshake messages have fixed sizes (initiation 148,
//! response 92, cookie reply 64 bytes), which is enough. Transport data (type 4: receiver
//! index, 64-bit counter, ciphertext padded to 16 bytes and a 16-byte tag) is too weak alone,
//! so a capture that starts mid-session needs two of them in the same direction with the
//! same receiver index and a counter that went up.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// Packets looked at for a second transport-data packet.
const MAX_UNSURE: u8 = 8;

/// How far the counter may move between two packets of one direction (replay window of
/// the reference implementation is 8192; losses in a capture stay well under).
const MAX_COUNTER_STEP: u64 = 1 << 16;

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let b = p.payload;
    if p.l4 != L4::Udp || b.len() < 4 || b[1..4] != [0, 0, 0] {
        return Verdict::No;
    }
    match (b[0], b.len()) {
        (1, 148) | (2, 92) | (3, 64) => return Proto::WIREGUARD.is(true),
        (4, n) if n >= 32 && n % 16 == 0 => {}
        _ => return Verdict::No,
    }
    let receiver = le32(&b[4..8]);
    let counter = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    let dir = usize::from(!p.from_client);
    if let Some((r, c)) = f.scratch.wireguard[dir] {
        if r != receiver || counter <= c || counter - c > MAX_COUNTER_STEP {
            return Verdict::No;
        }
        return Proto::WIREGUARD.is(true);
    }
    f.scratch.wireguard[dir] = Some((receiver, counter));
    Verdict::unsure_within(p, MAX_UNSURE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // wireguard.pcap frames 1 (initiation, 43462 -> 51820) and 2 (response).
    const INIT: &str = "01000000d837d0305fcec7c8e5c8e2e3f7989eef60c228d82329d602b6b1e2bb9d068f89cf9d4d4532780f6d27264f7b98701fdc27a4ec00aeb6becdbef2332f1b4084cadb93823935c012ae255e7b25eff13940c321fa6bd66a2a87b061db1430173e937f569349de2856dc5f2616763eeeafc0533b01dd965e7ec76976e28f683d671200000000000000000000000000000000";
    const RESP: &str = "0200000006f47dabd837d030b18d5550bd4042a37a46823ac08db1ec66839bc0ca2d64bc15cd80232b66232faec24af8918de1060ff5c98e865d5f35f272214c5260110dc4c61e32cdd8542100000000000000000000000000000000";
    // wireguard.pcap frames 3 and 5: transport data, receiver 0xab7df406, counters 0 and 1.
    const DATA0: &str = "0400000006f47dab0000000000000000a4ebc12ee3f990da18033a0789c04e2700f6f5c271d42ac4b4d6262e666549b445a7436e829bffb6ac65f05648bc0c391fe7c5884874376127164940188f03dba67af8388eaab76c593628bf9dc7be03346d912e916dad862545454701364f2d2486d7ced4c8642ce547ddb26ef6a46b";
    const DATA1: &str = "0400000006f47dab01000000000000007ccd2824a229fccd16853b1eff946acc5635acd2361089c3169706ce0fcf62cdab24b21ed89b5be40393c1692cfa7a2981e58cae915348a5f9fc833daa7a91a81b51e55bb732eadc386d6a57e625b092cb5ba943f6a93ac69a0701e99e6022a62f066f3cb622328091dad59df13f6e33";

    const E: Ends = udp(43462, 51820);

    #[test]
    fn handshake() {
        for (h, c) in [(INIT, true), (RESP, false)] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&E.pkt(&hex(h), c, 0), &mut f),
                Proto::WIREGUARD.is(true)
            );
        }
        let cookie = [&[3u8, 0, 0, 0][..], &[0x5a; 60]].concat();
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(1, 2).pkt(&cookie, false, 0), &mut f),
            Proto::WIREGUARD.is(true)
        );
    }

    #[test]
    fn mid_session() {
        let mut f = Flow::default();
        let conv = vec![(true, hex(DATA0)), (true, hex(DATA1))];
        let v = feed(detect, E, &mut f, &conv);
        assert_eq!(v, vec![Verdict::Unsure, Proto::WIREGUARD.is(true)]);
        // The two directions keep apart: the server's packet does not pair with the client's.
        let mut f = Flow::default();
        let conv = vec![(true, hex(DATA0)), (false, hex(DATA1)), (true, hex(DATA1))];
        let v = feed(detect, E, &mut f, &conv);
        assert_eq!(
            v,
            vec![Verdict::Unsure, Verdict::Unsure, Proto::WIREGUARD.is(true)]
        );
    }

    #[test]
    fn not_wireguard() {
        // Same counter twice, a counter going back, another receiver.
        let mut other = hex(DATA1);
        other[4] ^= 1;
        for second in [hex(DATA0), other] {
            let mut f = Flow::default();
            let conv = vec![(true, hex(DATA1)), (true, second)];
            assert_eq!(
                feed(detect, E, &mut f, &conv),
                vec![Verdict::Unsure, Verdict::No]
            );
        }
        let mut f = Flow::default();
        let conv = vec![(true, hex(DATA1)), (true, hex(DATA0))];
        assert_eq!(feed(detect, E, &mut f, &conv).last(), Some(&Verdict::No));
        // Wrong sizes, reserved bytes set, type 5; a DNS query.
        let mut reserved = hex(INIT);
        reserved[2] = 1;
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [
            &hex(INIT)[..147],
            &hex(RESP)[..64],
            &reserved[..],
            &hex(DATA0)[..40],
            &[5, 0, 0, 0, 1, 2, 3, 4][..],
            &dns,
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&E.pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x5182);
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|round| {
                let mut b = vec![(round % 6) as u8, 0, 0, 0];
                b.extend(rng.bytes(round % 160));
                b
            })
            .collect();
        Fuzz::new(&[E])
            .seeds([INIT, RESP].map(hex))
            .flow(vec![(true, hex(DATA0)), (true, hex(DATA1))])
            .payloads(random)
            .run(detect);
    }
}
