//! Starting a probe, reading it while it runs, and collecting its summary.

use crate::collect::{self, CollectSource, CollectedBatch, CollectorCounters, Dispatcher};
use crate::config::{Input, ProbeConfig, Replay};
use crate::shard::{self, DecodedBatch, Filters, Pacer, Request, ShardCtx, ShardOutput, Shared};
use crate::sink_queue::{Batch, QueuedSink};
use crate::sinks::{self, FileSink, SinkReport};
use crate::source;
use crossbeam_channel::{bounded, Sender};
use sonde_capture::{
    CaptureDrops, CaptureError, FileSource, LiveConfig, LiveSource, OfflineFilter, SyntheticSource,
};
use sonde_dpi::{Backend, DnsCache, Dpi, Meta};
use sonde_export::host_json;
use sonde_flow::{
    copy_payload, Engine, EngineConfig, FlowKey, FlowRecord, FlowRow, Host, ShardStats,
};
use sonde_wire::{Decoded, Decoder, Outcome};
use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub enum ProbeError {
    Capture(CaptureError),
    Output {
        path: String,
        source: std::io::Error,
    },
    Config(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Capture(e) => e.fmt(f),
            ProbeError::Output { path, source } => write!(f, "cannot write '{path}': {source}"),
            ProbeError::Config(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for ProbeError {}

impl From<CaptureError> for ProbeError {
    fn from(e: CaptureError) -> Self {
        ProbeError::Capture(e)
    }
}

/// Everything a finished run counted.
pub struct Summary {
    pub total: ShardStats,
    pub shards: Vec<ShardStats>,
    pub distinct_hosts: usize,
    /// Host records written to [`ProbeConfig::hosts_out`] (purged ones and the final ones).
    pub hosts_written: u64,
    pub capture: CaptureDrops,
    /// Each input (-i, -r, --synthetic, --collect), with what its own shards counted.
    pub inputs: Vec<InputReport>,
    pub flows_written: u64,
    /// What each flow sink delivered (the flows file first, when there is one).
    pub sinks: Vec<SinkReport>,
    /// What the time series writer did (with a data directory).
    pub series: Option<crate::series_sink::SeriesReport>,
    /// What the host cache did (with a data directory).
    pub host_cache: Option<crate::host_cache::HostCacheReport>,
    /// NetFlow/IPFIX/sFlow exporters seen, with their statistics (records, templates, lost
    /// records by sequence gaps, parse errors).
    pub exporters: collect::ExporterReport,
    /// Collectors: messages received, records decoded, entries that were not flows.
    pub collector_messages: u64,
    pub collector_records: u64,
    pub collector_errors: u64,
    /// IPFIX-over-TCP connections closed at once (the collector had its most).
    pub collector_connections_refused: u64,
    /// Datagrams and connections from exporters no `allow=` list permits.
    pub collector_refused_sources: u64,
    /// ZMQ producers whose handshake failed (another CURVE key, or none where one is needed).
    pub collector_failed_handshakes: u64,
    /// Decoded records with impossible counters, kept out of the tables.
    pub collector_suspect: u64,
    pub collector_retimed: u64,
    /// ntopng-format ZMQ: messages of other topics than `flow`, numeric keys without a label,
    /// and messages missing by their producers' message ids.
    pub collector_skipped_topics: u64,
    pub collector_unknown_keys: u64,
    pub collector_lost_messages: u64,
    pub elapsed: Duration,
    /// A source error that ended the run early (e.g. a truncated file); what came before it was
    /// processed and is in the counters.
    pub error: Option<CaptureError>,
    /// What the analytics did (with analytics on).
    pub analytics: Option<crate::AnalyticsReport>,
    /// What the alert engine engaged, released and refused (with alerts on).
    pub alerts: Option<serde_json::Value>,
    /// The files trigger capture wrote (with trigger capture on).
    pub trigger_files: Option<Vec<sonde_trigger::CaptureFile>>,
    /// Packet rings trigger capture allocated (one per shard reading packets; 0 when off).
    pub trigger_rings: u64,
    /// What egress forwarded, shunted and dropped, and its ring's files (with egress on).
    pub egress: Option<sonde_egress::EgressReport>,
    /// The local networks (`--local-networks`; empty: none).
    pub local_networks: Arc<sonde_analytics::Networks>,
    /// Filter-set totals, every shard added up, with the sets they belong to.
    pub filter_sets: Option<(
        Arc<sonde_analytics::FilterSets>,
        sonde_analytics::FilterCounts,
    )>,
}

/// What the sink thread hands back: every sink's report, or the sink that failed and why.
type SinkResult = Result<Vec<SinkReport>, (String, std::io::Error)>;

/// The `--hosts-out` writer thread and the probe's own sender for the final hosts.
type HostSink = (Sender<Vec<Host>>, JoinHandle<std::io::Result<u64>>);

pub struct Probe {
    /// Kafka offsets to commit once the sinks have finished.
    kafka_finals: Arc<Mutex<Vec<crate::kafka_source::FinalCommit>>>,
    shared: Vec<Arc<Shared>>,
    /// Each input's name, its shards being `per_input` consecutive ones of `shared`.
    inputs: Arc<InputShards>,
    stop: Arc<AtomicBool>,
    shards: Vec<JoinHandle<ShardOutput>>,
    reader: Option<JoinHandle<ShardStats>>,
    sink: Option<JoinHandle<SinkResult>>,
    host_sink: Option<HostSink>,
    series: Option<JoinHandle<Result<crate::series_sink::SeriesReport, String>>>,
    host_cache: Option<JoinHandle<Result<crate::host_cache::HostCacheReport, String>>>,
    /// With `--hosts-out`, the host cache, handed the last hosts (merged) at the end.
    host_handover: Option<Sender<crate::host_cache::CacheMsg>>,
    /// Collector threads (they stop with the stop flag; shards end when all of them have).
    receivers: Vec<JoinHandle<collect::ExporterReport>>,
    collector_counters: Arc<CollectorCounters>,
    has_flows_file: bool,
    progress: Arc<AtomicU64>,
    file_len: Option<u64>,
    error: Arc<Mutex<Option<CaptureError>>>,
    started: Instant,
    deadline: Option<Instant>,
    /// Names learnt from DNS answers (with DPI on), for readers.
    dns: Option<Arc<DnsCache>>,
    analytics: Option<JoinHandle<Result<crate::AnalyticsReport, String>>>,
    analytics_view: Option<crate::AnalyticsView>,
    sink_live: Arc<Vec<Arc<crate::sink_queue::SinkLive>>>,
    alerts: Option<Arc<crate::alerts::AlertHub>>,
    /// The checks thread and its stop flag.
    alerts_thread: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    /// The user scripts' thread and its stop flag.
    scripts_thread: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    trigger: Option<sonde_trigger::TriggerCapture>,
    egress: Option<sonde_egress::Egress>,
    local_networks: Arc<sonde_analytics::Networks>,
    geo: Option<Arc<sonde_geo::GeoDb>>,
}

impl Probe {
    /// Set to stop a live or synthetic run (Ctrl-C); files stop at their end.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn is_finished(&self) -> bool {
        self.shards.iter().all(|h| h.is_finished())
    }

    /// Bytes of the input file read so far, and its size.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.file_len
            .map(|len| (self.progress.load(Ordering::Relaxed), len))
    }

    /// A handle for reading this probe from other threads while it runs (the HTTP API).
    pub fn view(&self) -> ProbeView {
        ProbeView {
            shared: self.shared.clone(),
            inputs: self.inputs.clone(),
            sinks: self.sink_live.clone(),
            started: self.started,
            dns: self.dns.clone(),
            analytics: self.analytics_view.clone(),
            alerts: self.alerts.clone(),
            trigger: self.trigger.clone(),
            egress: self.egress.clone(),
            collector: self.collector_counters.clone(),
            local_networks: self.local_networks.clone(),
            geo: self.geo.clone(),
        }
    }

    /// Latest published counters of each shard.
    pub fn shard_stats(&self) -> Vec<ShardStats> {
        self.view().shard_stats()
    }

    pub fn capture_drops(&self) -> CaptureDrops {
        self.view().capture_drops()
    }

    /// Waits for the end of the input (or the stop flag, or `--duration`) and sums up.
    pub fn join(mut self) -> Result<Summary, ProbeError> {
        if let Some(deadline) = self.deadline {
            while !self.is_finished() && !self.stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
            }
            self.stop.store(true, Ordering::Relaxed);
        }
        let reader_stats = self
            .reader
            .take()
            .map(|h| h.join().expect("reader thread panicked"));
        // Collectors first: when they are gone, the shards' channels close and shards finish.
        let mut exporters = Vec::new();
        for h in self.receivers.drain(..) {
            exporters.extend(h.join().unwrap_or_default());
        }
        let mut outputs = Vec::new();
        for h in self.shards.drain(..) {
            outputs.push(h.join().expect("shard thread panicked"));
        }
        let mut total = ShardStats::default();
        let captures: Vec<CaptureDrops> = outputs.iter().map(|o| o.capture).collect();
        let capture = self.inputs.total(&captures);
        let stats: Vec<ShardStats> = outputs.iter().map(|o| o.stats).collect();
        let mut inputs: Vec<InputReport> = (self.inputs.names.iter().cloned())
            .zip(self.inputs.stats_by_input(&stats))
            .zip(self.inputs.by_input(&captures))
            .enumerate()
            .map(|(k, ((name, stats), capture))| InputReport {
                name,
                stats,
                capture,
                capture_backend: self.inputs.capture_backends.get(k).cloned().flatten(),
            })
            .collect();
        let mut shards = Vec::new();
        let mut host_parts = Vec::new();
        let mut live_hosts = 0;
        let mut filters: Option<sonde_analytics::FilterCounts> = None;
        for o in outputs {
            if let Some(f) = &o.filters {
                filters.get_or_insert_with(Default::default).merge(f);
            }
            live_hosts += o.live_hosts;
            total.merge(&o.stats);
            shards.push(o.stats);
            host_parts.push(o.hosts);
        }
        if let Some(r) = reader_stats {
            total.merge(&r);
            // The reader of a file split over shards counts what it kept from them.
            if let Some(i) = self.inputs.file {
                inputs[i].stats.merge(&r);
            }
        }
        // Shards hold only their share: counters that describe the whole run come from merging.
        let hosts = merge_hosts(host_parts);
        let distinct_hosts = if hosts.is_empty() {
            live_hosts
        } else {
            hosts.len()
        };
        total.active_hosts = distinct_hosts as u64;
        let hosts = match self.host_handover.take() {
            Some(cache) => {
                use crate::host_cache::CacheMsg;
                let (tx, rx) = bounded(1);
                // The cache answers with the hosts, totalled or (if it fails: its error comes
                // when it is joined) as they were; gone, it hands them back here.
                match cache.send(CacheMsg::Final(hosts, tx)) {
                    Ok(()) => rx.recv().unwrap_or_default(),
                    Err(crossbeam_channel::SendError(CacheMsg::Final(hosts, _))) => hosts,
                    Err(_) => Vec::new(),
                }
                // `cache` goes here: the cache thread ends, and with it its --hosts-out sender.
            }
            None => hosts,
        };
        let hosts_written = match self.host_sink.take() {
            Some((tx, h)) => {
                let mut hosts = hosts;
                hosts.sort_by_key(|h| (h.key.ip_version, h.key.addr, h.key.vlan));
                for chunk in hosts.chunks(1 << 12) {
                    let _ = tx.send(chunk.to_vec());
                }
                // The shards' senders went with them: this was the last one.
                drop(tx);
                h.join()
                    .expect("host sink thread panicked")
                    .map_err(|e| ProbeError::Output {
                        path: "hosts".into(),
                        source: e,
                    })?
            }
            None => 0,
        };
        // All shard senders are gone now, so the sink ends once it has written everything.
        let sinks = match self.sink.take() {
            Some(h) => h
                .join()
                .expect("sink thread panicked")
                .map_err(|(path, source)| ProbeError::Output { path, source })?,
            None => Vec::new(),
        };
        // Every sink wrote what it held: what the Kafka sources read is stored.
        for c in std::mem::take(&mut *self.kafka_finals.lock().unwrap_or_else(|e| e.into_inner())) {
            c.commit();
        }
        // The flows file, when there is one, is the first sink.
        let flows_written = match (&sinks.first(), self.has_flows_file) {
            (Some(r), true) => r.records,
            _ => 0,
        };
        let series = match self.series.take() {
            Some(h) => Some(
                h.join()
                    .expect("series thread panicked")
                    .map_err(ProbeError::Config)?,
            ),
            None => None,
        };
        let host_cache = match self.host_cache.take() {
            Some(h) => Some(
                h.join()
                    .expect("host cache thread panicked")
                    .map_err(ProbeError::Config)?,
            ),
            None => None,
        };
        let analytics = match self.analytics.take() {
            Some(h) => Some(
                h.join()
                    .expect("analytics thread panicked")
                    .map_err(ProbeError::Config)?,
            ),
            None => None,
        };
        // The detections have all been handed over: the alerts end with the run.
        if let Some((stop, h)) = self.scripts_thread.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
        if let Some((stop, h)) = self.alerts_thread.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
        let alerts = self.alerts.as_ref().map(|hub| {
            hub.finish();
            hub.report()
        });
        // The shards, the analytics and the alerts are done: every capture is settled, the
        // files close.
        let trigger_files = self.trigger.as_ref().map(|t| {
            t.finish();
            t.list()
        });
        let filter_sets = self
            .analytics_view
            .as_ref()
            .and_then(|v| v.config.filter_sets.clone())
            .map(|sets| {
                let n = sets.len();
                (
                    sets,
                    filters.unwrap_or_else(|| sonde_analytics::FilterCounts::new(n)),
                )
            });
        let error = self.error.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(Summary {
            analytics,
            alerts,
            trigger_rings: self.trigger.as_ref().map_or(0, |t| t.rings()),
            egress: self.egress.as_ref().map(|e| e.report()),
            local_networks: self.local_networks.clone(),
            trigger_files,
            filter_sets,
            series,
            host_cache,
            total,
            shards,
            distinct_hosts,
            hosts_written,
            capture,
            inputs,
            flows_written,
            sinks,
            exporters,
            collector_messages: self.collector_counters.messages.load(Ordering::Relaxed),
            collector_records: self.collector_counters.records.load(Ordering::Relaxed),
            collector_errors: self.collector_counters.errors.load(Ordering::Relaxed),
            collector_connections_refused: self
                .collector_counters
                .connections_refused
                .load(Ordering::Relaxed),
            collector_refused_sources: self
                .collector_counters
                .refused_sources
                .load(Ordering::Relaxed),
            collector_failed_handshakes: self
                .collector_counters
                .failed_handshakes
                .load(Ordering::Relaxed),
            collector_suspect: self.collector_counters.suspect.load(Ordering::Relaxed),
            collector_retimed: self.collector_counters.retimed.load(Ordering::Relaxed),
            collector_skipped_topics: self
                .collector_counters
                .skipped_topics
                .load(Ordering::Relaxed),
            collector_unknown_keys: self.collector_counters.unknown_keys.load(Ordering::Relaxed),
            collector_lost_messages: self
                .collector_counters
                .lost_messages
                .load(Ordering::Relaxed),
            elapsed: self.started.elapsed(),
            error,
        })
    }
}

/// Read access to a running probe from any thread: published counters, and snapshots that
/// each shard takes between two batches (so readers never stop packet processing).
#[derive(Clone)]
pub struct ProbeView {
    shared: Vec<Arc<Shared>>,
    inputs: Arc<InputShards>,
    sinks: Arc<Vec<Arc<crate::sink_queue::SinkLive>>>,
    started: Instant,
    dns: Option<Arc<DnsCache>>,
    analytics: Option<crate::AnalyticsView>,
    alerts: Option<Arc<crate::alerts::AlertHub>>,
    trigger: Option<sonde_trigger::TriggerCapture>,
    egress: Option<sonde_egress::Egress>,
    collector: Arc<CollectorCounters>,
    local_networks: Arc<sonde_analytics::Networks>,
    geo: Option<Arc<sonde_geo::GeoDb>>,
}

impl ProbeView {
    /// Each collected exporter's statistics, as the receivers last published them (about
    /// once a second).
    pub fn exporters(&self) -> Vec<(std::net::SocketAddr, sonde_flowproto::decode::ExporterStats)> {
        let m = self
            .collector
            .exporters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m.iter().map(|(a, s)| (*a, s.clone())).collect();
        v.sort_by_key(|(a, _)| *a);
        v
    }

    /// The alerts (None when the run has none).
    pub fn alerts(&self) -> Option<&Arc<crate::alerts::AlertHub>> {
        self.alerts.as_ref()
    }

    /// Trigger capture: alert records in ([`sonde_trigger::TriggerCapture::on_alert`]), the
    /// files written, `/metrics` counters (None when off).
    pub fn trigger(&self) -> Option<&sonde_trigger::TriggerCapture> {
        self.trigger.as_ref()
    }

    /// Egress: forwarded, shunted and dropped frames so far (None when off).
    pub fn egress(&self) -> Option<sonde_egress::EgressCounts> {
        self.egress.as_ref().map(|e| e.counts())
    }

    /// Every flow sink's counters while it runs.
    pub fn sinks(&self) -> &[Arc<crate::sink_queue::SinkLive>] {
        &self.sinks
    }

    /// Filter-sets, top-N and anomaly lists, detections (None with analytics off).
    pub fn analytics(&self) -> Option<&crate::AnalyticsView> {
        self.analytics.as_ref()
    }

    /// Names clients resolved with DNS, by answered address (None with DPI off).
    pub fn dns_names(&self) -> Option<&DnsCache> {
        self.dns.as_deref()
    }

    /// The local networks (`--local-networks`; empty: none, and nothing is classified).
    pub fn local_networks(&self) -> &sonde_analytics::Networks {
        &self.local_networks
    }

    /// The GeoIP databases (`--geoip-dir`; None without).
    pub fn geo(&self) -> Option<&Arc<sonde_geo::GeoDb>> {
        self.geo.as_ref()
    }

    /// Latest published counters of each shard.
    pub fn shard_stats(&self) -> Vec<ShardStats> {
        self.shared
            .iter()
            .map(|s| *s.stats.lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    pub fn capture_drops(&self) -> CaptureDrops {
        self.inputs.total(&self.capture_drops_by_shard())
    }

    /// Each shard's capture counters: its own socket's (the interface's drops are the whole
    /// interface's, read by every shard of it).
    pub fn capture_drops_by_shard(&self) -> Vec<CaptureDrops> {
        self.shared
            .iter()
            .map(|s| *s.capture.lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    /// Each input's name and capture counters (all zero but for live interfaces).
    pub fn capture_drops_by_input(&self) -> Vec<(String, CaptureDrops)> {
        let per_input = self.inputs.by_input(&self.capture_drops_by_shard());
        self.inputs.names.iter().cloned().zip(per_input).collect()
    }

    /// What reads each live interface, by name ("ring", "pcap", "xdp native copy").
    pub fn capture_backends(&self) -> Vec<(String, String)> {
        (self.inputs.names.iter())
            .zip(&self.inputs.capture_backends)
            .filter_map(|(n, b)| Some((n.clone(), b.clone()?)))
            .collect()
    }

    /// [`ProbeView::capture_drops_by_input`] and [`ProbeView::capture_drops_by_shard`] for
    /// the live interfaces only, shards by their number among all.
    pub fn live_capture_drops(&self) -> LiveDrops {
        let per_shard = self.capture_drops_by_shard();
        let live = |input: usize| self.inputs.live.get(input).copied().unwrap_or(false);
        let inputs = (self.inputs.names.iter().cloned())
            .zip(self.inputs.by_input(&per_shard))
            .enumerate()
            .filter_map(|(i, input)| live(i).then_some(input))
            .collect();
        let per_input = self.inputs.per_input.max(1);
        let shards = (per_shard.into_iter().enumerate())
            .filter(|(i, _)| live(i / per_input))
            .collect();
        (inputs, shards)
    }

    /// The live flows of each shard, one part per shard, filled into `bufs` (the parts of an
    /// earlier snapshot, or nothing): a reader that refreshes a snapshot often reuses its memory.
    pub fn snapshot_flows_into(&self, mut bufs: Vec<Vec<FlowRow>>) -> Vec<Vec<FlowRow>> {
        bufs.reverse(); // popped below in shard order
        let mut parts = Vec::with_capacity(self.shared.len());
        for s in &self.shared {
            let (tx, rx) = bounded(1);
            let live = s
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .active_flows;
            let buf = presized(bufs.pop().unwrap_or_default(), live as usize);
            let spare = if s.wants_rows_buffer.load(Ordering::Relaxed) {
                presized(Vec::new(), live as usize)
            } else {
                Vec::new()
            };
            if s.requests.send(Request::Flows(buf, spare, tx)).is_ok() {
                if let Ok(v) = rx.recv_timeout(Duration::from_secs(5)) {
                    parts.push(v);
                }
            }
        }
        parts
    }

    /// What DPI learned about each of the flows `keys` (a page of a snapshot), from whichever
    /// shard holds it; None where no shard has anything.
    pub fn flow_meta(&self, keys: &[FlowKey]) -> Vec<Option<Box<Meta>>> {
        self.ask_shards(keys, Request::Meta)
    }

    /// Asks every shard about `keys` (`request` makes the question) and keeps, per key, the
    /// answer of the shard that holds the flow (the others say None).
    fn ask_shards<T: Clone>(
        &self,
        keys: &[FlowKey],
        request: impl Fn(Vec<FlowKey>, crossbeam_channel::Sender<Vec<Option<T>>>) -> Request,
    ) -> Vec<Option<T>> {
        let mut out: Vec<Option<T>> = vec![None; keys.len()];
        for s in &self.shared {
            let (tx, rx) = bounded(1);
            if s.requests.send(request(keys.to_vec(), tx)).is_ok() {
                if let Ok(v) = rx.recv_timeout(Duration::from_secs(5)) {
                    for (o, m) in out.iter_mut().zip(v) {
                        if o.is_none() {
                            *o = m;
                        }
                    }
                }
            }
        }
        out
    }

    /// The TCP health of live flows, as [`ProbeView::flow_meta`] gives their metadata.
    pub fn flow_tcp(&self, keys: &[FlowKey]) -> Vec<Option<sonde_flow::TcpHealth>> {
        self.ask_shards(keys, Request::Tcp)
    }

    /// The same, reusing `buf` (an earlier snapshot's) when there is one shard.
    pub fn snapshot_hosts_into(&self, buf: Vec<Host>) -> Vec<Host> {
        let mut parts = Vec::new();
        let mut buf = Some(buf);
        for s in &self.shared {
            let (tx, rx) = bounded(1);
            let live = s
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .active_hosts;
            let buf = presized(buf.take().unwrap_or_default(), live as usize);
            if s.requests.send(Request::Hosts(buf, tx)).is_ok() {
                if let Ok(v) = rx.recv_timeout(Duration::from_secs(5)) {
                    parts.push(v);
                }
            }
        }
        merge_hosts(parts)
    }

    /// Time since the probe started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}

/// `buf`, cleared, with room for `live` rows and some growth, its memory touched here: the
/// shard then fills it without taking a page fault per 4 KiB (a fresh buffer of a million
/// rows cost the shard about half a second of page faults).
fn presized<T: Copy + Default>(mut buf: Vec<T>, live: usize) -> Vec<T> {
    buf.clear();
    let want = live + live / 8 + 1024;
    if buf.capacity() < want {
        buf = Vec::with_capacity(want);
        buf.resize(want, T::default());
        buf.clear();
    }
    buf
}

fn merge_hosts(parts: Vec<Vec<Host>>) -> Vec<Host> {
    if parts.iter().all(|p| p.is_empty()) {
        return Vec::new();
    }
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut map: HashMap<sonde_flow::host::HostKey, Host> = HashMap::new();
    for h in parts.into_iter().flatten() {
        map.entry(h.key)
            .and_modify(|m| {
                m.sent_pkts += h.sent_pkts;
                m.sent_bytes += h.sent_bytes;
                m.rcvd_pkts += h.rcvd_pkts;
                m.rcvd_bytes += h.rcvd_bytes;
                m.flows_as_client += h.flows_as_client;
                m.flows_as_server += h.flows_as_server;
                m.active_flows += h.active_flows;
                m.retransmits_sent = m.retransmits_sent.saturating_add(h.retransmits_sent);
                m.retransmits_rcvd = m.retransmits_rcvd.saturating_add(h.retransmits_rcvd);
                m.first_ns = m.first_ns.min(h.first_ns);
                m.last_ns = m.last_ns.max(h.last_ns);
                m.local = m.local.or(h.local);
                if !m.has_mac && h.has_mac {
                    m.mac = h.mac;
                    m.has_mac = true;
                }
            })
            .or_insert(h);
    }
    map.into_values().collect()
}

/// The buffer in front of a flows file, and how much text its sink formats before each
/// write (the same: whole chunks pass the buffer by). Standard output's is smaller, so a
/// reader of a live run's pipe gets records sooner.
const FILE_CHUNK: usize = 1 << 20;
const STDOUT_CHUNK: usize = 1 << 16;

/// A flows output, and the chunk its sink should write in.
fn open_output(path: &std::path::Path) -> Result<(Box<dyn Write + Send>, usize), ProbeError> {
    if path.as_os_str() == "-" {
        return Ok((
            Box::new(std::io::BufWriter::with_capacity(
                STDOUT_CHUNK,
                std::io::stdout(),
            )),
            STDOUT_CHUNK,
        ));
    }
    let f = std::fs::File::create(path).map_err(|e| ProbeError::Output {
        path: path.display().to_string(),
        source: e,
    })?;
    Ok((
        Box::new(std::io::BufWriter::with_capacity(FILE_CHUNK, f)),
        FILE_CHUNK,
    ))
}

/// The combinations of inputs one probe can read: a file only alone (it runs on its own
/// clock and ends by itself), one collector input (it may listen on several sources), and
/// the capture filter only with a packet capture to apply to.
fn check_inputs(cfg: &ProbeConfig) -> Result<(), ProbeError> {
    let count = |f: fn(&Input) -> bool| cfg.inputs.iter().filter(|i| f(i)).count();
    let files = count(|i| matches!(i, Input::File(_)));
    if cfg.inputs.is_empty() {
        return Err(ProbeError::Config(
            "no input: give -r FILE, -i IFACE, --synthetic SPEC or --collect SOURCE".into(),
        ));
    }
    if files > 0 && cfg.inputs.len() > 1 {
        return Err(ProbeError::Config(
            "-r FILE is read alone (it replays its own time and ends by itself): drop the \
             other inputs, or run a second sonde for them"
                .into(),
        ));
    }
    if count(|i| matches!(i, Input::Collect(_))) > 1 {
        return Err(ProbeError::Config(
            "give every collector source in one --collect list (repeat --collect)".into(),
        ));
    }
    let captures = count(|i| matches!(i, Input::File(_) | Input::Live(_)));
    if cfg.filter.is_some() && captures == 0 {
        let what = if count(|i| matches!(i, Input::Collect(_))) > 0 {
            "collected flows"
        } else {
            "--synthetic traffic"
        };
        return Err(ProbeError::Config(format!(
            "-f/--filter does not apply to {what}"
        )));
    }
    Ok(())
}

/// Opens the input (so bad files, interfaces and filters fail here, before any thread starts)
/// and starts the shard, reader and sink threads.
pub fn start(cfg: ProbeConfig) -> Result<Probe, ProbeError> {
    let per_input = cfg.threads;
    if per_input == 0 || per_input > 1024 {
        return Err(ProbeError::Config(format!(
            "--threads must be between 1 and 1024, got {per_input}"
        )));
    }
    check_inputs(&cfg)?;
    // Every input has its own shards; the views and the sinks see them all as one.
    let threads = per_input * cfg.inputs.len();
    if let Some(cpus) = &cfg.cpus {
        crate::cpus::check(cpus, threads).map_err(ProbeError::Config)?;
    }
    let per_shard = EngineConfig {
        max_flows: cfg.engine.max_flows.div_ceil(threads),
        max_hosts: cfg.engine.max_hosts.div_ceil(threads),
        ..cfg.engine
    };
    let stop = Arc::new(AtomicBool::new(false));
    let error = Arc::new(Mutex::new(None));
    let progress = Arc::new(AtomicU64::new(0));

    // Sinks first: a bad output path is reported before reading anything. Each runs behind
    // its own queue; the dispatcher offers every batch to each.
    let mut sinks: Vec<QueuedSink> = Vec::new();
    let live = cfg.inputs.iter().any(Input::is_live);
    let queue_error =
        |e: std::io::Error| ProbeError::Config(format!("cannot start a sink thread: {e}"));
    if let Some((path, format)) = &cfg.flows_out {
        let name = format!("flows file '{}'", path.display());
        let (out, chunk) = open_output(path)?;
        let file = Box::new(
            FileSink::new(name, out, *format)
                .batched(chunk)
                .with_geo(cfg.geo.clone()),
        );
        sinks.push(
            QueuedSink::start(
                file,
                sinks::registered("flows-file").queue(Default::default(), live),
            )
            .map_err(queue_error)?,
        );
    }
    for plan in &cfg.extra_sinks {
        let sink = (plan.make)().map_err(ProbeError::Config)?;
        sinks.push(QueuedSink::start(sink, plan.queue).map_err(queue_error)?);
    }
    // User scripts: a syntax error stops the start here; on_flow hooks get ended flows
    // through a sink that drops (and counts) what they cannot keep up with.
    let scripts = match cfg.alerts.as_ref().filter(|a| !a.scripts.is_empty()) {
        Some(a) => Some(
            sonde_scripts::Scripts::load(&a.scripts, a.script_limits)
                .map_err(ProbeError::Config)?,
        ),
        None => None,
    };
    let scripts_live = Arc::new(crate::scripts_run::ScriptsLive::default());
    let mut script_flows = None;
    if scripts.as_ref().is_some_and(|s| s.wants_flows()) {
        let (sink, rx) = crate::scripts_run::flow_channel(&scripts_live);
        let queue = crate::sinks::QueueOptions {
            when_full: crate::sinks::WhenFull::DropNewest,
            batches: crate::sinks::DEFAULT_QUEUE_BATCHES,
        };
        sinks.push(QueuedSink::start(sink, queue).map_err(queue_error)?);
        script_flows = Some(rx);
    }
    let sink_sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sink_live: Arc<Vec<Arc<crate::sink_queue::SinkLive>>> =
        Arc::new(sinks.iter().map(QueuedSink::live).collect());
    let (sink_tx, sink) = if sinks.is_empty() {
        (None, None)
    } else {
        // Only a hand-over: the sinks' own queues hold what waits (a batch here is up to
        // 8192 records, 2.5 MB).
        let (tx, rx) = bounded::<Vec<FlowRecord>>(2);
        // Buffers of batches every sink is done with, back to the shards (RecordSinkLink).
        let (recycle_tx, recycle_rx) = bounded::<Vec<FlowRecord>>(16);
        let h = std::thread::Builder::new()
            .name("sink-dispatch".into())
            .spawn(move || -> SinkResult {
                // Batches some sink may still hold; one only this thread holds is done with.
                let mut lent: Vec<Batch> = Vec::new();
                for batch in rx.iter() {
                    let batch: Batch = Arc::new(batch);
                    for s in sinks.iter_mut() {
                        s.offer(&batch);
                    }
                    lent.push(batch);
                    lent.retain_mut(|b| match Arc::get_mut(b) {
                        Some(records) => {
                            let mut buf = std::mem::take(records);
                            buf.clear();
                            let _ = recycle_tx.try_send(buf);
                            false
                        }
                        None => true,
                    });
                }
                drop(lent);
                // Every sink finishes (writes what it holds) even when one failed.
                let done: Vec<_> = sinks.into_iter().map(QueuedSink::finish).collect();
                done.into_iter().collect()
            })
            .map_err(|e| ProbeError::Config(format!("cannot start the sink thread: {e}")))?;
        (Some((tx, recycle_rx)), Some(h))
    };

    let host_sink = match &cfg.hosts_out {
        Some(path) => {
            let (mut out, _) = open_output(path)?;
            let (tx, rx) = bounded::<Vec<Host>>(64);
            let h = std::thread::Builder::new()
                .name("host-sink".into())
                .spawn(move || -> std::io::Result<u64> {
                    let mut line = String::new();
                    let mut n = 0;
                    for batch in rx {
                        for h in &batch {
                            line.clear();
                            host_json(&mut line, h);
                            out.write_all(line.as_bytes())?;
                            n += 1;
                        }
                    }
                    out.flush()?;
                    Ok(n)
                })
                .map_err(|e| {
                    ProbeError::Config(format!("cannot start the host sink thread: {e}"))
                })?;
            Some((tx, h))
        }
        None => None,
    };
    let series = match &cfg.series {
        Some((dir, config)) => {
            let keys = cfg
                .analytics
                .as_ref()
                .and_then(|a| a.config.filter_sets.as_ref())
                .map(|s| (0..s.len()).map(|i| s.key(i)).collect())
                .unwrap_or_default();
            Some(
                crate::series_sink::start(dir, *config, threads, keys, series_inputs(&cfg))
                    .map_err(ProbeError::Config)?,
            )
        }
        None => None,
    };
    // The host cache lives in the data directory too.
    let mut cache_replies = Vec::new();
    let host_cache = match &cfg.series {
        Some((dir, _)) => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads)
                .map(|_| crossbeam_channel::unbounded::<crate::host_cache::CacheReply>())
                .unzip();
            cache_replies = rxs;
            Some(
                crate::host_cache::start(
                    dir,
                    cfg.host_cache_max,
                    txs,
                    host_sink.as_ref().map(|(tx, _)| tx.clone()),
                )
                .map_err(ProbeError::Config)?,
            )
        }
        None => None,
    };
    let watch = Arc::new(sonde_analytics::WatchList::default());
    let analytics_config = cfg.analytics.as_ref().map(|a| {
        Arc::new(sonde_analytics::AnalyticsConfig {
            shards: threads,
            ..a.config.clone()
        })
    });
    let trigger =
        match &cfg.trigger {
            Some(_) if cfg.analytics.is_none() => return Err(ProbeError::Config(
                "--trigger-capture needs the analytics (their detections start captures): drop \
                 --analytics off"
                    .into(),
            )),
            Some(t) => {
                Some(sonde_trigger::TriggerCapture::start(t.clone()).map_err(ProbeError::Config)?)
            }
            None => None,
        };
    // Which shards keep a ring: those that read packets themselves (a multi-shard file's
    // reader keeps the one ring of that input instead).
    let packet_shard = |i: usize| match &cfg.inputs[i / per_input] {
        Input::Live(_) => true,
        Input::File(_) => per_input == 1,
        _ => false,
    };
    let egress = match &cfg.egress {
        Some(e) => {
            if let Some(i) = (0..threads).find(|&i| !packet_shard(i)) {
                let what = match &cfg.inputs[i / per_input] {
                    Input::File(_) => "a file read by several shards: give it --threads 1",
                    _ => {
                        "an input that is not packets (--synthetic, --collect): egress forwards \
                          captured packets, from -r FILE or -i IFACE"
                    }
                };
                return Err(ProbeError::Config(format!(
                    "--egress-* needs shards that read packets themselves, and this run has {what}"
                )));
            }
            if let Some(iface) = &e.iface {
                if cfg
                    .inputs
                    .iter()
                    .any(|i| matches!(i, Input::Live(n) if n == iface))
                {
                    return Err(ProbeError::Config(format!(
                        "--egress-iface {iface} is also an input (-i {iface}): the forwarded \
                         packets would be captured again; send them to another interface"
                    )));
                }
            }
            Some(sonde_egress::Egress::start(e.clone()).map_err(ProbeError::Config)?)
        }
        None => None,
    };
    let alerts = match &cfg.alerts {
        Some(a) => Some(
            crate::alerts::AlertHub::open(a, scripts.is_some().then(|| scripts_live.clone()))
                .map_err(ProbeError::Config)?,
        ),
        None => None,
    };
    // Trigger capture follows the alerts (rate limits and exclusions included).
    if let (Some(hub), Some(t)) = (&alerts, &trigger) {
        hub.add_output(Box::new(crate::alerts::TriggerOut(t.clone())));
    }
    let analytics = match (&cfg.analytics, &analytics_config) {
        (Some(a), Some(c)) => Some(
            crate::analytics_sink::start(a, c.clone(), watch.clone(), alerts.clone())
                .map_err(ProbeError::Config)?,
        ),
        _ => None,
    };
    let per_shard = EngineConfig {
        report_purged_hosts: host_sink.is_some() || host_cache.is_some(),
        series: series.is_some(),
        list_new_hosts: host_cache.is_some(),
        ..per_shard
    };

    let mut all_ctxs = Vec::new();
    let mut shared = Vec::new();
    for _ in 0..threads {
        let (req_tx, req_rx) = bounded(16);
        let sh = Arc::new(Shared {
            stats: Mutex::new(ShardStats::default()),
            capture: Mutex::new(CaptureDrops::default()),
            requests: req_tx,
            wants_rows_buffer: AtomicBool::new(false),
        });
        shared.push(sh.clone());
        all_ctxs.push(ShardCtx {
            engine: {
                let mut e = Engine::new(per_shard);
                let dpi = cfg.dpi.clone().map(Dpi::new).transpose();
                e.set_dpi(dpi.map_err(|e| ProbeError::Config(format!("--dpi: {e}")))?);
                e.set_local_networks(cfg.local_networks.clone());
                e.set_analytics(
                    analytics_config
                        .clone()
                        .map(|c| sonde_analytics::ShardAnalytics::new(c, watch.clone())),
                );
                if egress.as_ref().is_some_and(|e| e.config().needs_flow()) {
                    e.record_verdicts();
                }
                e
            },
            analytics: analytics
                .as_ref()
                .map(|(tx, _, _)| (all_ctxs.len(), tx.clone())),
            trigger: trigger
                .as_ref()
                .filter(|_| packet_shard(all_ctxs.len()))
                .map(|t| t.shard()),
            trigger_ack: trigger
                .as_ref()
                .filter(|_| packet_shard(all_ctxs.len()))
                .map(|_| {
                    let (tx, rx) = bounded(1);
                    shard::TriggerAck { tx, rx }
                }),
            egress: match &egress {
                Some(e) => Some(e.shard(all_ctxs.len()).map_err(ProbeError::Config)?),
                None => None,
            },
            shared: sh,
            requests: req_rx,
            sink: sink_tx
                .as_ref()
                .map(|(tx, recycled)| shard::RecordSinkLink {
                    tx: tx.clone(),
                    recycled: recycled.clone(),
                }),
            sink_sent: sink_sent.clone(),
            host_sink: host_sink.as_ref().map(|(tx, _)| tx.clone()),
            stop: stop.clone(),
            records: Vec::new(),
            series: series.as_ref().map(|(tx, _)| (all_ctxs.len(), tx.clone())),
            series_told: None,
            linger: cfg.linger,
            reader_ns: 0,
            host_cache: host_cache.as_ref().map(|(tx, _)| shard::HostCacheLink {
                shard: all_ctxs.len(),
                hand_over: host_sink.is_none(),
                tx: tx.clone(),
                replies: cache_replies.remove(0),
            }),
            host_output: if cfg.hosts_out.is_some() {
                shard::HostOutput::Full
            } else if threads > 1 {
                shard::HostOutput::Keys
            } else {
                shard::HostOutput::CountOnly
            },
        });
    }
    drop(sink_tx);
    // The shards hold the series and host cache senders now: those threads end when the
    // last shard does.
    let series = series.map(|(_, h)| h);
    // With --hosts-out the run hands the last hosts over, merged (see `host_cache`).
    let (host_cache, host_handover) = match host_cache {
        Some((tx, h)) => (Some(h), host_sink.is_some().then_some(tx)),
        None => (None, None),
    };
    let (analytics, analytics_view) = match analytics {
        Some((_, h, view)) => (Some(h), Some(view)),
        None => (None, None),
    };

    // Shards are started in order, shard0 first: with --cpus, the i-th started gets cpus[i].
    let started_shards = std::cell::Cell::new(0usize);
    let spawn = |name: String,
                 f: Box<dyn FnOnce() -> ShardOutput + Send>|
     -> Result<JoinHandle<ShardOutput>, ProbeError> {
        let i = started_shards.replace(started_shards.get() + 1);
        let cpu = cfg.cpus.as_ref().and_then(|c| c.get(i).copied());
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Some(cpu) = cpu {
                    // Checked against the allowed CPUs at start; a failure here (the mask
                    // changed since) leaves the shard unpinned, said once.
                    if let Err(e) = crate::cpus::pin(cpu) {
                        eprintln!("sonde: {name}: cannot pin to CPU {cpu}: {e}; running unpinned");
                    }
                }
                f()
            })
            .map_err(|e| ProbeError::Config(format!("cannot start a shard thread: {e}")))
    };

    let mut shard_handles = Vec::new();
    let mut receivers = Vec::new();
    let kafka_finals = Arc::new(Mutex::new(Vec::new()));
    let collector_counters = Arc::new(CollectorCounters::default());
    let mut reader = None;
    let mut file_len = None;
    let mut deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut capture_backends = vec![None; cfg.inputs.len()];
    for (k, input) in cfg.inputs.iter().enumerate() {
        // This input's shards, named by their index among all shards.
        let first = k * per_input;
        let mut ctxs: Vec<ShardCtx> = all_ctxs.drain(..per_input).collect();
        match input {
            Input::File(path) => {
                let mut src = FileSource::open(path)?;
                file_len = Some(src.progress().1);
                if cfg.replay == Replay::Loop {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64);
                    src.loop_from(now);
                }
                if let (Some(t), Some(link)) = (&trigger, src.link_type()) {
                    t.set_link_hint(link);
                }
                let first_filter = match (&cfg.filter, src.link_type()) {
                    (Some(expr), Some(link)) => Some((link, OfflineFilter::compile(expr, link)?)),
                    (Some(expr), None) => {
                        // pcapng before its first interface block: check the syntax on Ethernet.
                        OfflineFilter::compile(expr, sonde_wire::LinkType::Ethernet)?;
                        None
                    }
                    _ => None,
                };
                let filters = Filters::new(cfg.filter.clone(), first_filter);
                let pacer = (cfg.replay != Replay::Fast).then(Pacer::new);
                // A file ends by itself (a looped one does not); --duration only ends the
                // lingering after it.
                if !cfg.linger && cfg.replay != Replay::Loop {
                    deadline = None;
                }
                if per_input == 1 {
                    let ctx = ctxs.pop().expect("one shard");
                    let (progress, error) = (progress.clone(), error.clone());
                    shard_handles.push(spawn(
                        format!("shard{first}"),
                        Box::new(move || {
                            let input = source::FileInput {
                                src,
                                filters,
                                pacer,
                                progress,
                                error,
                                next_sync_ns: 0,
                                frames: Vec::new(),
                                refs: Vec::new(),
                            };
                            source::run(ctx, input)
                        }),
                    )?);
                } else {
                    let mut txs = Vec::new();
                    let (recycle_tx, recycle_rx) = bounded::<DecodedBatch>(per_input * 8);
                    for (i, ctx) in ctxs.drain(..).enumerate() {
                        let (tx, rx) = bounded::<DecodedBatch>(8);
                        txs.push(tx);
                        let recycle = recycle_tx.clone();
                        shard_handles.push(spawn(
                            format!("shard{}", first + i),
                            Box::new(move || {
                                source::run(ctx, source::DecodedInput { rx, recycle })
                            }),
                        )?);
                    }
                    let (progress, error, stop) = (progress.clone(), error.clone(), stop.clone());
                    let tick_ns = per_shard.tick_ns;
                    let dpi = cfg.dpi.as_ref().map(|d| d.backend);
                    let marks = analytics_config
                        .as_ref()
                        .map(|c| (c.filter_sets.clone().map(sonde_analytics::FilterEval::new),));
                    let ring = trigger.as_ref().map(|t| t.shard());
                    reader = Some(
                        std::thread::Builder::new()
                            .name("reader".into())
                            .spawn(move || {
                                read_and_dispatch(
                                    src, filters, pacer, txs, recycle_rx, progress, error, stop,
                                    tick_ns, dpi, marks, ring,
                                )
                            })
                            .map_err(|e| {
                                ProbeError::Config(format!("cannot start the reader thread: {e}"))
                            })?,
                    );
                }
            }
            Input::Live(name) => {
                // One fanout group per interface.
                let group =
                    (per_input > 1).then(|| ((std::process::id() + k as u32) & 0xffff) as u16);
                let lc = LiveConfig {
                    interface: name.clone(),
                    filter: cfg.filter.clone(),
                    fanout_group: group,
                    ..cfg.live.clone()
                };
                let sources = LiveSource::open_group(&lc, per_input)?;
                capture_backends[k] = sources.first().map(|s| s.description().to_string());
                if let (Some(t), Some(src)) = (&trigger, sources.first()) {
                    t.set_link_hint(src.link_type());
                }
                for (i, (ctx, src)) in ctxs.drain(..).zip(sources).enumerate() {
                    // AF_XDP has no socket filter: the shard applies it, as to a file's frames.
                    let filters = src
                        .filters_in_user_space()
                        .then(|| Filters::new(cfg.filter.clone(), None));
                    let input = source::LiveInput::new(src, error.clone(), filters);
                    shard_handles.push(spawn(
                        format!("shard{}", first + i),
                        Box::new(move || source::run(ctx, input)),
                    )?);
                }
            }
            Input::Collect(sources) => {
                let mut txs = Vec::new();
                let (recycle_tx, recycle_rx) = bounded::<CollectedBatch>(per_input * 16);
                let settlement = Arc::new(collect::Settlement::new(
                    per_input,
                    sink_sent.clone(),
                    sink_live.clone(),
                ));
                for (i, ctx) in ctxs.drain(..).enumerate() {
                    let (tx, rx) = bounded::<CollectedBatch>(64);
                    txs.push(tx);
                    let recycle = recycle_tx.clone();
                    let settlement = settlement.clone();
                    shard_handles.push(spawn(
                        format!("shard{}", first + i),
                        Box::new(move || {
                            source::run(
                                ctx,
                                source::CollectedInput::new(rx, recycle, settlement, i),
                            )
                        }),
                    )?);
                }
                for src in sources {
                    let out = Dispatcher::new(txs.clone(), recycle_rx.clone(), settlement.clone());
                    let (stop, counters) = (stop.clone(), collector_counters.clone());
                    let h = match src {
                        CollectSource::Kafka(k) => {
                            let consumer = k.connect().map_err(ProbeError::Config)?;
                            let (settlement, finals) = (settlement.clone(), kafka_finals.clone());
                            let (format, commit_every) = (k.format, k.commit_every);
                            std::thread::Builder::new()
                                .name("collect-kafka".into())
                                .spawn(move || {
                                    crate::kafka_source::run_kafka(
                                        consumer,
                                        format,
                                        commit_every,
                                        out,
                                        stop,
                                        counters,
                                        settlement,
                                        finals,
                                    )
                                })
                        }
                        CollectSource::Zmq(endpoint, curve, allow, format) => {
                            let input = collect::bind_zmq(
                                endpoint,
                                curve.as_deref(),
                                allow,
                                *format,
                                &stop,
                                &counters,
                            )
                            .map_err(ProbeError::Config)?;
                            let (format, what) = (*format, format!("--collect zmq+{endpoint}"));
                            std::thread::Builder::new()
                                .name("collect-zmq".into())
                                .spawn(move || {
                                    collect::run_zmq(input, format, what, out, stop, counters)
                                })
                        }
                        CollectSource::Udp(addr, allow) => {
                            let allow = allow.clone();
                            let sock = std::net::UdpSocket::bind(addr)
                                .and_then(|s| {
                                    s.set_read_timeout(Some(Duration::from_millis(200)))?;
                                    collect::enlarge_receive_buffer(&s);
                                    Ok(s)
                                })
                                .map_err(|e| {
                                    ProbeError::Config(format!(
                                        "--collect udp://{addr}: cannot listen ({e}); is the port \
                                     in use, or the address not one of this machine's?"
                                    ))
                                })?;
                            std::thread::Builder::new()
                                .name("collect-udp".into())
                                .spawn(move || collect::run_udp(sock, allow, out, stop, counters))
                        }
                        CollectSource::Tcp(addr, allow) => {
                            let allow = allow.clone();
                            let l = std::net::TcpListener::bind(addr)
                                .and_then(|l| {
                                    l.set_nonblocking(true)?;
                                    Ok(l)
                                })
                                .map_err(|e| {
                                    ProbeError::Config(format!(
                                        "--collect tcp://{addr}: cannot listen ({e}); is the port \
                                     in use, or the address not one of this machine's?"
                                    ))
                                })?;
                            std::thread::Builder::new()
                                .name("collect-tcp".into())
                                .spawn(move || collect::run_tcp(l, allow, out, stop, counters))
                        }
                    }
                    .map_err(|e| ProbeError::Config(format!("cannot start a collector: {e}")))?;
                    receivers.push(h);
                }
            }
            Input::Synthetic(spec) => {
                for (i, ctx) in ctxs.drain(..).enumerate() {
                    let src = SyntheticSource::new(spec.clone(), i as u32, per_input as u32);
                    shard_handles.push(spawn(
                        format!("shard{}", first + i),
                        Box::new(move || source::run(ctx, source::SyntheticInput { src })),
                    )?);
                }
            }
        }
    }
    let mut probe = Probe {
        local_networks: Arc::new(cfg.local_networks.clone()),
        geo: cfg.geo.clone(),
        sink_live,
        shared,
        inputs: Arc::new(InputShards {
            names: input_names(&cfg),
            live: cfg
                .inputs
                .iter()
                .map(|i| matches!(i, Input::Live(_)))
                .collect(),
            per_input,
            file: cfg.inputs.iter().position(|i| matches!(i, Input::File(_))),
            capture_backends,
        }),
        stop,
        shards: shard_handles,
        reader,
        sink,
        host_sink,
        series,
        host_cache,
        host_handover,
        receivers,
        kafka_finals,
        collector_counters,
        has_flows_file: cfg.flows_out.is_some(),
        dns: cfg.dpi.as_ref().map(|d| d.dns_cache.clone()),
        analytics,
        analytics_view,
        trigger,
        egress,
        progress,
        file_len,
        error,
        started: Instant::now(),
        deadline,
        alerts,
        alerts_thread: None,
        scripts_thread: None,
    };
    if let (Some(hub), Some(a)) = (&probe.alerts, &cfg.alerts) {
        let stop = Arc::new(AtomicBool::new(false));
        let h = crate::alerts::start_checks(
            hub.clone(),
            probe.view(),
            a.checks.clone(),
            input_name(&cfg),
            stop.clone(),
        )
        .map_err(ProbeError::Config)?;
        probe.alerts_thread = Some((stop, h));
        if let Some(s) = scripts {
            let stop = Arc::new(AtomicBool::new(false));
            let h = crate::scripts_run::start(
                s,
                hub.clone(),
                probe.view(),
                script_flows,
                scripts_live,
                stop.clone(),
            )
            .map_err(ProbeError::Config)?;
            probe.scripts_thread = Some((stop, h));
        }
    }
    Ok(probe)
}

/// The input as alerts name it (capture.drops' entity).
fn input_name(cfg: &ProbeConfig) -> String {
    input_names(cfg).join(",")
}

fn input_names(cfg: &ProbeConfig) -> Vec<String> {
    cfg.inputs
        .iter()
        .map(|i| match i {
            Input::Live(name) => name.clone(),
            Input::File(p) => p.display().to_string(),
            Input::Synthetic(_) => "synthetic".into(),
            Input::Collect(_) => "collector".into(),
        })
        .collect()
}

/// Which input each shard reads, for the time series of each input.
fn series_inputs(cfg: &ProbeConfig) -> crate::series_sink::ShardInputs {
    let per_input = cfg.threads.max(1);
    crate::series_sink::ShardInputs {
        names: input_names(cfg),
        live: cfg
            .inputs
            .iter()
            .map(|i| matches!(i, Input::Live(_)))
            .collect(),
        of_shard: (0..cfg.inputs.len() * per_input)
            .map(|s| s / per_input)
            .collect(),
    }
}

/// Live interfaces' capture counters by name, and their shards' by shard number.
pub type LiveDrops = (Vec<(String, CaptureDrops)>, Vec<(usize, CaptureDrops)>);

/// One input's counters in the summary: packets (its shards' stats) and the kernel's.
#[derive(Clone, Debug)]
pub struct InputReport {
    pub name: String,
    pub stats: ShardStats,
    pub capture: CaptureDrops,
    /// What read a live interface (`--capture`'s choice, with its mode).
    pub capture_backend: Option<String>,
}

/// Which shards read which input: input i has shards `i × per_input ..` `(i + 1) × per_input`.
#[derive(Debug)]
pub(crate) struct InputShards {
    pub names: Vec<String>,
    /// Which inputs are live interfaces (the others' kernel counters are always zero).
    pub live: Vec<bool>,
    pub per_input: usize,
    /// The file input, whose reader (with several shards) counts what it keeps from them.
    pub file: Option<usize>,
    /// What reads each live interface ("ring", "pcap", "xdp native copy"; None for others).
    pub capture_backends: Vec<Option<String>>,
}

impl InputShards {
    /// Each input's counters from its shards': their sockets' counts add up, but every shard
    /// of an interface reads the same interface drop counter, which counts once.
    pub fn by_input(&self, per_shard: &[CaptureDrops]) -> Vec<CaptureDrops> {
        per_shard
            .chunks(self.per_input.max(1))
            .map(|shards| {
                shards.iter().fold(CaptureDrops::default(), |mut d, s| {
                    d.received += s.received;
                    d.dropped += s.dropped;
                    d.if_dropped = d.if_dropped.max(s.if_dropped);
                    d
                })
            })
            .collect()
    }

    /// Each input's packet counters: the sum of its shards'.
    pub fn stats_by_input(&self, per_shard: &[ShardStats]) -> Vec<ShardStats> {
        per_shard
            .chunks(self.per_input.max(1))
            .map(|shards| {
                shards.iter().fold(ShardStats::default(), |mut t, s| {
                    t.merge(s);
                    t
                })
            })
            .collect()
    }

    pub fn total(&self, per_shard: &[CaptureDrops]) -> CaptureDrops {
        self.by_input(per_shard)
            .into_iter()
            .fold(CaptureDrops::default(), |mut d, i| {
                d.received += i.received;
                d.dropped += i.dropped;
                d.if_dropped += i.if_dropped;
                d
            })
    }
}

const DISPATCH_BATCH: usize = 256;

/// The reader of a multi-shard file run: decodes every frame once, picks the shard from the
/// symmetric flow hash, and hands shards full batches.
#[allow(clippy::too_many_arguments)]
fn read_and_dispatch(
    mut src: FileSource,
    mut filters: Filters,
    mut pacer: Option<Pacer>,
    txs: Vec<Sender<DecodedBatch>>,
    recycle: crossbeam_channel::Receiver<DecodedBatch>,
    progress: Arc<AtomicU64>,
    error: Arc<Mutex<Option<CaptureError>>>,
    stop: Arc<AtomicBool>,
    tick_ns: u64,
    dpi: Option<Backend>,
    // With analytics on: the filter-sets' evaluator, when there are filter-sets.
    analytics: Option<(Option<sonde_analytics::FilterEval>,)>,
    // With trigger capture: the input's ring (the shards get decoded packets, not frames).
    mut trigger: Option<sonde_trigger::ShardTrigger>,
) -> ShardStats {
    let headers = dpi == Some(Backend::Ndpi);
    let dpi = dpi.is_some();
    let (analytics, mut marks) = match analytics {
        Some((m,)) => (true, m),
        None => (false, None),
    };
    let n = txs.len() as u64;
    let tick_ns = tick_ns.max(1);
    let mut stats = ShardStats::default();
    let mut decoder = Decoder::default();
    let new_batch = || DecodedBatch {
        pkts: Vec::with_capacity(DISPATCH_BATCH),
        ts: Vec::with_capacity(DISPATCH_BATCH),
        payload_bytes: Vec::new(),
        spans: Vec::new(),
        clock_ns: 0,
        marks: Vec::new(),
        wire_lens: Vec::new(),
        unflowed: Vec::new(),
    };
    let mut batches: Vec<DecodedBatch> = (0..n).map(|_| new_batch()).collect();
    let mut d = Decoded::default();
    let mut count: u64 = 0;
    let mut next_tick_ns = 0;
    // A looped file has no end: stop requests are checked after every paced wait too.
    let looping = src.is_looping();
    let send = |batches: &mut Vec<DecodedBatch>, i: usize| {
        let fresh = recycle.try_recv().unwrap_or_else(|_| new_batch());
        let full = std::mem::replace(&mut batches[i], fresh);
        let _ = txs[i].send(full);
    };
    loop {
        match src.next_frame() {
            Ok(Some((link, f))) => {
                stats.packets += 1;
                stats.wire_bytes += f.wire_len as u64;
                if !filters.accepts(link, f.data, f.wire_len) {
                    stats.dropped[sonde_flow::DropReason::Filtered as usize] += 1;
                    continue;
                }
                if let Some(t) = trigger.as_mut() {
                    t.packet(link, f.ts_ns, f.wire_len, f.data);
                    if count.is_multiple_of(256) {
                        t.batch();
                    }
                }
                if f.ts_ns >= next_tick_ns {
                    // Every shard's clock moves with the file's, as a single engine's would.
                    for i in 0..batches.len() {
                        batches[i].clock_ns = f.ts_ns;
                        send(&mut batches, i);
                    }
                    next_tick_ns = (f.ts_ns / tick_ns + 1) * tick_ns;
                }
                if let Some(p) = pacer.as_mut() {
                    if let Some(wait) = p.due_in(f.ts_ns) {
                        for i in 0..batches.len() {
                            if !batches[i].pkts.is_empty() {
                                send(&mut batches, i);
                            }
                        }
                        source::sleep_unless_stopped(wait, &stop);
                        if looping && stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
                match decoder.decode(link, f.ts_ns, f.data, f.wire_len, &mut d) {
                    Ok(Outcome::Ip) => {
                        let (key, _) = FlowKey::from_packet(&d);
                        let shard = ((key.hash() >> 32) % n) as usize;
                        let b = &mut batches[shard];
                        if dpi || analytics {
                            let span = if dpi || sonde_flow::quotes_a_packet(&d) {
                                copy_payload(&d, f.data, &mut b.payload_bytes, headers)
                            } else {
                                sonde_flow::Span::default()
                            };
                            b.spans.push(span);
                        }
                        if let Some(m) = marks.as_mut() {
                            b.marks.push(m.packet_mask(link, f.data, f.wire_len, &d));
                            b.wire_lens.push(f.wire_len);
                        }
                        b.pkts.push(d);
                        b.ts.push(f.ts_ns);
                        if b.pkts.len() == DISPATCH_BATCH {
                            send(&mut batches, shard);
                        }
                    }
                    Ok(Outcome::NonIp) => {
                        stats.non_ip += 1;
                        if let Some(m) = marks.as_mut() {
                            let mask = m.frame_mask(link, f.data, f.wire_len);
                            batches[0].unflowed.push((mask, f.wire_len));
                        }
                    }
                    Err(e) => {
                        stats.malformed[e as usize] += 1;
                        if let Some(m) = marks.as_mut() {
                            let mask = m.frame_mask(link, f.data, f.wire_len);
                            batches[0].unflowed.push((mask, f.wire_len));
                        }
                    }
                }
                if batches[0].unflowed.len() >= DISPATCH_BATCH {
                    send(&mut batches, 0);
                }
                count += 1;
                if count.is_multiple_of(65_536) {
                    progress.store(src.progress().0, Ordering::Relaxed);
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                break;
            }
        }
    }
    for i in 0..batches.len() {
        if !batches[i].pkts.is_empty() || !batches[i].unflowed.is_empty() {
            send(&mut batches, i);
        }
    }
    progress.store(src.progress().0, Ordering::Relaxed);
    if let Some(t) = trigger.as_mut() {
        t.finish();
    }
    stats.fragments = decoder.counters.fragments;
    stats.fragments_unmatched = decoder.counters.fragments_unmatched;
    stats.tunneled = decoder.counters.tunneled;
    stats
}
