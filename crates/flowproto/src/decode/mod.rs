//! Decoding flow-export datagrams: NetFlow v5, NetFlow v9 (RFC 3954), IPFIX (RFC 7011) and
//! sFlow v5, into [`CollectedFlow`]s and [`SampledPacket`]s.
//!
//! A [`Collector`] holds the state of every exporter it has heard from (keyed by the UDP/TCP
//! peer address): templates per observation domain, sampling rates learnt from options data,
//! interface names, sFlow interface counters, sequence numbers and [`ExporterStats`].
//!
//! Nothing here panics on any input, and memory is bounded: exporters, templates per exporter,
//! fields per template, template bytes, buffered template-less data sets, interface maps,
//! sampler tables and domains are all capped by [`Config`] (interface names are cut at 128
//! bytes). With the defaults the worst case (1024 exporters, every table full) is a few hundred
//! MB; a real exporter needs a few tens of KB. Malformed parts of a datagram are counted in
//! [`ExporterStats::parse_errors`]; what could be decoded before the damage is still returned.
//!
//! ```
//! use sonde_flowproto::decode::Collector;
//! let mut c = Collector::default();
//! let (mut flows, mut samples) = (Vec::new(), Vec::new());
//! let peer = "192.0.2.1:2055".parse().unwrap();
//! // A NetFlow v5 header announcing no records.
//! let mut d = vec![0u8; 24];
//! d[1] = 5;
//! let s = c.decode(peer, &d, 0, &mut flows, &mut samples).unwrap();
//! assert_eq!(s.flows, 0);
//! assert_eq!(c.stats().next().unwrap().1.datagrams, 1);
//! ```

mod ie;
mod netflow5;
mod sflow;
mod template;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::record::{CollectedFlow, SampledPacket};

pub use sflow::IfCounters;

/// Limits and timeouts of a [`Collector`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Templates not refreshed for this long are dropped (0: never). Default 30 minutes.
    pub template_timeout_ms: u64,
    /// Exporters tracked at once; the least recently heard one is evicted. Default 1024.
    pub max_exporters: usize,
    /// Templates (data + options, all domains) per exporter. Default 4096.
    pub max_templates_per_exporter: usize,
    /// Fields in one template. Default 512.
    pub max_fields_per_template: usize,
    /// Heap memory the templates of one exporter may hold (each template's fields, its
    /// shared box and table slot, allocator overhead included). Default 256 KiB.
    pub max_template_bytes_per_exporter: usize,
    /// Data sets that arrived before their template are kept (this many bytes per exporter,
    /// oldest dropped first) and decoded when the template comes. 0 disables. Default 64 KiB.
    pub max_pending_bytes_per_exporter: usize,
    /// Buffered template-less data sets older than this are dropped. Default 60 s.
    pub pending_timeout_ms: u64,
    /// Entries in each per-exporter table keyed by interface or sampler (interface names,
    /// sFlow counters, sampler rates). Default 8192.
    pub max_map_entries: usize,
    /// Observation domains / source ids / sFlow sub-agents tracked per exporter (sequence
    /// numbers, domain sampling rates, system init times). Default 256.
    pub max_domains_per_exporter: usize,
    /// A sequence jump larger than this (or backwards) counts as a reset, not as loss.
    /// Default 1,000,000.
    pub max_sequence_gap: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            template_timeout_ms: 30 * 60 * 1000,
            max_exporters: 1024,
            max_templates_per_exporter: 4096,
            max_fields_per_template: 512,
            max_template_bytes_per_exporter: 256 * 1024,
            max_pending_bytes_per_exporter: 64 * 1024,
            pending_timeout_ms: 60_000,
            max_map_entries: 8192,
            max_domains_per_exporter: 256,
            max_sequence_gap: 1_000_000,
        }
    }
}

/// Per-exporter counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExporterStats {
    /// Datagrams (or IPFIX messages) received, whether they decoded or not.
    pub datagrams: u64,
    pub bytes: u64,
    /// Flow records decoded into [`CollectedFlow`]s (NetFlow v5, v9/IPFIX data records).
    pub records: u64,
    /// Options data records processed (v9/IPFIX).
    pub option_records: u64,
    /// Template records (data and options) accepted, including refreshes.
    pub templates_received: u64,
    /// Templates removed by an IPFIX withdrawal.
    pub templates_withdrawn: u64,
    /// Templates dropped for not being refreshed within [`Config::template_timeout_ms`].
    pub templates_expired: u64,
    /// Template records refused: malformed, over a cap, reserved id.
    pub templates_rejected: u64,
    /// Templates currently held.
    pub templates_active: u64,
    /// NetFlow v5 and IPFIX: records missing according to the sequence numbers.
    pub lost_records: u64,
    /// NetFlow v9: export packets missing according to the sequence numbers.
    pub lost_packets: u64,
    /// sFlow: datagrams missing according to the sequence numbers.
    pub lost_datagrams: u64,
    /// Sequence numbers that went backwards or jumped too far (exporter restart, reordering).
    pub sequence_resets: u64,
    /// Malformed headers, sets, records or samples.
    pub parse_errors: u64,
    /// Data sets received before their template.
    pub no_template_sets: u64,
    pub no_template_bytes: u64,
    /// Of those, sets decoded later when their template arrived.
    pub pending_decoded_sets: u64,
    /// Of those, sets dropped (buffer full, too old, buffering disabled).
    pub pending_dropped_sets: u64,
    /// Sets with a reserved set id (4..=255), skipped.
    pub unknown_sets: u64,
    /// sFlow: flow samples (compact and expanded).
    pub flow_samples: u64,
    /// sFlow: raw packet header records turned into [`SampledPacket`]s.
    pub packet_samples: u64,
    /// sFlow: other flow records (extended switch/router/gateway/user/url, ...), skipped.
    pub other_flow_records: u64,
    /// sFlow: counter samples (compact and expanded).
    pub counter_samples: u64,
    /// sFlow: generic interface counter records stored in the counters map.
    pub if_counter_records: u64,
    /// sFlow: other counter records (ethernet, vlan, processor, ...), skipped.
    pub other_counter_records: u64,
    /// sFlow: samples of an unknown format or enterprise, skipped.
    pub other_samples: u64,
    /// Time of the last datagram (`now_ms` as given to [`Collector::decode`]).
    pub last_seen_ms: u64,
}

/// What one datagram produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub protocol: Option<Protocol>,
    /// Flow records appended to `flows` (including buffered sets decoded now).
    pub flows: usize,
    /// Packet samples appended to `samples`.
    pub samples: usize,
    pub templates: usize,
    pub option_records: usize,
    pub no_template_sets: usize,
    /// Malformed parts skipped (also counted in [`ExporterStats::parse_errors`]).
    pub errors: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    NetflowV5,
    NetflowV9,
    Ipfix,
    SflowV5,
}

/// Why a whole datagram could not be decoded. Errors inside a datagram that still had a valid
/// header are counted instead, see [`Summary::errors`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Too short for any header.
    Truncated,
    /// Not NetFlow v5/v9, IPFIX or sFlow v5 (the version found).
    UnsupportedVersion(u32),
    /// A header field is impossible (the reason).
    Malformed(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "datagram truncated"),
            DecodeError::UnsupportedVersion(v) => write!(f, "unsupported flow export version {v}"),
            DecodeError::Malformed(why) => write!(f, "malformed datagram: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Big-endian bounds-checked reads.
#[derive(Clone, Copy)]
pub(crate) struct Rd<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Rd<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Rd { b, p: 0 }
    }
    pub(crate) fn left(&self) -> usize {
        self.b.len() - self.p
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.left() {
            return None;
        }
        let s = &self.b[self.p..self.p + n];
        self.p += n;
        Some(s)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_be_bytes([s[0], s[1]]))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let hi = self.u32()? as u64;
        let lo = self.u32()? as u64;
        Some(hi << 32 | lo)
    }
}

/// Tracks one sequence-number stream.
#[derive(Clone, Copy, Debug, Default)]
struct SeqState {
    /// The next expected value, None when unknown (first message, or a message whose record
    /// count could not be known).
    next: Option<u32>,
}

/// Kind of sequence number: decides which loss counter a gap goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SeqKind {
    V5,
    V9,
    Ipfix,
    Sflow,
}

/// A data set kept until its template arrives.
#[derive(Clone, Debug)]
struct Pending {
    version: u16,
    domain: u32,
    set_id: u16,
    received_ms: u64,
    time: template::TimeCtx,
    body: Vec<u8>,
}

/// Everything known about one exporter.
#[derive(Debug, Default)]
struct Exporter {
    stats: ExporterStats,
    // Shared so a data set holds its template while the exporter's state is updated.
    templates: HashMap<template::TKey, std::sync::Arc<template::Template>>,
    template_bytes: usize,
    last_template_sweep_ms: u64,
    sequences: HashMap<(SeqKind, u32), SeqState>,
    /// Sampling rate per domain from options data without a sampler id.
    domain_sampling: HashMap<u32, u32>,
    /// Last rate learnt from any sampler of the domain: used for records that carry no sampler
    /// id when no domain-wide rate is known (single-sampler exporters).
    domain_last_sampler: HashMap<u32, u32>,
    /// Sampling rate per (domain, sampler / selector id).
    samplers: HashMap<(u32, u64), u32>,
    /// systemInitTimeMilliseconds (IE 160) per domain, from options data.
    system_init_ms: HashMap<u32, u64>,
    interfaces: HashMap<u32, String>,
    counters: HashMap<u32, IfCounters>,
    sflow_agent: Option<IpAddr>,
    pending: VecDeque<Pending>,
    pending_bytes: usize,
}

fn bounded_insert<K: std::hash::Hash + Eq, V>(
    m: &mut HashMap<K, V>,
    cap: usize,
    k: K,
    v: V,
) -> bool {
    if m.len() >= cap && !m.contains_key(&k) {
        return false;
    }
    m.insert(k, v);
    true
}

impl Exporter {
    /// Checks `seq` against the expected value, records the loss, and sets the next expected
    /// value (`advance` units further; None: unknown).
    fn sequence(
        &mut self,
        cfg: &Config,
        kind: SeqKind,
        domain: u32,
        seq: u32,
        advance: Option<u32>,
    ) {
        let cap = cfg.max_domains_per_exporter;
        let st = match self.sequences.get_mut(&(kind, domain)) {
            Some(s) => s,
            None => {
                if self.sequences.len() >= cap {
                    return;
                }
                self.sequences.entry((kind, domain)).or_default()
            }
        };
        if let Some(exp) = st.next {
            let gap = seq.wrapping_sub(exp);
            if gap != 0 {
                if gap <= cfg.max_sequence_gap {
                    let g = gap as u64;
                    match kind {
                        SeqKind::V5 | SeqKind::Ipfix => self.stats.lost_records += g,
                        SeqKind::V9 => self.stats.lost_packets += g,
                        SeqKind::Sflow => self.stats.lost_datagrams += g,
                    }
                } else {
                    self.stats.sequence_resets += 1;
                }
            }
        }
        st.next = advance.map(|a| seq.wrapping_add(a));
    }

    fn error(&mut self, sum: &mut Summary) {
        self.stats.parse_errors += 1;
        sum.errors += 1;
    }
}

/// The collector: per-exporter state and statistics. See the module documentation.
#[derive(Debug, Default)]
pub struct Collector {
    config: Config,
    exporters: HashMap<SocketAddr, Exporter>,
    evicted: u64,
}

impl Collector {
    pub fn new(config: Config) -> Self {
        Collector {
            config,
            exporters: HashMap::new(),
            evicted: 0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Decodes one datagram (or one IPFIX message from an [`IpfixStream`]) from `exporter`,
    /// received at `now_ms` (milliseconds since the Unix epoch; used for template expiry and
    /// pending-set ageing only). Flow records are appended to `flows`, sFlow packet samples to
    /// `samples`.
    pub fn decode(
        &mut self,
        exporter: SocketAddr,
        datagram: &[u8],
        now_ms: u64,
        flows: &mut Vec<CollectedFlow>,
        samples: &mut Vec<SampledPacket>,
    ) -> Result<Summary, DecodeError> {
        if !self.exporters.contains_key(&exporter)
            && self.exporters.len() >= self.config.max_exporters.max(1)
        {
            let oldest = self
                .exporters
                .iter()
                .min_by_key(|(_, e)| e.stats.last_seen_ms)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.exporters.remove(&k);
                self.evicted += 1;
            }
        }
        let cfg = &self.config;
        let ex = self.exporters.entry(exporter).or_default();
        ex.stats.datagrams += 1;
        ex.stats.bytes += datagram.len() as u64;
        ex.stats.last_seen_ms = now_ms;
        template::expire(cfg, ex, now_ms);

        let mut sum = Summary::default();
        if datagram.len() < 4 {
            ex.stats.parse_errors += 1;
            return Err(DecodeError::Truncated);
        }
        let v16 = u16::from_be_bytes([datagram[0], datagram[1]]);
        let v32 = u32::from_be_bytes([datagram[0], datagram[1], datagram[2], datagram[3]]);
        let r = match (v16, v32) {
            (5, _) => {
                sum.protocol = Some(Protocol::NetflowV5);
                netflow5::decode(cfg, ex, exporter, datagram, flows, &mut sum)
            }
            (9, _) => {
                sum.protocol = Some(Protocol::NetflowV9);
                template::decode_v9(cfg, ex, exporter, datagram, now_ms, flows, &mut sum)
            }
            (10, _) => {
                sum.protocol = Some(Protocol::Ipfix);
                template::decode_ipfix(cfg, ex, exporter, datagram, now_ms, flows, &mut sum)
            }
            (_, 5) => {
                sum.protocol = Some(Protocol::SflowV5);
                sflow::decode(cfg, ex, exporter, datagram, now_ms, samples, &mut sum)
            }
            (0, v) => Err(DecodeError::UnsupportedVersion(v)),
            (v, _) => Err(DecodeError::UnsupportedVersion(v as u32)),
        };
        ex.stats.templates_active = ex.templates.len() as u64;
        match r {
            Ok(()) => Ok(sum),
            Err(e) => {
                ex.stats.parse_errors += 1;
                Err(e)
            }
        }
    }

    /// Counters of every exporter heard from (and not evicted).
    pub fn stats(&self) -> impl Iterator<Item = (SocketAddr, &ExporterStats)> {
        self.exporters.iter().map(|(k, e)| (*k, &e.stats))
    }

    /// Counters of one exporter.
    pub fn exporter_stats(&self, exporter: SocketAddr) -> Option<&ExporterStats> {
        self.exporters.get(&exporter).map(|e| &e.stats)
    }

    /// Exporters evicted to stay under [`Config::max_exporters`].
    pub fn evicted_exporters(&self) -> u64 {
        self.evicted
    }

    /// Interface names learnt from options data (IE 82 interfaceName by IE 10 ingressInterface,
    /// or v9 Interface scope): ifIndex → name.
    pub fn interface_names(&self, exporter: SocketAddr) -> Option<&HashMap<u32, String>> {
        self.exporters.get(&exporter).map(|e| &e.interfaces)
    }

    /// sFlow generic interface counters (latest sample per ifIndex).
    pub fn interface_counters(&self, exporter: SocketAddr) -> Option<&HashMap<u32, IfCounters>> {
        self.exporters.get(&exporter).map(|e| &e.counters)
    }

    /// The agent address an sFlow exporter puts in its datagrams.
    pub fn sflow_agent(&self, exporter: SocketAddr) -> Option<IpAddr> {
        self.exporters.get(&exporter).and_then(|e| e.sflow_agent)
    }

    /// The sampling rate that applies to records of `domain` that carry neither a rate nor a
    /// known sampler id (1 when none was announced).
    pub fn sampling_rate(&self, exporter: SocketAddr, domain: u32) -> u32 {
        self.exporters
            .get(&exporter)
            .map_or(1, |e| template::default_rate(e, domain))
    }

    /// Sampling rate announced for sampler / selector `sampler` of `domain`.
    pub fn sampler_rate(&self, exporter: SocketAddr, domain: u32, sampler: u64) -> Option<u32> {
        self.exporters
            .get(&exporter)
            .and_then(|e| e.samplers.get(&(domain, sampler)).copied())
    }

    /// Templates currently held for `exporter`: (version 9 or 10, domain, template id, field
    /// count, is options template).
    pub fn templates(&self, exporter: SocketAddr) -> Vec<(u16, u32, u16, usize, bool)> {
        let mut v: Vec<_> = self
            .exporters
            .get(&exporter)
            .map(|e| {
                e.templates
                    .iter()
                    .map(|(k, t)| (k.0, k.1, k.2, t.fields.len(), t.scope_count > 0))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Forgets an exporter (e.g. its TCP connection closed).
    pub fn remove_exporter(&mut self, exporter: SocketAddr) -> bool {
        self.exporters.remove(&exporter).is_some()
    }
}

/// Why an [`IpfixStream`] gave up: the connection should be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// A message header with a version other than 10 or a length below 16: the stream is out
    /// of sync and cannot recover.
    BadHeader { version: u16, length: u16 },
    /// More unconsumed bytes than the buffer allows.
    Overflow,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::BadHeader { version, length } => {
                write!(
                    f,
                    "IPFIX stream out of sync (version {version}, length {length})"
                )
            }
            StreamError::Overflow => write!(f, "IPFIX stream buffer full"),
        }
    }
}

impl std::error::Error for StreamError {}

/// Splits an IPFIX-over-TCP byte stream into messages by their length field (RFC 7011 §10.4).
/// One per connection; feed it with [`push`](Self::push), then take messages with
/// [`next_message`](Self::next_message) until it returns `Ok(None)`, and pass each to
/// [`Collector::decode`].
#[derive(Debug)]
pub struct IpfixStream {
    buf: Vec<u8>,
    consumed: usize,
    max: usize,
    failed: bool,
}

impl Default for IpfixStream {
    fn default() -> Self {
        Self::new(256 * 1024)
    }
}

impl IpfixStream {
    /// `max_buffer` bytes may wait unconsumed (at least one maximal message, 65535 bytes).
    pub fn new(max_buffer: usize) -> Self {
        IpfixStream {
            buf: Vec::new(),
            consumed: 0,
            max: max_buffer.max(65535),
            failed: false,
        }
    }

    /// Bytes waiting for the rest of their message.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.consumed
    }

    fn compact(&mut self) {
        if self.consumed > 0 {
            self.buf.drain(..self.consumed);
            self.consumed = 0;
        }
    }

    /// Appends received bytes. Fails (and keeps nothing) when more than the buffer limit would
    /// be waiting: drain messages after each push.
    pub fn push(&mut self, data: &[u8]) -> Result<(), StreamError> {
        if self.failed {
            return Err(StreamError::Overflow);
        }
        self.compact();
        if self.buf.len() + data.len() > self.max {
            self.failed = true;
            self.buf = Vec::new();
            return Err(StreamError::Overflow);
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// The next complete message, `Ok(None)` when more bytes are needed. After an error the
    /// stream stays failed.
    pub fn next_message(&mut self) -> Result<Option<&[u8]>, StreamError> {
        self.compact();
        if self.failed {
            return Err(StreamError::Overflow);
        }
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let version = u16::from_be_bytes([self.buf[0], self.buf[1]]);
        let length = u16::from_be_bytes([self.buf[2], self.buf[3]]);
        if version != 10 || length < 16 {
            self.failed = true;
            self.buf = Vec::new();
            return Err(StreamError::BadHeader { version, length });
        }
        let len = length as usize;
        if self.buf.len() < len {
            return Ok(None);
        }
        self.consumed = len;
        Ok(Some(&self.buf[..len]))
    }
}

#[cfg(test)]
mod tests;
