//! Packet sources for sonde.
//!
//! Why this crate exists: ingress is where input is least trustworthy (truncated files, foreign
//! formats, missing interfaces, permissions), so every source turns its failures into a
//! [`CaptureError`] whose message names the problem and the fix. Sources hand out frames one at
//! a time as borrowed slices plus timestamps; the engine decodes them immediately, so nothing
//! is copied per packet.
//!
//! * [`file::FileSource`]: pcap (µs/ns, either byte order) and pcapng, mapped into memory and
//!   read in place (pages given back behind the reader, so resident memory measures the
//!   engine), or read through a large buffer when the file cannot be mapped.
//! * [`bpf`]: capture filters compiled by libpcap and run by sonde's own interpreter.
//! * [`live::LiveSource`]: an interface, non-blocking, through sonde's own TPACKET_V3 ring
//!   ([`ring`]), AF_XDP sockets ([`xdp`]) or libpcap, with a PACKET_FANOUT group (or a
//!   receive queue each) so several shards each get their own share of the flows.
//! * [`synthetic::SyntheticSource`]: Cento's "dummy interface": frames forged in memory among
//!   N hosts, used by the benchmarks.
//! * [`writer::PcapWriter`]: writes classic pcap files (for the generator and tests).

pub mod bpf;
pub mod error;
pub mod file;
pub mod live;
pub mod ring;
pub mod synthetic;
pub mod writer;
pub mod xdp;

pub use error::CaptureError;
pub use file::FileSource;
pub use live::{CaptureBackend, CaptureDrops, LinkFilters, LiveConfig, LiveSource, OfflineFilter};
pub use synthetic::{Payload, SyntheticSource, SyntheticSpec};
pub use writer::PcapWriter;

/// One frame handed out by a source; `data` borrows the source's buffer until the next call.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub data: &'a [u8],
}
