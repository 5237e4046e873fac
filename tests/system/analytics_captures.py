"""Records attack and ordinary traffic on loopback with real tools, and reads the ground truth
back from the capture with tshark, for tests/system/test_analytics.py.

Recording (root only): one ``tcpdump -i lo`` capture (snaplen 128) of these phases, each actor
on its own loopback address inside 127.B.0.0/16, where B is drawn per run so that two runs at
the same time (or any other test using 127.0.0.1) never land in each other's capture:

  ordinary     curl 127.B.0.11 -> python3 -m http.server on 127.B.0.10; dig 127.B.0.21 -> a
               tiny DNS responder on 127.B.0.20:53; TCP echo 127.B.0.31 -> 127.B.0.30
  port scan    nmap -sS -S 127.B.0.66 -p 1-1000 127.B.0.5
  IP scan      nmap -sS -S 127.B.0.67 -p 80 127.B.1.0/24
  ping sweep   nping --icmp -S 127.B.0.68 127.B.2.1-254
  UDP probes   nmap -sU -S 127.B.0.99 -p 2000-2299 127.B.0.4 (each closed port draws an ICMP
               port unreachable from 127.B.0.4 back to 127.B.0.99)
  SYN flood    hping3 -S -a 127.B.0.77 -p 80 127.B.0.3 (source port increments per packet;
               nothing listens, so each SYN draws a RST)
  UDP flood    hping3 --udp -a 127.B.0.88 -p 53 127.B.0.2 (a socket bound there, never read,
               so the flood draws no ICMP errors)
  ordinary     again

Floods: 30000 packets each at hping3 -i u100 (about 10k/s asked, 3-4 s); the tests lower
ddos.syn_pps and ddos.udp_pps to 3000 so that a slower machine still crosses them, and check
from the capture that it did. The whole recording takes about 13 s and ~95k packets (~6 MB).

Every count the tests expect comes from the capture file (tshark's fields), never from the
tools' parameters alone: nping, for one, skips some addresses of a range and sends others twice.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

TOOLS = ["tcpdump", "nmap", "nping", "hping3", "curl", "dig", "tshark", "editcap", "mergecap"]

PORT_SCAN_PORTS = (1, 1000)
UDP_PROBE_PORTS = (2000, 2299)
# hping3 -i u100 asks for 10k packets/s (loopback gives 7-10k): 30000 packets last 3-4 s, long
# enough for an attack's evidence (top sources and ports), which shards only gather from about
# two seconds after the attack's first second on.
FLOOD_PACKETS = 30000
FLOOD_GAP_US = 100


class Actors:
    """The loopback addresses of one recording, all in 127.B.0.0/16."""

    def __init__(self, b: int):
        self.b = b
        self.net = f"127.{b}.0.0/16"

        def ip(fourth: int) -> str:
            return f"127.{b}.0.{fourth}"

        # Ordinary traffic.
        self.http_server, self.http_client = ip(10), ip(11)
        self.dns_server, self.dns_client = ip(20), ip(21)
        self.tcp_server, self.tcp_client = ip(30), ip(31)
        # Attacks: scanners and flooders, and their victims.
        self.port_scanner, self.port_victim = ip(66), ip(5)
        self.ip_scanner, self.ip_scan_net = ip(67), f"127.{b}.1.0/24"
        self.ping_sweeper, self.ping_range = ip(68), f"127.{b}.2.1-254"
        self.udp_prober, self.udp_probe_victim = ip(99), ip(4)
        self.syn_flooder, self.syn_victim = ip(77), ip(3)
        self.udp_flooder, self.udp_victim = ip(88), ip(2)

    def __repr__(self) -> str:
        return f"Actors(127.{self.b}.0.0/16)"

    def ordinary(self) -> Dict[str, str]:
        return {
            "HTTP server": self.http_server, "HTTP client (curl)": self.http_client,
            "DNS server": self.dns_server, "DNS client (dig)": self.dns_client,
            "TCP server": self.tcp_server, "TCP client": self.tcp_client,
        }


@dataclasses.dataclass
class Recording:
    pcap: Path
    actors: Actors
    log: str
    kernel_drops: int


class RecordError(RuntimeError):
    pass


def missing_tools() -> List[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


# ---------------------------------------------------------------------------------------------
# Small servers for the ordinary traffic
# ---------------------------------------------------------------------------------------------

def _dns_answer(query: bytes) -> Optional[bytes]:
    """An answer to a standard query: the question echoed, one A record 192.0.2.1."""
    if len(query) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qd != 1:
        return None
    i = 12
    while i < len(query) and query[i] != 0:
        i += 1 + query[i]
    end = i + 5  # zero label, QTYPE, QCLASS
    if end > len(query):
        return None
    question = query[12:end]
    header = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100), 1, 1, 0, 0)
    answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([192, 0, 2, 1])
    return header + question + answer


class _Servers:
    """A DNS responder, a TCP echo server and the UDP flood's sink, on threads; the HTTP server
    is `python3 -m http.server` in a process."""

    def __init__(self, actors: Actors, docroot: Path):
        self.actors = actors
        self.stop = threading.Event()
        self.threads: List[threading.Thread] = []
        self.socks: List[socket.socket] = []
        self.http: Optional[subprocess.Popen] = None
        self.http_port = 0
        self.tcp_port = 0
        self.docroot = docroot

    def __enter__(self):
        a = self.actors
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dns.bind((a.dns_server, 53))
        dns.settimeout(0.2)
        self.socks.append(dns)
        self._thread(self._dns_loop, dns)

        echo = socket.socket()
        echo.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        echo.bind((a.tcp_server, 0))
        echo.listen(16)
        echo.settimeout(0.2)
        self.tcp_port = echo.getsockname()[1]
        self.socks.append(echo)
        self._thread(self._echo_loop, echo)

        # The UDP flood's target port is open (bound, never read): the kernel drops what does
        # not fit in the buffer silently instead of answering with port unreachables.
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.bind((a.udp_victim, 53))
        self.socks.append(sink)

        probe = socket.socket()
        probe.bind((a.http_server, 0))
        self.http_port = probe.getsockname()[1]
        probe.close()
        (self.docroot / "index.html").write_text("<html><body>sonde analytics test</body></html>\n")
        self.http = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", a.http_server, str(self.http_port),
             "--directory", str(self.docroot)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((a.http_server, self.http_port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.http.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RecordError("python3 -m http.server did not start")
                time.sleep(0.05)
        return self

    def _thread(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _dns_loop(self, s: socket.socket):
        while not self.stop.is_set():
            try:
                q, peer = s.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            r = _dns_answer(q)
            if r:
                s.sendto(r, peer)

    def _echo_loop(self, s: socket.socket):
        while not self.stop.is_set():
            try:
                c, _ = s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with c:
                c.settimeout(2)
                try:
                    data = c.recv(4096)
                    if data:
                        c.sendall(data)
                except OSError:
                    pass

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=2)
        for s in self.socks:
            s.close()
        if self.http is not None and self.http.poll() is None:
            self.http.terminate()
            try:
                self.http.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.http.kill()
        return False


# ---------------------------------------------------------------------------------------------
# The recording
# ---------------------------------------------------------------------------------------------

def _run(log: List[str], cmd: List[str], timeout: int = 60, ok=(0,)) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    log.append(f"$ {' '.join(cmd)}  (rc {p.returncode}, {time.monotonic() - t0:.2f} s)\n"
               f"{p.stdout[-1500:]}{p.stderr[-1500:]}")
    if p.returncode not in ok:
        raise RecordError(f"{cmd[0]} failed (rc {p.returncode}):\n" + log[-1])
    return p


def _ordinary(log: List[str], a: Actors, srv: _Servers, round_: int) -> None:
    for i in range(2):
        _run(log, ["curl", "-sS", "-o", "/dev/null", "--max-time", "5", "--interface",
                   a.http_client, f"http://{a.http_server}:{srv.http_port}/?r={round_}.{i}"])
        _run(log, ["dig", f"@{a.dns_server}", "-b", a.dns_client, "+tries=1", "+time=2",
                   f"host{round_}{i}.sonde.test", "A"])
        with socket.socket() as c:
            c.bind((a.tcp_client, 0))
            c.settimeout(5)
            c.connect((a.tcp_server, srv.tcp_port))
            c.sendall(b"hello sonde\n")
            got = b""
            while len(got) < 12:
                chunk = c.recv(64)
                if not chunk:
                    break
                got += chunk
            if got != b"hello sonde\n":
                raise RecordError(f"TCP echo answered {got!r}")


def _start_tcpdump(pcap: Path, a: Actors) -> subprocess.Popen:
    td = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-s", "128", "-B", "65536", "--immediate-mode", "-n", "-Z", "root",
         "-w", str(pcap), f"net {a.net}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    # tcpdump prints "listening on lo" once its capture is active.
    deadline = time.monotonic() + 15
    buf = b""
    while b"listening on" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or td.poll() is not None:
            td.kill()
            raise RecordError(f"tcpdump did not start: {buf.decode(errors='replace')}")
        r, _, _ = select.select([td.stderr], [], [], left)
        if r:
            chunk = os.read(td.stderr.fileno(), 4096)
            if not chunk:
                continue
            buf += chunk
    return td


def _stop_tcpdump(td: subprocess.Popen) -> Tuple[str, int]:
    time.sleep(1.0)  # the last replies reach the capture
    td.send_signal(signal.SIGINT)
    try:
        _, err = td.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        td.kill()
        raise RecordError("tcpdump did not stop on SIGINT")
    text = err.decode(errors="replace")
    drops = 0
    for line in text.splitlines():
        if "dropped by kernel" in line:
            drops = int(line.split()[0])
    return text, drops


def record(workdir: Path, b: Optional[int] = None) -> Recording:
    """Records every phase into workdir/analytics.pcap (as root)."""
    a = Actors(b if b is not None else random.randint(16, 250))
    pcap = workdir / "analytics.pcap"
    docroot = workdir / "www"
    docroot.mkdir(exist_ok=True)
    log: List[str] = []
    with _Servers(a, docroot) as srv:
        td = _start_tcpdump(pcap, a)
        try:
            _ordinary(log, a, srv, 1)
            time.sleep(0.3)
            lo, hi = PORT_SCAN_PORTS
            _run(log, ["nmap", "-e", "lo", "-S", a.port_scanner, "-Pn", "-n", "-sS",
                       "--max-retries", "1", "-p", f"{lo}-{hi}", a.port_victim])
            time.sleep(0.3)
            _run(log, ["nmap", "-e", "lo", "-S", a.ip_scanner, "-Pn", "-n", "-sS",
                       "--max-retries", "1", "-p", "80", a.ip_scan_net])
            time.sleep(0.3)
            _run(log, ["nping", "-e", "lo", "--icmp", "-c", "1", "--rate", "1000", "-S",
                       a.ping_sweeper, a.ping_range])
            time.sleep(0.3)
            lo, hi = UDP_PROBE_PORTS
            _run(log, ["nmap", "-e", "lo", "-S", a.udp_prober, "-Pn", "-n", "-sU",
                       "--max-retries", "1", "-p", f"{lo}-{hi}", a.udp_probe_victim])
            time.sleep(0.3)
            _run(log, ["hping3", "-q", "-a", a.syn_flooder, "-S", "-p", "80", "-i",
                       f"u{FLOOD_GAP_US}", "-c", str(FLOOD_PACKETS), a.syn_victim], timeout=120,
                 ok=(0, 1))
            time.sleep(0.3)
            _run(log, ["hping3", "-q", "-a", a.udp_flooder, "--udp", "-p", "53", "-i",
                       f"u{FLOOD_GAP_US}", "-c", str(FLOOD_PACKETS), a.udp_victim], timeout=120,
                 ok=(0, 1))  # 1: nothing answered, as intended
            time.sleep(0.3)
            _ordinary(log, a, srv, 2)
        finally:
            td_err, drops = _stop_tcpdump(td)
    log.append(td_err)
    return Recording(pcap=pcap, actors=a, log="\n".join(log), kernel_drops=drops)


# ---------------------------------------------------------------------------------------------
# Ground truth, from tshark
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Pkt:
    t: float
    length: int
    ip_len: int
    src: str
    dst: str
    proto: int
    sport: int
    dport: int
    syn: bool
    ack: bool
    fin: bool
    rst: bool
    icmp_type: int
    icmp_code: int
    inner_dport: int  # ICMP errors: the quoted packet's destination port


_FIELDS = ["frame.time_epoch", "frame.len", "ip.len", "ip.src", "ip.dst", "ip.proto",
           "tcp.srcport", "tcp.dstport", "tcp.flags.syn", "tcp.flags.ack", "tcp.flags.fin",
           "tcp.flags.reset", "udp.srcport", "udp.dstport", "icmp.type", "icmp.code"]


def _int(v: str) -> int:
    if v in ("", None):
        return -1
    if v in ("True", "False"):
        return int(v == "True")
    return int(v, 0)


def packets(pcap: Path) -> List[Pkt]:
    """Every IPv4 packet of the capture, its outer header's fields (first occurrences) as
    tshark reads them; for an ICMP error, the quoted packet's destination port."""
    cmd = ["tshark", "-r", str(pcap), "-n", "-T", "fields", "-E", "occurrence=f",
           "-E", "separator=\t"]
    for f in _FIELDS:
        cmd += ["-e", f]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"tshark failed: {p.stderr[-2000:]}")
    out = []
    for line in p.stdout.splitlines():
        v = dict(zip(_FIELDS, line.split("\t")))
        if not v.get("ip.src"):
            continue
        g = lambda f: _int(v.get(f, ""))  # noqa: E731
        proto = g("ip.proto")
        if proto == 6:
            sport, dport, inner = g("tcp.srcport"), g("tcp.dstport"), -1
        elif proto == 17:
            sport, dport, inner = g("udp.srcport"), g("udp.dstport"), -1
        else:
            # An ICMP error's transport fields are those of the packet it quotes.
            sport, dport = -1, -1
            inner = g("udp.dstport") if g("udp.dstport") >= 0 else g("tcp.dstport")
        out.append(Pkt(t=float(v["frame.time_epoch"]), length=g("frame.len"),
                       ip_len=g("ip.len"), src=v["ip.src"], dst=v["ip.dst"], proto=proto,
                       sport=sport, dport=dport, syn=g("tcp.flags.syn") == 1,
                       ack=g("tcp.flags.ack") == 1, fin=g("tcp.flags.fin") == 1,
                       rst=g("tcp.flags.reset") == 1, icmp_type=g("icmp.type"),
                       icmp_code=g("icmp.code"), inner_dport=inner))
    return out


def opens_flow(p: Pkt) -> bool:
    """A probe a scanner sends: a TCP SYN without ACK, a UDP datagram, an ICMP echo request."""
    return (p.proto == 6 and p.syn and not p.ack) or p.proto == 17 or \
        (p.proto == 1 and p.icmp_type == 8)


Target = Tuple[str, int, int]  # (destination, IP protocol, port; ICMP: the type)


def probes_by_interval(pkts: List[Pkt], src: str, interval: int) -> Dict[int, Set[Target]]:
    """What `src` tried, by interval start (packet time, multiples of `interval`): each
    5-tuple counts in the interval of its first probe, as a new flow does."""
    seen: Set[Tuple] = set()
    out: Dict[int, Set[Target]] = collections.defaultdict(set)
    for p in pkts:
        if p.src != src or not opens_flow(p):
            continue
        port = p.icmp_type if p.proto == 1 else p.dport
        key = (p.dst, p.proto, p.sport, port)
        if key in seen:
            continue
        seen.add(key)
        start = int(p.t) - int(p.t) % interval
        out[start].add((p.dst, p.proto, port))
    return out


def shift_capture(src: Path, dst: Path, shift_us: int) -> None:
    """editcap -t: every timestamp moved by shift_us microseconds."""
    sign = "-" if shift_us < 0 else ""
    s = abs(shift_us)
    subprocess.run(["editcap", "-t", f"{sign}{s // 1_000_000}.{s % 1_000_000:06d}", str(src),
                    str(dst)], check=True, capture_output=True, timeout=120)


def interval_of(t: float, interval: int) -> int:
    return int(t) - int(t) % interval


def intervals_with_packets(pkts: List[Pkt], interval: int) -> List[int]:
    """The intervals a reader of the capture goes through (empty ones are skipped)."""
    return sorted({interval_of(p.t, interval) for p in pkts})


def runs(detected: Set[int], pkts: List[Pkt], interval: int) -> List[List[int]]:
    """Detected intervals grouped into detections: a detection goes on while the next
    interval that has packets detects it again."""
    out: List[List[int]] = []
    prev_detected = False
    for start in intervals_with_packets(pkts, interval):
        if start in detected:
            if prev_detected:
                out[-1].append(start)
            else:
                out.append([start])
            prev_detected = True
        else:
            prev_detected = False
    return out


def syn_only(p: Pkt) -> bool:
    return p.proto == 6 and p.syn and not p.ack


def per_second(pkts: List[Pkt], keep) -> Dict[int, List[Pkt]]:
    out: Dict[int, List[Pkt]] = collections.defaultdict(list)
    for p in pkts:
        if keep(p):
            out[int(p.t)].append(p)
    return out


ICMP_ERROR_TYPES = {3, 11}


def icmp_errors_by_interval(pkts: List[Pkt], host: str, role: str, interval: int):
    """ICMP errors `host` sent (role sender) or received (receiver), by interval: counts of
    all errors, unreachables, port unreachables, time exceeded, and the quoted probes'
    destination ports."""
    out: Dict[int, dict] = {}
    for p in pkts:
        if p.proto != 1 or p.icmp_type not in ICMP_ERROR_TYPES:
            continue
        if (p.src if role == "sender" else p.dst) != host:
            continue
        c = out.setdefault(interval_of(p.t, interval), {
            "errors": 0, "unreachable": 0, "port_unreachable": 0, "time_exceeded": 0,
            "peers": collections.Counter(), "probe_ports": collections.Counter()})
        c["errors"] += 1
        c["unreachable"] += p.icmp_type == 3
        c["port_unreachable"] += p.icmp_type == 3 and p.icmp_code == 3
        c["time_exceeded"] += p.icmp_type == 11
        c["peers"][p.dst if role == "sender" else p.src] += 1
        c["probe_ports"][p.inner_dport] += 1
    return out
