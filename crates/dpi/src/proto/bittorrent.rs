//! BitTorrent.
//! * TCP: the peer handshake `\x13BitTorrent protocol` opening the flow.
//! * UDP, one packet is enough for: a local service discovery announce (BEP 14,
//!   `BT-SEARCH * HTTP/1.1`), a DHT (KRPC, BEP 5) message, a bencoded dictionary such as
//!   `d1:ad2:id20:…e1:q4:ping1:t2:aa1:y1:qe` with its `1:y1:q`/`1:y1:r`/`1:y1:e` key; a UDP
//!   tracker connect request (BEP 15, magic 0x41727101980).
//! * UDP, uTP (BEP 29): a 20-byte header with version 1, type 0..=4, extension 0..=2 (the
//!   extension chain inside the payload). A header this loose is accepted only when the uTP
//!   data is a peer handshake, or when a second packet follows the first up as uTP's state
//!   machine does: the same connection id or one off by one (the two sides use `id` and
//!   `id + 1`), and then from the same side a later timestamp (microseconds, under 30 s on)
//!   and a sequence number at most 64 on, or from the other side an acknowledgement within
//!   64 of the first packet's sequence number. Other UDP media with a constant first word
//!   (Zoom, Steam pings) repeat their timestamp or do not acknowledge.
//!
//! `Scratch::utp` holds the first uTP packet's header fields.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, UtpFirst, Verdict, L4};

const HANDSHAKE: &[u8] = b"\x13BitTorrent protocol";
/// BEP 15 connect request: protocol id 0x41727101980, action 0 (connect).
const TRACKER_CONNECT: &[u8] = &[0, 0, 0x04, 0x17, 0x27, 0x10, 0x19, 0x80, 0, 0, 0, 0];
const STUN_COOKIE: &[u8] = &[0x21, 0x12, 0xa4, 0x42];

/// DHT keys are searched in this many bytes.
const SCAN: usize = 512;
/// uTP extensions walked at most.
const MAX_EXT: usize = 8;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let hay = hay.get(..hay.len().min(SCAN)).unwrap_or_default();
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// True when `d` (possibly cut) starts with `pat` or with a non-empty prefix of it when `d` is
/// shorter.
fn prefix_of(d: &[u8], pat: &[u8]) -> bool {
    let n = d.len().min(pat.len());
    n > 0 && d.get(..n) == pat.get(..n)
}

fn is_dht(d: &[u8]) -> bool {
    // `d` then a bencoded string key (`1:a`, `1:r`, `1:e`, `1:t`, `2:ip`, …).
    d.first() == Some(&b'd')
        && d.get(1).is_some_and(u8::is_ascii_digit)
        && d.get(2) == Some(&b':')
        && (contains(d, b"1:y1:q") || contains(d, b"1:y1:r") || contains(d, b"1:y1:e"))
}

/// Timestamp, sequence and acknowledgement numbers of a uTP header (BEP 29 layout:
/// type/version, extension, connection id, timestamp, timestamp difference, window, seq, ack).
fn utp_numbers(d: &[u8]) -> Option<(u32, u16, u16)> {
    let ts = u32::from_be_bytes(d.get(4..8)?.try_into().ok()?);
    let seq = u16::from_be_bytes(d.get(16..18)?.try_into().ok()?);
    let ack = u16::from_be_bytes(d.get(18..20)?.try_into().ok()?);
    Some((ts, seq, ack))
}

/// Largest step between the numbers of two packets of one uTP connection early in a flow.
const UTP_STEP: u16 = 64;
/// Largest gap between the timestamps of a side's two packets (30 s in microseconds).
const UTP_CLOCK_STEP: u32 = 30_000_000;

/// True when `b` follows `a` up as the same uTP connection would.
fn utp_follows(a: &UtpFirst, b_from_client: bool, b_conn: u16, b: (u32, u16, u16)) -> bool {
    let (ts, seq, ack) = b;
    let same_id = b_conn == a.connection_id
        || b_conn == a.connection_id.wrapping_add(1)
        || a.connection_id == b_conn.wrapping_add(1);
    if !same_id {
        return false;
    }
    if b_from_client == a.from_client {
        let dt = ts.wrapping_sub(a.timestamp_us);
        dt != 0 && dt < UTP_CLOCK_STEP && seq.wrapping_sub(a.seq) <= UTP_STEP
    } else {
        ack.wrapping_sub(a.seq) <= UTP_STEP || a.seq.wrapping_sub(ack) <= UTP_STEP
    }
}

/// A uTP header: returns (connection id, offset of the data after the extensions).
fn utp_header(d: &[u8]) -> Option<(u16, usize)> {
    let b0 = *d.first()?;
    let ext = *d.get(1)?;
    if b0 & 0x0f != 1 || b0 >> 4 > 4 || ext > 2 || d.len() < 20 {
        return None;
    }
    if d.get(4..8) == Some(STUN_COOKIE) {
        return None;
    }
    let conn = u16::from_be_bytes([*d.get(2)?, *d.get(3)?]);
    let mut off = 20usize;
    let mut next = ext;
    for _ in 0..MAX_EXT {
        if next == 0 {
            return Some((conn, off));
        }
        next = *d.get(off)?;
        let len = usize::from(*d.get(off + 1)?);
        // Selective ACK bitmasks are a multiple of 4 bytes, at least 4.
        if len == 0 || off + 2 + len > d.len() {
            return None;
        }
        off += 2 + len;
    }
    None
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let b0 = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    if p.l4 == L4::Tcp {
        if p.index > 0 || b0 != 0x13 {
            return Verdict::No;
        }
        return if d.len() >= HANDSHAKE.len() && d.starts_with(HANDSHAKE) {
            Proto::BITTORRENT.is(true)
        } else {
            Verdict::No
        };
    }
    match b0 {
        b'd' if is_dht(d) => Proto::BITTORRENT.is(true),
        // Local service discovery (BEP 14), multicast on the LAN.
        b'B' if d.starts_with(b"BT-SEARCH * HTTP/1.1\r\n") => Proto::BITTORRENT.is(true),
        0 if d.len() == 16 && d.starts_with(TRACKER_CONNECT) => Proto::BITTORRENT.is(true),
        0x01 | 0x11 | 0x21 | 0x31 | 0x41 => utp(p, f),
        _ => Verdict::No,
    }
}

fn utp(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let (conn, data) = match utp_header(d) {
        Some(h) => h,
        None => return Verdict::No,
    };
    if d.get(data..)
        .is_some_and(|rest| prefix_of(rest, HANDSHAKE) && rest.len() >= 8)
    {
        return Proto::BITTORRENT.is(true);
    }
    let Some(numbers) = utp_numbers(d) else {
        return Verdict::No;
    };
    if let Some(first) = f.scratch.utp {
        return if utp_follows(&first, p.from_client, conn, numbers) {
            Proto::BITTORRENT.is(true)
        } else {
            Verdict::No
        };
    }
    f.scratch.utp = Some(UtpFirst {
        from_client: p.from_client,
        connection_id: conn,
        timestamp_us: numbers.0,
        seq: numbers.1,
    });
    Verdict::Unsure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // bittorrent.pcap frame 1 (peer handshake, 68 bytes).
    const HS: &str = "13426974546f7272656e742070726f746f636f6c0000000000100005dcfcdccfb9e670ccc3dd40c78c161f2bea2431262d554d313836302d418e181ac9ba17987152663e";
    // bittorrent_utp.pcap frame 1 (DHT get_peers query, 104 bytes).
    const DHT: &str = "64313a6164323a696432303af7f6007cea13506e514de7ecbc94f2ae517115f8393a696e666f5f6861736832303af7f601d8a6276f762c2c3df274af2827f8d1f1de65313a71393a6765745f7065657273313a74323a0e61313a76343a4c540101313a79313a7165";
    // bittorrent_utp.pcap frames 87 (SYN) and 88 (STATE), flow 127.0.0.1:49861 <-> :33333.
    const SYN: &str = "41004567ed639296000000000010000023c60000";
    const STATE: &str = "21004567ed6393410000000000100000456723c6";
    // bittorrent_utp.pcap frame 4: STATE with an extension (selective ACK).
    const STATE_EXT: &str = "2102530206ff3f5f7fffffff0000f00049c7e7f500080000000000000000";
    // bittorrent_utp.pcap frame 5 (first 64 bytes): DATA carrying the peer handshake.
    const DATA_HS: &str = "0100530310f0687609f1291700100000e7f649c613426974546f7272656e742070726f746f636f6c00000000001800050ca4c8e7fb26a354b1a7aa15baeaf260";

    #[test]
    fn tcp_handshake() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Tcp, 52888, 38305).pkt(&hex(HS), true, 0), &mut f),
            Proto::BITTORRENT.is(true)
        );
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &ends(L4::Tcp, 52888, 38305).pkt(&hex(HS)[..19], true, 0),
                &mut f
            ),
            Verdict::No
        );
    }

    #[test]
    fn udp_dht_and_utp() {
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&hex(DHT), true, 0), &mut f),
            Proto::BITTORRENT.is(true)
        );
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&hex(SYN), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(f.scratch.utp.map(|u| u.connection_id), Some(0x4567));
        assert_eq!(
            detect(
                &ends(L4::Udp, 52888, 38305).pkt(&hex(STATE), false, 1),
                &mut f
            ),
            Proto::BITTORRENT.is(true)
        );
        assert_eq!(utp_header(&hex(STATE_EXT)), Some((0x5302, 30)));
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &ends(L4::Udp, 52888, 38305).pkt(&hex(DATA_HS), true, 0),
                &mut f
            ),
            Proto::BITTORRENT.is(true)
        );
        // SYN 0x5302 then DATA 0x5303 from the same side (frames 3, 5).
        let mut f = Flow::default();
        let syn = hex("4100530210eeb2f00000000000000000e7f50000");
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&syn, true, 0), &mut f),
            Verdict::Unsure
        );
        let data = hex("0100530310f0687609f1291700100000e7f649c6");
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&data, true, 1), &mut f),
            Proto::BITTORRENT.is(true)
        );
        // bt_search.pcap (nDPI 4.2's tests): a local service discovery announce.
        let lsd = b"BT-SEARCH * HTTP/1.1\r\nHost: 239.192.152.143:6771\r\nPort: 6881\r\nInfohash: 0123456789abcdef0123456789abcdef01234567\r\n\r\n\r\n";
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 6771, 6771).pkt(lsd, true, 0), &mut f),
            Proto::BITTORRENT.is(true)
        );
        // Tracker connect.
        let mut f = Flow::default();
        let c = hex("0000041727101980000000000badcafe");
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&c, true, 0), &mut f),
            Proto::BITTORRENT.is(true)
        );
    }

    #[test]
    fn negatives() {
        // STUN binding request with the magic cookie (looks like uTP type 0, extension 1).
        let stun = hex("000100002112a4424a4b4c4d4e4f505152535455");
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&stun, true, 0), &mut f),
            Verdict::No
        );
        let stun_rsp = hex("010100002112a4424a4b4c4d4e4f505152535455");
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&stun_rsp, true, 0), &mut f),
            Verdict::No
        );
        // Two uTP-like headers with unrelated connection ids.
        let mut f = Flow::default();
        assert_eq!(
            detect(&ends(L4::Udp, 52888, 38305).pkt(&hex(SYN), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(
                &ends(L4::Udp, 52888, 38305).pkt(&hex(STATE_EXT), false, 1),
                &mut f
            ),
            Verdict::No
        );
        // zoom2.pcap (nDPI 4.2's tests), port 8801: two media packets from one side whose
        // first 20 bytes read as uTP DATA with one connection id, but the same timestamp.
        let zoom = |last: &str| {
            hex(&format!(
                "010003c24258b6dc9c5da4e7b0c3c4b1a8b4ba0000000000000002006f64{last}"
            ))
        };
        let mut f = Flow::default();
        let e = ends(L4::Udp, 57953, 8801);
        assert_eq!(
            detect(&e.pkt(&zoom("3b"), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(detect(&e.pkt(&zoom("a1"), true, 1), &mut f), Verdict::No);
        // The same side's next packet with a later clock, but 1000 sequence numbers on.
        let mut f = Flow::default();
        let syn = hex("4100530210eeb2f00000000000000000e7f50000");
        let far = hex("0100530310f0687609f1291700100000ebdd49c6");
        assert_eq!(detect(&e.pkt(&syn, true, 0), &mut f), Verdict::Unsure);
        assert_eq!(detect(&e.pkt(&far, true, 1), &mut f), Verdict::No);
        // Bencoded but not KRPC; an RTP packet; TLS over TCP; DHT bytes over TCP.
        let mut f = Flow::default();
        assert_eq!(
            detect(
                &ends(L4::Udp, 52888, 38305).pkt(b"d3:foo3:bare", true, 0),
                &mut f
            ),
            Verdict::No
        );
        let rtp = hex("80086fae000004d83796cb71d5d5d5d5d5d5d5d5");
        assert_eq!(
            detect(
                &ends(L4::Udp, 52888, 38305).pkt(&rtp, true, 0),
                &mut Flow::default()
            ),
            Verdict::No
        );
        let tls = hex("16030100a8010000a403035cef9e29f7");
        assert_eq!(
            detect(
                &ends(L4::Tcp, 52888, 38305).pkt(&tls, true, 0),
                &mut Flow::default()
            ),
            Verdict::No
        );
        assert_eq!(
            detect(
                &ends(L4::Tcp, 52888, 38305).pkt(&hex(DHT), true, 0),
                &mut Flow::default()
            ),
            Verdict::No
        );
        // Extension chain running past the payload.
        let bad = hex("2102530206ff3f5f7fffffff0000f00049c7e7f50008000000");
        assert_eq!(utp_header(&bad), None);
    }

    #[test]
    fn never_panics() {
        // Random bytes, half of them with a uTP-like first two bytes (type 0..=4, version 1,
        // extension 0..=2).
        let mut rng = Rng::new(0x0bad_f00d);
        let random: Vec<Vec<u8>> = (0..300)
            .map(|n| {
                let mut v = rng.bytes(n % 64);
                if n % 2 == 0 && v.len() >= 2 {
                    v[0] = ((v[0] % 5) << 4) | 1;
                    v[1] %= 3;
                }
                v
            })
            .collect();
        Fuzz::new(&[ends(L4::Tcp, 52888, 38305), ends(L4::Udp, 52888, 38305)])
            .seeds([HS, DHT, SYN, STATE, STATE_EXT, DATA_HS].map(hex))
            .payloads(random)
            .run(detect);
    }
}
