"""Bounded memory under a flood of new flows (Ourmon's Slammer case, issue 2).

Synthetic traffic with a random source address on every packet creates a new flow and a new
host per packet. With small table capacities, sonde must stay within them: the flow table
evicts (or drops, with --table-full drop) and counts it, the host table counts what it could
not hold, every packet is still accounted once, and resident memory stays near the tables'
size instead of growing with the packets. The 100M-packet run is in `make bench`.
"""

from __future__ import annotations

import json

import pytest

PACKETS = 3_000_000
CAP = 20_000
# A generous bound for 20k flows + 20k hosts (a few MiB of tables) plus the binary, the
# synthetic ring and allocator slack: an unbounded table would need ~1 GiB for 3M flows.
RSS_LIMIT = 150 * 1024 * 1024


def _run(sonde, workdir, policy):
    stats_path = workdir / f"stats-{policy}.json"
    p = sonde("--synthetic", f"hosts=100k,size=64,packets={PACKETS},random-src",
              "--max-flows", CAP, "--max-hosts", CAP, "--table-full", policy,
              "--stats-json", stats_path, "-q", timeout=600)
    assert p.returncode == 0 and "panicked" not in p.stderr, p.stderr
    return json.loads(stats_path.read_text())


@pytest.mark.parametrize("policy", ["evict", "drop"])
def test_random_source_flood_stays_bounded(policy, sonde, workdir):
    s = _run(sonde, workdir, policy)
    assert s["packets"] == PACKETS
    parts = s["ip_packets"] + s["non_ip"] + s["malformed"]["total"] + s["dropped"]["total"]
    assert parts == PACKETS, f"packets not accounted once: {parts} != {PACKETS}"
    flows, hosts = s["flows"], s["hosts"]
    # Tables never hold more than their capacity.
    assert flows["created"] - sum(flows["ended"].values()) <= CAP, flows
    assert hosts["distinct"] <= CAP, hosts
    # What did not fit is counted, by the configured policy.
    if policy == "evict":
        assert flows["ended"]["evicted"] > PACKETS // 2, flows
        assert s["dropped"]["flow_table_full"] == 0
    else:
        assert s["dropped"]["flow_table_full"] > PACKETS // 2, s["dropped"]
        assert flows["ended"]["evicted"] == 0, flows
    assert hosts["table_full"] > 0, hosts
    assert s["max_rss_bytes"] < RSS_LIMIT, (
        f"resident memory {s['max_rss_bytes'] / 2**20:.0f} MiB with {CAP} flows/hosts "
        f"capacity: the tables are not bounded")
