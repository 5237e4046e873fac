"""PPP and Cisco HDLC captures (pcap link types 9, 50 and 104) are decoded, and their flows
match tshark's conversations exactly, as the Ethernet corpus does (test_tshark_exactness).

The captures are made here from the bundled Ethernet sample: each IP packet re-framed for the
link type (PPP bare, in HDLC-like framing and with a compressed protocol field, in turn; Cisco
HDLC with unicast and multicast address bytes), plus an IPv6 exchange built here, and a few
link-control frames that carry no IP."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import report
from test_tshark_exactness import _check

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "demo.pcap"


def _read_pcap(path: Path):
    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    (linktype,) = struct.unpack(endian + "I", data[20:24])
    assert linktype == 1, f"{path}: expected Ethernet, got link type {linktype}"
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack(endian + "IIII", data[off:off + 16])
        yield sec, frac, data[off + 16:off + 16 + incl], orig
        off += 16 + incl


def _ipv6_frames():
    """A UDP exchange and a TCP handshake over IPv6, as (next header, src, dst, L4 bytes)."""
    a = bytes.fromhex("20010db8000000000000000000000001")
    b = bytes.fromhex("20010db8000000000000000000000002")
    udp = lambda sp, dp, n: struct.pack(">HHHH", sp, dp, 8 + n, 0) + b"q" * n
    tcp = lambda sp, dp, flags: struct.pack(">HHIIBBHHH", sp, dp, 1, 0, 0x50, flags, 65535, 0, 0)
    return [(17, a, b, udp(5353, 53, 30)), (17, b, a, udp(53, 5353, 90)),
            (6, a, b, tcp(40000, 443, 0x02)), (6, b, a, tcp(443, 40000, 0x12)),
            (6, a, b, tcp(40000, 443, 0x10))]


def _write(path: Path, linktype: int, frame_for) -> None:
    """Re-frames the sample's IP packets and the IPv6 exchange with `frame_for(i, ethertype,
    ip_bytes)` (None: left out) into a pcap of `linktype`."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)]
    frames = []
    last = (0, 0)
    for sec, usec, frame, orig in _read_pcap(SAMPLE):
        ethertype = struct.unpack(">H", frame[12:14])[0]
        frames.append((sec, usec, ethertype, frame[14:], orig - 14))
        last = (sec, usec)
    for j, (nh, src, dst, l4) in enumerate(_ipv6_frames()):
        ip = struct.pack(">IHBB", 6 << 28, len(l4), nh, 64) + src + dst + l4
        frames.append((last[0] + 1, j, 0x86DD, ip, len(ip)))
    for i, (sec, usec, ethertype, ip, orig) in enumerate(frames):
        f = frame_for(i, ethertype, ip)
        if f is None:
            continue
        head = len(f) - len(ip)
        out.append(struct.pack("<IIII", sec, usec, len(f), orig + head) + f)
    path.write_bytes(b"".join(out))


def _ppp(i, ethertype, ip):
    proto = {0x0800: 0x0021, 0x86DD: 0x0057}.get(ethertype)
    if proto is None:
        return None
    if i % 50 == 7:  # an LCP echo now and then: not IP
        return b"\xff\x03\xc0\x21" + b"\x09\x01\x00\x08" + b"\x00" * 4 + ip
    if i % 3 == 0:
        return struct.pack(">H", proto) + ip
    if i % 3 == 1:
        return b"\xff\x03" + struct.pack(">H", proto) + ip
    return b"\xff\x03" + bytes([proto & 0xFF]) + ip


def _chdlc(i, ethertype, ip):
    if i % 50 == 7:  # SLARP keepalives: not IP
        return b"\x8f\x00\x80\x35" + b"\x00" * 18
    return bytes([0x0F if i % 2 else 0x8F, 0]) + struct.pack(">H", ethertype) + ip


@pytest.mark.parametrize("name,linktype,frame_for", [
    ("ppp", 9, _ppp), ("ppp-hdlc", 50, _ppp), ("c-hdlc", 104, _chdlc)])
def test_ppp_and_cisco_hdlc_captures_match_tshark(name, linktype, frame_for, sonde,
                                                   tshark_tools, workdir):
    pcap = workdir / f"{name}.pcap"
    _write(pcap, linktype, frame_for)
    res = report.CaptureResult(pcap.name)
    report.record(res)
    _check(pcap, sonde, workdir, res)
    assert res.packets > 13_000
    assert any(o.key[0] == 17 and ":" in str(o.key[1]) for o in res.outcomes), \
        "the IPv6 exchange is among the conversations compared"
