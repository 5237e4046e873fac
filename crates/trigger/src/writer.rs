//! The writer thread: one pcap file per alert and link type, closed and flushed when every
//! shard is done with a released alert, or when a cap cuts it.

use crate::{lock, name, Cap, CaptureFile, Chunk, Engaged, Msg, Shared};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use sonde_wire::LinkType;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PCAP_HEADER: u64 = 24;
const RECORD_HEADER: u64 = 16;

/// A classic pcap file (microsecond timestamps), flushed on demand so a download of a file
/// still being written reads whole records.
struct PcapFile {
    out: BufWriter<File>,
}

impl PcapFile {
    fn create(path: &Path, link: LinkType) -> std::io::Result<PcapFile> {
        use std::os::unix::fs::OpenOptionsExt;
        // Never over an existing file or through a link; readable by the owner only (it holds
        // other people's traffic).
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mut out = BufWriter::with_capacity(256 << 10, f);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&262_144u32.to_le_bytes());
        h.extend_from_slice(&link.to_linktype().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapFile { out })
    }

    fn write(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> std::io::Result<()> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(((ts_ns % 1_000_000_000) / 1000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.max(data.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    fn close(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

struct OneFile {
    link: LinkType,
    /// None once closed.
    w: Option<PcapFile>,
    /// Index in the alert's list of [`CaptureFile`]s.
    index: usize,
    bytes: u64,
    packets: u64,
    dirty: bool,
}

struct Capture {
    e: Arc<Engaged>,
    stem: String,
    files: Vec<OneFile>,
    /// Shards done with it.
    done: Vec<usize>,
    released: bool,
    opened: Instant,
}

struct Writer {
    shared: Arc<Shared>,
    open: HashMap<u64, Capture>,
    gone: Vec<usize>,
}

pub(crate) fn run(shared: Arc<Shared>, rx: Receiver<Msg>) {
    let mut w = Writer {
        shared,
        open: HashMap::new(),
        gone: Vec::new(),
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Msg::Open(e)) => w.open(e),
            Ok(Msg::Packets(chunk)) => w.packets(chunk),
            Ok(Msg::Released(id)) => {
                if let Some(c) = w.open.get_mut(&id) {
                    c.released = true;
                }
                w.settle(id);
            }
            Ok(Msg::Done { shard, id }) => {
                if let Some(c) = w.open.get_mut(&id) {
                    c.done.push(shard);
                }
                w.settle(id);
            }
            Ok(Msg::Gone(shard)) => {
                w.gone.push(shard);
                let ids: Vec<u64> = w.open.keys().copied().collect();
                for id in ids {
                    w.settle(id);
                }
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => w.idle(),
        }
    }
    let ids: Vec<u64> = w.open.keys().copied().collect();
    for id in ids {
        w.close(id, None);
    }
}

impl Writer {
    fn open(&mut self, e: Arc<Engaged>) {
        let stem = name::file_stem(e.id, &e.kind, &e.entity);
        let mut c = Capture {
            e,
            stem,
            files: Vec::new(),
            done: Vec::new(),
            released: false,
            opened: Instant::now(),
        };
        let link = *lock(&self.shared.link_hint);
        self.new_file(&mut c, link);
        let id = c.e.id;
        self.open.insert(id, c);
    }

    /// A new file of the capture for `link`; false when it could not be created.
    fn new_file(&mut self, c: &mut Capture, link: LinkType) -> bool {
        let dir = &self.shared.cfg.dir;
        let base = if c.files.is_empty() {
            c.stem.clone()
        } else {
            format!("{}-{}", c.stem, name::sanitise(link.name()))
        };
        let mut created = None;
        let mut last_err = None;
        for n in 0..100 {
            let file_name = if n == 0 {
                format!("{base}.pcap")
            } else {
                format!("{base}-{n}.pcap")
            };
            let path = dir.join(&file_name);
            match PcapFile::create(&path, link) {
                Ok(f) => {
                    created = Some((file_name, path, f));
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    last_err = Some((file_name, path, e));
                    break;
                }
            }
        }
        let mut files = lock(&self.shared.files);
        let list = files.entry(c.e.id).or_default();
        let entry = |name: String, path: PathBuf| CaptureFile {
            alert_id: c.e.id,
            alert_type: c.e.kind.clone(),
            name,
            path,
            link: link.name(),
            packets: 0,
            bytes: PCAP_HEADER,
            dropped: 0,
            complete: false,
            truncated_by: None,
            error: None,
        };
        let ok = match (created, last_err) {
            (Some((file_name, path, f)), _) => {
                list.push(entry(file_name, path));
                c.files.push(OneFile {
                    link,
                    w: Some(f),
                    index: list.len() - 1,
                    bytes: PCAP_HEADER,
                    packets: 0,
                    dirty: false,
                });
                self.shared.counters.files.fetch_add(1, Ordering::Relaxed);
                true
            }
            (None, err) => {
                let (file_name, path, why) = err.map_or_else(
                    || {
                        (
                            base.clone(),
                            dir.join(&base),
                            "too many files of that name".into(),
                        )
                    },
                    |(n, p, e)| (n, p, e.to_string()),
                );
                let mut f = entry(file_name, path);
                f.complete = true;
                f.bytes = 0;
                f.error = Some(why);
                list.push(f);
                c.files.push(OneFile {
                    link,
                    w: None,
                    index: list.len() - 1,
                    bytes: 0,
                    packets: 0,
                    dirty: false,
                });
                self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        drop(files);
        ok
    }

    fn packets(&mut self, chunk: Chunk) {
        let id = chunk.e.id;
        let Some(mut c) = self.open.remove(&id) else {
            return; // closed by a cap meanwhile
        };
        if c.e.closed.load(Ordering::Acquire) {
            self.open.insert(id, c);
            return;
        }
        let i = match c.files.iter().position(|f| f.link == chunk.link) {
            Some(i) => i,
            None => {
                self.new_file(&mut c, chunk.link);
                c.files.len() - 1
            }
        };
        let cfg = &self.shared.cfg;
        let deadline =
            c.e.start_ns
                .saturating_add(cfg.max_seconds.saturating_mul(1_000_000_000));
        let mut cap = None;
        let mut error = None;
        let mut written = 0;
        {
            let f = &mut c.files[i];
            if let Some(w) = f.w.as_mut() {
                let mut off = 0usize;
                for &(ts, orig, len) in &chunk.pkts {
                    let data = &chunk.bytes[off..off + len as usize];
                    off += len as usize;
                    if ts > deadline {
                        cap = Some(Cap::Seconds);
                        break;
                    }
                    let rec = RECORD_HEADER + u64::from(len);
                    if f.bytes + rec > cfg.max_bytes {
                        cap = Some(Cap::Bytes);
                        break;
                    }
                    if let Err(e) = w.write(ts, orig, data) {
                        error = Some(e.to_string());
                        break;
                    }
                    f.bytes += rec;
                    f.packets += 1;
                    written += 1;
                }
                f.dirty = true;
            }
        }
        self.shared
            .counters
            .written
            .fetch_add(written, Ordering::Relaxed);
        self.publish(&c);
        self.open.insert(id, c);
        if let Some(e) = error {
            self.shared.counters.errors.fetch_add(1, Ordering::Relaxed);
            self.cut(id, None, Some(e));
        } else if cap.is_some() {
            self.cut(id, cap, None);
        }
    }

    /// Counters of a capture's files to the API's list.
    fn publish(&self, c: &Capture) {
        let mut files = lock(&self.shared.files);
        if let Some(list) = files.get_mut(&c.e.id) {
            for f in &c.files {
                if let Some(cf) = list.get_mut(f.index) {
                    cf.packets = f.packets;
                    cf.bytes = f.bytes;
                    cf.dropped = c.e.dropped.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// A cap (or an error) ends a capture before its release: files closed now, shards told.
    fn cut(&mut self, id: u64, cap: Option<Cap>, error: Option<String>) {
        let Some(c) = self.open.get_mut(&id) else {
            return;
        };
        c.e.closed.store(true, Ordering::Release);
        if let Some(cap) = cap {
            let counter = match cap {
                Cap::Bytes => &self.shared.counters.capped_bytes,
                Cap::Seconds => &self.shared.counters.capped_seconds,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        self.close_files(id, cap, error);
        self.shared.bump();
        self.settle(id);
    }

    fn close_files(&mut self, id: u64, cap: Option<Cap>, error: Option<String>) {
        let Some(c) = self.open.get_mut(&id) else {
            return;
        };
        let mut results = Vec::new();
        for f in &mut c.files {
            if let Some(w) = f.w.take() {
                results.push((f.index, w.close().err().map(|e| e.to_string())));
            }
        }
        let dropped = c.e.dropped.load(Ordering::Relaxed);
        let mut files = lock(&self.shared.files);
        if let Some(list) = files.get_mut(&id) {
            for (index, err) in results {
                if let Some(cf) = list.get_mut(index) {
                    cf.complete = true;
                    cf.truncated_by = cap;
                    cf.dropped = dropped;
                    if cf.error.is_none() {
                        cf.error = err.or_else(|| error.clone());
                    }
                }
            }
        }
        // Bounded: the oldest alerts leave the list (their files stay on disk).
        while files.len() > crate::LISTED_ALERTS {
            let Some((&oldest, _)) = files.iter().next() else {
                break;
            };
            files.remove(&oldest);
        }
    }

    /// Ends a capture once it is released (or cut) and no shard will send more for it.
    fn settle(&mut self, id: u64) {
        let shards = self.shared.shards.load(Ordering::Acquire);
        let Some(c) = self.open.get(&id) else { return };
        let over = c.released || c.e.closed.load(Ordering::Acquire);
        let all_done = (0..shards).all(|s| c.done.contains(&s) || self.gone.contains(&s));
        if over && all_done {
            self.close(id, None);
        }
    }

    fn close(&mut self, id: u64, cap: Option<Cap>) {
        self.close_files(id, cap, None);
        if let Some(c) = self.open.remove(&id) {
            lock(&self.shared.engaged).retain(|e| e.id != c.e.id);
            self.shared.bump();
        }
    }

    /// Between messages: flushes what was written (so a file being written reads whole) and
    /// cuts captures past their time on the wall clock (no packets, no release).
    fn idle(&mut self) {
        let max = Duration::from_secs(self.shared.cfg.max_seconds);
        let mut late = Vec::new();
        for (id, c) in &mut self.open {
            for f in &mut c.files {
                if let (true, Some(w)) = (f.dirty, f.w.as_mut()) {
                    let _ = w.out.flush();
                    f.dirty = false;
                }
            }
            if !c.e.closed.load(Ordering::Acquire) && !c.released && c.opened.elapsed() > max {
                late.push(*id);
            }
        }
        for id in late {
            self.cut(id, Some(Cap::Seconds), None);
        }
    }
}
