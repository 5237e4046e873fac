use super::*;
use std::collections::BTreeMap;

/// A day boundary (UTC), so minutes, hours and the day line up with the test's seconds.
const T0: u64 = 1_700_006_400;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-series-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn value(key: usize, s: u64) -> Metrics {
    let x = s.wrapping_mul(2654435761).wrapping_add(key as u64 * 97);
    Metrics {
        bytes_in: x % 10_000 + 1,
        bytes_out: x % 777,
        packets_in: x % 31 + 1,
        packets_out: x % 17,
        flows: x % 5,
    }
}

/// What was written, per key and second, to compare the reader against.
#[derive(Default)]
struct Written(BTreeMap<String, BTreeMap<u64, Metrics>>);

impl Written {
    fn set(&mut self, w: &mut SeriesWriter, family: Family, key: &str, m: Metrics) {
        w.set(family, key, m);
        self.0
            .entry(key.to_string())
            .or_default()
            .insert(key_second(w), m);
    }

    /// The rollup of `key` over `[from, from + len)`, as the store must give it.
    fn expect(&self, key: &str, from: u64, len: u64) -> Option<Sample> {
        let mut acc = [0u64; ROLLUP_VALUES];
        rollup_gap(&mut acc);
        for (_, m) in self.0.get(key)?.range(from..from + len) {
            rollup_add_second(&mut acc, &m.to_array());
        }
        sample_of_rollup(&acc)
    }

    fn total(&self, key: &str) -> Metrics {
        let mut sum = [0u64; 5];
        for m in self.0.get(key).into_iter().flat_map(|s| s.values()) {
            for (t, v) in sum.iter_mut().zip(m.to_array()) {
                *t += v;
            }
        }
        Metrics::from_array(sum)
    }
}

fn key_second(w: &SeriesWriter) -> u64 {
    w.step.expect("a step is open")
}

fn add(a: &mut [u64; 5], m: &Metrics) {
    for (t, v) in a.iter_mut().zip(m.to_array()) {
        *t += v;
    }
}

fn sum_points(points: &[Point]) -> Metrics {
    let mut sum = [0u64; 5];
    for p in points {
        if let Some(s) = &p.sample {
            add(&mut sum, &s.sum);
        }
    }
    Metrics::from_array(sum)
}

/// Writes seconds `from..to` of the round-trip pattern: "a" every second, "b" with a gap every
/// 7th second, "c" only in the second hour; no step at all in minute 30 of each hour, nor in
/// the last second of minute 10 (so that minute closes at the next commit). A checkpoint every
/// 10 seconds.
fn write_pattern(w: &mut SeriesWriter, written: &mut Written, from: u64, to: u64) {
    write_pattern_every(w, written, from, to, 10);
}

fn write_pattern_every(
    w: &mut SeriesWriter,
    written: &mut Written,
    from: u64,
    to: u64,
    checkpoint_every: u64,
) {
    for s in from..to {
        let minute = (s - T0) / 60 % 60;
        if minute == 30 || (minute == 10 && s % 60 == 59) {
            continue;
        }
        assert!(w.begin(s));
        written.set(w, Family::Hosts, "a", value(0, s));
        if s % 7 != 0 {
            written.set(w, Family::Hosts, "b", value(1, s));
        }
        if s >= T0 + 3600 {
            written.set(w, Family::Hosts, "c", value(2, s));
        }
        written.set(w, Family::Interface, INTERFACE_TOTAL, value(3, s));
        w.commit().unwrap();
        if s % checkpoint_every == 0 {
            w.checkpoint().unwrap();
        }
    }
}

fn check_rollups(
    r: &mut SeriesReader,
    written: &Written,
    key: &str,
    res: Resolution,
    from: u64,
    to: u64,
) {
    let points = r.read(Family::Hosts, key, res, from, to).unwrap();
    assert_eq!(
        points.len() as u64,
        (to - from) / res.seconds(),
        "{key} {res:?}"
    );
    for p in &points {
        assert_eq!(
            p.sample,
            written.expect(key, p.t, res.seconds()),
            "{key} at {} ({res:?})",
            p.t
        );
    }
}

#[test]
fn round_trip_two_hours() {
    let dir = tmp("round-trip");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let mut written = Written::default();
    write_pattern_every(&mut w, &mut written, T0, T0 + 7200, 600);
    w.close().unwrap();

    let mut r = SeriesReader::open(&dir).unwrap();
    assert_eq!(r.keys(Family::Hosts).unwrap(), ["a", "b", "c"]);
    assert_eq!(r.keys(Family::Interface).unwrap(), [INTERFACE_TOTAL]);
    assert_eq!(r.committed().unwrap(), Some(T0 + 7199));

    // 1 s: the first hour was overwritten by the second; the second hour is exact, gaps and all.
    let old = r
        .read(Family::Hosts, "a", Resolution::Second, T0, T0 + 3600)
        .unwrap();
    assert_eq!(old.len(), 3600);
    assert!(old.iter().all(|p| p.sample.is_none()));
    for key in ["a", "b", "c"] {
        let points = r
            .read(Family::Hosts, key, Resolution::Second, T0 + 3600, T0 + 7200)
            .unwrap();
        assert_eq!(points.len(), 3600);
        for p in &points {
            let want = written.0[key].get(&p.t);
            assert_eq!(p.sample.map(|s| s.sum), want.copied(), "{key} at {}", p.t);
        }
    }
    // A 7th second of "b" and minute 30 are gaps, not zeros.
    let b = r
        .read(Family::Hosts, "b", Resolution::Second, T0 + 3640, T0 + 3650)
        .unwrap();
    assert!(b.iter().any(|p| p.t % 7 == 0 && p.sample.is_none()));
    let m30 = r
        .read(Family::Hosts, "a", Resolution::Minute, T0 + 1800, T0 + 1860)
        .unwrap();
    assert_eq!(m30.len(), 1);
    assert_eq!(m30[0].sample, None);

    // 1 min and 1 h: sums, minima, maxima and seconds of what was written; the day is still
    // open, so the reader makes it from the hours.
    for key in ["a", "b", "c"] {
        check_rollups(&mut r, &written, key, Resolution::Minute, T0, T0 + 7200);
        check_rollups(&mut r, &written, key, Resolution::Hour, T0, T0 + 7200);
        check_rollups(&mut r, &written, key, Resolution::Day, T0, T0 + 86_400);
    }
    let b10 = written.expect("b", T0 + 600, 60).unwrap();
    let steps = (T0 + 600..T0 + 659).filter(|s| s % 7 != 0).count();
    assert_eq!(
        b10.seconds as usize, steps,
        "minute 10 of b: no step in its last second"
    );

    // Sums across resolutions equal what was written.
    for key in ["a", "b", "c"] {
        let total = written.total(key);
        let minutes = r
            .read(Family::Hosts, key, Resolution::Minute, T0, T0 + 7200)
            .unwrap();
        let hours = r
            .read(Family::Hosts, key, Resolution::Hour, T0, T0 + 7200)
            .unwrap();
        let days = r
            .read(Family::Hosts, key, Resolution::Day, T0, T0 + 1)
            .unwrap();
        assert_eq!(sum_points(&minutes), total, "{key} minutes");
        assert_eq!(sum_points(&hours), total, "{key} hours");
        assert_eq!(sum_points(&days), total, "{key} day");
    }
    let c_first_hour = r
        .read(Family::Hosts, "c", Resolution::Hour, T0, T0 + 3600)
        .unwrap();
    assert_eq!(c_first_hour[0].sample, None);

    // Automatic resolution: an hour back is seconds, a day back minutes.
    let newest = T0 + 7199;
    let (res, _) = r
        .read_auto(Family::Hosts, "a", newest - 600, newest)
        .unwrap();
    assert_eq!(res, Resolution::Second);
    assert_eq!(
        r.best_resolution(Family::Hosts, newest - 5000).unwrap(),
        Resolution::Minute
    );
    assert_eq!(
        r.best_resolution(Family::Hosts, newest - 30 * 86_400)
            .unwrap(),
        Resolution::Hour
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn restart_keeps_columns_and_open_rollups() {
    let dir = tmp("restart");
    let mut written = Written::default();
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    write_pattern(&mut w, &mut written, T0, T0 + 100);
    w.close().unwrap();

    // A clean restart in the middle of a minute: keys keep their columns, the open minute and
    // hour go on from the rows on disk.
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.last_committed(), Some(T0 + 99));
    assert_eq!(w.series(Family::Hosts), 2);
    assert!(!w.begin(T0 + 99), "a second already committed is refused");
    assert_eq!(w.refused_steps, 1);
    write_pattern(&mut w, &mut written, T0 + 100, T0 + 200);

    // A crash: what came after the last checkpoint (T0+190) is lost, the rest is whole.
    assert!(w.begin(T0 + 200));
    w.set(Family::Hosts, "late", Metrics::gauge(5));
    w.commit().unwrap();
    std::mem::forget(w);
    for s in T0 + 191..T0 + 201 {
        for m in written.0.values_mut() {
            m.remove(&s);
        }
    }

    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.last_committed(), Some(T0 + 190));
    // A key written after the checkpoint may stay (its line reached the file): harmless.
    assert!(w.series(Family::Hosts) >= 2);
    write_pattern(&mut w, &mut written, T0 + 195, T0 + 300);
    w.close().unwrap();

    let mut r = SeriesReader::open(&dir).unwrap();
    assert_eq!(&r.keys(Family::Hosts).unwrap()[..2], ["a", "b"]);
    let lost = r
        .read(Family::Hosts, "a", Resolution::Second, T0 + 191, T0 + 195)
        .unwrap();
    assert!(lost.iter().all(|p| p.sample.is_none()), "{lost:?}");
    for key in ["a", "b"] {
        check_rollups(&mut r, &written, key, Resolution::Minute, T0, T0 + 300);
        let second = r
            .read(Family::Hosts, key, Resolution::Second, T0, T0 + 300)
            .unwrap();
        for p in &second {
            assert_eq!(p.sample.map(|s| s.sum), written.0[key].get(&p.t).copied());
        }
        let hour = r
            .read(Family::Hosts, key, Resolution::Hour, T0, T0 + 1)
            .unwrap();
        assert_eq!(hour[0].sample.map(|s| s.sum), Some(written.total(key)));
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn reader_sees_a_running_writer() {
    let dir = tmp("live");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let mut written = Written::default();
    write_pattern(&mut w, &mut written, T0, T0 + 95);
    // Seconds after the last checkpoint (T0+90) are read too; the open minute is made from them.
    let mut r = SeriesReader::open(&dir).unwrap();
    let now = r
        .read(Family::Hosts, "a", Resolution::Second, T0 + 94, T0 + 95)
        .unwrap();
    assert_eq!(now[0].sample.map(|s| s.sum), Some(value(0, T0 + 94)));
    check_rollups(&mut r, &written, "a", Resolution::Minute, T0, T0 + 120);
    let hour = r
        .read(Family::Hosts, "a", Resolution::Hour, T0, T0 + 1)
        .unwrap();
    assert_eq!(hour[0].sample.map(|s| s.sum), Some(written.total("a")));
    // A key added while the reader is open is found.
    assert!(w.begin(T0 + 95));
    w.set(Family::Apps, "TLS.Google", Metrics::gauge(7));
    w.commit().unwrap();
    let p = r
        .read(
            Family::Apps,
            "TLS.Google",
            Resolution::Second,
            T0 + 95,
            T0 + 96,
        )
        .unwrap();
    assert_eq!(p[0].sample.map(|s| s.sum.bytes_in), Some(7));
    drop(w);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn more_series_than_one_block() {
    let dir = tmp("blocks");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let keys: Vec<String> = (0..5000)
        .map(|i| format!("10.0.{}.{}@0", i / 256, i % 256))
        .collect();
    for s in T0..T0 + 120 {
        assert!(w.begin(s));
        for (i, k) in keys.iter().enumerate() {
            w.set(Family::Hosts, k, value(i, s));
        }
        w.commit().unwrap();
    }
    w.close().unwrap();
    assert!(dir.join("series/hosts/1s-0001.ring").exists());
    assert!(!dir.join("series/hosts/1s-0002.ring").exists());

    let w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.series(Family::Hosts), 5000);
    drop(w);
    let mut r = SeriesReader::open(&dir).unwrap();
    assert_eq!(r.keys(Family::Hosts).unwrap(), keys);
    for i in [0, 4095, 4096, 4999] {
        let p = r
            .read(
                Family::Hosts,
                &keys[i],
                Resolution::Second,
                T0 + 50,
                T0 + 51,
            )
            .unwrap();
        assert_eq!(p[0].sample.map(|s| s.sum), Some(value(i, T0 + 50)));
        let m = r
            .read(
                Family::Hosts,
                &keys[i],
                Resolution::Minute,
                T0 + 60,
                T0 + 120,
            )
            .unwrap();
        let mut sum = [0u64; 5];
        for s in T0 + 60..T0 + 120 {
            add(&mut sum, &value(i, s));
        }
        assert_eq!(m[0].sample.map(|s| s.sum), Some(Metrics::from_array(sum)));
        assert_eq!(m[0].sample.map(|s| s.seconds), Some(60));
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn hostile_keys_cannot_break_the_keys_file() {
    let dir = tmp("keys");
    let hostile = [
        "evil\nkey",
        "tab\there",
        "esc\x1b[31mred",
        "back\\slash\\n",
        "nul\0byte",
        "line\u{2028}separator",
        "\r\n",
        "\\u{41}",
        "ünïcødé",
    ];
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert!(w.begin(T0));
    for (i, k) in hostile.iter().enumerate() {
        w.set(Family::Apps, k, value(i, T0));
    }
    w.set(Family::Apps, "", Metrics::gauge(1));
    w.set(
        Family::Apps,
        &"x".repeat(MAX_KEY_BYTES + 1),
        Metrics::gauge(1),
    );
    w.commit().unwrap();
    assert_eq!(w.refused_keys, 2);
    w.close().unwrap();

    let text = fs::read(dir.join("series/apps/keys")).unwrap();
    assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), hostile.len());
    assert!(
        text.iter().all(|&b| b == b'\n' || b >= 0x20),
        "no raw control bytes"
    );

    let w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.series(Family::Apps), hostile.len());
    drop(w);
    let mut r = SeriesReader::open(&dir).unwrap();
    assert_eq!(r.keys(Family::Apps).unwrap(), hostile);
    for (i, k) in hostile.iter().enumerate() {
        let p = r
            .read(Family::Apps, k, Resolution::Second, T0, T0 + 1)
            .unwrap();
        assert_eq!(p[0].sample.map(|s| s.sum), Some(value(i, T0)), "{k:?}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn keys_without_a_character_to_escape_are_copied_as_the_long_way_writes_them() {
    // The character-by-character rule, for every key whatever its bytes.
    let by_char = |key: &str| {
        let mut out = Vec::new();
        escape_key_by_char(key, &mut out);
        out
    };
    let alphabet: Vec<char> = "a.:1\\\n\u{0}\u{1f}\u{7f}\u{80}\u{9f}\u{a0}\u{bf}\u{c0}é€😀 "
        .chars()
        .collect();
    let mut keys: Vec<String> = vec!["10.0.0.1".into(), "2001:db8::1".into(), "".into()];
    let mut x = 0x9e37_79b9_u32;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as usize
    };
    for _ in 0..3000 {
        let k = (0..next() % 9)
            .map(|_| alphabet[next() % alphabet.len()])
            .collect();
        keys.push(k);
    }
    for key in keys {
        let mut line = b"before".to_vec();
        escape_key(&key, &mut line);
        assert_eq!(line[6..], by_char(&key)[..], "{key:?}");
    }
}

#[test]
fn escaping_round_trips() {
    for key in ["a", "\\", "\\\\n", "\n\n", "\u{7f}\u{85}", "{}\\u{}"] {
        let mut line = Vec::new();
        escape_key(key, &mut line);
        assert!(!line.contains(&b'\n'));
        assert_eq!(unescape_key(&line).as_deref(), Ok(key));
    }
    for bad in [
        &b"\\q"[..],
        b"\\u{110000}",
        b"\\u{",
        b"\\",
        b"raw\x07",
        b"",
        b"\xff",
    ] {
        assert!(unescape_key(bad).is_err(), "{bad:?}");
    }
}

/// A data directory with a little of everything, for the damage tests.
fn small_store(name: &str) -> PathBuf {
    let dir = tmp(name);
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let mut written = Written::default();
    write_pattern(&mut w, &mut written, T0, T0 + 130);
    assert!(w.begin(T0 + 130));
    w.set(Family::Apps, "DNS", Metrics::gauge(1));
    w.commit().unwrap();
    w.close().unwrap();
    dir
}

fn open_both(dir: &Path) -> (String, String) {
    let w = SeriesWriter::open(dir, Config::default())
        .err()
        .expect("writer refuses");
    // The reader checks the rings when it opens, a family's keys when it looks one up.
    let r = SeriesReader::open(dir)
        .and_then(|mut r| Family::ALL.iter().try_for_each(|&f| r.keys(f).map(|_| ())))
        .expect_err("reader refuses");
    (w.to_string(), r.to_string())
}

#[test]
fn truncated_ring_is_an_error() {
    let dir = small_store("truncated");
    let ring = dir.join("series/hosts/1m-0000.ring");
    let len = fs::metadata(&ring).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&ring)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(e.contains("1m-0000.ring") && e.contains("cut short"), "{e}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn foreign_ring_files_are_errors() {
    let dir = small_store("magic");
    let ring = dir.join("series/hosts/1s-0000.ring");
    let f = OpenOptions::new().write(true).open(&ring).unwrap();
    f.write_all_at(b"NOTSONDE", 0).unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(e.contains("1s-0000.ring") && e.contains("bad magic"), "{e}");
    }
    let _ = fs::remove_dir_all(&dir);

    // A ring of another family moved in.
    let dir = small_store("copied");
    fs::rename(
        dir.join("series/apps/1h-0000.ring"),
        dir.join("series/hosts/1h-0001.ring"),
    )
    .unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(e.contains("1h-0001.ring") && e.contains("elsewhere"), "{e}");
    }
    let _ = fs::remove_dir_all(&dir);

    // A header from a newer sonde.
    let dir = small_store("version");
    let ring = dir.join("series/apps/1d-0000.ring");
    let mut h = Ring::header(
        Family::Apps,
        Resolution::Day,
        0,
        Resolution::Day.default_slots(),
    );
    h[8..12].copy_from_slice(&2u32.to_le_bytes());
    OpenOptions::new()
        .write(true)
        .open(&ring)
        .unwrap()
        .write_all_at(&h, 0)
        .unwrap();
    let (w, _) = open_both(&dir);
    assert!(w.contains("series format 2"), "{w}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn stray_files_are_errors() {
    let dir = small_store("stray");
    fs::write(dir.join("series/hosts/notes.txt"), "hello").unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(e.contains("notes.txt") && e.contains("not part of"), "{e}");
    }
    fs::remove_file(dir.join("series/hosts/notes.txt")).unwrap();
    fs::write(dir.join("series/rrd"), "x").unwrap();
    let (w, _) = open_both(&dir);
    assert!(w.contains("series/rrd"), "{w}");
    fs::remove_file(dir.join("series/rrd")).unwrap();
    // Hidden files are left alone; a half-made ring from a crash is removed.
    fs::write(dir.join("series/hosts/.1s-0009.ring.tmp"), "x").unwrap();
    SeriesWriter::open(&dir, Config::default()).unwrap();
    assert!(!dir.join("series/hosts/.1s-0009.ring.tmp").exists());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn damaged_rows_are_errors_not_gaps() {
    let dir = small_store("rows");
    let path = dir.join("series/hosts/1s-0000.ring");
    let ring = Ring::open(&path, Family::Hosts, Resolution::Second, 0, true).unwrap();
    let t = T0 + 50;
    let off = ring.slot_offset(ring.slot_of(t));
    // The trailer of a checkpointed row: a torn row where none can be.
    let columns = 2u64;
    let trailer = off + ROW_HEADER + columns * Resolution::Second.column_bytes();
    ring.file.write_all_at(&[1u8; 8], trailer).unwrap();
    let mut r = SeriesReader::open(&dir).unwrap();
    let e = r
        .read(Family::Hosts, "a", Resolution::Second, t, t + 1)
        .unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("not whole"), "{e}");
    // A row header sonde does not write.
    ring.file.write_all_at(&[0xAB; 16], off).unwrap();
    let e = r
        .read(Family::Hosts, "a", Resolution::Second, t, t + 1)
        .unwrap_err();
    assert!(e.to_string().contains("header sonde does not write"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn torn_rows_after_the_checkpoint_are_gaps_then_repaired() {
    let dir = tmp("torn");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let mut written = Written::default();
    write_pattern(&mut w, &mut written, T0, T0 + 126);
    // Killed after T0+125 with its last checkpoint at T0+120, the row of T0+124 half written.
    std::mem::forget(w);
    let path = dir.join("series/hosts/1s-0000.ring");
    let ring = Ring::open(&path, Family::Hosts, Resolution::Second, 0, true).unwrap();
    let t = T0 + 124;
    let trailer =
        ring.slot_offset(ring.slot_of(t)) + ROW_HEADER + 2 * Resolution::Second.column_bytes();
    ring.file.write_all_at(&[7u8; 8], trailer).unwrap();
    let mut r = SeriesReader::open(&dir).unwrap();
    let p = r
        .read(Family::Hosts, "a", Resolution::Second, t - 1, t + 1)
        .unwrap();
    assert_eq!(
        p[0].sample.map(|s| s.sum),
        Some(value(0, t - 1)),
        "whole, if not yet durable"
    );
    assert_eq!(p[1].sample, None, "torn after the checkpoint: a gap");
    // The writer blanks everything after the checkpoint.
    let w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.last_committed(), Some(T0 + 120));
    drop(w);
    let p = r
        .read(Family::Hosts, "a", Resolution::Second, T0 + 120, T0 + 126)
        .unwrap();
    let got: Vec<bool> = p.iter().map(|p| p.sample.is_some()).collect();
    assert_eq!(got, [true, false, false, false, false, false]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn damaged_keys_and_checkpoint_are_errors() {
    let dir = small_store("keys-damage");
    let keys = dir.join("series/hosts/keys");
    fs::write(&keys, "a\n\\qb\n").unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(
            e.contains("series/hosts") && e.contains("keys file is damaged"),
            "{e}"
        );
    }
    // Lines lost (the file cut back) are caught by the count in CHECKPOINT.
    fs::write(&keys, "a\n").unwrap();
    let (w, _) = open_both(&dir);
    assert!(w.contains("last checkpoint recorded 2"), "{w}");
    fs::write(&keys, "a\nb\n").unwrap();
    SeriesWriter::open(&dir, Config::default()).unwrap();

    let cp = dir.join("series/CHECKPOINT");
    let mut data = fs::read(&cp).unwrap();
    data[20] ^= 1;
    fs::write(&cp, &data).unwrap();
    let (w, r) = open_both(&dir);
    for e in [w, r] {
        assert!(e.contains("CHECKPOINT") && e.contains("checksum"), "{e}");
    }
    // Moved aside: every row is checked, the whole ones kept.
    fs::remove_file(&cp).unwrap();
    let w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert_eq!(w.last_committed(), Some(T0 + 130));
    drop(w);
    let mut r = SeriesReader::open(&dir).unwrap();
    let p = r
        .read(Family::Hosts, "a", Resolution::Second, T0 + 100, T0 + 101)
        .unwrap();
    assert_eq!(p[0].sample.map(|s| s.sum), Some(value(0, T0 + 100)));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn missing_version_is_an_error() {
    let dir = small_store("version-file");
    fs::remove_file(dir.join("VERSION")).unwrap();
    let e = SeriesReader::open(&dir).err().expect("refused");
    assert!(e.to_string().contains("VERSION"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn retention_change_rewrites_the_rings() {
    let dir = tmp("resize");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    let mut written = Written::default();
    write_pattern(&mut w, &mut written, T0, T0 + 300);
    w.close().unwrap();

    let small = Config {
        slots: [120, 60, 24, 1],
        ..Config::default()
    };
    let w = SeriesWriter::open(&dir, small).unwrap();
    drop(w);
    let ring = dir.join("series/hosts/1s-0000.ring");
    assert_eq!(
        fs::metadata(&ring).unwrap().len(),
        Ring::file_len(Resolution::Second, 120)
    );
    let mut r = SeriesReader::open(&dir).unwrap();
    let p = r
        .read(Family::Hosts, "a", Resolution::Second, T0, T0 + 300)
        .unwrap();
    assert_eq!(p.len(), 120, "at most the ring's slots");
    for p in &p {
        assert_eq!(p.sample.map(|s| s.sum), written.0["a"].get(&p.t).copied());
    }
    check_rollups(&mut r, &written, "a", Resolution::Minute, T0, T0 + 300);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn time_must_advance() {
    let dir = tmp("time");
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    w.set(Family::Hosts, "a", Metrics::gauge(1));
    assert_eq!(w.ignored_sets, 1);
    assert!(w.begin(T0 + 10));
    w.set(Family::Hosts, "a", Metrics::gauge(1));
    w.commit().unwrap();
    assert!(!w.begin(T0 + 5));
    w.set(Family::Hosts, "a", Metrics::gauge(99));
    w.commit().unwrap();
    assert!(w.begin(T0 + 11));
    w.commit().unwrap();
    drop(w);
    let mut r = SeriesReader::open(&dir).unwrap();
    let p = r
        .read(Family::Hosts, "a", Resolution::Second, T0 + 5, T0 + 12)
        .unwrap();
    let got: Vec<Option<u64>> = p.iter().map(|p| p.sample.map(|s| s.sum.bytes_in)).collect();
    assert_eq!(got, [None, None, None, None, None, Some(1), None]);
    let _ = fs::remove_dir_all(&dir);
}

/// Garbage anywhere in a ring file gives an error or a gap, never a panic.
#[test]
fn garbage_never_panics() {
    let dir = tmp("garbage");
    let small = Config {
        slots: [60, 60, 24, 1],
        ..Config::default()
    };
    let mut w = SeriesWriter::open(&dir, small).unwrap();
    let mut written = Written::default();
    write_pattern(&mut w, &mut written, T0, T0 + 150);
    w.close().unwrap();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..60 {
        let res = Resolution::ALL[round % 4];
        let path = dir.join(format!("series/hosts/{}", ring_name(res, 0)));
        let len = fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        for _ in 0..4 {
            // Mostly row headers and trailers, where the checks are.
            let slot = next() % small.slots[res.index()] as u64;
            let at = match next() % 3 {
                0 => HEADER_LEN + slot * res.stride(),
                1 => HEADER_LEN + slot * res.stride() + ROW_HEADER + 2 * res.column_bytes(),
                _ => next() % len,
            };
            let bytes = next().to_le_bytes();
            let _ = f.write_all_at(&bytes[..(next() % 8 + 1) as usize], at.min(len - 8));
        }
        if let Ok(mut r) = SeriesReader::open(&dir) {
            for res in Resolution::ALL {
                let _ = r.read(Family::Hosts, "a", res, T0, T0 + 86_400);
                let _ = r.read(Family::Hosts, "b", res, 0, u64::MAX);
            }
        }
        let _ = SeriesWriter::open(&dir, small);
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Churning keys: each key has data for 90 s, ten keys at a time, then is idle, and some come
/// back much later. Returns the keys written.
fn write_churn(w: &mut SeriesWriter, written: &mut Written, from: u64, to: u64) -> Vec<String> {
    let mut keys = std::collections::BTreeSet::new();
    for s in from..to {
        assert!(w.begin(s));
        let wave = (s - T0) / 90;
        for i in 0..10u64 {
            // Every 7th wave brings back the keys of 30 waves before.
            let id = if wave % 7 == 3 && wave >= 30 {
                (wave - 30) * 10 + i
            } else {
                wave * 10 + i
            };
            if (s + i) % 3 == 0 {
                continue; // some seconds without data, so gaps are checked too
            }
            let key = format!("h{id}");
            written.set(w, Family::Hosts, &key, value(id as usize, s));
            keys.insert(key);
        }
        w.commit().unwrap();
    }
    keys.into_iter().collect()
}

/// Idle columns go to new keys, so the columns follow the keys active lately; every key, old
/// or new, reads back exactly at every resolution, across a restart and in a live reader.
#[test]
fn idle_columns_are_reused_and_every_series_reads_back() {
    let dir = tmp("reuse");
    let config = Config {
        reuse_after: 120,
        ..Config::default()
    };
    let mut written = Written::default();
    let mut w = SeriesWriter::open(&dir, config).unwrap();
    let mut keys = write_churn(&mut w, &mut written, T0, T0 + 5000);
    w.close().unwrap();
    // A restart in the middle of an hour, then on; a reader opened before the second half.
    let mut live = SeriesReader::open(&dir).unwrap();
    let _ = live.keys(Family::Hosts).unwrap();
    let mut w = SeriesWriter::open(&dir, config).unwrap();
    keys.extend(write_churn(
        &mut w,
        &mut written,
        T0 + 5000,
        T0 + 3 * 3600 + 1234,
    ));
    keys.sort();
    keys.dedup();
    let columns = w.columns(Family::Hosts);
    let reused = w.reused_columns();
    w.close().unwrap();
    // Ten keys at a time for 90 s, idle 120 s before reuse, a column found once a minute:
    // about 50 columns at most, against 1200 keys.
    assert!(keys.len() > 1000, "{}", keys.len());
    assert!(columns <= 60, "{columns} columns for {} keys", keys.len());
    // Each key got a column once, and the returning ones again: all but the first few went
    // to reused columns (the counter is this writer's, after the restart).
    let owners = fs::read_to_string(dir.join("series/hosts/owners")).unwrap();
    assert!(owners.lines().count() >= keys.len() - columns);
    assert!(reused > 0 && reused as usize <= owners.lines().count());

    let end = T0 + 3 * 3600 + 1234;
    for r in [&mut live, &mut SeriesReader::open(&dir).unwrap()] {
        let mut listed = r.keys(Family::Hosts).unwrap();
        listed.sort();
        assert_eq!(listed, keys);
        for key in &keys {
            check_rollups(r, &written, key, Resolution::Minute, T0, end - end % 60);
            check_rollups(r, &written, key, Resolution::Hour, T0, end - end % 3600);
            let day = r
                .read(Family::Hosts, key, Resolution::Day, T0, T0 + 1)
                .unwrap();
            assert_eq!(day[0].sample, written.expect(key, T0, 86_400), "{key} day");
            assert_eq!(day[0].sample.map(|s| s.sum), Some(written.total(key)));
        }
        // The last hour of seconds, for the keys active then.
        for key in keys.iter().rev().take(40) {
            let points = r
                .read(Family::Hosts, key, Resolution::Second, end - 3000, end)
                .unwrap();
            for p in &points {
                assert_eq!(
                    p.sample.map(|s| s.sum),
                    written.0[key].get(&p.t).copied(),
                    "{key} at {}",
                    p.t
                );
            }
        }
    }
    let _ = fs::remove_dir_all(&dir);
}

/// With reuse off, every key keeps a column of its own.
#[test]
fn reuse_off_keeps_a_column_per_key() {
    let dir = tmp("noreuse");
    let config = Config {
        reuse_after: 0,
        ..Config::default()
    };
    let mut written = Written::default();
    let mut w = SeriesWriter::open(&dir, config).unwrap();
    let keys = write_churn(&mut w, &mut written, T0, T0 + 1800);
    assert_eq!(w.columns(Family::Hosts), keys.len());
    assert_eq!(w.reused_columns(), 0);
    w.close().unwrap();
    assert!(SeriesWriter::open(
        &dir,
        Config {
            reuse_after: 30,
            ..Config::default()
        }
    )
    .is_err_and(|e| e.to_string().contains("at least 120")));
    let _ = fs::remove_dir_all(&dir);
}

/// A torn last line of the owners file is what a crash cut: dropped. A bad line before the end
/// is damage: an error that names the file, for the writer and the reader.
#[test]
fn damaged_owners_file_is_an_error_torn_tail_is_cut() {
    let dir = tmp("owners");
    let config = Config {
        reuse_after: 120,
        ..Config::default()
    };
    let mut written = Written::default();
    let mut w = SeriesWriter::open(&dir, config).unwrap();
    write_churn(&mut w, &mut written, T0, T0 + 1200);
    w.close().unwrap();
    let path = dir.join("series/hosts/owners");
    let good = fs::read(&path).unwrap();
    assert!(!good.is_empty());

    let mut torn = good.clone();
    torn.extend_from_slice(b"12 17000");
    fs::write(&path, &torn).unwrap();
    SeriesReader::open(&dir).unwrap();
    drop(SeriesWriter::open(&dir, config).unwrap());
    assert_eq!(fs::read(&path).unwrap(), good);

    for bad in [&b"x 1 k\n"[..], b"3 1\n", b"999999 1 k\n", b"1 2 bad\\q\n"] {
        let mut damaged = bad.to_vec();
        damaged.extend_from_slice(&good);
        fs::write(&path, &damaged).unwrap();
        let Err(err) = SeriesWriter::open(&dir, config) else {
            panic!("{bad:?}: no error");
        };
        assert!(err.to_string().contains("owners file"), "{err}");
        if bad != b"999999 1 k\n" {
            let Err(err) = SeriesReader::open(&dir).and_then(|mut r| r.keys(Family::Hosts)) else {
                panic!("{bad:?}: no error from the reader");
            };
            assert!(err.to_string().contains("owners file"), "{err}");
        }
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Seconds in which few of a block's series have data are written sparse: the ring grows by a
/// few KiB a second, not 160 KiB, and every value and gap reads back.
#[test]
fn sparse_rows_keep_mostly_idle_blocks_small() {
    use std::os::unix::fs::MetadataExt;
    let dir = tmp("sparse");
    let mut written = Written::default();
    let mut w = SeriesWriter::open(&dir, Config::default()).unwrap();
    assert!(w.begin(T0));
    for k in 0..4096 {
        written.set(&mut w, Family::Hosts, &format!("k{k}"), value(k, T0));
    }
    w.commit().unwrap();
    let ring = dir.join("series/hosts/1s-0000.ring");
    let before = fs::metadata(&ring).unwrap().blocks() * 512;
    for s in T0 + 1..T0 + 600 {
        assert!(w.begin(s));
        for k in [7usize, 1000 + (s % 50) as usize, 4095] {
            written.set(&mut w, Family::Hosts, &format!("k{k}"), value(k, s));
        }
        w.commit().unwrap();
    }
    w.close().unwrap();
    let grown = fs::metadata(&ring).unwrap().blocks() * 512 - before;
    // 599 dense rows would be 599 × 160 KiB = 94 MiB.
    assert!(grown < 599 * 8192, "{grown} bytes for 599 sparse rows");
    let mut r = SeriesReader::open(&dir).unwrap();
    for k in [0usize, 7, 1001, 1049, 2000, 4095] {
        let key = format!("k{k}");
        let points = r
            .read(Family::Hosts, &key, Resolution::Second, T0, T0 + 600)
            .unwrap();
        for p in &points {
            assert_eq!(
                p.sample.map(|s| s.sum),
                written.0[&key].get(&p.t).copied(),
                "{key} {}",
                p.t
            );
        }
        check_rollups(&mut r, &written, &key, Resolution::Minute, T0, T0 + 600);
    }
    let _ = fs::remove_dir_all(&dir);
}
