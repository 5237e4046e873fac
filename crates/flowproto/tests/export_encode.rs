//! The exporter's encoder: datagram sizes, sequence numbers, template refresh, IPv6 and biflow
//! records, checked by parsing what it produces with a small independent parser.

use std::collections::HashMap;

use sonde_flowproto::encode::{
    ExportFormat, Exporter, ExporterConfig, IpfixMode, Transport, MAX_APP_NAME, NTOP_PEN,
    REVERSE_PEN, TEMPLATE_V4, TEMPLATE_V4_UNI, TEMPLATE_V6,
};
use sonde_flowproto::ExportFlow;

const BOOT: u64 = 1_700_000_000_000;
const NOW: u64 = BOOT + 3_600_000;

fn v4(i: u32, rev: bool) -> ExportFlow {
    let mut f = ExportFlow {
        ip_version: 4,
        sport: 40000 + (i % 20000) as u16,
        dport: 443,
        proto: 6,
        packets: 10 + i as u64,
        bytes: 1000 + 100 * i as u64,
        rev_packets: if rev { 5 + i as u64 } else { 0 },
        rev_bytes: if rev { 7000 + i as u64 } else { 0 },
        first_ms: NOW - 60_000 + i as u64,
        last_ms: NOW - 1_000,
        tcp_flags: 0x1b,
        rev_tcp_flags: 0x12,
        tos: 0x10,
        vlan: 7,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        app_id: 91,
        app_name: "TLS".into(),
        end_reason: 1,
        ..Default::default()
    };
    f.src[..4].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
    f.dst[..4].copy_from_slice(&[192, 0, 2, 1]);
    f
}

fn v6(i: u32) -> ExportFlow {
    let mut f = v4(i, true);
    f.ip_version = 6;
    f.src = [
        0x20,
        0x01,
        0x0d,
        0xb8,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        (i >> 8) as u8,
        i as u8,
    ];
    f.dst = [
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff,
    ];
    f.proto = 17;
    f
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_n(b: &[u8]) -> u64 {
    b.iter().fold(0, |a, &x| (a << 8) | x as u64)
}

// ---- NetFlow v5 ----

/// (src, dst, packets, bytes, first, last, sport, dport, flags, proto, tos)
type V5Rec = ([u8; 4], [u8; 4], u32, u32, u32, u32, u16, u16, u8, u8, u8);

struct V5 {
    count: u16,
    uptime: u32,
    seq: u32,
    engine: (u8, u8),
    recs: Vec<V5Rec>,
}

fn parse_v5(d: &[u8]) -> V5 {
    assert_eq!(be16(d, 0), 5);
    let count = be16(d, 2);
    assert_eq!(d.len(), 24 + 48 * count as usize, "v5 length matches count");
    let recs = (0..count as usize)
        .map(|i| {
            let r = &d[24 + 48 * i..24 + 48 * (i + 1)];
            assert_eq!(&r[8..16], &[0; 8], "nexthop and ifIndexes 0");
            (
                r[0..4].try_into().unwrap(),
                r[4..8].try_into().unwrap(),
                be32(r, 16),
                be32(r, 20),
                be32(r, 24),
                be32(r, 28),
                be16(r, 32),
                be16(r, 34),
                r[37],
                r[38],
                r[39],
            )
        })
        .collect();
    V5 {
        count,
        uptime: be32(d, 4),
        seq: be32(d, 16),
        engine: (d[20], d[21]),
        recs,
    }
}

#[test]
fn v5_sizes_sequence_and_directions() {
    let mut cfg = ExporterConfig::new(ExportFormat::NetflowV5);
    cfg.boot_ms = BOOT;
    cfg.domain = 0x0102;
    let mut e = Exporter::new(cfg);
    assert_eq!(e.mtu(), 1400);
    let flows: Vec<_> = (0..100).map(|i| v4(i, i % 2 == 0)).collect();
    let mut out = Vec::new();
    e.encode(&flows, NOW, &mut out);
    // 100 forward + 50 reverse records, 28 per 1400-byte datagram.
    let mut seq = 0u32;
    let mut recs = Vec::new();
    for d in &out {
        assert!(d.len() <= 1400);
        let p = parse_v5(d);
        assert!(p.count <= 28);
        assert_eq!(p.seq, seq, "flow_sequence = records sent before");
        assert_eq!(p.uptime, 3_600_000);
        assert_eq!(p.engine, (1, 2));
        seq += p.count as u32;
        recs.extend(p.recs);
    }
    assert_eq!(recs.len(), 150);
    assert_eq!(out.len(), 150usize.div_ceil(28));
    // Flow 0: forward then reverse; flow 1: forward only.
    let f0 = &flows[0];
    let r = &recs[0];
    assert_eq!((r.0, r.1), ([10, 0, 0, 0], [192, 0, 2, 1]));
    assert_eq!((r.2, r.3), (10, 1000));
    assert_eq!(
        (r.4, r.5),
        ((f0.first_ms - BOOT) as u32, (f0.last_ms - BOOT) as u32)
    );
    assert_eq!((r.6, r.7, r.8, r.9, r.10), (40000, 443, 0x1b, 6, 0x10));
    let r = &recs[1];
    assert_eq!((r.0, r.1), ([192, 0, 2, 1], [10, 0, 0, 0]));
    assert_eq!((r.2, r.3), (5, 7000));
    assert_eq!((r.6, r.7, r.8), (443, 40000, 0x12));
    let r = &recs[2];
    assert_eq!((r.0, r.2, r.3), ([10, 0, 0, 1], 11, 1100));
    assert_eq!(recs[3].0, [10, 0, 0, 2], "flow 1 has no reverse record");

    // A second call continues the sequence.
    let mut out2 = Vec::new();
    e.encode(&flows[..3], NOW + 1000, &mut out2);
    assert_eq!(out2.len(), 1);
    let p = parse_v5(&out2[0]);
    assert_eq!(p.seq, 150);
    assert_eq!(p.count, 5);
    assert_eq!(e.stats().records, 155);
    assert_eq!(e.stats().flows, 103);
    assert_eq!(e.stats().messages, out.len() as u64 + 1);
}

#[test]
fn v5_thirty_records_at_most_and_ipv6_skipped() {
    let mut cfg = ExporterConfig::new(ExportFormat::NetflowV5);
    cfg.mtu = 9000;
    let mut e = Exporter::new(cfg);
    let mut flows: Vec<_> = (0..40).map(|i| v4(i, false)).collect();
    flows.insert(5, v6(1));
    flows.push(v6(2));
    let mut out = Vec::new();
    e.encode(&flows, NOW, &mut out);
    assert_eq!(
        out.iter().map(|d| parse_v5(d).count).collect::<Vec<_>>(),
        vec![30, 10]
    );
    assert_eq!(e.stats().skipped_ipv6, 2);
    assert_eq!(e.stats().flows, 40);
    // Only IPv6: nothing at all.
    let mut out = Vec::new();
    e.encode(&[v6(3)], NOW, &mut out);
    assert!(out.is_empty());
    assert!(e.templates_now(NOW).is_empty(), "v5 has no templates");
}

#[test]
fn v5_counters_saturate() {
    let mut e = Exporter::new(ExporterConfig::new(ExportFormat::NetflowV5));
    let mut f = v4(0, false);
    f.bytes = 5 << 32;
    let mut out = Vec::new();
    e.encode(&[f], NOW, &mut out);
    assert_eq!(parse_v5(&out[0]).recs[0].3, u32::MAX);
    assert_eq!(e.stats().clamped, 1);
}

// ---- v9 / IPFIX ----

/// (enterprise, id, length) of each template field.
type Tmpl = Vec<(u32, u16, u16)>;
/// A data record: field values by (enterprise, id).
type Fields = HashMap<(u32, u16), Vec<u8>>;
/// Data records with their template id.
type Recs = Vec<(u16, Fields)>;

#[derive(Debug, Default)]
struct Msg {
    /// v9: count; IPFIX: length.
    count_or_len: u16,
    uptime: u32,
    secs: u32,
    seq: u32,
    domain: u32,
    templates: Vec<u16>,
    /// (template id, fields by (enterprise, id)).
    recs: Recs,
}

/// Parses one v9 / IPFIX message; templates learnt so far go in `known`.
fn parse(d: &[u8], known: &mut HashMap<u16, Tmpl>) -> Msg {
    let ipfix = be16(d, 0) == 10;
    let mut m = Msg::default();
    let mut at = if ipfix {
        assert_eq!(be16(d, 2) as usize, d.len(), "IPFIX length field");
        m.count_or_len = be16(d, 2);
        m.secs = be32(d, 4);
        m.seq = be32(d, 8);
        m.domain = be32(d, 12);
        16
    } else {
        assert_eq!(be16(d, 0), 9);
        m.count_or_len = be16(d, 2);
        m.uptime = be32(d, 4);
        m.secs = be32(d, 8);
        m.seq = be32(d, 12);
        m.domain = be32(d, 16);
        20
    };
    while at < d.len() {
        let id = be16(d, at);
        let len = be16(d, at + 2) as usize;
        assert!(len >= 4 && at + len <= d.len(), "set length");
        if !ipfix {
            assert_eq!(len % 4, 0, "v9 flowsets padded to 32 bits");
        }
        let set = &d[at + 4..at + len];
        if id == if ipfix { 2 } else { 0 } {
            let mut p = 0;
            while p + 4 <= set.len() {
                let tid = be16(set, p);
                let n = be16(set, p + 2);
                p += 4;
                let mut fields = Vec::new();
                for _ in 0..n {
                    let (fid, flen) = (be16(set, p), be16(set, p + 2));
                    p += 4;
                    if fid & 0x8000 != 0 {
                        assert!(ipfix, "no enterprise fields in v9");
                        fields.push((be32(set, p), fid & 0x7fff, flen));
                        p += 4;
                    } else {
                        fields.push((0, fid, flen));
                    }
                }
                known.insert(tid, fields);
                m.templates.push(tid);
            }
            assert_eq!(p, set.len());
        } else {
            assert!(id >= 256);
            let t = known.get(&id).expect("data before its template").clone();
            let mut p = 0;
            let min: usize = t
                .iter()
                .map(|f| if f.2 == 65535 { 1 } else { f.2 as usize })
                .sum();
            while set.len() - p >= min {
                let mut rec = HashMap::new();
                for &(pen, fid, flen) in &t {
                    let n = if flen == 65535 {
                        let l = set[p] as usize;
                        p += 1;
                        if l == 255 {
                            let l = be16(set, p) as usize;
                            p += 2;
                            l
                        } else {
                            l
                        }
                    } else {
                        flen as usize
                    };
                    rec.insert((pen, fid), set[p..p + n].to_vec());
                    p += n;
                }
                m.recs.push((id, rec));
            }
            assert!(set[p..].iter().all(|&b| b == 0), "only zero padding");
            assert!(!ipfix || p == set.len(), "no padding in IPFIX sets");
        }
        at += len;
    }
    if !ipfix {
        assert_eq!(
            m.count_or_len as usize,
            m.templates.len() + m.recs.len(),
            "v9 count"
        );
    }
    m
}

fn num(r: &Fields, pen: u32, id: u16) -> u64 {
    be_n(
        r.get(&(pen, id))
            .unwrap_or_else(|| panic!("field {pen}/{id}")),
    )
}

fn cfg(format: ExportFormat) -> ExporterConfig {
    let mut c = ExporterConfig::new(format);
    c.boot_ms = BOOT;
    c.domain = 77;
    c
}

#[test]
fn v9_sizes_sequence_records() {
    let mut e = Exporter::new(cfg(ExportFormat::NetflowV9));
    let mut flows: Vec<_> = (0..150).map(|i| v4(i, i % 3 != 0)).collect();
    flows.extend((0..30).map(v6));
    let mut known = HashMap::new();
    let mut out = Vec::new();
    e.encode(&flows, NOW, &mut out);
    let mut recs = Vec::new();
    for (i, d) in out.iter().enumerate() {
        assert!(d.len() <= 1400, "datagram {i}: {} bytes", d.len());
        let m = parse(d, &mut known);
        assert_eq!(m.seq, i as u32, "package_sequence counts datagrams");
        assert_eq!(m.domain, 77);
        assert_eq!(m.uptime, 3_600_000);
        assert_eq!(m.secs as u64, NOW / 1000);
        // In the first datagram and again after every 20 (the default refresh).
        assert_eq!(
            m.templates.len(),
            if i % 20 == 0 { 2 } else { 0 },
            "templates in datagram {i}"
        );
        recs.extend(m.recs);
    }
    assert!(out.len() > 5);
    // 150 forward + 100 reverse + 30 IPv6 forward + 30 IPv6 reverse.
    assert_eq!(recs.len(), 310);
    let (tid, r) = &recs[0];
    assert_eq!(*tid, TEMPLATE_V4);
    assert_eq!(num(r, 0, 1), 1000);
    assert_eq!(num(r, 0, 2), 10);
    assert_eq!(r[&(0, 1)].len(), 8, "IN_BYTES 8 bytes");
    assert_eq!(r[&(0, 8)], [10, 0, 0, 0]);
    assert_eq!(r[&(0, 12)], [192, 0, 2, 1]);
    assert_eq!((num(r, 0, 7), num(r, 0, 11), num(r, 0, 4)), (40000, 443, 6));
    assert_eq!((num(r, 0, 6), num(r, 0, 5), num(r, 0, 58)), (0x1b, 0x10, 7));
    assert_eq!(num(r, 0, 22), (flows[0].first_ms - BOOT));
    assert_eq!(num(r, 0, 21), (flows[0].last_ms - BOOT));
    assert_eq!((num(r, 0, 10), num(r, 0, 14)), (0, 0));
    assert_eq!(r[&(0, 56)], [2, 0, 0, 0, 0, 1]);
    assert_eq!(r[&(0, 80)], [2, 0, 0, 0, 0, 2]);
    assert_eq!((num(r, 0, 60), num(r, 0, 136)), (4, 1));
    let mut app = vec![20];
    app.extend(NTOP_PEN.to_be_bytes());
    app.extend(91u32.to_be_bytes());
    assert_eq!(
        r[&(0, 95)],
        app,
        "applicationId: PANA-L7-PEN, ntop, nDPI id"
    );
    // Flow 0 has no reverse counters (0 % 3 == 0): next record is flow 1 forward, then reverse.
    assert_eq!(recs[1].1[&(0, 8)], [10, 0, 0, 1]);
    let r = &recs[2].1;
    assert_eq!(
        (r[&(0, 8)].as_slice(), r[&(0, 12)].as_slice()),
        (&[192, 0, 2, 1][..], &[10, 0, 0, 1][..])
    );
    assert_eq!((num(r, 0, 1), num(r, 0, 2), num(r, 0, 6)), (7001, 6, 0x12));
    assert_eq!((num(r, 0, 7), num(r, 0, 11)), (443, 40001));
    assert_eq!(r[&(0, 56)], [2, 0, 0, 0, 0, 2]);
    // IPv6.
    let v6recs: Vec<_> = recs.iter().filter(|(t, _)| *t == TEMPLATE_V6).collect();
    assert_eq!(v6recs.len(), 60);
    let r = &v6recs[0].1;
    assert_eq!(r[&(0, 27)], flows[150].src);
    assert_eq!(r[&(0, 28)], flows[150].dst);
    assert_eq!((num(r, 0, 60), num(r, 0, 4)), (6, 17));
    assert_eq!(v6recs[1].1[&(0, 27)], flows[150].dst);

    // Sequence continues across calls.
    let mut out2 = Vec::new();
    e.encode(&flows[..1], NOW + 5, &mut out2);
    assert_eq!(parse(&out2[0], &mut known).seq, out.len() as u32);
}

#[test]
fn v9_template_refresh_by_packets_and_time() {
    let mut c = cfg(ExportFormat::NetflowV9);
    c.template_refresh_packets = 4;
    c.template_refresh_ms = 10_000;
    let mut e = Exporter::new(c);
    let mut known = HashMap::new();
    let flows: Vec<_> = (0..20).map(|i| v4(i, true)).collect();
    let mut with_templates = Vec::new();
    // One datagram per call (2 flows = 4 records), 1 s apart: templates every 4 datagrams.
    for k in 0..9u64 {
        let mut out = Vec::new();
        e.encode(&flows[..2], NOW + k * 1000, &mut out);
        assert_eq!(out.len(), 1);
        let m = parse(&out[0], &mut known);
        assert_eq!(m.seq as u64, k);
        if !m.templates.is_empty() {
            with_templates.push(k);
        }
    }
    assert_eq!(with_templates, vec![0, 4, 8]);
    // By time: 10 s after the last templates (sent at k = 8).
    let mut out = Vec::new();
    e.encode(&flows[..2], NOW + 8_000 + 9_999, &mut out);
    assert!(parse(&out[0], &mut known).templates.is_empty());
    out.clear();
    e.encode(&flows[..2], NOW + 8_000 + 10_000, &mut out);
    assert_eq!(
        parse(&out[0], &mut known).templates,
        vec![TEMPLATE_V4, TEMPLATE_V6]
    );
    // Within one call: a long batch gets templates in datagrams 0, 4, 8, ...
    let mut c = cfg(ExportFormat::NetflowV9);
    c.template_refresh_packets = 4;
    c.template_refresh_ms = 0;
    let mut e = Exporter::new(c);
    let many: Vec<_> = (0..400).map(|i| v4(i, true)).collect();
    let mut out = Vec::new();
    e.encode(&many, NOW, &mut out);
    assert!(out.len() >= 12);
    for (i, d) in out.iter().enumerate() {
        assert!(d.len() <= 1400);
        let m = parse(d, &mut known);
        assert_eq!(!m.templates.is_empty(), i % 4 == 0, "datagram {i}");
    }
    assert_eq!(e.stats().template_messages, out.len().div_ceil(4) as u64);
}

fn ipfix_records(out: &[Vec<u8>], known: &mut HashMap<u16, Tmpl>, seq: &mut u32) -> Recs {
    let mut recs = Vec::new();
    for d in out {
        let m = parse(d, known);
        assert_eq!(m.seq, *seq, "IPFIX sequence = data records sent before");
        assert_eq!(m.domain, 77);
        *seq = seq.wrapping_add(m.recs.len() as u32);
        recs.extend(m.recs);
    }
    recs
}

#[test]
fn ipfix_biflow_records_sizes_sequence() {
    let mut e = Exporter::new(cfg(ExportFormat::Ipfix));
    let mut flows: Vec<_> = (0..200).map(|i| v4(i, i % 2 == 0)).collect();
    flows.extend((0..20).map(v6));
    flows[3].app_name = "TLS.Google".into();
    let mut known = HashMap::new();
    let mut seq = 0;
    let mut out = Vec::new();
    e.encode(&flows, NOW, &mut out);
    assert!(out.iter().all(|d| d.len() <= 1400));
    assert!(out.len() > 10);
    let recs = ipfix_records(&out, &mut known, &mut seq);
    assert_eq!(recs.len(), 220, "one biflow record per flow");
    let t = &known[&TEMPLATE_V4];
    assert!(
        t.contains(&(REVERSE_PEN, 1, 8))
            && t.contains(&(REVERSE_PEN, 2, 8))
            && t.contains(&(REVERSE_PEN, 6, 2))
    );
    assert!(t.contains(&(0, 6, 2)), "tcpControlBits 2 bytes");
    assert!(
        t.contains(&(0, 96, 65535)),
        "applicationName variable length"
    );
    let r = &recs[0].1;
    assert_eq!((num(r, 0, 1), num(r, 0, 2)), (1000, 10));
    assert_eq!((num(r, REVERSE_PEN, 1), num(r, REVERSE_PEN, 2)), (7000, 5));
    assert_eq!((num(r, 0, 6), num(r, REVERSE_PEN, 6)), (0x1b, 0x12));
    assert_eq!(
        (num(r, 0, 152), num(r, 0, 153)),
        (flows[0].first_ms, flows[0].last_ms)
    );
    assert_eq!(r[&(0, 8)], [10, 0, 0, 0]);
    assert_eq!(r[&(0, 80)], [2, 0, 0, 0, 0, 2]);
    assert_eq!(r[&(0, 96)], b"TLS");
    // Zero reverse counters: still one record, reverse fields 0.
    let r = &recs[1].1;
    assert_eq!(
        (num(r, 0, 1), num(r, REVERSE_PEN, 1), num(r, REVERSE_PEN, 2)),
        (1100, 0, 0)
    );
    assert_eq!(recs[3].1[&(0, 96)], b"TLS.Google");
    // IPv6 records.
    let (tid, r) = &recs[200];
    assert_eq!(*tid, TEMPLATE_V6);
    assert_eq!(r[&(0, 27)], flows[200].src);
    assert_eq!(r[&(0, 28)], flows[200].dst);
    assert!(r.contains_key(&(0, 139)), "icmpTypeCodeIPv6");
    // Across calls.
    let mut out = Vec::new();
    e.encode(&flows[..7], NOW + 1, &mut out);
    assert_eq!(parse(&out[0], &mut known).seq, 220);
    assert_eq!(e.stats().records, 227);
}

#[test]
fn ipfix_unidirectional_two_records() {
    let mut c = cfg(ExportFormat::Ipfix);
    c.ipfix_mode = IpfixMode::Unidirectional;
    let mut e = Exporter::new(c);
    let flows = vec![v4(1, true), v4(2, false), v6(3)];
    let mut known = HashMap::new();
    let mut out = Vec::new();
    e.encode(&flows, NOW, &mut out);
    let recs = ipfix_records(&out, &mut known, &mut 0);
    assert!(
        known[&TEMPLATE_V4_UNI].iter().all(|f| f.0 == 0),
        "no enterprise fields"
    );
    assert_eq!(recs.len(), 5);
    let counts: Vec<_> = recs
        .iter()
        .map(|(_, r)| (num(r, 0, 2), num(r, 0, 1), num(r, 0, 7)))
        .collect();
    assert_eq!(
        counts,
        vec![
            (11, 1100, 40001),
            (6, 7001, 443),
            (12, 1200, 40002),
            (13, 1300, 40003),
            (8, 7003, 443)
        ]
    );
    assert_eq!(recs[1].1[&(0, 8)], [192, 0, 2, 1]);
    assert_eq!(num(&recs[1].1, 0, 6), 0x12);
}

#[test]
fn ipfix_tcp_templates_once_and_templates_now() {
    let mut c = cfg(ExportFormat::Ipfix);
    c.transport = Transport::Tcp;
    c.mtu = 60_000;
    c.template_refresh_packets = 1;
    c.template_refresh_ms = 1;
    let mut e = Exporter::new(c);
    assert_eq!(e.mtu(), 60_000);
    let mut known = HashMap::new();
    // New connection: templates first.
    let t = e.templates_now(NOW);
    let m = parse(&t, &mut known);
    assert_eq!(m.templates, vec![TEMPLATE_V4, TEMPLATE_V6]);
    assert!(m.recs.is_empty());
    assert_eq!(m.seq, 0);
    let flows: Vec<_> = (0..1000).map(|i| v4(i, true)).collect();
    let mut seq = 0;
    for k in 0..3 {
        let mut out = Vec::new();
        e.encode(&flows, NOW + k * 100_000, &mut out);
        assert!(out.len() > 1 && out.iter().all(|d| d.len() <= 60_000));
        for d in &out {
            assert!(
                parse(d, &mut known).templates.is_empty(),
                "no refresh over TCP"
            );
        }
        assert_eq!(ipfix_records(&out, &mut known, &mut seq).len(), 1000);
    }
    // Reconnection.
    let m = parse(&e.templates_now(NOW), &mut known);
    assert_eq!((m.templates.len(), m.seq), (2, 3000));
    // Without templates_now, a TCP exporter sends them in its first message.
    let mut c = cfg(ExportFormat::Ipfix);
    c.transport = Transport::Tcp;
    let mut e = Exporter::new(c);
    let mut out = Vec::new();
    e.encode(&flows[..10], NOW, &mut out);
    e.encode(&flows[..10], NOW + 1_000_000, &mut out);
    let mut known = HashMap::new();
    assert_eq!(parse(&out[0], &mut known).templates.len(), 2);
    assert!(parse(&out[1], &mut known).templates.is_empty());
}

#[test]
fn ipfix_sequence_across_calls() {
    let mut e = Exporter::new(cfg(ExportFormat::Ipfix));
    let flows: Vec<_> = (0..10).map(|i| v4(i, true)).collect();
    let mut out = Vec::new();
    let mut known = HashMap::new();
    let mut seq = 0u32;
    for _ in 0..5 {
        out.clear();
        e.encode(&flows, NOW, &mut out);
        ipfix_records(&out, &mut known, &mut seq);
    }
    assert_eq!(seq, 50);
}

#[test]
fn tiny_mtu_is_raised_and_long_names_cut() {
    for format in [ExportFormat::NetflowV9, ExportFormat::Ipfix] {
        let mut c = cfg(format);
        c.mtu = 100;
        c.template_refresh_packets = 1;
        let mut e = Exporter::new(c);
        assert!(e.mtu() > 100);
        let mut flows: Vec<_> = (0..50).map(v6).collect();
        for f in &mut flows {
            f.app_name = "é".repeat(200);
        }
        let mut out = Vec::new();
        e.encode(&flows, NOW, &mut out);
        let mut known = HashMap::new();
        let mut n = 0;
        for d in &out {
            assert!(d.len() <= e.mtu());
            let m = parse(d, &mut known);
            assert_eq!(m.templates.len(), 2, "templates in every datagram");
            assert!(
                !m.recs.is_empty(),
                "each datagram holds templates and a record"
            );
            for (_, r) in &m.recs {
                if let Some(name) = r.get(&(0, 96)) {
                    assert!(name.len() <= MAX_APP_NAME);
                    assert!(std::str::from_utf8(name).is_ok());
                }
            }
            n += m.recs.len();
        }
        assert_eq!(
            n,
            if format == ExportFormat::Ipfix {
                50
            } else {
                100
            }
        );
    }
    let mut c = cfg(ExportFormat::NetflowV5);
    c.mtu = 10;
    assert_eq!(Exporter::new(c).mtu(), 24 + 48);
}

#[test]
fn long_app_name_cut_and_no_app_id() {
    let mut e = Exporter::new(cfg(ExportFormat::Ipfix));
    let mut f = v4(1, true);
    f.app_name = "x".repeat(MAX_APP_NAME + 50);
    f.app_id = 0;
    let mut out = Vec::new();
    e.encode(&[f], NOW, &mut out);
    let m = parse(&out[0], &mut HashMap::new());
    assert_eq!(m.recs[0].1[&(0, 96)].len(), MAX_APP_NAME);
    assert_eq!(m.recs[0].1[&(0, 95)], [0; 9], "no application: zeros");
}

#[test]
fn empty_input_produces_nothing() {
    for format in [
        ExportFormat::NetflowV5,
        ExportFormat::NetflowV9,
        ExportFormat::Ipfix,
    ] {
        let mut e = Exporter::new(cfg(format));
        let mut out = Vec::new();
        e.encode(&[], NOW, &mut out);
        assert!(out.is_empty());
    }
}

/// sonde's collector reads back every element sonde's exporter writes into a field of the
/// record, in each format and mode: nothing it sends arrives as an uninterpreted extra, except
/// flowEndReason (136), which a collector does not take (it ends its flows by its own
/// timeouts and says why itself), and applicationId (95), read into `app_id` and also kept
/// whole (its engine and enterprise say which registry the number is from).
#[test]
fn the_collector_reads_every_element_the_exporter_writes() {
    use sonde_flowproto::decode::Collector;
    let peer: std::net::SocketAddr = "192.0.2.9:2055".parse().unwrap();
    let mut icmp = v4(4, true);
    (icmp.proto, icmp.sport, icmp.dport, icmp.icmp_type_code) = (1, 0, 0, 0x0800);
    let mut icmp6 = v6(5);
    (icmp6.proto, icmp6.sport, icmp6.dport, icmp6.icmp_type_code) = (58, 0, 0, 0x8000);
    let flows = vec![v4(1, true), v4(2, false), v6(3), icmp, icmp6];
    for (format, mode) in [
        (ExportFormat::NetflowV9, IpfixMode::Biflow),
        (ExportFormat::Ipfix, IpfixMode::Biflow),
        (ExportFormat::Ipfix, IpfixMode::Unidirectional),
    ] {
        let mut c = cfg(format);
        c.ipfix_mode = mode;
        let mut out = Vec::new();
        Exporter::new(c).encode(&flows, NOW, &mut out);
        let mut collector = Collector::default();
        let (mut got, mut samples) = (Vec::new(), Vec::new());
        for d in &out {
            collector
                .decode(peer, d, NOW, &mut got, &mut samples)
                .unwrap();
        }
        let what = format!("{format:?} {mode:?}");
        assert!(got.len() >= flows.len(), "{what}: {} records", got.len());
        for r in &got {
            let unread: Vec<_> = r
                .extra
                .iter()
                .filter(|(pen, id, _)| *pen != 0 || (*id != 136 && *id != 95))
                .collect();
            assert!(
                unread.is_empty(),
                "{what}: elements not read back: {unread:?}"
            );
        }
        // The forward record of each flow carries what was sent.
        for f in &flows {
            let r = got
                .iter()
                .find(|r| r.src == f.src && r.sport == f.sport && r.proto == f.proto)
                .unwrap_or_else(|| panic!("{what}: no record for {:?}", f.src));
            assert_eq!(
                (r.dst, r.dport, r.ip_version),
                (f.dst, f.dport, f.ip_version),
                "{what}"
            );
            assert_eq!((r.packets, r.bytes), (f.packets, f.bytes), "{what}");
            assert_eq!((r.first_ms, r.last_ms), (f.first_ms, f.last_ms), "{what}");
            assert_eq!(
                (r.tcp_flags, r.tos, r.vlan),
                (f.tcp_flags, f.tos, f.vlan),
                "{what}"
            );
            assert_eq!(
                (r.src_mac, r.dst_mac),
                (Some(f.src_mac), Some(f.dst_mac)),
                "{what}"
            );
            assert_eq!(r.icmp_type_code, f.icmp_type_code, "{what}");
            assert_eq!(r.app_id, f.app_id, "{what}");
            if format == ExportFormat::Ipfix {
                // NetFlow v9 has no variable-length fields: the name travels in IPFIX only.
                assert_eq!(r.app_name.as_deref(), Some(f.app_name.as_str()), "{what}");
            }
            if format == ExportFormat::Ipfix && mode == IpfixMode::Biflow {
                assert_eq!(
                    (r.rev_packets, r.rev_bytes),
                    (f.rev_packets, f.rev_bytes),
                    "{what}"
                );
                assert_eq!(r.rev_tcp_flags, f.rev_tcp_flags, "{what}");
            }
        }
    }
}

/// AS numbers: bgpSource/DestinationAsNumber (4 bytes) in v9 and IPFIX, swapped in a
/// reverse record; v5's 16-bit fields, with a 4-byte AS as AS_TRANS (23456).
#[test]
fn as_numbers_ride_in_every_format_by_end() {
    let mut f = v4(1, true);
    f.src_as = 15169;
    f.dst_as = 4_200_000_000;
    for (format, mode) in [
        (ExportFormat::NetflowV9, IpfixMode::Biflow),
        (ExportFormat::Ipfix, IpfixMode::Unidirectional),
        (ExportFormat::Ipfix, IpfixMode::Biflow),
    ] {
        let mut c = cfg(format);
        c.ipfix_mode = mode;
        let mut e = Exporter::new(c);
        let (mut known, mut out) = (HashMap::new(), Vec::new());
        e.encode(std::slice::from_ref(&f), NOW, &mut out);
        let recs: Vec<_> = out.iter().flat_map(|d| parse(d, &mut known).recs).collect();
        let ases: Vec<_> = recs
            .iter()
            .map(|(_, r)| (num(r, 0, 16), num(r, 0, 17)))
            .collect();
        let want = if format == ExportFormat::Ipfix && mode == IpfixMode::Biflow {
            vec![(15169, 4_200_000_000)]
        } else {
            vec![(15169, 4_200_000_000), (4_200_000_000, 15169)]
        };
        assert_eq!(ases, want, "{format:?} {mode:?}");
        assert!(recs.iter().all(|(_, r)| r[&(0, 16)].len() == 4));
    }
    let mut e = Exporter::new(cfg(ExportFormat::NetflowV5));
    let mut out = Vec::new();
    e.encode(std::slice::from_ref(&f), NOW, &mut out);
    let d = &out[0];
    let ases: Vec<_> = (0..be16(d, 2) as usize)
        .map(|i| (be16(d, 24 + 48 * i + 40), be16(d, 24 + 48 * i + 42)))
        .collect();
    assert_eq!(ases, [(15169, 23456), (23456, 15169)]);
}
