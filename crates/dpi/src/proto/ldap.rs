//! LDAP over TCP (RFC 4511; 389, and 3268 for the Active Directory global catalog) and CLDAP
//! over UDP 389 (RFC 1798, Active Directory's "LDAP ping").
//!
//! Why: directory traffic (binds, searches) shows who authenticates against what, and cleartext
//! binds leak passwords.
//!
//! Rule: the payload starts with an LDAPMessage, `SEQUENCE { messageID INTEGER, protocolOp,
//! controls [0] OPTIONAL }` in BER with definite lengths (RFC 4511 section 5.1 forbids the
//! indefinite form): `0x30`, a length, the messageID (`0x02`, 1..=4 bytes, 0..2^31-1), then a
//! protocolOp tag of RFC 4511 (`0x60` bindRequest … `0x79` intermediateResponse) whose length
//! ends inside the message, followed by nothing or by controls (`0xa0`). The first field of the
//! operation is checked where the packet holds it: a bindRequest's version is 2 or 3 followed
//! by the name (OCTET STRING), a result carries an ENUMERATED resultCode then matchedDN, a
//! searchRequest's base DN is followed by scope 0..=2 and derefAliases 0..=3, an unbindRequest
//! is empty. Messages that follow in the same packet must pass the same checks.
//!
//! On the LDAP TCP ports a message may continue in later segments (its header must still be
//! consistent); elsewhere over TCP, and always over UDP (CLDAP, port 389 only), the packet must
//! hold whole messages. SNMP (`0x30`, version INTEGER, then an OCTET STRING community) and
//! Kerberos (application tags, or a 4-byte length over TCP) fail at the protocolOp tag.

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

/// Messages checked per packet at most.
const MAX_MESSAGES: usize = 8;
/// Packets a flow on an LDAP port may stay undecided (a capture started inside a message).
const MAX_UNSURE: u8 = 4;

fn is_ldap_port(port: u16) -> bool {
    matches!(port, 389 | 3268)
}

/// A BER tag-length header at the start of `b`: (tag, content length, header length).
/// Definite lengths only, at most 4 length bytes.
fn header(b: &[u8]) -> Option<(u8, usize, usize)> {
    let (&tag, rest) = b.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    if l0 < 0x80 {
        return Some((tag, usize::from(l0), 2));
    }
    let n = usize::from(l0 & 0x7f);
    if !(1..=4).contains(&n) {
        return None; // indefinite (0x80) or too long
    }
    let bytes = rest.get(..n)?;
    let len = bytes.iter().fold(0usize, |a, &x| (a << 8) | usize::from(x));
    Some((tag, len, 2 + n))
}

/// An INTEGER's content: 1..=4 bytes, minimally encoded, not negative.
fn is_message_id(v: &[u8]) -> bool {
    match v {
        [first, ..] if *first >= 0x80 => false,
        [0, second, ..] if *second < 0x80 => false,
        _ => (1..=4).contains(&v.len()),
    }
}

/// The protocolOp tags of RFC 4511 section 4.
fn is_op(tag: u8) -> bool {
    matches!(
        tag,
        0x60 | 0x61 // bind
            | 0x42 // unbind
            | 0x63 | 0x64 | 0x65 | 0x73 // search request, entry, done, reference
            | 0x66 | 0x67 // modify
            | 0x68 | 0x69 // add
            | 0x4a | 0x6b // del
            | 0x6c | 0x6d // modify DN
            | 0x6e | 0x6f // compare
            | 0x50 // abandon
            | 0x77 | 0x78 | 0x79 // extended, intermediate
    )
}

/// Checks the start of an operation's content (`c`, possibly cut by the packet's end): false
/// when the bytes there cannot be that operation.
fn op_ok(tag: u8, len: usize, c: &[u8]) -> bool {
    // The next element's tag and, when present, its header.
    let elem = |b: &[u8], want: u8| -> Option<Option<(usize, usize)>> {
        match header(b) {
            Some((t, l, h)) => (t == want).then_some(Some((l, h))),
            None if b.is_empty() || b[0] == want => Some(None), // cut
            None => None,
        }
    };
    // ENUMERATED of one or two bytes holding a value in `range`.
    let small_enum = |b: &[u8], max: u8| -> Option<usize> {
        match b {
            [] | [0x0a] | [0x0a, 0x01] => Some(b.len()),
            [0x0a, 0x01, v, ..] if *v <= max => Some(3),
            _ => None,
        }
    };
    match tag {
        0x42 => len == 0,
        0x50 => (1..=4).contains(&len),
        // bindRequest: version INTEGER (2 or 3), name LDAPDN, authentication choice.
        0x60 => match c {
            [] | [0x02] | [0x02, 0x01] => true,
            [0x02, 0x01, 2 | 3, rest @ ..] => elem(rest, 0x04).is_some(),
            _ => false,
        },
        // LDAPResult: resultCode ENUMERATED, matchedDN, diagnosticMessage.
        0x61 | 0x65 | 0x67 | 0x69 | 0x6b | 0x6d | 0x6f | 0x78 => {
            let Some((l, h)) = (match header(c) {
                Some((0x0a, l, h)) => Some((l, h)),
                None if c.is_empty() || c[0] == 0x0a => return true,
                _ => None,
            }) else {
                return false;
            };
            (1..=3).contains(&l) && c.get(h + l..).is_none_or(|r| elem(r, 0x04).is_some())
        }
        // searchRequest: baseObject, scope, derefAliases, sizeLimit, …
        0x63 => match elem(c, 0x04) {
            Some(Some((l, h))) => match c.get(h + l..) {
                None => true,
                Some(r) => {
                    small_enum(r, 2).is_some_and(|n| n < 3 || small_enum(&r[3..], 3).is_some())
                }
            },
            Some(None) => true,
            None => false,
        },
        // searchResEntry, modify, add, modDN, compare: an LDAPDN first.
        0x64 | 0x66 | 0x68 | 0x6c | 0x6e => elem(c, 0x04).is_some(),
        // delRequest: the DN itself (text).
        0x4a => c.iter().all(|&b| b >= 0x20),
        // searchResRef: SEQUENCE OF URI.
        0x73 => elem(c, 0x04).is_some() && len > 0,
        // extendedRequest: requestName [0].
        0x77 => elem(c, 0x80).is_some(),
        // intermediateResponse: optional [0] name, optional [1] value.
        0x79 => len == 0 || matches!(c.first(), None | Some(0x80 | 0x81)),
        _ => false,
    }
}

/// Checks one LDAPMessage at the start of `b`. `Some(n)`: the message is well formed and is
/// `n` bytes long (it may end beyond `b`); `None`: not LDAP.
fn message(b: &[u8]) -> Option<usize> {
    let (tag, len, h) = header(b)?;
    if tag != 0x30 {
        return None;
    }
    let total = h.checked_add(len)?;
    let body = b.get(h..).unwrap_or(&[]);
    // messageID
    let (t, idl, ih) = header(body)?;
    if t != 0x02 || ih + idl > len {
        return None;
    }
    if !is_message_id(body.get(ih..ih + idl)?) {
        return None;
    }
    let rest = &body[ih + idl..];
    let (op, oplen, oh) = header(rest)?;
    let op_end = (ih + idl).checked_add(oh)?.checked_add(oplen)?;
    if !is_op(op) || op_end > len {
        return None;
    }
    let content = rest.get(oh..).unwrap_or(&[]);
    let content = content.get(..oplen).unwrap_or(content);
    if !op_ok(op, oplen, content) {
        return None;
    }
    if op_end < len {
        // controls [0] SEQUENCE OF Control, filling the rest of the message.
        if let Some(c) = body.get(op_end..) {
            match header(c) {
                Some((0xa0, cl, ch)) if op_end + ch + cl == len => {}
                None if c.first().is_none_or(|&x| x == 0xa0) => {}
                _ => return None,
            }
        }
    }
    Some(total)
}

pub fn detect(p: &Pkt<'_>, _f: &mut Flow) -> Verdict {
    let on_port = is_ldap_port(p.server_port) || is_ldap_port(p.client_port);
    let partial_ok = match p.l4 {
        L4::Udp if !p.has_port(389) => return Verdict::No,
        L4::Udp => false,
        L4::Tcp => on_port,
    };
    let undecided = || {
        if p.l4 == L4::Tcp && on_port && p.index + 1 < MAX_UNSURE {
            Verdict::Unsure
        } else {
            Verdict::No
        }
    };
    let mut b = p.payload;
    for i in 0..MAX_MESSAGES {
        let Some(n) = message(b) else {
            // A later message cut inside its header: the first ones decided.
            if i > 0 && partial_ok && b.len() < 8 && b.first() == Some(&0x30) {
                break;
            }
            return if i == 0 { undecided() } else { Verdict::No };
        };
        if n > b.len() {
            if !partial_ok {
                return Verdict::No;
            }
            break;
        }
        b = &b[n..];
        if b.is_empty() {
            break;
        }
    }
    Proto::LDAP.is(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const LDAP: Ends = tcp(40000, 389);
    const ODD: Ends = tcp(40000, 10389);
    const CLDAP: Ends = udp(40000, 389);

    // ldapsearch (OpenLDAP 2.5) against a stub server on 127.0.0.1:10389, recorded with
    // tcpdump: bindRequest(1) v3 "cn=admin,dc=example,dc=org" simple "secret", the stub's
    // bindResponse(1) success, searchRequest(2) "dc=example,dc=org" wholeSubtree
    // (objectClass=*), the stub's searchResEntry(2) + searchResDone(2), unbindRequest(3).
    const BIND: &str = "302c0201016027020103041a636e3d61646d696e2c64633d6578616d706c652c64633d6f72678006736563726574";
    const BIND_OK: &str = "300c02010161070a010004000400";
    const SEARCH: &str = "30360201026331041164633d6578616d706c652c64633d6f72670a01020a0100020100020100010100870b6f626a656374436c6173733000";
    const ENTRY_DONE: &str = "30350201026430041164633d6578616d706c652c64633d6f7267301b3019040b6f626a656374436c617373310a040864634f626a656374300c02010265070a010004000400";
    const DONE: &str = "300c02010265070a010004000400";
    const UNBIND: &str = "30050201034200";

    fn bind() -> Vec<u8> {
        hex(BIND)
    }

    #[test]
    fn conversation() {
        let c: Conv = vec![
            (true, bind()),
            (false, hex(BIND_OK)),
            (true, hex(SEARCH)),
            (false, hex(ENTRY_DONE)),
            (false, hex(DONE)),
            (true, hex(UNBIND)),
        ];
        for (client, b) in &c {
            for e in [LDAP, ODD] {
                let mut f = Flow::default();
                assert_eq!(
                    detect(&e.pkt(b, *client, 0), &mut f),
                    Proto::LDAP.is(true),
                    "{b:02x?}"
                );
            }
        }
        // Two messages in one segment (entry and done).
        let mut two = hex(BIND_OK);
        two.extend(hex(DONE));
        assert_eq!(
            detect(&LDAP.pkt(&two, false, 1), &mut Flow::default()),
            Proto::LDAP.is(true)
        );
        // CLDAP: the same search over UDP 389.
        assert_eq!(
            detect(&CLDAP.pkt(&hex(SEARCH), true, 0), &mut Flow::default()),
            Proto::LDAP.is(true)
        );
    }

    #[test]
    fn message_spanning_segments() {
        // A searchResEntry of 3000 bytes, first segment cut after 40 bytes: fine on 389 only.
        let mut entry = hex("30820bb802010264820bb1040f636e3d612c64633d6578616d706c65");
        entry.extend(hex("30820b9c"));
        for cut in [entry.len(), 12, 4] {
            let b = &entry[..cut];
            let on_port = detect(&LDAP.pkt(b, false, 0), &mut Flow::default());
            let want = if cut > 11 {
                Proto::LDAP.is(true)
            } else {
                Verdict::Unsure
            };
            assert_eq!(on_port, want, "{cut}");
            let off = detect(&ODD.pkt(b, false, 0), &mut Flow::default());
            assert_eq!(off, Verdict::No, "{cut}");
        }
    }

    #[test]
    fn not_ldap() {
        // snmp.pcap: an SNMPv1 GetRequest ("public") and an SNMPv2c GetResponse.
        let snmp = hex("302902010004067075626c6963a01c0204125d6ea4020100020100300e300c06082b060102010101000500");
        let snmp2 =
            hex("3026020101040670726976617465a2190204000000010201000201003009300706032b0601040100");
        // Kerberos AS-REQ over TCP (4-byte length) and UDP (application 10).
        let krb_tcp = hex("000000a86a81a53081a2a103020105a20302010aa3");
        let krb_udp = hex("6a81a53081a2a103020105a20302010aa3");
        // bindRequest with version 4; unbind with content; indefinite length; negative id.
        let v4 = {
            let mut b = bind();
            b[9] = 4;
            b
        };
        let unbind_bad = hex("3006020103420100");
        let indefinite = hex("308002010142000000");
        let negative = hex("30050201ff4200");
        // Length inconsistent: the op is longer than the message.
        let long_op = hex("300602010342020000");
        // TLS, HTTP, SMB, DNS over TCP.
        let tls = hex("16030100a8010000a403035cef9e29f7");
        let http = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        let smb = hex("00000085ff534d4272000000001853c0");
        let dns = hex("001c784301000001000000000000026537087768617473617070036e65740000010001");
        for b in [
            &snmp,
            &snmp2,
            &krb_tcp,
            &krb_udp,
            &v4,
            &unbind_bad,
            &indefinite,
            &negative,
            &long_op,
            &tls,
            &http,
            &smb,
            &dns,
        ] {
            for e in [ODD, CLDAP, udp(40000, 161)] {
                assert_eq!(
                    detect(&e.pkt(b, true, 0), &mut Flow::default()),
                    Verdict::No,
                    "{e:?} {b:02x?}"
                );
            }
            // On 389 a non-LDAP first packet may be the inside of a message: undecided, then
            // out after a few packets.
            let v = feed(
                detect,
                LDAP,
                &mut Flow::default(),
                &vec![(true, b.clone()); 6],
            );
            assert_eq!(v.last(), Some(&Verdict::No), "{b:02x?}");
            assert!(!v.iter().any(|v| matches!(v, Verdict::Is { .. })));
        }
        // A message followed by garbage.
        let mut tail = hex(BIND_OK);
        tail.extend(b"junk");
        assert_eq!(
            detect(&LDAP.pkt(&tail, false, 1), &mut Flow::default()),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x2468_ace0);
        let random: Vec<Vec<u8>> = (0..1500)
            .map(|n| {
                let mut v = hex("30820bb8020102");
                v.extend(rng.bytes(n % 90));
                v
            })
            .collect();
        Fuzz::new(&[LDAP, ODD, CLDAP])
            .flow(vec![
                (true, bind()),
                (false, hex(BIND_OK)),
                (true, hex(SEARCH)),
                (false, hex(ENTRY_DONE)),
                (true, hex(UNBIND)),
            ])
            .payloads(random)
            .run(detect);
    }
}
