//! The host cache: hosts that leave memory (purged when idle, or at shutdown) keep their
//! counters on disk, and get them back when they are seen again, in this run or a later one
//! (the role Redis has for ntopng).
//!
//! # Layout (version 1)
//!
//! `DATA_DIR/hosts/cache.log`: a 16-byte header (`SONDEHST`, version u32 LE, 4 reserved bytes)
//! then records, appended:
//!
//! ```text
//! crc32 u32 (of the 100 bytes after it) | kind u8 (1 = host, 2 = taken back) | ip_version u8 |
//! vlan u16 | addr [16] | has_mac u8 | mac [6] | 0 u8 | sent_pkts u64 | sent_bytes u64 |
//! rcvd_pkts u64 | rcvd_bytes u64 | first_ns u64 | last_ns u64 | flows_as_client u32 |
//! flows_as_server u32 | 0 [16]
//! ```
//!
//! The newest record of a key wins; a "taken back" record removes it. In memory there is only
//! an index from key to the number of its record and the second it was last seen (28 bytes an
//! entry). Opening reads the log record by record, cuts off a torn last record (a crash during
//! a write); a bad record before the end is corruption, reported with its offset.
//!
//! # Bounds
//!
//! A flood of spoofed sources (or a long run with churning addresses) must not grow the cache
//! without end, so it holds at most `max_entries` hosts ([`DEFAULT_MAX_ENTRIES`], a million).
//! A `put` of a new host into a full cache first evicts the 1/16 of the capacity seen longest
//! ago (`last_ns`, to the second; within the cut-off second, any), so the O(n) search for them
//! (`select_nth_unstable` on the index's seconds) is paid once per n/16 new hosts. An evicted
//! host's counters are lost: if it returns, it starts from zero. Evicted hosts get a "taken
//! back" record, so a reopened cache has exactly the hosts the one in memory had; they are
//! counted in `evicted`. Opening a cache that holds more than its capacity (given a lower one
//! than last time) evicts down to it and rewrites the log.
//!
//! Memory at a million hosts: 61 MB of index (2^21 hash table slots of 28 + 1 bytes), half
//! as much again for a moment while the table grows, and for a moment 4 bytes a host to
//! choose whom to evict or 24 to compact.
//!
//! The log is rewritten without dead records (replaced, taken back, evicted) as soon as they
//! are more than half of it and it is over 64 MiB, checked after every write, so it stays
//! under `max(64 MiB, 2 × (16 + 104 × max_entries))` plus one eviction's records: 208 MB for
//! the default capacity.

use crate::store::{prepare_data_dir, StoreError};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SONDEHST";
const VERSION: u32 = 1;
const HEADER: u64 = 16;
const RECORD: usize = 104;
const KIND_HOST: u8 = 1;
const KIND_TAKEN: u8 = 2;

/// A host's identity: address (IPv4 in the first 4 bytes), IP version, VLAN.
pub type CacheKey = sonde_flow::host::HostKey;

/// What is kept of a host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedHost {
    pub mac: Option<[u8; 6]>,
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub rcvd_pkts: u64,
    pub rcvd_bytes: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub flows_as_client: u32,
    pub flows_as_server: u32,
}

impl CachedHost {
    /// Adds `o` (another stay of the same host) to this one.
    pub fn merge(&mut self, o: &CachedHost) {
        self.mac = self.mac.or(o.mac);
        self.sent_pkts += o.sent_pkts;
        self.sent_bytes += o.sent_bytes;
        self.rcvd_pkts += o.rcvd_pkts;
        self.rcvd_bytes += o.rcvd_bytes;
        self.first_ns = match (self.first_ns, o.first_ns) {
            (0, x) | (x, 0) => x,
            (a, b) => a.min(b),
        };
        self.last_ns = self.last_ns.max(o.last_ns);
        self.flows_as_client += o.flows_as_client;
        self.flows_as_server += o.flows_as_server;
    }
}

fn encode(kind: u8, k: &CacheKey, h: &CachedHost) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[4] = kind;
    r[5] = k.ip_version;
    r[6..8].copy_from_slice(&k.vlan.to_le_bytes());
    r[8..24].copy_from_slice(&k.addr);
    if let Some(m) = h.mac {
        r[24] = 1;
        r[25..31].copy_from_slice(&m);
    }
    let mut at = 32;
    for v in [
        h.sent_pkts,
        h.sent_bytes,
        h.rcvd_pkts,
        h.rcvd_bytes,
        h.first_ns,
        h.last_ns,
    ] {
        r[at..at + 8].copy_from_slice(&v.to_le_bytes());
        at += 8;
    }
    r[80..84].copy_from_slice(&h.flows_as_client.to_le_bytes());
    r[84..88].copy_from_slice(&h.flows_as_server.to_le_bytes());
    let crc = crc32fast::hash(&r[4..]);
    r[..4].copy_from_slice(&crc.to_le_bytes());
    r
}

/// A record's kind, key and host, or None when it fails its checks.
fn decode(r: &[u8; RECORD]) -> Option<(u8, CacheKey, CachedHost)> {
    let crc = u32::from_le_bytes(r[..4].try_into().ok()?);
    if crc != crc32fast::hash(&r[4..]) || !(r[4] == KIND_HOST || r[4] == KIND_TAKEN) {
        return None;
    }
    let mut addr = [0u8; 16];
    addr.copy_from_slice(&r[8..24]);
    let key = CacheKey {
        addr,
        ip_version: r[5],
        vlan: u16::from_le_bytes([r[6], r[7]]),
    };
    let u = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes"));
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&r[25..31]);
    let host = CachedHost {
        mac: (r[24] == 1).then_some(mac),
        sent_pkts: u(32),
        sent_bytes: u(40),
        rcvd_pkts: u(48),
        rcvd_bytes: u(56),
        first_ns: u(64),
        last_ns: u(72),
        flows_as_client: u32::from_le_bytes(r[80..84].try_into().expect("4 bytes")),
        flows_as_server: u32::from_le_bytes(r[84..88].try_into().expect("4 bytes")),
    };
    Some((r[4], key, host))
}

/// Hosts a cache keeps unless told otherwise: about 61 MB of index and 208 MB of log at most
/// (see the module's "Bounds").
pub const DEFAULT_MAX_ENTRIES: usize = 1_000_000;

/// The largest capacity: record numbers are u32, and the log holds at most about twice as many
/// records as the capacity (see [`HostCache::compact_if_mostly_dead`]).
pub const MAX_ENTRIES_LIMIT: usize = 1 << 30;

/// Bytes of records [`HostCache::put_many`] holds before it writes them (4096 records).
const PUT_WRITE: usize = 4096 * RECORD;

/// The log is not rewritten below this size, however much of it is dead.
const COMPACT_FLOOR: u64 = 64 << 20;

/// Where a host's record is and when the host was last seen, kept in the index so that choosing
/// whom to evict reads nothing from disk. u32s keep an index entry at 28 bytes (a u64 offset
/// would pad it to 40).
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Record number: the record is at `HEADER + rec × RECORD`.
    rec: u32,
    /// `last_ns` in seconds.
    last_s: u32,
}

/// The index's hash: foldhash, seeded at random per process, so addresses chosen by an attacker
/// cannot be made to collide, at a fraction of SipHash's cost (which was 9% of a million-host
/// shutdown).
type IndexHash = foldhash::fast::RandomState;

fn seconds(ns: u64) -> u32 {
    u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX)
}

fn offset(rec: u32) -> u64 {
    HEADER + rec as u64 * RECORD as u64
}

/// The cache of one data directory. Not shared between processes.
pub struct HostCache {
    path: PathBuf,
    file: File,
    len: u64,
    index: HashMap<CacheKey, Entry, IndexHash>,
    max_entries: usize,
    /// The log is not compacted below this size (a field so that tests can lower it).
    compact_floor: u64,
    /// Hosts put and taken back since opening.
    pub stored: u64,
    pub restored: u64,
    /// Hosts dropped, seen longest ago, to keep the cache within its capacity (at a `put` of a
    /// new host into a full cache, or when opening one that holds more than its capacity).
    pub evicted: u64,
    /// Bytes of a torn record cut off the end when the cache was opened.
    pub recovered_torn_bytes: u64,
}

impl HostCache {
    /// Opens (or creates) the cache of `data_dir` with [`DEFAULT_MAX_ENTRIES`].
    pub fn open(data_dir: &Path) -> Result<HostCache, StoreError> {
        HostCache::open_with_capacity(data_dir, DEFAULT_MAX_ENTRIES)
    }

    /// Opens (or creates) the cache of `data_dir`, holding at most `max_entries` hosts (1 to
    /// [`MAX_ENTRIES_LIMIT`]; others are brought into that range). Hosts beyond that already in
    /// the log are evicted, the longest unseen first.
    pub fn open_with_capacity(
        data_dir: &Path,
        max_entries: usize,
    ) -> Result<HostCache, StoreError> {
        prepare_data_dir(data_dir, true)?;
        let dir = data_dir.join("hosts");
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |err| StoreError::Io { path: p, err }
        };
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        for e in fs::read_dir(&dir).map_err(io(&dir))?.filter_map(Result::ok) {
            let name = e.file_name();
            if name != "cache.log" && name != "cache.log.tmp" {
                return Err(StoreError::Foreign {
                    path: e.path(),
                    why: "not a file of the host cache".into(),
                });
            }
        }
        let path = dir.join("cache.log");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        let mut len = file.metadata().map_err(io(&path))?.len();
        if len < HEADER {
            let mut h = [0u8; HEADER as usize];
            h[..8].copy_from_slice(MAGIC);
            h[8..12].copy_from_slice(&VERSION.to_le_bytes());
            file.set_len(0).map_err(io(&path))?;
            file.write_all_at(&h, 0).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
            len = HEADER;
        }
        let mut h = [0u8; HEADER as usize];
        file.read_exact_at(&mut h, 0).map_err(io(&path))?;
        if &h[..8] != MAGIC || u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) != VERSION
        {
            return Err(StoreError::Foreign {
                path,
                why: "not a sonde host cache of this version".into(),
            });
        }
        if (len - HEADER) / RECORD as u64 > u32::MAX as u64 {
            return Err(StoreError::Corrupt {
                path,
                offset: len,
                why: "host cache log too large to index".into(),
            });
        }
        // Read in pieces: the log can be a few hundred MB, which need not all be in memory.
        let mut reader = BufReader::with_capacity(1 << 20, &file);
        reader.seek(SeekFrom::Start(HEADER)).map_err(io(&path))?;
        let mut index = HashMap::with_hasher(IndexHash::default());
        let mut at = HEADER;
        let mut torn = 0;
        let mut buf = [0u8; RECORD];
        while at < len {
            let whole = at + RECORD as u64 <= len;
            if whole {
                reader.read_exact(&mut buf).map_err(io(&path))?;
            }
            match whole.then(|| decode(&buf)).flatten() {
                Some((KIND_HOST, key, host)) => {
                    let rec = ((at - HEADER) / RECORD as u64) as u32;
                    let last_s = seconds(host.last_ns);
                    index.insert(key, Entry { rec, last_s });
                }
                Some((_, key, _)) => {
                    index.remove(&key);
                }
                None if at + RECORD as u64 >= len => {
                    // The last record, cut by a crash: gone with what it was writing.
                    torn = len - at;
                    file.set_len(at).map_err(io(&path))?;
                    file.sync_all().map_err(io(&path))?;
                    len = at;
                    break;
                }
                None => {
                    return Err(StoreError::Corrupt {
                        path,
                        offset: at,
                        why: "host record fails its checksum".into(),
                    })
                }
            }
            at += RECORD as u64;
        }
        drop(reader);
        let mut cache = HostCache {
            path,
            file,
            len,
            index,
            max_entries: max_entries.clamp(1, MAX_ENTRIES_LIMIT),
            compact_floor: COMPACT_FLOOR,
            stored: 0,
            restored: 0,
            evicted: 0,
            recovered_torn_bytes: torn,
        };
        let over = cache.index.len().saturating_sub(cache.max_entries);
        if over > 0 {
            // No "taken back" records (there may be many): the rewritten log leaves them out,
            // and a crash before it is in place leaves the old log, evicted from again.
            cache.evict_oldest(over, false)?;
            cache.index.shrink_to_fit();
            cache.compact()?;
        }
        Ok(cache)
    }

    /// Hosts in the cache.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The most hosts the cache holds.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    fn err(&self) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
        move |err| StoreError::Io {
            path: self.path.clone(),
            err,
        }
    }

    fn read_at(&self, off: u64) -> Result<CachedHost, StoreError> {
        let mut r = [0u8; RECORD];
        self.file.read_exact_at(&mut r, off).map_err(self.err())?;
        decode(&r)
            .map(|(_, _, h)| h)
            .ok_or_else(|| StoreError::Corrupt {
                path: self.path.clone(),
                offset: off,
                why: "host record fails its checksum".into(),
            })
    }

    /// Appends records (already encoded, one after the other); returns the number of the first.
    fn append(&mut self, records: &[u8]) -> Result<u32, StoreError> {
        let at = self.len;
        self.file.write_all_at(records, at).map_err(self.err())?;
        self.len += records.len() as u64;
        // compact_if_mostly_dead keeps the log well under 2^32 records.
        Ok(((at - HEADER) / RECORD as u64) as u32)
    }

    /// Keeps a host that left memory; one already cached (seen by another shard, say) is added
    /// to. A new host in a full cache first makes room (see the module's "Bounds").
    pub fn put(&mut self, key: &CacheKey, host: &CachedHost) -> Result<(), StoreError> {
        self.put_many([(key, *host)])
    }

    /// [`HostCache::put`] for many hosts, their records appended in one write: a shard hands
    /// over thousands at once (all it holds, at the end), and a write each was most of the
    /// cost of a million-host shutdown.
    pub fn put_many<'k>(
        &mut self,
        hosts: impl IntoIterator<Item = (&'k CacheKey, CachedHost)>,
    ) -> Result<(), StoreError> {
        self.put_many_with(hosts, |_| {})
    }

    /// [`HostCache::put_many`], telling `merged` each host's counters as the cache now holds
    /// them (this stay added to those before it), in the order given.
    pub fn put_many_with<'k>(
        &mut self,
        hosts: impl IntoIterator<Item = (&'k CacheKey, CachedHost)>,
        mut merged: impl FnMut(&CachedHost),
    ) -> Result<(), StoreError> {
        // Records not written yet; they follow the log's end (`self.len`).
        let mut pending: Vec<u8> = Vec::new();
        for (key, mut h) in hosts {
            match self.index.get(key) {
                Some(e) if offset(e.rec) >= self.len => {
                    // Put earlier in this batch: its record is still here.
                    let at = (offset(e.rec) - self.len) as usize;
                    let rec: &[u8; RECORD] = pending[at..at + RECORD].try_into().expect("record");
                    let (_, _, before) = decode(rec).expect("a record this batch encoded");
                    h.merge(&before);
                }
                Some(e) => h.merge(&self.read_at(offset(e.rec))?),
                None if self.index.len() >= self.max_entries => {
                    // Eviction appends its own records: the pending ones go first.
                    self.append(&std::mem::take(&mut pending))?;
                    self.evict_oldest((self.max_entries / 16).max(1), true)?;
                }
                None => {}
            }
            let rec = ((self.len + pending.len() as u64 - HEADER) / RECORD as u64) as u32;
            pending.extend_from_slice(&encode(KIND_HOST, key, &h));
            merged(&h);
            let last_s = seconds(h.last_ns);
            self.index.insert(*key, Entry { rec, last_s });
            self.stored += 1;
            if pending.len() >= PUT_WRITE {
                // A purge of a million idle hosts is one call: written in pieces.
                self.append(&std::mem::take(&mut pending))?;
            }
        }
        self.append(&pending)?;
        self.compact_if_mostly_dead()
    }

    /// Takes a returning host's counters out of the cache.
    pub fn take(&mut self, key: &CacheKey) -> Result<Option<CachedHost>, StoreError> {
        let Some(e) = self.index.remove(key) else {
            return Ok(None);
        };
        let h = self.read_at(offset(e.rec))?;
        self.append(&encode(KIND_TAKEN, key, &CachedHost::default()))?;
        self.restored += 1;
        self.compact_if_mostly_dead()?;
        Ok(Some(h))
    }

    /// Drops the `n` hosts seen longest ago, with a "taken back" record each when `mark` (else
    /// the caller must compact before the log is read again).
    fn evict_oldest(&mut self, n: usize, mark: bool) -> Result<(), StoreError> {
        let n = n.min(self.index.len());
        if n == 0 {
            return Ok(());
        }
        // The n-th oldest second, found in O(len) without sorting (4 bytes an entry, briefly);
        // all older hosts go, and as many of that second as it takes to make n.
        let mut seen: Vec<u32> = self.index.values().map(|e| e.last_s).collect();
        let (older, &mut cut, _) = seen.select_nth_unstable(n - 1);
        let mut ties = n - older.iter().filter(|&&s| s < cut).count();
        drop(seen);
        let mut out = Vec::with_capacity(if mark { n * RECORD } else { 0 });
        self.index.retain(|k, e| {
            let go = e.last_s < cut || (e.last_s == cut && ties > 0);
            if go && e.last_s == cut {
                ties -= 1;
            }
            if go && mark {
                out.extend_from_slice(&encode(KIND_TAKEN, k, &CachedHost::default()));
            }
            !go
        });
        self.append(&out)?;
        self.evicted += n as u64;
        Ok(())
    }

    /// Makes what was put and taken durable.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.file.sync_data().map_err(self.err())
    }

    /// Rewrites the log when dead records (replaced, taken back, evicted) are more than half of
    /// it. Run after every write, so the log never holds more than about twice the live records
    /// (or `compact_floor`): bounded by the capacity, and record numbers fit a u32.
    fn compact_if_mostly_dead(&mut self) -> Result<(), StoreError> {
        let live = self.index.len() as u64 * RECORD as u64;
        if self.len > self.compact_floor && self.len > 2 * (live + HEADER) {
            self.compact()?;
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<(), StoreError> {
        let tmp = self.path.with_extension("log.tmp");
        let io = |err| StoreError::Io {
            path: tmp.clone(),
            err,
        };
        // In the order of the old log; a host's new record number is its place in this list.
        let mut live: Vec<(u32, CacheKey)> = self.index.iter().map(|(k, e)| (e.rec, *k)).collect();
        live.sort_unstable_by_key(|e| e.0);
        // Streamed, not built in memory: a full default cache is 104 MB of records.
        let mut f = BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(io)?);
        let mut header = [0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        f.write_all(&header).map_err(io)?;
        for (rec, k) in &live {
            let h = self.read_at(offset(*rec))?;
            f.write_all(&encode(KIND_HOST, k, &h)).map_err(io)?;
        }
        let f = f.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, &self.path).map_err(self.err())?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(self.err())?;
        // The index changes only once the new log is in place.
        for (new, (_, k)) in live.iter().enumerate() {
            if let Some(e) = self.index.get_mut(k) {
                e.rec = new as u32;
            }
        }
        self.len = offset(live.len() as u32);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> CacheKey {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&i.to_be_bytes());
        CacheKey {
            addr,
            ip_version: 4,
            vlan: (i % 3) as u16,
        }
    }

    fn host(i: u64) -> CachedHost {
        CachedHost {
            mac: i.is_multiple_of(2).then_some([1, 2, 3, 4, 5, i as u8]),
            sent_pkts: i,
            sent_bytes: i * 100,
            rcvd_pkts: i + 1,
            rcvd_bytes: i * 50,
            first_ns: 1000 + i,
            last_ns: 5000 + i,
            flows_as_client: i as u32,
            flows_as_server: 1,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sonde-hostcache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn hosts_come_back_once_across_reopens() {
        let dir = tmp("basic");
        let mut c = HostCache::open(&dir).unwrap();
        for i in 0..1000 {
            c.put(&key(i), &host(i as u64)).unwrap();
        }
        // Two stays of the same host add up.
        c.put(&key(7), &host(7)).unwrap();
        c.checkpoint().unwrap();
        drop(c);
        let mut c = HostCache::open(&dir).unwrap();
        assert_eq!(c.len(), 1000);
        let mut twice = host(7);
        twice.merge(&host(7));
        assert_eq!(c.take(&key(7)).unwrap(), Some(twice));
        assert_eq!(twice.sent_bytes, 1400);
        assert_eq!(c.take(&key(7)).unwrap(), None, "taken back once");
        assert_eq!(c.take(&key(5)).unwrap(), Some(host(5)));
        c.checkpoint().unwrap();
        drop(c);
        let mut c = HostCache::open(&dir).unwrap();
        assert_eq!(c.len(), 998);
        assert_eq!(c.take(&key(5)).unwrap(), None);
        assert_eq!(c.take(&key(999)).unwrap(), Some(host(999)));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn torn_tail_is_cut_and_corruption_is_named() {
        let dir = tmp("torn");
        let mut c = HostCache::open(&dir).unwrap();
        for i in 0..10 {
            c.put(&key(i), &host(i as u64)).unwrap();
        }
        c.checkpoint().unwrap();
        drop(c);
        let log = dir.join("hosts/cache.log");
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[9u8; 50]).unwrap();
        drop(f);
        let c = HostCache::open(&dir).unwrap();
        assert_eq!((c.len(), c.recovered_torn_bytes), (10, 50));
        drop(c);
        let mut raw = fs::read(&log).unwrap();
        raw[HEADER as usize + RECORD + 40] ^= 1;
        fs::write(&log, raw).unwrap();
        let e = HostCache::open(&dir).err().unwrap();
        assert!(e.to_string().contains("cache.log"), "{e}");
        fs::write(dir.join("hosts/other.db"), "x").unwrap();
        let e = HostCache::open(&dir).err().unwrap();
        assert!(e.to_string().contains("other.db"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compaction_keeps_the_live_hosts() {
        let dir = tmp("compact");
        let mut c = HostCache::open(&dir).unwrap();
        for i in 0..100 {
            c.put(&key(i), &host(i as u64)).unwrap();
        }
        for i in 0..90 {
            c.take(&key(i)).unwrap();
        }
        c.compact().unwrap();
        assert_eq!(c.len, HEADER + 10 * RECORD as u64);
        drop(c);
        let mut c = HostCache::open(&dir).unwrap();
        assert_eq!(c.len(), 10);
        assert_eq!(c.take(&key(95)).unwrap(), Some(host(95)));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A host last seen at second `s`.
    fn seen_at(s: u64) -> CachedHost {
        CachedHost {
            sent_pkts: s + 1,
            first_ns: s * 1_000_000_000,
            last_ns: s * 1_000_000_000,
            ..CachedHost::default()
        }
    }

    fn keys(c: &HostCache) -> Vec<CacheKey> {
        let mut k: Vec<CacheKey> = c.index.keys().copied().collect();
        k.sort_unstable_by_key(|k| (k.addr, k.vlan));
        k
    }

    #[test]
    fn index_entries_stay_small() {
        // The memory figures of the module's doc rest on this.
        assert_eq!(std::mem::size_of::<(CacheKey, Entry)>(), 28);
    }

    #[test]
    fn capacity_is_kept_and_the_latest_seen_stay() {
        let dir = tmp("cap");
        let mut c = HostCache::open_with_capacity(&dir, 160).unwrap();
        let n = 5000u32;
        for i in 0..n {
            c.put(&key(i), &seen_at(i as u64)).unwrap();
            assert!(c.len() <= 160, "{} hosts after {i} puts", c.len());
        }
        // Batches of 160 / 16 = 10: between 150 and 160 hosts stay.
        assert!(c.len() >= 150, "{}", c.len());
        assert_eq!(c.stored, n as u64);
        assert_eq!(c.evicted, (n as usize - c.len()) as u64);
        // Exactly the latest seen.
        let kept = c.len() as u32;
        let mut want: Vec<CacheKey> = (n - kept..n).map(key).collect();
        want.sort_unstable_by_key(|k| (k.addr, k.vlan));
        assert_eq!(keys(&c), want);
        assert_eq!(c.take(&key(n - 1)).unwrap(), Some(seen_at(n as u64 - 1)));
        assert_eq!(c.take(&key(n - kept - 1)).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn eviction_goes_by_last_seen_not_by_when_put() {
        let dir = tmp("order");
        let mut c = HostCache::open_with_capacity(&dir, 32).unwrap();
        // Put newest first: the oldest are the last put.
        for i in (0..32).rev() {
            c.put(&key(i), &seen_at(100 + i as u64)).unwrap();
        }
        // Host 0 is seen again (a later stay, merged): it is no longer the oldest.
        c.put(&key(0), &seen_at(1000)).unwrap();
        // Host 31 comes back with an older stay: it was still seen last at 131.
        c.put(&key(31), &seen_at(5)).unwrap();
        assert_eq!((c.len(), c.evicted), (32, 0));
        // A new host into the full cache evicts 32 / 16 = 2: hosts 1 and 2.
        c.put(&key(99), &seen_at(10)).unwrap();
        assert_eq!((c.len(), c.evicted), (31, 2));
        assert!(!c.index.contains_key(&key(1)) && !c.index.contains_key(&key(2)));
        let mut both = seen_at(100);
        both.merge(&seen_at(1000));
        assert_eq!(c.take(&key(0)).unwrap(), Some(both));
        // Hosts of the same second: exactly the batch goes.
        let ties = tmp("ties");
        let mut c = HostCache::open_with_capacity(&ties, 16).unwrap();
        for i in 0..16 {
            c.put(&key(i), &seen_at(7)).unwrap();
        }
        c.put(&key(16), &seen_at(7)).unwrap();
        assert_eq!((c.len(), c.evicted), (16, 1));
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&ties).unwrap();
    }

    #[test]
    fn reopen_after_eviction_has_the_same_hosts() {
        let dir = tmp("reopen");
        let mut c = HostCache::open_with_capacity(&dir, 64).unwrap();
        for i in 0..1000u32 {
            // Not in order of last seen, and some hosts twice.
            let s = (i as u64 * 7919) % 1000;
            c.put(&key(i % 700), &seen_at(s)).unwrap();
        }
        c.take(&key(999 % 700)).unwrap();
        c.checkpoint().unwrap();
        let before = keys(&c);
        let counters: Vec<CachedHost> = before
            .iter()
            .map(|k| c.read_at(offset(c.index[k].rec)).unwrap())
            .collect();
        assert!(c.evicted > 0 && before.len() <= 64);
        drop(c);
        let mut c = HostCache::open_with_capacity(&dir, 64).unwrap();
        assert_eq!(keys(&c), before, "the evicted stay evicted");
        assert_eq!(c.evicted, 0);
        for (k, h) in before.iter().zip(&counters) {
            assert_eq!(c.take(k).unwrap().as_ref(), Some(h));
        }
        drop(c);
        // A lower capacity than last time evicts at opening, and that too is kept.
        let mut c = HostCache::open_with_capacity(&dir, 64).unwrap();
        assert!(c.is_empty());
        for i in 0..64 {
            c.put(&key(i), &seen_at(i as u64)).unwrap();
        }
        drop(c);
        let c = HostCache::open_with_capacity(&dir, 10).unwrap();
        assert_eq!((c.len(), c.evicted), (10, 54));
        assert_eq!(
            fs::metadata(dir.join("hosts/cache.log")).unwrap().len(),
            offset(10)
        );
        let mut want: Vec<CacheKey> = (54..64).map(key).collect();
        want.sort_unstable_by_key(|k| (k.addr, k.vlan));
        assert_eq!(keys(&c), want);
        drop(c);
        let c = HostCache::open(&dir).unwrap();
        assert_eq!(keys(&c), want);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_tells_each_hosts_totals() {
        let dir = tmp("merged");
        let mut c = HostCache::open(&dir).unwrap();
        c.put(&key(1), &host(1)).unwrap();
        let batch = [(key(1), host(2)), (key(2), host(3)), (key(1), host(4))];
        let mut told = Vec::new();
        c.put_many_with(batch.iter().map(|(k, h)| (k, *h)), |h| told.push(*h))
            .unwrap();
        // The newer stay's MAC wins.
        let mut once = host(2);
        once.merge(&host(1));
        let mut twice = host(4);
        twice.merge(&once);
        assert_eq!(told, [once, host(3), twice]);
        assert_eq!(c.take(&key(1)).unwrap(), Some(twice));
        assert_eq!(c.take(&key(2)).unwrap(), Some(host(3)));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_is_the_same_as_one_put_at_a_time() {
        // Repeats inside the batch, hosts cached before it, and a full cache that evicts in
        // the middle of it: what one write of the batch leaves equals what a put each leaves.
        let (one, many) = (tmp("one-by-one"), tmp("batch"));
        let mut a = HostCache::open_with_capacity(&one, 64).unwrap();
        let mut b = HostCache::open_with_capacity(&many, 64).unwrap();
        let before: Vec<(CacheKey, CachedHost)> =
            (0..40).map(|i| (key(i), seen_at(i as u64))).collect();
        let batch: Vec<(CacheKey, CachedHost)> = (30..90)
            .chain(35..45)
            .map(|i| (key(i), seen_at(100 + i as u64)))
            .collect();
        for (k, h) in before.iter().chain(&batch) {
            a.put(k, h).unwrap();
        }
        b.put_many(before.iter().map(|(k, h)| (k, *h))).unwrap();
        b.put_many(batch.iter().map(|(k, h)| (k, *h))).unwrap();
        assert_eq!(keys(&a), keys(&b));
        assert_eq!((a.evicted, a.stored), (b.evicted, b.stored));
        assert!(a.evicted > 0, "the batch filled the cache");
        drop(b);
        let mut b = HostCache::open_with_capacity(&many, 64).unwrap();
        for k in keys(&a) {
            assert_eq!(a.take(&k).unwrap(), b.take(&k).unwrap(), "{k:?}");
        }
        fs::remove_dir_all(&one).unwrap();
        fs::remove_dir_all(&many).unwrap();
    }

    #[test]
    fn a_batch_larger_than_one_write_is_the_same_too() {
        // 12,000 puts in one batch, written in pieces: repeats land on both sides of a piece.
        let (one, many) = (tmp("one-by-one-big"), tmp("batch-big"));
        let mut a = HostCache::open(&one).unwrap();
        let mut b = HostCache::open(&many).unwrap();
        let batch: Vec<(CacheKey, CachedHost)> = (0..6000)
            .chain(0..6000)
            .map(|i| (key(i), host(i as u64)))
            .collect();
        for (k, h) in &batch {
            a.put(k, h).unwrap();
        }
        b.put_many(batch.iter().map(|(k, h)| (k, *h))).unwrap();
        assert_eq!((a.len(), b.len(), b.stored), (6000, 6000, 12_000));
        drop(b);
        let mut b = HostCache::open(&many).unwrap();
        for i in (0..6000).step_by(7) {
            let got = b.take(&key(i)).unwrap();
            assert_eq!(got, a.take(&key(i)).unwrap());
            assert_eq!(
                got.map(|h| h.sent_pkts),
                Some(2 * i as u64),
                "two stays added"
            );
        }
        fs::remove_dir_all(&one).unwrap();
        fs::remove_dir_all(&many).unwrap();
    }

    #[test]
    fn log_stays_bounded_under_churn() {
        let dir = tmp("bounded");
        let log = dir.join("hosts/cache.log");
        let cap = 100;
        let mut c = HostCache::open_with_capacity(&dir, cap).unwrap();
        c.compact_floor = 0;
        let bound = 2 * (cap as u64 * RECORD as u64 + HEADER);
        for i in 0..20_000u32 {
            c.put(&key(i), &seen_at(i as u64)).unwrap();
            if i % 3 == 0 {
                // Returning hosts too: taken back, then put again.
                c.take(&key(i)).unwrap();
                c.put(&key(i), &seen_at(i as u64)).unwrap();
            }
            let on_disk = fs::metadata(&log).unwrap().len();
            assert_eq!(on_disk, c.len);
            assert!(on_disk <= bound, "{on_disk} bytes after {i} hosts");
        }
        assert_eq!(c.evicted, 20_000 - c.len() as u64);
        let before = keys(&c);
        drop(c);
        let c = HostCache::open_with_capacity(&dir, cap).unwrap();
        assert_eq!(keys(&c), before);
        fs::remove_dir_all(&dir).unwrap();
    }
}
