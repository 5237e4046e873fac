//! The small value types every analytics list is made of.

use crate::sketch::Merge;
use std::fmt::Write as _;

/// A host as analytics keys it: address (IPv4 in the first 4 bytes), IP version and VLAN (the
/// engine's host key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostAddr {
    pub addr: [u8; 16],
    pub ip_version: u8,
    pub vlan: u16,
}

impl HostAddr {
    pub fn new(addr: [u8; 16], ip_version: u8, vlan: u16) -> HostAddr {
        HostAddr {
            addr,
            ip_version,
            vlan,
        }
    }

    /// The address as text (`10.0.0.1`, `2001:db8::1`), without the VLAN.
    pub fn ip_text(&self) -> String {
        addr_text(&self.addr, self.ip_version)
    }

    /// The address, with `@VLAN` when it has one (as the history's host series keys).
    pub fn text(&self) -> String {
        let mut s = self.ip_text();
        if self.vlan != 0 {
            let _ = write!(s, "@{}", self.vlan);
        }
        s
    }

    pub fn ip(&self) -> std::net::IpAddr {
        ip_of(&self.addr, self.ip_version)
    }
}

pub fn ip_of(addr: &[u8; 16], ip_version: u8) -> std::net::IpAddr {
    if ip_version == 4 {
        std::net::IpAddr::from([addr[0], addr[1], addr[2], addr[3]])
    } else {
        std::net::IpAddr::from(*addr)
    }
}

pub fn addr_text(addr: &[u8; 16], ip_version: u8) -> String {
    ip_of(addr, ip_version).to_string()
}

/// Packets and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

impl Merge for Traffic {
    fn merge(&mut self, o: &Traffic) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

/// Packets, bytes and flows (ports and applications of an interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub packets: u64,
    pub bytes: u64,
    pub flows: u64,
}

impl Merge for Usage {
    fn merge(&mut self, o: &Usage) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.flows += o.flows;
    }
}

/// What one host did during one second, in one direction (toward it, or from it): the
/// quantities DDoS thresholds are about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    pub packets: u64,
    pub bytes: u64,
    /// Flows opened (the host as server for `inbound`, as client for `outbound`).
    pub flows: u64,
    /// TCP SYN packets (without ACK).
    pub syn: u64,
    pub udp: u64,
    pub icmp: u64,
    pub tcp: u64,
    /// IP fragments.
    pub frag: u64,
}

impl Merge for Rates {
    fn merge(&mut self, o: &Rates) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.flows += o.flows;
        self.syn += o.syn;
        self.udp += o.udp;
        self.icmp += o.icmp;
        self.tcp += o.tcp;
        self.frag += o.frag;
    }
}

impl Rates {
    pub fn is_zero(&self) -> bool {
        *self == Rates::default()
    }
}

/// A host's second: `[inbound, outbound]`.
pub type HostSecond = [Rates; 2];

/// The name of an IP protocol number for lists (`tcp`, `udp`, `icmp`, or the number).
pub fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmp6".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}
