"""Egress (issue 17, item 5): the packets of chosen flows forwarded to a pcap ring or an
interface, the rest shunted.

Oracles nobody here wrote: tcpdump applies the same BPF expression to the same capture, and
tshark dissects DNS and splits the capture into conversations. The frames sonde forwards are
compared byte for byte (with their timestamps) against what those tools select. The interface
test makes a veth pair of its own and captures the far end with tcpdump (needs root; skipped
otherwise).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_link_types import _read_pcap

PCAP = "teams.pcap"  # 1540 frames in 26 s: TCP, UDP, DNS, STUN, ICMP, ARP, STP


def _frames(path: Path) -> list[tuple[int, bytes]]:
    """(timestamp in µs, bytes) of each frame of a classic µs pcap file (sonde's ring,
    tcpdump -w and tshark -F pcap all write those)."""
    return [(sec * 1_000_000 + usec, data) for sec, usec, data, _ in _read_pcap(path)]


def _ring(d: Path) -> list[tuple[int, bytes]]:
    out = []
    for f in sorted(d.glob("egress-s*.pcap")):
        out += _frames(f)
    return out


def _tcpdump(src: Path, expr: str, out: Path) -> list[tuple[int, bytes]]:
    subprocess.run(["tcpdump", "-r", str(src), "-w", str(out), expr], check=True,
                   capture_output=True)
    return _frames(out)


def _run(sonde, workdir: Path, *args: str) -> dict:
    stats = workdir / "stats.json"
    r = sonde("-r", *args, "--stats-json", str(stats), "-q")
    assert r.returncode == 0, r.stderr
    s = json.loads(stats.read_text())
    e = s["egress"]
    # Every frame is accounted once.
    assert e["offered"] == s["packets"]
    assert e["forwarded"] + e["shunted"] + e["dropped"] == e["offered"], e
    return s


@pytest.fixture(scope="module")
def tcpdump_tool():
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump not installed (run scripts/setup-test-deps.sh)")


def test_bpf_and_host_list_forward_exactly_what_tcpdump_selects(sonde, corpus, workdir,
                                                                 tcpdump_tool):
    src = corpus / PCAP
    # The host list is the busiest /24 of the capture, so the test does not pin addresses.
    src_addrs = subprocess.run(["tshark", "-r", str(src), "-T", "fields", "-e", "ip.src"],
                               capture_output=True, text=True, check=True).stdout.split()
    busiest = collections.Counter(a.rsplit(".", 1)[0] for a in src_addrs if a).most_common(1)
    net = f"{busiest[0][0]}.0/24"
    cases = [
        (["--egress-bpf", "udp or icmp"], "udp or icmp"),
        (["--egress-hosts", f"{net},192.0.2.1"], f"net {net} or host 192.0.2.1"),
        (["--egress-bpf", "tcp", "--egress-hosts", net], f"tcp and net {net}"),
    ]
    for i, (flags, expr) in enumerate(cases):
        ring = workdir / f"ring{i}"
        ring.mkdir()
        s = _run(sonde, workdir, str(src), "--egress-pcap", str(ring), *flags)
        want = _tcpdump(src, expr, workdir / f"want{i}.pcap")
        got = _ring(ring)
        assert 0 < len(want) < s["packets"], (expr, len(want))
        assert got == want, (flags, len(got), len(want))
        assert s["egress"]["forwarded"] == len(want)
        assert s["egress"]["forwarded_bytes"] == sum(len(b) for _, b in want)
        assert s["egress"]["dropped"] == 0


def test_application_selection_brackets_tsharks_dns_packets(sonde, corpus, workdir,
                                                           tshark_tools):
    """`--egress-app DNS`: with undecided flows shunted, every packet sent is a DNS packet
    (tshark's dissector); with them forwarded, every DNS packet is sent. The same frames make
    up the DNS flows' packet counts in sonde's own flow records."""
    src = corpus / PCAP
    dns_file = workdir / "dns.pcap"
    subprocess.run(["tshark", "-r", str(src), "-Y", "dns", "-F", "pcap", "-w", str(dns_file)],
                   check=True, capture_output=True)
    dns = _frames(dns_file)
    assert len(dns) > 10
    runs = {}
    for mode in ("shunt", "forward"):
        ring = workdir / mode
        ring.mkdir()
        flows = workdir / f"{mode}.json"
        s = _run(sonde, workdir, str(src), "--egress-pcap", str(ring), "--egress-app", "DNS",
                 "--egress-undecided", mode, "--flows-out", str(flows))
        runs[mode] = (_ring(ring), s, flows)
    shunted_mode, forward_mode = runs["shunt"][0], runs["forward"][0]
    assert set(shunted_mode) <= set(dns)
    assert set(dns) <= set(forward_mode)
    # Most DNS packets come after their flow is labelled (a query's answer, or the query
    # itself): undecided flows cost a few packets, not the flows.
    assert len(shunted_mode) >= len(dns) // 2, (len(shunted_mode), len(dns))
    assert len(forward_mode) < runs["forward"][1]["packets"]
    # Forwarded in shunt mode = packets of DNS-labelled flows, less those seen before the
    # label: never more than the flows' own packet counts.
    records = [json.loads(l) for l in runs["shunt"][2].read_text().splitlines()]
    dns_flow_packets = sum(r["IN_PKTS"] + r["OUT_PKTS"] for r in records
                           if r.get("L7_PROTO_NAME", "").split(".")[0] == "DNS")
    assert len(shunted_mode) <= dns_flow_packets


def test_shunt_after_keeps_the_first_packets_of_each_flow(sonde, corpus, workdir, tshark_tools):
    src = corpus / PCAP
    ring = workdir / "ring"
    ring.mkdir()
    limit = 3
    _run(sonde, workdir, str(src), "--egress-pcap", str(ring), "--egress-shunt-after",
         str(limit))
    fields = ["frame.time_epoch", "ip.src", "ip.dst", "ip.proto", "tcp.srcport", "tcp.dstport",
              "udp.srcport", "udp.dstport", "ip.flags.mf", "ip.frag_offset"]

    def keyed(path: Path) -> collections.Counter:
        out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|",
                              "-Y", "(tcp or udp) and not icmp and not ipv6"]
                             + sum((["-e", f] for f in fields), []),
                             capture_output=True, text=True, check=True).stdout
        c = collections.Counter()
        for line in out.splitlines():
            _, a, b, proto, ts, td, us, ud, mf, frag = line.split("|")
            if mf == "1" or (frag not in ("", "0")):
                continue  # fragments: not keyed by ports
            pa, pb = (ts, td) if proto == "6" else (us, ud)
            c[(proto,) + tuple(sorted([(a, pa), (b, pb)]))] += 1
        return c

    before = keyed(src)
    after = collections.Counter()
    for f in sorted(ring.glob("egress-s*.pcap")):
        after += keyed(f)
    assert any(n > limit for n in before.values())
    want = {k: min(n, limit) for k, n in before.items()}
    assert dict(after) == want


def test_bad_egress_settings_are_refused_with_the_fix(sonde, corpus, workdir):
    src = str(corpus / PCAP)
    ring = workdir / "ring"
    ring.mkdir()
    cases = [
        (["--egress-app", "DNS"], "needs a destination"),
        (["--egress-pcap", str(workdir / "missing")], "mkdir -p"),
        (["--egress-iface", "sonde-nosuch0"], "no such interface"),
        (["--egress-pcap", str(ring), "--egress-app", "DNS", "--dpi", "off"], "needs DPI"),
        (["--egress-pcap", str(ring), "--egress-app", "NoSuchApp"], "'NoSuchApp'"),
        (["--egress-pcap", str(ring), "--egress-hosts", "10.0.0.1/8"], "write 10.0.0.0/8"),
        (["--egress-pcap", str(ring), "--egress-bpf", "udp and"], "--egress-bpf"),
        (["--egress-pcap", str(ring), "--threads", "2"], "--threads 1"),
    ]
    for flags, text in cases:
        r = sonde("-r", src, *flags, "-q")
        assert r.returncode != 0, flags
        assert text in r.stderr, (flags, r.stderr)
    assert not list(ring.iterdir()), "a refused run writes nothing"


@pytest.fixture
def veth():
    if os.geteuid() != 0:
        pytest.skip("a veth pair needs root")
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump not installed (run scripts/setup-test-deps.sh)")
    tag = os.getpid() % 100000
    send_end, far_end = f"sde{tag}s", f"sde{tag}c"
    r = subprocess.run(["ip", "link", "add", send_end, "type", "veth", "peer", "name", far_end],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a veth pair here: {r.stderr.strip()}")
    try:
        for end in (send_end, far_end):
            # No IPv6 (the kernel's own router solicitations would join the capture) and
            # room for the capture's largest frames.
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1"],
                           capture_output=True)
            subprocess.run(["ip", "link", "set", end, "mtu", "9000", "up"], check=True)
        yield send_end, far_end
    finally:
        subprocess.run(["ip", "link", "del", send_end], capture_output=True)


def test_interface_egress_sends_exactly_the_selected_frames(sonde, corpus, workdir, veth):
    send_end, far_end = veth
    src = corpus / PCAP
    expr = "udp or arp"
    want = _tcpdump(src, expr, workdir / "want.pcap")
    captured = workdir / "far.pcap"
    dump = subprocess.Popen(["tcpdump", "-i", far_end, "-U", "-w", str(captured), "-n"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        line = ""
        while "listening on" not in line and time.time() < deadline:
            line = dump.stderr.readline()
        assert "listening on" in line, line
        s = _run(sonde, workdir, str(src), "--egress-iface", send_end, "--egress-bpf", expr)
        time.sleep(1)
    finally:
        dump.terminate()
        dump.wait(timeout=10)
    got = _frames(captured)
    assert s["egress"]["forwarded"] == len(want), s["egress"]
    assert s["egress"]["dropped"] == 0, s["egress"]
    # Same frames, same order (timestamps are the far end's, so only the bytes are compared).
    assert [b for _, b in got] == [b for _, b in want]


def test_live_input_keeps_the_first_packets_of_each_flow(sonde_bin, workdir, veth):
    """`-i` with `--egress-shunt-after 2`: 10 flows of 20 frames sent into a veth end, the
    first 2 frames of each in the ring (the live path waits for the flow's verdict too)."""
    import socket
    from test_interfaces import _udp_frame

    send_end, capture_end = veth
    ring = workdir / "ring"
    ring.mkdir()
    stats = workdir / "stats.json"
    proc = subprocess.Popen([str(sonde_bin), "-i", capture_end, "-f", "udp and dst port 47111",
                             "--duration", "5", "--egress-pcap", str(ring),
                             "--egress-shunt-after", "2", "--stats-json", str(stats), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, proc.stderr.read()
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((send_end, 0))
        for i in range(200):
            s.send(_udp_frame("10.9.0.1", "10.9.0.2", 2000 + i % 10, bytes([i]) * 32))
        s.close()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    e = json.loads(stats.read_text())["egress"]
    assert (e["offered"], e["forwarded"], e["shunted"], e["dropped"]) == (200, 20, 180, 0), e
    got = _ring(ring)
    # Frames i and i+10 of each source port: the payload byte says which frame it was.
    assert sorted(b[-1] for _, b in got) == list(range(20))
