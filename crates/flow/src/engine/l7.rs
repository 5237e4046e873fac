//! The engine's side of application detection: hands a flow's first payload packets to the
//! DPI, keeps the per-flow DPI state beside the flow table (by slot, so the hot flow entry only
//! grows by its small label), and settles the label when the flow leaves the DPI path or ends.

use super::{Engine, NO_SLOT};
use crate::key::Dir;
use sonde_dpi::{Confidence, FlowCtx, FlowDpi, Meta, Pkt, Proto, L4};
use sonde_wire::{ipproto, Decoded};

impl Engine {
    /// Whether the flow in `slot` is still on the DPI path (the per-packet check; the rest of
    /// DPI is out of line).
    #[inline(always)]
    pub(super) fn needs_dpi(&self, slot: u32) -> bool {
        // A retransmitted segment repeats bytes the detectors already saw (and would corrupt
        // a reassembly buffer): it is skipped, as nDPI does.
        slot != NO_SLOT && {
            let f = &self.flows[slot as usize];
            !f.dpi_done && !f.last_was_retransmit
        }
    }

    /// One payload packet of the flow in `slot` (after its counters were updated).
    #[inline(never)]
    pub(super) fn dpi_packet(
        &mut self,
        slot: u32,
        dir: Dir,
        d: &Decoded,
        ip: &[u8],
        payload: &[u8],
        ts_ns: u64,
    ) {
        if slot == NO_SLOT {
            return;
        }
        let i = slot as usize;
        let f = &self.flows[i];
        if f.dpi_done {
            return;
        }
        let Some(dpi) = &self.dpi else { return };
        let l4 = match d.proto {
            ipproto::TCP => L4::Tcp,
            ipproto::UDP => L4::Udp,
            _ => return,
        };
        let (client_port, server_port) = if f.client_is_a {
            (f.key.port_a, f.key.port_b)
        } else {
            (f.key.port_b, f.key.port_a)
        };
        let pkt = Pkt {
            payload,
            l4,
            from_client: dir == f.client_dir(),
            client_port,
            server_port,
            index: 0,
            ts_ns,
        };
        let ts_ms = ts_ns / 1_000_000;
        match self.dpi_active.get_mut(i).and_then(Option::as_mut) {
            Some(st) => {
                if dpi.inspect_packet(st, &pkt, ip, ts_ms) {
                    let mut st = self.dpi_active[i].take().unwrap_or_default();
                    self.dpi_settle(slot, &mut st);
                }
            }
            None => {
                // Most flows are settled by their first payload packet: no allocation for them.
                let mut st = FlowDpi::default();
                if dpi.inspect_packet(&mut st, &pkt, ip, ts_ms) {
                    self.dpi_settle(slot, &mut st);
                } else {
                    if self.dpi_active.len() <= i {
                        self.dpi_active.resize_with(i + 1, || None);
                    }
                    self.dpi_active[i] = Some(Box::new(st));
                }
            }
        }
    }

    /// Takes the flow off the DPI path: final label into the flow entry, metadata (if any) kept
    /// by slot until the flow is emitted.
    fn dpi_settle(&mut self, slot: u32, st: &mut FlowDpi) {
        let i = slot as usize;
        let Some(dpi) = &self.dpi else { return };
        let f = &mut self.flows[i];
        f.dpi_done = true;
        match f.key.proto {
            ipproto::TCP | ipproto::UDP => {
                let a_is_client = f.client_is_a;
                let (ca, sa, cp, sp) = if a_is_client {
                    (f.key.addr_a, f.key.addr_b, f.key.port_a, f.key.port_b)
                } else {
                    (f.key.addr_b, f.key.addr_a, f.key.port_b, f.key.port_a)
                };
                let ctx = FlowCtx {
                    l4: if f.key.proto == ipproto::TCP {
                        L4::Tcp
                    } else {
                        L4::Udp
                    },
                    client_port: cp,
                    server_port: sp,
                    client_addr: ca,
                    server_addr: sa,
                    ip_version: f.key.ip_version,
                };
                dpi.finish(st, &ctx);
                f.l7 = st.l7;
            }
            other => {
                // No payload to inspect: nDPI's labels by IP protocol.
                let p = match other {
                    ipproto::ICMP => Proto::ICMP,
                    ipproto::ICMPV6 => Proto::ICMPV6,
                    2 => Proto::IGMP,
                    ipproto::GRE => Proto::GRE,
                    50 | 51 => Proto::IPSEC,
                    _ => Proto::UNKNOWN,
                };
                if p.is_known() {
                    f.l7.proto = p;
                    f.l7.category = p.category();
                    f.l7.confidence = Confidence::Port;
                }
            }
        }
        if !st.meta.is_empty() {
            if self.dpi_meta.len() <= i {
                self.dpi_meta.resize_with(i + 1, || None);
            }
            // A collected flow may already have kept fields there: they stay.
            if let Some(old) = self.dpi_meta[i].take() {
                st.meta.extra = old.extra;
            }
            self.dpi_meta[i] = Some(Box::new(std::mem::take(&mut st.meta)));
        }
    }

    /// The flow in `slot` ends: settles its label if DPI had not finished, and hands back its
    /// metadata for the record.
    pub(super) fn dpi_end(&mut self, slot: u32) -> Option<Box<Meta>> {
        if self.dpi.is_some() && !self.flows[slot as usize].dpi_done {
            match self
                .dpi_active
                .get_mut(slot as usize)
                .and_then(Option::take)
            {
                Some(mut st) => self.dpi_settle(slot, &mut st),
                None => self.dpi_settle(slot, &mut FlowDpi::default()),
            }
        }
        self.dpi_meta.get_mut(slot as usize).and_then(Option::take)
    }
}
