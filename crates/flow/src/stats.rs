//! Per-shard counters. Every packet a shard receives is counted exactly once as one of:
//! accounted to a flow (`ip_packets`), not IP (`non_ip`), malformed (by reason), or dropped
//! (by reason). [`ShardStats::merge`] adds shards (and the reader thread) into a total.

use sonde_wire::MALFORMED_REASONS;

pub const MALFORMED_COUNT: usize = MALFORMED_REASONS.len();

/// Why a decoded packet was not accounted to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DropReason {
    /// The flow table was full and the packet would have opened a new flow.
    FlowTableFull = 0,
    /// Rejected by the capture filter (file input with `-f`).
    Filtered,
}

impl DropReason {
    pub const ALL: [DropReason; 2] = [DropReason::FlowTableFull, DropReason::Filtered];
    pub fn name(self) -> &'static str {
        match self {
            DropReason::FlowTableFull => "flow_table_full",
            DropReason::Filtered => "filtered",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ShardStats {
    /// Frames received (every outcome below adds up to this).
    pub packets: u64,
    /// Bytes of those frames on the wire.
    pub wire_bytes: u64,
    /// Packets accounted to a flow, and their IP bytes.
    pub ip_packets: u64,
    pub ip_bytes: u64,
    pub non_ip: u64,
    pub malformed: [u64; MALFORMED_COUNT],
    pub dropped: [u64; 2],
    pub fragments: u64,
    pub fragments_unmatched: u64,
    pub tunneled: u64,
    pub flows_created: u64,
    /// Records emitted, by [`crate::EndReason`].
    pub flows_ended: [u64; 5],
    pub active_flows: u64,
    pub hosts_created: u64,
    pub hosts_purged: u64,
    pub active_hosts: u64,
    /// Flows created without one of their hosts because the host table was full.
    pub hosts_table_full: u64,
    /// Bytes held by the flow and host tables.
    pub table_memory: u64,
    /// Packet time of the newest packet seen (ns since the epoch).
    pub last_packet_ns: u64,
    /// Flow records received from exporters (NetFlow/IPFIX) and merged into flows, with the
    /// packets and bytes they carry (scaled by sampling); not part of `packets` above.
    pub collected_records: u64,
    pub collected_packets: u64,
    pub collected_bytes: u64,
    /// sFlow packet samples accounted (each counts `sampling` packets into collected_packets).
    pub collected_samples: u64,
    /// Time this shard spent answering readers (the REST API's snapshots), in ns: what the
    /// API cost the packets.
    pub reader_ns: u64,
    /// Packets and bytes of flows by direction (with local networks; both ways of a flow
    /// under its direction), counted as flows pass their counts to their hosts: at each tick
    /// and when a flow ends.
    pub directions: crate::flow::DirectionCounts,
}

impl ShardStats {
    pub fn malformed_total(&self) -> u64 {
        self.malformed.iter().sum()
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    pub fn merge(&mut self, o: &ShardStats) {
        self.packets += o.packets;
        self.wire_bytes += o.wire_bytes;
        self.ip_packets += o.ip_packets;
        self.ip_bytes += o.ip_bytes;
        self.non_ip += o.non_ip;
        for (a, b) in self.malformed.iter_mut().zip(o.malformed) {
            *a += b;
        }
        for (a, b) in self.dropped.iter_mut().zip(o.dropped) {
            *a += b;
        }
        self.fragments += o.fragments;
        self.fragments_unmatched += o.fragments_unmatched;
        self.tunneled += o.tunneled;
        self.flows_created += o.flows_created;
        for (a, b) in self.flows_ended.iter_mut().zip(o.flows_ended) {
            *a += b;
        }
        self.active_flows += o.active_flows;
        self.hosts_created += o.hosts_created;
        self.hosts_purged += o.hosts_purged;
        self.active_hosts += o.active_hosts;
        self.hosts_table_full += o.hosts_table_full;
        self.table_memory += o.table_memory;
        self.last_packet_ns = self.last_packet_ns.max(o.last_packet_ns);
        self.collected_records += o.collected_records;
        self.collected_packets += o.collected_packets;
        self.collected_bytes += o.collected_bytes;
        self.collected_samples += o.collected_samples;
        self.reader_ns += o.reader_ns;
        self.directions.merge(&o.directions);
    }

    pub fn flows_ended_total(&self) -> u64 {
        self.flows_ended.iter().sum()
    }
}
