//! Encoding sonde's flows for export: NetFlow v5, NetFlow v9 (RFC 3954) and IPFIX (RFC 7011).
//!
//! A pure library: [`Exporter::encode`] turns [`ExportFlow`]s into complete datagrams (UDP) or
//! messages (IPFIX over TCP), each at most [`Exporter::mtu`] bytes, with the templates resent
//! as configured and the sequence numbers each format defines. Sending them is the caller's job.
//!
//! # Records and directions
//!
//! An [`ExportFlow`] is a biflow (client → server forward, server → client reverse).
//!
//! * NetFlow v5 and v9 have no reverse counters: the flow becomes one record client → server
//!   and, when the reverse counters are not both zero, a second record server → client
//!   (addresses, ports and MACs swapped, `rev_tcp_flags`, same start and end times).
//! * IPFIX: [`IpfixMode::Biflow`] (the default) exports one RFC 5103 biflow record: the
//!   forward elements plus reverseOctetDeltaCount, reversePacketDeltaCount and
//!   reverseTcpControlBits (private enterprise 29305, the enterprise bit set). nfdump 1.7 maps
//!   the reverse octet/packet counts to its output counters (`obyt`/`opkt`), so both directions
//!   are visible in `nfdump -r`, and tshark decodes them as "Reverse" fields. nfdump has a
//!   single TCP-flags field and stores reverseTcpControlBits in it too: the template puts it
//!   before tcpControlBits so that the client's flags, written last, are the ones shown.
//!   [`IpfixMode::Unidirectional`] exports two records per flow like v9, for collectors
//!   that ignore enterprise elements.
//!
//! # Application id (IE 95 applicationId)
//!
//! Encoded per RFC 6759 as 9 bytes, in v9 (Cisco's APPLICATION_ID, same number) and IPFIX:
//! classification engine id 20 (PANA-L7-PEN: a proprietary layer-7 registry named by its
//! private enterprise number), the PEN 35632 (ntop, whose nDPI numbers sonde uses), then the
//! 4-byte selector: [`ExportFlow::app_id`] big-endian. A flow without an application
//! (`app_id == 0`) gets 9 zero bytes (engine 0 = invalid/unknown). nfdump shows the element as
//! its "nbar application ID", tshark as the classification engine and selector.
//! IPFIX also carries applicationName (IE 96) as a variable-length string (at most
//! [`MAX_APP_NAME`] bytes, cut at a character boundary), e.g. `TLS.Google`; v9 has no
//! variable-length fields and does not carry the name.
//!
//! # Elements
//!
//! v9: IN_BYTES(1) and IN_PKTS(2) as 8 bytes, PROTOCOL(4), SRC_TOS(5), TCP_FLAGS(6, 1 byte),
//! L4_SRC_PORT(7), IPV4_SRC_ADDR(8) / IPV6_SRC_ADDR(27), INPUT_SNMP(10) = 0, L4_DST_PORT(11),
//! IPV4_DST_ADDR(12) / IPV6_DST_ADDR(28), OUTPUT_SNMP(14) = 0, SRC_AS(16) and DST_AS(17) as 4
//! bytes, LAST_SWITCHED(21),
//! FIRST_SWITCHED(22), ICMP_TYPE(32, type × 256 + code, both IP versions), IN_SRC_MAC(56),
//! IN_DST_MAC(80: the observed frame's destination; 57 OUT_DST_MAC would be the MAC after
//! forwarding), SRC_VLAN(58), IP_PROTOCOL_VERSION(60), flowEndReason(136), APPLICATION_ID(95).
//!
//! IPFIX: octetDeltaCount(1), packetDeltaCount(2) (8 bytes), [reverse 1, 2],
//! flowStartMilliseconds(152), flowEndMilliseconds(153), sourceIPv4Address(8) /
//! sourceIPv6Address(27), destinationIPv4Address(12) / destinationIPv6Address(28),
//! sourceTransportPort(7), destinationTransportPort(11), bgpSourceAsNumber(16),
//! bgpDestinationAsNumber(17) (4 bytes), protocolIdentifier(4),
//! ipClassOfService(5), [reverse tcpControlBits(6)], tcpControlBits(6, 2 bytes),
//! sourceMacAddress(56), destinationMacAddress(80), vlanId(58), icmpTypeCodeIPv4(32) /
//! icmpTypeCodeIPv6(139), ipVersion(60), flowEndReason(136), applicationId(95),
//! applicationName(96, variable length). No set padding.
//!
//! v5: IPv4 only (IPv6 flows are skipped and counted in [`ExportStats::skipped_ipv6`]), at most
//! 30 records per datagram (28 in 1400 bytes); nexthop, ifIndexes and masks 0, AS numbers in
//! 16 bits (a 4-byte one as AS_TRANS, 23456); counters
//! and times saturate at 2^32 - 1 ([`ExportStats::clamped`]); an ICMP flow's type/code goes in
//! the destination port, as routers do.
//!
//! # Times
//!
//! v5 and v9 times are sysUpTime milliseconds: `now_ms - boot_ms` in the header,
//! `first_ms - boot_ms` and `last_ms - boot_ms` in the records (saturating at 0, wrapping at
//! 2^32 like a router's uptime). IPFIX uses flowStartMilliseconds / flowEndMilliseconds (IE
//! 152/153, milliseconds since the Unix epoch), and the export time in whole seconds.
//!
//! # Sequence numbers
//!
//! * v5 `flow_sequence`: flow records sent before this datagram.
//! * v9 `package_sequence`: export packets sent before this one (templates-only ones included).
//! * IPFIX `sequenceNumber`: data records sent before this message in this observation domain
//!   (one exporter = one domain), modulo 2^32.
//!
//! # Templates
//!
//! v9 and IPFIX use template ids [`TEMPLATE_V4`]/[`TEMPLATE_V6`] (IPFIX unidirectional mode:
//! [`TEMPLATE_V4_UNI`]/[`TEMPLATE_V6_UNI`]); both templates are always sent together, at the
//! start of a datagram, before its data. Over UDP they go in the first datagram and again when
//! `template_refresh_packets` datagrams have been sent since or `template_refresh_ms` have
//! passed (0 disables either). Over TCP they are sent once: in the first message, or by
//! [`Exporter::templates_now`] which a caller calls on each new connection.

use crate::record::ExportFlow;

/// UDP payload size used when none is configured.
pub const DEFAULT_MTU: usize = 1400;
/// The longest applicationName exported (bytes); longer names are cut at a char boundary.
pub const MAX_APP_NAME: usize = 128;
/// Template ids for IPv4 and IPv6 records (v9, IPFIX biflow mode).
pub const TEMPLATE_V4: u16 = 256;
pub const TEMPLATE_V6: u16 = 257;
/// Template ids of IPFIX's unidirectional mode (distinct, so that a collector holding the
/// other mode's template from a previous run never misreads a record).
pub const TEMPLATE_V4_UNI: u16 = 258;
pub const TEMPLATE_V6_UNI: u16 = 259;
/// RFC 5103's private enterprise number for reverse information elements.
pub const REVERSE_PEN: u32 = 29305;
/// ntop's private enterprise number, naming nDPI's protocol registry in applicationId.
pub const NTOP_PEN: u32 = 35632;
/// RFC 6759 classification engine id PANA-L7-PEN.
pub const ENGINE_PANA_L7_PEN: u8 = 20;

const V5_HEADER: usize = 24;
const V5_RECORD: usize = 48;
const V5_MAX_RECORDS: usize = 30;
const V9_HEADER: usize = 20;
const IPFIX_HEADER: usize = 16;
const SET_HEADER: usize = 4;
const APP_ID_LEN: u16 = 9;
const VARLEN: u16 = 65535;

/// The export format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    NetflowV5,
    NetflowV9,
    Ipfix,
}

/// How the messages travel: it decides the template policy and the largest message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Templates resent periodically; messages at most `mtu` (≤ 65507) bytes.
    #[default]
    Udp,
    /// Templates once per connection; messages up to `mtu` (≤ 65535) bytes.
    Tcp,
}

/// How IPFIX carries the two directions of a flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpfixMode {
    /// One RFC 5103 biflow record with reverse counters (read completely by nfdump 1.7).
    #[default]
    Biflow,
    /// Two records (client → server, server → client when it has counters), no enterprise
    /// elements.
    Unidirectional,
}

/// Exporter settings. [`ExporterConfig::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExporterConfig {
    pub format: ExportFormat,
    pub transport: Transport,
    /// Largest datagram / message in bytes (UDP payload). Raised to what one datagram with the
    /// templates and one record needs, lowered to what the format's length field allows.
    pub mtu: usize,
    /// IPFIX observation domain id, v9 source id; v5: engine_type (bits 8..16) and engine_id
    /// (low 8 bits).
    pub domain: u32,
    /// v9/IPFIX over UDP: resend the templates after this many datagrams (0: never by count).
    pub template_refresh_packets: u32,
    /// v9/IPFIX over UDP: resend the templates after this many milliseconds (0: never by time).
    pub template_refresh_ms: u64,
    /// When the exporter started, milliseconds since the Unix epoch (v5/v9 sysUpTime origin).
    pub boot_ms: u64,
    pub ipfix_mode: IpfixMode,
}

impl ExporterConfig {
    /// Defaults: UDP, 1400-byte datagrams, domain 0, templates every 20 datagrams or 60 s,
    /// boot time 0 (set it to the exporter's start), IPFIX biflow records.
    pub fn new(format: ExportFormat) -> Self {
        ExporterConfig {
            format,
            transport: Transport::Udp,
            mtu: DEFAULT_MTU,
            domain: 0,
            template_refresh_packets: 20,
            template_refresh_ms: 60_000,
            boot_ms: 0,
            ipfix_mode: IpfixMode::Biflow,
        }
    }
}

/// Counters of what the exporter produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Flows given to [`Exporter::encode`] and exported (at least one record).
    pub flows: u64,
    /// Data records written.
    pub records: u64,
    /// Datagrams / messages produced (templates-only ones included).
    pub messages: u64,
    /// Datagrams / messages that carried the templates.
    pub template_messages: u64,
    /// IPv6 flows skipped because NetFlow v5 carries IPv4 only.
    pub skipped_ipv6: u64,
    /// v5 records whose packets, bytes or times did not fit in 32 bits (saturated).
    pub clamped: u64,
}

/// One record as written: a direction of an [`ExportFlow`].
struct View<'a> {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    packets: u64,
    bytes: u64,
    rev_packets: u64,
    rev_bytes: u64,
    flags: u8,
    rev_flags: u8,
    icmp: u16,
    src_as: u32,
    dst_as: u32,
    f: &'a ExportFlow,
}

impl<'a> View<'a> {
    /// The forward record; `biflow` keeps the reverse counters in it.
    fn forward(f: &'a ExportFlow, biflow: bool) -> Self {
        View {
            v6: f.ip_version == 6,
            src: f.src,
            dst: f.dst,
            sport: f.sport,
            dport: f.dport,
            src_mac: f.src_mac,
            dst_mac: f.dst_mac,
            packets: f.packets,
            bytes: f.bytes,
            rev_packets: if biflow { f.rev_packets } else { 0 },
            rev_bytes: if biflow { f.rev_bytes } else { 0 },
            flags: f.tcp_flags,
            rev_flags: if biflow { f.rev_tcp_flags } else { 0 },
            icmp: f.icmp_type_code,
            src_as: f.src_as,
            dst_as: f.dst_as,
            f,
        }
    }

    /// The server → client record (ICMP type/code unknown for the reply: 0).
    fn reverse(f: &'a ExportFlow) -> Self {
        View {
            v6: f.ip_version == 6,
            src: f.dst,
            dst: f.src,
            sport: f.dport,
            dport: f.sport,
            src_mac: f.dst_mac,
            dst_mac: f.src_mac,
            packets: f.rev_packets,
            bytes: f.rev_bytes,
            rev_packets: 0,
            rev_bytes: 0,
            flags: f.rev_tcp_flags,
            rev_flags: 0,
            icmp: 0,
            src_as: f.dst_as,
            dst_as: f.src_as,
            f,
        }
    }
}

fn has_reverse(f: &ExportFlow) -> bool {
    f.rev_packets > 0 || f.rev_bytes > 0
}

/// The information elements sonde writes; numbering and sizes depend on the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ie {
    Bytes,
    Packets,
    RevBytes,
    RevPackets,
    Proto,
    Tos,
    TcpFlags,
    RevTcpFlags,
    SrcPort,
    DstPort,
    SrcV4,
    DstV4,
    SrcV6,
    DstV6,
    InIf,
    OutIf,
    FirstUptime,
    LastUptime,
    StartMs,
    EndMs,
    Icmp,
    IcmpV6,
    SrcMac,
    DstMac,
    Vlan,
    IpVersion,
    EndReason,
    AppId,
    AppName,
    SrcAs,
    DstAs,
}

/// (element id, length, enterprise number or 0) of an element in a template.
fn ie_spec(ie: Ie, ipfix: bool) -> (u16, u16, u32) {
    match ie {
        Ie::Bytes => (1, 8, 0),
        Ie::Packets => (2, 8, 0),
        Ie::RevBytes => (1, 8, REVERSE_PEN),
        Ie::RevPackets => (2, 8, REVERSE_PEN),
        Ie::Proto => (4, 1, 0),
        Ie::Tos => (5, 1, 0),
        // tcpControlBits is 2 bytes in IPFIX (RFC 7125), 1 byte in v9.
        Ie::TcpFlags => (6, if ipfix { 2 } else { 1 }, 0),
        Ie::RevTcpFlags => (6, 2, REVERSE_PEN),
        Ie::SrcPort => (7, 2, 0),
        Ie::DstPort => (11, 2, 0),
        Ie::SrcV4 => (8, 4, 0),
        Ie::DstV4 => (12, 4, 0),
        Ie::SrcV6 => (27, 16, 0),
        Ie::DstV6 => (28, 16, 0),
        Ie::InIf => (10, 4, 0),
        Ie::OutIf => (14, 4, 0),
        Ie::FirstUptime => (22, 4, 0),
        Ie::LastUptime => (21, 4, 0),
        Ie::StartMs => (152, 8, 0),
        Ie::EndMs => (153, 8, 0),
        Ie::Icmp => (32, 2, 0),
        Ie::IcmpV6 => (139, 2, 0),
        Ie::SrcMac => (56, 6, 0),
        // destinationMacAddress / v9 IN_DST_MAC (80): the observed frame's destination (57,
        // OUT_DST_MAC / postDestinationMacAddress, is the MAC after forwarding).
        Ie::DstMac => (80, 6, 0),
        Ie::Vlan => (58, 2, 0),
        Ie::IpVersion => (60, 1, 0),
        Ie::EndReason => (136, 1, 0),
        Ie::AppId => (95, APP_ID_LEN, 0),
        Ie::AppName => (96, VARLEN, 0),
        Ie::SrcAs => (16, 4, 0),
        Ie::DstAs => (17, 4, 0),
    }
}

fn v9_fields(v6: bool) -> Vec<Ie> {
    let mut v = vec![
        Ie::Bytes,
        Ie::Packets,
        Ie::Proto,
        Ie::Tos,
        Ie::TcpFlags,
        Ie::SrcPort,
    ];
    v.push(if v6 { Ie::SrcV6 } else { Ie::SrcV4 });
    v.extend([Ie::InIf, Ie::DstPort]);
    v.push(if v6 { Ie::DstV6 } else { Ie::DstV4 });
    v.extend([
        Ie::OutIf,
        Ie::SrcAs,
        Ie::DstAs,
        Ie::LastUptime,
        Ie::FirstUptime,
        Ie::Icmp,
        Ie::SrcMac,
        Ie::DstMac,
        Ie::Vlan,
        Ie::IpVersion,
        Ie::EndReason,
        Ie::AppId,
    ]);
    v
}

fn ipfix_fields(v6: bool, biflow: bool) -> Vec<Ie> {
    let mut v = vec![Ie::Bytes, Ie::Packets];
    if biflow {
        v.extend([Ie::RevBytes, Ie::RevPackets]);
    }
    v.extend([Ie::StartMs, Ie::EndMs]);
    if v6 {
        v.extend([Ie::SrcV6, Ie::DstV6]);
    } else {
        v.extend([Ie::SrcV4, Ie::DstV4]);
    }
    v.extend([
        Ie::SrcPort,
        Ie::DstPort,
        Ie::SrcAs,
        Ie::DstAs,
        Ie::Proto,
        Ie::Tos,
    ]);
    if biflow {
        // Before the forward flags: nfdump 1.7 stores reverseTcpControlBits in its (only)
        // flags field, and the element that comes last wins.
        v.push(Ie::RevTcpFlags);
    }
    v.push(Ie::TcpFlags);
    v.extend([
        Ie::SrcMac,
        Ie::DstMac,
        Ie::Vlan,
        if v6 { Ie::IcmpV6 } else { Ie::Icmp },
        Ie::IpVersion,
        Ie::EndReason,
        Ie::AppId,
        Ie::AppName,
    ]);
    v
}

/// The (element id, enterprise number) of every element sonde's IPFIX templates carry (IPv4
/// and IPv6, biflow and uniflow), for checks against the flow record's schema.
pub fn ipfix_elements() -> Vec<(u16, u32)> {
    let mut out: Vec<(u16, u32)> = Vec::new();
    for v6 in [false, true] {
        for biflow in [false, true] {
            for ie in ipfix_fields(v6, biflow) {
                let (id, _, pen) = ie_spec(ie, true);
                if !out.contains(&(id, pen)) {
                    out.push((id, pen));
                }
            }
        }
    }
    out
}

/// `name` cut to at most [`MAX_APP_NAME`] bytes at a char boundary.
fn app_name(name: &str) -> &str {
    if name.len() <= MAX_APP_NAME {
        return name;
    }
    let mut end = MAX_APP_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// An AS number in v5's 16 bits: a 4-byte one becomes AS_TRANS (23456), as RFC 6793 has
/// 2-byte speakers say it.
fn as16(asn: u32) -> u16 {
    u16::try_from(asn).unwrap_or(23456)
}

/// Milliseconds since boot as a 32-bit sysUpTime (saturating below 0, wrapping at 2^32).
fn uptime(ms: u64, boot_ms: u64) -> u32 {
    ms.saturating_sub(boot_ms) as u32
}

fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn set16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
fn set32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn write_ie(b: &mut Vec<u8>, ie: Ie, r: &View, boot_ms: u64, ipfix: bool) {
    let f = r.f;
    match ie {
        Ie::Bytes => put64(b, r.bytes),
        Ie::Packets => put64(b, r.packets),
        Ie::RevBytes => put64(b, r.rev_bytes),
        Ie::RevPackets => put64(b, r.rev_packets),
        Ie::Proto => b.push(f.proto),
        Ie::Tos => b.push(f.tos),
        Ie::TcpFlags if ipfix => put16(b, r.flags as u16),
        Ie::TcpFlags => b.push(r.flags),
        Ie::RevTcpFlags => put16(b, r.rev_flags as u16),
        Ie::SrcPort => put16(b, r.sport),
        Ie::DstPort => put16(b, r.dport),
        Ie::SrcV4 => b.extend_from_slice(&r.src[..4]),
        Ie::DstV4 => b.extend_from_slice(&r.dst[..4]),
        Ie::SrcV6 => b.extend_from_slice(&r.src),
        Ie::DstV6 => b.extend_from_slice(&r.dst),
        Ie::InIf | Ie::OutIf => put32(b, 0),
        Ie::SrcAs => put32(b, r.src_as),
        Ie::DstAs => put32(b, r.dst_as),
        Ie::FirstUptime => put32(b, uptime(f.first_ms, boot_ms)),
        Ie::LastUptime => put32(b, uptime(f.last_ms, boot_ms)),
        Ie::StartMs => put64(b, f.first_ms),
        Ie::EndMs => put64(b, f.last_ms),
        Ie::Icmp | Ie::IcmpV6 => put16(b, r.icmp),
        Ie::SrcMac => b.extend_from_slice(&r.src_mac),
        Ie::DstMac => b.extend_from_slice(&r.dst_mac),
        Ie::Vlan => put16(b, f.vlan),
        Ie::IpVersion => b.push(if r.v6 { 6 } else { 4 }),
        Ie::EndReason => b.push(f.end_reason),
        Ie::AppId => {
            if f.app_id == 0 {
                b.extend_from_slice(&[0; APP_ID_LEN as usize]);
            } else {
                b.push(ENGINE_PANA_L7_PEN);
                put32(b, NTOP_PEN);
                put32(b, f.app_id);
            }
        }
        Ie::AppName => {
            let name = app_name(&f.app_name).as_bytes();
            if name.len() < 255 {
                b.push(name.len() as u8);
            } else {
                b.push(255);
                put16(b, name.len() as u16);
            }
            b.extend_from_slice(name);
        }
    }
}

/// One template: its id and elements.
struct Template {
    id: u16,
    fields: Vec<Ie>,
}

/// A datagram / message under construction (v9 and IPFIX).
struct Msg {
    buf: Vec<u8>,
    /// Start of the open data set and its id.
    set: Option<(usize, u16)>,
    /// Data records in it, and template records (v9 counts both in its header).
    records: u32,
    template_records: u32,
}

/// Encodes [`ExportFlow`]s as NetFlow v5, v9 or IPFIX; keeps the sequence numbers and the
/// template schedule of one exporter (one observation domain).
pub struct Exporter {
    cfg: ExporterConfig,
    mtu: usize,
    ipfix: bool,
    templates: Vec<Template>,
    /// v5: flow records sent; IPFIX: data records sent (both mod 2^32); v9: packets sent.
    sequence: u32,
    templates_due: bool,
    last_templates_ms: u64,
    messages_since_templates: u32,
    stats: ExportStats,
}

impl Exporter {
    pub fn new(cfg: ExporterConfig) -> Self {
        let ipfix = cfg.format == ExportFormat::Ipfix;
        let templates = match cfg.format {
            ExportFormat::NetflowV5 => Vec::new(),
            ExportFormat::NetflowV9 => vec![
                Template {
                    id: TEMPLATE_V4,
                    fields: v9_fields(false),
                },
                Template {
                    id: TEMPLATE_V6,
                    fields: v9_fields(true),
                },
            ],
            ExportFormat::Ipfix => {
                let bi = cfg.ipfix_mode == IpfixMode::Biflow;
                let (v4, v6) = if bi {
                    (TEMPLATE_V4, TEMPLATE_V6)
                } else {
                    (TEMPLATE_V4_UNI, TEMPLATE_V6_UNI)
                };
                vec![
                    Template {
                        id: v4,
                        fields: ipfix_fields(false, bi),
                    },
                    Template {
                        id: v6,
                        fields: ipfix_fields(true, bi),
                    },
                ]
            }
        };
        let mut e = Exporter {
            mtu: 0,
            ipfix,
            templates,
            sequence: 0,
            templates_due: true,
            last_templates_ms: 0,
            messages_since_templates: 0,
            stats: ExportStats::default(),
            cfg,
        };
        e.mtu = e.effective_mtu();
        e
    }

    /// The configured MTU, within what the format allows and what one datagram needs.
    fn effective_mtu(&self) -> usize {
        let max = match self.cfg.transport {
            Transport::Udp => 65507,
            Transport::Tcp => 65535,
        };
        let min = match self.cfg.format {
            ExportFormat::NetflowV5 => V5_HEADER + V5_RECORD,
            _ => {
                let header = if self.ipfix { IPFIX_HEADER } else { V9_HEADER };
                let longest = self
                    .templates
                    .iter()
                    .map(|t| self.record_len_max(t))
                    .max()
                    .unwrap_or(0);
                // Templates, one set header and the longest record with v9's padding.
                header + self.template_set().len() + SET_HEADER + longest + 3
            }
        };
        self.cfg.mtu.clamp(min, max)
    }

    fn record_len_max(&self, t: &Template) -> usize {
        t.fields
            .iter()
            .map(|&ie| match ie_spec(ie, self.ipfix).1 {
                VARLEN => 3 + MAX_APP_NAME,
                n => n as usize,
            })
            .sum()
    }

    /// The largest datagram / message this exporter produces.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    pub fn config(&self) -> &ExporterConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &ExportStats {
        &self.stats
    }

    /// The template set / flowset (v9: flowset id 0, IPFIX: set id 2) with both templates.
    fn template_set(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put16(&mut b, if self.ipfix { 2 } else { 0 });
        put16(&mut b, 0);
        for t in &self.templates {
            put16(&mut b, t.id);
            put16(&mut b, t.fields.len() as u16);
            for &ie in &t.fields {
                let (id, len, pen) = ie_spec(ie, self.ipfix);
                if pen != 0 {
                    put16(&mut b, id | 0x8000);
                    put16(&mut b, len);
                    put32(&mut b, pen);
                } else {
                    put16(&mut b, id);
                    put16(&mut b, len);
                }
            }
        }
        let len = b.len() as u16;
        set16(&mut b, 2, len);
        b
    }

    /// A message holding only the templates, for a new TCP connection (or to send at once over
    /// UDP). It counts as a templates refresh. Empty for NetFlow v5, which has none.
    pub fn templates_now(&mut self, now_ms: u64) -> Vec<u8> {
        if self.cfg.format == ExportFormat::NetflowV5 {
            return Vec::new();
        }
        let mut m = self.start_msg(now_ms, true);
        self.finish_msg(&mut m, now_ms);
        m.buf
    }

    /// Whether the next message must carry the templates.
    fn templates_needed(&self, now_ms: u64) -> bool {
        if self.templates_due {
            return true;
        }
        if self.cfg.transport == Transport::Tcp {
            return false;
        }
        (self.cfg.template_refresh_packets > 0
            && self.messages_since_templates >= self.cfg.template_refresh_packets)
            || (self.cfg.template_refresh_ms > 0
                && now_ms.saturating_sub(self.last_templates_ms) >= self.cfg.template_refresh_ms)
    }

    fn start_msg(&mut self, now_ms: u64, templates: bool) -> Msg {
        let mut buf = Vec::with_capacity(self.mtu);
        buf.resize(if self.ipfix { IPFIX_HEADER } else { V9_HEADER }, 0);
        let mut template_records = 0;
        if templates {
            buf.extend_from_slice(&self.template_set());
            template_records = self.templates.len() as u32;
            self.templates_due = false;
            self.last_templates_ms = now_ms;
            self.messages_since_templates = 0;
            self.stats.template_messages += 1;
        }
        Msg {
            buf,
            set: None,
            records: 0,
            template_records,
        }
    }

    fn close_set(&self, m: &mut Msg) {
        if let Some((start, _)) = m.set.take() {
            if !self.ipfix {
                // v9: flowsets padded to a 32-bit boundary.
                let pad = (4 - (m.buf.len() - start) % 4) % 4;
                m.buf.resize(m.buf.len() + pad, 0);
            }
            let len = (m.buf.len() - start) as u16;
            set16(&mut m.buf, start + 2, len);
        }
    }

    fn finish_msg(&mut self, m: &mut Msg, now_ms: u64) {
        self.close_set(m);
        let b = &mut m.buf;
        if self.ipfix {
            set16(b, 0, 10);
            let len = b.len() as u16;
            set16(b, 2, len);
            set32(b, 4, (now_ms / 1000) as u32);
            set32(b, 8, self.sequence);
            set32(b, 12, self.cfg.domain);
            self.sequence = self.sequence.wrapping_add(m.records);
        } else {
            set16(b, 0, 9);
            set16(b, 2, (m.records + m.template_records) as u16);
            set32(b, 4, uptime(now_ms, self.cfg.boot_ms));
            set32(b, 8, (now_ms / 1000) as u32);
            set32(b, 12, self.sequence);
            set32(b, 16, self.cfg.domain);
            self.sequence = self.sequence.wrapping_add(1);
        }
        self.messages_since_templates = self.messages_since_templates.saturating_add(1);
        self.stats.messages += 1;
        self.stats.records += m.records as u64;
    }

    /// Encodes `flows` into complete datagrams / messages appended to `out`, each at most
    /// [`Exporter::mtu`] bytes. `now_ms` (milliseconds since the Unix epoch) is the export time.
    /// Nothing is produced for no flows (nor for only IPv6 flows in v5).
    pub fn encode(&mut self, flows: &[ExportFlow], now_ms: u64, out: &mut Vec<Vec<u8>>) {
        match self.cfg.format {
            ExportFormat::NetflowV5 => self.encode_v5(flows, now_ms, out),
            _ => self.encode_templated(flows, now_ms, out),
        }
    }

    fn encode_templated(&mut self, flows: &[ExportFlow], now_ms: u64, out: &mut Vec<Vec<u8>>) {
        let biflow = self.ipfix && self.cfg.ipfix_mode == IpfixMode::Biflow;
        let mut msg: Option<Msg> = None;
        let mut rec = Vec::with_capacity(512);
        for f in flows {
            let fwd = View::forward(f, biflow);
            let rev = (!biflow && has_reverse(f)).then(|| View::reverse(f));
            for r in std::iter::once(fwd).chain(rev) {
                let t = &self.templates[usize::from(r.v6)];
                let tid = t.id;
                rec.clear();
                for &ie in &t.fields {
                    write_ie(&mut rec, ie, &r, self.cfg.boot_ms, self.ipfix);
                }
                loop {
                    let m = match msg.as_mut() {
                        Some(m) => m,
                        None => {
                            let with_templates = self.templates_needed(now_ms);
                            msg.insert(self.start_msg(now_ms, with_templates))
                        }
                    };
                    let new_set = m.set.map(|(_, id)| id) != Some(tid);
                    let pad = if self.ipfix { 0 } else { 3 };
                    let need = if new_set { SET_HEADER } else { 0 } + rec.len() + pad;
                    if m.buf.len() + need <= self.mtu {
                        if new_set {
                            self.close_set(m);
                            m.set = Some((m.buf.len(), tid));
                            put16(&mut m.buf, tid);
                            put16(&mut m.buf, 0);
                        }
                        m.buf.extend_from_slice(&rec);
                        m.records += 1;
                        break;
                    }
                    let mut full = msg.take().expect("message open");
                    self.finish_msg(&mut full, now_ms);
                    out.push(full.buf);
                }
            }
            self.stats.flows += 1;
        }
        if let Some(mut m) = msg {
            self.finish_msg(&mut m, now_ms);
            out.push(m.buf);
        }
    }

    fn encode_v5(&mut self, flows: &[ExportFlow], now_ms: u64, out: &mut Vec<Vec<u8>>) {
        let per_packet = ((self.mtu - V5_HEADER) / V5_RECORD).min(V5_MAX_RECORDS);
        let mut buf: Vec<u8> = Vec::new();
        let mut count = 0usize;
        for f in flows {
            if f.ip_version == 6 {
                self.stats.skipped_ipv6 += 1;
                continue;
            }
            let fwd = View::forward(f, false);
            let rev = has_reverse(f).then(|| View::reverse(f));
            for r in std::iter::once(fwd).chain(rev) {
                if count == per_packet {
                    self.finish_v5(&mut buf, count, now_ms);
                    out.push(std::mem::take(&mut buf));
                    count = 0;
                }
                if count == 0 {
                    buf.reserve(V5_HEADER + per_packet * V5_RECORD);
                    buf.resize(V5_HEADER, 0);
                }
                self.write_v5_record(&mut buf, &r);
                count += 1;
            }
            self.stats.flows += 1;
        }
        if count > 0 {
            self.finish_v5(&mut buf, count, now_ms);
            out.push(buf);
        }
    }

    fn write_v5_record(&mut self, b: &mut Vec<u8>, r: &View) {
        let f = r.f;
        let boot = self.cfg.boot_ms;
        let fits = |v: u64| v <= u32::MAX as u64;
        if !fits(r.packets)
            || !fits(r.bytes)
            || !fits(f.first_ms.saturating_sub(boot))
            || !fits(f.last_ms.saturating_sub(boot))
        {
            self.stats.clamped += 1;
        }
        let sat = |v: u64| v.min(u32::MAX as u64) as u32;
        b.extend_from_slice(&r.src[..4]);
        b.extend_from_slice(&r.dst[..4]);
        put32(b, 0); // nexthop
        put16(b, 0); // input ifIndex
        put16(b, 0); // output ifIndex
        put32(b, sat(r.packets));
        put32(b, sat(r.bytes));
        put32(b, uptime(f.first_ms, boot));
        put32(b, uptime(f.last_ms, boot));
        // ICMP: the type/code goes in the destination port, as routers do.
        let dport = if f.proto == 1 && r.icmp != 0 {
            r.icmp
        } else {
            r.dport
        };
        put16(b, r.sport);
        put16(b, dport);
        b.push(0); // pad1
        b.push(r.flags);
        b.push(f.proto);
        b.push(f.tos);
        put16(b, as16(r.src_as));
        put16(b, as16(r.dst_as));
        b.push(0); // src_mask
        b.push(0); // dst_mask
        put16(b, 0); // pad2
    }

    fn finish_v5(&mut self, b: &mut [u8], count: usize, now_ms: u64) {
        set16(b, 0, 5);
        set16(b, 2, count as u16);
        set32(b, 4, uptime(now_ms, self.cfg.boot_ms));
        set32(b, 8, (now_ms / 1000) as u32);
        set32(b, 12, ((now_ms % 1000) * 1_000_000) as u32);
        set32(b, 16, self.sequence);
        b[20] = (self.cfg.domain >> 8) as u8;
        b[21] = self.cfg.domain as u8;
        set16(b, 22, 0); // sampling: none
        self.sequence = self.sequence.wrapping_add(count as u32);
        self.stats.messages += 1;
        self.stats.records += count as u64;
    }
}
