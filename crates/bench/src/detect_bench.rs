//! `sonde-bench --only detect` (section 11): DDoS detection side by side with FastNetMon
//! (issue 13). The same attack capture is replayed at its original pace onto a veth pair that
//! the bench makes between two network namespaces of its own; sonde and FastNetMon listen at the same time on the receiving end. Per tool: time from the first attack
//! packet on the wire to the detection, packets seen, CPU seconds over the same replay window
//! and per packet, peak RSS.
//!
//! Why veth in namespaces and not `lo`: the replayed frames never meet an IP stack that could
//! answer or route them (the receiving end has no address, so the kernel drops them after the
//! packet sockets have their copy), nothing else on the machine produces traffic there, the
//! capture keeps its Ethernet headers, and FastNetMon's fixed ports (127.0.0.1:9209, :50052)
//! live in the namespace, away from any other instance.
//!
//! Attack start is the kernel's receive timestamp of the first attack packet on the listening
//! interface (a `tcpdump -c 1` on it, filtered on the attack's marker, TTL 201), the same clock
//! (CLOCK_REALTIME) that dates the detections: the moment sonde writes its `--alerts-out` line
//! (inotify) and the `date +%s.%N` of FastNetMon's notify script.

use serde_json::Value;
use sonde_bench::{cell, fmt_bytes, fmt_count, which, Table};
use sonde_capture::PcapWriter;
use sonde_wire::LinkType;
use std::fmt::Write as _;
use std::io::{self, Read, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TITLE: &str = "## 12. DDoS detection side by side with FastNetMon";

/// The pps threshold both tools get (sonde's `ddos.pps` default, FastNetMon's `threshold_pps`
/// default).
const THRESHOLD_PPS: u64 = 20_000;
/// The victim, in the monitored network; attackers and clients are outside it (FastNetMon counts
/// only traffic between its networks and the rest; sonde watches every host).
const VICTIM: [u8; 4] = [10, 77, 0, 10];
const NETWORK: &str = "10.77.0.0/24";
/// TTL of attack packets (ordinary traffic has 64): the marker the timestamping tcpdump matches.
const ATTACK_TTL: u8 = 201;
/// Ordinary traffic before the attack starts, and after it ends.
const LEAD_S: f64 = 3.0;
const TRAIL_S: f64 = 2.0;
/// How long the tools keep running (and their CPU is counted) after the last frame is sent.
const TAIL: Duration = Duration::from_secs(3);
/// Idle window before the replay: both tools running, no traffic.
const IDLE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(10);
/// Before each replay the bench waits (up to [`QUIET_WAIT`]) for a second with the machine
/// busier than this (in CPUs) no more: other work would compete with both tools.
const QUIET_CPUS: f64 = 0.3;
const QUIET_WAIT: Duration = Duration::from_secs(60);
/// Frames sent at full speed to both tools while they are stopped (the buffer check).
const BUFFER_BURST: usize = 50_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Syn,
    Udp,
}

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    kind: Kind,
    pps: u64,
    secs: f64,
}

impl Shape {
    fn file(&self) -> String {
        format!(
            "{}-{}pps-{}s.pcap",
            match self.kind {
                Kind::Syn => "syn",
                Kind::Udp => "udp",
            },
            self.pps,
            self.secs
        )
    }
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape {
            name: "SYN flood, 100k pps (5× the threshold)",
            kind: Kind::Syn,
            pps: 100_000,
            secs: 5.0,
        },
        Shape {
            name: "UDP flood, 100k pps (5×)",
            kind: Kind::Udp,
            pps: 100_000,
            secs: 5.0,
        },
        Shape {
            name: "SYN flood, 25k pps (1.25×)",
            kind: Kind::Syn,
            pps: 25_000,
            secs: 15.0,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// The capture

/// xorshift64*: a fixed, dependency-free sequence (the same files on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn csum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

struct L4<'a> {
    proto: u8,
    sport: u16,
    dport: u16,
    /// TCP only.
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &'a [u8],
}

/// An Ethernet + IPv4 + TCP/UDP frame with correct checksums.
fn frame(src: [u8; 4], dst: [u8; 4], ttl: u8, id: u16, l4: &L4) -> Vec<u8> {
    let l4_len = if l4.proto == 6 { 20 } else { 8 } + l4.payload.len();
    let mut f = Vec::with_capacity(14 + 20 + l4_len);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let total = (20 + l4_len) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = ttl;
    ip[9] = l4.proto;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = csum(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut seg = Vec::with_capacity(l4_len);
    seg.extend_from_slice(&l4.sport.to_be_bytes());
    seg.extend_from_slice(&l4.dport.to_be_bytes());
    if l4.proto == 6 {
        seg.extend_from_slice(&l4.seq.to_be_bytes());
        seg.extend_from_slice(&l4.ack.to_be_bytes());
        seg.push(0x50);
        seg.push(l4.flags);
        seg.extend_from_slice(&64240u16.to_be_bytes());
        seg.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    } else {
        seg.extend_from_slice(&(l4_len as u16).to_be_bytes());
        seg.extend_from_slice(&[0, 0]);
    }
    seg.extend_from_slice(l4.payload);
    let mut pseudo = 0u32;
    for w in [&src[..], &dst[..]] {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    pseudo += u32::from(l4.proto) + l4_len as u32;
    let mut c = csum(&seg, pseudo);
    if l4.proto == 17 && c == 0 {
        c = 0xffff;
    }
    let at = if l4.proto == 6 { 16 } else { 6 };
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&seg);
    f
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// What the capture holds, for the report and the checks.
#[derive(Clone, Debug)]
struct Capture {
    path: PathBuf,
    packets: u64,
    attack_packets: u64,
    duration_s: f64,
}

/// Ordinary traffic for the whole file (about 100 exchanges a second: short HTTP-like TCP
/// connections from 40 outside clients to 10 servers, the victim among them, and DNS queries),
/// plus the attack from `LEAD_S` on: `pps` packets a second evenly spaced, from random sources in
/// 10.77.128.0/17 (spoofed, one new flow per packet) to the victim.
fn write_capture(shape: &Shape, path: &Path) -> io::Result<Capture> {
    let mut rng = Rng(0x5eed_0000 + shape.pps + shape.kind as u64);
    let total_s = LEAD_S + shape.secs + TRAIL_S;
    let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut id: u16 = 1;
    let mut next_id = || {
        id = id.wrapping_add(1);
        id
    };
    let ms = 1_000_000u64;
    let mut t = 0u64;
    let end_ns = (total_s * 1e9) as u64;
    while t < end_ns {
        let client = [10, 77, 1, 1 + rng.below(40) as u8];
        let server = [10, 77, 0, 10 + rng.below(10) as u8];
        let cport = 20_000 + rng.below(40_000) as u16;
        if rng.below(10) < 6 {
            // A short TCP connection: handshake, request, two response segments, close.
            let (cs, ss) = ((rng.next() as u32) >> 1, (rng.next() as u32) >> 1);
            let req = [b'G'; 180];
            let resp = [b'r'; 1200];
            // (ms after the start, from the client, flags, seq, ack, payload)
            type Segment<'a> = (u64, bool, u8, u32, u32, &'a [u8]);
            let seq: [Segment; 9] = [
                (0, true, SYN, cs, 0, &[]),
                (1, false, SYN | ACK, ss, cs + 1, &[]),
                (2, true, ACK, cs + 1, ss + 1, &[]),
                (3, true, PSH | ACK, cs + 1, ss + 1, &req),
                (8, false, ACK, ss + 1, cs + 181, &resp),
                (9, false, PSH | ACK, ss + 1201, cs + 181, &resp),
                (10, true, ACK, cs + 181, ss + 2401, &[]),
                (11, true, FIN | ACK, cs + 181, ss + 2401, &[]),
                (12, false, FIN | ACK, ss + 2401, cs + 182, &[]),
            ];
            for (dt, from_client, flags, s, a, payload) in seq {
                let (src, dst, sp, dp) = if from_client {
                    (client, server, cport, 80)
                } else {
                    (server, client, 80, cport)
                };
                let l4 = L4 {
                    proto: 6,
                    sport: sp,
                    dport: dp,
                    seq: s,
                    ack: a,
                    flags,
                    payload,
                };
                frames.push((t + dt * ms, frame(src, dst, 64, next_id(), &l4)));
            }
        } else {
            let dns = [10, 77, 0, 53];
            let q = [b'q'; 32];
            let r = [b'a'; 96];
            for (dt, src, dst, sp, dp, payload) in [
                (0, client, dns, cport, 53, &q[..]),
                (1, dns, client, 53, cport, &r[..]),
            ] {
                let l4 = L4 {
                    proto: 17,
                    sport: sp,
                    dport: dp,
                    seq: 0,
                    ack: 0,
                    flags: 0,
                    payload,
                };
                frames.push((t + dt * ms, frame(src, dst, 64, next_id(), &l4)));
            }
        }
        t += 5 * ms + rng.below(10 * ms);
    }
    let start = (LEAD_S * 1e9) as u64;
    let n = (shape.pps as f64 * shape.secs) as u64;
    let gap = 1e9 / shape.pps as f64;
    let payload = [0u8; 64];
    for i in 0..n {
        let a = rng.next();
        let src = [10, 77, 128 | (a >> 8) as u8 & 0x7f, a as u8];
        let sport = 1024 + (a >> 16) as u16 % 64_000;
        let l4 = match shape.kind {
            Kind::Syn => L4 {
                proto: 6,
                sport,
                dport: 80,
                seq: (a >> 32) as u32,
                ack: 0,
                flags: SYN,
                payload: &[],
            },
            Kind::Udp => L4 {
                proto: 17,
                sport,
                dport: 1024 + (a >> 40) as u16 % 64_000,
                seq: 0,
                ack: 0,
                flags: 0,
                payload: &payload,
            },
        };
        let ts = start + (i as f64 * gap) as u64;
        frames.push((ts, frame(src, VICTIM, ATTACK_TTL, next_id(), &l4)));
    }
    frames.sort_by_key(|(ts, _)| *ts);
    let base = 1_800_000_000u64 * 1_000_000_000;
    let mut w = PcapWriter::create(path, LinkType::Ethernet)?;
    for (ts, f) in &frames {
        w.write(base + ts, f.len() as u32, f)?;
    }
    w.finish()?;
    let last = frames.last().map_or(0, |f| f.0);
    Ok(Capture {
        path: path.to_path_buf(),
        packets: frames.len() as u64,
        attack_packets: n,
        duration_s: last as f64 / 1e9,
    })
}

// ---------------------------------------------------------------------------------------------
// Processes

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User + system CPU seconds of a running process (all its threads), from /proc/PID/stat.
fn proc_cpu_s(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / clk_tck())
}

/// VmHWM (peak resident set) of a process, in bytes.
fn proc_hwm(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| sonde_bench::find_number(&t, "VmHWM:"))
        .map_or(0, |kib| kib * 1024)
}

/// Waits, up to `max`, for a second in which the whole machine is busy less than
/// [`QUIET_CPUS`]; returns the busy CPUs of the last second measured.
fn wait_quiet(max: Duration) -> f64 {
    let end = Instant::now() + max;
    loop {
        let b0 = machine_busy_s();
        std::thread::sleep(Duration::from_secs(1));
        let busy = machine_busy_s() - b0;
        if busy < QUIET_CPUS || Instant::now() >= end {
            return busy;
        }
    }
}

/// Voluntary context switches of all threads of a process.
fn proc_wakeups(pid: i32) -> u64 {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    d.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|t| sonde_bench::find_number(&t, "voluntary_ctxt_switches:"))
        .sum()
}

/// Busy CPU seconds of the whole machine (all CPUs, everything but idle and iowait).
fn machine_busy_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user)
    let busy: f64 = v
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, x)| x)
        .sum();
    busy / clk_tck()
}

/// How a process ended, from wait4.
#[derive(Clone, Debug, Default)]
struct Exit {
    status: String,
    cpu_s: f64,
}

/// A child started in its own process group, output into files, reaped with wait4.
struct Proc {
    pid: i32,
    out: PathBuf,
    err: PathBuf,
    exit: Option<Exit>,
}

impl Proc {
    fn spawn(argv: &[String], dir: &Path, name: &str) -> io::Result<Proc> {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; the child dies with sonde-bench (killed or
        // interrupted) instead of staying on with the namespaces.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Proc {
            pid: child.id() as i32,
            out,
            err,
            exit: None,
        })
    }

    /// Reaps the process if it has ended.
    fn try_wait(&mut self) -> Option<&Exit> {
        if self.exit.is_none() {
            let mut status = 0;
            // SAFETY: rusage is plain old data; zeroed is a valid value.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: pid is our own unreaped child; status and ru are valid for writes.
            let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
            if r == self.pid {
                let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
                let desc = if libc::WIFEXITED(status) {
                    format!("exit {}", libc::WEXITSTATUS(status))
                } else if libc::WIFSIGNALED(status) {
                    format!("signal {}", libc::WTERMSIG(status))
                } else {
                    format!("status {status}")
                };
                self.exit = Some(Exit {
                    status: desc,
                    cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
                });
            }
        }
        self.exit.as_ref()
    }

    fn running(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// Sends `sig`, waits up to `grace` for the exit, then kills the whole group.
    fn stop(&mut self, sig: i32, grace: Duration) -> Exit {
        if self.running() {
            // SAFETY: signalling our own unreaped child.
            unsafe {
                libc::kill(self.pid, sig);
            }
        }
        let deadline = Instant::now() + grace;
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.running() {
            // SAFETY: the group we created for this child; it is not reaped yet.
            unsafe {
                libc::kill(-self.pid, libc::SIGKILL);
            }
            while self.running() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.exit.clone().unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// AF_PACKET sockets the process holds (in its network namespace).
    fn packet_sockets(&self) -> usize {
        let table =
            std::fs::read_to_string(format!("/proc/{}/net/packet", self.pid)).unwrap_or_default();
        let inodes: Vec<String> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(8).map(|s| format!("socket:[{s}]")))
            .collect();
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.pid)) else {
            return 0;
        };
        fds.filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
            .count()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            self.stop(libc::SIGKILL, Duration::ZERO);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The namespaces

/// Two network namespaces joined by a veth pair; removed (with the veth) on drop.
struct Netns {
    ip: String,
    tx_ns: String,
    rx_ns: String,
    tx_if: String,
    rx_if: String,
}

fn run_ip(ip: &str, args: &[&str]) -> Result<(), String> {
    let o = Command::new(ip)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{ip}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Netns {
    fn create(ip: &str) -> Result<Netns, String> {
        Netns::remove_stale(ip);
        let id = std::process::id();
        let n = Netns {
            ip: ip.to_string(),
            tx_ns: format!("sonde-bench-tx-{id}"),
            rx_ns: format!("sonde-bench-rx-{id}"),
            tx_if: format!("sbtx{id}"),
            rx_if: format!("sbrx{id}"),
        };
        run_ip(ip, &["netns", "add", &n.tx_ns])?;
        run_ip(ip, &["netns", "add", &n.rx_ns])?;
        let steps: Vec<Vec<&str>> = vec![
            vec![
                "link", "add", &n.tx_if, "netns", &n.tx_ns, "type", "veth", "peer", "name",
                &n.rx_if, "netns", &n.rx_ns,
            ],
            vec!["-n", &n.tx_ns, "link", "set", &n.tx_if, "up"],
            vec!["-n", &n.rx_ns, "link", "set", &n.rx_if, "up"],
            vec!["-n", &n.rx_ns, "link", "set", "lo", "up"],
        ];
        for s in steps {
            run_ip(ip, &s)?;
        }
        // No IPv6 on the veth ends: no router solicitations or DAD packets in the counts.
        for (ns, iface) in [(&n.tx_ns, &n.tx_if), (&n.rx_ns, &n.rx_if)] {
            let _ = Command::new(ip)
                .args(["netns", "exec", ns, "sysctl", "-q", "-w"])
                .arg(format!("net.ipv6.conf.{iface}.disable_ipv6=1"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(n)
    }

    /// Namespaces left by an earlier sonde-bench that was killed (named after its pid).
    fn remove_stale(ip: &str) {
        let Ok(d) = std::fs::read_dir("/run/netns") else {
            return;
        };
        for e in d.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("sonde-bench-tx-")
                .or_else(|| name.strip_prefix("sonde-bench-rx-"))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid {
                if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = run_ip(ip, &["netns", "del", &name]);
                }
            }
        }
    }

    fn exec_in(&self, ns: &str, argv: &[String]) -> Vec<String> {
        let mut v = vec![self.ip.clone(), "netns".into(), "exec".into(), ns.into()];
        v.extend(argv.iter().cloned());
        v
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_ip(&self.ip, &["netns", "del", &self.tx_ns]);
        let _ = run_ip(&self.ip, &["netns", "del", &self.rx_ns]);
    }
}

/// `GET /metrics` of FastNetMon's Prometheus endpoint, from a thread that joined the namespace.
fn fnm_metrics(ns: &str) -> Option<String> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Option<String> {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).ok()?;
        use std::os::fd::AsRawFd;
        // SAFETY: a valid namespace fd; setns changes this thread's network namespace only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        let mut s = std::net::TcpStream::connect_timeout(
            &"127.0.0.1:9209".parse().ok()?,
            Duration::from_secs(2),
        )
        .ok()?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    })
    .join()
    .ok()
    .flatten()
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

// ---------------------------------------------------------------------------------------------
// The replay

/// A classic pcap file in memory: the frames and their timestamps (ns).
struct Frames {
    data: Vec<u8>,
    /// (timestamp ns, offset, length) of each frame in `data`.
    index: Vec<(u64, usize, usize)>,
}

impl Frames {
    /// The first `n` attack frames only (TTL marker), for the buffer check.
    fn attack_only(mut self, n: usize) -> Frames {
        let data = &self.data;
        self.index
            .retain(|&(_, at, len)| len > 22 && data[at + 22] == ATTACK_TTL);
        self.index.truncate(n);
        self
    }
}

fn read_pcap(path: &Path) -> io::Result<Frames> {
    let data = std::fs::read(path)?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a little-endian µs pcap");
    if data.len() < 24 || data[..4] != 0xa1b2_c3d4u32.to_le_bytes() {
        return Err(bad());
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let mut index = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let ts = u32_at(at) as u64 * 1_000_000_000 + u32_at(at + 4) as u64 * 1000;
        let len = u32_at(at + 8) as usize;
        if at + 16 + len > data.len() {
            return Err(bad());
        }
        index.push((ts, at + 16, len));
        at += 16 + len;
    }
    Ok(Frames { data, index })
}

/// What the sender did.
#[derive(Clone, Debug, Default)]
struct Replayed {
    sent: u64,
    failed: u64,
    /// Wall time from the first frame to the last.
    secs: f64,
    /// The largest delay of a frame behind its schedule, and the 99th percentile.
    max_late_s: f64,
    p99_late_s: f64,
    /// CPU seconds of the sending thread.
    cpu_s: f64,
    /// When the first attack frame was handed to the kernel (CLOCK_REALTIME).
    first_attack_sent: Option<f64>,
}

fn thread_cpu_s() -> f64 {
    // SAFETY: timespec is plain old data and valid for writes.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Sends the frames out of `iface` in namespace `ns` at the file's pace: each frame at its
/// offset from the first on an absolute schedule (late frames go at once, so delays never add
/// up). The thread sleeps whenever the next frame is 20 µs or more ahead; below that it sends
/// early, so at 100k pps frames leave in small bursts of a few hundred µs at most. Unpaced: as
/// fast as it goes.
fn start_replay(
    ns: &str,
    iface: &str,
    frames: Frames,
    paced: bool,
) -> std::thread::JoinHandle<io::Result<Replayed>> {
    let ns = ns.to_string();
    let iface = iface.to_string();
    std::thread::spawn(move || -> io::Result<Replayed> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
        // SAFETY: a valid namespace fd; setns changes this thread's network namespace only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let name = std::ffi::CString::new(iface.clone()).map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0: this socket sends only, it receives nothing.
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new socket we own from here on.
        let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain old data; zeroed is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: binding our socket to a valid sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let first = frames.index.first().map_or(0, |f| f.0);
        let mut out = Replayed::default();
        let mut late: Vec<f64> = Vec::with_capacity(frames.index.len());
        let cpu0 = thread_cpu_s();
        let t0 = Instant::now();
        for &(ts, at, len) in &frames.index {
            let target = Duration::from_nanos(ts - first);
            if paced {
                loop {
                    let el = t0.elapsed();
                    if el + Duration::from_micros(20) >= target {
                        late.push(el.saturating_sub(target).as_secs_f64());
                        break;
                    }
                    std::thread::sleep(target - el);
                }
            }
            let frame = &frames.data[at..at + len];
            let first_attack =
                out.first_attack_sent.is_none() && frame.get(22) == Some(&ATTACK_TTL);
            let before = if first_attack { now_s() } else { 0.0 };
            // SAFETY: sending a valid buffer on our bound socket.
            let r = unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    frame.as_ptr() as *const libc::c_void,
                    len,
                    0,
                )
            };
            if r < 0 {
                out.failed += 1;
            } else {
                out.sent += 1;
                if first_attack {
                    out.first_attack_sent = Some(before);
                }
            }
        }
        out.secs = t0.elapsed().as_secs_f64();
        out.cpu_s = thread_cpu_s() - cpu0;
        late.sort_by(f64::total_cmp);
        out.max_late_s = late.last().copied().unwrap_or(0.0);
        out.p99_late_s = late.get(late.len() * 99 / 100).copied().unwrap_or(0.0);
        Ok(out)
    })
}

// ---------------------------------------------------------------------------------------------
// The detections

/// The first detection of the victim by each tool: when, and the line.
#[derive(Default)]
struct Seen {
    sonde: Option<(f64, String)>,
    fnm: Option<(f64, String)>,
}

/// Watches a run's directory with inotify from a thread: when `alerts.jsonl` (sonde) is written
/// and then holds the victim's `"event":"start"` line, the write's time is sonde's detection;
/// when `notify.log` (FastNetMon's script) holds a line for the victim, the `date` the script
/// wrote is FastNetMon's. The thread wakes on each write, so the times are those of the
/// writes, not of a polling period.
struct Watcher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

impl Watcher {
    fn start(dir: &Path) -> io::Result<Watcher> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        // SAFETY: plain inotify calls; the fd is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let path =
            std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
        // SAFETY: a valid fd and NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(
                fd.as_raw_fd(),
                path.as_ptr(),
                libc::IN_MODIFY | libc::IN_CREATE,
            )
        };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let alerts = dir.join("alerts.jsonl");
        let notify = dir.join("notify.log");
        let thread = std::thread::spawn(move || {
            let mut seen = Seen::default();
            let mut buf = [0u8; 4096];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 50) };
                // SAFETY: reading into our buffer.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr() as *mut libc::c_void,
                        buf.len(),
                    )
                };
                if n <= 0 {
                    continue;
                }
                let t = now_s();
                if seen.sonde.is_none() {
                    let text = std::fs::read_to_string(&alerts).unwrap_or_default();
                    seen.sonde = text
                        .lines()
                        .find(|l| {
                            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
                            v["event"] == "start" && v["host"] == victim().as_str()
                        })
                        .map(|l| (t, l.to_string()));
                }
                if seen.fnm.is_none() {
                    let text = std::fs::read_to_string(&notify).unwrap_or_default();
                    seen.fnm = text.lines().find(|l| l.contains(&victim())).map(|l| {
                        let at = l.split_whitespace().next().and_then(|x| x.parse().ok());
                        (at.unwrap_or(t), l.to_string())
                    });
                }
            }
            seen
        });
        Ok(Watcher { stop, thread })
    }

    fn finish(self) -> Seen {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// One run

struct Setup {
    /// The copy that runs, and where it was copied from.
    sonde: PathBuf,
    sonde_origin: PathBuf,
    fastnetmon: PathBuf,
    /// Only to show its pace (see `tcpreplay_check`).
    tcpreplay: Option<PathBuf>,
    tcpdump: PathBuf,
    base_conf: String,
    net: Netns,
    dir: PathBuf,
}

/// What one tool did in one run.
#[derive(Clone, Debug, Default)]
struct ToolRun {
    /// Seconds from the first attack packet on the wire to the detection.
    detect_s: Option<f64>,
    /// The detection as the tool wrote it (first line).
    detail: String,
    packets: Option<u64>,
    /// CPU seconds over the replay window, and per second while idle before it.
    window_cpu_s: f64,
    idle_cpu_per_s: f64,
    /// CPU seconds of the whole process (wait4), start-up and stop included.
    total: Exit,
    hwm: u64,
    /// Voluntary context switches of all its threads over the window (sleeps and wake-ups).
    wakeups: u64,
    /// sonde: from the end of the second its alert reports (`first_seen` + 1) to the alert.
    after_second_s: Option<f64>,
    note: String,
}

#[derive(Clone, Debug)]
struct Run {
    shape: usize,
    avg: u32,
    rep: usize,
    sonde: ToolRun,
    fnm: ToolRun,
    window_s: f64,
    machine_busy_s: f64,
    replayed: Replayed,
    /// From the sender's send() of the first attack frame to its kernel timestamp on the
    /// listening end (a check of the attack start).
    attack_sent_to_seen_s: Option<f64>,
    /// Busy CPUs of the machine in the last second before the replay.
    quiet: f64,
    load: String,
    error: Option<String>,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn fnm_config(base: &str, set: &[(&str, String)]) -> String {
    let mut out = String::new();
    let mut done = vec![false; set.len()];
    for line in base.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        match set.iter().position(|(k, _)| *k == key) {
            Some(i) if !line.trim_start().starts_with('#') => {
                let _ = writeln!(out, "{key} = {}", set[i].1);
                done[i] = true;
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (i, (k, v)) in set.iter().enumerate() {
        if !done[i] {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    out
}

/// The settings changed from /etc/fastnetmon.conf (the report lists them).
fn fnm_settings(s: &Setup, avg: u32, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("mirror_afpacket", "on".into()),
        ("interfaces", s.net.rx_if.clone()),
        (
            "networks_list_path",
            dir.join("networks_list").display().to_string(),
        ),
        (
            "white_list_path",
            dir.join("networks_whitelist").display().to_string(),
        ),
        ("average_calculation_time", avg.to_string()),
        ("threshold_pps", THRESHOLD_PPS.to_string()),
        ("threshold_mbps", "1000".into()),
        ("ban_for_pps", "on".into()),
        ("ban_for_bandwidth", "on".into()),
        ("ban_for_flows", "off".into()),
        ("enable_ban", "on".into()),
        (
            "notify_script_path",
            dir.join("notify.sh").display().to_string(),
        ),
        ("monitor_local_ip_addresses", "off".into()),
        ("disable_usage_report", "on".into()),
        ("pid_path", dir.join("fastnetmon.pid").display().to_string()),
        (
            "cli_stats_file_path",
            dir.join("fastnetmon.dat").display().to_string(),
        ),
        (
            "cli_stats_ipv6_file_path",
            dir.join("fastnetmon_ipv6.dat").display().to_string(),
        ),
    ]
}

fn sonde_args(s: &Setup, dir: &Path) -> Vec<String> {
    let mut v = vec![
        s.sonde.display().to_string(),
        "-i".into(),
        s.net.rx_if.clone(),
        "--alerts-out".into(),
        dir.join("alerts.jsonl").display().to_string(),
        "--threshold".into(),
        format!("ddos.pps={THRESHOLD_PPS}"),
        "--threshold".into(),
        "ddos.mbps=1000".into(),
    ];
    for k in [
        "ddos.flows",
        "ddos.syn_pps",
        "ddos.udp_pps",
        "ddos.icmp_pps",
        "ddos.frag_pps",
    ] {
        v.push("--threshold".into());
        v.push(format!("{k}=off"));
    }
    v.extend([
        "--stats-json".into(),
        dir.join("stats.json").display().to_string(),
        "-q".into(),
    ]);
    v
}

fn victim() -> String {
    format!("{}.{}.{}.{}", VICTIM[0], VICTIM[1], VICTIM[2], VICTIM[3])
}

/// Writes FastNetMon's files into `dir`, starts FastNetMon and sonde on the listening end and
/// waits until each holds a packet socket.
fn start_tools(s: &Setup, dir: &Path, avg: u32) -> Result<(Proc, Proc), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let io = |e: io::Error| e.to_string();
    std::fs::write(dir.join("networks_list"), format!("{NETWORK}\n")).map_err(io)?;
    std::fs::write(dir.join("networks_whitelist"), "").map_err(io)?;
    let script = format!(
        "#!/bin/sh\n# FastNetMon's notify script: when, and what it was told (details on stdin).\n\
         echo \"$(date +%s.%N) $*\" >> '{}'\ncat >> '{}'\n",
        dir.join("notify.log").display(),
        dir.join("notify.details").display()
    );
    std::fs::write(dir.join("notify.sh"), script).map_err(io)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("notify.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .map_err(io)?;
    }
    let conf = dir.join("fastnetmon.conf");
    std::fs::write(&conf, fnm_config(&s.base_conf, &fnm_settings(s, avg, dir))).map_err(io)?;
    let fnm_argv = s.net.exec_in(
        &s.net.rx_ns,
        &[
            s.fastnetmon.display().to_string(),
            "--configuration_file".into(),
            conf.display().to_string(),
            "--log_to_console".into(),
            "--disable_pid_logic".into(),
        ],
    );
    let mut fnm = Proc::spawn(&fnm_argv, dir, "fastnetmon").map_err(io)?;
    let mut sonde = Proc::spawn(
        &s.net.exec_in(&s.net.rx_ns, &sonde_args(s, dir)),
        dir,
        "sonde",
    )
    .map_err(io)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if !fnm.running() {
            return Err(format!(
                "fastnetmon ended: {}",
                last_line(&fnm.stdout(), &fnm.stderr())
            ));
        }
        if !sonde.running() {
            return Err(format!(
                "sonde ended: {}",
                last_line(&sonde.stdout(), &sonde.stderr())
            ));
        }
        if fnm.packet_sockets() > 0 && sonde.packet_sockets() > 0 {
            return Ok((fnm, sonde));
        }
        if Instant::now() > deadline {
            return Err("the tools did not open their capture within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What each tool still had after being stopped (SIGSTOP) while a burst arrived.
struct BufferCheck {
    sent: u64,
    sonde: Option<u64>,
    sonde_dropped: Option<u64>,
    fnm: Option<u64>,
}

/// Both tools stopped with SIGSTOP, `n` attack frames sent as fast as they go, SIGCONT: what
/// each then counts is what its capture ring held.
fn buffer_check(s: &Setup, cap: &Capture, n: usize) -> Result<BufferCheck, String> {
    let dir = s.dir.join("buffer-check");
    let frames = read_pcap(&cap.path)
        .map_err(|e| format!("{}: {e}", cap.path.display()))?
        .attack_only(n);
    let (mut fnm, mut sonde) = start_tools(s, &dir, 5)?;
    std::thread::sleep(Duration::from_secs(2));
    for p in [&fnm, &sonde] {
        // SAFETY: signalling our own unreaped children.
        unsafe {
            libc::kill(p.pid, libc::SIGSTOP);
        }
    }
    let sent = start_replay(&s.net.tx_ns, &s.net.tx_if, frames, false)
        .join()
        .map_err(|_| "the sender thread panicked".to_string())?
        .map_err(|e| format!("sending: {e}"));
    for p in [&fnm, &sonde] {
        // SAFETY: as above.
        unsafe {
            libc::kill(p.pid, libc::SIGCONT);
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let metrics = fnm_metrics(&s.net.rx_ns).unwrap_or_default();
    sonde.stop(libc::SIGINT, Duration::from_secs(20));
    fnm.stop(libc::SIGINT, Duration::from_secs(3));
    let sent = sent?;
    let stats: Option<Value> = std::fs::read(dir.join("stats.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    Ok(BufferCheck {
        sent: sent.sent,
        sonde: stats.as_ref().and_then(|v| v["packets"].as_u64()),
        sonde_dropped: stats
            .as_ref()
            .and_then(|v| v["capture"]["dropped"].as_u64()),
        fnm: metric(&metrics, "fastnetmon_total_simple_packets_processed"),
    })
}

fn one_run(
    s: &Setup,
    shape: usize,
    cap: &Capture,
    avg: u32,
    (rep, repeats): (usize, usize),
    tag: &str,
) -> Result<Run, String> {
    let dir = s.dir.join(tag);
    let frames = read_pcap(&cap.path).map_err(|e| format!("{}: {e}", cap.path.display()))?;
    let load = super::loadavg();
    let (mut fnm, mut sonde) = start_tools(s, &dir, avg)?;
    let io = |e: io::Error| e.to_string();
    std::thread::sleep(Duration::from_secs(1));
    let idle0 = (proc_cpu_s(sonde.pid), proc_cpu_s(fnm.pid));
    std::thread::sleep(IDLE);
    let idle1 = (proc_cpu_s(sonde.pid), proc_cpu_s(fnm.pid));
    let idle_rate = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => (b - a) / IDLE.as_secs_f64(),
        _ => 0.0,
    };

    let quiet = wait_quiet(QUIET_WAIT);
    // Where the attack starts within FastNetMon's once-a-second update (whose phase is fixed
    // from its start, and the runs' timelines are alike) and within the wall-clock second
    // sonde counts in decides most of the time to detect: a delay of (run + u) / runs
    // seconds, u uniform in [0, 1), spreads it over the runs.
    let mut rng =
        Rng(0x9e37_79b9_7f4a_7c15 ^ ((shape as u64) << 32) ^ ((avg as u64) << 16) ^ rep as u64);
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let phase_delay = (rep as f64 + u) / repeats.max(1) as f64;
    std::thread::sleep(Duration::from_secs_f64(phase_delay));

    // The attack's first packet, timestamped by the kernel on the listening interface.
    let mut stamp = Proc::spawn(
        &s.net.exec_in(
            &s.net.rx_ns,
            &[
                s.tcpdump.display().to_string(),
                "-i".into(),
                s.net.rx_if.clone(),
                "-n".into(),
                "-p".into(),
                "-tt".into(),
                "--time-stamp-precision=nano".into(),
                "-c".into(),
                "1".into(),
                "-l".into(),
                format!("ip[8] = {ATTACK_TTL}"),
            ],
        ),
        &dir,
        "tcpdump",
    )
    .map_err(io)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stamp.stderr().contains("listening on") {
        if !stamp.running() || Instant::now() > deadline {
            return Err(format!("tcpdump: {}", last_line("", &stamp.stderr())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let watcher = Watcher::start(&dir).map_err(|e| format!("inotify: {e}"))?;
    let w0 = Instant::now();
    let cpu0 = (proc_cpu_s(sonde.pid), proc_cpu_s(fnm.pid));
    let wk0 = (proc_wakeups(sonde.pid), proc_wakeups(fnm.pid));
    let busy0 = machine_busy_s();
    let replay = start_replay(&s.net.tx_ns, &s.net.tx_if, frames, true);
    let mut replay_done: Option<Instant> = None;
    let limit = Duration::from_secs_f64(cap.duration_s + 60.0);
    loop {
        match replay_done {
            None if replay.is_finished() => replay_done = Some(Instant::now()),
            Some(t) if t.elapsed() >= TAIL => break,
            _ => {}
        }
        if w0.elapsed() > limit {
            break;
        }
        std::thread::sleep(POLL);
    }
    let window_s = w0.elapsed().as_secs_f64();
    let seen = watcher.finish();
    let (sonde_seen, sonde_line) = match seen.sonde {
        Some((t, l)) => (Some(t), l),
        None => (None, String::new()),
    };
    let (fnm_seen, fnm_line) = match seen.fnm {
        Some((t, l)) => (Some(t), l),
        None => (None, String::new()),
    };
    let cpu1 = (proc_cpu_s(sonde.pid), proc_cpu_s(fnm.pid));
    let wk1 = (proc_wakeups(sonde.pid), proc_wakeups(fnm.pid));
    let busy1 = machine_busy_s();
    let metrics = fnm_metrics(&s.net.rx_ns).unwrap_or_default();
    let hwm = (proc_hwm(sonde.pid), proc_hwm(fnm.pid));
    let replayed = replay
        .join()
        .map_err(|_| "the sender thread panicked".to_string())
        .and_then(|r| r.map_err(|e| format!("sending on {}: {e}", s.net.tx_if)));
    let sonde_exit = sonde.stop(libc::SIGINT, Duration::from_secs(20));
    // FastNetMon 1.2.4 logs "Wait while they finished" on SIGINT and may not end: 3 s, then
    // SIGKILL (its CPU figure from wait4 is complete either way).
    let fnm_exit = fnm.stop(libc::SIGINT, Duration::from_secs(3));
    stamp.stop(libc::SIGINT, Duration::from_secs(1));

    let attack_t: Option<f64> = stamp
        .stdout()
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok());
    let stats: Option<Value> = std::fs::read(dir.join("stats.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };
    let sonde_after = sonde_seen
        .zip(
            serde_json::from_str::<Value>(&sonde_line)
                .ok()
                .and_then(|v| v["first_seen"].as_u64()),
        )
        .map(|(w, first)| w - (first + 1) as f64);
    let mut sonde_run = ToolRun {
        detect_s: sonde_seen.zip(attack_t).map(|(d, a)| d - a),
        detail: sonde_line,
        packets: stats.as_ref().and_then(|v| v["packets"].as_u64()),
        window_cpu_s: diff(cpu0.0, cpu1.0),
        idle_cpu_per_s: idle_rate(idle0.0, idle1.0),
        total: sonde_exit,
        hwm: hwm.0,
        wakeups: wk1.0.saturating_sub(wk0.0),
        after_second_s: sonde_after,
        note: String::new(),
    };
    if let Some(v) = &stats {
        let drops = v["capture"]["dropped"].as_u64().unwrap_or(0)
            + v["capture"]["if_dropped"].as_u64().unwrap_or(0);
        if drops > 0 {
            sonde_run.note = format!("{} dropped by the kernel", fmt_count(drops));
        }
    } else {
        sonde_run.note = format!(
            "no --stats-json ({}: {})",
            sonde_run.total.status,
            last_line(&sonde.stdout(), &sonde.stderr())
        );
    }
    let fnm_log = fnm.stdout() + &fnm.stderr();
    let mut fnm_run = ToolRun {
        detect_s: fnm_seen.zip(attack_t).map(|(d, a)| d - a),
        detail: fnm_line,
        packets: metric(&metrics, "fastnetmon_total_simple_packets_processed"),
        window_cpu_s: diff(cpu0.1, cpu1.1),
        idle_cpu_per_s: idle_rate(idle0.1, idle1.1),
        total: fnm_exit,
        hwm: hwm.1,
        wakeups: wk1.1.saturating_sub(wk0.1),
        after_second_s: None,
        note: String::new(),
    };
    // Its warnings (a speed calculation that took too long or came too early, on a busy
    // machine, among them) and errors, before the shutdown.
    let warnings: Vec<&str> = fnm_log
        .lines()
        .take_while(|l| !l.contains("SIGNAL captured"))
        .filter(|l| {
            l.contains("[WARN")
                || l.contains("[ERROR")
                || l.contains("Negative delay")
                || l.contains("skip one iteration")
        })
        .collect();
    if let Some(first) = warnings.first() {
        fnm_run.note = format!(
            "{} warnings in its log, first: {}",
            warnings.len(),
            first.trim()
        );
    }
    let (replayed, error) = match replayed {
        Ok(r) if attack_t.is_none() => (
            r,
            Some("no attack packet seen on the interface (tcpdump)".to_string()),
        ),
        Ok(r) => (r, None),
        Err(e) => (Replayed::default(), Some(e)),
    };
    Ok(Run {
        shape,
        avg,
        rep,
        sonde: sonde_run,
        fnm: fnm_run,
        window_s,
        machine_busy_s: busy1 - busy0,
        attack_sent_to_seen_s: attack_t.zip(replayed.first_attack_sent).map(|(a, b)| a - b),
        replayed,
        quiet,
        load,
        error,
    })
}

fn last_line(out: &str, err: &str) -> String {
    let l = err
        .lines()
        .chain(out.lines())
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    cell(l)
}

// ---------------------------------------------------------------------------------------------
// The section

fn skip(why: &str) -> String {
    format!("{TITLE}\n\nskipped: {why}\n\n")
}

/// Other FastNetMon processes on the machine (a system service): stopped through the service
/// manager if possible, and listed if they are still there.
fn other_fastnetmon() -> Vec<String> {
    let list = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                    .filter(|e| {
                        std::fs::read_to_string(e.path().join("comm"))
                            .map(|c| c.trim() == "fastnetmon")
                            .unwrap_or(false)
                    })
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    if list().is_empty() {
        return Vec::new();
    }
    for cmd in [
        &["systemctl", "stop", "fastnetmon"][..],
        &["service", "fastnetmon", "stop"][..],
    ] {
        let _ = Command::new(cmd[0])
            .args(&cmd[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    std::thread::sleep(Duration::from_secs(1));
    list()
}

fn pkg_version(pkg: &str) -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", pkg])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "?".into())
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        None
    } else if v.len() % 2 == 1 {
        Some(v[v.len() / 2])
    } else {
        Some((v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0)
    }
}

/// `0.62 s (0.31–0.95)`, or the median alone for one value.
fn med_range(v: &[f64], digits: usize, unit: &str) -> String {
    let Some(m) = median(v) else {
        return "-".into();
    };
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 {
        format!("{m:.digits$}{unit}")
    } else {
        format!("{m:.digits$}{unit} ({lo:.digits$}–{hi:.digits$})")
    }
}

pub fn run(
    quick: bool,
    repeats: usize,
    sonde: &Path,
    data_dir: &Path,
    scratch: &Path,
) -> Result<String, String> {
    let _ = quick;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(skip(
            "needs root (network namespaces, a veth pair, packet capture); run sonde-bench as root",
        ));
    }
    let mut missing = Vec::new();
    let mut find = |p: &str, pkg: &str| {
        let w = which(p);
        if w.is_none() {
            missing.push(format!("{p} (Debian package {pkg})"));
        }
        w.unwrap_or_default()
    };
    let fastnetmon = find("fastnetmon", "fastnetmon");
    let tcpdump = find("tcpdump", "tcpdump");
    let tcpreplay = which("tcpreplay");
    let ip = find("ip", "iproute2");
    if !missing.is_empty() {
        return Ok(skip(&format!(
            "not installed: {} (scripts/setup-bench-deps.sh installs them)",
            missing.join(", ")
        )));
    }
    let Ok(base_conf) = std::fs::read_to_string("/etc/fastnetmon.conf") else {
        return Ok(skip(
            "no /etc/fastnetmon.conf to start from (reinstall the fastnetmon package)",
        ));
    };
    let others = other_fastnetmon();
    if let Err(e) = std::fs::create_dir_all("/var/log/fastnetmon_attacks") {
        return Ok(skip(&format!(
            "cannot create /var/log/fastnetmon_attacks: {e}"
        )));
    }
    let net = match Netns::create(&ip.display().to_string()) {
        Ok(n) => n,
        Err(e) => return Ok(skip(&format!("cannot make the veth pair: {e}"))),
    };
    let dir = scratch.join("detect");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // A copy: every run of the section measures the same build, even if target/release/sonde
    // is rebuilt meanwhile.
    let sonde_copy = dir.join("sonde");
    std::fs::copy(sonde, &sonde_copy)
        .map_err(|e| format!("cannot copy {}: {e}", sonde.display()))?;
    let s = Setup {
        sonde: sonde_copy,
        sonde_origin: sonde.to_path_buf(),
        fastnetmon,
        tcpreplay,
        tcpdump,
        base_conf,
        net,
        dir: dir.clone(),
    };
    let shapes = shapes();
    let mut caps = Vec::new();
    std::fs::create_dir_all(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    for sh in &shapes {
        // Written every time (a second or two; the same bytes each time), kept in the data
        // directory for replaying by hand.
        let path = data_dir.join(format!("detect-{}", sh.file()));
        let c = write_capture(sh, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        caps.push(c);
    }
    let avgs = [5u32, 1];
    eprintln!(
        "[sonde-bench] detect: tcpreplay -x 1 on {}, nobody listening",
        caps[0].path.display()
    );
    let tcpreplay = tcpreplay_check(&s, &caps[0]);
    let started = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    // Interleaved: every shape and setting once, then again, so drift on the machine spreads.
    for rep in 0..repeats {
        for (si, sh) in shapes.iter().enumerate() {
            for &avg in &avgs {
                let tag = format!("{}-avg{avg}-{rep}", sh.file().trim_end_matches(".pcap"));
                eprintln!("[sonde-bench] detect: {} with FastNetMon average_calculation_time={avg}, run {}", sh.name, rep + 1);
                match one_run(&s, si, &caps[si], avg, (rep, repeats), &tag) {
                    Ok(r) => {
                        eprintln!(
                            "[sonde-bench]   sonde {} ({} packets, {:.2} CPU s), FastNetMon {} ({} packets, {:.2} CPU s){}",
                            r.sonde.detect_s.map_or("no detection".into(), |d| format!("{d:.3} s")),
                            r.sonde.packets.map_or("?".into(), fmt_count),
                            r.sonde.window_cpu_s,
                            r.fnm.detect_s.map_or("no detection".into(), |d| format!("{d:.3} s")),
                            r.fnm.packets.map_or("?".into(), fmt_count),
                            r.fnm.window_cpu_s,
                            r.error.as_deref().map(|e| format!("; {e}")).unwrap_or_default()
                        );
                        runs.push(r)
                    }
                    Err(e) => {
                        eprintln!("[sonde-bench]   failed: {e}");
                        failures.push(format!(
                            "{}, average {avg} s, run {}: {e}",
                            sh.name,
                            rep + 1
                        ));
                    }
                }
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    eprintln!("[sonde-bench] detect: capture buffers (both tools stopped while {BUFFER_BURST} frames arrive)");
    let buffers = buffer_check(&s, &caps[0], BUFFER_BURST);
    Ok(report(
        &s, &shapes, &caps, &avgs, &runs, &failures, &others, tcpreplay, buffers, repeats, took,
    ))
}

/// tcpreplay's own pace on this machine: the first capture replayed with `-x 1` and nobody
/// listening (why the bench sends the frames itself).
fn tcpreplay_check(s: &Setup, cap: &Capture) -> Option<String> {
    let tcpreplay = s.tcpreplay.as_ref()?;
    let argv = s.net.exec_in(
        &s.net.tx_ns,
        &[
            tcpreplay.display().to_string(),
            "-i".into(),
            s.net.tx_if.clone(),
            "-x".into(),
            "1".into(),
            "-K".into(),
            cap.path.display().to_string(),
        ],
    );
    let dir = s.dir.join("tcpreplay-check");
    std::fs::create_dir_all(&dir).ok()?;
    let mut p = Proc::spawn(&argv, &dir, "tcpreplay").ok()?;
    let limit = Instant::now() + Duration::from_secs_f64(cap.duration_s * 4.0 + 30.0);
    while p.running() && Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    let exit = p.stop(libc::SIGINT, Duration::from_secs(2));
    let out = p.stdout() + &p.stderr();
    let actual = out
        .lines()
        .find(|l| l.trim_start().starts_with("Actual:"))?;
    let secs: f64 = actual
        .split("sent in")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(format!(
        "`tcpreplay -i IF -x 1 -K {}` with nobody listening sent the {:.2} s file in {secs:.2} s \
         ({}, {:.2} CPU s): {:.0}% of the file's pace. tcpreplay 4.4 sleeps from one packet to \
         the next, so each sleep's overshoot adds up (appneta/tcpreplay#724, open against 4.4.1); \
         at 100k pps it cannot keep the original pace on this machine.",
        cap.path.file_name()?.to_string_lossy(),
        cap.duration_s,
        cell(actual.trim()),
        exit.cpu_s,
        cap.duration_s / secs * 100.0
    ))
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &Setup,
    shapes: &[Shape],
    caps: &[Capture],
    avgs: &[u32],
    runs: &[Run],
    failures: &[String],
    others: &[String],
    tcpreplay: Option<String>,
    buffers: Result<BufferCheck, String>,
    repeats: usize,
    took: f64,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{TITLE}\n");
    let _ = writeln!(
        o,
        "Issue 13: detect at least as fast as FastNetMon, at a fraction of its CPU. FastNetMon \
         {} (Debian), tcpdump {}. Both tools listen at the same time on the same interface \
         while the same capture is replayed at its original pace; each attack × FastNetMon \
         setting ran {repeats} time(s), interleaved; the runs took {:.0} s; load average at the \
         end {}.\n",
        pkg_version("fastnetmon"),
        pkg_version("tcpdump"),
        took,
        super::loadavg()
    );
    let _ = writeln!(
        o,
        "sonde binary: a copy of `{}` taken when the section started (every run measures the \
         same build), sha256 {}.\n",
        s.sonde_origin.display(),
        Command::new("sha256sum")
            .arg(&s.sonde)
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .next()
                    .map(|h| h.chars().take(16).collect::<String>())
            })
            .unwrap_or_else(|| "?".into())
    );
    let _ = writeln!(
        o,
        "**Setup.** Two network namespaces made by the bench (`ip netns add {tx}`, `… {rx}`) \
         joined by a veth pair (`ip link add {txi} netns {tx} type veth peer name {rxi} netns \
         {rx}`), IPv6 off on both ends, no IP address on either: the replayed frames (all \
         addresses in 10.77.0.0/16) reach the packet sockets on `{rxi}` and are then dropped by \
         the kernel (not addressed to the interface); nothing is routed or answered. Both tools \
         and a timestamping tcpdump run in `{rx}`; the sender in `{tx}`. Not `lo`: on the veth \
         the capture keeps its Ethernet framing, nothing else on the machine sends there, and \
         FastNetMon's fixed ports (127.0.0.1:9209, :50052) stay inside the namespace.\n",
        tx = s.net.tx_ns,
        rx = s.net.rx_ns,
        txi = s.net.tx_if,
        rxi = s.net.rx_if,
    );
    let _ = writeln!(
        o,
        "**Traffic.** Each capture is written by sonde-bench (`PcapWriter`, into the data \
         directory as `detect-*.pcap`): ordinary traffic for the whole file (about 100 exchanges \
         a second, ~600 packets/s: short HTTP-like TCP connections from 40 clients in \
         10.77.1.0/24 to 10 servers in {NETWORK}, the victim among them, and DNS queries), and \
         from {LEAD_S:.0} s on the attack, evenly spaced, from random spoofed sources in \
         10.77.128.0/17 (a new flow per packet) to the victim {} (TTL {ATTACK_TTL}, the marker \
         of attack packets); {TRAIL_S:.0} s of ordinary traffic follow it.\n",
        victim()
    );
    let _ = writeln!(
        o,
        "**Replay.** {} The bench therefore sends the file itself, from a thread in `{}`: \
         one `send()` per frame on an AF_PACKET socket bound to `{}`, each frame at its offset \
         from the first on an absolute schedule (a late frame goes at once and the delay does \
         not carry over; frames due within 20 µs go together, so at 100k pps they leave in \
         bursts of a few hundred µs). The table shows how closely it kept the pace.\n",
        tcpreplay.unwrap_or_else(|| "tcpreplay was not checked (not installed).".into()),
        s.net.tx_ns,
        s.net.tx_if
    );
    let mut t = Table::new(&[
        "attack",
        "attack packets",
        "all packets",
        "file s",
        "replay s (median, range)",
        "frames late by, p99 / max (median run)",
        "sender CPU s",
        "first attack frame: sent → kernel stamp on IF",
    ]);
    for (i, (sh, c)) in shapes.iter().zip(caps).enumerate() {
        let rs: Vec<&Run> = runs
            .iter()
            .filter(|r| r.shape == i && r.replayed.sent > 0)
            .collect();
        let secs: Vec<f64> = rs.iter().map(|r| r.replayed.secs).collect();
        let late = sonde_bench::median_by(&rs, |r| r.replayed.max_late_s)
            .map(|r| {
                format!(
                    "{:.2} / {:.2} ms",
                    r.replayed.p99_late_s * 1e3,
                    r.replayed.max_late_s * 1e3
                )
            })
            .unwrap_or_else(|| "-".into());
        let cpu: Vec<f64> = rs.iter().map(|r| r.replayed.cpu_s).collect();
        let lag: Vec<f64> = rs
            .iter()
            .filter_map(|r| r.attack_sent_to_seen_s.map(|x| x * 1e3))
            .collect();
        t.row(vec![
            sh.name.to_string(),
            format!(
                "{} ({} pps × {} s)",
                fmt_count(c.attack_packets),
                fmt_count(sh.pps),
                sh.secs
            ),
            fmt_count(c.packets),
            format!("{:.2}", c.duration_s),
            med_range(&secs, 3, ""),
            late,
            med_range(&cpu, 2, ""),
            med_range(&lag, 3, " ms"),
        ]);
    }
    let _ = writeln!(o, "{}", t.to_markdown());

    let _ = writeln!(
        o,
        "Commands (DIR: the run's scratch directory; IF: `{}`):\n",
        s.net.rx_if
    );
    let sa = sonde_args(s, Path::new("DIR"))
        .into_iter()
        .map(|a| a.replace(&s.net.rx_if, "IF"))
        .collect::<Vec<_>>();
    let _ = writeln!(
        o,
        "    ip netns exec {} sonde {}",
        s.net.rx_ns,
        sa[1..].join(" ")
    );
    let _ = writeln!(
        o,
        "    ip netns exec {} fastnetmon --configuration_file DIR/fastnetmon.conf --log_to_console --disable_pid_logic",
        s.net.rx_ns
    );
    let _ = writeln!(
        o,
        "    ip netns exec {} tcpdump -i IF -n -p -tt --time-stamp-precision=nano -c 1 -l 'ip[8] = {ATTACK_TTL}'   (attack start)\n",
        s.net.rx_ns
    );
    let settings = fnm_settings(s, 0, Path::new("DIR"));
    let _ =
        writeln!(
        o,
        "FastNetMon's configuration is /etc/fastnetmon.conf with: {}. The notify script appends \
         `$(date +%s.%N) $*` to a file (and its standard input, the attack details, to another). \
         sonde gets the same single pps threshold: `ddos.pps={THRESHOLD_PPS}`, `ddos.mbps=1000` \
         (FastNetMon's `threshold_mbps`), and its other DDoS keys off (with its defaults, \
         `ddos.syn_pps=10000` and `ddos.flows=3500` would fire earlier on these floods, which \
         FastNetMon would not be asked to match).\n",
        settings
            .iter()
            .map(|(k, v)| {
                if *k == "average_calculation_time" {
                    format!(
                        "`{k} = {}` (5 is the default)",
                        avgs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" or ")
                    )
                } else {
                    format!("`{k} = {}`", v.replace(&s.net.rx_if, "IF"))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "**How each run goes.** Start FastNetMon and sonde; wait until each holds a packet \
         socket, then 1 s; measure {:.0} s idle (CPU per second with no traffic); wait (up to \
         {} s) for a second in which the whole machine is less than {QUIET_CPUS} CPUs busy \
         (other work competes with both tools); start the tcpdump and wait for it to listen; replay; keep both running {:.0} s after the last \
         frame; read CPU (/proc/PID/stat, user+sys of all threads), FastNetMon's packet counter \
         (Prometheus `fastnetmon_total_simple_packets_processed`) and both peak RSS (VmHWM); stop \
         both with SIGINT (FastNetMon 1.2.4 hangs in its shutdown: SIGKILL after 3 s); sonde's \
         packets and kernel drops come from its `--stats-json`. **Time to detect**: from the \
         kernel timestamp of the first attack packet on IF (tcpdump) to sonde's alert (the write \
         of the `\"event\":\"start\"` line for the victim to its `--alerts-out` file, seen by \
         an inotify watch) or FastNetMon's notify script (the `date` it writes); all \
         CLOCK_REALTIME. \
         **CPU in window**: the tool's CPU seconds from just before the first frame is sent to \
         the end of the tail; per packet: that over the packets the tool counted. The kernel's \
         work to deliver each frame to the packet sockets runs in the sender's context and is \
         in neither tool's figure.\n",
        IDLE.as_secs_f64(),
        QUIET_WAIT.as_secs(),
        TAIL.as_secs_f64()
    );
    if !others.is_empty() {
        let _ = writeln!(
            o,
            "**Warning:** another fastnetmon was running during the section (pid {}), not stopped \
             by `systemctl`/`service`: it shared the CPU.\n",
            others.join(", ")
        );
    }

    // Summary
    let mut t = Table::new(&[
        "attack",
        "tool",
        "detected",
        "time to detect, median (range)",
        "packets counted / sent",
        "CPU s in window",
        "µs CPU per packet",
        "wake-ups per 1000 packets",
        "idle CPU (s per s)",
        "peak RSS",
    ]);
    let ok: Vec<&Run> = runs.iter().filter(|r| r.error.is_none()).collect();
    for (i, sh) in shapes.iter().enumerate() {
        let cap = &caps[i];
        let mut rows: Vec<(String, Vec<&ToolRun>)> = Vec::new();
        let sonde_runs: Vec<&ToolRun> = ok
            .iter()
            .filter(|r| r.shape == i)
            .map(|r| &r.sonde)
            .collect();
        rows.push(("sonde".into(), sonde_runs));
        for &a in avgs {
            let f: Vec<&ToolRun> = ok
                .iter()
                .filter(|r| r.shape == i && r.avg == a)
                .map(|r| &r.fnm)
                .collect();
            rows.push((format!("FastNetMon, average {a} s"), f));
        }
        for (name, trs) in rows {
            if trs.is_empty() {
                continue;
            }
            let det: Vec<f64> = trs.iter().filter_map(|t| t.detect_s).collect();
            let cpu: Vec<f64> = trs.iter().map(|t| t.window_cpu_s).collect();
            let per: Vec<f64> = trs
                .iter()
                .filter_map(|t| {
                    t.packets
                        .filter(|&p| p > 0)
                        .map(|p| t.window_cpu_s * 1e6 / p as f64)
                })
                .collect();
            let pk: Vec<f64> = trs
                .iter()
                .filter_map(|t| t.packets.map(|p| p as f64))
                .collect();
            let wk: Vec<f64> = trs
                .iter()
                .filter_map(|t| {
                    t.packets
                        .filter(|&p| p > 0)
                        .map(|p| t.wakeups as f64 * 1000.0 / p as f64)
                })
                .collect();
            let idle: Vec<f64> = trs.iter().map(|t| t.idle_cpu_per_s).collect();
            let rss = trs.iter().map(|t| t.hwm).max().unwrap_or(0);
            t.row(vec![
                sh.name.to_string(),
                name,
                format!("{} of {}", det.len(), trs.len()),
                med_range(&det, 2, " s"),
                format!(
                    "{} / {}",
                    median(&pk).map_or("?".into(), |p| fmt_count(p as u64)),
                    fmt_count(cap.packets)
                ),
                med_range(&cpu, 2, ""),
                med_range(&per, 2, ""),
                med_range(&wk, 0, ""),
                med_range(&idle, 3, ""),
                fmt_bytes(rss),
            ]);
        }
    }
    match &buffers {
        Ok(b) => {
            let _ = writeln!(
                o,
                "**Capture buffers.** Both tools started as above, then stopped with SIGSTOP while \
                 {} attack frames were sent as fast as the sender goes, then SIGCONT: what each \
                 counts afterwards is what its capture ring held. sonde: {} ({} dropped by the \
                 kernel); FastNetMon: {}.\n",
                fmt_count(b.sent),
                b.sonde.map_or("?".into(), fmt_count),
                b.sonde_dropped.map_or("?".into(), fmt_count),
                b.fnm.map_or("?".into(), fmt_count),
            );
        }
        Err(e) => {
            let _ = writeln!(o, "**Capture buffers.** The check failed: {}\n", cell(e));
        }
    }
    let _ = writeln!(
        o,
        "Summary (sonde's rows pool its runs beside both FastNetMon settings; medians with the \
         range; peak RSS is the largest):\n"
    );
    let _ = writeln!(o, "{}", t.to_markdown());

    // Every run
    let mut t = Table::new(&[
        "attack",
        "FNM avg s",
        "run",
        "sonde detect s",
        "FNM detect s",
        "sonde packets",
        "FNM packets",
        "sonde CPU s",
        "FNM CPU s",
        "sender CPU s",
        "machine busy CPU s (rest)",
        "sonde alert after its second ended, ms",
        "window s",
        "replay s",
        "whole-process CPU s (wait4) sonde / FNM",
        "load at start",
        "notes",
    ]);
    for r in runs {
        let d = |x: Option<f64>| x.map_or("not detected".into(), |v| format!("{v:.3}"));
        let mut notes: Vec<String> = Vec::new();
        if let Some(e) = &r.error {
            notes.push(format!("not counted: {e}"));
        }
        if !r.sonde.note.is_empty() {
            notes.push(format!("sonde: {}", r.sonde.note));
        }
        if !r.fnm.note.is_empty() {
            notes.push(format!("FastNetMon: {}", r.fnm.note));
        }
        if r.quiet >= QUIET_CPUS {
            notes.push(format!(
                "machine still {:.2} CPUs busy after waiting {} s before the replay",
                r.quiet,
                QUIET_WAIT.as_secs()
            ));
        }
        let rest = r.machine_busy_s - r.sonde.window_cpu_s - r.fnm.window_cpu_s - r.replayed.cpu_s;
        if rest > 0.5 * r.window_s {
            notes.push(format!(
                "other work took {rest:.1} CPU s during the window (the machine was not quiet)"
            ));
        }
        if r.replayed.failed > 0 {
            notes.push(format!("{} frames not sent", fmt_count(r.replayed.failed)));
        }
        t.row(vec![
            shapes[r.shape].name.to_string(),
            r.avg.to_string(),
            (r.rep + 1).to_string(),
            d(r.sonde.detect_s),
            d(r.fnm.detect_s),
            r.sonde.packets.map_or("?".into(), fmt_count),
            r.fnm.packets.map_or("?".into(), fmt_count),
            format!("{:.2}", r.sonde.window_cpu_s),
            format!("{:.2}", r.fnm.window_cpu_s),
            format!("{:.2}", r.replayed.cpu_s),
            format!(
                "{:.2} ({:.2})",
                r.machine_busy_s,
                r.machine_busy_s - r.sonde.window_cpu_s - r.fnm.window_cpu_s - r.replayed.cpu_s
            ),
            r.sonde
                .after_second_s
                .map_or("-".into(), |x| format!("{:.0}", x * 1e3)),
            format!("{:.1}", r.window_s),
            format!("{:.3}", r.replayed.secs),
            format!("{:.2} / {:.2}", r.sonde.total.cpu_s, r.fnm.total.cpu_s),
            r.load.clone(),
            cell(&notes.join("; ")),
        ]);
    }
    let _ = writeln!(
        o,
        "Every run (\"machine busy\": all CPUs' non-idle time over the window, from /proc/stat, \
         at most the window's length times {} CPUs; \"rest\": that less sonde, FastNetMon and \
         the sender, i.e. other processes and the kernel's work outside them, within about a \
         second either way (/proc/stat counts ticks, the processes' own times do not); \
         \"sonde alert after its second ended\": the alert's time less the end of the second it \
         reports, `first_seen` + 1):\n",
        super::nproc()
    );
    let _ = writeln!(o, "{}", t.to_markdown());
    if let Some(r) = runs.iter().find(|r| !r.sonde.detail.is_empty()) {
        let _ = writeln!(
            o,
            "A detection by sonde (its `--alerts-out` line):\n\n    {}\n",
            r.sonde.detail
        );
    }
    if let Some(r) = runs.iter().find(|r| !r.fnm.detail.is_empty()) {
        let _ = writeln!(
            o,
            "A detection by FastNetMon (what its notify script got):\n\n    {}\n",
            r.fnm.detail
        );
    }
    if !failures.is_empty() {
        let _ = writeln!(o, "Runs that failed:\n");
        for f in failures {
            let _ = writeln!(o, "- {}", cell(f));
        }
        let _ = writeln!(o);
    }
    o.push_str(&reading(shapes, avgs, &ok, buffers.as_ref().ok()));
    o
}

/// Time to detect in a model of each tool, for an attack at `ratio` times the threshold
/// starting at a uniformly random point of the tool's one-second period: (min, median, max).
/// sonde (`avg` None): the first whole or partial second whose count reaches the threshold,
/// reported when it ends. FastNetMon (`avg` Some(T)): its moving average, updated at the end
/// of each period with that period's rate, avg ← rate + e^(−1/T)·(avg − rate), until above.
fn model(ratio: f64, avg: Option<u32>) -> (f64, f64, f64) {
    let n = 1000;
    let mut v: Vec<f64> = (0..n)
        .map(|i| {
            let p = (i as f64 + 0.5) / n as f64; // attack to the end of its first period
            let mut a = 0.0;
            for k in 0..1000 {
                let rate = ratio * if k == 0 { p } else { 1.0 };
                let crossed = match avg {
                    None => rate >= 1.0,
                    Some(t) => {
                        a = rate + (-1.0 / t as f64).exp() * (a - rate);
                        a > 1.0
                    }
                };
                if crossed {
                    return p + k as f64;
                }
            }
            f64::INFINITY
        })
        .collect();
    v.sort_by(f64::total_cmp);
    (v[0], v[n / 2], v[n - 1])
}

/// A short reading of the figures, from the figures.
fn reading(shapes: &[Shape], avgs: &[u32], ok: &[&Run], buffers: Option<&BufferCheck>) -> String {
    let mut o = String::from("**Reading.**\n\n");
    let per_packet = |t: &ToolRun| {
        t.packets
            .filter(|&p| p > 0)
            .map(|p| t.window_cpu_s * 1e6 / p as f64)
    };
    for (i, sh) in shapes.iter().enumerate() {
        let rs: Vec<&&Run> = ok.iter().filter(|r| r.shape == i).collect();
        if rs.is_empty() {
            continue;
        }
        let sd: Vec<f64> = rs.iter().filter_map(|r| r.sonde.detect_s).collect();
        let sp: Vec<f64> = rs.iter().filter_map(|r| per_packet(&r.sonde)).collect();
        let drops: u64 = rs
            .iter()
            .filter_map(|r| {
                r.sonde
                    .note
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.replace(',', "").parse::<u64>().ok())
            })
            .sum();
        let mut parts = vec![format!(
            "sonde detected in {} of {} runs, median {} after the first attack packet, {} µs \
             of CPU per packet",
            sd.len(),
            rs.len(),
            median(&sd).map_or("-".into(), |m| format!("{m:.2} s")),
            median(&sp).map_or("-".into(), |m| format!("{m:.1}")),
        )];
        let mut best_fnm: Option<f64> = None;
        let mut fnm_pp: Vec<f64> = Vec::new();
        for &a in avgs {
            let fr: Vec<&&&Run> = rs.iter().filter(|r| r.avg == a).collect();
            if fr.is_empty() {
                continue;
            }
            let fd: Vec<f64> = fr.iter().filter_map(|r| r.fnm.detect_s).collect();
            let fp: Vec<f64> = fr.iter().filter_map(|r| per_packet(&r.fnm)).collect();
            fnm_pp.extend(&fp);
            if let Some(m) = median(&fd) {
                best_fnm = Some(best_fnm.map_or(m, |b: f64| b.min(m)));
            }
            parts.push(format!(
                "FastNetMon with average {a} s in {} of {}, median {}, {} µs per packet",
                fd.len(),
                fr.len(),
                median(&fd).map_or("-".into(), |m| format!("{m:.2} s")),
                median(&fp).map_or("-".into(), |m| format!("{m:.1}")),
            ));
        }
        let ratio = sh.pps as f64 / THRESHOLD_PPS as f64;
        // The faster FastNetMon setting in the models (over all start phases).
        let model_fnm = avgs
            .iter()
            .map(|&a| model(ratio, Some(a)).1)
            .fold(f64::INFINITY, f64::min);
        let model_sonde = model(ratio, None).1;
        let yes_no = |ok: bool| if ok { "**yes**" } else { "**no**" };
        let faster = match (median(&sd), best_fnm) {
            (Some(s), Some(f)) if sd.len() == rs.len() => format!(
                "at least as fast as FastNetMon's faster setting: in these runs {} ({s:.2} vs \
                 {f:.2} s), over all start phases {} ({model_sonde:.2} vs {model_fnm:.2} s)",
                yes_no(s <= f),
                yes_no(model_sonde <= model_fnm)
            ),
            _ => "at least as fast: **no** (sonde missed runs)".into(),
        };
        let cpu = match (median(&sp), median(&fnm_pp)) {
            (Some(s), Some(f)) if f > 0.0 => format!(
                "CPU per packet {:.1}× FastNetMon's: {}",
                s / f,
                if s < f {
                    "**a fraction: yes**"
                } else {
                    "**a fraction: no**"
                }
            ),
            _ => "CPU not compared".into(),
        };
        let drops = if drops > 0 {
            format!(
                "; sonde's kernel ring dropped {} packets over these runs",
                fmt_count(drops)
            )
        } else {
            String::new()
        };
        let m = |a: Option<u32>| {
            let (lo, mid, hi) = model(ratio, a);
            format!("{mid:.2} s ({lo:.2}–{hi:.2})")
        };
        let expected = format!(
            "expected from the models below, over a random start: sonde {}, {}",
            m(None),
            avgs.iter()
                .map(|&a| format!("FastNetMon (average {a} s) {}", m(Some(a))))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            o,
            "- {}: {}. {}; {}{}. ({expected}.)",
            sh.name,
            parts.join("; "),
            faster,
            cpu,
            drops
        );
    }
    let _ = writeln!(
        o,
        "\nHow the two decide. sonde counts each host's packets per second (of packet time) and \
         checks the thresholds when the second closes (on the first packet of the next second): \
         an attack that starts with a part p of a second left is reported p seconds later if \
         that part alone reaches the threshold (p ≥ threshold / rate), else 1 + p seconds later. \
         FastNetMon keeps an exponential moving average of each host's rate, updated once a \
         second with the last second's rate: avg ← rate + e^(−1/T)·(avg − rate), T = \
         `average_calculation_time`; it bans when the average is over the threshold, and its \
         notify script runs at once with `ban` (the attack details follow about 0.5 s later \
         with `attack_details`). Both models, with the start uniformly spread over the period, \
         give the expected figures in brackets above (medians and ranges over all start phases). \
         Every measured time falls within its model's range (plus the few ms sonde takes to \
         write its alert after the second ends): with 3 runs, the measured medians mostly show \
         where the runs' starts fell, the models' medians what to expect. The runs start at \
         spread phases (a delay of (run + u) / runs s before each replay, u random).\n"
    );
    // Where the CPU goes: wake-ups per packet and the capture buffers, as measured.
    let many_wakeups = {
        let v: Vec<f64> = ok
            .iter()
            .filter_map(|r| {
                r.sonde
                    .packets
                    .filter(|&p| p > 0)
                    .map(|p| r.sonde.wakeups as f64 * 1000.0 / p as f64)
            })
            .collect();
        median(&v).is_some_and(|m| m >= 10.0)
    };
    let wake = |f: &dyn Fn(&Run) -> &ToolRun| {
        let v: Vec<f64> = ok
            .iter()
            .filter_map(|r| {
                let t = f(r);
                t.packets
                    .filter(|&p| p > 0)
                    .map(|p| t.wakeups as f64 * 1000.0 / p as f64)
            })
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        if v.is_empty() {
            "?".to_string()
        } else {
            format!("{lo:.0}–{hi:.0}")
        }
    };
    let _ = writeln!(
        o,
        "Where the CPU goes. Over the replays, sonde's threads slept and woke {} times per \
         1000 packets, FastNetMon's {} (its two fan-out workers read TPACKET_V3 blocks, which \
         the kernel hands over when full or after a timeout).{}{}\n",
        wake(&|r: &Run| &r.sonde),
        wake(&|r: &Run| &r.fnm),
        if many_wakeups {
            " Tens or hundreds of wake-ups per 1000 packets mean sonde's reader is handed \
             packets one or a few at a time (as with libpcap's immediate mode, a TPACKET_V2 \
             ring); on this virtual machine each sleep and wake-up costs more than a packet."
        } else {
            ""
        },
        match buffers {
            Some(b) => format!(
                " In the capture-buffer check, sonde's ring held {} frames ({:.0} ms at 100k \
                 pps: how long its reader may go unscheduled before the kernel drops) and \
                 FastNetMon's {}.",
                b.sonde.map_or("?".into(), fmt_count),
                b.sonde.unwrap_or(0) as f64 / 100.0,
                b.fnm.map_or("?".into(), fmt_count)
            ),
            None => String::new(),
        }
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_valid_checksums() {
        let l4 = L4 {
            proto: 6,
            sport: 1234,
            dport: 80,
            seq: 1,
            ack: 0,
            flags: SYN,
            payload: &[],
        };
        let f = frame([10, 77, 128, 1], VICTIM, ATTACK_TTL, 7, &l4);
        assert_eq!(f.len(), 54);
        assert_eq!(csum(&f[14..34], 0), 0, "IPv4 header checksum");
        let mut pseudo = 0u32;
        for w in [&f[26..30], &f[30..34]] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
            pseudo += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        pseudo += 6 + 20;
        assert_eq!(csum(&f[34..], pseudo), 0, "TCP checksum");
    }

    #[test]
    fn config_lines_replaced_or_added() {
        let base = "# comment\nthreshold_pps = 20000\ninterfaces = eth3,eth4\n";
        let c = fnm_config(
            base,
            &[
                ("interfaces", "veth0".into()),
                ("mirror_afpacket", "on".into()),
            ],
        );
        assert_eq!(
            c,
            "# comment\nthreshold_pps = 20000\ninterfaces = veth0\nmirror_afpacket = on\n"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(med_range(&[1.0, 3.0, 2.0], 1, " s"), "2.0 s (1.0–3.0)");
        assert_eq!(
            metric(
                "# x\nfastnetmon_total_simple_packets_processed 42\n",
                "fastnetmon_total_simple_packets_processed"
            ),
            Some(42)
        );
    }
}
