//! Time series of the interface, every host, application and exporter: bytes and packets each
//! way and flows, at 1 s, 1 min, 1 h and 1 day, in fixed-size round-robin files under
//! `DATA_DIR/series/`.
//!
//! The files are time-major: one row of a ring file holds one time step for 4096 series, so
//! writing a second is one positioned write per block of 4096 series, whatever the number of
//! series (RRD writes one file per series, so its cost grows with their number).
//!
//! # On-disk layout (series format 1)
//!
//! ```text
//! DATA_DIR/VERSION                        "sonde-data 1\n" (see crate::store)
//! DATA_DIR/series/CHECKPOINT              what is durable (64 bytes, below)
//! DATA_DIR/series/FAMILY/keys             one escaped key per line; line i is column i
//! DATA_DIR/series/FAMILY/owners           "COL SECOND KEY" per line: column COL reused
//! DATA_DIR/series/FAMILY/RES-NNNN.ring    ring of resolution RES (1s, 1m, 1h, 1d) for the
//!                                         columns NNNN*4096 .. NNNN*4096+4095
//! ```
//!
//! FAMILY is `interface`, `hosts`, `apps` or `exporters`. A key names a series ("10.0.0.1@0" for
//! a host with its VLAN, "TLS.Google" for an application, [`INTERFACE_TOTAL`] for the interface;
//! the interface's gauges are series of their own, see [`GAUGE_ACTIVE_HOSTS`]). In the keys file
//! `\` is written `\\`, a newline `\n` and any other control character `\u{HEX}`, so no key can
//! break the one-key-per-line format. Keys are only appended.
//!
//! # Reused columns
//!
//! A column whose series had no data for [`Config::reuse_after`] seconds (10 minutes by
//! default) is given to the next new key instead of a new column, so the columns, files and
//! memory follow the series active lately, not every key ever seen (a flood of spoofed hosts
//! fills no key space for good). The owners file records each reassignment, in order: from
//! second SECOND on, column COL holds KEY (escaped as in the keys file). Line i of the keys
//! file names the first owner of column i; a key may be listed there again when it came back
//! after losing its column and no column was free.
//!
//! A series is thus a list of segments: column, from, until. The writer empties the column's
//! open minute, hour and day when it reuses it, so the rows of the intervals in which the new
//! owner took the column hold the new owner's data only; the old owner had none in the open
//! minute (it was idle), and its share of the open hour and day, kept in the minute and hour
//! rows, is what a reader adds up for the intervals in which its segment ends, as long as
//! those finer rows are kept (a gap after that).
//!
//! A ring file is a 64-byte header then `slots` rows of a fixed size; the row of time `t` (the
//! start of its interval, in seconds since 1970) is slot `t / resolution % slots`, so the ring
//! keeps the last `slots` intervals. All numbers are little-endian.
//!
//! ```text
//! header: "SONDERNG" | format u32 | family u32 (0 interface, 1 hosts, 2 apps, 3 exporters,
//!         4 filters) |
//!         block u32 (NNNN) | resolution seconds u32 | slots u32 | columns u32 (4096) |
//!         values per column u32 | 24 zero bytes | crc32 of the 60 bytes before it u32
//! row:    time u64 | columns n u32 | 0 u32 | n columns of values | !time u64 (the trailer)
//! sparse: time u64 | entries n u32 | 1 u32 | n × (column u32 | 0 u32 | its values) | !time u64
//! ```
//!
//! A row is written with one positioned write, trailer last, and only as wide as the block's
//! columns in use (`n`); when few of them have data it is written sparse, with entries for
//! those columns only, in column order (a column it does not name is a gap), so a block whose
//! series are mostly idle costs a few hundred bytes a second, not 160 KiB. Ring files are
//! sparse files: the unwritten part of a slot takes no disk space. Values per column: a 1 s row has the five counters of [`Metrics`] (the
//! amounts during that second); a rollup row (1 min, 1 h, 1 day) has the five sums, the five
//! smallest and the five largest per-second values, and the number of seconds that had data
//! (16 values; average per second = sum / seconds).
//!
//! Gaps are stored as gaps, never as zeros: a row whose time is not the one asked for (a
//! previous lap of the ring, or never written: an all-zero header) is a gap for every series;
//! a column at or past the row's `n` is a gap (the series did not exist yet); in a 1 s row a
//! column whose `bytes_in` is `u64::MAX` is a gap (the series had no value that second); in a
//! rollup row a column with 0 seconds is a gap (its other values are `u64::MAX`).
//!
//! # Writing
//!
//! [`SeriesWriter`]: per second `begin(second)`, `set(family, key, metrics)` for each series with
//! data (a series not set has a gap there: set zeros for an idle series you still track), then
//! `commit()`, which writes that second's row of every block that has data and adds the second
//! to the open minute in memory. A minute is written when its last second is committed (or,
//! when that second has no step, at the next commit); it is added to the open hour, an hour to
//! the open day. Nothing of an open minute, hour or day is on disk: a reader computes it from
//! the finer rows, and a writer that opens rebuilds it from them. So the per-second cost is one
//! row write per block of 4096 series, plus a rollup row write per block once a minute.
//!
//! # Crash safety
//!
//! `checkpoint()` (call it every second or so) `fdatasync`s the files written since the last
//! one, then the CHECKPOINT record: a crash loses at most what was committed after the last
//! checkpoint. CHECKPOINT holds:
//!
//! ```text
//! "SONDECKP" | format u32 | flags u32 (bit 0: committed is set) | committed u64 |
//! unsure_from u64 | horizon u64 | keys per family 5 x u32 | crc32 of the 60 bytes u32
//! ```
//!
//! Rows of intervals that end at or before `committed` are durable. Every row written before the
//! next record has a time between `unsure_from` and `horizon` (the writer writes a new record
//! before it would pass `horizon`), so a writer that opens after a crash blanks the rows of that
//! window only, without scanning whole files, and rebuilds the open minute, hour and day from
//! the durable rows. A torn row (trailer not `!time`) after `committed` is a write in progress
//! or one a crash cut: a gap. A torn row at or before `committed`, a row header that is not one
//! sonde writes, a file of the wrong size, a bad header or a file that is not sonde's is an
//! error that names the file and what to do, never silently skipped. Without CHECKPOINT (moved
//! aside by hand) a writer keeps the whole rows and blanks the torn ones.
//!
//! Changing the retention (slots) rewrites the ring files on the next open, keeping the newest
//! rows that fit.
//!
//! # Reading
//!
//! [`SeriesReader`] reads the files of a running or a stopped writer: one point per interval,
//! with `None` for a gap, over all the columns a series held.

use crate::store::{prepare_data_dir, StoreError};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// Series per block (per ring file).
pub const COLUMNS_PER_BLOCK: u32 = 4096;
const C: usize = COLUMNS_PER_BLOCK as usize;
/// A longer key is refused (and counted in [`SeriesWriter::refused_keys`]).
pub const MAX_KEY_BYTES: usize = 1024;
/// Format of the ring files and of CHECKPOINT.
pub const SERIES_FORMAT: u32 = 1;

/// The interface family's traffic series.
pub const INTERFACE_TOTAL: &str = "total";
/// Interface gauges: series whose value is in `bytes_in` ([`Metrics::gauge`]); their rollups give
/// the mean (sum / seconds), smallest and largest value.
pub const GAUGE_ACTIVE_HOSTS: &str = "gauge:active_hosts";
pub const GAUGE_ACTIVE_FLOWS: &str = "gauge:active_flows";
/// Packets dropped during each second because the flow table was full (a counter in a gauge
/// series: its sum is the total; what a capture filter rejected is not in it).
pub const GAUGE_DROPS: &str = "gauge:drops";
/// Packets the kernel dropped for the live captures during each second (their rings full),
/// as [`GAUGE_DROPS`]; `gauge:capture_drops:IFACE` is one interface's.
pub const GAUGE_CAPTURE_DROPS: &str = "gauge:capture_drops";

const RING_MAGIC: &[u8; 8] = b"SONDERNG";
const CHECKPOINT_MAGIC: &[u8; 8] = b"SONDECKP";
const CHECKPOINT_NAME: &str = "CHECKPOINT";
const KEYS_NAME: &str = "keys";
const OWNERS_NAME: &str = "owners";
const HEADER_LEN: u64 = 64;
const ROW_HEADER: u64 = 16;
const ROW_TRAILER: u64 = 8;
/// How far past the last checkpoint rows may be written before a new CHECKPOINT record.
const HORIZON_S: u64 = 300;
/// "No data" in a 1 s column's first value, and in a rollup gap's values.
const GAP: u64 = u64::MAX;
const METRICS: usize = 5;
/// A rollup column: sums, minima, maxima, seconds with data.
const ROLLUP_VALUES: usize = 3 * METRICS + 1;
const SECONDS_AT: usize = 3 * METRICS;
/// A ring header with more slots than this is not one sonde writes (115 days of seconds).
const MAX_SLOTS: u32 = 10_000_000;

/// The kinds of series, one directory each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Interface,
    Hosts,
    Apps,
    Exporters,
    /// Filter-set expressions (`SET/LABEL`): matched packets and bytes in `packets_in` and
    /// `bytes_in`.
    Filters,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Interface,
        Family::Hosts,
        Family::Apps,
        Family::Exporters,
        Family::Filters,
    ];

    /// The directory name under `DATA_DIR/series/`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Interface => "interface",
            Family::Hosts => "hosts",
            Family::Apps => "apps",
            Family::Exporters => "exporters",
            Family::Filters => "filters",
        }
    }

    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The resolutions, finest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolution {
    Second,
    Minute,
    Hour,
    Day,
}

impl Resolution {
    pub const ALL: [Resolution; 4] = [
        Resolution::Second,
        Resolution::Minute,
        Resolution::Hour,
        Resolution::Day,
    ];

    pub const fn seconds(self) -> u64 {
        match self {
            Resolution::Second => 1,
            Resolution::Minute => 60,
            Resolution::Hour => 3600,
            Resolution::Day => 86_400,
        }
    }

    /// The prefix of its ring files: `1s`, `1m`, `1h`, `1d`.
    pub fn name(self) -> &'static str {
        match self {
            Resolution::Second => "1s",
            Resolution::Minute => "1m",
            Resolution::Hour => "1h",
            Resolution::Day => "1d",
        }
    }

    /// Default retention in rows: an hour of seconds, a week of minutes, a year of hours and
    /// five years of days.
    pub const fn default_slots(self) -> u32 {
        match self {
            Resolution::Second => 3600,
            Resolution::Minute => 10_080,
            Resolution::Hour => 8760,
            Resolution::Day => 1826,
        }
    }

    /// The start of the interval that holds second `t`.
    pub fn start_of(self, t: u64) -> u64 {
        t - t % self.seconds()
    }

    fn from_name(name: &str) -> Option<Resolution> {
        Resolution::ALL.into_iter().find(|r| r.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The resolution its rollups are made of.
    fn finer(self) -> Option<Resolution> {
        match self {
            Resolution::Second => None,
            Resolution::Minute => Some(Resolution::Second),
            Resolution::Hour => Some(Resolution::Minute),
            Resolution::Day => Some(Resolution::Hour),
        }
    }

    fn values(self) -> usize {
        match self {
            Resolution::Second => METRICS,
            _ => ROLLUP_VALUES,
        }
    }

    fn column_bytes(self) -> u64 {
        self.values() as u64 * 8
    }

    fn stride(self) -> u64 {
        ROW_HEADER + C as u64 * self.column_bytes() + ROW_TRAILER
    }
}

/// Retention and limits of the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Rows kept per resolution, in [`Resolution::ALL`] order: the retention is slots ×
    /// resolution. At least 60 seconds, 60 minutes, 24 hours and 1 day, so that an open
    /// minute, hour and day can be rebuilt from the finer rows.
    pub slots: [u32; 4],
    /// Series per family at most; further keys are refused (and counted). Each block of 4096
    /// series keeps 4 files open.
    pub max_keys: u32,
    /// Seconds a series may go without data before its column can be given to a new key (0:
    /// never). Columns are reused before new ones are added, so the number of columns, files
    /// and memory follows the series active within this time, not every key ever seen (a
    /// flood of spoofed hosts cannot fill the key space for good). At least 120 s.
    pub reuse_after: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            slots: Resolution::ALL.map(Resolution::default_slots),
            max_keys: 1 << 18,
            reuse_after: 600,
        }
    }
}

impl Config {
    fn check(&self, dir: &Path) -> Result<(), StoreError> {
        let least = [60, 60, 24, 1];
        for (i, res) in Resolution::ALL.into_iter().enumerate() {
            let slots = self.slots[i];
            if slots < least[i] || slots > MAX_SLOTS {
                return Err(StoreError::Io {
                    path: dir.to_path_buf(),
                    err: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} retention of {slots} rows: give {} to {MAX_SLOTS}",
                            res.name(),
                            least[i]
                        ),
                    ),
                });
            }
        }
        if self.reuse_after != 0 && self.reuse_after < 120 {
            return Err(StoreError::Io {
                path: dir.to_path_buf(),
                err: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "series columns reused after {} s idle: give 0 (never) or at least 120",
                        self.reuse_after
                    ),
                ),
            });
        }
        Ok(())
    }
}

/// The five counters of a series during one interval (or, for a gauge, its value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Metrics {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub flows: u64,
}

impl Metrics {
    /// A gauge's value, as stored in the gauge series of the interface family.
    pub fn gauge(value: u64) -> Metrics {
        Metrics {
            bytes_in: value,
            ..Metrics::default()
        }
    }

    pub fn to_array(self) -> [u64; 5] {
        [
            self.bytes_in,
            self.bytes_out,
            self.packets_in,
            self.packets_out,
            self.flows,
        ]
    }

    pub fn from_array(a: [u64; 5]) -> Metrics {
        Metrics {
            bytes_in: a[0],
            bytes_out: a[1],
            packets_in: a[2],
            packets_out: a[3],
            flows: a[4],
        }
    }

    fn from_slice(s: &[u64]) -> Metrics {
        Metrics::from_array([s[0], s[1], s[2], s[3], s[4]])
    }
}

/// What one interval holds for one series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The amounts during the interval (for a gauge, the sum of its per-second values).
    pub sum: Metrics,
    /// The smallest and largest per-second value, over the seconds that had data.
    pub min: Metrics,
    pub max: Metrics,
    /// Seconds of the interval that had data (1 for a 1 s point).
    pub seconds: u32,
}

impl Sample {
    /// Mean per second over the seconds that had data, in [`Metrics::to_array`] order.
    pub fn mean(&self) -> [f64; 5] {
        let s = self.seconds.max(1) as f64;
        self.sum.to_array().map(|v| v as f64 / s)
    }
}

/// One interval of a series: `sample` is `None` for a gap (no data, never zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Start of the interval, seconds since 1970.
    pub t: u64,
    pub sample: Option<Sample>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |err| StoreError::Io {
        path: path.to_path_buf(),
        err,
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

// ---------------------------------------------------------------------------------------------
// Rollup arithmetic, shared by the writer (accumulators) and the reader (open intervals).

/// Row flag: the row holds (column, values) entries for the columns with data only.
const ROW_SPARSE: u32 = 1;

/// Whether a column's values (5 of a second, or 16 of a rollup) are a gap.
fn is_gap(v: &[u64]) -> bool {
    if v.len() == METRICS {
        v[0] == GAP
    } else {
        v[SECONDS_AT] == 0
    }
}

/// Makes a column's values (5 of a second, or 16 of a rollup) a gap.
fn gap_values(v: &mut [u64]) {
    if v.len() == METRICS {
        v.fill(GAP);
    } else {
        rollup_gap(v);
    }
}

/// A rollup column that is a gap: every value `GAP`, no second counted.
const GAP_ROLLUP: [u64; ROLLUP_VALUES] = {
    let mut acc = [GAP; ROLLUP_VALUES];
    acc[SECONDS_AT] = 0;
    acc
};

/// Makes a rollup column a gap.
fn rollup_gap(acc: &mut [u64]) {
    acc[..ROLLUP_VALUES].copy_from_slice(&GAP_ROLLUP);
}

/// Adds one second's five values to a rollup column.
fn rollup_add_second(acc: &mut [u64], second: &[u64]) {
    if second[0] == GAP {
        return;
    }
    if acc[SECONDS_AT] == 0 {
        for m in 0..METRICS {
            acc[m] = second[m];
            acc[METRICS + m] = second[m];
            acc[2 * METRICS + m] = second[m];
        }
        acc[SECONDS_AT] = 1;
        return;
    }
    for m in 0..METRICS {
        acc[m] = acc[m].saturating_add(second[m]);
        acc[METRICS + m] = acc[METRICS + m].min(second[m]);
        acc[2 * METRICS + m] = acc[2 * METRICS + m].max(second[m]);
    }
    acc[SECONDS_AT] += 1;
}

/// Adds a finer rollup column to a coarser one.
fn rollup_merge(acc: &mut [u64], part: &[u64]) {
    if part[SECONDS_AT] == 0 {
        return;
    }
    if acc[SECONDS_AT] == 0 {
        acc.copy_from_slice(part);
        return;
    }
    for m in 0..METRICS {
        acc[m] = acc[m].saturating_add(part[m]);
        acc[METRICS + m] = acc[METRICS + m].min(part[METRICS + m]);
        acc[2 * METRICS + m] = acc[2 * METRICS + m].max(part[2 * METRICS + m]);
    }
    acc[SECONDS_AT] = acc[SECONDS_AT].saturating_add(part[SECONDS_AT]);
}

fn sample_of_second(v: &[u64]) -> Option<Sample> {
    if v[0] == GAP {
        return None;
    }
    let m = Metrics::from_slice(v);
    Some(Sample {
        sum: m,
        min: m,
        max: m,
        seconds: 1,
    })
}

fn sample_of_rollup(v: &[u64]) -> Option<Sample> {
    if v[SECONDS_AT] == 0 {
        return None;
    }
    Some(Sample {
        sum: Metrics::from_slice(&v[..METRICS]),
        min: Metrics::from_slice(&v[METRICS..2 * METRICS]),
        max: Metrics::from_slice(&v[2 * METRICS..3 * METRICS]),
        seconds: v[SECONDS_AT].min(u32::MAX as u64) as u32,
    })
}

fn rollup_of_sample(s: &Sample, acc: &mut [u64]) {
    acc[..METRICS].copy_from_slice(&s.sum.to_array());
    acc[METRICS..2 * METRICS].copy_from_slice(&s.min.to_array());
    acc[2 * METRICS..3 * METRICS].copy_from_slice(&s.max.to_array());
    acc[SECONDS_AT] = s.seconds as u64;
}

// ---------------------------------------------------------------------------------------------
// Keys files.

/// A key as one line of the keys file (without the newline).
fn escape_key(key: &str, out: &mut Vec<u8>) {
    // Most keys (addresses, names) need no escape: a byte below 0x20, DEL, the backslash, or
    // 0xC2 (the lead byte of U+0080..U+00BF, where the C1 controls are) sends the key the
    // long way, character by character.
    if !key
        .bytes()
        .any(|b| b < 0x20 || b == 0x7f || b == b'\\' || b == 0xc2)
    {
        out.extend_from_slice(key.as_bytes());
        return;
    }
    escape_key_by_char(key, out);
}

/// [`escape_key`]'s rule, applied to every character.
fn escape_key_by_char(key: &str, out: &mut Vec<u8>) {
    for ch in key.chars() {
        match ch {
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            c if c.is_control() => {
                out.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes())
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

fn unescape_key(line: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('u') => {
                    let rest = chars.as_str();
                    let hex = rest
                        .strip_prefix('{')
                        .and_then(|r| r.split_once('}'))
                        .map(|(h, _)| h)
                        .ok_or("a \\u escape without {HEX}")?;
                    let ch = u32::from_str_radix(hex, 16)
                        .ok()
                        .filter(|_| !hex.is_empty() && hex.len() <= 6)
                        .and_then(char::from_u32)
                        .ok_or("a \\u escape that is not a character")?;
                    out.push(ch);
                    // Skip "{HEX}".
                    for _ in 0..hex.len() + 2 {
                        chars.next();
                    }
                }
                _ => return Err("an unknown escape".into()),
            },
            c if c.is_control() => return Err("a raw control character".into()),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return Err("an empty key".into());
    }
    Ok(out)
}

/// The complete lines of a keys file read from byte `base` on: (offset of the line, its key or
/// why it is not one). A last line without its newline (a write in progress, or one a crash
/// cut) is left out.
fn key_lines(data: &[u8], base: u64) -> Vec<(u64, Result<String, String>)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = data[at..].iter().position(|&b| b == b'\n') {
        out.push((base + at as u64, unescape_key(&data[at..at + len])));
        at += len + 1;
    }
    out
}

/// A line of an owners file: from second `since` on, column `col` belongs to `key`.
fn parse_owner_line(line: &[u8]) -> Result<(u32, u64, String), String> {
    let mut parts = line.splitn(3, |&b| b == b' ');
    let mut number = |what: &str| -> Result<u64, String> {
        let field = parts.next().unwrap_or_default();
        if field.is_empty() || field.len() > 20 || !field.iter().all(u8::is_ascii_digit) {
            return Err(format!("no {what}"));
        }
        std::str::from_utf8(field)
            .ok()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("a {what} out of range"))
    };
    let col = number("column")?;
    let since = number("second")?;
    let col = u32::try_from(col).map_err(|_| "a column out of range".to_string())?;
    let key = unescape_key(parts.next().ok_or("no key")?)?;
    Ok((col, since, key))
}

/// The complete lines of an owners file read from byte `base` on: (offset of the line, its
/// length with the newline, the assignment or why it is not one).
#[allow(clippy::type_complexity)]
fn owner_lines(data: &[u8], base: u64) -> Vec<(u64, u64, Result<(u32, u64, String), String>)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = data[at..].iter().position(|&b| b == b'\n') {
        out.push((
            base + at as u64,
            len as u64 + 1,
            parse_owner_line(&data[at..at + len]),
        ));
        at += len + 1;
    }
    out
}

fn owners_damaged(family_dir: &Path, offset: u64, why: &str) -> StoreError {
    StoreError::Foreign {
        path: family_dir.to_path_buf(),
        why: format!(
            "its owners file is damaged at byte {offset} ({why}), so which series a reused \
             column held cannot be trusted; moving the whole directory aside starts this family \
             afresh"
        ),
    }
}

fn keys_damaged(family_dir: &Path, offset: u64, why: &str) -> StoreError {
    StoreError::Foreign {
        path: family_dir.to_path_buf(),
        why: format!(
            "its keys file is damaged at byte {offset} ({why}), so the columns of its series \
             cannot be trusted; moving the whole directory aside starts this family afresh"
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Directory listings.

fn stray(path: PathBuf, what: &str) -> StoreError {
    StoreError::Foreign {
        path,
        why: format!("not part of sonde's time series (expected {what})"),
    }
}

/// Checks that `series/` holds only CHECKPOINT and family directories (and hidden files).
fn check_series_dir(series_dir: &Path) -> Result<(), StoreError> {
    for e in fs::read_dir(series_dir).map_err(io_err(series_dir))? {
        let e = e.map_err(io_err(series_dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let is_dir = e.file_type().map_err(io_err(&e.path()))?.is_dir();
        let ok = match Family::from_name(&name) {
            Some(_) => is_dir,
            None => name == CHECKPOINT_NAME && !is_dir,
        };
        if !ok {
            return Err(stray(
                e.path(),
                "CHECKPOINT and the directories interface, hosts, apps, exporters",
            ));
        }
    }
    Ok(())
}

/// What a family directory holds.
#[derive(Default)]
struct FamilyListing {
    rings: Vec<(Resolution, u32, PathBuf)>,
    /// Hidden `*.tmp` files: ring files a crash interrupted while they were made.
    leftovers: Vec<PathBuf>,
}

fn ring_name(res: Resolution, block: u32) -> String {
    format!("{}-{block:04}.ring", res.name())
}

fn parse_ring_name(name: &str) -> Option<(Resolution, u32)> {
    let (res, rest) = name.split_once('-')?;
    let digits = rest.strip_suffix(".ring")?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let block: u32 = digits.parse().ok()?;
    if ring_name(Resolution::from_name(res)?, block) != name {
        return None;
    }
    Some((Resolution::from_name(res)?, block))
}

fn list_family_dir(dir: &Path) -> Result<FamilyListing, StoreError> {
    let mut out = FamilyListing::default();
    let max_block = u32::MAX / COLUMNS_PER_BLOCK;
    for e in fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            if name.ends_with(".tmp") {
                out.leftovers.push(e.path());
            }
            continue;
        }
        if name == KEYS_NAME || name == OWNERS_NAME {
            continue;
        }
        match parse_ring_name(&name).filter(|&(_, b)| b <= max_block) {
            Some((res, block)) => out.rings.push((res, block, e.path())),
            None => return Err(stray(e.path(), "keys, owners and RES-NNNN.ring files")),
        }
    }
    out.rings.sort_by_key(|r| (r.1, r.0));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// CHECKPOINT.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Checkpoint {
    committed: Option<u64>,
    unsure_from: u64,
    horizon: u64,
    /// Keys durable per family. The fifth (filters) sits where format 1 first had a zero, so a
    /// checkpoint written before filter-sets existed reads as 0 filter keys.
    key_counts: [u32; 5],
}

impl Checkpoint {
    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(CHECKPOINT_MAGIC);
        b[8..12].copy_from_slice(&SERIES_FORMAT.to_le_bytes());
        b[12..16].copy_from_slice(&(self.committed.is_some() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.committed.unwrap_or(0).to_le_bytes());
        b[24..32].copy_from_slice(&self.unsure_from.to_le_bytes());
        b[32..40].copy_from_slice(&self.horizon.to_le_bytes());
        for (i, n) in self.key_counts.iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&n.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[..60]);
        b[60..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` when there is no CHECKPOINT file.
    fn read(path: &Path) -> Result<Option<Checkpoint>, StoreError> {
        let data = match fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path)(e)),
        };
        let damaged = |why: &str| StoreError::Foreign {
            path: path.to_path_buf(),
            why: format!(
                "{why}; with this file moved aside sonde checks every row of the ring files \
                 and keeps the whole ones"
            ),
        };
        if data.len() < 8 || &data[..8] != CHECKPOINT_MAGIC {
            return Err(damaged("not a sonde series checkpoint (bad magic)"));
        }
        if data.len() != 64 {
            return Err(damaged(&format!(
                "{} bytes, a checkpoint has 64",
                data.len()
            )));
        }
        let format = u32_at(&data, 8);
        if format != SERIES_FORMAT {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
                why: format!("series format {format}, this sonde reads {SERIES_FORMAT}"),
            });
        }
        if crc32fast::hash(&data[..60]) != u32_at(&data, 60) {
            return Err(damaged("damaged (checksum mismatch)"));
        }
        let flags = u32_at(&data, 12);
        Ok(Some(Checkpoint {
            committed: (flags & 1 != 0).then(|| u64_at(&data, 16)),
            unsure_from: u64_at(&data, 24),
            horizon: u64_at(&data, 32),
            key_counts: [0, 1, 2, 3, 4].map(|i| u32_at(&data, 40 + 4 * i)),
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Ring files.

struct Ring {
    file: File,
    path: PathBuf,
    res: Resolution,
    slots: u32,
    /// Written since the last fdatasync.
    dirty: bool,
}

/// What the slot of time `t` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    /// Another time's row, or none: a gap.
    Absent,
    /// The row of `t`, but its trailer does not match: being written, or cut by a crash.
    Torn,
    /// The row of `t`, whole, `columns` wide.
    Present { columns: u32 },
}

impl Ring {
    fn header(family: Family, res: Resolution, block: u32, slots: u32) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(RING_MAGIC);
        let fields = [
            SERIES_FORMAT,
            family.index() as u32,
            block,
            res.seconds() as u32,
            slots,
            COLUMNS_PER_BLOCK,
            res.values() as u32,
        ];
        for (i, v) in fields.iter().enumerate() {
            h[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&h[..60]);
        h[60..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    fn file_len(res: Resolution, slots: u32) -> u64 {
        HEADER_LEN + slots as u64 * res.stride()
    }

    /// Makes a ring file (sparse: only written rows take disk space), filled by `fill` before it
    /// gets its name, so a crash never leaves a half-made ring under a ring's name.
    fn create(
        dir: &Path,
        family: Family,
        res: Resolution,
        block: u32,
        slots: u32,
        fill: impl FnOnce(&mut Ring) -> Result<(), StoreError>,
    ) -> Result<Ring, StoreError> {
        let name = ring_name(res, block);
        let path = dir.join(&name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        file.write_all_at(&Ring::header(family, res, block, slots), 0)
            .and_then(|_| file.set_len(Ring::file_len(res, slots)))
            .map_err(io_err(&tmp))?;
        let mut ring = Ring {
            file,
            path: tmp.clone(),
            res,
            slots,
            dirty: false,
        };
        fill(&mut ring)?;
        ring.file.sync_all().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        ring.path = path;
        Ok(ring)
    }

    /// Opens a ring file and checks its header and size.
    fn open(
        path: &Path,
        family: Family,
        res: Resolution,
        block: u32,
        write: bool,
    ) -> Result<Ring, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(io_err(path))?;
        let len = file.metadata().map_err(io_err(path))?.len();
        let foreign = |why: String| StoreError::Foreign {
            path: path.to_path_buf(),
            why,
        };
        let mut h = [0u8; 64];
        let got = file
            .read_at(&mut h, 0)
            .map_err(io_err(path))?
            .min(len as usize);
        if got < 8 || &h[..8] != RING_MAGIC {
            return Err(foreign(
                "not a sonde series ring file (bad magic)".to_string(),
            ));
        }
        if got < 64 {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: len,
                why: "ring file cut short inside its header".into(),
            });
        }
        let format = u32_at(&h, 8);
        if format != SERIES_FORMAT {
            return Err(foreign(format!(
                "series format {format}, this sonde reads {SERIES_FORMAT}"
            )));
        }
        if crc32fast::hash(&h[..60]) != u32_at(&h, 60) {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                why: "ring header checksum mismatch".into(),
            });
        }
        let (fam, blk, secs, slots, cols, values) = (
            u32_at(&h, 12),
            u32_at(&h, 16),
            u32_at(&h, 20),
            u32_at(&h, 24),
            u32_at(&h, 28),
            u32_at(&h, 32),
        );
        if fam != family.index() as u32 || blk != block || secs as u64 != res.seconds() {
            return Err(foreign(format!(
                "its header says family {fam}, block {blk}, {secs} s rows, not {} {} as its \
                 place says (copied or renamed from elsewhere?)",
                family.name(),
                ring_name(res, block)
            )));
        }
        if cols != COLUMNS_PER_BLOCK || values as usize != res.values() {
            return Err(foreign(format!(
                "{cols} columns of {values} values, this sonde writes {C} of {}",
                res.values()
            )));
        }
        if slots == 0 || slots > MAX_SLOTS {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: 24,
                why: format!("impossible slot count {slots}"),
            });
        }
        let want = Ring::file_len(res, slots);
        if len != want {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: len.min(want),
                why: format!(
                    "ring file of {len} bytes, its {slots} slots need {want} (cut short or \
                     appended to); moving it aside loses this ring's rows only"
                ),
            });
        }
        Ok(Ring {
            file,
            path: path.to_path_buf(),
            res,
            slots,
            dirty: false,
        })
    }

    fn slot_of(&self, t: u64) -> u64 {
        t / self.res.seconds() % self.slots as u64
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        HEADER_LEN + slot * self.res.stride()
    }

    fn corrupt_row(&self, offset: u64, why: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            offset,
            why,
        }
    }

    /// Bytes of one entry of a sparse row: column u32, 0 u32, its values.
    fn entry_bytes(&self) -> u64 {
        8 + self.res.column_bytes()
    }

    /// Bytes of a row's body: `n` columns, or `n` entries of a sparse row.
    fn body_bytes(&self, n: u32, sparse: bool) -> u64 {
        n as u64
            * if sparse {
                self.entry_bytes()
            } else {
                self.res.column_bytes()
            }
    }

    /// The time of the row in `slot`, its `n` and whether it is sparse; `None` for a
    /// never-written or blanked row. A header sonde cannot have written is an error.
    fn row_at(&self, slot: u64) -> Result<Option<(u64, u32, bool)>, StoreError> {
        let off = self.slot_offset(slot);
        let mut h = [0u8; ROW_HEADER as usize];
        self.file
            .read_exact_at(&mut h, off)
            .map_err(io_err(&self.path))?;
        let (time, columns, flags) = (u64_at(&h, 0), u32_at(&h, 8), u32_at(&h, 12));
        if time == 0 && columns == 0 && flags == 0 {
            return Ok(None);
        }
        let secs = self.res.seconds();
        if columns == 0
            || columns > COLUMNS_PER_BLOCK
            || flags & !ROW_SPARSE != 0
            || time % secs != 0
            || self.slot_of(time) != slot
        {
            return Err(self.corrupt_row(
                off,
                format!(
                    "row {slot} has a header sonde does not write (time {time}, {columns} \
                     columns)"
                ),
            ));
        }
        Ok(Some((time, columns, flags & ROW_SPARSE != 0)))
    }

    /// What the slot of `t` (a multiple of the resolution) holds.
    fn probe(&self, t: u64) -> Result<Row, StoreError> {
        let slot = self.slot_of(t);
        let Some((time, n, sparse)) = self.row_at(slot)? else {
            return Ok(Row::Absent);
        };
        if time != t {
            return Ok(Row::Absent);
        }
        let body = self.slot_offset(slot) + ROW_HEADER;
        let mut tr = [0u8; 8];
        self.file
            .read_exact_at(&mut tr, body + self.body_bytes(n, sparse))
            .map_err(io_err(&self.path))?;
        if u64::from_le_bytes(tr) != !t {
            return Ok(Row::Torn);
        }
        if !sparse {
            return Ok(Row::Present { columns: n });
        }
        // A sparse row is as wide as its last entry's column (entries are in column order).
        let last = self.entry_col(body, n - 1)?;
        if last >= COLUMNS_PER_BLOCK {
            return Err(
                self.corrupt_row(body, format!("the sparse row of {t} names column {last}"))
            );
        }
        Ok(Row::Present { columns: last + 1 })
    }

    /// The column of entry `i` of the sparse row whose body starts at `body`.
    fn entry_col(&self, body: u64, i: u32) -> Result<u32, StoreError> {
        let mut c = [0u8; 4];
        self.file
            .read_exact_at(&mut c, body + i as u64 * self.entry_bytes())
            .map_err(io_err(&self.path))?;
        Ok(u32::from_le_bytes(c))
    }

    /// The values of the first `columns` columns of the (present) row of `t` into `out`; a
    /// column a sparse row does not hold is a gap.
    fn read_columns(&self, t: u64, columns: u32, out: &mut Vec<u64>) -> Result<(), StoreError> {
        let slot = self.slot_of(t);
        let (n, sparse) = self.row_at(slot)?.map_or((0, false), |(_, n, s)| (n, s));
        let values = self.res.values();
        let body = self.slot_offset(slot) + ROW_HEADER;
        let words = |bytes: &[u8]| -> Vec<u64> {
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        };
        out.clear();
        if !sparse {
            let mut bytes = vec![0u8; columns as usize * values * 8];
            self.file
                .read_exact_at(&mut bytes, body)
                .map_err(io_err(&self.path))?;
            out.extend(words(&bytes));
            return Ok(());
        }
        out.resize(columns as usize * values, 0);
        for col in out.chunks_exact_mut(values) {
            gap_values(col);
        }
        let mut bytes = vec![0u8; self.body_bytes(n, true) as usize];
        self.file
            .read_exact_at(&mut bytes, body)
            .map_err(io_err(&self.path))?;
        let entry = self.entry_bytes() as usize;
        for e in bytes.chunks_exact(entry) {
            let col = u32_at(e, 0) as usize;
            if col < columns as usize {
                out[col * values..(col + 1) * values].copy_from_slice(&words(&e[8..]));
            }
        }
        Ok(())
    }

    /// The values of column `col` of the (present) row of `t` into `out` (`res.values()`
    /// long); false when the row has no value for it (a gap).
    fn read_column(&self, t: u64, col: u32, out: &mut [u64]) -> Result<bool, StoreError> {
        let slot = self.slot_of(t);
        let (n, sparse) = self.row_at(slot)?.map_or((0, false), |(_, n, s)| (n, s));
        let body = self.slot_offset(slot) + ROW_HEADER;
        let at = if sparse {
            // Entries are in column order: a binary search, a few small reads.
            let (mut lo, mut hi) = (0u32, n);
            let mut found = None;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match self.entry_col(body, mid)?.cmp(&col) {
                    std::cmp::Ordering::Equal => {
                        found = Some(mid);
                        break;
                    }
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Greater => hi = mid,
                }
            }
            match found {
                Some(i) => body + i as u64 * self.entry_bytes() + 8,
                None => return Ok(false),
            }
        } else if col < n {
            body + col as u64 * self.res.column_bytes()
        } else {
            return Ok(false);
        };
        let mut bytes = [0u8; ROLLUP_VALUES * 8];
        let bytes = &mut bytes[..out.len() * 8];
        self.file
            .read_exact_at(bytes, at)
            .map_err(io_err(&self.path))?;
        for (v, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
            *v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        Ok(true)
    }

    /// Writes the row of `t` with one positioned write, trailer last: dense, or sparse (only
    /// the columns with data) when that is smaller, as it is when few series of the block had
    /// data then.
    fn write_row(&mut self, t: u64, values: &[u64], buf: &mut Vec<u8>) -> Result<(), StoreError> {
        let per = self.res.values();
        let columns = (values.len() / per) as u32;
        let with_data = values.chunks_exact(per).filter(|v| !is_gap(v)).count() as u32;
        let sparse =
            with_data > 0 && self.body_bytes(with_data, true) < self.body_bytes(columns, false);
        buf.clear();
        buf.extend_from_slice(&t.to_le_bytes());
        if sparse {
            buf.extend_from_slice(&with_data.to_le_bytes());
            buf.extend_from_slice(&ROW_SPARSE.to_le_bytes());
            for (col, v) in values.chunks_exact(per).enumerate() {
                if is_gap(v) {
                    continue;
                }
                buf.extend_from_slice(&(col as u32).to_le_bytes());
                buf.extend_from_slice(&0u32.to_le_bytes());
                for x in v {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
            }
        } else {
            buf.extend_from_slice(&columns.to_le_bytes());
            buf.extend_from_slice(&0u32.to_le_bytes());
            for x in values {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
        buf.extend_from_slice(&(!t).to_le_bytes());
        let off = self.slot_offset(self.slot_of(t));
        self.file
            .write_all_at(buf, off)
            .map_err(io_err(&self.path))?;
        self.dirty = true;
        Ok(())
    }

    /// Makes the row in `slot` a never-written one.
    fn blank(&mut self, slot: u64) -> Result<(), StoreError> {
        self.file
            .write_all_at(&[0u8; ROW_HEADER as usize], self.slot_offset(slot))
            .map_err(io_err(&self.path))?;
        self.dirty = true;
        Ok(())
    }

    /// After a crash: blanks the rows that may have been written after the last checkpoint
    /// (times from `unsure_from` to `horizon`), or with no checkpoint the torn ones. Returns the
    /// newest whole row's time when it had to look at every row.
    fn recover(&mut self, checkpoint: Option<&Checkpoint>) -> Result<Option<u64>, StoreError> {
        let secs = self.res.seconds();
        match checkpoint {
            Some(cp) if cp.horizon < cp.unsure_from => Ok(None),
            Some(cp) => {
                let first = self.res.start_of(cp.unsure_from);
                let intervals = ((cp.horizon - first) / secs).saturating_add(1);
                if intervals <= self.slots as u64 {
                    for k in 0..intervals {
                        let t = first + k * secs;
                        if self.probe(t)? != Row::Absent {
                            self.blank(self.slot_of(t))?;
                        }
                    }
                } else {
                    for slot in 0..self.slots as u64 {
                        if matches!(self.row_at(slot)?, Some((time, ..)) if time >= first) {
                            self.blank(slot)?;
                        }
                    }
                }
                Ok(None)
            }
            None => {
                let mut newest = None;
                for slot in 0..self.slots as u64 {
                    let Some((time, ..)) = self.row_at(slot)? else {
                        continue;
                    };
                    if self.probe(time)? == Row::Torn {
                        self.blank(slot)?;
                    } else {
                        newest = newest.max(Some(time));
                    }
                }
                Ok(newest)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The writer.

/// 4096 series of a family: their ring files and what is being accumulated for them.
struct Block {
    /// The four rings in [`Resolution::ALL`] order; empty until the next commit makes them.
    rings: Vec<Ring>,
    /// Columns in use (keys of this block).
    columns: u32,
    /// The open second: 5 values per column, `GAP` where not set.
    second: Vec<u64>,
    second_set: bool,
    /// Open minute, hour, day: 16 values per column.
    rollups: [Vec<u64>; 3],
    rollup_set: [bool; 3],
}

impl Block {
    fn new() -> Block {
        // Room for every column a block can have, reserved at once: columns come one at a
        // time, and growing by doubling copied each array over and over (the pages of the
        // columns not used yet are never touched).
        let rollup = || Vec::with_capacity(COLUMNS_PER_BLOCK as usize * ROLLUP_VALUES);
        Block {
            rings: Vec::new(),
            columns: 0,
            second: Vec::with_capacity(COLUMNS_PER_BLOCK as usize * METRICS),
            second_set: false,
            rollups: [rollup(), rollup(), rollup()],
            rollup_set: [false; 3],
        }
    }

    fn add_columns(&mut self, columns: u32) {
        self.columns += columns;
        let n = self.columns as usize;
        self.second.resize(n * METRICS, GAP);
        for r in &mut self.rollups {
            // Column by column from the gap template (a new key comes once a second per
            // host at worst, so this runs a million times in a flood).
            while r.len() < n * ROLLUP_VALUES {
                r.extend_from_slice(&GAP_ROLLUP);
            }
        }
    }

    fn clear_second(&mut self) {
        if self.second_set {
            self.second.fill(GAP);
            self.second_set = false;
        }
    }
}

struct FamilyWriter {
    family: Family,
    dir: PathBuf,
    /// The column of each key that owns one now.
    columns: crate::WireMap<Arc<str>, u32>,
    /// Per column: the key that owns it, and the second from which it does (0: since the
    /// column was made).
    owner: Vec<(Arc<str>, u64)>,
    /// Per column: the last second it was set (or the writer opened).
    last_set: Vec<u64>,
    /// Columns idle for `reuse_after`, found once a minute, lowest last.
    free: Vec<u32>,
    owners_file: File,
    owners_path: PathBuf,
    owners_file_len: u64,
    pending_owners: Vec<u8>,
    owners_dirty: bool,
    /// Columns given to another key so far.
    reused: u64,
    key_file: File,
    key_path: PathBuf,
    key_file_len: u64,
    keys_on_disk: u32,
    /// Escaped lines of new keys, written at the next commit or checkpoint.
    pending_keys: Vec<u8>,
    pending_count: u32,
    keys_dirty: bool,
    /// Files made since the last checkpoint: the directory needs an fsync.
    dir_dirty: bool,
    blocks: Vec<Block>,
}

impl FamilyWriter {
    fn open(
        series_dir: &Path,
        family: Family,
        config: &Config,
        checkpoint: Option<&Checkpoint>,
        newest: &mut Option<u64>,
    ) -> Result<FamilyWriter, StoreError> {
        let dir = series_dir.join(family.name());
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let listing = list_family_dir(&dir)?;
        for leftover in &listing.leftovers {
            fs::remove_file(leftover).map_err(io_err(leftover))?;
        }
        let key_path = dir.join(KEYS_NAME);
        let (key_file, data) = open_log(&key_path)?;
        let durable = checkpoint.map_or(0, |c| c.key_counts[family.index()]) as usize;
        // Line i names the first owner of column i. A key may be listed twice: one whose
        // column went to another key, and that came back when no column was free.
        let mut owner: Vec<(Arc<str>, u64)> = Vec::new();
        let mut good_len = 0u64;
        for (offset, key) in key_lines(&data, 0) {
            match key {
                Ok(k) => {
                    good_len = offset + escaped_len(&data[offset as usize..]);
                    owner.push((Arc::from(k), 0));
                }
                // Past the checkpointed keys a crash can leave a damaged tail: cut it below.
                Err(_) if owner.len() >= durable => break,
                Err(why) => return Err(keys_damaged(&dir, offset, &why)),
            }
        }
        if (good_len as usize) < data.len() {
            key_file.set_len(good_len).map_err(io_err(&key_path))?;
        }
        if owner.len() < durable {
            return Err(keys_damaged(
                &dir,
                good_len,
                &format!(
                    "it lists {} series, the last checkpoint recorded {durable}",
                    owner.len()
                ),
            ));
        }
        let keys = owner.len() as u32;
        // Then the reassignments of reused columns, in the order they were made.
        let owners_path = dir.join(OWNERS_NAME);
        let (owners_file, data) = open_log(&owners_path)?;
        let mut owners_len = 0u64;
        for (offset, len, line) in owner_lines(&data, 0) {
            match line {
                Ok((col, since, key)) if col < keys => {
                    owner[col as usize] = (Arc::from(key), since);
                    owners_len = offset + len;
                }
                Ok((col, ..)) => {
                    return Err(owners_damaged(
                        &dir,
                        offset,
                        &format!("column {col}, and the keys file lists {keys}"),
                    ))
                }
                Err(why) => return Err(owners_damaged(&dir, offset, &why)),
            }
        }
        // What follows the last whole line is a write a crash cut.
        if (owners_len as usize) < data.len() {
            owners_file
                .set_len(owners_len)
                .map_err(io_err(&owners_path))?;
        }
        let mut columns = crate::WireMap::with_capacity_and_hasher(owner.len(), Default::default());
        for (col, (key, _)) in owner.iter().enumerate() {
            // A key listed twice owns the later column (it got it after losing the first).
            columns.insert(key.clone(), col as u32);
        }
        // Every ring checked before anything is changed.
        let mut existing = HashMap::new();
        for (res, block, path) in &listing.rings {
            existing.insert(
                (*block, *res),
                Ring::open(path, family, *res, *block, true)?,
            );
        }
        let ring_blocks = listing.rings.iter().map(|r| r.1 + 1).max().unwrap_or(0);
        let block_count = keys.div_ceil(COLUMNS_PER_BLOCK).max(ring_blocks);
        let mut f = FamilyWriter {
            family,
            dir,
            columns,
            last_set: vec![0; owner.len()],
            owner,
            free: Vec::new(),
            owners_file,
            owners_path,
            owners_file_len: owners_len,
            pending_owners: Vec::new(),
            owners_dirty: false,
            reused: 0,
            key_file,
            key_path,
            key_file_len: good_len,
            keys_on_disk: keys,
            pending_keys: Vec::new(),
            pending_count: 0,
            keys_dirty: false,
            dir_dirty: false,
            blocks: Vec::new(),
        };
        for b in 0..block_count {
            let mut block = Block::new();
            block.add_columns(
                keys.saturating_sub(b * COLUMNS_PER_BLOCK)
                    .min(COLUMNS_PER_BLOCK),
            );
            for res in Resolution::ALL {
                let want = config.slots[res.index()];
                let ring = if let Some(mut ring) = existing.remove(&(b, res)) {
                    let seen = ring.recover(checkpoint)?;
                    if res == Resolution::Second {
                        *newest = (*newest).max(seen);
                    }
                    if ring.slots != want {
                        ring = resize_ring(&ring, &f.dir, family, b, want)?;
                        f.dir_dirty = true;
                    }
                    ring
                } else {
                    f.dir_dirty = true;
                    Ring::create(&f.dir, family, res, b, want, |_| Ok(()))?
                };
                block.rings.push(ring);
            }
            f.blocks.push(block);
        }
        Ok(f)
    }

    /// The column of a new key at second `second`, or `None` when it is refused: a free
    /// column when `reuse` allows it and one is free, else a new one if there are fewer than
    /// `config.max_keys`.
    fn add_key(&mut self, key: &str, second: u64, reuse: bool, config: &Config) -> Option<u32> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return None;
        }
        if reuse {
            while let Some(col) = self.free.pop() {
                if self.last_set[col as usize].saturating_add(config.reuse_after) <= second {
                    self.reuse_column(col, key, second);
                    return Some(col);
                }
            }
        }
        let col = self.owner.len() as u32;
        if col >= config.max_keys {
            return None;
        }
        escape_key(key, &mut self.pending_keys);
        self.pending_keys.push(b'\n');
        self.pending_count += 1;
        let key: Arc<str> = Arc::from(key);
        self.columns.insert(key.clone(), col);
        self.owner.push((key, 0));
        self.last_set.push(second);
        let b = (col / COLUMNS_PER_BLOCK) as usize;
        while self.blocks.len() <= b {
            self.blocks.push(Block::new());
        }
        self.blocks[b].add_columns(1);
        Some(col)
    }

    /// Gives idle column `col` to `key` from `second` on. The old key's data stays in the
    /// rows before; its open minute is empty (it was idle), and its share of the open hour and
    /// day, dropped here, is on disk in the minute and hour rows, where a reader finds it.
    fn reuse_column(&mut self, col: u32, key: &str, second: u64) {
        let (old, _) = &self.owner[col as usize];
        if self.columns.get(old) == Some(&col) {
            self.columns.remove(old);
        }
        let line = format!("{col} {second} ");
        self.pending_owners.extend_from_slice(line.as_bytes());
        escape_key(key, &mut self.pending_owners);
        self.pending_owners.push(b'\n');
        let key: Arc<str> = Arc::from(key);
        self.columns.insert(key.clone(), col);
        self.owner[col as usize] = (key, second);
        self.last_set[col as usize] = second;
        let block = &mut self.blocks[(col / COLUMNS_PER_BLOCK) as usize];
        let i = (col % COLUMNS_PER_BLOCK) as usize;
        for acc in &mut block.rollups {
            rollup_gap(&mut acc[i * ROLLUP_VALUES..(i + 1) * ROLLUP_VALUES]);
        }
        self.reused += 1;
    }

    /// Finds the columns idle for `reuse_after` at `second`.
    fn find_free(&mut self, second: u64, reuse_after: u64) {
        self.free.clear();
        if reuse_after == 0 {
            return;
        }
        // Highest first, so the lowest are reused first and the blocks stay full.
        for col in (0..self.last_set.len()).rev() {
            if self.last_set[col].saturating_add(reuse_after) <= second {
                self.free.push(col as u32);
            }
        }
    }

    fn flush_keys(&mut self) -> Result<(), StoreError> {
        if self.pending_keys.is_empty() {
            return Ok(());
        }
        // Positioned at the known end, so a failed write is simply written again.
        self.key_file
            .write_all_at(&self.pending_keys, self.key_file_len)
            .map_err(io_err(&self.key_path))?;
        self.key_file_len += self.pending_keys.len() as u64;
        self.keys_on_disk += self.pending_count;
        self.pending_keys.clear();
        self.pending_count = 0;
        self.keys_dirty = true;
        Ok(())
    }

    /// Writes the reassignments made since the last time, after the keys they refer to.
    fn flush_owners(&mut self) -> Result<(), StoreError> {
        if self.pending_owners.is_empty() {
            return Ok(());
        }
        self.owners_file
            .write_all_at(&self.pending_owners, self.owners_file_len)
            .map_err(io_err(&self.owners_path))?;
        self.owners_file_len += self.pending_owners.len() as u64;
        self.pending_owners.clear();
        self.owners_dirty = true;
        Ok(())
    }

    fn create_rings(&mut self, config: &Config) -> Result<(), StoreError> {
        for (b, block) in self.blocks.iter_mut().enumerate() {
            if block.rings.is_empty() && block.columns > 0 {
                for res in Resolution::ALL {
                    let slots = config.slots[res.index()];
                    let ring =
                        Ring::create(&self.dir, self.family, res, b as u32, slots, |_| Ok(()))?;
                    block.rings.push(ring);
                }
                self.dir_dirty = true;
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.keys_dirty {
            self.key_file.sync_data().map_err(io_err(&self.key_path))?;
            self.keys_dirty = false;
        }
        if self.owners_dirty {
            self.owners_file
                .sync_data()
                .map_err(io_err(&self.owners_path))?;
            self.owners_dirty = false;
        }
        for ring in self.blocks.iter_mut().flat_map(|b| b.rings.iter_mut()) {
            if ring.dirty {
                ring.file.sync_data().map_err(io_err(&ring.path))?;
                ring.dirty = false;
            }
        }
        if self.dir_dirty {
            sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        Ok(())
    }
}

/// Opens (or creates) an append-only file of the writer (keys, owners) and reads what it holds.
fn open_log(path: &Path) -> Result<(File, Vec<u8>), StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err(path))?;
    let data = fs::read(path).map_err(io_err(path))?;
    Ok((file, data))
}

/// Bytes of the first line of `data`, newline included.
fn escaped_len(data: &[u8]) -> u64 {
    data.iter()
        .position(|&b| b == b'\n')
        .map_or(data.len(), |p| p + 1) as u64
}

/// Rewrites a ring with another number of slots, keeping the newest rows that fit.
fn resize_ring(
    old: &Ring,
    dir: &Path,
    family: Family,
    block: u32,
    slots: u32,
) -> Result<Ring, StoreError> {
    let mut rows = Vec::new();
    for slot in 0..old.slots as u64 {
        if let Some((time, ..)) = old.row_at(slot)? {
            match old.probe(time)? {
                Row::Present { columns } => rows.push((time, columns)),
                Row::Torn => {
                    return Err(old.corrupt_row(
                        old.slot_offset(slot),
                        format!("row {slot} (time {time}) is not whole"),
                    ))
                }
                Row::Absent => {}
            }
        }
    }
    // Oldest first: a newer row that lands in the same slot replaces an older one.
    rows.sort_unstable();
    Ring::create(dir, family, old.res, block, slots, |new| {
        let mut values = Vec::new();
        let mut buf = Vec::new();
        for (time, columns) in rows {
            old.read_columns(time, columns, &mut values)?;
            new.write_row(time, &values, &mut buf)?;
        }
        Ok(())
    })
}

/// Writes the time series; see the module documentation for the format and the guarantees.
pub struct SeriesWriter {
    series_dir: PathBuf,
    config: Config,
    families: Vec<FamilyWriter>,
    checkpoint_file: File,
    checkpoint_path: PathBuf,
    /// The second between `begin` and `commit`.
    step: Option<u64>,
    last_committed: Option<u64>,
    /// No row newer than this is written before a new CHECKPOINT record (`None`: none yet).
    horizon: Option<u64>,
    /// Start of the open minute, hour and day.
    open_start: [Option<u64>; 3],
    buf: Vec<u8>,
    closed: bool,
    /// Keys refused: empty, longer than [`MAX_KEY_BYTES`], or past [`Config::max_keys`].
    pub refused_keys: u64,
    /// Steps refused (a second not after the last committed one) or begun and never committed.
    pub refused_steps: u64,
    /// `set` calls outside a step.
    pub ignored_sets: u64,
}

impl SeriesWriter {
    /// Opens (or creates) the time series of data directory `data_dir`, repairing what a crash
    /// left (see the module documentation).
    pub fn open(data_dir: &Path, config: Config) -> Result<SeriesWriter, StoreError> {
        prepare_data_dir(data_dir, true)?;
        let series_dir = data_dir.join("series");
        config.check(&series_dir)?;
        let fresh = !series_dir.exists();
        fs::create_dir_all(&series_dir).map_err(io_err(&series_dir))?;
        check_series_dir(&series_dir)?;
        let checkpoint_path = series_dir.join(CHECKPOINT_NAME);
        let checkpoint = Checkpoint::read(&checkpoint_path)?;
        let mut newest = None;
        let mut families = Vec::new();
        for family in Family::ALL {
            families.push(FamilyWriter::open(
                &series_dir,
                family,
                &config,
                checkpoint.as_ref(),
                &mut newest,
            )?);
        }
        let checkpoint_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&checkpoint_path)
            .map_err(io_err(&checkpoint_path))?;
        let mut w = SeriesWriter {
            series_dir,
            config,
            families,
            checkpoint_file,
            checkpoint_path,
            step: None,
            // Without a checkpoint, the newest whole row found is what there is.
            last_committed: checkpoint.map_or(newest, |c| c.committed),
            horizon: checkpoint.map(|c| c.horizon),
            open_start: [None; 3],
            buf: Vec::new(),
            closed: false,
            refused_keys: 0,
            refused_steps: 0,
            ignored_sets: 0,
        };
        if checkpoint.is_none() {
            w.sync(None)?;
            sync_dir(&w.series_dir)?;
            if fresh {
                sync_dir(data_dir)?;
            }
        }
        w.rebuild_open_intervals()?;
        // Idle time counts from now for the series found on disk.
        let now = w.last_committed.unwrap_or(0);
        for f in &mut w.families {
            f.last_set.fill(now);
        }
        Ok(w)
    }

    /// The newest committed second.
    pub fn last_committed(&self) -> Option<u64> {
        self.last_committed
    }

    /// Series of a family that own a column now.
    pub fn series(&self, family: Family) -> usize {
        self.families[family.index()].columns.len()
    }

    /// Columns of a family (at most [`Config::max_keys`]).
    pub fn columns(&self, family: Family) -> usize {
        self.families[family.index()].owner.len()
    }

    /// Columns given to a new key after their series went idle (see [`Config::reuse_after`]).
    pub fn reused_columns(&self) -> u64 {
        self.families.iter().map(|f| f.reused).sum()
    }

    /// Starts the step of `second`. Returns false (and the step's `set`s are ignored) when
    /// `second` is not after the last committed one. A step begun and not committed is dropped.
    pub fn begin(&mut self, second: u64) -> bool {
        if self.step.take().is_some() {
            self.refused_steps += 1;
        }
        for block in self.families.iter_mut().flat_map(|f| f.blocks.iter_mut()) {
            block.clear_second();
        }
        if self.last_committed.is_some_and(|c| second <= c) {
            self.refused_steps += 1;
            return false;
        }
        self.step = Some(second);
        true
    }

    /// The values of series `key` for the second begun. A series not set has a gap there. A new
    /// key gets the next column (written to the keys file at the commit); a refused key is
    /// counted in `refused_keys`.
    pub fn set(&mut self, family: Family, key: &str, metrics: Metrics) {
        if self.step.is_none() {
            self.ignored_sets += 1;
            return;
        }
        let Some(second) = self.step else {
            return;
        };
        let f = &mut self.families[family.index()];
        let col = match f.columns.get(key) {
            Some(&col) => col,
            None => {
                // A column is reused only while the open minute, hour and day are those of
                // this second: the old key's last closed intervals must be written first.
                let reuse = self.config.reuse_after != 0
                    && (0..3).all(|level| {
                        self.open_start[level]
                            .is_none_or(|t| t == Resolution::ALL[level + 1].start_of(second))
                    });
                match f.add_key(key, second, reuse, &self.config) {
                    Some(col) => col,
                    None => {
                        self.refused_keys += 1;
                        return;
                    }
                }
            }
        };
        f.last_set[col as usize] = second;
        let block = &mut f.blocks[(col / COLUMNS_PER_BLOCK) as usize];
        let at = (col % COLUMNS_PER_BLOCK) as usize * METRICS;
        // u64::MAX in bytes_in would read as a gap.
        let values = metrics.to_array().map(|v| v.min(GAP - 1));
        block.second[at..at + METRICS].copy_from_slice(&values);
        block.second_set = true;
    }

    /// Writes the second begun, and the minute, hour and day it closes.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        let Some(s) = self.step.take() else {
            return Ok(());
        };
        for f in &mut self.families {
            f.flush_keys()?;
            f.flush_owners()?;
            f.create_rings(&self.config)?;
        }
        if self.horizon.is_none_or(|h| s > h) {
            self.sync(Some(s))?;
        }
        // Intervals that ended before `s` without a step in their last second.
        for level in 0..3 {
            if let Some(start) = self.open_start[level] {
                if start.saturating_add(Resolution::ALL[level + 1].seconds()) <= s {
                    self.close_interval(level)?;
                }
            }
        }
        for level in 0..3 {
            self.open_start[level].get_or_insert(Resolution::ALL[level + 1].start_of(s));
        }
        let buf = &mut self.buf;
        for block in self.families.iter_mut().flat_map(|f| f.blocks.iter_mut()) {
            if !block.second_set {
                continue;
            }
            let n = block.columns as usize;
            block.rings[0].write_row(s, &block.second[..n * METRICS], buf)?;
            for (acc, second) in block.rollups[0]
                .chunks_exact_mut(ROLLUP_VALUES)
                .zip(block.second.chunks_exact(METRICS))
            {
                rollup_add_second(acc, second);
            }
            block.rollup_set[0] = true;
            block.clear_second();
        }
        self.last_committed = Some(s);
        for level in 0..3 {
            let secs = Resolution::ALL[level + 1].seconds();
            if s % secs == secs - 1 {
                self.close_interval(level)?;
            }
        }
        if s % 60 == 59 {
            for f in &mut self.families {
                f.find_free(s + 1, self.config.reuse_after);
            }
        }
        Ok(())
    }

    /// Writes the open interval of `level` (0 minute, 1 hour, 2 day) and adds it to the next.
    fn close_interval(&mut self, level: usize) -> Result<(), StoreError> {
        let Some(start) = self.open_start[level].take() else {
            return Ok(());
        };
        let res = Resolution::ALL[level + 1];
        let buf = &mut self.buf;
        for block in self.families.iter_mut().flat_map(|f| f.blocks.iter_mut()) {
            if !block.rollup_set[level] {
                continue;
            }
            let n = block.columns as usize * ROLLUP_VALUES;
            block.rings[res.index()].write_row(start, &block.rollups[level][..n], buf)?;
            let (this, coarser) = block.rollups.split_at_mut(level + 1);
            let this = &mut this[level];
            if let Some(next) = coarser.first_mut() {
                for (acc, part) in next
                    .chunks_exact_mut(ROLLUP_VALUES)
                    .zip(this.chunks_exact(ROLLUP_VALUES))
                {
                    rollup_merge(acc, part);
                }
                block.rollup_set[level + 1] = true;
            }
            for acc in this.chunks_exact_mut(ROLLUP_VALUES) {
                rollup_gap(acc);
            }
            block.rollup_set[level] = false;
        }
        Ok(())
    }

    /// Makes everything committed durable: a crash after this loses nothing committed so far.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.sync(None)
    }

    /// Checkpoints and closes.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.closed = true;
        self.sync(None)
    }

    /// fdatasyncs what was written, then writes the CHECKPOINT record. `step`: the second about
    /// to be written, when the horizon has to move past it.
    fn sync(&mut self, step: Option<u64>) -> Result<(), StoreError> {
        let mut key_counts = [0u32; 5];
        for f in &mut self.families {
            f.flush_keys()?;
            f.flush_owners()?;
            f.sync()?;
            key_counts[f.family.index()] = f.keys_on_disk;
        }
        let unsure_from = match (self.last_committed, step) {
            (Some(c), _) => c.saturating_add(1),
            (None, Some(s)) => s,
            (None, None) => u64::MAX,
        };
        let horizon = step
            .or(self.last_committed)
            .map_or(0, |t| t.saturating_add(HORIZON_S));
        let record = Checkpoint {
            committed: self.last_committed,
            unsure_from,
            horizon,
            key_counts,
        };
        self.checkpoint_file
            .write_all_at(&record.encode(), 0)
            .and_then(|_| self.checkpoint_file.sync_data())
            .map_err(io_err(&self.checkpoint_path))?;
        self.horizon = (horizon >= unsure_from).then_some(horizon);
        Ok(())
    }

    /// Rebuilds the open minute, hour and day from the durable rows after the last commit.
    fn rebuild_open_intervals(&mut self) -> Result<(), StoreError> {
        let Some(next) = self.last_committed.and_then(|c| c.checked_add(1)) else {
            return Ok(());
        };
        let starts =
            [Resolution::Minute, Resolution::Hour, Resolution::Day].map(|r| r.start_of(next));
        // (level, rows of this resolution, from, to): the minute from seconds, the hour from
        // the closed minutes, the day from the closed hours.
        let plan = [
            (0, Resolution::Second, starts[0], next),
            (1, Resolution::Minute, starts[1], starts[0]),
            (2, Resolution::Hour, starts[2], starts[1]),
        ];
        let mut values = Vec::new();
        for f in &mut self.families {
            for (b, block) in f.blocks.iter_mut().enumerate() {
                let owners = &f.owner[(b * C).min(f.owner.len())..];
                rebuild_block(block, owners, &plan, &mut values)?;
            }
        }
        self.open_start = [Some(starts[0]), Some(starts[1]), Some(starts[2])];
        Ok(())
    }
}

/// Rebuilds the open minute, hour and day of one block (see
/// [`SeriesWriter::rebuild_open_intervals`]). `owners` are the owners of its columns: a row
/// before a column's owner took it is not added to that column.
fn rebuild_block(
    block: &mut Block,
    owners: &[(Arc<str>, u64)],
    plan: &[(usize, Resolution, u64, u64)],
    values: &mut Vec<u64>,
) -> Result<(), StoreError> {
    if block.rings.is_empty() {
        return Ok(());
    }
    for &(level, res, from, to) in plan {
        let ring = &block.rings[res.index()];
        let mut t = from;
        while t < to {
            match ring.probe(t)? {
                Row::Absent => {}
                Row::Torn => {
                    return Err(ring.corrupt_row(
                        ring.slot_offset(ring.slot_of(t)),
                        format!("the row of {t}, before the last checkpoint, is not whole"),
                    ))
                }
                Row::Present { columns } => {
                    let columns = columns.min(block.columns);
                    ring.read_columns(t, columns, values)?;
                    let accs = block.rollups[level].chunks_exact_mut(ROLLUP_VALUES);
                    // The row of the interval in which a column changed owner holds only the
                    // new owner's data (its accumulators were emptied then); earlier rows are
                    // the old owner's.
                    let mine = |i: usize| owners.get(i).is_none_or(|o| t + res.seconds() > o.1);
                    if res == Resolution::Second {
                        for (i, (acc, v)) in accs.zip(values.chunks_exact(METRICS)).enumerate() {
                            if mine(i) {
                                rollup_add_second(acc, v);
                            }
                        }
                    } else {
                        for (i, (acc, v)) in
                            accs.zip(values.chunks_exact(ROLLUP_VALUES)).enumerate()
                        {
                            if mine(i) {
                                rollup_merge(acc, v);
                            }
                        }
                    }
                    block.rollup_set[level] = true;
                }
            }
            t += res.seconds();
        }
    }
    Ok(())
}

impl Drop for SeriesWriter {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.sync(None);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reader.

/// Where a series was: column `col` from second `from` until second `until` (`u64::MAX` while
/// it still owns the column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    col: u32,
    from: u64,
    until: u64,
}

/// Reads the time series of a data directory, of a running or a stopped writer.
pub struct SeriesReader {
    series_dir: PathBuf,
}

/// What the last CHECKPOINT says: rows of intervals ending at or before `committed` are
/// durable; rows after it start at or before `horizon`.
#[derive(Clone, Copy, Debug)]
struct View {
    committed: Option<u64>,
    horizon: u64,
}

/// A line of a family's keys file (column `col`'s first owner) or owners file.
enum ScanLine {
    Key { col: u32, key: String },
    Owner { col: u32, since: u64, key: String },
}

/// The four rings of one block, as far as they exist.
struct RingSet {
    rings: [Option<Ring>; 4],
}

impl SeriesReader {
    /// Opens the time series of `data_dir` and checks its ring files. The keys and owners
    /// files are read (and checked) when a series is looked up: one pass over them, in little
    /// memory, so opening a reader per request costs no index of every key ever seen.
    pub fn open(data_dir: &Path) -> Result<SeriesReader, StoreError> {
        prepare_data_dir(data_dir, false)?;
        let series_dir = data_dir.join("series");
        let r = SeriesReader { series_dir };
        if !r.series_dir.exists() {
            return Ok(r);
        }
        check_series_dir(&r.series_dir)?;
        Checkpoint::read(&r.series_dir.join(CHECKPOINT_NAME))?;
        for family in Family::ALL {
            let dir = r.series_dir.join(family.name());
            if !dir.exists() {
                continue;
            }
            for (res, block, path) in list_family_dir(&dir)?.rings {
                Ring::open(&path, family, res, block, false)?;
            }
        }
        Ok(r)
    }

    /// The newest second made durable by the writer's last checkpoint.
    pub fn committed(&self) -> Result<Option<u64>, StoreError> {
        Ok(self.view()?.committed)
    }

    fn view(&self) -> Result<View, StoreError> {
        let cp = Checkpoint::read(&self.series_dir.join(CHECKPOINT_NAME))?;
        Ok(View {
            committed: cp.and_then(|c| c.committed),
            horizon: cp.map_or(0, |c| c.horizon),
        })
    }

    /// The keys of a family, each once, in the order they first got a column.
    pub fn keys(&mut self, family: Family) -> Result<Vec<String>, StoreError> {
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::new();
        self.scan(family, |line| {
            let key = match line {
                ScanLine::Key { key, .. } => key,
                ScanLine::Owner { key, .. } => key,
            };
            if seen.insert(key.clone()) {
                keys.push(key);
            }
        })?;
        Ok(keys)
    }

    /// Where series `key` was: one segment per column it held.
    fn segments(&mut self, family: Family, key: &str) -> Result<Vec<Segment>, StoreError> {
        let mut segments: Vec<Segment> = Vec::new();
        self.scan(family, |line| match line {
            ScanLine::Key { col, key: k } if k == key => segments.push(Segment {
                col,
                from: 0,
                until: u64::MAX,
            }),
            ScanLine::Key { .. } => {}
            ScanLine::Owner { col, since, key: k } => {
                // The column changes hands: a segment of ours there ends.
                for seg in segments.iter_mut() {
                    if seg.col == col && seg.until == u64::MAX {
                        seg.until = since.max(seg.from);
                    }
                }
                if k == key {
                    segments.push(Segment {
                        col,
                        from: since,
                        until: u64::MAX,
                    });
                }
            }
        })?;
        Ok(segments)
    }

    /// Reads the keys file, then the owners file, of a family line by line, and hands each
    /// line to `visit`. A damaged line is an error that names the file, but for what a crash
    /// may leave after the last checkpoint (the writer cuts it) and a line that is not whole
    /// yet (being written); an owners line for a column past the keys read is one the writer
    /// is adding right now, and ends the scan.
    fn scan(&self, family: Family, mut visit: impl FnMut(ScanLine)) -> Result<(), StoreError> {
        use std::io::BufRead;
        let dir = self.series_dir.join(family.name());
        let durable = Checkpoint::read(&self.series_dir.join(CHECKPOINT_NAME))?
            .map_or(0, |c| c.key_counts[family.index()]);
        let open = |name: &str| -> Result<Option<io::BufReader<File>>, StoreError> {
            let path = dir.join(name);
            match File::open(&path) {
                Ok(f) => Ok(Some(io::BufReader::with_capacity(1 << 16, f))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err(&path)(e)),
            }
        };
        let Some(mut keys) = open(KEYS_NAME)? else {
            return Ok(());
        };
        let keys_path = dir.join(KEYS_NAME);
        let mut line = Vec::new();
        let (mut cols, mut offset) = (0u32, 0u64);
        loop {
            line.clear();
            let got = keys
                .read_until(b'\n', &mut line)
                .map_err(io_err(&keys_path))?;
            if got == 0 || line.last() != Some(&b'\n') {
                if cols < durable {
                    return Err(keys_damaged(
                        &dir,
                        offset,
                        &format!("it lists {cols} series, the last checkpoint recorded {durable}"),
                    ));
                }
                break;
            }
            match unescape_key(&line[..got - 1]) {
                Ok(key) => visit(ScanLine::Key { col: cols, key }),
                // After the checkpointed keys: what a crash left, which the writer will cut.
                Err(_) if cols >= durable => break,
                Err(why) => return Err(keys_damaged(&dir, offset, &why)),
            }
            cols += 1;
            offset += got as u64;
        }
        let Some(mut owners) = open(OWNERS_NAME)? else {
            return Ok(());
        };
        let owners_path = dir.join(OWNERS_NAME);
        offset = 0;
        loop {
            line.clear();
            let got = owners
                .read_until(b'\n', &mut line)
                .map_err(io_err(&owners_path))?;
            if got == 0 || line.last() != Some(&b'\n') {
                break;
            }
            match parse_owner_line(&line[..got - 1]) {
                Ok((col, since, key)) if col < cols => visit(ScanLine::Owner { col, since, key }),
                Ok(_) => break,
                Err(why) => return Err(owners_damaged(&dir, offset, &why)),
            }
            offset += got as u64;
        }
        Ok(())
    }

    fn ring_set(&self, family: Family, block: u32) -> Result<RingSet, StoreError> {
        let dir = self.series_dir.join(family.name());
        let mut rings = [None, None, None, None];
        for res in Resolution::ALL {
            let path = dir.join(ring_name(res, block));
            if path.exists() {
                rings[res.index()] = Some(Ring::open(&path, family, res, block, false)?);
            }
        }
        Ok(RingSet { rings })
    }

    /// The points of series `key` at resolution `res` for the intervals that overlap
    /// `[from, to)`: one per interval, `None` for a gap (an unknown key is all gaps). At most
    /// the ring's slots, the newest ones. The open (or just closed) minute, hour and day are
    /// computed from the finer rows.
    pub fn read(
        &mut self,
        family: Family,
        key: &str,
        res: Resolution,
        from: u64,
        to: u64,
    ) -> Result<Vec<Point>, StoreError> {
        let secs = res.seconds();
        let first = res.start_of(from);
        if to <= first {
            return Ok(Vec::new());
        }
        // Nothing is stored after the newest committed second: when the range holds more
        // intervals than the ring, the window kept is the newest one that can have data (a
        // range reaching far past the data still gets the data, then gaps).
        let end_all = first.saturating_add((to - first).div_ceil(secs).saturating_mul(secs));
        let data_end = match self.committed()? {
            Some(c) => res
                .start_of(c)
                .saturating_add(secs)
                .min(end_all)
                .max(first.saturating_add(secs)),
            None => end_all,
        };
        let segments = self.segments(family, key)?;
        let mut rings = HashMap::new();
        for seg in &segments {
            let block = seg.col / COLUMNS_PER_BLOCK;
            if let std::collections::hash_map::Entry::Vacant(e) = rings.entry(block) {
                e.insert(self.ring_set(family, block)?);
            }
        }
        let slots = rings
            .values()
            .next()
            .and_then(|r| r.rings[res.index()].as_ref())
            .map_or(res.default_slots(), |r| r.slots) as u64;
        let start = first + ((data_end - first) / secs).saturating_sub(slots) * secs;
        let count = ((end_all - start) / secs).min(slots);
        let view = self.view()?;
        let mut points = Vec::with_capacity(count as usize);
        let mut acc = [0u64; ROLLUP_VALUES];
        let mut part = [0u64; ROLLUP_VALUES];
        for k in 0..count {
            let t = start + k * secs;
            // Nearly always one segment; an interval in which the series changed columns
            // adds up its share of each.
            let mut sample = None;
            rollup_gap(&mut acc);
            for seg in &segments {
                let ring_set = &rings[&(seg.col / COLUMNS_PER_BLOCK)];
                if let Some(s) = ring_set.sample_in(seg, res, t, view)? {
                    rollup_of_sample(&s, &mut part);
                    rollup_merge(&mut acc, &part);
                    sample = match sample {
                        None => Some(s),
                        Some(_) => sample_of_rollup(&acc),
                    };
                }
            }
            points.push(Point { t, sample });
        }
        Ok(points)
    }

    /// The finest resolution whose retention reaches back to `from` from the last checkpoint.
    pub fn best_resolution(&mut self, family: Family, from: u64) -> Result<Resolution, StoreError> {
        let newest = self.committed()?.unwrap_or(from);
        let rings = self.ring_set(family, 0)?;
        for res in Resolution::ALL {
            let slots = rings.rings[res.index()]
                .as_ref()
                .map_or(res.default_slots(), |r| r.slots) as u64;
            let oldest = res
                .start_of(newest)
                .saturating_sub((slots - 1) * res.seconds());
            if from >= oldest {
                return Ok(res);
            }
        }
        Ok(Resolution::Day)
    }

    /// [`read`](Self::read) at [`best_resolution`](Self::best_resolution).
    pub fn read_auto(
        &mut self,
        family: Family,
        key: &str,
        from: u64,
        to: u64,
    ) -> Result<(Resolution, Vec<Point>), StoreError> {
        let res = self.best_resolution(family, from)?;
        Ok((res, self.read(family, key, res, from, to)?))
    }
}

impl RingSet {
    /// The sample of segment `seg` for the interval of `res` at `t`: the column's own row, or
    /// for the interval in which the segment ends (its row holds the next owner's data), the
    /// finer rows up to its end, while they are kept (a gap after that).
    fn sample_in(
        &self,
        seg: &Segment,
        res: Resolution,
        t: u64,
        view: View,
    ) -> Result<Option<Sample>, StoreError> {
        let end = t.saturating_add(res.seconds());
        if end <= seg.from || t >= seg.until {
            return Ok(None);
        }
        let col = seg.col % COLUMNS_PER_BLOCK;
        if seg.until >= end {
            return self.sample_at(col, res, t, view, seg.from);
        }
        let Some(finer) = res.finer() else {
            return Ok(None);
        };
        if t < self.oldest_kept(finer, view) {
            return Ok(None);
        }
        let mut acc = [0u64; ROLLUP_VALUES];
        rollup_gap(&mut acc);
        let mut part = [0u64; ROLLUP_VALUES];
        let mut u = t;
        while u < seg.until {
            if let Some(s) = self.sample_in(seg, finer, u, view)? {
                rollup_of_sample(&s, &mut part);
                rollup_merge(&mut acc, &part);
            }
            u += finer.seconds();
        }
        Ok(sample_of_rollup(&acc))
    }

    /// The start of the oldest interval of `res` still kept.
    fn oldest_kept(&self, res: Resolution, view: View) -> u64 {
        let slots = self.rings[res.index()]
            .as_ref()
            .map_or(res.default_slots(), |r| r.slots) as u64;
        view.committed.map_or(0, |c| {
            res.start_of(c)
                .saturating_sub((slots - 1).saturating_mul(res.seconds()))
        })
    }

    /// Column `col`'s sample for the interval of `res` at `t`. An open interval is made from
    /// the finer rows, of `from` on (when the column's owner took it).
    fn sample_at(
        &self,
        col: u32,
        res: Resolution,
        t: u64,
        view: View,
        from: u64,
    ) -> Result<Option<Sample>, StoreError> {
        let committed = view.committed;
        let Some(ring) = &self.rings[res.index()] else {
            return Ok(None);
        };
        let end = t.saturating_add(res.seconds() - 1);
        let mut row = ring.probe(t)?;
        // A row being written right now: give the writer a moment.
        for _ in 0..3 {
            if row != Row::Torn {
                break;
            }
            std::thread::yield_now();
            row = ring.probe(t)?;
        }
        match row {
            Row::Present { columns } if col < columns => {
                let mut v = [0u64; ROLLUP_VALUES];
                let v = &mut v[..res.values()];
                if !ring.read_column(t, col, v)? {
                    return Ok(None);
                }
                Ok(match res {
                    Resolution::Second => sample_of_second(v),
                    _ => sample_of_rollup(v),
                })
            }
            Row::Present { .. } => Ok(None),
            Row::Torn if committed.is_some_and(|c| end <= c) => Err(ring.corrupt_row(
                ring.slot_offset(ring.slot_of(t)),
                format!("the row of {t}, before the last checkpoint, is not whole"),
            )),
            Row::Torn | Row::Absent => {
                // Not written (yet) after the last checkpoint: an open interval, made from the
                // finer rows as the writer will make it.
                match (res.finer(), committed) {
                    (Some(finer), Some(c)) if end > c && t <= view.horizon => {
                        let mut acc = [0u64; ROLLUP_VALUES];
                        rollup_gap(&mut acc);
                        let mut part = [0u64; ROLLUP_VALUES];
                        for k in 0..res.seconds() / finer.seconds() {
                            let Some(u) = t.checked_add(k * finer.seconds()) else {
                                break;
                            };
                            if u.saturating_add(finer.seconds()) <= from {
                                continue;
                            }
                            if let Some(s) = self.sample_at(col, finer, u, view, from)? {
                                rollup_of_sample(&s, &mut part);
                                rollup_merge(&mut acc, &part);
                            }
                        }
                        Ok(sample_of_rollup(&acc))
                    }
                    _ => Ok(None),
                }
            }
        }
    }
}
