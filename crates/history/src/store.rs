//! Flow history: every expired flow, appended to segment files under `DATA_DIR/flows/`.
//!
//! # On-disk layout (data directory version 1)
//!
//! ```text
//! DATA_DIR/VERSION                 "sonde-data 1\n"
//! DATA_DIR/flows/NNNNNNNNNN.sfl    segments, numbered in write order
//! DATA_DIR/flows/NNNNNNNNNN.sum    per-host and per-application totals of a closed segment
//!                                  ([`crate::totals`]), written when it closes
//! ```
//!
//! A segment starts with a 16-byte header (`SONDEFLW`, format version u32 LE, 4 reserved bytes)
//! followed by blocks. A block holds up to [`BLOCK_RECORDS`] records ([`crate::codec`]):
//!
//! ```text
//! magic u32 "FBLK" | body_len u32 | crc32 u32 (of everything after it) | count u32 |
//! min_first_ms u64 | max_last_ms u64 | bloom (the block's addresses) | records
//! ```
//!
//! The bloom filter is [`BLOOM_BYTES`] long in format 1. In format 2 its length follows the
//! block's record count ([`bloom_len`]: 2 bytes per record, a power of two from
//! [`MIN_BLOOM_BYTES`] to [`BLOOM_BYTES`]), because a checkpoint every second closes a block
//! however few flows it has, and on a quiet link fixed 8 KiB filters were most of the history.
//! New segments are written in format 2; a format 1 segment is read as it is and, when it is
//! the newest at start, appended to in format 1.
//!
//! Blocks are only appended. A checkpoint writes the open block and `fdatasync`s the segment:
//! what was checkpointed survives a kill -9 or a power cut. After a crash the end of the last
//! segment may hold a torn block; opening for writing cuts it off (that is the only repair, and
//! it is automatic). A bad block anywhere else is corruption and is reported with the file and
//! offset, never skipped silently. Readers of a running instance stop at a block still being
//! written at the end of the newest segment.
//!
//! Queries skip whole blocks by their time range and, for a host filter, by the bloom filter of
//! the block's addresses, then filter records by a partial decode before decoding matches fully.

use crate::codec::{self, Summary};
use sonde_flow::FlowRecord;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The data directory's format, in its `VERSION` file.
pub const DATA_DIR_VERSION: &str = "sonde-data 1\n";
const SEGMENT_MAGIC: &[u8; 8] = b"SONDEFLW";
/// The format new segments are written in; format 1 is still read (and appended to).
const SEGMENT_VERSION: u32 = 2;
const SEGMENT_HEADER: usize = 16;
const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"FBLK");
/// magic, body_len, crc.
const BLOCK_PREFIX: usize = 12;
/// count, min_first_ms, max_last_ms.
const BLOCK_FIXED: usize = 4 + 8 + 8;
/// Records per block: large enough that block headers are a small share, small enough that
/// a checkpoint every second writes little and a query skips in fine steps.
pub const BLOCK_RECORDS: usize = 4096;
/// Bloom filter of a block's addresses: 64 Kibit for up to 8192 addresses, 4 probes (about 2%
/// false positives when full): 2 bytes per record.
pub const BLOOM_BYTES: usize = 8192;
/// The smallest bloom filter of format 2 (a block of up to 32 records).
pub const MIN_BLOOM_BYTES: usize = 64;
const BLOOM_PROBES: u32 = 4;
/// A block body larger than this is not something sonde wrote.
const MAX_BLOCK_BODY: usize = 64 << 20;

/// How much history to keep.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// Segments whose newest flow ended longer ago than this are deleted (0: no age limit).
    pub max_age_ms: u64,
    /// The oldest segments are deleted while the flow history is larger (0: no size limit).
    pub max_bytes: u64,
    /// A new segment is started past this size; retention deletes whole segments.
    pub segment_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age_ms: 30 * 24 * 3600 * 1000,
            max_bytes: 10 << 30,
            segment_bytes: 64 << 20,
        }
    }
}

/// An error that names what is wrong and what to do.
#[derive(Debug)]
pub enum StoreError {
    Io {
        path: PathBuf,
        err: io::Error,
    },
    /// A file that is not sonde's, or of another format version.
    Foreign {
        path: PathBuf,
        why: String,
    },
    /// A block that fails its checks where no write can have been in progress.
    Corrupt {
        path: PathBuf,
        offset: u64,
        why: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            StoreError::Foreign { path, why } => write!(
                f,
                "{}: {why}; the data directory holds only sonde's files: move this one \
                 elsewhere (or use another --data-dir)",
                path.display()
            ),
            StoreError::Corrupt { path, offset, why } => write!(
                f,
                "{}: corrupted data at byte {offset} ({why}); what comes before it is \
                 readable: move the file aside to keep it and go on without it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StoreError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |err| StoreError::Io {
        path: path.to_path_buf(),
        err,
    }
}

/// Checks (or, for a new or empty directory, writes) `DATA_DIR/VERSION` and makes `flows/`.
pub fn prepare_data_dir(dir: &Path, create: bool) -> Result<PathBuf, StoreError> {
    let version = dir.join("VERSION");
    match fs::read(&version) {
        Ok(v) if v == DATA_DIR_VERSION.as_bytes() => {}
        Ok(v) => {
            return Err(StoreError::Foreign {
                path: version,
                why: format!(
                    "says {:?}, this sonde reads {:?}",
                    String::from_utf8_lossy(&v[..v.len().min(40)]).trim_end(),
                    DATA_DIR_VERSION.trim_end()
                ),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
            let foreign = fs::read_dir(dir)
                .map_err(io_err(dir))?
                .filter_map(Result::ok)
                .find(|e| !e.file_name().to_string_lossy().starts_with('.'));
            if let Some(e) = foreign {
                return Err(StoreError::Foreign {
                    path: e.path(),
                    why: "found in a data directory that has no VERSION file".into(),
                });
            }
            write_durably(&version, DATA_DIR_VERSION.as_bytes())?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StoreError::Foreign {
                path: version,
                why: "missing: this is not a sonde data directory (start sonde with \
                      --data-dir to make one)"
                    .into(),
            })
        }
        Err(e) => return Err(io_err(&version)(e)),
    }
    let flows = dir.join("flows");
    if create {
        fs::create_dir_all(&flows).map_err(io_err(&flows))?;
    }
    Ok(flows)
}

fn write_durably(path: &Path, data: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(data).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    if let Some(parent) = path.parent() {
        if let Ok(d) = File::open(parent) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// A segment on disk: its number, path, size and the time span of its blocks.
#[derive(Clone, Debug)]
pub struct Segment {
    pub number: u64,
    pub path: PathBuf,
    pub bytes: u64,
    pub records: u64,
    pub min_first_ms: u64,
    pub max_last_ms: u64,
}

impl Segment {
    /// Counts a block read back from the file, which ends the segment so far.
    fn add_block(&mut self, h: &BlockHeader) {
        self.records += h.count as u64;
        self.min_first_ms = self.min_first_ms.min(h.min_first_ms);
        self.max_last_ms = self.max_last_ms.max(h.max_last_ms);
        self.bytes = h.offset + (BLOCK_PREFIX + h.body_len) as u64;
    }

    /// A segment with no block yet (just its header).
    fn empty(number: u64, path: PathBuf) -> Segment {
        Segment {
            number,
            path,
            bytes: SEGMENT_HEADER as u64,
            records: 0,
            min_first_ms: u64::MAX,
            max_last_ms: 0,
        }
    }
}

/// Lists the segments of `flows_dir` in write order; anything else there is an error.
fn list_segments(flows_dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut out = Vec::new();
    for e in fs::read_dir(flows_dir).map_err(io_err(flows_dir))? {
        let e = e.map_err(io_err(flows_dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        // Per-segment totals (and one left half-written by a crash) belong to their segment.
        let numbered = |suffix: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|n| n.len() == 10 && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if numbered(".sum") || numbered(".sum.tmp") {
            continue;
        }
        let number = name
            .strip_suffix(".sfl")
            .filter(|n| n.len() == 10 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        match number {
            Some(n) => out.push((n, e.path())),
            None => {
                return Err(StoreError::Foreign {
                    path: e.path(),
                    why: "not a flow segment (NNNNNNNNNN.sfl)".into(),
                })
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn segment_path(flows_dir: &Path, number: u64) -> PathBuf {
    flows_dir.join(format!("{number:010}.sfl"))
}

/// One block's header as read from disk.
#[derive(Clone, Copy, Debug)]
struct BlockHeader {
    offset: u64,
    body_len: usize,
    crc: u32,
    count: u32,
    min_first_ms: u64,
    max_last_ms: u64,
    /// The bloom filter's length.
    bloom: usize,
}

impl BlockHeader {
    /// The body's byte range in the file.
    fn body_at(&self) -> u64 {
        self.offset + BLOCK_PREFIX as u64
    }
}

/// What a scan of a segment's blocks found.
enum Next {
    Block(BlockHeader),
    /// A clean end of file.
    End,
    /// Bytes at `offset` that are not a whole block (torn write, or corruption).
    Bad {
        offset: u64,
        why: String,
    },
}

fn read_block_header(f: &File, offset: u64, file_len: u64, version: u32) -> io::Result<Next> {
    if offset == file_len {
        return Ok(Next::End);
    }
    if file_len - offset < (BLOCK_PREFIX + BLOCK_FIXED) as u64 {
        return Ok(Next::Bad {
            offset,
            why: "a block header cut short".into(),
        });
    }
    // The prefix and the fixed fields in one read: a scan that skips the block by its time
    // range reads nothing else of it.
    let mut p = [0u8; BLOCK_PREFIX + BLOCK_FIXED];
    f.read_exact_at(&mut p, offset)?;
    let magic = u32::from_le_bytes(p[0..4].try_into().expect("4 bytes"));
    let body_len = u32::from_le_bytes(p[4..8].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(p[12..16].try_into().expect("4 bytes"));
    let min_first_ms = u64::from_le_bytes(p[16..24].try_into().expect("8 bytes"));
    let max_last_ms = u64::from_le_bytes(p[24..32].try_into().expect("8 bytes"));
    if magic != BLOCK_MAGIC {
        return Ok(Next::Bad {
            offset,
            why: "no block marker".into(),
        });
    }
    let bloom = bloom_len(version, count);
    if !(BLOCK_FIXED + bloom..=MAX_BLOCK_BODY).contains(&body_len) {
        return Ok(Next::Bad {
            offset,
            why: format!("impossible block length {body_len}"),
        });
    }
    if file_len - offset - (BLOCK_PREFIX as u64) < body_len as u64 {
        return Ok(Next::Bad {
            offset,
            why: "a block cut short".into(),
        });
    }
    Ok(Next::Block(BlockHeader {
        offset,
        body_len,
        crc,
        count,
        min_first_ms,
        max_last_ms,
        bloom,
    }))
}

/// The length of a block's bloom filter in segment format `version`.
pub fn bloom_len(version: u32, count: u32) -> usize {
    if version == 1 {
        return BLOOM_BYTES;
    }
    (count as usize)
        .saturating_mul(2)
        .next_power_of_two()
        .clamp(MIN_BLOOM_BYTES, BLOOM_BYTES)
}

/// Checks a segment's header and returns its format version.
fn check_segment_header(f: &mut File, path: &Path) -> Result<u32, StoreError> {
    let mut h = [0u8; SEGMENT_HEADER];
    f.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    if f.read_exact(&mut h).is_err() || &h[..8] != SEGMENT_MAGIC {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            why: "not a sonde flow segment (bad header)".into(),
        });
    }
    let v = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if !(1..=SEGMENT_VERSION).contains(&v) {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            why: format!("segment format {v}, this sonde reads formats 1 to {SEGMENT_VERSION}"),
        });
    }
    Ok(v)
}

/// The bits of `addr` in a bloom filter of `bits` bits (a power of two, so a filter can be
/// folded to a shorter one by OR-ing its halves: a position modulo the shorter length is the
/// position in it).
fn bloom_positions(addr: &[u8; 16], bits: usize) -> impl Iterator<Item = usize> {
    // Two halves of a 64-bit mix give the probes (Kirsch–Mitzenmacher double hashing).
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&addr[..8]);
    b.copy_from_slice(&addr[8..]);
    let x = u64::from_le_bytes(a).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from_le_bytes(b)
            .wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            .rotate_left(31);
    let x = (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let (h1, h2) = (x as u32, (x >> 32) as u32 | 1);
    (0..BLOOM_PROBES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) as usize) % bits)
}

fn bloom_add(bloom: &mut [u8], addr: &[u8; 16]) {
    for p in bloom_positions(addr, bloom.len() * 8) {
        bloom[p / 8] |= 1 << (p % 8);
    }
}

fn bloom_may_contain(bloom: &[u8], addr: &[u8; 16]) -> bool {
    bloom_positions(addr, bloom.len() * 8).all(|p| bloom[p / 8] & (1 << (p % 8)) != 0)
}

/// `bloom` folded to its first `len` bytes (a power of two no longer than it).
fn bloom_fold(bloom: &mut [u8], len: usize) {
    let mut n = bloom.len();
    while n > len {
        n /= 2;
        let (low, high) = bloom[..2 * n].split_at_mut(n);
        for (l, h) in low.iter_mut().zip(high.iter()) {
            *l |= *h;
        }
    }
}

/// Appends flow records; see the module documentation for the guarantees.
pub struct FlowStore {
    flows_dir: PathBuf,
    retention: Retention,
    segments: Vec<Segment>,
    file: File,
    /// Records of the open block, encoded.
    pending: Vec<u8>,
    pending_count: u32,
    pending_min_first: u64,
    pending_max_last: u64,
    bloom: Vec<u8>,
    /// The format of the segment being written (1 when the store found one to go on with).
    version: u32,
    /// Records written since the store was opened, and of those, checkpointed.
    pub appended: u64,
    pub checkpointed: u64,
    /// Bytes of a torn block cut off the end of the newest segment when it was opened.
    pub recovered_torn_bytes: u64,
    /// Segments deleted by retention since the store was opened.
    pub segments_deleted: u64,
}

impl FlowStore {
    /// Opens (or creates) the flow history of data directory `dir` for appending.
    pub fn open(dir: &Path, retention: Retention) -> Result<FlowStore, StoreError> {
        let flows_dir = prepare_data_dir(dir, true)?;
        let mut segments = Vec::new();
        let mut torn = 0;
        let mut version = SEGMENT_VERSION;
        let listed = list_segments(&flows_dir)?;
        let last = listed.len().saturating_sub(1);
        for (i, (number, path)) in listed.into_iter().enumerate() {
            let (seg, cut, v) = scan_segment(number, &path, i == last)?;
            torn += cut;
            if i == last {
                version = v;
            }
            // A closed segment whose totals were not written (a crash right after it closed).
            if i != last && crate::totals::read(&path).is_none() {
                crate::totals::write(&path, &crate::totals::build(&path)?)?;
            }
            segments.push(seg);
        }
        let number = segments.last().map_or(1, |s| s.number);
        let path = segment_path(&flows_dir, number);
        let file = open_segment_for_append(&path)?;
        if segments.is_empty() {
            segments.push(Segment::empty(number, path));
        }
        let mut store = FlowStore {
            flows_dir,
            retention,
            segments,
            file,
            pending: Vec::with_capacity(1 << 20),
            pending_count: 0,
            pending_min_first: u64::MAX,
            pending_max_last: 0,
            bloom: vec![0; BLOOM_BYTES],
            version,
            appended: 0,
            checkpointed: 0,
            recovered_torn_bytes: torn,
            segments_deleted: 0,
        };
        store.apply_retention(None)?;
        Ok(store)
    }

    /// The segments, oldest first (the last one is being written).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Bytes of flow history on disk, including the open block's.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum::<u64>() + self.pending.len() as u64
    }

    pub fn append(&mut self, r: &FlowRecord) -> Result<(), StoreError> {
        codec::encode(r, &mut self.pending);
        let first = r.flow.first_ns / 1_000_000;
        let last = r.flow.last_ns / 1_000_000;
        self.pending_min_first = self.pending_min_first.min(first);
        self.pending_max_last = self.pending_max_last.max(last);
        bloom_add(&mut self.bloom, &r.flow.key.addr_a);
        bloom_add(&mut self.bloom, &r.flow.key.addr_b);
        self.pending_count += 1;
        self.appended += 1;
        if self.pending_count as usize >= BLOCK_RECORDS {
            self.write_block()?;
        }
        Ok(())
    }

    /// Writes the open block and makes everything appended so far durable.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.write_block()?;
        let path = self.segments.last().expect("a segment").path.clone();
        self.file.sync_data().map_err(io_err(&path))?;
        self.checkpointed = self.appended;
        Ok(())
    }

    fn write_block(&mut self) -> Result<(), StoreError> {
        if self.pending_count == 0 {
            return Ok(());
        }
        let bloom = bloom_len(self.version, self.pending_count);
        bloom_fold(&mut self.bloom, bloom);
        let mut body = Vec::with_capacity(BLOCK_FIXED + bloom + self.pending.len());
        body.extend_from_slice(&self.pending_count.to_le_bytes());
        body.extend_from_slice(&self.pending_min_first.to_le_bytes());
        body.extend_from_slice(&self.pending_max_last.to_le_bytes());
        body.extend_from_slice(&self.bloom[..bloom]);
        body.extend_from_slice(&self.pending);
        let mut block = Vec::with_capacity(BLOCK_PREFIX + body.len());
        block.extend_from_slice(&BLOCK_MAGIC.to_le_bytes());
        block.extend_from_slice(&(body.len() as u32).to_le_bytes());
        block.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        block.extend_from_slice(&body);
        let seg = self.segments.last_mut().expect("a segment");
        self.file.write_all(&block).map_err(io_err(&seg.path))?;
        seg.bytes += block.len() as u64;
        seg.records += self.pending_count as u64;
        seg.min_first_ms = seg.min_first_ms.min(self.pending_min_first);
        seg.max_last_ms = seg.max_last_ms.max(self.pending_max_last);
        let newest = self.pending_max_last;
        self.pending.clear();
        self.pending_count = 0;
        self.pending_min_first = u64::MAX;
        self.pending_max_last = 0;
        self.bloom.fill(0);
        if seg.bytes >= self.retention.segment_bytes {
            self.rotate()?;
            self.apply_retention(Some(newest))?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), StoreError> {
        let old = self.segments.last().expect("a segment").path.clone();
        self.file.sync_data().map_err(io_err(&old))?;
        crate::totals::write(&old, &crate::totals::build(&old)?)?;
        let number = self.segments.last().expect("a segment").number + 1;
        let path = segment_path(&self.flows_dir, number);
        self.file = open_segment_for_append(&path)?;
        self.version = SEGMENT_VERSION;
        self.segments.push(Segment::empty(number, path));
        Ok(())
    }

    /// Deletes the oldest closed segments that are over the size limit or, measured from the
    /// newest flow written (`now_ms`), over the age limit.
    fn apply_retention(&mut self, now_ms: Option<u64>) -> Result<(), StoreError> {
        let now = now_ms.unwrap_or_else(|| {
            self.segments
                .iter()
                .map(|s| s.max_last_ms)
                .max()
                .unwrap_or(0)
        });
        while self.segments.len() > 1 {
            let total: u64 = self.segments.iter().map(|s| s.bytes).sum();
            let oldest = &self.segments[0];
            let too_big = self.retention.max_bytes > 0 && total > self.retention.max_bytes;
            let too_old = self.retention.max_age_ms > 0
                && oldest.max_last_ms > 0
                && now.saturating_sub(oldest.max_last_ms) > self.retention.max_age_ms;
            if !(too_big || too_old) {
                break;
            }
            fs::remove_file(&oldest.path).map_err(io_err(&oldest.path))?;
            let _ = fs::remove_file(crate::totals::path_for(&oldest.path));
            self.segments.remove(0);
            self.segments_deleted += 1;
        }
        Ok(())
    }
}

fn open_segment_for_append(path: &Path) -> Result<File, StoreError> {
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    if len == 0 {
        let mut h = [0u8; SEGMENT_HEADER];
        h[..8].copy_from_slice(SEGMENT_MAGIC);
        h[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        f.write_all(&h).map_err(io_err(path))?;
        f.sync_all().map_err(io_err(path))?;
        if let Some(parent) = path.parent() {
            if let Ok(d) = File::open(parent) {
                let _ = d.sync_all();
            }
        }
    }
    Ok(f)
}

/// Reads a segment's block headers (and, for the newest segment, checks every block so a
/// torn tail is found and cut off). Returns the segment, the bytes cut and its format.
fn scan_segment(number: u64, path: &Path, newest: bool) -> Result<(Segment, u64, u32), StoreError> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(newest)
        .open(path)
        .map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    if newest && len < SEGMENT_HEADER as u64 {
        // Created but its header never reached the disk: start it again.
        f.set_len(0).map_err(io_err(path))?;
        let seg = Segment::empty(number, path.to_path_buf());
        return Ok((seg, len, SEGMENT_VERSION));
    }
    let version = check_segment_header(&mut f, path)?;
    let mut seg = Segment::empty(number, path.to_path_buf());
    let mut offset = SEGMENT_HEADER as u64;
    let mut buf = Vec::new();
    loop {
        let bad_at = match read_block_header(&f, offset, len, version).map_err(io_err(path))? {
            Next::End => break,
            Next::Bad { offset, why } if !newest => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    why,
                })
            }
            Next::Bad { offset, .. } => Some(offset),
            Next::Block(h) => {
                // Only the newest segment can end in a torn block: check its CRCs.
                let torn = newest
                    && crc32fast::hash(read_body(&f, &h, &mut buf).map_err(io_err(path))?) != h.crc;
                if !torn {
                    seg.add_block(&h);
                }
                torn.then_some(offset)
            }
        };
        if let Some(at) = bad_at {
            f.set_len(at).map_err(io_err(path))?;
            f.sync_all().map_err(io_err(path))?;
            return Ok((seg, len - at, version));
        }
        offset = seg.bytes;
    }
    Ok((seg, 0, version))
}

/// Reads a block's body (everything after its CRC) into `body`, reused from block to block:
/// a fresh buffer for each block of a scan cost more in page faults than the reads did.
fn read_body<'b>(f: &File, h: &BlockHeader, body: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    body.resize(h.body_len, 0);
    f.read_exact_at(body, h.body_at())?;
    Ok(body)
}

/// What a flow query selects. Every filter is optional; a flow matches when all given ones do.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Flows that overlap [from_ms, to_ms] (their first and last packet times).
    pub from_ms: Option<u64>,
    pub to_ms: Option<u64>,
    /// Either end of the flow in this network (address, prefix length; IPv4 in the first 4
    /// bytes with `ip_version` 4).
    pub host: Option<Network>,
    /// Either port.
    pub port: Option<u16>,
    pub proto: Option<u8>,
    /// The application label's protocol or service number (nDPI numbering).
    pub app: Option<u16>,
    /// Either end passes this test of its address (a country or an AS by `--geoip-dir`).
    pub place: Option<EndTest>,
}

/// A test of one end's address (its version and bytes, IPv4 in the first 4), named for the
/// messages that show a filter.
#[derive(Clone)]
pub struct EndTest {
    pub what: String,
    pub test: AddrTest,
}

/// Whether an address (its bytes and IP version) passes.
pub type AddrTest = std::sync::Arc<dyn Fn(&[u8; 16], u8) -> bool + Send + Sync>;

impl std::fmt::Debug for EndTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EndTest({})", self.what)
    }
}

/// An address prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    pub addr: [u8; 16],
    pub ip_version: u8,
    pub prefix: u8,
}

impl Network {
    pub fn contains(&self, addr: &[u8; 16], ip_version: u8) -> bool {
        if ip_version != self.ip_version {
            return false;
        }
        let bits = self.prefix as usize;
        let whole = bits / 8;
        if addr[..whole] != self.addr[..whole] {
            return false;
        }
        let rest = bits % 8;
        rest == 0 || (addr[whole] ^ self.addr[whole]) & (0xffu8 << (8 - rest)) == 0
    }

    /// A single address (the bloom filters can rule blocks out only for those).
    fn single(&self) -> Option<&[u8; 16]> {
        let full = if self.ip_version == 4 { 32 } else { 128 };
        (self.prefix == full).then_some(&self.addr)
    }
}

impl Filter {
    /// Whether a block with these times can hold a matching flow.
    fn block_time_may_match(&self, h: &BlockHeader) -> bool {
        self.from_ms.is_none_or(|from| h.max_last_ms >= from)
            && self.to_ms.is_none_or(|to| h.min_first_ms <= to)
    }

    pub fn matches(&self, s: &Summary) -> bool {
        let k = &s.key;
        self.from_ms.is_none_or(|f| s.last_ms >= f)
            && self.to_ms.is_none_or(|t| s.first_ms <= t)
            && self.host.is_none_or(|n| {
                n.contains(&k.addr_a, k.ip_version) || n.contains(&k.addr_b, k.ip_version)
            })
            && self.port.is_none_or(|p| k.port_a == p || k.port_b == p)
            && self.proto.is_none_or(|p| k.proto == p)
            && self.app.is_none_or(|a| s.l7_proto == a || s.l7_app == a)
            && self.place.as_ref().is_none_or(|p| {
                (p.test)(&k.addr_a, k.ip_version) || (p.test)(&k.addr_b, k.ip_version)
            })
    }
}

/// Decodes the full record a [`Summary`] came from.
pub type FullRecord<'a> = dyn Fn() -> Result<FlowRecord, StoreError> + 'a;
/// What a scan calls for each flow that passes the filter; Break stops the scan.
pub type Visitor<'a> = dyn FnMut(&Summary, &FullRecord<'_>) -> ControlFlow<()> + 'a;

/// Read access to a data directory's flow history (of a running or a stopped instance).
pub struct FlowReader {
    segments: Vec<(u64, PathBuf)>,
}

/// What a scan read, for the caller's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub blocks_read: u64,
    pub blocks_skipped: u64,
    pub records_examined: u64,
    /// Segments answered from their totals file instead of being scanned.
    pub segments_from_totals: u64,
}

impl FlowReader {
    pub fn open(dir: &Path) -> Result<FlowReader, StoreError> {
        let flows_dir = prepare_data_dir(dir, false)?;
        let segments = if flows_dir.exists() {
            list_segments(&flows_dir)?
        } else {
            Vec::new()
        };
        Ok(FlowReader { segments })
    }

    /// The segments (number, path), oldest first; the last may be being written.
    pub fn segments(&self) -> &[(u64, PathBuf)] {
        &self.segments
    }

    /// Calls `visit` with every summary that passes `filter`, oldest block first, with a way to
    /// decode the full record; `visit` returns Break to stop.
    pub fn scan(
        &self,
        filter: &Filter,
        mut visit: impl FnMut(&Summary, &FullRecord<'_>) -> ControlFlow<()>,
    ) -> Result<ScanStats, StoreError> {
        let mut stats = ScanStats::default();
        for i in 0..self.segments.len() {
            if self
                .scan_segment(i, filter, &mut stats, &mut visit)?
                .is_break()
            {
                break;
            }
        }
        Ok(stats)
    }

    /// [`FlowReader::scan`] of segment `i` alone.
    pub fn scan_segment(
        &self,
        i: usize,
        filter: &Filter,
        stats: &mut ScanStats,
        visit: &mut Visitor<'_>,
    ) -> Result<ControlFlow<()>, StoreError> {
        let newest = i + 1 == self.segments.len();
        scan_file(&self.segments[i].1, newest, filter, stats, visit)
    }
}

/// Scans one segment file; see [`FlowReader::scan`]. `newest`: the file may be being written,
/// so a bad block at its end is the writer's, not corruption.
pub(crate) fn scan_file(
    path: &Path,
    newest: bool,
    filter: &Filter,
    stats: &mut ScanStats,
    visit: &mut Visitor<'_>,
) -> Result<ControlFlow<()>, StoreError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        // Deleted by retention while we were reading: its flows have expired.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ControlFlow::Continue(())),
        Err(e) => return Err(io_err(path)(e)),
    };
    let len = f.metadata().map_err(io_err(path))?.len();
    if len < SEGMENT_HEADER as u64 && newest {
        return Ok(ControlFlow::Continue(()));
    }
    let version = check_segment_header(&mut f, path)?;
    let single_host = filter.host.as_ref().and_then(Network::single);
    let mut offset = SEGMENT_HEADER as u64;
    let mut buf = Vec::new();
    loop {
        let h = match read_block_header(&f, offset, len, version).map_err(io_err(path))? {
            Next::End => break,
            // The writer's block in progress (or a torn one it will cut off).
            Next::Bad { .. } if newest => break,
            Next::Bad { offset, why } => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    why,
                })
            }
            Next::Block(h) => h,
        };
        offset += (BLOCK_PREFIX + h.body_len) as u64;
        // Skipped by its times (read with the header), then by its bloom filter (read alone),
        // before its records are read.
        if !filter.block_time_may_match(&h) {
            stats.blocks_skipped += 1;
            continue;
        }
        if let Some(addr) = single_host {
            let mut bloom = vec![0u8; h.bloom];
            f.read_exact_at(&mut bloom, h.body_at() + BLOCK_FIXED as u64)
                .map_err(io_err(path))?;
            if !bloom_may_contain(&bloom, addr) {
                stats.blocks_skipped += 1;
                continue;
            }
        }
        let body = read_body(&f, &h, &mut buf).map_err(io_err(path))?;
        if crc32fast::hash(body) != h.crc {
            if newest {
                break;
            }
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: h.offset,
                why: "checksum mismatch".into(),
            });
        }
        stats.blocks_read += 1;
        let recs = &body[BLOCK_FIXED + h.bloom..];
        let mut at = 0;
        for _ in 0..h.count {
            let (summary, used) =
                codec::decode_summary(&recs[at..]).map_err(|e| StoreError::Corrupt {
                    path: path.to_path_buf(),
                    offset: h.offset,
                    why: format!("record {at} bytes in: {e}"),
                })?;
            stats.records_examined += 1;
            let rec = &recs[at..at + used];
            at += used;
            if filter.matches(&summary) {
                let full = || {
                    codec::decode(rec)
                        .map(|(r, _)| r)
                        .map_err(|e| StoreError::Corrupt {
                            path: path.to_path_buf(),
                            offset: h.offset,
                            why: e.to_string(),
                        })
                };
                if visit(&summary, &full).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

#[cfg(test)]
mod tests;
