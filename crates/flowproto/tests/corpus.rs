//! Replays the flow-export captures of the shared corpus through the decoder and checks every
//! record against an independent decoder (Wireshark) and, for the pmacct captures, against
//! pmacct's expected output.
//!
//! * Corpus: `<repo>/../shared/corpus/{flowproto,ndpi}` (override the root with
//!   `SONDE_CORPUS_ROOT`). Missing corpus fails the test: nothing is skipped.
//! * `testdata/tshark_records.tsv`: every flow record and sFlow packet sample as tshark 4.0.17
//!   decodes them, written by `testdata/tshark_records.py`.
//! * Record counts below were taken with tshark; each says the command.

use std::collections::HashMap;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use sonde_flowproto::decode::{Collector, Config, ExporterStats, IpfixStream, Protocol};
use sonde_flowproto::{CollectedFlow, SampledPacket};

fn corpus_root() -> PathBuf {
    let root = std::env::var_os("SONDE_CORPUS_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"));
    assert!(
        root.join("flowproto/README.md").is_file() && root.join("ndpi/sflow.pcap").is_file(),
        "flow-export corpus missing at {} (set SONDE_CORPUS_ROOT): this test must not be skipped",
        root.display()
    );
    root
}

fn flowproto(name: &str) -> PathBuf {
    corpus_root().join("flowproto").join(name)
}

fn ndpi(name: &str) -> PathBuf {
    corpus_root().join("ndpi").join(name)
}

/// A classic pcap file (Ethernet link type) → UDP datagrams with their source address.
fn udp_datagrams(path: &Path) -> Vec<(SocketAddr, Vec<u8>)> {
    let b = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: not a pcap", path.display());
    let le = match &b[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("{}: not a classic pcap file", path.display()),
    };
    let u32_at = |s: &[u8], o: usize| {
        let a = [s[o], s[o + 1], s[o + 2], s[o + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    assert_eq!(
        u32_at(&b, 20),
        1,
        "{}: link type is not Ethernet",
        path.display()
    );
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= b.len() {
        let incl = u32_at(&b, off + 8) as usize;
        let frame = &b[off + 16..off + 16 + incl];
        off += 16 + incl;
        let be16 = |o: usize| u16::from_be_bytes([frame[o], frame[o + 1]]);
        let mut p = 12;
        let mut ethertype = be16(p);
        while ethertype == 0x8100 || ethertype == 0x88a8 {
            p += 4;
            ethertype = be16(p);
        }
        p += 2;
        let (src, l4) = match ethertype {
            0x0800 => {
                let ihl = (frame[p] & 0x0f) as usize * 4;
                assert_eq!(frame[p + 9], 17, "{}: not UDP", path.display());
                let a: [u8; 4] = frame[p + 12..p + 16].try_into().unwrap();
                let total = be16(p + 2) as usize;
                (IpAddr::V4(Ipv4Addr::from(a)), &frame[p + ihl..p + total])
            }
            0x86dd => {
                assert_eq!(frame[p + 6], 17, "{}: not UDP", path.display());
                let a: [u8; 16] = frame[p + 8..p + 24].try_into().unwrap();
                let plen = be16(p + 4) as usize;
                (IpAddr::V6(Ipv6Addr::from(a)), &frame[p + 40..p + 40 + plen])
            }
            t => panic!("{}: ethertype {t:#x}", path.display()),
        };
        let sport = u16::from_be_bytes([l4[0], l4[1]]);
        let ulen = u16::from_be_bytes([l4[4], l4[5]]) as usize;
        out.push((SocketAddr::new(src, sport), l4[8..ulen].to_vec()));
    }
    out
}

struct Run {
    collector: Collector,
    flows: Vec<CollectedFlow>,
    samples: Vec<SampledPacket>,
    exporters: Vec<SocketAddr>,
}

impl Run {
    fn new() -> Self {
        Run {
            collector: Collector::default(),
            flows: Vec::new(),
            samples: Vec::new(),
            exporters: Vec::new(),
        }
    }

    /// Feeds every datagram of `path`; every one must decode without a datagram-level error
    /// and without any counted error.
    fn feed(&mut self, path: &Path) -> &mut Self {
        for (i, (peer, d)) in udp_datagrams(path).into_iter().enumerate() {
            let s = self
                .collector
                .decode(
                    peer,
                    &d,
                    1_000_000 + i as u64,
                    &mut self.flows,
                    &mut self.samples,
                )
                .unwrap_or_else(|e| panic!("{} datagram {}: {e}", path.display(), i + 1));
            assert_eq!(s.errors, 0, "{} datagram {}: {s:?}", path.display(), i + 1);
            if !self.exporters.contains(&peer) {
                self.exporters.push(peer);
            }
        }
        self
    }

    fn stats(&self) -> &ExporterStats {
        assert_eq!(self.exporters.len(), 1, "one exporter expected");
        self.collector.exporter_stats(self.exporters[0]).unwrap()
    }
}

/// Rows of testdata/tshark_records.tsv for one job.
fn tshark_rows(kind: &str, name: &str) -> Vec<Vec<String>> {
    let tsv = include_str!("testdata/tshark_records.tsv");
    let rows: Vec<Vec<String>> = tsv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').map(str::to_string).collect::<Vec<_>>())
        .filter(|c| c[0] == kind && c[1] == name)
        .collect();
    assert!(!rows.is_empty(), "no tshark rows for {name}");
    rows
}

fn addr(f: &CollectedFlow, a: &[u8; 16]) -> IpAddr {
    if f.ip_version == 6 {
        IpAddr::V6(Ipv6Addr::from(*a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

/// The flow as a tshark row: src dst sport dport proto packets octets rev_packets rev_octets
/// in_if out_if, counters divided back by the sampling rate.
fn as_row(f: &CollectedFlow) -> Vec<String> {
    let s = f.sampling.max(1) as u64;
    vec![
        addr(f, &f.src).to_string(),
        addr(f, &f.dst).to_string(),
        f.sport.to_string(),
        f.dport.to_string(),
        f.proto.to_string(),
        (f.packets / s).to_string(),
        (f.bytes / s).to_string(),
        (f.rev_packets / s).to_string(),
        (f.rev_bytes / s).to_string(),
        f.in_if.to_string(),
        f.out_if.to_string(),
    ]
}

/// Every tshark row of `name` matches, in order, a decoded flow (tshark may decode fewer: it
/// does not decode a data set that precedes its template).
fn check_against_tshark(name: &str, flows: &[CollectedFlow]) {
    let rows = tshark_rows("flow", name);
    let mut it = flows.iter();
    for row in &rows {
        let want = &row[3..14];
        let found = it.by_ref().any(|f| {
            let got = as_row(f);
            // Interfaces: tshark prints InputInt/OutputInt only for the v9 names (10/14).
            got[..9] == want[..9]
                && (want[9] == "0" || got[9] == want[9])
                && (want[10] == "0" || got[10] == want[10])
        });
        assert!(
            found,
            "{name}: tshark record {want:?} (frame {}) not decoded in order",
            row[2]
        );
    }
}

#[test]
fn netflow_v5() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_nfv5.pcap"));
    // tshark -r akvorado_netflow_nfv5.pcap -d udp.port==9990,cflow -T fields -e cflow.count → 29
    assert_eq!(r.flows.len(), 29);
    assert_eq!(r.stats().records, 29);
    check_against_tshark("nfv5", &r.flows);
    let f = &r.flows[0];
    // tshark -V, pdu 1/29: 161.202.212.212:30104 → 202.152.70.24:11963 TCP, 1 packet, 133
    // octets, InputInt 117, OutputInt 86, TCP flags 0x18, SrcAS 36351.
    assert_eq!(
        (f.ip_version, &f.src[..4], &f.dst[..4]),
        (4, &[161, 202, 212, 212][..], &[202, 152, 70, 24][..])
    );
    assert_eq!(
        (f.sport, f.dport, f.proto, f.packets, f.bytes),
        (30104, 11963, 6, 1, 133)
    );
    assert_eq!(
        (f.in_if, f.out_if, f.tcp_flags, f.sampling),
        (117, 86, 0x18, 1)
    );
    assert!(f.extra.contains(&(0, 16, 36351u16.to_be_bytes().to_vec())));
    // EngineId 3 (README); the domain is engine type << 8 | engine id.
    assert_eq!(f.domain & 0xff, 3);
    assert!(
        f.first_ms > 1_000_000_000_000 && f.first_ms <= f.last_ms,
        "{f:?}"
    );
}

#[test]
fn netflow_v9_data_before_template_same_packet() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_data+templates.pcap"));
    // tshark -V: Count 24 = options template 256 + 1 options record + data template 257 + 10
    // flows in set 5 + set 1 (660 bytes of template 257, 60-byte records: 11 flows) that
    // tshark shows as "no template found" because it precedes the template in the packet.
    let st = r.stats();
    assert_eq!(st.templates_received, 2);
    assert_eq!(st.option_records, 1);
    assert_eq!(st.no_template_sets, 1);
    assert_eq!(st.pending_decoded_sets, 1);
    assert_eq!(r.flows.len(), 21);
    assert_eq!(st.records, 21);
    // The options record says SAMPLING_INTERVAL 100 (scope System): every flow scaled by 100.
    assert!(
        r.flows.iter().all(|f| f.sampling == 100),
        "{:?}",
        r.flows[0]
    );
    check_against_tshark("data+templates", &r.flows[11..]);
    // tshark, set 5 flow 1: 120.120.180.202:443 → 120.120.147.170:53744, 1 packet, 436 octets.
    let f = &r.flows[11];
    assert_eq!(
        (f.sport, f.dport, f.packets, f.bytes),
        (443, 53744, 100, 43600)
    );
    assert_eq!(f.domain, 17170432);
}

#[test]
fn netflow_v9_split_templates_options_sampler() {
    let mut r = Run::new();
    for f in [
        "akvorado_netflow_template.pcap",
        "akvorado_netflow_options-template.pcap",
        "akvorado_netflow_options-data.pcap",
        "akvorado_netflow_data.pcap",
    ] {
        r.feed(&flowproto(f));
    }
    let st = r.stats().clone();
    // tshark on the four files joined (mergecap -a): 4 options records (sampler 1, random
    // 1/30000), then 4 flows of template 260.
    assert_eq!(
        (st.records, st.option_records, st.templates_received),
        (4, 4, 2)
    );
    assert_eq!(r.collector.sampler_rate(r.exporters[0], 0, 1), Some(30000));
    assert!(r.flows.iter().all(|f| f.sampling == 30000));
    check_against_tshark("split-v9", &r.flows);
    // Sequence numbers (tshark: "expected 44796986, got 44796855", then "expected 44796857, got
    // 44797001"): one reset, then 144 export packets missing.
    assert_eq!(st.sequence_resets, 1);
    assert_eq!(st.lost_packets, 144);
}

#[test]
fn ipfix_biflow_split_templates() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_ipfixprobe-templates.pcap"));
    assert_eq!(r.stats().templates_received, 2);
    r.feed(&flowproto("akvorado_netflow_ipfixprobe-data.pcap"));
    assert_eq!(r.flows.len(), 4);
    check_against_tshark("split-ipfixprobe", &r.flows);
    // tshark, flow 1: 10.10.1.4:56166 → 10.10.1.1:53 UDP, 62 octets / 1 packet, reverse 128 / 1,
    // StartTime Oct 5, 2009 06:06:07.492 UTC, EndTime 06:06:07.526 (flowStart/EndMicroseconds),
    // MACs 00:e0:1c:3c:17:c2 → 00:1f:33:d9:81:60.
    let f = &r.flows[0];
    assert_eq!((f.rev_packets, f.rev_bytes), (1, 128));
    assert_eq!(
        (f.first_ms, f.last_ms),
        (1_254_722_767_492, 1_254_722_767_526)
    );
    assert_eq!(f.src_mac, Some([0x00, 0xe0, 0x1c, 0x3c, 0x17, 0xc2]));
    assert_eq!(f.dst_mac, Some([0x00, 0x1f, 0x33, 0xd9, 0x81, 0x60]));
    // flowEndReason 4 (forced end) is kept by number.
    assert!(f.extra.contains(&(0, 136, vec![4])));
}

#[test]
fn netflow_v9_nat() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_nat.pcap"));
    // tshark -V: 9 flows in data set 264.
    assert_eq!(r.flows.len(), 9);
    assert_eq!(r.stats().templates_received, 4);
    check_against_tshark("nat", &r.flows);
    // NAT elements are kept by number: postNATSourceIPv4Address (225), natEvent (230).
    assert!(r
        .flows
        .iter()
        .all(|f| f.extra.iter().any(|e| e.1 == 225 && e.2.len() == 4)));
    assert!(r.flows.iter().all(|f| f.extra.iter().any(|e| e.1 == 230)));
}

#[test]
fn ipfix_physical_interfaces_and_sampling_option() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_physicalinterfaces.pcap"));
    // tshark -V: 9 records: 1 options record (template 50710) and 8 flows (template 1910).
    let st = r.stats();
    assert_eq!((st.records, st.option_records), (8, 1));
    check_against_tshark("physicalinterfaces", &r.flows);
    // Options: samplingPacketInterval 1, samplingPacketSpace 999 → 1 in 1000 (tshark -V).
    assert!(
        r.flows.iter().all(|f| f.sampling == 1000),
        "{:?}",
        r.flows[0].sampling
    );
    let f = &r.flows[0];
    assert!(f.in_if != 0 && f.src_mac.is_some() && f.vlan != 0, "{f:?}");
}

#[test]
fn ipfix_mpls_ipv6() {
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_netflow_mpls.pcap"));
    let st = r.stats();
    // tshark -V: 3 records: 1 options record and 2 IPv6 flows.
    assert_eq!((st.records, st.option_records), (2, 1));
    check_against_tshark("mpls", &r.flows);
    assert!(r.flows.iter().all(|f| f.ip_version == 6));
}

/// A pmacct output-flow JSON line's field, as text (the files are one flat object per line).
fn json_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("\"{key}\": ");
    let start = line.find(&k)? + k.len();
    let rest = &line[start..];
    if let Some(s) = rest.strip_prefix('"') {
        s.find('"').map(|e| &s[..e])
    } else {
        let e = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..e].trim())
    }
}

type Key = (String, String, u16, u16, u32, u32);

/// pmacct's expected output summed by (src, dst, sport, dport, iface_in, iface_out).
fn pmacct_totals(file: &str) -> HashMap<Key, (u64, u64)> {
    let text = fs::read_to_string(flowproto(file)).unwrap();
    let mut m: HashMap<Key, (u64, u64)> = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let g = |k| json_field(line, k).unwrap_or_else(|| panic!("{file}: no {k} in {line}"));
        let key = (
            g("ip_src").to_string(),
            g("ip_dst").to_string(),
            g("port_src").parse().unwrap(),
            g("port_dst").parse().unwrap(),
            g("iface_in").parse().unwrap(),
            g("iface_out").parse().unwrap(),
        );
        let e = m.entry(key).or_default();
        e.0 += g("packets").parse::<u64>().unwrap();
        e.1 += g("bytes").parse::<u64>().unwrap();
    }
    m
}

fn our_totals(flows: &[CollectedFlow]) -> HashMap<Key, (u64, u64)> {
    let mut m: HashMap<Key, (u64, u64)> = HashMap::new();
    for f in flows {
        let key = (
            addr(f, &f.src).to_string(),
            addr(f, &f.dst).to_string(),
            f.sport,
            f.dport,
            f.in_if,
            f.out_if,
        );
        let e = m.entry(key).or_default();
        e.0 += f.packets;
        e.1 += f.bytes;
    }
    m
}

fn assert_same_totals(
    name: &str,
    ours: HashMap<Key, (u64, u64)>,
    pmacct: HashMap<Key, (u64, u64)>,
) {
    let mut a: Vec<_> = ours.into_iter().collect();
    let mut b: Vec<_> = pmacct.into_iter().collect();
    a.sort();
    b.sort();
    assert_eq!(
        a, b,
        "{name}: decoded totals differ from pmacct's expected output"
    );
}

#[test]
fn pmacct_100_ipfix_cisco() {
    let mut r = Run::new();
    r.feed(&flowproto("pmacct_100-IPFIXv10-CISCO_traffic-00.pcap"));
    // tshark -V -d udp.port==9991,cflow: 12 flows, templates 260 and 263 in two domains.
    assert_eq!(r.flows.len(), 12);
    // Two exporting processes (UDP source ports 50109 and 50111), one domain and template each.
    assert_eq!(r.exporters.len(), 2);
    for (_, st) in r.collector.stats() {
        assert_eq!(
            (st.templates_received, st.no_template_sets, st.lost_records),
            (1, 0, 0),
            "{st:?}"
        );
    }
    check_against_tshark("pmacct100", &r.flows);
    assert_same_totals(
        "pmacct100",
        our_totals(&r.flows),
        pmacct_totals("pmacct_100-IPFIXv10-CISCO_output-flow-00.json"),
    );
    // Records carry both IPv4 and IPv6 address fields, the unused family zero: tshark shows 8
    // IPv4 flows and 4 IPv6 ones.
    assert_eq!(r.flows.iter().filter(|f| f.ip_version == 4).count(), 8);
    assert_eq!(r.flows.iter().filter(|f| f.ip_version == 6).count(), 4);
    assert!(r
        .flows
        .iter()
        .all(|f| f.first_ms > 1_600_000_000_000 && f.first_ms <= f.last_ms));
    let doms: std::collections::BTreeSet<u32> = r.flows.iter().map(|f| f.domain).collect();
    assert!(
        doms.iter().all(|d| [851968, 917504].contains(d)),
        "{doms:?}"
    );
}

#[test]
fn pmacct_101_netflow_v9_cisco() {
    let mut r = Run::new();
    r.feed(&flowproto(
        "pmacct_101-NFv9-CISCO-cust_primitives_traffic-00.pcap",
    ));
    // tshark -V -d udp.port==9991,cflow: 51 flows in 39 data flowsets.
    assert_eq!(r.flows.len(), 51);
    assert_eq!(r.stats().datagrams, 40);
    check_against_tshark("pmacct101", &r.flows);
    assert_same_totals(
        "pmacct101",
        our_totals(&r.flows),
        pmacct_totals("pmacct_101-NFv9-CISCO-cust_primitives_output-flow-00.json"),
    );
    // pmacct: 138.187.58.13:10000 → 138.187.57.33:58779, timestamp_start 1677577599 (whole
    // seconds; the header's unix_secs is truncated, so ours may be up to 1 s earlier).
    let f = r
        .flows
        .iter()
        .find(|f| f.sport == 10000 && f.dport == 58779)
        .unwrap();
    assert!(
        f.first_ms.abs_diff(1_677_577_599_000) < 1000,
        "{}",
        f.first_ms
    );
}

#[test]
fn pmacct_104_ipfix_ipv6_sampling_option() {
    let mut r = Run::new();
    r.feed(&flowproto(
        "pmacct_104-IPFIXv10-IPv6-CISCO-sampling_option_traffic-00.pcap",
    ));
    let st = r.stats();
    // tshark -V -d udp.port==9992,cflow: options template 257, 1 options record (selector 1,
    // samplingSize 1, samplingPopulation 256), data templates 339–342, 3 flows.
    assert_eq!(
        (st.records, st.option_records, st.templates_received),
        (3, 1, 5)
    );
    assert_eq!(r.collector.sampler_rate(r.exporters[0], 0, 1), Some(256));
    assert!(r
        .flows
        .iter()
        .all(|f| f.sampling == 256 && f.ip_version == 6));
    check_against_tshark("pmacct104", &r.flows);
    // pmacct renormalises too: its JSON has 256 packets / 18432 bytes for the first flow.
    assert_same_totals(
        "pmacct104",
        our_totals(&r.flows),
        pmacct_totals("pmacct_104-IPFIXv10-IPv6-CISCO-sampling_option_output-flow-00.json"),
    );
}

#[test]
fn pmacct_111_mixed_sources() {
    let mut r = Run::new();
    r.feed(&flowproto(
        "pmacct_111-IPFIXv10-NFv9-IPv6-IPv4-mix_sources_traffic-00.pcap",
    ));
    // tshark -V -d udp.port==9991,cflow: 11 flows (NetFlow v9 over IPv4).
    assert_eq!(r.flows.len(), 11);
    check_against_tshark("pmacct111-00", &r.flows);
    let n = r.flows.len();
    r.feed(&flowproto(
        "pmacct_111-IPFIXv10-NFv9-IPv6-IPv4-mix_sources_traffic-01.pcap",
    ));
    // tshark -V -d udp.port==9991,cflow: 13 flows (IPFIX over IPv6).
    assert_eq!(r.flows.len() - n, 13);
    check_against_tshark("pmacct111-01", &r.flows[n..]);
    assert_eq!(r.exporters.len(), 2);
    assert_same_totals(
        "pmacct111",
        our_totals(&r.flows),
        pmacct_totals("pmacct_111-IPFIXv10-NFv9-IPv6-IPv4-mix_sources_output-flow-00.json"),
    );
}

#[test]
fn ndpi_netflow_v9_without_templates() {
    let mut r = Run::new();
    r.feed(&ndpi("netflowv9.pcap"));
    // tshark -r netflowv9.pcap -d udp.port==2057,cflow -T fields -e cflow.flowset_id: 23 data
    // flowsets in 10 packets, all "no template found"; sequence 376415880..376415889.
    let st = r.stats();
    assert_eq!((st.datagrams, st.no_template_sets, st.records), (10, 23, 0));
    assert_eq!((st.lost_packets, st.sequence_resets), (0, 0));
    assert!(r.flows.is_empty());
}

#[test]
fn ndpi_ipfix_templates_only() {
    let mut r = Run::new();
    r.feed(&ndpi("netflow-fritz.pcap"));
    // tshark -r netflow-fritz.pcap -d udp.port==2055,cflow -T fields -e cflow.template_id
    // → 461,466,467 (a data template and two options templates), domain 262400.
    let st = r.stats();
    assert_eq!(
        (st.templates_received, st.templates_active, st.records),
        (3, 3, 0)
    );
    let t = r.collector.templates(r.exporters[0]);
    assert_eq!(
        t.iter().map(|t| (t.1, t.2, t.4)).collect::<Vec<_>>(),
        vec![
            (262400, 461, false),
            (262400, 466, true),
            (262400, 467, true)
        ]
    );
}

fn check_sflow(name: &str, samples: &[SampledPacket]) {
    let rows = tshark_rows("sflow", name);
    assert_eq!(samples.len(), rows.len(), "{name}: sample count");
    for (s, row) in samples.iter().zip(&rows) {
        let num = |t: &str| -> u32 {
            match t.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).unwrap(),
                None => t.parse().unwrap(),
            }
        };
        let iface = |t: &str| {
            let v = num(t);
            // For compact samples tshark prints the 32-bit value in hex; its top two bits are a
            // format (0: ifIndex). Expanded samples: the value in decimal, format apart.
            if !t.starts_with("0x") || v >> 30 == 0 {
                v
            } else {
                0
            }
        };
        assert_eq!(s.sampling, num(&row[3]), "{name}: rate");
        assert_eq!(s.in_if, iface(&row[4]), "{name}: input");
        assert_eq!(s.out_if, iface(&row[5]), "{name}: output");
        assert_eq!(s.header_protocol, num(&row[6]), "{name}: header protocol");
        assert_eq!(s.frame_length, num(&row[7]), "{name}: frame length");
        // tshark's field includes the XDR padding after the sampled header.
        let hex: String = s.header.iter().map(|b| format!("{b:02x}")).collect();
        assert!(
            row[8].starts_with(&hex) && row[8].len() - hex.len() < 8,
            "{name}: header bytes {hex} vs {}",
            row[8]
        );
    }
}

#[test]
fn sflow_akvorado() {
    for (file, name, n) in [
        // tshark -T fields -e sflow_245.numsamples: 5, 1, 1, 1, 1, 2 flow samples.
        ("akvorado_sflow_data-1140.pcap", "sflow-1140", 5),
        ("akvorado_sflow_data-encap-vxlan.pcap", "sflow-vxlan", 1),
        ("akvorado_sflow_data-icmpv6.pcap", "sflow-icmpv6", 1),
        ("akvorado_sflow_data-qinq.pcap", "sflow-qinq", 1),
        (
            "akvorado_sflow_data-sflow-expanded-sample.pcap",
            "sflow-expanded",
            1,
        ),
        (
            "akvorado_sflow_data-sflow-raw-ipv4.pcap",
            "sflow-raw-ipv4",
            2,
        ),
    ] {
        let mut r = Run::new();
        r.feed(&flowproto(file));
        assert_eq!(r.samples.len(), n, "{file}");
        assert_eq!(r.stats().flow_samples, n as u64, "{file}");
        check_sflow(name, &r.samples);
    }
    let mut r = Run::new();
    r.feed(&flowproto("akvorado_sflow_data-1140.pcap"));
    assert_eq!(
        r.collector.sflow_agent(r.exporters[0]),
        Some(IpAddr::V4(Ipv4Addr::new(172, 16, 0, 3)))
    );
}

#[test]
fn sflow_ndpi_counters() {
    let mut r = Run::new();
    r.feed(&ndpi("sflow.pcap"));
    // tshark -r sflow.pcap -T fields -e sflow_245.sampletype -e sflow_245.sequence_number:
    // 9 datagrams, sequence 415..423, one sample each: 8 counter samples, 1 flow sample (frame 4).
    let st = r.stats();
    assert_eq!(
        (
            st.datagrams,
            st.counter_samples,
            st.flow_samples,
            st.packet_samples
        ),
        (9, 8, 1, 1)
    );
    assert_eq!((st.if_counter_records, st.lost_datagrams), (8, 0));
    check_sflow("sflow-ndpi", &r.samples);
    // tshark -V, last counter samples: ifIndex 1036 in 25980564 / out 5472352 octets (frame 8),
    // ifIndex 1043 in 50963330 / out 102605777 (frame 9).
    let c = r.collector.interface_counters(r.exporters[0]).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(
        (c[&1036].in_octets, c[&1036].out_octets),
        (25980564, 5472352)
    );
    assert_eq!(
        (c[&1043].in_octets, c[&1043].out_octets),
        (50963330, 102605777)
    );
}

#[test]
fn ipfix_over_tcp_stream() {
    // The IPFIX messages of pmacct_100, as one TCP byte stream cut into odd chunks.
    let msgs = udp_datagrams(&flowproto("pmacct_100-IPFIXv10-CISCO_traffic-00.pcap"));
    let stream: Vec<u8> = msgs.iter().flat_map(|m| m.1.clone()).collect();
    let peer: SocketAddr = "192.0.2.9:4739".parse().unwrap();
    let mut c = Collector::default();
    let mut s = IpfixStream::default();
    let (mut flows, mut samples) = (Vec::new(), Vec::new());
    let mut n = 0;
    for chunk in stream.chunks(37) {
        s.push(chunk).unwrap();
        while let Some(m) = s.next_message().unwrap() {
            let sum = c.decode(peer, m, 0, &mut flows, &mut samples).unwrap();
            assert_eq!(sum.protocol, Some(Protocol::Ipfix));
            n += 1;
        }
    }
    assert_eq!((n, flows.len(), s.buffered()), (msgs.len(), 12, 0));
}

/// Every prefix and every single-bit flip of every corpus datagram, through a collector that
/// has seen the file's templates: no panic, and the caps hold.
#[test]
fn no_panic_on_mutated_corpus() {
    let mut files: Vec<PathBuf> = fs::read_dir(corpus_root().join("flowproto"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.extend(["netflowv9.pcap", "netflow-fritz.pcap", "sflow.pcap"].map(ndpi));
    assert_eq!(files.len(), 25);
    let (mut flows, mut samples) = (Vec::new(), Vec::new());
    let mut decodes = 0u64;
    for file in &files {
        let dgrams = udp_datagrams(file);
        let mut c = Collector::new(Config {
            max_templates_per_exporter: 64,
            ..Config::default()
        });
        for (peer, d) in &dgrams {
            let _ = c.decode(*peer, d, 0, &mut flows, &mut samples);
        }
        for (peer, d) in &dgrams {
            for n in 0..d.len() {
                let _ = c.decode(*peer, &d[..n], 0, &mut flows, &mut samples);
                decodes += 1;
            }
            let mut m = d.clone();
            for bit in 0..d.len() * 8 {
                m[bit / 8] ^= 1 << (bit % 8);
                let _ = c.decode(*peer, &m, 0, &mut flows, &mut samples);
                m[bit / 8] ^= 1 << (bit % 8);
                decodes += 1;
            }
            flows.clear();
            samples.clear();
        }
        for (_, st) in c.stats() {
            assert!(st.templates_active <= 64, "{}: {st:?}", file.display());
        }
    }
    assert!(decodes > 100_000, "{decodes}");
}
