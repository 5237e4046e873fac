//! NetBIOS over TCP/IP (RFC 1001/1002): the name service (NBNS, UDP 137), the datagram
//! service (UDP 138) and the session service's own packets (TCP 139).
//!
//! Why: Windows LAN chatter (name queries, browser announcements) and the host names it
//! gives away. Every service encodes NetBIOS names the same way (RFC 1001 14.1): a length
//! byte 0x20, 32 letters `A`..=`P` (two per byte of the 16-byte name), optional scope
//! labels, a zero byte; that encoding is what the detector relies on.
//!
//! - NBNS: a DNS-like header (opcode query, registration, release, WACK or refresh; the two
//!   zero flag bits clear; one question or one answer), the encoded name, type NB (0x20) or
//!   NBSTAT (0x21) and class IN.
//! - Datagrams: type 0x10..=0x16 with reserved flag bits clear; direct and broadcast
//!   datagrams need a length field equal to the bytes after the header and two encoded names;
//!   a mailslot carried in SMB (`\xffSMB`) is labelled `NetBIOS.SMBv1`, as nDPI does.
//! - Session service on 139: a session request with two encoded names, and the exact
//!   positive (0x82), negative (0x83), retarget (0x84) and keepalive (0x85) packets. Session
//!   messages (0x00) carrying SMB are smb.rs's; other session messages are not claimed.
//!
//! The name queried, registered or sending (as nDPI shows it: lower case, without padding or
//! suffix) goes to `meta.server_name`.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};

/// Scope labels followed after an encoded name.
const MAX_LABELS: usize = 16;

/// The encoded name at `b[at..]`: the decoded 15 characters and where the name ends.
fn name(b: &[u8], at: usize) -> Option<([u8; 15], usize)> {
    if *b.get(at)? != 0x20 {
        return None;
    }
    let enc = b.get(at + 1..at + 33)?;
    if !enc.iter().all(|c| (b'A'..=b'P').contains(c)) {
        return None;
    }
    let mut out = [0u8; 15];
    for (i, o) in out.iter_mut().enumerate() {
        *o = ((enc[2 * i] - b'A') << 4) | (enc[2 * i + 1] - b'A');
    }
    let mut end = at + 33;
    for _ in 0..MAX_LABELS {
        let l = usize::from(*b.get(end)?);
        if l == 0 {
            return Some((out, end + 1));
        }
        if l > 63
            || !b
                .get(end + 1..end + 1 + l)?
                .iter()
                .all(|c| c.is_ascii_graphic())
        {
            return None;
        }
        end += 1 + l;
    }
    None
}

/// Records the decoded name (lower case, padding cut; the wildcard `*` alone).
fn keep_name(f: &mut Flow, n: &[u8; 15]) {
    if f.meta.server_name.is_some() {
        return;
    }
    let s = if n[0] == b'*' {
        &n[..1]
    } else {
        let end = n
            .iter()
            .rposition(|&c| c != b' ' && c != 0)
            .map_or(0, |i| i + 1);
        &n[..end]
    };
    if !s.is_empty() {
        f.meta.server_name = Some(wire_string(&s.to_ascii_lowercase()));
    }
}

fn be16(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 2)?;
    Some(usize::from(u16::from_be_bytes([s[0], s[1]])))
}

/// NBNS (RFC 1002 4.2): header, one question or answer record name, type and class.
fn name_service(b: &[u8], f: &mut Flow) -> bool {
    let Some(h) = b.get(..12) else {
        return false;
    };
    let opcode = (h[2] >> 3) & 0x0f;
    let counts = [be16(h, 4), be16(h, 6), be16(h, 8), be16(h, 10)].map(Option::unwrap_or_default);
    let records_ok =
        matches!((counts[0], counts[1]), (1, 0) | (0, 1)) && counts[2] == 0 && counts[3] <= 1;
    if !matches!(opcode, 0 | 5..=9) || h[3] & 0x60 != 0 || !records_ok {
        return false;
    }
    let Some((n, end)) = name(b, 12) else {
        return false;
    };
    let (Some(qtype), Some(class)) = (be16(b, end), be16(b, end + 2)) else {
        return false;
    };
    if !matches!(qtype, 0x20 | 0x21) || class != 1 {
        return false;
    }
    keep_name(f, &n);
    true
}

/// The datagram service (RFC 1002 4.4). Returns the SMB flag: the user data is SMB.
fn datagram(b: &[u8], f: &mut Flow) -> Option<bool> {
    let h = b.get(..10)?;
    if !(0x10..=0x16).contains(&h[0]) || h[1] & 0xf0 != 0 {
        return None;
    }
    match h[0] {
        0x10..=0x12 => {
            if be16(b, 10)? != b.len().checked_sub(14)? {
                return None;
            }
            let (src, end) = name(b, 14)?;
            let (_, end) = name(b, end)?;
            keep_name(f, &src);
            Some(b.get(end..end + 4) == Some(b"\xffSMB"))
        }
        0x13 => (b.len() == 11 && (0x82..=0x84).contains(&b[10])).then_some(false),
        _ => {
            let (n, end) = name(b, 10)?;
            keep_name(f, &n);
            (end == b.len()).then_some(false)
        }
    }
}

/// The session service's own packets (RFC 1002 4.3).
fn session(b: &[u8], from_client: bool) -> bool {
    match b {
        [0x81, 0, ..] => {
            let names = name(b, 4).and_then(|(_, end)| name(b, end));
            from_client
                && be16(b, 2) == b.len().checked_sub(4)
                && names.is_some_and(|(_, end)| end == b.len())
        }
        [0x82, 0, 0, 0] | [0x85, 0, 0, 0] => true,
        [0x83, 0, 0, 1, code] => (0x80..=0x83).contains(code),
        [0x84, 0, 0, 6, _, _, _, _, _, _] => !from_client,
        _ => false,
    }
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let b = p.payload;
    match p.l4 {
        L4::Udp if p.has_port(137) && name_service(b, f) => Proto::NETBIOS.is(true),
        L4::Udp if p.has_port(138) => match datagram(b, f) {
            Some(smb) => {
                if smb {
                    f.l7.app = Proto::SMBV1;
                }
                Proto::NETBIOS.is(true)
            }
            None => Verdict::No,
        },
        L4::Tcp if p.has_port(139) && session(b, p.from_client) => Proto::NETBIOS.is(true),
        _ => Verdict::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // netbios.pcap frame 1: name query NB XSTREAM_HY<00> (137 -> 137, broadcast).
    const QUERY: &str = "a7490110000100000000000020464946444645464345464542454e46504549464a4341434143414341434141410000200001";
    // netbios.pcap frame 69: name query response NB GUNNAR, 10.0.4.24.
    const RESPONSE: &str = "8486850000000001000000002045484646454f454f4542464343414341434143414341434143414341434141410000200001000493e0000600000a000418";
    // netbios.pcap frame 55: NBSTAT response to a `*` query (137 -> 57836), first 100 bytes.
    const NBSTAT: &str = "20a88400000000010000000020434b41414141414141414141414141414141414141414141414141414141414100002100010000000000770447554e4e4152202020202020202020000400564947494c414e545f47524f55502000840047554e4e41522020";
    // netbios.pcap frame 20: a host announcement, direct group datagram carrying SMB
    // (138 -> 138).
    const DATAGRAM: &str = "110ec2f40a000509008a00bb000020454f46474643444a43414341434143414341434143414341434143414341434100204647454a4548454a454d4542454f46454650454846434550464646414341424e00ff534d422500000000000000000000000000000000000000000000000000000011000021000000000000000000e803000000000000000021005600030001000000020032005c4d41494c534c4f545c42524f57534500010080fc0a004e5652390000000000000000000000000601071001000f0155aa00";
    // netbios.pcap frame 261: session request (55489 -> 139).
    const SESSION_REQ: &str = "8100004420454a4543454a45474549464244424442464846444441444344444341434143410020464345504644454745494642444144484648464444414441444543414341414100";

    #[test]
    fn name_service() {
        for (h, e, c, n) in [
            (QUERY, udp(137, 137), true, "xstream_hy"),
            (RESPONSE, udp(137, 137), false, "gunnar"),
            (NBSTAT, udp(57836, 137), false, "*"),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&e.pkt(&hex(h), c, 0), &mut f),
                Proto::NETBIOS.is(true)
            );
            assert_eq!(f.meta.server_name.as_deref(), Some(n));
        }
    }

    #[test]
    fn datagrams() {
        let mut f = Flow::default();
        let v = detect(&udp(138, 138).pkt(&hex(DATAGRAM), true, 0), &mut f);
        assert_eq!(v, Proto::NETBIOS.is(true));
        assert_eq!(f.l7.app, Proto::SMBV1);
        assert_eq!(f.meta.server_name.as_deref(), Some("nvr9"));
        // A datagram error (RFC 1002 4.4.3: destination name not present).
        let mut f = Flow::default();
        let err = hex("130100010a000509008a82");
        assert_eq!(
            detect(&udp(138, 138).pkt(&err, false, 0), &mut f),
            Proto::NETBIOS.is(true)
        );
        assert_eq!(f.l7.app, Proto::UNKNOWN);
    }

    #[test]
    fn session_service() {
        let e = tcp(55489, 139);
        for (b, c) in [
            (hex(SESSION_REQ), true),
            (vec![0x82, 0, 0, 0], false),
            (vec![0x83, 0, 0, 1, 0x82], false),
            (vec![0x85, 0, 0, 0], true),
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&e.pkt(&b, c, 0), &mut f), Proto::NETBIOS.is(true));
        }
    }

    #[test]
    fn not_netbios() {
        let q = hex(QUERY);
        let mut lower = q.clone();
        lower[14] = b'a';
        let mut letter_q = q.clone();
        letter_q[14] = b'Q';
        let mut qtype_a = q.clone();
        qtype_a[47] = 1;
        let mut two_questions = q.clone();
        two_questions[5] = 2;
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [
            &q[..40],
            &lower[..],
            &letter_q[..],
            &qtype_a[..],
            &two_questions[..],
            &dns[..],
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&udp(137, 137).pkt(b, true, 0), &mut f), Verdict::No);
        }
        // The query on another port; a datagram with a wrong length; SMB on 139 is smb.rs's.
        let mut f = Flow::default();
        assert_eq!(detect(&udp(1370, 53).pkt(&q, true, 0), &mut f), Verdict::No);
        let mut d = hex(DATAGRAM);
        d[11] += 1;
        assert_eq!(detect(&udp(138, 138).pkt(&d, true, 0), &mut f), Verdict::No);
        let smb = hex("00000085ff534d4272000000001853c00000000000000000000000000000fffe0000400000");
        for b in [
            &smb[..],
            &[0x85, 0, 0, 0, 0][..],
            &[0x83, 0, 0, 1, 0x7f][..],
            &[0][..],
        ] {
            assert_eq!(detect(&tcp(1398, 139).pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1002);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 120)).collect();
        Fuzz::new(&[udp(137, 137), udp(138, 138), tcp(55489, 139)])
            .seeds([QUERY, RESPONSE, NBSTAT, DATAGRAM, SESSION_REQ].map(hex))
            .cut_step(3)
            .payloads(random)
            .run(detect);
    }
}
