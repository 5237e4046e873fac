//! NetFlow v5: a 24-byte header and up to 30 fixed 48-byte records.

use std::net::SocketAddr;

use super::{Config, DecodeError, Exporter, Rd, SeqKind, Summary};
use crate::record::CollectedFlow;

pub(super) const HEADER_LEN: usize = 24;
pub(super) const RECORD_LEN: usize = 48;
/// Cisco's limit; more than this in the count field is treated as malformed.
pub(super) const MAX_COUNT: usize = 30;

pub(super) fn decode(
    cfg: &Config,
    ex: &mut Exporter,
    exporter: SocketAddr,
    d: &[u8],
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) -> Result<(), DecodeError> {
    let mut r = Rd::new(d);
    let (_version, count, uptime, secs, nsecs, seq, engine_type, engine_id, sampling) = (|| {
        Some((
            r.u16()?,
            r.u16()?,
            r.u32()?,
            r.u32()?,
            r.u32()?,
            r.u32()?,
            r.u8()?,
            r.u8()?,
            r.u16()?,
        ))
    })()
    .ok_or(DecodeError::Truncated)?;
    let count = count as usize;
    if count > MAX_COUNT {
        return Err(DecodeError::Malformed("NetFlow v5 count above 30"));
    }
    let present = (d.len() - HEADER_LEN) / RECORD_LEN;
    let n = count.min(present);
    if n < count {
        ex.error(sum);
    }
    let domain = (engine_type as u32) << 8 | engine_id as u32;
    ex.sequence(cfg, SeqKind::V5, domain, seq, Some(count as u32));
    // Top two bits: sampling mode; low 14: interval.
    let rate = match (sampling & 0x3fff) as u32 {
        0 => 1,
        n => n,
    };
    let export_ms = secs as u64 * 1000 + (nsecs / 1_000_000) as u64;
    let to_ms = |t: u32| export_ms.saturating_sub(uptime.wrapping_sub(t) as u64);
    for i in 0..n {
        let rec = &d[HEADER_LEN + i * RECORD_LEN..HEADER_LEN + (i + 1) * RECORD_LEN];
        let mut r = Rd::new(rec);
        let (Some(src), Some(dst), Some(nh), Some(input), Some(output), Some(pkts), Some(octets)) = (
            r.take(4),
            r.take(4),
            r.take(4),
            r.u16(),
            r.u16(),
            r.u32(),
            r.u32(),
        ) else {
            continue;
        };
        let (
            Some(first),
            Some(last),
            Some(sport),
            Some(dport),
            Some(_pad),
            Some(flags),
            Some(proto),
            Some(tos),
        ) = (
            r.u32(),
            r.u32(),
            r.u16(),
            r.u16(),
            r.u8(),
            r.u8(),
            r.u8(),
            r.u8(),
        )
        else {
            continue;
        };
        let (Some(src_as), Some(dst_as), Some(src_mask), Some(dst_mask)) =
            (r.take(2), r.take(2), r.u8(), r.u8())
        else {
            continue;
        };
        let mut f = CollectedFlow {
            exporter: Some(exporter),
            domain,
            ip_version: 4,
            sport,
            dport,
            proto,
            packets: (pkts as u64).saturating_mul(rate as u64),
            bytes: (octets as u64).saturating_mul(rate as u64),
            first_ms: to_ms(first),
            last_ms: to_ms(last),
            tcp_flags: flags,
            tos,
            in_if: input as u32,
            out_if: output as u32,
            sampling: rate,
            ..Default::default()
        };
        f.src[..4].copy_from_slice(src);
        f.dst[..4].copy_from_slice(dst);
        // Kept by IANA element number: ipNextHopIPv4Address, bgpSource/DestinationAsNumber,
        // sourceIPv4PrefixLength, destinationIPv4PrefixLength.
        f.extra = vec![
            (0, 15, nh.to_vec()),
            (0, 16, src_as.to_vec()),
            (0, 17, dst_as.to_vec()),
            (0, 9, vec![src_mask]),
            (0, 13, vec![dst_mask]),
        ];
        flows.push(f);
        ex.stats.records += 1;
        sum.flows += 1;
    }
    Ok(())
}
