"""Traffic analytics (issue 13): detections and filter-sets, checked against ground truth that
tshark and tcpdump read from the captures (never against sonde's own numbers).

Detections (--alerts-out). `analytics_recording` (conftest.py, analytics_captures.py) records,
as root, a port scan, an IP scan and UDP probes (nmap), a ping sweep (nping), a SYN flood and a
UDP flood (hping3) and ordinary traffic (curl, dig, TCP echo) on loopback, each actor on its
own 127.B.0.x address. The tests move the capture in time with `editcap -t` so that

* the whole capture is one interval (--top-interval 3600), or
* a 30 s interval boundary (the default --top-interval) falls in the middle of the port scan:
  the scan is seen in two intervals and must come out as one detection whose end record
  counts the union of both intervals' targets.

What is expected is worked out from the capture's packets (tshark fields, see
analytics_captures.packets): each 5-tuple a scanner opened counts as a target in the interval of
its first packet; a flood's victim crosses a rate threshold in the seconds where tshark counts
at least that many of its packets; ICMP errors are tshark's ICMP type 3 / 11 packets.

Filter-sets (--filter-set): every capture of the nDPI corpus, 21 expressions given twice (two
sets, so more than the 32 expressions a flow caches go through sonde), compared with
`tcpdump -r FILE --count EXPR` (packets) and the wire lengths of `tcpdump -r FILE -w - EXPR`
(bytes: capinfos's data size, i.e. the sum of tshark's frame.len, checked by its own test).

Bad input: filter-sets and thresholds sonde must refuse with one `sonde: error:` line.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import analytics_captures as ac
from conftest import corpus_files

# Thresholds the detection tests run with: the floods are lowered to 3000/s so that a slower
# machine than this one still crosses them (the tests check from the capture that it did);
# the others are sonde's defaults.
SYN_PPS = 3000
UDP_PPS = 3000
THRESHOLDS = ["--threshold", f"ddos.syn_pps={SYN_PPS}", "--threshold", f"ddos.udp_pps={UDP_PPS}"]
SCAN_TARGETS = 32  # scan.ip_targets and scan.port_targets
ICMP_ERRORS = 100  # icmp.errors
SYN_MIN = 20  # syn.min
FLOOD_DETECTED_WITHIN_S = 2


# ---------------------------------------------------------------------------------------------
# Running sonde and reading its detections
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Detection:
    start: dict
    end: dict

    @property
    def id(self):
        return self.start["id"]


@dataclasses.dataclass
class Case:
    """One capture, its tshark ground truth and sonde's detections."""

    name: str
    pcap: Path
    pkts: List[ac.Pkt]
    interval: int
    records: List[dict]
    detections: List[Detection]
    actors: ac.Actors
    boundary: int = 0  # the interval boundary the port scan straddles (straddle layout)

    def find(self, kind: str, host: str, direction: Optional[str] = None) -> List[Detection]:
        return [d for d in self.detections if d.start["type"] == kind and d.start["host"] == host
                and (direction is None or d.start.get("direction") == direction)]

    def about(self, host: str) -> str:
        got = [f"  {d.end['type']} {d.end.get('direction', '')} id {d.id} first_seen "
               f"{d.end['first_seen']} targets {d.end.get('targets')}"
               for d in self.detections if d.start["host"] == host]
        return f"sonde's detections of {host} ({self.name}):\n" + ("\n".join(got) or "  none")

    def one(self, kind: str, host: str, what: str, direction: Optional[str] = None) -> Detection:
        ds = self.find(kind, host, direction)
        assert len(ds) == 1, (
            f"{what}: expected one {kind} detection{' ' + direction if direction else ''} of "
            f"{host}, got {len(ds)}\n{self.about(host)}")
        return ds[0]


def pair_records(records: List[dict]) -> List[Detection]:
    """Each id must have one start record, then one end record, about the same thing."""
    by_id: Dict[int, List[dict]] = collections.defaultdict(list)
    for r in records:
        by_id[r["id"]].append(r)
    out = []
    for i, rs in by_id.items():
        events = [r["event"] for r in rs]
        assert events == ["start", "end"], f"detection {i}: records {events}, want start then end:\n{rs}"
        s, e = rs
        for k in ("type", "host", "first_seen", "direction"):
            assert s.get(k) == e.get(k), f"detection {i}: {k} {s.get(k)!r} at start, {e.get(k)!r} at end"
        assert e["last_seen"] >= s["last_seen"] >= s["first_seen"], f"detection {i}: times {s} {e}"
        out.append(Detection(s, e))
    return out


def run_sonde(sonde, pcap: Path, out: Path, *extra: str) -> Tuple[List[dict], dict]:
    alerts, stats = out / "alerts.jsonl", out / "stats.json"
    p = sonde("-r", pcap, "-q", "--alerts-out", alerts, "--stats-json", stats, *extra, timeout=300)
    assert p.returncode == 0 and "panicked" not in p.stderr, f"sonde {' '.join(extra)}: {p.stderr}"
    records = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    return records, json.loads(stats.read_text())


def first_packet_time(pcap: Path) -> float:
    p = subprocess.run(["tshark", "-r", str(pcap), "-c", "1", "-T", "fields", "-e",
                        "frame.time_epoch"], capture_output=True, text=True, timeout=60)
    return float(p.stdout.strip())


def make_case(name, sonde, rec, pcap: Path, out: Path, interval: int, *extra,
              pkts: Optional[List[ac.Pkt]] = None, default_interval: bool = False) -> Case:
    """sonde over `pcap` with `interval` (not passed when it is sonde's default, 30 s)."""
    flags = [] if default_interval else ["--top-interval", str(interval)]
    records, _ = run_sonde(sonde, pcap, out, *flags, *THRESHOLDS, *extra)
    return Case(name=name, pcap=pcap, pkts=pkts if pkts is not None else ac.packets(pcap),
                interval=interval, records=records, detections=pair_records(records),
                actors=rec.actors)


# ---------------------------------------------------------------------------------------------
# The recording and the runs over it (one sonde run per layout, shared by the tests)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rec(analytics_recording, tshark_tools):
    return analytics_recording


@pytest.fixture(scope="module")
def recorded_pkts(rec) -> List[ac.Pkt]:
    return ac.packets(rec.pcap)


@pytest.fixture(scope="module")
def whole_pcap(rec, tmp_path_factory) -> Tuple[Path, List[ac.Pkt]]:
    """The capture moved by whole seconds to start a minute into an hour, and its packets."""
    d = tmp_path_factory.mktemp("whole")
    t0 = int(first_packet_time(rec.pcap))
    target = t0 - t0 % 3600 + 60
    pcap = d / "whole.pcap"
    ac.shift_capture(rec.pcap, pcap, (target - t0) * 1_000_000)
    pkts = ac.packets(pcap)
    assert int(max(p.t for p in pkts)) // 3600 == target // 3600, "the capture does not fit in one hour"
    return pcap, pkts


@pytest.fixture(scope="module", params=[1, 2], ids=["threads1", "threads2"])
def whole(request, whole_pcap, rec, sonde, tmp_path_factory) -> Case:
    """--top-interval 3600: the whole capture is one interval; one shard, and two (a host's
    traffic split over shards is added up before thresholds are checked)."""
    pcap, pkts = whole_pcap
    threads = request.param
    out = tmp_path_factory.mktemp(f"whole-t{threads}")
    return make_case(f"--top-interval 3600 --threads {threads}", sonde, rec, pcap, out, 3600,
                     "--threads", str(threads), pkts=pkts)


@pytest.fixture(scope="module")
def straddle(rec, recorded_pkts, sonde, tmp_path_factory) -> Case:
    """Default --top-interval (30 s), the capture moved so that a boundary falls between two
    SYNs in the middle of the port scan."""
    d = tmp_path_factory.mktemp("straddle")
    a = rec.actors
    ts = sorted(round(p.t * 1e6) for p in recorded_pkts
                if p.src == a.port_scanner and ac.opens_flow(p))
    assert len(ts) > 2 * SCAN_TARGETS + 2, f"the port scan sent only {len(ts)} probes"
    mid = len(ts) // 2
    # The pair of consecutive probes nearest the middle with at least 2 µs between them.
    k = min((i for i in range(len(ts) - 1) if ts[i + 1] - ts[i] >= 2), key=lambda i: abs(i - mid))
    cut_us = (ts[k] + ts[k + 1]) // 2
    boundary = (cut_us // 30_000_000 + 2) * 30  # a later multiple of 30 s
    pcap = d / "straddle.pcap"
    ac.shift_capture(rec.pcap, pcap, boundary * 1_000_000 - cut_us)
    case = make_case("default --top-interval (30 s)", sonde, rec, pcap, d, 30, default_interval=True)
    case.boundary = boundary
    return case


# ---------------------------------------------------------------------------------------------
# Expected detections, from the packets
# ---------------------------------------------------------------------------------------------

SCANNERS = [
    # (what, actor attribute, detection type)
    ("port scan: nmap -sS -p 1-1000", "port_scanner", "scan.port"),
    ("IP scan: nmap -sS -p 80 of a /24", "ip_scanner", "scan.ip"),
    ("ping sweep: nping --icmp of 254 addresses", "ping_sweeper", "scan.ip"),
    ("UDP probes: nmap -sU -p 2000-2299", "udp_prober", "scan.port"),
]


def scan_groups(kind: str, targets) -> collections.Counter:
    """Targets per destination (port scan) or per (protocol, port) (IP scan)."""
    if kind == "scan.port":
        return collections.Counter(t[0] for t in targets if t[1] in (6, 17, 132))
    return collections.Counter((t[1], t[2]) for t in targets)


def scan_count(kind: str, targets) -> int:
    if kind == "scan.port":
        return len({t for t in targets if t[1] in (6, 17, 132)})
    return len({t[0] for t in targets})


def expected_scans(pkts, src: str, kind: str, interval: int) -> List[dict]:
    by = ac.probes_by_interval(pkts, src, interval)
    detected = {s for s, t in by.items() if max(scan_groups(kind, t).values(), default=0) >= SCAN_TARGETS}
    out = []
    for run in ac.runs(detected, pkts, interval):
        union = set().union(*(by[s] for s in run))
        out.append({
            "first_seen": run[0], "intervals": run,
            "start_targets": scan_count(kind, by[run[0]]),
            "targets": scan_count(kind, union),
            "last_groups": scan_groups(kind, by[run[-1]]),
            "union_groups": scan_groups(kind, union),
            "tried": union,
        })
    return out


PROTO = {1: "icmp", 6: "tcp", 17: "udp"}


def check_scans(case: Case) -> List[str]:
    """Every scanner's detections against expected_scans; returns lines for the report."""
    seen = []
    for what, attr, kind in SCANNERS:
        src = getattr(case.actors, attr)
        want = expected_scans(case.pkts, src, kind, case.interval)
        assert want, (f"{what}: {src} tried too few targets in the capture to be a scan "
                      f"(tshark): {ac.probes_by_interval(case.pkts, src, case.interval)}")
        got = sorted(case.find(kind, src), key=lambda d: d.start["first_seen"])
        assert len(got) == len(want), (
            f"{what}: tshark sees {len(want)} {kind} detection(s) of {src} "
            f"(intervals {[w['intervals'] for w in want]}), sonde reported {len(got)}\n"
            f"{case.about(src)}")
        for w, d in zip(want, got):
            assert d.start["first_seen"] == w["first_seen"], (
                f"{what}: first_seen {d.start['first_seen']}, the interval of its first probes "
                f"starts at {w['first_seen']}")
            assert d.start["targets"] == w["start_targets"], (
                f"{what}: the start record counts {d.start['targets']} targets, tshark counts "
                f"{w['start_targets']} in the first interval ({w['first_seen']})")
            assert d.end["targets"] == w["targets"], (
                f"{what}: the end record counts {d.end['targets']} targets, tshark counts "
                f"{w['targets']} distinct ones over intervals {w['intervals']}")
            seen.append(f"{what}: {src} {kind} targets tshark {w['targets']} sonde {d.end['targets']}")
    return seen


def check_icmp_errors(case: Case) -> List[str]:
    a = case.actors
    seen = []
    for host, role, peer in [(a.udp_probe_victim, "sender", a.udp_prober),
                             (a.udp_prober, "receiver", a.udp_probe_victim)]:
        by = ac.icmp_errors_by_interval(case.pkts, host, role, case.interval)
        detected = {s for s, c in by.items() if c["errors"] >= ICMP_ERRORS}
        want = ac.runs(detected, case.pkts, case.interval)
        assert want, (f"ICMP errors: tshark counts too few for {host} as {role} to cross "
                      f"icmp.errors={ICMP_ERRORS}: { {s: c['errors'] for s, c in by.items()} }")
        got = sorted(case.find("icmp_errors", host), key=lambda d: d.start["first_seen"])
        assert len(got) == len(want), (
            f"ICMP errors {role} {host}: tshark sees detections in intervals {want}, sonde "
            f"reported {len(got)}\n{case.about(host)}")
        for run, d in zip(want, got):
            assert d.start["first_seen"] == run[0], (d.start, run)
            ev = d.end["evidence"]
            assert ev.get("role") == role, f"ICMP errors of {host}: role {ev.get('role')!r}, want {role!r}"
            c = by[run[-1]]  # the end record holds the last interval's counts
            icmp = ev["icmp"]
            for k in ("errors", "unreachable", "port_unreachable", "time_exceeded"):
                assert icmp[k] == c[k], (
                    f"ICMP errors {role} {host}: evidence {k} = {icmp[k]}, tshark counts {c[k]} "
                    f"(ICMP type 3 code 3 = port unreachable) in interval {run[-1]}")
            peers = {p["host"]: p["count"] for p in icmp["peers"]}
            assert peers == dict(c["peers"]), (
                f"ICMP errors {role} {host}: peers {peers}, tshark {dict(c['peers'])}")
            probes = icmp["probes"]
            assert len(probes) == min(8, len(c["probe_ports"])), (
                f"ICMP errors {role} {host}: {len(probes)} probes listed, tshark sees "
                f"{len(c['probe_ports'])} distinct quoted ports (8 are listed at most)")
            for pr in probes:
                assert (pr["proto"], pr["dst"]) == ("udp", a.udp_probe_victim), pr
                assert pr["port"] in c["probe_ports"] and pr["count"] <= c["probe_ports"][pr["port"]], (
                    f"ICMP errors {role} {host}: probe {pr} is not one the errors quote "
                    f"(tshark: {c['probe_ports'].most_common(10)} ...)")
            seen.append(f"icmp_errors {role} {host}: tshark {c['errors']} errors "
                        f"({c['port_unreachable']} port unreachable), sonde {icmp['errors']}")
    return seen


# Floods: (what, flooder attribute, victim attribute, type, packet kind, rates field, threshold,
# metric, (proto, port) flooded).
FLOODS = [
    ("SYN flood: hping3 -S -p 80", "syn_flooder", "syn_victim", "syn_flood", ac.syn_only,
     "syn", SYN_PPS, "syn_pps", ("tcp", 80)),
    ("UDP flood: hping3 --udp -p 53", "udp_flooder", "udp_victim", "ddos",
     lambda p: p.proto == 17, "udp", UDP_PPS, "udp_pps", ("udp", 53)),
]


def flood_truth(pkts, flooder: str, victim: str, kind, threshold: int) -> dict:
    """The flood's packets by second (tshark) and the seconds that reach the threshold."""
    flood = [p for p in pkts if p.src == flooder and p.dst == victim and kind(p)]
    assert flood, f"no flood packets from {flooder} to {victim} in the capture"
    secs = ac.per_second(flood, lambda p: True)
    crossed = sorted(s for s, ps in secs.items() if len(ps) >= threshold)
    return {"first": min(p.t for p in flood), "last": max(p.t for p in flood),
            "packets": len(flood), "secs": secs, "crossed": crossed}


# ---------------------------------------------------------------------------------------------
# The recording itself
# ---------------------------------------------------------------------------------------------

def test_recording_has_every_phase(rec, recorded_pkts):
    """Each tool put its packets on lo (some skip 127.x targets in some modes)."""
    a, pk = rec.actors, recorded_pkts
    stray = [p for p in pk if not (p.src.startswith(f"127.{a.b}.") and p.dst.startswith(f"127.{a.b}."))]
    assert not stray, f"packets outside 127.{a.b}.0.0/16 in the capture: {stray[:3]}"
    need = {
        "nmap -sS port scan SYNs": lambda p: p.src == a.port_scanner and ac.syn_only(p),
        "nmap -sS IP scan SYNs": lambda p: p.src == a.ip_scanner and ac.syn_only(p),
        "nping echo requests": lambda p: p.src == a.ping_sweeper and p.icmp_type == 8,
        "echo replies to nping": lambda p: p.dst == a.ping_sweeper and p.icmp_type == 0,
        "nmap -sU probes": lambda p: p.src == a.udp_prober and p.proto == 17,
        "ICMP port unreachables": lambda p: p.dst == a.udp_prober and p.icmp_type == 3,
        "hping3 SYN flood": lambda p: p.src == a.syn_flooder and ac.syn_only(p),
        "hping3 UDP flood": lambda p: p.src == a.udp_flooder and p.proto == 17,
        "curl -> http.server": lambda p: p.src == a.http_client and p.dst == a.http_server,
        "http.server -> curl": lambda p: p.src == a.http_server and p.dst == a.http_client,
        "dig queries": lambda p: p.src == a.dns_client and p.dport == 53,
        "DNS answers": lambda p: p.src == a.dns_server and p.sport == 53,
        "TCP echo": lambda p: p.src == a.tcp_client and p.dst == a.tcp_server,
    }
    counts = {what: sum(1 for p in pk if f(p)) for what, f in need.items()}
    missing = [w for w, n in counts.items() if n == 0]
    assert not missing, f"no packets on lo for: {missing}\ncounts {counts}\nlog:\n{rec.log}"
    # The UDP flood's port is bound: it must not draw ICMP errors (they would blur the ICMP
    # error scenario).
    assert not any(p.src == a.udp_victim and p.proto == 1 for p in pk)


# ---------------------------------------------------------------------------------------------
# Detections, the whole capture as one interval
# ---------------------------------------------------------------------------------------------

def test_scans_whole_capture(whole):
    check_scans(whole)
    a = whole.actors
    # Evidence of a single-interval scan: its one group, with the exact target count.
    for attr, kind, group in [("port_scanner", "scan.port", a.port_victim),
                              ("udp_prober", "scan.port", a.udp_probe_victim)]:
        w = expected_scans(whole.pkts, getattr(a, attr), kind, 3600)[0]
        ev = whole.one(kind, getattr(a, attr), attr).end["evidence"]
        got = {g["destination"]: g["targets"] for g in ev["destinations"]}
        assert got == dict(w["union_groups"]), f"{attr}: evidence.destinations {got}, tshark {w['union_groups']}"
        for g in ev["destinations"]:
            tried = {(PROTO[t[1]], t[2]) for t in w["tried"] if t[0] == g["destination"]}
            sample = {(s["proto"], s["port"]) for s in g["sample"]}
            assert sample <= tried and len(sample) == min(64, len(tried)), (
                f"{attr}: sample {sorted(sample)[:10]}… is not {min(64, len(tried))} of the "
                f"ports tried")
    for attr in ("ip_scanner", "ping_sweeper"):
        w = expected_scans(whole.pkts, getattr(a, attr), "scan.ip", 3600)[0]
        ev = whole.one("scan.ip", getattr(a, attr), attr).end["evidence"]
        got = {(g["proto"], g["port"]): g["targets"] for g in ev["ports"]}
        want = {(PROTO[p], port): n for (p, port), n in w["union_groups"].items()}
        assert got == want, f"{attr}: evidence.ports {got}, tshark {want}"
        assert ev["largest_group"] == max(want.values()), ev["largest_group"]


def test_icmp_errors_whole_capture(whole):
    check_icmp_errors(whole)


def test_noisy_hosts_whole_capture(whole):
    """The hosts that sent SYNs to closed ports (nmap -sS twice, hping3 -S) are noisy hosts, with
    SYN, RST and SYN/ACK counts equal to tshark's."""
    a = whole.actors
    for attr in ("port_scanner", "ip_scanner", "syn_flooder"):
        host = getattr(a, attr)
        want = {
            "syn_sent": sum(1 for p in whole.pkts if p.src == host and ac.syn_only(p)),
            "synack_received": sum(1 for p in whole.pkts if p.dst == host and p.proto == 6 and p.syn and p.ack),
            "rst_received": sum(1 for p in whole.pkts if p.dst == host and p.proto == 6 and p.rst),
            "fin_sent": sum(1 for p in whole.pkts if p.src == host and p.proto == 6 and p.fin),
            "tcp_packets": sum(1 for p in whole.pkts if host in (p.src, p.dst) and p.proto == 6),
        }
        assert want["syn_sent"] >= SYN_MIN
        syn = whole.one("noisy_host", host, attr).end["evidence"]["syn"]
        got = {k: syn[k] for k in want}
        assert got == want, f"noisy host {host} ({attr}): sonde {got}, tshark {want}"


def test_floods_detected(whole):
    """Each flood: one syn_flood / ddos detection of the victim (direction in) and of the flooder
    (direction out), starting in the first second tshark counts at least the threshold, at
    most 2 s after the flood's first packet, with the seconds, totals and peaks of tshark's
    per-second counts."""
    a = whole.actors
    for what, fl_attr, vi_attr, kind, is_kind, field, threshold, metric, _ in FLOODS:
        flooder, victim = getattr(a, fl_attr), getattr(a, vi_attr)
        t = flood_truth(whole.pkts, flooder, victim, is_kind, threshold)
        assert len(t["crossed"]) >= 2, (
            f"{what}: the recording reached {threshold}/s in only {len(t['crossed'])} "
            f"second(s) (per second: { {s: len(v) for s, v in t['secs'].items()} }); "
            f"is this machine too slow for hping3 -i u{ac.FLOOD_GAP_US}?")
        for host, direction in ((victim, "in"), (flooder, "out")):
            d = whole.one(kind, host, f"{what}, {'victim' if direction == 'in' else 'flooder'}",
                          direction)
            first_seen = d.start["first_seen"]
            assert first_seen == t["crossed"][0], (
                f"{what}: {host} {direction}: first_seen {first_seen}, tshark first counts "
                f"{threshold}+ packets in second {t['crossed'][0]} "
                f"(per second: { {s: len(v) for s, v in sorted(t['secs'].items())} })")
            delay = first_seen - t["first"]
            assert delay <= FLOOD_DETECTED_WITHIN_S, (
                f"{what}: detected {delay:.2f} s after its first packet ({t['first']:.6f})")
            ev = d.end["evidence"]
            crossed = t["crossed"]
            want_total = {
                "packets": sum(len(t["secs"][s]) for s in crossed),
                field: sum(len(t["secs"][s]) for s in crossed),
                "bytes": sum(p.ip_len for s in crossed for p in t["secs"][s]),
            }
            got_total = {k: ev["total"][k] for k in want_total}
            assert ev["seconds"] == len(crossed) and got_total == want_total, (
                f"{what}: {host} {direction}: {ev['seconds']} seconds, totals {got_total}; "
                f"tshark: {len(crossed)} seconds at {threshold}+/s ({crossed}), {want_total}")
            peak = max(len(t["secs"][s]) for s in crossed)
            assert ev["peak"][field] == peak, f"{what}: peak {ev['peak']}, tshark {peak}/s"
            m = {c["metric"]: c for c in ev["crossed"]}
            assert metric in m and m[metric]["threshold"] == threshold and m[metric]["peak"] == peak, (
                f"{what}: crossed {ev['crossed']}, want {metric} peak {peak} threshold {threshold}")


def test_flood_evidence_names_source_and_port(whole):
    """The floods last 3-4 s: the end record's evidence names the flooder as the top source
    (top destination for the flooder's own detection) and the flooded port."""
    a = whole.actors
    for what, fl_attr, vi_attr, kind, _, _, _, _, port in FLOODS:
        flooder, victim = getattr(a, fl_attr), getattr(a, vi_attr)
        for host, direction, peers, peer in ((victim, "in", "top_sources", flooder),
                                             (flooder, "out", "top_destinations", victim)):
            ev = whole.one(kind, host, what, direction).end["evidence"]
            tops = [p["host"] for p in ev.get(peers, [])]
            assert tops[:1] == [peer], f"{what}: {host} {direction}: {peers} {ev.get(peers)}, want {peer} first"
        ev = whole.one(kind, victim, what, "in").end["evidence"]
        ports = [(p["proto"], p["port"]) for p in ev["top_ports"]]
        assert ports[:1] == [port], f"{what}: top_ports {ev['top_ports']}, want {port} first"


def editcap(*args) -> None:
    subprocess.run(["editcap", *map(str, args)], check=True, capture_output=True, timeout=120)


def test_flood_end_last_seen(rec, whole_pcap, sonde, tmp_path):
    """An attack's last_seen is the end of its last second above a threshold, whether it ended
    after ddos.hold (5) quiet seconds or because the input ended during them. The capture is
    cut after the UDP flood's last packet and ends with the recording's last packets moved
    to 3.2 s after the flood's last second above the threshold: the UDP flood's detection is
    still held when the input ends, the SYN flood's (3-4 s earlier) has ended by then."""
    pcap, pkts = whole_pcap
    a = rec.actors
    udp = flood_truth(pkts, a.udp_flooder, a.udp_victim, FLOODS[1][4], UDP_PPS)
    end_at = udp["crossed"][-1] + 3.2
    head, tail, moved, cut = (tmp_path / n for n in ("head.pcap", "tail.pcap", "moved.pcap", "cut.pcap"))
    editcap("-B", f"{udp['last'] + 1e-6:.6f}", pcap, head)
    last = max(p.t for p in pkts)
    editcap("-A", f"{last - 0.05:.6f}", pcap, tail)
    first_of_tail = first_packet_time(tail)
    ac.shift_capture(tail, moved, round((end_at - first_of_tail) * 1e6))
    subprocess.run(["mergecap", "-w", str(cut), str(head), str(moved)], check=True,
                   capture_output=True, timeout=120)
    case = make_case("cut after the UDP flood", sonde, rec, cut, tmp_path, 3600)
    end_of_input = int(max(p.t for p in case.pkts))
    for what, fl_attr, vi_attr, kind, is_kind, _, threshold, _, _ in FLOODS:
        t = flood_truth(case.pkts, getattr(a, fl_attr), getattr(a, vi_attr), is_kind, threshold)
        held = end_of_input < t["crossed"][-1] + 5
        assert held == (fl_attr == "udp_flooder"), (what, t["crossed"], end_of_input)
        for host, direction in ((getattr(a, vi_attr), "in"), (getattr(a, fl_attr), "out")):
            d = case.one(kind, host, what, direction)
            assert d.end["last_seen"] == t["crossed"][-1] + 1, (
                f"{what}: {host} {direction}: last_seen {d.end['last_seen']}; tshark's last "
                f"second at {threshold}+/s is {t['crossed'][-1]} (last flood packet "
                f"{t['last']:.6f}); the input ends in second {end_of_input}, "
                f"{'within' if held else 'after'} ddos.hold (5 s)")


def test_flood_in_first_second_of_capture(rec, recorded_pkts, sonde, tmp_path):
    """The SYN flood alone, moved so that its first packet opens the capture's first second:
    that second counts like any other."""
    a = rec.actors
    flood = [p for p in recorded_pkts if p.src == a.syn_flooder]
    t0, t1 = min(p.t for p in flood), max(p.t for p in flood)
    cut = tmp_path / "flood-only.pcap"
    editcap("-A", f"{t0:.6f}", "-B", f"{t1 + 0.5:.6f}", rec.pcap, cut)
    t0_us = round(t0 * 1e6)
    pcap = tmp_path / "flood-first.pcap"
    ac.shift_capture(cut, pcap, (t0_us // 1_000_000 + 10) * 1_000_000 + 1 - t0_us)
    case = make_case("SYN flood only", sonde, rec, pcap, tmp_path, 30)
    t = flood_truth(case.pkts, a.syn_flooder, a.syn_victim, ac.syn_only, SYN_PPS)
    assert int(min(p.t for p in case.pkts)) == t["crossed"][0], "the first second must reach the threshold"
    d = case.one("syn_flood", a.syn_victim, "SYN flood at the start", "in")
    ev = d.end["evidence"]
    assert (d.start["first_seen"], ev["seconds"], ev["total"]["syn"]) == (
        t["crossed"][0], len(t["crossed"]), sum(len(t["secs"][s]) for s in t["crossed"])), (
        f"first_seen {d.start['first_seen']}, {ev['seconds']} seconds, {ev['total']['syn']} SYNs; "
        f"tshark: first second {t['crossed'][0]}, {len(t['crossed'])} seconds at {SYN_PPS}+/s, "
        f"{sum(len(t['secs'][s]) for s in t['crossed'])} SYNs in them "
        f"(per second { {s: len(v) for s, v in sorted(t['secs'].items())} })")


def test_only_attackers_reported(whole):
    """No detection names an ordinary host (curl, http.server, dig, the DNS responder, the TCP
    echo pair), and every one names a scanner, a flooder or a victim."""
    check_only_attackers(whole)


def test_only_attackers_reported_30s(straddle):
    check_only_attackers(straddle)


def check_only_attackers(case: Case) -> None:
    a = case.actors
    ordinary = {ip: what for what, ip in a.ordinary().items()}
    attack = {a.port_scanner, a.ip_scanner, a.ping_sweeper, a.udp_prober, a.syn_flooder,
              a.udp_flooder, a.syn_victim, a.udp_victim, a.udp_probe_victim, a.port_victim}
    wrong = [f"{ordinary[d.start['host']]} {d.start['host']}: {d.end['type']}"
             for d in case.detections if d.start["host"] in ordinary]
    assert not wrong, f"ordinary hosts reported ({case.name}): {wrong}"
    others = [f"{d.start['host']}: {d.end['type']}" for d in case.detections
              if d.start["host"] not in attack]
    assert not others, f"detections of hosts that attacked nothing and were not attacked: {others}"


# ---------------------------------------------------------------------------------------------
# Detections, 30 s intervals, the port scan across a boundary
# ---------------------------------------------------------------------------------------------

def test_scan_across_interval_boundary(straddle):
    """The port scan is seen in two 30 s intervals: one detection, first_seen the first
    interval, the start record with the first interval's targets, the end record with the
    union (1000 ports, as tshark counts them). The other scanners and ICMP errors follow the
    same per-interval ground truth."""
    a = straddle.actors
    w = expected_scans(straddle.pkts, a.port_scanner, "scan.port", 30)
    assert len(w) == 1 and w[0]["intervals"] == [straddle.boundary - 30, straddle.boundary], (
        f"test setup: the port scan should reach {SCAN_TARGETS} ports on both sides of "
        f"{straddle.boundary}: {w}")
    by = ac.probes_by_interval(straddle.pkts, a.port_scanner, 30)
    assert min(len(v) for v in by.values()) >= SCAN_TARGETS
    d = straddle.one("scan.port", a.port_scanner, "port scan across a boundary")
    assert d.end["targets"] == len(by[straddle.boundary - 30] | by[straddle.boundary])
    check_scans(straddle)
    check_icmp_errors(straddle)


def test_scan_across_boundary_end_evidence(straddle):
    """The end record of the scan seen in two intervals: its evidence (per-destination groups,
    largest group) describes the same targets its `targets` counts."""
    a = straddle.actors
    w = expected_scans(straddle.pkts, a.port_scanner, "scan.port", 30)[0]
    d = straddle.one("scan.port", a.port_scanner, "port scan across a boundary")
    ev = d.end["evidence"]
    groups = {g["destination"]: g["targets"] for g in ev["destinations"]}
    assert sum(groups.values()) == d.end["targets"] == w["targets"], (
        f"end record: targets {d.end['targets']} but evidence.destinations {groups}, "
        f"largest_group {ev.get('largest_group')} (tshark: {dict(w['union_groups'])} over both "
        f"intervals, {dict(w['last_groups'])} in the last one)")


# ---------------------------------------------------------------------------------------------
# Filter-sets on the nDPI corpus
# ---------------------------------------------------------------------------------------------

FILTERS = [
    ("http", "tcp port 80"),
    ("dns", "udp port 53 or udp port 5353"),
    ("web", "port 80 or 443"),
    ("lan_not_tls", "net 192.168.0.0/16 and not port 443"),
    ("v6tcp", "ip6 and tcp"),
    ("icmp", "icmp or icmp6"),
    ("high", "portrange 1024-65535"),
    ("src10", "src net 10.0.0.0/8"),
    ("gw", "host 192.168.1.1"),
    ("gdns_lo", "host 8.8.8.8 or dst host 127.0.0.1"),
    ("vbox_udp", "src host 10.0.2.15 and udp"),
    ("v6host", "host 2a00:d40:1:3:7aac:c0ff:fea7:d4c"),
    ("low_dst", "dst portrange 1-1023 and not icmp"),
    ("vlan_gre", "vlan and ip proto 47"),
    ("syn", "tcp[tcpflags] & tcp-syn != 0"),
    ("vlan", "vlan"),
    ("small", "less 100"),
    ("big", "greater 1000"),
    ("arp", "arp"),
    ("frag", "ip[6:2] & 0x1fff != 0"),
    ("not_ip", "not ip and not ip6"),
]
# Twice, as two sets: 42 expressions, more than the 32 a flow caches.
SET_NAMES = ("a", "b")

# tcpdump refuses some expressions on some link types; no packet of those can match them.
TCPDUMP_NO_MATCH = re.compile(r"expression rejects all packets|no VLAN support for")


def tcpdump_truth(pcap: Path, scratch: Path) -> Dict[str, Tuple[int, int]]:
    """(packets, bytes) per label: `tcpdump --count`, and the wire lengths of what
    `tcpdump -w` keeps (capinfos's data size, in one call for all expressions)."""
    counts, files = {}, {}
    for label, expr in FILTERS:
        p = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "--count", expr],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
            assert TCPDUMP_NO_MATCH.search(msg), f"tcpdump {pcap.name} {expr!r}: {p.stderr}"
            counts[label] = (0, 0)
            continue
        m = re.match(r"(\d+) packets?", p.stdout.strip())
        assert m, f"tcpdump --count {pcap.name} {expr!r}: {p.stdout!r}"
        out = scratch / f"{pcap.name}.{label}.pcap"
        subprocess.run(["tcpdump", "-r", str(pcap), "-w", str(out), expr], check=True,
                       capture_output=True, timeout=120)
        counts[label] = int(m.group(1))
        files[label] = out
    if files:
        p = subprocess.run(["capinfos", "-T", "-r", "-c", "-d", "-M"] + [str(f) for f in files.values()],
                           capture_output=True, text=True, timeout=120)
        rows = [line.split("\t") for line in p.stdout.splitlines()]
        by_file = {r[0]: (int(r[1]), int(r[2])) for r in rows if len(r) == 3}
        for label, f in files.items():
            n, size = by_file[str(f)]
            assert n == counts[label], f"tcpdump --count {counts[label]} but -w kept {n} ({pcap.name}, {label})"
            counts[label] = (n, size)
    return counts


def filter_args() -> List[str]:
    args = []
    for name in SET_NAMES:
        args += ["--filter-set", f"{name}=" + ";".join(f"{label}:{expr}" for label, expr in FILTERS)]
    return args


def sonde_filter_counts(sonde, pcap: Path, out: Path, threads: int) -> dict:
    stats = out / f"{pcap.name}.t{threads}.json"
    p = sonde("-r", pcap, "-q", "--dpi", "off", "--threads", threads, "--stats-json", stats,
              *filter_args(), timeout=300)
    assert p.returncode == 0 and "panicked" not in p.stderr, f"{pcap.name}: {p.stderr}"
    return json.loads(stats.read_text())["filter_sets"]


def filter_mismatches(sonde, pcap: Path, scratch: Path, threads: int):
    """The differences between sonde and tcpdump on one capture, and tcpdump's counts."""
    want = tcpdump_truth(pcap, scratch)
    got = sonde_filter_counts(sonde, pcap, scratch, threads)
    bad = []
    for name in SET_NAMES:
        for label, expr in FILTERS:
            g = got.get(name, {}).get(label)
            gv = (g["packets"], g["bytes"]) if g else None
            if gv != want[label]:
                bad.append(f"{pcap.name} --threads {threads} set {name} {label} {expr!r}: sonde "
                           f"(packets, bytes) {gv}, tcpdump {want[label]}")
    return bad, want


def check_filter_sets(sonde, files: List[Path], scratch: Path, threads: int) -> None:
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(lambda f: filter_mismatches(sonde, f, scratch, threads), files))
    bad = [line for lines, _ in results for line in lines]
    assert not bad, f"{len(bad)} filter-set counts differ from tcpdump:\n" + "\n".join(bad[:40])
    # Each expression matched something somewhere, so none of them was compared only as 0 = 0.
    unmatched = [label for label, _ in FILTERS if not any(w[label][0] for _, w in results)]
    assert not unmatched, f"expressions that match no packet of {[f.name for f in files]}: {unmatched}"


def test_capinfos_data_size_is_frame_len(corpus, tmp_path, tshark_tools):
    """Oracle self-check: capinfos's data size is the sum of tshark's frame.len (wire lengths),
    not of captured lengths, also for packets cut by the snaplen."""
    cut = tmp_path / "cut.pcapng"
    subprocess.run(["editcap", "-s", "60", str(corpus / "http.pcapng"), str(cut)], check=True,
                   capture_output=True)
    p = subprocess.run(["tshark", "-r", str(cut), "-T", "fields", "-e", "frame.len", "-e",
                        "frame.cap_len"], capture_output=True, text=True, check=True)
    lens = [tuple(map(int, line.split("\t"))) for line in p.stdout.splitlines()]
    assert any(f > c for f, c in lens), "editcap -s 60 cut nothing: pick another capture"
    c = subprocess.run(["capinfos", "-T", "-r", "-d", "-M", str(cut)], capture_output=True,
                       text=True, check=True).stdout.split("\t")
    assert int(c[1]) == sum(f for f, _ in lens)


def test_filter_sets_match_tcpdump(sonde, corpus, tmp_path, tshark_tools):
    """Every capture of the corpus, one sonde run each with two filter-sets of 21 expressions:
    packets and wire bytes per expression equal tcpdump's."""
    check_filter_sets(sonde, corpus_files(), tmp_path, 1)


# Captures that together match every expression, with VLAN tags, IP fragments, IPv6, tunnels
# and non-Ethernet link types (BSD loopback, Linux cooked).
THREADED = ["netflix.pcap", "android.pcap", "http_ipv6.pcap", "ip_fragmented_garbage.pcap",
            "dns_fragmented.pcap", "openvpn.pcap", "quic-mvfst-27.pcapng", "gre.pcapng",
            "vxlan.pcap", "tor.pcap", "selfsigned.pcap", "quic-v2.pcapng"]


def test_filter_sets_match_tcpdump_two_threads(sonde, corpus, tmp_path, tshark_tools):
    """The same with --threads 2 (a reader thread works out the masks)."""
    files = [corpus / n for n in THREADED if (corpus / n).is_file()]
    assert len(files) == len(THREADED), f"missing from {corpus}: {set(THREADED) - {f.name for f in files}}"
    check_filter_sets(sonde, files, tmp_path, 2)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

BAD = [
    # (arguments, what the error line must say besides naming the flag)
    (["--filter-set", "x=a:tcp prot 80"], r"--filter-set 'x', label 'a': 'tcp prot 80': \S"),
    (["--filter-set", "web=http:tcp port 80;b:udp port 99999"],
     r"--filter-set 'web', label 'b': 'udp port 99999': \S"),
    (["--filter-set", "x=a:tcp port 80;a:udp"], r"--filter-set .*label 'a'.*twice"),
    (["--filter-set", "x=a:tcp", "--filter-set", "x=b:udp"], r"--filter-set 'x'.*(twice|declared)"),
    (["--filter-set", "x"], r"--filter-set 'x'"),
    (["--filter-set", "x=a:"], r"--filter-set 'x=a:'.*label 'a'"),
    (["--threshold", "ddos.ppps=5"], r"--threshold 'ddos.ppps=5'.*unknown key 'ddos.ppps'"),
    (["--threshold", "ddos.pps=-5"], r"--threshold 'ddos.pps=-5'.*positive"),
    (["--threshold", "scan.ip_targets=0"], r"--threshold 'scan.ip_targets=0'.*positive"),
    (["--threshold", "ddos.pps=1e30"], r"--threshold 'ddos.pps=1e30'.*beyond"),
    (["--threshold", "syn.work_weight=101"], r"--threshold 'syn.work_weight=101'"),
    (["--threshold", "ddos.mbps=fast"], r"--threshold 'ddos.mbps=fast'.*not a number"),
    (["--threshold", "10.0.0.0/33:ddos.pps=5"], r"--threshold '10.0.0.0/33:ddos.pps=5'.*not a network"),
    (["--threshold", "10.0.0.300/8:ddos.pps=5"], r"--threshold '10.0.0.300/8:ddos.pps=5'.*network"),
    (["--threshold", "2001:db8::/129:ddos.pps=5"], r"--threshold '2001:db8::/129:ddos.pps=5'.*network"),
    (["--top-interval", "0"], r"--top-interval"),
    (["--analytics", "off", "--threshold", "ddos.pps=5"], r"--analytics off.*--threshold"),
]


@pytest.mark.parametrize("args,says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_analytics_arguments(args, says, sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", "-q", *args, timeout=60)
    err = p.stderr
    assert "panicked" not in err and "RUST_BACKTRACE" not in err and "Traceback" not in err, err
    assert p.returncode in (1, 2), f"{args}: exit status {p.returncode}, want 1 or 2; stderr:\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sonde: error: "), (
        f"{args}: want exactly one 'sonde: error:' line, got:\n{err}")
    assert re.search(says, lines[0]), f"{args}: the error line does not match /{says}/:\n{lines[0]}"
    assert not re.search(r"\S {3,}\S", lines[0]), f"{args}: a run of spaces in the message:\n{lines[0]}"
