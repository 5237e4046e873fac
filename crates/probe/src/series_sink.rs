//! `--data-dir`: the time series. Shards hand over their per-second rows
//! ([`sonde_flow::SeriesTick`]); one thread adds up the shards' rows of each second and writes
//! them, in order, with [`sonde_history::series::SeriesWriter`], checkpointing about once a
//! second.
//!
//! A second is written once every shard has closed it (each shard says how far it has closed,
//! with or without traffic). A shard that falls far behind does not hold rows in memory for
//! ever: past [`MAX_PENDING_SECONDS`] the oldest second is written anyway, and what the late
//! shard sends for it afterwards is counted as refused.

use crossbeam_channel::{Receiver, Sender};
use sonde_flow::{IntervalCounts, SeriesTick};
use sonde_history::series::{
    Config, Family, Metrics, SeriesWriter, GAUGE_ACTIVE_FLOWS, GAUGE_ACTIVE_HOSTS,
    GAUGE_CAPTURE_DROPS, GAUGE_DROPS, INTERFACE_TOTAL,
};
use sonde_history::WireMap;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Seconds kept waiting for a slow shard before they are written without it.
pub const MAX_PENDING_SECONDS: usize = 30;

/// What a shard sends: its index, the newest second it has closed, and its rows.
pub(crate) struct SeriesMsg {
    pub shard: usize,
    pub closed_through: Option<u64>,
    pub ticks: Vec<SeriesTick>,
    /// The shard is done (end of input or stop): it holds nothing back any more.
    pub last: bool,
}

/// What the series thread did, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesReport {
    pub dir: PathBuf,
    /// Seconds written.
    pub seconds: u64,
    /// Rows of seconds that could not be written: not after the newest second already stored
    /// (a capture older than what the directory holds) or arriving after their second was.
    pub refused_seconds: u64,
    /// Series keys refused (too long, or over the per-family cap).
    pub refused_keys: u64,
    /// Columns given to a new key after their series went idle.
    pub reused_columns: u64,
    /// Columns of the hosts family at the end (each key active lately has one).
    pub host_columns: u64,
}

#[derive(Default)]
struct Second {
    interface: IntervalCounts,
    directions: [IntervalCounts; 4],
    apps: WireMap<(u16, u16), IntervalCounts>,
    /// The shards' host rows as they came (each shard lists a host once a second): the first
    /// shard's moved in, not hashed; see [`Second::host_rows`].
    hosts: Vec<(sonde_flow::host::HostKey, IntervalCounts)>,
    /// Shards whose host rows are in `hosts`.
    host_parts: u32,
    exporters: WireMap<sonde_flow::ExporterKey, IntervalCounts>,
    /// Filter-set expressions: (packets, bytes).
    filters: HashMap<u16, (u64, u64)>,
    /// Summed over shards (a host seen by two shards counts twice in `active_hosts`).
    gauges: sonde_flow::Gauges,
    /// By input (index in [`ShardInputs::names`]): its traffic (with several inputs) and its
    /// capture's kernel drops (live interfaces).
    inputs: BTreeMap<usize, (IntervalCounts, u64)>,
}

impl Second {
    fn add_hosts(&mut self, rows: Vec<(sonde_flow::host::HostKey, IntervalCounts)>) {
        if rows.is_empty() {
            return;
        }
        if self.hosts.is_empty() {
            self.hosts = rows;
        } else {
            self.hosts.extend_from_slice(&rows);
        }
        self.host_parts += 1;
    }

    /// Each host's counts of the second, once: rows of one shard as they are; rows of several
    /// summed by host (sorted in place: at a million hosts a map would take twice the memory
    /// of the rows themselves).
    fn host_rows(&mut self) -> &[(sonde_flow::host::HostKey, IntervalCounts)] {
        if self.host_parts > 1 {
            let rows = &mut self.hosts;
            rows.sort_unstable_by_key(|(k, _)| (k.addr, k.ip_version, k.vlan));
            // A row of the same host as the one kept before it is added to that one.
            rows.dedup_by(|(k, c), (kept_k, kept_c)| {
                let same = k == kept_k;
                if same {
                    kept_c.add(c);
                }
                same
            });
            self.host_parts = 1;
        }
        &self.hosts
    }
}

/// Which input each shard reads, for the per-input series.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShardInputs {
    /// The inputs' names (an interface's is its name).
    pub names: Vec<String>,
    /// Which of them are live interfaces (the others have no kernel drops).
    pub live: Vec<bool>,
    /// Input of each shard.
    pub of_shard: Vec<usize>,
}

/// An input's traffic series (written when there are several inputs): `input:eth0`.
pub fn input_key(name: &str) -> String {
    format!("input:{name}")
}

/// A live interface's kernel drops series: `gauge:capture_drops:eth0`.
pub fn input_capture_drops_key(name: &str) -> String {
    format!("{GAUGE_CAPTURE_DROPS}:{name}")
}

fn metrics(c: &IntervalCounts) -> Metrics {
    Metrics {
        bytes_in: c.bytes_in,
        bytes_out: c.bytes_out,
        packets_in: c.packets_in,
        packets_out: c.packets_out,
        flows: c.flows,
    }
}

/// A host's series key: its address, and `@VLAN` when it has one, written over `s` (one
/// buffer for every host of a second, not a string each).
pub fn host_key_into(s: &mut String, k: &sonde_flow::host::HostKey) {
    s.clear();
    sonde_export::format_addr(s, &k.addr, k.ip_version);
    if k.vlan != 0 {
        s.push('@');
        s.push_str(itoa::Buffer::new().format(k.vlan));
    }
}

/// An application's series key: its label as in `L7_PROTO_NAME` (`TLS.Google`, `Unknown`).
pub fn app_key((proto, app): (u16, u16)) -> String {
    sonde_dpi::L7 {
        proto: sonde_dpi::Proto(proto),
        app: sonde_dpi::Proto(app),
        ..sonde_dpi::L7::default()
    }
    .name()
}

/// The writer thread: its report, or why it stopped.
type SeriesThread = JoinHandle<Result<SeriesReport, String>>;

/// An exporter's series key: `ADDRESS:PORT/DOMAIN` (observation domain, source id or engine).
pub fn exporter_key((addr, domain): &sonde_flow::ExporterKey) -> String {
    format!("{addr}/{domain}")
}

/// Opens the series of `dir` (so a bad directory is reported before anything runs) and starts
/// the thread that writes them; `shards` senders are expected.
pub(crate) fn start(
    dir: &Path,
    config: Config,
    shards: usize,
    filter_keys: Vec<String>,
    inputs: ShardInputs,
) -> Result<(Sender<SeriesMsg>, SeriesThread), String> {
    let writer = SeriesWriter::open(dir, config)
        .map_err(|e| format!("--data-dir {}: {e}", dir.display()))?;
    let (tx, rx) = crossbeam_channel::bounded::<SeriesMsg>(256);
    let dir = dir.to_path_buf();
    let h = std::thread::Builder::new()
        .name("series".into())
        .spawn(move || run(writer, rx, shards, dir, filter_keys, inputs))
        .map_err(|e| format!("cannot start the time series thread: {e}"))?;
    Ok((tx, h))
}

/// The interface series of a flow direction: `dir:in`, `dir:out`, `dir:internal`,
/// `dir:transit` (out = client → server, as for `total`).
pub fn direction_key(d: sonde_flow::Direction) -> String {
    format!("dir:{}", d.name())
}

fn run(
    mut w: SeriesWriter,
    rx: Receiver<SeriesMsg>,
    shards: usize,
    dir: PathBuf,
    filter_keys: Vec<String>,
    inputs: ShardInputs,
) -> Result<SeriesReport, String> {
    let err = |e: sonde_history::store::StoreError| format!("time series: {e}");
    let mut pending: BTreeMap<u64, Second> = BTreeMap::new();
    // The series key of each host, written over for every host of a second.
    let mut key = String::new();
    let mut closed: Vec<Option<u64>> = vec![None; shards];
    let mut done = vec![false; shards];
    let mut written_through: Option<u64> = None;
    let mut report = SeriesReport {
        dir,
        ..SeriesReport::default()
    };
    let mut last_checkpoint = Instant::now();
    loop {
        let msg = rx.recv_timeout(Duration::from_secs(1));
        let finished = match msg {
            Ok(m) => {
                for t in m.ticks {
                    if written_through.is_some_and(|w| t.second <= w) {
                        report.refused_seconds += 1;
                        continue;
                    }
                    let s = pending.entry(t.second).or_default();
                    s.interface.add(&t.interface);
                    for (a, b) in s.directions.iter_mut().zip(t.directions.iter()) {
                        a.add(b);
                    }
                    for (k, c) in &t.apps {
                        s.apps.entry(*k).or_default().add(c);
                    }
                    s.add_hosts(t.hosts);
                    for (k, c) in &t.exporters {
                        s.exporters.entry(*k).or_default().add(c);
                    }
                    for &(i, p, b) in &t.filters {
                        let e = s.filters.entry(i).or_default();
                        e.0 += p;
                        e.1 += b;
                    }
                    s.gauges.active_flows += t.gauges.active_flows;
                    s.gauges.active_hosts += t.gauges.active_hosts;
                    s.gauges.drops += t.gauges.drops;
                    s.gauges.capture_drops += t.gauges.capture_drops;
                    if let Some(&input) = inputs.of_shard.get(m.shard) {
                        let (traffic, drops) = s.inputs.entry(input).or_default();
                        traffic.add(&t.interface);
                        *drops += t.gauges.capture_drops;
                    }
                }
                if m.shard < shards {
                    closed[m.shard] = m.closed_through.or(closed[m.shard]);
                    done[m.shard] |= m.last;
                }
                false
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => false,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => true,
        };
        // Every shard still running has closed up to here.
        let watermark = (0..shards)
            .filter(|&i| !done[i])
            .map(|i| closed[i])
            .min()
            .unwrap_or(Some(u64::MAX));
        while let Some((&second, _)) = pending.iter().next() {
            let ready = finished
                || watermark.is_some_and(|w| second <= w)
                || pending.len() > MAX_PENDING_SECONDS;
            if !ready {
                break;
            }
            let mut s = pending.remove(&second).expect("present");
            if w.begin(second) {
                w.set(Family::Interface, INTERFACE_TOTAL, metrics(&s.interface));
                // With --local-networks: the interface's traffic by flow direction.
                for d in sonde_flow::Direction::ALL {
                    let c = &s.directions[d as usize];
                    if !c.is_zero() {
                        w.set(Family::Interface, &direction_key(d), metrics(c));
                    }
                }
                for (k, c) in &s.apps {
                    w.set(Family::Apps, &app_key(*k), metrics(c));
                }
                for (k, c) in s.host_rows() {
                    host_key_into(&mut key, k);
                    w.set(Family::Hosts, &key, metrics(c));
                }
                for (k, c) in &s.exporters {
                    w.set(Family::Exporters, &exporter_key(k), metrics(c));
                }
                for (&i, &(packets, bytes)) in &s.filters {
                    if let Some(key) = filter_keys.get(i as usize) {
                        let m = Metrics {
                            packets_in: packets,
                            bytes_in: bytes,
                            ..Metrics::default()
                        };
                        w.set(Family::Filters, key, m);
                    }
                }
                let g = &s.gauges;
                w.set(
                    Family::Interface,
                    GAUGE_ACTIVE_FLOWS,
                    Metrics::gauge(g.active_flows),
                );
                w.set(
                    Family::Interface,
                    GAUGE_ACTIVE_HOSTS,
                    Metrics::gauge(g.active_hosts),
                );
                w.set(Family::Interface, GAUGE_DROPS, Metrics::gauge(g.drops));
                // Kernel drops: the first sign of overload, for the whole probe and for each
                // interface; with several inputs, each one's traffic too.
                if inputs.live.iter().any(|&l| l) {
                    let m = Metrics::gauge(g.capture_drops);
                    w.set(Family::Interface, GAUGE_CAPTURE_DROPS, m);
                }
                for (&i, (traffic, drops)) in &s.inputs {
                    let name = &inputs.names[i];
                    if inputs.live[i] {
                        let key = input_capture_drops_key(name);
                        w.set(Family::Interface, &key, Metrics::gauge(*drops));
                    }
                    if inputs.names.len() > 1 {
                        w.set(Family::Interface, &input_key(name), metrics(traffic));
                    }
                }
                w.commit().map_err(err)?;
                report.seconds += 1;
            } else {
                report.refused_seconds += 1;
            }
            written_through = Some(second);
        }
        if finished {
            break;
        }
        if last_checkpoint.elapsed() >= Duration::from_secs(1) {
            w.checkpoint().map_err(err)?;
            last_checkpoint = Instant::now();
        }
    }
    report.refused_keys = w.refused_keys;
    report.reused_columns = w.reused_columns();
    report.host_columns = w.columns(Family::Hosts) as u64;
    w.close().map_err(err)?;
    Ok(report)
}
