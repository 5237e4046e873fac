//! NetFlow v9 (RFC 3954) and IPFIX (RFC 7011): templates, options templates, data sets.

use std::net::SocketAddr;

use super::ie::{self, Acc, Kind};
use super::{bounded_insert, Config, DecodeError, Exporter, Pending, Rd, SeqKind, Summary};
use crate::record::CollectedFlow;

/// (version 9 or 10, observation domain / source id, template id).
pub(super) type TKey = (u16, u32, u16);

#[derive(Clone, Copy, Debug)]
pub(super) struct Field {
    pub id: u16,
    pub len: u16,
    pub pen: u32,
    /// What the field means, set when the template is added; None for variable-length
    /// fields, whose meaning can depend on each value's length.
    pub kind: Option<Kind>,
}

#[derive(Clone, Debug)]
pub(super) struct Template {
    pub fields: Vec<Field>,
    /// 0 for a data template; the number of scope fields of an options template.
    pub scope_count: u16,
    /// Smallest possible record (variable-length fields count 1 byte).
    pub min_len: usize,
    pub received_ms: u64,
}

/// What one heap allocation costs beyond the bytes asked for (glibc malloc: a size word,
/// rounded to 16 bytes).
const ALLOC_OVERHEAD: usize = 16;

impl Template {
    /// The heap memory the template holds in the exporter's table, counted against
    /// `max_template_bytes_per_exporter`: its `Arc` (two counts and the struct), the field
    /// vector, and its slot in the table, at twice its size because the hash table may be at
    /// most half full after growing, plus what each allocation costs the allocator.
    fn cost(&self) -> usize {
        use std::mem::size_of;
        let arc = 2 * size_of::<usize>() + size_of::<Template>() + ALLOC_OVERHEAD;
        let fields = self.fields.capacity() * size_of::<Field>() + ALLOC_OVERHEAD;
        let slot = 2 * (size_of::<TKey>() + size_of::<std::sync::Arc<Template>>() + 1);
        arc + fields + slot
    }
}

/// What a data set needs from its message header to place timestamps.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TimeCtx {
    pub export_ms: u64,
    /// NetFlow v9 sysUptime (ms); None for IPFIX.
    pub uptime_ms: Option<u32>,
}

const VARIABLE: u16 = 65535;
/// Interface names kept are cut to this many bytes.
const MAX_IF_NAME: usize = 128;

/// Drops templates not refreshed in time, and buffered data sets too old to wait for theirs.
pub(super) fn expire(cfg: &Config, ex: &mut Exporter, now_ms: u64) {
    if now_ms.abs_diff(ex.last_template_sweep_ms) < 1000 {
        return;
    }
    ex.last_template_sweep_ms = now_ms;
    if cfg.template_timeout_ms > 0 {
        let before = ex.templates.len();
        let mut freed = 0;
        ex.templates.retain(|_, t| {
            let keep = now_ms.saturating_sub(t.received_ms) <= cfg.template_timeout_ms;
            if !keep {
                freed += t.cost();
            }
            keep
        });
        ex.template_bytes = ex.template_bytes.saturating_sub(freed);
        ex.stats.templates_expired += (before - ex.templates.len()) as u64;
    }
    while let Some(p) = ex.pending.front() {
        if now_ms.saturating_sub(p.received_ms) <= cfg.pending_timeout_ms {
            break;
        }
        ex.pending_bytes = ex.pending_bytes.saturating_sub(p.body.len());
        ex.pending.pop_front();
        ex.stats.pending_dropped_sets += 1;
    }
}

pub(super) fn default_rate(ex: &Exporter, domain: u32) -> u32 {
    ex.domain_sampling
        .get(&domain)
        .or_else(|| ex.domain_last_sampler.get(&domain))
        .copied()
        .unwrap_or(1)
}

/// State shared by the sets of one message.
struct Msg<'a> {
    cfg: &'a Config,
    exporter: SocketAddr,
    version: u16,
    domain: u32,
    time: TimeCtx,
    now_ms: u64,
}

pub(super) fn decode_v9(
    cfg: &Config,
    ex: &mut Exporter,
    exporter: SocketAddr,
    d: &[u8],
    now_ms: u64,
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) -> Result<(), DecodeError> {
    let mut r = Rd::new(d);
    let (_version, _count, uptime, secs, seq, source_id) =
        (|| Some((r.u16()?, r.u16()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?)))()
            .ok_or(DecodeError::Truncated)?;
    ex.sequence(cfg, SeqKind::V9, source_id, seq, Some(1));
    let m = Msg {
        cfg,
        exporter,
        version: 9,
        domain: source_id,
        time: TimeCtx {
            export_ms: secs as u64 * 1000,
            uptime_ms: Some(uptime),
        },
        now_ms,
    };
    // Flowsets until the end of the datagram; fewer than 4 bytes left is padding.
    while r.left() >= 4 {
        let (Some(id), Some(len)) = (r.u16(), r.u16()) else {
            break;
        };
        if len < 4 {
            ex.error(sum);
            break;
        }
        let Some(body) = r.take(len as usize - 4) else {
            ex.error(sum);
            break;
        };
        match id {
            0 => template_set(&m, ex, false, body, flows, sum),
            1 => options_template_set_v9(&m, ex, body, flows, sum),
            2..=255 => ex.stats.unknown_sets += 1,
            _ => {
                data_set(&m, ex, id, body, flows, sum);
            }
        }
    }
    Ok(())
}

pub(super) fn decode_ipfix(
    cfg: &Config,
    ex: &mut Exporter,
    exporter: SocketAddr,
    d: &[u8],
    now_ms: u64,
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) -> Result<(), DecodeError> {
    let mut r = Rd::new(d);
    let (_version, length, export, seq, domain) =
        (|| Some((r.u16()?, r.u16()?, r.u32()?, r.u32()?, r.u32()?)))()
            .ok_or(DecodeError::Truncated)?;
    let length = length as usize;
    if length < 16 {
        return Err(DecodeError::Malformed("IPFIX message length below 16"));
    }
    if length > d.len() {
        return Err(DecodeError::Truncated);
    }
    let mut r = Rd::new(&d[16..length]);
    let m = Msg {
        cfg,
        exporter,
        version: 10,
        domain,
        time: TimeCtx {
            export_ms: export as u64 * 1000,
            uptime_ms: None,
        },
        now_ms,
    };
    // Data records in this message, None once a set could not be counted.
    let mut records = Some(0u32);
    while r.left() > 0 {
        let (Some(id), Some(len)) = (r.u16(), r.u16()) else {
            ex.error(sum);
            records = None;
            break;
        };
        if len < 4 {
            ex.error(sum);
            records = None;
            break;
        }
        let Some(body) = r.take(len as usize - 4) else {
            ex.error(sum);
            records = None;
            break;
        };
        match id {
            2 => template_set(&m, ex, true, body, flows, sum),
            3 => options_template_set_ipfix(&m, ex, body, flows, sum),
            0 | 1 | 4..=255 => ex.stats.unknown_sets += 1,
            _ => {
                let n = data_set(&m, ex, id, body, flows, sum);
                records = match (records, n) {
                    (Some(a), Some(b)) => Some(a.wrapping_add(b)),
                    _ => None,
                };
            }
        }
    }
    ex.sequence(cfg, SeqKind::Ipfix, domain, seq, records);
    Ok(())
}

/// Reads `count` field specifiers.
fn read_fields(r: &mut Rd, count: usize, ipfix: bool, out: &mut Vec<Field>) -> Option<()> {
    for _ in 0..count {
        let id = r.u16()?;
        let len = r.u16()?;
        if ipfix && id & 0x8000 != 0 {
            let pen = r.u32()?;
            out.push(Field {
                id: id & 0x7fff,
                len,
                pen,
                kind: None,
            });
        } else {
            out.push(Field {
                id,
                len,
                pen: 0,
                kind: None,
            });
        }
    }
    Some(())
}

fn min_len(fields: &[Field], ipfix: bool) -> usize {
    fields
        .iter()
        .map(|f| {
            if ipfix && f.len == VARIABLE {
                1
            } else {
                f.len as usize
            }
        })
        .sum()
}

fn reject(ex: &mut Exporter, sum: &mut Summary) {
    ex.stats.templates_rejected += 1;
    ex.error(sum);
}

/// Data template sets: v9 flowset 0, IPFIX set 2.
fn template_set(
    m: &Msg,
    ex: &mut Exporter,
    ipfix: bool,
    body: &[u8],
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) {
    let mut r = Rd::new(body);
    while r.left() >= 4 {
        let (Some(tid), Some(count)) = (r.u16(), r.u16()) else {
            break;
        };
        if count == 0 {
            if ipfix {
                withdraw(m, ex, tid, 2, sum);
                continue;
            }
            reject(ex, sum);
            return;
        }
        if tid < 256 || count as usize > m.cfg.max_fields_per_template {
            reject(ex, sum);
            return;
        }
        let mut fields = Vec::with_capacity(count as usize);
        if read_fields(&mut r, count as usize, ipfix, &mut fields).is_none() {
            reject(ex, sum);
            return;
        }
        add_template(m, ex, tid, fields, 0, flows, sum);
    }
}

fn options_template_set_v9(
    m: &Msg,
    ex: &mut Exporter,
    body: &[u8],
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) {
    let mut r = Rd::new(body);
    while r.left() >= 6 {
        let (Some(tid), Some(scope_len), Some(opt_len)) = (r.u16(), r.u16(), r.u16()) else {
            break;
        };
        if tid < 256 || scope_len % 4 != 0 || opt_len % 4 != 0 {
            reject(ex, sum);
            return;
        }
        let nscope = scope_len as usize / 4;
        let nopt = opt_len as usize / 4;
        if nscope + nopt == 0 || nscope + nopt > m.cfg.max_fields_per_template {
            reject(ex, sum);
            return;
        }
        let mut fields = Vec::with_capacity(nscope + nopt);
        if read_fields(&mut r, nscope, false, &mut fields).is_none() {
            reject(ex, sum);
            return;
        }
        for f in &mut fields {
            f.pen = ie::PEN_V9_SCOPE;
        }
        if read_fields(&mut r, nopt, false, &mut fields).is_none() {
            reject(ex, sum);
            return;
        }
        // Scope count is at least 1 so the template is known as an options template.
        add_template(m, ex, tid, fields, nscope.max(1) as u16, flows, sum);
    }
}

fn options_template_set_ipfix(
    m: &Msg,
    ex: &mut Exporter,
    body: &[u8],
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) {
    let mut r = Rd::new(body);
    while r.left() >= 4 {
        let (Some(tid), Some(count)) = (r.u16(), r.u16()) else {
            break;
        };
        if count == 0 {
            withdraw(m, ex, tid, 3, sum);
            continue;
        }
        let Some(scope) = r.u16() else {
            reject(ex, sum);
            return;
        };
        if tid < 256
            || scope == 0
            || scope > count
            || count as usize > m.cfg.max_fields_per_template
        {
            reject(ex, sum);
            return;
        }
        let mut fields = Vec::with_capacity(count as usize);
        if read_fields(&mut r, count as usize, true, &mut fields).is_none() {
            reject(ex, sum);
            return;
        }
        add_template(m, ex, tid, fields, scope, flows, sum);
    }
}

/// IPFIX template withdrawal: `tid` 2 (set 2) or 3 (set 3) withdraws all templates of that
/// kind in the domain.
fn withdraw(m: &Msg, ex: &mut Exporter, tid: u16, set_id: u16, sum: &mut Summary) {
    let options = set_id == 3;
    if tid == set_id {
        let before = ex.templates.len();
        let mut freed = 0;
        ex.templates.retain(|k, t| {
            let keep = !(k.0 == m.version && k.1 == m.domain && (t.scope_count > 0) == options);
            if !keep {
                freed += t.cost();
            }
            keep
        });
        ex.template_bytes = ex.template_bytes.saturating_sub(freed);
        ex.stats.templates_withdrawn += (before - ex.templates.len()) as u64;
    } else if tid >= 256 {
        if let Some(t) = ex.templates.remove(&(m.version, m.domain, tid)) {
            ex.template_bytes = ex.template_bytes.saturating_sub(t.cost());
            ex.stats.templates_withdrawn += 1;
        }
    } else {
        reject(ex, sum);
    }
}

fn add_template(
    m: &Msg,
    ex: &mut Exporter,
    tid: u16,
    mut fields: Vec<Field>,
    scope_count: u16,
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) {
    let ipfix = m.version == 10;
    for f in &mut fields {
        if !(ipfix && f.len == VARIABLE) {
            f.kind = Some(Kind::of(f.pen, f.id, f.len as usize, !ipfix));
        }
    }
    let min = min_len(&fields, ipfix);
    if min == 0 {
        reject(ex, sum);
        return;
    }
    // The vector grew while the fields were read: its spare capacity would be memory the
    // budget does not see.
    fields.shrink_to_fit();
    let t = Template {
        fields,
        scope_count,
        min_len: min,
        received_ms: m.now_ms,
    };
    let key = (m.version, m.domain, tid);
    let old_cost = ex.templates.get(&key).map(|t| t.cost());
    if old_cost.is_none() && ex.templates.len() >= m.cfg.max_templates_per_exporter {
        reject(ex, sum);
        return;
    }
    let bytes = ex.template_bytes - old_cost.unwrap_or(0) + t.cost();
    if bytes > m.cfg.max_template_bytes_per_exporter {
        reject(ex, sum);
        return;
    }
    ex.template_bytes = bytes;
    ex.templates.insert(key, std::sync::Arc::new(t));
    ex.stats.templates_received += 1;
    sum.templates += 1;
    replay_pending(m, ex, tid, flows, sum);
}

/// Decodes the buffered data sets that were waiting for template `tid`.
fn replay_pending(
    m: &Msg,
    ex: &mut Exporter,
    tid: u16,
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) {
    if !ex
        .pending
        .iter()
        .any(|p| p.version == m.version && p.domain == m.domain && p.set_id == tid)
    {
        return;
    }
    let all = std::mem::take(&mut ex.pending);
    let mut ready = Vec::new();
    for p in all {
        if p.version == m.version && p.domain == m.domain && p.set_id == tid {
            ex.pending_bytes = ex.pending_bytes.saturating_sub(p.body.len());
            ready.push(p);
        } else {
            ex.pending.push_back(p);
        }
    }
    for p in ready {
        let pm = Msg { time: p.time, ..*m };
        if data_set(&pm, ex, tid, &p.body, flows, sum).is_some() {
            ex.stats.pending_decoded_sets += 1;
        }
    }
}

/// Reads one record into `acc` and `f`; returns the bytes it took, None when truncated.
fn read_record(
    t: &Template,
    ipfix: bool,
    data: &[u8],
    acc: &mut Acc,
    f: &mut CollectedFlow,
) -> Option<usize> {
    let v9 = !ipfix;
    let mut r = Rd::new(data);
    for fld in &t.fields {
        match fld.kind {
            Some(kind) => acc.apply(f, kind, fld.pen, fld.id, r.take(fld.len as usize)?),
            None => {
                let len = match r.u8()? {
                    255 => r.u16()? as usize,
                    l => l as usize,
                };
                let v = r.take(len)?;
                acc.apply(f, Kind::of(fld.pen, fld.id, len, v9), fld.pen, fld.id, v);
            }
        }
    }
    Some(data.len() - r.left())
}

/// Decodes a data set; returns the number of records, None when its template is unknown or
/// the set is malformed.
fn data_set(
    m: &Msg,
    ex: &mut Exporter,
    tid: u16,
    body: &[u8],
    flows: &mut Vec<CollectedFlow>,
    sum: &mut Summary,
) -> Option<u32> {
    let key = (m.version, m.domain, tid);
    let Some(t) = ex.templates.get(&key) else {
        no_template(m, ex, tid, body, sum);
        return None;
    };
    let t = std::sync::Arc::clone(t);
    let ipfix = m.version == 10;
    // Learnt from options records, which come in sets of their own: fixed for this set.
    let domain_rate = default_rate(ex, m.domain);
    let init = ex.system_init_ms.get(&m.domain).copied();
    let mut off = 0;
    let mut n = 0u32;
    let mut acc = Acc::new();
    // Options records' elements that are not options: read, then dropped.
    let mut scratch: CollectedFlow;
    let options = t.scope_count != 0;
    while body.len() - off >= t.min_len {
        acc.reset();
        // A data record is read straight into its place in `flows`.
        let f = if options {
            scratch = CollectedFlow::default();
            &mut scratch
        } else {
            flows.push(CollectedFlow::default());
            flows.last_mut().expect("just pushed")
        };
        let Some(used) = read_record(&t, ipfix, &body[off..], &mut acc, f) else {
            if !options {
                flows.pop();
            }
            ex.error(sum);
            return None;
        };
        off += used.max(1);
        n += 1;
        if !options {
            let rate = acc
                .announced_rate()
                .or_else(|| {
                    acc.sampler_id()
                        .and_then(|id| ex.samplers.get(&(m.domain, id)).copied())
                })
                .unwrap_or(domain_rate);
            acc.finish(f, rate, m.time.export_ms, m.time.uptime_ms, init);
            f.exporter = Some(m.exporter);
            f.domain = m.domain;
            ex.stats.records += 1;
            sum.flows += 1;
        } else {
            options_record(m, ex, &mut acc);
            ex.stats.option_records += 1;
            sum.option_records += 1;
        }
    }
    // Anything left is padding (shorter than a record).
    Some(n)
}

fn options_record(m: &Msg, ex: &mut Exporter, acc: &mut Acc) {
    let cap = m.cfg.max_map_entries;
    let dcap = m.cfg.max_domains_per_exporter;
    if let Some(rate) = acc.announced_rate() {
        match acc.sampler_id() {
            Some(id) => {
                bounded_insert(&mut ex.samplers, cap, (m.domain, id), rate);
                bounded_insert(&mut ex.domain_last_sampler, dcap, m.domain, rate);
            }
            None => {
                bounded_insert(&mut ex.domain_sampling, dcap, m.domain, rate);
            }
        }
    }
    if let (Some(idx), Some(mut name)) = (acc.if_index(), acc.take_if_name()) {
        if name.len() > MAX_IF_NAME {
            let mut end = MAX_IF_NAME;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name.truncate(end);
        }
        bounded_insert(&mut ex.interfaces, cap, idx, name);
    }
    if let Some(init) = acc.system_init_ms() {
        bounded_insert(&mut ex.system_init_ms, dcap, m.domain, init);
    }
}

fn no_template(m: &Msg, ex: &mut Exporter, tid: u16, body: &[u8], sum: &mut Summary) {
    ex.stats.no_template_sets += 1;
    ex.stats.no_template_bytes += body.len() as u64;
    sum.no_template_sets += 1;
    let max = m.cfg.max_pending_bytes_per_exporter;
    if body.len() > max {
        ex.stats.pending_dropped_sets += 1;
        return;
    }
    while ex.pending_bytes + body.len() > max {
        let Some(p) = ex.pending.pop_front() else {
            break;
        };
        ex.pending_bytes = ex.pending_bytes.saturating_sub(p.body.len());
        ex.stats.pending_dropped_sets += 1;
    }
    ex.pending_bytes += body.len();
    ex.pending.push_back(Pending {
        version: m.version,
        domain: m.domain,
        set_id: tid,
        received_ms: m.now_ms,
        time: m.time,
        body: body.to_vec(),
    });
}
