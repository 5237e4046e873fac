//! Traffic analytics: what sonde points at, beyond exact counters (Ourmon's filter-sets and
//! top-N tuples, FastNetMon's thresholds).
//!
//! Why this crate exists: detection needs its own bounded data structures (sketches, exact sets
//! with budgets, per-host-group thresholds) and its own output shape, and the engine must reach
//! them from the hot path without knowing their details. Everything here is per shard and
//! single-threaded; the probe merges shards' parts.
//!
//! * [`bpf`]: classic BPF programs compiled by libpcap and run by a Rust interpreter (with the
//!   frame's wire length, as tcpdump does).
//! * [`filter_expr`]: the common tcpdump primitives (host/net/port/proto with and/or/not) parsed
//!   into a native matcher whose answer depends only on a flow's key and direction, so a shard
//!   evaluates it once per flow instead of once per packet.
//! * [`filterset`]: named sets of labelled expressions (`--filter-set`), compiled both ways.

/// The cBPF interpreter lives with the capture sources, which run `-f` with it too.
pub use sonde_capture::bpf;
pub mod config;
pub mod filter_expr;
pub mod filterset;
pub mod merge;
pub mod shard;
pub mod sketch;
pub mod types;

pub use config::{AnalyticsConfig, Key, Network, Networks, Thresholds};
pub use filterset::{FilterCounts, FilterEval, FilterSetSpec, FilterSets, USE_FLOW_BITS};
pub use shard::{FlowHosts, FlowIvl, IcmpKind, Report, ShardAnalytics, WatchList, NO_HOST};
pub use types::{HostAddr, Rates, Traffic, Usage};

/// The types of detection records (`type` in `--alerts-out` and the API).
pub const DETECTION_TYPES: [&str; 6] = [
    "scan.ip",
    "scan.port",
    "syn_flood",
    "ddos",
    "icmp_errors",
    "noisy_host",
];

/// Asks the CPU to bring `r`'s first cache line in (a hint; no effect on results).
#[inline(always)]
pub fn prefetch_read<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint that never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(r as *const T as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
