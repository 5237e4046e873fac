#!/usr/bin/env python3
"""The soak test: sonde's whole job for an hour under steady load, with its memory and CPU
sampled, to show they stay flat. Run outside CI, as root (it makes a veth pair):

    scripts/soak.py                      # an hour, results under target/soak/
    scripts/soak.py --seconds 300        # a quick try

What runs at once, all on this machine:
- live capture: tcpreplay sends the loopback DPI captures (tests/dpi_loopback/, real clients
  and servers) in a loop at --pps onto one end of a veth pair, with new addresses each loop
  (--unique-ip), so flows keep being created and expired; sonde captures the other end with DPI
  on and history kept on disk (--data-dir), as a user runs it;
- API load: --api-rps requests a second spread over the REST API's pages, with a viewer token;
- logins: wrong passwords from 16 loopback addresses (127.0.1.x), 4 a second, and every
  30 s the right password from 127.0.0.1, which must still get in;
- a collector under garbage: random and mutated NetFlow v5/v9, IPFIX and sFlow datagrams on
  --collect udp://, and connections sending garbage or nothing to --collect tcp://.

Every 10 s it records sonde's RSS, CPU time, threads and open files, and a few /metrics
counters, in samples.csv. The summary (summary.md) gives RSS and CPU per 10-minute window and
the RSS trend over the second half; the script exits non-zero when sonde died, answered a
request with a 5xx, kept the admin out, or its RSS grew more than --max-growth, its CPU more than
--max-cpu-growth or its open files by more than 20 over the second half.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VETH_SONDE, VETH_PEER = "sondesoak0", "sondesoak1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def sh(*cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kw)


def free_port(kind=socket.SOCK_STREAM) -> int:
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Stop:
    """Set once, read by every load thread."""

    def __init__(self):
        self.event = threading.Event()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)

    def __bool__(self):
        return self.event.is_set()


# ---------------------------------------------------------------------------------------------
# Load generators


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.codes: Counter = Counter()
        self.latencies: list[tuple[float, float]] = []  # (time, seconds)
        self.notes: list[str] = []

    def add(self, code, started, took):
        with self.lock:
            self.codes[code] += 1
            self.latencies.append((started, took))

    def note(self, text):
        with self.lock:
            if len(self.notes) < 50:
                self.notes.append(text)


def request(port, method, path, body=None, headers=None, source=None, timeout=20):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    try:
        h = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read()
        return r.status, text, r.getheader("Set-Cookie")
    finally:
        c.close()


API_PATHS = [
    "/api/v1/interface", "/api/v1/hosts?limit=50", "/api/v1/flows?limit=100",
    "/api/v1/flows?limit=20&sort=bytes", "/api/v1/top/talkers", "/api/v1/top/applications",
    "/api/v1/top/ports", "/api/v1/interval", "/api/v1/series?family=interface",
    "/api/v1/series?family=apps", "/api/v1/alerts", "/api/v1/anomalies",
    "/api/v1/history/flows?from=-10m&limit=100", "/api/v1/history/top/hosts?from=-10m",
    "/api/v1/history/top/apps?from=-10m", "/api/v1/history/intervals?from=-10m",
    "/api/v1/filtersets", "/api/v1/sinks", "/metrics", "/api/v1/me",
]


def api_load(port, token, rps, stop: Stop, tally: Tally, seed):
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    paths = list(API_PATHS)
    next_at = time.monotonic()
    while not stop:
        path = rng.choice(paths)
        started = time.time()
        t0 = time.monotonic()
        try:
            code, body, _ = request(port, "GET", path, headers=headers)
            if code == 404 and path.startswith("/api/v1/hosts/"):
                code = "404 (host expired)"
            elif code >= 400:
                tally.note(f"{path}: {code} {body[:200]!r}")
            # Learn host addresses for /api/v1/hosts/{ip} as they come.
            if path.startswith("/api/v1/hosts?") and code == 200 and len(paths) < 40:
                for ip in re.findall(rb'"ip":"([0-9a-f.:]+)"', body)[:3]:
                    # A host seen now may have expired by the time it is asked for: a 404 then.
                    paths.append(f"/api/v1/hosts/{ip.decode()}")
        except (OSError, http.client.HTTPException) as e:
            code = type(e).__name__
            tally.note(f"{path}: {e!r}")
        tally.add(code, started, time.monotonic() - t0)
        next_at += 1.0 / rps
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            next_at = time.monotonic()


def login_load(port, user, password, stop: Stop, wrong: Tally, right: Tally):
    """Strangers guess from 127.0.1.x; the admin logs in from 127.0.0.1 every 30 s."""
    rng = random.Random(7)
    last_admin = 0.0
    while not stop:
        src = f"127.0.1.{rng.randrange(1, 17)}"
        started, t0 = time.time(), time.monotonic()
        try:
            code, _, _ = request(port, "POST", "/api/v1/login",
                                 {"user": rng.choice([user, "root", "nobody"]),
                                  "password": f"guess {rng.random()}"}, source=src)
        except (OSError, http.client.HTTPException) as e:
            code = type(e).__name__
        wrong.add(code, started, time.monotonic() - t0)
        if time.monotonic() - last_admin >= 30:
            last_admin = time.monotonic()
            started, t0 = time.time(), time.monotonic()
            try:
                code, body, cookie = request(port, "POST", "/api/v1/login",
                                             {"user": user, "password": password})
                if code == 200 and cookie:
                    h = {"Cookie": cookie.split(";")[0]}
                    me = request(port, "GET", "/api/v1/me", headers=h)[0]
                    out = request(port, "POST", "/api/v1/logout", headers=h)[0]
                    if me != 200 or out not in (200, 204):
                        right.note(f"after login: /me {me}, logout {out}")
                else:
                    right.note(f"admin login refused: {code} {body[:200]!r}")
            except (OSError, http.client.HTTPException) as e:
                code = type(e).__name__
                right.note(f"admin login: {e!r}")
            right.add(code, started, time.monotonic() - t0)
        stop.wait(0.25)


def garbage_datagram(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    body = rng.randbytes(rng.randrange(0, 1400))
    if kind == 0:
        return body
    if kind == 1:  # NetFlow v5 header claiming up to 30 records
        return struct.pack("!HHIIIIBBH", 5, rng.randrange(31), rng.getrandbits(32),
                           rng.getrandbits(32), 0, rng.getrandbits(32), 0, 0, 0) + body
    if kind == 2:  # NetFlow v9 with a template flowset of random fields
        fs = struct.pack("!HH", 0, 4 + len(body)) + body
        return struct.pack("!HHIIII", 9, rng.randrange(5), rng.getrandbits(32),
                           rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32)) + fs
    if kind == 3:  # IPFIX with a template set or a data set for a template it may have sent
        set_id = rng.choice([2, 3, 256, 257, rng.randrange(256, 65536)])
        s = struct.pack("!HH", set_id, 4 + len(body)) + body
        return struct.pack("!HHIII", 10, 16 + len(s), rng.getrandbits(32),
                           rng.getrandbits(32), rng.randrange(4)) + s
    if kind == 4:  # sFlow v5
        return struct.pack("!IIIIII", 5, 1, 0x7F000001, rng.getrandbits(32),
                           rng.getrandbits(32), rng.randrange(10)) + body
    # An IPFIX template for 256 and then data for it, with random field types and lengths.
    fields = b"".join(struct.pack("!HH", rng.randrange(1, 300), rng.choice([1, 2, 4, 8, 16, 65535]))
                      for _ in range(rng.randrange(1, 12)))
    tset = struct.pack("!HHHH", 2, 8 + len(fields), 256, len(fields) // 4) + fields
    dset = struct.pack("!HH", 256, 4 + len(body)) + body
    payload = tset + dset
    return struct.pack("!HHIII", 10, 16 + len(payload), int(time.time()), rng.getrandbits(32),
                       1) + payload


def collector_garbage(udp_port, tcp_port, rate, stop: Stop, tally: Tally):
    rng = random.Random(11)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    idle: list[socket.socket] = []
    next_tcp = time.monotonic()
    while not stop:
        for _ in range(max(1, rate // 10)):
            udp.sendto(garbage_datagram(rng), ("127.0.0.1", udp_port))
            tally.add("udp", 0, 0)
        if time.monotonic() >= next_tcp:
            next_tcp = time.monotonic() + 10
            # One connection sending garbage and closing; one more left idle (up to 20 kept).
            try:
                s = socket.create_connection(("127.0.0.1", tcp_port), timeout=5)
                s.sendall(rng.randbytes(rng.randrange(1, 20000)))
                s.close()
                tally.add("tcp", 0, 0)
                s = socket.create_connection(("127.0.0.1", tcp_port), timeout=5)
                idle.append(s)
                if len(idle) > 20:
                    idle.pop(0).close()
            except OSError as e:
                tally.add(type(e).__name__, 0, 0)
        stop.wait(0.1)
    udp.close()
    for s in idle:
        s.close()


# ---------------------------------------------------------------------------------------------
# Sampling


def proc_sample(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    cpu = (int(parts[11]) + int(parts[12])) / CLK_TCK
    rss = int(parts[21]) * PAGE
    threads = int(parts[17])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return cpu, rss, threads, fds


def rss_parts(pid) -> dict:
    """RSS split into anonymous, file-backed and shared memory (MiB), from /proc/PID/status: a
    step in RSS is told apart as heap (anon) or mapped files."""
    parts = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                parts[key] = round(int(value.split()[0]) / 1024, 1)
    return parts


def save_smaps(pid, path: Path):
    """Keeps /proc/PID/smaps (which mapping holds the memory) when RSS stepped up."""
    try:
        shutil.copyfile(f"/proc/{pid}/smaps", path)
    except OSError as e:
        print(f"soak: could not keep {path.name}: {e}", flush=True)


METRICS = ["sonde_packets_total", "sonde_capture_dropped_total", "sonde_flows_active",
           "sonde_hosts_active", "sonde_flows_created_total", "sonde_table_memory_bytes",
           "sonde_malformed_total", "sonde_http_refused_connections_total"]


def scrape(port, token):
    try:
        code, body, _ = request(port, "GET", "/metrics",
                                headers={"Authorization": f"Bearer {token}"}, timeout=10)
    except (OSError, http.client.HTTPException):
        return {}
    if code != 200:
        return {}
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or not line:
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{")[0]
        if base in METRICS or base.startswith("sonde_logins_total"):
            key = name if base.startswith("sonde_logins_total") else base
            try:
                out[key] = out.get(key, 0.0) + float(value)
            except ValueError:
                pass
    return out


# ---------------------------------------------------------------------------------------------


def make_veth():
    sh("ip", "link", "del", VETH_SONDE, check=False)
    sh("ip", "link", "add", VETH_SONDE, "type", "veth", "peer", "name", VETH_PEER)
    for dev in (VETH_SONDE, VETH_PEER):
        sh("sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1", check=False)
        sh("ip", "link", "set", dev, "up")


def slope_per_hour(points):
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 3600


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SOAK_SECONDS", 3600)))
    ap.add_argument("--pps", type=int, default=10000, help="packets a second onto the veth")
    ap.add_argument("--api-rps", type=int, default=40, help="API requests a second")
    ap.add_argument("--garbage-rate", type=int, default=200, help="garbage datagrams a second")
    ap.add_argument("--max-growth", type=float, default=0.10,
                    help="largest RSS growth over the second half, as a fraction (default 0.10)")
    ap.add_argument("--max-cpu-growth", type=float, default=0.25,
                    help="largest CPU growth from the third to the last quarter of the run, as a "
                         "fraction (default 0.25)")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "soak" / time.strftime("%Y%m%d-%H%M%S"))
    ap.add_argument("--sonde", type=Path, default=ROOT / "target" / "release" / "sonde")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak: needs root (a veth pair and live capture)")
    for tool in ("tcpreplay", "mergecap", "ip"):
        if not shutil.which(tool):
            sys.exit(f"soak: needs {tool} (apt install tcpreplay wireshark-common iproute2)")
    if not args.sonde.exists():
        sys.exit(f"soak: {args.sonde} missing; build it with: cargo build --release -p sonde")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    sonde = str(args.sonde)

    # The traffic: every loopback DPI capture once, end to end.
    mix = out / "mix.pcap"
    pcaps = sorted(str(p) for p in (ROOT / "tests" / "dpi_loopback").glob("*.pcap"))
    sh("mergecap", "-a", "-F", "pcap", "-w", str(mix), *pcaps)

    users = out / "users"
    users.unlink(missing_ok=True)
    password = "soak admin password " + str(random.randrange(10**9))
    sh(sonde, "user", "add", "soak", "--role", "admin", "--users", str(users), input=password + "\n")
    token = sh(sonde, "user", "token", "loadgen", "--role", "viewer", "--users",
               str(users)).stdout.strip()

    http_port, udp_port, tcp_port = free_port(), free_port(socket.SOCK_DGRAM), free_port()
    make_veth()
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    cmd = [sonde, "-i", VETH_SONDE, "--collect", f"udp://127.0.0.1:{udp_port}",
           "--collect", f"tcp://127.0.0.1:{tcp_port}", "--http", f"127.0.0.1:{http_port}",
           "--users", str(users), "--data-dir", str(data), "--max-flows", "200000", "-q"]
    commit = sh("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD", check=False).stdout.strip()
    (out / "command.txt").write_text(f"commit {commit}; command: `{' '.join(cmd)}`\n")
    err = open(out / "sonde.stderr", "w")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    replay = None
    stop = Stop()
    threads: list[threading.Thread] = []
    api, wrong, right, garbage = Tally(), Tally(), Tally(), Tally()
    samples = []
    failures = []
    try:
        deadline = time.time() + 30
        while True:
            if proc.poll() is not None:
                sys.exit(f"soak: sonde exited at start: {(out / 'sonde.stderr').read_text()}")
            try:
                if request(http_port, "GET", "/api/v1/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("soak: sonde's server never answered")
            time.sleep(0.2)
        replay = subprocess.Popen(
            ["tcpreplay", "-i", VETH_PEER, f"--pps={args.pps}", "--loop=0", "--unique-ip",
             "--stats=60", str(mix)],
            stdout=open(out / "tcpreplay.log", "w"), stderr=subprocess.STDOUT)
        workers = [
            *(threading.Thread(target=api_load, args=(http_port, token, args.api_rps / 4, stop, api, i))
              for i in range(4)),
            threading.Thread(target=login_load, args=(http_port, "soak", password, stop, wrong, right)),
            threading.Thread(target=collector_garbage,
                             args=(udp_port, tcp_port, args.garbage_rate, stop, garbage)),
        ]
        for t in workers:
            t.daemon = True
            t.start()
            threads.append(t)
        t_start = time.time()
        print(f"soak: {args.seconds} s, sonde pid {proc.pid}, results in {out}", flush=True)
        with open(out / "samples.csv", "w") as f:
            cols = ["t", "cpu_s", "rss_mib", "RssAnon", "RssFile", "RssShmem", "threads", "fds",
                    *METRICS]
            f.write(",".join(cols) + "\n")
            while time.time() - t_start < args.seconds:
                if proc.poll() is not None:
                    failures.append(f"sonde exited during the soak (status {proc.returncode})")
                    break
                cpu, rss, nthreads, fds = proc_sample(proc.pid)
                m = scrape(http_port, token)
                row = {"t": round(time.time() - t_start, 1), "cpu_s": cpu,
                       "rss_mib": round(rss / 2**20, 1), **rss_parts(proc.pid),
                       "threads": nthreads, "fds": fds, **m}
                # A step of 100 MiB or more since the last sample: keep the mappings to say where.
                if samples and row["rss_mib"] - samples[-1]["rss_mib"] >= 100:
                    save_smaps(proc.pid, out / f"smaps-step-{row['t']:.0f}s.txt")
                elif len(samples) % 60 == 0:
                    save_smaps(proc.pid, out / f"smaps-{row['t']:.0f}s.txt")
                samples.append(row)
                f.write(",".join(str(row.get(c, "")) for c in cols) + "\n")
                f.flush()
                if len(samples) % 30 == 1:
                    print(f"soak: t={row['t']:.0f}s rss={row['rss_mib']} MiB cpu={cpu:.1f}s "
                          f"packets={m.get('sonde_packets_total', 0):.0f} "
                          f"flows={m.get('sonde_flows_active', 0):.0f} fds={fds}", flush=True)
                time.sleep(10)
    finally:
        stop.event.set()
        if replay and replay.poll() is None:
            replay.send_signal(signal.SIGINT)
            try:
                replay.wait(timeout=10)
            except subprocess.TimeoutExpired:
                replay.kill()
        for t in threads:
            t.join(timeout=30)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                failures.append("sonde did not stop within 60 s of Ctrl-C")
        err.close()
        sh("ip", "link", "del", VETH_SONDE, check=False)

    return summarize(args, out, samples, api, wrong, right, garbage, proc, failures)


def summarize(args, out, samples, api, wrong, right, garbage, proc, failures) -> int:
    lines = [f"# Soak: {args.seconds} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    lines += [(out / "command.txt").read_text().strip(), ""]
    if len(samples) < 6:
        failures.append("too few samples")
    else:
        window = 600 if args.seconds >= 1800 else max(60, args.seconds // 6)
        lines += ["| window | RSS min–max (MiB) | CPU (% of a core) | packets/s | active flows | fds | threads |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        start = 0.0
        while start < samples[-1]["t"]:
            w = [s for s in samples if start <= s["t"] < start + window]
            if len(w) >= 2:
                dt = w[-1]["t"] - w[0]["t"]
                cpu = (w[-1]["cpu_s"] - w[0]["cpu_s"]) / dt * 100 if dt else 0
                pk = (w[-1].get("sonde_packets_total", 0) - w[0].get("sonde_packets_total", 0)) / dt if dt else 0
                lines.append(
                    f"| {start / 60:.0f}–{(start + window) / 60:.0f} min | "
                    f"{min(s['rss_mib'] for s in w):.0f}–{max(s['rss_mib'] for s in w):.0f} | "
                    f"{cpu:.1f} | {pk:,.0f} | {statistics.median(s.get('sonde_flows_active', 0) for s in w):,.0f} | "
                    f"{max(s['fds'] for s in w)} | {max(s['threads'] for s in w)} |")
            start += window
        half = [s for s in samples if s["t"] >= samples[-1]["t"] / 2]
        slope = slope_per_hour([(s["t"], s["rss_mib"]) for s in half])
        span_h = (half[-1]["t"] - half[0]["t"]) / 3600
        rss_mid = statistics.median(s["rss_mib"] for s in half)
        growth = slope * span_h / rss_mid if rss_mid else 0
        first, last = samples[0], samples[-1]
        lines += ["",
                  f"- RSS: {first['rss_mib']:.0f} MiB at the first sample, {last['rss_mib']:.0f} MiB at the end, "
                  f"max {max(s['rss_mib'] for s in samples):.0f} MiB; trend over the second half "
                  f"{slope:+.1f} MiB/h ({growth * 100:+.1f}% of its median {rss_mid:.0f} MiB over that half).",
                  f"- CPU: {(last['cpu_s'] - first['cpu_s']) / (last['t'] - first['t']) * 100:.1f}% of a core on average.",
                  f"- Packets counted: {last.get('sonde_packets_total', 0):,.0f}; capture drops "
                  f"{last.get('sonde_capture_dropped_total', 0):,.0f}; malformed {last.get('sonde_malformed_total', 0):,.0f}; "
                  f"flows created {last.get('sonde_flows_created_total', 0):,.0f}.",
                  f"- Open files {first['fds']} → {last['fds']}, threads {first['threads']} → {last['threads']}."]
        if growth > args.max_growth:
            failures.append(f"RSS grew {growth * 100:.1f}% over the second half (limit {args.max_growth * 100:.0f}%)")
        # Open files are judged over the second half, as RSS is: the first sample is taken before
        # any traffic, and the series need 4 files per block of 4096 series active within
        # --series-reuse-after (10 min), so the count rises to a level in the first minutes.
        # CPU is judged the same way: the last quarter of the run against the quarter before
        # it, the load being the same in both (a few points of noise on a shared machine are
        # allowed).
        def cpu_between(a, b):
            w = [s for s in samples if a <= s["t"] <= b]
            dt = w[-1]["t"] - w[0]["t"] if len(w) >= 2 else 0
            return (w[-1]["cpu_s"] - w[0]["cpu_s"]) / dt * 100 if dt else 0.0
        end = samples[-1]["t"]
        cpu3, cpu4 = cpu_between(end / 2, end * 3 / 4), cpu_between(end * 3 / 4, end)
        lines.append(f"- CPU over the second half: {cpu3:.1f}% of a core in its first half, "
                     f"{cpu4:.1f}% in its second.")
        if cpu4 > cpu3 * (1 + args.max_cpu_growth) and cpu4 > cpu3 + 3:
            failures.append(f"CPU grew from {cpu3:.1f}% to {cpu4:.1f}% of a core over the second half "
                            f"(limit +{args.max_cpu_growth * 100:.0f}%)")
        half_fds = max(s["fds"] for s in half)
        if half_fds > half[0]["fds"] + 20:
            failures.append(f"open files grew from {half[0]['fds']} to {half_fds} over the second half")
    lat = sorted(t for _, t in api.latencies) or [0]
    lines += [f"- API: {sum(api.codes.values()):,} requests, answers {dict(api.codes)}; latency median "
              f"{statistics.median(lat) * 1000:.0f} ms, p99 {lat[int(len(lat) * 0.99) - 1] * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms.",
              f"- Wrong logins from 16 addresses: {sum(wrong.codes.values()):,}, answers {dict(wrong.codes)}.",
              f"- The admin's logins from 127.0.0.1 every 30 s: answers {dict(right.codes)}.",
              f"- Collector garbage: {garbage.codes.get('udp', 0):,} datagrams, {garbage.codes.get('tcp', 0):,} "
              f"TCP connections with garbage (plus as many left idle); other: "
              f"{ {k: v for k, v in garbage.codes.items() if k not in ('udp', 'tcp')} }."]
    if any(isinstance(c, int) and c >= 400 for c in api.codes) or any(
            not isinstance(c, int) and not c.startswith("404") for c in api.codes):
        failures.append(f"API errors: {dict(api.codes)}; {api.notes[:5]}")
    if any(c != 200 for c in right.codes):
        failures.append(f"the admin was refused: {dict(right.codes)}; {right.notes[:5]}")
    stderr = (out / "sonde.stderr").read_text(errors="replace")
    if "panicked" in stderr:
        failures.append("sonde panicked: see sonde.stderr")
    lines += ["", "Result: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)), ""]
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
