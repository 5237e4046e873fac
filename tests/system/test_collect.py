"""sonde as a NetFlow/IPFIX collector fed by real exporters (issue 4).

* softflowd (NetFlow v9 and IPFIX) reads a corpus capture and exports to sonde on 127.0.0.1:
  the packets and octets sonde collects, per transport protocol, equal softflowd's own
  per-protocol report, and sonde shows one flow per conversation of the capture.
* pmacctd reads the same capture with two plugins: nfprobe (IPFIX to sonde) and print (its own
  table of flows): every directed flow of pmacct's table has the same packets and bytes in
  sonde's collected flows.
* The flow-export captures of the corpus (NetFlow v5, sFlow) replayed to sonde's collector:
  sonde's totals equal tshark's decoding of the same datagrams.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

import oracle

PCAP = "1kxun.pcap"
# The capture spans 2016 and 2022: a huge idle timeout keeps each conversation one flow.
ARGS = ["--idle-timeout", "1000000000", "--active-timeout", "0", "-q"]


def _need(tool):
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} not installed (scripts/setup-test-deps.sh installs it)")


def _free_udp_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Collector:
    """`sonde --collect udp://127.0.0.1:PORT` for a few seconds."""

    def __init__(self, sonde_bin, workdir: Path, seconds: int = 6, options: str = ""):
        self.port = _free_udp_port()
        self.flows = workdir / "collected.jsonl"
        self.stats = workdir / "collected-stats.json"
        self.proc = subprocess.Popen(
            [str(sonde_bin), "--collect", f"udp://127.0.0.1:{self.port}{options}", "--duration",
             str(seconds), "--flows-out", str(self.flows), "--stats-json", str(self.stats),
             *ARGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL)
        time.sleep(0.5)
        assert self.proc.poll() is None, self.proc.stderr.read()

    def result(self):
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return oracle.load_jsonl(str(self.flows)), json.loads(self.stats.read_text())


def _totals_by_proto(records):
    t = collections.Counter()
    for r in records:
        p = int(r["PROTOCOL"])
        t[(p, "pkts")] += int(r["IN_PKTS"]) + int(r["OUT_PKTS"])
        t[(p, "bytes")] += int(r["IN_BYTES"]) + int(r["OUT_BYTES"])
    return t


@pytest.mark.parametrize("version", ["9", "10"])
def test_softflowd_export_collected(version, sonde_bin, corpus, workdir):
    _need("softflowd")
    col = Collector(sonde_bin, workdir)
    sf = subprocess.run(["softflowd", "-r", str(corpus / PCAP), "-n", f"127.0.0.1:{col.port}",
                         "-v", version, "-c", "none", "-m", "100000", "-d"],
                        capture_output=True, text=True, timeout=60)
    records, stats = col.result()
    assert sf.returncode == 0, sf.stderr
    # softflowd's own report: "tcp (6):  OCTETS  PACKETS ...".
    report = {}
    for m in re.finditer(r"^\s*\w+ \((\d+)\):\s+(\d+)\s+(\d+)", sf.stdout + sf.stderr, re.M):
        report[(int(m[1]), "bytes")] = int(m[2])
        report[(int(m[1]), "pkts")] = int(m[3])
    assert report, f"no per-protocol report from softflowd:\n{sf.stdout[-2000:]}"
    assert _totals_by_proto(records) == collections.Counter(report)
    assert stats["collected"]["errors"] == 0
    if version == "9":
        # (softflowd 1.1's IPFIX sequence number counts the message's own records, against
        # RFC 7011 §3.1, so gaps show up there although the totals above prove none is lost.)
        assert sum(e["lost_records"] + e["lost_packets"] for e in stats["exporters"]) == 0
    convs = {(int(r["PROTOCOL"]),) + tuple(sorted(oracle.record_endpoints(r)[1:]))
             for r in records}
    assert len(convs) == len(records), "a conversation was split into several flows"


def test_pmacctd_export_collected(sonde_bin, corpus, workdir):
    _need("pmacctd")
    col = Collector(sonde_bin, workdir, seconds=8)
    printed = workdir / "pmacct-print.csv"
    conf = workdir / "pmacctd.conf"
    conf.write_text(f"""daemonize: false
pcap_savefile: {corpus / PCAP}
pcap_savefile_wait: false
plugins: nfprobe[nf], print[pr]
aggregate[nf]: src_host, dst_host, src_port, dst_port, proto
aggregate[pr]: src_host, dst_host, src_port, dst_port, proto
nfprobe_receiver[nf]: 127.0.0.1:{col.port}
nfprobe_version[nf]: 10
print_output[pr]: csv
print_output_file[pr]: {printed}
print_refresh_time[pr]: 60
""")
    pm = subprocess.run(["pmacctd", "-f", str(conf)], capture_output=True, text=True,
                        timeout=60)
    records, stats = col.result()
    assert pm.returncode == 0, pm.stderr[-2000:]
    want = collections.Counter()
    lines = printed.read_text().splitlines()
    head = lines[0].split(",")
    for line in lines[1:]:
        row = dict(zip(head, line.split(",")))
        proto = {"tcp": 6, "udp": 17, "icmp": 1, "ipv6-icmp": 58}.get(row["PROTOCOL"])
        if proto not in (6, 17):
            continue
        key = (proto, (oracle.norm_addr(row["SRC_IP"]), int(row["SRC_PORT"])),
               (oracle.norm_addr(row["DST_IP"]), int(row["DST_PORT"])))
        want[key + ("pkts",)] += int(row["PACKETS"])
        want[key + ("bytes",)] += int(row["BYTES"])
    got = collections.Counter()
    for r in records:
        proto, c, s = oracle.record_endpoints(r)
        if proto not in (6, 17):
            continue
        got[(proto, c, s, "pkts")] += int(r["IN_PKTS"])
        got[(proto, c, s, "bytes")] += int(r["IN_BYTES"])
        got[(proto, s, c, "pkts")] += int(r["OUT_PKTS"])
        got[(proto, s, c, "bytes")] += int(r["OUT_BYTES"])
    assert want, "pmacct printed no TCP/UDP flow"
    diff = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
    assert not diff and +got == want, f"{len(diff)} differ: {list(diff.items())[:5]}"
    assert stats["collected"]["errors"] == 0


def _replay(pcaps, port, source="127.0.0.1"):
    """Sends the UDP payloads of `pcaps`, in order, from one socket (one exporter)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((source, 0))
    for p in pcaps:
        out = oracle.tshark(["-r", str(p), "-T", "fields", "-e", "udp.payload"])
        for line in out.split():
            s.sendto(bytes.fromhex(line), ("127.0.0.1", port))
            time.sleep(0.005)
    s.close()


def _tshark_sum(pcap, port, fields):
    out = oracle.tshark(["-r", str(pcap), "-d", f"udp.port=={port},cflow", "-T", "fields",
                         *sum((["-e", f] for f in fields), [])])
    sums = [0] * len(fields)
    for line in out.splitlines():
        for i, col in enumerate(line.split("\t")):
            sums[i] += sum(int(v) for v in col.split(",") if v)
    return sums


def test_netflow_v5_capture_decodes_completely(sonde_bin, workdir):
    flowproto = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto"
    pcap = flowproto / "akvorado_netflow_nfv5.pcap"
    col = Collector(sonde_bin, workdir, seconds=3)
    _replay([pcap], col.port)
    records, stats = col.result()
    pkts, octets, count = _tshark_sum(pcap, 9990, ["cflow.packets", "cflow.octets", "cflow.count"])
    assert stats["collected"]["decoded"] == count == 29
    assert stats["collected"]["packets"] == pkts
    assert stats["collected"]["bytes"] == octets
    assert sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in records) == pkts


def test_exporters_outside_the_allow_list_are_refused_and_counted(sonde_bin, sonde, workdir):
    """`?allow=`: the NetFlow v5 capture sent from 127.0.0.2 is taken, the same sent from
    127.0.0.1 is dropped before decoding and counted; a bad list or option is named."""
    flowproto = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto"
    pcap = flowproto / "akvorado_netflow_nfv5.pcap"
    datagrams = len(oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "udp.payload"]).split())
    col = Collector(sonde_bin, workdir, seconds=3, options="?allow=127.0.0.2/32,10.0.0.0/8")
    _replay([pcap], col.port, source="127.0.0.1")
    _replay([pcap], col.port, source="127.0.0.2")
    records, stats = col.result()
    assert stats["collected"]["refused_sources"] == datagrams
    assert stats["collected"]["decoded"] == 29, "one copy, from the allowed exporter"
    assert [e["exporter"].split(":")[0] for e in stats["exporters"]] == ["127.0.0.2"]
    for url, want in ((f"udp://127.0.0.1:{_free_udp_port()}?allow=10.0.0.0/33", "10.0.0.0/33"),
                      (f"udp://127.0.0.1:{_free_udp_port()}?allow=", "names no address"),
                      (f"udp://127.0.0.1:{_free_udp_port()}?alow=10.0.0.0/8", "unknown option"),
                      (f"zmq+tcp://127.0.0.1:{_free_udp_port()}?allow=10.0.0.0/33",
                       "10.0.0.0/33")):
        p = sonde("--collect", url, "--duration", "1", "-q")
        assert p.returncode != 0 and want in p.stderr, (url, p.stderr)


def _netflow_v5(records, sampling=0):
    """A NetFlow v5 datagram; records are (src, dst, packets, bytes, first_ms, last_ms)."""
    now = int(time.time())
    head = struct.pack("!HHIIIIBBH", 5, len(records), 100_000, now, 0, 1, 0, 0, sampling)
    body = b"".join(
        struct.pack("!4s4s4sHHIIIIHHBBBBHHBBH", socket.inet_aton(src), socket.inet_aton(dst),
                    bytes(4), 1, 2, packets, octets, first, last, 40000, 80, 0, 0x18, 6, 0,
                    0, 0, 24, 24, 0)
        for src, dst, packets, octets, first, last in records)
    return head + body


def test_records_with_impossible_counters_are_suspect(sonde_bin, workdir):
    """Random bytes parse as NetFlow v5 records with counters no link carries: such records
    are counted as suspect and kept out of the flows and hosts; the sound record beside them
    is kept."""
    col = Collector(sonde_bin, workdir, seconds=3)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(_netflow_v5([
        ("10.0.0.1", "10.0.0.2", 10, 6_000, 90_000, 95_000),          # sound
        ("10.0.0.3", "10.0.0.4", 4_000_000_000, 4_000_000_000, 90_000, 90_000),  # 1 B a packet
        ("10.0.0.5", "10.0.0.6", 1, 4_000_000_000, 90_000, 90_000),   # 4 GB in one packet
    ]), ("127.0.0.1", col.port))
    # 10^8 packets of 40 bytes in one second, times a sampling interval of 16383.
    s.sendto(_netflow_v5([("10.0.0.7", "10.0.0.8", 100_000_000, 4_000_000_000, 90_000, 90_000)],
                         sampling=0x4000 | 16383), ("127.0.0.1", col.port))
    s.close()
    records, stats = col.result()
    assert stats["collected"]["decoded"] == 4
    assert stats["collected"]["suspect"] == 3
    assert [(r["IPV4_SRC_ADDR"], int(r["IN_PKTS"]) + int(r["OUT_PKTS"])) for r in records] == [
        ("10.0.0.1", 10)]


def _ipfix_with_times(src, dst, packets, octets, start_ms, end_ms):
    """One IPFIX message: a template (addresses, counters, flowStart/EndMilliseconds) and a
    record of it."""
    fields = [(8, 4), (12, 4), (2, 8), (1, 8), (152, 8), (153, 8)]
    tmpl = struct.pack("!HH", 256, len(fields)) + b"".join(struct.pack("!HH", i, n) for i, n in fields)
    tset = struct.pack("!HH", 2, 4 + len(tmpl)) + tmpl
    rec = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!QQQQ", packets, octets, start_ms, end_ms)
    dset = struct.pack("!HH", 256, 4 + len(rec)) + rec
    body = tset + dset
    return struct.pack("!HHIII", 10, 16 + len(body), int(time.time()), 0, 1) + body


def test_records_from_the_future_are_retimed_and_do_not_stop_timeouts(sonde_bin, workdir):
    """A record whose times are far after its arrival (random bytes: an end in 2^63 ms) counts
    at its arrival, and is counted as retimed: it used to move the shard's clock past the end
    of time, after which no flow ever timed out. Both flows end by their idle timeout."""
    port = _free_udp_port()
    stats = workdir / "stats.json"
    proc = subprocess.Popen(
        [str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--duration", "6",
         "--idle-timeout", "1", "--stats-json", str(stats), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    time.sleep(0.5)
    now_ms = int(time.time() * 1000)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(_ipfix_with_times("10.0.0.1", "10.0.0.2", 10, 6_000, now_ms, 1 << 63), ("127.0.0.1", port))
    time.sleep(0.5)
    s.sendto(_ipfix_with_times("10.0.0.3", "10.0.0.4", 10, 6_000, now_ms - 2_000, now_ms), ("127.0.0.1", port))
    s.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    st = json.loads(stats.read_text())
    assert (st["collected"]["retimed"], st["collected"]["suspect"]) == (1, 0), st["collected"]
    assert st["flows"]["ended"]["idle_timeout"] == 2, st["flows"]


def test_sflow_samples_scaled(sonde_bin, workdir):
    flowproto = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto"
    pcap = flowproto / "akvorado_sflow_data-1140.pcap"
    col = Collector(sonde_bin, workdir, seconds=3)
    _replay([pcap], col.port)
    records, stats = col.result()
    out = oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "sflow.flow_sample.sampling_rate"])
    rates = [int(v) for line in out.split() for v in line.split(",") if v]
    assert stats["collected"]["samples"] == len(rates) == 5
    assert stats["collected"]["packets"] == sum(rates)
    assert all(int(r["SAMPLING_INTERVAL"]) == rates[0] for r in records)


def _sflow_gateways(pcap) -> list:
    """(source AS, destination AS) of every extended gateway record, read from tshark's
    dissection: the destination is the last entry of the AS path (tshark lists the
    communities after the path's entries under the same label, so the path's own count says
    where it ends; an empty path has none)."""
    text = oracle.tshark(["-r", str(pcap), "-V"])
    out, src, left, last, in_gateway = [], None, 0, 0, False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Format: Extended gateway data"):
            if in_gateway:
                out.append((src, last))
            in_gateway, src, left, last = True, None, 0, 0
        elif in_gateway and line.startswith("AS Source:"):
            src = int(line.split(":")[1])
        elif in_gateway and re.match(r"AS (Sequence|Set), \((\d+) entr", line):
            left = int(re.match(r"AS (Sequence|Set), \((\d+) entr", line).group(2))
        elif in_gateway and line.startswith("AS Destination:") and left > 0:
            last, left = int(line.split(":")[1]), left - 1
        elif in_gateway and line.startswith("Format:"):
            out.append((src, last))
            in_gateway = False
    if in_gateway:
        out.append((src, last))
    return out


def test_sflow_gateway_as_numbers_are_kept(sonde_bin, workdir):
    """sFlow's extended gateway record (0:1003) gives the sampled packet's source AS and,
    last on its AS path, the destination's: the flow records carry them as SRC_AS/DST_AS, as
    tshark reads them (each pair in either order: a record is oriented client to server)."""
    flowproto = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto"
    pcap = flowproto / "akvorado_sflow_data-1140.pcap"
    want = _sflow_gateways(pcap)
    assert len(want) == 2 and any(d for _, d in want) and any(s for s, _ in want), want
    col = Collector(sonde_bin, workdir, seconds=3)
    _replay([pcap], col.port)
    records, _ = col.result()
    got = [tuple(sorted((int(r.get("SRC_AS", 0)), int(r.get("DST_AS", 0))))) for r in records
           if r.get("SRC_AS") or r.get("DST_AS")]
    assert collections.Counter(got) == collections.Counter(tuple(sorted(w)) for w in want)


def test_sflow_interface_counters_in_stats(sonde_bin, workdir):
    """The latest sFlow generic interface counters per ifIndex reach the stats output."""
    pcap = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "ndpi" / "sflow.pcap"
    col = Collector(sonde_bin, workdir, seconds=3)
    _replay([pcap], col.port)
    _, stats = col.result()
    out = oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "sflow_245.ifindex",
                         "-e", "sflow_245.ifinoct", "-e", "sflow_245.ifoutoct"])
    latest = {}
    for line in out.splitlines():
        idx, inoct, outoct = line.split("\t")
        if idx:
            latest[idx] = (int(inoct), int(outoct))
    assert len(latest) == 2
    (exporter,) = stats["exporters"]
    got = {i: (c["in_octets"], c["out_octets"]) for i, c in exporter["interface_counters"].items()}
    assert got == latest
    assert exporter["interface_names"] == {}


def _ipfix_interface_names(names):
    """One IPFIX message: options template 300 (scope ingressInterface, then interfaceName,
    variable length) and its data set with one record per (ifIndex, name)."""
    # Options template record: id, field count, scope count, then (IE, length) pairs.
    rec = struct.pack("!HHH", 300, 2, 1) + struct.pack("!HH", 10, 4) + struct.pack("!HH", 82, 0xFFFF)
    tset = struct.pack("!HH", 3, 4 + len(rec)) + rec
    data = b""
    for idx, name in names:
        raw = name.encode()
        data += struct.pack("!IB", idx, len(raw)) + raw
    pad = (-len(data)) % 4
    dset = struct.pack("!HH", 300, 4 + len(data) + pad) + data + b"\0" * pad
    body = tset + dset
    return struct.pack("!HHIII", 10, 16 + len(body), int(time.time()), 1, 7) + body


def test_interface_names_from_options_in_stats(sonde_bin, workdir):
    """Interface names announced by IPFIX options records are shown per exporter, as tshark
    reads them from the same message (wire strings, hostile ones included, kept as data)."""
    names = [(3, "Gi0/0/3"), (7, "<script>alert(1)</script>")]
    msg = _ipfix_interface_names(names)
    pcap = workdir / "ifnames.pcap"
    # tshark is the oracle for what the message says: write it as a pcap and decode it.
    with open(pcap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        ip_len = 20 + 8 + len(msg)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 1, 0, 64, 17, 0,
                         bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
        udp = struct.pack("!HHHH", 40000, 4739, 8 + len(msg), 0)
        pkt = ip + udp + msg
        f.write(struct.pack("<IIII", 0, 0, len(pkt), len(pkt)) + pkt)
    out = oracle.tshark(["-r", str(pcap), "-d", "udp.port==4739,cflow", "-T", "fields",
                         "-E", "occurrence=a", "-e", "cflow.if_name"])
    assert out.strip().split(",") == [n for _, n in names]
    col = Collector(sonde_bin, workdir, seconds=2)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(msg, ("127.0.0.1", col.port))
    s.close()
    _, stats = col.result()
    (exporter,) = stats["exporters"]
    assert exporter["interface_names"] == {str(i): n for i, n in names}
    assert exporter["option_records"] == 2


def _wait_listening(port: int, proc, seconds: float = 20) -> None:
    """Waits until a TCP socket listens on `port` (/proc/net/tcp*, state 0A), without
    connecting to it (a probe connection would count as an exporter)."""
    deadline = time.time() + seconds
    want = f":{port:04X}"
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
            if any(r[1].endswith(want) and r[3] == "0A" for r in rows):
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on TCP port {port} after {seconds} s")


def _export_to_collecting_sonde(sonde_bin, upper_args, pcap, url, exported_flows):
    """Starts a collecting sonde (`upper_args`), has a second one read `pcap` and export its
    flows to `url` (its own flows kept in `exported_flows`), and waits for both to end well."""
    upper = subprocess.Popen([str(sonde_bin), *upper_args, *ARGS], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        if "+tcp://" in url:
            _wait_listening(int(url.rsplit(":", 1)[1].split("?")[0].split("/")[0]), upper)
        else:
            time.sleep(0.5)
        low = subprocess.run(
            [str(sonde_bin), "-r", str(pcap), "--export", url, "--flows-out",
             str(exported_flows), *ARGS], capture_output=True, text=True, timeout=60)
        assert low.returncode == 0, low.stderr
        _, err = upper.communicate(timeout=60)
    finally:
        if upper.poll() is None:
            upper.kill()
    assert upper.returncode == 0, err


def test_ipfix_over_tcp_between_two_sondes(sonde_bin, corpus, workdir):
    """IPFIX over TCP: one sonde exports a capture's flows (`--export ipfix+tcp://`), another
    collects them (`--collect tcp://`): same flows, packets and bytes per direction."""
    port = _free_udp_port()  # a free port number; TCP on it is free too in practice
    flows, stats = workdir / "tcp-collected.jsonl", workdir / "tcp-stats.json"
    low_flows = workdir / "exported.jsonl"
    _export_to_collecting_sonde(
        sonde_bin, ["--collect", f"tcp://127.0.0.1:{port}", "--duration", "5", "--flows-out",
                    str(flows), "--stats-json", str(stats)],
        corpus / "http_ipv6.pcap", f"ipfix+tcp://127.0.0.1:{port}", low_flows)


    lower = oracle.load_jsonl(str(low_flows))
    assert lower
    assert oracle.record_directions(oracle.load_jsonl(str(flows))) == oracle.record_directions(lower)
    s = json.loads(stats.read_text())
    assert s["collected"]["errors"] == 0 and s["exporters"], s


def test_a_capture_and_a_collector_in_one_sonde(sonde_bin, corpus, workdir):
    """Two inputs in one instance (`--synthetic … --collect tcp://…`): the synthetic shards'
    packets and the collected records are both in its counters and its flows, each exactly as
    it would be alone."""
    port = _free_udp_port()
    flows, stats = workdir / "both.jsonl", workdir / "both-stats.json"
    exported = workdir / "exported-both.jsonl"
    _export_to_collecting_sonde(
        sonde_bin, ["--synthetic", "hosts=7,packets=700", "--collect", f"tcp://127.0.0.1:{port}",
                    "--threads", "2", "--duration", "5", "--flows-out", str(flows),
                    "--stats-json", str(stats)],
        corpus / "http_ipv6.pcap", f"ipfix+tcp://127.0.0.1:{port}", exported)
    s = json.loads(stats.read_text())
    assert s["packets"] == 700, s["packets"]
    assert s["threads"] == 4, "two shards per input"
    sent = oracle.load_jsonl(str(exported))
    assert sent and s["collected"]["records"] == len(sent), (s["collected"], len(sent))
    records = oracle.load_jsonl(str(flows))
    collected = [r for r in records if "EXPORTER_IPV4_ADDRESS" in r]
    captured = [r for r in records if "EXPORTER_IPV4_ADDRESS" not in r]
    assert sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in captured) == 700
    assert sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in collected) == \
        sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in sent)
    assert "synthetic hosts=7,packets=700 + collector" in s["source"], s["source"]


def test_a_file_is_read_alone(sonde_bin, corpus):
    p = subprocess.run([str(sonde_bin), "-r", str(corpus / "http_ipv6.pcap"), "--collect",
                        "udp://127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert p.stderr.startswith("sonde: error: -r FILE is read alone"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_sink_counters_in_metrics_while_running(sonde_bin, corpus, workdir):
    """While a collecting sonde runs, /metrics shows each flow sink's counters: the records
    offered to its queue and written, none dropped, for a flows file fed by collected flows
    that time out (idle timeout 1 s)."""
    import urllib.request
    from conftest import free_port
    port, http = _free_udp_port(), free_port()
    flows = workdir / "live-sink.jsonl"
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--http", f"127.0.0.1:{http}",
         "--no-auth", "--flows-out", str(flows), "--idle-timeout", "1", "--active-timeout", "1",
         "--duration", "30", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        low = subprocess.run([str(sonde_bin), "-r", str(corpus / "http_ipv6.pcap"), "--export",
                              f"netflow9://127.0.0.1:{port}", "-q"],
                             capture_output=True, text=True, timeout=60)
        assert low.returncode == 0, low.stderr
        name = f"flows file '{flows}'"
        deadline, metrics = time.time() + 20, {}
        while time.time() < deadline:
            text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read().decode()
            metrics = {m.group(1): int(m.group(2)) for m in re.finditer(
                r'^sonde_(sink_\w+)\{sink="(?:[^"\\]|\\.)*"\} (\d+)$', text, re.M)}
            if metrics.get("sink_written_records_total", 0) > 0:
                break
            time.sleep(0.5)
        assert f'sink="{name}"' in text
        assert metrics["sink_written_records_total"] > 0, text
        assert metrics["sink_offered_records_total"] == metrics["sink_written_records_total"]
        assert metrics["sink_queue_dropped_records_total"] == 0
        assert metrics["sink_dropped_total"] == 0 and metrics["sink_failed"] == 0
    finally:
        upper.send_signal(signal.SIGINT)
        upper.communicate(timeout=60)


def test_tcp_collector_caps_its_connections(sonde_bin, workdir):
    """An IPFIX-over-TCP collector keeps at most 64 exporters connected: 70 connections leave 6
    closed at once by the collector, counted in the summary (issue 19, item 5)."""
    import socket as _socket
    from conftest import free_port
    port = free_port()
    stats = workdir / "s.json"
    # Stopped with Ctrl-C once counted: a short --duration could end the run (and close every
    # connection) before the count on a loaded machine.
    proc = subprocess.Popen([str(sonde_bin), "--collect", f"tcp://127.0.0.1:{port}", "-q",
                             "--duration", "60", "--stats-json", str(stats)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    socks = []
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                _socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)  # the probe connection above has ended and given back its slot
        for _ in range(70):
            socks.append(_socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(2.0)
        closed = 0
        for s in socks:
            s.settimeout(0.05)
            try:
                closed += s.recv(1) == b""
            except (TimeoutError, _socket.timeout):
                pass
            except ConnectionResetError:
                closed += 1
        assert closed == 6, closed
    finally:
        for s in socks:
            s.close()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(stats.read_text())["collected"]["connections_refused"] == 6


def test_collected_as_numbers_are_kept_by_end(sonde_bin, workdir):
    """A NetFlow v9 capture whose template has SRC_AS/DST_AS (akvorado's): every record's AS
    numbers, as tshark decodes them, come out as SRC_AS/DST_AS of its flow (swapped when the
    record runs server to client), as numbers, not as raw IE0.16/IE0.17 extras."""
    flowproto = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto"
    pcap = flowproto / "akvorado_netflow_data+templates.pcap"
    col = Collector(sonde_bin, workdir, seconds=3)
    _replay([pcap], col.port)
    records, _ = col.result()
    out = oracle.tshark(["-r", str(pcap), "-d", "udp.port==2055,cflow", "-T", "fields",
                         "-e", "cflow.srcaddr", "-e", "cflow.dstaddr", "-e", "cflow.srcport",
                         "-e", "cflow.dstport", "-e", "cflow.srcas", "-e", "cflow.dstas"])
    want = {}
    for line in out.splitlines():
        cols = [c.split(",") for c in line.split("\t")]
        if len(cols) < 6 or not cols[0][0]:
            continue
        for sa, da, sp, dp, sas, das in zip(*cols):
            want[(sa, int(sp), da, int(dp))] = (int(sas), int(das))
    assert sum(1 for v in want.values() if v != (0, 0)) >= 5, want
    # tshark decodes only the data set after the template (the one before it in the same
    # datagram, sonde reads too): those records are the ones checked, every one of them.
    checked = set()
    for r in records:
        assert not any(k in r for k in ("IE0.16", "IE0.17")), r
        c = (r["IPV4_SRC_ADDR"], int(r["L4_SRC_PORT"]))
        s = (r["IPV4_DST_ADDR"], int(r["L4_DST_PORT"]))
        got = (int(r.get("SRC_AS", 0)), int(r.get("DST_AS", 0)))
        # Both halves of a conversation are one flow: each record's numbers, by end (the
        # later record's non-zero ones win, as for any field).
        fwd, rev = want.get(c + s), want.get(s + c)
        if fwd and rev:
            ends = [rev[1] or fwd[0], rev[0] or fwd[1]]
            assert got == tuple(ends), (r, fwd, rev)
        elif fwd:
            assert got == fwd, (r, fwd)
        elif rev:
            assert got == rev[::-1], (r, rev)
        checked.update(k for k in (c + s, s + c) if k in want)
    assert checked == set(want), set(want) - checked
