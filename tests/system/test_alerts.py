"""Alerts (issue 14): detections become alerts that are stored, queried and served; a flood of
scanners gives a bounded number of alerts; an exclusion set during a run takes effect at once;
notifications reach real receivers on 127.0.0.1 (HTTP, syslog, SMTP, a command); misbehaving Lua
scripts are stopped while packets keep flowing; a killed run's alerts are closed on restart;
bad flags and files give one clear error.

Captures are written here (scan_pcap.py): every scanner and its timing is known, so every count
below follows from the capture and the documented rules (burst 20, then 10 a minute per type;
hold 30 s), not from sonde's output."""

from __future__ import annotations

import collections
import email
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import scan_pcap
from conftest import free_port

T0 = 1_700_000_000.0
TARGET = "192.0.2.1"


def jsonl(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(sonde_bin, *args, timeout=300):
    return subprocess.run([str(sonde_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def scanner(i: int) -> str:
    a = i + 1
    return f"10.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"


@pytest.fixture(scope="module")
def five_scanners(tmp_path_factory) -> Path:
    """5 sources, each scanning 40 ports of TARGET, one a second."""
    p = tmp_path_factory.mktemp("scan5") / "scan5.pcap"
    scan_pcap.write(p, scan_pcap.scanners(5, 40, T0, 5.0, TARGET))
    return p


def pair(records):
    """Alert id -> (start record, end record); each id must have exactly one of each."""
    by = collections.defaultdict(list)
    for r in records:
        by[r["id"]].append(r)
    out = {}
    for i, rs in by.items():
        assert [r["event"] for r in rs] == ["start", "end"], rs
        out[i] = (rs[0], rs[1])
    return out


def test_detections_become_alerts_stored_and_queried(sonde_bin, five_scanners, workdir):
    data, out = workdir / "data", workdir / "alerts.jsonl"
    p = run(sonde_bin, "-r", five_scanners, "-q", "--data-dir", data, "--alerts-out", out,
            "--top-interval", "10", "--stats-json", workdir / "s.json")
    assert p.returncode == 0, p.stderr
    alerts = pair(jsonl(out))
    scans = [s for s, _ in alerts.values() if s["type"] == "scan.port"]
    assert sorted(s["host"] for s in scans) == sorted(scanner(i) for i in range(5))
    for s, e in alerts.values():
        assert s["state"] == "engaged" and e["state"] == "released"
        assert s["entity"] == {"kind": "host", "value": s["host"]}
        assert s["source"] == "analytics" and s["severity"] in ("warning", "error")
        assert s["start"] >= int(T0) and e["end"] >= s["start"]
        assert s["host"] in s["summary"]
    for s in scans:
        assert s["targets"] == 40, s
    # The store answers the same alerts, released, with their final evidence.
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--format", "jsonl")
    assert q.returncode == 0, q.stderr
    stored = {r["id"]: r for r in jsonl_text(q.stdout)}
    assert set(stored) == set(alerts)
    for i, (_, e) in alerts.items():
        assert stored[i]["state"] == "released" and stored[i]["end"] == e["end"]
        assert stored[i]["evidence"] == e["evidence"]
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--type", "scan.*", "--format",
            "jsonl")
    assert sorted(r["host"] for r in jsonl_text(q.stdout)) == sorted(s["host"] for s in scans)
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--severity", "error")
    assert q.returncode == 0 and len(q.stdout.strip().splitlines()) == 1, q.stdout  # header only
    # A range after every alert ended holds none of them.
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--from", int(T0) + 3600,
            "--format", "jsonl")
    assert q.stdout.strip() == ""


def jsonl_text(text: str):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_ten_thousand_scanners_give_a_bounded_number_of_alerts(sonde_bin, workdir):
    """10,000 sources scan over 120 s. Per type, the engine lets 20 alerts through at once and
    then 10 a minute: at most 20 + 10 * 120 / 60 = 40 per type, whatever the number of
    scanners; the rest are counted and summed up in one alerts.suppressed alert per type."""
    pcap = workdir / "scan10k.pcap"
    scan_pcap.write(pcap, scan_pcap.scanners(10_000, 40, T0, 120.0, TARGET))
    out, stats = workdir / "alerts.jsonl", workdir / "s.json"
    p = run(sonde_bin, "-r", pcap, "-q", "--alerts-out", out, "--top-interval", "10",
            "--stats-json", stats, timeout=600)
    assert p.returncode == 0, p.stderr
    s = json.loads(stats.read_text())
    detections, a = s["analytics"]["detections"], s["alerts"]
    assert detections["scan.port"] == 10_000, detections
    alerts = pair(jsonl(out))
    kinds = collections.Counter(st["type"] for st, _ in alerts.values())
    for t in ("scan.port", "noisy_host"):
        assert 20 <= kinds[t] <= 40, kinds
        # Every detection is accounted for: engaged or refused by the rate limit.
        assert a["engaged"][t] + a["rate_limited"].get(t, 0) == detections[t], (t, a)
    suppressed = [e for _, e in alerts.values() if e["type"] == "alerts.suppressed"]
    assert sorted(e["entity"]["value"] for e in suppressed) == ["noisy_host", "scan.port"]
    for e in suppressed:
        assert e["evidence"]["refused"] == a["rate_limited"][e["entity"]["value"]]
    assert len(alerts) <= 2 * 40 + 2


class Hook(http.server.BaseHTTPRequestHandler):
    """Records every POST (path, headers, JSON body); answers `status`."""
    got: list = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).got.append((self.path, dict(self.headers), json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *a):
        pass


def serve(handler):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def smtp_server(box: list):
    try:
        from aiosmtpd.controller import Controller
    except ImportError:
        pytest.fail("aiosmtpd is missing: run scripts/setup-test-deps.sh")

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            box.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
            return "250 OK"

    c = Controller(Handler(), hostname="127.0.0.1", port=free_port())
    c.start()
    return c


def test_notifications_reach_webhook_syslog_smtp_and_a_command(sonde_bin, five_scanners,
                                                                 workdir):
    class H(Hook):
        got = []
    web = serve(H)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    mails: list = []
    smtp = smtp_server(mails)
    saved = workdir / "cmd"
    saved.mkdir()
    prog = workdir / "save.py"
    prog.write_text(f"#!{sys.executable}\nimport sys, os, time\n"
                    f"d = sys.stdin.read()\nopen(os.path.join({str(saved)!r}, "
                    f"str(time.monotonic_ns()) + '.json'), 'w').write(d)\n")
    prog.chmod(0o755)
    out = workdir / "alerts.jsonl"
    try:
        p = run(sonde_bin, "-r", five_scanners, "-q", "--alerts-out", out, "--top-interval", "10",
                "--notify", f"webhook+http://127.0.0.1:{web.server_port}/hook?format=alertmanager",
                "--notify", f"syslog+udp://127.0.0.1:{udp.getsockname()[1]}",
                "--notify", f"smtp://127.0.0.1:{smtp.port}?from=sonde@test&to=noc@test",
                "--notify", f"exec:{prog}", "--stats-json", workdir / "s.json")
        assert p.returncode == 0, p.stderr
        records = jsonl(out)
        n = len(records)
        assert n >= 10
        grams = []
        deadline = time.time() + 10
        while len(grams) < n and time.time() < deadline:
            try:
                grams.append(udp.recv(4096))
            except socket.timeout:
                pass
    finally:
        web.shutdown()
        smtp.stop()
        udp.close()
    # Webhook, Alertmanager's format: one request per event, firing then resolved.
    assert len(H.got) == n
    firing = [b for _, _, b in H.got if b["status"] == "firing"]
    resolved = [b for _, _, b in H.got if b["status"] == "resolved"]
    assert len(firing) == len(resolved) == n // 2
    assert all(path == "/hook" for path, _, _ in H.got)
    starts = {(r["type"], r["entity"]["value"]) for r in records if r["event"] == "start"}
    assert {(b["alerts"][0]["labels"]["alertname"], b["alerts"][0]["labels"]["entity"])
            for b in firing} == starts
    # Syslog: RFC 5424, MSGID the type, the alert id in the structured data.
    assert len(grams) == n
    ids = collections.Counter()
    for g in grams:
        text = g.decode("utf-8")
        assert text.startswith("<") and ">1 " in text[:6], text
        parts = text.split(" ", 6)
        assert parts[5] in ("scan.port", "noisy_host"), text
        sd = parts[6]
        assert sd.startswith("[sonde@32473 ")
        ids[sd.split('id="', 1)[1].split('"', 1)[0]] += 1
    assert set(ids.values()) == {2} and len(ids) == n // 2
    # E-mail: one per event, subject names severity, type and entity; the body holds the JSON.
    assert len(mails) == n
    for frm, to, content in mails:
        assert frm == "sonde@test" and to == ["noc@test"]
        m = email.message_from_bytes(content)
        subj = m["Subject"]
        assert subj.startswith("[sonde] ") and ("engaged" in subj or "released" in subj), subj
        assert any(f"{r['type']} {r['entity']['value']}" in subj for r in records), subj
    # The command: the alert as JSON on its standard input, exactly the record.
    got = [json.loads(f.read_text()) for f in sorted(saved.iterdir())]
    assert sorted(json.dumps(g, sort_keys=True) for g in got) == sorted(
        json.dumps(r, sort_keys=True) for r in records)
    s = json.loads((workdir / "s.json").read_text())
    sent = {t["target"].split(":")[0]: t["sent"] for t in s["alerts"]["notify"]}
    assert sent == {"webhook+http": n, "syslog+udp": n, "smtp": n, "exec": n}, s["alerts"]


def test_a_dead_endpoint_is_retried_counted_and_never_blocks(sonde_bin, five_scanners, workdir):
    dead = free_port()
    t = time.time()
    p = run(sonde_bin, "-r", five_scanners, "-q", "--top-interval", "10", "--notify",
            f"webhook+http://127.0.0.1:{dead}/", "--stats-json", workdir / "s.json")
    took = time.time() - t
    assert p.returncode == 0, p.stderr
    (n,) = json.loads((workdir / "s.json").read_text())["alerts"]["notify"]
    assert n["sent"] == 0 and n["failures"] >= 1 and n["retries"] >= 1, n
    assert "refused" in (n["last_error"] or ""), n
    # The run waits at most 5 s for deliveries at the end, whatever the endpoint does.
    assert took < 30, took
    assert "webhook" in p.stderr  # one line saying deliveries fail (rate limited)


GOOD = """
local n = 0
function every_second(now)
  n = n + 1
  if n == 1 then
    sonde.alert{type = "alive", entity = "probe", entity_kind = "interface",
                summary = "the good script runs", evidence = {hosts = #sonde.hosts()}}
  end
end
"""

BAD = {
    "loop.lua": "function every_second(now) while true do end end\n",
    "huge.lua": "function every_second(now) local t = {} for i = 1, 1e9 do t[i] = i end end\n",
    "oops.lua": "function every_second(now)\n  local x = nil\n  return x.field\nend\n",
    "file.lua": "function every_second(now) local f = io.open('/etc/passwd') end\n",
    "exec.lua": "function every_second(now) os.execute('touch /tmp/sonde-pwned') end\n",
}


def test_misbehaving_scripts_are_stopped_and_reported_while_packets_flow(sonde_bin,
                                                                           five_scanners,
                                                                           workdir):
    paths = []
    for name, text in {"good.lua": GOOD, **BAD}.items():
        paths += ["--script", workdir / name]
        (workdir / name).write_text(text)
    out, stats = workdir / "alerts.jsonl", workdir / "s.json"
    port = free_port()
    proc = subprocess.Popen([str(sonde_bin), "-r", str(five_scanners), "-q", "--alerts-out",
                             str(out), "--stats-json", str(stats), "--http", f"127.0.0.1:{port}",
                             "--no-auth", "--duration", "6", *map(str, paths)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    s = json.loads(stats.read_text())
    assert s["packets"] == 5 * 40, "every packet was counted"
    status = {x["name"]: x for x in s["alerts"]["scripts"]}
    assert status["good.lua"]["enabled"] and status["good.lua"]["calls"] >= 3
    reasons = {n: status[n]["disabled_reason"] or "" for n in BAD}
    assert all(not status[n]["enabled"] for n in BAD), status
    assert "budget" in reasons["loop.lua"], reasons
    assert "memory" in reasons["huge.lua"], reasons
    assert "oops.lua:3:" in reasons["oops.lua"], reasons
    assert "io" in reasons["file.lua"] and "exec.lua" in reasons["exec.lua"], reasons
    assert not os.path.exists("/tmp/sonde-pwned")
    for n in BAD:
        assert f"script {n}" in err, err
    alive = [r for r in jsonl(out) if r["type"] == "script.alive"]
    assert [r["event"] for r in alive] == ["start", "end"]
    assert alive[0]["source"] == "script:good.lua" and alive[0]["evidence"]["hosts"] == 6


def api(port, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
        return json.loads(text) if text else None


def wait_for(f, timeout=30, step=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = f()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out")


def test_exclusion_during_a_run_stops_alerts_at_once(sonde_bin, workdir):
    """A scans ports at 0 s and addresses at 9 s; B scans ports at 9.5 s. The capture is
    replayed at its pace. Once A's scan.port alert is engaged, an admin excludes scan alerts for
    A: the alert is released at once (in the answer of the very next request), A's address scan
    raises nothing (counted as excluded), B's scan does; A's noisy_host alert, of another type,
    is not touched."""
    a, b = "10.1.0.1", "10.2.0.1"
    frames = [(T0 + p * 1e-3, scan_pcap.syn(a, TARGET, 40000, 1 + p)) for p in range(40)]
    frames += [(T0 + 9 + p * 1e-3, scan_pcap.syn(a, f"192.0.2.{10 + p}", 40001, 80))
               for p in range(40)]
    frames += [(T0 + 9.5 + p * 1e-3, scan_pcap.syn(b, TARGET, 40002, 1 + p)) for p in range(40)]
    frames.sort()
    pcap = workdir / "two.pcap"
    scan_pcap.write(pcap, frames)
    listed = workdir / "listed.txt"
    listed.write_text("# B is on a list\n10.2.0.0/16\n")
    port = free_port()
    out, stats, data = workdir / "alerts.jsonl", workdir / "s.json", workdir / "data"
    proc = subprocess.Popen([str(sonde_bin), "-r", str(pcap), "-q", "--replay", "realtime",
                             "--top-interval", "2", "--alerts-out", str(out), "--stats-json",
                             str(stats), "--http", f"127.0.0.1:{port}", "--no-auth",
                             "--data-dir", str(data), "--alert-hosts", str(listed),
                             "--duration", "18"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def a_scan():
            try:
                r = api(port, "GET", "/api/v1/alerts?state=engaged&type=scan.port")
            except OSError:
                return None
            return [x for x in r["engaged"] if x["host"] == a]
        (alert,) = wait_for(a_scan, timeout=15)
        x = api(port, "POST", "/api/v1/admin/alerts/exclusions",
                {"type": "scan.*", "host": a, "comment": "our scanner"})
        assert x["id"] >= 1 and x["by"]
        after = api(port, "GET", f"/api/v1/alerts?type=scan.port&entity={a}")
        (same,) = [r for r in after["alerts"] if r["id"] == alert["id"]]
        assert same["state"] == "released" and same["released_by"] == f"exclusion {x['id']}"
        assert not after["engaged"]
        ex = api(port, "GET", "/api/v1/alerts/exclusions")["exclusions"]
        assert [e["host"] for e in ex] == [a] and ex[0]["removable"]
        noisy = api(port, "GET", f"/api/v1/alerts?state=engaged&type=noisy_host&entity={a}")
        assert len(noisy["engaged"]) == 1, "another type is not excluded"
        acked = api(port, "POST", f"/api/v1/admin/alerts/{noisy['engaged'][0]['id']}/ack")
        assert acked["acked_by"]
        wait_for(lambda: any(r["type"] == "host.listed" and r["host"] == b for r in
                             api(port, "GET", "/api/v1/alerts")["alerts"]), timeout=20)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                         timeout=10).read().decode()
        counters = api(port, "GET", "/api/v1/alerts")["counters"]
        for fam, key in (("engaged", "engaged"), ("released", "released")):
            for t, v in counters[key].items():
                assert f'sonde_alerts_{fam}_total{{type="{t}"}} {v}\n' in metrics, metrics
        assert counters["released"]["scan.port"] >= 1
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    recs = jsonl(out)
    scans = [(r["host"], r["event"]) for r in recs if r["type"] == "scan.port"]
    assert scans == [(a, "start"), (a, "end"), (b, "start"), (b, "end")], scans
    # A's second scan was refused (its interval closed at the end of the capture).
    s = json.loads(stats.read_text())
    assert s["alerts"]["excluded"] == {"scan.ip": 1}, s["alerts"]
    assert s["analytics"]["detections"]["scan.ip"] == 1
    # The exclusion and the acknowledgement are kept in the data directory.
    saved = json.loads((data / "alert-exclusions.json").read_text())
    assert [e["host"] for e in saved] == [a]
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--type", "noisy_host",
            "--entity", a, "--format", "jsonl")
    (n,) = jsonl_text(q.stdout)
    assert n["acked_by"] and n["state"] == "released"


def test_a_killed_run_leaves_no_alert_engaged(sonde_bin, five_scanners, workdir):
    data = workdir / "data"
    proc = subprocess.Popen([str(sonde_bin), "-r", str(five_scanners), "-q", "--replay",
                             "realtime", "--top-interval", "1", "--data-dir", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def started():
            files = list((data / "analytics").glob("*.alerts.jsonl")) if data.exists() else []
            return any('"event":"start"' in f.read_text() for f in files)
        wait_for(started, timeout=20)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--state", "engaged",
            "--format", "jsonl")
    assert jsonl_text(q.stdout), "the killed run left engaged alerts in the store"
    tiny = workdir / "tiny.pcap"
    scan_pcap.write(tiny, [(T0 + 100, scan_pcap.syn("10.9.9.9", TARGET, 1, 2))])
    p = run(sonde_bin, "-r", tiny, "-q", "--data-dir", data)
    assert p.returncode == 0, p.stderr
    q = run(sonde_bin, "query", "--data-dir", data, "alerts", "--format", "jsonl")
    rows = jsonl_text(q.stdout)
    assert rows and all(r["state"] == "released" for r in rows)
    assert all(r["released_by"] == "restart" for r in rows), rows
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)


BAD_ARGS = [
    (["--notify", "gopher://x"], r"--notify 'gopher://x': unknown scheme"),
    (["--notify", "smtp://127.0.0.1:{dead}?from=a@b&to=c@d"], r"cannot reach the SMTP server"),
    (["--notify", "exec:/nonexistent/prog"], r"--notify 'exec:/nonexistent/prog'"),
    (["--alert-exclude", "host=10.0.0.300"], r"--alert-exclude .*host="),
    (["--alert-exclude", "nope=1"], r"--alert-exclude .*unknown exclusion field"),
    (["--alert-limits", "burst=many"], r"--alert-limits .*burst"),
    (["--alert-hosts", "{listfile}"], r"--alert-hosts .* line 2: .*not an address"),
    (["--alert-hosts", "/nonexistent/list"], r"--alert-hosts: cannot read"),
    (["--script", "{syntax}"], r"--script .*syntax\.lua:2: "),
    (["--script", "/nonexistent/x.lua"], r"--script .*x\.lua"),
]


@pytest.mark.parametrize("args,says", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_alert_arguments(args, says, sonde_bin, five_scanners, workdir):
    import re
    listfile = workdir / "list.txt"
    listfile.write_text("10.0.0.1\nnot-an-address\n")
    syntax = workdir / "syntax.lua"
    syntax.write_text("function every_second(now)\n  x = = 1\nend\n")
    args = [a.format(dead=free_port(), listfile=listfile, syntax=syntax) for a in args]
    p = run(sonde_bin, "-r", five_scanners, "-q", *args, timeout=60)
    err = p.stderr
    assert p.returncode in (1, 2) and "panicked" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert re.search(says, lines[0]), lines[0]


def test_trigger_capture_files_are_listed_with_the_alert_and_downloadable(sonde_bin,
                                                                          five_scanners,
                                                                          workdir):
    """The five scans, then one unrelated packet a second for 10 s (the traffic's clock goes on,
    so each scan's detection ends and, with hold=0, its alert is released and its file closed
    while the run still serves the API)."""
    caps = workdir / "caps"
    caps.mkdir()
    pcap = workdir / "scans-then-quiet.pcap"
    frames = list(scan_pcap.scanners(5, 40, T0, 5.0, TARGET))
    frames += [(T0 + 6 + k, scan_pcap.syn("10.200.0.1", "192.0.2.99", 50000 + k, 443))
               for k in range(10)]
    scan_pcap.write(pcap, frames)
    port = free_port()
    proc = subprocess.Popen([str(sonde_bin), "-r", str(pcap), "-q", "--top-interval", "1",
                             "--alert-limits", "hold=0",
                             "--trigger-capture", "scan.port:attacker", "--trigger-dir", str(caps),
                             "--http", f"127.0.0.1:{port}", "--no-auth", "--duration", "15"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def listed():
            try:
                r = api(port, "GET", "/api/v1/alerts?type=scan.port")
            except OSError:
                return None
            done = [a for a in r["alerts"] if a.get("captures")
                    and all(c["complete"] for c in a["captures"])]
            return done if len(done) == 5 else None
        alerts = wait_for(listed, timeout=30)
        for a in alerts:
            (c,) = a["captures"]
            assert c["packets"] == 40, c  # the scanner's 40 SYNs
            url = f"http://127.0.0.1:{port}/api/v1/admin/alerts/{a['id']}/captures/{c['name']}"
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.headers["Content-Type"] == "application/vnd.tcpdump.pcap"
                body = r.read()
            assert body == (caps / c["name"]).read_bytes()
        for bad in ("..%2F..%2Fetc%2Fpasswd", "nope.pcap"):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/admin/alerts/"
                                       f"{alerts[0]['id']}/captures/{bad}", timeout=10)
                raise AssertionError(f"{bad} was served")
            except urllib.error.HTTPError as e:
                assert e.code == 404, (bad, e.code)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def nf5(seq: int, flows: int, now: int) -> bytes:
    """A NetFlow v5 datagram of `flows` records, whose header says `seq` flows came before."""
    import struct
    head = struct.pack("!HHIIIIBBH", 5, flows, 1000, now, 0, seq, 0, 0, 0)
    recs = b"".join(struct.pack("!4s4s4sHHIIIIHHBBBBHHBBH", bytes([10, 5, 0, 1]),
                                bytes([10, 5, 0, 2 + i]), b"\0\0\0\0", 1, 2, 3, 300, 500, 900,
                                40000 + i, 443, 0, 0x1b, 6, 0, 0, 0, 24, 24, 0)
                    for i in range(flows))
    return head + recs


def test_collector_checks_gap_and_silent_exporter(sonde_bin, workdir):
    """An exporter sends three datagrams whose sequence numbers skip 9 records, then stops: a
    collector.gap alert names it with the 9 lost records, and after exporter_silent=2 seconds an
    exporter.silent alert does."""
    port = free_port()
    out = workdir / "alerts.jsonl"
    proc = subprocess.Popen([str(sonde_bin), "--collect", f"udp://127.0.0.1:{port}", "-q",
                             "--alerts-out", str(out), "--alert-limits",
                             "hold=0,exporter_silent=2", "--duration", "9"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    src = f"127.0.0.1:{tx.getsockname()[1]}"
    try:
        time.sleep(1.0)
        now = int(time.time())
        for seq in (0, 1, 11):
            tx.sendto(nf5(seq, 1, now), ("127.0.0.1", port))
            time.sleep(0.2)
    finally:
        _, err = proc.communicate(timeout=60)
        tx.close()
    assert proc.returncode == 0, err
    recs = jsonl(out)
    gap = [r for r in recs if r["type"] == "collector.gap" and r["event"] == "start"]
    assert len(gap) == 1 and gap[0]["entity"] == {"kind": "exporter", "value": src}, recs
    assert gap[0]["evidence"]["lost_records"] == 9, gap
    silent = [r for r in recs if r["type"] == "exporter.silent" and r["event"] == "start"]
    assert len(silent) == 1 and silent[0]["entity"]["value"] == src, recs
    assert silent[0]["evidence"]["silent_s"] >= 2


def test_on_flow_hooks_see_every_ended_flow(sonde_bin, five_scanners, workdir):
    """A script's on_flow gets each ended flow (client, server, ports, packets) and raises an
    alert per client that tried port 1; its flows counter equals the flows sonde ended."""
    lua = workdir / "port1.lua"
    lua.write_text("""
local seen = 0
function on_flow(f)
  seen = seen + 1
  if f.server_port == 1 and f.proto == 6 then
    sonde.alert{type = "port1", entity = f.client, summary = f.client .. " tried port 1",
                evidence = {server = f.server, packets = f.packets[1], seen = seen}}
  end
end
""")
    out, stats = workdir / "alerts.jsonl", workdir / "s.json"
    p = run(sonde_bin, "-r", five_scanners, "-q", "--script", lua, "--alerts-out", out,
            "--stats-json", stats)
    assert p.returncode == 0, p.stderr
    recs = [r for r in jsonl(out) if r["type"] == "script.port1"]
    starts = sorted(r["entity"]["value"] for r in recs if r["event"] == "start")
    assert starts == sorted(scanner(i) for i in range(5)), recs
    assert all(r["evidence"]["server"] == TARGET and r["evidence"]["packets"] == 1 for r in recs)
    s = json.loads(stats.read_text())
    assert sum(s["flows"]["ended"].values()) == 200, s["flows"]
    # The last refresh of the last scanner's alert came after every flow before it was seen.
    ends = [r for r in recs if r["event"] == "end"]
    assert max(r["evidence"]["seen"] for r in ends) <= 200
    assert s["alerts"]["scripts"][0]["enabled"] and s["alerts"]["scripts"][0]["errors"] == 0
