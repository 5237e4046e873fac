//! One shard's analytics: what its engine tells it (flows created and flushed, TCP control
//! packets, fragments, ICMP errors, filter-set masks), turned into per-second reports (for the
//! DDoS thresholds) and per-interval reports (top-N and anomaly lists) that the probe merges
//! across shards ([`crate::merge`]).
//!
//! Cost model: nothing here runs per ordinary packet. Host traffic arrives once per flow and
//! tick (the engine's flush, which already updates the host table), into an array indexed by
//! host slot; TCP SYN/FIN/RST, fragments and ICMP errors are rare packets, counted one by one.
//! Memory is bounded: the per-slot array by the host table's capacity, every list by a
//! sketch or a budget, each with counted overflows.

use crate::config::{AnalyticsConfig, Key, RATE_KEYS};
use crate::filterset::{FilterCounts, FilterEval};
use crate::sketch::{Counter, HeavyHitters, Merge, Part};
use crate::types::{HostAddr, HostSecond, Rates, Traffic, Usage};
use hashbrown::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A host slot of the engine's host table that holds no host.
pub const NO_HOST: u32 = u32::MAX;

/// TCP flag bits.
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

const IN: usize = 0;
const OUT: usize = 1;

/// Counters of one host slot: this second's (DDoS rates), this interval's (top talkers). The
/// first cache line holds what a flow's flush writes; the second what rare packets and the
/// close of a second write.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct SlotStats {
    sec_bytes: [u64; 2],
    /// The slot is in `sec_dirty` for the second numbered this (0: not listed).
    listed: u32,
    sec_pkts: [u32; 2],
    sec_flows: [u32; 2],
    sec_udp: [u32; 2],
    sec_icmp: [u32; 2],
    sec_tcp: [u32; 2],
    // --- second line ---
    sec_syn: [u32; 2],
    sec_frag: [u32; 2],
    ivl_pkts: [u64; 2],
    ivl_bytes: [u64; 2],
    ivl_tcp: [u32; 2],
}

impl SlotStats {
    fn second(&self) -> HostSecond {
        let r = |d: usize| Rates {
            packets: self.sec_pkts[d] as u64,
            bytes: self.sec_bytes[d],
            flows: self.sec_flows[d] as u64,
            syn: self.sec_syn[d] as u64,
            udp: self.sec_udp[d] as u64,
            icmp: self.sec_icmp[d] as u64,
            tcp: self.sec_tcp[d] as u64,
            frag: self.sec_frag[d] as u64,
        };
        [r(IN), r(OUT)]
    }

    /// Whether any of this second's rates reaches its floor (see `ShardAnalytics::floors`),
    /// checked on the counters as they are (most hosts are far below).
    #[inline]
    fn reaches(&self, f: &[u64; RATE_KEYS.len()]) -> bool {
        (0..2).any(|d| {
            self.sec_pkts[d] as u64 >= f[0]
                || self.sec_bytes[d] >= f[1]
                || self.sec_flows[d] as u64 >= f[2]
                || self.sec_syn[d] as u64 >= f[3]
                || self.sec_udp[d] as u64 >= f[4]
                || self.sec_icmp[d] as u64 >= f[5]
                || self.sec_frag[d] as u64 >= f[6]
        })
    }

    fn close_second(&mut self) {
        for d in [IN, OUT] {
            self.ivl_pkts[d] += self.sec_pkts[d] as u64;
            self.ivl_bytes[d] += self.sec_bytes[d];
            self.ivl_tcp[d] = self.ivl_tcp[d].saturating_add(self.sec_tcp[d]);
        }
        self.sec_bytes = [0; 2];
        self.listed = 0;
        self.sec_pkts = [0; 2];
        self.sec_flows = [0; 2];
        self.sec_udp = [0; 2];
        self.sec_icmp = [0; 2];
        self.sec_tcp = [0; 2];
        self.sec_syn = [0; 2];
        self.sec_frag = [0; 2];
    }
}

/// A flow's share of an interval, as the engine hands it over (from its walk at the end of
/// the interval, or when the flow ends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowIvl {
    pub client: HostAddr,
    pub server: HostAddr,
    pub client_port: u16,
    pub server_port: u16,
    pub proto: u8,
    /// Packets and bytes of both directions during the interval.
    pub packets: u64,
    pub bytes: u64,
    /// nDPI's (protocol, service) numbers (0, 0 while undecided).
    pub app: (u16, u16),
}

/// What a flow's hosts are, for a flush or a creation.
#[derive(Clone, Copy, Debug)]
pub struct FlowHosts {
    /// Host slots of sides a and b of the flow key (or [`NO_HOST`]).
    pub slots: [u32; 2],
    /// Their addresses and ports (what the key says).
    pub addrs: [HostAddr; 2],
    pub ports: [u16; 2],
    pub proto: u8,
    /// The client's side (0: a, 1: b).
    pub client_side: u8,
}

/// The ports a host tried most (Ourmon's port signature): [`PortSample::MAX`] counters
/// kept the Space-Saving way (a new port takes over the smallest counter), so a port tried
/// often is listed even when it came after many others; `others` counts what the listed ports
/// do not account for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortSample {
    pub ports: Vec<(u16, u64)>,
    pub others: u64,
}

impl PortSample {
    pub const MAX: usize = 10;

    pub fn add(&mut self, port: u16, n: u64) {
        if let Some(e) = self.ports.iter_mut().find(|(p, _)| *p == port) {
            e.1 += n;
        } else if self.ports.len() < Self::MAX {
            self.ports.push((port, n));
        } else if let Some(min) = self.ports.iter_mut().min_by_key(|(_, c)| *c) {
            // The evicted port's count stays counted, as `others`.
            self.others += min.1;
            *min = (port, n);
        }
    }
}

impl Merge for PortSample {
    fn merge(&mut self, o: &PortSample) {
        let mut all = self.ports.clone();
        for &(p, n) in &o.ports {
            match all.iter_mut().find(|(q, _)| *q == p) {
                Some(e) => e.1 += n,
                None => all.push((p, n)),
            }
        }
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut others = self.others + o.others;
        for &(_, n) in all.iter().skip(Self::MAX) {
            others += n;
        }
        all.truncate(Self::MAX);
        self.ports = all;
        self.others = others;
    }
}

/// A TCP SYN sender's interval (Ourmon's SYN tuple).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SynStats {
    pub syn_sent: u64,
    /// SYN/ACKs it received: its SYNs that were answered.
    pub synack_rcvd: u64,
    pub fin_sent: u64,
    pub rst_sent: u64,
    pub rst_rcvd: u64,
    /// TCP packets it sent and received in the interval (the work weight's denominator).
    pub tcp_packets: u64,
    /// Destination ports of its SYNs.
    pub ports: PortSample,
}

impl Merge for SynStats {
    fn merge(&mut self, o: &SynStats) {
        self.syn_sent += o.syn_sent;
        self.synack_rcvd += o.synack_rcvd;
        self.fin_sent += o.fin_sent;
        self.rst_sent += o.rst_sent;
        self.rst_rcvd += o.rst_rcvd;
        self.tcp_packets += o.tcp_packets;
        self.ports.merge(&o.ports);
    }
}

impl SynStats {
    /// Ourmon's work weight, in percent: (SYNs + FINs sent + RSTs received) / TCP packets.
    pub fn work_weight(&self) -> f64 {
        let work = (self.syn_sent + self.fin_sent + self.rst_rcvd) as f64;
        if self.tcp_packets == 0 {
            return 100.0;
        }
        (100.0 * work / self.tcp_packets as f64).min(100.0)
    }

    /// Percent of its SYNs that got a SYN/ACK.
    pub fn answered(&self) -> f64 {
        if self.syn_sent == 0 {
            return 0.0;
        }
        (100.0 * self.synack_rcvd as f64 / self.syn_sent as f64).min(100.0)
    }
}

/// One kind of probe an ICMP error was about: the original packet's protocol, destination
/// and destination port (the UDP probe that drew a port unreachable).
pub type Probe = (u8, [u8; 16], u16);

/// ICMP errors a host sent or received in an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IcmpStats {
    pub errors: u64,
    pub unreachable: u64,
    pub port_unreachable: u64,
    pub time_exceeded: u64,
    /// The probes that drew them (up to [`IcmpStats::MAX_PROBES`], with counts), and the peer
    /// on the other end (the receiver for a sender, the sender for a receiver).
    pub probes: Vec<(Probe, u64)>,
    pub peers: Vec<(HostAddr, u64)>,
}

impl IcmpStats {
    pub const MAX_PROBES: usize = 8;

    fn add(&mut self, kind: IcmpKind, probe: Option<Probe>, peer: HostAddr) {
        self.errors += 1;
        match kind {
            IcmpKind::PortUnreachable => {
                self.unreachable += 1;
                self.port_unreachable += 1;
            }
            IcmpKind::Unreachable => self.unreachable += 1,
            IcmpKind::TimeExceeded => self.time_exceeded += 1,
        }
        if let Some(p) = probe {
            bump(&mut self.probes, p, 1, Self::MAX_PROBES);
        }
        bump(&mut self.peers, peer, 1, Self::MAX_PROBES);
    }
}

fn bump<K: PartialEq>(v: &mut Vec<(K, u64)>, k: K, n: u64, max: usize) {
    if let Some(e) = v.iter_mut().find(|(x, _)| *x == k) {
        e.1 += n;
    } else if v.len() < max {
        v.push((k, n));
    }
}

fn merge_capped<K: PartialEq + Copy + Ord>(a: &mut Vec<(K, u64)>, b: &[(K, u64)], max: usize) {
    for &(k, n) in b {
        match a.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 += n,
            None => a.push((k, n)),
        }
    }
    a.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    a.truncate(max);
}

impl Merge for IcmpStats {
    fn merge(&mut self, o: &IcmpStats) {
        self.errors += o.errors;
        self.unreachable += o.unreachable;
        self.port_unreachable += o.port_unreachable;
        self.time_exceeded += o.time_exceeded;
        merge_capped(&mut self.probes, &o.probes, Self::MAX_PROBES);
        merge_capped(&mut self.peers, &o.peers, Self::MAX_PROBES);
    }
}

/// The ICMP errors analytics tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpKind {
    PortUnreachable,
    Unreachable,
    TimeExceeded,
}

impl IcmpKind {
    /// The error kind of an ICMP (v4) or ICMPv6 type and code, or None for anything else.
    pub fn of(ip_version: u8, icmp_type: u8, code: u8) -> Option<IcmpKind> {
        match (ip_version, icmp_type, code) {
            (4, 3, 3) | (6, 1, 4) => Some(IcmpKind::PortUnreachable),
            (4, 3, _) | (6, 1, _) => Some(IcmpKind::Unreachable),
            (4, 11, _) | (6, 3, _) => Some(IcmpKind::TimeExceeded),
            _ => None,
        }
    }
}

/// What one source tried during an interval: the destinations it tried on one port (an IP
/// scan), or the ports it tried on one destination (a port scan). Shards report the groups
/// that reach their floor with their whole target list, so the merger counts distinct
/// targets exactly across shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanGroup {
    Ip {
        src: HostAddr,
        proto: u8,
        port: u16,
        dsts: Vec<[u8; 16]>,
    },
    Port {
        src: HostAddr,
        dst: HostAddr,
        ports: Vec<(u8, u16)>,
    },
}

/// What one new flow tried: source, destination, protocol, port (or ICMP type).
type Target = (HostAddr, [u8; 16], u8, u16);

/// The targets sources tried during an interval, exactly, within a budget. A new flow costs
/// one push onto a log (no hashing: flows are created at flood rates too); the log is sorted
/// and grouped when the interval closes. When the log reaches its budget it is compacted:
/// duplicates go, then the targets of sources that tried fewer than `keep_min` (sources of a
/// random-address flood try one each), which are counted as untracked; `keep_min` doubles
/// while compaction frees less than half. So a scanner already under way is never lost to a
/// flood, memory stays at the budget, and without a flood every count is exact.
struct ScanTracker {
    log: Vec<Target>,
    budget: usize,
    keep_min: usize,
    untracked: u64,
    /// Fingerprints of targets logged lately, direct-mapped: a target tried again (a new
    /// source port, a retry) is usually found here and not logged twice.
    recent: Vec<u64>,
}

/// Slots of [`ScanTracker::recent`] (a power of two).
const RECENT_TARGETS: usize = 4096;

impl ScanTracker {
    fn new(budget: usize) -> ScanTracker {
        ScanTracker {
            log: Vec::new(),
            budget,
            keep_min: 4,
            untracked: 0,
            recent: vec![0; RECENT_TARGETS],
        }
    }

    #[inline]
    fn add(&mut self, src: HostAddr, dst: [u8; 16], proto: u8, port: u16) {
        let fp = fingerprint(&src, &dst, proto, port);
        let slot = &mut self.recent[(fp as usize) & (RECENT_TARGETS - 1)];
        if *slot == fp {
            return;
        }
        *slot = fp;
        if self.log.len() >= self.budget {
            self.compact();
            if self.log.len() >= self.budget {
                self.untracked += 1;
                return;
            }
        }
        self.log.push((src, dst, proto, port));
    }

    /// Counts of the log's entries per source, in buckets by a hash of the source: a bucket's
    /// count is at least the true count of each source in it, so a source whose bucket holds
    /// fewer than `min` entries surely tried fewer than `min` targets.
    fn bucket_counts(&self) -> (Vec<u32>, usize) {
        let buckets = self.log.len().next_power_of_two().clamp(1024, 1 << 20);
        let mut counts = vec![0u32; buckets];
        for t in &self.log {
            counts[bucket(&t.0, buckets)] += 1;
        }
        (counts, buckets)
    }

    /// Drops the entries of sources that surely tried fewer than `min` targets.
    fn drop_small_sources(&mut self, min: usize) -> usize {
        let before = self.log.len();
        if min > 1 {
            let (counts, buckets) = self.bucket_counts();
            self.log
                .retain(|t| counts[bucket(&t.0, buckets)] as usize >= min);
        }
        before - self.log.len()
    }

    #[cold]
    fn compact(&mut self) {
        let mut dropped = self.drop_small_sources(self.keep_min);
        if self.log.len() > self.budget / 2 {
            // Few small sources: duplicates (retries) may be what fills the log.
            self.log.sort_unstable();
            let before = self.log.len();
            self.log.dedup();
            let dups = before - self.log.len();
            if self.log.len() > self.budget / 2 {
                self.keep_min = self.keep_min.saturating_mul(2);
                dropped += self.drop_small_sources(self.keep_min);
            }
            // Duplicates were never targets: not counted as untracked.
            let _ = dups;
        }
        self.untracked += dropped as u64;
    }

    /// The groups with at least `ip_floor` destinations or `port_floor` ports; the tracker is
    /// emptied for the next interval.
    fn take_groups(&mut self, ip_floor: u64, port_floor: u64) -> (Vec<ScanGroup>, u64) {
        let mut out = Vec::new();
        // Sources that tried too few targets for any group go first, unsorted: most sources
        // open a flow or two.
        self.drop_small_sources(ip_floor.min(port_floor).min(usize::MAX as u64) as usize);
        // By (source, destination, protocol, port): port scans.
        self.log.sort_unstable();
        self.log.dedup();
        for run in self.log.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1) {
            // Port scans are about transport ports (ICMP types are not ports).
            let ports: Vec<(u8, u16)> = run
                .iter()
                .filter(|t| matches!(t.2, 6 | 17 | 132))
                .map(|t| (t.2, t.3))
                .collect();
            if ports.len() as u64 >= port_floor {
                let src = run[0].0;
                out.push(ScanGroup::Port {
                    src,
                    dst: HostAddr::new(run[0].1, src.ip_version, src.vlan),
                    ports,
                });
            }
        }
        // By (source, protocol, port, destination): IP scans.
        self.log.sort_unstable_by_key(|t| (t.0, t.2, t.3, t.1));
        for run in self
            .log
            .chunk_by(|a, b| a.0 == b.0 && a.2 == b.2 && a.3 == b.3)
        {
            if run.len() as u64 >= ip_floor {
                out.push(ScanGroup::Ip {
                    src: run[0].0,
                    proto: run[0].2,
                    port: run[0].3,
                    dsts: run.iter().map(|t| t.1).collect(),
                });
            }
        }
        let untracked = std::mem::take(&mut self.untracked);
        self.log.clear();
        self.recent.iter_mut().for_each(|f| *f = 0);
        self.keep_min = 4;
        (out, untracked)
    }
}

/// A 64-bit fingerprint of a target (never 0, the empty slot).
#[inline]
fn fingerprint(src: &HostAddr, dst: &[u8; 16], proto: u8, port: u16) -> u64 {
    let w = |a: &[u8; 16], i: usize| u64::from_le_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
    let mut x = w(&src.addr, 0) ^ w(&src.addr, 8).rotate_left(17);
    x = (x ^ w(dst, 0).rotate_left(31) ^ w(dst, 8).rotate_left(47))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= (proto as u64) << 16 | port as u64 | (src.vlan as u64) << 24;
    x = (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x ^ (x >> 32)) | 1
}

/// A cheap mix of a host's address (a filter's bucket, not a hash table's: collisions only
/// make the filter keep more).
#[inline]
fn bucket(h: &HostAddr, buckets: usize) -> usize {
    let w = |i: usize| u64::from_le_bytes(h.addr[i..i + 8].try_into().unwrap_or([0; 8]));
    let x =
        (w(0) ^ w(8).rotate_left(29) ^ (h.vlan as u64) << 48).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x ^ (x >> 32)) as usize) & (buckets - 1)
}

/// What a shard saw of a watched host (one under attack, or about to be) during a second, by
/// packets: the peers that sent to it and the ports they sent to (its own), the peers it sent
/// to and their ports.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub sources: Vec<Counter<HostAddr, Traffic>>,
    pub in_ports: Vec<Counter<(u8, u16), Traffic>>,
    pub destinations: Vec<Counter<HostAddr, Traffic>>,
    pub out_ports: Vec<Counter<(u8, u16), Traffic>>,
}

struct EvidenceAcc {
    sources: HeavyHitters<HostAddr, Traffic>,
    in_ports: HeavyHitters<(u8, u16), Traffic>,
    destinations: HeavyHitters<HostAddr, Traffic>,
    out_ports: HeavyHitters<(u8, u16), Traffic>,
    /// Seconds it stays watched on this shard's own account (it reached a floor here).
    local_ttl: u32,
    /// Watched since the second just closed: live flows are offered as its evidence once.
    fresh: bool,
    /// The merger asks for it.
    wanted: bool,
    /// Flows offered this second.
    flows: u64,
}

/// Flows per second and watched host taken one by one as evidence, then one in
/// [`EVIDENCE_SAMPLE`].
const EVIDENCE_EXACT: u64 = 4096;
const EVIDENCE_SAMPLE: u64 = 16;

/// Seconds a host stays watched after it last reached a floor in this shard.
const LOCAL_WATCH_S: u32 = 10;

impl EvidenceAcc {
    fn new() -> EvidenceAcc {
        EvidenceAcc {
            sources: HeavyHitters::new(32, 1024),
            in_ports: HeavyHitters::new(32, 1024),
            destinations: HeavyHitters::new(32, 1024),
            out_ports: HeavyHitters::new(32, 1024),
            local_ttl: 0,
            fresh: false,
            wanted: false,
            flows: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.destinations.is_empty()
    }

    /// A flow between the watched host (side `me`) and a peer. Past [`EVIDENCE_EXACT`] flows
    /// in a second (a flood), one flow in [`EVIDENCE_SAMPLE`] is taken, weighted as that many:
    /// the evidence is a picture of the attack, and its cost stays bounded.
    fn add(&mut self, h: &FlowHosts, me: usize, pkts: [u64; 2], bytes: [u64; 2]) {
        self.flows += 1;
        let (pkts, bytes) = if self.flows <= EVIDENCE_EXACT {
            (pkts, bytes)
        } else if self.flows.is_multiple_of(EVIDENCE_SAMPLE) {
            (
                pkts.map(|p| p * EVIDENCE_SAMPLE),
                bytes.map(|b| b * EVIDENCE_SAMPLE),
            )
        } else {
            return;
        };
        let peer = 1 - me;
        // pkts[0] went from side a to side b.
        let (inbound, outbound) = (
            Traffic {
                packets: pkts[peer],
                bytes: bytes[peer],
            },
            Traffic {
                packets: pkts[me],
                bytes: bytes[me],
            },
        );
        if inbound.packets > 0 {
            self.sources
                .add(h.addrs[peer], inbound.packets, |v| v.merge(&inbound));
            self.in_ports
                .add((h.proto, h.ports[me]), inbound.packets, |v| {
                    v.merge(&inbound)
                });
        }
        if outbound.packets > 0 {
            self.destinations
                .add(h.addrs[peer], outbound.packets, |v| v.merge(&outbound));
            self.out_ports
                .add((h.proto, h.ports[peer]), outbound.packets, |v| {
                    v.merge(&outbound)
                });
        }
    }

    fn take(&mut self) -> Evidence {
        self.flows = 0;
        Evidence {
            sources: self.sources.take_sorted(),
            in_ports: self.in_ports.take_sorted(),
            destinations: self.destinations.take_sorted(),
            out_ports: self.out_ports.take_sorted(),
        }
    }
}

/// Hosts the merger wants evidence about (attacks in progress), shared with every shard; a
/// shard rereads the list when `generation` changes.
#[derive(Default)]
pub struct WatchList {
    pub generation: AtomicU64,
    pub hosts: Mutex<Vec<HostAddr>>,
}

impl WatchList {
    pub fn set(&self, hosts: Vec<HostAddr>) {
        *self.hosts.lock().unwrap_or_else(|e| e.into_inner()) = hosts;
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// One shard's second.
#[derive(Clone, Debug, Default)]
pub struct SecondReport {
    /// Unix seconds (packet time) the second starts at.
    pub second: u64,
    /// Hosts whose rates reached a floor in this shard (see [`ShardAnalytics::floors`]).
    pub hosts: Vec<(HostAddr, HostSecond)>,
    /// Filter-set counts of the second (empty without filter-sets).
    pub filters: FilterCounts,
    pub evidence: Vec<(HostAddr, Evidence)>,
    /// Packets and bytes of the shard's flows in the second (the interface's share).
    pub total: Traffic,
}

/// One shard's interval.
#[derive(Clone, Debug, Default)]
pub struct IntervalPart {
    pub start: u64,
    pub end: u64,
    /// Hosts by bytes sent (talkers) and received (destinations), the shard's top ones, and
    /// the value of the last one listed when the list was cut (0: complete).
    pub talkers: Vec<(HostAddr, Traffic)>,
    pub talkers_cut: u64,
    pub destinations: Vec<(HostAddr, Traffic)>,
    pub destinations_cut: u64,
    /// Hosts without a host-table entry (table full) or purged during the interval.
    pub overflow_talkers: Part<HostAddr, Traffic>,
    pub overflow_destinations: Part<HostAddr, Traffic>,
    pub flows: Vec<FlowIvl>,
    /// (protocol, server port).
    pub ports: Vec<((u8, u16), Usage)>,
    pub apps: Vec<((u16, u16), Usage)>,
    pub syn: Part<HostAddr, SynStats>,
    pub scans: Vec<ScanGroup>,
    pub scan_untracked: u64,
    pub icmp_senders: Part<HostAddr, IcmpStats>,
    pub icmp_receivers: Part<HostAddr, IcmpStats>,
    pub total: Traffic,
    pub hosts: u64,
}

/// What a shard hands the merger.
#[derive(Clone, Debug)]
pub enum Report {
    Second(SecondReport),
    Interval(Box<IntervalPart>),
}

/// Filter-set evaluation and counts of one engine. A packet adds to this second's counts
/// only (one pair of adds per matching expression); the second is folded into the totals
/// when it closes.
pub struct Filters {
    pub eval: FilterEval,
    /// (packets, bytes) per expression, this second.
    second: Vec<[u64; 2]>,
    pub total: FilterCounts,
}

impl Filters {
    fn new(eval: FilterEval, n: usize) -> Filters {
        Filters {
            eval,
            second: vec![[0; 2]; n],
            total: FilterCounts::new(n),
        }
    }

    #[inline]
    pub fn count(&mut self, mask: u128, packets: u64, bytes: u64) {
        let mut add = |mut m: u64, base: usize| {
            while m != 0 {
                let i = base + m.trailing_zeros() as usize;
                m &= m - 1;
                if let Some(c) = self.second.get_mut(i) {
                    c[0] += packets;
                    c[1] += bytes;
                }
            }
        };
        add(mask as u64, 0);
        let high = (mask >> 64) as u64 & !(1 << 63); // without USE_FLOW_BITS
        if high != 0 {
            add(high, 64);
        }
    }

    /// This second's counts so far.
    pub fn second(&self) -> FilterCounts {
        FilterCounts {
            packets: self.second.iter().map(|c| c[0]).collect(),
            bytes: self.second.iter().map(|c| c[1]).collect(),
        }
    }

    /// This second's counts, added to the totals and cleared.
    fn take_second(&mut self) -> FilterCounts {
        let s = self.second();
        self.total.merge(&s);
        self.second.iter_mut().for_each(|c| *c = [0; 2]);
        s
    }
}

/// A shard's analytics state (see the module comment).
pub struct ShardAnalytics {
    cfg: Arc<AnalyticsConfig>,
    pub filters: Option<Filters>,
    slots: Vec<SlotStats>,
    sec_dirty: Vec<u32>,
    sec_number: u32,
    /// Per rate key, the least a host must reach in this shard to be reported for a second.
    floors: [u64; RATE_KEYS.len()],
    /// This second's traffic of hosts without a host-table entry: [inbound, outbound].
    overflow_sec: [HeavyHitters<HostAddr, Rates>; 2],
    sec_total: Traffic,
    syn: HeavyHitters<HostAddr, SynStats>,
    scans: ScanTracker,
    icmp_senders: HeavyHitters<HostAddr, IcmpStats>,
    icmp_receivers: HeavyHitters<HostAddr, IcmpStats>,
    overflow_talkers: HeavyHitters<HostAddr, Traffic>,
    overflow_destinations: HeavyHitters<HostAddr, Traffic>,
    ended_flows: Vec<FlowIvl>,
    ports: HashMap<(u8, u16), Usage>,
    apps: HashMap<(u16, u16), Usage>,
    /// The entry last added to `ports` / `apps`, not yet folded in.
    last_port: Option<((u8, u16), Usage)>,
    last_app: Option<((u16, u16), Usage)>,
    /// The least bytes an ended flow must have to enter `ended_flows` (see `offer_flow`).
    ended_cut: u64,
    ivl_total: Traffic,
    watch: Arc<WatchList>,
    watch_generation: u64,
    watched: HashMap<HostAddr, EvidenceAcc>,
    /// The second closed but not handed over yet (see [`ShardAnalytics::close_second`]).
    pending_second: Option<SecondReport>,
    ready: Vec<Report>,
    interval_start: Option<u64>,
}

/// Sketch and budget sizes (per shard).
const SYN_COUNTERS: usize = 2048;
const ICMP_COUNTERS: usize = 512;
const OVERFLOW_COUNTERS: usize = 1024;
const SCAN_BUDGET: usize = 1 << 18;
/// Count-Min width in front of each sketch (4 rows of this many u32: 64 KiB).
const SKETCH_WIDTH: usize = 4096;

impl ShardAnalytics {
    pub fn new(cfg: Arc<AnalyticsConfig>, watch: Arc<WatchList>) -> ShardAnalytics {
        let shards = cfg.shards.max(1) as u64;
        let floors = RATE_KEYS.map(|k| {
            cfg.thresholds.lowest(k).map_or(u64::MAX, |v| {
                let v = if k == Key::DdosMbps {
                    v.saturating_mul(125_000) // megabits per second to bytes per second
                } else {
                    v
                };
                (v / (2 * shards)).max(1)
            })
        });
        let filters = cfg.filter_sets.clone().map(|s| {
            let n = s.len();
            Filters::new(FilterEval::new(s), n)
        });
        ShardAnalytics {
            filters,
            slots: Vec::new(),
            sec_dirty: Vec::new(),
            sec_number: 1,
            floors,
            overflow_sec: [
                HeavyHitters::new(OVERFLOW_COUNTERS, SKETCH_WIDTH),
                HeavyHitters::new(OVERFLOW_COUNTERS, SKETCH_WIDTH),
            ],
            sec_total: Traffic::default(),
            syn: HeavyHitters::new(SYN_COUNTERS, SKETCH_WIDTH),
            scans: ScanTracker::new(SCAN_BUDGET),
            icmp_senders: HeavyHitters::new(ICMP_COUNTERS, SKETCH_WIDTH),
            icmp_receivers: HeavyHitters::new(ICMP_COUNTERS, SKETCH_WIDTH),
            overflow_talkers: HeavyHitters::new(OVERFLOW_COUNTERS, SKETCH_WIDTH),
            overflow_destinations: HeavyHitters::new(OVERFLOW_COUNTERS, SKETCH_WIDTH),
            ended_flows: Vec::new(),
            ports: HashMap::new(),
            apps: HashMap::new(),
            last_port: None,
            last_app: None,
            ended_cut: 0,
            ivl_total: Traffic::default(),
            watch,
            watch_generation: 0,
            watched: HashMap::new(),
            pending_second: None,
            ready: Vec::new(),
            interval_start: None,
            cfg,
        }
    }

    pub fn config(&self) -> &AnalyticsConfig {
        &self.cfg
    }

    /// Bytes held by the per-host array and the lists (for the engine's memory figure).
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<SlotStats>()
            + self.sec_dirty.capacity() * 4
            + self.scans.log.capacity() * std::mem::size_of::<Target>()
    }

    /// Frees the per-host counters once the last second and interval are closed and handed
    /// over (end of input): nothing is pending in them. Filter-set totals stay.
    pub fn release_host_counters(&mut self) {
        if self.sec_dirty.is_empty() && self.pending_second.is_none() {
            self.slots = Vec::new();
            self.sec_dirty = Vec::new();
        }
    }

    #[inline(always)]
    fn slot(&mut self, slot: u32) -> &mut SlotStats {
        let i = slot as usize;
        if i >= self.slots.len() {
            self.grow(i);
        }
        let s = &mut self.slots[i];
        if s.listed != self.sec_number {
            s.listed = self.sec_number;
            self.sec_dirty.push(slot);
        }
        &mut self.slots[i]
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        // Within the reserved capacity this touches only the new entries' pages; past it
        // (no reservation), doubling, so a table filling up does not reallocate per host.
        let want = if i < self.slots.capacity() {
            (i + 1)
                .max(self.slots.len() + 1024)
                .min(self.slots.capacity())
        } else {
            (i + 1).max(self.slots.len() * 2).max(1024)
        };
        self.slots.resize(want, SlotStats::default());
    }

    /// Reserves the per-host counters for a host table of `capacity` (address space only:
    /// pages are touched as hosts come, and the array never moves).
    pub fn reserve_hosts(&mut self, capacity: usize) {
        if self.slots.capacity() < capacity {
            self.slots.reserve_exact(capacity - self.slots.len());
        }
    }

    /// A prefetch of a host slot's counters (the engine's flush walks flows in order and
    /// their hosts at random).
    #[inline(always)]
    pub fn prefetch(&self, slot: u32) {
        if let Some(s) = self.slots.get(slot as usize) {
            crate::prefetch_read(s);
        }
    }

    /// A host leaves the table (purged): what it did in this interval is kept in the
    /// overflow lists.
    pub fn host_purged(&mut self, slot: u32, host: HostAddr) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let (out, inn) = (
            Traffic {
                packets: s.ivl_pkts[OUT],
                bytes: s.ivl_bytes[OUT],
            },
            Traffic {
                packets: s.ivl_pkts[IN],
                bytes: s.ivl_bytes[IN],
            },
        );
        s.ivl_pkts = [0; 2];
        s.ivl_bytes = [0; 2];
        s.ivl_tcp = [0; 2];
        if out.bytes > 0 || out.packets > 0 {
            self.overflow_talkers
                .add(host, out.bytes, |t| t.merge(&out));
        }
        if inn.bytes > 0 || inn.packets > 0 {
            self.overflow_destinations
                .add(host, inn.bytes, |t| t.merge(&inn));
        }
    }

    /// A new flow: its client opened it toward its server (`server_port`, or the ICMP type
    /// for ICMP).
    /// (Its hosts count it as a new flow at its first flush, which touches them anyway.)
    #[inline]
    pub fn flow_created(&mut self, h: &FlowHosts, server_port: u16) {
        let c = h.client_side as usize;
        let (client, server) = (h.addrs[c], h.addrs[1 - c]);
        self.scans.add(client, server.addr, h.proto, server_port);
    }

    /// A flow's counts since its last flush: `pkts[0]`/`bytes[0]` went from side a to side b;
    /// `new`: its first flush (of its first record, or of the record after an active
    /// timeout), when it counts as a flow opened by its client toward its server.
    #[inline]
    pub fn flow_flushed(&mut self, h: &FlowHosts, pkts: [u64; 2], bytes: [u64; 2], new: bool) {
        let class = |r: &mut SlotStats, d: usize, n: u32| match h.proto {
            6 => r.sec_tcp[d] = r.sec_tcp[d].saturating_add(n),
            17 => r.sec_udp[d] = r.sec_udp[d].saturating_add(n),
            1 | 58 => r.sec_icmp[d] = r.sec_icmp[d].saturating_add(n),
            _ => {}
        };
        for side in 0..2 {
            let (sent, rcvd) = (side, 1 - side);
            let slot = h.slots[side];
            if slot != NO_HOST {
                let st = self.slot(slot);
                let (ps, pr) = (
                    pkts[sent].min(u32::MAX as u64) as u32,
                    pkts[rcvd].min(u32::MAX as u64) as u32,
                );
                st.sec_pkts[OUT] = st.sec_pkts[OUT].saturating_add(ps);
                st.sec_pkts[IN] = st.sec_pkts[IN].saturating_add(pr);
                st.sec_bytes[OUT] += bytes[sent];
                st.sec_bytes[IN] += bytes[rcvd];
                class(st, OUT, ps);
                class(st, IN, pr);
                if new {
                    let d = if side == h.client_side as usize {
                        OUT
                    } else {
                        IN
                    };
                    st.sec_flows[d] = st.sec_flows[d].saturating_add(1);
                }
            } else {
                self.overflow_flushed(h, side, pkts, bytes, new);
            }
        }
        let all = Traffic {
            packets: pkts[0] + pkts[1],
            bytes: bytes[0] + bytes[1],
        };
        self.sec_total.merge(&all);
        if !self.watched.is_empty() {
            self.evidence(h, pkts, bytes);
        }
    }

    #[cold]
    fn overflow_flushed(
        &mut self,
        h: &FlowHosts,
        side: usize,
        pkts: [u64; 2],
        bytes: [u64; 2],
        new: bool,
    ) {
        let proto = h.proto;
        let a = h.addrs[side];
        if new {
            let d = if side == h.client_side as usize {
                OUT
            } else {
                IN
            };
            self.overflow_sec[d].add(a, 0, |r| r.flows += 1);
        }
        for (dir, from) in [(OUT, side), (IN, 1 - side)] {
            let (p, b) = (pkts[from], bytes[from]);
            if p == 0 {
                continue;
            }
            self.overflow_sec[dir].add(a, p, |r| {
                r.packets += p;
                r.bytes += b;
                match proto {
                    6 => r.tcp += p,
                    17 => r.udp += p,
                    1 | 58 => r.icmp += p,
                    _ => {}
                }
            });
        }
    }

    #[cold]
    fn evidence(&mut self, h: &FlowHosts, pkts: [u64; 2], bytes: [u64; 2]) {
        for me in 0..2 {
            if let Some(acc) = self.watched.get_mut(&h.addrs[me]) {
                acc.add(h, me, pkts, bytes);
            }
        }
    }

    /// A live flow, with its counts so far, offered as evidence about the hosts that just
    /// started to be watched (see [`ShardAnalytics::close_second`]).
    pub fn evidence_from_flow(&mut self, h: &FlowHosts, pkts: [u64; 2], bytes: [u64; 2]) {
        for me in 0..2 {
            if let Some(acc) = self.watched.get_mut(&h.addrs[me]).filter(|a| a.fresh) {
                acc.add(h, me, pkts, bytes);
            }
        }
    }

    /// A TCP packet with SYN, FIN or RST from `src` to `dst` (slots of the packet's sender and
    /// receiver, or [`NO_HOST`]).
    #[cold]
    pub fn tcp_control(
        &mut self,
        slots: [u32; 2],
        src: HostAddr,
        dst: HostAddr,
        dport: u16,
        flags: u8,
    ) {
        let syn_only = flags & (SYN | ACK) == SYN;
        if syn_only {
            for (slot, addr, dir) in [(slots[0], src, OUT), (slots[1], dst, IN)] {
                if slot != NO_HOST {
                    let st = self.slot(slot);
                    st.sec_syn[dir] = st.sec_syn[dir].saturating_add(1);
                } else {
                    self.overflow_sec[dir].add(addr, 0, |r| r.syn += 1);
                }
            }
            self.syn.add(src, 1, |s| {
                s.syn_sent += 1;
                s.ports.add(dport, 1);
            });
        } else if flags & (SYN | ACK) == SYN | ACK {
            if let Some(s) = self.syn.get_mut(&dst) {
                s.synack_rcvd += 1;
            }
        }
        if flags & FIN != 0 {
            if let Some(s) = self.syn.get_mut(&src) {
                s.fin_sent += 1;
            }
        }
        if flags & RST != 0 {
            if let Some(s) = self.syn.get_mut(&src) {
                s.rst_sent += 1;
            }
            if let Some(s) = self.syn.get_mut(&dst) {
                s.rst_rcvd += 1;
            }
        }
    }

    /// An IP fragment from `slots[0]` to `slots[1]`.
    #[cold]
    pub fn fragment(&mut self, slots: [u32; 2], src: HostAddr, dst: HostAddr) {
        for (slot, addr, dir) in [(slots[0], src, OUT), (slots[1], dst, IN)] {
            if slot != NO_HOST {
                let st = self.slot(slot);
                st.sec_frag[dir] = st.sec_frag[dir].saturating_add(1);
            } else {
                self.overflow_sec[dir].add(addr, 0, |r| r.frag += 1);
            }
        }
    }

    /// An ICMP error `sender` sent to `receiver`, about `probe` when the quoted packet could be
    /// read.
    #[cold]
    pub fn icmp_error(
        &mut self,
        sender: HostAddr,
        receiver: HostAddr,
        kind: IcmpKind,
        probe: Option<Probe>,
    ) {
        self.icmp_senders
            .add(sender, 1, |s| s.add(kind, probe, receiver));
        self.icmp_receivers
            .add(receiver, 1, |s| s.add(kind, probe, sender));
    }

    /// A flow ended (or reached its active timeout) with this share of the current interval.
    pub fn flow_ended(&mut self, f: FlowIvl) {
        if f.packets == 0 && f.bytes == 0 {
            return;
        }
        self.add_flow_usage(&f);
        self.offer_flow(f);
    }

    fn add_flow_usage(&mut self, f: &FlowIvl) {
        let u = Usage {
            packets: f.packets,
            bytes: f.bytes,
            flows: 1,
        };
        // Flows come in runs of the same service: the last entry is tried first.
        let port = (f.proto, f.server_port);
        match &mut self.last_port {
            Some((k, acc)) if *k == port => acc.merge(&u),
            last => {
                if let Some((k, acc)) = last.take() {
                    self.ports.entry(k).or_default().merge(&acc);
                }
                *last = Some((port, u));
            }
        }
        match &mut self.last_app {
            Some((k, acc)) if *k == f.app => acc.merge(&u),
            last => {
                if let Some((k, acc)) = last.take() {
                    self.apps.entry(k).or_default().merge(&acc);
                }
                *last = Some((f.app, u));
            }
        }
        self.ivl_total.merge(&Traffic {
            packets: f.packets,
            bytes: f.bytes,
        });
    }

    fn list_len(&self) -> usize {
        (self.cfg.top_n * 4).max(100)
    }

    /// Keeps the heaviest ended flows only (a bounded list, trimmed when twice its size).
    fn offer_flow(&mut self, f: FlowIvl) {
        // Every flow kept has at least this many bytes: a smaller one can never be kept.
        if f.bytes < self.ended_cut {
            return;
        }
        self.ended_flows.push(f);
        let keep = self.list_len();
        if self.ended_flows.len() >= 2 * keep {
            self.ended_flows
                .select_nth_unstable_by(keep - 1, |a, b| b.bytes.cmp(&a.bytes));
            self.ended_cut = self.ended_flows[keep - 1].bytes;
            self.ended_flows.truncate(keep);
        }
    }

    /// Folds the one-entry caches of [`ShardAnalytics::add_flow_usage`] into the maps.
    fn settle_usage(&mut self) {
        if let Some((k, acc)) = self.last_port.take() {
            self.ports.entry(k).or_default().merge(&acc);
        }
        if let Some((k, acc)) = self.last_app.take() {
            self.apps.entry(k).or_default().merge(&acc);
        }
    }

    /// Interval boundaries are multiples of the interval length in packet time.
    pub fn interval_of(&self, second: u64) -> u64 {
        second - second % self.cfg.interval_s.max(1)
    }

    /// Closes the second that started at `second`: the hosts that reached a floor, the
    /// filter-set counts; adds the second to the interval. Returns whether hosts that reached
    /// a floor were not watched yet: the engine then offers its live flows as their evidence
    /// ([`ShardAnalytics::evidence_from_flow`]) before [`ShardAnalytics::seal_second`] hands
    /// the report over, so a flood's first record already names its sources.
    pub fn close_second(&mut self, second: u64, key_of: impl Fn(u32) -> Option<HostAddr>) -> bool {
        let mut rep = SecondReport {
            second,
            ..SecondReport::default()
        };
        let floors = self.floors;
        let reaches = |s: &HostSecond| {
            s.iter().any(|r| {
                r.packets >= floors[0]
                    || r.bytes >= floors[1]
                    || r.flows >= floors[2]
                    || r.syn >= floors[3]
                    || r.udp >= floors[4]
                    || r.icmp >= floors[5]
                    || r.frag >= floors[6]
            })
        };
        const AHEAD: usize = 8;
        for (i, &slot) in self.sec_dirty.iter().enumerate() {
            if let Some(&next) = self.sec_dirty.get(i + AHEAD) {
                crate::prefetch_read(&self.slots[next as usize]);
            }
            let st = &mut self.slots[slot as usize];
            if st.reaches(&floors) {
                if let Some(k) = key_of(slot) {
                    rep.hosts.push((k, st.second()));
                }
            }
            st.close_second();
        }
        self.sec_dirty.clear();
        // Slots listed under an older number are not listed now.
        self.sec_number = self.sec_number.wrapping_add(1).max(1);
        for dir in [IN, OUT] {
            for c in self.overflow_sec[dir].take_sorted() {
                let mut sec = [Rates::default(); 2];
                sec[dir] = c.value;
                if reaches(&sec) {
                    rep.hosts.push((c.key, sec));
                }
                let t = Traffic {
                    packets: c.value.packets,
                    bytes: c.value.bytes,
                };
                if t.bytes > 0 || t.packets > 0 {
                    let l = if dir == OUT {
                        &mut self.overflow_talkers
                    } else {
                        &mut self.overflow_destinations
                    };
                    l.add(c.key, t.bytes, |v| v.merge(&t));
                }
            }
        }
        if let Some(f) = self.filters.as_mut() {
            rep.filters = f.take_second();
        }
        rep.total = std::mem::take(&mut self.sec_total);
        // Hosts that reached a floor here are watched here, whatever the merger decides.
        let mut new = false;
        for (h, _) in &rep.hosts {
            let acc = self.watched.entry(*h).or_insert_with(|| {
                new = true;
                EvidenceAcc {
                    fresh: true,
                    ..EvidenceAcc::new()
                }
            });
            acc.local_ttl = LOCAL_WATCH_S;
        }
        self.pending_second = Some(rep);
        new
    }

    /// Hands the second closed by [`ShardAnalytics::close_second`] over, with the evidence
    /// gathered about watched hosts.
    pub fn seal_second(&mut self) {
        let Some(mut rep) = self.pending_second.take() else {
            return;
        };
        for (host, acc) in self.watched.iter_mut() {
            acc.fresh = false;
            if !acc.is_empty() {
                rep.evidence.push((*host, acc.take()));
            }
        }
        self.refresh_watch();
        self.ready.push(Report::Second(rep));
    }

    fn refresh_watch(&mut self) {
        for acc in self.watched.values_mut() {
            acc.local_ttl = acc.local_ttl.saturating_sub(1);
        }
        self.watched.retain(|_, a| a.wanted || a.local_ttl > 0);
        let g = self.watch.generation.load(Ordering::Acquire);
        if g == self.watch_generation {
            return;
        }
        self.watch_generation = g;
        let hosts = self
            .watch
            .hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for acc in self.watched.values_mut() {
            acc.wanted = false;
        }
        for h in hosts {
            self.watched
                .entry(h)
                .or_insert_with(EvidenceAcc::new)
                .wanted = true;
        }
    }

    /// The start of the interval in progress (None before the first second closed).
    pub fn interval_start(&self) -> Option<u64> {
        self.interval_start
    }

    /// Notes that packet time reached `second` (after [`ShardAnalytics::close_second`]):
    /// when the interval in progress ends at or before it, returns that end and the start of
    /// the interval `second` is in, for [`ShardAnalytics::close_interval`].
    pub fn interval_due(&mut self, second: u64) -> Option<(u64, u64)> {
        match self.interval_start {
            None => {
                self.interval_start = Some(self.interval_of(second));
                None
            }
            Some(s) => {
                let end = s + self.cfg.interval_s.max(1);
                (second >= end).then(|| (end, self.interval_of(second)))
            }
        }
    }

    /// Closes the interval in progress at `end` (a boundary, or the end of the input); the
    /// next one starts at `next` (after a gap in packet time, later than `end`). `live` are the
    /// live flows' shares (the engine's walk), `key_of` names host slots.
    pub fn close_interval(
        &mut self,
        end: u64,
        next: u64,
        live: impl Iterator<Item = FlowIvl>,
        key_of: impl Fn(u32) -> Option<HostAddr>,
    ) {
        let start = self.interval_start.unwrap_or_else(|| self.interval_of(end));
        let keep = self.list_len();
        let mut flows = std::mem::take(&mut self.ended_flows);
        for f in live {
            if f.packets == 0 && f.bytes == 0 {
                continue;
            }
            self.add_flow_usage(&f);
            flows.push(f);
            if flows.len() >= 2 * keep {
                flows.select_nth_unstable_by(keep - 1, |a, b| b.bytes.cmp(&a.bytes));
                flows.truncate(keep);
            }
        }
        flows.sort_unstable_by_key(|f| std::cmp::Reverse(f.bytes));
        flows.truncate(keep);
        self.ended_cut = 0;
        self.settle_usage();

        // Hosts: every slot with traffic in the interval, top `keep` each way.
        let mut talkers = TopK::new(keep);
        let mut dests = TopK::new(keep);
        let mut hosts = 0u64;
        let mut tcp_of: HashMap<HostAddr, u64> = HashMap::new();
        let syn_hosts: HashSet<HostAddr> = self.syn.iter().map(|c| c.key).collect();
        for (slot, st) in self.slots.iter_mut().enumerate() {
            if st.ivl_pkts == [0, 0] {
                continue;
            }
            hosts += 1;
            let t = |d: usize| Traffic {
                packets: st.ivl_pkts[d],
                bytes: st.ivl_bytes[d],
            };
            if st.ivl_pkts[OUT] > 0 {
                talkers.push(slot as u32, t(OUT));
            }
            if st.ivl_pkts[IN] > 0 {
                dests.push(slot as u32, t(IN));
            }
            if !syn_hosts.is_empty() {
                if let Some(k) = key_of(slot as u32) {
                    if syn_hosts.contains(&k) {
                        tcp_of.insert(k, st.ivl_tcp[IN] as u64 + st.ivl_tcp[OUT] as u64);
                    }
                }
            }
            st.ivl_pkts = [0; 2];
            st.ivl_bytes = [0; 2];
            st.ivl_tcp = [0; 2];
        }
        let (talkers, talkers_cut) = talkers.named(&key_of);
        let (destinations, destinations_cut) = dests.named(&key_of);

        let mut syn = self.syn.take_part();
        for c in &mut syn.counters {
            c.value.tcp_packets = tcp_of.get(&c.key).copied().unwrap_or(0);
        }
        let shards = self.cfg.shards.max(1) as u64;
        let floor = |k: Key| {
            self.cfg
                .thresholds
                .lowest(k)
                .map_or(u64::MAX, |v| (v / (2 * shards)).max(1))
        };
        let (scans, scan_untracked) = self
            .scans
            .take_groups(floor(Key::ScanIpTargets), floor(Key::ScanPortTargets));
        let part = IntervalPart {
            start,
            end,
            talkers,
            talkers_cut,
            destinations,
            destinations_cut,
            overflow_talkers: self.overflow_talkers.take_part(),
            overflow_destinations: self.overflow_destinations.take_part(),
            flows,
            ports: self.ports.drain().collect(),
            apps: self.apps.drain().collect(),
            syn,
            scans,
            scan_untracked,
            icmp_senders: self.icmp_senders.take_part(),
            icmp_receivers: self.icmp_receivers.take_part(),
            total: std::mem::take(&mut self.ivl_total),
            hosts,
        };
        self.interval_start = Some(next);
        self.ready.push(Report::Interval(Box::new(part)));
    }

    /// Reports ready since the last call.
    pub fn take_reports(&mut self) -> Vec<Report> {
        std::mem::take(&mut self.ready)
    }
}

/// The `keep` hosts with the most bytes, kept while host slots stream by (trimmed whenever
/// twice as many are held), and the most bytes of a host that was cut (0: none was).
struct TopK {
    keep: usize,
    v: Vec<(u32, Traffic)>,
    cut: u64,
}

impl TopK {
    fn new(keep: usize) -> TopK {
        TopK {
            keep: keep.max(1),
            v: Vec::new(),
            cut: 0,
        }
    }

    fn push(&mut self, slot: u32, t: Traffic) {
        // Every host kept so far has at least `cut` bytes: one with fewer can never be kept.
        if t.bytes < self.cut {
            return;
        }
        self.v.push((slot, t));
        if self.v.len() >= 2 * self.keep {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.v.len() <= self.keep {
            return;
        }
        self.v
            .select_nth_unstable_by_key(self.keep - 1, |e| std::cmp::Reverse(e.1.bytes));
        for e in &self.v[self.keep..] {
            self.cut = self.cut.max(e.1.bytes);
        }
        self.v.truncate(self.keep);
    }

    fn named(
        mut self,
        key_of: &impl Fn(u32) -> Option<HostAddr>,
    ) -> (Vec<(HostAddr, Traffic)>, u64) {
        self.trim();
        self.v
            .sort_unstable_by_key(|e| std::cmp::Reverse(e.1.bytes));
        let named = self
            .v
            .into_iter()
            .filter_map(|(s, t)| Some((key_of(s)?, t)))
            .collect();
        (named, self.cut)
    }
}
