//! Trigger capture (Ourmon §7): when an alert of a chosen type engages, the packets that match
//! it go to a pcap file, starting a few seconds before the trigger (from a bounded ring of
//! recent packets per shard), until the alert is released or a size or time cap is reached.
//!
//! Why this crate exists: the alert engine, the shards and the writer meet here through one
//! small shared registry, so nothing else learns how captures work.
//!
//! * [`TriggerCapture`] (cheap to clone) takes alert records ([`TriggerCapture::on_alert`], the
//!   JSON of the alert contract), keeps the registry of engaged captures with a generation
//!   counter, runs the writer thread, and answers the API ([`TriggerCapture::files`],
//!   [`TriggerCapture::list`], [`TriggerCapture::metrics`]).
//! * [`ShardTrigger`], one per shard: [`ShardTrigger::packet`] stores every packet in the
//!   shard's [`PacketRing`] and, while something is engaged, sends the matching ones to the
//!   writer; [`ShardTrigger::batch`] (once per batch) loads one atomic and, when the
//!   generation moved, dumps the ring for new captures and lets go of released ones.
//! * The writer thread owns the files: one per alert (and link type) in the trigger directory,
//!   named from sanitised alert data ([`name`]), written in libpcap format, closed and flushed
//!   when every shard is done with a released alert or a cap cut it.
//!
//! A shard never waits for the writer: packets go over a bounded channel and what does not fit
//! is counted as dropped, per file and in total.

pub mod config;
pub mod matcher;
pub mod name;
pub mod ring;
mod writer;

pub use config::{check_dir, parse_rules, Rule, TriggerConfig, MIB};
pub use matcher::{Host, Matcher, Target};
pub use ring::{PacketRing, RingPacket};

use crossbeam_channel::{Sender, TrySendError};
use matcher::BpfCache;
use serde_json::Value;
use sonde_wire::{Decoded, Decoder, LinkType, Outcome};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Captures engaged at once at most; later alerts are counted and not captured.
pub const MAX_ENGAGED: usize = 64;
/// Alerts whose files [`TriggerCapture::list`] remembers (the files stay on disk).
const LISTED_ALERTS: usize = 4096;
/// Messages (packet chunks and control) the writer's channel holds.
const CHANNEL: usize = 512;
/// A shard sends a capture's packets in chunks of up to this many bytes.
const CHUNK_BYTES: usize = 64 << 10;

/// What cut a file short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// `--trigger-max-mb`.
    Bytes,
    /// `--trigger-max-seconds`.
    Seconds,
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::Bytes => "bytes",
            Cap::Seconds => "seconds",
        }
    }
}

/// One pcap file of an alert, for the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureFile {
    pub alert_id: u64,
    pub alert_type: String,
    /// The file name in the trigger directory.
    pub name: String,
    pub path: PathBuf,
    /// The link type's name (a second file takes the packets of another link type).
    pub link: &'static str,
    pub packets: u64,
    /// File size, headers included.
    pub bytes: u64,
    /// Matching packets the writer could not take (channel full).
    pub dropped: u64,
    /// Closed and flushed: nothing more will be written.
    pub complete: bool,
    pub truncated_by: Option<Cap>,
    /// A write error that ended the file early.
    pub error: Option<String>,
}

/// An engaged capture as shards and the writer see it.
pub(crate) struct Engaged {
    pub id: u64,
    pub kind: String,
    pub entity: String,
    pub matcher: Matcher,
    /// The alert's start (ns).
    pub start_ns: u64,
    /// Packets from this time on (start - pre).
    pub since_ns: u64,
    /// Packets up to this time (the alert's end, once released with one).
    pub until_ns: AtomicU64,
    pub released: AtomicBool,
    /// A cap (or an error) closed its files: shards stop sending.
    pub closed: AtomicBool,
    pub dropped: AtomicU64,
}

impl Engaged {
    fn over(&self) -> bool {
        self.released.load(Ordering::Acquire) || self.closed.load(Ordering::Acquire)
    }
}

/// Packets of one capture from one shard.
pub(crate) struct Chunk {
    pub e: Arc<Engaged>,
    pub link: LinkType,
    /// (ts_ns, orig_len, cap_len) per packet; the bytes one after another in `bytes`.
    pub pkts: Vec<(u64, u32, u32)>,
    pub bytes: Vec<u8>,
}

pub(crate) enum Msg {
    Open(Arc<Engaged>),
    Released(u64),
    Packets(Chunk),
    /// The shard sends nothing more for this capture.
    Done {
        shard: usize,
        id: u64,
    },
    /// The shard has ended.
    Gone(usize),
    Stop,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub files: AtomicU64,
    pub capped_bytes: AtomicU64,
    pub capped_seconds: AtomicU64,
    pub ignored: AtomicU64,
    pub errors: AtomicU64,
    pub rings: AtomicU64,
}

pub(crate) struct Shared {
    pub cfg: TriggerConfig,
    pub generation: AtomicU64,
    pub engaged: Mutex<Vec<Arc<Engaged>>>,
    pub files: Mutex<BTreeMap<u64, Vec<CaptureFile>>>,
    pub shards: AtomicUsize,
    /// The link type a capture's first file takes before any packet arrived.
    pub link_hint: Mutex<LinkType>,
    pub counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// Trigger capture for one probe: the registry, the writer thread, the API's view.
#[derive(Clone)]
pub struct TriggerCapture {
    shared: Arc<Shared>,
    tx: Sender<Msg>,
    writer: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl TriggerCapture {
    /// Checks the directory and starts the writer thread.
    pub fn start(cfg: TriggerConfig) -> Result<TriggerCapture, String> {
        check_dir(&cfg.dir).map_err(|e| format!("--trigger-dir {e}"))?;
        let shared = Arc::new(Shared {
            cfg,
            generation: AtomicU64::new(0),
            engaged: Mutex::new(Vec::new()),
            files: Mutex::new(BTreeMap::new()),
            shards: AtomicUsize::new(0),
            link_hint: Mutex::new(LinkType::Ethernet),
            counters: Counters::default(),
        });
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL);
        let s = shared.clone();
        let h = std::thread::Builder::new()
            .name("trigger-writer".into())
            .spawn(move || writer::run(s, rx))
            .map_err(|e| format!("cannot start the trigger capture writer: {e}"))?;
        Ok(TriggerCapture {
            shared,
            tx,
            writer: Arc::new(Mutex::new(Some(h))),
        })
    }

    pub fn config(&self) -> &TriggerConfig {
        &self.shared.cfg
    }

    /// The link type of the input, for files opened before their first packet.
    pub fn set_link_hint(&self, link: LinkType) {
        *lock(&self.shared.link_hint) = link;
    }

    /// A shard's side (its ring is allocated here). Make every shard's before the first alert.
    pub fn shard(&self) -> ShardTrigger {
        let index = self.shared.shards.fetch_add(1, Ordering::AcqRel);
        self.shared.counters.rings.fetch_add(1, Ordering::Relaxed);
        let cfg = &self.shared.cfg;
        ShardTrigger {
            shared: self.shared.clone(),
            tx: self.tx.clone(),
            index,
            ring: PacketRing::new(cfg.ring_bytes, cfg.ring_keep_ns()),
            ring_link: None,
            seen: u64::MAX,
            live: Vec::new(),
            done: Vec::new(),
            pending: Vec::new(),
            decoder: Decoder::new(256),
            decoded: Decoded::default(),
            decode: false,
            gone: false,
        }
    }

    /// Takes an alert record (see /work/notes/alert-contract.md): state "engaged" starts a
    /// capture for a configured type, "released" ends it. Returns whether it did something.
    /// Records without an id or type, of other types, or repeated, are ignored.
    pub fn on_alert(&self, alert: &Value) -> bool {
        let state = match (alert["state"].as_str(), alert["event"].as_str()) {
            (Some(s), _) => s,
            (None, Some("start")) => "engaged",
            (None, Some("end")) => "released",
            _ => return false,
        };
        let (Some(id), Some(kind)) = (alert["id"].as_u64(), alert["type"].as_str()) else {
            return false;
        };
        let secs_ns = |key: &str| alert[key].as_u64().map(|s| s.saturating_mul(1_000_000_000));
        match state {
            "engaged" => {
                let Some(rule) = self.shared.cfg.rule(kind) else {
                    return false;
                };
                let mut reg = lock(&self.shared.engaged);
                if reg.iter().any(|e| e.id == id) {
                    return false;
                }
                if reg.len() >= MAX_ENGAGED {
                    self.shared.counters.ignored.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                let start_ns = secs_ns("start")
                    .or_else(|| secs_ns("first_seen"))
                    .unwrap_or_else(wall_ns);
                let e = Arc::new(Engaged {
                    id,
                    kind: kind.to_string(),
                    entity: matcher::entity_host(alert)
                        .or_else(|| alert["entity"]["value"].as_str().map(str::to_string))
                        .unwrap_or_default(),
                    matcher: Matcher::from_alert(alert, &rule.target),
                    start_ns,
                    since_ns: start_ns.saturating_sub(self.shared.cfg.pre_ns),
                    until_ns: AtomicU64::new(u64::MAX),
                    released: AtomicBool::new(false),
                    closed: AtomicBool::new(false),
                    dropped: AtomicU64::new(0),
                });
                // The writer opens the file before any shard can send packets for it.
                if self.tx.send(Msg::Open(e.clone())).is_err() {
                    return false;
                }
                reg.push(e);
                drop(reg);
                self.shared.bump();
                true
            }
            "released" => {
                let reg = lock(&self.shared.engaged);
                let Some(e) = reg.iter().find(|e| e.id == id).cloned() else {
                    return false;
                };
                drop(reg);
                if e.released.swap(true, Ordering::AcqRel) {
                    return false;
                }
                // Up to the end of the alert's last second.
                if let Some(end) = secs_ns("end").or_else(|| secs_ns("last_seen")) {
                    e.until_ns
                        .store(end.saturating_add(999_999_999), Ordering::Release);
                }
                self.shared.bump();
                let _ = self.tx.send(Msg::Released(id));
                true
            }
            _ => false,
        }
    }

    /// The files of an alert.
    pub fn files(&self, alert_id: u64) -> Vec<CaptureFile> {
        lock(&self.shared.files)
            .get(&alert_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Every file, oldest alert first.
    pub fn list(&self) -> Vec<CaptureFile> {
        lock(&self.shared.files)
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Captures engaged now.
    pub fn engaged(&self) -> usize {
        lock(&self.shared.engaged).len()
    }

    /// Prometheus text for `/metrics`.
    pub fn metrics(&self, out: &mut String) {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut metric = |name: &str, kind: &str, help: &str, values: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in values {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        metric(
            "sonde_trigger_packets_written_total",
            "counter",
            "Packets written to trigger capture files.",
            &[("", get(&c.written))],
        );
        metric(
            "sonde_trigger_packets_dropped_total",
            "counter",
            "Matching packets a shard could not hand to the trigger capture writer (queue full).",
            &[("", get(&c.dropped))],
        );
        metric(
            "sonde_trigger_files_total",
            "counter",
            "Trigger capture files opened.",
            &[("", get(&c.files))],
        );
        metric(
            "sonde_trigger_files_capped_total",
            "counter",
            "Trigger capture files cut by a cap.",
            &[
                ("{cap=\"bytes\"}", get(&c.capped_bytes)),
                ("{cap=\"seconds\"}", get(&c.capped_seconds)),
            ],
        );
        metric(
            "sonde_trigger_alerts_ignored_total",
            "counter",
            "Alerts of a captured type not captured: too many captures engaged at once.",
            &[("", get(&c.ignored))],
        );
        metric(
            "sonde_trigger_write_errors_total",
            "counter",
            "Trigger capture files ended by a write error.",
            &[("", get(&c.errors))],
        );
        metric(
            "sonde_trigger_captures_engaged",
            "gauge",
            "Trigger captures engaged now.",
            &[("", self.engaged() as u64)],
        );
    }

    /// Packet rings allocated so far (one per shard).
    pub fn rings(&self) -> u64 {
        self.shared.counters.rings.load(Ordering::Relaxed)
    }

    /// Closes every file (flushed) and ends the writer; call after the shards have ended.
    pub fn finish(&self) {
        let h = lock(&self.writer).take();
        if let Some(h) = h {
            let _ = self.tx.send(Msg::Stop);
            let _ = h.join();
        }
    }
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A capture a shard sends live packets for.
struct LiveCapture {
    e: Arc<Engaged>,
    bpf: BpfCache,
    chunk: Option<Chunk>,
}

/// One shard's side: its ring, and the captures it is sending packets for.
pub struct ShardTrigger {
    shared: Arc<Shared>,
    tx: Sender<Msg>,
    index: usize,
    ring: PacketRing,
    ring_link: Option<LinkType>,
    /// The registry generation last acted on.
    seen: u64,
    live: Vec<LiveCapture>,
    /// Captures this shard is done with (still in the registry).
    done: Vec<u64>,
    /// Done messages the writer's channel had no room for yet (sent in order, first).
    pending: Vec<Msg>,
    decoder: Decoder,
    decoded: Decoded,
    /// Some live capture matches by host (packets are decoded).
    decode: bool,
    gone: bool,
}

impl ShardTrigger {
    /// Every packet the shard takes: into the ring, and to the engaged captures it matches.
    #[inline]
    pub fn packet(&mut self, link: LinkType, ts_ns: u64, wire_len: u32, data: &[u8]) {
        if self.ring_link != Some(link) {
            self.new_link(link);
        }
        self.ring.push(ts_ns, wire_len, data);
        if !self.live.is_empty() {
            self.match_live(link, ts_ns, wire_len, data);
        }
    }

    #[cold]
    fn new_link(&mut self, link: LinkType) {
        // One link type per ring and chunk (pcapng files rarely mix them): a change starts
        // them afresh.
        self.send_chunks();
        self.ring.clear();
        self.ring_link = Some(link);
    }

    /// Once per batch: one atomic load; when the registry changed, takes the new captures
    /// (dumping the ring for them) and lets go of released ones; sends what was matched.
    #[inline]
    pub fn batch(&mut self) {
        if self.shared.generation.load(Ordering::Acquire) != self.seen || !self.pending.is_empty() {
            self.refresh();
        }
        if !self.live.is_empty() {
            self.send_chunks();
        }
    }

    /// What the ring holds (for tests and stats).
    pub fn ring(&self) -> &PacketRing {
        &self.ring
    }

    fn match_live(&mut self, link: LinkType, ts_ns: u64, wire_len: u32, data: &[u8]) {
        let decoded = self.decode
            && matches!(
                self.decoder
                    .decode(link, ts_ns, data, wire_len, &mut self.decoded),
                Ok(Outcome::Ip)
            );
        let mut full = false;
        for c in &mut self.live {
            let hit = match &c.e.matcher {
                Matcher::Hosts(_) => decoded && c.e.matcher.matches_decoded(&self.decoded),
                Matcher::Bpf(expr) => c.bpf.matches(expr, link, data, wire_len),
            };
            if hit {
                full |= add(&mut c.chunk, &c.e, link, ts_ns, wire_len, data);
            }
        }
        if full {
            self.send_chunks();
        }
    }

    #[cold]
    fn refresh(&mut self) {
        self.seen = self.shared.generation.load(Ordering::Acquire);
        self.flush_pending();
        let reg: Vec<Arc<Engaged>> = lock(&self.shared.engaged).clone();
        self.done.retain(|id| reg.iter().any(|e| e.id == *id));
        for e in reg {
            if self.done.contains(&e.id) {
                continue;
            }
            let known = self.live.iter().any(|c| c.e.id == e.id);
            if !known && !e.closed.load(Ordering::Acquire) {
                let mut c = LiveCapture {
                    e: e.clone(),
                    bpf: BpfCache::default(),
                    chunk: None,
                };
                self.dump_ring(&mut c);
                self.live.push(c);
            } else if !known {
                self.live.push(LiveCapture {
                    e: e.clone(),
                    bpf: BpfCache::default(),
                    chunk: None,
                });
            }
            if e.over() {
                if let Some(i) = self.live.iter().position(|c| c.e.id == e.id) {
                    let mut c = self.live.swap_remove(i);
                    self.send_chunk(&mut c);
                }
                self.done.push(e.id);
                self.pending.push(Msg::Done {
                    shard: self.index,
                    id: e.id,
                });
            }
        }
        self.decode = self.live.iter().any(|c| c.e.matcher.needs_decode());
        self.flush_pending();
    }

    /// The ring's packets of a new capture's window.
    fn dump_ring(&mut self, c: &mut LiveCapture) {
        let Some(link) = self.ring_link else { return };
        let until = c.e.until_ns.load(Ordering::Acquire);
        let mut decoder = Decoder::new(256);
        let mut d = Decoded::default();
        let mut batch = Vec::new();
        for p in self.ring.iter() {
            if p.ts_ns < c.e.since_ns || p.ts_ns > until {
                continue;
            }
            let hit = match &c.e.matcher {
                Matcher::Hosts(_) => {
                    matches!(
                        decoder.decode(link, p.ts_ns, p.data, p.orig_len, &mut d),
                        Ok(Outcome::Ip)
                    ) && c.e.matcher.matches_decoded(&d)
                }
                Matcher::Bpf(expr) => c.bpf.matches(expr, link, p.data, p.orig_len),
            };
            if hit && add(&mut c.chunk, &c.e, link, p.ts_ns, p.orig_len, p.data) {
                batch.push(c.chunk.take());
            }
        }
        for chunk in batch.into_iter().flatten() {
            self.try_send(chunk);
        }
        self.send_chunk(c);
    }

    fn send_chunks(&mut self) {
        let mut chunks = Vec::new();
        for c in &mut self.live {
            if let Some(ch) = c.chunk.take() {
                chunks.push(ch);
            }
        }
        for ch in chunks {
            self.try_send(ch);
        }
    }

    fn send_chunk(&mut self, c: &mut LiveCapture) {
        if let Some(ch) = c.chunk.take() {
            self.try_send(ch);
        }
    }

    fn try_send(&mut self, ch: Chunk) {
        let n = ch.pkts.len() as u64;
        if n == 0 {
            return;
        }
        if let Err(
            TrySendError::Full(Msg::Packets(ch)) | TrySendError::Disconnected(Msg::Packets(ch)),
        ) = self.tx.try_send(Msg::Packets(ch))
        {
            ch.e.dropped.fetch_add(n, Ordering::Relaxed);
            self.shared.counters.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn flush_pending(&mut self) {
        while !self.pending.is_empty() {
            let m = self.pending.remove(0);
            match self.tx.try_send(m) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => {
                    self.pending.insert(0, m);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    /// At the end of the shard's input (after the last alerts it could see): takes the
    /// registry's last changes, sends what it holds and tells the writer it is gone.
    pub fn finish(&mut self) {
        if self.gone {
            return;
        }
        self.refresh();
        self.send_chunks();
        self.live.clear();
        let wait = Duration::from_secs(5);
        for m in std::mem::take(&mut self.pending) {
            let _ = self.tx.send_timeout(m, wait);
        }
        let _ = self.tx.send_timeout(Msg::Gone(self.index), wait);
        self.gone = true;
    }
}

impl Drop for ShardTrigger {
    fn drop(&mut self) {
        if !self.gone {
            self.gone = true;
            let _ = self
                .tx
                .send_timeout(Msg::Gone(self.index), Duration::from_secs(1));
        }
    }
}

/// Appends a packet to a capture's chunk; true when the chunk should go now.
#[inline]
fn add(
    chunk: &mut Option<Chunk>,
    e: &Arc<Engaged>,
    link: LinkType,
    ts_ns: u64,
    wire_len: u32,
    data: &[u8],
) -> bool {
    let ch = chunk.get_or_insert_with(|| Chunk {
        e: e.clone(),
        link,
        pkts: Vec::new(),
        bytes: Vec::new(),
    });
    ch.pkts.push((ts_ns, wire_len, data.len() as u32));
    ch.bytes.extend_from_slice(data);
    ch.bytes.len() >= CHUNK_BYTES
}
