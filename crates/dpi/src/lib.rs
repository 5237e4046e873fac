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

pub use dnscache::DnsCache;
pub use engine::{Backend, Dpi, DpiConfig, FlowCtx, FlowDpi, Scratch, NDPI_AVAILABLE};
pub use ids::{Category, Proto};
pub use meta::Meta;
pub use service::Services;

/// Payload packets of a flow inspected at most (both directions together).
pub const MAX_PACKETS: u8 = 10;

/// Longest string kept from the wire (names, URLs, banners); longer ones are cut.
pub const MAX_STR: usize = 256;

/// Transport protocol of a packet handed to the detectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
}

/// One payload-carrying packet of a flow, as a detector sees it.
#[derive(Clone, Copy, Debug)]
pub struct Pkt<'a> {
    /// Transport payload (after the TCP/UDP header), possibly cut to the capture length.
    pub payload: &'a [u8],
    pub l4: L4,
    /// True when the packet goes from the client (who opened the flow) to the server.
    pub from_client: bool,
    pub client_port: u16,
    pub server_port: u16,
    /// Payload packets of this flow before this one (0 for the first).
    pub index: u8,
}

impl Pkt<'_> {
    /// True when either side uses `port`.
    pub fn has_port(&self, port: u16) -> bool {
        self.client_port == port || self.server_port == port
    }
}

/// A detector's answer for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not this protocol: the detector is not called again for this flow.
    No,
    /// Cannot tell yet: call again with the flow's next payload packet.
    Unsure,
    /// It is `proto`. With `done == false` the detector wants later packets (only it is called
    /// from now on) to complete the metadata, e.g. a server's response.
    Is { proto: Proto, done: bool },
}

/// How a label was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Confidence {
    #[default]
    Unknown = 0,
    /// Guessed from the transport ports (no detector recognised the payload).
    Port,
    /// Found in the payload by a detector.
    Dpi,
}

impl Confidence {
    pub fn name(self) -> &'static str {
        match self {
            Confidence::Unknown => "unknown",
            Confidence::Port => "port",
            Confidence::Dpi => "dpi",
        }
    }

    /// The confidence whose number (`confidence as u8`) is `n`, for stored records.
    pub fn from_number(n: u8) -> Option<Confidence> {
        [Confidence::Unknown, Confidence::Port, Confidence::Dpi]
            .into_iter()
            .find(|c| *c as u8 == n)
    }
}

/// The label of a flow: small and `Copy`, kept inline in the flow entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct L7 {
    /// The protocol (TLS, DNS, HTTP, …), or [`Proto::UNKNOWN`].
    pub proto: Proto,
    /// The service on top (Google, Netflix, WhatsApp, …), or [`Proto::UNKNOWN`].
    pub app: Proto,
    pub category: Category,
    pub confidence: Confidence,
}

impl L7 {
    /// nDPI's `proto.app` number form, e.g. `91.126`.
    pub fn number(&self) -> String {
        format!("{}.{}", self.proto.0, self.app.0)
    }

    /// nDPI's name form: `TLS.Google`, `DNS`, `WhatsApp` (an application without a known
    /// carrier protocol), or `Unknown`.
    pub fn name(&self) -> String {
        match (self.proto.is_known(), self.app.is_known()) {
            (true, true) if self.proto != self.app => {
                format!("{}.{}", self.proto.name(), self.app.name())
            }
            (true, _) => self.proto.name().to_string(),
            (false, true) => self.app.name().to_string(),
            (false, false) => "Unknown".to_string(),
        }
    }
}

/// Cuts `s` to [`MAX_STR`] bytes (on a char boundary) and replaces control characters, so what
/// came off the wire is safe to keep and to print as text.
pub fn wire_string(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(MAX_STR)];
    let s = String::from_utf8_lossy(cut);
    s.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}
