//! Traffic per interval (one tick, a second) of the interface, each application and each host:
//! the rows of the history's time series.
//!
//! Every count a flow passes to its hosts ([`crate::Engine`]'s `flush_to_hosts`, at each tick,
//! when a flow ends and before a snapshot) also goes here, so the rows of a run add up exactly
//! to the engine's counters. Directions: for a host, `in` is what it received and `out` what it
//! sent; for the interface and an application, `out` is client → server and `in` the reverse.
//! `flows`: flows that started in the interval (interface, hosts), ended in it (applications,
//! whose label is only final then), or for an exporter the records (or sFlow samples) it
//! sent; collected traffic also counts for its exporter. Gauges (live flows and hosts, packets dropped in the interval) are sampled when
//! the interval closes.

use crate::flow::Flow;
use crate::host::{HostKey, HostTable};
use std::collections::HashMap;

/// What one series did during one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalCounts {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub flows: u64,
}

impl IntervalCounts {
    pub fn is_zero(&self) -> bool {
        *self == IntervalCounts::default()
    }

    pub fn add(&mut self, o: &IntervalCounts) {
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.packets_in += o.packets_in;
        self.packets_out += o.packets_out;
        self.flows += o.flows;
    }
}

/// An application label as nDPI numbers: (protocol, service).
pub type AppKey = (u16, u16);

/// An exporter of collected flows: its address and observation domain.
pub type ExporterKey = (std::net::SocketAddr, u32);

/// The engine's state when an interval closed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub active_flows: u64,
    pub active_hosts: u64,
    /// Packets dropped (flow table full) during the interval.
    pub drops: u64,
    /// Packets the kernel dropped for the capture (its ring full) during the interval.
    pub capture_drops: u64,
}

/// The rows of one interval of one shard; only series with traffic are listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesTick {
    /// Start of the interval, Unix seconds (packet time).
    pub second: u64,
    pub interface: IntervalCounts,
    /// The interface's traffic by flow direction (index `Direction as usize`), with local
    /// networks only (all zero without).
    pub directions: [IntervalCounts; 4],
    pub apps: Vec<(AppKey, IntervalCounts)>,
    pub hosts: Vec<(HostKey, IntervalCounts)>,
    pub exporters: Vec<(ExporterKey, IntervalCounts)>,
    /// Filter-set expressions that matched in the interval: (expression, packets, bytes).
    pub filters: Vec<(u16, u64, u64)>,
    pub gauges: Gauges,
}

/// The current interval's counts, kept by an engine with series on.
#[derive(Default)]
pub(crate) struct SeriesAcc {
    /// By host slot; `dirty` lists the slots with counts.
    host: Vec<IntervalCounts>,
    dirty: Vec<u32>,
    interface: IntervalCounts,
    directions: [IntervalCounts; 4],
    apps: HashMap<AppKey, IntervalCounts>,
    /// By the flow's exporter index (`Flow::exporter`, 0 = captured here, not kept).
    exporters: HashMap<u16, IntervalCounts>,
    /// Drops counted by the engine, and by the capture, when the last interval closed.
    drops_before: u64,
    capture_drops_before: u64,
    ready: Vec<SeriesTick>,
    /// The newest interval closed (with or without traffic).
    pub(crate) closed_through: Option<u64>,
}

fn app_key(f: &Flow) -> AppKey {
    if f.dpi_done {
        (f.l7.proto.0, f.l7.app.0)
    } else {
        (0, 0)
    }
}

impl SeriesAcc {
    /// Frees the per-host counters when no host has counts pending (the interval was closed).
    pub(crate) fn release(&mut self) {
        if self.dirty.is_empty() {
            self.host = Vec::new();
            self.dirty = Vec::new();
        }
    }

    fn host(&mut self, slot: u32) -> &mut IntervalCounts {
        let i = slot as usize;
        if i >= self.host.len() {
            self.host.resize(i + 1, IntervalCounts::default());
        }
        if self.host[i].is_zero() {
            self.dirty.push(slot);
        }
        &mut self.host[i]
    }

    /// A flow's pending counts, as they go to its hosts.
    pub(crate) fn on_flush(&mut self, f: &Flow, no_host: u32) {
        let pk = [f.pending_pkts[0] as u64, f.pending_pkts[1] as u64];
        let by = f.pending_bytes;
        for (side, &slot) in f.hosts.iter().enumerate() {
            if slot == no_host {
                continue;
            }
            let (o, i) = (side, 1 - side);
            let h = self.host(slot);
            h.bytes_out += by[o];
            h.packets_out += pk[o];
            h.bytes_in += by[i];
            h.packets_in += pk[i];
        }
        let (c, s) = (f.client_dir(), 1 - f.client_dir());
        let add = |t: &mut IntervalCounts| {
            t.bytes_out += by[c];
            t.packets_out += pk[c];
            t.bytes_in += by[s];
            t.packets_in += pk[s];
        };
        add(&mut self.interface);
        if f.classified() {
            add(&mut self.directions[f.direction() as usize]);
        }
        add(self.apps.entry(app_key(f)).or_default());
        if f.exporter != 0 {
            add(self.exporters.entry(f.exporter).or_default());
        }
    }

    /// A new flow (its hosts are set).
    pub(crate) fn on_create(&mut self, f: &Flow, no_host: u32) {
        self.interface.flows += 1;
        if f.classified() {
            self.directions[f.direction() as usize].flows += 1;
        }
        for &slot in &f.hosts {
            if slot != no_host {
                self.host(slot).flows += 1;
            }
        }
    }

    /// A record (or sFlow sample) received from exporter `exporter` (index + 1).
    pub(crate) fn on_record(&mut self, exporter: u16) {
        if exporter != 0 {
            self.exporters.entry(exporter).or_default().flows += 1;
        }
    }

    /// A flow that ended (after its last flush).
    pub(crate) fn on_end(&mut self, f: &Flow) {
        self.apps.entry(app_key(f)).or_default().flows += 1;
    }

    /// Closes the interval that started at `second`: its rows become ready (when there was
    /// any traffic) and the counts start again.
    pub(crate) fn close(
        &mut self,
        second: u64,
        hosts: &HostTable,
        exporters: &[ExporterKey],
        mut gauges: Gauges,
        filters: Option<&sonde_analytics::FilterCounts>,
    ) {
        self.closed_through = Some(self.closed_through.map_or(second, |c| c.max(second)));
        let mut tick = SeriesTick {
            second,
            interface: std::mem::take(&mut self.interface),
            directions: std::mem::take(&mut self.directions),
            ..SeriesTick::default()
        };
        tick.apps = self.apps.drain().filter(|(_, c)| !c.is_zero()).collect();
        tick.apps.sort_unstable_by_key(|e| e.0);
        tick.hosts.reserve(self.dirty.len());
        for slot in self.dirty.drain(..) {
            let c = std::mem::take(&mut self.host[slot as usize]);
            if let Some(h) = hosts.get(slot) {
                tick.hosts.push((h.key, c));
            }
        }
        tick.exporters = self
            .exporters
            .drain()
            .filter_map(|(i, c)| Some((*exporters.get(usize::from(i).checked_sub(1)?)?, c)))
            .collect();
        // `gauges.drops` comes in as the engine's running total.
        let total_drops = gauges.drops;
        gauges.drops = total_drops.saturating_sub(self.drops_before);
        self.drops_before = total_drops;
        let total_capture = gauges.capture_drops;
        gauges.capture_drops = total_capture.saturating_sub(self.capture_drops_before);
        self.capture_drops_before = total_capture;
        tick.gauges = gauges;
        if let Some(f) = filters {
            tick.filters = (0..f.packets.len())
                .filter(|&i| f.packets[i] > 0)
                .map(|i| (i as u16, f.packets[i], f.bytes[i]))
                .collect();
        }
        let empty = tick.interface.is_zero()
            && tick.apps.is_empty()
            && tick.hosts.is_empty()
            && tick.filters.is_empty()
            && gauges.drops == 0
            && gauges.capture_drops == 0;
        if !empty {
            self.ready.push(tick);
        }
    }

    pub(crate) fn take_ready(&mut self) -> Vec<SeriesTick> {
        std::mem::take(&mut self.ready)
    }
}
