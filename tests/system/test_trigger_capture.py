"""Trigger capture (--trigger-capture): a pcap file per alert of the chosen types, from
--trigger-pre seconds before the alert until its release.

The alerts come from the analytics detections over `analytics_recording` (conftest.py: a SYN
flood, scans, a UDP flood and ordinary traffic on loopback, each actor on its own address).
What a file must hold is worked out from the recording with tshark, never from sonde: the
packets from or to the alert's host, from `first_seen - pre` on, every one of them without a
gap up to the alert's last second at least, and nothing else (no packet of another host, none
before the window, none after the release could have reached the shard).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

import analytics_captures as ac

PRE = 2
HOLD = 5  # ddos.hold's default: an attack ends after this many seconds below its thresholds
INTERVAL = 1  # --top-interval: scans are detected per second, so they come within the ring's reach
THRESHOLDS = ["--threshold", "ddos.syn_pps=3000", "--threshold", "ddos.udp_pps=3000"]


def key(p: ac.Pkt):
    return (round(p.t * 1e6), p.length, p.src, p.dst)


@pytest.fixture(scope="module")
def run(analytics_recording, tshark_tools, sonde, tmp_path_factory):
    rec = analytics_recording
    out = tmp_path_factory.mktemp("trigger")
    caps = out / "captures"
    caps.mkdir()
    alerts, stats = out / "alerts.jsonl", out / "stats.json"
    p = sonde("-r", rec.pcap, "-q", "--alerts-out", alerts, "--stats-json", stats,
              "--top-interval", str(INTERVAL), *THRESHOLDS,
              "--trigger-capture", "syn_flood", "--trigger-capture", "scan.port:attacker",
              "--trigger-dir", caps, "--trigger-pre", str(PRE), timeout=300)
    assert p.returncode == 0 and "panicked" not in p.stderr, p.stderr
    records = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    return rec, records, json.loads(stats.read_text()), caps


def detections(records: List[dict]) -> Dict[int, dict]:
    """id -> {"start": record, "end": record}."""
    out: Dict[int, dict] = {}
    for r in records:
        out.setdefault(r["id"], {})[r["event"]] = r
    return out


def test_a_file_per_captured_alert_and_none_for_others(run):
    rec, records, stats, caps = run
    ds = detections(records)
    wanted = {i for i, d in ds.items() if d["start"]["type"] in ("syn_flood", "scan.port")}
    kinds = {d["start"]["type"] for d in ds.values()}
    assert "syn_flood" in kinds and "scan.port" in kinds, kinds
    assert "ddos" in kinds, "the UDP flood is a ddos detection, which is not captured"
    files = stats["trigger"]["files"]
    assert stats["trigger"]["rings"] == 1
    assert {f["alert_id"] for f in files} == wanted
    for f in files:
        assert f["complete"] and f["truncated_by"] is None and f["dropped"] == 0, f
        path = Path(f["path"])
        assert path.parent == caps and path.is_file()
        assert f["bytes"] == path.stat().st_size
        d = ds[f["alert_id"]]["start"]
        assert f["name"] == f"alert-{d['id']}-{d['type']}-{d['host']}.pcap"
    assert sorted(p.name for p in caps.iterdir()) == sorted(f["name"] for f in files)


def test_each_file_holds_its_hosts_packets_from_pre_seconds_before_until_the_release(run):
    rec, records, stats, caps = run
    ds = detections(records)
    recorded = ac.packets(rec.pcap)
    report = []
    for f in stats["trigger"]["files"]:
        d = ds[f["alert_id"]]
        start, end = d["start"], d["end"]
        host = start["host"]
        written = ac.packets(Path(f["path"]))
        assert len(written) == f["packets"], f
        since = start["first_seen"] - PRE
        mine = [p for p in recorded if host in (p.src, p.dst) and p.t >= since]
        # Nothing from another host, nothing before the window.
        others = [p for p in written if host not in (p.src, p.dst)]
        assert not others, f"{f['name']}: {len(others)} packets of other hosts, e.g. {others[:3]}"
        early = [p for p in written if p.t < since]
        assert not early, f"{f['name']}: {len(early)} packets before first_seen - pre = {since}"
        # Every packet of the host from the window's start up to the last one written, in order,
        # without a gap: the ring's part and the live part join.
        assert written, f["name"]
        last = key(written[-1])
        upto = [p for p in mine if key(p) <= last]
        assert [key(p) for p in written] == [key(p) for p in upto], (
            f"{f['name']}: {len(written)} packets written, {len(upto)} of {host} recorded in "
            f"the same window")
        # It reaches the alert's end, and stops once the release could have reached the shard.
        lag = HOLD + 2 if start["type"] == "syn_flood" else INTERVAL + 2
        in_alert = [p for p in mine if p.t < end["last_seen"]]
        assert len(written) >= len(in_alert), (
            f"{f['name']}: {len(written)} written, {len(in_alert)} of {host} before last_seen "
            f"{end['last_seen']}")
        assert written[-1].t < end["last_seen"] + lag, (
            f"{f['name']}: last packet at {written[-1].t}, alert ended {end['last_seen']}")
        # Packets of the alert's first second: written before its detection, so from the ring.
        ring = [p for p in written if p.t < start["first_seen"] + 1]
        report.append(f"{f['name']}: {len(written)} packets written = {len(upto)} expected "
                      f"({len(ring)} from the ring, before the first second closed)")
    print("\n".join(report))


def test_a_bad_trigger_dir_is_one_clear_error(sonde, tmp_path):
    pcap = Path(__file__).parent.parent.parent / "samples"
    pcaps = sorted(pcap.glob("*.pcap*")) if pcap.is_dir() else []
    src = str(pcaps[0]) if pcaps else "/dev/null"
    for args, want in [
        (["--trigger-capture", "syn_flood", "--trigger-dir", str(tmp_path / "missing")],
         "--trigger-dir"),
        (["--trigger-capture", "syn_flood", "--trigger-dir", "/proc/self/status"],
         "--trigger-dir"),
        (["--trigger-capture", "syn_flood"], "--trigger-dir"),
        (["--trigger-dir", str(tmp_path)], "--trigger-capture"),
        (["--trigger-capture", "syn_flood:sideways", "--trigger-dir", str(tmp_path)],
         "--trigger-capture"),
        (["--trigger-capture", "syn_flood", "--trigger-dir", str(tmp_path), "--trigger-pre", "x"],
         "--trigger-pre"),
        (["--trigger-capture", "syn_flood", "--trigger-dir", str(tmp_path), "--analytics", "off"],
         "--analytics off"),
    ]:
        p = sonde("-r", src, "-q", *args)
        assert p.returncode != 0, args
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert lines and lines[0].startswith("sonde: error:") or "error:" in lines[0], p.stderr
        assert want in p.stderr, (args, p.stderr)
        assert "panicked" not in p.stderr


def test_without_trigger_capture_no_ring(sonde, tmp_path):
    samples = sorted((Path(__file__).parent.parent.parent / "samples").glob("*.pcap*"))
    if not samples:
        pytest.skip("no sample capture")
    stats = tmp_path / "stats.json"
    p = sonde("-r", samples[0], "-q", "--stats-json", stats)
    assert p.returncode == 0, p.stderr
    assert json.loads(stats.read_text())["trigger"] is None


def test_a_size_cap_cuts_the_file_and_says_so(analytics_recording, tshark_tools, sonde, tmp_path):
    rec = analytics_recording
    caps = tmp_path / "captures"
    caps.mkdir()
    alerts, stats = tmp_path / "alerts.jsonl", tmp_path / "stats.json"
    p = sonde("-r", rec.pcap, "-q", "--alerts-out", alerts, "--stats-json", stats, *THRESHOLDS,
              "--trigger-capture", "syn_flood", "--trigger-dir", caps, "--trigger-pre", str(PRE),
              "--trigger-max-mb", "1", timeout=300)
    assert p.returncode == 0, p.stderr
    files = json.loads(stats.read_text())["trigger"]["files"]
    assert files
    recorded = ac.packets(rec.pcap)
    ds = detections([json.loads(x) for x in alerts.read_text().splitlines() if x.strip()])
    for f in files:
        assert f["complete"] and f["truncated_by"] == "bytes", f
        size = Path(f["path"]).stat().st_size
        assert size == f["bytes"] <= 1 << 20
        # What was written is the start of what the file would have held, cut before 1 MiB.
        start = ds[f["alert_id"]]["start"]
        host, since = start["host"], start["first_seen"] - PRE
        mine = [key(p) for p in recorded if host in (p.src, p.dst) and p.t >= since]
        written = [key(p) for p in ac.packets(Path(f["path"]))]
        assert written == mine[:len(written)]
        assert size + 16 + 128 > 1 << 20, "cut only when the next packet would not fit"
