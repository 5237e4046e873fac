//! MQTT over TCP (MQTT 3.1 `MQIsdp`, 3.1.1 and 5 `MQTT`).
//!
//! Why: MQTT is the publish/subscribe transport of IoT devices; labelling it tells device
//! telemetry apart from other TCP traffic. A session starts with the client's CONNECT: fixed
//! header `0x10`, a remaining length of one to four varint bytes, then the protocol name and
//! level, which together are distinctive. A flow seen from the server's CONNACK on (`20 02 ..`,
//! four bytes) is claimed only on the MQTT ports 1883/8883, since those bytes alone are weak.
//!
//! A capture can also join a long-lived session after its CONNECT, where only keep-alives and
//! publishes pass: a PINGREQ (`c0 00`) answered by a PINGRESP (`d0 00`) from the other side
//! is MQTT on any port; a PUBLISH (fixed header `0x3X` with a valid QoS, a remaining length
//! that fits the packet, then a topic of printable UTF-8 without wildcards) is enough on the
//! MQTT ports, and elsewhere when the flow's next payload packet is MQTT too (another PUBLISH,
//! a PUBACK or a PINGREQ/PINGRESP).

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// `Scratch::mqtt` bits: a PINGREQ came from the client / the server side; a PUBLISH was seen.
const PING_CLIENT: u8 = 0x01;
const PING_SERVER: u8 = 0x02;
const PUBLISHED: u8 = 0x04;
/// Payload packets a mid-session flow may take to show its second MQTT packet.
const MID_SESSION_PACKETS: u8 = 4;

/// Decodes the remaining-length varint starting at `b[1]`; returns (value, header length).
fn remaining_length(b: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0usize;
    for i in 0..4 {
        let byte = *b.get(1 + i)?;
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, 2 + i));
        }
    }
    None // a fifth length byte is malformed
}

fn connect(b: &[u8]) -> bool {
    let Some((len, hdr)) = remaining_length(b) else {
        return false;
    };
    let Some(var) = b.get(hdr..) else {
        return false;
    };
    // Protocol name and level, then the connect flags (bit 0 is reserved and zero).
    let (level, flags) = match var {
        [0, 4, b'M', b'Q', b'T', b'T', level, flags, ..] => (*level, *flags),
        [0, 6, b'M', b'Q', b'I', b's', b'd', b'p', level, flags, ..] => (*level, *flags),
        _ => return false,
    };
    let name_len = if var[1] == 4 { 6 } else { 8 };
    // Variable header is name + level + flags + keep alive (2) at least, plus a client id.
    matches!(level, 3..=5) && flags & 0x01 == 0 && len >= name_len + 4 + 2
}

fn connack(p: &Pkt<'_>) -> bool {
    p.index == 0
        && !p.from_client
        && (p.has_port(1883) || p.has_port(8883))
        && matches!(p.payload, [0x20, 0x02, 0 | 1, 0..=5])
}

/// A PUBLISH message starting the packet: QoS 0..=2, the remaining length within what a
/// segment can be followed by, a topic that fits and reads as a topic name.
fn publish(b: &[u8]) -> bool {
    let Some(&b0) = b.first() else {
        return false;
    };
    let qos = (b0 >> 1) & 3;
    if b0 & 0xf0 != 0x30 || qos == 3 {
        return false;
    }
    let Some((len, hdr)) = remaining_length(b) else {
        return false;
    };
    let Some(&[hi, lo]) = b.get(hdr..hdr + 2) else {
        return false;
    };
    let topic_len = usize::from(u16::from_be_bytes([hi, lo]));
    let id_len = if qos > 0 { 2 } else { 0 };
    if topic_len == 0 || 2 + topic_len + id_len > len {
        return false;
    }
    let Some(topic) = b.get(hdr + 2..hdr + 2 + topic_len) else {
        return false;
    };
    std::str::from_utf8(topic).is_ok_and(|t| {
        t.chars()
            .all(|c| !c.is_control() && c != '+' && c != '#' && c != '\0')
    })
}

/// A flow joined after its CONNECT: keep-alives and publishes.
fn mid_session(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let st = f.scratch.mqtt;
    let b = p.payload;
    let (mine, theirs) = if p.from_client {
        (PING_CLIENT, PING_SERVER)
    } else {
        (PING_SERVER, PING_CLIENT)
    };
    let verdict = match b {
        [0xd0, 0x00] if st & theirs != 0 => return Proto::MQTT.is(true),
        [0xc0, 0x00] => {
            f.scratch.mqtt |= mine;
            Verdict::Unsure
        }
        // PUBACK (4 bytes) after a PUBLISH.
        [0x40, 0x02, _, _] if st & PUBLISHED != 0 => return Proto::MQTT.is(true),
        _ if publish(b) => {
            if st & PUBLISHED != 0 || p.has_port(1883) || p.has_port(8883) {
                return Proto::MQTT.is(true);
            }
            f.scratch.mqtt |= PUBLISHED;
            Verdict::Unsure
        }
        _ => Verdict::No,
    };
    if verdict == Verdict::Unsure && p.index >= MID_SESSION_PACKETS {
        return Verdict::No;
    }
    verdict
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let ok = match p.payload.first() {
        Some(0x10) if p.index == 0 => connect(p.payload),
        Some(0x20) if p.index == 0 && connack(p) => true,
        _ => return mid_session(p, f),
    };
    if ok {
        Proto::MQTT.is(true)
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // mqtt.pcap frame 2: MQTT 3.1 CONNECT (MQIsdp, level 3); frame 4: CONNACK.
    const CONNECT_V3: &str = "104000064d514973647003c20014001663626161626362616261636262626262616161616162000c303244353035303232334433000c303244353035303232334433";
    const CONNACK: &str = "20020000";
    // mqtt.pcap frame 9 (first 64 bytes): MQTT 3.1.1 CONNECT with a 2-byte remaining length.
    const CONNECT_V4: &str = "109a0200044d51545404c00258001050343737373549443137305732313230004a696f74617a6577706d6c69746875622e617a7572652d646576696365732e6e";

    #[test]
    fn connects() {
        for h in [CONNECT_V3, CONNECT_V4] {
            let b = hex(h);
            let mut f = Flow::default();
            assert_eq!(
                detect(&tcp(41892, 1883).pkt(&b, true, 0), &mut f),
                Proto::MQTT.is(true)
            );
            let mut f = Flow::default();
            assert_eq!(
                detect(&tcp(41892, 9999).pkt(&b, true, 0), &mut f),
                Proto::MQTT.is(true)
            );
        }
        assert_eq!(remaining_length(&hex(CONNECT_V4)), Some((282, 3)));
    }

    #[test]
    fn connack_only_on_mqtt_port() {
        let b = hex(CONNACK);
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(41892, 1883).pkt(&b, false, 0), &mut f),
            Proto::MQTT.is(true)
        );
        assert_eq!(
            detect(&tcp(41892, 9999).pkt(&b, false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect(&tcp(41892, 1883).pkt(&b, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_mqtt() {
        let mut f = Flow::default();
        let mut bad_level = hex(CONNECT_V4);
        bad_level[9] = 9;
        for b in [
            &bad_level[..],
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            &[0x10, 0xff, 0xff, 0xff, 0xff, 0x01][..],
            &hex("16030100a5010000a10303")[..],
        ] {
            assert_eq!(
                detect(&tcp(41892, 1883).pkt(b, true, 0), &mut f),
                Verdict::No
            );
        }
    }

    #[test]
    fn joined_mid_session() {
        // coap_mqtt.pcap (nDPI 4.2's tests), port 17501: PINGREQ then PINGRESP.
        let e = tcp(53523, 17501);
        let mut f = Flow::default();
        assert_eq!(detect(&e.pkt(&[0xc0, 0], true, 0), &mut f), Verdict::Unsure);
        assert_eq!(
            detect(&e.pkt(&[0xd0, 0], false, 1), &mut f),
            Proto::MQTT.is(true)
        );
        // A PINGRESP from the side that sent the PINGREQ is not an answer.
        let mut f = Flow::default();
        assert_eq!(detect(&e.pkt(&[0xc0, 0], true, 0), &mut f), Verdict::Unsure);
        assert_eq!(detect(&e.pkt(&[0xd0, 0], true, 1), &mut f), Verdict::No);
        // PUBLISH QoS 0, topic "sensors/t1", payload "21.5": enough on 1883, and elsewhere
        // with a second one.
        let mut publish = vec![0x30, 16, 0, 10];
        publish.extend(b"sensors/t121.5");
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(41000, 1883).pkt(&publish, false, 0), &mut f),
            Proto::MQTT.is(true)
        );
        let mut f = Flow::default();
        assert_eq!(detect(&e.pkt(&publish, false, 0), &mut f), Verdict::Unsure);
        assert_eq!(
            detect(&e.pkt(&publish, false, 1), &mut f),
            Proto::MQTT.is(true)
        );
        // A topic with a wildcard or a control character, a topic longer than the message,
        // QoS 3; HTTP text after a PINGREQ.
        let mut wild = publish.clone();
        wild[8] = b'#';
        let mut ctl = publish.clone();
        ctl[8] = 0x01;
        let mut long = publish.clone();
        long[3] = 15;
        let mut qos3 = publish.clone();
        qos3[0] = 0x36;
        for b in [&wild, &ctl, &long, &qos3] {
            let mut f = Flow::default();
            assert_eq!(detect(&e.pkt(b, false, 0), &mut f), Verdict::No);
        }
        let mut f = Flow::default();
        assert_eq!(detect(&e.pkt(&[0xc0, 0], true, 0), &mut f), Verdict::Unsure);
        assert_eq!(
            detect(&e.pkt(b"HTTP/1.1 200 OK\r\n\r\n", false, 1), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        // Random bytes after a CONNECT type byte.
        let mut rng = Rng::new(0x7777_1234);
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|round| {
                let mut b = rng.bytes(round % 64);
                if let Some(x) = b.first_mut() {
                    *x = 0x10;
                }
                b
            })
            .collect();
        Fuzz::new(&[tcp(41892, 1883)])
            .seeds([CONNECT_V3, CONNECT_V4, CONNACK].map(hex))
            .payloads(random)
            .run(detect);
    }
}
