"""Writes classic pcap files of many scanning sources, for the alert flood tests: every source
sends TCP SYNs to a run of ports of one target (a port scan), in a given second of the
capture. Plain struct packing (Ethernet, IPv4, TCP with correct checksums); no tool needed."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable, Tuple


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def syn(src: str, dst: str, sport: int, dport: int) -> bytes:
    """An Ethernet frame holding a TCP SYN from src:sport to dst:dport."""
    s = bytes(int(x) for x in src.split("."))
    d = bytes(int(x) for x in dst.split("."))
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1000, 0, 5 << 4, 0x02, 1024, 0, 0)
    pseudo = s + d + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", _csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, s, d)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ip + tcp


def write(path: Path, frames: Iterable[Tuple[float, bytes]]) -> int:
    """Writes (time, frame) pairs, in order, as a pcap file; returns how many."""
    n = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for t, frame in frames:
            sec = int(t)
            usec = int(round((t - sec) * 1e6))
            f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
            f.write(frame)
            n += 1
    return n


def scanners(count: int, ports: int, t0: float, spread_s: float, target: str = "192.0.2.1"):
    """`count` sources in 10.0.0.0/8 each scanning `ports` ports of `target`; source i scans in
    the second t0 + spread_s * i / count (so the detections spread over `spread_s`)."""
    for i in range(count):
        a = i + 1
        src = f"10.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"
        start = t0 + spread_s * i / count
        for p in range(ports):
            yield start + p * 1e-5, syn(src, target, 40000 + (i % 20000), 1 + p)
