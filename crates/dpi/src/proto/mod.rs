//! The built-in detectors, one module per protocol, and the order they are tried in.
//!
//! Every detector has the signature `fn(&Pkt, &mut Flow) -> Verdict` and the contract in the
//! crate docs: no panic on any bytes, `No` as soon as the payload cannot be its protocol (so
//! it costs nothing on later packets), metadata into `f.meta` as capped wire strings.
//!
//! Detectors see only [`crate::types`] (the packet, the verdict, the [`Flow`]), [`crate::meta`]
//! and [`crate::ids`]; never the engine. State kept between packets goes into a typed field of
//! [`Scratch`](crate::types::Scratch) that names its one user (`text` for mail.rs and ftp.rs,
//! `rtp`, `utp`, `mqtt`, `dtls`, `http_tunnel_open`, `irc`, `h2`, the TLS and QUIC buffers,
//! `tftp`, `wireguard`, `esp`, `openvpn`).

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

pub mod bittorrent;
pub mod dhcp;
pub mod dns;
pub mod dnscrypt;
pub mod dtls;
pub mod ftp;
pub mod http;
pub mod http2;
pub mod ipsec;
pub mod irc;
pub mod kerberos;
pub mod ldap;
pub mod mail;
pub mod mqtt;
pub mod netbios;
pub mod ntp;
pub mod openvpn;
pub mod quic;
pub mod radius;
pub mod rdp;
pub mod rtp;
pub mod sip;
pub mod smb;
pub mod snmp;
pub mod ssdp;
pub mod ssh;
pub mod stun;
pub mod syslog;
pub mod tftp;
pub mod tls;
pub mod tor;
pub mod wireguard;

/// One detector and the transports it applies to.
pub struct Detector {
    pub name: &'static str,
    pub tcp: bool,
    pub udp: bool,
    pub run: fn(&Pkt<'_>, &mut Flow) -> Verdict,
}

const fn tcp(name: &'static str, run: fn(&Pkt<'_>, &mut Flow) -> Verdict) -> Detector {
    Detector {
        name,
        tcp: true,
        udp: false,
        run,
    }
}

const fn udp(name: &'static str, run: fn(&Pkt<'_>, &mut Flow) -> Verdict) -> Detector {
    Detector {
        name,
        tcp: false,
        udp: true,
        run,
    }
}

const fn both(name: &'static str, run: fn(&Pkt<'_>, &mut Flow) -> Verdict) -> Detector {
    Detector {
        name,
        tcp: true,
        udp: true,
        run,
    }
}

/// Tried in this order: the protocols that carry most traffic first, then the rest; a more
/// specific detector before a looser one that could claim the same bytes (STUN before RTP).
pub const DETECTORS: &[Detector] = &[
    tcp("tls", tls::detect),
    tcp("http", http::detect),
    udp("dns", dns::detect),
    udp("quic", quic::detect),
    udp("dtls", dtls::detect),
    tcp("ssh", ssh::detect),
    tcp("smtp", mail::detect_smtp),
    tcp("pop3", mail::detect_pop3),
    tcp("imap", mail::detect_imap),
    tcp("ftp", ftp::detect),
    udp("dhcp", dhcp::detect),
    udp("ntp", ntp::detect),
    udp("snmp", snmp::detect),
    udp("radius", radius::detect),
    udp("ssdp", ssdp::detect),
    both("syslog", syslog::detect),
    udp("tftp", tftp::detect),
    udp("wireguard", wireguard::detect),
    udp("ipsec", ipsec::detect),
    both("kerberos", kerberos::detect),
    both("netbios", netbios::detect),
    both("openvpn", openvpn::detect),
    both("stun", stun::detect),
    both("sip", sip::detect),
    tcp("rdp", rdp::detect),
    tcp("smb", smb::detect),
    tcp("http2", http2::detect),
    both("ldap", ldap::detect),
    tcp("mqtt", mqtt::detect),
    tcp("irc", irc::detect),
    both("dnscrypt", dnscrypt::detect),
    both("bittorrent", bittorrent::detect),
    udp("rtp", rtp::detect),
];

/// The protocol usually found on these ports, for flows no detector recognised. The table
/// follows nDPI's default ports (so a scan's SYN-only flows get the guesses nDPI makes):
/// e.g. IRC on 194 only, not on 6667, where bots run anything; 8080 and 3128 are proxies.
pub fn guess_by_port(l4: L4, client_port: u16, server_port: u16) -> Option<Proto> {
    let by_port = match l4 {
        L4::Tcp => tcp_port,
        L4::Udp => udp_port,
    };
    by_port(server_port).or_else(|| by_port(client_port))
}

/// [`guess_by_port`]'s TCP table, as a `match`: the compiler picks the search, and a port
/// listed twice does not compile.
fn tcp_port(port: u16) -> Option<Proto> {
    Some(match port {
        443 => Proto::TLS,
        80 => Proto::HTTP,
        8080 | 3128 => Proto::HTTP_PROXY,
        22 => Proto::SSH,
        25 => Proto::SMTP,
        587 | 465 => Proto::SMTPS,
        110 => Proto::POP3,
        995 => Proto::POPS,
        143 => Proto::IMAP,
        993 => Proto::IMAPS,
        21 => Proto::FTP_CONTROL,
        3389 => Proto::RDP,
        445 => Proto::SMBV23,
        139 => Proto::NETBIOS,
        1883 => Proto::MQTT,
        853 => Proto::DOH_DOT,
        3306 => Proto::MYSQL,
        5432 => Proto::POSTGRES,
        179 => Proto::BGP,
        389 => Proto::LDAP,
        1812 | 1813 => Proto::RADIUS,
        5061 | 5060 => Proto::SIP,
        514 => Proto::SYSLOG,
        194 => Proto::IRC,
        88 => Proto::KERBEROS,
        23 => Proto::TELNET,
        5900 => Proto::VNC,
        502 => Proto::MODBUS,
        53 => Proto::DNS,
        _ => return None,
    })
}

/// [`guess_by_port`]'s UDP table.
fn udp_port(port: u16) -> Option<Proto> {
    Some(match port {
        53 => Proto::DNS,
        5353 => Proto::MDNS,
        5355 => Proto::LLMNR,
        123 => Proto::NTP,
        161 | 162 => Proto::SNMP,
        67 | 68 => Proto::DHCP,
        547 | 546 => Proto::DHCPV6,
        3478 => Proto::STUN,
        5060 => Proto::SIP,
        443 => Proto::QUIC,
        137 | 138 => Proto::NETBIOS,
        514 => Proto::SYSLOG,
        69 => Proto::TFTP,
        500 | 4500 => Proto::IPSEC,
        1194 => Proto::OPENVPN,
        51820 => Proto::WIREGUARD,
        1900 => Proto::SSDP,
        88 => Proto::KERBEROS,
        389 => Proto::LDAP,
        194 => Proto::IRC,
        3544 => Proto::TEREDO,
        2055 | 9995 => Proto::NETFLOW,
        6343 => Proto::SFLOW,
        1812 | 1813 | 1645 | 1646 => Proto::RADIUS,
        853 => Proto::DOH_DOT,
        _ => return None,
    })
}

#[cfg(test)]
mod guard;
#[cfg(test)]
pub(crate) mod testkit;

/// The false-positive guard of the detectors added for IRC, LDAP, SMB, HTTP/2 and Tor: random
/// payloads, alone or as three-packet flows, on random ports and on each protocol's own ports,
/// are never claimed.
#[cfg(test)]
mod false_positives {
    use super::testkit::{ends, Ends, Rng, L4};
    use super::*;

    const ROUNDS: usize = 20_000;

    /// (name, detector, its own ports, transports).
    fn detectors() -> Vec<(&'static str, testkit::Detect, &'static [u16], &'static [L4])> {
        vec![
            ("irc", irc::detect, &[6667, 6660, 194], &[L4::Tcp]),
            ("ldap", ldap::detect, &[389, 3268], &[L4::Tcp, L4::Udp]),
            ("smb", smb::detect, &[445, 139], &[L4::Tcp]),
            ("http2", http2::detect, &[80, 8080, 50051], &[L4::Tcp]),
        ]
    }

    /// Feeds `payloads` as one flow (stops at `No` or a final `Is`); true when claimed.
    fn claims(detect: testkit::Detect, e: Ends, payloads: &[Vec<u8>], rng: &mut Rng) -> bool {
        let mut f = Flow::default();
        for (i, p) in payloads.iter().enumerate() {
            let from_client = rng.below(2) == 0;
            match detect(&e.pkt(p, from_client, i as u8), &mut f) {
                Verdict::Is { .. } => return true,
                Verdict::No => return false,
                Verdict::Unsure => {}
            }
        }
        false
    }

    fn ends_for(rng: &mut Rng, ports: &[u16], l4s: &[L4], round: usize) -> Ends {
        let l4 = l4s[rng.below(l4s.len())];
        let random = 1024 + rng.below(64000) as u16;
        // Every other round on one of the protocol's ports, on either side.
        let port = if round.is_multiple_of(2) {
            ports[rng.below(ports.len())]
        } else {
            1 + rng.below(65535) as u16
        };
        if rng.below(2) == 0 {
            ends(l4, random, port)
        } else {
            ends(l4, port, random)
        }
    }

    #[test]
    fn random_payloads_are_never_claimed() {
        let mut rng = Rng::new(0x5eed_f00d);
        for (name, detect, ports, l4s) in detectors() {
            for round in 0..ROUNDS {
                let e = ends_for(&mut rng, ports, l4s, round);
                let n = 1 + 2 * (round % 2); // one packet, or three
                let payloads: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let len = rng.below(300);
                        rng.bytes(len)
                    })
                    .collect();
                assert!(
                    !claims(detect, e, &payloads, &mut rng),
                    "{name} claimed {e:?} {payloads:02x?}"
                );
            }
        }
    }

    #[test]
    fn random_text_lines_are_not_irc() {
        let mut rng = Rng::new(0x1ead_beef);
        for round in 0..ROUNDS {
            let e = ends_for(&mut rng, &[6667, 6665], &[L4::Tcp], round);
            let n = 1 + 2 * (round % 2);
            let payloads: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let mut p = Vec::new();
                    for _ in 0..1 + rng.below(4) {
                        let len = rng.below(80);
                        p.extend((0..len).map(|_| 0x20 + rng.below(95) as u8));
                        p.extend_from_slice(if rng.below(2) == 0 { b"\r\n" } else { b"\n" });
                    }
                    p
                })
                .collect();
            assert!(
                !claims(irc::detect, e, &payloads, &mut rng),
                "irc claimed {e:?} {payloads:?}"
            );
            // Random words from IRC's own vocabulary in random order are not enough either,
            // off the IRC ports.
            let words: [&[u8]; 8] = [
                b"NICK", b"USER", b"PASS", b"JOIN", b"PRIVMSG", b"x", b"#c", b":y",
            ];
            let mut p = Vec::new();
            for _ in 0..1 + rng.below(4) {
                p.extend_from_slice(words[rng.below(words.len())]);
                if rng.below(3) == 0 {
                    p.push(b' ');
                    p.extend_from_slice(words[rng.below(words.len())]);
                }
                p.extend_from_slice(b"\r\n");
            }
            let odd = ends(L4::Tcp, 40000, 4000 + rng.below(1000) as u16);
            assert!(!claims(irc::detect, odd, &[p.clone()], &mut rng), "{p:?}");
        }
    }

    #[test]
    fn random_tls_names_are_not_tor() {
        // Random lower-case names of the right shape but dictionary-like (no digit): not Tor.
        let mut rng = Rng::new(0x70f0_70f0);
        for _ in 0..ROUNDS {
            let len = 8 + rng.below(18);
            let name: String = (0..len)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect();
            assert!(!tor::is_tor_sni(&format!("www.{name}.com")), "{name}");
        }
    }
}

/// The new detectors inside the engine, with every other detector before and after them: each
/// recorded conversation gets its label, and TLS offering ALPN `h2` stays TLS.
#[cfg(test)]
mod in_the_engine {
    use super::testkit::{hex, packets, tcp, Conv, Ends};
    use crate::{Dpi, DpiConfig, FlowDpi, Proto};

    fn label(e: Ends, c: &Conv) -> FlowDpi {
        let dpi = Dpi::new(DpiConfig::default()).unwrap();
        let mut f = FlowDpi::default();
        for (from_client, b) in c {
            if dpi.inspect(&mut f, &e.pkt(b, *from_client, 0)) {
                break;
            }
        }
        f
    }

    #[test]
    fn recorded_conversations() {
        let irc = packets(include_str!("testdata/irc_ngircd.txt"));
        let f = label(tcp(45000, 16667), &irc);
        assert_eq!(f.l7.proto, Proto::IRC);
        assert_eq!(f.meta.banner.as_deref(), Some("NICK alice"));

        let ldap: Conv = vec![(true, hex("302c0201016027020103041a636e3d61646d696e2c64633d6578616d706c652c64633d6f72678006736563726574"))];
        assert_eq!(label(tcp(40000, 389), &ldap).l7.proto, Proto::LDAP);

        let h2c = packets(
            "c 505249202a20485454502f322e300d0a0d0a534d0d0a0d0a00001204000000000000030000006400040200000000020000000000000408000000000001ff0001",
        );
        let f = label(tcp(32850, 80), &h2c);
        assert_eq!(f.l7.proto, Proto::HTTP);
        assert_eq!(
            f.meta.http.as_ref().and_then(|h| h.version.as_deref()),
            Some("h2c")
        );

        let tls = packets(include_str!("testdata/tls_firefox.txt"));
        let f = label(tcp(51000, 8080), &tls);
        assert_eq!(f.l7.proto, Proto::TLS);
        assert!(f.meta.http.is_none());
        assert_eq!(
            f.meta.tls.as_ref().and_then(|t| t.alpn.as_deref()),
            Some("h2,http/1.1")
        );

        let tor = packets(include_str!("testdata/tls_tor.txt"));
        let f = label(tcp(51112, 443), &tor);
        assert_eq!((f.l7.proto, f.l7.app), (Proto::TLS, Proto::TOR));
    }
}

/// The whole detector list as the engine runs it: random payloads, one to four packets in
/// either direction, on random ports and on the ports the port guesses name, are never
/// labelled from the payload (the engine's Dpi confidence), whichever detector would claim them.
#[cfg(test)]
mod whole_engine_guard {
    use super::testkit::{ends, Rng, L4};
    use crate::{Confidence, Dpi, DpiConfig, FlowDpi};

    const ROUNDS: usize = 30_000;
    const BUSY_PORTS: [u16; 24] = [
        443, 80, 53, 22, 25, 110, 143, 21, 123, 161, 3478, 5060, 3389, 445, 139, 1883, 6667, 389,
        88, 514, 69, 500, 4500, 1194,
    ];

    #[test]
    fn random_flows_are_never_labelled_from_the_payload() {
        let dpi = Dpi::new(DpiConfig::default()).unwrap();
        // SONDE_GUARD_SEED and SONDE_GUARD_ROUNDS run it longer by hand (tests/FUZZING.md).
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
        };
        let mut rng = Rng::new(env("SONDE_GUARD_SEED").map_or(0x9e37_79b9, |s| s as u64));
        let rounds = env("SONDE_GUARD_ROUNDS").unwrap_or(ROUNDS);
        for round in 0..rounds {
            let l4 = if rng.below(2) == 0 { L4::Udp } else { L4::Tcp };
            let client = 1024 + rng.below(64000) as u16;
            let server = if round % 2 == 0 {
                BUSY_PORTS[rng.below(BUSY_PORTS.len())]
            } else {
                1 + rng.below(65535) as u16
            };
            let e = ends(l4, client, server);
            let mut f = FlowDpi::default();
            let mut sent = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let len = 1 + rng.below(400);
                let payload = rng.bytes(len);
                let from_client = rng.below(2) == 0;
                let done = dpi.inspect(&mut f, &e.pkt(&payload, from_client, 0));
                sent.push((from_client, payload));
                assert_ne!(
                    f.l7.confidence,
                    Confidence::Dpi,
                    "{:?} labelled {:?} from random payloads {sent:02x?}",
                    f.l7.proto,
                    e
                );
                if done {
                    break;
                }
            }
        }
    }
}
