//! sFlow version 5 (sflow.org, "sFlow Version 5", 2004): flow samples with raw packet headers
//! (and the AS numbers of their extended gateway records), and generic interface counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{bounded_insert, Config, DecodeError, Exporter, Rd, SeqKind, Summary};
use crate::record::SampledPacket;

/// The latest generic interface counters (sFlow counter record 0:1) of one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfCounters {
    pub if_type: u32,
    pub speed: u64,
    /// 0 unknown, 1 full duplex, 2 half duplex, 3 in, 4 out.
    pub direction: u32,
    /// Bit 0 admin up, bit 1 oper up.
    pub status: u32,
    pub in_octets: u64,
    /// Unicast + multicast + broadcast.
    pub in_packets: u64,
    pub in_discards: u32,
    pub in_errors: u32,
    pub out_octets: u64,
    pub out_packets: u64,
    pub out_discards: u32,
    pub out_errors: u32,
    /// When the sample was received (`now_ms`).
    pub updated_ms: u64,
}

/// At most this many samples per datagram, and records per sample (a 64 KiB datagram cannot
/// hold more anyway; the cap only stops a forged count from driving a long loop).
const MAX_ITEMS: u32 = 8192;
/// Longest sampled header kept.
const MAX_HEADER: usize = 1024;

fn xdr_opaque<'a>(r: &mut Rd<'a>, len: usize) -> Option<&'a [u8]> {
    let data = r.take(len)?;
    let pad = (4 - len % 4) % 4;
    r.take(pad.min(r.left()))?;
    Some(data)
}

pub(super) fn decode(
    cfg: &Config,
    ex: &mut Exporter,
    exporter: SocketAddr,
    d: &[u8],
    now_ms: u64,
    samples: &mut Vec<SampledPacket>,
    sum: &mut Summary,
) -> Result<(), DecodeError> {
    let mut r = Rd::new(d);
    let _version = r.u32().ok_or(DecodeError::Truncated)?;
    let agent = match r.u32().ok_or(DecodeError::Truncated)? {
        1 => {
            let a: [u8; 4] = r
                .take(4)
                .ok_or(DecodeError::Truncated)?
                .try_into()
                .unwrap_or_default();
            IpAddr::V4(Ipv4Addr::from(a))
        }
        2 => {
            let a: [u8; 16] = r
                .take(16)
                .ok_or(DecodeError::Truncated)?
                .try_into()
                .unwrap_or_default();
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => return Err(DecodeError::Malformed("sFlow agent address type")),
    };
    let (sub_agent, seq, _uptime, nsamples) =
        (|| Some((r.u32()?, r.u32()?, r.u32()?, r.u32()?)))().ok_or(DecodeError::Truncated)?;
    ex.sflow_agent = Some(agent);
    ex.sequence(cfg, SeqKind::Sflow, sub_agent, seq, Some(1));
    if nsamples > MAX_ITEMS {
        return Err(DecodeError::Malformed("sFlow sample count"));
    }
    for _ in 0..nsamples {
        let (Some(format), Some(len)) = (r.u32(), r.u32()) else {
            ex.error(sum);
            break;
        };
        let Some(body) = r.take(len as usize) else {
            ex.error(sum);
            break;
        };
        let (enterprise, fmt) = (format >> 12, format & 0xfff);
        let ok = match (enterprise, fmt) {
            (0, 1) => flow_sample(ex, exporter, sub_agent, body, false, samples, sum),
            (0, 3) => flow_sample(ex, exporter, sub_agent, body, true, samples, sum),
            (0, 2) => counter_sample(cfg, ex, body, false, now_ms),
            (0, 4) => counter_sample(cfg, ex, body, true, now_ms),
            _ => {
                ex.stats.other_samples += 1;
                Some(())
            }
        };
        if ok.is_none() {
            ex.error(sum);
        }
    }
    if r.left() > 0 {
        // Bytes after the announced samples.
        ex.error(sum);
    }
    Ok(())
}

/// Compact interface encoding: the top two bits give the format; 0 is an ifIndex.
fn compact_if(v: u32) -> u32 {
    if v >> 30 == 0 {
        v & 0x3fff_ffff
    } else {
        0
    }
}

fn flow_sample(
    ex: &mut Exporter,
    exporter: SocketAddr,
    sub_agent: u32,
    body: &[u8],
    expanded: bool,
    samples: &mut Vec<SampledPacket>,
    sum: &mut Summary,
) -> Option<()> {
    let mut r = Rd::new(body);
    let _seq = r.u32()?;
    if expanded {
        let _source_type = r.u32()?;
        let _source_index = r.u32()?;
    } else {
        let _source = r.u32()?;
    }
    let rate = r.u32()?.max(1);
    let _pool = r.u32()?;
    let _drops = r.u32()?;
    let (in_if, out_if) = if expanded {
        let (inf, inv, outf, outv) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        (
            if inf == 0 { inv } else { 0 },
            if outf == 0 { outv } else { 0 },
        )
    } else {
        (compact_if(r.u32()?), compact_if(r.u32()?))
    };
    let nrec = r.u32()?;
    if nrec > MAX_ITEMS {
        return None;
    }
    ex.stats.flow_samples += 1;
    let first = samples.len();
    let mut gateway = None;
    for _ in 0..nrec {
        let format = r.u32()?;
        let len = r.u32()? as usize;
        let data = r.take(len)?;
        if format == EXTENDED_GATEWAY {
            gateway = extended_gateway(data);
            if gateway.is_none() {
                ex.stats.other_flow_records += 1;
            }
            continue;
        }
        if format != 1 {
            ex.stats.other_flow_records += 1;
            continue;
        }
        // Raw packet header.
        let mut h = Rd::new(data);
        let protocol = h.u32()?;
        let frame_length = h.u32()?;
        let _stripped = h.u32()?;
        let hlen = h.u32()? as usize;
        let header = xdr_opaque(&mut h, hlen)?;
        samples.push(SampledPacket {
            exporter: Some(exporter),
            domain: sub_agent,
            header: header[..header.len().min(MAX_HEADER)].to_vec(),
            header_protocol: protocol,
            frame_length,
            sampling: rate,
            in_if,
            out_if,
            src_as: 0,
            dst_as: 0,
        });
        ex.stats.packet_samples += 1;
        sum.samples += 1;
    }
    // The gateway record may come before or after the header it describes.
    if let Some((src_as, dst_as)) = gateway {
        for s in &mut samples[first..] {
            (s.src_as, s.dst_as) = (src_as, dst_as);
        }
    }
    Some(())
}

/// Flow record 0:1003, the router's view of the packet's route.
const EXTENDED_GATEWAY: u32 = 1003;

/// The source and destination AS numbers of an extended gateway record: next hop (an address
/// type, 1 IPv4 or 2 IPv6, and the address), the router's AS, the source AS, the source peer
/// AS, then the destination AS path (segments: type, count, ASNs), communities and local
/// preference. The destination AS is the path's last, the origin of the destination's route
/// (0 when the path is empty); the rest is not needed.
fn extended_gateway(data: &[u8]) -> Option<(u32, u32)> {
    let mut g = Rd::new(data);
    match g.u32()? {
        1 => g.take(4)?,
        2 => g.take(16)?,
        _ => return None,
    };
    let _router_as = g.u32()?;
    let src_as = g.u32()?;
    let _src_peer_as = g.u32()?;
    let segments = g.u32()?;
    let mut dst_as = 0;
    for _ in 0..segments.min(MAX_ITEMS) {
        let _kind = g.u32()?;
        let n = g.u32()?;
        if n > MAX_ITEMS {
            return None;
        }
        for _ in 0..n {
            dst_as = g.u32()?;
        }
    }
    Some((src_as, dst_as))
}

fn counter_sample(
    cfg: &Config,
    ex: &mut Exporter,
    body: &[u8],
    expanded: bool,
    now_ms: u64,
) -> Option<()> {
    let mut r = Rd::new(body);
    let _seq = r.u32()?;
    if expanded {
        let _source_type = r.u32()?;
        let _source_index = r.u32()?;
    } else {
        let _source = r.u32()?;
    }
    let nrec = r.u32()?;
    if nrec > MAX_ITEMS {
        return None;
    }
    ex.stats.counter_samples += 1;
    for _ in 0..nrec {
        let format = r.u32()?;
        let len = r.u32()? as usize;
        let data = r.take(len)?;
        if format != 1 {
            ex.stats.other_counter_records += 1;
            continue;
        }
        let mut c = Rd::new(data);
        let index = c.u32()?;
        let mut k = IfCounters {
            if_type: c.u32()?,
            speed: c.u64()?,
            direction: c.u32()?,
            status: c.u32()?,
            in_octets: c.u64()?,
            updated_ms: now_ms,
            ..Default::default()
        };
        let (uc, mc, bc) = (c.u32()?, c.u32()?, c.u32()?);
        k.in_packets = uc as u64 + mc as u64 + bc as u64;
        k.in_discards = c.u32()?;
        k.in_errors = c.u32()?;
        let _unknown_protos = c.u32()?;
        k.out_octets = c.u64()?;
        let (uc, mc, bc) = (c.u32()?, c.u32()?, c.u32()?);
        k.out_packets = uc as u64 + mc as u64 + bc as u64;
        k.out_discards = c.u32()?;
        k.out_errors = c.u32()?;
        bounded_insert(&mut ex.counters, cfg.max_map_entries, index, k);
        ex.stats.if_counter_records += 1;
    }
    Some(())
}
