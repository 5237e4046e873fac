//! Link-layer header types (the `LINKTYPE_*` values of pcap/pcapng, tcpdump.org/linktypes.html).

/// The link layers sonde decodes. Conversion from a number always succeeds: anything else is
/// `Unknown(n)` and its packets are counted as malformed with reason `unsupported_linktype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// BSD loopback: 4-byte address family in the capturing host's byte order.
    Null,
    Ethernet,
    /// Raw IP, version taken from the first nibble.
    Raw,
    RawIpv4,
    RawIpv6,
    /// OpenBSD loopback: 4-byte address family in network byte order.
    Loop,
    LinuxSll,
    LinuxSll2,
    /// PPP (RFC 1661): the protocol field first, or after the 0xFF 0x03 of HDLC-like framing
    /// (RFC 1662); LINKTYPE_PPP (9) and LINKTYPE_PPP_HDLC (50).
    Ppp,
    /// Cisco HDLC: address, control, then an EtherType (LINKTYPE_C_HDLC, 104).
    CHdlc,
    Unknown(u32),
}

impl LinkType {
    pub fn from_linktype(n: u32) -> LinkType {
        match n {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            // 12 and 14 are the DLT_RAW values some BSDs used; 101 is LINKTYPE_RAW.
            12 | 14 | 101 => LinkType::Raw,
            9 | 50 => LinkType::Ppp,
            104 => LinkType::CHdlc,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::RawIpv4,
            229 => LinkType::RawIpv6,
            276 => LinkType::LinuxSll2,
            n => LinkType::Unknown(n),
        }
    }

    pub fn to_linktype(self) -> u32 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::RawIpv4 => 228,
            LinkType::RawIpv6 => 229,
            LinkType::LinuxSll2 => 276,
            LinkType::Ppp => 9,
            LinkType::CHdlc => 104,
            LinkType::Unknown(n) => n,
        }
    }

    /// The DLT_* value libpcap wants for this link type when it compiles a filter: the
    /// LINKTYPE_* value except for raw IP, whose LINKTYPE (101) libpcap's compiler does not
    /// know ("unknown data link type 101"), and OpenBSD's loopback.
    pub fn to_dlt(self) -> u32 {
        match self {
            LinkType::Raw if cfg!(target_os = "openbsd") => 14,
            LinkType::Raw => 12,
            LinkType::Loop if cfg!(target_os = "openbsd") => 12,
            other => other.to_linktype(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkType::Null => "null",
            LinkType::Ethernet => "ethernet",
            LinkType::Raw => "raw",
            LinkType::RawIpv4 => "ipv4",
            LinkType::RawIpv6 => "ipv6",
            LinkType::Loop => "loop",
            LinkType::LinuxSll => "linux-sll",
            LinkType::LinuxSll2 => "linux-sll2",
            LinkType::Ppp => "ppp",
            LinkType::CHdlc => "c-hdlc",
            LinkType::Unknown(_) => "unknown",
        }
    }

    pub fn is_supported(self) -> bool {
        !matches!(self, LinkType::Unknown(_))
    }
}
