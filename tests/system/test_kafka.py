"""Kafka (issue 16): sonde produces flows to a real broker (Apache Kafka 4.1, KRaft, started on
127.0.0.1 by scripts/kafka-server.sh) and reads them back from it.

* `--export kafka://…` (JSON): kcat reads back exactly the records `--flows-out` wrote, and
  every record of a flow sits in one partition (the message key is the flow); with
  `--geoip-dir` both carry the countries and AS numbers of both ends.
* `?format=protobuf`: `protoc --decode` against crates/export/proto/sonde_flow_v1.proto reads
  every message, with the same addresses, ports, counters, metadata, countries and AS numbers
  as the JSON records.
* `--collect kafka://…?group=G`: a second sonde consumes the topic and has the same flows,
  packets and bytes per direction; run again in the same group it reads nothing twice (its
  offsets were committed), and a new group reads everything again.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import struct
import subprocess
from pathlib import Path

import pytest

import oracle

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "crates" / "export" / "proto" / "sonde_flow_v1.proto"
GEO_DIR = REPO / "geoip" / "node_modules" / "@ip-location-db"
PCAP = "1kxun.pcap"
# Long flows of the capture give several records each (active timeout of 10 s).
ARGS = ["--idle-timeout", "1000000000", "--active-timeout", "10", "-q"]


def _kcat(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """Every message of `topic` as (partition, payload): kcat writes the partition, a tab, the
    payload's 32-bit length and the payload (keys are binary, so they are left out)."""
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-q",
                          "-f", "%p\t%R%s"], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data, msgs, at = out.stdout, [], 0
    while at < len(data):
        tab = data.index(b"\t", at)
        (n,) = struct.unpack(">i", data[tab + 1:tab + 5])
        msgs.append((int(data[at:tab]), data[tab + 5:tab + 5 + n]))
        at = tab + 5 + n
    return msgs


def _export(sonde, pcap, workdir, url, *extra):
    flows = workdir / "exported.jsonl"
    stats = workdir / "exported-stats.json"
    p = sonde("-r", pcap, "--export", url, "--flows-out", flows,
              "--stats-json", stats, *ARGS, *extra)
    assert p.returncode == 0, p.stderr
    records = oracle.load_jsonl(str(flows))
    sink = next(s for s in json.loads(stats.read_text())["sinks"] if s["name"].startswith("kafka"))
    assert sink["records"] == len(records) and sink["messages"] == len(records), sink
    assert sink["dropped"] == 0 and sink["queue_dropped"] == 0, sink
    return records


def _canon(r: dict) -> str:
    return json.dumps(r, sort_keys=True)


def test_json_records_on_kafka_equal_the_flows_file(kafka, sonde, corpus, workdir):
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    # With --geoip-dir both carry the places of both ends (test_geoip.py checks those).
    records = _export(sonde, corpus / PCAP, workdir, f"kafka://{kafka}/flows-json",
                      "--geoip-dir", GEO_DIR)
    assert any(r.get("DST_IP_COUNTRY") and r.get("DST_AS") for r in records)
    msgs = _kcat(kafka, "flows-json")
    got = [json.loads(payload) for _, payload in msgs]
    assert sorted(map(_canon, got)) == sorted(map(_canon, records))
    # Every record of a flow in one partition; the capture's long flows give several records,
    # and the flows spread over the topic's partitions.
    parts = collections.defaultdict(set)
    for partition, payload in msgs:
        proto, a, b = oracle.record_endpoints(json.loads(payload))
        parts[(proto, frozenset({a, b}))].add(partition)
    assert all(len(p) == 1 for p in parts.values())
    per_flow = collections.Counter(oracle.record_endpoints(r) for r in records)
    assert max(per_flow.values()) >= 2, "some flows have several records"
    assert len({partition for partition, _ in msgs}) >= 2


def test_protobuf_records_decode_with_protoc(kafka, sonde, corpus, workdir):
    if not shutil.which("protoc"):
        pytest.fail("protoc is needed: run scripts/setup-test-deps.sh")
    if not (corpus / "http.pcapng").exists():
        pytest.skip("http.pcapng not in the corpus")
    records = _export(sonde, corpus / "http.pcapng", workdir,
                      f"kafka://{kafka}/flows-pb?format=protobuf", "--geoip-dir", GEO_DIR)
    msgs = [payload for _, payload in _kcat(kafka, "flows-pb")]
    assert len(msgs) == len(records)
    decoded = []
    for m in msgs:
        p = subprocess.run(["protoc", f"--proto_path={PROTO.parent}", "--decode=sonde.flow.v1.Flow",
                            PROTO.name], input=m, capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        decoded.append(p.stdout.decode())
    by_port = {r["L4_SRC_PORT"]: r for r in records}
    for text in decoded:
        def num(k):
            # proto3 leaves zeros out, and protoc prints what is there.
            m = re.search(rf"^{k}: (\d+)$", text, re.M)
            return int(m.group(1)) if m else 0
        r = by_port[num("src_port")]
        assert num("dst_port") == r["L4_DST_PORT"] and num("protocol") == r["PROTOCOL"]
        assert (num("in_packets"), num("in_bytes")) == (r["IN_PKTS"], r["IN_BYTES"])
        assert (num("out_packets"), num("out_bytes")) == (r["OUT_PKTS"], r["OUT_BYTES"])
        assert num("first_ms") == r["FLOW_START_MILLISECONDS"]
        assert num("last_ms") == r["FLOW_END_MILLISECONDS"]
        assert num("schema_version") == 1
        assert (num("src_as"), num("dst_as")) == (r.get("SRC_AS", 0), r.get("DST_AS", 0))
        for k, key in (("src_country", "SRC_IP_COUNTRY"), ("dst_country", "DST_IP_COUNTRY")):
            m = re.search(rf'^{k}: "([A-Z]{{2}})"$', text, re.M)
            assert (m.group(1) if m else None) == r.get(key), (k, text)
        meta = dict(re.findall(r'meta \{\s*key: "([^"]*)"\s*value: "([^"]*)"', text))
        for k in ("HTTP_HOST", "HTTP_URL", "TLS_SERVER_NAME"):
            if k in r:
                assert meta.get(k) == r[k], (k, meta)
    assert any("HTTP_HOST" in t for t in decoded), "the capture's HTTP metadata travelled"
    assert any("dst_country" in t for t in decoded), "the capture's servers are placed"




def _collect(sonde, workdir, url, name):
    flows, stats = workdir / f"{name}.jsonl", workdir / f"{name}-stats.json"
    p = sonde("--collect", url, "--duration", "6", "--flows-out", flows, "--stats-json", stats,
              "--idle-timeout", "1000000000", "--active-timeout", "0", "-q", timeout=120)
    assert p.returncode == 0, p.stderr
    return oracle.load_jsonl(str(flows)), json.loads(stats.read_text())


@pytest.mark.parametrize("fmt,per_message", [("json", 1), ("protobuf", 1), ("json", 16),
                                             ("protobuf", 16)])
def test_a_sonde_collects_what_another_produced(fmt, per_message, kafka, sonde, corpus, workdir):
    """One flow per message, or 16 (a JSON array, a protobuf FlowBatch): the collector reads
    the same flows."""
    if not (corpus / PCAP).exists():
        pytest.skip(f"{PCAP} not in the corpus")
    topic = f"collect-{fmt}-{per_message}"
    sent = _export(sonde, corpus / PCAP, workdir,
                   f"kafka://{kafka}/{topic}?format={fmt}&records_per_message={per_message}")
    if per_message > 1:
        messages = _kcat(kafka, topic)
        assert len(sent) / per_message <= len(messages) < len(sent), "flows share messages"
    # A message that is not a flow (bad input on the topic): counted as an error, skipped.
    subprocess.run(["kcat", "-P", "-b", kafka, "-t", topic], input=b"\xffnot a flow\n",
                   check=True, timeout=60)
    url = f"kafka://{kafka}/{topic}?group=central&format={fmt}"
    got, stats = _collect(sonde, workdir, url, "first")
    assert stats["collected"]["records"] == len(sent), stats["collected"]
    assert stats["collected"]["errors"] == 1, stats["collected"]
    assert oracle.record_directions(got) == oracle.record_directions(sent)
    # The group's offsets were committed: the same group reads nothing again.
    again, stats = _collect(sonde, workdir, url, "again")
    assert stats["collected"]["records"] == 0 and not again
    # Another group reads the whole topic.
    other, stats = _collect(sonde, workdir, url.replace("group=central", "group=other"), "other")
    assert stats["collected"]["records"] == len(sent)


def test_a_dead_broker_is_one_error_at_start(sonde, corpus):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    for args in (["-r", corpus / PCAP, "--export", f"kafka://127.0.0.1:{port}/flows"],
                 ["--collect", f"kafka://127.0.0.1:{port}/flows"]):
        p = sonde(*args, "-q", timeout=60)
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "no broker answered" in lines[0], p.stderr
    p = sonde("-r", corpus / PCAP, "--export", "kafka://127.0.0.1:1/flows?format=avro", "-q")
    assert p.returncode != 0 and "format=avro: use json or protobuf" in p.stderr, p.stderr


def test_a_broker_outage_loses_nothing(sonde_bin, corpus, tmp_path):
    """The broker is killed (SIGKILL) in the middle of a run and started again 5 s later: a
    collecting sonde exporting to it keeps running; the records of the outage wait in
    librdkafka's bounded queue and are delivered after the restart. At the end every record the
    sonde wrote to --flows-out is on the topic, and its report says delivered = records, none
    dropped."""
    import socket
    import time
    kdir = tmp_path / "broker"
    start = [str(REPO / "scripts" / "kafka-server.sh"), str(kdir), "1"]
    out = subprocess.run(start, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    bootstrap, pid = re.search(r"BOOTSTRAP=(\S+) PID=(\d+)", out.stdout).groups()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    flows, stats = tmp_path / "flows.jsonl", tmp_path / "stats.json"
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--export",
         f"kafka://{bootstrap}/outage", "--flows-out", str(flows), "--stats-json", str(stats),
         "--idle-timeout", "1", "--active-timeout", "1", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(1)

        def send(pcap):
            p = subprocess.run([str(sonde_bin), "-r", str(corpus / pcap), "--export",
                                f"netflow9://127.0.0.1:{port}", "-q"],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr

        send("http_ipv6.pcap")
        time.sleep(3)  # those flows time out and are delivered
        os.kill(int(pid), signal.SIGKILL)
        send("1kxun.pcap")
        time.sleep(5)  # these time out while the broker is down
        out = subprocess.run(start, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        pid = re.search(r"PID=(\d+)", out.stdout).group(1)
        time.sleep(8)
    finally:
        upper.send_signal(signal.SIGINT)
        _, err = upper.communicate(timeout=120)
    try:
        assert upper.returncode == 0, err
        written = oracle.load_jsonl(str(flows))
        sink = next(x for x in json.loads(stats.read_text())["sinks"]
                    if x["name"].startswith("kafka"))
        assert sink["records"] == len(written) and sink["messages"] == len(written), sink
        assert sink["dropped"] == 0 and sink["queue_dropped"] == 0, sink
        got = [json.loads(p) for _, p in _kcat(bootstrap, "outage")]
        assert sorted(map(_canon, got)) == sorted(map(_canon, written))
        assert len(written) > 100, "both captures' flows went through"
    finally:
        os.kill(int(pid), signal.SIGTERM)


def _committed(bootstrap: str, group: str, topic: str) -> int:
    """The offsets a consumer group has committed on `topic`, summed over its partitions
    (Kafka's own ConsumerGroupCommand)."""
    lib = REPO / "target" / "servers" / "kafka" / "lib"
    out = subprocess.run(["java", "-cp", f"{lib}/*",
                          "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                          "--bootstrap-server", bootstrap, "--describe", "--group", group],
                         capture_output=True, text=True, timeout=120)
    total = 0
    for line in out.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[1] == topic and cols[3].isdigit():
            total += int(cols[3])
    return total


def test_a_killed_consumer_replays_what_it_had_not_committed(kafka, sonde_bin, sonde, corpus,
                                                            tmp_path):
    """A collecting sonde killed with SIGKILL while reading a topic loses nothing: started again
    in the same group, it reads again every message whose offset its group had not committed
    (the records died with it in memory), and commits them."""
    import time
    topic = "replay"
    out = tmp_path / "sent.jsonl"
    p = sonde("-r", corpus / PCAP, "--export", f"kafka://{kafka}/{topic}", "--flows-out", out,
              *ARGS)
    assert p.returncode == 0, p.stderr
    sent = len(oracle.load_jsonl(str(out)))
    url = f"kafka://{kafka}/{topic}?group=killed"
    # The first consumer commits only after an hour: killed before that, it has read the topic
    # and committed nothing.
    first = subprocess.Popen([str(sonde_bin), "--collect", url + "&commit_interval=3600", *ARGS],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
    time.sleep(6)
    assert first.poll() is None, "the consumer was running"
    first.kill()
    first.wait()
    committed = _committed(kafka, "killed", topic)
    assert committed == 0
    stats = tmp_path / "second.json"
    # The killed member's partitions come back to the group after its session timeout (10 s).
    p = sonde("--collect", url, "--duration", "20", "--stats-json", stats, *ARGS, timeout=120)
    assert p.returncode == 0, p.stderr
    again = json.loads(stats.read_text())["collected"]["records"]
    assert again == sent, "everything the killed consumer had read is read again"
    assert _committed(kafka, "killed", topic) == sent
