//! Seed 002's Fig. 4: the time to store one minute of per-minute statistics as the number of
//! series grows, Cassandra (the sink's own statistics path: counter updates, prepared, token-aware,
//! at most 64 in flight) against rrdtool updating one RRD file per series (ntopng's way, the
//! paper's baseline). `scripts/bench-cassandra.sh` runs it against a node it starts.
//!
//! Per series count N and per minute: N hosts each get one minute of 5 statistics (bytes and
//! packets each way, flows). Cassandra: the sink sums them and sends one counter update per host,
//! timed from the first send to the last answer. rrdtool (`rrdtool -`, one process reading
//! commands on its standard input): N files made untimed (`--step 60`, 5 GAUGE sources, a day of
//! minutes), then per minute one `update` per file, timed until the last answer. CPU seconds of
//! the Cassandra node (`--cassandra-pid`) and of the rrdtool process come from /proc/PID/stat.
//! For comparison, the design not taken ([`written_rows`]): the same minute as plain rows.
//!
//! Usage: cassandra_stats_bench CQL_ADDR [--series 1000,10000,100000] [--minutes 3]
//!        [--rrd-dir DIR] [--cassandra-pid PID] [--no-rrd]

use sonde_probe::{CassandraSink, CassandraTarget};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let after = &stat[stat.rfind(')').map(|i| i + 2).unwrap_or(0)..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the file (utime, stime) are 12 and 13 after the name.
    let ticks: f64 = f[11].parse::<f64>().unwrap_or(0.0) + f[12].parse::<f64>().unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn host(i: usize) -> IpAddr {
    IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8])
}

fn sums(i: usize, m: usize) -> [i64; 5] {
    let x = (i * 7919 + m * 104_729) as i64;
    [
        1000 + x % 100_000,
        500 + x % 50_000,
        10 + x % 100,
        5 + x % 50,
        1 + x % 10,
    ]
}

/// (wall seconds, server CPU seconds) of each minute.
fn cassandra(cql: &str, n: usize, minutes: usize, pid: Option<u32>) -> Vec<(f64, f64)> {
    let url = format!("cassandra://{cql}/bench_stats_{n}");
    let mut sink = CassandraSink::connect(CassandraTarget::parse(&url).unwrap()).unwrap();
    let base: i64 = 1_764_115_200_000; // 2025-11-26 00:00 UTC
    let mut out = Vec::new();
    for m in 0..minutes {
        let minute = base + m as i64 * 60_000;
        for i in 0..n {
            sink.add_host_minute(host(i), minute, sums(i, m));
        }
        let cpu0 = pid.map(cpu_secs).unwrap_or(f64::NAN);
        let t = Instant::now();
        assert!(sink.flush_now(), "the node took every update");
        let wall = t.elapsed().as_secs_f64();
        out.push((wall, pid.map(cpu_secs).unwrap_or(f64::NAN) - cpu0));
    }
    out
}

/// The design not taken, for comparison: each series' minute written as a plain row (no counter)
/// of a partition per minute and shard (16), in unlogged batches of 100 rows of one partition, 64
/// in flight. Cheaper for the node, but a row holds what one writer saw: two probes, or a late
/// record, overwrite instead of adding.
fn written_rows(cql: &str, n: usize, minutes: usize, pid: Option<u32>) -> Vec<(f64, f64)> {
    use scylla::statement::batch::{Batch, BatchType};
    use scylla::value::{CqlDate, CqlTimestamp};
    use std::sync::Arc;
    type Row = (CqlDate, CqlTimestamp, i32, IpAddr, i64, i64, i64, i64, i64);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let session = Arc::new(
            scylla::client::session_builder::SessionBuilder::new()
                .known_node(cql)
                .build()
                .await
                .unwrap(),
        );
        let ks = format!("bench_stats_{n}");
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {ks}.rows_1m_hosts (day date, minute timestamp, \
                     shard int, host inet, sent_bytes bigint, rcvd_bytes bigint, sent_packets \
                     bigint, rcvd_packets bigint, flows bigint, PRIMARY KEY ((day, minute, \
                     shard), host))"
                ),
                (),
            )
            .await
            .unwrap();
        session.await_schema_agreement().await.unwrap();
        let insert = session
            .prepare(format!(
                "INSERT INTO {ks}.rows_1m_hosts (day, minute, shard, host, sent_bytes, \
                 rcvd_bytes, sent_packets, rcvd_packets, flows) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await
            .unwrap();
        let base: i64 = 1_764_115_200_000;
        let mut out = Vec::new();
        for m in 0..minutes {
            let minute = base + m as i64 * 60_000;
            let day = CqlDate((1u32 << 31) + (minute / 86_400_000) as u32);
            let mut by_shard: Vec<Vec<Row>> = vec![Vec::new(); 16];
            for i in 0..n {
                let s = sums(i, m);
                by_shard[i % 16].push((
                    day,
                    CqlTimestamp(minute),
                    (i % 16) as i32,
                    host(i),
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    s[4],
                ));
            }
            let cpu0 = pid.map(cpu_secs).unwrap_or(f64::NAN);
            let t = Instant::now();
            let limit = Arc::new(tokio::sync::Semaphore::new(64));
            let mut tasks = tokio::task::JoinSet::new();
            for rows in by_shard {
                for chunk in rows.chunks(100) {
                    let chunk = chunk.to_vec();
                    let permit = limit.clone().acquire_owned().await.unwrap();
                    let (session, insert) = (session.clone(), insert.clone());
                    tasks.spawn(async move {
                        let _permit = permit;
                        let mut batch = Batch::new(BatchType::Unlogged);
                        for _ in 0..chunk.len() {
                            batch.append_statement(insert.clone());
                        }
                        session.batch(&batch, chunk).await.map(|_| ())
                    });
                }
            }
            while let Some(r) = tasks.join_next().await {
                r.unwrap().expect("the node took every batch");
            }
            let wall = t.elapsed().as_secs_f64();
            out.push((wall, pid.map(cpu_secs).unwrap_or(f64::NAN) - cpu0));
        }
        out
    })
}

/// `rrdtool -` with a writer thread (its answers would fill the pipe otherwise): sends the
/// commands and waits for as many answers; panics on an error answer.
fn rrd_batch(dir: &PathBuf, commands: Vec<String>) -> (f64, f64) {
    let mut child = Command::new("rrdtool")
        .arg("-")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("rrdtool runs (apt install rrdtool)");
    let pid = child.id();
    let n = commands.len();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut stdin);
        for c in commands {
            w.write_all(c.as_bytes()).unwrap();
            w.write_all(b"\n").unwrap();
        }
        w.flush().unwrap();
        drop(w);
        stdin
    });
    let mut answers = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.starts_with("OK") {
            answers += 1;
        } else if line.starts_with("ERROR") {
            panic!("rrdtool: {line}");
        }
        if answers == n {
            break;
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid);
    drop(writer.join().unwrap());
    child.wait().unwrap();
    (wall, cpu)
}

fn rrdtool(root: &std::path::Path, n: usize, minutes: usize) -> Vec<(f64, f64)> {
    let dir = root.join(format!("rrd-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let start: i64 = 1_764_115_200;
    let ds: String = ["sb", "rb", "sp", "rp", "fl"]
        .iter()
        .map(|d| format!(" DS:{d}:GAUGE:120:0:U"))
        .collect();
    let create: Vec<String> = (0..n)
        .map(|i| format!("create h{i}.rrd --start {start} --step 60{ds} RRA:AVERAGE:0.5:1:1440"))
        .collect();
    rrd_batch(&dir, create);
    let mut out = Vec::new();
    for m in 0..minutes {
        let t = start + 60 * (m as i64 + 1);
        let updates: Vec<String> = (0..n)
            .map(|i| {
                let s = sums(i, m);
                format!(
                    "update h{i}.rrd {t}:{}:{}:{}:{}:{}",
                    s[0], s[1], s[2], s[3], s[4]
                )
            })
            .collect();
        out.push(rrd_batch(&dir, updates));
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let cql = args
        .next()
        .expect("usage: cassandra_stats_bench CQL_ADDR [options]");
    let mut series = vec![1000usize, 10_000, 100_000];
    let mut minutes = 3usize;
    let mut rrd_dir = std::env::temp_dir().join("sonde-rrd-bench");
    let mut pid = None;
    let mut rrd = true;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--series" => {
                series = args
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect()
            }
            "--minutes" => minutes = args.next().unwrap().parse().unwrap(),
            "--rrd-dir" => rrd_dir = args.next().unwrap().into(),
            "--cassandra-pid" => pid = Some(args.next().unwrap().parse().unwrap()),
            "--no-rrd" => rrd = false,
            other => panic!("unknown argument {other}"),
        }
    }
    println!(
        "| series | Cassandra counters (the sink) s / minute (node CPU s) | µs / series-update \
         | rrdtool s / minute (CPU s) | µs / series-update | rrdtool ÷ Cassandra | Cassandra \
         written rows (not taken) s / minute (node CPU s) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for &n in &series {
        let c = cassandra(&cql, n, minutes, pid);
        let w = written_rows(&cql, n, minutes, pid);
        let r = if rrd {
            rrdtool(&rrd_dir, n, minutes)
        } else {
            Vec::new()
        };
        let mean = |v: &[(f64, f64)], k: usize| {
            v.iter()
                .map(|x| if k == 0 { x.0 } else { x.1 })
                .sum::<f64>()
                / v.len().max(1) as f64
        };
        let each = |v: &[(f64, f64)]| {
            v.iter()
                .map(|x| format!("{:.2}", x.0))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (cw, cc) = (mean(&c, 0), mean(&c, 1));
        let rrd_cells = if rrd {
            let (rw, rc) = (mean(&r, 0), mean(&r, 1));
            format!(
                "{rw:.2} ({rc:.2}); minutes: {} | {:.1} | {:.1}× |",
                each(&r),
                rw * 1e6 / n as f64,
                rw / cw
            )
        } else {
            "- | - | - |".to_string()
        };
        println!(
            "| {n} | {cw:.2} ({cc:.2}); minutes: {} | {:.1} | {rrd_cells} {:.2} ({:.2}); \
             minutes: {} |",
            each(&c),
            cw * 1e6 / n as f64,
            mean(&w, 0),
            mean(&w, 1),
            each(&w)
        );
    }
}
