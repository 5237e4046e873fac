"""Live capture on the loopback interface, with a BPF filter, one and two shards.

The test sends a known number of UDP datagrams to a port nobody else uses and checks that
sonde's flow record and summary count exactly those (libpcap sees each loopback packet once).
With --threads 2 the shards are members of one PACKET_FANOUT group, so the flow must still come
out as one record. Needs root (or CAP_NET_RAW); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

import oracle

SENT = 400
PAYLOAD = b"x" * 100


def _free_udp_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("threads", [1, 2])
def test_live_loopback_counts_exactly(threads, sonde_bin, workdir):
    if os.geteuid() != 0:
        pytest.skip("live capture needs root")
    port = _free_udp_port()
    flows, stats = workdir / "flows.jsonl", workdir / "stats.json"
    proc = subprocess.Popen(
        [str(sonde_bin), "-i", "lo", "-f", f"udp and port {port}", "--threads", str(threads),
         "--duration", "5", "--flows-out", str(flows), "--stats-json", str(stats), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # capture handles open before the duration starts counting
        assert proc.poll() is None, f"sonde exited early: {proc.stderr.read()}"
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", port))
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(SENT):
            tx.sendto(PAYLOAD, ("127.0.0.1", port))
            time.sleep(0.0005)  # stay far below the loopback socket buffer
        tx.close()
        rx.close()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "panicked" not in err
    s = json.loads(stats.read_text())
    assert s["packets"] == SENT, f"captured {s['packets']} packets, sent {SENT}"
    assert s["capture"]["dropped"] == 0, s["capture"]
    recs = [r for r in oracle.load_jsonl(str(flows))
            if r.get("PROTOCOL") == 17 and port in (r.get("L4_SRC_PORT"), r.get("L4_DST_PORT"))]
    assert len(recs) == 1, f"expected one flow record for port {port}, got {recs}"
    r = recs[0]
    assert (r["IN_PKTS"], r["OUT_PKTS"]) == (SENT, 0), r
    # IP bytes: 20 (IPv4) + 8 (UDP) + payload, per datagram.
    assert r["IN_BYTES"] == SENT * (28 + len(PAYLOAD)), r


def test_a_quiet_live_run_writes_its_expired_flows_within_seconds(sonde_bin, workdir):
    """The flows file is written in large chunks; what is pending goes out after a second
    without new records, so a reader following a live run's file sees an expired flow then,
    not only when sonde exits."""
    if os.geteuid() != 0:
        pytest.skip("live capture needs root")
    port = _free_udp_port()
    flows = workdir / "flows-live.jsonl"
    proc = subprocess.Popen(
        [str(sonde_bin), "-i", "lo", "-f", f"udp and port {port}", "--idle-timeout", "1",
         "--flows-out", str(flows), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, f"sonde exited early: {proc.stderr.read()}"
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(5):
            tx.sendto(PAYLOAD, ("127.0.0.1", port))
        tx.close()
        # Idle timeout 1 s, the sink's idle second, and the housekeeping tick: well under 10 s.
        deadline = time.monotonic() + 10
        recs = []
        while time.monotonic() < deadline and not recs:
            time.sleep(0.25)
            if flows.exists():
                recs = [r for r in oracle.load_jsonl(str(flows))
                        if port in (r.get("L4_SRC_PORT"), r.get("L4_DST_PORT"))]
        assert proc.poll() is None, "sonde is still running while the record is read"
        assert len(recs) == 1 and recs[0]["IN_PKTS"] == 5, recs
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
