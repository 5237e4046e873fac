//! The traffic analytics' history on local disk (`sonde_analytics` makes the records): every merged interval (top-N and anomaly lists) and
//! every detection record, as JSON lines in one file per UTC day and kind, so "top ports
//! between 03:00 and 03:10 last Tuesday" reads the few files of that day.
//!
//! ```text
//! DATA_DIR/analytics/YYYY-MM-DD.intervals.jsonl    one merged interval per line, by its start
//! DATA_DIR/analytics/YYYY-MM-DD.detections.jsonl   detection records (start and end events)
//! DATA_DIR/analytics/YYYY-MM-DD.alerts.jsonl       alert events (start, end, ack), by `at`
//! ```
//!
//! Each line is appended with one write and the files are made durable (`fdatasync`) after
//! each interval; a line a crash cut short (no newline at the end of a file) is cut off when the
//! writer opens the file again. A reader skips nothing silently: a line that is not JSON in the
//! middle of a file is an error naming the file and line. Whole days older than the retention
//! are deleted.

use serde_json::Value;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DIR: &str = "analytics";

fn day_name(unix_s: u64) -> String {
    let (y, m, d) = crate::filter_text::civil_from_days((unix_s / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Which file of a day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Intervals,
    Detections,
    /// Alert events (start, end, ack), by the time of the event (`at`).
    Alerts,
}

impl Kind {
    fn suffix(self) -> &'static str {
        match self {
            Kind::Intervals => ".intervals.jsonl",
            Kind::Detections => ".detections.jsonl",
            Kind::Alerts => ".alerts.jsonl",
        }
    }
}

/// Appends intervals and detections.
pub struct Writer {
    dir: PathBuf,
    open: Vec<(Kind, String, File)>,
    max_age_s: u64,
}

impl Writer {
    /// Opens (creates) `data_dir/analytics`; days older than `max_age_s` (0: keep all) are
    /// deleted as time goes by.
    pub fn open(data_dir: &Path, max_age_s: u64) -> io::Result<Writer> {
        let dir = data_dir.join(DIR);
        fs::create_dir_all(&dir)?;
        Ok(Writer {
            dir,
            open: Vec::new(),
            max_age_s,
        })
    }

    fn file(&mut self, kind: Kind, day: String) -> io::Result<&mut File> {
        if let Some(i) = self
            .open
            .iter()
            .position(|(k, d, _)| *k == kind && *d == day)
        {
            return Ok(&mut self.open[i].2);
        }
        // One open file per kind: the previous day's is synced and closed.
        if let Some(i) = self.open.iter().position(|(k, _, _)| *k == kind) {
            let (_, _, f) = self.open.remove(i);
            f.sync_data()?;
        }
        let path = self.dir.join(format!("{day}{}", kind.suffix()));
        let mut f = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        cut_torn_line(&mut f)?;
        self.open.push((kind, day, f));
        let n = self.open.len() - 1;
        Ok(&mut self.open[n].2)
    }

    /// Appends one record, in the file of the day of `at` (Unix seconds).
    pub fn append(&mut self, kind: Kind, at: u64, v: &Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
        line.push(b'\n');
        let f = self.file(kind, day_name(at))?;
        f.write_all(&line)
    }

    /// Makes what was appended durable, and applies the retention as of `now` (Unix seconds).
    pub fn sync(&mut self, now: u64) -> io::Result<()> {
        for (_, _, f) in &self.open {
            f.sync_data()?;
        }
        if self.max_age_s > 0 {
            let oldest = day_name(now.saturating_sub(self.max_age_s));
            for e in fs::read_dir(&self.dir)?.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.len() >= 10 && name.ends_with(".jsonl") && name[..10] < *oldest {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }
}

/// A file ending without a newline was cut by a crash during an append: the partial line goes.
fn cut_torn_line(f: &mut File) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let back = len.min(1 << 20);
    f.seek(SeekFrom::Start(len - back))?;
    let mut tail = Vec::with_capacity(back as usize);
    f.read_to_end(&mut tail)?;
    if tail.last() == Some(&b'\n') {
        return Ok(());
    }
    let keep = match tail.iter().rposition(|&b| b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        None if back == len => 0,
        None => return Ok(()), // a line longer than a MiB: leave it to the reader's error
    };
    f.set_len(keep)
}

/// Records of `kind` whose time (`time_key`, Unix seconds) is in `[from, to)`, oldest first.
/// An unreadable or damaged file is an error that names it. Every record is parsed and kept:
/// for a page of them, or a sum over them, [`read_page`] and [`scan`] hold only what they
/// need (a busy day's detections run to hundreds of MB of JSON, several times that parsed).
pub fn read(
    data_dir: &Path,
    kind: Kind,
    time_key: &str,
    from: u64,
    to: u64,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    scan(data_dir, kind, time_key, from, to, |v| {
        out.push(v.parse()?);
        Ok(true)
    })?;
    Ok(out)
}

/// One stored record, as read: its line, parsed only when asked.
pub struct RawRecord<'a> {
    line: &'a [u8],
    path: &'a Path,
    offset: u64,
}

impl RawRecord<'_> {
    /// One top-level field of the record (null when it has none), without parsing the rest;
    /// `None` when the line is not a JSON object.
    pub fn field(&self, key: &str) -> Option<Value> {
        field_of(self.line, key)
    }

    /// The record parsed; a line that is not JSON is an error naming the file and byte.
    pub fn parse(&self) -> Result<Value, String> {
        serde_json::from_slice::<Value>(self.line).map_err(|e| {
            format!(
                "'{}' at byte {}: not a record sonde wrote ({e}); move the file aside",
                self.path.display(),
                self.offset
            )
        })
    }
}

/// Calls `visit` with each record of `kind` whose time (`time_key`, Unix seconds) is in
/// `[from, to)`, oldest first, until it answers false. One line is in memory at a time.
pub fn scan(
    data_dir: &Path,
    kind: Kind,
    time_key: &str,
    from: u64,
    to: u64,
    mut visit: impl FnMut(RawRecord<'_>) -> Result<bool, String>,
) -> Result<(), String> {
    let dir = data_dir.join(DIR);
    if !dir.is_dir() || to <= from {
        return Ok(());
    }
    // The day files present, in order; a detection may be filed under its start day, so one
    // day before the range is read too.
    let first = (from / 86_400).saturating_sub((kind != Kind::Intervals) as u64);
    let (lo, hi) = (day_name(first * 86_400), day_name(to.saturating_sub(1)));
    let mut days: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| format!("cannot read '{}': {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(kind.suffix()))
                .is_some_and(|day| day.len() == 10 && *day >= *lo && *day <= *hi)
        })
        .collect();
    days.sort();
    let mut buf = Vec::new();
    for path in days {
        let index = match index_of(&path, time_key) {
            Ok(Some(i)) => i,
            Ok(None) => continue,
            Err(e) => return Err(format!("cannot read '{}': {e}", path.display())),
        };
        if let Some(line) = index.bad_line {
            return Err(format!(
                "'{}' line {line}: not a record sonde wrote; move the file aside",
                path.display()
            ));
        }
        let mut wanted = index
            .lines
            .iter()
            .filter(|l| l.time >= from && l.time < to)
            .peekable();
        if wanted.peek().is_none() {
            continue;
        }
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read '{}': {e}", path.display())),
        };
        for l in wanted {
            buf.clear();
            buf.resize(l.len as usize, 0);
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, l.offset)
                .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
            let record = RawRecord {
                line: &buf,
                path: &path,
                offset: l.offset,
            };
            if !visit(record)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A page of stored records: those `keep` accepts, from the `offset`-th on, at most `limit`.
#[derive(Debug)]
pub struct Page {
    pub rows: Vec<Value>,
    /// More records follow the page.
    pub more: bool,
}

/// The records of `kind` in `[from, to)` that `keep` accepts (it sees each record unparsed),
/// skipping `offset` of them and keeping `limit`: only the page's lines are parsed whole, and
/// the scan stops at the first record after the page.
#[allow(clippy::too_many_arguments)]
pub fn read_page(
    data_dir: &Path,
    kind: Kind,
    time_key: &str,
    from: u64,
    to: u64,
    offset: usize,
    limit: usize,
    keep: impl Fn(&RawRecord) -> bool,
) -> Result<Page, String> {
    let mut page = Page {
        rows: Vec::new(),
        more: false,
    };
    let mut seen = 0usize;
    scan(data_dir, kind, time_key, from, to, |r| {
        if !keep(&r) {
            return Ok(true);
        }
        seen += 1;
        if seen <= offset {
            return Ok(true);
        }
        if page.rows.len() == limit {
            page.more = true;
            return Ok(false);
        }
        page.rows.push(r.parse()?);
        Ok(true)
    })?;
    Ok(page)
}

/// A complete line of a day file: where it is and the time it was read with.
#[derive(Clone, Copy, Debug)]
struct Line {
    offset: u64,
    len: u32,
    time: u64,
}

/// The lines of one day file, by time, as far as the file had been read.
#[derive(Clone, Debug, Default)]
struct DayIndex {
    /// The file's identity (device, inode): a file deleted and made again is read again.
    id: (u64, u64),
    /// Its modification time when indexed (nanoseconds): a file rewritten in place to the
    /// same length is read again too.
    mtime: i128,
    /// Bytes indexed: the complete lines (a line still being written waits for its newline).
    indexed: u64,
    lines: Vec<Line>,
    /// Complete lines so far.
    count: usize,
    /// A line that is not a record, with something after it (1-based).
    bad_line: Option<usize>,
    /// A line that is not a record, the last one so far: a crash's, unless more follows.
    last_bad: Option<usize>,
}

/// Day files indexed lately (the API asks for the same days every few seconds): a query
/// reads the new end of a file, then only the lines of its range.
static INDEXES: std::sync::Mutex<Vec<(IndexKey, Arc<DayIndex>)>> =
    std::sync::Mutex::new(Vec::new());
/// A day file and the time key it is indexed by.
type IndexKey = (PathBuf, String);
/// Day files whose index is kept (an index is 24 bytes a line).
const INDEXES_KEPT: usize = 32;

/// The index of `path` by `time_key`, brought up to date (`None`: the file is gone).
fn index_of(path: &Path, time_key: &str) -> io::Result<Option<Arc<DayIndex>>> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    let id = (meta.dev(), meta.ino());
    let mtime = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
    let key = (path.to_path_buf(), time_key.to_string());
    let cached = {
        let cache = INDEXES.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, i)| i.clone())
    };
    // A file only grows; one that shrank (a torn line cut at restart) or was replaced is
    // read again from the start.
    let mut index = match cached {
        Some(i) if i.id == id && i.indexed == meta.len() && i.mtime == mtime => return Ok(Some(i)),
        Some(i) if i.id == id && i.indexed < meta.len() => (*i).clone(),
        _ => DayIndex {
            id,
            ..DayIndex::default()
        },
    };
    f.seek(SeekFrom::Start(index.indexed))?;
    let mut rest = Vec::new();
    f.read_to_end(&mut rest)?;
    let mut at = 0;
    while let Some(nl) = rest[at..].iter().position(|&b| b == b'\n') {
        let line = &rest[at..at + nl];
        index.count += 1;
        if index.last_bad.is_some() {
            index.bad_line = index.bad_line.or(index.last_bad);
        }
        match std::str::from_utf8(line)
            .ok()
            .and_then(|l| time_of(l, time_key))
        {
            Some(time) => {
                index.last_bad = None;
                index.lines.push(Line {
                    offset: index.indexed + at as u64,
                    len: nl as u32,
                    time,
                });
            }
            None => match serde_json::from_slice::<Value>(line) {
                // JSON but not an object: no time, as `v[key]` of it.
                Ok(_) => index.last_bad = None,
                Err(_) => index.last_bad = Some(index.count),
            },
        }
        at += nl + 1;
    }
    // A line without its newline yet is a write in progress: the next query reads it.
    if at < rest.len() && index.last_bad.is_some() {
        index.bad_line = index.bad_line.or(index.last_bad);
    }
    index.indexed += at as u64;
    index.mtime = mtime;
    let index = Arc::new(index);
    let mut cache = INDEXES.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(k, _)| *k != key);
    if cache.len() >= INDEXES_KEPT {
        cache.remove(0);
    }
    cache.push((key, index.clone()));
    Ok(Some(index))
}

/// The unsigned integer `key` of the JSON object `line` (0 when it has none, as
/// `v[key].as_u64().unwrap_or(0)`), read without building the object; `None` when `line` is
/// not a JSON object (the caller's full parse then says what is wrong).
fn time_of(line: &str, key: &str) -> Option<u64> {
    field_of(line.as_bytes(), key).map(|v| v.as_u64().unwrap_or(0))
}

/// The value of the top-level `key` of the JSON object `line` (null when it has none), read
/// without building the rest of the object; `None` when `line` is not a JSON object.
fn field_of(line: &[u8], key: &str) -> Option<Value> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
    use std::fmt;

    struct FieldOf<'k>(&'k str);

    impl<'de> Visitor<'de> for FieldOf<'_> {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut v = Value::Null;
            while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if k == self.0 {
                    // The last one counts when a key repeats, as in a full parse.
                    v = map.next_value::<Value>()?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(v)
        }
    }

    impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_map(self)
        }
    }

    let mut d = serde_json::Deserializer::from_slice(line);
    let v = FieldOf(key).deserialize(&mut d).ok()?;
    d.end().ok()?;
    Some(v)
}

/// The lists a query over intervals can rank.
pub const LISTS: [&str; 5] = ["talkers", "destinations", "ports", "apps", "flows"];

/// What identifies an entry of `list` across intervals.
fn entry_key(list: &str, v: &Value) -> String {
    let f = |k: &str| v[k].to_string();
    match list {
        "talkers" | "destinations" => format!("{}@{}", f("host"), f("vlan")),
        "ports" => format!("{}/{}", f("proto"), f("port")),
        "apps" => f("app"),
        _ => format!(
            "{} {} {} {} {}",
            f("proto"),
            f("client"),
            f("client_port"),
            f("server"),
            f("server_port")
        ),
    }
}

/// Ranks the entries of `list` over several intervals, added one at a time (a range's intervals
/// need not all be in memory): packets, bytes (and flows) added up per entry. Each interval holds
/// its top entries only, so an entry's sum misses the intervals where it was not listed;
/// [`TopOver::finish`] also says how many intervals had cut their list (0: every sum is exact).
pub struct TopOver {
    list: String,
    sums: std::collections::HashMap<String, Value>,
    cut: usize,
    intervals: usize,
}

impl TopOver {
    pub fn new(list: &str) -> TopOver {
        TopOver {
            list: list.to_string(),
            sums: std::collections::HashMap::new(),
            cut: 0,
            intervals: 0,
        }
    }

    /// Adds one interval's entries of the list.
    pub fn add(&mut self, iv: &Value) {
        let list = self.list.as_str();
        let entries = &iv[list];
        let total = iv[format!("{list}_total")].as_u64().unwrap_or(0) as usize;
        if total > entries.as_array().map_or(0, |a| a.len()) {
            self.cut += 1;
        }
        self.intervals += 1;
        for e in entries.as_array().into_iter().flatten() {
            let k = entry_key(list, e);
            match self.sums.get_mut(&k) {
                Some(acc) => {
                    for c in ["packets", "bytes", "flows"] {
                        if let (Some(a), Some(b)) = (acc[c].as_u64(), e[c].as_u64()) {
                            acc[c] = Value::from(a + b);
                        }
                    }
                }
                None => {
                    let mut e = e.clone();
                    if let Some(o) = e.as_object_mut() {
                        o.remove("error_bytes");
                    }
                    self.sums.insert(k, e);
                }
            }
        }
    }

    /// Intervals added so far.
    pub fn intervals(&self) -> usize {
        self.intervals
    }

    /// The `n` largest sums by `sort`, and how many intervals had their list cut.
    pub fn finish(self, sort: &str, n: usize) -> (Vec<Value>, usize) {
        let list = self.list.as_str();
        let mut out: Vec<Value> = self.sums.into_values().collect();
        out.sort_by(|a, b| {
            b[sort]
                .as_u64()
                .cmp(&a[sort].as_u64())
                .then_with(|| entry_key(list, a).cmp(&entry_key(list, b)))
        });
        out.truncate(n);
        (out, self.cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn days_and_torn_lines() {
        assert_eq!(day_name(1_764_000_000), "2025-11-24");
        let dir = std::env::temp_dir().join(format!("sonde-astore-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut w = Writer::open(&dir, 0).unwrap();
        w.append(Kind::Intervals, 100, &json!({"start": 100, "x": 1}))
            .unwrap();
        w.append(Kind::Intervals, 130, &json!({"start": 130, "x": 2}))
            .unwrap();
        w.sync(200).unwrap();
        drop(w);
        // A crash in the middle of a third append.
        let path = dir.join("analytics/1970-01-01.intervals.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"start\": 160, \"x").unwrap();
        drop(f);
        let v = read(&dir, Kind::Intervals, "start", 0, 1000).unwrap();
        assert_eq!(v.len(), 2, "the torn line is not a record");
        let mut w = Writer::open(&dir, 0).unwrap();
        w.append(Kind::Intervals, 190, &json!({"start": 190, "x": 3}))
            .unwrap();
        w.sync(200).unwrap();
        let v = read(&dir, Kind::Intervals, "start", 120, 1000).unwrap();
        assert_eq!(
            v.iter()
                .map(|r| r["x"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
        // Damage in the middle is named.
        fs::write(&path, "{\"start\":1}\ngarbage\n{\"start\":2}\n").unwrap();
        let e = read(&dir, Kind::Intervals, "start", 0, 10).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_time_read_alone_is_the_time_of_the_whole_record() {
        let lines = [
            r#"{"start": 130, "talkers": [{"host": "10.0.0.1", "start": 7}], "x": {"start": 9}}"#,
            r#"{"a": "\"start\": 5", "start": 12}"#,
            r#"{"start": 1, "start": 2}"#,
            r#"{"start": "130"}"#,
            r#"{"start": -4}"#,
            r#"{"start": 1.5}"#,
            r#"{"end": 3}"#,
            r#"{}"#,
            r#"{"start": 18446744073709551615}"#,
        ];
        for l in lines {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                time_of(l, "start"),
                Some(v["start"].as_u64().unwrap_or(0)),
                "{l}"
            );
        }
        // Not an object, or not JSON: left to the full parse.
        for l in [
            "[1, 2]",
            "7",
            "garbage",
            r#"{"start": 1"#,
            r#"{"start": 1} x"#,
        ] {
            assert_eq!(time_of(l, "start"), None, "{l}");
        }
    }

    #[test]
    fn queries_follow_a_file_as_it_grows_and_is_replaced() {
        let dir = std::env::temp_dir().join(format!("sonde-agrow-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut w = Writer::open(&dir, 0).unwrap();
        let starts = |v: Vec<Value>| -> Vec<u64> {
            v.iter().map(|r| r["start"].as_u64().unwrap()).collect()
        };
        for t in (0..300).step_by(30) {
            w.append(Kind::Intervals, t, &json!({"start": t})).unwrap();
        }
        w.sync(300).unwrap();
        assert_eq!(
            starts(read(&dir, Kind::Intervals, "start", 200, 1000).unwrap()),
            vec![210, 240, 270]
        );
        // Lines appended after a query are found by the next one, the old ones still too.
        for t in (300..400).step_by(30) {
            w.append(Kind::Intervals, t, &json!({"start": t, "x": "new"}))
                .unwrap();
        }
        w.sync(400).unwrap();
        assert_eq!(
            starts(read(&dir, Kind::Intervals, "start", 200, 1000).unwrap()),
            vec![210, 240, 270, 300, 330, 360, 390]
        );
        assert_eq!(
            starts(read(&dir, Kind::Intervals, "start", 0, 60).unwrap()),
            vec![0, 30]
        );
        // A line being written is not read half, nor taken as damage.
        let path = dir.join("analytics/1970-01-01.intervals.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"start\": 420, \"x").unwrap();
        assert!(read(&dir, Kind::Intervals, "start", 400, 1000)
            .unwrap()
            .is_empty());
        f.write_all(b"\": 1}\n").unwrap();
        drop(f);
        assert_eq!(
            starts(read(&dir, Kind::Intervals, "start", 400, 1000).unwrap()),
            vec![420]
        );
        // The same file made again (retention, a restore): read from its start.
        drop(w);
        fs::remove_file(&path).unwrap();
        let mut w = Writer::open(&dir, 0).unwrap();
        w.append(Kind::Intervals, 5, &json!({"start": 5})).unwrap();
        w.sync(10).unwrap();
        assert_eq!(
            starts(read(&dir, Kind::Intervals, "start", 0, 1000).unwrap()),
            vec![5]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_page_parses_its_own_records_and_stops_after_them() {
        let dir = std::env::temp_dir().join(format!("sonde-apage-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut w = Writer::open(&dir, 0).unwrap();
        // Two days of detections, every third a scan; the second day starts at t = 86,400.
        for i in 0..40u64 {
            let t = i * 4_000;
            let kind = if i % 3 == 0 { "scan" } else { "ddos" };
            w.append(
                Kind::Detections,
                t,
                &json!({"last_seen": t, "type": kind, "i": i}),
            )
            .unwrap();
        }
        w.sync(200_000).unwrap();
        drop(w);
        let ids =
            |p: &Page| -> Vec<u64> { p.rows.iter().map(|r| r["i"].as_u64().unwrap()).collect() };
        let scans = |r: &RawRecord| r.field("type").is_some_and(|t| t == "scan");
        let all = |_: &RawRecord| true;
        // The same pages as the whole read, filtered, then skipped and cut.
        let whole = read(&dir, Kind::Detections, "last_seen", 10_000, 150_000).unwrap();
        for (offset, limit) in [(0, 5), (3, 4), (0, 100), (9, 3), (11, 1), (30, 5)] {
            let want: Vec<u64> = whole
                .iter()
                .filter(|r| r["type"] == "scan")
                .skip(offset)
                .take(limit)
                .map(|r| r["i"].as_u64().unwrap())
                .collect();
            let matching = whole.iter().filter(|r| r["type"] == "scan").count();
            let p = read_page(
                &dir,
                Kind::Detections,
                "last_seen",
                10_000,
                150_000,
                offset,
                limit,
                scans,
            )
            .unwrap();
            assert_eq!(ids(&p), want, "offset {offset} limit {limit}");
            assert_eq!(
                p.more,
                matching > offset + limit,
                "offset {offset} limit {limit}"
            );
        }
        let p = read_page(&dir, Kind::Detections, "last_seen", 0, 200_000, 20, 20, all).unwrap();
        assert_eq!(ids(&p), (20..40).collect::<Vec<_>>());
        assert!(!p.more);
        // The scan stops when asked: a page reads one record past its end, no more.
        let mut visited = 0;
        scan(&dir, Kind::Detections, "last_seen", 0, 200_000, |_| {
            visited += 1;
            Ok(visited < 3)
        })
        .unwrap();
        assert_eq!(visited, 3);
        let visited = std::cell::Cell::new(0);
        let counting = |_: &RawRecord| {
            visited.set(visited.get() + 1);
            true
        };
        let p = read_page(
            &dir,
            Kind::Detections,
            "last_seen",
            0,
            200_000,
            2,
            5,
            counting,
        )
        .unwrap();
        assert_eq!(
            (ids(&p), p.more, visited.get()),
            (vec![2, 3, 4, 5, 6], true, 8)
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_field_read_alone_is_the_field_of_the_whole_record() {
        for l in [
            r#"{"type": "scan", "x": {"type": "ddos"}}"#,
            r#"{"a": "\"type\": \"x\"", "type": "ddos"}"#,
            r#"{"type": "a", "type": "b"}"#,
            r#"{"type": 7}"#,
            r#"{"other": 1}"#,
        ] {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                field_of(l.as_bytes(), "type"),
                Some(v["type"].clone()),
                "{l}"
            );
        }
        for l in ["[1]", "garbage", r#"{"type": "scan""#] {
            assert_eq!(field_of(l.as_bytes(), "type"), None, "{l}");
        }
    }

    #[test]
    fn sums_over_intervals_added_one_at_a_time() {
        let intervals: Vec<Value> = (0..6u64)
            .map(|i| {
                json!({
                    "start": i * 10,
                    "ports": [
                        {"proto": 6, "port": 443, "packets": i, "bytes": 100 * i, "flows": 1},
                        {"proto": 17, "port": 53 + (i % 2), "packets": 2, "bytes": 90, "flows": i},
                    ],
                    "ports_total": if i == 4 { 3 } else { 2 },
                })
            })
            .collect();
        let mut top = TopOver::new("ports");
        for iv in &intervals {
            top.add(iv);
        }
        assert_eq!(top.intervals(), 6);
        let (rows, cut) = top.finish("bytes", 2);
        assert_eq!(rows.len(), 2);
        assert_eq!(cut, 1, "one interval listed 2 of its 3 ports");
        assert_eq!(rows[0]["port"], 443);
        assert_eq!(rows[0]["bytes"], 1500);
        assert_eq!(rows[1]["bytes"], 270);
    }
}
