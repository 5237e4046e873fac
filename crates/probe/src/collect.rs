//! Collection: flows that arrive already measured (NetFlow/IPFIX/sFlow from exporters, JSON
//! flows from another sonde or any nProbe-style producer over ZMQ) go to the same shards,
//! flow tables and sinks as captured packets.
//!
//! Receiver threads only receive and decode; records are handed to the shard that owns their
//! flow (the symmetric flow hash, as for packets) in batches. A shard with nothing to do wakes
//! up every 200 ms to run its timeouts by the wall clock.

use crate::shard::wall_ns;
use crossbeam_channel::{Receiver, Sender};
use sonde_flow::FlowKey;
use sonde_flowproto::decode::{Collector, Config, ExporterStats, IfCounters, IpfixStream};
use sonde_flowproto::{CollectedFlow, SampledPacket};
use sonde_wire::{Decoded, Decoder, LinkType, Outcome};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The exporters a collector takes records from (`?allow=NET[,NET…]`): every source when
/// empty. Datagrams and connections from other addresses are dropped and counted
/// (`collected.refused_sources`), before anything is decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList(Vec<(std::net::IpAddr, u8)>);

impl AllowList {
    /// `10.0.0.0/8,192.0.2.7,2001:db8::/32` (a bare address is that host alone).
    pub fn parse(list: &str) -> Result<AllowList, String> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = if item.contains('/') {
                sonde_alerts::parse_network(item)?
            } else {
                let ip: std::net::IpAddr = item.parse().map_err(|_| {
                    format!("allow={item:?}: an address or a network like 10.0.0.0/8 expected")
                })?;
                (ip, if ip.is_ipv4() { 32 } else { 128 })
            };
            nets.push(net);
        }
        if nets.is_empty() {
            return Err("allow= names no address: give networks, e.g. allow=10.0.0.0/8".into());
        }
        Ok(AllowList(nets))
    }

    /// Whether the list lets every source in (no `allow=` given).
    pub fn is_open(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether records from `ip` are taken (an IPv4-mapped IPv6 source counts as IPv4).
    pub fn permits(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|&(net, len)| sonde_alerts::in_network(ip, net, len))
    }
}

/// Where collected flows come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollectSource {
    /// NetFlow v5/v9, IPFIX or sFlow datagrams (the protocol is told by each datagram), from
    /// the exporters the list allows.
    Udp(std::net::SocketAddr, AllowList),
    /// IPFIX over TCP, from the exporters the list allows.
    Tcp(std::net::SocketAddr, AllowList),
    /// JSON flows over ZMQ: a PULL socket bound here; producers connect with --zmq-export.
    /// With a secret key file (`?curve=NAME_secret`), only CURVE producers that know the
    /// collector's public key get through ([`crate::zmq_curve`]); with an allow-list, only
    /// producers connecting from those addresses (checked by a ZAP handler, [`zap_handler`]).
    /// With `format=ntopng`, ntopng's framing on a SUB socket instead ([`ZmqFormat`]).
    Zmq(String, Option<std::path::PathBuf>, AllowList, ZmqFormat),
    /// Flows on a Kafka topic (JSON or protobuf), read in a consumer group.
    Kafka(crate::kafka_source::KafkaSource),
}

/// What a ZMQ collector reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZmqFormat {
    /// sonde's `--zmq-export`: one JSON array per message, on a PULL socket that binds.
    #[default]
    Sonde,
    /// ntopng's framing (nProbe's `--zmq`, sonde's `--zmq-export …?format=ntopng`; see
    /// `docs/zmq-interop.md`): a header part and a payload part per message, on a SUB socket
    /// that connects to the producer's PUB as ntopng's `-i tcp://HOST:PORT` does, or with
    /// `mode=collector` binds for producers in probe mode (ntopng's `-i tcp://*:PORTc`).
    Ntopng { bind: bool },
}

impl CollectSource {
    /// Parses `udp://ADDR:PORT`, `tcp://ADDR:PORT` (IPFIX over TCP), `zmq+tcp://ADDR:PORT`,
    /// or a bare `ADDR:PORT` (UDP); each takes `?allow=NET[,NET…]`, ZMQ also `?curve=FILE`.
    pub fn parse(s: &str) -> Result<CollectSource, String> {
        if s.starts_with("kafka://") {
            return crate::kafka_source::KafkaSource::parse(s).map(CollectSource::Kafka);
        }
        let (scheme, rest) = s.split_once("://").unwrap_or(("udp", s));
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let zmq = scheme == "zmq+tcp" || scheme == "zmq";
        let mut allow = AllowList::default();
        let mut curve = None;
        let mut format = ZmqFormat::Sonde;
        let mut mode = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("format", f)) if zmq => {
                    format = match f {
                        "ntopng" => ZmqFormat::Ntopng { bind: false },
                        "json" | "sonde" => ZmqFormat::Sonde,
                        _ => {
                            return Err(format!(
                                "--collect '{s}': format={f}: use format=ntopng (ntopng's \
                                 framing, as nProbe sends it) or format=json (sonde's, the default)"
                            ))
                        }
                    }
                }
                Some(("mode", m)) if zmq => {
                    mode = Some(match m {
                        "collector" | "bind" => true,
                        "connect" => false,
                        _ => {
                            return Err(format!(
                                "--collect '{s}': mode={m}: use mode=collector (bind, for \
                                 producers in probe mode) or mode=connect (the default)"
                            ))
                        }
                    })
                }
                Some(("allow", list)) => {
                    allow = AllowList::parse(list).map_err(|e| format!("--collect '{s}': {e}"))?;
                }
                Some(("curve", file)) if zmq && !file.is_empty() => {
                    curve = Some(std::path::PathBuf::from(file));
                }
                _ => {
                    return Err(format!(
                        "--collect '{s}': unknown option '{pair}' (udp:// and tcp:// take \
                         ?allow=NET[,NET…], e.g. ?allow=10.0.0.0/8; zmq+tcp:// takes it, \
                         ?curve=SECRET_KEY_FILE, made by 'sonde zmq-keygen NAME', and \
                         format=ntopng with mode=collector|connect)"
                    ))
                }
            }
        }
        // ntopng's own spelling of collector mode: a trailing 'c' on the port.
        let rest = match (format, rest.strip_suffix('c')) {
            (ZmqFormat::Ntopng { .. }, Some(r)) => {
                mode.get_or_insert(true);
                r
            }
            _ => rest,
        };
        if let Some(bind) = mode {
            match format {
                ZmqFormat::Ntopng { .. } => format = ZmqFormat::Ntopng { bind },
                ZmqFormat::Sonde => {
                    return Err(format!(
                        "--collect '{s}': mode= belongs to ntopng's framing: add format=ntopng \
                         (sonde's own format always binds)"
                    ))
                }
            }
        }
        let addr = || {
            rest.parse::<std::net::SocketAddr>().map_err(|_| {
                format!(
                    "--collect '{s}': '{rest}' is not ADDRESS:PORT (examples: udp://0.0.0.0:2055, \
                     tcp://127.0.0.1:4739, zmq+tcp://127.0.0.1:5556)"
                )
            })
        };
        match scheme {
            "udp" => Ok(CollectSource::Udp(addr()?, allow)),
            "tcp" | "ipfix+tcp" => Ok(CollectSource::Tcp(addr()?, allow)),
            "zmq+tcp" | "zmq" => {
                addr()?;
                Ok(CollectSource::Zmq(
                    format!("tcp://{rest}"),
                    curve,
                    allow,
                    format,
                ))
            }
            other => Err(format!(
                "--collect '{s}': unknown scheme '{other}' (use udp://, tcp://, zmq+tcp:// or kafka://)"
            )),
        }
    }
}

/// Collected records for one shard.
#[derive(Default)]
pub(crate) struct CollectedBatch {
    pub flows: Vec<CollectedFlow>,
    pub samples: Vec<SampledPacket>,
}

/// Counters of the receivers, shared with the probe (for the summary).
#[derive(Default, Debug)]
pub struct CollectorCounters {
    pub messages: AtomicU64,
    pub records: AtomicU64,
    pub errors: AtomicU64,
    /// TCP connections closed at once: the collector already had its most connections, or
    /// could not start a thread for one.
    pub connections_refused: AtomicU64,
    /// TCP connections closed after [`TCP_IDLE`] without a byte.
    pub connections_idle: AtomicU64,
    /// Datagrams and TCP connections from sources the collector's `allow=` list leaves out.
    pub refused_sources: AtomicU64,
    /// ZMQ producers whose handshake failed: another CURVE key, or none where the collector
    /// has one (refusals by the allow-list are `refused_sources`).
    pub failed_handshakes: AtomicU64,
    /// Decoded records whose counters cannot be real ([`CollectedFlow::impossible`]), kept
    /// out of the tables.
    pub suspect: AtomicU64,
    /// Records whose times were over an hour after their arrival: counted at their arrival
    /// instead ([`CollectedFlow::retime_if_ahead`]).
    pub retimed: AtomicU64,
    /// ntopng-format ZMQ messages of topics other than `flow` (counters, events, templates…),
    /// read past.
    pub skipped_topics: AtomicU64,
    /// Numeric keys of ntopng-format flows that sonde has no label for (kept by number).
    pub unknown_keys: AtomicU64,
    /// ntopng-format messages missing by their producer's message ids (lost on the way, or
    /// dropped by its high-water mark).
    pub lost_messages: AtomicU64,
    /// Each exporter's statistics as of about a second ago (the receivers publish them), for
    /// the alerts' checks: an exporter that stopped sending, sequence gaps.
    pub exporters: std::sync::Mutex<std::collections::HashMap<std::net::SocketAddr, ExporterStats>>,
}

impl CollectorCounters {
    /// Whether a decoded record may enter the tables, every collector alike: times over an
    /// hour after its arrival (`arrival_ms`) are dropped so it counts at its arrival (counted
    /// as retimed); counters no link carries make it suspect (counted, and false).
    pub fn admit(&self, f: &mut CollectedFlow, arrival_ms: u64) -> bool {
        if f.retime_if_ahead(arrival_ms) {
            self.retimed.fetch_add(1, Ordering::Relaxed);
        }
        if f.impossible().is_some() {
            self.suspect.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Publishes `collector`'s exporters when `last` is a second old (a receiver's own pace).
    fn publish(&self, collector: &Collector, last: &mut std::time::Instant) {
        if last.elapsed() < Duration::from_secs(1) {
            return;
        }
        *last = std::time::Instant::now();
        let mut m = self.exporters.lock().unwrap_or_else(|e| e.into_inner());
        for (addr, s) in collector.stats() {
            m.insert(addr, s.clone());
        }
    }
}

/// Routes collected records to the shards that own their flows, in batches.
/// How far a collect input's records have got, for a source that must know when what it
/// handed over is stored (the Kafka source commits its offsets then): records handed to
/// each shard, records each shard is done with (ingested, and its ended flows passed to the
/// sinks), records every shard has passed to the sinks, and each sink's counters.
pub(crate) struct Settlement {
    pub handed: Vec<AtomicU64>,
    pub handled: Vec<AtomicU64>,
    pub sink_sent: Arc<AtomicU64>,
    pub sinks: Arc<Vec<Arc<crate::sink_queue::SinkLive>>>,
}

impl Settlement {
    pub fn new(
        shards: usize,
        sink_sent: Arc<AtomicU64>,
        sinks: Arc<Vec<Arc<crate::sink_queue::SinkLive>>>,
    ) -> Settlement {
        Settlement {
            handed: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            handled: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            sink_sent,
            sinks,
        }
    }

    /// Records handed to each shard so far.
    pub fn handed_now(&self) -> Vec<u64> {
        self.handed
            .iter()
            .map(|h| h.load(Ordering::Acquire))
            .collect()
    }

    /// Whether every shard is done with what `handed` counts.
    pub fn shards_done(&self, handed: &[u64]) -> bool {
        self.handled
            .iter()
            .zip(handed)
            .all(|(h, n)| h.load(Ordering::Acquire) >= *n)
    }

    /// Records passed to the sinks so far.
    pub fn sent_now(&self) -> u64 {
        self.sink_sent.load(Ordering::Acquire)
    }

    /// Whether every sink is done with the first `sent` records (a failed sink never is).
    pub fn sinks_done(&self, sent: u64) -> bool {
        self.sinks
            .iter()
            .all(|s| !s.failed.load(Ordering::Acquire) && s.settled() >= sent)
    }
}

pub(crate) struct Dispatcher {
    txs: Vec<Sender<CollectedBatch>>,
    settlement: Arc<Settlement>,
    /// Batches the shards are done with, to be filled again: their memory is already paged
    /// in (fresh batches of a few hundred records page-faulted on every hand-off).
    recycled: Receiver<CollectedBatch>,
    // (The rest is per receiver thread: cloning gives a fresh one.)
    batches: Vec<CollectedBatch>,
    decoder: Decoder,
    decoded: Decoded,
}

const BATCH: usize = 256;

impl Clone for Dispatcher {
    fn clone(&self) -> Self {
        Dispatcher::new(
            self.txs.clone(),
            self.recycled.clone(),
            self.settlement.clone(),
        )
    }
}

impl Dispatcher {
    pub fn new(
        txs: Vec<Sender<CollectedBatch>>,
        recycled: Receiver<CollectedBatch>,
        settlement: Arc<Settlement>,
    ) -> Dispatcher {
        let batches = txs.iter().map(|_| CollectedBatch::default()).collect();
        Dispatcher {
            txs,
            settlement,
            recycled,
            batches,
            decoder: Decoder::default(),
            decoded: Decoded::default(),
        }
    }

    fn shard_of(&self, d: &Decoded) -> usize {
        let (key, _) = FlowKey::from_packet(d);
        ((key.hash() >> 32) % self.txs.len() as u64) as usize
    }

    /// With a single shard every record goes to it: records are decoded straight into its
    /// batch, with no flow key worked out and no copy.
    fn single_batch(&mut self) -> Option<&mut Vec<CollectedFlow>> {
        match self.batches.as_mut_slice() {
            [b] => Some(&mut b.flows),
            _ => None,
        }
    }

    /// Hands the single shard's batch over when full (after filling [`Dispatcher::single_batch`];
    /// nothing to do with several shards).
    fn single_batch_done(&mut self) {
        if self.batches.len() == 1 && self.batches[0].flows.len() >= BATCH {
            self.send(0);
        }
    }

    pub fn flow(&mut self, c: CollectedFlow) {
        let i = match self.txs.len() {
            1 => 0,
            _ => self.shard_of(&sonde_flow::decoded_from_record(&c)),
        };
        self.batches[i].flows.push(c);
        if self.batches[i].flows.len() >= BATCH {
            self.send(i);
        }
    }

    pub fn sample(&mut self, s: SampledPacket) {
        // Decoded here only to find the flow's shard; the shard decodes it again to count it.
        let link = if s.header_protocol == 1 {
            LinkType::Ethernet
        } else {
            LinkType::Raw
        };
        let i = if self.txs.len() == 1 {
            0
        } else {
            match self
                .decoder
                .decode(link, 0, &s.header, s.frame_length, &mut self.decoded)
            {
                Ok(Outcome::Ip) => self.shard_of(&self.decoded),
                _ => 0, // counted as non-IP or malformed by shard 0
            }
        };
        self.batches[i].samples.push(s);
        if self.batches[i].samples.len() >= BATCH {
            self.send(i);
        }
    }

    fn send(&mut self, i: usize) {
        let fresh = self.recycled.try_recv().unwrap_or_default();
        let b = std::mem::replace(&mut self.batches[i], fresh);
        // Counted before it is sent: a count read later covers every batch sent before.
        self.settlement.handed[i]
            .fetch_add((b.flows.len() + b.samples.len()) as u64, Ordering::Release);
        let _ = self.txs[i].send(b);
    }

    /// Hands every pending record over (after each received message, so nothing waits).
    pub fn flush(&mut self) {
        for i in 0..self.batches.len() {
            if !self.batches[i].flows.is_empty() || !self.batches[i].samples.is_empty() {
                self.send(i);
            }
        }
    }
}

/// What a receiver knows about one exporter at the end: its statistics, the interface names
/// its options records announced and the latest sFlow interface counters.
#[derive(Clone, Debug)]
pub struct ExporterInfo {
    pub addr: std::net::SocketAddr,
    pub stats: ExporterStats,
    /// ifIndex → name (IPFIX interfaceName / v9 interface options), by ifIndex.
    pub interface_names: Vec<(u32, String)>,
    /// sFlow generic interface counters, by ifIndex.
    pub interface_counters: Vec<(u32, IfCounters)>,
}

/// Per-exporter statistics of the NetFlow/IPFIX/sFlow receivers, for the summary.
pub type ExporterReport = Vec<ExporterInfo>;

fn report(collector: &Collector) -> ExporterReport {
    collector
        .stats()
        .map(|(addr, s)| {
            let mut interface_names: Vec<_> = collector
                .interface_names(addr)
                .map(|m| m.iter().map(|(i, n)| (*i, n.clone())).collect())
                .unwrap_or_default();
            interface_names.sort_unstable();
            let mut interface_counters: Vec<_> = collector
                .interface_counters(addr)
                .map(|m| m.iter().map(|(i, c)| (*i, c.clone())).collect())
                .unwrap_or_default();
            interface_counters.sort_unstable_by_key(|(i, _)| *i);
            ExporterInfo {
                addr,
                stats: s.clone(),
                interface_names,
                interface_counters,
            }
        })
        .collect()
}

pub(crate) fn now_ms() -> u64 {
    wall_ns() / 1_000_000
}

/// Decodes one datagram (or IPFIX message) and hands its records on.
fn decode_into(
    collector: &mut Collector,
    exporter: std::net::SocketAddr,
    data: &[u8],
    out: &mut Dispatcher,
    counters: &CollectorCounters,
    scratch: &mut (Vec<CollectedFlow>, Vec<SampledPacket>),
) {
    counters.messages.fetch_add(1, Ordering::Relaxed);
    let (flows, samples) = scratch;
    let into = out.single_batch().unwrap_or(flows);
    let before = into.len();
    let arrival = now_ms();
    let decoded = collector.decode(exporter, data, arrival, into, samples);
    let records = into.len() - before + samples.len();
    // Records whose counters or times cannot be real (random bytes that parse) are counted,
    // not kept.
    let mut kept = before;
    for i in before..into.len() {
        if counters.admit(&mut into[i], arrival) {
            into.swap(kept, i);
            kept += 1;
        }
    }
    into.truncate(kept);
    match decoded {
        Ok(summary) => {
            counters
                .errors
                .fetch_add(summary.errors as u64, Ordering::Relaxed);
        }
        Err(_) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    counters
        .records
        .fetch_add(records as u64, Ordering::Relaxed);
    out.single_batch_done();
    for f in flows.drain(..) {
        out.flow(f);
    }
    for s in samples.drain(..) {
        out.sample(s);
    }
}

/// Datagrams taken from the socket by one `recvmmsg` call.
const RECV_BATCH: usize = 32;
/// At most this many batches are still taken from the socket after the stop (about as many
/// datagrams as the 8 MiB socket buffer holds).
const STOP_DRAIN_BATCHES: usize = 256;
/// Longest pause between polls of a busy socket: datagrams wait in the socket's buffer (8
/// MiB asked for) at most this long.
const MAX_POLL_PAUSE: Duration = Duration::from_millis(1);

/// Receives NetFlow/IPFIX/sFlow datagrams on a bound UDP socket until `stop`. Up to
/// [`RECV_BATCH`] datagrams per system call (`recvmmsg`): at a million records a second the
/// per-datagram `recvfrom` was a third of the collector's CPU.
///
/// While datagrams keep coming, the socket is polled after short pauses instead of waking
/// the thread for each datagram: exporters send in bursts, and on a virtual machine each
/// wake-up cost several microseconds, more than decoding a datagram. The pause is the time
/// half a batch takes to arrive at the rate just seen (at most [`MAX_POLL_PAUSE`]), so the
/// socket buffer never has to hold more than a batch or so; once a poll finds nothing, the
/// thread waits on the socket again.
pub(crate) fn run_udp(
    socket: std::net::UdpSocket,
    allow: AllowList,
    mut out: Dispatcher,
    stop: Arc<AtomicBool>,
    counters: Arc<CollectorCounters>,
) -> ExporterReport {
    let mut collector = Collector::new(Config::default());
    let mut rx = BatchReceiver::new();
    let mut scratch = (Vec::new(), Vec::new());
    let mut unflushed = 0;
    // When the socket was last found empty while busy: the pause is worked out from how many
    // datagrams came since.
    let mut polling_since: Option<std::time::Instant> = None;
    let mut published = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        counters.publish(&collector, &mut published);
        match rx.recv(&socket, polling_since.is_none()) {
            Ok(n) => {
                rx.decode_all(n, &allow, &mut collector, &mut out, &counters, &mut scratch);
                // Hand records over every few dozen datagrams (or when the socket goes
                // quiet), not after each one: fewer wake-ups of the shards under load.
                unflushed += n;
                if unflushed >= RECV_BATCH {
                    out.flush();
                    unflushed = 0;
                }
                if n < RECV_BATCH {
                    // The socket is drained: pause about as long as a batch takes to arrive.
                    let now = std::time::Instant::now();
                    let pause = match polling_since {
                        Some(t) => (now - t).mul_f64(RECV_BATCH as f64 / (2 * n.max(1)) as f64),
                        None => MAX_POLL_PAUSE / 4,
                    };
                    polling_since = Some(now);
                    std::thread::sleep(pause.min(MAX_POLL_PAUSE));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                // Nothing since the last poll (or the wait timed out): wait on the socket.
                polling_since = None;
                out.flush();
                unflushed = 0;
            }
            Err(_) => break,
        }
    }
    // What arrived before the stop is still decoded (a poll pause may have left it queued);
    // bounded, so an exporter that keeps sending cannot hold the stop up.
    for _ in 0..STOP_DRAIN_BATCHES {
        let Ok(n @ 1..) = rx.recv(&socket, false) else {
            break;
        };
        rx.decode_all(n, &allow, &mut collector, &mut out, &counters, &mut scratch);
    }
    out.flush();
    report(&collector)
}

/// Buffers for `recvmmsg`: one 64 KiB buffer (the largest UDP payload) per datagram.
struct BatchReceiver {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl BatchReceiver {
    fn new() -> BatchReceiver {
        let mut bufs: Vec<Vec<u8>> = (0..RECV_BATCH).map(|_| vec![0u8; 65536]).collect();
        // SAFETY: sockaddr_storage and mmsghdr are plain C structs for which all-zero is valid.
        let addrs = vec![unsafe { std::mem::zeroed::<libc::sockaddr_storage>() }; RECV_BATCH];
        let iovs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let msgs = vec![unsafe { std::mem::zeroed::<libc::mmsghdr>() }; RECV_BATCH];
        BatchReceiver {
            bufs,
            addrs,
            iovs,
            msgs,
        }
    }

    /// Takes the datagrams queued, up to [`RECV_BATCH`]; returns how many. With `wait`, waits
    /// for the first (up to the socket's read timeout); without, fails with `WouldBlock` when
    /// none is queued.
    fn recv(&mut self, socket: &std::net::UdpSocket, wait: bool) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        for k in 0..RECV_BATCH {
            let h = &mut self.msgs[k].msg_hdr;
            h.msg_name = (&mut self.addrs[k] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[k];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.msgs[k].msg_len = 0;
        }
        // SAFETY: every mmsghdr points at a live buffer, iovec and address of `self`, sized
        // as declared; the kernel writes at most that much into each.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                if wait {
                    libc::MSG_WAITFORONE
                } else {
                    libc::MSG_DONTWAIT
                },
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Decodes the `n` datagrams of the last [`BatchReceiver::recv`] and hands their records on.
    fn decode_all(
        &self,
        n: usize,
        allow: &AllowList,
        collector: &mut Collector,
        out: &mut Dispatcher,
        counters: &CollectorCounters,
        scratch: &mut (Vec<CollectedFlow>, Vec<SampledPacket>),
    ) {
        for k in 0..n {
            let (data, from) = self.datagram(k);
            if !allow.permits(from.ip()) {
                counters.refused_sources.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            decode_into(collector, from, data, out, counters, scratch);
        }
    }

    /// Datagram `k` of the last [`BatchReceiver::recv`] and its sender.
    fn datagram(&self, k: usize) -> (&[u8], std::net::SocketAddr) {
        let len = (self.msgs[k].msg_len as usize).min(self.bufs[k].len());
        let from = sockaddr_to_std(&self.addrs[k])
            .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        (&self.bufs[k][..len], from)
    }
}

fn sockaddr_to_std(a: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    match a.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let v4 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some((ip, u16::from_be(v4.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let v6 = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Accepts IPFIX-over-TCP connections until `stop`; one thread per connection, each with its
/// own stream reassembly (IPFIX messages are framed by their length field).
pub(crate) fn run_tcp(
    listener: std::net::TcpListener,
    allow: AllowList,
    out: Dispatcher,
    stop: Arc<AtomicBool>,
    counters: Arc<CollectorCounters>,
) -> ExporterReport {
    let mut conns: Vec<std::thread::JoinHandle<ExporterReport>> = Vec::new();
    let mut ended: ExporterReport = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if !allow.permits(peer.ip()) {
                    counters.refused_sources.fetch_add(1, Ordering::Relaxed);
                    continue; // `stream` dropped: closed before a byte is read
                }
                // Connections that ended give back their slot (their reports are kept).
                let (done, live): (Vec<_>, Vec<_>) = conns.drain(..).partition(|h| h.is_finished());
                conns = live;
                ended.extend(done.into_iter().filter_map(|h| h.join().ok()).flatten());
                if conns.len() >= MAX_TCP_CONNECTIONS {
                    counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                    continue; // `stream` dropped: closed
                }
                let (mut out, stop, counters) = (out.clone(), stop.clone(), counters.clone());
                let refused = counters.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("ipfix-tcp".into())
                        .spawn(move || {
                            let mut collector = Collector::new(Config::default());
                            let mut framer = IpfixStream::new(1 << 20);
                            let mut stream = stream;
                            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                            let mut buf = vec![0u8; 65536];
                            let mut scratch = (Vec::new(), Vec::new());
                            let mut published = std::time::Instant::now();
                            let mut last_data = std::time::Instant::now();
                            'conn: while !stop.load(Ordering::Relaxed) {
                                use std::io::Read;
                                let n = match stream.read(&mut buf) {
                                    Ok(0) => break,
                                    Ok(n) => n,
                                    Err(e)
                                        if matches!(
                                            e.kind(),
                                            std::io::ErrorKind::WouldBlock
                                                | std::io::ErrorKind::TimedOut
                                        ) =>
                                    {
                                        if last_data.elapsed() >= TCP_IDLE {
                                            counters
                                                .connections_idle
                                                .fetch_add(1, Ordering::Relaxed);
                                            break;
                                        }
                                        continue;
                                    }
                                    Err(_) => break,
                                };
                                last_data = std::time::Instant::now();
                                if framer.push(&buf[..n]).is_err() {
                                    counters.errors.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                                loop {
                                    match framer.next_message() {
                                        Ok(Some(msg)) => {
                                            let msg = msg.to_vec();
                                            decode_into(
                                                &mut collector,
                                                peer,
                                                &msg,
                                                &mut out,
                                                &counters,
                                                &mut scratch,
                                            );
                                            out.flush();
                                            counters.publish(&collector, &mut published);
                                        }
                                        Ok(None) => break,
                                        Err(_) => {
                                            // Not IPFIX framing: the stream cannot be resynchronised.
                                            counters.errors.fetch_add(1, Ordering::Relaxed);
                                            break 'conn;
                                        }
                                    }
                                }
                            }
                            report(&collector)
                        });
                match spawned {
                    Ok(h) => conns.push(h),
                    // No thread for it (a resource limit): the connection is closed, not the
                    // collector.
                    Err(_) => {
                        refused.connections_refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(_) => break,
        }
    }
    ended.extend(conns.into_iter().filter_map(|h| h.join().ok()).flatten());
    ended
}

/// IPFIX-over-TCP exporters connected at once, at most: each has a thread and a 1 MiB framer.
pub const MAX_TCP_CONNECTIONS: usize = 64;
/// A TCP exporter that sends nothing for this long is disconnected (IPFIX exporters send
/// templates and data far more often).
pub const TCP_IDLE: Duration = Duration::from_secs(300);

/// Receives JSON flows on a bound ZMQ PULL socket (or in ntopng's framing on a SUB socket)
/// until `stop`.
pub(crate) fn run_zmq(
    mut input: ZmqInput,
    format: ZmqFormat,
    what: String,
    mut out: Dispatcher,
    stop: Arc<AtomicBool>,
    counters: Arc<CollectorCounters>,
) -> ExporterReport {
    // Not taken apart: the socket (first field) must close before the watch does, or an event
    // sent to a watch already gone blocks libzmq's I/O thread and the context never ends.
    if let ZmqFormat::Ntopng { .. } = format {
        let mut reader = NtopngReader::new(what);
        while !stop.load(Ordering::Relaxed) {
            input.handshakes.check(&input.socket, &counters);
            match input.socket.recv_multipart(0) {
                Ok(parts) => reader.message(&parts, &mut out, &counters),
                Err(zmq::Error::EAGAIN) => {}
                Err(_) => break,
            }
        }
        out.flush();
        return Vec::new();
    }
    while !stop.load(Ordering::Relaxed) {
        input.handshakes.check(&input.socket, &counters);
        match input.socket.recv_bytes(0) {
            Ok(msg) => {
                counters.messages.fetch_add(1, Ordering::Relaxed);
                let (flows, errors) = sonde_export::ingest::flows_from_message(&msg);
                counters
                    .records
                    .fetch_add(flows.len() as u64, Ordering::Relaxed);
                counters
                    .errors
                    .fetch_add(errors.len() as u64, Ordering::Relaxed);
                let arrival = now_ms();
                for mut f in flows {
                    if counters.admit(&mut f, arrival) {
                        out.flow(f);
                    }
                }
                out.flush();
            }
            Err(zmq::Error::EAGAIN) => {}
            Err(_) => break,
        }
    }
    out.flush();
    Vec::new()
}

/// Reads ntopng-format messages: the per-producer message ids (for lost messages) and which
/// kinds of error were already told.
struct NtopngReader {
    what: String,
    last_msg_id: std::collections::HashMap<u32, u32>,
    told: std::collections::HashSet<&'static str>,
}

impl NtopngReader {
    fn new(what: String) -> NtopngReader {
        NtopngReader {
            what,
            last_msg_id: Default::default(),
            told: Default::default(),
        }
    }

    /// Counts an error, and says the first of each kind on stderr (the rest are counted in
    /// `collected.errors`).
    fn error(&mut self, kind: &'static str, text: &str, counters: &CollectorCounters) {
        counters.errors.fetch_add(1, Ordering::Relaxed);
        if self.told.insert(kind) {
            eprintln!(
                "sonde: {}: {text} (further such messages are only counted in collected.errors)",
                self.what
            );
        }
    }

    fn message(&mut self, parts: &[Vec<u8>], out: &mut Dispatcher, counters: &CollectorCounters) {
        counters.messages.fetch_add(1, Ordering::Relaxed);
        let [header, payload] = parts else {
            let text = format!(
                "a message of {} part(s), where ntopng's framing has two (a header and a \
                 payload): is the producer sonde's own --zmq-export without format=ntopng? \
                 (then drop format=ntopng here)",
                parts.len()
            );
            return self.error("parts", &text, counters);
        };
        let h = match sonde_export::ntopng::decode_header(header) {
            Ok(h) => h,
            Err(e) => return self.error("header", &e, counters),
        };
        if h.msg_id > 0 {
            let last = self.last_msg_id.insert(h.source_id, h.msg_id).unwrap_or(0);
            if last > 0 && h.msg_id > last.wrapping_add(1) {
                counters
                    .lost_messages
                    .fetch_add((h.msg_id - last - 1) as u64, Ordering::Relaxed);
            }
        }
        if !h.is_flow() {
            counters.skipped_topics.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let json = match sonde_export::ntopng::payload_json(&h, payload, ZMQ_MAX_MESSAGE as usize) {
            Ok(j) => j,
            Err(e) => return self.error("payload", &e, counters),
        };
        let r = sonde_export::ingest::flows_from_ntopng_json(&json);
        counters
            .records
            .fetch_add(r.flows.len() as u64, Ordering::Relaxed);
        counters
            .unknown_keys
            .fetch_add(r.unknown_keys, Ordering::Relaxed);
        for e in &r.errors {
            let text = format!("a flow entry was not read: {e}");
            self.error("entry", &text, counters);
        }
        let arrival = now_ms();
        for mut f in r.flows {
            if counters.admit(&mut f, arrival) {
                out.flow(f);
            }
        }
        out.flush();
    }
}

/// Asks for a large receive buffer (8 MiB) on a collector's UDP socket, so bursts from
/// exporters wait in the kernel instead of being dropped; as root the system cap is bypassed.
pub(crate) fn enlarge_receive_buffer(socket: &std::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid socket fd and a pointer to a c_int of the given length.
        let r = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
}

/// The largest ZMQ message a collector takes: `--zmq-export` sends a batch of at most a few
/// thousand flows (a few MiB of JSON).
pub const ZMQ_MAX_MESSAGE: i64 = 64 << 20;

/// A collector's ZMQ socket and the watch on its producers' handshakes.
pub(crate) struct ZmqInput {
    /// Declared first so it is dropped first (see `run_zmq`).
    socket: zmq::Socket,
    handshakes: HandshakeWatch,
}

/// Reads libzmq's monitor events of a collector's socket: counts failed handshakes, and, on
/// a socket that connects, dials again after one. libzmq ends a connection whose handshake
/// failed (a producer with another CURVE key, or none) and does not retry it, so a right
/// producer binding the same address afterwards would never be heard.
struct HandshakeWatch {
    events: zmq::Socket,
    /// The producer's address, when the collector connects to it.
    redial: Option<String>,
    due: Option<std::time::Instant>,
}

impl HandshakeWatch {
    /// libzmq's own reconnect pause.
    const PAUSE: Duration = Duration::from_millis(100);

    fn watch(
        ctx: &zmq::Context,
        socket: &zmq::Socket,
        redial: Option<&str>,
    ) -> Result<HandshakeWatch, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "inproc://collect-zmq-monitor-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut watched = zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32;
        if redial.is_some() {
            // Successes too, on the one connection to the producer: one after a failure means
            // the producer is heard, and dialing again then would cut the connection that
            // works (a PUB producer drops what it sends while its subscriber is away). Not
            // on a bound socket: libzmq's I/O thread blocks on an event nobody reads, so each
            // producer's connection would be one more event a flood could pile up.
            watched |= zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32;
        }
        let events = socket
            .monitor(&name, watched)
            .and_then(|_| ctx.socket(zmq::PAIR))
            .and_then(|e| e.connect(&name).map(|_| e))
            .map_err(|e| format!("zmq: cannot watch the socket's handshakes: {e}"))?;
        Ok(HandshakeWatch {
            events,
            redial: redial.map(str::to_string),
            due: None,
        })
    }

    /// Called between receives, on the socket's own thread (libzmq sockets are not shared).
    fn check(&mut self, socket: &zmq::Socket, counters: &CollectorCounters) {
        // An event is two parts: the event number (u16) and a value (u32), then the address.
        while let Ok(parts) = self.events.recv_multipart(zmq::DONTWAIT) {
            let Some(event) = parts.first().and_then(|p| p.get(..2)) else {
                continue;
            };
            let event = zmq::SocketEvent::from_raw(u16::from_ne_bytes([event[0], event[1]]));
            if event == zmq::SocketEvent::HANDSHAKE_SUCCEEDED {
                self.due = None;
                continue;
            }
            // Refusals by the allow-list's ZAP handler are counted there.
            if event != zmq::SocketEvent::HANDSHAKE_FAILED_AUTH {
                counters.failed_handshakes.fetch_add(1, Ordering::Relaxed);
            }
            if self.redial.is_some() {
                self.due
                    .get_or_insert_with(|| std::time::Instant::now() + Self::PAUSE);
            }
        }
        if let (Some(endpoint), Some(due)) = (&self.redial, self.due) {
            if std::time::Instant::now() >= due {
                // The failed connection is gone already; disconnecting clears its entry.
                let _ = socket.disconnect(endpoint);
                let _ = socket.connect(endpoint);
                self.due = None;
            }
        }
    }
}

/// Binds the ZMQ PULL socket of `--collect zmq+tcp://…` (so a busy port fails at start); with
/// `format=ntopng`, a SUB socket taking every topic that connects to the producer, or binds
/// with `mode=collector`. With an allow-list, a ZAP handler thread (until `stop`) refuses
/// producers from other addresses during their handshake, before any message of theirs is
/// read, and counts them in `counters.refused_sources`.
pub(crate) fn bind_zmq(
    endpoint: &str,
    curve: Option<&std::path::Path>,
    allow: &AllowList,
    format: ZmqFormat,
    stop: &Arc<AtomicBool>,
    counters: &Arc<CollectorCounters>,
) -> Result<ZmqInput, String> {
    let ctx = zmq::Context::new();
    let kind = match format {
        ZmqFormat::Sonde => zmq::PULL,
        ZmqFormat::Ntopng { .. } => zmq::SUB,
    };
    let s = ctx
        .socket(kind)
        .map_err(|e| format!("zmq: cannot create a socket: {e}"))?;
    if let Some(secret) = curve {
        crate::zmq_curve::serve(&s, secret, &format!("--collect zmq+{endpoint}"))?;
    }
    if !allow.is_open() {
        // libzmq asks the handler bound on this well-known inproc endpoint of the socket's
        // context; without a domain it would not ask for NULL (unencrypted) producers.
        let zap = ctx
            .socket(zmq::REP)
            .and_then(|z| z.bind("inproc://zeromq.zap.01").map(|_| z))
            .and_then(|z| z.set_rcvtimeo(200).map(|_| z))
            .map_err(|e| format!("zmq: cannot start the allow-list's ZAP handler: {e}"))?;
        s.set_zap_domain("sonde-collect")
            .map_err(|e| format!("zmq: cannot set the ZAP domain: {e}"))?;
        let (allow, stop, counters) = (allow.clone(), stop.clone(), counters.clone());
        std::thread::Builder::new()
            .name("collect-zmq-zap".into())
            .spawn(move || zap_handler(zap, &allow, &stop, &counters))
            .map_err(|e| format!("zmq: cannot start the ZAP handler thread: {e}"))?;
    }
    s.set_rcvtimeo(200)
        .map_err(|e| format!("zmq: cannot set a receive timeout: {e}"))?;
    // A producer announcing a bigger message is disconnected by libzmq before it allocates it
    // (a 300 MiB message used to peak at ~888 MiB).
    s.set_maxmsgsize(ZMQ_MAX_MESSAGE)
        .map_err(|e| format!("zmq: cannot set a message size limit: {e}"))?;
    if let ZmqFormat::Ntopng { bind } = format {
        // Every topic: the ones other than `flow` are counted as skipped.
        s.set_subscribe(b"")
            .map_err(|e| format!("zmq: cannot subscribe: {e}"))?;
        if !bind {
            // libzmq retries until the producer's PUB is there (and the watch after a
            // failed handshake).
            let handshakes = HandshakeWatch::watch(&ctx, &s, Some(endpoint))?;
            s.connect(endpoint).map_err(|e| {
                format!(
                    "--collect zmq+{endpoint}?format=ntopng: cannot connect ({e}); give the \
                     producer's ADDRESS:PORT, or add mode=collector to bind for producers in \
                     probe mode"
                )
            })?;
            return Ok(ZmqInput {
                socket: s,
                handshakes,
            });
        }
    }
    let handshakes = HandshakeWatch::watch(&ctx, &s, None)?;
    s.bind(endpoint).map_err(|e| {
        format!("--collect {endpoint}: cannot listen ({e}); is the port in use or the address not local?")
    })?;
    Ok(ZmqInput {
        socket: s,
        handshakes,
    })
}

/// Answers libzmq's ZAP requests (RFC 27: version, request id, domain, address, identity,
/// mechanism, credentials…) with 200 for producers whose address `allow` permits and 400 for
/// the others, until `stop`.
fn zap_handler(
    zap: zmq::Socket,
    allow: &AllowList,
    stop: &AtomicBool,
    counters: &CollectorCounters,
) {
    while !stop.load(Ordering::Relaxed) {
        let frames = match zap.recv_multipart(0) {
            Ok(f) => f,
            Err(zmq::Error::EAGAIN) => continue,
            Err(_) => break,
        };
        let request_id = frames.get(1).cloned().unwrap_or_default();
        let address = frames.get(3).and_then(|a| std::str::from_utf8(a).ok());
        let ip = address.and_then(|a| a.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok());
        let permitted = ip.is_some_and(|ip| allow.permits(ip));
        if !permitted {
            counters.refused_sources.fetch_add(1, Ordering::Relaxed);
        }
        let (code, text): (&[u8], &[u8]) = if permitted {
            (b"200", b"OK")
        } else {
            (b"400", b"address not in the collector's allow= list")
        };
        let reply: [&[u8]; 6] = [b"1.0", &request_id, code, text, b"", b""];
        if zap.send_multipart(reply, 0).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists() {
        let a = AllowList::parse("10.0.0.0/8, 192.0.2.7,2001:db8::/32").unwrap();
        for (ip, ok) in [
            ("10.1.2.3", true),
            ("11.0.0.1", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("2001:db8::1", true),
            ("::ffff:10.9.9.9", true),
            ("2001:db9::1", false),
        ] {
            assert_eq!(a.permits(ip.parse().unwrap()), ok, "{ip}");
        }
        assert!(AllowList::default().permits("203.0.113.1".parse().unwrap()));
        for bad in ["", "10.0.0.0/33", "10.0.0", "example.com"] {
            assert!(AllowList::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            CollectSource::parse("udp://0.0.0.0:2055?allow=10.0.0.0/8").unwrap(),
            CollectSource::Udp(
                "0.0.0.0:2055".parse().unwrap(),
                AllowList::parse("10.0.0.0/8").unwrap()
            )
        );
        assert!(CollectSource::parse("tcp://0.0.0.0:4739?allows=10.0.0.0/8").is_err());
    }

    #[test]
    fn ntopng_format_sources() {
        let zmq = |s: &str| match CollectSource::parse(s) {
            Ok(CollectSource::Zmq(e, _, _, f)) => Ok((e, f)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let ep = "tcp://127.0.0.1:5556".to_string();
        assert_eq!(
            zmq("zmq+tcp://127.0.0.1:5556"),
            Ok((ep.clone(), ZmqFormat::Sonde))
        );
        assert_eq!(
            zmq("zmq+tcp://127.0.0.1:5556?format=ntopng"),
            Ok((ep.clone(), ZmqFormat::Ntopng { bind: false }))
        );
        assert_eq!(
            zmq("zmq+tcp://127.0.0.1:5556?format=ntopng&mode=collector"),
            Ok((ep.clone(), ZmqFormat::Ntopng { bind: true }))
        );
        // ntopng's spelling of collector mode.
        assert_eq!(
            zmq("zmq+tcp://127.0.0.1:5556c?format=ntopng"),
            Ok((ep, ZmqFormat::Ntopng { bind: true }))
        );
        let e = zmq("zmq+tcp://127.0.0.1:5556?mode=collector").unwrap_err();
        assert!(e.contains("add format=ntopng"), "{e}");
        let e = zmq("zmq+tcp://127.0.0.1:5556?format=tlv").unwrap_err();
        assert!(e.contains("use format=ntopng"), "{e}");
        assert!(CollectSource::parse("udp://0.0.0.0:2055?format=ntopng").is_err());
    }

    /// A message over the size limit never arrives (its producer is disconnected before the
    /// collector allocates it); the next producer's messages do.
    #[test]
    fn zmq_messages_over_the_limit_are_refused() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        // Kept whole: its watch must outlive the socket (see `run_zmq`).
        let input = bind_zmq(
            &format!("tcp://127.0.0.1:{port}"),
            None,
            &AllowList::default(),
            ZmqFormat::Sonde,
            &Arc::new(AtomicBool::new(false)),
            &Arc::new(CollectorCounters::default()),
        )
        .unwrap();
        let pull = &input.socket;
        let ctx = zmq::Context::new();
        let big = ctx.socket(zmq::PUSH).unwrap();
        big.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
        big.set_linger(0).unwrap();
        // A collector that stalls fails the test instead of hanging it (a PUSH waits for a
        // connected peer).
        big.set_sndtimeo(10_000).unwrap();
        big.send(&vec![b'x'; (ZMQ_MAX_MESSAGE + 1) as usize][..], 0)
            .unwrap();
        let mut got_big = false;
        for _ in 0..10 {
            if let Ok(m) = pull.recv_bytes(0) {
                got_big |= m.len() as i64 > ZMQ_MAX_MESSAGE;
            }
        }
        assert!(!got_big, "a message over the limit was delivered");
        drop(big);
        let small = ctx.socket(zmq::PUSH).unwrap();
        small.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
        small.set_sndtimeo(10_000).unwrap();
        small.set_linger(0).unwrap();
        small.send(&b"[]"[..], 0).unwrap();
        let mut got = None;
        for _ in 0..25 {
            if let Ok(m) = pull.recv_bytes(0) {
                got = Some(m);
                break;
            }
        }
        assert_eq!(got.as_deref(), Some(&b"[]"[..]));
    }

    /// Datagrams queued on a socket come back from one call, in order, with their senders,
    /// over IPv4 and IPv6.
    #[test]
    fn batch_receiver_takes_queued_datagrams_with_their_senders() {
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(rx_sock) = std::net::UdpSocket::bind(local) else {
                continue; // no IPv6 loopback here
            };
            rx_sock
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let tx = std::net::UdpSocket::bind(local).unwrap();
            let to = rx_sock.local_addr().unwrap();
            for i in 0..3u8 {
                tx.send_to(&vec![i; 100 + i as usize], to).unwrap();
            }
            let mut rx = BatchReceiver::new();
            let mut got = Vec::new();
            while got.len() < 3 {
                let n = rx.recv(&rx_sock, true).unwrap();
                assert!(n >= 1);
                for k in 0..n {
                    let (data, from) = rx.datagram(k);
                    assert_eq!(from, tx.local_addr().unwrap());
                    got.push(data.to_vec());
                }
            }
            for (i, d) in got.iter().enumerate() {
                assert_eq!(d, &vec![i as u8; 100 + i]);
            }
            // A poll of the drained socket does not wait (with no read timeout, waiting would
            // never return): it says there is nothing.
            rx_sock.set_read_timeout(None).unwrap();
            let e = rx.recv(&rx_sock, false).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        }
    }
}
