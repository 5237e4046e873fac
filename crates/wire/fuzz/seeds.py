#!/usr/bin/env python3
"""Writes the seed corpus of the sonde-wire `decode` fuzz target (corpus/decode/) from real
frames of the nDPI test corpus, in the input layout of fuzz_targets/decode.rs. Link types the
captures lack (raw IP, BSD/OpenBSD loopback, Linux cooked v1/v2) get real IP packets behind a
made-up link header. Needs editcap. Usage:

    crates/wire/fuzz/seeds.py [PCAP_DIR]     (default /work/shared/corpus/ndpi)
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PCAPS = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/corpus/ndpi"
MAX_SEED = 4096
MAX_FRAME = 600

# Index into LINKS in fuzz_targets/decode.rs.
NULL, ETHERNET, RAW, RAW4, RAW6, LOOP, SLL, SLL2 = range(8)
LINKTYPE = {0: NULL, 1: ETHERNET, 101: RAW, 108: LOOP, 113: SLL, 228: RAW4, 229: RAW6, 276: SLL2}


def frames(name):
    """[(ts_seconds, orig_len, bytes)] and the link index of a capture."""
    path = os.path.join(PCAPS, name)
    with tempfile.TemporaryDirectory() as tmp:
        conv = os.path.join(tmp, "x.pcap")  # pcapng, or odd pcap variants, to plain pcap
        subprocess.run(["editcap", "-F", "pcap", path, conv], check=True)
        path = conv
        raw = open(path, "rb").read()
    magic = raw[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack(endian + "I", raw[20:24])[0] & 0xFFFF
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, frac, incl, orig = struct.unpack(endian + "IIII", raw[off:off + 16])
        out.append((sec + frac / (1e9 if nano else 1e6), orig, raw[off + 16:off + 16 + incl]))
        off += 16 + incl
    return LINKTYPE[link], out


def encode(link, small_table, frs):
    out = bytearray([link | (8 if small_table else 0)])
    prev = frs[0][0] if frs else 0
    for ts, orig, data in frs:
        data = data[:MAX_FRAME]
        if len(out) + 4 + len(data) > MAX_SEED:
            break
        extra = min(255, (max(orig, len(data)) - len(data) + 15) // 16)
        dt = min(255, max(0, round((ts - prev) * 4)))
        prev = ts
        out += struct.pack(">HBB", len(data), extra, dt) + data
    return bytes(out)


def ip_of_ethernet(data):
    """The IP packet of an untagged Ethernet frame, or None."""
    if len(data) > 14 and data[12:14] in (b"\x08\x00", b"\x86\xdd"):
        return data[14:]
    return None


def wrap(link, ip):
    v6 = ip[0] >> 4 == 6
    if link == NULL:
        return struct.pack("<I", 30 if v6 else 2) + ip
    if link == LOOP:
        return struct.pack(">I", 24 if v6 else 2) + ip
    etype = 0x86DD if v6 else 0x0800
    mac = b"\x02\x00\x5e\x10\x20\x30"
    if link == SLL:
        return struct.pack(">HHH", 0, 1, 6) + mac + b"\0\0" + struct.pack(">H", etype) + ip
    if link == SLL2:
        return struct.pack(">HHIHBB", etype, 0, 2, 1, 0, 6) + mac + b"\0\0" + ip
    return ip  # RAW, RAW4, RAW6


def main():
    d = os.path.join(HERE, "corpus", "decode")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)

    def write(name, data):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
        print(f"{name}: {len(data)} bytes")

    # Real link layers, a few frames each (fragments and tunnels included).
    for cap, first, n in [("http.pcapng", 0, 4), ("http_ipv6.pcap", 0, 3), ("dns.pcap", 0, 3),
                          ("dns_fragmented.pcap", 0, 4), ("ip_fragmented_garbage.pcap", 0, 4),
                          ("gre.pcapng", 0, 3), ("vxlan.pcap", 0, 3), ("4in4tunnel.pcap", 0, 3),
                          ("6in4tunnel.pcap", 0, 3), ("ipv6_in_gtp.pcap", 0, 3),
                          ("gtp_c.pcap", 0, 2), ("rdp.pcap", 0, 3)]:
        link, frs = frames(cap)
        base = os.path.splitext(cap)[0]
        write(f"{base}", encode(link, False, frs[first:first + n]))
    # A fragmented datagram through a small fragment table.
    link, frs = frames("dns_fragmented.pcap")
    write("dns_fragmented-small-table", encode(link, True, frs[:6]))

    # Made-up link headers around real IPv4 and IPv6 packets.
    _, v4 = frames("http.pcapng")
    _, v6 = frames("http_ipv6.pcap")
    ip4 = [(ts, o - 14, ip_of_ethernet(f)) for ts, o, f in v4[:3]]
    ip6 = [(ts, o - 14, ip_of_ethernet(f)) for ts, o, f in v6[:3]]
    names = {NULL: "null", RAW: "raw", RAW4: "ipv4", RAW6: "ipv6", LOOP: "loop", SLL: "sll",
             SLL2: "sll2"}
    for link, name in names.items():
        for fam, ips in (("v4", ip4), ("v6", ip6)):
            if (link == RAW4 and fam == "v6") or (link == RAW6 and fam == "v4"):
                continue
            ext = 0 if link in (RAW, RAW4, RAW6) else (4 if link in (NULL, LOOP) else
                                                      (16 if link == SLL else 20))
            frs = [(ts, o + ext, wrap(link, ip)) for ts, o, ip in ips if ip]
            write(f"synthetic-{name}-{fam}", encode(link, False, frs))


if __name__ == "__main__":
    main()
