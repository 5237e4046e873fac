//! The records that cross this crate's boundary.

use std::net::SocketAddr;

/// One flow record received from an exporter, in sonde's terms. Counters are already scaled by
/// the sampling rate (`sampling` > 1 means they are estimates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectedFlow {
    /// The exporter (UDP/TCP peer) and its observation domain / source id / engine.
    pub exporter: Option<SocketAddr>,
    pub domain: u32,
    /// 4 or 6; addresses in the first 4 bytes for IPv4.
    pub ip_version: u8,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub packets: u64,
    pub bytes: u64,
    /// Reverse direction counters of a biflow record (RFC 5103), 0 when unidirectional.
    pub rev_packets: u64,
    pub rev_bytes: u64,
    /// Flow start and end, milliseconds since the Unix epoch (0 when the record has none).
    pub first_ms: u64,
    pub last_ms: u64,
    pub tcp_flags: u8,
    /// TCP flags of the reverse direction of a biflow record (RFC 5103 reverse
    /// tcpControlBits; a JSON producer's SERVER_TCP_FLAGS), 0 when none.
    pub rev_tcp_flags: u8,
    /// ICMP type × 256 + code (icmpTypeCodeIPv4 32 / icmpTypeCodeIPv6 139), 0 when none.
    pub icmp_type_code: u16,
    pub tos: u8,
    pub vlan: u16,
    pub src_mac: Option<[u8; 6]>,
    pub dst_mac: Option<[u8; 6]>,
    /// SNMP ifIndex of the input and output interfaces (0 when absent).
    pub in_if: u32,
    pub out_if: u32,
    /// 1 for unsampled; N when 1 packet in N was sampled (counters above already × N).
    pub sampling: u32,
    /// Application id as exported (IE 95 applicationId, or nDPI's id from sonde), 0 if none.
    pub app_id: u32,
    pub app_name: Option<String>,
    /// Elements sonde does not interpret: (enterprise number, element id, value), kept so
    /// they can be shown by number.
    pub extra: Vec<(u32, u16, Vec<u8>)>,
    /// Fields of a JSON producer (ZMQ) that sonde does not interpret, kept to be shown.
    pub extra_text: Vec<(String, String)>,
    /// Why the producer ended the flow, when it says (a sonde's `FLOW_END_REASON`), as the
    /// number of sonde_flow's `EndReason`.
    pub end_reason: Option<u8>,
    /// A finished record to be passed on as it is, not merged with later records of the same
    /// flow (another sonde's, relayed through Kafka): it leaves the flow table at once.
    pub ended: bool,
}

/// A packet header sampled by an sFlow agent: it goes through sonde's packet decoder like a
/// captured frame, then counts `sampling` times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampledPacket {
    pub exporter: Option<SocketAddr>,
    pub domain: u32,
    /// The sampled bytes, starting at the header given by `header_protocol` (1 = Ethernet,
    /// 11 = IPv4, 12 = IPv6, sFlow's numbering).
    pub header: Vec<u8>,
    pub header_protocol: u32,
    /// Length of the original frame on the wire.
    pub frame_length: u32,
    pub sampling: u32,
    pub in_if: u32,
    pub out_if: u32,
}

/// A flow as sonde exports it: client → server is the forward direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportFlow {
    pub ip_version: u8,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// Client → server.
    pub packets: u64,
    pub bytes: u64,
    /// Server → client (exported as a second record in v5/v9, as reverse elements in IPFIX).
    pub rev_packets: u64,
    pub rev_bytes: u64,
    pub first_ms: u64,
    pub last_ms: u64,
    pub tcp_flags: u8,
    pub rev_tcp_flags: u8,
    pub tos: u8,
    pub vlan: u16,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub icmp_type_code: u16,
    /// nDPI's protocol number and name (`91.126`, `TLS.Google`), 0/empty when unknown.
    pub app_id: u32,
    pub app_name: String,
    /// flowEndReason (IE 136): 1 idle, 2 active, 3 end detected, 4 forced end, 5 lack of resources.
    pub end_reason: u8,
}
