//! Hand-built datagrams: hostile cases (each must be counted, never panic, stay bounded) and
//! the features the corpus does not exercise (withdrawal, expiry, variable length, enterprise
//! elements, interface names, caps).

use super::*;

fn peer(n: u8) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, n], 2055))
}

struct Out {
    flows: Vec<CollectedFlow>,
    samples: Vec<SampledPacket>,
}

fn out() -> Out {
    Out {
        flows: Vec::new(),
        samples: Vec::new(),
    }
}

fn dec(
    c: &mut Collector,
    p: SocketAddr,
    d: &[u8],
    now: u64,
    o: &mut Out,
) -> Result<Summary, DecodeError> {
    c.decode(p, d, now, &mut o.flows, &mut o.samples)
}

/// An IPFIX message from sets (set id, body).
fn ipfix(domain: u32, seq: u32, sets: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0, 10, 0, 0];
    m.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(&domain.to_be_bytes());
    for (id, body) in sets {
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
        m.extend_from_slice(body);
    }
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
    m
}

/// An IPFIX message whose body is `tail`, length field fixed.
fn raw_ipfix(tail: &[u8]) -> Vec<u8> {
    let mut m = ipfix(1, 0, &[]);
    m.extend_from_slice(tail);
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
    m
}

/// A NetFlow v9 packet from flowsets.
fn v9(source: u32, seq: u32, sets: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0, 9, 0, sets.len() as u8];
    m.extend_from_slice(&100_000u32.to_be_bytes()); // sysUptime
    m.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(&source.to_be_bytes());
    for (id, body) in sets {
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
        m.extend_from_slice(body);
    }
    m
}

/// A template record: id, then (element id, length[, pen]).
fn tpl(id: u16, fields: &[(u16, u16, Option<u32>)]) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend_from_slice(&(fields.len() as u16).to_be_bytes());
    for &(e, l, pen) in fields {
        let e = if pen.is_some() { e | 0x8000 } else { e };
        b.extend_from_slice(&e.to_be_bytes());
        b.extend_from_slice(&l.to_be_bytes());
        if let Some(p) = pen {
            b.extend_from_slice(&p.to_be_bytes());
        }
    }
    b
}

/// Template 256: src/dst IPv4, ports, proto, packets, octets (4-byte counters).
fn basic_tpl() -> Vec<u8> {
    tpl(
        256,
        &[
            (8, 4, None),
            (12, 4, None),
            (7, 2, None),
            (11, 2, None),
            (4, 1, None),
            (2, 4, None),
            (1, 4, None),
        ],
    )
}

fn basic_rec(last: u8, pkts: u32, bytes: u32) -> Vec<u8> {
    let mut r = vec![10, 0, 0, 1, 10, 0, 0, last, 0x30, 0x39, 0, 80, 6];
    r.extend_from_slice(&pkts.to_be_bytes());
    r.extend_from_slice(&bytes.to_be_bytes());
    r
}

#[test]
fn ipfix_basic_sequence_and_loss() {
    let mut c = Collector::default();
    let mut o = out();
    let m = ipfix(
        7,
        100,
        &[
            (2, basic_tpl()),
            (256, [basic_rec(2, 3, 300), basic_rec(3, 1, 40)].concat()),
        ],
    );
    let s = dec(&mut c, peer(1), &m, 0, &mut o).unwrap();
    assert_eq!((s.flows, s.templates, s.errors), (2, 1, 0));
    let f = &o.flows[0];
    assert_eq!(
        (f.ip_version, &f.src[..4], &f.dst[..4]),
        (4, &[10, 0, 0, 1][..], &[10, 0, 0, 2][..])
    );
    assert_eq!(
        (f.sport, f.dport, f.proto, f.packets, f.bytes, f.domain),
        (12345, 80, 6, 3, 300, 7)
    );
    // Next message should say 102: it says 105, 3 records lost.
    let m = ipfix(7, 105, &[(256, basic_rec(4, 1, 1))]);
    dec(&mut c, peer(1), &m, 0, &mut o).unwrap();
    assert_eq!(c.exporter_stats(peer(1)).unwrap().lost_records, 3);
    // Forged far jump: a reset, not a loss of billions.
    let m = ipfix(7, 3_000_000_000, &[(256, basic_rec(4, 1, 1))]);
    dec(&mut c, peer(1), &m, 0, &mut o).unwrap();
    let st = c.exporter_stats(peer(1)).unwrap();
    assert_eq!((st.lost_records, st.sequence_resets), (3, 1));
}

#[test]
fn withdrawal_single_and_all() {
    let mut c = Collector::default();
    let mut o = out();
    let t257 = tpl(257, &[(8, 4, None)]);
    dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, [basic_tpl(), t257].concat())]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!(c.exporter_stats(peer(1)).unwrap().templates_active, 2);
    // Withdraw 256: template record with field count 0.
    dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, vec![1, 0, 0, 0])]),
        0,
        &mut o,
    )
    .unwrap();
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(256, basic_rec(2, 1, 1))]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.no_template_sets), (0, 1));
    // Withdraw all data templates: template id 2.
    dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, vec![0, 2, 0, 0])]),
        0,
        &mut o,
    )
    .unwrap();
    let st = c.exporter_stats(peer(1)).unwrap();
    assert_eq!((st.templates_withdrawn, st.templates_active), (2, 0));
}

#[test]
fn template_expiry() {
    let cfg = Config {
        template_timeout_ms: 10_000,
        ..Config::default()
    };
    let mut c = Collector::new(cfg);
    let mut o = out();
    dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, basic_tpl())]),
        1_000,
        &mut o,
    )
    .unwrap();
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(256, basic_rec(2, 1, 1))]),
        9_000,
        &mut o,
    )
    .unwrap();
    assert_eq!(s.flows, 1);
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(256, basic_rec(2, 1, 1))]),
        20_000,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.no_template_sets), (0, 1));
    assert_eq!(c.exporter_stats(peer(1)).unwrap().templates_expired, 1);
}

#[test]
fn variable_length_enterprise_and_reverse_elements() {
    let mut c = Collector::default();
    let mut o = out();
    let t = tpl(
        300,
        &[
            (8, 4, None),
            (96, 65535, None),
            (1, 8, None),
            (1, 8, Some(29305)),
            (2, 4, Some(29305)),
            (42, 65535, Some(9)),
        ],
    );
    let mut rec = vec![1, 2, 3, 4];
    rec.extend_from_slice(&[3, b'd', b'n', b's']); // 1-byte length prefix
    rec.extend_from_slice(&1000u64.to_be_bytes());
    rec.extend_from_slice(&2000u64.to_be_bytes());
    rec.extend_from_slice(&7u32.to_be_bytes());
    rec.extend_from_slice(&[255, 1, 44]); // 3-byte prefix: 300 bytes
    rec.extend(std::iter::repeat_n(0xab, 300));
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, t), (300, rec)]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.errors), (1, 0));
    let f = &o.flows[0];
    assert_eq!(f.app_name.as_deref(), Some("dns"));
    assert_eq!((f.bytes, f.rev_bytes, f.rev_packets), (1000, 2000, 7));
    assert_eq!(f.extra, vec![(9, 42, vec![0xab; 300])]);
}

/// An element's meaning depends on its length: reduced-size integers (RFC 7011 6.2) read as
/// integers, a length no integer or address has is kept as an uninterpreted element, and a
/// variable-length integer is read by the length each record gives it.
#[test]
fn element_lengths_decide_their_meaning() {
    let mut c = Collector::default();
    let mut o = out();
    let t = tpl(
        301,
        &[
            (8, 4, None),     // sourceIPv4Address
            (12, 6, None),    // destinationIPv4Address of 6 bytes: not an address
            (7, 1, None),     // sourceTransportPort in 1 byte
            (11, 3, None),    // destinationTransportPort in 3 bytes
            (2, 9, None),     // packetDeltaCount of 9 bytes: not an integer
            (1, 65535, None), // octetDeltaCount, variable length
            (58, 2, None),    // vlanId
            (243, 2, None),   // dot1qVlanId: the first non-zero VLAN stays
        ],
    );
    let mut rec = vec![10, 0, 0, 1];
    rec.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    rec.push(53);
    rec.extend_from_slice(&[0, 1, 187]); // 443
    rec.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 9]);
    rec.extend_from_slice(&[3, 1, 0, 0]); // 3 bytes: 65536
    rec.extend_from_slice(&[0, 7]);
    rec.extend_from_slice(&[0, 9]);
    // The same template, second record: the variable-length counter in 8 bytes.
    let mut rec2 = rec.clone();
    let at = 4 + 6 + 1 + 3 + 9;
    rec2.splice(at..at + 4, [8, 0, 0, 0, 0, 0, 0, 0, 42]);
    rec.extend_from_slice(&rec2);
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, t), (301, rec)]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.errors), (2, 0));
    let f = &o.flows[0];
    assert_eq!(f.src[..4], [10, 0, 0, 1]);
    assert_eq!(f.dst[..4], [0, 0, 0, 0]);
    assert_eq!((f.sport, f.dport), (53, 443));
    assert_eq!((f.packets, f.bytes), (0, 65536));
    assert_eq!(f.vlan, 7);
    assert_eq!(
        f.extra,
        vec![
            (0, 12, vec![1, 2, 3, 4, 5, 6]),
            (0, 2, vec![0, 0, 0, 0, 0, 0, 0, 0, 9])
        ]
    );
    assert_eq!(o.flows[1].bytes, 42);
}

#[test]
fn options_interface_names_and_sampling() {
    let mut c = Collector::default();
    let mut o = out();
    // IPFIX options template 400: scope ingressInterface, then interfaceName (variable).
    let mut ot = 400u16.to_be_bytes().to_vec();
    ot.extend_from_slice(&[0, 2, 0, 1, 0, 10, 0, 4, 0, 82, 0xff, 0xff]);
    let mut od = 5u32.to_be_bytes().to_vec();
    od.extend_from_slice(&[4, b'e', b't', b'h', b'0']);
    // Options template 401: scope selectorId, samplingPacketInterval 1, space 99 → 1/100.
    let mut st = 401u16.to_be_bytes().to_vec();
    st.extend_from_slice(&[0, 3, 0, 1, 1, 46, 0, 2, 1, 49, 0, 4, 1, 50, 0, 4]);
    let mut sd = 9u16.to_be_bytes().to_vec();
    sd.extend_from_slice(&1u32.to_be_bytes());
    sd.extend_from_slice(&99u32.to_be_bytes());
    let m = ipfix(
        3,
        0,
        &[
            (3, [ot, st].concat()),
            (400, od),
            (401, sd),
            (2, basic_tpl()),
            (256, basic_rec(2, 2, 100)),
        ],
    );
    let s = dec(&mut c, peer(1), &m, 0, &mut o).unwrap();
    assert_eq!((s.option_records, s.flows, s.errors), (2, 1, 0));
    assert_eq!(
        c.interface_names(peer(1))
            .unwrap()
            .get(&5)
            .map(String::as_str),
        Some("eth0")
    );
    assert_eq!(c.sampler_rate(peer(1), 3, 9), Some(100));
    // The only sampler of the domain applies to records that name none.
    assert_eq!(c.sampling_rate(peer(1), 3), 100);
    assert_eq!(
        (o.flows[0].sampling, o.flows[0].packets, o.flows[0].bytes),
        (100, 200, 10_000)
    );
}

#[test]
fn v9_uptime_timestamps_and_v9_scope() {
    let mut c = Collector::default();
    let mut o = out();
    // Data template with FIRST/LAST_SWITCHED.
    let t = tpl(256, &[(8, 4, None), (22, 4, None), (21, 4, None)]);
    let mut rec = vec![1, 1, 1, 1];
    rec.extend_from_slice(&40_000u32.to_be_bytes()); // 60 s before export
    rec.extend_from_slice(&99_000u32.to_be_bytes()); // 1 s before export
                                                     // Options template (v9): scope Interface (2) 4 bytes, IF_NAME (82) 8 bytes.
    let mut ot = 257u16.to_be_bytes().to_vec();
    ot.extend_from_slice(&[0, 4, 0, 4, 0, 2, 0, 4, 0, 82, 0, 8]);
    let mut od = 7u32.to_be_bytes().to_vec();
    od.extend_from_slice(b"Gi0/0/0\0");
    let s = dec(
        &mut c,
        peer(1),
        &v9(1, 0, &[(0, t), (256, rec), (1, ot), (257, od)]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.option_records, s.errors), (1, 1, 0));
    let f = &o.flows[0];
    assert_eq!(
        (f.first_ms, f.last_ms),
        (1_700_000_000_000 - 60_000, 1_700_000_000_000 - 1_000)
    );
    assert_eq!(c.interface_names(peer(1)).unwrap()[&7], "Gi0/0/0");
}

#[test]
fn hostile_sets_are_counted() {
    let mut c = Collector::default();
    let mut o = out();
    let p = peer(1);
    let cases: Vec<Vec<u8>> = vec![
        // Set length below 4.
        raw_ipfix(&[0, 2, 0, 2]),
        // Set length beyond the message.
        raw_ipfix(&[1, 0, 0, 200, 0, 0]),
        // Template with 0 fields in a v9 template flowset.
        v9(1, 0, &[(0, vec![1, 0, 0, 0])]),
        // Template id below 256.
        ipfix(1, 0, &[(2, tpl(5, &[(8, 4, None)]))]),
        // Template whose fields are all zero-length: records of 0 bytes would loop forever.
        ipfix(1, 0, &[(2, tpl(256, &[(8, 0, None), (12, 0, None)]))]),
        // Field count beyond the set.
        ipfix(1, 0, &[(2, vec![1, 0, 0, 50, 0, 8, 0, 4])]),
        // Too many fields.
        ipfix(1, 0, &[(2, tpl(256, &vec![(8, 4, None); 600]))]),
        // Options template with scope count 0, and with scope count > field count.
        ipfix(1, 0, &[(3, vec![1, 0, 0, 1, 0, 0, 0, 8, 0, 4])]),
        ipfix(1, 0, &[(3, vec![1, 0, 0, 1, 0, 2, 0, 8, 0, 4])]),
        // v9 options template with a scope length not a multiple of 4.
        v9(1, 0, &[(1, vec![1, 0, 0, 3, 0, 4, 0, 1, 0, 4, 0, 0])]),
    ];
    for (i, d) in cases.iter().enumerate() {
        let before = c.exporter_stats(p).map_or(0, |s| s.parse_errors);
        let _ = dec(&mut c, p, d, 0, &mut o);
        let after = c.exporter_stats(p).unwrap().parse_errors;
        assert!(after > before, "case {i} not counted: {d:?}");
    }
    assert_eq!(c.exporter_stats(p).unwrap().templates_active, 0);
    assert!(o.flows.is_empty());
}

#[test]
fn truncated_record_in_data_set() {
    let mut c = Collector::default();
    let mut o = out();
    // Variable-length field whose length says 200 in a 10-byte record.
    let t = tpl(256, &[(8, 4, None), (96, 65535, None)]);
    let rec = vec![1, 2, 3, 4, 200, 0, 0, 0, 0, 0];
    let s = dec(
        &mut c,
        peer(1),
        &ipfix(1, 0, &[(2, t), (256, rec)]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((s.flows, s.errors), (0, 1));
}

#[test]
fn header_errors() {
    let mut c = Collector::default();
    let mut o = out();
    assert_eq!(
        dec(&mut c, peer(1), &[0, 5], 0, &mut o),
        Err(DecodeError::Truncated)
    );
    assert_eq!(
        dec(&mut c, peer(1), &[0, 7, 0, 0], 0, &mut o),
        Err(DecodeError::UnsupportedVersion(7))
    );
    assert_eq!(
        dec(&mut c, peer(1), &[0, 0, 0, 4, 0, 0], 0, &mut o),
        Err(DecodeError::UnsupportedVersion(4))
    );
    // IPFIX length larger than the datagram, and below 16.
    let mut m = ipfix(1, 0, &[]);
    m[3] = 200;
    assert_eq!(
        dec(&mut c, peer(1), &m, 0, &mut o),
        Err(DecodeError::Truncated)
    );
    m[3] = 8;
    assert!(matches!(
        dec(&mut c, peer(1), &m, 0, &mut o),
        Err(DecodeError::Malformed(_))
    ));
    // v5 with count 31, and v5 claiming 2 records with one present.
    let mut v5 = vec![0u8; 24 + 48];
    v5[1] = 5;
    v5[3] = 31;
    assert!(matches!(
        dec(&mut c, peer(1), &v5, 0, &mut o),
        Err(DecodeError::Malformed(_))
    ));
    v5[3] = 2;
    let s = dec(&mut c, peer(1), &v5, 0, &mut o).unwrap();
    assert_eq!((s.flows, s.errors), (1, 1));
    // sFlow with a bad address type, and one announcing a million samples.
    assert!(dec(
        &mut c,
        peer(1),
        &[0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 0],
        0,
        &mut o
    )
    .is_err());
    let mut sf = vec![0, 0, 0, 5, 0, 0, 0, 1, 1, 2, 3, 4];
    sf.extend_from_slice(&[0; 12]);
    sf.extend_from_slice(&1_000_000u32.to_be_bytes());
    assert!(dec(&mut c, peer(1), &sf, 0, &mut o).is_err());
    // Sample length beyond the datagram: counted.
    sf.truncate(sf.len() - 4);
    sf.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0]);
    let s = dec(&mut c, peer(1), &sf, 0, &mut o).unwrap();
    assert_eq!(s.errors, 1);
}

#[test]
fn caps_templates_exporters_pending() {
    let cfg = Config {
        max_templates_per_exporter: 10,
        max_exporters: 3,
        max_pending_bytes_per_exporter: 100,
        ..Config::default()
    };
    let mut c = Collector::new(cfg);
    let mut o = out();
    let many: Vec<u8> = (256..300).flat_map(|id| tpl(id, &[(8, 4, None)])).collect();
    let _ = dec(&mut c, peer(1), &ipfix(1, 0, &[(2, many)]), 0, &mut o);
    let st = c.exporter_stats(peer(1)).unwrap();
    assert_eq!(st.templates_active, 10);
    assert!(st.templates_rejected > 0);
    // Pending: 3 sets of 60 bytes against a 100-byte buffer.
    for _ in 0..3 {
        dec(
            &mut c,
            peer(1),
            &ipfix(1, 0, &[(999, vec![0; 60])]),
            0,
            &mut o,
        )
        .unwrap();
    }
    let st = c.exporter_stats(peer(1)).unwrap();
    assert_eq!((st.no_template_sets, st.pending_dropped_sets), (3, 2));
    for n in 2..=5 {
        dec(&mut c, peer(n), &ipfix(1, 0, &[]), n as u64, &mut o).unwrap();
    }
    assert_eq!(c.stats().count(), 3);
    assert_eq!(c.evicted_exporters(), 2);
    assert!(c.exporter_stats(peer(1)).is_none());
}

#[test]
fn ipfix_stream_framing() {
    let m1 = ipfix(1, 0, &[(2, basic_tpl())]);
    let m2 = ipfix(1, 0, &[(256, basic_rec(2, 1, 1))]);
    let all = [m1.clone(), m2.clone()].concat();
    let mut s = IpfixStream::default();
    s.push(&all[..5]).unwrap();
    assert_eq!(s.next_message(), Ok(None));
    s.push(&all[5..]).unwrap();
    assert_eq!(s.next_message().unwrap(), Some(&m1[..]));
    assert_eq!(s.next_message().unwrap(), Some(&m2[..]));
    assert_eq!(s.next_message(), Ok(None));
    // Garbage: the stream fails for good.
    s.push(&[0, 9, 0, 20]).unwrap();
    assert!(matches!(
        s.next_message(),
        Err(StreamError::BadHeader { version: 9, .. })
    ));
    assert!(s.push(&m1).is_err());
    // Overflow.
    let mut s = IpfixStream::new(0);
    assert!(s.push(&vec![0; 70_000]).is_err());
}

#[test]
fn random_bytes_never_panic() {
    let mut c = Collector::new(Config {
        max_exporters: 8,
        ..Config::default()
    });
    let mut o = out();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let heads: [&[u8]; 5] = [&[0, 5], &[0, 9], &[0, 10], &[0, 0, 0, 5], &[]];
    for i in 0..20_000u64 {
        let len = (next() % 1500) as usize;
        let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let h = heads[(next() % 5) as usize];
        for (j, b) in h.iter().enumerate() {
            if j < d.len() {
                d[j] = *b;
            }
        }
        // Plausible IPFIX lengths and small set ids more often.
        if h == [0, 10] && d.len() >= 20 {
            let n = d.len() as u16;
            d[2..4].copy_from_slice(&n.to_be_bytes());
            d[16] = 0;
            d[17] = (next() % 4) as u8;
        }
        let p = peer((next() % 12) as u8);
        let _ = dec(&mut c, p, &d, i, &mut o);
        o.flows.clear();
        o.samples.clear();
    }
    assert!(c.stats().count() <= 8);
}

/// An sFlow v5 datagram of one flow sample (rate 512) with these flow records, each
/// (format, body).
fn sflow_datagram(records: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let be = |v: u32| v.to_be_bytes();
    let mut body = Vec::new();
    for v in [7, 3, 512, 1000, 0, 1, 2, records.len() as u32] {
        body.extend_from_slice(&be(v));
    }
    for (format, data) in records {
        body.extend_from_slice(&be(*format));
        body.extend_from_slice(&be(data.len() as u32));
        body.extend_from_slice(data);
    }
    let mut d = Vec::new();
    for v in [5, 1] {
        d.extend_from_slice(&be(v));
    }
    d.extend_from_slice(&[192, 0, 2, 9]);
    for v in [0, 1, 1000, 1, 1, body.len() as u32] {
        d.extend_from_slice(&be(v));
    }
    d.extend_from_slice(&body);
    d
}

#[test]
fn sflow_extended_gateway_gives_the_samples_as_numbers() {
    let be = |v: &[u32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    // Raw header record: Ethernet, frame 60, 0 stripped, a 4-byte header (enough here).
    let mut raw = be(&[1, 60, 0, 4]);
    raw.extend_from_slice(&[1, 2, 3, 4]);
    // Gateway: next hop IPv4, router AS 64500, source AS 15169, peer AS 3356, a path of two
    // segments (AS_SEQUENCE 3356 2914; AS_SET 64512 65001): the destination AS is the last.
    let mut gw = be(&[1]);
    gw.extend_from_slice(&[198, 51, 100, 1]);
    gw.extend(be(&[
        64500, 15169, 3356, 2, 2, 2, 3356, 2914, 1, 2, 64512, 65001, 0, 100,
    ]));
    let mut c = Collector::new(Config::default());
    for records in [
        vec![(1, raw.clone()), (1003, gw.clone())],
        vec![(1003, gw.clone()), (1, raw.clone())],
    ] {
        let mut o = out();
        dec(&mut c, peer(1), &sflow_datagram(&records), 0, &mut o).unwrap();
        assert_eq!(o.samples.len(), 1);
        let s = &o.samples[0];
        assert_eq!((s.src_as, s.dst_as, s.sampling), (15169, 65001, 512));
    }
    // An IPv6 next hop and an empty path: no destination AS.
    let mut gw6 = be(&[2]);
    gw6.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    gw6.extend(be(&[64500, 64501, 0, 0, 0, 0]));
    let mut o = out();
    dec(
        &mut c,
        peer(1),
        &sflow_datagram(&[(1, raw.clone()), (1003, gw6)]),
        0,
        &mut o,
    )
    .unwrap();
    assert_eq!((o.samples[0].src_as, o.samples[0].dst_as), (64501, 0));
    // A damaged gateway record (cut inside the path; an unknown next-hop type) gives none.
    for bad in [gw[..gw.len() - 20].to_vec(), be(&[7, 0, 0])] {
        let mut o = out();
        dec(
            &mut c,
            peer(1),
            &sflow_datagram(&[(1, raw.clone()), (1003, bad)]),
            0,
            &mut o,
        )
        .unwrap();
        assert_eq!((o.samples[0].src_as, o.samples[0].dst_as), (0, 0));
    }
    // Without one, no AS numbers.
    let mut o = out();
    dec(&mut c, peer(1), &sflow_datagram(&[(1, raw)]), 0, &mut o).unwrap();
    assert_eq!((o.samples[0].src_as, o.samples[0].dst_as), (0, 0));
}
