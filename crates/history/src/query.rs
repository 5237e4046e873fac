//! Queries over the flow history: the flows that match a filter (paged), and the top hosts and
//! applications over a time range.

use crate::codec::Summary;
use crate::store::{Filter, FlowReader, ScanStats, StoreError};
use sonde_flow::FlowRecord;
use std::collections::HashMap;
use std::ops::ControlFlow;

/// Flows matching `filter` in storage order (the order they expired), skipping `offset` and
/// returning at most `limit`. The scan stops as soon as the page is full.
pub fn flows(
    reader: &FlowReader,
    filter: &Filter,
    offset: usize,
    limit: usize,
) -> Result<(Vec<FlowRecord>, ScanStats), StoreError> {
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut error = None;
    let stats = reader.scan(filter, |_, full| {
        if out.len() >= limit {
            return ControlFlow::Break(());
        }
        if skipped < offset {
            skipped += 1;
            return ControlFlow::Continue(());
        }
        match full() {
            Ok(r) => out.push(r),
            Err(e) => {
                error = Some(e);
                return ControlFlow::Break(());
            }
        }
        if out.len() >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    match error {
        Some(e) => Err(e),
        None => Ok((out, stats)),
    }
}

/// What the top lists rank by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Bytes,
    Packets,
    Flows,
}

impl Metric {
    pub fn parse(s: &str) -> Option<Metric> {
        match s {
            "bytes" => Some(Metric::Bytes),
            "packets" => Some(Metric::Packets),
            "flows" => Some(Metric::Flows),
            _ => None,
        }
    }
}

/// Traffic of one host (or one application) over the queried range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub bytes: u64,
    pub packets: u64,
    pub flows: u64,
}

impl Totals {
    fn add(&mut self, s: &Summary) {
        self.bytes += s.bytes;
        self.packets += s.packets;
        self.flows += 1;
    }

    fn get(&self, m: Metric) -> u64 {
        match m {
            Metric::Bytes => self.bytes,
            Metric::Packets => self.packets,
            Metric::Flows => self.flows,
        }
    }
}

/// A host: its address (IPv4 in the first 4 bytes), IP version and VLAN.
pub type HostId = ([u8; 16], u8, u16);

/// Hosts by the traffic of the flows they took part in (either end), largest first.
pub fn top_hosts(
    reader: &FlowReader,
    filter: &Filter,
    by: Metric,
    limit: usize,
) -> Result<(Vec<(HostId, Totals)>, ScanStats), StoreError> {
    let mut t: HashMap<HostId, Totals> = HashMap::new();
    let stats = reader.scan(filter, |s, _| {
        let k = &s.key;
        for addr in [k.addr_a, k.addr_b] {
            t.entry((addr, k.ip_version, k.vlan)).or_default().add(s);
        }
        ControlFlow::Continue(())
    })?;
    Ok((ranked(t, by, limit), stats))
}

/// An application label: nDPI protocol and service numbers.
pub type AppId = (u16, u16);

/// Applications by traffic, largest first.
pub fn top_apps(
    reader: &FlowReader,
    filter: &Filter,
    by: Metric,
    limit: usize,
) -> Result<(Vec<(AppId, Totals)>, ScanStats), StoreError> {
    let mut t: HashMap<AppId, Totals> = HashMap::new();
    let stats = reader.scan(filter, |s, _| {
        t.entry((s.l7_proto, s.l7_app)).or_default().add(s);
        ControlFlow::Continue(())
    })?;
    Ok((ranked(t, by, limit), stats))
}

fn ranked<K: Ord + Copy>(t: HashMap<K, Totals>, by: Metric, limit: usize) -> Vec<(K, Totals)> {
    let mut v: Vec<(K, Totals)> = t.into_iter().collect();
    // Ties broken by key, so the same data always gives the same list.
    v.sort_unstable_by(|a, b| b.1.get(by).cmp(&a.1.get(by)).then(a.0.cmp(&b.0)));
    v.truncate(limit);
    v
}
