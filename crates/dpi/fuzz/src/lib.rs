//! Shared harness for the sonde-dpi fuzz targets: turns the fuzzer's bytes into a short flow
//! (transport, ports, a few payload packets in both directions) and feeds it to one detector
//! (`fuzz_targets/detectors.rs`) or to the whole engine (`fuzz_targets/dispatch.rs`).
//!
//! Input layout (all integers big-endian):
//!
//! ```text
//! detectors only: one byte, the detector: its index in `sonde_dpi::proto::DETECTORS`, modulo
//!          the number of detectors (a new detector is fuzzed without editing this crate)
//! [0]      flags: bit 0 = UDP (else TCP; a detector that takes only one transport gets that one)
//!                 bit 1 = IPv6 addresses (dispatch only)
//! [1..3]   client port
//! [3..5]   server port
//! dispatch only: client address, server address (4 bytes each, or 16 with bit 1)
//! then up to MAX_PKTS packets, each:
//! [0..2]   bit 15 = sent by the server (else by the client), bits 0..14 = payload length
//!          (cut to what is left of the input)
//! [..len]  payload
//! ```
//!
//! `seeds.py` writes the seed corpus in this layout from real captures.

use sonde_dpi::proto::{Detector, DETECTORS};
use sonde_dpi::{Dpi, DpiConfig, FlowCtx, FlowDpi, Pkt, Verdict, L4};
use std::sync::OnceLock;

/// Packets per flow at most: more than the engine's default budget (`MAX_PACKETS`), so a
/// detector that keeps ownership sees later packets too.
pub const MAX_PKTS: usize = 16;

/// A flow decoded from the fuzzer's bytes.
pub struct Flow<'a> {
    pub udp: bool,
    pub ipv6: bool,
    pub client_port: u16,
    pub server_port: u16,
    pub client_addr: [u8; 16],
    pub server_addr: [u8; 16],
    /// (from_client, payload)
    pub pkts: Vec<(bool, &'a [u8])>,
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if data.len() < n {
        return None;
    }
    let (head, rest) = data.split_at(n);
    *data = rest;
    Some(head)
}

/// Splits `data` as the module docs describe; `None` when too short for the header.
pub fn parse(mut data: &[u8], with_addrs: bool) -> Option<Flow<'_>> {
    let hdr = take(&mut data, 5)?;
    let udp = hdr[0] & 1 != 0;
    let ipv6 = hdr[0] & 2 != 0;
    let client_port = u16::from_be_bytes([hdr[1], hdr[2]]);
    let server_port = u16::from_be_bytes([hdr[3], hdr[4]]);
    let mut client_addr = [0u8; 16];
    let mut server_addr = [0u8; 16];
    if with_addrs {
        let n = if ipv6 { 16 } else { 4 };
        client_addr[..n].copy_from_slice(take(&mut data, n)?);
        server_addr[..n].copy_from_slice(take(&mut data, n)?);
    }
    let mut pkts = Vec::new();
    while pkts.len() < MAX_PKTS {
        let Some(h) = take(&mut data, 2) else { break };
        let h = u16::from_be_bytes([h[0], h[1]]);
        let len = ((h & 0x7fff) as usize).min(data.len());
        let payload = take(&mut data, len).unwrap_or_default();
        pkts.push((h & 0x8000 == 0, payload));
    }
    Some(Flow {
        udp,
        ipv6,
        client_port,
        server_port,
        client_addr,
        server_addr,
        pkts,
    })
}

/// The first byte picks the detector (`DETECTORS[byte % DETECTORS.len()]`), the rest is the
/// flow it is fed ([`run_detector`]).
pub fn run_detectors(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    run_detector(&DETECTORS[usize::from(pick) % DETECTORS.len()], rest);
}

/// Feeds the flow to one detector with one `FlowDpi`, as the engine does once that detector
/// is the only candidate left: payload-less packets are skipped, `index` counts the payload
/// packets, and the detector is not called again after `No` or `Is { done: true }`.
pub fn run_detector(d: &Detector, data: &[u8]) {
    let Some(flow) = parse(data, false) else {
        return;
    };
    let l4 = match (d.tcp, d.udp) {
        (true, true) => {
            if flow.udp {
                L4::Udp
            } else {
                L4::Tcp
            }
        }
        (false, true) => L4::Udp,
        _ => L4::Tcp,
    };
    let mut f = FlowDpi::default();
    let mut index = 0u8;
    for &(from_client, payload) in &flow.pkts {
        if payload.is_empty() {
            continue;
        }
        let p = Pkt {
            payload,
            l4,
            from_client,
            client_port: flow.client_port,
            server_port: flow.server_port,
            index,
            ts_ns: index as u64 * 1_000_000,
        };
        index = index.saturating_add(1);
        match (d.run)(&p, &mut f) {
            Verdict::No | Verdict::Is { done: true, .. } => break,
            Verdict::Unsure | Verdict::Is { done: false, .. } => {}
        }
    }
    std::hint::black_box(&f);
}

fn engine() -> &'static Dpi {
    static DPI: OnceLock<Dpi> = OnceLock::new();
    DPI.get_or_init(|| Dpi::new(DpiConfig::default()).expect("built-in backend"))
}

/// Runs the whole built-in engine (`Dpi::inspect` until it is done, then `Dpi::finish`) over
/// the flow, and builds the label's printed forms.
pub fn run_dispatch(data: &[u8]) {
    let Some(flow) = parse(data, true) else {
        return;
    };
    let dpi = engine();
    let l4 = if flow.udp { L4::Udp } else { L4::Tcp };
    let mut f = FlowDpi::default();
    for &(from_client, payload) in &flow.pkts {
        let p = Pkt {
            payload,
            l4,
            from_client,
            client_port: flow.client_port,
            server_port: flow.server_port,
            index: 0, // the engine sets it
            ts_ns: 0,
        };
        if dpi.inspect(&mut f, &p) {
            break;
        }
    }
    let ctx = FlowCtx {
        l4,
        client_port: flow.client_port,
        server_port: flow.server_port,
        client_addr: flow.client_addr,
        server_addr: flow.server_addr,
        ip_version: if flow.ipv6 { 6 } else { 4 },
    };
    dpi.finish(&mut f, &ctx);
    std::hint::black_box((f.l7.name(), f.l7.number(), &f.meta));
}
