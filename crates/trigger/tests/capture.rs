//! TriggerCapture driven by alert records built here, with shards fed frames by hand; the
//! files are read back.

use serde_json::{json, Value};
use sonde_trigger::{Cap, CaptureFile, Target, TriggerCapture, TriggerConfig};
use sonde_wire::LinkType;
use std::path::Path;
use std::time::{Duration, Instant};

const S: u64 = 1_000_000_000;

/// An Ethernet + IPv4 + UDP frame from `src` to `dst` (last octets in 10.0.0.0/24), `len` bytes.
fn frame(src: u8, dst: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[12] = 0x08;
    f[14] = 0x45;
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, src]);
    f[30..34].copy_from_slice(&[10, 0, 0, dst]);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    let udp_len = (f.len() - 34) as u16;
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f
}

fn alert(id: u64, kind: &str, host: &str, state: &str, start: u64, end: Option<u64>) -> Value {
    json!({"id": id, "type": kind, "severity": "error", "state": state,
           "event": if state == "engaged" {"start"} else {"end"},
           "entity": {"kind": "host", "value": host}, "host": host, "direction": "in",
           "start": start, "end": end, "summary": "test", "source": "analytics",
           "evidence": {"top_sources": [{"host": "10.0.0.9", "packets": 1}]}})
}

/// (ts_ns, orig_len, bytes) of every record of a pcap file, and its link type.
fn read_pcap(path: &Path) -> (u32, Vec<(u64, u32, Vec<u8>)>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes());
    let link = u32::from_le_bytes(b[20..24].try_into().unwrap());
    let mut out = Vec::new();
    let mut off = 24;
    while off < b.len() {
        let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let (sec, usec, cap, orig) = (u(off), u(off + 4), u(off + 8), u(off + 12));
        off += 16;
        out.push((
            u64::from(sec) * S + u64::from(usec) * 1000,
            orig,
            b[off..off + cap as usize].to_vec(),
        ));
        off += cap as usize;
    }
    (link, out)
}

fn wait_complete(t: &TriggerCapture, id: u64) -> Vec<CaptureFile> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let f = t.files(id);
        if !f.is_empty() && f.iter().all(|f| f.complete) {
            return f;
        }
        assert!(
            Instant::now() < deadline,
            "capture {id} never completed: {f:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn config(dir: &Path, rules: &str) -> TriggerConfig {
    let mut c = TriggerConfig::new(sonde_trigger::parse_rules(rules).unwrap(), dir.into());
    c.pre_ns = 2 * S;
    c
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-trigger-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn ring_then_live_until_release_only_matching_packets() {
    let dir = tmp("window");
    let t = TriggerCapture::start(config(&dir, "ddos")).unwrap();
    let mut a = t.shard();
    let mut b = t.shard();
    let base = 1_700_000_000 * S;
    // 10 s of traffic before the alert: host 5 talks to 9 (matches), 1 to 2 (does not), on
    // two shards.
    let mut expected = Vec::new();
    let mut ts = base;
    let feed = |a: &mut sonde_trigger::ShardTrigger,
                b: &mut sonde_trigger::ShardTrigger,
                ts: u64,
                expected: &mut Vec<u64>,
                want: bool| {
        let (m, o) = (frame(9, 5, 60 + (ts / 1000 % 50) as usize), frame(1, 2, 80));
        a.packet(LinkType::Ethernet, ts, m.len() as u32 + 4, &m);
        b.packet(LinkType::Ethernet, ts + 1, o.len() as u32, &o);
        if want {
            expected.push(ts);
        }
    };
    while ts < base + 10 * S {
        // The alert starts at base+10 s: from base+8 s on (pre = 2 s) packets belong.
        feed(&mut a, &mut b, ts, &mut expected, ts >= base + 8 * S);
        ts += S / 10;
        if ts.is_multiple_of(S) {
            a.batch();
            b.batch();
        }
    }
    assert!(t.on_alert(&alert(
        17,
        "ddos",
        "10.0.0.5",
        "engaged",
        1_700_000_010,
        None
    )));
    assert!(!t.on_alert(&alert(
        17,
        "ddos",
        "10.0.0.5",
        "engaged",
        1_700_000_010,
        None
    )));
    assert!(!t.on_alert(&alert(
        18,
        "scan.ip",
        "10.0.0.5",
        "engaged",
        1_700_000_010,
        None
    )));
    assert_eq!(t.engaged(), 1);
    a.batch();
    b.batch();
    while ts < base + 15 * S {
        feed(&mut a, &mut b, ts, &mut expected, true);
        ts += S / 10;
        a.batch();
        b.batch();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.files(17).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let f = t.files(17);
    assert_eq!(f.len(), 1);
    assert!(!f[0].complete);
    assert!(t.on_alert(&alert(
        17,
        "ddos",
        "10.0.0.5",
        "released",
        1_700_000_010,
        Some(1_700_000_014)
    )));
    // Until the shards see the release, nothing closes.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!t.files(17)[0].complete);
    // After it: nothing more is sent.
    a.batch();
    b.batch();
    feed(&mut a, &mut b, ts, &mut Vec::new(), false);
    a.batch();
    let f = wait_complete(&t, 17);
    assert_eq!(f[0].name, "alert-17-ddos-10.0.0.5.pcap");
    assert_eq!(f[0].truncated_by, None);
    assert_eq!(f[0].dropped, 0);
    let (link, pkts) = read_pcap(&f[0].path);
    assert_eq!(link, 1);
    let got: Vec<u64> = pkts.iter().map(|p| p.0).collect();
    assert_eq!(
        got,
        expected,
        "{} written, {} expected",
        got.len(),
        expected.len()
    );
    assert_eq!(f[0].packets, expected.len() as u64);
    assert_eq!(f[0].bytes, std::fs::metadata(&f[0].path).unwrap().len());
    for p in &pkts {
        assert_eq!(p.1, p.2.len() as u32 + 4, "original length kept");
        assert_eq!(&p.2[26..34], &[10, 0, 0, 9, 10, 0, 0, 5]);
    }
    assert_eq!(t.engaged(), 0);
    let mut m = String::new();
    t.metrics(&mut m);
    assert!(
        m.contains(&format!(
            "sonde_trigger_packets_written_total {}",
            expected.len()
        )),
        "{m}"
    );
    assert!(m.contains("sonde_trigger_files_total 1"), "{m}");
    drop((a, b));
    t.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_alert_engaged_and_released_before_a_shard_looks_takes_the_ring() {
    let dir = tmp("late");
    let t = TriggerCapture::start(config(&dir, "scan.port:attacker")).unwrap();
    let mut a = t.shard();
    let base = 1_700_000_100 * S;
    for i in 0..50u64 {
        let f = frame(66, 5, 60);
        a.packet(LinkType::Ethernet, base + i * S / 10, 60, &f);
    }
    let rec = |state| {
        json!({"id": 3, "type": "scan.port", "state": state, "host": "10.0.0.66",
               "entity": {"kind": "host", "value": "10.0.0.66"}, "start": 1_700_000_101u64,
               "end": 1_700_000_102u64, "evidence": {"destinations": [{"destination": "10.0.0.5"}]}})
    };
    assert!(t.on_alert(&rec("engaged")));
    assert!(t.on_alert(&rec("released")));
    a.finish();
    let f = wait_complete(&t, 3);
    let (_, pkts) = read_pcap(&f[0].path);
    // From start - pre (base - 1 s, before the first packet) to the end of the end second.
    assert_eq!(pkts.len(), 30);
    assert_eq!(pkts.last().unwrap().0, base + 29 * S / 10);
    t.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn caps_cut_files_and_are_counted() {
    let dir = tmp("caps");
    let base = 1_700_000_200 * S;
    let run = |rules: &str, max_bytes: u64, max_seconds: u64| {
        let mut cfg = config(&dir, rules);
        cfg.max_bytes = max_bytes;
        cfg.max_seconds = max_seconds;
        let t = TriggerCapture::start(cfg).unwrap();
        let mut a = t.shard();
        assert!(t.on_alert(&alert(
            1,
            rules.split(':').next().unwrap(),
            "10.0.0.5",
            "engaged",
            1_700_000_200,
            None
        )));
        a.batch();
        for i in 0..100u64 {
            // 10 per second for 10 s: more than either cap.
            let f = frame(9, 5, 100);
            a.packet(LinkType::Ethernet, base + i * S / 10, 100, &f);
            a.batch();
        }
        let f = wait_complete(&t, 1);
        let mut m = String::new();
        t.metrics(&mut m);
        drop(a);
        t.finish();
        (f, m)
    };
    let (f, m) = run("ddos:victim", 24 + 10 * (16 + 100), 300);
    assert_eq!(f[0].truncated_by, Some(Cap::Bytes));
    assert_eq!(f[0].packets, 10);
    assert_eq!(read_pcap(&f[0].path).1.len(), 10);
    assert!(
        m.contains("sonde_trigger_files_capped_total{cap=\"bytes\"} 1"),
        "{m}"
    );
    let (f, m) = run("syn_flood:bpf=udp port 53", 100 << 20, 3);
    assert_eq!(f[0].truncated_by, Some(Cap::Seconds));
    // Packets up to start + 3 s: 31 of them (0.0 … 3.0 s).
    assert_eq!(f[0].packets, 31);
    assert_eq!(read_pcap(&f[0].path).1.len(), 31);
    assert!(
        m.contains("sonde_trigger_files_capped_total{cap=\"seconds\"} 1"),
        "{m}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_entities_stay_in_the_directory() {
    let dir = tmp("hostile");
    let t = TriggerCapture::start(config(&dir, "host.listed")).unwrap();
    let a = json!({"id": 9, "type": "host.listed", "state": "engaged", "start": 1u64,
                   "entity": {"kind": "filter", "value": "../../x\n/\u{1b}y"}});
    assert!(t.on_alert(&a));
    let rel = json!({"id": 9, "type": "host.listed", "state": "released"});
    assert!(t.on_alert(&rel));
    let f = wait_complete(&t, 9);
    assert_eq!(f[0].path.parent(), Some(dir.as_path()));
    assert!(
        !f[0].name.contains('/') && !f[0].name.contains(".."),
        "{}",
        f[0].name
    );
    assert!(f[0].path.exists());
    // The same alert id again (another run in the same directory) gets a new name.
    let t2 = TriggerCapture::start(config(&dir, "host.listed")).unwrap();
    assert!(t2.on_alert(&a));
    assert!(t2.on_alert(&rel));
    let f2 = wait_complete(&t2, 9);
    assert_ne!(f2[0].name, f[0].name);
    t.finish();
    t2.finish();
    let _ = Target::Both;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_directory_is_an_error_naming_the_flag() {
    let e = TriggerCapture::start(config(Path::new("/nonexistent/dir"), "ddos"))
        .err()
        .unwrap();
    assert!(e.starts_with("--trigger-dir"), "{e}");
}
