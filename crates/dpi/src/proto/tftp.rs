//! TFTP over UDP (RFC 1350; options RFC 2347, 2348, 2349, 7440).
//!
//! Why: TFTP moves boot images and device configurations in clear. A request (RRQ/WRQ: a
//! NUL-terminated file name, a mode among netascii/octet/mail, then option pairs ending
//! exactly at the end) is strict enough on any port. The server answers from a new port, so
//! the transfer is a flow of its own without port 69; its packets (DATA, ACK, ERROR) are
//! short and weak alone, so the other side must answer consistently: DATA block n then ACK
//! n, ACK n then DATA n+1, DATA or ACK then ERROR. An OACK alone counts when it names only the
//! RFC options with decimal values.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, TftpLast, Verdict, L4};

/// Largest DATA packet: 4 header bytes and the largest `blksize` (RFC 2348).
const MAX_DATA: usize = 4 + 65464;

/// Packets of a transfer flow looked at before giving up.
const MAX_UNSURE: u8 = 8;

/// Options an OACK may carry alone: block size, transfer size, timeout, window size
/// (RFC 2348, 2349, 7440).
const KNOWN_OPTIONS: [&[u8]; 4] = [b"blksize", b"tsize", b"timeout", b"windowsize"];

enum Packet {
    Request,
    Data(u16),
    Ack(u16),
    Error,
    /// An option acknowledgement; `true` when it has only known options with numbers.
    Oack(bool),
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// NUL-terminated strings ending exactly at the end of `b`; none may be empty.
fn strings(b: &[u8]) -> Option<Vec<&[u8]>> {
    if b.last() != Some(&0) {
        return None;
    }
    let out: Vec<&[u8]> = b[..b.len() - 1].split(|&c| c == 0).collect();
    out.iter()
        .all(|s| !s.is_empty() && s.iter().all(|&c| (0x20..0x7f).contains(&c) || c >= 0x80))
        .then_some(out)
}

fn parse(b: &[u8]) -> Option<Packet> {
    let op = be16(b.get(..2)?);
    let rest = &b[2..];
    match op {
        1 | 2 => {
            let s = strings(rest)?;
            let mode = s.get(1)?;
            let known = [&b"netascii"[..], b"octet", b"mail"]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(mode));
            // The file name, the mode, then name/value pairs.
            (known && s.len() % 2 == 0).then_some(Packet::Request)
        }
        3 if b.len() >= 4 && b.len() <= MAX_DATA => Some(Packet::Data(be16(rest))),
        4 if b.len() == 4 => Some(Packet::Ack(be16(rest))),
        5 => {
            let code = be16(rest.get(..2)?);
            let msg = &rest[2..];
            // An empty message is a lone NUL.
            let ok = code <= 8 && (msg == [0] || strings(msg).is_some_and(|s| s.len() == 1));
            ok.then_some(Packet::Error)
        }
        6 => {
            let s = strings(rest)?;
            let strict = !s.is_empty()
                && s.len() % 2 == 0
                && s.chunks(2).all(|kv| {
                    KNOWN_OPTIONS.iter().any(|k| k.eq_ignore_ascii_case(kv[0]))
                        && kv[1].len() <= 10
                        && kv[1].iter().all(u8::is_ascii_digit)
                });
            Some(Packet::Oack(strict))
        }
        _ => None,
    }
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Udp {
        return Verdict::No;
    }
    let Some(pkt) = parse(p.payload) else {
        return Verdict::No;
    };
    let (opcode, block) = match pkt {
        Packet::Request => return Proto::TFTP.is(true),
        Packet::Oack(true) => return Proto::TFTP.is(true),
        Packet::Oack(false) => (6, 0),
        Packet::Data(n) => (3, n),
        Packet::Ack(n) => (4, n),
        Packet::Error => (5, 0),
    };
    let cur = TftpLast {
        from_client: p.from_client,
        opcode,
        block,
    };
    let Some(last) = f.scratch.tftp else {
        f.scratch.tftp = Some(cur);
        return Verdict::unsure_within(p, MAX_UNSURE);
    };
    let answered = match (last.opcode, opcode) {
        (3, 4) => block == last.block,
        (4, 3) => block == last.block.wrapping_add(1),
        (6, 4) => block == 0,
        (6, 3) => block == 1,
        (3 | 4 | 6, 5) => true,
        _ => false,
    };
    if last.from_client != p.from_client {
        return if answered {
            Proto::TFTP.is(true)
        } else {
            Verdict::No
        };
    }
    // The same side again: a retransmission or the next block of a window (RFC 7440).
    let again = opcode == last.opcode
        && matches!(opcode, 3 | 4)
        && (block == last.block || block == last.block.wrapping_add(1));
    if again {
        f.scratch.tftp = Some(cur);
        Verdict::unsure_within(p, MAX_UNSURE)
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // tftp.pcap frame 3: RRQ `rfc1350.txt` octet (50618 -> 69).
    const RRQ: &str = "0001726663313335302e747874006f6374657400";
    // tftp.pcap frame 109: OACK blksize 1468, tsize 100000 (47649 -> 35840).
    const OACK: &str = "0006626c6b73697a650031343638007473697a650031303030303000";
    // tftp.pcap frames 4 and 5: DATA block 1 (first 24 of 516 bytes) and its ACK
    // (3445 <-> 50618).
    const DATA1: &str = "000300010a0a0a0a0a0a4e6574776f726b20576f726b696e67";
    const ACK1: &str = "00040001";

    fn data(block: u16) -> Vec<u8> {
        let mut d = vec![0, 3];
        d.extend(block.to_be_bytes());
        d.extend([0x41; 512]);
        d
    }

    fn ack(block: u16) -> Vec<u8> {
        let mut a = vec![0, 4];
        a.extend(block.to_be_bytes());
        a
    }

    #[test]
    fn requests() {
        let wrq = b"\x00\x02boot/pxelinux.0\x00NetASCII\x00blksize\x001428\x00tsize\x000\x00";
        for b in [hex(RRQ), wrq.to_vec(), hex(OACK)] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(50618, 69).pkt(&b, true, 0), &mut f),
                Proto::TFTP.is(true)
            );
        }
    }

    #[test]
    fn transfers() {
        let e = udp(3445, 50618);
        // The corpus transfer (the server's DATA opens the flow), a capture that starts
        // mid-transfer with an ACK, a write (ACK 0 then DATA 1), an error answer.
        let err = b"\x00\x05\x00\x03Disk full\x00".to_vec();
        for conv in [
            vec![(true, hex(DATA1)), (false, hex(ACK1))],
            vec![(false, ack(41)), (true, data(42))],
            vec![(true, ack(0)), (false, data(1))],
            vec![(true, data(7)), (true, data(7)), (false, ack(7))],
            vec![(true, data(7)), (false, err)],
        ] {
            let mut f = Flow::default();
            let v = feed(detect, e, &mut f, &conv);
            assert_eq!(v.last(), Some(&Proto::TFTP.is(true)), "{v:?}");
        }
    }

    #[test]
    fn not_tftp() {
        let e = udp(3445, 50618);
        // One transfer packet alone stays unsure; inconsistent answers end it.
        for conv in [
            vec![(true, data(5)), (false, ack(6))],
            vec![(false, ack(5)), (true, data(7))],
            vec![(true, data(5)), (true, ack(5))],
        ] {
            let mut f = Flow::default();
            let v = feed(detect, e, &mut f, &conv);
            assert_eq!(v, vec![Verdict::Unsure, Verdict::No], "{conv:?}");
        }
        let mut f = Flow::default();
        assert_eq!(detect(&e.pkt(&data(1), true, 0), &mut f), Verdict::Unsure);
        assert_eq!(detect(&e.pkt(&data(1), true, 8), &mut f), Verdict::No);
        // Bad requests: unknown mode, empty file name, cut, odd option list; a DNS query.
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [
            &b"\x00\x01file\x00binary\x00"[..],
            b"\x00\x01\x00octet\x00",
            &hex(RRQ)[..12],
            b"\x00\x01file\x00octet\x00blksize\x00",
            b"\x00\x05\x00\x09no such code\x00",
            b"\x00\x04\x00\x01\x00",
            &dns,
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&udp(50618, 69).pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1350);
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|round| {
                let mut b = vec![0, (round % 7) as u8];
                b.extend(rng.bytes(round % 40));
                b
            })
            .collect();
        Fuzz::new(&[udp(50618, 69), udp(3445, 50618)])
            .seeds([RRQ, OACK].map(hex))
            .flow(vec![(true, hex(DATA1)), (false, hex(ACK1))])
            .payloads(random)
            .run(detect);
    }
}
