"""Cassandra (issue 16): `--export cassandra://HOST:PORT/KEYSPACE` against Apache Cassandra 5.0
started on 127.0.0.1 (scripts/cassandra-server.sh), read back with the Python driver.

* The flows table holds, field for field, the records `--flows-out` wrote for the same run
  (addresses and ports as client/server, counters each way, times, flags, DPI labels, end
  reason, metadata as a map), in time-bucketed partitions of the requested width.
* The per-minute statistics (counter tables) equal the flows' traffic per host (both ends),
  per application and per server port, minute by minute.
* A second run into the same keyspace appends; the schema version is recorded once. A keyspace
  of schema version 1 gets the places of both ends (version 2), filled with --geoip-dir.
  `sonde schema --cassandra KEYSPACE` prints the tables the sink creates; `?stats=off` writes
  flows only.
* Cassandra killed mid-run and started again: the probe keeps running, what it could not write
  is buffered and written after the restart; with a small buffer the rows past it are dropped
  and counted: delivered + dropped = every record, the table holds exactly the delivered ones.
* Bad URLs and options, and a server that does not answer, are one error at start.
"""

from __future__ import annotations

import calendar
import collections
import json
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import oracle

REPO = Path(__file__).resolve().parents[2]
PCAP = "1kxun.pcap"
ARGS = ["--idle-timeout", "1000000000", "--active-timeout", "0", "-q"]


def _session(cql: str):
    cluster_mod = pytest.importorskip(
        "cassandra.cluster", reason="pip install cassandra-driver (scripts/setup-test-deps.sh)")
    host, port = cql.rsplit(":", 1)
    cluster = cluster_mod.Cluster([host], port=int(port), protocol_version=5)
    return cluster, cluster.connect()


def _rows(cql: str, query: str) -> list:
    cluster, s = _session(cql)
    try:
        return list(s.execute(query))
    finally:
        cluster.shutdown()


def _ms(dt) -> int:
    """A CQL timestamp (a naive UTC datetime in the driver) in milliseconds."""
    return calendar.timegm(dt.timetuple()) * 1000 + dt.microsecond // 1000


def _addr(r, side):
    return r.get(f"IPV4_{side}_ADDR") or r.get(f"IPV6_{side}_ADDR")


def _export(sonde, corpus, workdir, url, name, *extra):
    flows, stats = workdir / f"{name}.jsonl", workdir / f"{name}-stats.json"
    p = sonde("-r", corpus / PCAP, "--export", url, "--flows-out", flows, "--stats-json", stats,
              *ARGS, *extra)
    assert p.returncode == 0, p.stderr
    sink = next(s for s in json.loads(stats.read_text())["sinks"]
                if s["name"].startswith("cassandra"))
    records = oracle.load_jsonl(str(flows))
    assert sink["records"] == len(records) and sink["dropped"] == 0, sink
    return records


def _meta_keys(sonde) -> set:
    schema = json.loads(sonde("schema", "--json").stdout)
    return {f["key"] for f in schema if f["stored"] == "meta"}


def _text(v) -> str:
    """How the sink writes a metadata value: numbers in decimal, text as is."""
    if isinstance(v, bool):
        return str(int(v))
    return str(v)


def test_rows_equal_the_flows_file_field_for_field(cassandra, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    records = _export(sonde, corpus, workdir,
                      f"cassandra://{cassandra}/sonde_t1?bucket=600&shards=3", "t1")
    assert len(records) > 100
    meta_keys = _meta_keys(sonde)
    want = collections.Counter()
    for r in records:
        want[(
            r["FLOW_START_MILLISECONDS"], r["FLOW_END_MILLISECONDS"], r["IP_PROTOCOL_VERSION"],
            _addr(r, "SRC"), _addr(r, "DST"), r["L4_SRC_PORT"], r["L4_DST_PORT"],
            r["PROTOCOL"], r["VLAN_ID"], r["IN_PKTS"], r["IN_BYTES"], r["OUT_PKTS"],
            r["OUT_BYTES"], r["CLIENT_TCP_FLAGS"], r["SERVER_TCP_FLAGS"], r["SRC_TOS"],
            r["ICMP_TYPE"], r["FLOW_END_REASON"], r.get("L7_PROTO", ""),
            r.get("L7_PROTO_NAME", ""), r.get("L7_CATEGORY", ""),
            r.get("EXPORTER_IPV4_ADDRESS") or r.get("EXPORTER_IPV6_ADDRESS"),
            r.get("INPUT_SNMP", 0), r.get("OUTPUT_SNMP", 0), r.get("SAMPLING_INTERVAL", 0),
            tuple(sorted((k, _text(v)) for k, v in r.items() if k in meta_keys)),
        )] += 1
    rows = _rows(cassandra, "SELECT * FROM sonde_t1.flows")
    got = collections.Counter()
    for row in rows:
        # The partition: the start time's 10-minute bucket, one of 3 shards.
        start = _ms(row.time_start)
        assert _ms(row.bucket) == start - start % 600_000
        assert 0 <= row.shard < 3
        got[(
            start, _ms(row.time_end), row.ip_version, row.src_addr, row.dst_addr,
            row.src_port, row.dst_port, row.protocol, row.vlan, row.in_packets, row.in_bytes,
            row.out_packets, row.out_bytes, row.client_tcp_flags, row.server_tcp_flags,
            row.tos, row.icmp_type, row.end_reason, row.l7_proto, row.l7_proto_name,
            row.l7_category, row.exporter, row.in_if, row.out_if, row.sampling,
            tuple(sorted((row.meta or {}).items())),
        )] += 1
    assert sum(got.values()) == len(records)
    missing, extra = want - got, got - want
    assert not missing and not extra, (list(missing.items())[:3], list(extra.items())[:3])
    assert sum(1 for k in want if k[-1]) > 100, "the capture's flows carry metadata"
    # Every id is unique (two records of one millisecond are two rows).
    assert len({row.id for row in rows}) == len(rows)


def test_per_minute_statistics_sum_to_the_flows(cassandra, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    records = _export(sonde, corpus, workdir, f"cassandra://{cassandra}/sonde_t2", "t2")
    hosts, apps, ports = (collections.Counter() for _ in range(3))
    for r in records:
        minute = r["FLOW_START_MILLISECONDS"] // 60_000 * 60_000
        c, s = _addr(r, "SRC"), _addr(r, "DST")
        for k, v in (("sent_bytes", r["IN_BYTES"]), ("rcvd_bytes", r["OUT_BYTES"]),
                     ("sent_packets", r["IN_PKTS"]), ("rcvd_packets", r["OUT_PKTS"]),
                     ("flows", 1)):
            hosts[(c, minute, k)] += v
        for k, v in (("sent_bytes", r["OUT_BYTES"]), ("rcvd_bytes", r["IN_BYTES"]),
                     ("sent_packets", r["OUT_PKTS"]), ("rcvd_packets", r["IN_PKTS"]),
                     ("flows", 1)):
            hosts[(s, minute, k)] += v
        for table, key in ((apps, (r.get("L7_PROTO_NAME", ""),)),
                           (ports, (r["L4_DST_PORT"], r["PROTOCOL"]))):
            table[(*key, minute, "bytes")] += r["IN_BYTES"] + r["OUT_BYTES"]
            table[(*key, minute, "packets")] += r["IN_PKTS"] + r["OUT_PKTS"]
            table[(*key, minute, "flows")] += 1
    assert len({k[1] for k in hosts}) > 1, "the capture spans several minutes"

    def read(table, keys, counters):
        out = collections.Counter()
        for row in _rows(cassandra, f"SELECT * FROM sonde_t2.{table}"):
            minute = _ms(row.minute)
            assert row.day.days_from_epoch == minute // 86_400_000, row
            for c in counters:
                out[(*(getattr(row, k) for k in keys), minute, c)] += getattr(row, c) or 0
        return +out

    assert read("stats_1m_hosts", ["host"], ["sent_bytes", "rcvd_bytes", "sent_packets",
                                             "rcvd_packets", "flows"]) == +hosts
    assert read("stats_1m_apps", ["application"], ["bytes", "packets", "flows"]) == +apps
    assert read("stats_1m_ports", ["port", "protocol"], ["bytes", "packets", "flows"]) == +ports
    # A capture has no exporter: nothing per exporter or interface.
    assert _rows(cassandra, "SELECT * FROM sonde_t2.stats_1m_exporters") == []


def test_a_second_run_appends_and_records_the_schema_once(cassandra, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    url = f"cassandra://{cassandra}/sonde_t3"
    first = _export(sonde, corpus, workdir, url, "a")
    second = _export(sonde, corpus, workdir, url, "b")
    [[count]] = _rows(cassandra, "SELECT count(*) FROM sonde_t3.flows")
    assert count == len(first) + len(second)
    assert [r.version for r in _rows(cassandra, "SELECT version FROM sonde_t3.sonde_schema")] \
        == [2]
    # Counters add up over both runs.
    [[flows]] = _rows(cassandra, "SELECT sum(flows) FROM sonde_t3.stats_1m_apps")
    assert flows == len(first) + len(second)


def test_a_version_1_keyspace_gets_the_places_of_both_ends(cassandra, sonde, corpus, workdir):
    """Schema version 2 added src_as, dst_as, src_country and dst_country: a keyspace a
    version 1 sonde made gets them, and with --geoip-dir its rows hold what --flows-out says
    (tests/system/test_geoip.py checks those against mmdblookup)."""
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    geo_dir = REPO / "geoip" / "node_modules" / "@ip-location-db"
    if not (geo_dir / "asn").is_dir():
        pytest.fail(f"{geo_dir} has no databases: run `make geoip`")
    url = f"cassandra://{cassandra}/sonde_t9"
    _export(sonde, corpus, workdir, url, "t9a")
    places = ["src_as", "dst_as", "src_country", "dst_country"]
    # Back to version 1: its columns, its version, no rows.
    cluster, s = _session(cassandra)
    try:
        for c in places:
            s.execute(f"ALTER TABLE sonde_t9.flows DROP {c}")
        s.execute("TRUNCATE sonde_t9.flows")
        s.execute("DELETE FROM sonde_t9.sonde_schema WHERE version = 2")
        s.execute("INSERT INTO sonde_t9.sonde_schema (version, applied) VALUES "
                  "(1, toTimestamp(now()))")
    finally:
        cluster.shutdown()
    records = _export(sonde, corpus, workdir, url, "t9b", "--geoip-dir", geo_dir)
    assert sorted(r.version for r in _rows(cassandra, "SELECT version FROM sonde_t9.sonde_schema")) \
        == [1, 2]
    want = collections.Counter(
        (r["FLOW_START_MILLISECONDS"], _addr(r, "SRC"), r["L4_SRC_PORT"], _addr(r, "DST"),
         r["L4_DST_PORT"], r.get("SRC_AS", 0), r.get("DST_AS", 0), r.get("SRC_IP_COUNTRY", ""),
         r.get("DST_IP_COUNTRY", "")) for r in records)
    got = collections.Counter(
        (_ms(row.time_start), row.src_addr, row.src_port, row.dst_addr, row.dst_port, row.src_as,
         row.dst_as, row.src_country, row.dst_country)
        for row in _rows(cassandra, "SELECT * FROM sonde_t9.flows"))
    assert got == want, (list((want - got).items())[:3], list((got - want).items())[:3])
    assert any(k[8] and k[6] for k in want), "the capture's servers are placed"


def test_sonde_schema_prints_what_the_sink_creates(cassandra, sonde, corpus, workdir):
    """`sonde schema --cassandra KEYSPACE` applied by hand gives the tables and columns the sink
    creates in a keyspace of its own (sonde_t4); a sink then
    writes into it."""
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    _export(sonde, corpus, workdir, f"cassandra://{cassandra}/sonde_t4", "t4")
    p = sonde("schema", "--cassandra", "byhand")
    assert p.returncode == 0, p.stderr
    statements = [x.strip() for x in p.stdout.split(";\n") if x.strip()]
    cluster, s = _session(cassandra)
    try:
        for st in statements:
            s.execute(st)
    finally:
        cluster.shutdown()

    def columns(ks):
        return sorted((r.table_name, r.column_name, r.kind, r.type) for r in _rows(
            cassandra, f"SELECT table_name, column_name, kind, type FROM system_schema.columns "
                       f"WHERE keyspace_name = '{ks}'"))
    assert columns("byhand") == columns("sonde_t4")
    assert len({c[0] for c in columns("byhand")}) == 7  # sonde_schema, flows, 5 statistics
    records = _export(sonde, corpus, workdir, f"cassandra://{cassandra}/byhand", "t4b")
    [[count]] = _rows(cassandra, "SELECT count(*) FROM byhand.flows")
    assert count == len(records)


def test_stats_off_writes_flows_only(cassandra, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    records = _export(sonde, corpus, workdir, f"cassandra://{cassandra}/sonde_t5?stats=off", "t5")
    [[count]] = _rows(cassandra, "SELECT count(*) FROM sonde_t5.flows")
    assert count == len(records)
    assert _rows(cassandra, "SELECT * FROM sonde_t5.stats_1m_hosts LIMIT 1") == []


@pytest.mark.parametrize("url,says", [
    ("cassandra://127.0.0.1/ks", "'127.0.0.1' is not HOST:PORT"),
    ("cassandra://127.0.0.1:9042/my-ks", "is not a keyspace name"),
    ("cassandra://127.0.0.1:9042/ks?replication=0", "replication=0: give a replication factor"),
    ("cassandra://127.0.0.1:9042/ks?bucket=7000", "divide a day"),
    ("cassandra://127.0.0.1:9042/ks?shards=1000", "shards=1000: give partitions per bucket"),
    ("cassandra://127.0.0.1:9042/ks?ttl=3", "unknown option 'ttl'"),
    ("cassandra://127.0.0.1:9042/ks?stats=maybe", "stats=maybe: use on"),
    ("cassandra://127.0.0.1:9042/ks?when_full=later", "when_full=later: use block or drop_newest"),
])
def test_bad_urls_say_what_is_wrong(sonde, corpus, url, says):
    p = sonde("-r", corpus / PCAP, "--export", url, "-q")
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sonde: error: --export"), p.stderr
    assert says in lines[0], p.stderr


def test_a_dead_server_is_one_error_at_start(sonde, corpus):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = sonde("-r", corpus / PCAP, "--export", f"cassandra://127.0.0.1:{port}/x", "-q")
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no answer from Cassandra" in lines[0], p.stderr


def _outage(sonde_bin, corpus, tmp_path, options):
    """A collecting sonde exports to a Cassandra node that is killed (SIGKILL) after the first
    capture's flows are in, while a second capture's flows come, and started again 5 s later.
    Returns the records --flows-out wrote, the sink's report, the rows in the table, and
    sonde's standard error."""
    cdir = tmp_path / "server"
    start = [str(REPO / "scripts" / "cassandra-server.sh"), str(cdir)]
    out = subprocess.run(start, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cql, pid = re.search(r"CQL=(\S+) PID=(\d+)", out.stdout).groups()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    flows, stats = tmp_path / "flows.jsonl", tmp_path / "stats.json"
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--export",
         f"cassandra://{cql}/outage{options}", "--flows-out", str(flows), "--stats-json",
         str(stats), "--idle-timeout", "1", "--active-timeout", "1", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        # The collector listens once the sink is ready: its schema version recorded (the last
        # step of its start), then a moment.
        deadline = time.time() + 120
        while True:
            if upper.poll() is not None:
                pytest.fail(f"sonde did not start: {upper.stderr.read()}")
            try:
                if _rows(cql, "SELECT version FROM outage.sonde_schema"):
                    break
            except Exception:  # the keyspace or table is not there yet
                pass
            assert time.time() < deadline, "the sink did not create its schema in 120 s"
            time.sleep(0.5)
        time.sleep(2)

        def send(pcap):
            p = subprocess.run([str(sonde_bin), "-r", str(corpus / pcap), "--export",
                                f"netflow9://127.0.0.1:{port}", "-q"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr

        send("http_ipv6.pcap")
        time.sleep(4)
        import os
        os.kill(int(pid), signal.SIGKILL)
        send(PCAP)
        time.sleep(5)
        if upper.poll() is not None:
            pytest.fail(f"sonde stopped while Cassandra was away: {upper.stderr.read()}")
        out = subprocess.run(start, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        pid = re.search(r"PID=(\d+)", out.stdout).group(1)
        time.sleep(3)
    finally:
        upper.send_signal(signal.SIGINT)
        _, err = upper.communicate(timeout=180)
    try:
        assert upper.returncode == 0, err
        written = oracle.load_jsonl(str(flows))
        sink = next(x for x in json.loads(stats.read_text())["sinks"]
                    if x["name"].startswith("cassandra"))
        [[count]] = _rows(cql, "SELECT count(*) FROM outage.flows")
        # Collected flows have an exporter: each per-minute table counts every flow once.
        flows_counted = {t: _rows(cql, f"SELECT sum(flows) FROM outage.stats_1m_{t}")[0][0]
                         for t in ("apps", "ports", "exporters", "interfaces")}
        return written, sink, count, flows_counted, err
    finally:
        import os
        os.kill(int(pid), signal.SIGTERM)


def test_an_outage_buffers_and_writes_after_the_restart(sonde_bin, corpus, tmp_path):
    """Within the buffer nothing is lost: every record --flows-out wrote is in the table, and
    in the per-minute statistics."""
    written, sink, count, flows_counted, err = _outage(sonde_bin, corpus, tmp_path, "")
    assert len(written) > 100
    assert sink["records"] == len(written) and sink["dropped"] == 0, (sink, err)
    assert sink["queue_dropped"] == 0, sink
    assert count == len(written)
    assert flows_counted == {t: len(written) for t in flows_counted}, err


def test_an_outage_past_the_buffer_drops_and_counts(sonde_bin, corpus, tmp_path):
    """With a buffer of 50 rows, the second capture's ~200 flows overflow it while the node is
    away: the oldest are dropped and counted, the rest written after the restart. Nothing is
    lost silently: delivered + dropped = every record, and the table holds the delivered."""
    written, sink, count, _, err = _outage(sonde_bin, corpus, tmp_path, "?buffer=50")
    assert len(written) > 100
    assert sink["dropped"] > 0, sink
    assert sink["records"] + sink["dropped"] + sink["queue_dropped"] == len(written), sink
    assert count == sink["records"], (sink, err)
    assert "records and" in err and "not stored" in err, err
