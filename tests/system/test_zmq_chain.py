"""Two sonde instances chained over ZMQ (issue 4): the lower one reads a capture and pushes its
expired flows as JSON; the upper one collects them and must show the same flows (packets and
bytes per direction, application labels) and their hosts, and keep a producer's unknown keys.
"""

from __future__ import annotations

import collections
import json
import signal
import socket
import subprocess
import time

import oracle


def _free_tcp_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port




def test_upper_instance_shows_lower_instances_flows(sonde_bin, corpus, workdir):
    port = _free_tcp_port()
    up_flows, up_hosts, up_stats = (workdir / n for n in ("up.jsonl", "up-hosts.jsonl", "up.json"))
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", f"zmq+tcp://127.0.0.1:{port}", "--duration", "6",
         "--flows-out", str(up_flows), "--hosts-out", str(up_hosts), "--stats-json",
         str(up_stats), "--idle-timeout", "100000", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        low_flows = workdir / "low.jsonl"
        low = subprocess.run(
            [str(sonde_bin), "-r", str(corpus / "1kxun.pcap"), "--zmq-export",
             f"tcp://127.0.0.1:{port}", "--flows-out", str(low_flows), "-q"],
            capture_output=True, text=True, timeout=120)
        assert low.returncode == 0, low.stderr
        _, err = upper.communicate(timeout=60)
    finally:
        if upper.poll() is None:
            upper.kill()
    assert upper.returncode == 0, err
    lower = oracle.load_jsonl(str(low_flows))
    collected = oracle.load_jsonl(str(up_flows))
    assert lower, "the lower instance exported nothing"
    assert oracle.record_directions(collected) == oracle.record_directions(lower), "the upper instance's flows differ"
    labels = lambda rs: collections.Counter(r.get("L7_PROTO_NAME") for r in rs)  # noqa: E731
    assert labels(collected) == labels(lower)
    stats = json.loads(up_stats.read_text())
    assert stats["collected"]["decoded"] == len(lower)
    assert stats["collected"]["errors"] == 0
    # Hosts: every address of the lower instance's flows is a host of the upper one.
    hosts = {h["IP_ADDR"] for h in oracle.load_jsonl(str(up_hosts))}
    addrs = {oracle.record_endpoints(r)[i][0] for r in lower for i in (1, 2)}
    assert addrs <= {oracle.norm_addr(h) for h in hosts}
    # Keys the collector does not interpret (DPI metadata here) are kept, not dropped.
    def meta(rs):
        return sorted((r["SERVER_NAME"], r.get("HTTP_HOST") or "") for r in rs
                      if r.get("SERVER_NAME"))

    assert meta(lower), "the capture should have flows with a server name"
    assert meta(collected) == meta(lower)



def _chain(sonde_bin, corpus, workdir, collect_url, export_urls):
    """A collector on `collect_url` for a few seconds, and one `-r 1kxun.pcap` exporter per
    URL of `export_urls` in turn: (collector's stats, records each exporter exported)."""
    up_stats = workdir / "curve-up.json"
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", collect_url, "--duration", "60", "--stats-json",
         str(up_stats), "--idle-timeout", "100000", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    exported = []
    try:
        time.sleep(0.5)
        for i, url in enumerate(export_urls):
            flows = workdir / f"curve-low{i}.jsonl"
            low = subprocess.run(
                [str(sonde_bin), "-r", str(corpus / "1kxun.pcap"), "--zmq-export", url,
                 "--flows-out", str(flows), "-q"], capture_output=True, text=True, timeout=120)
            assert low.returncode == 0, low.stderr
            exported.append(len(oracle.load_jsonl(str(flows))))
        time.sleep(1.0)  # the last messages reach the collector
        upper.send_signal(signal.SIGINT)
        _, err = upper.communicate(timeout=60)
    finally:
        if upper.poll() is None:
            upper.kill()
    assert upper.returncode == 0, err
    return json.loads(up_stats.read_text()), exported


def test_curve_encrypted_chain_and_wrong_keys(sonde_bin, sonde, corpus, workdir):
    """With `sonde zmq-keygen` keys, a CURVE chain delivers every flow; a producer with another
    collector's public key, or in plain text, delivers nothing; nothing readable crosses."""
    right, other = workdir / "collector", workdir / "someone-else"
    for name in (right, other):
        p = sonde("zmq-keygen", name)
        assert p.returncode == 0 and name.with_name(name.name + "_secret").exists(), p.stderr
    assert (right.with_name("collector_secret").stat().st_mode & 0o077) == 0
    port = _free_tcp_port()
    stats, exported = _chain(
        sonde_bin, corpus, workdir, f"zmq+tcp://127.0.0.1:{port}?curve={right}_secret",
        [f"tcp://127.0.0.1:{port}?curve={other}", f"tcp://127.0.0.1:{port}",
         f"tcp://127.0.0.1:{port}?curve={right}"])
    assert exported[0] > 0 and exported[2] == exported[0]
    # Only the producer with the collector's public key got through.
    assert stats["collected"]["decoded"] == exported[2], (stats["collected"], exported)
    # A missing key file, or the public file where the secret one is needed, is named at start.
    p = sonde("--collect", f"zmq+tcp://127.0.0.1:{port}?curve={right}", "--duration", "1", "-q")
    assert p.returncode != 0 and "secret-key" in p.stderr, p.stderr
    p = sonde("-r", corpus / "1kxun.pcap", "--zmq-export",
              f"tcp://127.0.0.1:{port}?curve={workdir / 'nope'}", "-q")
    assert p.returncode != 0 and "cannot read the key file" in p.stderr, p.stderr


def test_zmq_allow_list_refuses_producers_from_other_addresses(sonde_bin, corpus, workdir):
    """`zmq+tcp://…?allow=`: a producer connecting from 127.0.0.1 delivers nothing to a
    collector that allows 10.0.0.0/8 only (refused in the ZAP handshake, counted), and every
    flow to one that allows 127.0.0.0/8."""
    port = _free_tcp_port()
    stats, exported = _chain(sonde_bin, corpus, workdir,
                             f"zmq+tcp://127.0.0.1:{port}?allow=10.0.0.0/8",
                             [f"tcp://127.0.0.1:{port}"])
    assert exported[0] > 0
    assert stats["collected"]["decoded"] == 0, stats["collected"]
    assert stats["collected"]["refused_sources"] >= 1, stats["collected"]
    port = _free_tcp_port()
    stats, exported = _chain(sonde_bin, corpus, workdir,
                             f"zmq+tcp://127.0.0.1:{port}?allow=10.0.0.0/8,127.0.0.0/8",
                             [f"tcp://127.0.0.1:{port}"])
    assert stats["collected"]["decoded"] == exported[0] > 0, stats["collected"]
    assert stats["collected"]["refused_sources"] == 0
