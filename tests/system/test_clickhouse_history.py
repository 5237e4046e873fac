"""Many probes, one view (issue 16): `--history clickhouse://HOST:PORT/DB[?table=T]` answers the
console's history questions (/api/v1/history/*, /api/v1/series) and `sonde query` from the
ClickHouse flows table instead of the local store, against Debian's ClickHouse 18.16 on
127.0.0.1.

* The same capture, stored by one run both locally (--data-dir) and in ClickHouse: every REST
  answer of a sonde serving the local store equals that of a sonde serving ClickHouse (flows
  field for field, top hosts and applications, filters), and both equal --flows-out.
* A database of schema version 1 or 2 is migrated (the columns of versions 2 and 3 added) and
  written; with --geoip-dir its rows carry the places --flows-out gives.
* Two ClickHouse servers, one shard each, and a `Distributed` table over them: the history
  read through it equals one probe reading both captures.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import oracle
from conftest import REPO, free_port

ARGS = ["--idle-timeout", "1000000000", "--active-timeout", "0", "-q"]


def sql(http: str, q: str) -> list[list[str]]:
    req = urllib.request.Request(f"http://{http}/", data=q.encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return [line.split("\t") for line in r.read().decode().splitlines()]
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{q}: {e.read().decode()}") from None


class Served:
    """A sonde serving its console and REST API (it reads a tiny capture as its own input)."""

    def __init__(self, sonde_bin, corpus, *args):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(sonde_bin), "-r", corpus / "http_connect.pcap", "--http",
             f"127.0.0.1:{self.port}", "--no-auth", *args, "-q"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while True:
            try:
                assert self.get("/api/v1/health")[1]["history"] is True
                return
            except (urllib.error.URLError, ConnectionError):
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    pytest.fail(f"sonde {args} did not serve: {self.proc.stderr.read()}")
                time.sleep(0.1)

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def all_flows(self, query=""):
        got, offset = [], 0
        while True:
            status, page = self.get(f"/api/v1/history/flows?limit=1000&offset={offset}{query}")
            assert status == 200, page
            got += page["flows"]
            offset += 1000
            if not page["more"]:
                return got

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def _canon(flows):
    return sorted(json.dumps(f, sort_keys=True) for f in flows)


def test_the_history_api_from_clickhouse_equals_the_local_stores(clickhouse, sonde_bin, sonde,
                                                                  corpus, workdir):
    pcap = corpus / "android.pcap"
    data, out = workdir / "data", workdir / "flows.jsonl"
    url = f"clickhouse://{clickhouse}/sonde_hist"
    p = sonde("-r", pcap, "--export", url, "--data-dir", data, "--flows-out", out, *ARGS)
    assert p.returncode == 0, p.stderr
    want = oracle.load_jsonl(str(out))
    assert len(want) > 50
    local = Served(sonde_bin, corpus, "--data-dir", data)
    central = Served(sonde_bin, corpus, "--history", url)
    try:
        # Every flow, field for field, as --flows-out wrote it; pages of 7 add up to it.
        flows = central.all_flows()
        assert _canon(flows) == _canon(want) == _canon(local.all_flows())
        paged, offset = [], 0
        while True:
            page = central.get(f"/api/v1/history/flows?limit=7&offset={offset}")[1]
            paged += page["flows"]
            offset += 7
            if not page["more"]:
                break
        assert _canon(paged) == _canon(want)
        # Filters and top lists: the same answers from both.
        first = min(r["FIRST_SWITCHED"] for r in want)
        for q in ["port=53", "proto=udp", "host=192.168.2.16&proto=tcp", "app=Google",
                  "host=172.217.0.0/16", f"from={first + 20}&to={first + 40}",
                  "from=2099-01-01"]:
            a, b = local.all_flows("&" + q), central.all_flows("&" + q)
            assert _canon(a) == _canon(b), q
            if q != "from=2099-01-01":
                assert a, f"{q} selects some flows of the capture"
        for q in ["top/hosts?limit=20", "top/hosts?sort=packets&limit=20",
                  "top/hosts?sort=flows&limit=5&offset=2", "top/apps?limit=1000",
                  "top/apps?sort=flows&limit=1000&proto=udp", "top/hosts?host=172.217.0.0/16"]:
            a, b = local.get("/api/v1/history/" + q), central.get("/api/v1/history/" + q)
            assert a[0] == b[0] == 200, (q, a, b)
            assert a[1]["rows"] == b[1]["rows"] and a[1]["rows"], q
        # The probes: flows this sonde measured itself carry no exporter.
        status, ex = central.get("/api/v1/history/top/exporters")
        assert status == 200 and ex["rows"] == [{
            "name": "", "flows": len(want), "packets": sum(r["IN_PKTS"] + r["OUT_PKTS"] for r in want),
            "bytes": sum(r["IN_BYTES"] + r["OUT_BYTES"] for r in want)}], ex
        assert central.get("/api/v1/history/flows?exporter=192.0.2.1")[1]["flows"] == []
        status, err = local.get("/api/v1/history/flows?exporter=192.0.2.1")
        assert status == 400 and "exporter=" in err["error"], err
        assert local.get("/api/v1/history/top/exporters") == (200, {"rows": []}), \
            "a local store is one probe's: no probes to pick"
        assert central.get("/api/v1/history/flows?exporter=nope")[0] == 400
        # Series (by flow start, per minute): the capture's bytes, and one host's both ways.
        last = max(r["LAST_SWITCHED"] for r in want)
        status, s = central.get(f"/api/v1/series?from={first}&to={last + 1}&resolution=1m")
        assert status == 200, s
        assert s["resolution"] == "1m" and s["points"][0]["t"] <= first
        values = [p["value"] for p in s["points"] if p["value"]]
        assert sum(v[0] + v[1] for v in values) == sum(r["IN_BYTES"] + r["OUT_BYTES"] for r in want)
        assert sum(v[4] for v in values) == len(want)
        host = "192.168.2.16"
        sent = sum(r["IN_BYTES"] if r.get("IPV4_SRC_ADDR") == host else r["OUT_BYTES"]
                   for r in want if host in (r.get("IPV4_SRC_ADDR"), r.get("IPV4_DST_ADDR")))
        status, s = central.get(f"/api/v1/series?family=hosts&key={host}&from={first}"
                                f"&to={last + 1}&resolution=1m")
        assert status == 200, s
        assert sum(p["value"][1] for p in s["points"] if p["value"]) == sent
        status, s = central.get(f"/api/v1/series?family=apps&key={urllib.parse.quote('TLS.Google')}"
                                f"&from={first}&to={last + 1}")
        assert sum(p["value"][4] for p in s["points"] if p["value"]) == \
            sum(1 for r in want if r.get("L7_PROTO_NAME") == "TLS.Google")
        status, s = central.get("/api/v1/series?family=apps&key=x'%20OR%201=1--")
        assert status == 200 and all(p["value"] is None for p in s["points"]), \
            "a label is a string, never SQL"
        assert central.get("/api/v1/series?family=filters")[0] == 400
    finally:
        local.stop()
        central.stop()
    # `sonde query` reads ClickHouse too.
    q = sonde("query", "--history", url, "hosts", "--limit", "5", "--format", "jsonl")
    d = sonde("query", "--data-dir", data, "hosts", "--limit", "5", "--format", "jsonl")
    assert q.returncode == 0 and q.stdout == d.stdout and q.stdout, (q.stderr, d.stderr)
    q = sonde("query", "--history", url, "flows", "--port", "53", "--format", "jsonl")
    d = sonde("query", "--data-dir", data, "flows", "--port", "53", "--format", "jsonl")
    assert q.returncode == 0 and _canon(map(json.loads, q.stdout.splitlines())) == \
        _canon(map(json.loads, d.stdout.splitlines())), q.stderr
    # A table that is not there, and a local store asked for an exporter: one error line each.
    p = sonde("query", "--history", f"clickhouse://{clickhouse}/sonde_hist?table=nope", "hosts")
    assert p.returncode != 0 and "cannot read sonde_hist.nope" in p.stderr, p.stderr
    p = sonde("query", "--data-dir", data, "hosts", "--exporter", "192.0.2.1")
    assert p.returncode != 0 and "--history" in p.stderr, p.stderr
    p = sonde("query", "--history", url, "series")
    assert p.returncode != 0 and "data-dir" in p.stderr, p.stderr


V2_COLUMNS = ["retransmitted_in_packets", "retransmitted_out_packets", "ooorder_in_packets",
              "ooorder_out_packets", "client_latency_us", "server_latency_us", "client_mac",
              "server_mac", "tunnel", "fragments", "l7_confidence"]
V3_COLUMNS = ["src_as", "dst_as", "src_country", "dst_country"]
GEO_DIR = REPO / "geoip" / "node_modules" / "@ip-location-db"


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_database_is_migrated(version, clickhouse, sonde, corpus, workdir):
    """Schema version 2 added the rest of the record's columns, version 3 the places of its
    ends: a database an older sonde made gets them, and then holds the same rows a new one
    would, with the countries and AS numbers --flows-out gives (tests/system/test_geoip.py
    checks those against mmdblookup)."""
    if not (GEO_DIR / "asn").is_dir():
        pytest.fail(f"{GEO_DIR} has no databases: run `make geoip`")
    db = f"sonde_v{version}"
    url = f"clickhouse://{clickhouse}/{db}"
    p = sonde("-r", corpus / "android.pcap", "--export", url, *ARGS)
    assert p.returncode == 0, p.stderr
    missing = (V2_COLUMNS if version == 1 else []) + V3_COLUMNS
    # Back to that version: its columns, its version, no rows.
    sql(clickhouse, f"DROP TABLE {db}.flows")
    sql(clickhouse, f"DROP TABLE {db}.sonde_schema")
    sql(clickhouse, f"CREATE TABLE {db}.sonde_schema (version UInt32, applied DateTime) "
                    f"ENGINE = TinyLog")
    sql(clickhouse, f"INSERT INTO {db}.sonde_schema VALUES ({version}, now())")
    schema = sonde("schema", "--clickhouse", db).stdout
    create = next(s for s in schema.split(";\n") if f"TABLE IF NOT EXISTS {db}.flows " in s)
    for c in missing:
        create = re.sub(rf", {c} [A-Za-z]+\d*(\(\d+\))?", "", create)
    assert "src_country" not in create and ("l7_confidence" in create) == (version == 2)
    sql(clickhouse, create)
    out = workdir / "f.jsonl"
    p = sonde("-r", corpus / "android.pcap", "--export", url, "--flows-out", out,
              "--geoip-dir", GEO_DIR, *ARGS)
    assert p.returncode == 0, p.stderr
    cols = {name for name, *_ in sql(clickhouse, f"DESCRIBE TABLE {db}.flows")}
    assert set(V2_COLUMNS + V3_COLUMNS) <= cols
    assert [v for [v] in sql(clickhouse, f"SELECT version FROM {db}.sonde_schema ORDER BY version")] \
        == [str(version), "3"]
    records = oracle.load_jsonl(str(out))
    geo_keys = {"SRC_AS", "DST_AS", "SRC_IP_COUNTRY", "DST_IP_COUNTRY"}
    got = sonde("query", "--history", url, "flows", "--limit", "1000", "--format", "jsonl")
    assert _canon(map(json.loads, got.stdout.splitlines())) == \
        _canon({k: v for k, v in r.items() if k not in geo_keys} for r in records), got.stderr

    # The places, row by row, as the flow records of the same run say.
    def key(src, sport, dst, dport, first_ms):
        return (str(ipaddress.ip_address(src)), int(sport), str(ipaddress.ip_address(dst)),
                int(dport), int(first_ms))
    rows = sql(clickhouse, f"SELECT IPv6NumToString(src_addr), src_port, IPv6NumToString(dst_addr), "
                           f"dst_port, first_ms, src_as, dst_as, src_country, dst_country "
                           f"FROM {db}.flows")
    stored = {key(*r[:5]): (int(r[5]), int(r[6]), r[7], r[8]) for r in rows}
    want = {}
    for r in records:
        src = r.get("IPV4_SRC_ADDR") or r.get("IPV6_SRC_ADDR")
        dst = r.get("IPV4_DST_ADDR") or r.get("IPV6_DST_ADDR")
        if "IPV4_SRC_ADDR" in r:
            src, dst = f"::ffff:{src}", f"::ffff:{dst}"
        want[key(src, r["L4_SRC_PORT"], dst, r["L4_DST_PORT"], r["FLOW_START_MILLISECONDS"])] = (
            r.get("SRC_AS", 0), r.get("DST_AS", 0), r.get("SRC_IP_COUNTRY", ""),
            r.get("DST_IP_COUNTRY", ""))
    assert stored == want
    placed = [w for w in want.values() if w[3]]
    assert len(placed) > len(want) // 3 and any(w[1] for w in want.values()), \
        "the capture's servers are placed"


def test_country_and_as_filters_select_on_the_stored_places(clickhouse, sonde_bin, sonde, corpus,
                                                            workdir):
    """country= and asn= on a ClickHouse history select on the places its rows were written
    with (the sink's --geoip-dir), so a reader needs no databases: the same flows and top lists
    as a --data-dir history filtered by lookups as it is read, and as `sonde query`."""
    if not (GEO_DIR / "asn").is_dir():
        pytest.fail(f"{GEO_DIR} has no databases: run `make geoip`")
    pcap = corpus / "android.pcap"
    data, out = workdir / "data", workdir / "flows.jsonl"
    url = f"clickhouse://{clickhouse}/sonde_places"
    p = sonde("-r", pcap, "--export", url, "--data-dir", data, "--flows-out", out,
              "--geoip-dir", GEO_DIR, *ARGS)
    assert p.returncode == 0, p.stderr
    records = oracle.load_jsonl(str(out))
    countries = collections.Counter(c for r in records
                                    for c in (r.get("SRC_IP_COUNTRY"), r.get("DST_IP_COUNTRY")) if c)
    asns = collections.Counter(a for r in records for a in (r.get("SRC_AS"), r.get("DST_AS")) if a)
    assert len(countries) >= 2 and len(asns) >= 2, (countries, asns)
    country, asn = countries.most_common(1)[0][0], asns.most_common(2)[1][0]
    geo_keys = {"SRC_AS", "DST_AS", "SRC_IP_COUNTRY", "DST_IP_COUNTRY"}

    def plain(flows):
        return _canon({k: v for k, v in f.items() if k not in geo_keys} for f in flows)

    local = Served(sonde_bin, corpus, "--data-dir", data, "--geoip-dir", GEO_DIR)
    central = Served(sonde_bin, corpus, "--history", url)
    try:
        for q in [f"country={country}", f"asn={asn}", f"country={country}&asn={asn}",
                  f"asn=AS{asn}&proto=tcp", "country=AQ"]:
            a, b = local.all_flows("&" + q), central.all_flows("&" + q)
            assert plain(a) == plain(b), q
            want = [r for r in records
                    if any((not q.startswith("country") or r.get(f"{e}_IP_COUNTRY") == country)
                           and ("asn" not in q or r.get(f"{e}_AS") == asn) for e in ("SRC", "DST"))
                    and ("proto=tcp" not in q or r["PROTOCOL"] == 6)]
            if q == "country=AQ":
                want = []
            assert plain(b) == plain(want), q
            if q != "country=AQ":
                assert b, f"{q} selects some flows of the capture"
        for q in [f"top/hosts?country={country}&limit=20", f"top/apps?asn={asn}&limit=100"]:
            a, b = local.get("/api/v1/history/" + q), central.get("/api/v1/history/" + q)
            assert a[0] == b[0] == 200, (q, a, b)
            assert a[1]["rows"] == b[1]["rows"] and a[1]["rows"], q
        assert central.get("/api/v1/history/flows?country=USA")[0] == 400
    finally:
        local.stop()
        central.stop()
    got = sonde("query", "--history", url, "flows", "--country", country, "--limit", "1000",
                "--format", "jsonl")
    assert got.returncode == 0, got.stderr
    assert plain(map(json.loads, got.stdout.splitlines())) == \
        plain(r for r in records if country in (r.get("SRC_IP_COUNTRY"), r.get("DST_IP_COUNTRY")))


def _clickhouse(tmp_path, name, cluster=None):
    env = dict(os.environ, CLICKHOUSE_PARENT_PID=str(os.getpid()))
    if cluster:
        env["CLICKHOUSE_CLUSTER"] = cluster
    out = subprocess.run([str(REPO / "scripts" / "clickhouse-server.sh"), str(tmp_path / name)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    m = re.search(r"HTTP=(\S+) PID=(\d+) TCP=(\S+)", out.stdout)
    assert m, out.stdout
    return m.group(1), int(m.group(2)), m.group(3)


def test_a_distributed_table_over_two_shards_answers_the_console(sonde_bin, sonde, corpus,
                                                                  tmp_path):
    """Two ClickHouse servers, each the store of one probe, and a Distributed table over both
    on the first: the console's history through it equals one probe reading both captures."""
    import shutil
    if not shutil.which("clickhouse-server"):
        pytest.fail("clickhouse-server is needed: run scripts/setup-test-deps.sh")
    pcaps = [corpus / "netflix.pcap", corpus / "android.pcap"]
    second, pid2, tcp2 = _clickhouse(tmp_path, "shard2")
    first, pid1, _ = _clickhouse(tmp_path, "shard1", f"self,{tcp2}")
    try:
        for pcap, server in zip(pcaps, [first, second]):
            p = sonde("-r", pcap, "--export", f"clickhouse://{server}/dist", *ARGS)
            assert p.returncode == 0, p.stderr
        sql(first, "CREATE TABLE dist.flows_all AS dist.flows "
                   "ENGINE = Distributed(sonde_test, dist, flows)")
        merged, data, one = tmp_path / "both.pcap", tmp_path / "data", tmp_path / "one.jsonl"
        subprocess.run(["mergecap", "-F", "pcap", "-w", str(merged), *map(str, pcaps)],
                       check=True)
        p = sonde("-r", merged, "--data-dir", data, "--flows-out", one, *ARGS)
        assert p.returncode == 0, p.stderr
        want = oracle.load_jsonl(str(one))
        local = Served(sonde_bin, corpus, "--data-dir", data)
        central = Served(sonde_bin, corpus, "--history",
                         f"clickhouse://{first}/dist?table=flows_all")
        try:
            flows = central.all_flows()
            assert len(flows) == len(want)
            key = lambda r: (r.get("IPV4_SRC_ADDR") or r.get("IPV6_SRC_ADDR"), r["L4_SRC_PORT"],
                             r.get("IPV4_DST_ADDR") or r.get("IPV6_DST_ADDR"), r["L4_DST_PORT"],
                             r["PROTOCOL"], r["IN_BYTES"], r["OUT_BYTES"])
            assert collections.Counter(map(key, flows)) == collections.Counter(map(key, want))
            for q in ["top/hosts?limit=10", "top/apps?limit=10", "top/hosts?port=443&limit=5"]:
                a, b = local.get("/api/v1/history/" + q), central.get("/api/v1/history/" + q)
                assert a[0] == b[0] == 200 and a[1]["rows"] == b[1]["rows"], q
        finally:
            local.stop()
            central.stop()
    finally:
        for pid in (pid1, pid2):
            os.kill(pid, 15)
