"""The three ways sonde reads an interface (--capture ring, xdp, pcap) against what was sent.

Each test makes a veth pair of its own and sends known frames into one end with a raw
AF_PACKET socket (the generator): UDP flows, VLAN-tagged UDP (the kernel moves the tag out of
the frame; the ring and libpcap put it back), and ARP. sonde captures the other end and writes
every frame it saw to an egress pcap ring: the frames there must be the frames sent, byte for
byte and in order, and the counters must say how many there were. Filters must select what
tcpdump's expression selects, in the kernel (ring, pcap) or in sonde (xdp, and expressions on
VLAN tags). Bad settings get one clear error each, and the XDP program leaves with sonde, even
after kill -9. Needs root (veth pairs, live capture, XDP); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from test_bad_input import assert_clean_error
from test_link_types import _read_pcap

BACKENDS = ["ring", "pcap", "xdp"]


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _udp(src: str, dst: str, sport: int, dport: int, payload: bytes, vlan: int | None = None):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", _ip_checksum(ip)) + ip[12:]
    macs = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")
    tag = b"" if vlan is None else struct.pack("!HH", 0x8100, vlan)
    return macs + tag + b"\x08\x00" + ip + udp


def _arp(i: int) -> bytes:
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + bytes.fromhex("020000000001") + \
        socket.inet_aton("10.9.0.1") + bytes(6) + socket.inet_aton(f"10.9.0.{2 + i}")
    return b"\xff" * 6 + bytes.fromhex("020000000001") + b"\x08\x06" + body + bytes(18)


def _frames():
    """(frame, kind): 150 UDP frames over 30 flows (10 of them to port 6000), 60 on VLAN 100,
    10 ARP requests; interleaved as a link would carry them."""
    out = []
    for i in range(150):
        out.append((_udp("10.1.0.1", "10.1.0.2", 2000 + i % 30, 6000 if i % 30 < 10 else 7000,
                         bytes([i % 251]) * (20 + i % 40)), "udp"))
        if i % 5 < 2:
            out.append((_udp("10.2.0.1", "10.2.0.2", 3000 + i % 7, 53, b"v" * 30, vlan=100),
                        "vlan"))
        if i % 15 == 0:
            out.append((_arp(i // 15), "arp"))
    return out


FRAMES = _frames()


@pytest.fixture
def veth():
    """A veth pair: (the end frames are sent into, the end sonde captures)."""
    yield from _veth_pair(queues=1)


@pytest.fixture
def veth2():
    """A veth pair with two receive queues a side (AF_XDP: one shard a queue)."""
    yield from _veth_pair(queues=2)


def _veth_pair(queues: int):
    if os.geteuid() != 0:
        pytest.skip("veth pairs and live capture need root")
    tag = os.getpid() % 100000
    send_end, capture_end = f"sdx{tag}q{queues}s", f"sdx{tag}q{queues}c"
    q = ["numtxqueues", str(queues), "numrxqueues", str(queues)]
    r = subprocess.run(["ip", "link", "add", send_end, *q, "type", "veth", "peer", "name",
                        capture_end, *q], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a veth pair here: {r.stderr.strip()}")
    try:
        for end in (send_end, capture_end):
            # No IPv6 router solicitations or neighbour discovery among the counted frames.
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1"],
                           capture_output=True)
            subprocess.run(["ip", "link", "set", end, "up"], check=True)
        time.sleep(0.3)
        yield send_end, capture_end
    finally:
        subprocess.run(["ip", "link", "del", send_end], capture_output=True)


def _have_af_xdp() -> bool:
    try:
        socket.socket(44, socket.SOCK_RAW, 0).close()
        return True
    except OSError:
        return False


def _send(end: str, frames) -> None:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((end, 0))
    for i, f in enumerate(frames):
        s.send(f)
        if i % 40 == 39:
            time.sleep(0.002)
    s.close()


def _capture(sonde_bin: Path, workdir: Path, iface: str, backend: str, *flags: str,
             frames=FRAMES, egress: bool = True) -> tuple[dict, list[bytes], str]:
    """Runs sonde on `iface`, sends `frames` into the pair, stops it with SIGINT; returns its
    summary, the frames in its egress ring (in order) and its stderr."""
    stats, ring = workdir / f"stats-{backend}.json", workdir / f"egress-{backend}"
    ring.mkdir()
    cmd = [str(sonde_bin), "-i", iface, "--capture", backend, "--stats-json", str(stats),
           "--stats-interval", "0", *flags]
    if egress:
        cmd += ["--egress-pcap", str(ring)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, f"sonde exited early: {proc.stderr.read()}"
        _send(_peer(iface), [f for f, _ in frames])
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    got = [data for path in sorted(ring.glob("*.pcap")) for _, _, data, _ in _read_pcap(path)]
    return json.loads(stats.read_text()), got, err


def _peer(capture_end: str) -> str:
    return capture_end[:-1] + "s"


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_hands_over_the_frames_sent(veth, sonde_bin, workdir, backend):
    if backend == "xdp" and not _have_af_xdp():
        pytest.skip("this kernel has no AF_XDP")
    _, capture_end = veth
    summary, got, err = _capture(sonde_bin, workdir, capture_end, backend)
    sent = [f for f, _ in FRAMES]
    assert f"capturing on {capture_end} through {backend}" in err, err
    assert summary["inputs"][0]["capture_backend"].startswith(backend), summary["inputs"]
    assert summary["packets"] == len(sent), summary
    assert summary["capture"]["received"] == len(sent), summary["capture"]
    assert summary["capture"]["dropped"] == 0, summary["capture"]
    assert summary["non_ip"] == sum(1 for _, k in FRAMES if k == "arp")
    # The frames as they were on the wire: VLAN tags where they were, nothing else changed.
    assert len(got) == len(sent), (len(got), len(sent))
    for i, (a, b) in enumerate(zip(got, sent)):
        assert a == b, f"frame {i} differs:\n{a.hex()}\n{b.hex()}"
    assert summary["egress"]["forwarded"] == len(sent)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("expr,kinds", [("udp and dst port 6000", None), ("vlan 100", {"vlan"})])
def test_filters_select_what_tcpdump_selects(veth, sonde_bin, workdir, backend, expr, kinds):
    if backend == "xdp" and not _have_af_xdp():
        pytest.skip("this kernel has no AF_XDP")
    _, capture_end = veth
    summary, got, _ = _capture(sonde_bin, workdir, capture_end, backend, "-f", expr)
    if kinds is None:
        # Untagged UDP to port 6000 (a kernel program also matches tagged frames whose tag
        # was taken off; none of those go to 6000).
        want = [f for f, k in FRAMES if k == "udp" and struct.unpack("!H", f[36:38])[0] == 6000]
    else:
        want = [f for f, k in FRAMES if k in kinds]
    assert 0 < len(want) < len(FRAMES)
    assert got == want, (len(got), len(want))
    rejected = len(FRAMES) - len(want)
    in_sonde = backend == "xdp" or expr.startswith("vlan") and backend == "ring"
    # What the kernel rejects sonde never sees; what sonde rejects it counts as filtered.
    filtered = summary["dropped"]["filtered"]
    assert summary["packets"] == len(want) + (rejected if in_sonde else 0), summary
    assert filtered == (rejected if in_sonde else 0), summary


@pytest.mark.parametrize("backend,threads", [("ring", 1), ("ring", 2), ("xdp", 1)])
def test_batches_read_in_place_count_every_flow(veth, sonde_bin, workdir, backend, threads):
    """Without egress, trigger capture or a filter in sonde, a shard hands the engine a ring
    block's (or an AF_XDP batch's) frames at once, read where the kernel wrote them: the
    flows are the ones sent, VLAN tags included, over one shard or a fanout of two."""
    if backend == "xdp" and not _have_af_xdp():
        pytest.skip("this kernel has no AF_XDP")
    _, capture_end = veth
    flows = workdir / "flows.json"
    summary, _, _ = _capture(sonde_bin, workdir, capture_end, backend, "--threads",
                             str(threads), "--flows-out", str(flows), egress=False)
    assert summary["packets"] == len(FRAMES)
    assert summary["capture"]["received"] == len(FRAMES)
    records = [json.loads(l) for l in flows.read_text().splitlines()]
    by_vlan: dict[int, int] = {}
    for r in records:
        by_vlan[r["VLAN_ID"]] = by_vlan.get(r["VLAN_ID"], 0) + r["IN_PKTS"] + r["OUT_PKTS"]
    assert by_vlan == {0: sum(1 for _, k in FRAMES if k == "udp"),
                       100: sum(1 for _, k in FRAMES if k == "vlan")}, by_vlan
    # 30 UDP flows and 7 on the VLAN.
    assert len(records) == 37, len(records)


def test_xdp_reads_each_queue_with_a_shard(veth2, sonde_bin, workdir):
    if not _have_af_xdp():
        pytest.skip("this kernel has no AF_XDP")
    _, capture_end = veth2
    summary, _, err = _capture(sonde_bin, workdir, capture_end, "xdp", "--threads", "2",
                               egress=False)
    assert summary["packets"] == len(FRAMES), (summary, err)
    assert summary["capture"]["received"] == len(FRAMES)
    assert summary["capture"]["dropped"] == 0


def test_xdp_program_leaves_with_sonde_even_after_kill_9(veth, sonde_bin):
    if not _have_af_xdp():
        pytest.skip("this kernel has no AF_XDP")
    _, capture_end = veth

    def attached() -> bool:
        out = subprocess.run(["ip", "link", "show", "dev", capture_end], capture_output=True,
                             text=True).stdout
        return "prog/xdp" in out

    assert not attached()
    proc = subprocess.Popen([str(sonde_bin), "-i", capture_end, "--capture", "xdp", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not attached() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert attached(), proc.stderr.read() if proc.poll() is not None else "not attached"
        # A second sonde cannot take the interface's XDP hook and says what holds it.
        p = subprocess.run([str(sonde_bin), "-i", capture_end, "--capture", "xdp", "-q",
                            "--duration", "1"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        assert_clean_error(p, r"already has an XDP program.*--capture ring", "second xdp")
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.time() + 5
    while attached() and time.time() < deadline:
        time.sleep(0.1)
    assert not attached(), "the XDP program stayed on the interface after sonde was killed"


def test_bad_capture_settings_get_one_clear_error(veth, sonde_bin):
    _, capture_end = veth
    cases = [
        (["-i", "nosuch0", "--capture", "ring"], r"no such interface 'nosuch0'.*ip link"),
        (["-i", "nosuch0", "--capture", "xdp"], r"no such interface 'nosuch0'"),
        (["-i", "nosuch0", "--capture", "pcap"], r"no such interface 'nosuch0'"),
        (["-i", "any", "--capture", "ring"], r"'any'.*--capture pcap"),
        (["-i", capture_end, "--capture", "ring", "--capture-block-kb", "1000"],
         r"power of two"),
        (["-i", capture_end, "--capture", "ring", "--capture-ring-mb", "0"], r"MiB"),
        (["-i", capture_end, "--capture", "ring", "-f", "udp port"], r"bad capture filter"),
    ]
    if _have_af_xdp():
        cases.append((["-i", capture_end, "--capture", "xdp", "--threads", "2"],
                      r"1 receive queue.*--threads 1"))
    for flags, names in cases:
        p = subprocess.run([str(sonde_bin), *flags, "-q", "--duration", "1"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert_clean_error(p, names, " ".join(flags))


@pytest.mark.parametrize("backend", ["ring", "xdp"])
def test_no_permission_is_named(veth, sonde_bin, backend):
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not installed")
    _, capture_end = veth
    p = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", str(sonde_bin), "-i", capture_end, "--capture",
                        backend, "-q", "--duration", "1"],
                       capture_output=True, text=True, timeout=30, cwd="/",
                       stdin=subprocess.DEVNULL)
    assert not p.stderr.startswith("setpriv:"), p.stderr
    assert_clean_error(p, r"no permission to capture.*setcap", f"--capture {backend} as nobody")


def _series_sum(sonde_bin: Path, data: Path, key: str) -> int:
    q = subprocess.run([str(sonde_bin), "query", "--data-dir", str(data), "series", "--key", key,
                        "--resolution", "1s", "--from", "2000-01-01", "--to", "2100-01-01",
                        "--format", "jsonl"], capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    return sum(json.loads(l).get("BYTES_IN", 0) for l in q.stdout.splitlines() if l.strip())


def test_kernel_drops_are_kept_in_the_series(veth, sonde_bin, workdir):
    """A shard that stops reading (SIGSTOP) while a burst arrives: its small ring fills and
    the kernel drops the rest. The drops the summary counts are in the stored series, the
    whole probe's and the interface's, second by second; the flow table's drop series stays
    at zero (a drop is an overload, not a frame the filter rejected)."""
    send_end, capture_end = veth
    data, stats = workdir / "data", workdir / "stats.json"
    proc = subprocess.Popen([str(sonde_bin), "-i", capture_end, "--capture-ring-mb", "1",
                             "--capture-block-kb", "64", "-f", "udp and dst port 6000",
                             "--data-dir", str(data), "--stats-json", str(stats), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, proc.stderr.read()
        burst = [_udp("10.1.0.1", "10.1.0.2", 2000 + i % 300, 6000, b"d" * 40)
                 for i in range(20000)]
        proc.send_signal(signal.SIGSTOP)
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((send_end, 0))
        for f in burst:
            s.send(f)
        # Frames the filter rejects are discarded in the kernel: neither counted nor dropped.
        for f, _ in FRAMES:
            s.send(f)
        s.close()
        time.sleep(0.3)
        proc.send_signal(signal.SIGCONT)
        time.sleep(2.5)  # a second closes; its rows reach the series
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(stats.read_text())
    dropped = summary["capture"]["dropped"]
    matching = len(burst) + sum(1 for f, k in FRAMES
                                if k == "udp" and struct.unpack("!H", f[36:38])[0] == 6000)
    assert dropped > 0, summary["capture"]
    assert summary["capture"]["received"] == matching
    assert summary["packets"] + dropped == matching
    assert _series_sum(sonde_bin, data, "gauge:capture_drops") == dropped
    assert _series_sum(sonde_bin, data, f"gauge:capture_drops:{capture_end}") == dropped
    assert _series_sum(sonde_bin, data, "gauge:drops") == 0


def test_filtered_packets_are_not_in_the_drop_series(sonde_bin, corpus, workdir):
    """-f on a file: the frames it rejects are counted as filtered, never as drops."""
    data, stats = workdir / "data", workdir / "stats.json"
    p = subprocess.run([str(sonde_bin), "-r", str(corpus / "teams.pcap"), "-f", "udp",
                        "--data-dir", str(data), "--stats-json", str(stats), "-q"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(stats.read_text())
    assert summary["dropped"]["filtered"] > 0, summary["dropped"]
    assert summary["dropped"]["flow_table_full"] == 0
    assert _series_sum(sonde_bin, data, "gauge:drops") == 0
    # No live interface: no kernel drop series at all.
    q = subprocess.run([str(sonde_bin), "query", "--data-dir", str(data), "series", "--list"],
                       capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    assert "gauge:capture_drops" not in q.stdout, q.stdout
