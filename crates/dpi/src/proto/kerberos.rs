//! Kerberos V5 (RFC 4120) over UDP and TCP (TCP: a 4-byte record length first, RFC 4120
//! 7.2.2), and the password-change protocol on port 464 (RFC 3244: message length, version,
//! AP-REQ/AP-REP length, then the messages).
//!
//! Why: Kerberos carries Windows domain logins; nDPI names kpasswd Kerberos too. A message is
//! a DER APPLICATION tag (AS-REQ 10, AS-REP 11, TGS-REQ 12, TGS-REP 13, AP-REQ 14, AP-REP
//! 15, KRB-ERROR 30) whose length matches the datagram (or the TCP record), holding a
//! SEQUENCE whose first two fields are pvno = 5 and msg-type = the tag number (fields [1]
//! and [2] in KDC-REQ, [0] and [1] elsewhere). That is strict enough on any port. On TCP a
//! record may go on in later segments: only its header and the first fields must be there,
//! and a capture that starts inside a record is given a few more segments on 88 and 464.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

const PORTS: [u16; 2] = [88, 464];

/// Largest TCP record accepted (the reference KDC's default limit is 64 KiB; tickets with
/// large authorization data go higher).
const MAX_RECORD: usize = 1 << 20;

/// A DER length at `b[at..]`: (value, bytes it took).
fn der_len(b: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *b.get(at)?;
    if first < 0x80 {
        return Some((usize::from(first), 1));
    }
    let n = usize::from(first & 0x7f);
    if !(1..=4).contains(&n) {
        return None;
    }
    let v = b
        .get(at + 1..at + 1 + n)?
        .iter()
        .fold(0usize, |v, &d| (v << 8) | usize::from(d));
    Some((v, 1 + n))
}

/// The size of the Kerberos message at the start of `b` (which may be cut after its first
/// fields) when its header is valid.
fn message(b: &[u8]) -> Option<usize> {
    let tag = *b.first()?;
    let msg_type = tag & 0x1f;
    if !matches!(tag, 0x6a..=0x6f | 0x7e) {
        return None;
    }
    let (len, hl) = der_len(b, 1)?;
    let seq = 1 + hl;
    if *b.get(seq)? != 0x30 {
        return None;
    }
    let (slen, shl) = der_len(b, seq + 1)?;
    if 1 + shl + slen != len {
        return None;
    }
    let fields = seq + 1 + shl;
    // KDC-REQ numbers its fields from 1 (pvno [1], msg-type [2]), the others from 0.
    let first = if matches!(msg_type, 10 | 12) {
        0xa1
    } else {
        0xa0
    };
    let want = [first, 3, 2, 1, 5, first + 1, 3, 2, 1, msg_type];
    (b.get(fields..fields + want.len())? == want).then_some(1 + hl + len)
}

fn be16(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 2)?;
    Some(usize::from(u16::from_be_bytes([s[0], s[1]])))
}

/// A kpasswd message (RFC 3244) of `total` bytes at the start of `b`.
fn kpasswd(b: &[u8], total: usize) -> bool {
    let (Some(len), Some(version), Some(ap_len)) = (be16(b, 0), be16(b, 2), be16(b, 4)) else {
        return false;
    };
    // Version 1, or 0xff80 for Microsoft's set-password.
    if len != total || !matches!(version, 1 | 0xff80) {
        return false;
    }
    let Some(m) = b.get(6..) else {
        return false;
    };
    match (ap_len, message(m)) {
        // An AP-REQ or AP-REP, then KRB-PRIV; or no AP-REP and a KRB-ERROR.
        (0, Some(n)) => m[0] == 0x7e && 6 + n == total,
        (a, Some(n)) => matches!(m[0], 0x6e | 0x6f) && n == a && 6 + n < total,
        _ => false,
    }
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    let b = p.payload;
    let kpasswd_port = p.has_port(464);
    let ok = match p.l4 {
        L4::Udp => message(b) == Some(b.len()) || (kpasswd_port && kpasswd(b, b.len())),
        L4::Tcp => {
            let record = b
                .get(..4)
                .map(|r| u32::from_be_bytes([r[0], r[1], r[2], r[3]]) as usize);
            match record {
                Some(r) if (1..=MAX_RECORD).contains(&r) && b.len() <= 4 + r => {
                    message(&b[4..]) == Some(r) || (kpasswd_port && kpasswd(&b[4..], r))
                }
                _ => false,
            }
        }
    };
    if ok {
        Proto::KERBEROS.is(true)
    } else if p.l4 == L4::Tcp && PORTS.iter().any(|&q| p.has_port(q)) && p.index < 3 {
        Verdict::Unsure
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    // kerberos.pcap frame 1: AS-REQ over TCP (49157 -> 88), first 67 of 239 bytes; the
    // record is 0xeb bytes, so the test pads it to its length.
    const AS_REQ: &str = "000000eb6a81e83081e5a103020105a20302010aa31530133011a10402020080a20904073005a0030101ffa481c13081bea00703050040810010a1183016a003020101";
    // kerberos.pcap frame 2: KRB-ERROR (PREAUTH_REQUIRED) answer, first 67 of 278 bytes.
    const ERROR: &str = "000001127e82010e3082010aa003020105a10302011ea411180f32303139303230353033333834385aa5050203063520a603020119a9101b0e68617070796372616674";
    // kerberos.pcap frame 8: TGS-REP, first 60 of 1444 bytes (a segment of a longer record).
    const TGS_REP: &str = "000005a06d82059c30820598a003020105a10302010da3101b0e484150505943524146542e4f5247a4183016a003020101a10f300d1b0b4a4f484e53";

    fn padded(h: &str) -> Vec<u8> {
        let mut b = hex(h);
        let r = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        b.resize(4 + r, 0);
        b
    }

    #[test]
    fn kerberos_over_tcp() {
        let e = tcp(49157, 88);
        for b in [padded(AS_REQ), padded(ERROR), hex(AS_REQ), hex(TGS_REP)] {
            let mut f = Flow::default();
            assert_eq!(
                detect(&e.pkt(&b, true, 0), &mut f),
                Proto::KERBEROS.is(true)
            );
        }
        // Any port, strict structure.
        let mut f = Flow::default();
        assert_eq!(
            detect(&tcp(1, 2).pkt(&padded(AS_REQ), true, 0), &mut f),
            Proto::KERBEROS.is(true)
        );
    }

    #[test]
    fn kerberos_over_udp() {
        // The same messages without the record length.
        for h in [AS_REQ, ERROR] {
            let b = padded(h)[4..].to_vec();
            let mut f = Flow::default();
            assert_eq!(
                detect(&udp(50000, 88).pkt(&b, true, 0), &mut f),
                Proto::KERBEROS.is(true)
            );
            // Cut: the length no longer matches the datagram.
            assert_eq!(
                detect(&udp(50000, 88).pkt(&b[..b.len() - 1], true, 0), &mut f),
                Verdict::No
            );
        }
    }

    #[test]
    fn kpasswd_messages() {
        // RFC 3244 request: length, version 1, AP-REQ length, a minimal AP-REQ header, then
        // a KRB-PRIV (here only its tag and padding).
        let ap_req = hex("6e0e300ca003020105a10302010e0000");
        let mut m = vec![0, 0, 0, 1, 0, ap_req.len() as u8];
        m.extend(&ap_req);
        m.extend(hex("7504300200000000"));
        let n = m.len() as u8;
        m[1] = n;
        let mut f = Flow::default();
        assert_eq!(
            detect(&udp(50000, 464).pkt(&m, true, 0), &mut f),
            Proto::KERBEROS.is(true)
        );
        // Not on port 88.
        assert_eq!(
            detect(&udp(50000, 88).pkt(&m, true, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn not_kerberos() {
        let b = padded(AS_REQ);
        let mut pvno4 = b.clone();
        pvno4[4 + 3 + 3 + 4] = 4;
        let mut wrong_type = b.clone();
        wrong_type[4 + 3 + 3 + 9] = 0x0c; // says TGS-REQ inside an AS-REQ
        let mut seq_len = b.clone();
        seq_len[4 + 5] ^= 1;
        let mut record = b.clone();
        record[3] -= 1;
        let ldap = hex("0000000c300c020101600702010304008000");
        for x in [&pvno4, &wrong_type, &seq_len, &record, &ldap] {
            let mut f = Flow::default();
            assert_eq!(detect(&tcp(1, 2).pkt(x, true, 0), &mut f), Verdict::No);
        }
        // On 88 a segment inside a record waits a few packets.
        let mut f = Flow::default();
        let mid = hex("5f986b8b767fa298dee342b9de4c032a8dbf0937");
        assert_eq!(
            detect(&tcp(1, 88).pkt(&mid, true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(detect(&tcp(1, 88).pkt(&mid, true, 3), &mut f), Verdict::No);
        assert_eq!(detect(&udp(1, 88).pkt(&mid, true, 0), &mut f), Verdict::No);
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x4120);
        let random: Vec<Vec<u8>> = (0..2000).map(|round| rng.bytes(round % 100)).collect();
        Fuzz::new(&[tcp(49157, 88), udp(50000, 88), udp(50000, 464), tcp(1, 464)])
            .seeds([padded(AS_REQ), padded(ERROR)])
            .seeds([AS_REQ, TGS_REP].map(hex))
            .cut_step(5)
            .payloads(random)
            .run(detect);
    }
}
