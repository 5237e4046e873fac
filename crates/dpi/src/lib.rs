//! Application detection (DPI) for sonde.
//!
//! Why this crate exists: a flow's ports say little about what it carries. Following Cento's
//! finding that a light DPI over the first packets of each flow costs almost nothing, sonde
//! looks at the payload of at most [`MAX_PACKETS`] packets per flow, then the flow leaves the DPI
//! path for good. Every flow ends with an [`L7`] label (protocol, service, category, and whether
//! it was found in the payload or guessed from ports) and, when the protocol carries them,
//! metadata ([`Meta`]: server name, HTTP and DNS fields, TLS fingerprints, …).
//!
//! Contract for detectors (one module per protocol under [`proto`]):
//! * they see only [`types`] (the packet, their answer, the [`types::Flow`] with the label,
//!   metadata and their typed per-protocol state), [`meta`] and [`ids`], never the engine;
//! * they read only the `&[u8]` they are given, never panic on any input, never allocate more
//!   than the small, capped strings they put into [`Meta`];
//! * they answer with a [`Verdict`]; `No` removes them from the flow's candidates.
//!
//! Protocol and application numbers are nDPI's, so `L7_PROTO` means the same as in ntopng.

pub mod dnscache;
mod engine;
pub mod ids;
pub mod meta;
#[cfg(feature = "ndpi")]
pub mod ndpi;
pub mod proto;
pub mod service;
pub mod types;

pub use dnscache::DnsCache;
pub use engine::{Backend, Dpi, DpiConfig, FlowCtx, FlowDpi, NDPI_AVAILABLE};
pub use ids::{Category, Proto};
pub use meta::Meta;
pub use service::Services;
pub use types::{wire_string, Confidence, Pkt, Scratch, Verdict, L4, L7, MAX_STR};

/// Payload packets of a flow inspected at most (both directions together).
pub const MAX_PACKETS: u8 = 10;
