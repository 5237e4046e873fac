"""TCP health on the API: each live TCP flow's retransmitted and out-of-order packets per side
and its handshake's round trip halves, and a host page's sums over its flows.

The API's live values must be the flow records' (`--flows-out`, written from the same flows
when the run ends): RETRANSMITTED_IN/OUT_PKTS, OOORDER_IN/OUT_PKTS, CLIENT/SERVER_NW_LATENCY_MS.
The host page's sums must be those of its flows as the flows API gives them, and a host's
retransmits_sent and retransmits_rcvd (all its flows so far) the sums of the records' for its
side and for the other.
"""

from __future__ import annotations

import collections
import json
import subprocess

import pytest

import oracle
from apiclient import get_json, serving
from conftest import corpus_files


def test_flows_and_hosts_show_the_records_tcp_health(sonde_bin, corpus, workdir):
    pcap = corpus / "android.pcap"
    if not pcap.exists():
        pytest.skip("android.pcap not in the corpus")
    flows_out = workdir / "flows.json"
    with serving(sonde_bin, pcap, "--flows-out", flows_out) as (base, proc):
        flows = get_json(base, "/api/v1/flows?limit=10000")["flows"]
        hosts = get_json(base, "/api/v1/hosts?limit=10000")["hosts"]
        pages = {h["ip"]: get_json(base, f"/api/v1/hosts/{h['ip']}") for h in hosts}
        by_retransmits = get_json(base, "/api/v1/hosts?sort=retransmits&limit=5")["hosts"]
        by_received = get_json(base, "/api/v1/hosts?sort=retransmits_rcvd&limit=5")["hosts"]
    assert proc.returncode == 0
    records = {}
    for line in flows_out.read_text().splitlines():
        r = json.loads(line)
        if r["PROTOCOL"] != 6:
            continue
        c = (r.get("IPV4_SRC_ADDR") or r["IPV6_SRC_ADDR"], r["L4_SRC_PORT"])
        s = (r.get("IPV4_DST_ADDR") or r["IPV6_DST_ADDR"], r["L4_DST_PORT"])
        records[c + s] = r
    tcp = [f for f in flows if f["protocol"] == 6]
    assert tcp and all("client_retransmits" in f for f in tcp)
    assert not any("client_retransmits" in f for f in flows if f["protocol"] != 6)
    retransmitted = 0
    for f in tcp:
        r = records[(oracle.norm_addr(f["client"]), f["client_port"], oracle.norm_addr(f["server"]),
                     f["server_port"])]
        assert (f["client_retransmits"], f["server_retransmits"]) == (
            r["RETRANSMITTED_IN_PKTS"], r["RETRANSMITTED_OUT_PKTS"]), (f, r)
        assert (f["client_out_of_order"], f["server_out_of_order"]) == (
            r["OOORDER_IN_PKTS"], r["OOORDER_OUT_PKTS"]), (f, r)
        for side, key in (("client", "CLIENT_NW_LATENCY_MS"), ("server", "SERVER_NW_LATENCY_MS")):
            got = f[f"rtt_{side}_ms"]
            assert (got or 0.0) == pytest.approx(float(r[key]), abs=0.001), (f, r)
        retransmitted += f["client_retransmits"] + f["server_retransmits"]
    assert retransmitted > 0, "android.pcap has retransmissions"
    print(f"{len(tcp)} TCP flows, {retransmitted} retransmitted packets, {len(pages)} host pages")
    # A host page adds up its TCP flows: what it sent again, and what it received again.
    for ip, page in pages.items():
        mine = [f for f in tcp if ip in (f["client"], f["server"])]
        sent = sum(f["client_retransmits"] if f["client"] == ip else f["server_retransmits"]
                   for f in mine)
        rcvd = sum(f["server_retransmits"] if f["client"] == ip else f["client_retransmits"]
                   for f in mine)
        t = page["tcp"]
        assert (t["flows"], t["retransmits_sent"], t["retransmits_rcvd"]) == (len(mine), sent, rcvd), ip
        rtts = sorted(f["rtt_client_ms"] + f["rtt_server_ms"] for f in mine
                      if f["rtt_client_ms"] and f["rtt_server_ms"])
        assert t["handshakes"] == len(rtts)
        if rtts:
            assert t["rtt_median_ms"] == pytest.approx(rtts[len(rtts) // 2], abs=0.002)
    # Each host's retransmits_sent counts what it sent again over all its flows: the flow
    # records' client (IN) and server (OUT) retransmissions of the flows it is an end of.
    # Its retransmits_rcvd, what its peers sent it again: the other side's.
    for h in hosts:
        sent = rcvd = 0
        for r in records.values():
            client = r.get("IPV4_SRC_ADDR") or r.get("IPV6_SRC_ADDR")
            server = r.get("IPV4_DST_ADDR") or r.get("IPV6_DST_ADDR")
            if h["ip"] == client:
                sent += r["RETRANSMITTED_IN_PKTS"]
                rcvd += r["RETRANSMITTED_OUT_PKTS"]
            elif h["ip"] == server:
                sent += r["RETRANSMITTED_OUT_PKTS"]
                rcvd += r["RETRANSMITTED_IN_PKTS"]
        assert (h["retransmits_sent"], h["retransmits_rcvd"]) == (sent, rcvd), h
    assert any(h["retransmits_sent"] > 0 for h in hosts)
    assert any(h["retransmits_rcvd"] > 0 for h in hosts)
    # Every retransmitted segment was sent by one end and received by the other.
    assert sum(h["retransmits_sent"] for h in hosts) == sum(h["retransmits_rcvd"] for h in hosts)
    # ?sort=retransmits and ?sort=retransmits_rcvd put them first.
    assert by_retransmits[0]["retransmits_sent"] == max(h["retransmits_sent"] for h in hosts)
    assert by_received[0]["retransmits_rcvd"] == max(h["retransmits_rcvd"] for h in hosts)


def _tshark_tcp_events(pcap):
    """Per direction ((src, port), (dst, port)): tshark's retransmissions (plain, fast and
    spurious), out-of-order segments, and how many of the retransmissions were fast or
    spurious ones (found from duplicate ACKs or the peer's ACK, which sonde does not track)."""
    fields = ["ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport",
              "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
              "tcp.analysis.spurious_retransmission", "tcp.analysis.out_of_order"]
    p = subprocess.run(
        ["tshark", "-r", str(pcap), "-Y", " or ".join(fields[6:]), "-T", "fields",
         "-E", "separator=\t", "-E", "occurrence=l", *[a for f in fields for a in ("-e", f)]],
        capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    events = collections.defaultdict(collections.Counter)
    for line in p.stdout.splitlines():
        f = line.split("\t")
        # The innermost addresses (a 6in4 tunnel's IPv6 ones).
        src = (oracle.norm_addr(f[1] or f[0]), int(f[2]))
        dst = (oracle.norm_addr(f[4] or f[3]), int(f[5]))
        e = events[(src, dst)]
        if f[6] or f[7] or f[8]:
            e["retransmitted"] += 1
            e["fast_or_spurious"] += bool(f[7] or f[8])
        else:
            e["out_of_order"] += 1
    return events


def test_retransmissions_and_out_of_order_agree_with_tshark(sonde, corpus, workdir, tshark_tools):
    """Over every corpus capture, each direction of each TCP connection: the segments sonde
    counts as retransmitted or out of order are the ones tshark's analysis flags, in number,
    and the split between the two follows Wireshark's rule (out of order when it comes within
    the handshake's round trip of the newest segment). It may differ only by tshark's fast
    and spurious retransmissions, which need duplicate-ACK and peer-ACK tracking."""
    pcaps = corpus_files()
    if not pcaps:
        pytest.skip("no corpus")
    compared = with_events = split_differs = 0
    for pcap in pcaps:
        out = workdir / f"{pcap.name}.json"
        p = sonde("-r", pcap, "--flows-out", out, "-q")
        assert p.returncode == 0, p.stderr
        got = collections.defaultdict(collections.Counter)
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if r["PROTOCOL"] != 6:
                continue
            c = (oracle.norm_addr(r.get("IPV4_SRC_ADDR") or r["IPV6_SRC_ADDR"]), r["L4_SRC_PORT"])
            s = (oracle.norm_addr(r.get("IPV4_DST_ADDR") or r["IPV6_DST_ADDR"]), r["L4_DST_PORT"])
            # A connection split into several records (idle or active timeouts) adds up.
            for side, (a, b) in (("IN", (c, s)), ("OUT", (s, c))):
                got[(a, b)]["retransmitted"] += r.get(f"RETRANSMITTED_{side}_PKTS", 0)
                got[(a, b)]["out_of_order"] += r.get(f"OOORDER_{side}_PKTS", 0)
        want = _tshark_tcp_events(pcap)
        assert set(want) <= set(got), (pcap.name, set(want) - set(got))
        for d, g in got.items():
            w = want.get(d, collections.Counter())
            compared += 1
            with_events += bool(w["retransmitted"] + w["out_of_order"])
            assert g["retransmitted"] + g["out_of_order"] == \
                w["retransmitted"] + w["out_of_order"], (pcap.name, d, dict(g), dict(w))
            differs = abs(g["out_of_order"] - w["out_of_order"])
            assert differs <= w["fast_or_spurious"], (pcap.name, d, dict(g), dict(w))
            split_differs += differs > 0
    print(f"{compared} TCP directions, {with_events} with events, split differs in "
          f"{split_differs}")
    assert with_events >= 20, with_events
