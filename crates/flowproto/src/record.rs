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

/// Fewest bytes a counted packet can have (an IPv4 header alone).
const MIN_PACKET_BYTES: u64 = 20;
/// Most bytes a counted packet can have (the largest IPv4 or IPv6 packet without jumbograms).
const MAX_PACKET_BYTES: u64 = 65_535;
/// Most packets a second a record can claim: two 800 Gb/s links of minimum-size frames.
const MAX_PACKETS_PER_SECOND: u64 = 2_400_000_000;
/// The duration assumed for a record without timestamps: an hour, longer than any exporter's
/// active timeout.
const UNTIMED_SECONDS: u64 = 3_600;
/// How far after its arrival a record's times may be (an exporter's clock ahead of ours).
pub const MAX_CLOCK_AHEAD_MS: u64 = 3_600_000;

impl CollectedFlow {
    /// Drops the record's times when they are more than [`MAX_CLOCK_AHEAD_MS`] after it arrived
    /// (`arrival_ms`, Unix milliseconds by the collector's clock), so that it counts at its
    /// arrival instead; true when it did. A flow cannot end in the future: one record claiming
    /// so (random bytes do, with an end in 2^63 ms) moved the engine's clock there and stopped
    /// its timeouts. Its counters may still be right (softflowd reading a file exports times
    /// days ahead), so it is kept.
    pub fn retime_if_ahead(&mut self, arrival_ms: u64) -> bool {
        let ahead = self.first_ms.max(self.last_ms) > arrival_ms.saturating_add(MAX_CLOCK_AHEAD_MS);
        if ahead {
            (self.first_ms, self.last_ms) = (0, 0);
        }
        ahead
    }

    /// Why the record's counters cannot be real, if they cannot: packets of under 20 or over
    /// 65535 bytes on average, or more packets than links carry in the record's duration (plus
    /// a second). Random bytes that parse as NetFlow v5 claim such counters; the collector
    /// counts such records as suspect and keeps them out of the flow and host tables.
    pub fn impossible(&self) -> Option<&'static str> {
        let seconds = if self.first_ms > 0 && self.last_ms >= self.first_ms {
            (self.last_ms - self.first_ms) / 1000 + 1
        } else {
            UNTIMED_SECONDS
        };
        for (packets, bytes) in [
            (self.packets, self.bytes),
            (self.rev_packets, self.rev_bytes),
        ] {
            if packets == 0 {
                if bytes > 0 {
                    return Some("bytes without packets");
                }
                continue;
            }
            if bytes < packets.saturating_mul(MIN_PACKET_BYTES) {
                return Some("fewer than 20 bytes a packet");
            }
            if bytes / packets > MAX_PACKET_BYTES {
                return Some("more than 65535 bytes a packet");
            }
            if packets / seconds > MAX_PACKETS_PER_SECOND {
                return Some("more packets a second than any link carries");
            }
        }
        None
    }
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
    /// The packet's source and destination AS numbers from the sample's extended gateway
    /// record (0: not given).
    pub src_as: u32,
    pub dst_as: u32,
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
    /// AS numbers of the client and the server (0: not known).
    pub src_as: u32,
    pub dst_as: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_counters() {
        let ok = CollectedFlow {
            packets: 10,
            bytes: 6_000,
            first_ms: 1_000,
            last_ms: 3_000,
            ..CollectedFlow::default()
        };
        assert_eq!(ok.impossible(), None);
        let tiny = CollectedFlow {
            bytes: 100,
            ..ok.clone()
        };
        let huge = CollectedFlow {
            bytes: 700_000,
            ..ok.clone()
        };
        // Random bytes as a v5 record: 2^32 - 1 packets times a sampling interval of 16383,
        // in one second, at 60 bytes each.
        let flood = CollectedFlow {
            packets: 4_294_967_295 * 16_383,
            bytes: 4_294_967_295 * 16_383 * 60,
            first_ms: 5_000,
            last_ms: 5_000,
            ..ok.clone()
        };
        let reverse = CollectedFlow {
            rev_bytes: 5,
            ..ok.clone()
        };
        for f in [tiny.clone(), huge, flood, reverse] {
            assert!(f.impossible().is_some(), "{f:?}");
        }
        // An hour of a 100 Gb/s link in one record without timestamps is possible.
        let untimed = CollectedFlow {
            packets: 148_800_000 * 3_600,
            bytes: 148_800_000 * 3_600 * 64,
            ..CollectedFlow::default()
        };
        assert_eq!(untimed.impossible(), None);
        // Times are checked against the arrival: an hour of clock skew is taken, not more.
        let arrival = 1_795_000_000_000;
        let retimed = |first_ms, last_ms| {
            let mut f = CollectedFlow {
                first_ms,
                last_ms,
                ..ok.clone()
            };
            (f.retime_if_ahead(arrival), f.first_ms, f.last_ms)
        };
        let kept = |a, b| (false, a, b);
        assert_eq!(
            retimed(arrival - 5_000, arrival),
            kept(arrival - 5_000, arrival)
        );
        assert_eq!(
            retimed(arrival, arrival + 3_000_000),
            kept(arrival, arrival + 3_000_000)
        );
        assert_eq!(retimed(arrival, arrival + 3_700_000), (true, 0, 0));
        assert_eq!(retimed(u64::MAX / 2, u64::MAX / 2), (true, 0, 0));
        // Replayed old records (times in the past) keep their times.
        let old = (1_500_000_000_000, 1_500_000_001_000);
        assert_eq!(retimed(old.0, old.1), kept(old.0, old.1));
        assert!(tiny.impossible().is_some());
    }
}
