//! The decode stack: link layer → (VLAN, MPLS, PPPoE) → IP → (tunnels → inner IP) → transport.
//!
//! One call decodes one frame into a reused [`Decoded`]. Each layer is a small function that reads
//! through the checked helpers in [`crate::bytes`], so a short or lying header turns into a
//! [`Malformed`] reason, never a panic. Lengths are taken from the IP header and checked against
//! the frame's *wire* length (not the captured length), so snaplen-truncated captures still count
//! the true packet size, while a header that claims more bytes than the frame had is malformed.

use crate::bytes::{array, be16, be32, le32, u8_at};
use crate::frag::{FragKey, FragmentTable};
use crate::ipproto;
use crate::linktype::LinkType;

/// Why a frame could not be decoded. The discriminant indexes [`MALFORMED_REASONS`], so counters
/// can be a plain array on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Malformed {
    UnsupportedLinktype = 0,
    TruncatedLinkHeader,
    TruncatedVlan,
    TruncatedMpls,
    MplsTooDeep,
    TruncatedPppoe,
    TruncatedIpv4,
    BadIpv4Header,
    BadIpv4Length,
    TruncatedIpv6,
    BadIpv6Length,
    BadIpv6ExtensionHeader,
    TruncatedTcp,
    BadTcpHeader,
    TruncatedUdp,
    TruncatedIcmp,
    TruncatedSctp,
    BadIpVersion,
}

/// Names of the [`Malformed`] reasons, indexed by discriminant; used in stats output.
pub const MALFORMED_REASONS: [&str; 18] = [
    "unsupported_linktype",
    "truncated_link_header",
    "truncated_vlan",
    "truncated_mpls",
    "mpls_too_deep",
    "truncated_pppoe",
    "truncated_ipv4",
    "bad_ipv4_header",
    "bad_ipv4_length",
    "truncated_ipv6",
    "bad_ipv6_length",
    "bad_ipv6_extension_header",
    "truncated_tcp",
    "bad_tcp_header",
    "truncated_udp",
    "truncated_icmp",
    "truncated_sctp",
    "bad_ip_version",
];

impl Malformed {
    pub fn name(self) -> &'static str {
        MALFORMED_REASONS[self as usize]
    }
}

/// The encapsulation the reported (inner) flow was found in; the outermost one wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Tunnel {
    #[default]
    None = 0,
    Gre,
    Vxlan,
    GtpU,
    IpInIp,
    /// CAPWAP's data channel (wireless access points to their controller).
    Capwap,
}

impl Tunnel {
    pub fn name(self) -> &'static str {
        match self {
            Tunnel::None => "none",
            Tunnel::Gre => "gre",
            Tunnel::Vxlan => "vxlan",
            Tunnel::GtpU => "gtp-u",
            Tunnel::IpInIp => "ip-in-ip",
            Tunnel::Capwap => "capwap",
        }
    }

    /// The tunnel whose number (`tunnel as u8`) is `n`, for stored records.
    pub fn from_number(n: u8) -> Option<Tunnel> {
        [
            Tunnel::None,
            Tunnel::Gre,
            Tunnel::Vxlan,
            Tunnel::GtpU,
            Tunnel::IpInIp,
            Tunnel::Capwap,
        ]
        .into_iter()
        .find(|t| *t as u8 == n)
    }
}

/// Whether the frame was an IP packet tracked as a flow, or something else (ARP, LLDP, STP...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ip,
    NonIp,
}

/// What the flow engine needs from one packet. Addresses are 16 bytes; IPv4 uses the first four.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// 4 or 6.
    pub ip_version: u8,
    /// Outermost 802.1Q VLAN id, 0 when untagged.
    pub vlan: u16,
    /// Bytes of the (inner) IP packet as its header states: what NetFlow calls octets.
    pub ip_len: u32,
    /// Transport payload bytes (after the TCP/UDP header); 0 for later fragments.
    pub payload_len: u32,
    pub tcp_flags: u8,
    pub tcp_seq: u32,
    pub tcp_ack: u32,
    /// ICMP/ICMPv6 type in the high byte, code in the low byte.
    pub icmp_type_code: u16,
    pub tos: u8,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub has_mac: bool,
    pub tunnel: Tunnel,
    /// True for every fragment of a fragmented IP datagram.
    pub is_fragment: bool,
    /// Offset of the transport payload in the captured bytes (for DPI), when captured.
    pub payload_offset: u32,
    /// Offset of the (inner) IP header in the captured bytes (for DPI backends that want the
    /// whole IP packet, as nDPI does).
    pub ip_offset: u32,
}

/// Counters the decoder keeps about what it saw (not errors).
#[derive(Clone, Copy, Debug, Default)]
pub struct DecoderCounters {
    pub fragments: u64,
    /// Later fragments whose first fragment was not seen (attributed with ports 0).
    pub fragments_unmatched: u64,
    pub tunneled: u64,
}

const MAX_TUNNEL_DEPTH: u8 = 4;
const MAX_MPLS_LABELS: usize = 16;
const MAX_VLAN_TAGS: usize = 4;
const MAX_IPV6_EXT_HEADERS: usize = 8;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88A8;
const ETH_QINQ_OLD: u16 = 0x9100;
const ETH_MPLS_UC: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;
const ETH_PPPOE_SESSION: u16 = 0x8864;
const ETH_TEB: u16 = 0x6558;
const ETH_PPP: u16 = 0x880B;

const UDP_VXLAN: u16 = 4789;
const UDP_GTPU: u16 = 2152;
const UDP_CAPWAP_DATA: u16 = 5247;

/// Stateful decoder: holds the fragment table and its counters. One per shard (or per reader).
pub struct Decoder {
    frags: FragmentTable,
    pub counters: DecoderCounters,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(FragmentTable::DEFAULT_CAPACITY)
    }
}

impl Decoder {
    pub fn new(fragment_capacity: usize) -> Decoder {
        Decoder {
            frags: FragmentTable::new(fragment_capacity),
            counters: DecoderCounters::default(),
        }
    }

    /// Decodes one frame. `data` is what was captured, `wire_len` the frame's length on the wire
    /// (at least `data.len()`), `ts_ns` its timestamp (used only to age the fragment table).
    #[inline]
    pub fn decode(
        &mut self,
        link: LinkType,
        ts_ns: u64,
        data: &[u8],
        wire_len: u32,
        out: &mut Decoded,
    ) -> Result<Outcome, Malformed> {
        if link == LinkType::Ethernet && fast_ethernet_ipv4(data, wire_len as usize, out) {
            return Ok(Outcome::Ip);
        }
        self.decode_general(link, ts_ns, data, wire_len, out)
    }

    /// The full decode stack, without the fast path (the reference the fast path is tested
    /// against).
    pub fn decode_general(
        &mut self,
        link: LinkType,
        ts_ns: u64,
        data: &[u8],
        wire_len: u32,
        out: &mut Decoded,
    ) -> Result<Outcome, Malformed> {
        // Reset only what a decode may leave unset (a full reset is a memset per packet).
        out.sport = 0;
        out.dport = 0;
        out.vlan = 0;
        out.payload_len = 0;
        out.payload_offset = 0;
        out.tcp_flags = 0;
        out.tcp_seq = 0;
        out.tcp_ack = 0;
        out.icmp_type_code = 0;
        out.tos = 0;
        out.has_mac = false;
        out.tunnel = Tunnel::None;
        out.is_fragment = false;
        let wire_len = (wire_len as usize).max(data.len());
        let mut p = Parse {
            data,
            wire_len,
            out,
            depth: 0,
            ts_ns,
            dec: self,
        };
        p.link(link)
    }
}

/// The frame most traffic is made of, decoded in straight-line code: untagged Ethernet, IPv4
/// without options or fragmentation, TCP or UDP (not a tunnel port). Returns `false` without
/// having to be undone for anything else, which then takes the general path. It must fill
/// [`Decoded`] exactly as the general path does; a test checks that on mutated frames.
#[inline(always)]
fn fast_ethernet_ipv4(data: &[u8], wire_len: usize, out: &mut Decoded) -> bool {
    let Some(d) = data.get(..42) else {
        return false;
    };
    if d[12] != 0x08 || d[13] != 0x00 || d[14] != 0x45 {
        return false;
    }
    let wire_len = wire_len.max(data.len());
    let total = u16::from_be_bytes([d[16], d[17]]) as usize;
    let frag = u16::from_be_bytes([d[20], d[21]]);
    if frag & 0x3fff != 0 || total > wire_len - 14 {
        return false;
    }
    let proto = d[23];
    let sport = u16::from_be_bytes([d[34], d[35]]);
    let dport = u16::from_be_bytes([d[36], d[37]]);
    let (payload_len, payload_offset, flags, seq, ack) = match proto {
        ipproto::UDP => {
            let tunnel = |p: u16| p == UDP_GTPU || p == UDP_CAPWAP_DATA;
            if total < 28 || dport == UDP_VXLAN || tunnel(dport) || tunnel(sport) {
                return false;
            }
            (total - 28, 42, 0, 0, 0)
        }
        ipproto::TCP => {
            let Some(t) = data.get(34..48) else {
                return false;
            };
            let doff = ((t[12] >> 4) as usize) * 4;
            if doff < 20 || total < 20 + doff {
                return false;
            }
            (
                total - 20 - doff,
                34 + doff,
                t[13],
                u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
                u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
            )
        }
        _ => return false,
    };
    out.dst_mac.copy_from_slice(&d[0..6]);
    out.src_mac.copy_from_slice(&d[6..12]);
    out.has_mac = true;
    out.vlan = 0;
    out.ip_version = 4;
    out.tos = d[15];
    out.proto = proto;
    out.ip_len = total as u32;
    out.src = [0; 16];
    out.dst = [0; 16];
    out.src[..4].copy_from_slice(&d[26..30]);
    out.dst[..4].copy_from_slice(&d[30..34]);
    out.sport = sport;
    out.dport = dport;
    out.payload_len = payload_len as u32;
    out.payload_offset = payload_offset as u32;
    out.ip_offset = 14;
    out.tcp_flags = flags;
    out.tcp_seq = seq;
    out.tcp_ack = ack;
    out.icmp_type_code = 0;
    out.tunnel = Tunnel::None;
    out.is_fragment = false;
    true
}

struct Parse<'a, 'd> {
    data: &'a [u8],
    wire_len: usize,
    out: &'d mut Decoded,
    depth: u8,
    ts_ns: u64,
    dec: &'d mut Decoder,
}

impl Parse<'_, '_> {
    #[inline(always)]
    fn link(&mut self, link: LinkType) -> Result<Outcome, Malformed> {
        let d = self.data;
        match link {
            LinkType::Ethernet => self.ethernet(0),
            LinkType::Raw => self.ip_by_nibble(0),
            LinkType::RawIpv4 => self.ipv4(0, self.wire_len),
            LinkType::RawIpv6 => self.ipv6(0, self.wire_len),
            LinkType::Null | LinkType::Loop => {
                // The family's byte order depends on the capturing host; the IP version nibble
                // does not, so decide by that and only check that the 4 bytes are there.
                le32(d, 0).ok_or(Malformed::TruncatedLinkHeader)?;
                self.ip_by_nibble(4)
            }
            LinkType::LinuxSll => {
                let proto = be16(d, 14).ok_or(Malformed::TruncatedLinkHeader)?;
                let addr_len = be16(d, 4).ok_or(Malformed::TruncatedLinkHeader)?;
                if addr_len == 6 {
                    if let Some(mac) = array::<6>(d, 6) {
                        self.out.src_mac = mac;
                        self.out.has_mac = true;
                    }
                }
                self.ethertype(proto, 16, 0)
            }
            LinkType::LinuxSll2 => {
                let proto = be16(d, 0).ok_or(Malformed::TruncatedLinkHeader)?;
                let addr_len = u8_at(d, 11).ok_or(Malformed::TruncatedLinkHeader)?;
                if d.len() < 20 {
                    return Err(Malformed::TruncatedLinkHeader);
                }
                if addr_len == 6 {
                    if let Some(mac) = array::<6>(d, 12) {
                        self.out.src_mac = mac;
                        self.out.has_mac = true;
                    }
                }
                self.ethertype(proto, 20, 0)
            }
            LinkType::Ppp => {
                // HDLC-like framing adds address 0xFF and control 0x03 before the protocol.
                let off = if d.get(..2) == Some(&[0xff, 0x03][..]) {
                    2
                } else {
                    0
                };
                let first = u8_at(d, off).ok_or(Malformed::TruncatedLinkHeader)?;
                // Protocol-field compression: an odd first byte is a one-byte protocol.
                let (proto, off) = if first & 1 == 1 {
                    (first as u16, off + 1)
                } else {
                    (be16(d, off).ok_or(Malformed::TruncatedLinkHeader)?, off + 2)
                };
                self.ppp_protocol(proto, off)
            }
            LinkType::CHdlc => {
                let ethertype = be16(d, 2).ok_or(Malformed::TruncatedLinkHeader)?;
                self.ethertype(ethertype, 4, 0)
            }
            LinkType::Unknown(_) => Err(Malformed::UnsupportedLinktype),
        }
    }

    /// What follows a PPP protocol field at `off` (PPP links, PPPoE).
    #[inline]
    fn ppp_protocol(&mut self, proto: u16, off: usize) -> Result<Outcome, Malformed> {
        match proto {
            0x0021 => self.ipv4(off, self.wire_len.saturating_sub(off)),
            0x0057 => self.ipv6(off, self.wire_len.saturating_sub(off)),
            0x0281 | 0x0283 => self.mpls(off),
            _ => Ok(Outcome::NonIp),
        }
    }

    #[inline(always)]
    fn ethernet(&mut self, off: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        let hdr = d.get(off..off + 14).ok_or(Malformed::TruncatedLinkHeader)?;
        self.out.dst_mac.copy_from_slice(&hdr[0..6]);
        self.out.src_mac.copy_from_slice(&hdr[6..12]);
        self.out.has_mac = true;
        let ethertype = u16::from_be_bytes([hdr[12], hdr[13]]);
        self.ethertype(ethertype, off + 14, 0)
    }

    /// Dispatches on an EtherType, peeling VLAN tags, MPLS labels and PPPoE on the way.
    #[inline]
    fn ethertype(
        &mut self,
        mut ethertype: u16,
        mut off: usize,
        mut vlans: usize,
    ) -> Result<Outcome, Malformed> {
        let d = self.data;
        loop {
            match ethertype {
                ETH_IPV4 => return self.ipv4(off, self.wire_len.saturating_sub(off)),
                ETH_IPV6 => return self.ipv6(off, self.wire_len.saturating_sub(off)),
                ETH_VLAN | ETH_QINQ | ETH_QINQ_OLD => {
                    let tci = be16(d, off).ok_or(Malformed::TruncatedVlan)?;
                    let next = be16(d, off + 2).ok_or(Malformed::TruncatedVlan)?;
                    if vlans == 0 && self.depth == 0 {
                        self.out.vlan = tci & 0x0fff;
                    }
                    vlans += 1;
                    if vlans > MAX_VLAN_TAGS {
                        return Err(Malformed::TruncatedVlan);
                    }
                    ethertype = next;
                    off += 4;
                }
                ETH_MPLS_UC | ETH_MPLS_MC => return self.mpls(off),
                ETH_PPPOE_SESSION => {
                    // 6-byte PPPoE header, then the 2-byte PPP protocol field.
                    let ppp = be16(d, off + 6).ok_or(Malformed::TruncatedPppoe)?;
                    return self.ppp_protocol(ppp, off + 8);
                }
                _ => return Ok(Outcome::NonIp),
            }
        }
    }

    fn mpls(&mut self, mut off: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        for _ in 0..MAX_MPLS_LABELS {
            let entry = be32(d, off).ok_or(Malformed::TruncatedMpls)?;
            off += 4;
            if entry & 0x100 != 0 {
                // Bottom of stack: the payload type is not signalled, guess by the first nibble.
                let first = u8_at(d, off).ok_or(Malformed::TruncatedMpls)?;
                return match first >> 4 {
                    4 => self.ipv4(off, self.wire_len.saturating_sub(off)),
                    6 => self.ipv6(off, self.wire_len.saturating_sub(off)),
                    // Ethernet pseudowire with the 4-byte control word.
                    0 => self.ethernet(off + 4),
                    _ => Ok(Outcome::NonIp),
                };
            }
        }
        Err(Malformed::MplsTooDeep)
    }

    fn ip_by_nibble(&mut self, off: usize) -> Result<Outcome, Malformed> {
        let first = u8_at(self.data, off).ok_or(Malformed::TruncatedLinkHeader)?;
        let avail = self.wire_len.saturating_sub(off);
        match first >> 4 {
            4 => self.ipv4(off, avail),
            6 => self.ipv6(off, avail),
            _ => Err(Malformed::BadIpVersion),
        }
    }

    /// `avail`: bytes of this layer on the wire (from `off` to the end of the enclosing layer).
    #[inline(always)]
    fn ipv4(&mut self, off: usize, avail: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        let h = d.get(off..off + 20).ok_or(Malformed::TruncatedIpv4)?;
        let ver_ihl = h[0];
        if ver_ihl >> 4 != 4 {
            return Err(Malformed::BadIpv4Header);
        }
        let ihl = ((ver_ihl & 0x0f) as usize) * 4;
        if ihl < 20 {
            return Err(Malformed::BadIpv4Header);
        }
        let mut total = u16::from_be_bytes([h[2], h[3]]) as usize;
        if total == 0 {
            // TCP segmentation offload on the capturing host leaves the length at 0.
            total = avail;
        }
        if total < ihl || total > avail {
            return Err(Malformed::BadIpv4Length);
        }
        let id = u16::from_be_bytes([h[4], h[5]]);
        let frag = u16::from_be_bytes([h[6], h[7]]);
        let proto = h[9];
        let o = &mut *self.out;
        o.ip_offset = off as u32;
        o.ip_version = 4;
        o.tos = h[1];
        o.proto = proto;
        o.ip_len = total as u32;
        o.src = [0; 16];
        o.dst = [0; 16];
        o.src[..4].copy_from_slice(&h[12..16]);
        o.dst[..4].copy_from_slice(&h[16..20]);
        o.sport = 0;
        o.dport = 0;
        let frag_offset = frag & 0x1fff;
        let more_fragments = frag & 0x2000 != 0;
        if frag_offset != 0 || more_fragments {
            o.is_fragment = true;
            self.dec.counters.fragments += 1;
            let key = self.frag_key(id as u32);
            if frag_offset != 0 {
                return Ok(self.later_fragment(key));
            }
            let r = self.transport(proto, off + ihl, total - ihl);
            self.remember_first_fragment(key, r.is_ok());
            return r;
        }
        self.transport(proto, off + ihl, total - ihl)
    }

    fn ipv6(&mut self, off: usize, avail: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        let h = d.get(off..off + 40).ok_or(Malformed::TruncatedIpv6)?;
        if h[0] >> 4 != 6 {
            return Err(Malformed::BadIpVersion);
        }
        let payload = u16::from_be_bytes([h[4], h[5]]) as usize;
        let mut next = h[6];
        let mut total = 40 + payload;
        if payload == 0 && next != ipproto::NONXT {
            // Jumbogram or TSO: the header does not carry the length, the frame does.
            total = avail;
        }
        if total > avail || total < 40 {
            return Err(Malformed::BadIpv6Length);
        }
        let o = &mut *self.out;
        o.ip_version = 6;
        o.tos = ((u16::from_be_bytes([h[0], h[1]]) >> 4) & 0xff) as u8;
        o.ip_len = total as u32;
        o.ip_offset = off as u32;
        o.src.copy_from_slice(&h[8..24]);
        o.dst.copy_from_slice(&h[24..40]);
        o.sport = 0;
        o.dport = 0;
        let mut cur = off + 40;
        let end = off + total;
        let mut fragment: Option<(u32, bool)> = None;
        for _ in 0..MAX_IPV6_EXT_HEADERS {
            match next {
                ipproto::HOPOPT | ipproto::ROUTING | ipproto::DSTOPTS | ipproto::MOBILITY => {
                    let nh = u8_at(d, cur).ok_or(Malformed::BadIpv6ExtensionHeader)?;
                    let len =
                        (u8_at(d, cur + 1).ok_or(Malformed::BadIpv6ExtensionHeader)? as usize + 1)
                            * 8;
                    next = nh;
                    cur += len;
                }
                ipproto::AH => {
                    let nh = u8_at(d, cur).ok_or(Malformed::BadIpv6ExtensionHeader)?;
                    let len =
                        (u8_at(d, cur + 1).ok_or(Malformed::BadIpv6ExtensionHeader)? as usize + 2)
                            * 4;
                    next = nh;
                    cur += len;
                }
                ipproto::FRAGMENT => {
                    let nh = u8_at(d, cur).ok_or(Malformed::BadIpv6ExtensionHeader)?;
                    let offm = be16(d, cur + 2).ok_or(Malformed::BadIpv6ExtensionHeader)?;
                    let id = be32(d, cur + 4).ok_or(Malformed::BadIpv6ExtensionHeader)?;
                    let offset = offm >> 3;
                    let more = offm & 1 != 0;
                    next = nh;
                    cur += 8;
                    if offset != 0 || more {
                        fragment = Some((id, offset != 0));
                    }
                }
                _ => break,
            }
            if cur > end {
                return Err(Malformed::BadIpv6ExtensionHeader);
            }
        }
        self.out.proto = next;
        if let Some((id, later)) = fragment {
            self.out.is_fragment = true;
            self.dec.counters.fragments += 1;
            let key = self.frag_key(id);
            if later {
                return Ok(self.later_fragment(key));
            }
            let r = self.transport(next, cur, end - cur);
            self.remember_first_fragment(key, r.is_ok());
            return r;
        }
        self.transport(next, cur, end - cur)
    }

    fn frag_key(&self, id: u32) -> FragKey {
        FragKey {
            src: self.out.src,
            dst: self.out.dst,
            id,
            proto: self.out.proto,
            vlan: self.out.vlan,
        }
    }

    /// A first fragment starts a datagram: its ports go to the later fragments, or, when its
    /// transport header was malformed, the later fragments get no ports (not a stale entry's).
    fn remember_first_fragment(&mut self, key: FragKey, ok: bool) {
        if ok {
            let (sport, dport) = (self.out.sport, self.out.dport);
            self.dec.frags.insert(key, sport, dport, self.ts_ns);
        } else {
            self.dec.frags.remove(&key);
        }
    }

    fn later_fragment(&mut self, key: FragKey) -> Outcome {
        match self.dec.frags.lookup(&key, self.ts_ns) {
            Some((sport, dport)) => {
                self.out.sport = sport;
                self.out.dport = dport;
            }
            None => self.dec.counters.fragments_unmatched += 1,
        }
        self.out.payload_len = 0;
        Outcome::Ip
    }

    /// `len`: bytes of the transport segment on the wire (IP payload length).
    #[inline(always)]
    fn transport(&mut self, proto: u8, off: usize, len: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        match proto {
            ipproto::TCP => {
                let h = d.get(off..off + 14).ok_or(Malformed::TruncatedTcp)?;
                let doff = ((h[12] >> 4) as usize) * 4;
                // A first fragment may end inside the TCP header (options, or a tiny first
                // fragment): the ports are still there, and the rest of the header follows in
                // later fragments, so only an unfragmented segment must hold all of it.
                if doff < 20 || (doff > len && !self.out.is_fragment) {
                    return Err(Malformed::BadTcpHeader);
                }
                let o = &mut *self.out;
                o.sport = u16::from_be_bytes([h[0], h[1]]);
                o.dport = u16::from_be_bytes([h[2], h[3]]);
                o.tcp_seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                o.tcp_ack = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
                o.tcp_flags = h[13];
                o.payload_len = len.saturating_sub(doff) as u32;
                o.payload_offset = (off + doff.min(len)) as u32;
                Ok(Outcome::Ip)
            }
            ipproto::UDP | ipproto::UDPLITE => {
                let h = d.get(off..off + 8).ok_or(Malformed::TruncatedUdp)?;
                if len < 8 {
                    return Err(Malformed::TruncatedUdp);
                }
                let sport = u16::from_be_bytes([h[0], h[1]]);
                let dport = u16::from_be_bytes([h[2], h[3]]);
                let o = &mut *self.out;
                o.sport = sport;
                o.dport = dport;
                o.payload_len = (len - 8) as u32;
                o.payload_offset = (off + 8) as u32;
                if proto == ipproto::UDP && !self.out.is_fragment && self.depth < MAX_TUNNEL_DEPTH {
                    if dport == UDP_VXLAN {
                        return Ok(self.try_tunnel(Tunnel::Vxlan, |p| p.vxlan(off + 8)));
                    }
                    if dport == UDP_GTPU || sport == UDP_GTPU {
                        return Ok(self.try_tunnel(Tunnel::GtpU, |p| p.gtpu(off + 8, len - 8)));
                    }
                    if dport == UDP_CAPWAP_DATA || sport == UDP_CAPWAP_DATA {
                        return Ok(self.try_tunnel(Tunnel::Capwap, |p| p.capwap(off + 8)));
                    }
                }
                Ok(Outcome::Ip)
            }
            ipproto::ICMP | ipproto::ICMPV6 => {
                let tc = be16(d, off).ok_or(Malformed::TruncatedIcmp)?;
                self.out.icmp_type_code = tc;
                self.out.payload_len = len.saturating_sub(4) as u32;
                self.out.payload_offset = (off + 4) as u32;
                Ok(Outcome::Ip)
            }
            ipproto::SCTP => {
                let h = d.get(off..off + 12).ok_or(Malformed::TruncatedSctp)?;
                self.out.sport = u16::from_be_bytes([h[0], h[1]]);
                self.out.dport = u16::from_be_bytes([h[2], h[3]]);
                self.out.payload_len = len.saturating_sub(12) as u32;
                Ok(Outcome::Ip)
            }
            ipproto::GRE if !self.out.is_fragment && self.depth < MAX_TUNNEL_DEPTH => {
                Ok(self.try_tunnel(Tunnel::Gre, |p| p.gre(off, len)))
            }
            ipproto::IPIP if !self.out.is_fragment && self.depth < MAX_TUNNEL_DEPTH => {
                Ok(self.try_tunnel(Tunnel::IpInIp, |p| p.ipv4(off, len)))
            }
            ipproto::IPV6 if !self.out.is_fragment && self.depth < MAX_TUNNEL_DEPTH => {
                Ok(self.try_tunnel(Tunnel::IpInIp, |p| p.ipv6(off, len)))
            }
            _ => {
                self.out.payload_len = len as u32;
                Ok(Outcome::Ip)
            }
        }
    }

    /// Decodes an encapsulated packet. If the inside is not a decodable IP packet, the outer
    /// packet stands as the flow: a port match alone (UDP/4789 carrying something else) must not
    /// turn a healthy packet into a malformed one.
    #[cold]
    #[inline(never)]
    fn try_tunnel(
        &mut self,
        kind: Tunnel,
        inner: impl FnOnce(&mut Self) -> Result<Outcome, Malformed>,
    ) -> Outcome {
        let saved = *self.out;
        self.depth += 1;
        let r = inner(self);
        self.depth -= 1;
        match r {
            Ok(Outcome::Ip) => {
                // Nested tunnels: the outermost call returns last, so its kind is what stays.
                self.out.tunnel = kind;
                // The outermost VLAN and MACs describe where the packet was seen.
                self.out.vlan = saved.vlan;
                if saved.has_mac {
                    self.out.src_mac = saved.src_mac;
                    self.out.dst_mac = saved.dst_mac;
                    self.out.has_mac = true;
                }
                if self.depth == 0 {
                    self.dec.counters.tunneled += 1;
                }
                Outcome::Ip
            }
            _ => {
                *self.out = saved;
                Outcome::Ip
            }
        }
    }

    fn vxlan(&mut self, off: usize) -> Result<Outcome, Malformed> {
        let flags = u8_at(self.data, off).ok_or(Malformed::TruncatedUdp)?;
        if flags & 0x08 == 0 {
            return Ok(Outcome::NonIp);
        }
        self.ethernet(off + 8)
    }

    /// CAPWAP data (RFC 5415 §4.3, UDP 5247): a header of HLEN 4-byte words, then an IEEE
    /// 802.3 frame (T = 0) or, for wireless binding 1, an IEEE 802.11 frame (T = 1).
    /// Fragments, keep-alives and other bindings stand as the outer flow, as does DTLS
    /// (preamble type 1).
    fn capwap(&mut self, off: usize) -> Result<Outcome, Malformed> {
        let Some(h) = self.data.get(off..off + 8) else {
            return Ok(Outcome::NonIp);
        };
        let hlen = usize::from(h[1] >> 3) * 4;
        let binding = (h[2] >> 1) & 0x1f;
        let native = h[2] & 0x01 != 0;
        let (fragment, keep_alive) = (h[3] & 0x80 != 0, h[3] & 0x08 != 0);
        if h[0] != 0 || hlen < 8 || fragment || keep_alive {
            return Ok(Outcome::NonIp);
        }
        match (native, binding) {
            (false, _) => self.ethernet(off + hlen),
            (true, 1) => self.ieee80211(off + hlen),
            _ => Ok(Outcome::NonIp),
        }
    }

    /// An IEEE 802.11 data frame (IEEE 802.11-2020 §9.2.4.1, §9.3.2.1): the MAC header (24
    /// bytes; 30 with a fourth address; 2 more with QoS control, 4 more with HT control), then
    /// LLC/SNAP and an EtherType. Cisco controllers send the frame control's two bytes swapped.
    /// Null and protected (encrypted) frames carry nothing to read.
    fn ieee80211(&mut self, off: usize) -> Result<Outcome, Malformed> {
        let Some(fc) = self.data.get(off..off + 2) else {
            return Ok(Outcome::NonIp);
        };
        // Protocol version 0, type 2 (data).
        let is_data = |b: u8| b & 0x0f == 0x08;
        let (fc0, flags) = match (is_data(fc[0]), is_data(fc[1])) {
            (true, _) => (fc[0], fc[1]),
            (false, true) => (fc[1], fc[0]),
            _ => return Ok(Outcome::NonIp),
        };
        let (null, qos) = (fc0 & 0x40 != 0, fc0 & 0x80 != 0);
        let (four_addresses, protected, order) =
            (flags & 0x03 == 0x03, flags & 0x40 != 0, flags & 0x80 != 0);
        if null || protected {
            return Ok(Outcome::NonIp);
        }
        let hdr = 24
            + if four_addresses { 6 } else { 0 }
            + if qos { 2 } else { 0 }
            + if qos && order { 4 } else { 0 };
        let llc = off + hdr;
        let Some(snap) = self.data.get(llc..llc + 8) else {
            return Ok(Outcome::NonIp);
        };
        if snap[..6] != [0xaa, 0xaa, 0x03, 0, 0, 0] {
            return Ok(Outcome::NonIp);
        }
        self.ethertype(u16::from_be_bytes([snap[6], snap[7]]), llc + 8, 0)
    }

    fn gtpu(&mut self, off: usize, len: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        let flags = u8_at(d, off).ok_or(Malformed::TruncatedUdp)?;
        let msg_type = u8_at(d, off + 1).ok_or(Malformed::TruncatedUdp)?;
        // Version 1, protocol type GTP, message G-PDU (user data).
        if flags >> 5 != 1 || flags & 0x10 == 0 || msg_type != 0xff {
            return Ok(Outcome::NonIp);
        }
        let mut cur = off + 8;
        if flags & 0x07 != 0 {
            // Sequence number, N-PDU number and next extension type are present together.
            let mut next_ext = u8_at(d, cur + 3).ok_or(Malformed::TruncatedUdp)?;
            cur += 4;
            let mut guard = 0;
            while next_ext != 0 {
                let units = u8_at(d, cur).ok_or(Malformed::TruncatedUdp)? as usize;
                if units == 0 || guard > 8 {
                    return Ok(Outcome::NonIp);
                }
                cur += units * 4;
                next_ext = u8_at(d, cur - 1).ok_or(Malformed::TruncatedUdp)?;
                guard += 1;
            }
        }
        let inner_len = (off + len).saturating_sub(cur);
        let first = u8_at(d, cur).ok_or(Malformed::TruncatedUdp)?;
        match first >> 4 {
            4 => self.ipv4(cur, inner_len),
            6 => self.ipv6(cur, inner_len),
            _ => Ok(Outcome::NonIp),
        }
    }

    fn gre(&mut self, off: usize, len: usize) -> Result<Outcome, Malformed> {
        let d = self.data;
        let flags = be16(d, off).ok_or(Malformed::TruncatedIpv4)?;
        let proto = be16(d, off + 2).ok_or(Malformed::TruncatedIpv4)?;
        let version = flags & 0x7;
        if flags & 0x4000 != 0 {
            // Source routing (RFC 1701) is obsolete; keep the GRE packet itself as the flow.
            return Ok(Outcome::NonIp);
        }
        let mut cur = off + 4;
        if flags & 0x8000 != 0 {
            cur += 4; // checksum + reserved
        }
        if flags & 0x2000 != 0 {
            cur += 4; // key (PPTP: payload length + call id)
        }
        if flags & 0x1000 != 0 {
            cur += 4; // sequence number
        }
        if version == 1 && flags & 0x0080 != 0 {
            cur += 4; // PPTP acknowledgment number
        }
        let end = off + len;
        if cur > end {
            return Ok(Outcome::NonIp);
        }
        match proto {
            ETH_IPV4 => self.ipv4(cur, end - cur),
            ETH_IPV6 => self.ipv6(cur, end - cur),
            ETH_TEB => self.ethernet(cur),
            ETH_PPP => {
                // PPP in GRE (PPTP): optional address/control 0xFF03, then a 1- or 2-byte protocol.
                let mut p = cur;
                if be16(d, p) == Some(0xff03) {
                    p += 2;
                }
                let b0 = u8_at(d, p).ok_or(Malformed::TruncatedIpv4)?;
                let (ppp, hl) = if b0 & 1 == 1 {
                    (b0 as u16, 1)
                } else {
                    (be16(d, p).ok_or(Malformed::TruncatedIpv4)?, 2)
                };
                p += hl;
                if p > end {
                    return Ok(Outcome::NonIp);
                }
                match ppp {
                    0x21 => self.ipv4(p, end - p),
                    0x57 => self.ipv6(p, end - p),
                    _ => Ok(Outcome::NonIp),
                }
            }
            _ => Ok(Outcome::NonIp),
        }
    }
}

#[cfg(test)]
mod tests;
