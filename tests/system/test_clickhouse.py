"""ClickHouse (issue 16): `--export clickhouse://HOST:PORT/DB` against Debian's ClickHouse
18.16 started on 127.0.0.1 (scripts/clickhouse-server.sh), and sonde's schema on a current
ClickHouse (chdb-core, the server in-process).

* The flows table holds exactly the records `--flows-out` wrote (count, addresses, bytes), and
  the rollups the materialized views keep add up to the same traffic per host (both ends), per
  application and per server port, per minute and per hour.
* A second run into the same database migrates nothing and appends; the schema version is
  recorded once. With `retention_days`, a server without TTL loses its old day partitions.
* `sonde schema --clickhouse DB` runs unchanged on current ClickHouse, whose views fill too.
* ClickHouse reading sonde's Kafka topic itself (a Kafka engine table and a view) gets the
  same rows as sonde inserting them.
* A server that does not answer is one error at start.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import os
import re
import signal
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import oracle

REPO = Path(__file__).resolve().parents[2]
PCAP = "1kxun.pcap"
ARGS = ["--idle-timeout", "1000000000", "--active-timeout", "0", "-q"]


def query(http: str, q: str) -> list[list[str]]:
    req = urllib.request.Request(f"http://{http}/", data=q.encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        return [line.split("\t") for line in r.read().decode().splitlines()]


def _mapped(ip: str) -> str:
    """How ClickHouse's IPv6NumToString shows an address sonde stored."""
    a = ipaddress.ip_address(ip)
    return f"::ffff:{a}" if a.version == 4 else str(a)


def _export(sonde, corpus, workdir, url, name):
    flows, stats = workdir / f"{name}.jsonl", workdir / f"{name}-stats.json"
    p = sonde("-r", corpus / PCAP, "--export", url, "--flows-out", flows, "--stats-json", stats,
              *ARGS)
    assert p.returncode == 0, p.stderr
    sink = next(s for s in json.loads(stats.read_text())["sinks"]
                if s["name"].startswith("clickhouse"))
    records = oracle.load_jsonl(str(flows))
    assert sink["records"] == len(records) and sink["dropped"] == 0, sink
    return records


def _addr(r, side):
    return r.get(f"IPV4_{side}_ADDR") or r.get(f"IPV6_{side}_ADDR")


def test_flows_and_rollups_equal_the_flows_file(clickhouse, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    db = "sonde_t1"
    records = _export(sonde, corpus, workdir, f"clickhouse://{clickhouse}/{db}", "t1")
    [[count, total]] = query(clickhouse, f"SELECT count(), sum(in_bytes + out_bytes) FROM {db}.flows")
    assert int(count) == len(records)
    assert int(total) == sum(r["IN_BYTES"] + r["OUT_BYTES"] for r in records)
    # Row by row: client, server, ports, bytes each way.
    rows = query(clickhouse, f"SELECT IPv6NumToString(src_addr), src_port, "
                             f"IPv6NumToString(dst_addr), dst_port, in_bytes, out_bytes "
                             f"FROM {db}.flows")
    want = collections.Counter(
        (_mapped(_addr(r, "SRC")), str(r["L4_SRC_PORT"]), _mapped(_addr(r, "DST")),
         str(r["L4_DST_PORT"]), str(r["IN_BYTES"]), str(r["OUT_BYTES"])) for r in records)
    assert collections.Counter(map(tuple, rows)) == want
    # Hosts, both ends, per minute and per hour.
    sent, rcvd = collections.Counter(), collections.Counter()
    for r in records:
        s, d = _mapped(_addr(r, "SRC")), _mapped(_addr(r, "DST"))
        sent[s] += r["IN_BYTES"]
        rcvd[s] += r["OUT_BYTES"]
        sent[d] += r["OUT_BYTES"]
        rcvd[d] += r["IN_BYTES"]
    for grain in ("1m", "1h"):
        got = query(clickhouse, f"SELECT IPv6NumToString(host), sum(sent_bytes), "
                                f"sum(rcvd_bytes) FROM {db}.flows_{grain}_hosts GROUP BY host")
        assert {h: (int(a), int(b)) for h, a, b in got} == \
            {h: (sent[h], rcvd[h]) for h in sent | rcvd}, grain
        apps = query(clickhouse, f"SELECT application, sum(bytes), sum(flows) FROM "
                                 f"{db}.flows_{grain}_apps GROUP BY application")
        by_app = collections.Counter()
        flows_by_app = collections.Counter()
        for r in records:
            by_app[r.get("L7_PROTO_NAME", "")] += r["IN_BYTES"] + r["OUT_BYTES"]
            flows_by_app[r.get("L7_PROTO_NAME", "")] += 1
        assert {a: (int(b), int(f)) for a, b, f in apps} == \
            {a: (by_app[a], flows_by_app[a]) for a in by_app}, grain
        ports = query(clickhouse, f"SELECT sum(bytes) FROM {db}.flows_{grain}_ports")
        assert int(ports[0][0]) == int(total)
    # Each record's metadata keys (those `sonde schema` files under "meta") are its arrays'.
    schema = json.loads(sonde("schema", "--json").stdout)
    meta_keys = {f["key"] for f in schema if f["stored"] == "meta"}
    got = query(clickhouse, f"SELECT arrayStringConcat(arraySort(meta_keys), ',') FROM {db}.flows")
    want = collections.Counter(",".join(sorted(k for k in r if k in meta_keys)) for r in records)
    assert collections.Counter(row[0] if row else "" for row in got) == want
    assert sum(n for k, n in want.items() if k) > 100, "the capture's flows carry metadata"


def test_a_second_run_appends_without_migrating_again(clickhouse, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    url = f"clickhouse://{clickhouse}/sonde_t2"
    first = _export(sonde, corpus, workdir, url, "a")
    second = _export(sonde, corpus, workdir, url, "b")
    [[count]] = query(clickhouse, "SELECT count() FROM sonde_t2.flows")
    assert int(count) == len(first) + len(second)
    assert query(clickhouse, "SELECT version FROM sonde_t2.sonde_schema") == [["3"]]


def test_retention_drops_old_days_on_a_server_without_ttl(clickhouse, sonde, corpus, workdir):
    """18.16 has no TTL: with retention_days, sonde drops the day partitions older than that
    at start (and every hour). The capture is from 2016 and 2022, so a second run's start
    drops all the first run wrote."""
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    url = f"clickhouse://{clickhouse}/sonde_t3?retention_days=30"
    _export(sonde, corpus, workdir, url, "r1")
    second = _export(sonde, corpus, workdir, url, "r2")
    [[count]] = query(clickhouse, "SELECT count() FROM sonde_t3.flows")
    assert int(count) == len(second)


def test_clickhouse_reading_the_kafka_topic_gets_the_same_rows(clickhouse, kafka, sonde, corpus,
                                                               workdir):
    """Both ways in: sonde exports a capture to ClickHouse directly, and to Kafka, where the
    Kafka engine table and view of `sonde schema --clickhouse DB --kafka BROKERS/TOPIC` make
    ClickHouse read the topic into another database. The two `flows` tables hold the same rows
    (numeric metadata equal to 0 aside: JSON does not tell them from absent ones)."""
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    # The topic first (a run whose filter keeps nothing: the sink creates it, sends nothing):
    # ClickHouse 18.16 does not see a topic created after its table.
    p = sonde("-r", corpus / PCAP, "-f", "host 203.0.113.1", "--export",
              f"kafka://{kafka}/for-clickhouse", "-q")
    assert p.returncode == 0, p.stderr
    p = sonde("schema", "--clickhouse", "viak", "--kafka", f"{kafka}/for-clickhouse")
    assert p.returncode == 0, p.stderr
    for st in [x.strip() for x in p.stdout.split(";\n") if x.strip()]:
        query(clickhouse, st)
    records = _export(sonde, corpus, workdir, f"clickhouse://{clickhouse}/direct", "both")
    # The same run, to Kafka (a second run: _export takes one sink; the records are the same).
    flows = workdir / "to-kafka.jsonl"
    p = sonde("-r", corpus / PCAP, "--export", f"kafka://{kafka}/for-clickhouse",
              "--flows-out", flows, *ARGS)
    assert p.returncode == 0, p.stderr
    assert len(oracle.load_jsonl(str(flows))) == len(records)
    cols = ("date, time_start, time_end, first_ms, last_ms, ip_version, "
            "IPv6NumToString(src_addr), IPv6NumToString(dst_addr), "
            "src_port, dst_port, protocol, vlan, in_packets, in_bytes, out_packets, out_bytes, "
            "client_tcp_flags, server_tcp_flags, tos, icmp_type, end_reason, l7_proto, "
            "l7_proto_name, l7_category, IPv6NumToString(exporter), in_if, out_if, sampling, "
            "arrayFilter((v, k) -> v != '0', meta_values, meta_keys), "
            "arrayFilter(v -> v != '0', meta_values)")
    deadline = time.time() + 60
    while time.time() < deadline:
        [[n]] = query(clickhouse, "SELECT count() FROM viak.flows")
        if int(n) >= len(records):
            break
        time.sleep(0.5)
    direct = collections.Counter(map(tuple, query(clickhouse, f"SELECT {cols} FROM direct.flows")))
    via = collections.Counter(map(tuple, query(clickhouse, f"SELECT {cols} FROM viak.flows")))
    assert sum(via.values()) == len(records), "ClickHouse read every message"
    assert via == direct
    # 18.16 runs no view for rows another view inserted: its rollups fill from direct inserts
    # only (current servers fill them both ways: test_the_schema_runs_on_current_clickhouse).
    [[b]] = query(clickhouse, "SELECT sum(sent_bytes) FROM direct.flows_1h_hosts")
    assert int(b) == sum(r["IN_BYTES"] + r["OUT_BYTES"] for r in records)


def test_the_schema_runs_on_current_clickhouse(sonde, tmp_path):
    chdb = pytest.importorskip("chdb", reason="pip install chdb-core (scripts/setup-test-deps.sh)")
    from chdb import session
    p = sonde("schema", "--clickhouse", "modern")
    assert p.returncode == 0, p.stderr
    statements = [s.strip() for s in p.stdout.split(";\n") if s.strip()]
    sess = session.Session(str(tmp_path / "chdb"))
    for st in statements:
        sess.query(st)
    sess.query("INSERT INTO modern.flows (date, time_start, src_addr, dst_addr, in_bytes, "
               "out_bytes, in_packets, out_packets, l7_proto_name, dst_port, protocol) VALUES "
               "('2026-11-24', '2026-11-24 10:00:01', toFixedString(unhex("
               "'00000000000000000000ffff0a000001'), 16), toFixedString(unhex("
               "'00000000000000000000ffff0a000002'), 16), 100, 200, 1, 2, 'TLS', 443, 6)")
    hosts = str(sess.query("SELECT IPv6NumToString(host), sum(sent_bytes), sum(rcvd_bytes) "
                           "FROM modern.flows_1h_hosts GROUP BY host ORDER BY host", "CSV"))
    assert hosts.split() == ['"::ffff:10.0.0.1",100,200', '"::ffff:10.0.0.2",200,100'], hosts
    apps = str(sess.query("SELECT application, sum(bytes) FROM modern.flows_1m_apps "
                          "GROUP BY application", "CSV"))
    assert apps.split() == ['"TLS",300'], apps


def test_the_kafka_view_runs_on_current_clickhouse(sonde, corpus, tmp_path):
    """The Kafka path's table and view on current ClickHouse: the table made a Null table (no
    broker in process), sonde's JSON records inserted into it as the Kafka engine would pass
    them; `flows` gets every record, and the rollups fill through it (current servers run the
    views of rows a view inserted)."""
    pytest.importorskip("chdb", reason="pip install chdb-core (scripts/setup-test-deps.sh)")
    from chdb import session
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    flows = tmp_path / "flows.jsonl"
    p = sonde("-r", corpus / PCAP, "--flows-out", flows, *ARGS)
    assert p.returncode == 0, p.stderr
    records = oracle.load_jsonl(str(flows))
    p = sonde("schema", "--clickhouse", "viak", "--kafka", "127.0.0.1:9/none")
    assert p.returncode == 0, p.stderr
    sess = session.Session(str(tmp_path / "chdb"))
    for st in [x.strip() for x in p.stdout.split(";\n") if x.strip()]:
        sess.query(re.sub(r"ENGINE = Kafka\([^)]*\)", "ENGINE = Null", st))
    sess.query("INSERT INTO viak.flows_kafka FORMAT JSONEachRow " + flows.read_text())
    [[n, total]] = [line.split(",") for line in str(sess.query(
        "SELECT count(), sum(in_bytes + out_bytes) FROM viak.flows", "CSV")).split()]
    assert int(n) == len(records)
    assert int(total) == sum(r["IN_BYTES"] + r["OUT_BYTES"] for r in records)
    hosts = str(sess.query("SELECT sum(sent_bytes) FROM viak.flows_1m_hosts", "CSV")).strip()
    assert int(hosts) == int(total)


def test_a_dead_server_is_one_error_at_start(sonde, corpus):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = sonde("-r", corpus / PCAP, "--export", f"clickhouse://127.0.0.1:{port}/x", "-q")
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no answer from ClickHouse" in lines[0], p.stderr


def test_a_server_outage_loses_nothing(sonde_bin, corpus, tmp_path):
    """ClickHouse is killed (SIGKILL) in the middle of a run and started again 5 s later: a
    collecting sonde inserting into it keeps running; the rows of the outage stay buffered and
    are inserted after the restart. At the end the table holds every record --flows-out
    wrote, and the report says none dropped. While the server is away, /api/v1/sinks (the
    console's Interface page) and /metrics show the rows pending; after, none."""
    import socket
    from conftest import free_port
    cdir = tmp_path / "server"
    start = [str(REPO / "scripts" / "clickhouse-server.sh"), str(cdir)]
    out = subprocess.run(start, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    http, pid = re.search(r"HTTP=(\S+) PID=(\d+)", out.stdout).groups()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    flows, stats = tmp_path / "flows.jsonl", tmp_path / "stats.json"
    web = free_port()
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--export",
         f"clickhouse://{http}/outage", "--flows-out", str(flows), "--stats-json", str(stats),
         "--idle-timeout", "1", "--active-timeout", "1", "--http", f"127.0.0.1:{web}",
         "--no-auth", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def sink():
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/sinks", timeout=10) as r:
            return next(s for s in json.loads(r.read())["sinks"]
                        if s["name"].startswith("clickhouse"))

    def pending_metric():
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10) as r:
            m = re.search(r'sonde_sink_pending_records\{sink="clickhouse[^"]*"\} (\d+)',
                          r.read().decode())
        assert m, "the pending gauge is exported"
        return int(m.group(1))

    try:
        time.sleep(1)

        def send(pcap):
            p = subprocess.run([str(sonde_bin), "-r", str(corpus / pcap), "--export",
                                f"netflow9://127.0.0.1:{port}", "-q"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr

        send("http_ipv6.pcap")
        time.sleep(3)
        os.kill(int(pid), signal.SIGKILL)
        send(PCAP)
        time.sleep(5)
        away = sink()
        assert away["pending"] > 100 and not away["failed"], away
        assert pending_metric() == away["pending"] or pending_metric() > 0
        out = subprocess.run(start, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        pid = re.search(r"PID=(\d+)", out.stdout).group(1)
        time.sleep(3)
        deadline = time.time() + 40
        while sink()["pending"] > 0:
            assert time.time() < deadline, sink()
            time.sleep(1)
        back = sink()
        assert back["written"] >= away["pending"] and back["dropped"] == 0, back
    finally:
        upper.send_signal(signal.SIGINT)
        _, err = upper.communicate(timeout=120)
    try:
        assert upper.returncode == 0, err
        written = oracle.load_jsonl(str(flows))
        sink = next(x for x in json.loads(stats.read_text())["sinks"]
                    if x["name"].startswith("clickhouse"))
        assert sink["records"] == len(written) and sink["dropped"] == 0, sink
        [[count]] = query(http, "SELECT count() FROM outage.flows")
        assert int(count) == len(written) > 100
    finally:
        os.kill(int(pid), signal.SIGTERM)


def test_two_probes_through_kafka_give_one_probes_top_hosts(clickhouse, kafka, sonde_bin, sonde,
                                                            corpus, tmp_path):
    """The deployment of issue 16: two probes, each reading its own capture, export to one
    Kafka topic; a central sonde collects the topic and stores the flows in ClickHouse. The
    top hosts there (the hourly rollup, bytes sent + received) equal those of one probe reading
    both captures merged into one file."""
    pcaps = [corpus / "netflix.pcap", corpus / "android.pcap"]
    if not all(p.exists() for p in pcaps):
        pytest.skip("netflix.pcap or android.pcap not in the corpus")
    topic = f"kafka://{kafka}/two-probes"
    # The topic first, so the central consumer's group starts at its beginning.
    p = sonde("-r", pcaps[0], "-f", "host 203.0.113.1", "--export", topic, "-q")
    assert p.returncode == 0, p.stderr
    stats = tmp_path / "central.json"
    central = subprocess.Popen(
        [str(sonde_bin), "--collect", f"{topic}?group=central", "--export",
         f"clickhouse://{clickhouse}/central", "--stats-json", str(stats), *ARGS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    sent = 0
    per_probe = {}
    try:
        for i, pcap in enumerate(pcaps):
            out = tmp_path / f"{pcap.stem}.jsonl"
            # Each probe names itself (probe=ADDR): its flows carry it as their exporter.
            p = sonde("-r", pcap, "--export", f"{topic}?probe=10.0.0.{i + 1}", "--flows-out", out,
                      *ARGS)
            assert p.returncode == 0, p.stderr
            per_probe[f"10.0.0.{i + 1}"] = oracle.load_jsonl(str(out))
            sent += len(per_probe[f"10.0.0.{i + 1}"])
        # The central sonde holds its flows until it stops (no idle timeout here) and writes
        # its counters then: give its consumer time to read the topic, then stop it; the
        # records it collected are checked against what was sent.
        time.sleep(8)
    finally:
        central.send_signal(signal.SIGINT)
        _, err = central.communicate(timeout=120)
    assert central.returncode == 0, err
    s = json.loads(stats.read_text())
    assert s["collected"]["records"] == sent, s["collected"]
    merged = tmp_path / "both.pcap"
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(merged), *map(str, pcaps)], check=True)
    one = tmp_path / "one.jsonl"
    p = sonde("-r", merged, "--flows-out", one, *ARGS)
    assert p.returncode == 0, p.stderr
    total = collections.Counter()
    for r in oracle.load_jsonl(str(one)):
        total[_mapped(_addr(r, "SRC"))] += r["IN_BYTES"] + r["OUT_BYTES"]
        total[_mapped(_addr(r, "DST"))] += r["IN_BYTES"] + r["OUT_BYTES"]
    want = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    rows = query(clickhouse, "SELECT IPv6NumToString(host) AS h, sum(sent_bytes + rcvd_bytes) AS b "
                             "FROM central.flows_1h_hosts GROUP BY host ORDER BY b DESC, h LIMIT 10")
    assert [(h, int(b)) for h, b in rows] == want
    # The probes told apart: each one's flows, and its top hosts through --history.
    rows = query(clickhouse, "SELECT IPv6NumToString(exporter), count() FROM central.flows "
                             "GROUP BY exporter")
    assert {e: int(n) for e, n in rows} == {f"::ffff:{a}": len(r) for a, r in per_probe.items()}
    for probe, records in per_probe.items():
        per_host = collections.Counter()
        for r in records:
            for side in ("SRC", "DST"):
                per_host[_addr(r, side)] += r["IN_BYTES"] + r["OUT_BYTES"]
        p = sonde("query", "--history", f"clickhouse://{clickhouse}/central", "hosts",
                  "--exporter", probe, "--limit", "5", "--format", "jsonl")
        assert p.returncode == 0, p.stderr
        got = [(h["HOST"], h["BYTES"]) for h in map(json.loads, p.stdout.splitlines())]
        assert got == sorted(per_host.items(), key=lambda kv: (-kv[1], kv[0]))[:5], probe


def test_a_killed_central_commits_only_what_clickhouse_stored(kafka, sonde_bin, sonde, corpus,
                                                              tmp_path):
    """A central sonde reads a Kafka topic into ClickHouse while ClickHouse is down: it buffers
    and commits no offset (nothing is stored). Killed with SIGKILL, then started again with
    ClickHouse back, it reads every record again and stores each once. A consumer that reads
    the topic again (another group) stores byte-identical rows, which `OPTIMIZE … FINAL
    DEDUPLICATE` removes."""
    from test_kafka import _committed
    topic, group = "central-kill", "ck"
    out = tmp_path / "sent.jsonl"
    start = [str(REPO / "scripts" / "clickhouse-server.sh"), str(tmp_path / "server")]
    up = subprocess.run(start, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    http, pid = re.search(r"HTTP=(\S+) PID=(\d+)", up.stdout).groups()
    url = f"kafka://{kafka}/{topic}?group={group}"
    export = f"clickhouse://{http}/ck"
    try:
        # The topic exists before the consumer joins (its group starts at the beginning).
        p = sonde("-r", corpus / "http_ipv6.pcap", "-f", "host 203.0.113.1", "--export",
                  f"kafka://{kafka}/{topic}", "-q")
        assert p.returncode == 0, p.stderr
        central = subprocess.Popen([str(sonde_bin), "--collect", url, "--export", export, *ARGS],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL)
        time.sleep(3)
        os.kill(int(pid), signal.SIGKILL)
        p = sonde("-r", corpus / PCAP, "--export", f"kafka://{kafka}/{topic}", "--flows-out",
                  out, *ARGS)
        assert p.returncode == 0, p.stderr
        sent = oracle.load_jsonl(str(out))
        time.sleep(6)
        assert central.poll() is None, central.stderr.read()
        assert _committed(kafka, group, topic) == 0, "nothing stored, nothing committed"
        central.kill()
        central.wait()
        up = subprocess.run(start, capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        pid = re.search(r"PID=(\d+)", up.stdout).group(1)
        # The killed member's partitions come back to the group after its session timeout.
        stats = tmp_path / "again.json"
        p = sonde("--collect", url, "--export", export, "--duration", "20", "--stats-json",
                  stats, *ARGS, timeout=120)
        assert p.returncode == 0, p.stderr
        assert json.loads(stats.read_text())["collected"]["records"] == len(sent)
        [[count]] = query(http, "SELECT count() FROM ck.flows")
        assert int(count) == len(sent) > 100
        assert _committed(kafka, group, topic) == len(sent)
        # Read once more by another group: every row twice, then once after DEDUPLICATE.
        p = sonde("--collect", f"kafka://{kafka}/{topic}?group=ck2", "--export", export,
                  "--duration", "15", *ARGS, timeout=120)
        assert p.returncode == 0, p.stderr
        [[count]] = query(http, "SELECT count() FROM ck.flows")
        assert int(count) == 2 * len(sent)
        query(http, "OPTIMIZE TABLE ck.flows FINAL DEDUPLICATE")
        [[count]] = query(http, "SELECT count() FROM ck.flows")
        assert int(count) == len(sent)
    finally:
        os.kill(int(pid), signal.SIGTERM)
