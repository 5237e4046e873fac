//! Flows that arrive already measured: NetFlow/IPFIX records from exporters and sFlow packet
//! samples. They go into the same flow and host tables as captured packets (ntopng's rule:
//! whatever the ingress, traffic is classified in flows), so every view treats them alike.

use super::{Engine, NO_SLOT};
use crate::key::FlowKey;
use crate::stats::DropReason;
use sonde_dpi::{wire_string, Confidence, Proto};

/// Uninterpreted fields kept per collected flow.
const MAX_EXTRA: usize = 64;
use sonde_flowproto::{CollectedFlow, SampledPacket};
use sonde_wire::{Decoded, LinkType, Outcome};
use std::net::SocketAddr;

/// The packet-like description of a collected record: what its flow key (and shard) is
/// made from.
pub fn decoded_from_record(c: &CollectedFlow) -> Decoded {
    Decoded {
        src: c.src,
        dst: c.dst,
        sport: c.sport,
        dport: c.dport,
        proto: c.proto,
        ip_version: c.ip_version,
        vlan: c.vlan,
        tcp_flags: c.tcp_flags,
        tos: c.tos,
        icmp_type_code: c.icmp_type_code,
        ..Decoded::default()
    }
}

impl Engine {
    /// Merges a batch of collected records, as [`Engine::ingest_flow`] does one by one. Each
    /// record's flow key is worked out once; with a large table, the index slots of a few
    /// records ahead are prefetched first, then their flow entries (known flows) or the index
    /// slots of their hosts (new flows), so the memory latency overlaps.
    pub fn ingest_flows(&mut self, records: &[CollectedFlow], now_ns: u64) {
        let mut keys = [(FlowKey::default(), 0usize, 0u32); super::BATCH];
        for chunk in records.chunks(super::BATCH) {
            for (c, k) in chunk.iter().zip(keys.iter_mut()) {
                let (key, dir) = FlowKey::from_packet(&decoded_from_record(c));
                *k = (key, dir, key.hash() as u32);
            }
            let keys = &keys[..chunk.len()];
            if self.live_flows > super::PREFETCH_MIN_FLOWS {
                for (_, _, tag) in keys {
                    self.index.prefetch(*tag);
                }
                for (key, _, tag) in keys {
                    match self.peek(*tag) {
                        Some(slot) => crate::table::prefetch_read(&self.flows[slot as usize]),
                        None => self.prefetch_hosts_of(key, false),
                    }
                }
            }
            for (c, (key, dir, tag)) in chunk.iter().zip(keys) {
                self.ingest_keyed(c, key, *dir, *tag, now_ns);
            }
        }
    }

    /// Merges one collected flow record into the flow table (`now_ns`: when it arrived, used
    /// when the record carries no times). Both hosts are credited as for packets.
    pub fn ingest_flow(&mut self, c: &CollectedFlow, now_ns: u64) {
        let (key, dir) = FlowKey::from_packet(&decoded_from_record(c));
        self.ingest_keyed(c, &key, dir, key.hash() as u32, now_ns);
    }

    /// [`Engine::ingest_flow`] with the record's flow key, direction and hash worked out.
    #[inline(always)]
    fn ingest_keyed(
        &mut self,
        c: &CollectedFlow,
        key: &FlowKey,
        dir: usize,
        tag: u32,
        now_ns: u64,
    ) {
        let ms = |t: u64| {
            if t == 0 {
                now_ns
            } else {
                t.saturating_mul(1_000_000)
            }
        };
        let (first, last) = (ms(c.first_ms), ms(c.last_ms.max(c.first_ms)));
        let exporter = self.exporter_index(c.exporter, c.domain);
        let slot = self.slot_keyed(key, dir, tag, first, || {
            let mut d = decoded_from_record(c);
            if let (Some(s), Some(t)) = (c.src_mac, c.dst_mac) {
                d.src_mac = s;
                d.dst_mac = t;
                d.has_mac = true;
            }
            d
        });
        let Some(slot) = slot else {
            self.stats.dropped[DropReason::FlowTableFull as usize] += 1;
            return;
        };
        let x = self.claim_ext(slot);
        x.in_if = c.in_if;
        x.out_if = c.out_if;
        let f = &mut self.flows[slot as usize];
        f.add_counts(dir, c.packets, c.bytes, first, last);
        if c.rev_packets > 0 || c.rev_bytes > 0 {
            f.add_counts(1 - dir, c.rev_packets, c.rev_bytes, first, last);
        }
        f.tcp_flags[dir] |= c.tcp_flags;
        f.tcp_flags[1 - dir] |= c.rev_tcp_flags;
        f.exporter = exporter;
        f.sampling = c.sampling.max(1);
        if self.analytics.is_some() {
            self.analyze_record(slot, dir, c);
        }
        let f = &mut self.flows[slot as usize];
        if !f.dpi_done {
            if let Some(l7) = c.app_name.as_deref().and_then(label_from_name) {
                f.l7 = l7;
                f.dpi_done = true;
            }
        }
        // All-zero values (an ICMP type of a TCP flow, say) say nothing: not kept.
        let extra = c.extra.iter().any(|(_, _, v)| v.iter().any(|&b| b != 0));
        if extra || !c.extra_text.is_empty() {
            self.keep_extra(slot, dir, c);
        }
        if last > self.now_ns {
            self.now_ns = last;
        }
        self.stats.collected_records += 1;
        if let Some(s) = self.series.as_deref_mut() {
            s.on_record(exporter);
        }
        self.stats.collected_packets += c.packets + c.rev_packets;
        self.stats.collected_bytes += c.bytes + c.rev_bytes;
        if c.ended {
            let reason = c
                .end_reason
                .and_then(|n| crate::EndReason::ALL.into_iter().find(|r| *r as u8 == n))
                .unwrap_or(crate::EndReason::IdleTimeout);
            self.remove(slot, reason);
        }
    }

    /// Accounts one sFlow packet sample: its header goes through the packet decoder, then it
    /// counts `sampling` packets of its IP length each. Malformed headers are counted as such.
    pub fn ingest_sample(&mut self, s: &SampledPacket, now_ns: u64) {
        let link = match s.header_protocol {
            1 => LinkType::Ethernet,
            11 | 12 => LinkType::Raw,
            _ => {
                self.stats.non_ip += 1;
                return;
            }
        };
        let mut d = Decoded::default();
        let wire = s.frame_length.max(s.header.len() as u32);
        match self.decoder.decode(link, now_ns, &s.header, wire, &mut d) {
            Ok(Outcome::Ip) => {}
            Ok(Outcome::NonIp) => {
                self.stats.non_ip += 1;
                return;
            }
            Err(m) => {
                self.stats.malformed[m as usize] += 1;
                return;
            }
        }
        let rate = s.sampling.max(1) as u64;
        let exporter = self.exporter_index(s.exporter, s.domain);
        let Some((slot, dir)) = self.slot_for(&d, now_ns) else {
            self.stats.dropped[DropReason::FlowTableFull as usize] += 1;
            return;
        };
        let x = self.claim_ext(slot);
        x.in_if = s.in_if;
        x.out_if = s.out_if;
        let f = &mut self.flows[slot as usize];
        f.add_counts(dir, rate, d.ip_len as u64 * rate, now_ns, now_ns);
        f.tcp_flags[dir] |= d.tcp_flags;
        f.exporter = exporter;
        f.sampling = rate as u32;
        if s.src_as != 0 || s.dst_as != 0 {
            self.keep_as_numbers(slot, dir, s.src_as, s.dst_as);
        }
        if now_ns > self.now_ns {
            self.now_ns = now_ns;
        }
        self.stats.collected_samples += 1;
        if let Some(s) = self.series.as_deref_mut() {
            s.on_record(exporter);
        }
        self.stats.collected_packets += rate;
        self.stats.collected_bytes += d.ip_len as u64 * rate;
    }

    /// Keeps the AS numbers a sample gave for its packet's source and destination, as the
    /// flow's client's (`SRC_AS`) and server's (`DST_AS`).
    fn keep_as_numbers(&mut self, slot: u32, dir: usize, src_as: u32, dst_as: u32) {
        let i = slot as usize;
        let src_is_client = self.flows[i].client_dir() == dir;
        if self.dpi_meta.len() <= i {
            self.dpi_meta.resize_with(i + 1, || None);
        }
        let meta = self.dpi_meta[i].get_or_insert_with(Box::default);
        let (client, server) = if src_is_client {
            (src_as, dst_as)
        } else {
            (dst_as, src_as)
        };
        if client != 0 {
            meta.src_as = client;
        }
        if server != 0 {
            meta.dst_as = server;
        }
    }

    /// Keeps a collected record's metadata fields and uninterpreted fields with its flow
    /// (latest value per name, at most [`MAX_EXTRA`] uninterpreted names) so the flow's record
    /// shows them.
    fn keep_extra(&mut self, slot: u32, dir: usize, c: &CollectedFlow) {
        let i = slot as usize;
        // The record's source is the flow's client unless the record is the reverse half (a
        // v5/v9 exporter sends one record per direction): then its source AS is the server's.
        let src_is_client = self.flows[i].client_dir() == dir;
        if self.dpi_meta.len() <= i {
            self.dpi_meta.resize_with(i + 1, || None);
        }
        let meta = self.dpi_meta[i].get_or_insert_with(Box::default);
        let numbered = c
            .extra
            .iter()
            .filter(|(_, _, v)| v.iter().any(|&b| b != 0))
            .map(|(pen, id, v)| match (pen, id) {
                // bgpSourceAsNumber, bgpDestinationAsNumber: kept as numbers, by end.
                (0, 16 | 17) if v.len() <= 4 => {
                    let n = v.iter().fold(0u32, |n, &b| n << 8 | u32::from(b));
                    let key = if (*id == 16) == src_is_client {
                        "SRC_AS"
                    } else {
                        "DST_AS"
                    };
                    (key.to_string(), n.to_string())
                }
                _ => {
                    let hex: String = v.iter().take(64).map(|b| format!("{b:02x}")).collect();
                    (format!("IE{pen}.{id}"), hex)
                }
            });
        let named = c
            .extra_text
            .iter()
            .map(|(k, v)| (wire_string(k.as_bytes()), wire_string(v.as_bytes())));
        for (k, v) in numbered.chain(named) {
            // A metadata key (a sonde or nProbe producer's HTTP_HOST, say) becomes the field
            // itself, typed; a value that does not fit it stays text.
            if let Some(f) = sonde_dpi::meta::field(&k) {
                if (f.set)(meta, sonde_dpi::meta::Value::Text(&v)) {
                    continue;
                }
            }
            if let Some(e) = meta.extra.iter_mut().find(|(n, _)| *n == k) {
                e.1 = v;
            } else if meta.extra.len() < MAX_EXTRA {
                meta.extra.push((k, v));
            }
        }
    }

    /// The flow slot for a packet-like description, created if needed (None: table full).
    fn slot_for(&mut self, d: &Decoded, ts_ns: u64) -> Option<(u32, usize)> {
        let (key, dir) = FlowKey::from_packet(d);
        let slot = self.slot_keyed(&key, dir, key.hash() as u32, ts_ns, || *d)?;
        Some((slot, dir))
    }

    /// The flow slot for `key`, created if needed from the description `decoded` gives (only
    /// called for a new flow); None when the table is full.
    #[inline(always)]
    fn slot_keyed(
        &mut self,
        key: &FlowKey,
        dir: usize,
        tag: u32,
        ts_ns: u64,
        decoded: impl FnOnce() -> Decoded,
    ) -> Option<u32> {
        if self.live_flows + 1 > self.cfg.max_flows {
            self.make_room(1);
        }
        self.index.reserve(1);
        let flows = &self.flows;
        let slot = match self.index.find(tag, |s| flows[s as usize].key == *key) {
            Ok(slot) => slot,
            Err(pos) => self.create(pos, key, tag, dir, &decoded(), ts_ns),
        };
        (slot != NO_SLOT).then_some(slot)
    }

    /// Index (+1) of an exporter in this shard's table; 0 when unknown or the table is full.
    fn exporter_index(&mut self, addr: Option<SocketAddr>, domain: u32) -> u16 {
        let Some(addr) = addr else { return 0 };
        if let Some(i) = self.exporters.iter().position(|e| *e == (addr, domain)) {
            return (i + 1) as u16;
        }
        if self.exporters.len() >= (u16::MAX - 1) as usize {
            return 0;
        }
        self.exporters.push((addr, domain));
        self.exporters.len() as u16
    }

    pub(super) fn exporter_of(&self, slot: u32) -> Option<(SocketAddr, u32)> {
        let i = self.flows[slot as usize].exporter.checked_sub(1)?;
        self.exporters.get(i as usize).copied()
    }
}

/// An exported application name (`TLS.Google`, `DNS`) as sonde's label, when sonde knows it.
fn label_from_name(name: &str) -> Option<sonde_dpi::L7> {
    let (p, a) = name.split_once('.').unwrap_or((name, ""));
    let proto = Proto::from_name(p)?;
    let app = Proto::from_name(a).unwrap_or_default();
    Some(sonde_dpi::L7 {
        proto,
        app,
        category: if app.is_known() {
            app.category()
        } else {
            proto.category()
        },
        confidence: Confidence::Dpi,
    })
}
