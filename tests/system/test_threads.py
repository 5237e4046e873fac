"""Reading a file with several shards must give the same flows as with one.

Both directions of a flow go to the same shard and fragments are attributed by the reader,
so the records (and their counters) may not depend on --threads. The end reason is checked
separately: it depends on when each shard's packet clock runs the timeouts.
"""

from __future__ import annotations

import collections

import pytest

import oracle

CAPTURES = ["1kxun.pcap", "dns_fragmented.pcap", "vxlan.pcap", "pop3.pcap", "tor.pcap",
            "zoom.pcap", "snmp.pcap"]
COUNTERS = ("IPV4_SRC_ADDR", "IPV4_DST_ADDR", "IPV6_SRC_ADDR", "IPV6_DST_ADDR", "L4_SRC_PORT",
            "L4_DST_PORT", "PROTOCOL", "VLAN_ID", "TUNNEL", "IN_PKTS", "IN_BYTES", "OUT_PKTS",
            "OUT_BYTES", "FLOW_START_MILLISECONDS", "FLOW_END_MILLISECONDS", "TCP_FLAGS",
            "FRAGMENTS")


def _records(sonde, pcap, threads, workdir, extra=()):
    out = workdir / f"flows-{threads}.jsonl"
    p = sonde("-r", pcap, "--threads", threads, "--flows-out", out, "-q", *extra)
    assert p.returncode == 0 and "panicked" not in p.stderr, p.stderr
    return oracle.load_jsonl(str(out))


def _multiset(records, fields):
    return collections.Counter(tuple(r.get(k) for k in fields) for r in records)


@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("timeouts", [(), ("--idle-timeout", "100000", "--active-timeout", "0")],
                         ids=["default-timeouts", "no-timeouts"])
def test_same_flows_with_two_threads(name, timeouts, sonde, corpus, workdir):
    pcap = corpus / name
    if not pcap.is_file():
        pytest.skip(f"{name} not in corpus")
    one = _multiset(_records(sonde, pcap, 1, workdir, timeouts), COUNTERS)
    two = _multiset(_records(sonde, pcap, 2, workdir, timeouts), COUNTERS)
    assert one == two, (f"{name}: --threads 2 differs from --threads 1:\n only with 1: "
                        f"{list((one - two).items())[:3]}\n only with 2: {list((two - one).items())[:3]}")


@pytest.mark.parametrize("name", ["pop3.pcap", "tor.pcap", "zoom.pcap"])
def test_same_end_reasons_with_two_threads(name, sonde, corpus, workdir):
    pcap = corpus / name
    if not pcap.is_file():
        pytest.skip(f"{name} not in corpus")
    fields = COUNTERS + ("FLOW_END_REASON",)
    one = _multiset(_records(sonde, pcap, 1, workdir), fields)
    two = _multiset(_records(sonde, pcap, 2, workdir), fields)
    diff = [(k[-1], k2[-1], k[:8]) for k in (one - two) for k2 in (two - one) if k[:-1] == k2[:-1]]
    assert one == two, (f"{name}: FLOW_END_REASON depends on --threads (1 vs 2): {diff[:5]}; "
                        f"a shard's clock only advances with its own packets, so timeouts that "
                        f"fire with one shard do not fire before the end of the file with two")
