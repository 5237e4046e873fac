//! Where the engine feeds its shard's analytics ([`sonde_analytics::ShardAnalytics`]): every
//! hook is either per flow (creation, flush, end) or for rare packets (TCP SYN/FIN/RST,
//! fragments, ICMP errors), so an ordinary packet pays one predictable branch, plus, with
//! filter-sets, one load of its flow's cached mask.

use super::{Engine, Payloads, NO_SLOT};
use crate::flow::{Flow, NO_HOST};
use crate::host::HostKey;
use crate::key::{Dir, FlowKey};
use sonde_analytics::filter_expr::Fields;
use sonde_analytics::shard::Probe;
use sonde_analytics::{FlowHosts, FlowIvl, HostAddr, IcmpKind, ShardAnalytics, USE_FLOW_BITS};
use sonde_wire::{ipproto, tcpflags, Decoded, LinkType};

fn addr(a: [u8; 16], k: &FlowKey) -> HostAddr {
    HostAddr::new(a, k.ip_version, k.vlan)
}

pub(super) fn host_addr(k: &HostKey) -> HostAddr {
    HostAddr::new(k.addr, k.ip_version, k.vlan)
}

/// A flow's hosts as analytics sees them.
#[inline(always)]
pub(super) fn flow_hosts(f: &Flow) -> FlowHosts {
    FlowHosts {
        slots: f.hosts,
        addrs: [addr(f.key.addr_a, &f.key), addr(f.key.addr_b, &f.key)],
        ports: [f.key.port_a, f.key.port_b],
        proto: f.key.proto,
        client_side: f.client_dir() as u8,
    }
}

/// The ICMP error kind of a decoded packet, if it is one.
#[inline(always)]
fn icmp_error_kind(d: &Decoded) -> Option<IcmpKind> {
    if d.proto != ipproto::ICMP && d.proto != ipproto::ICMPV6 {
        return None;
    }
    IcmpKind::of(
        d.ip_version,
        (d.icmp_type_code >> 8) as u8,
        d.icmp_type_code as u8,
    )
}

/// The packet quotes another (an ICMP error): analytics reads the quote, so its payload is
/// kept for the engine even with DPI off.
#[inline(always)]
pub fn quotes_a_packet(d: &Decoded) -> bool {
    icmp_error_kind(d).is_some()
}

/// The probe an ICMP error quotes: after the 4 bytes that follow type, code and checksum,
/// the original IP header and the first 8 bytes of its payload.
fn quoted_probe(payload: &[u8], ip_version: u8) -> Option<Probe> {
    let q = payload.get(4..)?;
    let (proto, dst, l4) = if ip_version == 4 {
        let ihl = ((*q.first()? & 0x0f) as usize) * 4;
        if *q.first()? >> 4 != 4 || ihl < 20 {
            return None;
        }
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(q.get(16..20)?);
        (*q.get(9)?, dst, q.get(ihl..))
    } else {
        if *q.first()? >> 4 != 6 {
            return None;
        }
        let mut dst = [0u8; 16];
        dst.copy_from_slice(q.get(24..40)?);
        (*q.get(6)?, dst, q.get(40..))
    };
    let port = match (proto, l4) {
        (ipproto::TCP | ipproto::UDP | ipproto::SCTP, Some(l4)) if l4.len() >= 4 => {
            u16::from_be_bytes([l4[2], l4[3]])
        }
        _ => 0,
    };
    Some((proto, dst, port))
}

impl Engine {
    /// Works out a decoded packet's filter-set mask while its frame is at hand.
    #[inline]
    pub(super) fn mark(&mut self, link: LinkType, f: crate::PacketRef<'_>, d: &Decoded, n: usize) {
        if let Some(fl) = self.analytics.as_mut().and_then(|a| a.filters.as_mut()) {
            self.marks[n] = fl.eval.packet_mask(link, f.data, f.wire_len, d);
            self.wire_lens[n] = f.wire_len;
        }
    }

    /// Counts a frame that reaches no flow (not IP, malformed) in the filter-sets.
    #[inline]
    pub(super) fn count_unflowed(&mut self, link: LinkType, f: crate::PacketRef<'_>) {
        if let Some(fl) = self.analytics.as_mut().and_then(|a| a.filters.as_mut()) {
            let m = fl.eval.frame_mask(link, f.data, f.wire_len);
            fl.count(m, 1, f.wire_len as u64);
        }
    }

    /// Counts a frame another thread worked out a filter-set mask for and that reaches no
    /// flow (the multi-shard reader's non-IP and malformed frames).
    pub fn count_filter_mask(&mut self, mask: u128, wire_len: u32) {
        if let Some(fl) = self.analytics.as_mut().and_then(|a| a.filters.as_mut()) {
            fl.count(mask, 1, wire_len as u64);
        }
    }

    /// Per packet i of a batch, after its flow was updated.
    #[inline(always)]
    pub(super) fn analyze(
        &mut self,
        i: usize,
        slot: u32,
        dir: Dir,
        p: &Decoded,
        payloads: &Payloads,
    ) {
        if let Some(&m) = payloads.marks.get(i) {
            let wire = payloads.wire_lens.get(i).copied().unwrap_or(p.ip_len) as u64;
            self.count_packet(m, slot, dir, p, wire);
        }
        let tcp_control = p.proto == ipproto::TCP
            && p.tcp_flags & (tcpflags::SYN | tcpflags::FIN | tcpflags::RST) != 0;
        if tcp_control || p.is_fragment || quotes_a_packet(p) {
            self.rare_packet(i, slot, dir, p, payloads);
        }
    }

    #[inline(always)]
    fn count_packet(&mut self, m: u128, slot: u32, dir: Dir, p: &Decoded, wire: u64) {
        let mut m = m;
        if m & USE_FLOW_BITS != 0 {
            if slot != NO_SLOT {
                m |= self.flows[slot as usize].filter_mask[dir] as u128;
            } else if let Some(fl) = self.analytics.as_ref().and_then(|a| a.filters.as_ref()) {
                // Dropped (table full): no flow holds the answers.
                m |= fl.eval.native_mask(&Fields::from_decoded(p));
            }
        }
        if let Some(fl) = self.analytics.as_mut().and_then(|a| a.filters.as_mut()) {
            fl.count(m, 1, wire);
        }
    }

    #[cold]
    #[inline(never)]
    fn rare_packet(&mut self, i: usize, slot: u32, dir: Dir, p: &Decoded, payloads: &Payloads) {
        let slots = if slot == NO_SLOT {
            [NO_HOST, NO_HOST]
        } else {
            let h = self.flows[slot as usize].hosts;
            [h[dir], h[1 - dir]]
        };
        let src = HostAddr::new(p.src, p.ip_version, p.vlan);
        let dst = HostAddr::new(p.dst, p.ip_version, p.vlan);
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        if p.proto == ipproto::TCP && !(p.is_fragment && p.sport == 0 && p.dport == 0) {
            let flags =
                p.tcp_flags & (tcpflags::SYN | tcpflags::FIN | tcpflags::RST | tcpflags::ACK);
            if flags & (tcpflags::SYN | tcpflags::FIN | tcpflags::RST) != 0 {
                a.tcp_control(slots, src, dst, p.dport, flags);
            }
        }
        if p.is_fragment {
            a.fragment(slots, src, dst);
        }
        if let Some(kind) = icmp_error_kind(p) {
            let probe = payloads
                .get(i)
                .and_then(|(_, payload)| quoted_probe(payload, p.ip_version));
            a.icmp_error(src, dst, kind, probe);
        }
    }

    /// A collected record merged into the flow in `slot`: filter-sets (native expressions
    /// only: there is no packet for libpcap's programs) and TCP control flags (a record with
    /// SYN counts as one SYN).
    #[cold]
    pub(super) fn analyze_record(
        &mut self,
        slot: u32,
        dir: Dir,
        c: &sonde_flowproto::CollectedFlow,
    ) {
        let f = &self.flows[slot as usize];
        let h = f.hosts;
        let cached = f.filter_mask;
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        if let Some(fl) = a.filters.as_mut() {
            let fields = Fields {
                ip_version: c.ip_version,
                proto: c.proto,
                src: c.src,
                dst: c.dst,
                sport: c.sport,
                dport: c.dport,
            };
            if c.packets > 0 {
                let m = fl.eval.record_mask(cached[dir], &fields);
                fl.count(m, c.packets, c.bytes);
            }
            if c.rev_packets > 0 {
                let rev = Fields {
                    src: c.dst,
                    dst: c.src,
                    sport: c.dport,
                    dport: c.sport,
                    ..fields
                };
                let m = fl.eval.record_mask(cached[1 - dir], &rev);
                fl.count(m, c.rev_packets, c.rev_bytes);
            }
        }
        if c.proto == ipproto::TCP {
            let src = HostAddr::new(c.src, c.ip_version, c.vlan);
            let dst = HostAddr::new(c.dst, c.ip_version, c.vlan);
            for flag in [tcpflags::SYN, tcpflags::FIN, tcpflags::RST] {
                if c.tcp_flags & flag != 0 {
                    a.tcp_control([h[dir], h[1 - dir]], src, dst, c.dport, flag);
                }
            }
        }
    }

    /// A new flow in `slot` (its hosts are set): the cached filter-set answers, and the
    /// analytics' new-flow hook. (A host taking over a slot finds its counters at zero: a
    /// host is purged only after minutes idle, and its interval's counters go with it.)
    pub(super) fn analytics_created(&mut self, slot: u32) {
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        let f = &mut self.flows[slot as usize];
        if let Some(fl) = a.filters.as_ref() {
            let k = &f.key;
            let ab = Fields {
                ip_version: k.ip_version,
                proto: k.proto,
                src: k.addr_a,
                dst: k.addr_b,
                sport: k.port_a,
                dport: k.port_b,
            };
            let ba = Fields {
                src: k.addr_b,
                dst: k.addr_a,
                sport: k.port_b,
                dport: k.port_a,
                ..ab
            };
            f.filter_mask = [fl.eval.flow_mask(&ab), fl.eval.flow_mask(&ba)];
        }
        let client = f.client_dir();
        let server_port = if f.key.proto == ipproto::ICMP || f.key.proto == ipproto::ICMPV6 {
            f.icmp_type_code >> 8
        } else if client == 0 {
            f.key.port_b
        } else {
            f.key.port_a
        };
        a.flow_created(&flow_hosts(f), server_port);
    }

    /// A flow's share of the interval, taken from it (its interval counters restart).
    pub(super) fn take_flow_ivl(f: &mut Flow) -> FlowIvl {
        let c = f.client_dir();
        let (ca, cp, sa, sp) = if c == 0 {
            (f.key.addr_a, f.key.port_a, f.key.addr_b, f.key.port_b)
        } else {
            (f.key.addr_b, f.key.port_b, f.key.addr_a, f.key.port_a)
        };
        let ivl = FlowIvl {
            client: addr(ca, &f.key),
            server: addr(sa, &f.key),
            client_port: cp,
            server_port: sp,
            proto: f.key.proto,
            packets: f.ivl_pkts as u64,
            bytes: f.ivl_bytes,
            app: if f.dpi_done {
                (f.l7.proto.0, f.l7.app.0)
            } else {
                (0, 0)
            },
        };
        f.ivl_pkts = 0;
        f.ivl_bytes = 0;
        ivl
    }

    /// After the tick's walk: closes the analytics second that ended, and the interval when
    /// packet time passed its end.
    pub(super) fn analytics_tick(&mut self, closed_second: u64, now_s: u64) {
        // The first tick comes with the first packet: no second has been counted yet.
        if self.ticks > 0 {
            self.close_analytics_second(closed_second);
        }
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        if let Some((end, next)) = a.interval_due(now_s) {
            self.close_analytics_interval(end, next);
        }
    }

    fn close_analytics_second(&mut self, second: u64) {
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        let hosts = &self.hosts;
        let key_of = |slot: u32| hosts.get(slot).map(|h| host_addr(&h.key));
        if a.close_second(second, key_of) {
            // Hosts that just reached a floor: their live flows are the first evidence (a
            // walk over the table, only when a host starts to look attacked).
            for f in self.flows.iter().filter(|f| f.live) {
                a.evidence_from_flow(&flow_hosts(f), f.pkts, f.bytes);
            }
        }
        a.seal_second();
    }

    fn close_analytics_interval(&mut self, end: u64, next: u64) {
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        // Streamed: the analytics keep the top flows only, not a copy of the table.
        let live = self
            .flows
            .iter_mut()
            .filter(|f| f.live && (f.ivl_pkts != 0 || f.ivl_bytes != 0))
            .map(Self::take_flow_ivl);
        let hosts = &self.hosts;
        let key_of = |slot: u32| hosts.get(slot).map(|h| host_addr(&h.key));
        a.close_interval(end, next, live, key_of);
    }

    /// At the end of the input (after the last flows were emitted): closes the second and the
    /// interval in progress, so their reports are in the next [`Engine::take_analytics`].
    pub fn close_analytics(&mut self) {
        if self.analytics.is_none() {
            return;
        }
        // Every packet accounted and every flow's counts flushed, as a tick would.
        self.flush_batch();
        self.hosts();
        let second = self.interval_start_s();
        let now_s = self.now_ns / 1_000_000_000;
        self.close_analytics_second(second);
        let Some(a) = self.analytics.as_deref_mut() else {
            return;
        };
        let _ = a.interval_due(now_s);
        let end = now_s.max(second) + 1;
        self.close_analytics_interval(end, end);
    }

    /// Reports (seconds, intervals) ready since the last call.
    pub fn take_analytics(&mut self) -> Vec<sonde_analytics::Report> {
        self.analytics
            .as_deref_mut()
            .map(ShardAnalytics::take_reports)
            .unwrap_or_default()
    }

    /// Filter-set totals since the start (None without filter-sets).
    pub fn filter_totals(&self) -> Option<&sonde_analytics::FilterCounts> {
        self.analytics
            .as_deref()
            .and_then(|a| a.filters.as_ref())
            .map(|f| &f.total)
    }
}
