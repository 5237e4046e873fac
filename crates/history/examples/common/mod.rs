//! The flows the measuring examples write (BENCHMARKS.md §21).
use sonde_flow::{EndReason, Flow, FlowKey, FlowRecord};

/// Flow `i` of a link ending `per_second` flows a second, between `clients` client addresses
/// (10.0.0.0/8) and `servers` server addresses (192.168.0.0/16), on port 443.
pub fn record(i: u32, per_second: u32, clients: u32, servers: u32) -> FlowRecord {
    let mut key = FlowKey {
        proto: 6,
        ip_version: 4,
        port_a: 1024 + (i % 50_000) as u16,
        port_b: 443,
        ..FlowKey::default()
    };
    key.addr_a[..4].copy_from_slice(&(0x0a00_0000 + i % clients).to_be_bytes());
    key.addr_b[..4].copy_from_slice(&(0xc0a8_0000 + i % servers).to_be_bytes());
    let t = 1_700_000_000_000_000_000 + (i / per_second) as u64 * 1_000_000_000;
    let flow = Flow {
        key,
        first_ns: t,
        last_ns: t + 500_000_000,
        pkts: [3, 2],
        bytes: [1000 + i as u64, 200],
        ..Flow::default()
    };
    FlowRecord {
        flow,
        ext: Default::default(),
        reason: EndReason::IdleTimeout,
        meta: None,
        exporter: None,
    }
}
