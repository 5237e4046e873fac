//! Packet decoding for sonde.
//!
//! Why this crate exists: every later stage (flows, hosts, DPI, export) needs the same few facts about
//! a packet (addresses, ports, protocol, lengths, TCP state) and must never be able to crash on a
//! hostile or truncated frame. All parsing of raw bytes lives here, behind one contract:
//!
//! * [`Decoder::decode`] takes any byte slice and either fills a [`Decoded`] or returns a
//!   [`Malformed`] reason. It never panics and never allocates; every read is bounds-checked
//!   through [`bytes::Cursor`]-style helpers that return `Option`.
//! * Encapsulations (802.1Q/QinQ, MPLS, PPPoE, GRE, VXLAN, GTP-U, IP-in-IP) are peeled so the
//!   *innermost* IP flow is what gets reported, as nDPI and ntopng do.
//! * IPv4/IPv6 fragments after the first carry no ports; a small bounded [`frag::FragmentTable`]
//!   remembers the ports of first fragments so later ones are attributed to their flow.

pub mod bytes;
pub mod decode;
pub mod frag;
pub mod linktype;

pub use decode::{Decoded, Decoder, Malformed, Outcome, Tunnel, MALFORMED_REASONS};
pub use frag::FragmentTable;
pub use linktype::LinkType;

/// IANA protocol numbers used by the decoder.
pub mod ipproto {
    pub const HOPOPT: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const IPIP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6: u8 = 41;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NONXT: u8 = 59;
    pub const DSTOPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const SCTP: u8 = 132;
    pub const UDPLITE: u8 = 136;
}

/// TCP flag bits as they appear in byte 13 of the TCP header.
pub mod tcpflags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}
