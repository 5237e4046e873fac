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


def _udp_frame(src: int, sport: int) -> bytes:
    """An Ethernet/IPv4/UDP frame from 10.<src> to 192.0.2.1:53 with 4 bytes of payload."""
    import struct
    payload = b"\x00\x01\x02\x03"
    udp = struct.pack("!HHHH", sport, 53, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     bytes([10, (src >> 16) & 255, (src >> 8) & 255, src & 255]),
                     bytes([192, 0, 2, 1]))
    return b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + ip + udp


def test_a_tick_that_ends_more_flows_than_a_batch_loses_none(sonde, workdir):
    """20,000 flows go idle together and expire in one tick: 2.4 batches of records at once,
    which go to the sinks in order in batch-sized parts (their buffers reused): every record
    arrives once, with its packets."""
    import struct
    flows = 20_000
    pcap = workdir / "idle.pcap"
    with open(pcap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        frames = [(1_700_000_000, i * 20, _udp_frame(i, 1024 + i % 50_000))
                  for i in range(flows)]
        # One more flow 10 minutes later: the tick it starts ends every flow before it.
        frames.append((1_700_000_600, 0, _udp_frame(flows, 9)))
        for sec, usec, frame in frames:
            f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)
    out = workdir / "flows.json"
    p = sonde("-r", pcap, "--idle-timeout", 60, "--flows-out", out, "-q")
    assert p.returncode == 0, p.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == flows + 1
    keys = {(r["IPV4_SRC_ADDR"], r["L4_SRC_PORT"]) for r in records}
    assert len(keys) == flows + 1, "a record was written twice"
    assert sum(r["IN_PKTS"] + r["OUT_PKTS"] for r in records) == flows + 1
    idle = [r for r in records if r["FLOW_END_MILLISECONDS"] < 1_700_000_600_000]
    assert len(idle) == flows
