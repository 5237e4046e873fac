//! Section 11 of `make bench`: what traffic analytics cost (issue 13).
//!
//! * 11a. The speed grid's 64-byte column with analytics off, on (the default: top-N and
//!   anomaly lists, DDoS thresholds), and on with 8 filter-set expressions, runs interleaved.
//! * 11b. Filter-sets: Mpps with 0, 8 and 32 expressions at 100 and 100k hosts, the
//!   expressions written as the native matcher takes them, and the same expressions made
//!   libpcap-only (`… and greater 0` matches the same packets but is outside the native
//!   subset), so every packet pays one interpreted BPF run per expression.
//! * 11c. A random-source flood of 100M packets with 5 heavy hitters mixed in (one packet in 16)
//!   against 1M-flow and 1M-host tables: peak RSS, and whether the heavy hitters are the top
//!   talkers of the interval with their exact counts.

use super::{short_count, Bench, SondeRun, GIB};
use sonde_bench::{cell, fmt_bytes, fmt_mpps, Table};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Expressions in the native subset: ports, networks, hosts, protocols and their combinations,
/// the shapes of Ourmon's filter-sets.
const NATIVE: [&str; 32] = [
    "tcp port 80",
    "tcp port 443",
    "udp port 53",
    "tcp port 22",
    "port 80 or port 8080",
    "net 10.0.0.0/8",
    "net 10.1.0.0/16 and udp",
    "icmp or icmp6",
    "tcp port 25 or tcp port 587",
    "udp port 123",
    "src net 10.0.0.0/12",
    "dst net 10.0.128.0/17",
    "host 10.0.0.5",
    "ip6",
    "tcp and not port 443",
    "udp and not port 53",
    "portrange 6881-6889",
    "udp port 5353 or udp port 1900",
    "tcp port 3389",
    "tcp port 445 or tcp port 139",
    "net 192.168.0.0/16",
    "net 172.16.0.0/12",
    "udp portrange 16384-32767",
    "tcp port 1935",
    "udp port 443",
    "src host 10.0.1.1 or dst host 10.0.1.1",
    "tcp port 3306 or tcp port 5432",
    "udp port 67 or udp port 68",
    "ip proto 47",
    "tcp port 179",
    "udp port 161 or udp port 162",
    "sctp",
];

fn filter_sets(n: usize, bpf_only: bool) -> Vec<String> {
    // Sets of 8 expressions, as Ourmon's filter-sets hold a handful each.
    let mut args = Vec::new();
    for (set, chunk) in NATIVE[..n].chunks(8).enumerate() {
        let lines: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, e)| {
                if bpf_only {
                    format!("e{i}:({e}) and greater 0")
                } else {
                    format!("e{i}:{e}")
                }
            })
            .collect();
        args.push("--filter-set".to_string());
        args.push(format!("s{set}={}", lines.join(";")));
    }
    args
}

fn synth(hosts: u64, packets: u64) -> Vec<String> {
    vec![
        "--synthetic".into(),
        format!(
            "hosts={},size=64,packets={}",
            short_count(hosts),
            short_count(packets)
        ),
    ]
}

/// Runs each configuration `repeats` times, round-robin (so a slow spell of the machine hits
/// them all alike), and keeps the median CPU time of each.
fn interleaved(b: &mut Bench, configs: &[Vec<String>], expect: u64) -> Vec<SondeRun> {
    let mut runs: Vec<Vec<SondeRun>> = vec![Vec::new(); configs.len()];
    for _ in 0..b.opts.repeats {
        for (i, args) in configs.iter().enumerate() {
            let r = b.sonde(args, Some(expect));
            runs[i].push(r);
        }
    }
    runs.into_iter()
        .map(|mut rs| {
            if let Some(bad) = rs.iter().find(|r| r.error.is_some()) {
                return bad.clone();
            }
            rs.sort_by(|a, b| a.m.cpu_s().total_cmp(&b.m.cpu_s()));
            rs[rs.len() / 2].clone()
        })
        .collect()
}

fn mpps(r: &SondeRun) -> String {
    match &r.error {
        Some(e) => format!("failed: {e}"),
        None => fmt_mpps(r.cpu_pps()),
    }
}

fn ratio(r: &SondeRun, base: &SondeRun) -> String {
    if r.error.is_some() || base.error.is_some() || base.cpu_pps() == 0.0 {
        return "-".into();
    }
    format!("{:+.1}%", (r.cpu_pps() / base.cpu_pps() - 1.0) * 100.0)
}

pub(super) fn run(b: &mut Bench) {
    let quick = b.opts.quick;
    let mut out = String::new();
    let _ = writeln!(out, "## 11. Traffic analytics: what they cost\n");

    // 11a.
    let hosts: Vec<u64> = if quick {
        vec![100, 1_000_000]
    } else {
        vec![100, 10_000, 100_000, 1_000_000]
    };
    let packets = |h: u64| sonde_bench::grid_packets(h, quick);
    let _ = writeln!(
        out,
        "### 11a. The speed grid (64 B) with analytics off, on, and on with 8 filter-set \
         expressions\n\n`sonde --synthetic hosts=H,size=64,packets=P --stats-json FILE -q` with \
         `--analytics off`, with nothing added (analytics are on by default), and with \
         `--filter-set` (8 expressions of 11b). {} runs of each, interleaved; the run with the \
         median CPU time. Mpps per CPU-second, and the change against `--analytics off`.\n",
        b.opts.repeats
    );
    let mut t = Table::new(&[
        "hosts",
        "packets",
        "analytics off",
        "on (default)",
        "on vs off",
        "on + 8 filter-set expressions",
        "vs off",
        "max RSS off / on",
    ]);
    for &h in &hosts {
        let p = packets(h);
        b.progress(&format!("analytics: grid hosts={h} off/on/on+8"));
        let mut off = synth(h, p);
        off.extend(["--analytics".into(), "off".into()]);
        let on = synth(h, p);
        let mut sets = synth(h, p);
        sets.extend(filter_sets(8, false));
        let r = interleaved(b, &[off, on, sets], p);
        t.row(vec![
            short_count(h),
            short_count(p),
            mpps(&r[0]),
            mpps(&r[1]),
            ratio(&r[1], &r[0]),
            mpps(&r[2]),
            ratio(&r[2], &r[0]),
            format!(
                "{} / {}",
                fmt_bytes(r[0].m.max_rss_bytes),
                fmt_bytes(r[1].m.max_rss_bytes)
            ),
        ]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());

    // 11b.
    let _ = writeln!(
        out,
        "### 11b. Filter-sets: 0, 8 and 32 expressions\n\nThe same synthetic traffic with the \
         first N expressions of a list of 32 host/net/port/proto expressions \
         (`crates/bench/src/analytics_bench.rs`), in sets of 8: as written (the native matcher: \
         evaluated once per flow and cached in it), and made libpcap-only (`(EXPR) and greater \
         0`: the same packets, but every packet runs every expression's BPF program in sonde's \
         interpreter). Mpps per CPU-second (median of {} interleaved runs) and the change \
         against 0 expressions.\n",
        b.opts.repeats
    );
    let mut t = Table::new(&[
        "hosts",
        "0",
        "8 native",
        "32 native",
        "8 BPF only",
        "32 BPF only",
    ]);
    for h in [100u64, 100_000] {
        let p = if quick { 5_000_000 } else { packets(h) };
        b.progress(&format!("analytics: filter-sets hosts={h}"));
        let mut configs = vec![synth(h, p)];
        for (n, bpf) in [(8, false), (32, false), (8, true), (32, true)] {
            let mut a = synth(h, p);
            a.extend(filter_sets(n, bpf));
            configs.push(a);
        }
        let r = interleaved(b, &configs, p);
        let cellv = |i: usize| {
            if i == 0 {
                mpps(&r[0])
            } else {
                format!("{} ({})", mpps(&r[i]), ratio(&r[i], &r[0]))
            }
        };
        t.row(vec![
            short_count(h),
            cellv(0),
            cellv(1),
            cellv(2),
            cellv(3),
            cellv(4),
        ]);
    }
    let _ = writeln!(out, "{}", t.to_markdown());

    // 11c.
    let n: u64 = if quick { 10_000_000 } else { 100_000_000 };
    let heavy = 5u64;
    let spec = format!(
        "hosts=1000000,size=64,packets={},random-src,heavy={heavy}",
        short_count(n)
    );
    b.progress(&format!("analytics: flood {spec}"));
    let _ = writeln!(
        out,
        "### 11c. A random-source flood with heavy hitters mixed in\n\n`sonde --synthetic {spec} \
         --max-flows 1M --max-hosts 1M --top-interval 3600 --http 127.0.0.1:PORT --no-auth`: \
         every packet but one in 16 comes from a new random source; the 16th comes from one of \
         {heavy} fixed sources (172.16.0.1 to .{heavy}), {} packets each. The tables are capped \
         at 1M flows and 1M hosts (the host table fills with flood sources; later hosts go to \
         the heavy-hitter sketch). Once sonde has counted every packet, the bench reads the \
         interval's top talkers from `/api/v1/interval` and stops it. Peak RSS from wait4.\n",
        short_count(n / 16 / heavy)
    );
    let _ = writeln!(out, "{}", flood(b, &spec, n, heavy));
    b.emit(&out);
}

/// Runs the flood with the API on, reads the top talkers once every packet was counted.
fn flood(b: &mut Bench, spec: &str, n: u64, heavy: u64) -> String {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0");
        match l.and_then(|l| l.local_addr()) {
            Ok(a) => a.port(),
            Err(e) => return format!("failed: no free port: {e}\n"),
        }
    };
    let args: Vec<String> = vec![
        "--synthetic".into(),
        spec.into(),
        "--max-flows".into(),
        "1M".into(),
        "--max-hosts".into(),
        "1M".into(),
        "--top-interval".into(),
        "3600".into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
        "--no-auth".into(),
        "--duration".into(),
        "900".into(),
    ];
    // sonde runs in the background (measured by wait4 in a thread); the API is polled here.
    let base = format!("http://127.0.0.1:{port}");
    let sonde_args = args.clone();
    let handle = {
        let dir = b.next_scratch();
        let mut argv = vec![b.opts.sonde.display().to_string()];
        argv.extend(sonde_args);
        let json = dir.join("stats.json");
        argv.extend([
            "--stats-json".into(),
            json.display().to_string(),
            "-q".into(),
        ]);
        std::thread::spawn(move || {
            let m = sonde_bench::run_measured(&argv, &dir, Duration::from_secs(960));
            let stats = std::fs::read(&json)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            (m, stats)
        })
    };
    let started = Instant::now();
    let mut interval = None;
    let mut counted_s = None;
    while started.elapsed() < Duration::from_secs(900) {
        std::thread::sleep(Duration::from_millis(500));
        let Some(iface) = http_get(&base, "/api/v1/interface") else {
            continue;
        };
        if iface["packets"].as_u64() != Some(n) {
            continue;
        }
        counted_s.get_or_insert(started.elapsed().as_secs_f64());
        if let Some(iv) = http_get(&base, "/api/v1/interval") {
            if !iv["interval"].is_null() {
                interval = Some(iv["interval"].clone());
                break;
            }
        }
    }
    // Stop it (the run lingers for the API): SIGINT to the process listening on the port.
    stop_listener(port);
    let (m, stats) = match handle.join() {
        Ok((Ok(m), s)) => (m, s),
        Ok((Err(e), _)) => return format!("failed: cannot run sonde: {e}\n"),
        Err(_) => return "failed: the runner thread panicked\n".into(),
    };
    let Some(iv) = interval else {
        return format!("failed: the interval never came ({})\n", m.failure());
    };
    let stat = |p: &str| {
        stats
            .as_ref()
            .and_then(|s| s.pointer(p))
            .and_then(|v| v.as_u64())
            .map_or("-".to_string(), |v| v.to_string())
    };
    let expected = n / 16 / heavy;
    let talkers = iv["talkers"].as_array().cloned().unwrap_or_default();
    let mut t = Table::new(&["rank", "talker", "packets", "expected", "error (bytes)"]);
    for (i, e) in talkers.iter().take(heavy as usize + 2).enumerate() {
        let host = e["host"].as_str().unwrap_or("?");
        let is_heavy = host.starts_with("172.16.0.");
        t.row(vec![
            (i + 1).to_string(),
            cell(host),
            e["packets"].to_string(),
            if is_heavy {
                expected.to_string()
            } else {
                "a flood source (random addresses may repeat)".into()
            },
            e["error_bytes"].as_u64().unwrap_or(0).to_string(),
        ]);
    }
    let first_heavy = talkers.iter().take(heavy as usize).all(|e| {
        e["host"]
            .as_str()
            .is_some_and(|h| h.starts_with("172.16.0."))
    });
    let exact = talkers
        .iter()
        .take(heavy as usize)
        .all(|e| e["packets"].as_u64() == Some(expected));
    let mut s = String::new();
    let mut m_t = Table::new(&["measure", "value"]);
    for (k, v) in [
        ("packets", stat("/packets")),
        (
            "CPU s (user+sys), to the end of the API's wait",
            format!("{:.2}", m.cpu_s()),
        ),
        (
            "seconds until every packet was counted",
            counted_s.map_or("-".into(), |c| format!("{c:.1}")),
        ),
        ("max RSS (wait4)", fmt_bytes(m.max_rss_bytes)),
        (
            "RSS under 1 GiB",
            if m.max_rss_bytes < GIB { "yes" } else { "NO" }.into(),
        ),
        ("flows evicted", stat("/flows/ended/evicted")),
        (
            "host table full (hosts not tracked)",
            stat("/hosts/table_full"),
        ),
        ("interval", format!("{} to {}", iv["start"], iv["end"])),
        (
            "heavy hitters ranked first",
            if first_heavy { "yes" } else { "NO" }.into(),
        ),
        (
            "their packet counts exact",
            if exact { "yes" } else { "NO" }.into(),
        ),
    ] {
        m_t.row(vec![k.to_string(), v]);
    }
    let _ = writeln!(s, "{}", m_t.to_markdown());
    let _ = writeln!(s, "Top talkers of the interval:\n\n{}", t.to_markdown());
    s
}

fn http_get(base: &str, path: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    c.read_to_string(&mut body).ok()?;
    let json = body.split("\r\n\r\n").nth(1)?;
    serde_json::from_str(json).ok()
}

/// SIGINT to the sonde serving on `port` (its command line names the address).
fn stop_listener(port: u16) {
    let _ = std::process::Command::new("pkill")
        .args(["-INT", "-f", &format!("http 127.0.0.1:{port} ")])
        .status();
}
