#!/usr/bin/env python3
"""Writes a capture of churning hosts: every minute of traffic time a new set of client
addresses (4,000 by default) sends small UDP queries to 100 servers, so hosts keep appearing and
going idle, as under address churn or a slow spoofed flood. 2 hours at 250 packets a second by
default: 1.8M packets, about 480k distinct clients.

    scripts/churn-pcap.py OUT.pcap [--seconds 7200] [--pps 250] [--clients 4000]
"""
import argparse
import random
import struct


def checksum(header: bytes) -> int:
    s = sum(struct.unpack("!10H", header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=int, default=7200)
    ap.add_argument("--pps", type=int, default=250)
    ap.add_argument("--clients", type=int, default=4000, help="new client addresses a minute")
    args = ap.parse_args()
    rnd = random.Random(7)
    eth = bytes.fromhex("020000000001020000000002") + b"\x08\x00"
    t0 = 1_700_000_000
    n = 0
    with open(args.out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for sec in range(args.seconds):
            window = sec // 60
            for i in range(args.pps):
                c = window * args.clients + rnd.randrange(args.clients)
                src = struct.pack("!I", (10 << 24) + c % (1 << 24))
                dst = struct.pack("!I", (20 << 24) + rnd.randrange(100))
                payload = b"x" * 18
                ulen = 8 + len(payload)
                ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, n & 0xFFFF, 0, 64, 17, 0, src, dst)
                ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
                udp = struct.pack("!HHHH", 1024 + c % 50000, 53, ulen, 0)
                pkt = eth + ip + udp + payload
                f.write(struct.pack("<IIII", t0 + sec, i * 1_000_000 // args.pps, len(pkt), len(pkt)) + pkt)
                n += 1
    print(f"{args.out}: {n} packets")


if __name__ == "__main__":
    main()
