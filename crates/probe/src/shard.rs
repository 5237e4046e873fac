//! What a shard thread holds (its engine and its links to sinks and readers) and what it
//! shares with the rest of the probe. The loop it runs is in [`crate::source`].

use crossbeam_channel::{Receiver, Sender};
use sonde_capture::CaptureDrops;
/// The `--filter` of a file input.
pub(crate) use sonde_capture::LinkFilters as Filters;
use sonde_dpi::Meta;
use sonde_flow::{EndReason, Engine, FlowKey, FlowRecord, FlowRow, Host, ShardStats, Span};
use sonde_wire::Decoded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most flow records in one batch to the sinks.
const SINK_BATCH: usize = 8192;

/// Work between two housekeeping points of a shard loop (stats publish, record drain, requests).
pub(crate) const HOUSEKEEPING_PACKETS: u64 = 4096;

pub(crate) enum Request {
    /// A snapshot into the given buffer (reused by the reader to spare allocations).
    /// The second buffer, empty unless the shard asked for one (`Shared::wants_rows_buffer`),
    /// is kept by the shard for the rows its ticks write.
    Flows(Vec<FlowRow>, Vec<FlowRow>, Sender<Vec<FlowRow>>),
    Hosts(Vec<Host>, Sender<Vec<Host>>),
    Meta(Vec<FlowKey>, Sender<Vec<Option<Box<Meta>>>>),
    Tcp(Vec<FlowKey>, Sender<Vec<Option<sonde_flow::TcpHealth>>>),
}

/// What a shard publishes for readers on other threads.
pub(crate) struct Shared {
    pub stats: Mutex<ShardStats>,
    pub capture: Mutex<CaptureDrops>,
    pub requests: Sender<Request>,
    /// The shard's engine wants a buffer for readers' rows (see `Engine::wants_rows_buffer`).
    pub wants_rows_buffer: AtomicBool,
}

/// Decoded packets handed from the file reader to a shard.
pub(crate) struct DecodedBatch {
    pub pkts: Vec<Decoded>,
    pub ts: Vec<u64>,
    /// Payload bytes for DPI (`spans[i]` for `pkts[i]`); both empty when DPI is off.
    pub payload_bytes: Vec<u8>,
    pub spans: Vec<Span>,
    /// The reader's packet clock when it sent the batch (0: none). A shard runs its timeouts
    /// at this time even when none of its own packets reached it, so expiry does not depend
    /// on how flows are spread over shards.
    pub clock_ns: u64,
    /// With filter-sets: each packet's mask and wire length (worked out by the reader, which
    /// has the frames), and frames that reach no flow (not IP, malformed) with theirs, which
    /// shard 0 counts.
    pub marks: Vec<u128>,
    pub wire_lens: Vec<u32>,
    pub unflowed: Vec<(u128, u32)>,
}

impl DecodedBatch {
    /// Empties the batch for reuse, keeping its buffers.
    pub fn clear(&mut self) {
        self.pkts.clear();
        self.ts.clear();
        self.payload_bytes.clear();
        self.spans.clear();
        self.marks.clear();
        self.wire_lens.clear();
        self.unflowed.clear();
        self.clock_ns = 0;
    }
}

pub(crate) struct ShardOutput {
    pub stats: ShardStats,
    /// Filter-set totals (with filter-sets).
    pub filters: Option<sonde_analytics::FilterCounts>,
    pub hosts: Vec<Host>,
    pub live_hosts: usize,
    pub capture: CaptureDrops,
}

/// What a shard hands back about its hosts at the end of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostOutput {
    /// Every live host with its counters (for `--hosts-out`).
    Full,
    /// Keys only: enough to count distinct hosts across shards.
    Keys,
    /// Nothing: a single shard's count is exact on its own.
    CountOnly,
}

/// The parts every shard loop uses: its engine, its links to the sink and to readers.
pub(crate) struct ShardCtx {
    pub engine: Engine,
    pub shared: Arc<Shared>,
    pub requests: Receiver<Request>,
    pub sink: Option<RecordSinkLink>,
    /// Records every shard has handed to the sinks so far (shared by all shards).
    pub sink_sent: Arc<AtomicU64>,
    /// Purged hosts, for `--hosts-out` (with a host cache they go through it, unless it failed).
    pub host_sink: Option<Sender<Vec<Host>>>,
    pub stop: Arc<AtomicBool>,
    pub records: Vec<FlowRecord>,
    pub host_output: HostOutput,
    /// This shard's index and the time series writer's channel (with a data directory).
    pub series: Option<(usize, Sender<crate::series_sink::SeriesMsg>)>,
    /// The newest closed second already told to the series writer.
    pub series_told: Option<u64>,
    /// This shard's index, the host cache's channel and this shard's answers from it.
    pub host_cache: Option<HostCacheLink>,
    /// See [`crate::ProbeConfig::linger`].
    pub linger: bool,
    /// Time spent in [`ShardCtx::answer`] so far (published as [`ShardStats::reader_ns`]).
    pub reader_ns: u64,
    /// This shard's index and the analytics thread's channel (with analytics on).
    pub analytics: Option<(usize, Sender<crate::analytics_sink::AnalyticsMsg>)>,
    /// Trigger capture's side of this shard (its ring), when trigger capture is on and the
    /// shard reads packets itself.
    pub trigger: Option<sonde_trigger::ShardTrigger>,
    /// With trigger capture: how the analytics thread says it merged this shard's reports.
    pub trigger_ack: Option<TriggerAck>,
    /// With egress: this shard's selectors and destinations (shards that read packets).
    pub egress: Option<sonde_egress::ShardEgress>,
}

/// A shard's way to the sink dispatcher: batches of records go out on `tx`, and the buffers
/// of batches every sink is done with come back on `recycled`. Reusing them keeps the pages of
/// a batch (2.5 MB) mapped instead of faulting in fresh ones for every batch (BENCHMARKS §29:
/// 44 MB less at a million flows).
pub(crate) struct RecordSinkLink {
    pub tx: Sender<Vec<FlowRecord>>,
    pub recycled: Receiver<Vec<FlowRecord>>,
}

impl RecordSinkLink {
    /// An empty buffer for the next batch: one given back if any, else a new one.
    fn buffer(&self) -> Vec<FlowRecord> {
        self.recycled.try_recv().unwrap_or_default()
    }
}

/// The analytics thread's answer to a shard with trigger capture (see
/// [`crate::analytics_sink::AnalyticsMsg::ack`]).
pub(crate) struct TriggerAck {
    pub tx: Sender<()>,
    pub rx: Receiver<()>,
}

/// A shard's link to the host cache thread.
pub(crate) struct HostCacheLink {
    pub shard: usize,
    /// The shard hands its last hosts over itself (else the run does, merged: `--hosts-out`).
    pub hand_over: bool,
    pub tx: Sender<crate::host_cache::CacheMsg>,
    pub replies: Receiver<crate::host_cache::CacheReply>,
}

impl ShardCtx {
    /// Publishes stats, hands expired records to the sink and answers snapshot requests.
    pub fn housekeeping(&mut self) {
        self.drain();
        if let Some(e) = &self.egress {
            e.publish();
        }
        let mut stats = self.engine.stats();
        stats.reader_ns = self.reader_ns;
        *self.shared.stats.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        while let Ok(req) = self.requests.try_recv() {
            self.answer(req);
        }
    }

    /// Answers a reader's request for a snapshot or for flow metadata.
    fn answer(&mut self, req: Request) {
        let started = Instant::now();
        match req {
            Request::Flows(mut buf, spare, reply) => {
                self.engine.give_rows_buffer(spare);
                self.engine.snapshot_flows_into(&mut buf);
                let wants = self.engine.wants_rows_buffer();
                self.shared
                    .wants_rows_buffer
                    .store(wants, Ordering::Relaxed);
                let _ = reply.send(buf);
            }
            Request::Meta(keys, reply) => {
                let _ = reply.send(self.engine.flow_meta(&keys));
            }
            Request::Tcp(keys, reply) => {
                let _ = reply.send(self.engine.flow_tcp(&keys));
            }
            Request::Hosts(mut buf, reply) => {
                buf.clear();
                buf.extend(self.engine.hosts_for_reader().iter().copied());
                let _ = reply.send(buf);
            }
        }
        self.reader_ns += started.elapsed().as_nanos() as u64;
    }

    /// Hands the closed seconds' rows to the time series writer; `last` at the end.
    fn send_series(&mut self, last: bool) {
        let Some((shard, tx)) = &self.series else {
            return;
        };
        let ticks = self.engine.take_series();
        let closed_through = self.engine.series_closed_through();
        if !last && ticks.is_empty() && closed_through == self.series_told {
            return; // nothing new since the last message
        }
        self.series_told = closed_through;
        let msg = crate::series_sink::SeriesMsg {
            shard: *shard,
            closed_through,
            ticks,
            last,
        };
        if tx.send(msg).is_err() {
            self.series = None;
        }
    }

    /// Hands the analytics reports made since the last call to the analytics thread.
    fn send_analytics(&mut self, last: bool) {
        let Some((shard, tx)) = &self.analytics else {
            return;
        };
        let reports = self.engine.take_analytics();
        if reports.is_empty() && !last {
            return;
        }
        let msg = crate::analytics_sink::AnalyticsMsg {
            shard: *shard,
            reports,
            last,
            ack: None,
        };
        if tx.send(msg).is_err() {
            self.analytics = None;
        }
    }

    /// With trigger capture: hands the reports made so far to the analytics thread and waits
    /// until it has merged them (a file read fast then runs no further ahead of the alerts than
    /// a live link would), then takes the captures they engaged or released.
    pub fn sync_trigger(&mut self, last: bool) {
        if let (Some((shard, tx)), Some(ack)) = (&self.analytics, &self.trigger_ack) {
            let reports = self.engine.take_analytics();
            if !reports.is_empty() || last {
                let msg = crate::analytics_sink::AnalyticsMsg {
                    shard: *shard,
                    reports,
                    last,
                    ack: Some(ack.tx.clone()),
                };
                if tx.send(msg).is_ok() {
                    let _ = ack.rx.recv_timeout(Duration::from_secs(60));
                } else {
                    self.analytics = None;
                }
                if last {
                    self.analytics = None;
                }
            }
        }
        if let Some(t) = self.trigger.as_mut() {
            if last {
                t.finish();
            } else {
                t.batch();
            }
        }
    }

    fn drain(&mut self) {
        if self.series.is_some() {
            self.send_series(false);
        }
        if self.analytics.is_some() {
            self.send_analytics(false);
        }
        if self.host_sink.is_some() || self.host_cache.is_some() {
            let purged = self.engine.take_purged_hosts();
            if !purged.is_empty() {
                use crate::host_cache::CacheMsg;
                // With a host cache, it writes them to --hosts-out (with all their visits);
                // if it has failed (its error ends the run), they are written as they are.
                let unsent = match &self.host_cache {
                    Some(c) => match c.tx.send(CacheMsg::Purged(purged)) {
                        Err(crossbeam_channel::SendError(CacheMsg::Purged(p))) => p,
                        _ => Vec::new(),
                    },
                    None => purged,
                };
                if let (false, Some(tx)) = (unsent.is_empty(), &self.host_sink) {
                    if tx.send(unsent).is_err() {
                        self.host_sink = None;
                    }
                }
            }
        }
        if self.host_cache.is_some() {
            self.exchange_with_host_cache();
        }
        if self.engine.expired_len() == 0 {
            return;
        }
        if let Some(link) = &self.sink {
            if self.records.capacity() == 0 {
                // take_expired swaps: the engine goes on with this buffer.
                self.records = link.buffer();
            }
        }
        self.engine.take_expired(&mut self.records);
        let n = self.records.len() as u64;
        match &self.sink {
            // Blocks when the sink is behind: a flow file must lose nothing. Sent in batches
            // of at most SINK_BATCH records, so that the sinks' queues (counted in batches)
            // hold a bounded number of records when a tick expires a whole table.
            Some(link) => {
                let sent = if self.records.len() <= SINK_BATCH {
                    link.tx.send(std::mem::take(&mut self.records)).is_ok()
                } else {
                    // Moved into batches in order, not cloned (a record's metadata is boxed).
                    let mut rest = std::mem::take(&mut self.records).into_iter();
                    let mut ok = true;
                    while ok && rest.len() > 0 {
                        let mut batch = link.buffer();
                        batch.extend(rest.by_ref().take(SINK_BATCH));
                        ok = link.tx.send(batch).is_ok();
                    }
                    ok
                };
                if !sent {
                    self.sink = None;
                }
            }
            None => self.records.clear(),
        }
        self.sink_sent.fetch_add(n, Ordering::Release);
    }

    /// Asks the host cache about new hosts and gives returning ones their counters back.
    fn exchange_with_host_cache(&mut self) {
        use crate::host_cache::{CacheMsg, CacheReply};
        let Some(c) = &self.host_cache else { return };
        let new = self.engine.take_new_hosts();
        if !new.is_empty() {
            let _ = c.tx.send(CacheMsg::Lookup(c.shard, new));
        }
        let mut found = Vec::new();
        while let Ok(reply) = c.replies.try_recv() {
            if let CacheReply::Found(f) = reply {
                found.extend(f);
            }
        }
        if !found.is_empty() {
            self.restore_hosts(found);
        }
    }

    fn restore_hosts(
        &mut self,
        found: Vec<(
            sonde_flow::host::HostKey,
            sonde_history::hostcache::CachedHost,
        )>,
    ) {
        let mut gone = Vec::new();
        for (k, cached) in found {
            if !self
                .engine
                .restore_host(&k, |h| crate::host_cache::restore(h, &cached))
            {
                // Purged again meanwhile: back into the cache.
                gone.push(crate::host_cache::host_from_cache(k, &cached));
            }
        }
        if let (false, Some(c)) = (gone.is_empty(), &self.host_cache) {
            let _ = c.tx.send(crate::host_cache::CacheMsg::Put(gone));
        }
    }

    /// At the end: takes every answer the host cache owes, then hands it all live hosts.
    fn settle_host_cache(&mut self) {
        use crate::host_cache::{CacheMsg, CacheReply};
        self.exchange_with_host_cache();
        let Some(c) = &self.host_cache else { return };
        let mut found = Vec::new();
        if c.tx.send(CacheMsg::Sync(c.shard)).is_ok() {
            while let Ok(reply) = c.replies.recv_timeout(Duration::from_secs(60)) {
                match reply {
                    CacheReply::Found(f) => found.extend(f),
                    CacheReply::Synced => break,
                }
            }
        }
        self.restore_hosts(found);
        // In chunks copied as they go: a million hosts are 104 MB, which need not be copied
        // all at once.
        if let Some(c) = self.host_cache.take().filter(|c| c.hand_over) {
            let chunk = crate::host_cache::HANDOVER_CHUNK;
            let mut hosts = self.engine.hosts().iter().copied().peekable();
            while hosts.peek().is_some() {
                let part: Vec<Host> = hosts.by_ref().take(chunk).collect();
                if c.tx.send(CacheMsg::Put(part)).is_err() {
                    break;
                }
            }
        }
    }

    /// Egress: decides the frames whose packets the engine accounted since the last call.
    #[inline]
    pub fn settle_egress(&mut self) {
        if let Some(e) = self.egress.as_mut() {
            if e.needs_flow() {
                e.settle(self.engine.verdicts());
            }
        }
    }

    pub fn finish(mut self, capture: CaptureDrops) -> ShardOutput {
        // Every frame offered to egress is accounted now, so each has its verdict.
        if let Some(mut e) = self.egress.take() {
            self.engine.flush_batch();
            e.finish(self.engine.verdicts());
        }
        // Input over, state kept for readers until told to stop, with host counters exact.
        if self.linger {
            // The last batch first: until then its packets are in no flow.
            self.engine.flush_batch();
            self.engine.hosts();
            self.engine.discard_tick_rows();
            // The last (partial) second and interval, for readers while lingering (the series
            // first: closing the analytics second hands its filter-set counts over).
            self.engine.close_series();
            self.send_series(false);
            self.engine.close_analytics();
            // The input is over: what follows (the flows still held, emitted at stop) adds no
            // traffic to any second or interval.
            if self.trigger.is_some() {
                self.sync_trigger(true);
            }
            self.send_analytics(true);
            self.analytics = None;
        }
        while self.linger && !self.stopped() {
            self.housekeeping();
            // Wake for a reader's request at once; otherwise look at the stop flag now and then.
            if let Ok(req) = self.requests.recv_timeout(Duration::from_millis(50)) {
                self.answer(req);
            }
        }
        // In chunks, so the records of a large table never sit in memory all at once (and a
        // chunk's 2.5 MiB of records is written where the last one was, still in cache).
        while self.engine.flush_some(EndReason::EndOfCapture, 1 << 13) > 0 {
            self.housekeeping();
        }
        self.housekeeping();
        // Every flow is out: the flow table's memory is not needed for what is left.
        self.engine.release_flow_table();
        self.engine.close_series();
        self.send_series(true);
        self.series = None;
        self.engine.close_analytics();
        if self.trigger.is_some() {
            self.sync_trigger(true);
        }
        self.send_analytics(true);
        self.analytics = None;
        self.engine.release_interval_counters();
        self.settle_host_cache();
        let hosts = match self.host_output {
            HostOutput::Full => self.engine.hosts().iter().copied().collect(),
            HostOutput::Keys => self
                .engine
                .hosts()
                .iter()
                .map(|h| Host {
                    key: h.key,
                    ..Host::default()
                })
                .collect(),
            HostOutput::CountOnly => Vec::new(),
        };
        let live_hosts = self.engine.live_hosts();
        ShardOutput {
            stats: self.engine.stats(),
            filters: self.engine.filter_totals().cloned(),
            hosts,
            live_hosts,
            capture,
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

pub(crate) fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Paces a file by its timestamps (`--replay realtime`).
pub(crate) struct Pacer {
    start_wall: Instant,
    first_ts: Option<u64>,
}

impl Pacer {
    pub fn new() -> Pacer {
        Pacer {
            start_wall: Instant::now(),
            first_ts: None,
        }
    }

    /// Returns how long to sleep before the packet with `ts_ns` is due.
    pub fn due_in(&mut self, ts_ns: u64) -> Option<Duration> {
        let first = *self.first_ts.get_or_insert(ts_ns);
        let offset = Duration::from_nanos(ts_ns.saturating_sub(first));
        let elapsed = self.start_wall.elapsed();
        (offset > elapsed + Duration::from_millis(1)).then(|| offset - elapsed)
    }
}
