//! Per-segment totals: for each closed segment, the traffic of every host and application in it
//! (`NNNNNNNNNN.sum` next to `NNNNNNNNNN.sfl`), so top-N queries over long ranges merge a few
//! sorted lists instead of decoding every flow.
//!
//! # Layout (version 1)
//!
//! ```text
//! "SONDESUM" | version u32 | crc32 u32 (of everything after it) |
//! segment_len u64 | records u64 | min_first_ms u64 | max_first_ms u64 | min_last_ms u64 |
//! max_last_ms u64 | host count u64 | app count u64 |
//! hosts, sorted: addr [16] | ip_version u8 | 0 u8 | vlan u16 | bytes u64 | packets u64 | flows u64
//! apps, sorted:  proto u16 | app u16 | bytes u64 | packets u64 | flows u64
//! ```
//!
//! A totals file is only a shortcut: one that is missing, from a segment of another length (it
//! was rewritten), or fails its CRC is ignored and the segment is scanned instead; it is
//! written to a temporary name and renamed, so it is never seen half-written.

use crate::codec::Summary;
use crate::store::{Filter, ScanStats, StoreError};
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SONDESUM";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 4 + 8 * 8;
const HOST_ENTRY: usize = 16 + 1 + 1 + 2 + 24;
const APP_ENTRY: usize = 2 + 2 + 24;

/// Traffic of one host (or one application): its flows and their bytes and packets, both
/// directions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub bytes: u64,
    pub packets: u64,
    pub flows: u64,
}

impl Totals {
    pub fn add_flow(&mut self, s: &Summary) {
        self.bytes += s.bytes;
        self.packets += s.packets;
        self.flows += 1;
    }

    pub fn add(&mut self, o: &Totals) {
        self.bytes += o.bytes;
        self.packets += o.packets;
        self.flows += o.flows;
    }
}

/// A host: its address (IPv4 in the first 4 bytes), IP version and VLAN.
pub type HostId = ([u8; 16], u8, u16);
/// An application label: nDPI protocol and service numbers.
pub type AppId = (u16, u16);

/// What a closed segment holds, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentTotals {
    pub segment_len: u64,
    pub records: u64,
    pub min_first_ms: u64,
    pub max_first_ms: u64,
    pub min_last_ms: u64,
    pub max_last_ms: u64,
    /// Sorted by host.
    pub hosts: Vec<(HostId, Totals)>,
    /// Sorted by application.
    pub apps: Vec<(AppId, Totals)>,
}

impl SegmentTotals {
    /// Every flow of the segment is inside [from, to] (overlap semantics of [`Filter`]).
    pub fn all_within(&self, f: &Filter) -> bool {
        f.from_ms.is_none_or(|from| self.min_last_ms >= from)
            && f.to_ms.is_none_or(|to| self.max_first_ms <= to)
    }

    /// No flow of the segment is inside [from, to].
    pub fn none_within(&self, f: &Filter) -> bool {
        self.records == 0
            || f.from_ms.is_some_and(|from| self.max_last_ms < from)
            || f.to_ms.is_some_and(|to| self.min_first_ms > to)
    }
}

/// The totals file of a segment.
pub fn path_for(segment: &Path) -> PathBuf {
    segment.with_extension("sum")
}

/// Scans a closed segment and sums it up.
pub fn build(segment: &Path) -> Result<SegmentTotals, StoreError> {
    let mut hosts: crate::WireMap<HostId, Totals> = Default::default();
    let mut apps: crate::WireMap<AppId, Totals> = Default::default();
    let mut t = SegmentTotals {
        segment_len: fs::metadata(segment)
            .map_err(|err| StoreError::Io {
                path: segment.to_path_buf(),
                err,
            })?
            .len(),
        min_first_ms: u64::MAX,
        min_last_ms: u64::MAX,
        ..SegmentTotals::default()
    };
    let mut stats = ScanStats::default();
    // (The visitor never stops early.)
    let _ = crate::store::scan_file(
        segment,
        false,
        &Filter::default(),
        &mut stats,
        &mut |s, _| {
            let k = &s.key;
            for addr in [k.addr_a, k.addr_b] {
                hosts
                    .entry((addr, k.ip_version, k.vlan))
                    .or_default()
                    .add_flow(s);
            }
            apps.entry((s.l7_proto, s.l7_app)).or_default().add_flow(s);
            t.records += 1;
            t.min_first_ms = t.min_first_ms.min(s.first_ms);
            t.max_first_ms = t.max_first_ms.max(s.first_ms);
            t.min_last_ms = t.min_last_ms.min(s.last_ms);
            t.max_last_ms = t.max_last_ms.max(s.last_ms);
            ControlFlow::Continue(())
        },
    )?;
    t.hosts = hosts.into_iter().collect();
    t.hosts.sort_unstable_by_key(|e| e.0);
    t.apps = apps.into_iter().collect();
    t.apps.sort_unstable_by_key(|e| e.0);
    Ok(t)
}

fn put_totals(out: &mut Vec<u8>, t: &Totals) {
    out.extend_from_slice(&t.bytes.to_le_bytes());
    out.extend_from_slice(&t.packets.to_le_bytes());
    out.extend_from_slice(&t.flows.to_le_bytes());
}

/// Writes the totals of `segment` (to a temporary name, synced, then renamed). Streamed, the
/// CRC filled in last: at a million hosts the file is 44 MB, which need not be built in memory
/// beside the totals themselves.
pub fn write(segment: &Path, t: &SegmentTotals) -> Result<(), StoreError> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let path = path_for(segment);
    let tmp = path.with_extension("sum.tmp");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |err| StoreError::Io { path: p, err }
    };
    let file = fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, &file);
    let mut crc = crc32fast::Hasher::new();
    let mut body = |out: &mut std::io::BufWriter<&fs::File>, bytes: &[u8]| {
        crc.update(bytes);
        out.write_all(bytes)
    };
    // The header; its CRC (bytes 12..16) is written at the end.
    for part in [&MAGIC[..], &VERSION.to_le_bytes(), &[0; 4]] {
        out.write_all(part).map_err(io(&tmp))?;
    }
    for v in [
        t.segment_len,
        t.records,
        t.min_first_ms,
        t.max_first_ms,
        t.min_last_ms,
        t.max_last_ms,
        t.hosts.len() as u64,
        t.apps.len() as u64,
    ] {
        body(&mut out, &v.to_le_bytes()).map_err(io(&tmp))?;
    }
    let mut entry = Vec::with_capacity(HOST_ENTRY);
    for ((addr, v, vlan), tot) in &t.hosts {
        entry.clear();
        entry.extend_from_slice(addr);
        entry.push(*v);
        entry.push(0);
        entry.extend_from_slice(&vlan.to_le_bytes());
        put_totals(&mut entry, tot);
        body(&mut out, &entry).map_err(io(&tmp))?;
    }
    for ((p, a), tot) in &t.apps {
        entry.clear();
        entry.extend_from_slice(&p.to_le_bytes());
        entry.extend_from_slice(&a.to_le_bytes());
        put_totals(&mut entry, tot);
        body(&mut out, &entry).map_err(io(&tmp))?;
    }
    out.flush().map_err(io(&tmp))?;
    drop(out);
    file.write_all_at(&crc.finalize().to_le_bytes(), 12)
        .map_err(io(&tmp))?;
    file.sync_data().map_err(io(&tmp))?;
    fs::rename(&tmp, &path).map_err(io(&path))
}

/// Reads the totals of `segment`; None when there are none that can be trusted for it (the
/// caller scans the segment instead).
pub fn read(segment: &Path) -> Option<SegmentTotals> {
    let seg_len = fs::metadata(segment).ok()?.len();
    let data = fs::read(path_for(segment)).ok()?;
    if data.len() < HEADER || &data[..8] != MAGIC {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
    if u32_at(8) != VERSION || crc32fast::hash(&data[16..]) != u32_at(12) {
        return None;
    }
    let body = &data[16..];
    let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let n_hosts = u64_at(body, 48) as usize;
    let n_apps = u64_at(body, 56) as usize;
    let want = 64usize
        .checked_add(n_hosts.checked_mul(HOST_ENTRY)?)?
        .checked_add(n_apps.checked_mul(APP_ENTRY)?)?;
    if body.len() != want || u64_at(body, 0) != seg_len {
        return None;
    }
    let totals = |b: &[u8]| Totals {
        bytes: u64_at(b, 0),
        packets: u64_at(b, 8),
        flows: u64_at(b, 16),
    };
    let mut at = 64;
    let mut hosts = Vec::with_capacity(n_hosts);
    for _ in 0..n_hosts {
        let e = &body[at..at + HOST_ENTRY];
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&e[..16]);
        let vlan = u16::from_le_bytes([e[18], e[19]]);
        hosts.push(((addr, e[16], vlan), totals(&e[20..])));
        at += HOST_ENTRY;
    }
    let mut apps = Vec::with_capacity(n_apps);
    for _ in 0..n_apps {
        let e = &body[at..at + APP_ENTRY];
        let id = (
            u16::from_le_bytes([e[0], e[1]]),
            u16::from_le_bytes([e[2], e[3]]),
        );
        apps.push((id, totals(&e[4..])));
        at += APP_ENTRY;
    }
    Some(SegmentTotals {
        segment_len: seg_len,
        records: u64_at(body, 8),
        min_first_ms: u64_at(body, 16),
        max_first_ms: u64_at(body, 24),
        min_last_ms: u64_at(body, 32),
        max_last_ms: u64_at(body, 40),
        hosts,
        apps,
    })
}

/// Adds the sorted run `add` into the sorted accumulator `acc` (one linear merge).
pub fn merge_sorted<K: Ord + Copy>(acc: &mut Vec<(K, Totals)>, add: &[(K, Totals)]) {
    if add.is_empty() {
        return;
    }
    let old = std::mem::take(acc);
    acc.reserve(old.len().max(add.len()));
    let (mut i, mut j) = (0, 0);
    while i < old.len() && j < add.len() {
        match old[i].0.cmp(&add[j].0) {
            std::cmp::Ordering::Less => {
                acc.push(old[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                acc.push(add[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let mut t = old[i].1;
                t.add(&add[j].1);
                acc.push((old[i].0, t));
                i += 1;
                j += 1;
            }
        }
    }
    acc.extend_from_slice(&old[i..]);
    acc.extend_from_slice(&add[j..]);
}
