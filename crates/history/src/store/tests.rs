use super::*;
use crate::query;
use sonde_flow::{EndReason, Flow, FlowKey};

fn record(i: u32) -> FlowRecord {
    let mut key = FlowKey {
        proto: if i.is_multiple_of(3) { 17 } else { 6 },
        ip_version: 4,
        port_a: 1024 + (i % 50_000) as u16,
        port_b: if i.is_multiple_of(2) { 443 } else { 53 },
        ..FlowKey::default()
    };
    key.addr_a[..4].copy_from_slice(&(0x0a00_0000 + i).to_be_bytes());
    key.addr_b[..4].copy_from_slice(&(0xc0a8_0000 + i % 100).to_be_bytes());
    let t = 1_700_000_000_000_000_000 + i as u64 * 1_000_000_000;
    let flow = Flow {
        key,
        first_ns: t,
        last_ns: t + 500_000_000,
        pkts: [i as u64 % 7 + 1, 2],
        bytes: [1000 + i as u64, 200],
        ..Flow::default()
    };
    FlowRecord {
        flow,
        ext: Default::default(),
        reason: EndReason::IdleTimeout,
        meta: None,
        exporter: None,
    }
}

fn json(r: &FlowRecord) -> String {
    let mut w = sonde_export::FlowWriter::new(Vec::new(), sonde_export::Format::Json);
    w.write(r).unwrap();
    String::from_utf8(w.into_inner()).unwrap()
}

fn all(dir: &Path) -> Vec<FlowRecord> {
    let reader = FlowReader::open(dir).unwrap();
    query::flows(&reader, &Filter::default(), 0, usize::MAX)
        .unwrap()
        .0
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-history-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

#[test]
fn appended_records_read_back_identically() {
    let dir = tmp("roundtrip");
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    let n = BLOCK_RECORDS as u32 * 2 + 17;
    for i in 0..n {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    assert_eq!(s.checkpointed, n as u64);
    let back = all(&dir);
    assert_eq!(back.len(), n as usize);
    for (i, r) in back.iter().enumerate() {
        assert_eq!(json(r), json(&record(i as u32)));
    }
    // Reopening for writing appends after what is there.
    drop(s);
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    assert_eq!(s.recovered_torn_bytes, 0);
    s.append(&record(n)).unwrap();
    s.checkpoint().unwrap();
    assert_eq!(all(&dir).len(), n as usize + 1);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_tail_is_cut_off_and_checkpointed_records_survive() {
    let dir = tmp("torn");
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    for i in 0..1000 {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    let seg = s.segments().last().unwrap().path.clone();
    drop(s);
    // A block header and half a body: what a kill -9 in the middle of a write leaves.
    let good = fs::metadata(&seg).unwrap().len();
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&BLOCK_MAGIC.to_le_bytes()).unwrap();
    f.write_all(&(100_000u32).to_le_bytes()).unwrap();
    f.write_all(&[7u8; 5000]).unwrap();
    drop(f);
    // A reader of a running instance stops before it, without error.
    assert_eq!(all(&dir).len(), 1000);
    let s = FlowStore::open(&dir, Retention::default()).unwrap();
    assert_eq!(s.recovered_torn_bytes, 5008);
    assert_eq!(fs::metadata(&seg).unwrap().len(), good);
    assert_eq!(all(&dir).len(), 1000);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupted_block_in_an_older_segment_is_an_error_naming_it() {
    let dir = tmp("corrupt");
    let ret = Retention {
        segment_bytes: 200_000,
        max_bytes: 0,
        max_age_ms: 0,
    };
    let mut s = FlowStore::open(&dir, ret).unwrap();
    for i in 0..20_000 {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    assert!(s.segments().len() > 2);
    let first = s.segments()[0].path.clone();
    drop(s);
    let mut bytes = fs::read(&first).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0xff;
    fs::write(&first, &bytes).unwrap();
    let reader = FlowReader::open(&dir).unwrap();
    let err = query::flows(&reader, &Filter::default(), 0, usize::MAX).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&*first.to_string_lossy()), "{msg}");
    assert!(msg.contains("corrupted data"), "{msg}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn foreign_files_and_versions_are_refused() {
    let dir = tmp("foreign");
    FlowStore::open(&dir, Retention::default()).unwrap();
    fs::write(dir.join("flows").join("notes.txt"), "hello").unwrap();
    let err = FlowStore::open(&dir, Retention::default()).err().unwrap();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("notes.txt"));
    fs::remove_file(dir.join("flows").join("notes.txt")).unwrap();
    fs::write(dir.join("VERSION"), "sonde-data 99\n").unwrap();
    let err = FlowReader::open(&dir).err().unwrap();
    assert!(err.to_string().contains("sonde-data 99"), "{err}");
    // A directory with other people's files and no VERSION is not taken over.
    let other = tmp("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("thesis.tex"), "x").unwrap();
    assert!(FlowStore::open(&other, Retention::default()).is_err());
    // And a segment that is not one.
    fs::write(dir.join("VERSION"), DATA_DIR_VERSION).unwrap();
    fs::write(
        dir.join("flows").join("0000000009.sfl"),
        b"PK\x03\x04 a zip file, longer than a segment header",
    )
    .unwrap();
    let reader = FlowReader::open(&dir).unwrap();
    let err = query::flows(&reader, &Filter::default(), 0, 10).unwrap_err();
    assert!(
        err.to_string().contains("not a sonde flow segment"),
        "{err}"
    );
    fs::remove_dir_all(&dir).unwrap();
    fs::remove_dir_all(&other).unwrap();
}

#[test]
fn retention_deletes_oldest_segments_by_size_and_age() {
    let dir = tmp("retention");
    let ret = Retention {
        segment_bytes: 100_000,
        max_bytes: 400_000,
        max_age_ms: 0,
    };
    let mut s = FlowStore::open(&dir, ret).unwrap();
    for i in 0..50_000 {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    assert!(s.segments_deleted > 0);
    assert!(s.bytes() <= 400_000 + 100_000 + 2 * BLOOM_BYTES as u64);
    // What is left is the newest flows, in order.
    let back = all(&dir);
    assert_eq!(json(back.last().unwrap()), json(&record(49_999)));
    drop(s);
    // By age: flows are 1 s apart; keep 1000 s.
    let ret = Retention {
        segment_bytes: 100_000,
        max_bytes: 0,
        max_age_ms: 1_000_000,
    };
    let mut s = FlowStore::open(&dir, ret).unwrap();
    for i in 50_000..60_000 {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    let oldest = all(&dir)[0].flow.last_ns / 1_000_000;
    let newest = record(59_999).flow.last_ns / 1_000_000;
    // Whole segments go: at most one segment's span older than the limit remains.
    assert!(
        newest - oldest <= 1_000_000 + 2_000_000,
        "{}",
        newest - oldest
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn filters_and_top_lists_agree_with_a_brute_force_count() {
    let dir = tmp("filters");
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    let n = 30_000u32;
    for i in 0..n {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    let reader = FlowReader::open(&dir).unwrap();
    let recs: Vec<FlowRecord> = (0..n).map(record).collect();
    // One host: the bloom filters skip most blocks.
    let mut host = Network {
        addr: [0; 16],
        ip_version: 4,
        prefix: 32,
    };
    host.addr[..4].copy_from_slice(&(0x0a00_0000u32 + 12_345).to_be_bytes());
    let f = Filter {
        host: Some(host),
        ..Filter::default()
    };
    let (got, stats) = query::flows(&reader, &f, 0, 100).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(json(&got[0]), json(&recs[12_345]));
    assert!(stats.blocks_skipped >= 5, "{stats:?}");
    // A /24, a port, a protocol and a time range, paged.
    host.prefix = 24;
    let from = recs[1000].flow.first_ns / 1_000_000;
    let to = recs[20_000].flow.first_ns / 1_000_000;
    let f = Filter {
        host: Some(host),
        port: Some(443),
        proto: Some(6),
        from_ms: Some(from),
        to_ms: Some(to),
        ..Filter::default()
    };
    let want: Vec<String> = recs
        .iter()
        .filter(|r| {
            let k = &r.flow.key;
            k.addr_a[..3] == host.addr[..3]
                && k.port_b == 443
                && k.proto == 6
                && r.flow.last_ns / 1_000_000 >= from
                && r.flow.first_ns / 1_000_000 <= to
        })
        .map(json)
        .collect();
    assert!(want.len() > 20);
    let (page1, _) = query::flows(&reader, &f, 0, 10).unwrap();
    let (page2, _) = query::flows(&reader, &f, 10, 10_000).unwrap();
    let got: Vec<String> = page1.iter().chain(&page2).map(json).collect();
    assert_eq!(got, want);
    // Top hosts by bytes: the server side (100 addresses) collects everything.
    let (top, _) = query::top_hosts(&reader, &Filter::default(), query::Metric::Bytes, 3).unwrap();
    let mut by_server: HashMap<[u8; 16], u64> = HashMap::new();
    for r in &recs {
        *by_server.entry(r.flow.key.addr_b).or_default() += r.flow.bytes[0] + r.flow.bytes[1];
    }
    let mut expect: Vec<_> = by_server.into_iter().collect();
    expect.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<_> = top.iter().map(|(h, t)| (h.0, t.bytes)).collect();
    assert_eq!(got, expect[..3].to_vec());
    let (apps, _) = query::top_apps(&reader, &Filter::default(), query::Metric::Flows, 10).unwrap();
    assert_eq!(apps.iter().map(|a| a.1.flows).sum::<u64>(), n as u64);
    fs::remove_dir_all(&dir).unwrap();
}

use std::collections::HashMap;

/// Brute-force top hosts by bytes over `recs` that overlap [from, to].
fn expected_top(recs: &[FlowRecord], from: u64, to: u64, n: usize) -> Vec<([u8; 16], u64)> {
    let mut by: HashMap<[u8; 16], u64> = HashMap::new();
    for r in recs {
        let (f, l) = (r.flow.first_ns / 1_000_000, r.flow.last_ns / 1_000_000);
        if l >= from && f <= to {
            for a in [r.flow.key.addr_a, r.flow.key.addr_b] {
                *by.entry(a).or_default() += r.flow.bytes[0] + r.flow.bytes[1];
            }
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

#[test]
fn segment_totals_answer_top_lists_exactly() {
    let dir = tmp("totals");
    let ret = Retention {
        segment_bytes: 150_000,
        max_bytes: 0,
        max_age_ms: 0,
    };
    let mut s = FlowStore::open(&dir, ret).unwrap();
    let n = 20_000u32;
    for i in 0..n {
        s.append(&record(i)).unwrap();
    }
    s.checkpoint().unwrap();
    let segs: Vec<PathBuf> = s.segments().iter().map(|x| x.path.clone()).collect();
    assert!(segs.len() > 5);
    drop(s);
    let recs: Vec<FlowRecord> = (0..n).map(record).collect();
    let reader = FlowReader::open(&dir).unwrap();
    let t0 = recs[0].flow.first_ns / 1_000_000;
    for (from, to) in [
        (0, u64::MAX),
        (t0 + 3_333_000, t0 + 15_000_500),
        (t0 + 19_000_000, u64::MAX),
    ] {
        let f = Filter {
            from_ms: Some(from),
            to_ms: Some(to),
            ..Filter::default()
        };
        let (top, stats) = query::top_hosts(&reader, &f, query::Metric::Bytes, 5).unwrap();
        let got: Vec<_> = top.iter().map(|(h, t)| (h.0, t.bytes)).collect();
        assert_eq!(got, expected_top(&recs, from, to, 5), "{from}..{to}");
        if from == 0 {
            assert_eq!(
                stats.segments_from_totals as usize,
                segs.len() - 1,
                "{stats:?}"
            );
        }
        let (apps, _) = query::top_apps(&reader, &f, query::Metric::Flows, 10).unwrap();
        let want = recs
            .iter()
            .filter(|r| r.flow.last_ns / 1_000_000 >= from && r.flow.first_ns / 1_000_000 <= to)
            .count() as u64;
        assert_eq!(apps.iter().map(|a| a.1.flows).sum::<u64>(), want);
    }
    // A damaged totals file is ignored (the segment is scanned), and one that is missing is
    // rebuilt when the store is opened for writing.
    let sum = crate::totals::path_for(&segs[1]);
    let mut raw = fs::read(&sum).unwrap();
    let at = raw.len() - 3;
    raw[at] ^= 1;
    fs::write(&sum, raw).unwrap();
    fs::remove_file(crate::totals::path_for(&segs[2])).unwrap();
    let (top, stats) =
        query::top_hosts(&reader, &Filter::default(), query::Metric::Bytes, 5).unwrap();
    let got: Vec<_> = top.iter().map(|(h, t)| (h.0, t.bytes)).collect();
    assert_eq!(got, expected_top(&recs, 0, u64::MAX, 5));
    assert_eq!(stats.segments_from_totals as usize, segs.len() - 3);
    drop(FlowStore::open(&dir, ret).unwrap());
    assert!(crate::totals::read(&segs[2]).is_some());
    fs::remove_dir_all(&dir).unwrap();
}

/// A format 1 segment as sonde wrote it before format 2: every bloom filter BLOOM_BYTES long.
fn write_format1_segment(path: &Path, blocks: &[Vec<FlowRecord>]) {
    let mut out = Vec::new();
    out.extend_from_slice(SEGMENT_MAGIC);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for recs in blocks {
        let mut bloom = vec![0u8; BLOOM_BYTES];
        let mut encoded = Vec::new();
        let (mut first, mut last) = (u64::MAX, 0);
        for r in recs {
            codec::encode(r, &mut encoded);
            first = first.min(r.flow.first_ns / 1_000_000);
            last = last.max(r.flow.last_ns / 1_000_000);
            bloom_add(&mut bloom, &r.flow.key.addr_a);
            bloom_add(&mut bloom, &r.flow.key.addr_b);
        }
        let mut body = Vec::new();
        body.extend_from_slice(&(recs.len() as u32).to_le_bytes());
        body.extend_from_slice(&first.to_le_bytes());
        body.extend_from_slice(&last.to_le_bytes());
        body.extend_from_slice(&bloom);
        body.extend_from_slice(&encoded);
        out.extend_from_slice(&BLOCK_MAGIC.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    fs::write(path, out).unwrap();
}

fn segment_version(path: &Path) -> u32 {
    let b = fs::read(path).unwrap();
    u32::from_le_bytes(b[8..12].try_into().unwrap())
}

fn host_filter(r: &FlowRecord) -> Filter {
    Filter {
        host: Some(Network {
            addr: r.flow.key.addr_a,
            ip_version: 4,
            prefix: 32,
        }),
        ..Filter::default()
    }
}

#[test]
fn format_1_segments_are_read_and_appended_to_in_format_1() {
    let dir = tmp("format1");
    let flows = prepare_data_dir(&dir, true).unwrap();
    let old: Vec<FlowRecord> = (0..30).map(record).collect();
    write_format1_segment(
        &flows.join("0000000001.sfl"),
        &[old[..10].to_vec(), old[10..20].to_vec()],
    );
    write_format1_segment(&flows.join("0000000002.sfl"), &[old[20..].to_vec()]);
    // Tiny segments: the first block written after the reopen closes segment 2.
    let retention = Retention {
        segment_bytes: 1,
        ..Retention::default()
    };
    let mut s = FlowStore::open(&dir, retention).unwrap();
    assert_eq!(s.segments().iter().map(|g| g.records).sum::<u64>(), 30);
    // The totals of closed segment 1 were built from its format 1 blocks.
    assert!(crate::totals::read(&flows.join("0000000001.sfl")).is_some());
    let new: Vec<FlowRecord> = (30..40).map(record).collect();
    for r in &new[..5] {
        s.append(r).unwrap();
    }
    s.checkpoint().unwrap();
    for r in &new[5..] {
        s.append(r).unwrap();
    }
    s.checkpoint().unwrap();
    drop(s);
    // Appended to segment 2 in its format; the next segment is a new one in format 2.
    assert_eq!(segment_version(&flows.join("0000000002.sfl")), 1);
    assert_eq!(
        segment_version(&flows.join("0000000003.sfl")),
        SEGMENT_VERSION
    );
    let want: Vec<String> = old.iter().chain(&new).map(json).collect();
    let got: Vec<String> = all(&dir).iter().map(json).collect();
    assert_eq!(got, want);
    // Bloom filters of both formats find each host and rule out the other blocks.
    let reader = FlowReader::open(&dir).unwrap();
    for r in old.iter().chain(&new) {
        let (found, stats) = query::flows(&reader, &host_filter(r), 0, 10).unwrap();
        assert_eq!(found.iter().map(json).collect::<Vec<_>>(), vec![json(r)]);
        assert!(stats.blocks_skipped >= 3, "{stats:?}");
    }
    // Top lists over both formats, from totals and from scans, agree with a plain count.
    let from = old[0].flow.first_ns / 1_000_000;
    let to = new[9].flow.last_ns / 1_000_000;
    let filter = Filter {
        from_ms: Some(from),
        to_ms: Some(to),
        ..Filter::default()
    };
    let (top, _) = query::top_hosts(&reader, &filter, query::Metric::Bytes, 5).unwrap();
    let all_recs: Vec<FlowRecord> = old.iter().chain(&new).cloned().collect();
    let want = expected_top(&all_recs, from, to, 5);
    assert_eq!(
        top.iter().map(|(h, t)| (h.0, t.bytes)).collect::<Vec<_>>(),
        want
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quiet_blocks_have_small_bloom_filters() {
    // A checkpoint a second on a quiet link: a block per flow.
    let dir = tmp("quiet");
    let mut s = FlowStore::open(&dir, Retention::default()).unwrap();
    let recs: Vec<FlowRecord> = (0..100).map(record).collect();
    let mut record_bytes = 0;
    for r in &recs {
        let mut e = Vec::new();
        codec::encode(r, &mut e);
        record_bytes += e.len();
        s.append(r).unwrap();
        s.checkpoint().unwrap();
    }
    let overhead = (BLOCK_PREFIX + BLOCK_FIXED + MIN_BLOOM_BYTES) * recs.len();
    assert_eq!(
        s.bytes(),
        (SEGMENT_HEADER + overhead + record_bytes) as u64,
        "each block: its header, a {MIN_BLOOM_BYTES}-byte bloom filter and its record"
    );
    drop(s);
    let reader = FlowReader::open(&dir).unwrap();
    for r in &recs {
        let (found, stats) = query::flows(&reader, &host_filter(r), 0, 10).unwrap();
        assert_eq!(found.iter().map(json).collect::<Vec<_>>(), vec![json(r)]);
        // The others are ruled out by their bloom filters (a false positive is possible).
        assert!(stats.blocks_skipped >= 95, "{stats:?}");
    }
    // A time range reads only the blocks inside it.
    let t = |i: usize| recs[i].flow.first_ns / 1_000_000;
    let filter = Filter {
        from_ms: Some(t(90)),
        ..Filter::default()
    };
    let (found, stats) = query::flows(&reader, &filter, 0, 1000).unwrap();
    assert_eq!(found.len(), 10);
    assert_eq!((stats.blocks_read, stats.blocks_skipped), (10, 90));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn folded_bloom_filters_keep_every_address() {
    for count in [1u32, 2, 31, 32, 33, 100, 1000, 2048, 4095, 4096] {
        let len = bloom_len(2, count);
        assert!(len.is_power_of_two() && (MIN_BLOOM_BYTES..=BLOOM_BYTES).contains(&len));
        assert!(len >= (2 * count as usize).min(BLOOM_BYTES));
        let mut bloom = vec![0u8; BLOOM_BYTES];
        let addrs: Vec<[u8; 16]> = (0..2 * count)
            .map(|i| {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&(0x0a00_0000 + i * 7919).to_be_bytes());
                a
            })
            .collect();
        for a in &addrs {
            bloom_add(&mut bloom, a);
        }
        bloom_fold(&mut bloom, len);
        assert!(addrs.iter().all(|a| bloom_may_contain(&bloom[..len], a)));
    }
    assert_eq!(bloom_len(1, 1), BLOOM_BYTES);
}

#[test]
fn a_record_count_that_does_not_fit_its_block_is_an_error() {
    // Format 2 sizes a block's bloom filter by its record count: a damaged count must not
    // send the reader past the block.
    let dir = tmp("badcount");
    let ret = Retention {
        segment_bytes: 1,
        ..Retention::default()
    };
    let mut s = FlowStore::open(&dir, ret).unwrap();
    for i in 0..3 {
        s.append(&record(i)).unwrap();
        s.checkpoint().unwrap();
    }
    let first = s.segments()[0].path.clone();
    drop(s);
    let mut bytes = fs::read(&first).unwrap();
    // The first block's count, after the segment header and the block prefix.
    let at = SEGMENT_HEADER + BLOCK_PREFIX;
    bytes[at..at + 4].copy_from_slice(&100_000u32.to_le_bytes());
    fs::write(&first, &bytes).unwrap();
    let reader = FlowReader::open(&dir).unwrap();
    let err = query::flows(&reader, &Filter::default(), 0, usize::MAX).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&*first.to_string_lossy()), "{msg}");
    assert!(msg.contains("impossible block length"), "{msg}");
    let err = FlowStore::open(&dir, ret).err().unwrap();
    assert!(err.to_string().contains("impossible block length"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}
