"""`--replay loop`: a file replayed at the pace of its timestamps, over and over, its times moved
to now (`make run` shows the bundled demo capture this way). Checked against tshark's count of
the file's packets: each pass delivers all of them, time only moves forward, and the flows carry
today's times, not the file's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import oracle

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "loopback-http-dns.pcapng"  # 80 packets over 3.18 s
DEMO = REPO / "samples" / "demo.pcap"


def _packets(path: Path) -> int:
    return len(oracle.tshark(["-r", str(path), "-T", "fields", "-e", "frame.number"]).split())


@pytest.mark.parametrize("threads", [1, 2])
def test_loop_replays_every_packet_each_pass_in_present_time(threads, sonde, workdir):
    per_pass = _packets(SAMPLE)
    flows, stats = workdir / "flows.jsonl", workdir / "stats.json"
    started = time.time()
    p = sonde("-r", SAMPLE, "--replay", "loop", "--duration", "9", "--threads", str(threads),
              "--flows-out", flows, "--stats-json", stats, "-q", timeout=60)
    ended = time.time()
    assert p.returncode == 0, p.stderr
    s = json.loads(stats.read_text())
    # A pass takes 3.18 s and the next starts a second after it: two whole passes and part of
    # a third in 9 s (paced, so far fewer than a fast read would give).
    assert 2 * per_pass < s["packets"] < 3 * per_pass, s["packets"]
    recs = oracle.load_jsonl(str(flows))
    assert recs
    for r in recs:
        first, last = r["FIRST_SWITCHED"], r["LAST_SWITCHED"]
        assert started - 2 <= first <= last <= ended + 1, (r, started, ended)
    # The file's own date (2026-11-22) is nowhere: every flow is of this run.
    assert min(r["FIRST_SWITCHED"] for r in recs) >= started - 2


def test_demo_capture_is_valid_and_varied(sonde, workdir):
    """The bundled demo capture (scripts/make-demo-pcap.py): tshark finds no bad checksum in
    it, and sonde labels many applications and detects its port scan."""
    bad = oracle.tshark(["-r", str(DEMO), "-o", "tcp.check_checksum:TRUE", "-o",
                         "udp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE", "-Y",
                         "tcp.checksum.status==2 || udp.checksum.status==2 || ip.checksum.status==2",
                         "-T", "fields", "-e", "frame.number"]).split()
    assert bad == [], f"frames with bad checksums: {bad[:10]}"
    flows, alerts = workdir / "flows.jsonl", workdir / "alerts.jsonl"
    p = sonde("-r", DEMO, "--flows-out", flows, "--alerts-out", alerts, "-q", timeout=120)
    assert p.returncode == 0, p.stderr
    apps = {r.get("L7_PROTO_NAME") for r in oracle.load_jsonl(str(flows))}
    assert len(apps - {"Unknown", None}) >= 15, apps
    detections = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert any(d["entity"]["value"] == "10.0.0.66" and d["event"] == "start" for d in detections), detections
