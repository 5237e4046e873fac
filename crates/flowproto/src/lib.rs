//! Flow protocols for sonde: NetFlow v5/v9, IPFIX (RFC 7011) and sFlow v5.
//!
//! Why this crate exists: routers, switches and virtual switches already export flows, and
//! collectors already read them. sonde is both: a collector whose records feed the same
//! flow/host model as captured packets, and an exporter any standard collector reads.
//!
//! * [`decode`]: datagrams in, [`CollectedFlow`]s (and sFlow packet samples) out, with
//!   per-exporter template state and statistics. Never panics on any input; memory per
//!   exporter is bounded (templates capped, unknown exporters capped).
//! * [`encode`]: sonde's flows out as NetFlow v5/v9 or IPFIX datagrams, MTU-bounded, with
//!   template refresh and correct sequence numbers.

pub mod decode;
pub mod encode;
pub mod record;

pub use record::{CollectedFlow, ExportFlow, SampledPacket};
