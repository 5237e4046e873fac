//! Queries over the flow history: the flows that match a filter (paged), and the top hosts and
//! applications over a time range.

use crate::codec::Summary;
use crate::store::{Filter, FlowReader, ScanStats, StoreError};
use sonde_flow::FlowRecord;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for the aggregation maps (keys are addresses and numbers read from our own
/// files, and the map is private to one query: no need for SipHash's flood resistance).
#[derive(Default)]
struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        let x = self.0;
        (x ^ (x >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (x >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FoldHasher>>;
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
    let mut t: FastMap<HostId, Totals> = FastMap::default();
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
    let mut t: FastMap<AppId, Totals> = FastMap::default();
    let stats = reader.scan(filter, |s, _| {
        t.entry((s.l7_proto, s.l7_app)).or_default().add(s);
        ControlFlow::Continue(())
    })?;
    Ok((ranked(t, by, limit), stats))
}

fn ranked<K: Ord + Copy>(t: FastMap<K, Totals>, by: Metric, limit: usize) -> Vec<(K, Totals)> {
    let mut v: Vec<(K, Totals)> = t.into_iter().collect();
    // Ties broken by key, so the same data always gives the same list.
    v.sort_unstable_by(|a, b| b.1.get(by).cmp(&a.1.get(by)).then(a.0.cmp(&b.0)));
    v.truncate(limit);
    v
}
