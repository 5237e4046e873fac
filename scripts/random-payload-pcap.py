#!/usr/bin/env python3
"""Writes a pcap of flows whose payloads no protocol claims (random bytes), the worst case for
application detection: every candidate detector looks at each flow's first packets.
FLOWS flows (half TCP, half UDP, random ports), PACKETS packets each, alternating directions,
payloads of 60 to 400 random bytes. Deterministic (seeded).
  scripts/random-payload-pcap.py OUT.pcap [FLOWS] [PACKETS]
"""
import random
import struct
import sys

out, flows, per_flow = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20000, \
    int(sys.argv[3]) if len(sys.argv) > 3 else 12
rng = random.Random(19)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


with open(out, "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    t = 1_700_000_000.0
    for i in range(flows):
        tcp = i % 2 == 0
        a = bytes([10, (i >> 16) & 255, (i >> 8) & 255, i & 255])
        b = bytes([192, 0, 2, 1 + i % 250])
        pa, pb = rng.randrange(1024, 65535), rng.randrange(1, 65535)
        for k in range(per_flow):
            src, dst, sp, dp = (a, b, pa, pb) if k % 2 == 0 else (b, a, pb, pa)
            payload = rng.randbytes(rng.randrange(60, 400))
            if tcp:
                l4 = struct.pack("!HHIIBBHHH", sp, dp, 1000 + k * 400, 0, 0x50, 0x18, 65535, 0, 0)
            else:
                l4 = struct.pack("!HHHH", sp, dp, 8 + len(payload), 0)
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + len(payload), i & 0xFFFF,
                             0, 64, 6 if tcp else 17, 0, src, dst)
            ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
            frame = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00" + ip + l4 + payload
            t += 0.00001
            f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(frame), len(frame)))
            f.write(frame)
