//! One shard: decoder + flow table + host table + expiry, fed packets in batches.
//!
//! Batches are processed in three passes so memory latency overlaps (as DPDK's bulk lookup and
//! Cento do): hash every packet and prefetch its index slot; read the slots and prefetch the
//! candidate flow entries; then compare keys and update counters. Everything periodic (host
//! accounting, idle/active timeouts, host purge) happens in [`Engine::tick`], driven by packet
//! time, so reading a file gives the same result however fast it is read.

use crate::flow::{
    locality, DirectionCounts, EndReason, Flow, FlowExt, FlowRecord, FlowRow, NO_HOST,
};
use crate::host::{Host, HostKey, HostTable};
use crate::key::{Dir, FlowKey};
use crate::series::{Gauges, SeriesAcc, SeriesTick};
use crate::stats::{DropReason, ShardStats};
use crate::table::{prefetch_read, Index};
use sonde_analytics::{Networks, ShardAnalytics};
use sonde_dpi::{Dpi, FlowDpi, Meta};
use sonde_wire::{Decoded, Decoder, LinkType, Outcome};

mod analytics;
pub use analytics::quotes_a_packet;
mod collect;
pub use collect::decoded_from_record;
mod l7;

/// Bytes of one packet's payload kept for DPI (a TLS ClientHello's first segment fits).
pub const DPI_PAYLOAD_MAX: usize = 2048;

/// Where one packet's bytes for DPI are in a [`Payloads`] buffer: the IP packet (from its
/// header) is `bytes[off..off + len]`, its transport payload starts `payload_at` bytes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub off: u32,
    pub len: u32,
    pub payload_at: u32,
}

/// Payload bytes of a batch of decoded packets, for DPI: `spans[i]` is packet i's in `bytes`
/// (copied), or `direct[i]` its (IP packet, payload) in the frame itself (no copy, when the
/// frames outlive the batch); both empty when DPI is off.
///
/// With filter-sets, `marks[i]` is packet i's filter-set mask (`sonde_analytics::filterset`,
/// worked out where its frame was) and `wire_lens[i]` its length on the wire; both empty
/// without.
#[derive(Clone, Copy, Debug)]
pub struct Payloads<'a> {
    pub bytes: &'a [u8],
    pub spans: &'a [Span],
    pub direct: &'a [Option<(&'a [u8], &'a [u8])>],
    pub marks: &'a [u128],
    pub wire_lens: &'a [u32],
}

impl Payloads<'_> {
    pub const NONE: Payloads<'static> = Payloads {
        bytes: &[],
        spans: &[],
        direct: &[],
        marks: &[],
        wire_lens: &[],
    };

    /// Packet i's (IP packet, transport payload), when it has a payload.
    #[inline(always)]
    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        if !self.direct.is_empty() {
            return self.direct.get(i).copied().flatten();
        }
        let s = self.spans.get(i)?;
        if s.len <= s.payload_at {
            return None;
        }
        let ip = self.bytes.get(s.off as usize..(s.off + s.len) as usize)?;
        Some((ip, ip.get(s.payload_at as usize..)?))
    }
}

/// A decoded packet's (IP packet or payload, payload) inside its own frame: what
/// [`copy_payload`] would copy, without copying.
#[inline]
fn payload_in_frame<'a>(
    d: &Decoded,
    frame: &'a [u8],
    with_headers: bool,
) -> Option<(&'a [u8], &'a [u8])> {
    let start = d.payload_offset as usize;
    let ip = if with_headers {
        d.ip_offset as usize
    } else {
        start
    };
    if d.payload_len == 0 || start < ip || (with_headers && start == ip) {
        return None;
    }
    let end = start
        .saturating_add(d.payload_len as usize)
        .min(start.saturating_add(DPI_PAYLOAD_MAX))
        .min(frame.len());
    let whole = frame.get(ip..end)?;
    let payload = whole.get(start - ip..).filter(|p| !p.is_empty())?;
    Some((whole, payload))
}

/// Copies a decoded packet's transport payload (at most [`DPI_PAYLOAD_MAX`] bytes) to `bytes`,
/// with the IP and transport headers before it when `with_headers` (nDPI wants the whole IP
/// packet), and returns its span; an empty span when it has no captured payload.
#[inline]
pub fn copy_payload(d: &Decoded, frame: &[u8], bytes: &mut Vec<u8>, with_headers: bool) -> Span {
    let Some((whole, payload)) = payload_in_frame(d, frame, with_headers) else {
        return Span::default();
    };
    let off = bytes.len() as u32;
    bytes.extend_from_slice(whole);
    Span {
        off,
        len: whole.len() as u32,
        payload_at: (whole.len() - payload.len()) as u32,
    }
}

/// What to do with a packet that would open a new flow when the table is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullPolicy {
    /// Expire the longest-idle flows early (emitted with reason `evicted`) to make room.
    EvictIdle,
    /// Keep existing flows; count the packet as dropped (`flow_table_full`).
    Drop,
}

#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    pub max_flows: usize,
    pub max_hosts: usize,
    pub idle_timeout_ns: u64,
    /// 0 disables the active timeout.
    pub active_timeout_ns: u64,
    /// Idle time after which a TCP flow closed by FIN/FIN or RST is emitted.
    pub tcp_end_timeout_ns: u64,
    pub host_idle_timeout_ns: u64,
    pub full_policy: FullPolicy,
    pub tick_ns: u64,
    /// Keep the counters of purged hosts for [`Engine::take_purged_hosts`] (a host report).
    pub report_purged_hosts: bool,
    /// Count traffic per interval for the history's time series ([`Engine::take_series`]).
    pub series: bool,
    /// List new hosts for [`Engine::take_new_hosts`] (a host cache gives returning hosts their
    /// counters back).
    pub list_new_hosts: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_flows: 1 << 20,
            max_hosts: 1 << 20,
            idle_timeout_ns: 120_000_000_000,
            active_timeout_ns: 1_800_000_000_000,
            tcp_end_timeout_ns: 10_000_000_000,
            host_idle_timeout_ns: 300_000_000_000,
            full_policy: FullPolicy::EvictIdle,
            tick_ns: 1_000_000_000,
            report_purged_hosts: false,
            series: false,
            list_new_hosts: false,
        }
    }
}

/// A captured frame as handed to [`Engine::process_frames`].
#[derive(Clone, Copy, Debug)]
pub struct PacketRef<'a> {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub data: &'a [u8],
}

const BATCH: usize = 32;
/// Below this many flows (about 1.5 MiB of entries) the table stays in cache: no prefetch pass.
const PREFETCH_MIN_FLOWS: usize = 8192;
const NO_SLOT: u32 = u32::MAX;
const HOST_PURGE_EVERY_TICKS: u64 = 10;

/// Rows of the live flows for readers, written during the tick's walk over the flow table
/// while readers keep asking. That walk reads every flow anyway, so the rows cost the shard
/// only their writes, where a copy on request reads a million flows again (about 20 ms per
/// million against 5 to 10 ms). Used above [`EXACT_READER_MAX_FLOWS`] live flows only: below,
/// a copy on request is cheap and exact.
#[derive(Default)]
struct TickRows {
    rows: Vec<FlowRow>,
    /// `rows` were written by the last tick and not handed out yet.
    fresh: bool,
    /// Ticks write rows until this tick count (a reader asked less than
    /// [`TICK_ROWS_KEEP`] ticks ago).
    wanted_until: u64,
}

/// Ticks go on writing rows for this many ticks after the last reader's request.
const TICK_ROWS_KEEP: u64 = 5;

/// Up to this many live flows, readers get exact copies made on request (about a
/// millisecond); above, flow rows and host counters as of the last tick.
pub const EXACT_READER_MAX_FLOWS: usize = 65_536;

pub struct Engine {
    cfg: EngineConfig,
    decoder: Decoder,
    index: Index,
    flows: Vec<Flow>,
    /// The TCP and collector fields of the flow at the same slot, where [`Flow::has_ext`]:
    /// reserved like `flows`, and as long as the highest slot that ever had one (the pages of
    /// a run of UDP flows are never touched).
    exts: Vec<FlowExt>,
    /// What a flow past the end of `exts` is handed by [`Flow::update`]: such a flow has no
    /// [`FlowExt`] (not TCP), so nothing is written to it.
    spare_ext: FlowExt,
    free: Vec<u32>,
    live_flows: usize,
    hosts: HostTable,
    stats: ShardStats,
    expired: Vec<FlowRecord>,
    purged_hosts: Vec<Host>,
    /// The kernel's ring drops for this shard's capture so far (what the source last read),
    /// for the series: drops are counted outside the engine.
    capture_dropped: u64,
    now_ns: u64,
    next_tick_ns: u64,
    ticks: u64,
    /// Flow rows for readers, taken by the tick (see [`TickRows`]).
    tick_rows: TickRows,
    last_failed_evict_ns: Option<u64>,
    /// Where [`Engine::flush_some`] goes on from.
    flush_cursor: usize,
    // Scratch for one batch.
    decoded: Option<Box<[Decoded; BATCH]>>,
    ts: [u64; BATCH],
    pending: usize,
    scratch: Option<Box<BatchScratch>>,
    /// Payloads of the pending batch (DPI only).
    arena: Option<Box<Arena>>,
    dpi: Option<Dpi>,
    /// DPI state of the flows still on the DPI path, by flow slot.
    dpi_active: Vec<Option<Box<FlowDpi>>>,
    /// What DPI learned about flows that left the DPI path, by flow slot, until they end.
    dpi_meta: Vec<Option<Box<Meta>>>,
    /// Exporters of collected flows (index + 1 is `Flow::exporter`), at most u16::MAX - 1.
    exporters: Vec<(std::net::SocketAddr, u32)>,
    /// Traffic of the current interval per series (with `EngineConfig::series`).
    series: Option<Box<SeriesAcc>>,
    /// Hosts created since the last [`Engine::take_new_hosts`] (with `list_new_hosts`).
    new_hosts: Vec<HostKey>,
    /// `--local-networks` (none given: `None`, and flows are not classified).
    local: Option<Box<Networks>>,
    /// Filter-sets, top-N and anomaly lists, DDoS rates (see `engine/analytics.rs`).
    analytics: Option<Box<ShardAnalytics>>,
    /// Filter-set masks and wire lengths of the pending batch (with filter-sets).
    marks: [u128; BATCH],
    wire_lens: [u32; BATCH],
    /// With egress: what each accounted IP packet's flow looked like right after it
    /// ([`Engine::record_verdicts`]).
    verdicts: Option<Vec<FlowVerdict>>,
    /// Table memory given back at the end of the input ([`Engine::release_flow_table`]),
    /// still counted in [`ShardStats::table_memory`]: that figure is the run's.
    released_table_bytes: usize,
}

/// A packet's flow as it stood right after the packet was accounted: what egress decides on
/// (the application so far, whether detection is over, the flow's packets so far).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowVerdict {
    /// False when the packet got no flow (the table was full).
    pub flowed: bool,
    pub l7: sonde_dpi::L7,
    /// Detection is over for this flow (a label, or given up): `l7` will not change.
    pub decided: bool,
    /// Packets of the flow, both directions, this one included.
    pub packets: u64,
}

struct Arena {
    /// Copy IP and transport headers too (the nDPI backend).
    headers: bool,
    bytes: Vec<u8>,
    spans: [Span; BATCH],
}

/// Per-batch working arrays of [`Engine::account`], kept between batches.
struct BatchScratch {
    keys: [FlowKey; BATCH],
    dirs: [Dir; BATCH],
    tags: [u32; BATCH],
    /// The packet starts a flow (no index entry has its tag): its hosts are looked up.
    new: [bool; BATCH],
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let max_flows = cfg.max_flows.max(BATCH);
        // Reserved, not touched: see HostTable::new.
        let flows = Vec::with_capacity(max_flows);
        Engine {
            index: Index::with_max_entries(max_flows),
            flows,
            exts: Vec::with_capacity(max_flows),
            spare_ext: FlowExt::default(),
            free: Vec::new(),
            live_flows: 0,
            hosts: HostTable::new(cfg.max_hosts.max(1)),
            series: cfg.series.then(Box::default),
            new_hosts: Vec::new(),
            local: None,
            stats: ShardStats::default(),
            expired: Vec::new(),
            purged_hosts: Vec::new(),
            capture_dropped: 0,
            now_ns: 0,
            next_tick_ns: 0,
            ticks: 0,
            tick_rows: TickRows::default(),
            last_failed_evict_ns: None,
            flush_cursor: 0,
            decoded: Some(Box::new([Decoded::default(); BATCH])),
            ts: [0; BATCH],
            pending: 0,
            scratch: Some(Box::new(BatchScratch {
                keys: [FlowKey::default(); BATCH],
                dirs: [0; BATCH],
                tags: [0; BATCH],
                new: [false; BATCH],
            })),
            decoder: Decoder::default(),
            arena: None,
            dpi: None,
            dpi_active: Vec::new(),
            dpi_meta: Vec::new(),
            exporters: Vec::new(),
            analytics: None,
            marks: [0; BATCH],
            wire_lens: [0; BATCH],
            verdicts: None,
            released_table_bytes: 0,
            cfg: EngineConfig { max_flows, ..cfg },
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The local networks (`--local-networks`): each flow created from now on is classified
    /// once, from its two addresses, as in, out, internal or transit, and each new host as
    /// local or remote. Empty: nothing is classified (the default).
    pub fn set_local_networks(&mut self, nets: Networks) {
        self.flush_batch();
        self.local = (!nets.is_empty()).then(|| Box::new(nets));
    }

    /// Which ends of a flow with key `key` are local ([`locality`] bits; 0 without local
    /// networks).
    #[inline]
    fn locality_of(&self, key: &FlowKey) -> u8 {
        self.local
            .as_deref()
            .map_or(0, |nets| locality::of(nets, key))
    }

    /// Turns application detection on (with this detector set) or off.
    pub fn set_dpi(&mut self, dpi: Option<Dpi>) {
        self.flush_batch();
        self.dpi = dpi;
        self.make_arena();
    }

    /// Payloads are copied for DPI, and for ICMP errors when analytics are on (the packet
    /// they quote).
    fn make_arena(&mut self) {
        self.arena = (self.dpi.is_some() || self.analytics.is_some()).then(|| {
            Box::new(Arena {
                headers: self
                    .dpi
                    .as_ref()
                    .is_some_and(|d| d.backend() == sonde_dpi::Backend::Ndpi),
                bytes: Vec::with_capacity(BATCH * 256),
                spans: [Span::default(); BATCH],
            })
        });
    }

    /// Turns traffic analytics (filter-sets, top-N and anomaly lists, DDoS rates) on or off.
    pub fn set_analytics(&mut self, a: Option<ShardAnalytics>) {
        self.flush_batch();
        self.analytics = a.map(|mut a| {
            a.reserve_hosts(self.cfg.max_hosts);
            Box::new(a)
        });
        self.make_arena();
    }

    pub fn analytics(&self) -> Option<&ShardAnalytics> {
        self.analytics.as_deref()
    }

    /// Filter-sets are configured: packets get a mask where their frame is at hand.
    #[inline]
    fn has_filters(&self) -> bool {
        self.analytics.as_ref().is_some_and(|a| a.filters.is_some())
    }

    pub fn dpi_enabled(&self) -> bool {
        self.dpi.is_some()
    }

    /// Decodes and accounts raw frames of one link type. The frames outlive the call, so DPI
    /// reads payloads in place (no copy, unlike [`Engine::push_frame`]); the result is the
    /// same as pushing them one by one.
    pub fn process_frames(&mut self, link: LinkType, frames: &[PacketRef<'_>]) {
        self.flush_batch();
        let Some(mut decoded) = self.decoded.take() else {
            return;
        };
        let headers = self.arena.as_ref().is_some_and(|a| a.headers);
        let dpi = self.dpi.is_some();
        let analytics = self.analytics.is_some();
        let filters = self.has_filters();
        let mut refs: [Option<(&[u8], &[u8])>; BATCH] = [None; BATCH];
        let mut ts = [0u64; BATCH];
        let mut i = 0;
        while i < frames.len() {
            let mut n = 0;
            while i < frames.len() && n < BATCH {
                let f = frames[i];
                if f.ts_ns >= self.next_tick_ns {
                    if n > 0 {
                        break; // account what came before the tick first
                    }
                    self.tick(f.ts_ns);
                }
                i += 1;
                self.stats.packets += 1;
                self.stats.wire_bytes += f.wire_len as u64;
                match self
                    .decoder
                    .decode(link, f.ts_ns, f.data, f.wire_len, &mut decoded[n])
                {
                    Ok(Outcome::Ip) => {
                        ts[n] = f.ts_ns;
                        if dpi || (analytics && analytics::quotes_a_packet(&decoded[n])) {
                            refs[n] = payload_in_frame(&decoded[n], f.data, headers);
                        }
                        if filters {
                            self.mark(link, f, &decoded[n], n);
                        }
                        n += 1;
                    }
                    Ok(Outcome::NonIp) => {
                        self.stats.non_ip += 1;
                        self.count_unflowed(link, f);
                    }
                    Err(m) => {
                        self.stats.malformed[m as usize] += 1;
                        self.count_unflowed(link, f);
                    }
                }
            }
            let (marks, wire_lens) = (self.marks, self.wire_lens);
            let p = Payloads {
                direct: if dpi || analytics { &refs[..n] } else { &[] },
                marks: if filters { &marks[..n] } else { &[] },
                wire_lens: if filters { &wire_lens[..n] } else { &[] },
                ..Payloads::NONE
            };
            self.account(&decoded[..n], &ts[..n], p);
        }
        self.decoded = Some(decoded);
    }

    /// Decodes one frame into the current batch; the batch is accounted when full, when packet
    /// time crosses a tick, or on [`Engine::flush_batch`]. The frame's bytes are not kept.
    /// Returns true when the frame is an IP packet that joined the batch (it will be in a
    /// flow, and leave a [`FlowVerdict`] when those are recorded).
    #[inline]
    pub fn push_frame(&mut self, link: LinkType, f: PacketRef<'_>) -> bool {
        if f.ts_ns >= self.next_tick_ns {
            // Account what came before, then expire: the result is the same as processing
            // packet by packet with the clock at this packet's time.
            self.flush_batch();
            self.tick(f.ts_ns);
        }
        self.stats.packets += 1;
        self.stats.wire_bytes += f.wire_len as u64;
        let n = self.pending;
        let Some(decoded) = self.decoded.as_mut() else {
            return false;
        };
        match self
            .decoder
            .decode(link, f.ts_ns, f.data, f.wire_len, &mut decoded[n])
        {
            Ok(Outcome::Ip) => {
                self.ts[n] = f.ts_ns;
                let dpi = self.dpi.is_some();
                if let Some(a) = self.arena.as_mut() {
                    a.spans[n] = if dpi || analytics::quotes_a_packet(&decoded[n]) {
                        copy_payload(&decoded[n], f.data, &mut a.bytes, a.headers)
                    } else {
                        Span::default()
                    };
                }
                if self.analytics.as_ref().is_some_and(|a| a.filters.is_some()) {
                    let d = decoded[n];
                    self.mark(link, f, &d, n);
                }
                self.pending = n + 1;
                if self.pending == BATCH {
                    self.flush_batch();
                }
                true
            }
            Ok(Outcome::NonIp) => {
                self.stats.non_ip += 1;
                self.count_unflowed(link, f);
                false
            }
            Err(m) => {
                self.stats.malformed[m as usize] += 1;
                self.count_unflowed(link, f);
                false
            }
        }
    }

    /// A frame the capture filter (`-f` on a file) rejected: seen, counted as filtered, in no
    /// flow. Counted here so the live counters show it as it happens.
    pub fn count_filtered(&mut self, wire_len: u32) {
        self.stats.packets += 1;
        self.stats.wire_bytes += wire_len as u64;
        self.stats.dropped[DropReason::Filtered as usize] += 1;
    }

    /// The capture's kernel drops so far (a running total), as the source last read them:
    /// each interval's series takes what was added during it.
    pub fn set_capture_dropped(&mut self, total: u64) {
        self.capture_dropped = total;
    }

    /// Accounts the packets decoded so far.
    #[inline]
    pub fn flush_batch(&mut self) {
        let n = self.pending;
        if n == 0 {
            return;
        }
        self.pending = 0;
        // Taken out of `self` (a pointer move, no allocation) so `account` can borrow both.
        if let Some(decoded) = self.decoded.take() {
            let ts = self.ts;
            let filters = self.has_filters();
            let (marks, wire_lens) = (self.marks, self.wire_lens);
            let (marks, wire_lens): (&[u128], &[u32]) = if filters {
                (&marks[..n], &wire_lens[..n])
            } else {
                (&[], &[])
            };
            match self.arena.take() {
                Some(mut a) => {
                    let p = Payloads {
                        bytes: &a.bytes,
                        spans: &a.spans[..n],
                        direct: &[],
                        marks,
                        wire_lens,
                    };
                    self.account(&decoded[..n], &ts[..n], p);
                    a.bytes.clear();
                    self.arena = Some(a);
                }
                None => self.account(
                    &decoded[..n],
                    &ts[..n],
                    Payloads {
                        marks,
                        wire_lens,
                        ..Payloads::NONE
                    },
                ),
            }
            self.decoded = Some(decoded);
        }
    }

    /// Accounts packets decoded elsewhere (the reader thread of a multi-shard run), with their
    /// payloads when DPI is on ([`copy_payload`] fills them).
    pub fn process_decoded(&mut self, packets: &[Decoded], ts: &[u64], payloads: Payloads<'_>) {
        let mut start = 0;
        while start < packets.len() {
            let mut end = start;
            while end < packets.len() && end - start < BATCH && ts[end] < self.next_tick_ns {
                end += 1;
            }
            if end == start {
                self.tick(ts[start]);
                continue;
            }
            let p = Payloads {
                bytes: payloads.bytes,
                spans: payloads.spans.get(start..end).unwrap_or(&[]),
                direct: payloads.direct.get(start..end).unwrap_or(&[]),
                marks: payloads.marks.get(start..end).unwrap_or(&[]),
                wire_lens: payloads.wire_lens.get(start..end).unwrap_or(&[]),
            };
            self.account(&packets[start..end], &ts[start..end], p);
            start = end;
        }
    }

    fn sync_decoder_counters(&mut self) {
        self.stats.fragments = self.decoder.counters.fragments;
        self.stats.fragments_unmatched = self.decoder.counters.fragments_unmatched;
        self.stats.tunneled = self.decoder.counters.tunneled;
    }

    /// The hot path: up to [`BATCH`] decoded IP packets.
    #[inline]
    fn account(&mut self, pkts: &[Decoded], ts: &[u64], payloads: Payloads<'_>) {
        let n = pkts.len();
        if n == 0 {
            return;
        }
        if self.live_flows + n > self.cfg.max_flows {
            self.make_room(n);
        }
        self.index.reserve(n);
        if self.live_flows <= PREFETCH_MIN_FLOWS {
            // The table is in cache: one pass, no arrays to fill.
            for (i, (p, &t)) in pkts.iter().zip(ts).enumerate() {
                let (key, dir) = FlowKey::from_packet(p);
                let tag = key.hash() as u32;
                let slot = self.lookup_or_create(&key, tag, dir, p, t);
                self.update(slot, dir, p, t);
                if self.analytics.is_some() {
                    self.analyze(i, slot, dir, p, &payloads);
                }
                if let Some((ip, payload)) = payloads.get(i) {
                    if self.needs_dpi(slot) {
                        self.dpi_packet(slot, dir, p, ip, payload, t);
                    }
                }
                if self.verdicts.is_some() {
                    self.record_verdict(slot);
                }
            }
        } else {
            self.account_prefetching(pkts, ts, payloads);
        }
        let newest = ts[..n].iter().copied().max().unwrap_or(0);
        if newest > self.now_ns {
            self.now_ns = newest;
        }
    }

    #[inline(always)]
    fn update(&mut self, slot: u32, dir: Dir, p: &Decoded, ts_ns: u64) {
        if slot == NO_SLOT {
            self.stats.dropped[DropReason::FlowTableFull as usize] += 1;
            return;
        }
        let f = &mut self.flows[slot as usize];
        let ext = self
            .exts
            .get_mut(slot as usize)
            .unwrap_or(&mut self.spare_ext);
        f.update(ext, dir, p, ts_ns);
        if f.last_was_retransmit {
            // Rare: the two hosts are touched only then.
            let (sender, receiver) = (f.hosts[dir], f.hosts[1 - dir]);
            if sender != NO_HOST {
                let h = self.hosts.get_mut(sender);
                h.retransmits_sent = h.retransmits_sent.saturating_add(1);
            }
            if receiver != NO_HOST {
                let h = self.hosts.get_mut(receiver);
                h.retransmits_rcvd = h.retransmits_rcvd.saturating_add(1);
            }
        }
        self.stats.ip_packets += 1;
        self.stats.ip_bytes += p.ip_len as u64;
    }

    /// A large table: three passes so memory latency overlaps across the batch.
    fn account_prefetching(&mut self, pkts: &[Decoded], ts: &[u64], payloads: Payloads<'_>) {
        let n = pkts.len();
        // Scratch lives in the engine: no per-batch initialisation.
        let mut scratch = self.scratch.take().expect("scratch present");
        let BatchScratch {
            keys,
            dirs,
            tags,
            new,
        } = &mut *scratch;
        // Pass 1: canonical keys and hashes; prefetch index slots.
        for i in 0..n {
            let (k, d) = FlowKey::from_packet(&pkts[i]);
            keys[i] = k;
            dirs[i] = d;
            tags[i] = k.hash() as u32;
            self.index.prefetch(tags[i]);
        }
        // Pass 2: prefetch the first candidate entry of each packet; for a packet of a new
        // flow (no entry has its tag), where its hosts are in the host index instead.
        for ((key, &tag), new) in keys[..n].iter().zip(&tags[..n]).zip(&mut new[..n]) {
            let slot = self.peek(tag);
            *new = slot.is_none();
            match slot {
                Some(slot) => {
                    prefetch_read(&self.flows[slot as usize]);
                    if key.proto == sonde_wire::ipproto::TCP {
                        // Its sequence tracking is in the FlowExt slab.
                        if let Some(x) = self.exts.get(slot as usize) {
                            prefetch_read(x);
                        }
                    }
                }
                None => self.prefetch_hosts_of(key, false),
            }
        }
        // Pass 3: find or create, then update. A few packets ahead, a new flow's hosts: their
        // index slots came in pass 2, so their entries can be fetched now.
        const HOSTS_AHEAD: usize = 4;
        for i in 0..n {
            if let Some(k) = keys.get(i + HOSTS_AHEAD).filter(|_| new[i + HOSTS_AHEAD]) {
                self.prefetch_hosts_of(k, true);
            }
            let slot = self.lookup_or_create(&keys[i], tags[i], dirs[i], &pkts[i], ts[i]);
            self.update(slot, dirs[i], &pkts[i], ts[i]);
            if self.analytics.is_some() {
                self.analyze(i, slot, dirs[i], &pkts[i], &payloads);
            }
            if let Some((ip, payload)) = payloads.get(i) {
                if self.needs_dpi(slot) {
                    self.dpi_packet(slot, dirs[i], &pkts[i], ip, payload, ts[i]);
                }
            }
            if self.verdicts.is_some() {
                self.record_verdict(slot);
            }
        }
        self.scratch = Some(scratch);
    }

    /// Out of line: the packet loop only pays a branch for it when egress is off.
    #[inline(never)]
    fn record_verdict(&mut self, slot: u32) {
        // NO_SLOT (a full table) is past the end of `flows`: no flow.
        let v = match self.flows.get(slot as usize) {
            Some(f) => FlowVerdict {
                flowed: true,
                l7: f.l7,
                decided: f.dpi_done,
                packets: f.pkts[0] + f.pkts[1],
            },
            _ => FlowVerdict::default(),
        };
        if let Some(out) = self.verdicts.as_mut() {
            out.push(v);
        }
    }

    /// Egress: from now on, every IP packet accounted leaves a [`FlowVerdict`], in the order
    /// the packets came ([`Engine::push_frame`] says which frames will have one).
    pub fn record_verdicts(&mut self) {
        self.verdicts.get_or_insert_with(Vec::new);
    }

    /// The verdicts of the packets accounted since the caller last cleared them (None
    /// unless [`Engine::record_verdicts`] was called).
    pub fn verdicts(&mut self) -> Option<&mut Vec<FlowVerdict>> {
        self.verdicts.as_mut()
    }

    /// Prefetches what looking up a new flow's two ends will read: their host-index slots,
    /// or (`entries`, once those slots are in cache) the host entries they point at.
    #[inline(always)]
    fn prefetch_hosts_of(&self, key: &FlowKey, entries: bool) {
        for addr in [key.addr_a, key.addr_b] {
            let k = HostKey {
                addr,
                ip_version: key.ip_version,
                vlan: key.vlan,
            };
            if entries {
                self.hosts.prefetch_entry(&k);
            } else {
                self.hosts.prefetch_key(&k);
            }
        }
    }

    #[inline(always)]
    fn peek(&self, tag: u32) -> Option<u32> {
        // The first slot whose tag matches is almost always the entry itself.
        let mut first = None;
        let _ = self.index.find(tag, |s| {
            first = Some(s);
            true
        });
        first
    }

    #[inline(always)]
    fn lookup_or_create(
        &mut self,
        key: &FlowKey,
        tag: u32,
        dir: Dir,
        d: &Decoded,
        ts_ns: u64,
    ) -> u32 {
        let flows = &self.flows;
        match self.index.find(tag, |s| flows[s as usize].key == *key) {
            Ok(slot) => slot,
            Err(pos) => self.create(pos, key, tag, dir, d, ts_ns),
        }
    }

    #[cold]
    #[inline(never)]
    fn create(
        &mut self,
        pos: usize,
        key: &FlowKey,
        tag: u32,
        dir: Dir,
        d: &Decoded,
        ts_ns: u64,
    ) -> u32 {
        if self.live_flows >= self.cfg.max_flows {
            return NO_SLOT;
        }
        let mut flow = Flow::new(*key, dir, d, ts_ns);
        // Classified once, here: the packet path never looks at the local networks.
        flow.locality = self.locality_of(key);
        let classified = flow.classified();
        // Hosts: side a and side b of the canonical key.
        let macs = if d.has_mac {
            [Some(flow.mac_a), Some(flow.mac_b)]
        } else {
            [None, None]
        };
        for (side, mac) in macs.into_iter().enumerate() {
            let addr = if side == 0 { key.addr_a } else { key.addr_b };
            let hk = HostKey {
                addr,
                ip_version: key.ip_version,
                vlan: key.vlan,
            };
            // Only the MAC of a host on the capture's own segment is meaningful; for tunnelled
            // traffic the outer MACs belong to routers, so they are not attached to inner hosts.
            let mac = if d.tunnel == sonde_wire::Tunnel::None {
                mac
            } else {
                None
            };
            match self.hosts.get_or_insert(&hk, ts_ns, mac) {
                Some((hslot, created)) => {
                    if created {
                        self.stats.hosts_created += 1;
                        if self.cfg.list_new_hosts {
                            self.new_hosts.push(hk);
                        }
                    }
                    if let Some(a) = self.analytics.as_deref() {
                        // Its analytics counters are next (a SYN's count, the flush): fetch
                        // them while the rest of the flow is set up.
                        a.prefetch(hslot);
                    }
                    let h = self.hosts.get_mut(hslot);
                    if created && classified {
                        let bit = if side == 0 { locality::A } else { locality::B };
                        h.local = Some(flow.locality & bit != 0);
                    }
                    h.active_flows += 1;
                    if (side == 0) == flow.client_is_a {
                        h.flows_as_client += 1;
                    } else {
                        h.flows_as_server += 1;
                    }
                    flow.hosts[side] = hslot;
                }
                None => self.stats.hosts_table_full += 1,
            }
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.flows[s as usize] = flow;
                s
            }
            None => {
                self.flows.push(flow);
                (self.flows.len() - 1) as u32
            }
        };
        if key.proto == sonde_wire::ipproto::TCP {
            self.claim_ext(slot);
        }
        self.index.insert_at(pos, tag, slot);
        self.live_flows += 1;
        self.stats.flows_created += 1;
        if let Some(s) = self.series.as_deref_mut() {
            s.on_create(&self.flows[slot as usize], NO_HOST);
        }
        if self.analytics.is_some() {
            self.analytics_created(slot);
        }
        slot
    }

    /// Adds a flow's not-yet-flushed counts to its hosts.
    #[inline]
    fn flush_to_hosts(
        hosts: &mut HostTable,
        series: Option<&mut SeriesAcc>,
        analytics: Option<&mut ShardAnalytics>,
        directions: Option<&mut DirectionCounts>,
        f: &mut Flow,
    ) {
        if f.pending_pkts == [0, 0] {
            return;
        }
        if let Some(d) = directions {
            // Both ways of the flow under its direction.
            let i = f.direction() as usize;
            d.packets[i] += f.pending_pkts[0] as u64 + f.pending_pkts[1] as u64;
            d.bytes[i] += f.pending_bytes[0] + f.pending_bytes[1];
        }
        if let Some(s) = series {
            s.on_flush(f, NO_HOST);
        }
        if let Some(a) = analytics {
            let pkts = [f.pending_pkts[0] as u64, f.pending_pkts[1] as u64];
            // The first flush of a record: everything it counted is still pending.
            let new = f.pkts[0] + f.pkts[1] == pkts[0] + pkts[1];
            a.flow_flushed(&analytics::flow_hosts(f), pkts, f.pending_bytes, new);
            f.ivl_bytes += f.pending_bytes[0] + f.pending_bytes[1];
            f.ivl_pkts = f
                .ivl_pkts
                .saturating_add(f.pending_pkts[0].saturating_add(f.pending_pkts[1]));
        }
        let [ha, hb] = f.hosts;
        if ha != NO_HOST {
            let h = hosts.get_mut(ha);
            h.sent_pkts += f.pending_pkts[0] as u64;
            h.sent_bytes += f.pending_bytes[0];
            h.rcvd_pkts += f.pending_pkts[1] as u64;
            h.rcvd_bytes += f.pending_bytes[1];
            h.last_ns = h.last_ns.max(f.last_ns);
        }
        if hb != NO_HOST {
            let h = hosts.get_mut(hb);
            h.sent_pkts += f.pending_pkts[1] as u64;
            h.sent_bytes += f.pending_bytes[1];
            h.rcvd_pkts += f.pending_pkts[0] as u64;
            h.rcvd_bytes += f.pending_bytes[0];
            h.last_ns = h.last_ns.max(f.last_ns);
        }
        f.pending_pkts = [0, 0];
        f.pending_bytes = [0, 0];
    }

    /// The flow's [`FlowExt`], made its own (reset) first if it had none.
    pub(crate) fn claim_ext(&mut self, slot: u32) -> &mut FlowExt {
        let i = slot as usize;
        let f = &mut self.flows[i];
        if !f.has_ext {
            f.has_ext = true;
            if i < self.exts.len() {
                self.exts[i] = FlowExt::default();
            } else {
                // Within the reserved capacity: only the new entries' pages are touched.
                self.exts.resize(i + 1, FlowExt::default());
            }
        }
        &mut self.exts[i]
    }

    /// A copy of the [`FlowExt`] at `slot` if the flow there has one ([`Flow::has_ext`]), else
    /// the default (a stale entry is not the flow's). Takes the slab alone, so a caller may
    /// hold the flow itself.
    fn ext_of(exts: &[FlowExt], slot: usize, has_ext: bool) -> FlowExt {
        if has_ext {
            exts[slot]
        } else {
            FlowExt::default()
        }
    }

    fn remove(&mut self, slot: u32, reason: EndReason) {
        let f = &mut self.flows[slot as usize];
        Self::flush_to_hosts(
            &mut self.hosts,
            self.series.as_deref_mut(),
            self.analytics.as_deref_mut(),
            self.local.is_some().then_some(&mut self.stats.directions),
            f,
        );
        for h in f.hosts {
            if h != NO_HOST {
                let host = self.hosts.get_mut(h);
                host.active_flows = host.active_flows.saturating_sub(1);
            }
        }
        f.live = false;
        if let Some(s) = self.series.as_deref_mut() {
            s.on_end(f);
        }
        if let Some(a) = self.analytics.as_deref_mut() {
            a.flow_ended(Self::take_flow_ivl(f));
        }
        let key = f.key;
        let meta = self.dpi_end(slot);
        let record = FlowRecord {
            flow: self.flows[slot as usize],
            ext: Self::ext_of(&self.exts, slot as usize, self.flows[slot as usize].has_ext),
            reason,
            meta,
            exporter: self.exporter_of(slot),
        };
        let tag = key.hash() as u32;
        self.index.remove(tag, slot);
        self.free.push(slot);
        self.live_flows -= 1;
        self.stats.flows_ended[reason as usize] += 1;
        self.expired.push(record);
    }

    /// Runs [`Engine::tick`] if a tick is due at `now_ns` (for idle live links, by wall clock).
    pub fn tick_if_due(&mut self, now_ns: u64) {
        if now_ns >= self.next_tick_ns {
            self.flush_batch();
            self.tick(now_ns);
        }
    }

    /// Periodic work at packet (or wall) time `now_ns`: host accounting, timeouts, host purge.
    pub fn tick(&mut self, now_ns: u64) {
        if now_ns > self.now_ns {
            self.now_ns = now_ns;
        }
        let now = self.now_ns;
        let cfg = self.cfg;
        let n = self.flows.len();
        const AHEAD: usize = 8;
        // Rows for readers only into a buffer they gave (growing one here would page-fault).
        let write_rows = self.ticks < self.tick_rows.wanted_until
            && self.tick_rows.rows.capacity() >= self.live_flows;
        self.tick_rows.rows.clear();
        self.tick_rows.fresh = false;
        for slot in 0..n {
            if slot + AHEAD < n {
                let next = &self.flows[slot + AHEAD];
                if next.live && next.pending_pkts != [0, 0] {
                    self.hosts.prefetch(next.hosts[0]);
                    self.hosts.prefetch(next.hosts[1]);
                    if let Some(a) = self.analytics.as_deref() {
                        a.prefetch(next.hosts[0]);
                        a.prefetch(next.hosts[1]);
                    }
                }
            }
            let f = &mut self.flows[slot];
            if !f.live {
                continue;
            }
            Self::flush_to_hosts(
                &mut self.hosts,
                self.series.as_deref_mut(),
                self.analytics.as_deref_mut(),
                self.local.is_some().then_some(&mut self.stats.directions),
                f,
            );
            let idle = now.saturating_sub(f.last_ns);
            let closed = f.tcp_state == crate::flow::TcpState::Closed;
            if closed && idle >= cfg.tcp_end_timeout_ns {
                self.remove(slot as u32, EndReason::TcpEnd);
            } else if idle >= cfg.idle_timeout_ns {
                self.remove(slot as u32, EndReason::IdleTimeout);
            } else if cfg.active_timeout_ns > 0
                && now.saturating_sub(f.record_start_ns) >= cfg.active_timeout_ns
                // Nothing since its last record: no empty record; it ends when idle.
                && f.pkts != [0, 0]
            {
                // Emit what the flow did so far and keep tracking it with fresh counters.
                self.expired.push(FlowRecord {
                    flow: *f,
                    ext: Self::ext_of(&self.exts, slot, f.has_ext),
                    reason: EndReason::ActiveTimeout,
                    // The metadata stays with the flow too, for its later records.
                    meta: self.dpi_meta.get(slot).cloned().flatten(),
                    exporter: f
                        .exporter
                        .checked_sub(1)
                        .and_then(|i| self.exporters.get(i as usize).copied()),
                });
                self.stats.flows_ended[EndReason::ActiveTimeout as usize] += 1;
                f.pkts = [0, 0];
                f.bytes = [0, 0];
                f.fragments = 0;
                f.record_start_ns = now;
                f.first_ns = now;
                if f.has_ext {
                    let x = &mut self.exts[slot];
                    x.retransmits = [0, 0];
                    x.out_of_order = [0, 0];
                }
            }
            let f = &self.flows[slot];
            if write_rows && f.live {
                self.tick_rows.rows.push(FlowRow::from(f));
            }
        }
        self.tick_rows.fresh = write_rows;
        // The interval that ends now started a tick ago. At the first tick nothing closes: what
        // was counted before it (collected records) belongs to the interval that starts in
        // this same second, so closing it now would close that second twice and tell the
        // series writer it was done while the second's rows were still to come (with two
        // shards, the other shard's rows of that second were then refused).
        // (The analytics skip the first tick the same way: `analytics_tick`.)
        if self.series.is_some() && self.ticks > 0 {
            let start = self.interval_start_s();
            self.close_series_at(start);
        }
        if self.analytics.is_some() {
            let start = self.interval_start_s();
            self.analytics_tick(start, now / 1_000_000_000);
        }
        self.ticks += 1;
        if self.ticks.is_multiple_of(HOST_PURGE_EVERY_TICKS) {
            let out = cfg.report_purged_hosts.then_some(&mut self.purged_hosts);
            let analytics = &mut self.analytics;
            let purged = self.hosts.purge(
                now.saturating_sub(cfg.host_idle_timeout_ns),
                out,
                |slot, h| {
                    if let Some(a) = analytics.as_deref_mut() {
                        a.host_purged(slot, analytics::host_addr(&h.key));
                    }
                },
            );
            self.stats.hosts_purged += purged;
        }
        self.next_tick_ns = (now / cfg.tick_ns + 1) * cfg.tick_ns;
    }

    /// Makes room for `n` new flows under [`FullPolicy::EvictIdle`] by expiring the longest
    /// idle flows first: flows idle for at least half the idle timeout, then a quarter, ...
    #[cold]
    fn make_room(&mut self, n: usize) {
        if self.cfg.full_policy != FullPolicy::EvictIdle {
            return;
        }
        // A sweep costs a pass over the table; after one that freed nothing, wait a little
        // packet time before the next, so a flood cannot make every batch sweep.
        if let Some(t) = self.last_failed_evict_ns {
            if self.now_ns.saturating_sub(t) < 10_000_000 {
                return;
            }
        }
        let target = n.max(self.cfg.max_flows / 16);
        let mut threshold = self.cfg.idle_timeout_ns / 2;
        let mut freed = 0;
        while freed < target && threshold >= 1_000_000 {
            for slot in 0..self.flows.len() {
                let f = &self.flows[slot];
                if f.live && self.now_ns.saturating_sub(f.last_ns) >= threshold {
                    self.remove(slot as u32, EndReason::Evicted);
                    freed += 1;
                }
            }
            threshold /= 2;
        }
        self.last_failed_evict_ns = if freed == 0 { Some(self.now_ns) } else { None };
    }

    /// Emits every flow (end of a capture file, or shutdown).
    pub fn flush_all(&mut self, reason: EndReason) {
        while self.flush_some(reason, usize::MAX) > 0 {}
    }

    /// Emits up to `max` flows and returns how many; call until it returns 0. Lets the caller
    /// hand records to a sink in chunks instead of holding a copy of the whole table at once.
    pub fn flush_some(&mut self, reason: EndReason, max: usize) -> usize {
        self.flush_batch();
        let len = self.flows.len();
        // Go on from where the last call stopped (wrapping once), so emptying a big table in
        // chunks is one pass over it, not one pass per chunk.
        let start = self.flush_cursor.min(len);
        // One allocation for the chunk's records, not a doubling series of fresh pages.
        self.expired.reserve(max.min(self.live_flows));
        let mut n = 0;
        const AHEAD: usize = 8;
        for i in 0..len {
            if n == max {
                break;
            }
            let slot = (start + i) % len;
            // Each removal touches the flow's index slot at random: prefetch a few ahead.
            let next = &self.flows[(slot + AHEAD) % len];
            if next.live {
                self.index.prefetch(next.key.hash() as u32);
                self.hosts.prefetch(next.hosts[0]);
                self.hosts.prefetch(next.hosts[1]);
                if let Some(a) = self.analytics.as_deref() {
                    a.prefetch(next.hosts[0]);
                    a.prefetch(next.hosts[1]);
                }
            }
            if self.flows[slot].live {
                self.remove(slot as u32, reason);
                n += 1;
                self.flush_cursor = slot + 1;
            }
        }
        n
    }

    /// Records emitted since the last call.
    pub fn take_expired(&mut self, into: &mut Vec<FlowRecord>) {
        if into.is_empty() {
            std::mem::swap(into, &mut self.expired);
        } else {
            into.append(&mut self.expired);
        }
    }

    /// Hosts purged since the last call, with their final counters (only with
    /// [`EngineConfig::report_purged_hosts`]).
    pub fn take_purged_hosts(&mut self) -> Vec<Host> {
        std::mem::take(&mut self.purged_hosts)
    }

    pub fn expired_len(&self) -> usize {
        self.expired.len()
    }

    pub fn stats(&mut self) -> ShardStats {
        self.sync_decoder_counters();
        self.flush_batch();
        let mut s = self.stats;
        s.active_flows = self.live_flows as u64;
        s.active_hosts = self.hosts.len() as u64;
        s.table_memory = (self.table_bytes() + self.released_table_bytes) as u64;
        s.last_packet_ns = self.now_ns;
        s
    }

    /// Bytes the flow and host tables hold now.
    fn table_bytes(&self) -> usize {
        self.index.memory_bytes()
            // The slab's capacity is reserved up front but only the slots ever used are
            // touched (resident): count those.
            + self.flows.len() * std::mem::size_of::<Flow>()
            + self.exts.len() * std::mem::size_of::<FlowExt>()
            + self.free.capacity() * 4
            + self.hosts.memory_bytes()
            + (self.dpi_active.capacity() + self.dpi_meta.capacity()) * 8
            + self.analytics.as_deref().map_or(0, ShardAnalytics::memory_bytes)
    }

    /// The input is over and every flow was emitted: gives back the flow table's memory (slab,
    /// index, DPI state), so that what the end of a run still does (the last second of series,
    /// the hosts handed to the host cache) does not come on top of it. Does nothing while a
    /// flow is live. Flows created after it start a table from nothing.
    pub fn release_flow_table(&mut self) {
        if self.live_flows != 0 {
            return;
        }
        let before = self.table_bytes();
        self.flows = Vec::new();
        self.exts = Vec::new();
        self.free = Vec::new();
        self.index = Index::with_max_entries(self.cfg.max_flows);
        self.dpi_active = Vec::new();
        self.dpi_meta = Vec::new();
        self.tick_rows = TickRows::default();
        self.flush_cursor = 0;
        self.released_table_bytes += before.saturating_sub(self.table_bytes());
    }

    /// After the last second and interval were closed and handed over: gives back the
    /// per-host counters of the series and the analytics (the hosts stay, for the host cache
    /// and the summary).
    pub fn release_interval_counters(&mut self) {
        let before = self.table_bytes();
        if let Some(s) = self.series.as_deref_mut() {
            s.release();
        }
        if let Some(a) = self.analytics.as_deref_mut() {
            a.release_host_counters();
        }
        self.released_table_bytes += before.saturating_sub(self.table_bytes());
    }

    /// The live flows as rows for a reader (a snapshot), into `buf` (cleared first): a reader
    /// that hands back its last buffer, sized ahead, spares this thread the page faults of a
    /// fresh allocation.
    pub fn snapshot_flows_into(&mut self, buf: &mut Vec<FlowRow>) {
        if self.live_flows > EXACT_READER_MAX_FLOWS {
            self.tick_rows.wanted_until = self.ticks + TICK_ROWS_KEEP;
            if self.tick_rows.fresh {
                // The reader's buffer takes the next tick's rows.
                std::mem::swap(buf, &mut self.tick_rows.rows);
                self.tick_rows.fresh = false;
                return;
            }
        }
        buf.clear();
        buf.extend(self.flows.iter().filter(|f| f.live).map(FlowRow::from));
    }

    /// Whether the tick would write rows for readers if it had a buffer large enough: a
    /// reader then sends one along with its next request ([`Engine::give_rows_buffer`]).
    pub fn wants_rows_buffer(&self) -> bool {
        self.live_flows > EXACT_READER_MAX_FLOWS
            && self.tick_rows.rows.capacity() < self.live_flows + self.live_flows / 16
    }

    /// A buffer, sized and touched by a reader, for the tick to write rows into.
    pub fn give_rows_buffer(&mut self, buf: Vec<FlowRow>) {
        if buf.capacity() > self.tick_rows.rows.capacity() {
            self.tick_rows.rows = buf;
            self.tick_rows.fresh = false;
        }
    }

    /// Forgets the last tick's rows: after the input ends, readers get exact copies.
    pub fn discard_tick_rows(&mut self) {
        self.tick_rows.fresh = false;
        self.tick_rows.wanted_until = 0;
    }

    /// The host table as a reader sees it: counters flushed from the live flows when that is
    /// cheap (up to [`EXACT_READER_MAX_FLOWS`] live flows), otherwise as of the last tick (at
    /// most one tick old), because a flush over a million flows is a random walk through
    /// the host table that would cost the packets tens of milliseconds each time.
    pub fn hosts_for_reader(&mut self) -> &HostTable {
        if self.live_flows <= EXACT_READER_MAX_FLOWS {
            return self.hosts();
        }
        &self.hosts
    }

    /// What DPI learned about each of the live flows `keys` (None for a flow that is gone or
    /// has nothing), looked up by key: readers ask for one page of flows, not for all of them.
    pub fn flow_meta(&self, keys: &[FlowKey]) -> Vec<Option<Box<Meta>>> {
        keys.iter()
            .map(|key| self.dpi_meta.get(self.live_slot(key)?).cloned().flatten())
            .collect()
    }

    /// The slot of the live flow `key` here, if it is one.
    fn live_slot(&self, key: &FlowKey) -> Option<usize> {
        let flows = &self.flows;
        self.index
            .find(key.hash() as u32, |s| flows[s as usize].key == *key)
            .ok()
            .map(|s| s as usize)
    }

    /// The TCP health of each live flow of `keys` (None: not live here, or not TCP).
    pub fn flow_tcp(&self, keys: &[FlowKey]) -> Vec<Option<crate::flow::TcpHealth>> {
        keys.iter()
            .map(|key| {
                let slot = self.live_slot(key)?;
                let f = &self.flows[slot];
                (f.key.proto == 6 && f.has_ext).then(|| self.exts[slot].health())
            })
            .collect()
    }

    pub fn live_hosts(&self) -> usize {
        self.hosts.len()
    }

    /// The host table, after bringing host counters up to date.
    pub fn hosts(&mut self) -> &HostTable {
        for f in self.flows.iter_mut().filter(|f| f.live) {
            Self::flush_to_hosts(
                &mut self.hosts,
                self.series.as_deref_mut(),
                self.analytics.as_deref_mut(),
                self.local.is_some().then_some(&mut self.stats.directions),
                f,
            );
        }
        &self.hosts
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Time-series rows of the intervals closed since the last call (empty with series off).
    pub fn take_series(&mut self) -> Vec<SeriesTick> {
        self.series
            .as_deref_mut()
            .map(SeriesAcc::take_ready)
            .unwrap_or_default()
    }

    /// Hosts created since the last call (with [`EngineConfig::list_new_hosts`]).
    pub fn take_new_hosts(&mut self) -> Vec<HostKey> {
        std::mem::take(&mut self.new_hosts)
    }

    /// Gives a live host back what it did before it left memory (`add` merges into it).
    /// False when the host is not live (purged again meanwhile): the caller keeps the counters.
    pub fn restore_host(&mut self, key: &HostKey, add: impl FnOnce(&mut Host)) -> bool {
        match self.hosts.find_mut(key) {
            Some(h) => {
                add(h);
                true
            }
            None => false,
        }
    }

    /// The newest interval (second) whose rows were closed, with or without traffic: a
    /// merger of several shards' rows knows this shard has nothing more for it.
    pub fn series_closed_through(&self) -> Option<u64> {
        self.series.as_deref().and_then(|s| s.closed_through)
    }

    /// Closes the current, partial interval (at the end of a capture, after the last flows
    /// were emitted), so its rows are in the next [`Engine::take_series`].
    pub fn close_series(&mut self) {
        let start = self.interval_start_s();
        self.close_series_at(start);
    }

    /// The second the current interval started: a tick ago, or (before the first tick, when
    /// collected records may already have been counted) the engine's clock.
    fn interval_start_s(&self) -> u64 {
        if self.next_tick_ns == 0 {
            self.now_ns / 1_000_000_000
        } else {
            self.next_tick_ns.saturating_sub(self.cfg.tick_ns) / 1_000_000_000
        }
    }

    fn close_series_at(&mut self, start: u64) {
        let gauges = Gauges {
            active_flows: self.live_flows as u64,
            active_hosts: self.hosts.len() as u64,
            // Overload only: what a capture filter rejected is not a drop.
            drops: self.stats.dropped[crate::DropReason::FlowTableFull as usize],
            capture_drops: self.capture_dropped,
        };
        let filters = self
            .analytics
            .as_deref()
            .and_then(|a| a.filters.as_ref())
            .map(|f| f.second());
        if let Some(s) = self.series.as_deref_mut() {
            s.close(
                start,
                &self.hosts,
                &self.exporters,
                gauges,
                filters.as_ref(),
            );
        }
    }
}

#[cfg(test)]
mod tests;
