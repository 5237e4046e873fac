//! The false-positive guard of the UDP-side detectors (RADIUS, SSDP, Syslog, TFTP,
//! WireGuard, IPsec, Kerberos, NetBIOS, OpenVPN): random payloads, and other protocols'
//! packets, must never be claimed, neither alone nor as a three-packet flow, on random ports
//! or on each protocol's own ports.

use super::testkit::*;
use super::{ipsec, kerberos, netbios, openvpn, radius, ssdp, syslog, tftp, wireguard};
use crate::types::{Flow, Verdict};

const DETECTORS: [(&str, Detect); 9] = [
    ("radius", radius::detect),
    ("ssdp", ssdp::detect),
    ("syslog", syslog::detect),
    ("tftp", tftp::detect),
    ("wireguard", wireguard::detect),
    ("ipsec", ipsec::detect),
    ("kerberos", kerberos::detect),
    ("netbios", netbios::detect),
    ("openvpn", openvpn::detect),
];

/// Every detector's own ports (and a few busy ones), both transports.
const PORTS: [u16; 21] = [
    1812, 1813, 1645, 1646, 1900, 514, 601, 6514, 69, 51820, 500, 4500, 88, 464, 137, 138, 139,
    1194, 443, 53, 3478,
];

fn ends_for(rng: &mut Rng, round: usize) -> Ends {
    let l4 = if rng.below(2) == 0 { L4::Udp } else { L4::Tcp };
    let random = 1024 + rng.below(64000) as u16;
    if round.is_multiple_of(2) {
        ends(l4, random, 1024 + rng.below(64000) as u16)
    } else {
        let own = PORTS[rng.below(PORTS.len())];
        if rng.below(2) == 0 {
            ends(l4, random, own)
        } else {
            ends(l4, own, own)
        }
    }
}

fn never_is(name: &str, detect: Detect, e: Ends, conv: &[(bool, Vec<u8>)]) {
    let mut f = Flow::default();
    for (i, (c, p)) in conv.iter().enumerate() {
        let v = detect(&e.pkt(p, *c, i as u8), &mut f);
        assert!(
            !matches!(v, Verdict::Is { .. }),
            "{name} claimed packet {i} of {conv:02x?} on {e:?}"
        );
        if v == Verdict::No {
            break;
        }
    }
}

#[test]
fn random_payloads_are_never_claimed() {
    let mut rng = Rng::new(0x0bad_cafe);
    for round in 0..20_000 {
        let e = ends_for(&mut rng, round);
        let n = rng.below(300);
        let one = rng.bytes(n);
        let three: Conv = (0..3)
            .map(|i| {
                let n = rng.below(300);
                (i % 2 == 0, rng.bytes(n))
            })
            .collect();
        for (name, detect) in DETECTORS {
            never_is(name, detect, e, &[(true, one.clone())]);
            never_is(name, detect, e, &[(false, one.clone())]);
            never_is(name, detect, e, &three);
        }
    }
}

/// Other protocols' packets, on every detector's ports.
#[test]
fn other_protocols_are_never_claimed() {
    let others: Vec<Vec<u8>> = vec![
        // DNS query and answer header (dns.pcap frame 4).
        hex("784301000001000000000000026537087768617473617070036e65740000010001"),
        // STUN binding request (RFC 5389) with a transaction id.
        hex("000100002112a442b7e7a701bc34d686fa87dfae"),
        // RTP, payload type 0, and RTCP sender report starts.
        hex("80004a2b0001e24011223344d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5d5"),
        hex("80c80006112233440000000000000000000000000000000000000000"),
        // QUIC v1 Initial header (RFC 9001 A.2), first bytes.
        hex("c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f3991c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df621230c83711b39343fa028cab7"),
        // TLS ClientHello record start.
        hex("16030100c8010000c40303a1b2c3d4e5f60718293a4b5c6d7e8f9000112233445566778899aabbccddeeff00"),
        b"INVITE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec(),
        // NTP v4 client request.
        hex("230207eb00000450000003ab83bc03dfd94f51c33165b860d944575530336fd0d944575531b4e978d94f51f42d26e2f4"),
        // SNMP v2c get-request.
        hex("302602010104067075626c6963a019020411223344020100020100300b300906052b060102010500"),
        // DHCP discover start.
        hex("0101060011223344000000000000000000000000000000000000000000112233445566"),
        vec![],
        vec![0],
        vec![0xff, 0xff],
    ];
    for port in PORTS {
        for l4 in [L4::Udp, L4::Tcp] {
            for e in [ends(l4, 40000, port), ends(l4, port, port)] {
                for (name, detect) in DETECTORS {
                    for p in &others {
                        never_is(name, detect, e, &[(true, p.clone())]);
                        let conv: Conv = (0..3).map(|i| (i % 2 == 0, p.clone())).collect();
                        never_is(name, detect, e, &conv);
                    }
                }
            }
        }
    }
}
