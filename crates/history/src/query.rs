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

use crate::totals::{merge_sorted, SegmentTotals};
pub use crate::totals::{AppId, HostId, Totals};

impl Totals {
    fn get(&self, m: Metric) -> u64 {
        match m {
            Metric::Bytes => self.bytes,
            Metric::Packets => self.packets,
            Metric::Flows => self.flows,
        }
    }
}

/// Sums per key over the flows that pass `filter`. A closed segment lying wholly inside the
/// time range (and a filter on time only) is taken from its totals file; the others are
/// scanned flow by flow. `from_totals` picks the key's list out of a segment's totals,
/// `keys` the keys a flow adds to.
fn aggregate<K: Ord + Copy + std::hash::Hash>(
    reader: &FlowReader,
    filter: &Filter,
    from_totals: impl Fn(&SegmentTotals) -> &[(K, Totals)],
    keys: impl Fn(&Summary, &mut dyn FnMut(K)),
) -> Result<(Vec<(K, Totals)>, ScanStats), StoreError> {
    let time_only = filter.host.is_none()
        && filter.port.is_none()
        && filter.proto.is_none()
        && filter.app.is_none();
    let mut acc: Vec<(K, Totals)> = Vec::new();
    let mut scanned: FastMap<K, Totals> = FastMap::default();
    let mut stats = ScanStats::default();
    let segments = reader.segments();
    for (i, (_, path)) in segments.iter().enumerate() {
        let closed = i + 1 < segments.len();
        if closed && time_only {
            if let Some(t) = crate::totals::read(path) {
                if t.none_within(filter) {
                    continue;
                }
                if t.all_within(filter) {
                    merge_sorted(&mut acc, from_totals(&t));
                    stats.segments_from_totals += 1;
                    continue;
                }
            }
        }
        // (The visitor never stops early.)
        let _ = reader.scan_segment(i, filter, &mut stats, &mut |s, _| {
            keys(s, &mut |k| scanned.entry(k).or_default().add_flow(s));
            ControlFlow::Continue(())
        })?;
    }
    let mut rest: Vec<(K, Totals)> = scanned.into_iter().collect();
    rest.sort_unstable_by_key(|e| e.0);
    merge_sorted(&mut acc, &rest);
    Ok((acc, stats))
}

/// Hosts by the traffic of the flows they took part in (either end), largest first.
pub fn top_hosts(
    reader: &FlowReader,
    filter: &Filter,
    by: Metric,
    limit: usize,
) -> Result<(Vec<(HostId, Totals)>, ScanStats), StoreError> {
    let (all, stats) = aggregate(
        reader,
        filter,
        |t| &t.hosts,
        |s, add| {
            let k = &s.key;
            add((k.addr_a, k.ip_version, k.vlan));
            add((k.addr_b, k.ip_version, k.vlan));
        },
    )?;
    Ok((ranked(all, by, limit), stats))
}

/// An application's label as sonde shows it everywhere (`TLS.Google`, `DNS`).
pub fn app_name((proto, app): AppId) -> String {
    sonde_dpi::L7 {
        proto: sonde_dpi::Proto(proto),
        app: sonde_dpi::Proto(app),
        ..sonde_dpi::L7::default()
    }
    .name()
}

/// Applications by traffic, largest first.
pub fn top_apps(
    reader: &FlowReader,
    filter: &Filter,
    by: Metric,
    limit: usize,
) -> Result<(Vec<(AppId, Totals)>, ScanStats), StoreError> {
    let (all, stats) = aggregate(
        reader,
        filter,
        |t| &t.apps,
        |s, add| add((s.l7_proto, s.l7_app)),
    )?;
    Ok((ranked(all, by, limit), stats))
}

fn ranked<K: Ord + Copy>(mut v: Vec<(K, Totals)>, by: Metric, limit: usize) -> Vec<(K, Totals)> {
    // Ties broken by key, so the same data always gives the same list.
    v.sort_unstable_by(|a, b| b.1.get(by).cmp(&a.1.get(by)).then(a.0.cmp(&b.0)));
    v.truncate(limit);
    v
}
