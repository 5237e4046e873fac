"""Traffic analytics through the REST API, the metrics and `sonde query` (issue 13): the
per-interval top-N lists kept on disk add up to tshark's per-host counts, a query over a
range equals the API's answer over it, and the live filter-set counters, metrics and
detections endpoints agree with the final summary (detections themselves: test_analytics.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error

import pytest

import oracle
from apiclient import error as _error, get as _get, get_json as _json
from conftest import free_port










def _jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_stored_intervals_add_up_to_tshark(sonde_bin, corpus, workdir):
    """Every host's packets sent (talkers) and received (destinations), added up over all the
    10-second intervals a run stored, equal tshark's endpoint counts; ports and applications
    add up to every packet of the flows; the REST history answers what `sonde query` prints."""
    pcap = corpus / "netflix.pcap"
    data = workdir / "data"
    stats = workdir / "stats.json"
    subprocess.run([str(sonde_bin), "-r", pcap, "-q", "--data-dir", data, "--top-interval", "10",
                    "--top-n", "10000", "--stats-json", stats], check=True, timeout=120)
    summary = json.loads(stats.read_text())
    assert summary["analytics"]["intervals"] >= 2, "the capture spans several intervals"
    eps = oracle.ipv4_endpoints(pcap)
    q = [str(sonde_bin), "query", "--data-dir", str(data), "top"]
    rng = ["--from", "0", "--to", "4000000000", "--limit", "100000", "--format", "jsonl"]

    def top(lst, sort="packets"):
        out = subprocess.run(q + [lst, "--sort", sort] + rng, check=True, capture_output=True,
                             text=True, timeout=60).stdout
        return _jsonl(out)

    sent = {r["host"]: r["packets"] for r in top("talkers") if ":" not in r["host"]}
    rcvd = {r["host"]: r["packets"] for r in top("destinations") if ":" not in r["host"]}
    assert sent == {ip: tx for ip, (tx, _) in eps.items() if tx}
    assert rcvd == {ip: rx for ip, (_, rx) in eps.items() if rx}
    ip_packets = summary["ip_packets"]
    assert sum(r["packets"] for r in top("ports")) == ip_packets
    assert sum(r["packets"] for r in top("apps")) == ip_packets
    # A flow counts in every interval it had traffic in: at least once, so at least every
    # flow created is counted.
    assert sum(r["flows"] for r in top("apps", "flows")) >= summary["flows"]["created"]
    # Ranked: the first talker by packets is tshark's busiest sender.
    busiest = max(eps.items(), key=lambda e: e[1][0])[0]
    assert top("talkers")[0]["host"] == busiest



def _last_packet_time(pcap) -> int:
    """The capture's last packet time in whole seconds, as tshark reads it."""
    out = oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch"])
    return int(float(out.split()[-1]))


def test_history_api_equals_query(sonde_bin, corpus, workdir):
    """`/api/v1/history/intervals/top/{list}` and `sonde query top` read the same intervals:
    a sonde serving a capture it keeps in a data directory, and `sonde query` beside it."""
    pcap = corpus / "netflix.pcap"
    data = workdir / "data"
    port = free_port()
    proc = subprocess.Popen([str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}",
                             "--no-auth", "--duration", "60", "--data-dir", data,
                             "--top-interval", "10", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        want = oracle.capinfos_packets(str(pcap))
        # The analytics thread may lag the packet counters: wait for the interval that holds
        # the capture's last packet (tshark's time) to be stored, not only for the packets.
        last_ts = _last_packet_time(pcap)
        deadline = time.time() + 30
        starts = []
        while True:
            try:
                if _json(base, "/api/v1/interface")["packets"] == want:
                    ivs = _json(base, "/api/v1/history/intervals?from=0&to=4000000000"
                                      "&limit=1000")
                    starts = [iv["start"] for iv in ivs["intervals"]]
                    # The last (partial) interval is stored once the input is over.
                    last = _json(base, "/api/v1/interval")["interval"]
                    if (last and starts and starts[-1] == last["start"]
                            and last["start"] <= last_ts < last["end"]):
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline and proc.poll() is None, "no stored intervals"
            time.sleep(0.2)
        assert len(starts) >= 3 and starts == sorted(starts)
        lo, hi = starts[1], starts[-1]  # leaves the first and last interval out
        for lst in ("talkers", "ports", "apps"):
            api = _json(base, f"/api/v1/history/intervals/top/{lst}?from={lo}&to={hi}"
                              f"&sort=packets&limit=50")
            cli = _jsonl(subprocess.run(
                [str(sonde_bin), "query", "--data-dir", str(data), "top", lst, "--from", str(lo),
                 "--to", str(hi), "--sort", "packets", "--limit", "50", "--format", "jsonl"],
                check=True, capture_output=True, text=True).stdout)
            assert api["rows"] == cli, lst
            assert api["intervals"] == len([s for s in starts if lo <= s < hi])
            whole = _json(base, f"/api/v1/history/intervals/top/{lst}?from=0&to=4000000000"
                                f"&sort=packets&limit=1000")["rows"]
            assert sum(r["packets"] for r in api["rows"]) < sum(r["packets"] for r in whole)
        code, err = _error(base, "/api/v1/history/intervals/top/hosts")
        assert code == 400 and "talkers" in err["error"]
        code, err = _error(base, "/api/v1/history/anomalies?type=nope")
        assert code == 400 and "scan.ip" in err["error"]
        assert _error(base, "/api/v1/history/intervals?from=-1%C3%A9")[0] == 400
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_stored_detections_page_and_filter_as_the_whole_list_does(sonde_bin, workdir):
    """`/api/v1/history/anomalies` reads only the page it answers (a busy day's detections
    are hundreds of MB): every page and every type's list must still be the matching slice of
    the whole list, and the whole list the records in the data directory's files."""
    import scan_pcap
    pcap = workdir / "scan8.pcap"
    scan_pcap.write(pcap, scan_pcap.scanners(8, 40, 1_700_000_000.0, 8.0, "192.0.2.1"))
    data = workdir / "data"
    port = free_port()
    proc = subprocess.Popen([str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}",
                             "--no-auth", "--duration", "60", "--data-dir", data,
                             "--top-interval", "10", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        path = "/api/v1/history/anomalies?from=0&to=4000000000"

        def on_disk():
            return [json.loads(line) for f in sorted((data / "analytics").glob("*.detections.jsonl"))
                    for line in f.read_text().splitlines() if line.strip()]

        # Settled: every detection has its end record, and the files stopped growing.
        deadline, last = time.time() + 30, None
        while True:
            try:
                recs = on_disk()
                ends = sum(r.get("event") == "end" for r in recs)
                if recs and 2 * ends == len(recs) and recs == last:
                    break
                last = recs
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            assert time.time() < deadline and proc.poll() is None, "no stored detections"
            time.sleep(0.5)
        whole = _json(base, f"{path}&limit=1000")
        assert whole["detections"] == recs and whole["more"] is False
        n = len(recs)
        types = sorted({r["type"] for r in recs})
        assert n >= 16 and len(types) >= 2, (n, types)
        for t in [*types, "scan.ip"]:
            got = _json(base, f"{path}&type={t}&limit=1000")["detections"]
            assert got == [r for r in recs if r["type"] == t], t
        for offset, limit in [(0, 1), (1, 3), (5, 7), (n - 2, 5), (n, 5), (n + 3, 1)]:
            page = _json(base, f"{path}&offset={offset}&limit={limit}")
            assert page["detections"] == recs[offset:offset + limit], (offset, limit)
            assert page["more"] == (n > offset + limit), (offset, limit)
        scans = [r for r in recs if r["type"] == types[-1]]
        page = _json(base, f"{path}&type={types[-1]}&offset=2&limit=3")
        assert page["detections"] == scans[2:5] and page["more"] == (len(scans) > 5)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


FILTERS = ["--filter-set", "web=http:tcp port 80;tls:tcp port 443;dns:udp port 53",
           "--filter-set", "shape=syn:tcp[tcpflags] & tcp-syn != 0;small:less 100"]


def test_live_filter_sets_metrics_and_anomalies(sonde_bin, corpus, workdir):
    """While sonde serves a replayed capture: the filter-set totals of the API and of /metrics
    equal tcpdump's counts, and equal the final summary's; the per-second rows add up to the
    totals; the detections endpoint answers (nothing is detected in ordinary traffic)."""
    pcap = corpus / "netflix.pcap"
    port = free_port()
    stats = workdir / "stats.json"
    proc = subprocess.Popen([str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}",
                             "--no-auth", "--duration", "60", "--stats-json", stats, "-q"]
                            + FILTERS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    want = oracle.capinfos_packets(str(pcap))
    last_ts = _last_packet_time(pcap)
    try:
        deadline = time.time() + 30
        while True:
            try:
                if _json(base, "/api/v1/interface")["packets"] == want:
                    fs = _json(base, "/api/v1/filtersets?seconds=3600")
                    # The analytics thread merges the last second a moment after the shard.
                    if sum(e["packets"] for s in fs["sets"] for e in s["expressions"]) > 0:
                        iv = _json(base, "/api/v1/interval")["interval"]
                        # Merged up to the capture's last packet, not only counted.
                        if iv is not None and iv["start"] <= last_ts < iv["end"]:
                            break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline, "the API never showed the whole file"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        time.sleep(1.5)
        fs = _json(base, "/api/v1/filtersets?seconds=3600")
        exprs = {(s["name"], e["label"]): e for s in fs["sets"] for e in s["expressions"]}
        tcpdump = {}
        for (name, label), e in exprs.items():
            out = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "--count", e["expr"]],
                                 capture_output=True, text=True, check=True).stdout
            tcpdump[(name, label)] = int(out.split()[0])
            assert e["packets"] == tcpdump[(name, label)], (name, label, e["expr"])
        assert exprs[("web", "tls")]["native"] and not exprs[("shape", "small")]["native"]
        order = [(s["name"], e["label"]) for s in fs["sets"] for e in s["expressions"]]
        sums = [sum(row["counts"][i][0] for row in fs["seconds"]) for i in range(len(order))]
        assert sums == [exprs[k]["packets"] for k in order], "seconds add up to the totals"
        _, _, metrics = _get(base, "/metrics")
        for (name, label), n in tcpdump.items():
            line = f'sonde_filter_packets_total{{set="{name}",label="{label}"}} {n}'
            assert line in metrics.splitlines(), line
        assert 'sonde_detections_total{type="scan.port"} 0' in metrics.splitlines()
        an = _json(base, "/api/v1/anomalies")
        assert an["active"] == [] and an["recent"] == []
        assert _error(base, "/api/v1/anomalies?type=portscan")[0] == 400
        iv = _json(base, "/api/v1/interval")
        assert iv["interval_s"] == 30 and iv["interval"]["talkers"], iv
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    summary = json.loads(stats.read_text())
    for (name, label), n in tcpdump.items():
        assert summary["filter_sets"][name][label]["packets"] == n


def test_analytics_off_has_no_endpoints(sonde_bin, corpus, workdir):
    port = free_port()
    proc = subprocess.Popen([str(sonde_bin), "-r", corpus / "dns.pcap", "--http",
                             f"127.0.0.1:{port}", "--no-auth", "--duration", "30",
                             "--analytics", "off", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 20
        while True:
            try:
                _json(base, "/api/v1/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.time() < deadline and proc.poll() is None
                time.sleep(0.1)
        for path in ("/api/v1/anomalies", "/api/v1/interval", "/api/v1/filtersets"):
            code, err = _error(base, path)
            assert code == 404 and "--analytics off" in err["error"], path
        _, _, metrics = _get(base, "/metrics")
        assert "sonde_detections_total" not in metrics
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
