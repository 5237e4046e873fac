//! The built-in detectors, one module per protocol, and the order they are tried in.
//!
//! Every detector has the signature `fn(&Pkt, &mut Flow) -> Verdict` and the contract in the
//! crate docs: no panic on any bytes, `No` as soon as the payload cannot be its protocol (so
//! it costs nothing on later packets), metadata into `f.meta` as capped wire strings.
//!
//! Detectors see only [`crate::types`] (the packet, the verdict, the [`Flow`]), [`crate::meta`]
//! and [`crate::ids`]; never the engine. State kept between packets goes into a typed field of
//! [`Scratch`](crate::types::Scratch) that names its one user (`text` for mail.rs and ftp.rs,
//! `rtp`, `utp_connection_id`, `http_tunnel_open`, the TLS and QUIC buffers).

use crate::ids::Proto;
use crate::types::{Flow, Pkt, Verdict, L4};

pub mod bittorrent;
pub mod dhcp;
pub mod dns;
pub mod ftp;
pub mod http;
pub mod http2;
pub mod irc;
pub mod ldap;
pub mod mail;
pub mod mqtt;
pub mod ntp;
pub mod quic;
pub mod rdp;
pub mod rtp;
pub mod sip;
pub mod smb;
pub mod snmp;
pub mod ssh;
pub mod stun;
pub mod tls;
pub mod tor;

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
    tcp("ssh", ssh::detect),
    tcp("smtp", mail::detect_smtp),
    tcp("pop3", mail::detect_pop3),
    tcp("imap", mail::detect_imap),
    tcp("ftp", ftp::detect),
    udp("dhcp", dhcp::detect),
    udp("ntp", ntp::detect),
    udp("snmp", snmp::detect),
    both("stun", stun::detect),
    both("sip", sip::detect),
    tcp("rdp", rdp::detect),
    tcp("smb", smb::detect),
    tcp("http2", http2::detect),
    both("ldap", ldap::detect),
    tcp("mqtt", mqtt::detect),
    tcp("irc", irc::detect),
    both("bittorrent", bittorrent::detect),
    udp("rtp", rtp::detect),
];

/// The protocol usually found on these ports, for flows no detector recognised.
pub fn guess_by_port(l4: L4, client_port: u16, server_port: u16) -> Option<Proto> {
    let table: &[(u16, Proto)] = match l4 {
        L4::Tcp => &[
            (443, Proto::TLS),
            (80, Proto::HTTP),
            (8080, Proto::HTTP),
            (22, Proto::SSH),
            (25, Proto::SMTP),
            (587, Proto::SMTP),
            (465, Proto::SMTPS),
            (110, Proto::POP3),
            (995, Proto::POPS),
            (143, Proto::IMAP),
            (993, Proto::IMAPS),
            (21, Proto::FTP_CONTROL),
            (3389, Proto::RDP),
            (445, Proto::SMBV23),
            (139, Proto::NETBIOS),
            (1883, Proto::MQTT),
            (853, Proto::DOH_DOT),
            (3306, Proto::MYSQL),
            (5432, Proto::POSTGRES),
            (179, Proto::BGP),
            (389, Proto::LDAP),
            (3268, Proto::LDAP),
            (6667, Proto::IRC),
            (88, Proto::KERBEROS),
            (5060, Proto::SIP),
            (23, Proto::TELNET),
            (5900, Proto::VNC),
            (502, Proto::MODBUS),
            (53, Proto::DNS),
        ],
        L4::Udp => &[
            (53, Proto::DNS),
            (5353, Proto::MDNS),
            (5355, Proto::LLMNR),
            (123, Proto::NTP),
            (161, Proto::SNMP),
            (162, Proto::SNMP),
            (67, Proto::DHCP),
            (68, Proto::DHCP),
            (547, Proto::DHCPV6),
            (546, Proto::DHCPV6),
            (3478, Proto::STUN),
            (5060, Proto::SIP),
            (443, Proto::QUIC),
            (137, Proto::NETBIOS),
            (138, Proto::NETBIOS),
            (514, Proto::SYSLOG),
            (69, Proto::TFTP),
            (500, Proto::IPSEC),
            (4500, Proto::IPSEC),
            (1194, Proto::OPENVPN),
            (51820, Proto::WIREGUARD),
            (1900, Proto::SSDP),
            (88, Proto::KERBEROS),
            (389, Proto::LDAP),
            (3544, Proto::TEREDO),
            (2055, Proto::NETFLOW),
            (9995, Proto::NETFLOW),
            (6343, Proto::SFLOW),
            (1812, Proto::RADIUS),
            (1813, Proto::RADIUS),
            (853, Proto::DOH_DOT),
        ],
    };
    let find = |port: u16| table.iter().find(|(p, _)| *p == port).map(|(_, pr)| *pr);
    find(server_port).or_else(|| find(client_port))
}

#[cfg(test)]
pub(crate) mod testkit;
