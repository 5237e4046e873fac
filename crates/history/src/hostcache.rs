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
//! an index from key to the offset of its record. Opening cuts off a torn last record (a crash
//! during a write); a bad record before the end is corruption, reported with its offset. The
//! log is rewritten without dead records when they are more than half of it.

use crate::store::{prepare_data_dir, StoreError};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
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

/// The cache of one data directory. Not shared between processes.
pub struct HostCache {
    path: PathBuf,
    file: File,
    len: u64,
    index: HashMap<CacheKey, u64>,
    /// Hosts put and taken back since opening.
    pub stored: u64,
    pub restored: u64,
    /// Bytes of a torn record cut off the end when the cache was opened.
    pub recovered_torn_bytes: u64,
}

impl HostCache {
    pub fn open(data_dir: &Path) -> Result<HostCache, StoreError> {
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
        let mut file = OpenOptions::new()
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
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(io(&path))?;
        if &data[..8] != MAGIC
            || u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")) != VERSION
        {
            return Err(StoreError::Foreign {
                path,
                why: "not a sonde host cache of this version".into(),
            });
        }
        let mut index = HashMap::new();
        let mut at = HEADER as usize;
        let mut torn = 0;
        while at < data.len() {
            let rec: Option<&[u8; RECORD]> =
                data.get(at..at + RECORD).and_then(|r| r.try_into().ok());
            match rec.and_then(decode) {
                Some((KIND_HOST, key, _)) => {
                    index.insert(key, at as u64);
                }
                Some((_, key, _)) => {
                    index.remove(&key);
                }
                None if at + RECORD >= data.len() => {
                    // The last record, cut by a crash: gone with what it was writing.
                    torn = (data.len() - at) as u64;
                    file.set_len(at as u64).map_err(io(&path))?;
                    file.sync_all().map_err(io(&path))?;
                    len = at as u64;
                    break;
                }
                None => {
                    return Err(StoreError::Corrupt {
                        path,
                        offset: at as u64,
                        why: "host record fails its checksum".into(),
                    })
                }
            }
            at += RECORD;
        }
        Ok(HostCache {
            path,
            file,
            len,
            index,
            stored: 0,
            restored: 0,
            recovered_torn_bytes: torn,
        })
    }

    /// Hosts in the cache.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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

    fn append(&mut self, kind: u8, key: &CacheKey, h: &CachedHost) -> Result<u64, StoreError> {
        let at = self.len;
        self.file
            .write_all_at(&encode(kind, key, h), at)
            .map_err(self.err())?;
        self.len += RECORD as u64;
        Ok(at)
    }

    /// Keeps a host that left memory; one already cached (seen by another shard, say) is added
    /// to.
    pub fn put(&mut self, key: &CacheKey, host: &CachedHost) -> Result<(), StoreError> {
        let mut h = *host;
        if let Some(&off) = self.index.get(key) {
            h.merge(&self.read_at(off)?);
        }
        let at = self.append(KIND_HOST, key, &h)?;
        self.index.insert(*key, at);
        self.stored += 1;
        Ok(())
    }

    /// Takes a returning host's counters out of the cache.
    pub fn take(&mut self, key: &CacheKey) -> Result<Option<CachedHost>, StoreError> {
        let Some(off) = self.index.remove(key) else {
            return Ok(None);
        };
        let h = self.read_at(off)?;
        self.append(KIND_TAKEN, key, &CachedHost::default())?;
        self.restored += 1;
        Ok(Some(h))
    }

    /// Makes what was put and taken durable; rewrites the log when most of it is dead.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        let live = self.index.len() as u64 * RECORD as u64;
        if self.len > 64 << 20 && self.len > 2 * (live + HEADER) {
            self.compact()?;
        }
        self.file.sync_data().map_err(self.err())
    }

    fn compact(&mut self) -> Result<(), StoreError> {
        let tmp = self.path.with_extension("log.tmp");
        let io = |err| StoreError::Io {
            path: tmp.clone(),
            err,
        };
        let mut out = Vec::with_capacity(HEADER as usize + self.index.len() * RECORD);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        let mut entries: Vec<(CacheKey, u64)> = self.index.iter().map(|(k, o)| (*k, *o)).collect();
        entries.sort_unstable_by_key(|e| e.1);
        let mut index = HashMap::with_capacity(entries.len());
        for (k, off) in entries {
            let h = self.read_at(off)?;
            index.insert(k, out.len() as u64);
            out.extend_from_slice(&encode(KIND_HOST, &k, &h));
        }
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&out).map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, &self.path).map_err(self.err())?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(self.err())?;
        self.len = out.len() as u64;
        self.index = index;
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
}
