//! `sonde-send`: a packet generator for the live-capture benchmarks (scripts/bench-live.sh).
//!
//! Why it exists: tcpreplay sends one packet per system call, which on a small machine is
//! slower than the capture it is meant to overload. This reads a pcap file into memory once
//! and sends its frames out of an interface through an AF_PACKET socket with `sendmmsg`, a
//! batch of frames a call, bypassing the queueing discipline, at a given rate or as fast as
//! it can, looping over the file until the count is reached. It prints what it sent and how
//! fast, and never fails silently: a short send is retried, and an error ends the run.
//!
//! ```text
//! sonde-send -i IFACE -r FILE [--count N] [--pps RATE] [--batch 64]
//! ```

use sonde_capture::FileSource;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const PACKET_QDISC_BYPASS: libc::c_int = 20;

struct Args {
    iface: String,
    file: std::path::PathBuf,
    count: Option<u64>,
    pps: Option<u64>,
    batch: usize,
}

fn usage() -> ! {
    eprintln!("usage: sonde-send -i IFACE -r FILE [--count N] [--pps RATE] [--batch N]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        iface: String::new(),
        file: Default::default(),
        count: None,
        pps: None,
        batch: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        let number = |v: String| v.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "-i" => a.iface = value(),
            "-r" => a.file = value().into(),
            "--count" => a.count = Some(number(value())),
            "--pps" => a.pps = Some(number(value())).filter(|&r| r > 0),
            "--batch" => a.batch = number(value()).clamp(1, 1024) as usize,
            _ => usage(),
        }
    }
    if a.iface.is_empty() || a.file.as_os_str().is_empty() {
        usage();
    }
    a
}

fn main() {
    let a = parse_args();
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("sonde-send: {what}: {e}");
        std::process::exit(1)
    };
    let mut src = FileSource::open(&a.file).unwrap_or_else(|e| fail("reading the file", &e));
    let mut frames: Vec<Vec<u8>> = Vec::new();
    while let Some((_, f)) = src
        .next_frame()
        .unwrap_or_else(|e| fail("reading the file", &e))
    {
        frames.push(f.data.to_vec());
    }
    if frames.is_empty() {
        fail("reading the file", &"it holds no packet");
    }
    let count = a.count.unwrap_or(frames.len() as u64);

    let name = std::ffi::CString::new(a.iface.clone()).unwrap_or_else(|e| fail("-i", &e));
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        fail(&a.iface, &std::io::Error::last_os_error());
    }
    // SAFETY: plain socket(2); checked below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        fail("socket(AF_PACKET)", &std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let one: libc::c_int = 1;
    // SAFETY: an int option of the size passed. Failure only means the qdisc is not skipped.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_QDISC_BYPASS,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // SAFETY: all-zero is a valid sockaddr_ll to fill in.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        fail("bind", &std::io::Error::last_os_error());
    }

    let mut iov: Vec<libc::iovec> = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        a.batch
    ];
    // SAFETY: all-zero mmsghdr values are valid (no name, no control data).
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; a.batch];
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut next = 0usize;
    while sent < count {
        let n = (a.batch as u64).min(count - sent) as usize;
        if let Some(pps) = a.pps {
            // Send batch by batch on the schedule the rate sets.
            let due = start + Duration::from_secs_f64(sent as f64 / pps as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        for i in 0..n {
            let f = &frames[(next + i) % frames.len()];
            iov[i] = libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        let mut done = 0usize;
        while done < n {
            // SAFETY: `msgs[done..n]` point to iovecs over frames that outlive the call.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (n - done) as u32,
                    0,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOBUFS)
                    || e.kind() == std::io::ErrorKind::WouldBlock
                {
                    std::thread::yield_now();
                    continue;
                }
                fail("sendmmsg", &e);
            }
            done += r as usize;
        }
        sent += n as u64;
        next = (next + n) % frames.len();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sonde-send: {sent} packets in {secs:.3} s ({:.0} pps)",
        sent as f64 / secs.max(1e-9)
    );
}
