//! pcap and pcapng files: a regular file is mapped into memory and its frames are handed out
//! where they lie (no copy before the engine, and a batch of them valid together, see
//! [`FileSource::next_batch`]); a pipe or anything else that cannot be mapped is read through
//! one large reusable buffer. The mapped pages already read are given back as reading moves
//! on, so resident memory measures the engine, not the file. (A mapped file must not be
//! truncated by another program while sonde reads it: the kernel would end sonde with
//! SIGBUS. Appending is harmless: sonde reads what was there when it opened the file.)
//!
//! Every length in a record header is checked before it is trusted: a caplen larger than
//! [`MAX_RECORD`] is corruption, and a file that ends inside a record is reported as truncated
//! after all complete packets before it were handed out.

use crate::error::CaptureError;
use crate::Frame;
use sonde_wire::LinkType;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

const BUF_SIZE: usize = 4 << 20;
/// A mapped file's pages are given back every this many bytes read...
const DROP_EVERY: usize = 8 << 20;
/// ...all but the last this many before the read position.
const DROP_KEEP: usize = 1 << 20;
/// How far ahead of the reader a mapped file is prefetched.
const PREFETCH_AHEAD: usize = 4096;
/// Largest record accepted (pcapng blocks, pcap caplen). Real frames are at most 256 KiB.
const MAX_RECORD: usize = 16 << 20;

#[derive(Clone, Copy, Debug)]
struct Iface {
    link: LinkType,
    /// Timestamp resolution: units per second as a power of 10 (`false`) or 2 (`true`).
    tsresol_pow2: bool,
    tsresol_exp: u8,
}

#[derive(Debug)]
enum Format {
    Pcap {
        swapped: bool,
        nanos: bool,
        link: LinkType,
    },
    PcapNg {
        swapped: bool,
        ifaces: Vec<Iface>,
    },
}

pub struct FileSource {
    path: PathBuf,
    file: File,
    file_len: u64,
    /// The whole file, when it could be mapped; `buf` is unused then.
    map: Option<memmap2::Mmap>,
    /// How far the mapped pages have been given back (see [`FileSource::drop_behind`]).
    dropped_to: usize,
    /// An error met after frames that a batch handed out first: the next call returns it.
    pending_error: Option<CaptureError>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    format: Format,
    packets: u64,
    last_ts_ns: u64,
    /// `--replay loop`: start again at the end, with timestamps moved to the present.
    looping: Option<Looping>,
}

/// Where a looped file's timestamps go: the first packet of the first pass at `start_ns`, each
/// later pass a second after the last packet of the one before, so time only moves forward.
#[derive(Debug)]
struct Looping {
    start_ns: u64,
    /// The first timestamp of the file.
    first_ts: Option<u64>,
    /// Added to every timestamp (minus `first_ts`) of this pass.
    offset_ns: u64,
    last_out_ns: u64,
    frames_this_pass: u64,
}

impl Looping {
    fn shift(&mut self, ts: u64) -> u64 {
        let first = *self.first_ts.get_or_insert(ts);
        let out = self.start_ns + self.offset_ns + ts.saturating_sub(first);
        self.last_out_ns = self.last_out_ns.max(out);
        self.frames_this_pass += 1;
        out
    }
}

/// A frame found in the buffer, before it is lent out (so the caller may rewind instead).
struct Found {
    link: LinkType,
    ts_ns: u64,
    wire_len: u32,
    start: usize,
    len: usize,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<FileSource, CaptureError> {
        let io = |e| CaptureError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(CaptureError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other("it is a directory, not a capture file"),
            });
        }
        // SAFETY: the mapping is read only, and only within the length the file had when it
        // was mapped; another program truncating the file meanwhile is the documented
        // exception (SIGBUS), as for any reader of a mapped file.
        let map = (meta.is_file() && meta.len() > 0)
            .then(|| unsafe { memmap2::Mmap::map(&file) }.ok())
            .flatten();
        if let Some(m) = &map {
            // Read once, front to back: the kernel reads ahead and may drop pages behind.
            let _ = m.advise(memmap2::Advice::Sequential);
        }
        let mapped_len = map.as_ref().map_or(0, |m| m.len());
        let mut src = FileSource {
            path: path.to_path_buf(),
            file,
            file_len: meta.len(),
            buf: if map.is_some() {
                Vec::new()
            } else {
                vec![0; BUF_SIZE]
            },
            eof: map.is_some(),
            map,
            dropped_to: 0,
            pending_error: None,
            pos: 0,
            end: mapped_len,
            base: 0,
            format: Format::Pcap {
                swapped: false,
                nanos: false,
                link: LinkType::Ethernet,
            },
            packets: 0,
            last_ts_ns: 0,
            looping: None,
        };
        let have = src.fill(4)?;
        if have < 4 {
            return Err(CaptureError::Empty {
                path: src.path.clone(),
                len: have as u64,
            });
        }
        let b = src.bytes();
        let magic = [b[0], b[1], b[2], b[3]];
        let m = u32::from_le_bytes(magic);
        match m {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => src.open_pcap(m)?,
            0x0a0d_0d0a => {
                src.format = Format::PcapNg {
                    swapped: false,
                    ifaces: Vec::new(),
                }
            }
            _ => {
                return Err(CaptureError::NotACapture {
                    path: src.path.clone(),
                    magic,
                })
            }
        }
        Ok(src)
    }

    fn open_pcap(&mut self, magic: u32) -> Result<(), CaptureError> {
        let swapped = matches!(magic, 0xd4c3_b2a1 | 0x4d3c_b2a1);
        let nanos = matches!(magic, 0xa1b2_3c4d | 0x4d3c_b2a1);
        if self.fill(24)? < 24 {
            return Err(self.truncated(0, 24));
        }
        let network = self.u32_at(20, swapped);
        // The upper bits may carry FCS information (pcap-savefile(5)); the link type is the low 16.
        let linktype = network & 0xffff;
        let link = LinkType::from_linktype(linktype);
        if !link.is_supported() {
            return Err(CaptureError::UnsupportedLinkType {
                path: self.path.clone(),
                linktype,
            });
        }
        self.pos = 24;
        self.format = Format::Pcap {
            swapped,
            nanos,
            link,
        };
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file, and how far reading has got (for progress bars).
    pub fn progress(&self) -> (u64, u64) {
        (self.base + self.pos as u64, self.file_len)
    }

    pub fn packets_read(&self) -> u64 {
        self.packets
    }

    /// Link type of a classic pcap file (pcapng files may mix several).
    pub fn link_type(&self) -> Option<LinkType> {
        match &self.format {
            Format::Pcap { link, .. } => Some(*link),
            Format::PcapNg { ifaces, .. } => ifaces.first().map(|i| i.link),
        }
    }

    #[inline(always)]
    fn u32_at(&self, off: usize, swapped: bool) -> u32 {
        let b = [
            self.bytes()[self.pos + off],
            self.bytes()[self.pos + off + 1],
            self.bytes()[self.pos + off + 2],
            self.bytes()[self.pos + off + 3],
        ];
        if swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    #[inline(always)]
    fn u16_at(&self, off: usize, swapped: bool) -> u16 {
        let b = [
            self.bytes()[self.pos + off],
            self.bytes()[self.pos + off + 1],
        ];
        if swapped {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }

    /// Makes at least `n` bytes available at `pos` if the file has them; returns how many are.
    #[inline]
    fn fill(&mut self, n: usize) -> Result<usize, CaptureError> {
        if self.end - self.pos >= n {
            return Ok(self.end - self.pos);
        }
        self.refill(n)
    }

    /// The bytes being read: the mapped file, or the read buffer (valid up to `end`).
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m,
            None => &self.buf,
        }
    }

    /// Whether the file is mapped (so [`FileSource::next_batch`] can lend several frames).
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    #[cold]
    fn refill(&mut self, n: usize) -> Result<usize, CaptureError> {
        if self.map.is_some() {
            // The whole file is there: nothing more will come.
            return Ok(self.end - self.pos);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if n > self.buf.len() {
            self.buf.resize(n.next_power_of_two(), 0);
        }
        while self.end < n && !self.eof {
            match self.file.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CaptureError::Io {
                        path: self.path.clone(),
                        source: e,
                    })
                }
            }
        }
        Ok(self.end - self.pos)
    }

    fn truncated(&self, have: usize, needed: usize) -> CaptureError {
        let _ = have;
        CaptureError::Truncated {
            path: self.path.clone(),
            packet: self.packets + 1,
            offset: self.base + self.pos as u64,
            needed: needed as u64,
            available: (self.end - self.pos) as u64,
        }
    }

    fn corrupt(&self, what: String) -> CaptureError {
        CaptureError::Corrupt {
            path: self.path.clone(),
            offset: self.base + self.pos as u64,
            what,
        }
    }

    /// Reads the file again and again (`--replay loop`): at its end it starts over, and
    /// timestamps are moved so that the first packet is at `start_ns` (e.g. now) and each pass
    /// follows the one before a second after its last packet. A file without packets still ends.
    pub fn loop_from(&mut self, start_ns: u64) {
        self.looping = Some(Looping {
            start_ns,
            first_ts: None,
            offset_ns: 0,
            last_out_ns: start_ns,
            frames_this_pass: 0,
        });
    }

    /// Whether the file is looped (it never ends by itself).
    pub fn is_looping(&self) -> bool {
        self.looping.is_some()
    }

    /// Gives back the mapped pages well behind the read position (every [`DROP_EVERY`]
    /// bytes), so they leave sonde's resident memory; the page cache keeps them. Frames lent
    /// out are never that far behind, and a dropped page read again is read from the file.
    #[inline]
    fn drop_behind(&mut self) {
        if self.pos - self.dropped_to < DROP_EVERY {
            return;
        }
        let Some(m) = &self.map else { return };
        let to = (self.pos - DROP_KEEP) & !(4096 - 1);
        // SAFETY: the range is inside the mapping; for a read-only file mapping MADV_DONTNEED
        // only drops the page table entries (a later access reads the file again), so no
        // slice into it, lent out or not, ever sees other bytes.
        let _ = unsafe {
            m.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.dropped_to,
                to - self.dropped_to,
            )
        };
        self.dropped_to = to;
    }

    /// Up to `max` next frames of one link type, appended to `out`, valid together until the
    /// next call (the engine reads their payloads in place); `Ok(None)` at the end of the
    /// file. Only for a mapped file ([`FileSource::is_mapped`]); else one frame a call, as
    /// [`FileSource::next_frame`].
    pub fn next_batch<'a>(
        &'a mut self,
        max: usize,
        out: &mut Vec<Frame<'a>>,
    ) -> Result<Option<LinkType>, CaptureError> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        if self.map.is_none() || self.looping.is_some() {
            let Some((link, f)) = self.next_frame()? else {
                return Ok(None);
            };
            out.push(f);
            return Ok(Some(link));
        }
        self.drop_behind();
        let mut link = None;
        let mut spans: [(u64, u32, usize, usize); 256] = [(0, 0, 0, 0); 256];
        let mut n = 0;
        let mut error = None;
        while n < max.min(spans.len()) {
            // The file's pages are scattered in memory, and the hardware's prefetcher stops
            // at each page's end: ask for the bytes a little ahead of the reader.
            #[cfg(target_arch = "x86_64")]
            if let Some(ahead) = self.bytes().get(self.pos + PREFETCH_AHEAD) {
                // SAFETY: a prefetch is a hint; the address is inside the mapping.
                unsafe {
                    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const u8 as *const i8);
                }
            }
            let before = (self.pos, self.packets, self.last_ts_ns);
            let f = match self.advance() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            };
            if link.is_some_and(|l| l != f.link) {
                // Another interface's link type: the next batch starts with it.
                (self.pos, self.packets, self.last_ts_ns) = before;
                break;
            }
            link = Some(f.link);
            spans[n] = (f.ts_ns, f.wire_len, f.start, f.len);
            n += 1;
        }
        // Every complete frame before a bad record is handed out; the error comes next.
        match (link, error) {
            (None, Some(e)) => return Err(e),
            (Some(_), Some(e)) => self.pending_error = Some(e),
            _ => {}
        }
        let bytes = self.bytes();
        out.extend(spans[..n].iter().map(|&(ts_ns, wire_len, at, len)| Frame {
            ts_ns,
            wire_len,
            data: &bytes[at..at + len],
        }));
        Ok(link)
    }

    /// The next frame and its link type, `Ok(None)` at the end of the file.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<(LinkType, Frame<'_>)>, CaptureError> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        self.drop_behind();
        let mut found = self.advance()?;
        if found.is_none()
            && self
                .looping
                .as_ref()
                .is_some_and(|l| l.frames_this_pass > 0)
        {
            self.rewind()?;
            found = self.advance()?;
        }
        let Some(f) = found else {
            return Ok(None);
        };
        let ts_ns = match self.looping.as_mut() {
            Some(l) => l.shift(f.ts_ns),
            None => f.ts_ns,
        };
        Ok(Some((
            f.link,
            Frame {
                ts_ns,
                wire_len: f.wire_len,
                data: &self.bytes()[f.start..f.start + f.len],
            },
        )))
    }

    #[inline]
    fn advance(&mut self) -> Result<Option<Found>, CaptureError> {
        match self.format {
            Format::Pcap {
                swapped,
                nanos,
                link,
            } => self.next_pcap(swapped, nanos, link),
            Format::PcapNg { .. } => self.next_pcapng(),
        }
    }

    /// Back to the first record, for the next pass of a looped file.
    #[cold]
    fn rewind(&mut self) -> Result<(), CaptureError> {
        use std::io::Seek;
        self.file.rewind().map_err(|e| CaptureError::Io {
            path: self.path.clone(),
            source: e,
        })?;
        match &self.map {
            Some(m) => (self.pos, self.end, self.base, self.dropped_to) = (0, m.len(), 0, 0),
            None => (self.pos, self.end, self.base, self.eof) = (0, 0, 0, false),
        }
        match self.format {
            // The file header again; the format (and link type) stays what it was.
            Format::Pcap { .. } => {
                if self.fill(24)? < 24 {
                    return Err(self.truncated(0, 24));
                }
                self.pos = 24;
            }
            // The section header block comes first and resets the interfaces.
            Format::PcapNg { .. } => {}
        }
        if let Some(l) = self.looping.as_mut() {
            l.offset_ns = (l.last_out_ns + 1_000_000_000).saturating_sub(l.start_ns);
            l.frames_this_pass = 0;
        }
        Ok(())
    }

    #[inline]
    fn next_pcap(
        &mut self,
        swapped: bool,
        nanos: bool,
        link: LinkType,
    ) -> Result<Option<Found>, CaptureError> {
        let have = self.fill(16)?;
        if have == 0 {
            return Ok(None);
        }
        if have < 16 {
            return Err(self.truncated(have, 16));
        }
        let sec = self.u32_at(0, swapped) as u64;
        let frac = self.u32_at(4, swapped) as u64;
        let caplen = self.u32_at(8, swapped) as usize;
        let origlen = self.u32_at(12, swapped);
        if caplen > MAX_RECORD {
            return Err(self.corrupt(format!(
                "record {} claims {} captured bytes (more than {})",
                self.packets + 1,
                caplen,
                MAX_RECORD
            )));
        }
        let have = self.fill(16 + caplen)?;
        if have < 16 + caplen {
            return Err(self.truncated(have, 16 + caplen));
        }
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        let start = self.pos + 16;
        self.pos = start + caplen;
        self.packets += 1;
        self.last_ts_ns = ts_ns;
        Ok(Some(Found {
            link,
            ts_ns,
            wire_len: origlen.max(caplen as u32),
            start,
            len: caplen,
        }))
    }

    fn next_pcapng(&mut self) -> Result<Option<Found>, CaptureError> {
        loop {
            let have = self.fill(12)?;
            if have == 0 {
                return Ok(None);
            }
            if have < 12 {
                return Err(self.truncated(have, 12));
            }
            let raw_type = u32::from_le_bytes([
                self.bytes()[self.pos],
                self.bytes()[self.pos + 1],
                self.bytes()[self.pos + 2],
                self.bytes()[self.pos + 3],
            ]);
            if raw_type == 0x0a0d_0d0a {
                // Section header: its byte-order magic decides how to read the rest.
                let bom = u32::from_le_bytes([
                    self.bytes()[self.pos + 8],
                    self.bytes()[self.pos + 9],
                    self.bytes()[self.pos + 10],
                    self.bytes()[self.pos + 11],
                ]);
                let swapped = match bom {
                    0x1a2b_3c4d => false,
                    0x4d3c_2b1a => true,
                    _ => {
                        return Err(self.corrupt(format!(
                            "pcapng section header with byte-order magic {bom:#010x}"
                        )))
                    }
                };
                self.format = Format::PcapNg {
                    swapped,
                    ifaces: Vec::new(),
                };
            }
            let swapped = match &self.format {
                Format::PcapNg { swapped, .. } => *swapped,
                Format::Pcap { .. } => unreachable!("pcapng reader on a pcap file"),
            };
            let btype = self.u32_at(0, swapped);
            let blen = self.u32_at(4, swapped) as usize;
            if !(12..=MAX_RECORD).contains(&blen) {
                return Err(self.corrupt(format!(
                    "pcapng block of type {btype:#x} claims length {blen}"
                )));
            }
            let have = self.fill(blen)?;
            if have < blen {
                return Err(self.truncated(have, blen));
            }
            let block_start = self.pos;
            match btype {
                // Interface description.
                1 => {
                    if blen < 20 {
                        return Err(self.corrupt("pcapng interface block too short".into()));
                    }
                    let linktype = self.u16_at(8, swapped) as u32;
                    let link = LinkType::from_linktype(linktype);
                    if !link.is_supported() {
                        return Err(CaptureError::UnsupportedLinkType {
                            path: self.path.clone(),
                            linktype,
                        });
                    }
                    let mut iface = Iface {
                        link,
                        tsresol_pow2: false,
                        tsresol_exp: 6,
                    };
                    let mut o = 16;
                    while o + 4 <= blen - 4 {
                        let code = self.u16_at(o, swapped);
                        let len = self.u16_at(o + 2, swapped) as usize;
                        if code == 0 || o + 4 + len > blen - 4 {
                            break;
                        }
                        if code == 9 && len >= 1 {
                            let v = self.bytes()[self.pos + o + 4];
                            iface.tsresol_pow2 = v & 0x80 != 0;
                            iface.tsresol_exp = v & 0x7f;
                        }
                        o += 4 + len.div_ceil(4) * 4;
                    }
                    if let Format::PcapNg { ifaces, .. } = &mut self.format {
                        ifaces.push(iface);
                    }
                    self.pos += blen;
                }
                // Enhanced packet (6) and obsolete packet (2) blocks.
                6 | 2 => {
                    if blen < 32 {
                        return Err(self.corrupt("pcapng packet block too short".into()));
                    }
                    let ifid = if btype == 6 {
                        self.u32_at(8, swapped) as usize
                    } else {
                        self.u16_at(8, swapped) as usize
                    };
                    let ts =
                        ((self.u32_at(12, swapped) as u64) << 32) | self.u32_at(16, swapped) as u64;
                    let caplen = self.u32_at(20, swapped) as usize;
                    let origlen = self.u32_at(24, swapped);
                    if 28 + caplen > blen - 4 {
                        return Err(self.corrupt(format!(
                            "packet {} claims {} captured bytes in a {}-byte block",
                            self.packets + 1,
                            caplen,
                            blen
                        )));
                    }
                    let iface = match &self.format {
                        Format::PcapNg { ifaces, .. } => ifaces.get(ifid).copied(),
                        _ => None,
                    };
                    let Some(iface) = iface else {
                        return Err(self.corrupt(format!(
                            "packet {} refers to undeclared interface {}",
                            self.packets + 1,
                            ifid
                        )));
                    };
                    let ts_ns = ts_to_ns(ts, iface);
                    self.pos += blen;
                    self.packets += 1;
                    self.last_ts_ns = ts_ns;
                    return Ok(Some(Found {
                        link: iface.link,
                        ts_ns,
                        wire_len: origlen.max(caplen as u32),
                        start: block_start + 28,
                        len: caplen,
                    }));
                }
                // Simple packet block: interface 0, no timestamp (keep the previous one).
                3 => {
                    let origlen = self.u32_at(8, swapped);
                    let caplen = (origlen as usize).min(blen - 16);
                    let iface = match &self.format {
                        Format::PcapNg { ifaces, .. } => ifaces.first().copied(),
                        _ => None,
                    };
                    let Some(iface) = iface else {
                        return Err(self.corrupt("simple packet block before any interface".into()));
                    };
                    self.pos += blen;
                    self.packets += 1;
                    return Ok(Some(Found {
                        link: iface.link,
                        ts_ns: self.last_ts_ns,
                        wire_len: origlen.max(caplen as u32),
                        start: block_start + 12,
                        len: caplen,
                    }));
                }
                // Section header, statistics, name resolution, custom...: nothing to count.
                _ => self.pos += blen,
            }
        }
    }
}

fn ts_to_ns(ts: u64, iface: Iface) -> u64 {
    let e = iface.tsresol_exp as u32;
    if iface.tsresol_pow2 {
        ((ts as u128 * 1_000_000_000u128) >> e.min(127)) as u64
    } else if e <= 9 {
        ts.saturating_mul(10u64.pow(9 - e))
    } else {
        ts / 10u64.saturating_pow(e - 9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::PcapWriter;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sonde-capture-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn pcap_roundtrip_and_truncation() {
        let p = tmp("a.pcap");
        let mut w = PcapWriter::create(&p, LinkType::Ethernet).unwrap();
        for i in 0..1000u32 {
            w.write(
                1_700_000_000_000_000_000 + i as u64 * 1000,
                100,
                &[i as u8; 60],
            )
            .unwrap();
        }
        w.finish().unwrap();
        let mut s = FileSource::open(&p).unwrap();
        let mut n = 0;
        while let Some((link, f)) = s.next_frame().unwrap() {
            assert_eq!(link, LinkType::Ethernet);
            assert_eq!((f.data.len(), f.wire_len), (60, 100));
            assert_eq!(f.ts_ns, 1_700_000_000_000_000_000 + n * 1000);
            n += 1;
        }
        assert_eq!(n, 1000);
        // Cut in the middle of the last record.
        let bytes = std::fs::read(&p).unwrap();
        let cut = tmp("cut.pcap");
        std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
        let mut s = FileSource::open(&cut).unwrap();
        let mut n = 0;
        let err = loop {
            match s.next_frame() {
                Ok(Some(_)) => n += 1,
                Ok(None) => panic!("truncation not detected"),
                Err(e) => break e,
            }
        };
        assert_eq!(n, 999);
        assert!(
            matches!(err, CaptureError::Truncated { packet: 1000, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("truncated"));
    }

    #[test]
    fn batches_of_a_mapped_file_are_the_frames_in_order_then_the_error() {
        let p = tmp("batches.pcap");
        let mut w = PcapWriter::create(&p, LinkType::Ethernet).unwrap();
        for i in 0..1000u32 {
            w.write(1_700_000_000_000_000_000 + i as u64, 90, &[i as u8; 60])
                .unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let cut = tmp("batches-cut.pcap");
        std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
        let mut s = FileSource::open(&cut).unwrap();
        assert!(s.is_mapped());
        let (mut seen, mut batches) = (Vec::new(), 0);
        let err = loop {
            let mut out = Vec::new();
            match s.next_batch(256, &mut out) {
                Ok(Some(link)) => {
                    assert_eq!(link, LinkType::Ethernet);
                    assert!(!out.is_empty() && out.len() <= 256);
                    // Every frame of a batch is still the one read, after the others.
                    seen.extend(out.iter().map(|f| (f.data[0], f.data.len(), f.wire_len)));
                    batches += 1;
                }
                Ok(None) => panic!("truncation not detected"),
                Err(e) => break e,
            }
        };
        assert_eq!(seen.len(), 999);
        assert!(seen
            .iter()
            .enumerate()
            .all(|(i, &f)| f == (i as u8, 60, 90)));
        assert_eq!(batches, 4);
        assert!(
            matches!(err, CaptureError::Truncated { packet: 1000, .. }),
            "{err}"
        );
    }

    #[test]
    fn looped_files_start_over_with_time_moving_forward() {
        const S: u64 = 1_000_000_000;
        let p = tmp("loop.pcap");
        let mut w = PcapWriter::create(&p, LinkType::Ethernet).unwrap();
        for (ts, byte) in [(10 * S, 1u8), (10 * S + S / 2, 2), (12 * S, 3)] {
            w.write(ts, 60, &[byte; 60]).unwrap();
        }
        w.finish().unwrap();
        let mut s = FileSource::open(&p).unwrap();
        s.loop_from(1000 * S);
        let mut got = Vec::new();
        for _ in 0..7 {
            let (_, f) = s.next_frame().unwrap().expect("a looped file never ends");
            got.push((f.ts_ns, f.data[0]));
        }
        // Each pass starts a second after the last packet of the one before.
        let want = [
            (1000 * S, 1),
            (1000 * S + S / 2, 2),
            (1002 * S, 3),
            (1003 * S, 1),
            (1003 * S + S / 2, 2),
            (1005 * S, 3),
            (1006 * S, 1),
        ];
        assert_eq!(got, want);

        // pcapng (its section header resets the interfaces each pass): same frames each pass.
        let sample =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/loopback-http-dns.pcapng");
        let mut once = FileSource::open(&sample).unwrap();
        let mut frames = Vec::new();
        while let Some((_, f)) = once.next_frame().unwrap() {
            frames.push(f.data.to_vec());
        }
        let mut s = FileSource::open(&sample).unwrap();
        s.loop_from(0);
        let mut last = 0;
        for i in 0..frames.len() * 3 {
            let (_, f) = s.next_frame().unwrap().unwrap();
            assert_eq!(f.data, &frames[i % frames.len()][..], "frame {i}");
            assert!(f.ts_ns >= last, "time went back at frame {i}");
            last = f.ts_ns;
        }

        // A file without a packet ends, looped or not.
        let e = tmp("nothing.pcap");
        PcapWriter::create(&e, LinkType::Ethernet)
            .unwrap()
            .finish()
            .unwrap();
        let mut s = FileSource::open(&e).unwrap();
        s.loop_from(0);
        assert!(s.next_frame().unwrap().is_none());
    }

    #[test]
    fn foreign_and_empty_files() {
        let p = tmp("text.txt");
        std::fs::write(&p, b"hello world, not a capture").unwrap();
        assert!(matches!(
            FileSource::open(&p),
            Err(CaptureError::NotACapture { .. })
        ));
        let e = tmp("empty.pcap");
        std::fs::write(&e, b"").unwrap();
        assert!(matches!(
            FileSource::open(&e),
            Err(CaptureError::Empty { len: 0, .. })
        ));
        let missing = FileSource::open(Path::new("/nonexistent/x.pcap"))
            .err()
            .unwrap();
        assert!(missing.to_string().contains("no such file"), "{missing}");
    }

    #[test]
    fn corrupt_caplen_is_reported() {
        let p = tmp("corrupt.pcap");
        let mut w = PcapWriter::create(&p, LinkType::Ethernet).unwrap();
        w.write(0, 60, &[0u8; 60]).unwrap();
        w.finish().unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[24 + 8..24 + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let mut s = FileSource::open(&p).unwrap();
        assert!(matches!(s.next_frame(), Err(CaptureError::Corrupt { .. })));
    }

    #[test]
    fn pcapng_resolution() {
        let ns = ts_to_ns(
            1_500_000,
            Iface {
                link: LinkType::Ethernet,
                tsresol_pow2: false,
                tsresol_exp: 6,
            },
        );
        assert_eq!(ns, 1_500_000_000);
        let ns = ts_to_ns(
            3,
            Iface {
                link: LinkType::Ethernet,
                tsresol_pow2: true,
                tsresol_exp: 1,
            },
        );
        assert_eq!(ns, 1_500_000_000);
        let ns = ts_to_ns(
            7,
            Iface {
                link: LinkType::Ethernet,
                tsresol_pow2: false,
                tsresol_exp: 9,
            },
        );
        assert_eq!(ns, 7);
    }
}
