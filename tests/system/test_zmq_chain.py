"""Two sonde instances chained over ZMQ (issue 4): the lower one reads a capture and pushes its
expired flows as JSON; the upper one collects them and must show the same flows (packets and
bytes per direction, application labels) and their hosts, and keep a producer's unknown keys.
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import json
import shutil
import signal
import socket
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

import oracle
from conftest import REPO

GEO_DIR = REPO / "geoip" / "node_modules" / "@ip-location-db"


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



def _chain(sonde_bin, corpus, workdir, collect_url, export_urls, up_args=()):
    """A collector on `collect_url` for a few seconds, and one `-r 1kxun.pcap` exporter per
    URL of `export_urls` in turn: (collector's stats, records each exporter exported)."""
    up_stats = workdir / "curve-up.json"
    upper = subprocess.Popen(
        [str(sonde_bin), "--collect", collect_url, "--duration", "60", "--stats-json",
         str(up_stats), "--idle-timeout", "100000", "-q", *up_args],
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



# ---- ntopng's framing (docs/zmq-interop.md) ----------------------------------------------------

@pytest.mark.parametrize("options", ["", "compress=zlib", "compress=zlib&header=v4",
                                     "keys=labels&header=v4"])
def test_ntopng_format_chain(sonde_bin, corpus, workdir, options):
    """One sonde exports in ntopng's framing (PUB binding, as nProbe does), another collects
    it as ntopng would (SUB connecting): every flow arrives, the same flows, with zlib on and
    off, either header layout, numeric or label keys."""
    port = _free_tcp_port()
    up_flows = workdir / "ntopng-up.jsonl"
    extra = f"&{options}" if options else ""
    stats, exported = _chain(
        sonde_bin, corpus, workdir, f"zmq+tcp://127.0.0.1:{port}?format=ntopng",
        [f"tcp://127.0.0.1:{port}?format=ntopng&wait=10{extra}"],
        up_args=("--flows-out", str(up_flows)))
    c = stats["collected"]
    assert c["decoded"] == exported[0] > 0, (c, exported)
    assert (c["errors"], c["skipped_topics"], c["unknown_keys"], c["lost_messages"]) == (0, 0, 0, 0), c
    lower = oracle.load_jsonl(str(workdir / "curve-low0.jsonl"))
    collected = oracle.load_jsonl(str(up_flows))
    assert oracle.record_directions(collected) == oracle.record_directions(lower)
    labels = lambda rs: collections.Counter(r.get("L7_PROTO_NAME") for r in rs)  # noqa: E731
    assert labels(collected) == labels(lower)


def test_ntopng_format_probe_mode(sonde_bin, corpus, workdir):
    """ntopng's collector mode: the collector binds (mode=collector), the exporter connects
    (mode=probe), as ntopng's `-i tcp://*:PORTc` and nProbe's --zmq-probe-mode."""
    port = _free_tcp_port()
    stats, exported = _chain(
        sonde_bin, corpus, workdir, f"zmq+tcp://127.0.0.1:{port}?format=ntopng&mode=collector",
        [f"tcp://127.0.0.1:{port}?format=ntopng&mode=probe&wait=10&compress=zlib"])
    assert stats["collected"]["decoded"] == exported[0] > 0, (stats["collected"], exported)
    assert stats["collected"]["errors"] == 0


def test_ntopng_format_curve(sonde_bin, sonde, corpus, workdir):
    """CURVE in ntopng's framing: the collector (SUB, CURVE server) takes every flow from an
    exporter that has its public key, whether it connects to the exporter or binds (collector
    mode); it takes none from an exporter with another key or none, counts their failed
    handshakes, and still takes the next right one. Connecting, that needs sonde to dial again:
    libzmq ends a connection whose handshake failed and does not retry it."""
    right, other = workdir / "collector", workdir / "someone-else"
    for name in (right, other):
        p = sonde("zmq-keygen", name)
        assert p.returncode == 0, p.stderr
    port = _free_tcp_port()
    stats, exported = _chain(
        sonde_bin, corpus, workdir,
        f"zmq+tcp://127.0.0.1:{port}?format=ntopng&curve={right}_secret",
        [f"tcp://127.0.0.1:{port}?format=ntopng&wait=10&compress=zlib&curve={right}"])
    assert stats["collected"]["decoded"] == exported[0] > 0, (stats["collected"], exported)
    assert stats["collected"]["failed_handshakes"] == 0
    for mode, probe in (("", ""), ("&mode=collector", "&mode=probe")):
        port = _free_tcp_port()
        stats, exported = _chain(
            sonde_bin, corpus, workdir,
            f"zmq+tcp://127.0.0.1:{port}?format=ntopng{mode}&curve={right}_secret",
            [f"tcp://127.0.0.1:{port}?format=ntopng{probe}&wait=2&curve={other}",
             f"tcp://127.0.0.1:{port}?format=ntopng{probe}&wait=2",
             f"tcp://127.0.0.1:{port}?format=ntopng{probe}&wait=10&curve={right}"])
        assert exported[0] == exported[1] == exported[2] > 0
        assert stats["collected"]["decoded"] == exported[2], (mode, stats["collected"], exported)
        assert stats["collected"]["failed_handshakes"] >= 2, (mode, stats["collected"])


def test_ntopng_format_bad_options_say_how_to_fix(sonde, corpus):
    p = sonde("-r", corpus / "1kxun.pcap", "--zmq-export", "tcp://127.0.0.1:1?compress=zlib", "-q")
    assert p.returncode != 0 and "add format=ntopng" in p.stderr, p.stderr
    p = sonde("--collect", "zmq+tcp://127.0.0.1:1?mode=collector", "--duration", "1", "-q")
    assert p.returncode != 0 and "add format=ntopng" in p.stderr, p.stderr


def _zmq():
    return pytest.importorskip("zmq", reason="pyzmq is needed to play ntopng and nProbe")


def _receive_while_running(zmq, sub, proc) -> list:
    """The messages `sub` receives while `proc` (a sonde exporting) runs, for up to a minute,
    and those still on the way when it has ended; `proc` must end well."""
    messages = []
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            messages.append(sub.recv_multipart())
        except zmq.Again:
            if proc.poll() is not None:
                break
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    while True:
        try:
            messages.append(sub.recv_multipart())
        except zmq.Again:
            return messages


def test_plays_ntopng_receiving_sondes_messages(sonde_bin, corpus, workdir):
    """A pyzmq SUB, subscribed as ntopng subscribes, reads sonde's messages byte by byte
    against the documented layouts: two parts; the 24-byte header (topic `flow` NUL-padded,
    version 2, source id, msg_id in network order counting up from 1) or the 36-byte one
    (version 4, compressed flag 4, sizes little-endian, msg_id and source_id in network order);
    a compressed payload is 0x00 + zlib (24 bytes) or zlib alone (36); numeric keys."""
    zmq = _zmq()
    for header, compress, size in (("v1", "zlib", 24), ("v1", "none", 24), ("v4", "zlib", 36)):
        port = _free_tcp_port()
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        for topic in (b"flow", b"event", b"counter", b"template", b"option", b"hello"):
            sub.setsockopt(zmq.SUBSCRIBE, topic)
        sub.setsockopt(zmq.RCVTIMEO, 500)
        sub.connect(f"tcp://127.0.0.1:{port}")
        flows_out = workdir / f"pyz-{header}-{compress}.jsonl"
        low = subprocess.Popen(
            [str(sonde_bin), "-r", str(corpus / "1kxun.pcap"), "--zmq-export",
             f"tcp://127.0.0.1:{port}?format=ntopng&wait=10&header={header}&compress={compress}"
             "&source_id=7", "--flows-out", str(flows_out), "--geoip-dir", str(GEO_DIR), "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        messages = _receive_while_running(zmq, sub, low)
        ctx.destroy(linger=0)
        flows = []
        for i, parts in enumerate(messages, start=1):
            assert len(parts) == 2, [len(p) for p in parts]
            h, payload = parts
            assert len(h) == size
            assert h[:16] == b"flow" + b"\0" * 12
            if size == 24:
                version, source_id, _size = struct.unpack("<BBH", h[16:20])
                (msg_id,) = struct.unpack(">I", h[20:24])
                assert (version, source_id, msg_id) == (2, 7, i)
                if compress == "zlib":
                    assert payload[0] == 0
                    js = zlib.decompress(payload[1:])
                else:
                    assert payload[:1] == b"["
                    js = payload
            else:
                version, flags = h[16], h[17]
                assert h[18:20] == b"\0\0"
                uncompressed, compressed = struct.unpack("<II", h[20:28])
                msg_id, source_id = struct.unpack(">II", h[28:36])
                assert (version, flags, msg_id, source_id) == (4, 4, i, 7)
                assert compressed == len(payload)
                js = zlib.decompress(payload)
                assert uncompressed == len(js)
            batch = json.loads(js)
            assert isinstance(batch, list) and batch
            for f in batch:
                # nProbe's numeric keys: 8/12 (IPv4 addresses) or 27/28 (IPv6), 1/2 and 23/24.
                assert ("8" in f and "12" in f) or ("27" in f and "28" in f), f
                assert {"1", "2", "23", "24"} <= f.keys(), f
                assert "IPV4_SRC_ADDR" not in f and "IN_BYTES" not in f
            flows.extend(batch)
        exported = oracle.load_jsonl(str(flows_out))
        assert len(flows) == len(exported) > 0
        assert sum(int(f["1"]) + int(f["23"]) for f in flows) == \
            sum(int(r["IN_BYTES"]) + int(r["OUT_BYTES"]) for r in exported)
        # With --geoip-dir: AS numbers under nProbe's 16/17 (SRC_AS, DST_AS), countries by name.
        def places(f, a, b, c, d):
            return (int(f.get(a, 0)), int(f.get(b, 0)), f.get(c), f.get(d))
        assert collections.Counter(places(f, "16", "17", "SRC_IP_COUNTRY", "DST_IP_COUNTRY")
                                   for f in flows) == \
            collections.Counter(places(r, "SRC_AS", "DST_AS", "SRC_IP_COUNTRY", "DST_IP_COUNTRY")
                                for r in exported)
        assert any(f.get("DST_IP_COUNTRY") and int(f.get("17", 0)) for f in flows)

@contextlib.contextmanager
def _ntopng_collector(sonde_bin, flows_out: Path, stats_out: Path):
    """An XPUB playing nProbe (it hears when sonde has subscribed) and `sonde --collect
    zmq+tcp://…?format=ntopng` connected to it: yields (pub, process) once subscribed; on leaving,
    waits for the last messages, stops sonde and checks it exited cleanly (its stderr is then
    `process.stderr_text`)."""
    zmq = _zmq()
    port = _free_tcp_port()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.bind(f"tcp://127.0.0.1:{port}")
    up = subprocess.Popen(
        [str(sonde_bin), "--collect", f"zmq+tcp://127.0.0.1:{port}?format=ntopng",
         "--duration", "60", "--flows-out", str(flows_out), "--stats-json", str(stats_out),
         "--idle-timeout", "100000", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        pub.setsockopt(zmq.RCVTIMEO, 15000)
        assert pub.recv()[:1] == b"\x01", "sonde did not subscribe"
        yield pub, up
        time.sleep(1.5)  # the last messages reach the collector
        up.send_signal(signal.SIGINT)
        _, up.stderr_text = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
        ctx.destroy(linger=0)
    assert up.returncode == 0, up.stderr_text


def test_plays_nprobe_sending_to_sonde(sonde_bin, workdir):
    """A pyzmq PUB plays nProbe: hand-built 24-byte headers and JSON with numeric keys, one
    payload zlib-compressed (0x00 + zlib), a `counter` message (skipped and counted), a gap in
    the message ids (counted as lost), an id sonde cannot name (counted, kept), a one-part
    message (an error, said once on stderr); sonde collects the flows with their counters."""
    flows_out, stats_out = workdir / "nprobe-up.jsonl", workdir / "nprobe-up.json"
    with _ntopng_collector(sonde_bin, flows_out, stats_out) as (pub, up):

        def header(topic: bytes, msg_id: int, size: int, version: int = 2) -> bytes:
            return struct.pack("<16sBBH", topic, version, 3, size) + struct.pack(">I", msg_id)

        # TCP flags PSH|ACK: with SYN|ACK in the OR-ed TCP_FLAGS and no CLIENT_TCP_FLAGS,
        # sonde's engine takes the record's source for the server (see docs/zmq-interop.md).
        def flow(i: int, **extra) -> dict:
            f = {"8": f"192.0.2.{i}", "12": "198.51.100.1", "7": 40000 + i, "11": 443, "4": 6,
                 "1": 1000 * i, "2": i, "23": 500 * i, "24": i, "6": 24,
                 "152": 1700000000000 + i, "153": 1700000001000 + i, "57591": "TLS"}
            f.update(extra)
            return f

        plain = json.dumps([flow(1), flow(2, **{"99999": "vendor"})]).encode()
        pub.send_multipart([header(b"flow", 1, len(plain)), plain])
        z = b"\0" + zlib.compress(json.dumps([flow(3)]).encode())
        pub.send_multipart([header(b"flow", 2, len(z)), z])
        counter = b'{"deviceIP":"192.0.2.254","ifIndex":1}'
        pub.send_multipart([header(b"counter", 3, len(counter)), counter])
        one = json.dumps(flow(4)).encode()  # a single object, after a gap: ids 4 to 6 lost
        pub.send_multipart([header(b"flow", 7, len(one)), one])
        pub.send(b"[]")  # one part: not ntopng's framing
    err = up.stderr_text
    c = json.loads(stats_out.read_text())["collected"]
    assert (c["decoded"], c["skipped_topics"], c["lost_messages"], c["unknown_keys"],
            c["errors"]) == (4, 1, 3, 1, 1), c
    assert "two (a header and a payload)" in err and "drop format=ntopng" in err, err
    got = {r["IPV4_SRC_ADDR"]: r for r in oracle.load_jsonl(str(flows_out))}
    assert sorted(got) == [f"192.0.2.{i}" for i in (1, 2, 3, 4)]
    for i in (1, 2, 3, 4):
        r = got[f"192.0.2.{i}"]
        assert (r["IPV4_DST_ADDR"], r["L4_SRC_PORT"], r["L4_DST_PORT"], r["PROTOCOL"]) == \
            ("198.51.100.1", 40000 + i, 443, 6)
        assert (r["IN_BYTES"], r["IN_PKTS"], r["OUT_BYTES"], r["OUT_PKTS"]) == (1000 * i, i, 500 * i, i)
        assert r["L7_PROTO_NAME"] == "TLS"


@pytest.fixture(scope="module")
def ndpi_tlv(tmp_path_factory) -> Path:
    """tests/system/ndpi_tlv.c built against Debian's libndpi: nDPI's own TLV serializer and
    deserializer, the oracle for sonde's."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("a C compiler is needed to build tests/system/ndpi_tlv.c")
    out = tmp_path_factory.mktemp("ndpi_tlv") / "ndpi_tlv"
    p = subprocess.run([cc, "-O1", str(REPO / "tests" / "system" / "ndpi_tlv.c"), "-o", str(out),
                        "-lndpi"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{p.stderr} (libndpi-dev comes with scripts/setup.sh)"
    return out


def _tlv_header(version_or_flags: int, msg_id: int, wide: bool, sizes=(0, 0)) -> bytes:
    """ntopng's 24-byte header with version 3 (TLV), or its 36-byte one with these flags."""
    if not wide:
        return struct.pack("<16sBBH", b"flow", version_or_flags, 5, 0) + struct.pack(">I", msg_id)
    return (struct.pack("<16sBBxxII", b"flow", 4, version_or_flags, *sizes)
            + struct.pack(">II", msg_id, 5))


def test_collects_flows_libndpi_serialized_as_tlv(sonde_bin, workdir, ndpi_tlv):
    """nProbe's TLV ZMQ format, made by libndpi's serializer itself: IPv4 addresses as numbers
    (as nProbe sends them), IPv6 ones as text, counters of every width, a string key; in the
    24-byte header (version 3) and the 36-byte one (TLV flag, plain and zlib). sonde collects
    every flow with its addresses, ports and counters."""

    def items(i: int, v6: bool = False) -> str:
        lines = [f"n 27 s 2001:db8::{i}", "n 28 s 2001:db8::ff"] if v6 else [
            f"n 8 u {int.from_bytes(bytes([192, 0, 2, i]), 'big')}",
            f"n 12 u {int.from_bytes(bytes([198, 51, 100, 1]), 'big')}"]
        lines += [f"n 7 u {40000 + i}", "n 11 u 443", "n 4 u 6", f"n 1 u {5_000_000_000 * i}",
                  f"n 2 u {4_000_000 * i}", f"n 23 u {300 * i}", f"n 24 u {i}", "n 6 u 24",
                  f"n 152 u {1700000000000 + i}", f"n 153 u {1700000001000 + i}",
                  "n 57591 s TLS", "s VENDOR_NOTE s hello"]
        return "\n".join(lines) + "\ne\n"

    def tlv(*records: str) -> bytes:
        p = subprocess.run([str(ndpi_tlv), "encode"], input="".join(records).encode(),
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout

    flows_out, stats_out = workdir / "tlv-up.jsonl", workdir / "tlv-up.json"
    with _ntopng_collector(sonde_bin, flows_out, stats_out) as (pub, up):
        two = tlv(items(1), items(2))
        pub.send_multipart([_tlv_header(3, 1, False), two])
        three = tlv(items(3))
        pub.send_multipart([_tlv_header(2, 2, True, (len(three), len(three))), three])
        four = tlv(items(4, v6=True))
        z = zlib.compress(four)
        pub.send_multipart([_tlv_header(2 | 4, 3, True, (len(four), len(z))), z])
        pub.send_multipart([_tlv_header(3, 4, False), two[:-3]])  # cut inside an item
    err = up.stderr_text
    c = json.loads(stats_out.read_text())["collected"]
    assert (c["decoded"], c["errors"], c["suspect"]) == (4, 1, 0), c
    assert "TLV payload" in err and "damaged" in err, err
    got = {r.get("IPV4_SRC_ADDR") or r.get("IPV6_SRC_ADDR"): r
           for r in oracle.load_jsonl(str(flows_out))}
    assert sorted(got) == ["192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::4"]
    for i, src in enumerate(["192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::4"], start=1):
        r = got[src]
        assert (r.get("IPV4_DST_ADDR") or r.get("IPV6_DST_ADDR")) == \
            ("2001:db8::ff" if i == 4 else "198.51.100.1")
        assert (r["L4_SRC_PORT"], r["L4_DST_PORT"], r["PROTOCOL"]) == (40000 + i, 443, 6)
        assert (r["IN_BYTES"], r["IN_PKTS"], r["OUT_BYTES"], r["OUT_PKTS"]) == \
            (5_000_000_000 * i, 4_000_000 * i, 300 * i, i)
        assert r["FLOW_START_MILLISECONDS"] == 1700000000000 + i
        assert r["L7_PROTO_NAME"] == "TLS"


@pytest.mark.parametrize("options", ["header=v1", "header=v4&compress=zlib"])
def test_libndpi_reads_sondes_tlv(options, sonde_bin, corpus, workdir, ndpi_tlv):
    """`--zmq-export …?format=ntopng&payload=tlv`: every message's header says TLV (version 3,
    or the 36-byte header's TLV flag) and libndpi's deserializer reads its payload into the
    records sonde wrote to --flows-out (one per flow, nProbe's numeric keys)."""
    zmq = _zmq()
    port = _free_tcp_port()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"flow")
    sub.setsockopt(zmq.RCVTIMEO, 500)
    sub.connect(f"tcp://127.0.0.1:{port}")
    flows_out = workdir / "tlv-low.jsonl"
    low = subprocess.Popen(
        [str(sonde_bin), "-r", str(corpus / "1kxun.pcap"), "--zmq-export",
         f"tcp://127.0.0.1:{port}?format=ntopng&payload=tlv&wait=10&{options}",
         "--flows-out", str(flows_out), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    messages = _receive_while_running(zmq, sub, low)
    ctx.destroy(linger=0)
    records = []
    for h, payload in messages:
        if len(h) == 24:
            assert h[16] == 3, "version 3: TLV"
        else:
            assert len(h) == 36 and (h[16], h[17]) == (4, 2 | 4), "TLV and compressed flags"
            payload = zlib.decompress(payload)
        p = subprocess.run([str(ndpi_tlv), "decode"], input=payload, capture_output=True,
                           timeout=30)
        assert p.returncode == 0, p.stderr
        record = {}
        for line in p.stdout.decode().splitlines():
            if line == "EOR":
                records.append(record)
                record = {}
            else:
                k, v = line.split("\t", 1)
                record[k] = v
        assert record == {}, "every record ends with an end of record"
    exported = oracle.load_jsonl(str(flows_out))
    assert len(records) == len(exported) > 0
    assert sum(int(r["1"]) + int(r["23"]) for r in records) == \
        sum(int(e["IN_BYTES"]) + int(e["OUT_BYTES"]) for e in exported)
    want = collections.Counter((e.get("IPV4_SRC_ADDR") or e.get("IPV6_SRC_ADDR"),
                                str(e["L4_SRC_PORT"]), str(e["IN_PKTS"]),
                                e.get("L7_PROTO_NAME")) for e in exported)
    # IPv4 addresses travel as numbers, as nProbe sends them; IPv6 ones as text.
    assert all(r["8"].isdigit() and r["12"].isdigit() for r in records if "8" in r)
    got = collections.Counter((str(ipaddress.IPv4Address(int(r["8"]))) if "8" in r else r["27"],
                               r["7"], r["2"], r.get("57591")) for r in records)
    assert got == want
