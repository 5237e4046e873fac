//! Fuzzes the classic BPF interpreter: programs libpcap compiled (tcpdump's common shapes and
//! byte-offset expressions) over any frame and wire length, and raw programs made from the
//! input itself, which must be refused or run without panicking (out-of-bounds loads, jumps,
//! division by zero, backward loops all end the run with "no match").
//!
//! Input layout: [0] selects the mode (even: compiled programs; odd: a raw program), [1..3]
//! the wire length's extra bytes; compiled mode: the rest is the frame; raw mode: [3] the
//! number of instructions n, then n × 8 bytes (code u16, jt, jf, k u32, big-endian), then the
//! frame.
#![no_main]

use sonde_analytics::bpf::Program;
use sonde_wire::LinkType;
use std::sync::OnceLock;

const EXPRS: [&str; 8] = [
    "tcp port 80 or udp port 53",
    "net 10.0.0.0/8 and not port 443",
    "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
    "ip[6:2] & 0x1fff != 0",
    "vlan and tcp",
    "ip protochain 6",
    "tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420",
    "less 100 or greater 1000",
];

fn programs() -> &'static Vec<Program> {
    static P: OnceLock<Vec<Program>> = OnceLock::new();
    P.get_or_init(|| {
        EXPRS
            .iter()
            .filter_map(|e| Program::compile(e, LinkType::Ethernet).ok())
            .collect()
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let extra = u16::from_be_bytes([data[1], data[2]]) as u32;
    if data[0] % 2 == 0 {
        let frame = &data[3..];
        for p in programs() {
            let _ = p.matches(frame, frame.len() as u32 + extra);
        }
        return;
    }
    let Some(&n) = data.get(3) else { return };
    let body = &data[4..];
    let n = (n as usize).min(body.len() / 8);
    let insns: Vec<(u16, u8, u8, u32)> = body[..n * 8]
        .chunks_exact(8)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                c[2],
                c[3],
                u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect();
    let frame = &body[n * 8..];
    if let Ok(p) = Program::from_raw(&insns) {
        let _ = p.matches(frame, frame.len() as u32 + extra);
    }
});
