"""Flow history (`--data-dir`) and `sonde query`: what is stored comes back with the keys of
--flows-out, survives kill -9, and a corrupted or foreign file is a clear error."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import oracle

CAPTURES = ["dns_doh.pcap", "youtube_quic.pcap", "http_connect.pcap"]


def _jsonl(text: str):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _flow_key(r: dict):
    return json.dumps(r, sort_keys=True)


def _bytes_per_host(flows) -> collections.Counter:
    """Each address's bytes over the flows it took part in (either end), from flow records."""
    per_host = collections.Counter()
    for r in flows:
        total = int(r["IN_BYTES"]) + int(r["OUT_BYTES"])
        for k in ("IPV4_SRC_ADDR", "IPV4_DST_ADDR", "IPV6_SRC_ADDR", "IPV6_DST_ADDR"):
            if k in r:
                per_host[r[k]] += total
    return per_host


def _store(sonde, corpus, workdir, name):
    """Runs sonde on the corpus capture `name` with a data directory and a flows file; returns
    the data directory and the flows file's records (the oracle of what was stored)."""
    pcap = corpus / name
    if not pcap.exists():
        pytest.skip(f"{name} not in the corpus")
    data = workdir / "data"
    flows = workdir / "flows.jsonl"
    p = sonde("-r", pcap, "--data-dir", data, "--flows-out", flows, "-q")
    assert p.returncode == 0, p.stderr
    return data, oracle.load_jsonl(str(flows))


@pytest.mark.parametrize("name", CAPTURES)
def test_stored_flows_equal_flows_out(sonde, corpus, workdir, name):
    data, want = _store(sonde, corpus, workdir, name)
    assert want
    q = sonde("query", "--data-dir", data, "flows", "--limit", "1000000", "--format", "jsonl")
    assert q.returncode == 0, q.stderr
    got = _jsonl(q.stdout)
    assert sorted(map(_flow_key, got)) == sorted(map(_flow_key, want))
    # Top hosts: sums over the flows each host took part in, as the flows file says.
    per_host = _bytes_per_host(want)
    q = sonde("query", "--data-dir", data, "hosts", "--limit", "5", "--format", "jsonl")
    assert q.returncode == 0, q.stderr
    top = _jsonl(q.stdout)
    assert [h["BYTES"] for h in top] == sorted(per_host.values(), reverse=True)[:5]
    for h in top:
        assert per_host[h["HOST"]] == h["BYTES"]
    # The table form prints a header and one line per flow.
    q = sonde("query", "--data-dir", data, "flows", "--limit", "3")
    assert q.returncode == 0, q.stderr
    assert q.stdout.splitlines()[0].startswith("START")
    assert len(q.stdout.splitlines()) == 1 + min(3, len(want))


def test_filters_select_what_the_flows_file_has(sonde, corpus, workdir):
    data, want = _store(sonde, corpus, workdir, "dns_doh.pcap")
    port53 = [r for r in want if 53 in (int(r["L4_SRC_PORT"]), int(r["L4_DST_PORT"]))]
    q = sonde("query", "--data-dir", data, "flows", "--port", "53", "--limit", "100000",
              "--format", "jsonl")
    assert q.returncode == 0, q.stderr
    assert sorted(map(_flow_key, _jsonl(q.stdout))) == sorted(map(_flow_key, port53))
    # Paging: two pages are the whole list, in order.
    q1 = _jsonl(sonde("query", "--data-dir", data, "flows", "--limit", "2", "--format", "jsonl").stdout)
    q2 = _jsonl(sonde("query", "--data-dir", data, "flows", "--offset", "2", "--limit", "100000",
                      "--format", "jsonl").stdout)
    assert len(q1) + len(q2) == len(want)
    # A time range after the capture holds nothing.
    q = sonde("query", "--data-dir", data, "flows", "--from", "2099-01-01", "--format", "jsonl")
    assert q.returncode == 0 and q.stdout == ""
    for bad, says in [(["--from", "yesterday"], "not a time"), (["--host", "example.com"], "not an IPv4"),
                      (["--proto", "tcpx"], "--proto"), (["--app", "NoSuchApp"], "--app")]:
        q = sonde("query", "--data-dir", data, "flows", *bad)
        assert q.returncode != 0 and says in q.stderr, q.stderr


def _count(sonde, data) -> int:
    q = sonde("query", "--data-dir", data, "apps", "--limit", "100000", "--format", "jsonl")
    assert q.returncode == 0, q.stderr
    return sum(a["FLOWS"] for a in _jsonl(q.stdout))


def test_kill_9_during_ingest_loses_nothing_readable(sonde_bin, sonde, workdir):
    """Heavy ingest (a random-source flood through a small table: every packet evicts a flow
    into the history), read while running, then SIGKILL: everything read before the kill is
    still there after, and the store opens for writing with no repair step."""
    data = workdir / "data"
    proc = subprocess.Popen(
        [str(sonde_bin), "--synthetic", "hosts=1000,size=64,packets=2000000000,random-src",
         "--max-flows", "20000", "--data-dir", data, "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        seen = 0
        while time.time() < deadline and seen < 200_000:
            time.sleep(1)
            assert proc.poll() is None, proc.stderr.read().decode()
            seen = _count(sonde, data) if (data / "VERSION").exists() else 0
        assert seen >= 100_000, f"only {seen} flows stored"
        before = sonde("query", "--data-dir", data, "flows", "--limit", str(seen), "--format", "jsonl")
        assert before.returncode == 0, before.stderr
        time.sleep(0.5)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    after_count = _count(sonde, data)
    assert after_count >= seen
    after = sonde("query", "--data-dir", data, "flows", "--limit", str(seen), "--format", "jsonl")
    assert after.stdout == before.stdout
    # Opening for writing again needs no repair step and appends after what is there.
    p = sonde("--synthetic", "hosts=10,size=64,packets=1000", "--data-dir", data, "-q")
    assert p.returncode == 0, p.stderr
    assert _count(sonde, data) >= after_count + 10


def test_corrupted_and_foreign_files_are_named(sonde, corpus, workdir):
    pcap = corpus / "dns_doh.pcap"
    if not pcap.exists():
        pytest.skip("dns_doh.pcap not in the corpus")
    data = workdir / "data"
    for _ in range(2):
        assert sonde("-r", pcap, "--data-dir", data, "-q").returncode == 0
    # Start a second segment by hand so the first is an older, closed one.
    segs = sorted((data / "flows").iterdir())
    second = segs[-1].with_name(f"{int(segs[-1].stem) + 1:010d}.sfl")
    second.write_bytes(segs[-1].read_bytes()[:16])
    raw = bytearray(segs[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segs[0].write_bytes(bytes(raw))
    q = sonde("query", "--data-dir", data, "flows")
    assert q.returncode != 0
    assert str(segs[0]) in q.stderr and "corrupted data" in q.stderr, q.stderr
    second.unlink()
    segs[0].unlink()
    (data / "flows" / "README.txt").write_text("mine")
    for cmd in (["query", "--data-dir", data, "flows"], ["-r", pcap, "--data-dir", data, "-q"]):
        p = sonde(*cmd)
        assert p.returncode != 0 and "README.txt" in p.stderr, p.stderr
    # A directory that is not a data directory is not taken over.
    other = workdir / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    p = sonde("-r", pcap, "--data-dir", other, "-q")
    assert p.returncode != 0 and "thesis.tex" in p.stderr, p.stderr
    q = sonde("query", "--data-dir", workdir / "nothing-here", "flows")
    assert q.returncode != 0 and "not a sonde data directory" in q.stderr, q.stderr
    # Time series retention: four row counts, each large enough to rebuild its rollups.
    fresh = workdir / "fresh"
    for bad, says in [("1,2,3", "four row counts"), ("10,60,24,1", "retention")]:
        p = sonde("-r", pcap, "--data-dir", fresh, "--series-retention", bad, "-q")
        assert p.returncode != 0 and says in p.stderr, p.stderr
    p = sonde("-r", pcap, "--data-dir", fresh, "--series-retention", "120,60,24,7", "-q")
    assert p.returncode == 0, p.stderr


def _series(sonde, data, *args):
    q = sonde("query", "--data-dir", data, "series", "--format", "jsonl", *args)
    assert q.returncode == 0, q.stderr
    return _jsonl(q.stdout)


def _sums(points):
    s = collections.Counter()
    for p in points:
        for k in ("BYTES_IN", "BYTES_OUT", "PACKETS_IN", "PACKETS_OUT", "FLOWS"):
            s[k] += p.get(k, 0)
    return s


def test_time_series_add_up_at_every_resolution(sonde, corpus, workdir):
    """Per-second rows, and their 1 min / 1 h / 1 day rollups, add up to the engine's counters
    and to each host's counters in --hosts-out; seconds without traffic are gaps, not zeros."""
    pcap = corpus / "tor.pcap"  # about 10 minutes of traffic
    if not pcap.exists():
        pytest.skip("tor.pcap not in the corpus")
    data = workdir / "data"
    stats = workdir / "stats.json"
    hosts = workdir / "hosts.jsonl"
    flows = workdir / "flows.jsonl"
    p = sonde("-r", pcap, "--data-dir", data, "--stats-json", stats, "--hosts-out", hosts,
              "--flows-out", flows, "-q")
    assert p.returncode == 0, p.stderr
    st = json.loads(stats.read_text())
    assert st["series"]["seconds"] > 30 and st["series"]["refused_seconds"] == 0
    recs = oracle.load_jsonl(str(flows))
    first = min(int(r["FIRST_SWITCHED"]) for r in recs)
    last = max(int(r["LAST_SWITCHED"]) for r in recs)
    # A range wider than the 1 s ring (an hour) and reaching past the data: the data is in it.
    span = ["--from", str(first - first % 86400), "--to", str(last + 86400)]
    per_res = {}
    for res in ("1s", "1m", "1h", "1d"):
        pts = _series(sonde, data, "--resolution", res, *span)
        per_res[res] = _sums(pts)
        assert per_res[res]["BYTES_IN"] + per_res[res]["BYTES_OUT"] == st["ip_bytes"], res
        assert per_res[res]["PACKETS_IN"] + per_res[res]["PACKETS_OUT"] == st["ip_packets"], res
        assert per_res[res]["FLOWS"] == st["flows"]["created"], res
    assert per_res["1s"] == per_res["1m"] == per_res["1h"] == per_res["1d"]
    secs = _series(sonde, data, "--resolution", "1s", "--from", str(first), "--to", str(last + 1))
    gaps = [p for p in secs if p.get("GAP")]
    assert gaps and len(gaps) < len(secs), "seconds without traffic are gaps"
    assert all("BYTES_IN" not in g for g in gaps)
    # Every host's series adds up to its counters (a host purged and seen again has a record
    # for each stay).
    per_host = collections.defaultdict(lambda: [0, 0])
    for h in oracle.load_jsonl(str(hosts)):
        vlan = int(h["VLAN_ID"])
        key = h["IP_ADDR"] if vlan == 0 else f"{h['IP_ADDR']}@{vlan}"
        per_host[key][0] += int(h["SENT_BYTES"])
        per_host[key][1] += int(h["RCVD_BYTES"])
    busiest = sorted(per_host, key=lambda k: -sum(per_host[k]))[:5] + sorted(per_host)[:3]
    for key in busiest:
        s = _sums(_series(sonde, data, "--family", "hosts", "--key", key, "--resolution", "1h", *span))
        assert [s["BYTES_OUT"], s["BYTES_IN"]] == per_host[key], key
    # Applications: every flow is counted once, when it ended.
    keys = sonde("query", "--data-dir", data, "series", "--family", "apps", "--list").stdout.split("\n")
    total = 0
    for k in filter(None, keys):
        total += _sums(_series(sonde, data, "--family", "apps", "--key", k, "--resolution", "1h", *span))["FLOWS"]
    assert total == st["flows"]["created"]


def test_exporter_series_and_gauges(sonde_bin, sonde, workdir):
    """Collected NetFlow: the exporter's series counts its records, packets and bytes; the
    interface gauges are recorded."""
    from test_collect import _free_udp_port, _replay, _tshark_sum

    pcap = Path(oracle.__file__).resolve().parents[2].parent / "shared" / "corpus" / "flowproto" / "akvorado_netflow_nfv5.pcap"
    data = workdir / "data"
    port = _free_udp_port()
    proc = subprocess.Popen([str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "--duration", "3",
                             "--data-dir", data, "-q"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    _replay([pcap], port)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    keys = [k for k in sonde("query", "--data-dir", data, "series", "--family", "exporters",
                             "--list").stdout.split("\n") if k]
    assert len(keys) == 1 and keys[0].startswith("127.0.0.1:"), keys
    pkts, octets, count = _tshark_sum(pcap, 9990, ["cflow.packets", "cflow.octets", "cflow.count"])
    # The records' own times are old: read the day they are in.
    s = collections.Counter()
    for res in ("1d",):
        pts = _series(sonde, data, "--family", "exporters", "--key", keys[0], "--resolution", res,
                      "--from", "2000-01-01", "--to", "2100-01-01")
        s = _sums(pts)
    assert s["FLOWS"] == count == 29
    assert s["PACKETS_IN"] + s["PACKETS_OUT"] == pkts
    assert s["BYTES_IN"] + s["BYTES_OUT"] == octets
    gauges = _series(sonde, data, "--key", "gauge:active_flows", "--resolution", "1d",
                     "--from", "2000-01-01", "--to", "2100-01-01")
    assert any(p.get("MAX_BYTES_IN", 0) > 0 for p in gauges), gauges[-3:]


def _host_totals(path):
    t = {}
    for r in oracle.load_jsonl(str(path)):
        a = t.setdefault((r["IP_ADDR"], r["VLAN_ID"]), [0, 0, 0, 0, 0, 0])
        for i, k in enumerate(("SENT_BYTES", "RCVD_BYTES", "SENT_PKTS", "RCVD_PKTS",
                               "FLOWS_AS_CLIENT", "FLOWS_AS_SERVER")):
            a[i] += int(r[k])
    return t


@pytest.mark.parametrize("threads", [1, 2])
def test_every_host_series_adds_up_to_its_counters(sonde, corpus, workdir, threads):
    """Each host's per-second series sums to what --hosts-out says it sent and received, for
    every host. With two shards most hosts have flows on both, and a second's rows of one
    host from the two shards are summed before they are written."""
    pcap = corpus / "telegram.pcap"  # 59 s, 24 hosts: none is purged during the run
    if not pcap.exists():
        pytest.skip("telegram.pcap not in the corpus")
    data = workdir / "data"
    hosts = workdir / "hosts.jsonl"
    p = sonde("-r", pcap, "--threads", threads, "--data-dir", data, "--hosts-out", hosts, "-q")
    assert p.returncode == 0, p.stderr
    want = _host_totals(hosts)
    assert len(want) > 10
    span = ["--resolution", "1s", "--from", "0", "--to", "4000000000"]
    for (addr, vlan), t in want.items():
        key = addr if int(vlan) == 0 else f"{addr}@{vlan}"
        got = _sums(_series(sonde, data, "--family", "hosts", "--key", key, *span))
        assert [got["BYTES_OUT"], got["BYTES_IN"], got["PACKETS_OUT"], got["PACKETS_IN"]] == t[:4], key


@pytest.mark.parametrize("threads", [1, 2])
def test_host_cache_gives_returning_hosts_their_counters(sonde, corpus, workdir, threads):
    """Hosts leave memory at the end of a run and are kept in the host cache; when the same
    capture is read again into the same data directory, every host comes back with the
    counters of its first visit added: twice what one run counts."""
    pcap = corpus / "dns_doh.pcap"  # a short capture: no host is purged during the run
    if not pcap.exists():
        pytest.skip("dns_doh.pcap not in the corpus")
    data = workdir / "data"
    runs = []
    for i in (1, 2):
        hosts = workdir / f"hosts{i}.jsonl"
        stats = workdir / f"stats{i}.json"
        p = sonde("-r", pcap, "--threads", threads, "--data-dir", data, "--hosts-out", hosts,
                  "--stats-json", stats, "-q")
        assert p.returncode == 0, p.stderr
        runs.append((_host_totals(hosts), json.loads(stats.read_text())["host_cache"]))
    (one, c1), (two, c2) = runs
    assert one and set(one) == set(two)
    for k in one:
        assert two[k] == [2 * v for v in one[k]], k
    assert c1["restored"] == 0 and c1["cached"] == len(one)
    assert c2["restored"] >= len(one) and c2["cached"] == len(one)


def _latest_host_rows(path):
    t = {}
    for r in oracle.load_jsonl(str(path)):
        t[(r["IP_ADDR"], r["VLAN_ID"])] = [int(r[k]) for k in (
            "SENT_BYTES", "RCVD_BYTES", "SENT_PKTS", "RCVD_PKTS", "FLOWS_AS_CLIENT",
            "FLOWS_AS_SERVER", "FIRST_SEEN", "LAST_SEEN")]
    return t


def test_hosts_purged_by_one_shard_and_seen_by_another_keep_all_their_counters(sonde, corpus,
                                                                               workdir):
    """With two shards a host has flows on both: one shard purges it while the other still
    sees it, and whether the other got the purged counters back depends on timing. With
    --data-dir every --hosts-out record covers all of the host's visits, so each host's last
    record equals what one shard without a cache counts for it, on every run."""
    pcap = corpus / "tor.pcap"  # 5 of its hosts are purged by one shard of two during the run
    if not pcap.exists():
        pytest.skip("tor.pcap not in the corpus")
    want = workdir / "want.jsonl"
    p = sonde("-r", pcap, "--hosts-out", want, "-q")
    assert p.returncode == 0, p.stderr
    want = _latest_host_rows(want)
    assert len(want) > 5
    purged = 0
    for i in range(4):
        data, got = workdir / f"data{i}", workdir / f"got{i}.jsonl"
        p = sonde("-r", pcap, "--threads", 2, "--data-dir", data, "--hosts-out", got, "-q")
        assert p.returncode == 0, p.stderr
        purged += sum(1 for r in oracle.load_jsonl(str(got)) if r["PURGED"])
        assert _latest_host_rows(got) == want, f"run {i}"
    assert purged > 0, "no host was purged: the capture no longer tests the race"


def test_host_cache_is_bounded_by_host_cache_max(sonde, workdir):
    """A flood of random sources fills the host cache at the end of the run; --host-cache-max
    keeps it to that many hosts, the rest counted as evicted, and a reopen with a lower
    capacity evicts down to it."""
    data = workdir / "data"
    counts = []
    for cap in ("2k", "500"):
        stats = workdir / f"stats-{cap}.json"
        p = sonde("--synthetic", "hosts=20k,size=64,packets=100k,random-src", "--data-dir", data,
                  "--host-cache-max", cap, "--stats-json", stats, "-q")
        assert p.returncode == 0, p.stderr
        counts.append(json.loads(stats.read_text())["host_cache"])
    first, second = counts
    assert first["stored"] > 10_000 and 1875 <= first["cached"] <= 2000
    assert first["evicted"] == first["stored"] - first["cached"]
    assert second["cached"] <= 500 and second["evicted"] >= first["cached"] - 500
    p = sonde("--synthetic", "hosts=10", "--data-dir", data, "--host-cache-max", "2000M")
    assert p.returncode != 0 and "--host-cache-max" in p.stderr


def test_rest_api_serves_the_flow_history(sonde_bin, sonde, corpus, workdir):
    """/api/v1/history/*: a first run stores its flows; a second sonde serving the same data
    directory answers with the flows of --flows-out (paged, filtered) and the same top lists."""
    import urllib.error
    import urllib.request
    from conftest import free_port

    data, want = _store(sonde, corpus, workdir, "android.pcap")
    assert len(want) > 10
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", corpus / "http_connect.pcap", "--http", f"127.0.0.1:{port}",
         "--no-auth", "--data-dir", data, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    try:
        deadline = time.time() + 20
        while True:
            try:
                status, health = get("/api/v1/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.time() < deadline, "the server did not start"
                time.sleep(0.1)
        assert health["history"] is True
        # Every stored flow, in pages of 7, equals --flows-out's records.
        got, offset = [], 0
        while True:
            status, page = get(f"/api/v1/history/flows?limit=7&offset={offset}")
            assert status == 200, page
            got += page["flows"]
            offset += 7
            if not page["more"]:
                break
            assert len(page["flows"]) == 7
        assert sorted(map(_flow_key, got)) == sorted(map(_flow_key, want))
        # Filters: port 53 and a time range after the capture.
        status, page = get("/api/v1/history/flows?port=53&limit=1000")
        port53 = [r for r in want if 53 in (int(r["L4_SRC_PORT"]), int(r["L4_DST_PORT"]))]
        assert port53 and sorted(map(_flow_key, page["flows"])) == sorted(map(_flow_key, port53))
        assert get("/api/v1/history/flows?from=2099-01-01")[1]["flows"] == []
        # Top hosts: the per-host sums of the flows file.
        per_host = _bytes_per_host(want)
        status, top = get("/api/v1/history/top/hosts?limit=5")
        assert status == 200, top
        assert [h["bytes"] for h in top["rows"]] == sorted(per_host.values(), reverse=True)[:5]
        for h in top["rows"]:
            assert per_host[h["name"]] == h["bytes"]
        status, apps = get("/api/v1/history/top/apps?sort=flows&limit=1000")
        assert sum(a["flows"] for a in apps["rows"]) == len(want)
        # Bad parameters are named.
        for path, says in [("/api/v1/history/flows?port=http", "port="),
                           ("/api/v1/history/flows?from=yesterday", "from="),
                           ("/api/v1/history/flows?host=example.com", "host="),
                           ("/api/v1/history/flows?limit=0", "limit="),
                           ("/api/v1/history/flows?offset=18446744073709551615", "offset="),
                           ("/api/v1/history/top/hosts?offset=18446744073709551615", "offset="),
                           ("/api/v1/history/top/hosts?sort=size", "sort="),
                           ("/api/v1/history/top/ports", "top/ports")]:
            status, err = get(path)
            assert status == 400 and says in err["error"], (path, err)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def _churn_pcap(path: Path, minutes: int = 40, pps: int = 20, per_window: int = 100):
    """UDP from `per_window` client addresses a minute to 10 servers; every 5th minute brings
    back the clients of 10 minutes before (hosts that lose their series column and return)."""
    import random
    import struct
    rnd = random.Random(5)
    t0 = 1_700_006_400
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for sec in range(minutes * 60):
            w = sec // 60
            base = (w - 10 if w % 5 == 4 and w >= 10 else w) * per_window
            for i in range(pps):
                c = base + rnd.randrange(per_window)
                src = struct.pack("!I", (10 << 24) + c)
                dst = struct.pack("!I", (20 << 24) + rnd.randrange(10))
                payload = b"q" * (10 + c % 50)
                ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0, 64, 17, 0, src, dst)
                udp = struct.pack("!HHHH", 1024 + c % 60000, 53, 8 + len(payload), 0)
                pkt = bytes(6) + bytes.fromhex("020000000002") + b"\x08\x00" + ip + udp + payload
                f.write(struct.pack("<IIII", t0 + sec, i * (1_000_000 // pps), len(pkt), len(pkt)) + pkt)


def test_idle_host_series_give_their_columns_and_stay_readable(sonde, workdir):
    """With hosts churning, idle hosts' series columns go to new hosts: the columns follow the
    hosts active lately, not every host seen, and every host's series (returning ones too)
    still adds up to its counters at 1 min, 1 h and 1 day."""
    pcap = workdir / "churn.pcap"
    _churn_pcap(pcap)
    data, stats, hosts = workdir / "data", workdir / "stats.json", workdir / "hosts.jsonl"
    p = sonde("-r", pcap, "--data-dir", data, "--stats-json", stats, "--hosts-out", hosts,
              "--series-reuse-after", "120", "--idle-timeout", "30", "-q")
    assert p.returncode == 0, p.stderr
    st = json.loads(stats.read_text())["series"]
    # A host that comes back and got its counters from the host cache in time has a record
    # with the same FIRST_SEEN that holds both stays; otherwise a record for each stay.
    stays = {}
    for h in oracle.load_jsonl(str(hosts)):
        stays[(h["IP_ADDR"], h["FIRST_SEEN"])] = (int(h["SENT_BYTES"]), int(h["RCVD_BYTES"]))
    per_host = collections.defaultdict(lambda: [0, 0])
    for (ip, _), (sent, rcvd) in stays.items():
        per_host[ip][0] += sent
        per_host[ip][1] += rcvd
    clients = [k for k in per_host if k.startswith("10.")]
    assert len(clients) > 2500, len(clients)
    # About 100 clients a minute, idle 120 s before reuse: a few hundred columns.
    assert st["host_columns"] < 800, st
    assert st["reused_columns"] >= len(per_host) - st["host_columns"], st
    listed = set(filter(None, sonde("query", "--data-dir", data, "series", "--family", "hosts",
                                    "--list").stdout.split("\n")))
    assert listed == set(per_host)
    span = ["--from", "1700006400", "--to", str(1700006400 + 86400)]
    returning = [f"10.0.{c >> 8}.{c & 255}" for c in (400, 450, 499)]  # minute 4, back at 14
    for key in sorted(clients)[::97] + returning + ["20.0.0.1"]:
        for res in ("1m", "1h", "1d"):
            s = _sums(_series(sonde, data, "--family", "hosts", "--key", key, "--resolution", res, *span))
            assert [s["BYTES_OUT"], s["BYTES_IN"]] == per_host[key], (key, res)
