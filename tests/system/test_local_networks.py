"""--local-networks: hosts local or remote, flows in, out, internal or transit.

The per-direction packet and byte counts of --stats-json are checked against tshark: every IP
packet of the capture is read with `tshark -T fields` (addresses, ports, IP length, TCP
flags), grouped into flows (protocol and both ends, as sonde keys them), and each flow's
client is found as sonde's documented rule says (the sender of the first packet, except that a
SYN/ACK seen first was sent by the server, and a SYN names its sender). A flow is `in` (remote
client, local server), `out` (local client, remote server), `internal` (both local) or
`transit` (both remote), and both ways of a flow count under its class; bytes are IP bytes
(IPv4 total length, IPv6 40 + payload length), as sonde counts them (see oracle.py). The
membership of each address is decided by Python's ipaddress module, not by sonde.

Also: the hosts' LOCAL flag in --hosts-out, FLOW_DIRECTION in --flows-out (adding up to the
same counts), nothing of it without the flag, the config file's `local_networks`, errors that
name a bad prefix, and the REST API (local/direction in the answers, ?local= and ?direction=
filters, /metrics).
"""

from __future__ import annotations

import collections
import ipaddress
import json
import signal
import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import oracle
from apiclient import error as api_error, get as api_get, get_json
from conftest import free_port

DIRECTIONS = ("in", "out", "internal", "transit")

# (capture, local networks): each capture with two sets, so that every class shows up in some
# run (a LAN prefix gives out/internal/transit; naming one side's servers gives in).
CASES = [
    ("android.pcap", "192.168.0.0/16,fe80::/10"),
    ("android.pcap", "192.168.2.1/32,216.239.38.120,172.217.0.0/16"),
    ("whatsapp_login_call.pcap", "192.168.0.0/16,10.0.0.0/8,2001:db8::/32"),
    ("whatsapp_login_call.pcap", "192.168.2.1,17.0.0.0/8,31.13.0.0/16"),
]

FIELDS = ["ip.src", "ip.dst", "ip.len", "ipv6.src", "ipv6.dst", "ipv6.plen", "ip.proto",
          "ipv6.nxt", "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport",
          "tcp.flags.syn", "tcp.flags.ack", "frame.protocols"]


def networks(text: str):
    return [ipaddress.ip_network(n if "/" in n else n + ("/32" if ":" not in n else "/128"),
                                 strict=False) for n in text.split(",")]


def is_local(addr: str, nets) -> bool:
    a = ipaddress.ip_address(addr)
    return any(a.version == n.version and a in n for n in nets)


def tshark_directions(pcap: Path, nets) -> Tuple[Dict[str, List[int]], int]:
    """{direction: [packets, bytes]} over the capture's IP packets, and the number of them."""
    out = oracle.tshark(["-r", str(pcap), "-T", "fields", "-E", "separator=|", "-E",
                         "occurrence=f"] + sum((["-e", f] for f in FIELDS), []))
    flows: Dict[tuple, dict] = {}
    order: List[tuple] = []
    ip_packets = 0
    for line in out.splitlines():
        v = dict(zip(FIELDS, line.split("|")))
        layers = v["frame.protocols"].split(":")
        # An ICMP error quotes the packet it is about (an IP header and ports): sonde counts
        # it as an ICMP packet of the outer addresses, and so does this (`occurrence=f` gives
        # the outer IP fields). Tunnels would need oracle.py's reading; the captures have none.
        icmp = next((i for i, l in enumerate(layers) if l in oracle.ERROR_CARRIERS), None)
        ips = [i for i, l in enumerate(layers) if l in ("ip", "ipv6")]
        assert len(ips) <= 1 or (icmp is not None and ips[1] > icmp), f"unexpected nesting: {line}"
        if v["ip.src"]:
            src, dst, length, proto = v["ip.src"], v["ip.dst"], int(v["ip.len"]), int(v["ip.proto"])
        elif v["ipv6.src"]:
            src, dst, length, proto = v["ipv6.src"], v["ipv6.dst"], 40 + int(v["ipv6.plen"]), int(v["ipv6.nxt"])
        else:
            continue
        ip_packets += 1
        if icmp is not None:
            sport = dport = "0"
        else:
            sport = v["tcp.srcport"] or v["udp.srcport"] or "0"
            dport = v["tcp.dstport"] or v["udp.dstport"] or "0"
        src, dst = oracle.norm_addr(src), oracle.norm_addr(dst)
        a, b = (src, int(sport)), (dst, int(dport))
        key = (proto, frozenset([a, b]))
        syn = v["tcp.flags.syn"] in ("1", "True")
        ack = v["tcp.flags.ack"] in ("1", "True")
        f = flows.get(key)
        if f is None:
            # The sender of the first packet is the client, unless it is a SYN/ACK.
            client = dst if (syn and ack) else src
            f = flows[key] = {"client": client, "server": dst if client == src else src,
                              "packets": 0, "bytes": 0, "syn_seen": False}
            order.append(key)
        if syn and not ack and not f["syn_seen"]:
            # A SYN names the client, whatever was seen before.
            f["syn_seen"] = True
            f["client"], f["server"] = src, dst
        f["packets"] += 1
        f["bytes"] += length
    got = {d: [0, 0] for d in DIRECTIONS}
    for key in order:
        f = flows[key]
        c, s = is_local(f["client"], nets), is_local(f["server"], nets)
        d = {(False, True): "in", (True, False): "out", (True, True): "internal",
             (False, False): "transit"}[(c, s)]
        got[d][0] += f["packets"]
        got[d][1] += f["bytes"]
    return got, ip_packets


def run(sonde, pcap: Path, workdir: Path, *extra: str):
    stats, flows, hosts = workdir / "stats.json", workdir / "flows.jsonl", workdir / "hosts.jsonl"
    p = sonde("-r", pcap, "--stats-json", stats, "--flows-out", flows, "--hosts-out", hosts,
              "-q", *extra)
    assert p.returncode == 0, p.stderr
    return (json.loads(stats.read_text()), oracle.load_jsonl(str(flows)),
            oracle.load_jsonl(str(hosts)))


def capture(corpus: Path, name: str) -> Path:
    p = corpus / name
    if not p.exists():
        pytest.skip(f"{name} not in the corpus")
    return p


@pytest.mark.parametrize("name,nets", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_direction_counts_match_tshark(name, nets, sonde, corpus, tshark_tools, workdir):
    pcap = capture(corpus, name)
    nl = networks(nets)
    want, ip_packets = tshark_directions(pcap, nl)
    stats, flows, hosts = run(sonde, pcap, workdir, "--local-networks", nets)
    assert stats["ip_packets"] == ip_packets, "sonde and tshark disagree on the IP packets"
    got = {d: [stats["directions"][d]["packets"], stats["directions"][d]["bytes"]]
           for d in DIRECTIONS}
    print(f"{name} {nets}: sonde {got} tshark {want}")
    assert got == want
    assert sum(v[0] for v in got.values()) == stats["ip_packets"]
    assert sum(v[1] for v in got.values()) == stats["ip_bytes"]
    assert sorted(stats["local_networks"]) == sorted(str(n) for n in nl)
    # The flow records carry their direction, and add up to the same counts.
    by_record = {d: [0, 0] for d in DIRECTIONS}
    for r in flows:
        d = r["FLOW_DIRECTION"]
        src = r.get("IPV4_SRC_ADDR") or r["IPV6_SRC_ADDR"]
        dst = r.get("IPV4_DST_ADDR") or r["IPV6_DST_ADDR"]
        want_d = {(False, True): "in", (True, False): "out", (True, True): "internal",
                  (False, False): "transit"}[(is_local(src, nl), is_local(dst, nl))]
        assert d == want_d, r
        by_record[d][0] += r["IN_PKTS"] + r["OUT_PKTS"]
        by_record[d][1] += r["IN_BYTES"] + r["OUT_BYTES"]
    assert by_record == got
    # Every host says whether it is local.
    assert hosts
    for h in hosts:
        assert h["LOCAL"] is is_local(h["IP_ADDR"], nl), h


def test_every_direction_is_seen_across_the_cases(sonde, corpus, tshark_tools, workdir):
    """The cases above are not vacuous: each class has traffic in at least one of them."""
    seen = collections.Counter()
    for i, (name, nets) in enumerate(CASES):
        d = workdir / str(i)
        d.mkdir()
        stats, _, _ = run(sonde, capture(corpus, name), d, "--local-networks", nets)
        for k in DIRECTIONS:
            seen[k] += stats["directions"][k]["packets"]
    assert all(seen[k] > 0 for k in DIRECTIONS), seen


def test_without_local_networks_nothing_is_classified(sonde, corpus, workdir):
    stats, flows, hosts = run(sonde, capture(corpus, "android.pcap"), workdir)
    assert stats["directions"] is None and stats["local_networks"] is None
    assert flows and all("FLOW_DIRECTION" not in r for r in flows)
    assert hosts and all("LOCAL" not in h for h in hosts)


def test_repeated_flags_and_the_config_file_give_the_same_run(sonde, corpus, workdir):
    pcap = capture(corpus, "android.pcap")
    a = workdir / "a"
    a.mkdir()
    one = run(sonde, pcap, a, "--local-networks", "192.168.0.0/16,fe80::/10")
    b = workdir / "b"
    b.mkdir()
    two = run(sonde, pcap, b, "--local-networks", "192.168.0.0/16", "--local-networks", "fe80::/10")
    c = workdir / "c"
    c.mkdir()
    conf = c / "sonde.toml"
    conf.write_text(f'[input]\nread = "{pcap}"\n[flows]\nlocal_networks = ["192.168.0.0/16", "fe80::/10"]\n')
    three = run(sonde, pcap, c, "--config", conf)
    for other in (two, three):
        assert other[0]["directions"] == one[0]["directions"]
        assert other[1] == one[1]
    check = sonde("config", "check", conf)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0/8", "lan", "2001:db8::/200"])
def test_a_bad_prefix_is_named_with_an_example(bad, sonde, corpus, workdir):
    pcap = capture(corpus, "android.pcap")
    p = sonde("-r", pcap, "--local-networks", f"192.168.0.0/16,{bad}")
    assert p.returncode != 0
    assert bad in p.stderr and "10.0.0.0/8" in p.stderr, p.stderr
    conf = workdir / "bad.toml"
    conf.write_text(f'[input]\nread = "{pcap}"\n[flows]\nlocal_networks = ["{bad}"]\n')
    p = sonde("config", "check", conf)
    assert p.returncode != 0
    assert bad in p.stderr and "local_networks" in p.stderr and "line 4" in p.stderr, p.stderr


def test_api_splits_hosts_and_flows(sonde_bin, corpus, tshark_tools, workdir):
    pcap = capture(corpus, "android.pcap")
    nets = "192.168.0.0/16,fe80::/10"
    nl = networks(nets)
    want, _ = tshark_directions(pcap, nl)
    port = free_port()
    stats = workdir / "stats.json"
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}", "--no-auth", "--duration",
         "60", "--local-networks", nets, "--stats-json", stats, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        total_packets = oracle.capinfos_packets(str(pcap))
        deadline = time.time() + 30
        while True:
            try:
                iface = get_json(base, "/api/v1/interface")
                # The per-direction counts move when flows pass their counts on (each second of
                # traffic, or a reader's flush): wait until they cover every IP packet.
                if (iface["packets"] == total_packets and iface["directions"]
                        and sum(v["packets"] for v in iface["directions"].values())
                        == iface["ip_packets"]):
                    break
                get_json(base, "/api/v1/hosts?limit=1")  # a reader's flush
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet
            assert time.time() < deadline, "the API never showed the whole file by direction"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        assert sorted(iface["local_networks"]) == sorted(str(n) for n in nl)
        assert {d: [iface["directions"][d]["packets"], iface["directions"][d]["bytes"]]
                for d in DIRECTIONS} == want

        hosts = get_json(base, "/api/v1/hosts?limit=10000")["hosts"]
        assert hosts and all(h["local"] is is_local(h["ip"], nl) for h in hosts)
        local = get_json(base, "/api/v1/hosts?local=true&limit=10000")
        remote = get_json(base, "/api/v1/hosts?local=false&limit=10000")
        assert local["total"] + remote["total"] == len(hosts)
        assert local["total"] > 0 and remote["total"] > 0
        assert all(h["local"] for h in local["hosts"]) and not any(h["local"] for h in remote["hosts"])
        status, body = api_error(base, "/api/v1/hosts?local=maybe")
        assert status == 400 and "local=" in body["error"] and "true" in body["error"], body

        flows = get_json(base, "/api/v1/flows?limit=10000")["flows"]
        assert flows and all(f["direction"] in DIRECTIONS for f in flows)
        for d in DIRECTIONS:
            part = get_json(base, f"/api/v1/flows?direction={d}&limit=10000")
            assert all(f["direction"] == d for f in part["flows"])
            pk = sum(f["client_packets"] + f["server_packets"] for f in part["flows"])
            by = sum(f["client_bytes"] + f["server_bytes"] for f in part["flows"])
            assert [pk, by] == want[d], d
        status, body = api_error(base, "/api/v1/flows?direction=inbound")
        assert status == 400 and "inbound" in body["error"] and "transit" in body["error"], body
        top = get_json(base, "/api/v1/top/talkers?local=true&n=100")["rows"]
        assert top and all(is_local(r["ip"], nl) for r in top)
        status, _ = api_error(base, "/api/v1/top/applications?direction=sideways")
        assert status == 400

        _, _, metrics = api_get(base, "/metrics")
        for d in DIRECTIONS:
            assert f'sonde_direction_packets_total{{direction="{d}"}} {want[d][0]}\n' in metrics
            assert f'sonde_direction_bytes_total{{direction="{d}"}} {want[d][1]}\n' in metrics
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_history_flows_carry_their_direction(sonde_bin, workdir):
    """The flow store keeps no direction: the history API classifies its flows against the
    local networks as a live run does, so each stored flow has the FLOW_DIRECTION that
    `--flows-out` gave it in the run that stored it."""
    pcap = Path(__file__).resolve().parents[2] / "samples" / "demo.pcap"
    nets = "10.0.0.0/28,5.9.10.80/32,151.101.1.81/32"
    data, out = workdir / "data", workdir / "flows.jsonl"
    p = subprocess.run([str(sonde_bin), "-r", pcap, "--data-dir", data, "--local-networks", nets,
                        "--flows-out", out, "--flows-format", "json", "-q"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr

    def key(r):
        return (r["PROTOCOL"], r["IPV4_SRC_ADDR"], r["L4_SRC_PORT"], r["IPV4_DST_ADDR"],
                r["L4_DST_PORT"], r["FLOW_START_MILLISECONDS"])

    written = {key(r): r["FLOW_DIRECTION"] for r in oracle.load_jsonl(str(out))}
    assert len(set(written.values())) == 4, collections.Counter(written.values())
    # The same data directory served by a second run (over a file that adds nothing to it).
    empty = workdir / "empty.pcap"
    empty.write_bytes(pcap.read_bytes()[:24])
    port = free_port()
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", empty, "--http", f"127.0.0.1:{port}", "--no-auth", "--duration",
         "60", "--data-dir", data, "--local-networks", nets, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                get_json(base, "/api/v1/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.time() < deadline and proc.poll() is None, "the API never answered"
                time.sleep(0.2)
        stored, offset = {}, 0
        while True:
            page = get_json(base, f"/api/v1/history/flows?from=0&to=4000000000&limit=1000"
                                  f"&offset={offset}")
            stored.update({key(r): r.get("FLOW_DIRECTION") for r in page["flows"]})
            offset += len(page["flows"])
            if not page["more"]:
                break
        assert offset == len(written) and stored == written
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
