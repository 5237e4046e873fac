"""The REST API (`--http`): answers checked against tshark and against sonde's own final
counters; sorting, paging, filters and errors; Prometheus metrics; loopback only without
logins (logins themselves: test_auth.py)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port

import oracle
from apiclient import error as _error, get as _get, get_json as _json, wait_for_whole_file












class Served:
    def __init__(self, proc, base, pcap, packets, stats, sonde_bin=None):
        self.proc, self.base, self.pcap, self.packets, self.stats = proc, base, pcap, packets, stats
        self.sonde_bin = sonde_bin

    def stop(self):
        """Ctrl-C: sonde ends, writes its summary, and it is returned."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        return json.loads(self.stats.read_text())


@pytest.fixture
def served(sonde_bin, corpus, workdir):
    s = _serve(sonde_bin, corpus / "http_connect.pcap", workdir)
    yield s
    if s.proc.poll() is None:
        s.stop()


def _serve(sonde_bin, pcap, workdir):
    """sonde reading `pcap` with the API on a free port, once the API shows the whole file."""
    if not pcap.exists():
        pytest.skip(f"{pcap.name} not in the corpus")
    port = free_port()
    stats = workdir / "stats.json"
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}", "--no-auth", "--duration", "60",
         "--stats-json", stats, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    want = oracle.capinfos_packets(str(pcap))
    wait_for_whole_file(base, proc, want, timeout=20)
    return Served(proc, base, pcap, want, stats, sonde_bin)


def test_api_answers_equal_tshark_and_the_engine(served):
    base, pcap, want = served.base, served.pcap, served.packets
    health = _json(base, "/api/v1/health")
    assert health["status"] == "ok" and str(pcap) in health["source"]
    iface = _json(base, "/api/v1/interface")
    assert iface["packets"] == want
    time.sleep(0.2)
    iface2 = _json(base, "/api/v1/interface")
    assert iface2["packets_per_s"] == 0 and iface2["bits_per_s"] == 0  # the file is over
    # Hosts: every IPv4 endpoint tshark sees, with its packets each way.
    eps = oracle.ipv4_endpoints(pcap)
    hosts = _json(base, "/api/v1/hosts?limit=1000")
    got = {h["ip"]: (h["sent_packets"], h["rcvd_packets"]) for h in hosts["hosts"]}
    assert got == eps
    assert hosts["total"] == len(eps)
    # Sorted by bytes, descending by default; paging is a window of the same order.
    by = [h["sent_bytes"] + h["rcvd_bytes"] for h in hosts["hosts"]]
    assert by == sorted(by, reverse=True)
    second = _json(base, "/api/v1/hosts?limit=1&offset=1")["hosts"]
    assert second == hosts["hosts"][1:2]
    asc = _json(base, "/api/v1/hosts?sort=packets&order=asc&limit=1000")["hosts"]
    pk = [h["sent_packets"] + h["rcvd_packets"] for h in asc]
    assert pk == sorted(pk)
    one = _json(base, "/api/v1/hosts?q=192.168.1.1")["hosts"]
    assert {h["ip"] for h in one} == {ip for ip in eps if "192.168.1.1" in ip}
    # Flows: a filter narrows the table to what it names.
    flows = _json(base, "/api/v1/flows?limit=1000")
    assert flows["total"] == len(flows["flows"]) > 1
    host = "192.168.1.103"
    mine = _json(base, f"/api/v1/flows?host={host}&limit=1000")
    assert 0 < mine["total"] < flows["total"]
    assert all(host in (f["client"], f["server"]) for f in mine["flows"])
    assert mine["total"] == sum(1 for f in flows["flows"] if host in (f["client"], f["server"]))
    udp = _json(base, "/api/v1/flows?proto=17&limit=1000")["flows"]
    assert all(f["protocol"] == 17 for f in udp)
    # Metrics agree with the interface view.
    status, ctype, text = _get(base, "/metrics")
    assert ctype.startswith("text/plain")
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            m[name] = float(value)
    assert m['sonde_packets_total{shard="0"}'] == want
    # The shard has answered this test's snapshots, in well under the time it has run.
    assert 0 < m['sonde_shard_reader_seconds_total{shard="0"}'] < 60
    assert m['sonde_flows_active{shard="0"}'] == flows["total"]
    # The OpenAPI document lists every endpoint.
    doc = _json(base, "/api/v1/openapi.json")
    assert set(doc["paths"]) == {"/api/v1/health", "/api/v1/interface", "/api/v1/sinks", "/api/v1/hosts",
                                 "/api/v1/flows", "/api/v1/hosts/{ip}", "/api/v1/top/{what}",
                                 "/api/v1/series", "/api/v1/events", "/metrics",
                                 "/api/v1/history/flows", "/api/v1/history/top/{what}",
                                 "/api/v1/login", "/api/v1/logout", "/api/v1/me",
                                 "/api/v1/admin/users", "/api/v1/admin/users/{name}",
                                 "/api/v1/admin/tokens", "/api/v1/admin/tokens/{name}",
                                 "/api/v1/anomalies", "/api/v1/interval", "/api/v1/filtersets",
                                 "/api/v1/history/intervals",
                                 "/api/v1/alerts", "/api/v1/alerts/exclusions",
                                 "/api/v1/admin/alerts/exclusions",
                                 "/api/v1/admin/alerts/exclusions/{id}",
                                 "/api/v1/admin/alerts/{id}/ack",
                                 "/api/v1/admin/alerts/{id}/captures/{name}",
                                 "/api/v1/history/intervals/top/{list}",
                                 "/api/v1/history/anomalies", "/api/v1/schema"}
    # /api/v1/schema is the table `sonde schema --json` prints; every flow's 'meta' uses its
    # metadata keys, and says what 'info' says where both name the same thing.
    schema = _json(base, "/api/v1/schema")
    printed = subprocess.run([served.sonde_bin, "schema", "--json"], capture_output=True,
                             text=True, check=True).stdout
    assert schema == json.loads(printed)
    # The console's type for a row names exactly the row's keys.
    api_ts = (Path(__file__).resolve().parents[2] / "console" / "src" / "api.ts").read_text()
    body = re.search(r"export interface SchemaField \{(.*?)\n\}", api_ts, re.S).group(1)
    assert set(re.findall(r"^\s*(\w+):", body, re.M)) == set(schema[0]), body
    meta_keys = {f["key"] for f in schema if f["stored"] == "meta"}
    assert {"HTTP_HOST", "TLS_SERVER_NAME", "DNS_ANSWERS"} <= meta_keys
    same = {"server_name": "SERVER_NAME", "http_host": "HTTP_HOST", "http_url": "HTTP_URL",
            "user_agent": "HTTP_USER_AGENT", "tls_sni": "TLS_SERVER_NAME",
            "dns_query": "DNS_QUERY"}
    with_meta = [f for f in flows["flows"] if f["meta"]]
    assert with_meta, "the capture's HTTP flows carry metadata"
    for f in flows["flows"]:
        assert set(f["meta"]) <= meta_keys, f["meta"]
        for info_key, meta_key in same.items():
            assert f["info"].get(info_key) == f["meta"].get(meta_key), (info_key, f)
    # A prefix filter selects the hosts tshark lists in that network.
    net = _json(base, "/api/v1/hosts?net=192.168.1.0/24&limit=1000")["hosts"]
    assert {h["ip"] for h in net} == {ip for ip in eps if ip.startswith("192.168.1.")}
    assert _error(base, "/api/v1/hosts?net=192.168.1.0/40")[0] == 400
    # An application filter selects the hosts at either end of that application's flows.
    labelled = {f["application"] for f in flows["flows"] if f["application"]}
    assert labelled, "some flows of the capture have an application"
    for app in labelled:
        ends = {ip for f in flows["flows"] if f["application"] == app
                for ip in (f["client"], f["server"])}
        got = _json(base, f"/api/v1/hosts?app={urllib.parse.quote(app)}&limit=1000")
        assert {h["ip"] for h in got["hosts"]} == ends and got["total"] == len(ends), app
    assert _error(base, "/api/v1/hosts?app=NoSuchApp")[0] == 400
    # One host: its counters, its flows and peers, as the lists say.
    ip = "192.168.1.103"
    page = _json(base, f"/api/v1/hosts/{ip}")
    assert [h["sent_packets"] for h in page["host"]] == [eps[ip][0]]
    assert page["flows_total"] == mine["total"]
    assert sum(p["flows"] for p in page["peers"]) == mine["total"]
    assert sum(p["bytes"] for p in page["applications"]) == sum(
        f["client_bytes"] + f["server_bytes"] for f in mine["flows"])
    assert _error(base, "/api/v1/hosts/10.9.9.9")[0] == 404
    assert _error(base, "/api/v1/hosts/not-an-ip")[0] == 400
    # Top lists: talkers are the hosts by bytes sent; applications add up to all flows.
    talkers = _json(base, "/api/v1/top/talkers?n=2")["rows"]
    by_sent = sorted(hosts["hosts"], key=lambda h: (-h["sent_bytes"], h["ip"]))[:2]
    assert [(t["ip"], t["bytes"]) for t in talkers] == [(h["ip"], h["sent_bytes"]) for h in by_sent]
    apps = _json(base, "/api/v1/top/applications?n=100")["rows"]
    assert sum(a["flows"] for a in apps) == flows["total"]
    protos = _json(base, "/api/v1/top/protocols")["rows"]
    assert sum(p["bytes"] for p in protos) == sum(f["client_bytes"] + f["server_bytes"] for f in flows["flows"])
    assert _error(base, "/api/v1/top/everything")[0] == 404
    # No --data-dir: no time series, and the API says why.
    code, body = _error(base, "/api/v1/series")
    assert code == 404 and "--data-dir" in body["error"]
    for path in ["/api/v1/history/flows", "/api/v1/history/top/hosts"]:
        code, body = _error(base, path)
        assert code == 404 and "--data-dir" in body["error"], path
    # Bad requests say what is wrong.
    for path, says in [("/api/v1/hosts?sort=size", "sort"), ("/api/v1/hosts?limit=-1", "limit"),
                       ("/api/v1/flows?order=up", "order"), ("/api/v1/flows?app=NoSuchApp", "app"),
                       ("/api/v1/flows?port=http", "port")]:
        code, body = _error(base, path)
        assert code == 400 and says in body["error"], (path, body)
    code, body = _error(base, "/api/v1/nothing")
    assert code == 404 and "openapi" in body["error"]
    # A parameter the route does not take (a typo in a script) is refused and named, with
    # the ones it takes; so is any parameter on a route that takes none.
    code, body = _error(base, "/api/v1/flows?limt=10")
    assert code == 400 and '"limt"' in body["error"] and "limit" in body["error"], body
    code, body = _error(base, "/api/v1/interface?verbose=1")
    assert code == 400 and "takes none" in body["error"], body
    assert _json(base, "/api/v1/flows?limit=1&sort=bytes")["limit"] == 1


def test_api_counts_equal_the_final_summary(served):
    base = served.base
    iface = _json(base, "/api/v1/interface")
    flows = _json(base, "/api/v1/flows?limit=10000")
    hosts = _json(base, "/api/v1/hosts?limit=10000")
    final = served.stop()
    for k in ("packets", "ip_packets", "ip_bytes"):
        assert iface[k] == final[k], k
    # The flows live when it stopped are the ones flushed at the end.
    assert flows["total"] == final["flows"]["ended"]["end_of_capture"]
    assert sum(f["client_packets"] + f["server_packets"] for f in flows["flows"]) == final["ip_packets"]
    assert hosts["total"] == final["hosts"]["distinct"]
    assert sum(h["sent_bytes"] for h in hosts["hosts"]) == final["ip_bytes"]


def test_series_endpoint_reads_the_data_directory(sonde_bin, corpus, workdir):
    pcap = corpus / "dns_doh.pcap"
    if not pcap.exists():
        pytest.skip("dns_doh.pcap not in the corpus")
    port = free_port()
    data = workdir / "data"
    stats = workdir / "stats.json"
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", pcap, "--http", f"127.0.0.1:{port}", "--no-auth", "--duration", "3",
         "--data-dir", data, "--stats-json", stats, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    # The rows are written as the shards close their seconds; the last when the run ends, so
    # read while it lingers: what is there adds up to no more than the engine's counters.
    deadline = time.time() + 10
    points = []
    while time.time() < deadline and not points:
        try:
            got = _json(base, "/api/v1/series?resolution=1s&from=1571089000&to=1571089300")
            points = [p for p in got["points"] if p["value"] is not None]
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    final = json.loads(stats.read_text())
    assert points, "no series rows while running"
    assert got["resolution"] == "1s" and got["metrics"][0] == "bytes_in"
    assert sum(p["value"][0] + p["value"][1] for p in points) <= final["ip_bytes"]
    assert any(p["value"] is None for p in got["points"]), "gaps are null"


def _serve_file_api(sonde_bin, pcap, *args):
    """sonde reading `pcap` with the API on a free port for 20 s (no logins): (port, process)."""
    port = free_port()
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", pcap, *args, "--http", f"127.0.0.1:{port}", "--no-auth",
         "--duration", "20", "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return port, proc


def test_events_stream_live_counters(sonde_bin, corpus):
    """Server-Sent Events: one `interface` event a second, counters that only grow, while a
    capture is replayed at its own pace."""
    pcap = corpus / "tor.pcap"  # about ten minutes at its own pace: traffic all along
    if not pcap.exists():
        pytest.skip("tor.pcap not in the corpus")
    port, proc = _serve_file_api(sonde_bin, pcap, "--replay", "realtime")
    try:
        deadline = time.time() + 10
        while True:
            try:
                resp = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/events", timeout=10)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.time() < deadline
                time.sleep(0.1)
        assert resp.headers.get("Content-Type", "").startswith("text/event-stream")
        events = []
        t0 = time.time()
        while len(events) < 3:
            line = resp.readline().decode().strip()
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
        elapsed = time.time() - t0
        resp.close()
        assert 1.5 < elapsed < 6, elapsed
        pk = [e["packets"] for e in events]
        assert pk == sorted(pk) and all(e["packets_per_s"] >= 0 for e in events)
        # Each point is in the capture's own time (tshark's first and last packet), a second
        # or so apart: the console charts a replayed file in its time, as its history.
        times = oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch"]).split()
        first, last = float(times[0]), float(times[-1])
        ts = [e["t"] for e in events]
        assert all(first <= t <= last + 10 for t in ts), (ts, first, last)
        assert all(0.5 < b - a < 2.5 for a, b in zip(ts, ts[1:])), ts
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_filtered_packets_are_not_drops(sonde_bin, corpus, tshark_tools):
    """What `-f` rejects is counted as filtered, live, and kept out of the overload signals the
    console charts (kernel drops, a full flow table)."""
    pcap = corpus / "teams.pcap"
    # BPF's "udp" is the packet's own protocol (tshark's "udp" also matches ICMP quoting UDP).
    udp = oracle.tshark(["-r", str(pcap), "-Y", "udp and not icmp", "-T", "fields", "-e",
                         "frame.number"]).count("\n")
    total = oracle.tshark(["-r", str(pcap), "-T", "fields", "-e", "frame.number"]).count("\n")
    port, proc = _serve_file_api(sonde_bin, pcap, "-f", "udp")
    try:
        deadline = time.time() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/interface",
                                            timeout=10) as r:
                    i = json.loads(r.read())
                if i["packets"] == total:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline, "the file's packets never all showed"
            time.sleep(0.2)
        assert i["filtered"] == total - udp > 0, i
        assert i["dropped"] == i["filtered"]
        assert i["table_full_dropped"] == 0 and i["capture_dropped"] == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/events", timeout=10) as resp:
            while True:
                line = resp.readline().decode().strip()
                if line.startswith("data:"):
                    e = json.loads(line[5:])
                    break
        assert e["dropped"] == total - udp
        assert e["capture_dropped"] == 0 and e["table_full_dropped"] == 0, e
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_exposed_address_is_refused(sonde, corpus):
    pcap = corpus / "http_connect.pcap"
    for addr in ("0.0.0.0:3000", "[::]:3000"):
        p = sonde("-r", pcap, "--http", addr, "--no-auth")
        assert p.returncode != 0 and "loopback" in p.stderr, p.stderr
    # A busy port is reported before anything runs.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    busy = s.getsockname()[1]
    p = sonde("-r", pcap, "--http", f"127.0.0.1:{busy}", "--no-auth")
    s.close()
    assert p.returncode != 0 and "cannot listen" in p.stderr, p.stderr


def test_hosts_by_dns_name_equal_tsharks_answers(sonde_bin, corpus, workdir):
    """`name=` selects the hosts some client resolved a matching name to, and each host lists
    its names: per client, the last name it resolved to that address, as tshark reads the DNS
    answers of the capture."""
    served = _serve(sonde_bin, corpus / "android.pcap", workdir)
    try:
        out = oracle.tshark(["-r", str(served.pcap), "-Y", "dns.flags.response == 1",
                             "-T", "fields", "-e", "ip.dst", "-e", "ipv6.dst",
                             "-e", "dns.qry.name", "-e", "dns.a", "-e", "dns.aaaa"])
        last = {}  # (client, address) -> the last name it resolved to that address
        for line in out.splitlines():
            v4, v6, name, a4, a6 = (line.split("\t") + [""] * 5)[:5]
            for a in f"{a4},{a6}".split(","):
                if a and name:
                    last[(v4 or v6, a)] = name
        names = {}
        for (_, a), n in last.items():
            names.setdefault(a, set()).add(n)
        hosts = _json(served.base, "/api/v1/hosts?limit=1000")["hosts"]
        live = {h["ip"] for h in hosts}
        for h in hosts:
            assert h["names"] == sorted(names.get(h["ip"], set()))[:8], h["ip"]
        checked = 0
        for needle in sorted({n.lower() for ns in names.values() for n in ns}):
            want = {a for a, ns in names.items() if any(needle in n.lower() for n in ns)} & live
            got = _json(served.base, f"/api/v1/hosts?name={urllib.parse.quote(needle.upper())}&limit=1000")
            assert {h["ip"] for h in got["hosts"]} == want, needle
            checked += bool(want)
        assert checked >= 5, f"only {checked} DNS names lead to live hosts"
        assert _json(served.base, "/api/v1/hosts?name=no.such.name.example")["total"] == 0
    finally:
        served.stop()
