#!/usr/bin/env python3
"""Writes samples/demo.pcap, the capture `make run` replays in a loop: two minutes of a small
office network, made only from sessions of real clients and servers recorded on this machine's
loopback (tests/dpi_loopback/, scripts/record-dpi-loopback.sh), so every payload is real.

Each recorded session is replayed many times at random moments, between one of 40 office hosts
(10.0.0.10-49, fd00::10-49) and the server its protocol would have: DNS, NTP, LDAP, Kerberos,
SMB, syslog and RADIUS inside (10.0.0.2-9), web, mail, chat and VPN outside. The outside
servers stand on public addresses of hosting and cloud networks in nine countries (OUTSIDE below),
so `--geoip-dir` places them and the console's countries and ASes fill; they are stand-ins: none
of those networks served this traffic. Client ports are
drawn afresh each time; addresses and checksums are rewritten. At one minute, 10.0.0.66 scans
1,024 ports of 10.0.0.5 (the analytics' port scan detection sees it).

    scripts/make-demo-pcap.py [--seconds 120] [--sessions 1500] [--seed 1] [-o samples/demo.pcap]

Standard library only; the output is the same for the same arguments.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = 1_795_683_600  # 2026-11-26 09:00:00 UTC; `--replay loop` moves it to now anyway

# Where each recorded protocol's server lives (by the capture's name before the first '-').
SERVERS = {
    "dns": "10.0.0.2", "ntp": "10.0.0.3", "ldap": "10.0.0.4", "kerberos": "10.0.0.4",
    "smb": "10.0.0.5", "syslog": "10.0.0.6", "radius": "10.0.0.7",
    "snmp": "10.0.0.9", "mysql": "10.0.0.20", "postgres": "10.0.0.21", "redis": "10.0.0.22",
}
# Outside servers, IPv4 and IPv6, on addresses the free GeoIP databases (`make geoip`) place in
# these networks and countries (checked by tests/system/test_geoip.py against mmdblookup).
OUTSIDE = {
    "http": ("5.9.10.80", "2a01:4f8::80"),                 # Hetzner, DE
    "http2": ("151.101.1.81", "2a04:4e42::81"),            # Fastly, US
    "tls12": ("104.16.123.43", "2606:4700::43"),           # Cloudflare, US
    "tls13": ("13.210.10.44", "2406:da1c::44"),            # Amazon, AU
    "ftp": ("51.38.10.21", "2001:41d0::21"),               # OVH, FR
    "smtp": ("144.217.10.25", "2607:5300::25"),            # OVH, CA
    "irc": ("65.21.10.67", "2a01:4f9::67"),                # Hetzner, FI
    "mqtt": ("51.15.20.83", "2001:bc8::83"),               # Scaleway, FR
    "sip": ("45.77.10.50", "2001:19f0:7000::50"),          # Vultr, JP
    "ssh": ("41.203.18.22", "2c0f:f720::22"),              # Xneelo, ZA
    "openvpn": ("128.199.200.94", "2400:6180:0:d0::94"),   # DigitalOcean, SG
    "wireguard": ("172.105.10.51", "2a01:7e01::51"),       # Akamai (Linode), CA
}
SERVERS.update({kind: v4 for kind, (v4, _) in OUTSIDE.items()})
# How often each kind of session happens, relative to the others (DNS and web the most).
WEIGHTS = {"dns": 10, "http": 6, "tls13": 8, "tls12": 4, "http2": 3, "ntp": 2, "ldap": 2,
           "kerberos": 2, "smb": 2, "mqtt": 2, "ssh": 1, "redis": 2, "mysql": 1, "postgres": 1}


def read_pcap(path: Path):
    b = path.read_bytes()
    magic, = struct.unpack("<I", b[:4])
    assert magic == 0xA1B2C3D4 and struct.unpack("<I", b[20:24])[0] == 1, f"{path}: not an Ethernet pcap"
    off, out = 24, []
    while off + 16 <= len(b):
        sec, usec, incl, orig = struct.unpack("<IIII", b[off:off + 16])
        out.append((sec + usec / 1e6, bytearray(b[off + 16:off + 16 + incl])))
        off += 16 + incl
    return out


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def fix_l4(frame: bytearray, l3: int, proto: int, src: bytes, dst: bytes, l4: int, l4_len: int):
    """Recomputes the TCP or UDP checksum (pseudo-header of IPv4 or IPv6)."""
    off = {6: 16, 17: 6}.get(proto)
    if off is None or l4 + off + 2 > len(frame):
        return
    frame[l4 + off:l4 + off + 2] = b"\0\0"
    if len(src) == 4:
        pseudo = src + dst + struct.pack("!BBH", 0, proto, l4_len)
    else:
        pseudo = src + dst + struct.pack("!IxxxB", l4_len, proto)
    c = checksum(pseudo + bytes(frame[l4:l4 + l4_len]))
    if proto == 17 and c == 0:
        c = 0xFFFF
    frame[l4 + off:l4 + off + 2] = struct.pack("!H", c)


def mac_of(ip: bytes) -> bytes:
    return b"\x02\x00" + ip[-4:]


def rewrite(frame: bytearray, client_port_of, client4, server4, client6, server6, new_port):
    """Moves one loopback frame onto the office network; None for frames it cannot place."""
    etype = struct.unpack("!H", frame[12:14])[0]
    if etype == 0x0800:
        l3 = 14
        ihl = (frame[l3] & 0x0F) * 4
        proto = frame[l3 + 9]
        l4 = l3 + ihl
        total = struct.unpack("!H", frame[l3 + 2:l3 + 4])[0]
        l4_len = total - ihl
        addr_off, alen, client, server = l3 + 12, 4, client4, server4
    elif etype == 0x86DD:
        l3 = 14
        proto = frame[l3 + 6]
        l4 = l3 + 40
        l4_len = struct.unpack("!H", frame[l3 + 4:l3 + 6])[0]
        addr_off, alen, client, server = l3 + 8, 16, client6, server6
    else:
        return None
    if proto not in (6, 17) or l4 + 4 > len(frame):
        return None
    sport, dport = struct.unpack("!HH", frame[l4:l4 + 4])
    # The side that sent a connection's first packet is its client (per pair of ports).
    key = (min(sport, dport), max(sport, dport))
    cport = client_port_of.setdefault(key, sport)
    from_client = sport == cport
    src, dst = (client, server) if from_client else (server, client)
    frame[addr_off:addr_off + alen] = src
    frame[addr_off + alen:addr_off + 2 * alen] = dst
    frame[0:6], frame[6:12] = mac_of(dst), mac_of(src)
    # A fresh client port for each of the session's connections.
    mapped = new_port.setdefault(cport, cport)
    if from_client:
        frame[l4:l4 + 2] = struct.pack("!H", mapped)
    else:
        frame[l4 + 2:l4 + 4] = struct.pack("!H", mapped)
    if etype == 0x0800:
        frame[l3 + 10:l3 + 12] = b"\0\0"
        frame[l3 + 10:l3 + 12] = struct.pack("!H", checksum(bytes(frame[l3:l3 + ihl])))
    fix_l4(frame, l3, proto, bytes(src), bytes(dst), l4, l4_len)
    return frame


def tcp_frame(src: str, dst: str, sport: int, dport: int, flags: int, seq: int, ack: int) -> bytearray:
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 1024, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, s, d)
    frame = bytearray(mac_of(d) + mac_of(s) + b"\x08\x00" + ip + tcp)
    frame[24:26] = struct.pack("!H", checksum(bytes(frame[14:34])))
    fix_l4(frame, 14, 6, s, d, 34, len(tcp))
    return frame


def port_scan(t0: float, rng: random.Random):
    """10.0.0.66 SYN-scans ports 1-1024 of 10.0.0.5 over 4 s; 22, 80, 139, 443 and 445 answer."""
    out = []
    scanner, target, sport = "10.0.0.66", "10.0.0.5", 51515
    for i, port in enumerate(rng.sample(range(1, 1025), 1024)):
        t = t0 + i * 4.0 / 1024
        seq = rng.getrandbits(32)
        out.append((t, tcp_frame(scanner, target, sport, port, 0x02, seq, 0)))
        if port in (22, 80, 139, 443, 445):
            out.append((t + 0.0002, tcp_frame(target, scanner, port, sport, 0x12, rng.getrandbits(32), seq + 1)))
            out.append((t + 0.0004, tcp_frame(scanner, target, sport, port, 0x04, seq + 1, 0)))
        else:
            out.append((t + 0.0002, tcp_frame(target, scanner, port, sport, 0x14, 0, seq + 1)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--sessions", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "samples" / "demo.pcap")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    recorded = {}
    for p in sorted((ROOT / "tests" / "dpi_loopback").glob("*.pcap")):
        kind = p.stem.split("-")[0]
        if kind in SERVERS:
            recorded.setdefault(kind, []).append(read_pcap(p))
    kinds = sorted(recorded)
    weights = [WEIGHTS.get(k, 1) for k in kinds]
    frames = []
    for _ in range(args.sessions):
        kind = rng.choices(kinds, weights)[0]
        session = rng.choice(recorded[kind])
        host = rng.randrange(10, 50)
        client4 = bytearray(ipaddress.ip_address(f"10.0.0.{host}").packed)
        client6 = bytearray(ipaddress.ip_address(f"fd00::{host}").packed)
        server4 = bytearray(ipaddress.ip_address(SERVERS[kind]).packed)
        last = SERVERS[kind].rsplit(".", 1)[1]
        server6 = bytearray(ipaddress.ip_address(
            OUTSIDE[kind][1] if kind in OUTSIDE else f"fd00::1:{last}").packed)
        start = rng.uniform(0, args.seconds - 6)
        t_first = session[0][0]
        ports, fresh = {}, _FreshPorts(rng)
        for t, frame in session:
            mapped = rewrite(bytearray(frame), ports, client4, server4, client6, server6, fresh)
            if mapped is not None:
                frames.append((START + start + (t - t_first), mapped))
    frames += port_scan(START + 60, rng)
    frames.sort(key=lambda x: x[0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for t, frame in frames:
            sec = int(t)
            usec = int(round((t - sec) * 1e6))
            if usec >= 1_000_000:
                sec, usec = sec + 1, usec - 1_000_000
            f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
            f.write(frame)
    print(f"{args.out}: {len(frames)} packets, {args.sessions} sessions of {len(kinds)} protocols "
          f"and a port scan, over {args.seconds:.0f} s")


class _FreshPorts(dict):
    """Maps a session's client ports to fresh ones, the same all through the session."""

    def __init__(self, rng: random.Random):
        super().__init__()
        self.rng = rng

    def setdefault(self, port, _default=None):
        if port not in self:
            self[port] = self.rng.randrange(32768, 61000)
        return self[port]


if __name__ == "__main__":
    main()
