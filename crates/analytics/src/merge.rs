//! The probe-wide side of analytics: shards' per-second and per-interval reports added up,
//! DDoS thresholds checked every second, anomaly lists ranked every interval, and detections
//! with their lifecycle (a `start` record when a condition is first seen, an `end` record when
//! it stops), as JSON for `--alerts-out`, the REST API and the history.
//!
//! A second (an interval) is merged once every shard still running has reported it or a later
//! one, so a host's traffic split over shards is added up before any threshold is checked.

use crate::config::{AnalyticsConfig, Key, Limits, Network, RATE_KEYS};
use crate::filterset::FilterCounts;
use crate::shard::{
    FlowIvl, IcmpStats, IntervalPart, Report, ScanGroup, SecondReport, SynStats, WatchList,
};
use crate::sketch::{merge_parts, Counter, Merge, Part};
use crate::types::{addr_text, proto_name, HostAddr, HostSecond, Rates, Traffic, Usage};
use hashbrown::HashMap;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// The shards' evidence about one watched host, per direction (0: toward it, 1: from it):
/// peers, and (protocol, port) pairs.
type EvidenceParts = [(Vec<Part<HostAddr, Traffic>>, Vec<Part<(u8, u16), Traffic>>); 2];

/// An anomaly seen in an interval: kind, host, evidence, targets (scans).
type Seen = (
    &'static str,
    HostAddr,
    Map<String, Value>,
    Vec<([u8; 16], u8, u16)>,
);

/// Names an application from nDPI's (protocol, service) numbers.
pub type AppNamer = Arc<dyn Fn((u16, u16)) -> String + Send + Sync>;

/// Seconds (intervals) kept waiting for a slow shard before they are merged without it.
const MAX_PENDING_SECONDS: usize = 10;
const MAX_PENDING_INTERVALS: usize = 3;
/// Detections kept in memory for the API (the oldest go first).
const RECENT_DETECTIONS: usize = 1000;
/// Per-second filter-set rows kept for live charts (an hour).
const FILTER_SECONDS: usize = 3600;
/// Intervals kept in memory for the worm graph and live lists.
const RECENT_INTERVALS: usize = 240;
/// Targets listed in a scan's evidence (all are counted).
const TARGETS_LISTED: usize = 64;
/// Targets remembered per scan across intervals, for exact distinct counts.
const TARGETS_REMEMBERED: usize = 1 << 17;

/// A detection in progress or ended.
#[derive(Clone, Debug)]
struct Detection {
    id: u64,
    kind: &'static str,
    host: HostAddr,
    first_seen: u64,
    last_seen: u64,
    /// DDoS: the last second above a threshold.
    last_above: u64,
    record: Map<String, Value>,
    /// DDoS: what is added up over the attack.
    ddos: Option<Box<DdosAcc>>,
    /// Scans: the targets seen so far (exact, up to TARGETS_REMEMBERED).
    targets: BTreeSet<([u8; 16], u8, u16)>,
    targets_overflow: u64,
    /// The interval this detection was last seen in.
    interval: u64,
    /// Its "active" record for the API, rendered once per change rather than every second.
    active_json: Option<Arc<Value>>,
}

#[derive(Clone, Debug, Default)]
struct DdosAcc {
    direction: usize,
    network: Option<Network>,
    metrics: BTreeMap<&'static str, (u64, u64)>,
    peak: Rates,
    total: Rates,
    seconds: u64,
    peers: Vec<Counter<HostAddr, Traffic>>,
    ports: Vec<Counter<(u8, u16), Traffic>>,
}

/// What the API and the console read while the probe runs.
#[derive(Default)]
pub struct Live {
    /// The newest merged interval (top-N and anomaly lists), as JSON.
    pub interval: Option<Arc<Value>>,
    /// Detections in progress, as JSON records (shared: most stay the same from one second to
    /// the next).
    pub active: Vec<Arc<Value>>,
    /// Detections that started lately (newest last), as their latest JSON record.
    pub recent: VecDeque<Value>,
    /// Filter-set totals since the start, and the last seconds' counts.
    pub filter_totals: FilterCounts,
    pub filter_seconds: VecDeque<(u64, FilterCounts)>,
    /// (interval start, noisy hosts): Ourmon's worm graph.
    pub worm: VecDeque<(u64, u64)>,
    pub detections_total: BTreeMap<String, u64>,
    pub seconds_merged: u64,
    pub intervals_merged: u64,
    /// Reports that arrived after their second or interval had been merged without them.
    pub late_reports: u64,
}

/// Where merged results go besides [`Live`]: detection records (JSON lines for
/// `--alerts-out`, the history) and interval summaries (the history).
pub trait Output: Send {
    fn detection(&mut self, record: &Value);
    fn interval(&mut self, summary: &Value);
    fn second(&mut self, _second: u64, _filters: &FilterCounts) {}
}

/// The merger (one per probe).
pub struct Merger {
    cfg: Arc<AnalyticsConfig>,
    shards: usize,
    app_name: AppNamer,
    watch: Arc<WatchList>,
    closed_second: Vec<Option<u64>>,
    closed_interval: Vec<Option<u64>>,
    done: Vec<bool>,
    seconds: BTreeMap<u64, Vec<SecondReport>>,
    intervals: BTreeMap<u64, Vec<IntervalPart>>,
    merged_second: Option<u64>,
    merged_interval: Option<u64>,
    /// DDoS detections by (host, direction).
    attacks: HashMap<(HostAddr, usize), Detection>,
    /// Attacks that started in the second being merged (their first record is due).
    started: Vec<(HostAddr, usize)>,
    /// Interval detections by (kind, host).
    anomalies: HashMap<(&'static str, HostAddr), Detection>,
    next_id: u64,
    watched: Vec<HostAddr>,
    /// A detection began, changed or ended since [`Live::active`] was last made.
    active_changed: bool,
    pub live: Arc<std::sync::Mutex<Live>>,
    outputs: Vec<Box<dyn Output>>,
}

impl Merger {
    pub fn new(
        cfg: Arc<AnalyticsConfig>,
        app_name: AppNamer,
        watch: Arc<WatchList>,
        outputs: Vec<Box<dyn Output>>,
    ) -> Merger {
        let shards = cfg.shards.max(1);
        let mut live = Live::default();
        if let Some(s) = &cfg.filter_sets {
            live.filter_totals = FilterCounts::new(s.len());
        }
        Merger {
            shards,
            app_name,
            watch,
            closed_second: vec![None; shards],
            closed_interval: vec![None; shards],
            done: vec![false; shards],
            seconds: BTreeMap::new(),
            intervals: BTreeMap::new(),
            merged_second: None,
            merged_interval: None,
            attacks: HashMap::new(),
            started: Vec::new(),
            anomalies: HashMap::new(),
            next_id: 1,
            watched: Vec::new(),
            active_changed: false,
            live: Arc::new(std::sync::Mutex::new(live)),
            outputs,
            cfg,
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a shard's reports (in the order the shard made them).
    pub fn add(&mut self, shard: usize, reports: Vec<Report>) {
        let shard = shard.min(self.shards - 1);
        for r in reports {
            match r {
                Report::Second(s) => {
                    self.closed_second[shard] = Some(s.second);
                    if self.merged_second.is_some_and(|m| s.second <= m) {
                        self.live().late_reports += 1;
                        continue;
                    }
                    self.seconds.entry(s.second).or_default().push(s);
                }
                Report::Interval(p) => {
                    self.closed_interval[shard] = Some(p.start);
                    if self.merged_interval.is_some_and(|m| p.start <= m) {
                        self.live().late_reports += 1;
                        continue;
                    }
                    self.intervals.entry(p.start).or_default().push(*p);
                }
            }
        }
        self.merge_ready(false);
    }

    /// A shard will send nothing more (its input is over). Once every shard is, the
    /// detections in progress end: no later second can extend them.
    pub fn shard_done(&mut self, shard: usize) {
        if let Some(d) = self.done.get_mut(shard) {
            *d = true;
        }
        if self.done.iter().all(|&d| d) {
            self.finish();
        } else {
            self.merge_ready(false);
        }
    }

    /// Merges everything pending and ends every detection in progress (end of the run).
    pub fn finish(&mut self) {
        self.merge_ready(true);
        // An attack still in its hold time ends where its rates were last above a threshold.
        // Everything ends in the order it started.
        let mut open: Vec<Detection> = self.attacks.drain().map(|(_, d)| d).collect();
        open.extend(self.anomalies.drain().map(|(_, d)| d));
        open.sort_unstable_by_key(|d| d.id);
        for d in open {
            let last = d.last_seen;
            self.end(d, last);
        }
        self.set_watch();
    }

    fn watermark(marks: &[Option<u64>], done: &[bool]) -> Option<u64> {
        let mut w: Option<u64> = Some(u64::MAX);
        for (m, &d) in marks.iter().zip(done) {
            if d {
                continue;
            }
            w = match (w, m) {
                (Some(a), Some(b)) => Some(a.min(*b)),
                _ => None,
            };
        }
        w
    }

    fn merge_ready(&mut self, all: bool) {
        let ws = Self::watermark(&self.closed_second, &self.done);
        while let Some((&second, _)) = self.seconds.iter().next() {
            let ready =
                all || ws.is_some_and(|w| second <= w) || self.seconds.len() > MAX_PENDING_SECONDS;
            if !ready {
                break;
            }
            let parts = self.seconds.remove(&second).unwrap_or_default();
            self.merged_second = Some(second);
            self.merge_second(second, parts);
        }
        let wi = Self::watermark(&self.closed_interval, &self.done);
        while let Some((&start, _)) = self.intervals.iter().next() {
            let ready = all
                || wi.is_some_and(|w| start <= w)
                || self.intervals.len() > MAX_PENDING_INTERVALS;
            if !ready {
                break;
            }
            let parts = self.intervals.remove(&start).unwrap_or_default();
            self.merged_interval = Some(start);
            self.merge_interval(parts);
        }
    }

    fn merge_second(&mut self, second: u64, parts: Vec<SecondReport>) {
        let mut hosts: HashMap<HostAddr, HostSecond> = HashMap::new();
        let mut filters = FilterCounts::default();
        let mut evidence: HashMap<HostAddr, EvidenceParts> = HashMap::new();
        for p in parts {
            for (h, s) in p.hosts {
                let e = hosts.entry(h).or_default();
                e[0].merge(&s[0]);
                e[1].merge(&s[1]);
            }
            filters.merge(&p.filters);
            for (h, ev) in p.evidence {
                let e = evidence.entry(h).or_default();
                let part = |counters| Part { counters, floor: 0 };
                e[0].0.push(part(ev.sources));
                e[0].1.push(Part {
                    counters: ev.in_ports,
                    floor: 0,
                });
                e[1].0.push(part(ev.destinations));
                e[1].1.push(Part {
                    counters: ev.out_ports,
                    floor: 0,
                });
            }
        }
        for o in self.outputs.iter_mut() {
            o.second(second, &filters);
        }
        {
            let mut live = self.live();
            live.seconds_merged += 1;
            if !filters.packets.is_empty() {
                live.filter_totals.merge(&filters);
                live.filter_seconds.push_back((second, filters));
                while live.filter_seconds.len() > FILTER_SECONDS {
                    live.filter_seconds.pop_front();
                }
            }
        }
        // Thresholds, host by host in address order: detections are numbered in the order
        // they start, and the same input must give the same numbers.
        let mut by_addr: Vec<(&HostAddr, &HostSecond)> = hosts.iter().collect();
        by_addr.sort_unstable_by_key(|(h, _)| **h);
        for (h, sec) in by_addr {
            let (limits, network) = self.cfg.thresholds.for_host(h);
            let limits = *limits;
            for (dir, rates) in sec.iter().enumerate() {
                let crossed = crossed(&limits, rates);
                if crossed.is_empty() {
                    continue;
                }
                self.attack_second(*h, dir, network, &limits, *rates, crossed, second);
            }
        }
        // Evidence for the attacks it was gathered for, before a new attack's first record.
        for ((h, dir), d) in self.attacks.iter_mut() {
            let (Some(ev), Some(acc)) = (evidence.get(h), d.ddos.as_mut()) else {
                continue;
            };
            let (peers, ports) = &ev[*dir];
            let mut all_peers = vec![Part {
                counters: std::mem::take(&mut acc.peers),
                floor: 0,
            }];
            all_peers.extend(peers.iter().cloned());
            acc.peers = merge_parts(&all_peers);
            acc.peers.truncate(32);
            let mut all_ports = vec![Part {
                counters: std::mem::take(&mut acc.ports),
                floor: 0,
            }];
            all_ports.extend(ports.iter().cloned());
            acc.ports = merge_parts(&all_ports);
            acc.ports.truncate(32);
        }
        for key in std::mem::take(&mut self.started) {
            if self.attacks.contains_key(&key) {
                let rec = self.render(&self.attacks[&key], "start");
                self.emit(rec, true);
            }
        }
        // Attacks whose rates stayed below every threshold for their hold time end.
        let mut ended = Vec::new();
        for (k, d) in &self.attacks {
            let hold = self
                .cfg
                .thresholds
                .for_host(&d.host)
                .0
                .get(Key::DdosHold)
                .unwrap_or(5);
            if second >= d.last_above + hold {
                ended.push((d.id, *k));
            }
        }
        ended.sort_unstable_by_key(|(id, _)| *id);
        for (_, k) in ended {
            if let Some(d) = self.attacks.remove(&k) {
                let last = d.last_seen;
                self.end(d, last);
            }
        }
        self.set_watch();
    }

    #[allow(clippy::too_many_arguments)]
    fn attack_second(
        &mut self,
        host: HostAddr,
        dir: usize,
        network: Option<Network>,
        limits: &Limits,
        rates: Rates,
        crossed: Vec<(&'static str, u64, u64)>,
        second: u64,
    ) {
        let key = (host, dir);
        // A flood made mostly of SYNs is a SYN flood, whichever threshold it crossed first.
        let kind = if crossed.iter().any(|c| c.0 == "syn_pps") || rates.syn * 2 > rates.packets {
            "syn_flood"
        } else {
            "ddos"
        };
        let _ = limits;
        let is_new = !self.attacks.contains_key(&key);
        let id = self.next_id;
        let d = self.attacks.entry(key).or_insert_with(|| Detection {
            id,
            kind,
            host,
            first_seen: second,
            last_seen: second,
            last_above: second,
            record: Map::new(),
            ddos: Some(Box::new(DdosAcc {
                direction: dir,
                network,
                ..DdosAcc::default()
            })),
            targets: BTreeSet::new(),
            targets_overflow: 0,
            interval: 0,
            active_json: None,
        });
        if is_new {
            self.next_id += 1;
        }
        d.last_seen = second + 1;
        d.last_above = second;
        if let Some(acc) = d.ddos.as_mut() {
            acc.seconds += 1;
            acc.total.merge(&rates);
            acc.peak = max_rates(&acc.peak, &rates);
            for (m, value, limit) in crossed {
                let e = acc.metrics.entry(m).or_insert((0, limit));
                e.0 = e.0.max(value);
                e.1 = limit;
            }
        }
        if is_new {
            // Its first record goes out once this second's evidence is in.
            self.started.push(key);
        }
    }

    /// Updates the watch list and [`Live::active`]. Attacks in progress change every second
    /// and are rendered again; the interval anomalies only when an interval is merged.
    fn set_watch(&mut self) {
        let mut hosts: Vec<HostAddr> = self.attacks.keys().map(|(h, _)| *h).collect();
        hosts.sort_unstable();
        hosts.dedup();
        if hosts != self.watched {
            self.watch.set(hosts.clone());
            self.watched = hosts;
        }
        if !self.active_changed && self.attacks.is_empty() {
            return;
        }
        self.active_changed = false;
        for d in self.attacks.values_mut() {
            d.active_json = None;
        }
        let mut active: Vec<&mut Detection> = self
            .attacks
            .values_mut()
            .chain(self.anomalies.values_mut())
            .collect();
        active.sort_unstable_by_key(|d| d.id);
        let app_name = &self.app_name;
        let active: Vec<Arc<Value>> = active
            .into_iter()
            .map(|d| {
                if d.active_json.is_none() {
                    let rendered = render_detection(d, "active", app_name);
                    d.active_json = Some(Arc::new(Value::Object(rendered)));
                }
                d.active_json.clone().expect("rendered above")
            })
            .collect();
        self.live().active = active;
    }

    fn render(&self, d: &Detection, event: &str) -> Value {
        Value::Object(render_detection(d, event, &self.app_name))
    }

    fn emit(&mut self, rec: Value, started: bool) {
        for o in self.outputs.iter_mut() {
            o.detection(&rec);
        }
        let mut live = self.live();
        if started {
            let kind = rec["type"].as_str().unwrap_or("").to_string();
            *live.detections_total.entry(kind).or_insert(0) += 1;
        }
        let id = rec["id"].as_u64();
        if let Some(old) = live.recent.iter_mut().find(|r| r["id"].as_u64() == id) {
            *old = rec;
        } else {
            live.recent.push_back(rec);
            while live.recent.len() > RECENT_DETECTIONS {
                live.recent.pop_front();
            }
        }
    }

    fn end(&mut self, mut d: Detection, last: u64) {
        self.active_changed = true;
        d.last_seen = d.last_seen.max(last);
        let rec = self.render(&d, "end");
        self.emit(rec, false);
    }

    fn merge_interval(&mut self, parts: Vec<IntervalPart>) {
        let Some(first) = parts.first() else { return };
        let start = first.start;
        let end = parts.iter().map(|p| p.end).max().unwrap_or(start);
        let n = self.cfg.top_n;
        let mut total = Traffic::default();
        let mut hosts = 0;
        let mut scan_untracked = 0;
        for p in &parts {
            total.merge(&p.total);
            hosts += p.hosts;
            scan_untracked += p.scan_untracked;
        }
        let talkers = merge_hosts(&parts, |p| (&p.talkers, p.talkers_cut, &p.overflow_talkers));
        let destinations = merge_hosts(&parts, |p| {
            (
                &p.destinations,
                p.destinations_cut,
                &p.overflow_destinations,
            )
        });
        let flows = merge_flows(&parts, n);
        let flows_total: u64 = apps_flows(&parts);
        let ports = merge_usage(parts.iter().flat_map(|p| p.ports.iter().copied()));
        let apps = merge_usage(parts.iter().flat_map(|p| p.apps.iter().copied()));
        let syn = merge_parts(&parts.iter().map(|p| p.syn.clone()).collect::<Vec<_>>());
        let icmp_s = merge_parts(
            &parts
                .iter()
                .map(|p| p.icmp_senders.clone())
                .collect::<Vec<_>>(),
        );
        let icmp_r = merge_parts(
            &parts
                .iter()
                .map(|p| p.icmp_receivers.clone())
                .collect::<Vec<_>>(),
        );
        let merge_floor = |k: Key| {
            self.cfg
                .thresholds
                .lowest(k)
                .map_or(u64::MAX, |v| (v / 2).max(1))
        };
        let scans = merge_scans(
            parts.iter().flat_map(|p| p.scans.iter()),
            merge_floor(Key::ScanIpTargets),
            merge_floor(Key::ScanPortTargets),
        );

        // Detections of the interval.
        let th = &self.cfg.thresholds;
        let mut seen: Vec<Seen> = Vec::new();
        let mut noisy = 0u64;
        let mut syn_json = Vec::new();
        for c in syn.iter() {
            let l = th.for_host(&c.key).0;
            let is_noisy = is_noisy(l, &c.value);
            noisy += is_noisy as u64;
            if syn_json.len() < n {
                syn_json.push(syn_entry(c, is_noisy));
            }
            if is_noisy {
                let mut ev = Map::new();
                ev.insert("syn".into(), syn_entry(c, true));
                seen.push(("noisy_host", c.key, ev, Vec::new()));
            }
        }
        for (role, list) in [("sender", &icmp_s), ("receiver", &icmp_r)] {
            for c in list.iter() {
                let Some(limit) = th.for_host(&c.key).0.get(Key::IcmpErrors) else {
                    continue;
                };
                if c.value.errors >= limit {
                    let mut ev = Map::new();
                    ev.insert("role".into(), json!(role));
                    ev.insert("icmp".into(), icmp_entry(c));
                    seen.push(("icmp_errors", c.key, ev, Vec::new()));
                }
            }
        }
        let mut scan_json = Vec::new();
        for s in &scans {
            let limit = match s.kind {
                ScanKind::Ip => th.for_host(&s.src).0.get(Key::ScanIpTargets),
                ScanKind::Port => th.for_host(&s.src).0.get(Key::ScanPortTargets),
            };
            let j = scan_entry(s);
            if limit.is_some_and(|l| s.max_group >= l) {
                seen.push((
                    s.kind.name(),
                    s.src,
                    j.as_object().cloned().unwrap_or_default(),
                    s.targets.clone(),
                ));
            }
            scan_json.push(j);
        }
        scan_json.sort_by(|a, b| b["targets"].as_u64().cmp(&a["targets"].as_u64()));
        scan_json.truncate(n);

        let summary = json!({
            "start": start,
            "end": end,
            "packets": total.packets,
            "bytes": total.bytes,
            "hosts": hosts,
            "talkers": hosts_json(&talkers, n),
            "talkers_total": talkers.len(),
            "destinations": hosts_json(&destinations, n),
            "destinations_total": destinations.len(),
            "flows": flows.iter().map(|f| flow_json(f, &self.app_name)).collect::<Vec<_>>(),
            "flows_total": flows_total,
            "ports": ports.iter().take(n).map(|((p, port), u)| json!({
                "proto": proto_name(*p), "port": port, "packets": u.packets, "bytes": u.bytes, "flows": u.flows,
            })).collect::<Vec<_>>(),
            "ports_total": ports.len(),
            "apps": apps.iter().take(n).map(|(a, u)| json!({
                "app": (self.app_name)(*a), "packets": u.packets, "bytes": u.bytes, "flows": u.flows,
            })).collect::<Vec<_>>(),
            "apps_total": apps.len(),
            "syn": syn_json,
            "noisy_hosts": noisy,
            "scanners": scan_json,
            "scan_untracked": scan_untracked,
            "icmp_senders": icmp_s.iter().take(n).map(icmp_entry).collect::<Vec<_>>(),
            "icmp_receivers": icmp_r.iter().take(n).map(icmp_entry).collect::<Vec<_>>(),
        });

        // Lifecycle: an anomaly seen again extends its detection; one not seen ends. In a
        // fixed order (type, then address), so that the same input numbers them the same.
        seen.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        for (kind, host, ev, targets) in seen {
            let key = (kind, host);
            let is_new = !self.anomalies.contains_key(&key);
            let id = self.next_id;
            let d = self.anomalies.entry(key).or_insert_with(|| Detection {
                id,
                kind,
                host,
                first_seen: start,
                last_seen: end,
                last_above: start,
                record: Map::new(),
                ddos: None,
                targets: BTreeSet::new(),
                targets_overflow: 0,
                interval: start,
                active_json: None,
            });
            if is_new {
                self.next_id += 1;
            }
            d.last_seen = end;
            d.interval = start;
            d.active_json = None;
            self.active_changed = true;
            for t in targets {
                if d.targets.len() < TARGETS_REMEMBERED {
                    d.targets.insert(t);
                } else if !d.targets.contains(&t) {
                    d.targets_overflow += 1;
                }
            }
            d.record = ev;
            if matches!(kind, "scan.ip" | "scan.port") {
                // Evidence over every interval the scan was seen in, not only this one.
                let distinct = scan_distinct(kind, &d.targets) + d.targets_overflow;
                d.record.insert("targets".into(), json!(distinct));
                let (groups, largest) = scan_groups(kind, &host, &d.targets);
                let list = if kind == "scan.ip" {
                    "ports"
                } else {
                    "destinations"
                };
                d.record.insert(list.into(), groups);
                d.record.insert("largest_group".into(), json!(largest));
                if d.targets_overflow > 0 {
                    d.record
                        .insert("targets_not_listed".into(), json!(d.targets_overflow));
                }
            }
            if is_new {
                let rec = self.render(&self.anomalies[&key], "start");
                self.emit(rec, true);
            }
        }
        let mut gone: Vec<_> = self
            .anomalies
            .iter()
            .filter(|(_, d)| d.interval != start)
            .map(|(k, d)| (d.id, *k))
            .collect();
        gone.sort_unstable_by_key(|(id, _)| *id);
        for (_, k) in gone {
            if let Some(d) = self.anomalies.remove(&k) {
                let last = d.last_seen;
                self.end(d, last);
            }
        }
        for o in self.outputs.iter_mut() {
            o.interval(&summary);
        }
        {
            let mut live = self.live();
            live.intervals_merged += 1;
            live.worm.push_back((start, noisy));
            while live.worm.len() > RECENT_INTERVALS {
                live.worm.pop_front();
            }
            live.interval = Some(Arc::new(summary));
        }
        self.set_watch();
    }
}

fn max_rates(a: &Rates, b: &Rates) -> Rates {
    Rates {
        packets: a.packets.max(b.packets),
        bytes: a.bytes.max(b.bytes),
        flows: a.flows.max(b.flows),
        syn: a.syn.max(b.syn),
        udp: a.udp.max(b.udp),
        icmp: a.icmp.max(b.icmp),
        tcp: a.tcp.max(b.tcp),
        frag: a.frag.max(b.frag),
    }
}

/// The thresholds `r` reached: (metric, value, threshold).
fn crossed(l: &Limits, r: &Rates) -> Vec<(&'static str, u64, u64)> {
    let mut out = Vec::new();
    for k in RATE_KEYS {
        let Some(limit) = l.get(k) else { continue };
        let (name, value) = match k {
            Key::DdosPps => ("pps", r.packets),
            Key::DdosMbps => ("mbps", r.bytes * 8 / 1_000_000),
            Key::DdosFlows => ("flows", r.flows),
            Key::DdosSynPps => ("syn_pps", r.syn),
            Key::DdosUdpPps => ("udp_pps", r.udp),
            Key::DdosIcmpPps => ("icmp_pps", r.icmp),
            Key::DdosFragPps => ("frag_pps", r.frag),
            _ => continue,
        };
        if value >= limit {
            out.push((name, value, limit));
        }
    }
    out
}

fn is_noisy(l: &Limits, s: &SynStats) -> bool {
    let (Some(min), Some(ww)) = (l.get(Key::SynMin), l.get(Key::SynWorkWeight)) else {
        return false;
    };
    let below = l.get(Key::SynAnsweredBelow).unwrap_or(100);
    s.syn_sent >= min
        && s.work_weight() >= ww as f64
        && (below >= 100 || s.answered() < below as f64)
}

fn rates_json(r: &Rates) -> Value {
    json!({
        "packets": r.packets, "bytes": r.bytes, "flows": r.flows, "syn": r.syn,
        "udp": r.udp, "icmp": r.icmp, "tcp": r.tcp, "fragments": r.frag,
    })
}

fn render_detection(d: &Detection, event: &str, app_name: &AppNamer) -> Map<String, Value> {
    let _ = app_name;
    let mut m = Map::new();
    m.insert("id".into(), json!(d.id));
    m.insert("type".into(), json!(d.kind));
    m.insert("event".into(), json!(event));
    m.insert("host".into(), json!(d.host.ip_text()));
    if d.host.vlan != 0 {
        m.insert("vlan".into(), json!(d.host.vlan));
    }
    m.insert("first_seen".into(), json!(d.first_seen));
    m.insert("last_seen".into(), json!(d.last_seen));
    if let Some(acc) = &d.ddos {
        m.insert(
            "direction".into(),
            json!(if acc.direction == 0 { "in" } else { "out" }),
        );
        m.insert(
            "network".into(),
            json!(acc.network.map_or("default".to_string(), |n| n.to_string())),
        );
        let mut ev = Map::new();
        ev.insert(
            "crossed".into(),
            Value::Array(
                acc.metrics
                    .iter()
                    .map(|(k, (v, l))| json!({"metric": k, "peak": v, "threshold": l}))
                    .collect(),
            ),
        );
        ev.insert("seconds".into(), json!(acc.seconds));
        ev.insert("peak".into(), rates_json(&acc.peak));
        ev.insert("total".into(), rates_json(&acc.total));
        let t = &acc.total;
        ev.insert(
            "protocols".into(),
            json!({"tcp": t.tcp, "udp": t.udp, "icmp": t.icmp, "other": t.packets.saturating_sub(t.tcp + t.udp + t.icmp), "syn": t.syn, "fragments": t.frag}),
        );
        ev.insert(
            if acc.direction == 0 {
                "top_sources"
            } else {
                "top_destinations"
            }
            .into(),
            Value::Array(
                acc.peers
                    .iter()
                    .take(10)
                    .map(|c| json!({"host": c.key.ip_text(), "packets": c.value.packets, "bytes": c.value.bytes}))
                    .collect(),
            ),
        );
        ev.insert(
            "top_ports".into(),
            Value::Array(
                acc.ports
                    .iter()
                    .take(10)
                    .map(|c| json!({"proto": proto_name(c.key.0), "port": c.key.1, "packets": c.value.packets, "bytes": c.value.bytes}))
                    .collect(),
            ),
        );
        m.insert("evidence".into(), Value::Object(ev));
    } else {
        let mut ev = d.record.clone();
        if let Some(t) = ev.remove("targets") {
            m.insert("targets".into(), t);
        }
        ev.remove("type");
        ev.remove("host");
        m.insert("evidence".into(), Value::Object(ev));
    }
    m
}

fn hosts_json(list: &[Counter<HostAddr, Traffic>], n: usize) -> Vec<Value> {
    list.iter()
        .take(n)
        .map(|c| {
            let mut v = json!({"host": c.key.ip_text(), "packets": c.value.packets, "bytes": c.value.bytes});
            if c.key.vlan != 0 {
                v["vlan"] = json!(c.key.vlan);
            }
            if c.error > 0 {
                v["error_bytes"] = json!(c.error);
            }
            v
        })
        .collect()
}

/// Talkers or destinations of all shards: the shards' top lists (a host a shard did not list
/// had at most that list's cut there), plus the overflow sketches.
fn merge_hosts<'a>(
    parts: &'a [IntervalPart],
    pick: impl Fn(
        &'a IntervalPart,
    ) -> (
        &'a Vec<(HostAddr, Traffic)>,
        u64,
        &'a Part<HostAddr, Traffic>,
    ),
) -> Vec<Counter<HostAddr, Traffic>> {
    let mut all: Vec<Part<HostAddr, Traffic>> = Vec::new();
    for p in parts {
        let (list, cut, overflow) = pick(p);
        all.push(Part {
            counters: list
                .iter()
                .map(|(h, t)| Counter {
                    key: *h,
                    weight: t.bytes,
                    error: 0,
                    value: *t,
                })
                .collect(),
            floor: cut,
        });
        all.push(overflow.clone());
    }
    merge_parts(&all)
}

/// Flows with traffic in the interval (every one is counted in its application's usage).
fn apps_flows(parts: &[IntervalPart]) -> u64 {
    parts
        .iter()
        .flat_map(|p| p.apps.iter())
        .map(|(_, u)| u.flows)
        .sum()
}

fn merge_flows(parts: &[IntervalPart], n: usize) -> Vec<FlowIvl> {
    let mut all: Vec<FlowIvl> = parts.iter().flat_map(|p| p.flows.iter().copied()).collect();
    all.sort_unstable_by_key(|f| {
        (
            std::cmp::Reverse(f.bytes),
            f.client,
            f.server,
            f.client_port,
            f.server_port,
            f.proto,
        )
    });
    all.truncate(n);
    all
}

fn merge_usage<K: std::hash::Hash + Eq + Ord + Copy>(
    it: impl Iterator<Item = (K, Usage)>,
) -> Vec<(K, Usage)> {
    let mut m: HashMap<K, Usage> = HashMap::new();
    for (k, u) in it {
        m.entry(k).or_default().merge(&u);
    }
    let mut v: Vec<(K, Usage)> = m.into_iter().collect();
    v.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    v
}

fn flow_json(f: &FlowIvl, app_name: &AppNamer) -> Value {
    json!({
        "client": f.client.ip_text(), "client_port": f.client_port,
        "server": f.server.ip_text(), "server_port": f.server_port,
        "proto": proto_name(f.proto), "packets": f.packets, "bytes": f.bytes,
        "app": app_name(f.app),
    })
}

fn syn_entry(c: &Counter<HostAddr, SynStats>, noisy: bool) -> Value {
    let s = &c.value;
    json!({
        "host": c.key.ip_text(),
        "syn_sent": s.syn_sent, "synack_received": s.synack_rcvd, "fin_sent": s.fin_sent,
        "rst_sent": s.rst_sent, "rst_received": s.rst_rcvd, "tcp_packets": s.tcp_packets,
        "work_weight": (s.work_weight() * 10.0).round() / 10.0,
        "answered_pct": (s.answered() * 10.0).round() / 10.0,
        "ports": s.ports.ports.iter().map(|(p, n)| json!({"port": p, "count": n})).collect::<Vec<_>>(),
        "other_ports": s.ports.others,
        "noisy": noisy,
        "error": c.error,
    })
}

fn icmp_entry(c: &Counter<HostAddr, IcmpStats>) -> Value {
    let s = &c.value;
    json!({
        "host": c.key.ip_text(),
        "errors": s.errors, "unreachable": s.unreachable, "port_unreachable": s.port_unreachable,
        "time_exceeded": s.time_exceeded,
        "probes": s.probes.iter().map(|((p, dst, port), n)| json!({
            "proto": proto_name(*p), "dst": addr_text(dst, c.key.ip_version), "port": port, "count": n,
        })).collect::<Vec<_>>(),
        "peers": s.peers.iter().map(|(h, n)| json!({"host": h.ip_text(), "count": n})).collect::<Vec<_>>(),
        "error": c.error,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScanKind {
    Ip,
    Port,
}

impl ScanKind {
    fn name(self) -> &'static str {
        match self {
            ScanKind::Ip => "scan.ip",
            ScanKind::Port => "scan.port",
        }
    }
}

/// A source's scanning in one interval, shards merged.
struct Scan {
    kind: ScanKind,
    src: HostAddr,
    /// The largest group: destinations on one port (IP scan), ports on one destination
    /// (port scan). This is what the threshold is checked against.
    max_group: u64,
    /// Every target: (destination, protocol, port).
    targets: Vec<([u8; 16], u8, u16)>,
    /// IP scans: (protocol, port, destinations); port scans: (destination, ports).
    groups: Vec<Value>,
}

fn scan_distinct(kind: &str, targets: &BTreeSet<([u8; 16], u8, u16)>) -> u64 {
    if kind == "scan.ip" {
        targets.iter().map(|t| t.0).collect::<BTreeSet<_>>().len() as u64
    } else {
        targets.len() as u64
    }
}

/// A scan's groups, rebuilt from all its targets: per (protocol, port) the destinations
/// tried (IP scan), or per destination the ports tried (port scan); and the largest group.
fn scan_groups(
    kind: &str,
    src: &HostAddr,
    targets: &BTreeSet<([u8; 16], u8, u16)>,
) -> (Value, u64) {
    let mut out = Vec::new();
    let mut largest = 0u64;
    if kind == "scan.ip" {
        let mut by_port: BTreeMap<(u8, u16), Vec<[u8; 16]>> = BTreeMap::new();
        for (dst, p, port) in targets {
            by_port.entry((*p, *port)).or_default().push(*dst);
        }
        for ((p, port), dsts) in by_port {
            largest = largest.max(dsts.len() as u64);
            out.push(json!({
                "proto": proto_name(p), "port": port, "targets": dsts.len(),
                "sample": dsts.iter().take(TARGETS_LISTED).map(|d| addr_text(d, src.ip_version)).collect::<Vec<_>>(),
            }));
        }
    } else {
        let mut by_dst: BTreeMap<[u8; 16], Vec<(u8, u16)>> = BTreeMap::new();
        for (dst, p, port) in targets {
            by_dst.entry(*dst).or_default().push((*p, *port));
        }
        for (dst, ports) in by_dst {
            largest = largest.max(ports.len() as u64);
            out.push(json!({
                "destination": addr_text(&dst, src.ip_version), "targets": ports.len(),
                "sample": ports.iter().take(TARGETS_LISTED).map(|(p, n)| json!({"proto": proto_name(*p), "port": n})).collect::<Vec<_>>(),
            }));
        }
    }
    out.sort_by(|a, b| b["targets"].as_u64().cmp(&a["targets"].as_u64()));
    (Value::Array(out), largest)
}

/// The shards' scan groups merged: a group is listed when it has at least `ip_floor` distinct
/// destinations (`port_floor` ports), half the lowest threshold, what one shard reports alone.
/// Each of S shards reports groups from threshold / (2 S) up, so with many shards (a floor of
/// 1 from 16 shards at the default 32) every source of a million-address flood sends a group
/// of one: their sizes are summed first, in a hash map, and only the keys whose sum reaches
/// the floor are merged target by target (the sum is at least the distinct count).
fn merge_scans<'a>(
    groups: impl Iterator<Item = &'a ScanGroup> + Clone,
    ip_floor: u64,
    port_floor: u64,
) -> Vec<Scan> {
    // A group's key (an IP scan's source, protocol and port; a port scan's source and
    // destination), its size and whether it reaches its floor by that size.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    enum Key {
        Ip(HostAddr, u8, u16),
        Port(HostAddr, [u8; 16]),
    }
    let key = |g: &ScanGroup| match g {
        ScanGroup::Ip {
            src, proto, port, ..
        } => Key::Ip(*src, *proto, *port),
        ScanGroup::Port { src, dst, .. } => Key::Port(*src, dst.addr),
    };
    let mut sizes: HashMap<Key, u64> = HashMap::new();
    for g in groups.clone() {
        let len = match g {
            ScanGroup::Ip { dsts, .. } => dsts.len(),
            ScanGroup::Port { ports, .. } => ports.len(),
        };
        *sizes.entry(key(g)).or_default() += len as u64;
    }
    let mut ip: BTreeMap<(HostAddr, u8, u16), BTreeSet<[u8; 16]>> = BTreeMap::new();
    type PortsOf = BTreeMap<(HostAddr, [u8; 16]), BTreeSet<(u8, u16)>>;
    let mut port: PortsOf = BTreeMap::new();
    for g in groups {
        let k = key(g);
        match (g, k) {
            (ScanGroup::Ip { dsts, .. }, Key::Ip(src, proto, p)) if sizes[&k] >= ip_floor => ip
                .entry((src, proto, p))
                .or_default()
                .extend(dsts.iter().copied()),
            (ScanGroup::Port { ports, .. }, Key::Port(src, dst)) if sizes[&k] >= port_floor => port
                .entry((src, dst))
                .or_default()
                .extend(ports.iter().copied()),
            _ => {}
        }
    }
    ip.retain(|_, dsts| dsts.len() as u64 >= ip_floor);
    port.retain(|_, ports| ports.len() as u64 >= port_floor);
    let mut by_src: BTreeMap<(HostAddr, bool), Scan> = BTreeMap::new();
    for ((src, proto, p), dsts) in ip {
        let s = by_src.entry((src, true)).or_insert_with(|| Scan {
            kind: ScanKind::Ip,
            src,
            max_group: 0,
            targets: Vec::new(),
            groups: Vec::new(),
        });
        s.max_group = s.max_group.max(dsts.len() as u64);
        s.groups.push(json!({
            "proto": proto_name(proto), "port": p, "targets": dsts.len(),
            "sample": dsts.iter().take(TARGETS_LISTED).map(|d| addr_text(d, src.ip_version)).collect::<Vec<_>>(),
        }));
        s.targets.extend(dsts.iter().map(|d| (*d, proto, p)));
    }
    for ((src, dst), ports) in port {
        let s = by_src.entry((src, false)).or_insert_with(|| Scan {
            kind: ScanKind::Port,
            src,
            max_group: 0,
            targets: Vec::new(),
            groups: Vec::new(),
        });
        s.max_group = s.max_group.max(ports.len() as u64);
        s.groups.push(json!({
            "destination": addr_text(&dst, src.ip_version), "targets": ports.len(),
            "sample": ports.iter().take(TARGETS_LISTED).map(|(p, n)| json!({"proto": proto_name(*p), "port": n})).collect::<Vec<_>>(),
        }));
        s.targets.extend(ports.iter().map(|(p, n)| (dst, *p, *n)));
    }
    by_src.into_values().collect()
}

fn scan_entry(s: &Scan) -> Value {
    let targets = match s.kind {
        ScanKind::Ip => s.targets.iter().map(|t| t.0).collect::<BTreeSet<_>>().len(),
        ScanKind::Port => s.targets.len(),
    };
    let mut v = json!({
        "type": s.kind.name(),
        "host": s.src.ip_text(),
        "targets": targets,
        "largest_group": s.max_group,
    });
    v[match s.kind {
        ScanKind::Ip => "ports",
        ScanKind::Port => "destinations",
    }] = Value::Array(s.groups.clone());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::SynStats;

    fn host(n: u16) -> HostAddr {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 0, (n >> 8) as u8, n as u8]);
        HostAddr::new(a, 4, 0)
    }

    #[test]
    fn many_shards_small_groups_merge_to_what_one_shard_lists() {
        // 16 shards at the default threshold of 32 report groups from 1 target up: a flood
        // of 60,000 sources with one target each (listed by no single shard at floor 16), and
        // a scanner whose 40 destinations on port 22 are spread 2 or 3 a shard, plus a port
        // scan of 20 ports (above its floor of 16) and one of 10 (below it).
        let mut groups = Vec::new();
        for i in 0..60_000u32 {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&(0x0b00_0000 + i).to_be_bytes());
            groups.push(ScanGroup::Ip {
                src: HostAddr::new(a, 4, 0),
                proto: 17,
                port: 53,
                dsts: vec![host(1).addr],
            });
        }
        for shard in 0..16u16 {
            groups.push(ScanGroup::Ip {
                src: host(7),
                proto: 6,
                port: 22,
                dsts: (0..40u16)
                    .filter(|d| d % 16 == shard)
                    .map(|d| host(100 + d).addr)
                    .collect(),
            });
            for (dst, n) in [(200, 20u16), (201, 10)] {
                groups.push(ScanGroup::Port {
                    src: host(8),
                    dst: host(dst),
                    ports: (0..n)
                        .filter(|p| p % 16 == shard)
                        .map(|p| (6, 1000 + p))
                        .collect(),
                });
            }
        }
        // The same destination reported twice counts once.
        groups.push(ScanGroup::Ip {
            src: host(7),
            proto: 6,
            port: 22,
            dsts: vec![host(100).addr],
        });
        let scans = merge_scans(groups.iter(), 16, 16);
        assert_eq!(
            scans.len(),
            2,
            "the scanner and the port scanner, no flood source"
        );
        let ip = scans.iter().find(|s| s.kind == ScanKind::Ip).unwrap();
        assert_eq!((ip.src, ip.max_group, ip.targets.len()), (host(7), 40, 40));
        let port = scans.iter().find(|s| s.kind == ScanKind::Port).unwrap();
        assert_eq!(
            (port.src, port.max_group, port.groups.len()),
            (host(8), 20, 1)
        );
    }

    /// An interval in which hosts `hosts` each sent 100 unanswered SYNs (noisy hosts).
    fn noisy_interval(start: u64, hosts: std::ops::RangeInclusive<u16>) -> Report {
        let counters = hosts
            .map(|h| Counter {
                key: host(h),
                weight: 100,
                error: 0,
                value: SynStats {
                    syn_sent: 100,
                    tcp_packets: 100,
                    ..SynStats::default()
                },
            })
            .collect();
        Report::Interval(Box::new(IntervalPart {
            start,
            end: start + 30,
            syn: Part { counters, floor: 0 },
            ..IntervalPart::default()
        }))
    }

    /// A second with `flooded` (if any) receiving 50,000 packets.
    fn second(second: u64, flooded: Option<u16>) -> Report {
        let hosts = flooded.map(|h| {
            let rates = Rates {
                packets: 50_000,
                bytes: 50_000 * 100,
                udp: 50_000,
                ..Rates::default()
            };
            (host(h), [rates, Rates::default()])
        });
        Report::Second(SecondReport {
            second,
            hosts: hosts.into_iter().collect(),
            ..SecondReport::default()
        })
    }

    fn active(m: &Merger) -> Vec<Arc<Value>> {
        m.live.lock().unwrap().active.clone()
    }

    #[test]
    fn active_records_are_rendered_when_they_change_not_every_second() {
        let cfg = Arc::new(AnalyticsConfig::default());
        let namer: AppNamer = Arc::new(|_| String::new());
        let mut m = Merger::new(cfg, namer, Arc::new(WatchList::default()), Vec::new());
        m.add(0, vec![noisy_interval(0, 1..=300)]);
        let first = active(&m);
        assert_eq!(first.len(), 300);
        assert!(first
            .iter()
            .all(|r| r["type"] == "noisy_host" && r["last_seen"] == 30));

        // Quiet seconds: the same records, not new copies.
        m.add(0, (30..40).map(|s| second(s, None)).collect());
        let quiet = active(&m);
        assert!(first.iter().zip(&quiet).all(|(a, b)| Arc::ptr_eq(a, b)));

        // An attack: its record is new every second, the anomalies' stay.
        m.add(0, vec![second(40, Some(200))]);
        let a1 = active(&m);
        assert_eq!(a1.len(), 301);
        let attack = |v: &[Arc<Value>]| v.iter().find(|r| r["type"] == "ddos").cloned().unwrap();
        assert_eq!(attack(&a1)["evidence"]["seconds"], 1);
        m.add(0, vec![second(41, Some(200))]);
        let a2 = active(&m);
        assert_eq!(attack(&a2)["evidence"]["seconds"], 2);
        assert_eq!(attack(&a2)["host"], "10.0.0.200");
        let anomalies = |v: &[Arc<Value>]| -> Vec<Arc<Value>> {
            v.iter()
                .filter(|r| r["type"] == "noisy_host")
                .cloned()
                .collect()
        };
        assert!(anomalies(&first)
            .iter()
            .zip(&anomalies(&a2))
            .all(|(a, b)| Arc::ptr_eq(a, b)));

        // The next interval: half the noisy hosts again (extended), the others ended.
        m.add(0, vec![noisy_interval(30, 1..=150)]);
        let next = active(&m);
        let still = anomalies(&next);
        assert_eq!(still.len(), 150);
        assert!(still.iter().all(|r| r["last_seen"] == 60));
        // The attack ends after its hold time (5 s below every threshold).
        m.add(0, (42..50).map(|s| second(s, None)).collect());
        assert_eq!(active(&m).len(), 150);
        m.finish();
        assert!(active(&m).is_empty());
    }
}
