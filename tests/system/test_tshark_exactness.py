"""sonde's flow counters against tshark, capture by capture (see oracle.py for the method).

For every capture of the corpus:
  * stats ``packets`` == ``capinfos -c -M`` and the stats invariant holds;
  * every TCP/UDP conversation of tshark matches sonde's flows per direction, exactly
    (packets; IP bytes = tshark frame bytes minus link overhead), or differs for a reason
    that tshark's own output proves (IP fragments, tunnels) -- anything else fails;
  * the flow records add up to the stats' ip_packets / ip_bytes, and the hosts' sent and
    received counters both add up to them too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import oracle
import report
from conftest import REPO, corpus_files

CAPTURES = corpus_files()

SONDE_ARGS = ["--idle-timeout", "100000", "--active-timeout", "0", "-q"]


def _load_stats(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise AssertionError(f"--stats-json output unreadable: {e}")


def _total(obj, name: str) -> int:
    """`malformed` / `dropped`: an object of reason -> count plus `total`."""
    assert isinstance(obj, dict), f"stats.{name} should be an object, got {obj!r}"
    assert "total" in obj, f"stats.{name} has no 'total': {obj!r}"
    reasons = {k: v for k, v in obj.items() if k != "total"}
    assert sum(reasons.values()) == obj["total"], f"stats.{name}: reasons do not add up: {obj}"
    return obj["total"]


@pytest.mark.parametrize("pcap", CAPTURES or [None], ids=[p.name for p in CAPTURES] or ["none"])
def test_capture_matches_tshark(pcap, sonde, corpus, tshark_tools, workdir):
    if pcap is None:
        pytest.skip("no captures")
    res = report.CaptureResult(pcap.name)
    report.record(res)
    try:
        _check(pcap, sonde, workdir, res)
    except oracle.OracleError as e:
        res.error = f"oracle: {e}"
        raise
    except AssertionError as e:
        if not res.checks_failed and not res.mismatches:
            res.checks_failed.append(str(e).splitlines()[0] if str(e) else "assertion failed")
        raise


NDPI_SET = Path(os.environ.get("SONDE_NDPI_TESTS", str(REPO / ".cache" / "ndpi-4.2")))


def test_capwap_inner_flows_match_tshark(sonde, tshark_tools, workdir):
    """CAPWAP's data channel (nDPI 4.2's capwap.pcap: a Cisco access point's 802.11 frames,
    their frame control swapped): sonde peels it as tshark does, so the DHCP inside is its own
    flow with tshark's counts, and every other conversation matches too."""
    pcap = NDPI_SET / "pcap" / "capwap.pcap"
    if not pcap.exists():
        pytest.fail(f"{pcap} missing: run scripts/fetch-ndpi-tests.sh (scripts/setup-test-deps.sh "
                    "does)", pytrace=False)
    res = report.CaptureResult(pcap.name)
    _check(pcap, sonde, workdir, res)
    records = oracle.load_jsonl(str(workdir / "flows.jsonl"))
    dhcp = [r for r in records if r.get("TUNNEL") == "capwap" and r["L4_DST_PORT"] == 67]
    assert dhcp and sum(r["IN_PKTS"] for r in dhcp) == 5, dhcp


def _check(pcap: Path, sonde, workdir: Path, res: report.CaptureResult) -> None:
    flows_path = workdir / "flows.jsonl"
    stats_path = workdir / "stats.json"
    hosts_path = workdir / "hosts.jsonl"
    p = sonde("-r", pcap, "--flows-out", flows_path, "--flows-format", "json",
              "--stats-json", stats_path, "--hosts-out", hosts_path, *SONDE_ARGS)
    assert "panicked at" not in p.stderr, f"sonde panicked on {pcap.name}:\n{p.stderr}"
    assert p.returncode == 0, f"sonde exited {p.returncode} on {pcap.name}:\n{p.stderr[-2000:]}"

    # --- Packet totals: capinfos and the stats invariant.
    stats = _load_stats(stats_path)
    want_packets = oracle.capinfos_packets(str(pcap))
    res.packets = want_packets
    problems = []
    if stats.get("packets") != want_packets:
        problems.append(f"stats packets {stats.get('packets')} != capinfos {want_packets}")
    malformed = _total(stats["malformed"], "malformed")
    dropped = _total(stats["dropped"], "dropped")
    parts = stats["ip_packets"] + stats["non_ip"] + malformed + dropped
    if parts != stats["packets"]:
        problems.append(
            f"packets {stats['packets']} != ip_packets {stats['ip_packets']} + non_ip "
            f"{stats['non_ip']} + malformed {malformed} + dropped {dropped} (= {parts})")

    # --- Flows add up to the stats.
    records = oracle.load_jsonl(str(flows_path))
    fp = sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in records)
    fb = sum(int(r["IN_BYTES"]) + int(r["OUT_BYTES"]) for r in records)
    if fp != stats["ip_packets"]:
        problems.append(f"sum of flow packets {fp} != stats ip_packets {stats['ip_packets']}")
    if fb != stats["ip_bytes"]:
        problems.append(f"sum of flow bytes {fb} != stats ip_bytes {stats['ip_bytes']}")
    exported = stats.get("flows", {}).get("exported")
    if exported is not None and exported != len(records):
        problems.append(f"stats flows.exported {exported} != {len(records)} records written")

    # --- Hosts add up: every accounted packet is sent by one host and received by one.
    hosts = oracle.load_jsonl(str(hosts_path))
    hs = {k: sum(int(h[k]) for h in hosts)
          for k in ("SENT_PKTS", "RCVD_PKTS", "SENT_BYTES", "RCVD_BYTES")}
    for k, want in (("SENT_PKTS", stats["ip_packets"]), ("RCVD_PKTS", stats["ip_packets"]),
                    ("SENT_BYTES", stats["ip_bytes"]), ("RCVD_BYTES", stats["ip_bytes"])):
        if hs[k] != want:
            problems.append(f"hosts: sum of {k} {hs[k]} != stats ip_{k.split('_')[1].lower()} {want}"
                            f" ({len(hosts)} hosts, stats.hosts={stats.get('hosts')})")
    # --hosts-out has a record per purged host (idle and flowless, it may come back later
    # and be purged again) and one per host still live at the end.
    distinct = stats.get("hosts", {}).get("distinct")
    purged = stats.get("hosts", {}).get("purged", 0)
    if distinct is not None and distinct + purged != len(hosts):
        problems.append(f"stats hosts.distinct {distinct} + purged {purged} != {len(hosts)} "
                        f"host records written")
    live_keys = [(h.get("IP_ADDR"), h.get("VLAN_ID")) for h in hosts if not h.get("PURGED")]
    if len(live_keys) != len(set(live_keys)):
        problems.append("a live host appears twice in --hosts-out (shards not merged?)")
    res.checks_failed.extend(problems)

    # --- Per-conversation comparison with tshark.
    expected, _frames = oracle.expected_conversations(str(pcap))
    outcomes = oracle.compare(expected, oracle.sonde_conversations(records))
    res.outcomes = outcomes
    bad = [o for o in outcomes if not o.ok]
    msg = []
    if problems:
        msg.append("checks failed:\n  " + "\n  ".join(problems))
    if bad:
        msg.append(f"{len(bad)} of {len(outcomes)} conversations differ from tshark without an "
                   f"explanation:\n  " + "\n  ".join(
                       f"{oracle.key_text(o.key)}: {o.detail}" + (f" ({o.note})" if o.note else "")
                       for o in bad[:40]))
    assert not msg, f"{pcap.name}: " + "\n".join(msg)
