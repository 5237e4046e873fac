"""Several interfaces in one sonde: each veth end's packets counted under its own name.

The test makes two veth pairs of its own, sends a known number of UDP frames into one end of
each with a raw AF_PACKET socket (the generator), and captures the other ends with one sonde
(`-i A -i B`, two shards each, so each interface's shards share a fanout group). The summary's
`inputs` must give each interface exactly the frames sent into it, and /metrics the same per
interface while it runs; the kernel must have dropped none at this rate. Needs root (veth
pairs, live capture); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import time
import urllib.request

import pytest

from conftest import free_port

PORT = 47111
SENT = {"a": 300, "b": 700}


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _udp_frame(src: str, dst: str, sport: int, payload: bytes) -> bytes:
    """An Ethernet/IPv4/UDP frame (UDP checksum 0: none)."""
    udp = struct.pack("!HHHH", sport, PORT, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
    eth = bytes.fromhex("020000000002") + bytes.fromhex("020000000001") + b"\x08\x00"
    return eth + ip + udp


@pytest.fixture
def veth_pairs():
    if os.geteuid() != 0:
        pytest.skip("veth pairs and live capture need root")
    tag = os.getpid() % 100000
    pairs = {k: (f"sd{k}{tag}s", f"sd{k}{tag}c") for k in SENT}
    made = []
    try:
        for send_end, capture_end in pairs.values():
            r = subprocess.run(["ip", "link", "add", send_end, "type", "veth", "peer", "name",
                                capture_end], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot make a veth pair here: {r.stderr.strip()}")
            made.append(send_end)
            for end in (send_end, capture_end):
                subprocess.run(["ip", "link", "set", end, "up"], check=True)
        yield pairs
    finally:
        for end in made:
            subprocess.run(["ip", "link", "del", end], capture_output=True)


def _metric(text: str, name: str, interface: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{interface="{interface}"}} '):
            return int(line.split()[-1])
    return None


def test_two_interfaces_count_what_each_end_saw(veth_pairs, sonde_bin, workdir):
    stats = workdir / "stats.json"
    port = free_port()
    names = [capture_end for _, capture_end in veth_pairs.values()]
    cmd = [str(sonde_bin), "-f", f"udp and dst port {PORT}", "--threads", "2",
           "--duration", "8", "--stats-json", str(stats), "-q",
           "--http", f"127.0.0.1:{port}", "--no-auth"]
    for n in names:
        cmd += ["-i", n]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(2)  # the capture sockets open before the duration counts
        assert proc.poll() is None, f"sonde exited early: {proc.stderr.read()}"
        for k, (send_end, _) in veth_pairs.items():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((send_end, 0))
            # Many flows (source ports), so both shards of each interface get some.
            for i in range(SENT[k]):
                s.send(_udp_frame(f"10.{ord(k)}.0.1", f"10.{ord(k)}.0.2", 1024 + i % 50,
                                  b"x" * 64))
                if i % 50 == 49:
                    time.sleep(0.002)
            s.close()
        time.sleep(1.5)  # blocks are handed over after at most 50 ms
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/interface", timeout=10) as r:
            api = json.loads(r.read())
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(stats.read_text())
    by_name = {i["name"]: i for i in summary["inputs"]}
    assert sorted(by_name) == sorted(names), summary["inputs"]
    for k, (_, capture_end) in veth_pairs.items():
        i = by_name[capture_end]
        assert i["packets"] == SENT[k], (capture_end, i)
        assert i["capture"]["received"] == SENT[k], (capture_end, i)
        assert i["capture"]["dropped"] == 0, (capture_end, i)
        assert _metric(metrics, "sonde_input_received_total", capture_end) == SENT[k], metrics
        assert _metric(metrics, "sonde_input_capture_dropped_total", capture_end) == 0
    assert summary["packets"] == sum(SENT.values())
    assert summary["capture"]["received"] == sum(SENT.values())
    api_inputs = {i["name"]: i for i in api["inputs"]}
    assert {n: api_inputs[n]["received"] for n in names} == {
        veth_pairs[k][1]: SENT[k] for k in SENT}
    # Two shards an interface, each with its own ring's drops.
    assert api["shard_capture_dropped"] == [0, 0, 0, 0]
    assert metrics.count("sonde_shard_capture_dropped_total{") == 4
