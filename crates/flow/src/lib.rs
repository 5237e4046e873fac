//! The per-shard engine of sonde: packets in, live flow and host state out, expired flows emitted.
//!
//! Why this crate exists: it is the hot loop (decode → hash → one table probe → counter update)
//! and everything it owns is bounded. A shard is single-threaded and shares nothing; the probe
//! crate runs one per core and routes both directions of a flow to the same shard by
//! [`key::FlowKey::hash`], which is symmetric because keys are stored in canonical order.
//!
//! * [`table::Index`] is an open-addressing index from hash to slab slot, prefetchable by batch.
//! * [`flow::Flow`] holds per-direction counters, times, TCP flags/state, retransmissions and
//!   handshake RTTs; [`host::HostTable`] holds per-address counters.
//! * Host counters are brought up to date from flows once per tick (1 s of packet time) and when a
//!   flow ends, not per packet: that keeps the per-packet path to one random memory access.

pub mod engine;
pub mod flow;
pub mod host;
pub mod key;
pub mod series;
pub mod stats;
pub mod table;

pub use engine::{
    copy_payload, decoded_from_record, quotes_a_packet, Engine, EngineConfig, FlowVerdict,
    FullPolicy, PacketRef, Payloads, Span,
};
pub use flow::{
    locality, Direction, DirectionCounts, EndReason, Flow, FlowExt, FlowRecord, FlowRow, TcpHealth,
};
pub use host::{Host, HostTable};
pub use key::{Ends, FlowKey};
pub use series::{AppKey, ExporterKey, Gauges, IntervalCounts, SeriesTick};
pub use stats::{DropReason, ShardStats};
