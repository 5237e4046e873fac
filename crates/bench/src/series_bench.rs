//! `make bench` section 8: time-series writes, sonde's time-major round-robin files against
//! rrdtool, in the data-center paper's Fig. 4 setting (one minute of statistics for N series).
//! RRD keeps one file per series, so its write time grows with the number of series; sonde
//! writes one row per 4096 series per second.

use sonde_bench::{cell, fmt_bytes, fmt_count, short_count, which, Table};
use sonde_history::series::{Config, Family, Metrics, SeriesWriter};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

/// A minute boundary: the measured minute is one whole minute of the rings.
const T0: u64 = 1_700_006_400;
/// The rrdtool files: 1 s rows for an hour (sonde's 1 s ring) and 1 min average, minimum and
/// maximum for a day (sonde keeps a week of minutes; a week in RRD is 1.36 MB per file, 136 GB
/// for 100k files). What an update costs RRD does not depend on the number of rows.
const RRD_ARCHIVES: [&str; 4] = [
    "RRA:AVERAGE:0.5:1:3600",
    "RRA:AVERAGE:0.5:60:1440",
    "RRA:MIN:0.5:60:1440",
    "RRA:MAX:0.5:60:1440",
];
const RRD_SOURCES: [&str; 5] = [
    "bytes_in",
    "bytes_out",
    "packets_in",
    "packets_out",
    "flows",
];

fn thread_cpu_s() -> f64 {
    // SAFETY: rusage is plain old data, filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU seconds of process `pid` so far, from /proc/PID/stat.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) / ticks)
}

/// Bytes the files under `dir` take on disk (allocated blocks: sparse files count what they use).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, filled by the kernel from a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Random-ish values of series `i` at second `s`: the same for sonde and rrdtool.
fn metrics(i: u64, s: u64) -> Metrics {
    let x = (i ^ s.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let packets_in = (x >> 8) % 200 + 1;
    let packets_out = (x >> 16) % 150;
    Metrics {
        bytes_in: packets_in * ((x >> 24) % 1400 + 60),
        bytes_out: packets_out * ((x >> 36) % 1400 + 60),
        packets_in,
        packets_out,
        flows: (x >> 48) % 20,
    }
}

fn host_key(i: u64) -> String {
    format!("10.{}.{}.{}@0", i >> 16 & 255, i >> 8 & 255, i & 255)
}

struct Measured {
    wall_s: f64,
    cpu_s: f64,
    /// Rounds (seconds of updates) measured, of 60.
    rounds: u64,
    disk: u64,
}

impl Measured {
    /// Seconds per minute of updates (60 rounds), from what was measured.
    fn per_minute(&self, cpu: bool) -> f64 {
        let t = if cpu { self.cpu_s } else { self.wall_s };
        t / self.rounds as f64 * 60.0
    }

    fn us_per_update(&self, n: u64) -> f64 {
        self.wall_s / (self.rounds * n) as f64 * 1e6
    }
}

/// One minute of updates for `n` series with sonde's writer: 60 steps, every series set with
/// all 5 metrics each step, a checkpoint (fdatasync) after each. The keys are made and their
/// rings created by one step before the minute, outside the timing (as `rrdtool create` is).
fn sonde_minute(n: u64, dir: &Path) -> Result<Measured, String> {
    let _ = std::fs::remove_dir_all(dir);
    let err = |e: sonde_history::store::StoreError| e.to_string();
    let keys: Vec<String> = (0..n).map(host_key).collect();
    let mut w = SeriesWriter::open(dir, Config::default()).map_err(err)?;
    let step = |w: &mut SeriesWriter, s: u64| -> Result<(), String> {
        w.begin(s);
        for (i, key) in keys.iter().enumerate() {
            w.set(Family::Hosts, key, metrics(i as u64, s));
        }
        w.commit().map_err(err)?;
        w.checkpoint().map_err(err)
    };
    step(&mut w, T0 - 1)?;
    let (c0, t0) = (thread_cpu_s(), Instant::now());
    for s in T0..T0 + 60 {
        step(&mut w, s)?;
    }
    let (cpu_s, wall_s) = (thread_cpu_s() - c0, t0.elapsed().as_secs_f64());
    w.close().map_err(err)?;
    let disk = disk_bytes(&dir.join("series"));
    let _ = std::fs::remove_dir_all(dir);
    Ok(Measured {
        wall_s,
        cpu_s,
        rounds: 60,
        disk,
    })
}

/// `rrdtool -` (commands on standard input, one "OK ..." or "ERROR: ..." line back for each).
struct RrdPipe {
    child: Child,
    input: BufWriter<ChildStdin>,
    /// One message per answer: `None` for OK, the text of an error.
    answers: Receiver<Option<String>>,
}

impl RrdPipe {
    fn start(rrdtool: &Path, dir: &Path) -> Result<RrdPipe, String> {
        let mut child = Command::new(rrdtool)
            .arg("-")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", rrdtool.display()))?;
        let input = BufWriter::with_capacity(1 << 20, child.stdin.take().expect("piped stdin"));
        let output = child.stdout.take().expect("piped stdout");
        let (tx, answers) = mpsc::channel();
        // Answers are drained as they come, so rrdtool never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                let answer = if line.starts_with("OK") {
                    None
                } else if line.starts_with("ERROR") {
                    Some(line)
                } else {
                    continue;
                };
                if tx.send(answer).is_err() {
                    break;
                }
            }
        });
        Ok(RrdPipe {
            child,
            input,
            answers,
        })
    }

    fn send(&mut self, command: &str) -> Result<(), String> {
        writeln!(self.input, "{command}").map_err(|e| format!("rrdtool pipe: {e}"))
    }

    /// Waits for the answers to `n` commands; the first error ends the run.
    fn wait(&mut self, n: u64) -> Result<(), String> {
        self.input
            .flush()
            .map_err(|e| format!("rrdtool pipe: {e}"))?;
        for _ in 0..n {
            match self.answers.recv() {
                Ok(None) => {}
                Ok(Some(error)) => return Err(format!("rrdtool: {error}")),
                Err(_) => return Err("rrdtool stopped answering".into()),
            }
        }
        Ok(())
    }

    fn finish(mut self) {
        drop(self.input);
        let _ = self.child.wait();
    }
}

/// The same minute with rrdtool: `n` RRD files (created first, untimed), then rounds of one
/// `update` per file through one `rrdtool -` process, until 60 rounds or `budget_s` seconds.
fn rrd_minute(rrdtool: &Path, n: u64, dir: &Path, budget_s: f64) -> Result<Measured, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = rrd_run(rrdtool, n, dir, budget_s);
    let _ = std::fs::remove_dir_all(dir);
    result
}

fn rrd_run(rrdtool: &Path, n: u64, dir: &Path, budget_s: f64) -> Result<Measured, String> {
    let mut rrd = RrdPipe::start(rrdtool, dir)?;
    let sources: String = RRD_SOURCES
        .iter()
        .map(|ds| format!(" DS:{ds}:GAUGE:2:U:U"))
        .collect();
    let archives = RRD_ARCHIVES.join(" ");
    let start = T0 - 1;
    let mut line = String::new();
    for i in 0..n {
        line.clear();
        let _ = write!(
            line,
            "create h{i}.rrd --step 1 --start {start}{sources} {archives}"
        );
        rrd.send(&line)?;
        // Bounded: a few thousand commands in flight at most.
        if i % 4096 == 4095 {
            rrd.wait(4096)?;
        }
    }
    rrd.wait(n % 4096)?;
    let disk = disk_bytes(dir);
    let pid = rrd.child.id();
    let (c0, t0) = (process_cpu_s(pid), Instant::now());
    let mut rounds = 0;
    while rounds < 60 {
        let s = T0 + rounds;
        for i in 0..n {
            let m = metrics(i, s);
            line.clear();
            let _ = write!(
                line,
                "update h{i}.rrd {s}:{}:{}:{}:{}:{}",
                m.bytes_in, m.bytes_out, m.packets_in, m.packets_out, m.flows
            );
            rrd.send(&line)?;
            if i % 4096 == 4095 {
                rrd.wait(4096)?;
            }
        }
        rrd.wait(n % 4096)?;
        rounds += 1;
        if t0.elapsed().as_secs_f64() > budget_s {
            break;
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = match (c0, process_cpu_s(pid)) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    };
    rrd.finish();
    Ok(Measured {
        wall_s,
        cpu_s,
        rounds,
        disk,
    })
}

fn rrd_file_bytes(rrdtool: &Path, dir: &Path) -> Result<u64, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rrd = RrdPipe::start(rrdtool, dir)?;
    let sources: String = RRD_SOURCES
        .iter()
        .map(|ds| format!(" DS:{ds}:GAUGE:2:U:U"))
        .collect();
    rrd.send(&format!(
        "create probe.rrd --step 1 --start {}{sources} {}",
        T0 - 1,
        RRD_ARCHIVES.join(" ")
    ))?;
    let answered = rrd.wait(1);
    rrd.finish();
    let bytes = disk_bytes(dir);
    let _ = std::fs::remove_dir_all(dir);
    answered.map(|_| bytes)
}

pub fn run(quick: bool, scratch: &Path) -> Result<String, String> {
    let rrdtool: PathBuf = which("rrdtool").ok_or(
        "rrdtool not found: install it (Debian package rrdtool; scripts/setup-bench-deps.sh does)",
    )?;
    let sizes: &[u64] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    // rrdtool's time for one size at most (then per-minute figures come from fewer rounds).
    let budget_s = if quick { 60.0 } else { 240.0 };
    let work = scratch.join("series-bench");
    let rrd_file = rrd_file_bytes(&rrdtool, &work.join("rrd-probe"))?;

    let mut t = Table::new(&[
        "series",
        "sonde s / minute (CPU s)",
        "sonde µs / series-update",
        "rrdtool s / minute (CPU s)",
        "rrdtool µs / series-update",
        "rrdtool ÷ sonde (wall, CPU)",
        "sonde disk",
        "rrdtool disk",
    ]);
    for &n in sizes {
        eprintln!("sonde-bench: series: {} series, sonde", short_count(n));
        let sonde = sonde_minute(n, &work.join(format!("sonde-{n}")))?;
        // The RRD files are written whole when created: leave room for them.
        let rrd = match free_bytes(scratch) {
            Some(free) if free < n * rrd_file + (2 << 30) => Err(format!(
                "not run: {} RRD files need {}, {} free",
                fmt_count(n),
                fmt_bytes(n * rrd_file),
                fmt_bytes(free)
            )),
            _ => {
                eprintln!("sonde-bench: series: {} series, rrdtool", short_count(n));
                rrd_minute(&rrdtool, n, &work.join(format!("rrd-{n}")), budget_s)
            }
        };
        let (rrd_minute_cell, rrd_us, ratio, rrd_disk) = match &rrd {
            Ok(r) => {
                let measured = if r.rounds < 60 {
                    format!(" from {} of 60 rounds", r.rounds)
                } else {
                    String::new()
                };
                (
                    format!(
                        "{:.2} ({:.2}){measured}",
                        r.per_minute(false),
                        r.per_minute(true)
                    ),
                    format!("{:.2}", r.us_per_update(n)),
                    format!(
                        "{:.0}×, {:.0}×",
                        r.per_minute(false) / sonde.per_minute(false),
                        r.per_minute(true) / sonde.per_minute(true).max(1e-9)
                    ),
                    fmt_bytes(r.disk),
                )
            }
            Err(e) => (cell(e), "-".into(), "-".into(), "-".into()),
        };
        t.row(vec![
            fmt_count(n),
            format!(
                "{:.3} ({:.3})",
                sonde.per_minute(false),
                sonde.per_minute(true)
            ),
            format!("{:.3}", sonde.us_per_update(n)),
            rrd_minute_cell,
            rrd_us,
            ratio,
            fmt_bytes(sonde.disk),
            rrd_disk,
        ]);
    }
    let _ = std::fs::remove_dir_all(&work);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## 8. Time series writes against rrdtool\n\n\
         The data-center paper's Fig. 4 setting: the time to store one minute of statistics for \
         N series. One minute is 60 one-second steps in which every series gets all 5 metrics \
         (bytes and packets each way, flows; random-ish integers, the same for both). sonde: \
         `SeriesWriter` (what `--data-dir` keeps) on one thread, `begin`, a `set` by key for \
         each series, `commit`, then a `checkpoint` (fdatasync) every second as sonde runs it; \
         wall time and that thread's CPU time for the 60 steps, including the minute's rollup \
         rows; the keys and ring files are made by one step before, untimed, and the minute \
         is written into fresh (sparse) rings, so the first lap's block allocation is counted. \
         rrdtool ({}): one RRD file per series, created untimed with `--step 1` and 5 `GAUGE` \
         sources (heartbeat 2) and `{}` ({} per file), then per second one \
         `update FILE T:v1:v2:v3:v4:v5` for every file, all through one `rrdtool -` process \
         (commands on its standard input); wall time of the update phase and the rrdtool \
         process's CPU time (/proc/PID/stat). Where rrdtool would need more than {:.0} s, \
         fewer rounds were measured and the minute figures are scaled from them, as the table \
         says. Disk: allocated bytes after the minute (sonde's rings are sparse: at full \
         retention they take 2.8 MB per series, against 1.36 MB for an RRD file with a week \
         of minutes).\n",
        rrdtool_version(&rrdtool),
        RRD_ARCHIVES.join(" "),
        fmt_bytes(rrd_file),
        budget_s
    );
    out.push_str(&t.to_markdown());
    Ok(out)
}

fn rrdtool_version(rrdtool: &Path) -> String {
    Command::new(rrdtool)
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1).map(|v| format!("RRDtool {v}")))
        })
        .unwrap_or_else(|| "RRDtool".into())
}

#[cfg(test)]
mod tests {
    /// `cargo test -p sonde-bench --release series_bench -- --ignored --nocapture`: the quick
    /// section, printed.
    #[test]
    #[ignore]
    fn quick_section() {
        let scratch =
            std::env::temp_dir().join(format!("sonde-series-bench-{}", std::process::id()));
        let text = super::run(true, &scratch).unwrap();
        let _ = std::fs::remove_dir_all(&scratch);
        println!("{text}");
    }
}
