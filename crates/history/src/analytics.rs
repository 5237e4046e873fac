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
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

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
/// An unreadable or damaged file is an error that names it.
pub fn read(
    data_dir: &Path,
    kind: Kind,
    time_key: &str,
    from: u64,
    to: u64,
) -> Result<Vec<Value>, String> {
    let dir = data_dir.join(DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    if to <= from {
        return Ok(out);
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
    for path in days {
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read '{}': {e}", path.display())),
        };
        let lines: Vec<String> = io::BufReader::new(f)
            .lines()
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
        let n = lines.len();
        for (i, line) in lines.into_iter().enumerate() {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => {
                    let t = v[time_key].as_u64().unwrap_or(0);
                    if t >= from && t < to {
                        out.push(v);
                    }
                }
                // The last line of a file being written may be cut mid-write: not an error.
                Err(_) if i + 1 == n => {}
                Err(e) => {
                    return Err(format!(
                        "'{}' line {}: not a record sonde wrote ({e}); move the file aside",
                        path.display(),
                        i + 1
                    ))
                }
            }
        }
    }
    Ok(out)
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

/// Ranks the entries of `list` over several intervals: packets, bytes (and flows) added up per
/// entry, sorted by `sort` (`bytes`, `packets` or `flows`), `n` first. Each interval holds its
/// top entries only, so an entry's sum misses the intervals where it was not listed; the
/// second value says how many intervals had cut their list (0: every sum is exact).
pub fn top_over(intervals: &[Value], list: &str, sort: &str, n: usize) -> (Vec<Value>, usize) {
    let mut sums: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    let mut cut = 0;
    let keep = |v: &Value| v.as_array().map_or(0, |a| a.len());
    for iv in intervals {
        let entries = &iv[list];
        let total = iv[format!("{list}_total")].as_u64().unwrap_or(0) as usize;
        if total > keep(entries) {
            cut += 1;
        }
        for e in entries.as_array().into_iter().flatten() {
            let k = entry_key(list, e);
            match sums.get_mut(&k) {
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
                    sums.insert(k, e);
                }
            }
        }
    }
    let mut out: Vec<Value> = sums.into_values().collect();
    out.sort_by(|a, b| {
        b[sort]
            .as_u64()
            .cmp(&a[sort].as_u64())
            .then_with(|| entry_key(list, a).cmp(&entry_key(list, b)))
    });
    out.truncate(n);
    (out, cut)
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
}
