//! IANA IPFIX information elements (and their NetFlow v9 namesakes, same numbers below 128)
//! mapped into [`CollectedFlow`].

use crate::record::CollectedFlow;

/// Private enterprise number of RFC 5103 reverse elements.
pub(super) const PEN_REVERSE: u32 = 29305;
/// Marker "enterprise" for NetFlow v9 options scope fields, whose type numbers (1 System,
/// 2 Interface, 3 Line card, 4 Cache, 5 Template) are not information elements.
pub(super) const PEN_V9_SCOPE: u32 = u32::MAX;
pub(super) const V9_SCOPE_INTERFACE: u16 = 2;

pub(super) const OCTET_DELTA: u16 = 1;
pub(super) const PACKET_DELTA: u16 = 2;
pub(super) const PROTOCOL: u16 = 4;
pub(super) const TOS: u16 = 5;
pub(super) const TCP_FLAGS: u16 = 6;
pub(super) const SRC_PORT: u16 = 7;
pub(super) const SRC_V4: u16 = 8;
pub(super) const INGRESS_IF: u16 = 10;
pub(super) const DST_PORT: u16 = 11;
pub(super) const DST_V4: u16 = 12;
pub(super) const EGRESS_IF: u16 = 14;
pub(super) const LAST_SWITCHED: u16 = 21;
pub(super) const ICMP_TYPE: u16 = 32;
pub(super) const FIRST_SWITCHED: u16 = 22;
pub(super) const POST_OCTET_DELTA: u16 = 23;
pub(super) const POST_PACKET_DELTA: u16 = 24;
pub(super) const SRC_V6: u16 = 27;
pub(super) const DST_V6: u16 = 28;
pub(super) const SAMPLING_INTERVAL: u16 = 34;
pub(super) const SAMPLER_ID: u16 = 48;
pub(super) const SAMPLER_RANDOM_INTERVAL: u16 = 50;
pub(super) const SRC_MAC: u16 = 56;
pub(super) const POST_DST_MAC: u16 = 57;
pub(super) const VLAN: u16 = 58;
pub(super) const POST_VLAN: u16 = 59;
pub(super) const IP_VERSION: u16 = 60;
pub(super) const DST_MAC: u16 = 80;
pub(super) const POST_SRC_MAC: u16 = 81;
pub(super) const INTERFACE_NAME: u16 = 82;
pub(super) const OCTET_TOTAL: u16 = 85;
pub(super) const PACKET_TOTAL: u16 = 86;
pub(super) const APPLICATION_ID: u16 = 95;
pub(super) const APPLICATION_NAME: u16 = 96;
pub(super) const ICMP_TYPE_V6: u16 = 139;
pub(super) const FLOW_START_SECONDS: u16 = 150;
pub(super) const FLOW_END_SECONDS: u16 = 151;
pub(super) const FLOW_START_MS: u16 = 152;
pub(super) const FLOW_END_MS: u16 = 153;
pub(super) const FLOW_START_US: u16 = 154;
pub(super) const FLOW_END_US: u16 = 155;
pub(super) const FLOW_START_NS: u16 = 156;
pub(super) const FLOW_END_NS: u16 = 157;
pub(super) const FLOW_START_DELTA_US: u16 = 158;
pub(super) const FLOW_END_DELTA_US: u16 = 159;
pub(super) const SYSTEM_INIT_MS: u16 = 160;
pub(super) const UDP_SRC_PORT: u16 = 180;
pub(super) const UDP_DST_PORT: u16 = 181;
pub(super) const TCP_SRC_PORT: u16 = 182;
pub(super) const TCP_DST_PORT: u16 = 183;
pub(super) const DOT1Q_VLAN: u16 = 243;
pub(super) const DOT1Q_CUSTOMER_VLAN: u16 = 245;
pub(super) const INGRESS_PHYS_IF: u16 = 252;
pub(super) const EGRESS_PHYS_IF: u16 = 253;
pub(super) const SELECTOR_ID: u16 = 302;
pub(super) const SAMPLING_PACKET_INTERVAL: u16 = 305;
pub(super) const SAMPLING_PACKET_SPACE: u16 = 306;
pub(super) const SAMPLING_SIZE: u16 = 309;
pub(super) const SAMPLING_POPULATION: u16 = 310;

/// Seconds between the NTP epoch (1900) and the Unix epoch.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// An unsigned integer in 1 to 8 bytes (reduced-size encoding), None otherwise.
pub(super) fn uint(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 8 {
        return None;
    }
    Some(v.iter().fold(0u64, |a, &b| a << 8 | b as u64))
}

fn ntp_ms(v: &[u8]) -> Option<u64> {
    if v.len() != 8 {
        return None;
    }
    let secs = uint(&v[..4])?;
    let frac = uint(&v[4..])?;
    Some(secs.saturating_sub(NTP_UNIX_OFFSET) * 1000 + ((frac * 1000) >> 32))
}

/// Integer elements of a record, kept in [`Acc`] by this index while the record is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Int {
    BytesDelta,
    BytesTotal,
    PktsDelta,
    PktsTotal,
    RevBytesDelta,
    RevBytesTotal,
    RevPktsDelta,
    RevPktsTotal,
    IpVersion,
    /// Uptime-relative first/last switched (21/22), milliseconds.
    UptimeFirst,
    UptimeLast,
    StartMs,
    EndMs,
    StartDeltaUs,
    EndDeltaUs,
    SystemInitMs,
    // Sampling announcements (options or data records).
    SamplingInterval,
    RandomInterval,
    PacketInterval,
    PacketSpace,
    SamplingSize,
    SamplingPopulation,
    SamplerId,
    IfIndex,
}
const INTS: usize = Int::IfIndex as usize + 1;

/// The elements of one data or options record that matter, gathered field by field; the flow
/// itself is written in place (see [`Acc::apply`]). Made once per data set and reset per
/// record: resetting is clearing a bit set, not rewriting every optional value.
pub(super) struct Acc {
    /// Integer elements by [`Int`], valid where `has` has their bit.
    ints: [u64; INTS],
    has: u32,
    more: More,
}

/// The other elements that only settle the flow at the end of the record.
#[derive(Default)]
struct More {
    v4: Option<([u8; 4], [u8; 4])>,
    v6: Option<([u8; 16], [u8; 16])>,
    ports_alt: Option<(u16, u16)>,
    in_phys: u32,
    out_phys: u32,
    post_vlan: u16,
    customer_vlan: u16,
    post_src_mac: Option<[u8; 6]>,
    post_dst_mac: Option<[u8; 6]>,
    if_name: Option<String>,
}

fn mac(v: &[u8]) -> Option<[u8; 6]> {
    v.try_into().ok()
}

fn addr4(v: &[u8]) -> Option<[u8; 4]> {
    v.try_into().ok()
}

fn addr16(v: &[u8]) -> Option<[u8; 16]> {
    v.try_into().ok()
}

fn text(v: &[u8]) -> String {
    if v.is_empty() {
        return String::new();
    }
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// What one field of a record means, worked out once per template field (from its enterprise
/// number, id and length) so that each record's field costs one jump in [`Acc::apply`]. (The
/// integer kinds repeat [`Int`]'s names rather than carry an `Int`: with the index a constant
/// in each arm, decoding took 4-6 ns less per record.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A NetFlow v9 options scope other than the interface: nothing to keep.
    Ignore,
    /// An element sonde does not interpret: kept by number when not all zero.
    Extra,
    ScopeInterface,
    RevBytesDelta,
    RevPktsDelta,
    RevBytesTotal,
    RevPktsTotal,
    RevTcpFlags,
    IcmpType,
    BytesDelta,
    PktsDelta,
    BytesTotal,
    PktsTotal,
    Proto,
    Tos,
    TcpFlags,
    SrcPort,
    DstPort,
    AltSrcPort,
    AltDstPort,
    SrcV4,
    DstV4,
    SrcV6,
    DstV6,
    IpVersion,
    InIf,
    OutIf,
    InPhysIf,
    OutPhysIf,
    LastSwitched,
    FirstSwitched,
    StartSeconds,
    EndSeconds,
    StartMs,
    EndMs,
    StartNtp,
    EndNtp,
    StartDeltaUs,
    EndDeltaUs,
    SystemInitMs,
    SrcMac,
    DstMac,
    PostSrcMac,
    PostDstMac,
    Vlan,
    CustomerVlan,
    PostVlan,
    AppId,
    AppName,
    SamplingInterval,
    RandomInterval,
    PacketInterval,
    PacketSpace,
    SamplingSize,
    SamplingPopulation,
    SamplerId,
    InterfaceName,
}

impl Kind {
    /// The meaning of element `id` of enterprise `pen` with a value of `len` bytes. `v9`:
    /// NetFlow v9 meanings for 23/24 (OUT_BYTES/OUT_PKTS). Integers take 1 to 8 bytes
    /// (reduced-size encoding); a value of another length is kept as an uninterpreted element.
    pub fn of(pen: u32, id: u16, len: usize, v9: bool) -> Kind {
        let int = (1..=8).contains(&len);
        if pen == PEN_V9_SCOPE {
            return if id == V9_SCOPE_INTERFACE {
                Kind::ScopeInterface
            } else {
                Kind::Ignore
            };
        }
        if pen == PEN_REVERSE {
            return match id {
                OCTET_DELTA if int => Kind::RevBytesDelta,
                PACKET_DELTA if int => Kind::RevPktsDelta,
                OCTET_TOTAL if int => Kind::RevBytesTotal,
                PACKET_TOTAL if int => Kind::RevPktsTotal,
                TCP_FLAGS if int => Kind::RevTcpFlags,
                _ => Kind::Extra,
            };
        }
        if pen != 0 {
            return Kind::Extra;
        }
        match id {
            OCTET_DELTA if int => Kind::BytesDelta,
            PACKET_DELTA if int => Kind::PktsDelta,
            OCTET_TOTAL if int => Kind::BytesTotal,
            PACKET_TOTAL if int => Kind::PktsTotal,
            POST_OCTET_DELTA if int && v9 => Kind::RevBytesDelta,
            POST_PACKET_DELTA if int && v9 => Kind::RevPktsDelta,
            PROTOCOL if int => Kind::Proto,
            TOS if int => Kind::Tos,
            TCP_FLAGS if int => Kind::TcpFlags,
            ICMP_TYPE | ICMP_TYPE_V6 if int => Kind::IcmpType,
            SRC_PORT if int => Kind::SrcPort,
            DST_PORT if int => Kind::DstPort,
            UDP_SRC_PORT | TCP_SRC_PORT if int => Kind::AltSrcPort,
            UDP_DST_PORT | TCP_DST_PORT if int => Kind::AltDstPort,
            SRC_V4 if len == 4 => Kind::SrcV4,
            DST_V4 if len == 4 => Kind::DstV4,
            SRC_V6 if len == 16 => Kind::SrcV6,
            DST_V6 if len == 16 => Kind::DstV6,
            IP_VERSION if int => Kind::IpVersion,
            INGRESS_IF if int => Kind::InIf,
            EGRESS_IF if int => Kind::OutIf,
            INGRESS_PHYS_IF if int => Kind::InPhysIf,
            EGRESS_PHYS_IF if int => Kind::OutPhysIf,
            LAST_SWITCHED if int => Kind::LastSwitched,
            FIRST_SWITCHED if int => Kind::FirstSwitched,
            FLOW_START_SECONDS if int => Kind::StartSeconds,
            FLOW_END_SECONDS if int => Kind::EndSeconds,
            FLOW_START_MS if int => Kind::StartMs,
            FLOW_END_MS if int => Kind::EndMs,
            FLOW_START_US | FLOW_START_NS if len == 8 => Kind::StartNtp,
            FLOW_END_US | FLOW_END_NS if len == 8 => Kind::EndNtp,
            FLOW_START_DELTA_US if int => Kind::StartDeltaUs,
            FLOW_END_DELTA_US if int => Kind::EndDeltaUs,
            SYSTEM_INIT_MS if int => Kind::SystemInitMs,
            SRC_MAC if len == 6 => Kind::SrcMac,
            DST_MAC if len == 6 => Kind::DstMac,
            POST_SRC_MAC if len == 6 => Kind::PostSrcMac,
            POST_DST_MAC if len == 6 => Kind::PostDstMac,
            VLAN | DOT1Q_VLAN if int => Kind::Vlan,
            DOT1Q_CUSTOMER_VLAN if int => Kind::CustomerVlan,
            POST_VLAN if int => Kind::PostVlan,
            APPLICATION_ID if len > 0 => Kind::AppId,
            APPLICATION_NAME => Kind::AppName,
            SAMPLING_INTERVAL if int => Kind::SamplingInterval,
            SAMPLER_RANDOM_INTERVAL if int => Kind::RandomInterval,
            SAMPLING_PACKET_INTERVAL if int => Kind::PacketInterval,
            SAMPLING_PACKET_SPACE if int => Kind::PacketSpace,
            SAMPLING_SIZE if int => Kind::SamplingSize,
            SAMPLING_POPULATION if int => Kind::SamplingPopulation,
            SAMPLER_ID | SELECTOR_ID if int => Kind::SamplerId,
            INTERFACE_NAME => Kind::InterfaceName,
            _ => Kind::Extra,
        }
    }
}

/// A big-endian unsigned integer of 1 to 8 bytes (the common sizes read in one load).
#[inline(always)]
fn be_uint(v: &[u8]) -> u64 {
    match v.len() {
        1 => v[0] as u64,
        2 => u16::from_be_bytes([v[0], v[1]]) as u64,
        4 => u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as u64,
        8 => u64::from_be_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]),
        _ => v.iter().fold(0u64, |a, &b| a << 8 | b as u64),
    }
}

/// Keeps an element sonde does not interpret, to be shown by number; all-zero values (an ICMP
/// type of a TCP flow, an unset application id) say nothing and are not kept.
#[inline(always)]
fn keep_extra(f: &mut CollectedFlow, pen: u32, id: u16, v: &[u8]) {
    if v.iter().any(|&b| b != 0) {
        f.extra.push((pen, id, v.to_vec()));
    }
}

impl Acc {
    pub fn new() -> Acc {
        Acc {
            ints: [0; INTS],
            has: 0,
            more: More::default(),
        }
    }

    /// Forgets the last record.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.has = 0;
        self.more = More::default();
    }

    #[inline(always)]
    fn get(&self, i: Int) -> Option<u64> {
        (self.has & 1 << i as u32 != 0).then(|| self.ints[i as usize])
    }

    #[inline(always)]
    fn set(&mut self, i: Int, x: u64) {
        self.ints[i as usize] = x;
        self.has |= 1 << i as u32;
    }

    fn set_opt(&mut self, i: Int, x: Option<u64>) {
        match x {
            Some(x) => self.set(i, x),
            None => self.has &= !(1 << i as u32),
        }
    }

    pub fn sampler_id(&self) -> Option<u64> {
        self.get(Int::SamplerId)
    }

    pub fn if_index(&self) -> Option<u32> {
        self.get(Int::IfIndex).map(|x| x as u32)
    }

    pub fn system_init_ms(&self) -> Option<u64> {
        self.get(Int::SystemInitMs)
    }

    pub fn take_if_name(&mut self) -> Option<String> {
        self.more.if_name.take()
    }

    /// One field of the record whose meaning `kind` was worked out by [`Kind::of`] for its
    /// enterprise number, id and this value's length; the flow's own fields go into `f`.
    #[inline(always)]
    pub fn apply(&mut self, f: &mut CollectedFlow, kind: Kind, pen: u32, id: u16, v: &[u8]) {
        // Kinds read as integers are only given to values of 1 to 8 bytes (Kind::of).
        let u = || be_uint(v);
        let more = &mut self.more;
        match kind {
            Kind::Ignore => {}
            Kind::Extra => keep_extra(f, pen, id, v),
            Kind::ScopeInterface => self.set_opt(Int::IfIndex, uint(v).map(|x| x as u32 as u64)),
            Kind::RevBytesDelta => self.set(Int::RevBytesDelta, u()),
            Kind::RevPktsDelta => self.set(Int::RevPktsDelta, u()),
            Kind::RevBytesTotal => self.set(Int::RevBytesTotal, u()),
            Kind::RevPktsTotal => self.set(Int::RevPktsTotal, u()),
            Kind::BytesDelta => self.set(Int::BytesDelta, u()),
            Kind::PktsDelta => self.set(Int::PktsDelta, u()),
            Kind::BytesTotal => self.set(Int::BytesTotal, u()),
            Kind::PktsTotal => self.set(Int::PktsTotal, u()),
            Kind::Proto => f.proto = u() as u8,
            Kind::Tos => f.tos = u() as u8,
            Kind::TcpFlags => f.tcp_flags = u() as u8,
            Kind::RevTcpFlags => f.rev_tcp_flags = u() as u8,
            Kind::IcmpType => f.icmp_type_code = u() as u16,
            Kind::SrcPort => f.sport = u() as u16,
            Kind::DstPort => f.dport = u() as u16,
            Kind::AltSrcPort => more.ports_alt.get_or_insert((0, 0)).0 = u() as u16,
            Kind::AltDstPort => more.ports_alt.get_or_insert((0, 0)).1 = u() as u16,
            Kind::SrcV4 => more.v4.get_or_insert(([0; 4], [0; 4])).0 = addr4(v).unwrap_or_default(),
            Kind::DstV4 => more.v4.get_or_insert(([0; 4], [0; 4])).1 = addr4(v).unwrap_or_default(),
            Kind::SrcV6 => {
                more.v6.get_or_insert(([0; 16], [0; 16])).0 = addr16(v).unwrap_or_default()
            }
            Kind::DstV6 => {
                more.v6.get_or_insert(([0; 16], [0; 16])).1 = addr16(v).unwrap_or_default()
            }
            Kind::IpVersion => self.set(Int::IpVersion, u() as u8 as u64),
            Kind::InIf => {
                f.in_if = u() as u32;
                self.set(Int::IfIndex, f.in_if as u64);
            }
            Kind::OutIf => f.out_if = u() as u32,
            Kind::InPhysIf => more.in_phys = u() as u32,
            Kind::OutPhysIf => more.out_phys = u() as u32,
            Kind::LastSwitched => self.set(Int::UptimeLast, u() as u32 as u64),
            Kind::FirstSwitched => self.set(Int::UptimeFirst, u() as u32 as u64),
            Kind::StartSeconds => self.set(Int::StartMs, u().saturating_mul(1000)),
            Kind::EndSeconds => self.set(Int::EndMs, u().saturating_mul(1000)),
            Kind::StartMs => self.set(Int::StartMs, u()),
            Kind::EndMs => self.set(Int::EndMs, u()),
            Kind::StartNtp => self.set_opt(Int::StartMs, ntp_ms(v)),
            Kind::EndNtp => self.set_opt(Int::EndMs, ntp_ms(v)),
            Kind::StartDeltaUs => self.set(Int::StartDeltaUs, u()),
            Kind::EndDeltaUs => self.set(Int::EndDeltaUs, u()),
            Kind::SystemInitMs => self.set(Int::SystemInitMs, u()),
            Kind::SrcMac => f.src_mac = mac(v),
            Kind::DstMac => f.dst_mac = mac(v),
            Kind::PostSrcMac => more.post_src_mac = mac(v),
            Kind::PostDstMac => more.post_dst_mac = mac(v),
            Kind::Vlan => {
                if f.vlan == 0 {
                    f.vlan = (u() & 0x0fff) as u16;
                }
            }
            Kind::CustomerVlan => {
                more.customer_vlan = (u() & 0x0fff) as u16;
                keep_extra(f, 0, id, v);
            }
            Kind::PostVlan => more.post_vlan = (u() & 0x0fff) as u16,
            Kind::AppId => {
                // classificationEngineId (1 byte) then a selector: keep the low 32 bits.
                let tail = &v[v.len().saturating_sub(4)..];
                f.app_id = uint(tail).unwrap_or(0) as u32;
                keep_extra(f, 0, id, v);
            }
            Kind::AppName => f.app_name = Some(text(v)),
            Kind::SamplingInterval => self.set(Int::SamplingInterval, u()),
            Kind::RandomInterval => self.set(Int::RandomInterval, u()),
            Kind::PacketInterval => self.set(Int::PacketInterval, u()),
            Kind::PacketSpace => self.set(Int::PacketSpace, u()),
            Kind::SamplingSize => self.set(Int::SamplingSize, u()),
            Kind::SamplingPopulation => self.set(Int::SamplingPopulation, u()),
            Kind::SamplerId => self.set(Int::SamplerId, u()),
            Kind::InterfaceName => more.if_name = Some(text(v)),
        }
    }

    /// The sampling rate this record announces (1 in N), if any.
    pub fn announced_rate(&self) -> Option<u32> {
        // Cheap test first: data records of unsampled exporters announce nothing.
        const SAMPLING: u32 = 1 << Int::SamplingInterval as u32
            | 1 << Int::RandomInterval as u32
            | 1 << Int::PacketInterval as u32
            | 1 << Int::SamplingSize as u32;
        if self.has & SAMPLING == 0 {
            return None;
        }
        let clamp = |x: u64| x.clamp(1, u32::MAX as u64) as u32;
        if let (Some(size), Some(pop)) = (
            self.get(Int::SamplingSize),
            self.get(Int::SamplingPopulation),
        ) {
            if size > 0 && pop > 0 {
                return Some(clamp(pop / size));
            }
        }
        if let (Some(i), Some(s)) = (self.get(Int::PacketInterval), self.get(Int::PacketSpace)) {
            if let Some(r) = i.saturating_add(s).checked_div(i) {
                return Some(clamp(r));
            }
        }
        if let Some(x) = self.get(Int::SamplingInterval).filter(|&x| x > 0) {
            return Some(clamp(x));
        }
        if let Some(x) = self.get(Int::RandomInterval).filter(|&x| x > 0) {
            return Some(clamp(x));
        }
        None
    }

    /// Completes the flow `f` the record's fields were applied to: addresses, counters ×
    /// `rate`, timestamps. `export_ms`: export time of the message; `uptime_ms`: v9 sysUptime
    /// of the header; `system_init_ms`: IPFIX system init time known from options (for 21/22
    /// in IPFIX).
    pub fn finish(
        &self,
        f: &mut CollectedFlow,
        rate: u32,
        export_ms: u64,
        uptime_ms: Option<u32>,
        system_init_ms: Option<u64>,
    ) {
        let m = &self.more;
        let v4_set = m.v4.is_some_and(|(s, d)| s != [0; 4] || d != [0; 4]);
        let v6_set = m.v6.is_some_and(|(s, d)| s != [0; 16] || d != [0; 16]);
        let ip_version = self.get(Int::IpVersion).map(|v| v as u8);
        let version = match ip_version {
            Some(4) if m.v4.is_some() => 4,
            Some(6) if m.v6.is_some() => 6,
            _ if v4_set => 4,
            _ if v6_set => 6,
            _ if m.v4.is_some() => 4,
            _ if m.v6.is_some() => 6,
            _ => 0,
        };
        match version {
            4 => {
                let (s, d) = m.v4.unwrap_or_default();
                f.src[..4].copy_from_slice(&s);
                f.dst[..4].copy_from_slice(&d);
                f.ip_version = 4;
            }
            6 => {
                let (s, d) = m.v6.unwrap_or_default();
                f.src = s;
                f.dst = d;
                f.ip_version = 6;
            }
            _ => f.ip_version = ip_version.filter(|v| *v == 4 || *v == 6).unwrap_or(0),
        }
        if f.sport == 0 && f.dport == 0 {
            if let Some((s, d)) = m.ports_alt {
                f.sport = s;
                f.dport = d;
            }
        }
        if f.in_if == 0 {
            f.in_if = m.in_phys;
        }
        if f.out_if == 0 {
            f.out_if = m.out_phys;
        }
        if f.vlan == 0 {
            f.vlan = if m.customer_vlan != 0 {
                m.customer_vlan
            } else {
                m.post_vlan
            };
        }
        if f.src_mac.is_none() {
            f.src_mac = m.post_src_mac;
        }
        if f.dst_mac.is_none() {
            f.dst_mac = m.post_dst_mac;
        }
        let r = rate.max(1) as u64;
        f.sampling = rate.max(1);
        let counter = |delta: Int, total: Int| {
            self.get(delta)
                .or(self.get(total))
                .unwrap_or(0)
                .saturating_mul(r)
        };
        f.bytes = counter(Int::BytesDelta, Int::BytesTotal);
        f.packets = counter(Int::PktsDelta, Int::PktsTotal);
        f.rev_bytes = counter(Int::RevBytesDelta, Int::RevBytesTotal);
        f.rev_packets = counter(Int::RevPktsDelta, Int::RevPktsTotal);

        let init = self.get(Int::SystemInitMs).or(system_init_ms);
        let rel = |t: Option<u64>| -> Option<u64> {
            let t = t? as u32;
            match (uptime_ms, init) {
                (Some(up), _) => Some(export_ms.saturating_sub(up.wrapping_sub(t) as u64)),
                (None, Some(i)) => Some(i.saturating_add(t as u64)),
                _ => None,
            }
        };
        let delta = |d: Option<u64>| d.map(|us| export_ms.saturating_sub(us / 1000));
        f.first_ms = self
            .get(Int::StartMs)
            .or_else(|| rel(self.get(Int::UptimeFirst)))
            .or_else(|| delta(self.get(Int::StartDeltaUs)))
            .unwrap_or(0);
        f.last_ms = self
            .get(Int::EndMs)
            .or_else(|| rel(self.get(Int::UptimeLast)))
            .or_else(|| delta(self.get(Int::EndDeltaUs)))
            .unwrap_or(0);
    }
}
