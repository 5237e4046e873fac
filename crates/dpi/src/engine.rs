//! The per-flow DPI state machine: which detectors are still candidates, who owns the flow
//! once recognised, when to stop, and the final label (port guess and service mapping).

use crate::dnscache::{flow_addr_u128, DnsCache};
use crate::ids::{Category, Proto};
use crate::proto::{self, DETECTORS};
use crate::service::Services;
use crate::types::{Confidence, Flow, Pkt, Verdict, L4};
use crate::MAX_PACKETS;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Per-flow DPI state, allocated on a flow's first payload packet and dropped when the flow
/// leaves the DPI path (its [`L7`](crate::L7) and [`Meta`](crate::Meta) are moved into the
/// flow record).
///
/// What the detectors see of it is the [`Flow`] inside (label, metadata, per-protocol state);
/// `FlowDpi` dereferences to it, so `f.l7` and `f.meta` read as fields. The rest is the
/// engine's: candidates, owner, packet count.
#[derive(Debug, Default)]
pub struct FlowDpi {
    flow: Flow,
    /// Detectors ruled out: bit `i` is `DETECTORS[i]`.
    excluded: u64,
    /// The detector that recognised the flow and wants more packets for its metadata.
    owner: Option<u8>,
    packets: u8,
    done: bool,
    /// The nDPI flow struct, with the nDPI backend.
    #[cfg(feature = "ndpi")]
    pub(crate) ndpi: Option<crate::ndpi::Flow>,
}

impl Deref for FlowDpi {
    type Target = Flow;
    fn deref(&self) -> &Flow {
        &self.flow
    }
}

impl DerefMut for FlowDpi {
    fn deref_mut(&mut self) -> &mut Flow {
        &mut self.flow
    }
}

impl FlowDpi {
    /// True when the flow has left the DPI path.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Payload packets inspected so far.
    pub fn packets(&self) -> u8 {
        self.packets
    }
}

/// Which detector set labels flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// sonde's own detectors (this crate's `proto` modules).
    #[default]
    Builtin,
    /// libndpi (needs the `ndpi` cargo feature).
    Ndpi,
}

#[derive(Clone, Debug)]
pub struct DpiConfig {
    pub backend: Backend,
    /// Payload packets inspected per flow at most (both directions).
    pub max_packets: u8,
    pub services: Arc<Services>,
    /// Names from DNS answers, shared by all shards.
    pub dns_cache: Arc<DnsCache>,
}

impl Default for DpiConfig {
    fn default() -> Self {
        DpiConfig {
            backend: Backend::Builtin,
            max_packets: MAX_PACKETS,
            services: Arc::new(Services::builtin()),
            dns_cache: Arc::new(DnsCache::default()),
        }
    }
}

/// True when this build has the nDPI backend.
pub const NDPI_AVAILABLE: bool = cfg!(feature = "ndpi");

/// The detector set of one shard.
pub struct Dpi {
    cfg: DpiConfig,
    #[cfg(feature = "ndpi")]
    ndpi: Option<crate::ndpi::Module>,
}

impl Dpi {
    /// A shard's detectors. Fails only when the nDPI backend is asked for and cannot start
    /// (or is not built in).
    pub fn new(cfg: DpiConfig) -> Result<Dpi, String> {
        match cfg.backend {
            Backend::Builtin => Ok(Dpi {
                cfg,
                #[cfg(feature = "ndpi")]
                ndpi: None,
            }),
            #[cfg(feature = "ndpi")]
            Backend::Ndpi => Ok(Dpi {
                ndpi: Some(crate::ndpi::Module::new()?),
                cfg,
            }),
            #[cfg(not(feature = "ndpi"))]
            Backend::Ndpi => Err("this build has no nDPI backend: rebuild with \
                 'cargo build --release --features ndpi' (needs Debian's libndpi-dev)"
                .into()),
        }
    }

    pub fn backend(&self) -> Backend {
        self.cfg.backend
    }

    /// [`Dpi::inspect`] for whichever backend this is: nDPI wants the whole IP packet (`ip`,
    /// from the IP header) and the packet time; the built-in detectors only the payload.
    pub fn inspect_packet(&self, f: &mut FlowDpi, pkt: &Pkt<'_>, ip: &[u8], ts_ms: u64) -> bool {
        #[cfg(feature = "ndpi")]
        if let Some(m) = &self.ndpi {
            if f.done {
                return true;
            }
            f.packets = f.packets.saturating_add(1);
            f.done = m.inspect(f, ip, ts_ms, self.cfg.max_packets);
            return f.done;
        }
        let _ = (ip, ts_ms);
        self.inspect(f, pkt)
    }

    pub fn services(&self) -> &Services {
        &self.cfg.services
    }

    /// Runs the candidate detectors on one payload packet. Returns true when the flow is done
    /// with DPI (recognised with complete metadata, no candidate left, or out of packets); the
    /// caller then calls [`Dpi::finish`].
    pub fn inspect(&self, f: &mut FlowDpi, pkt: &Pkt<'_>) -> bool {
        if f.done {
            return true;
        }
        if pkt.payload.is_empty() {
            return false;
        }
        let pkt = Pkt {
            index: f.packets,
            ..*pkt
        };
        f.packets = f.packets.saturating_add(1);
        if let Some(i) = f.owner {
            match (DETECTORS[i as usize].run)(&pkt, &mut f.flow) {
                // The owner may refine its label (SMTP → SMTPS after STARTTLS).
                Verdict::Is { proto, done } => {
                    f.l7.proto = proto;
                    f.done = done;
                }
                Verdict::Unsure => {}
                Verdict::No => f.done = true,
            }
        } else {
            let mut undecided = false;
            // The transport's detectors not ruled out yet, lowest index (first in order) first.
            let mut left = match pkt.l4 {
                L4::Tcp => TCP_DETECTORS,
                L4::Udp => UDP_DETECTORS,
            } & !f.excluded;
            while left != 0 {
                let i = left.trailing_zeros() as usize;
                left &= left - 1;
                match (DETECTORS[i].run)(&pkt, &mut f.flow) {
                    Verdict::No => f.excluded |= 1 << i,
                    Verdict::Unsure => undecided = true,
                    Verdict::Is { proto, done } => {
                        f.l7.proto = proto;
                        f.l7.confidence = Confidence::Dpi;
                        if done {
                            f.done = true;
                        } else {
                            f.owner = Some(i as u8);
                        }
                        return f.done || f.packets >= self.cfg.max_packets;
                    }
                }
            }
            if !undecided {
                f.done = true;
            }
        }
        if f.packets >= self.cfg.max_packets {
            f.done = true;
        }
        f.done
    }

    /// Completes the label when the flow leaves the DPI path (or ends before): a port guess
    /// when no detector recognised it, then the service from the server name or address, and
    /// the category.
    pub fn finish(&self, f: &mut FlowDpi, ctx: &FlowCtx) {
        f.done = true;
        // nDPI's own guess first; flows it never saw (no payload) and labels it left open get
        // the same port guess and service mapping as with the built-in detectors.
        #[cfg(feature = "ndpi")]
        if let Some(m) = &self.ndpi {
            m.finish(f);
        }
        if f.l7.proto == Proto::TLS {
            // Implicit TLS on the mail ports is named after the mail protocol, as nDPI does.
            f.l7.proto = match ctx.server_port {
                993 => Proto::IMAPS,
                995 => Proto::POPS,
                465 => Proto::SMTPS,
                _ => Proto::TLS,
            };
        }
        if !f.l7.proto.is_known() {
            if let Some(p) = proto::guess_by_port(ctx.l4, ctx.client_port, ctx.server_port) {
                f.l7.proto = p;
                f.l7.confidence = Confidence::Port;
            }
        }
        let client = flow_addr_u128(&ctx.client_addr, ctx.ip_version);
        if let Some(d) = &f.meta.dns {
            if let (Some(q), false) = (&d.query, d.answers.is_empty()) {
                self.cfg.dns_cache.learn(client, q, &d.answers);
            }
        } else if f.meta.server_name.is_none() && !f.l7.app.is_known() {
            // The client did not say whom it talks to: what it asked DNS for, if it did.
            let server = flow_addr_u128(&ctx.server_addr, ctx.ip_version);
            if let Some(name) = self.cfg.dns_cache.name_of(client, server) {
                f.meta.server_name = Some(name.to_string());
            }
        }
        if !f.l7.app.is_known() {
            let by_name = f
                .meta
                .server_name
                .as_deref()
                .and_then(|n| self.cfg.services.by_name(n));
            let by_addr = || {
                self.cfg
                    .services
                    .by_addr(&ctx.server_addr, ctx.ip_version)
                    .or_else(|| self.cfg.services.by_addr(&ctx.client_addr, ctx.ip_version))
            };
            if let Some(app) = by_name.or_else(by_addr) {
                f.l7.app = app;
                if f.l7.confidence == Confidence::Unknown {
                    f.l7.confidence = Confidence::Dpi;
                }
            }
        }
        if f.l7.category == Category::Unspecified {
            f.l7.category = if f.l7.app.is_known() {
                self.cfg.services.category_of(f.l7.app)
            } else {
                f.l7.proto.category()
            };
        }
    }
}

/// What [`Dpi::finish`] needs to know about the flow besides its DPI state.
#[derive(Clone, Copy, Debug)]
pub struct FlowCtx {
    pub l4: L4,
    pub client_port: u16,
    pub server_port: u16,
    pub client_addr: [u8; 16],
    pub server_addr: [u8; 16],
    pub ip_version: u8,
}

/// The detectors for one transport, as a bit set over [`DETECTORS`] (bit `i` is
/// `DETECTORS[i]`): a packet's loop visits only those, in index order.
const fn detectors_for(tcp: bool) -> u64 {
    let mut set = 0;
    let mut i = 0;
    while i < DETECTORS.len() {
        if (tcp && DETECTORS[i].tcp) || (!tcp && DETECTORS[i].udp) {
            set |= 1 << i;
        }
        i += 1;
    }
    set
}

const TCP_DETECTORS: u64 = detectors_for(true);
const UDP_DETECTORS: u64 = detectors_for(false);

// `FlowDpi::excluded` is a u64 bit set.
const _: () = assert!(DETECTORS.len() <= 64);
