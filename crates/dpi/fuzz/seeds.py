#!/usr/bin/env python3
"""Writes the seed corpora of the sonde-dpi fuzz targets (corpus/detectors/, corpus/dispatch/)
from real flows.

Each seed is the first payload packets of one TCP or UDP flow of a capture of the nDPI test
corpus, in the input layout of src/lib.rs: for `detectors`, prefixed with the index of its
detector in sonde_dpi::proto::DETECTORS (read from ../src/proto/mod.rs), so the seed reaches
that detector. Needs tshark. Usage:

    crates/dpi/fuzz/seeds.py [PCAP_DIR]     (default /work/shared/corpus/ndpi)
"""
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PCAPS = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/corpus/ndpi"
MAX_SEED = 4096  # the smoke run's -max_len
MAX_PKTS = 8

# detector name (as in DETECTORS) -> [(capture, display filter picking the flow, "tcp"/"udp")]
SOURCES = {
    "tls": [("google_ssl.pcap", "tls.handshake.type==1", "tcp"),
            ("long_tls_certificate.pcap", "tls.handshake.type==11", "tcp"),
            ("tls_ech.pcapng", "tls.handshake.type==1", "tcp")],
    "http": [("http.pcapng", "http.request", "tcp"),
             ("http_connect.pcap", "http.request.method==\"CONNECT\"", "tcp")],
    "dns": [("dns.pcap", "dns", "udp"),
            ("1kxun.pcap", "mdns", "udp"),
            ("netbios.pcap", "nbns", "udp")],
    "quic": [("quic-29.pcap", "quic", "udp"),
             ("quic-v2.pcapng", "quic", "udp"),
             ("quic046.pcap", "gquic", "udp"),
             ("quic_0RTT.pcap", "quic", "udp")],
    "ssh": [("ssh.pcap", "ssh", "tcp")],
    "smtp": [("smtp.pcap", "smtp", "tcp"),
             ("smtp-starttls.pcap", "smtp", "tcp")],
    "pop3": [("pop3.pcap", "pop", "tcp")],
    "imap": [("imap.pcap", "imap", "tcp")],
    "ftp": [("ftp.pcap", "ftp", "tcp")],
    "dhcp": [("1kxun.pcap", "dhcp", "udp"),
             ("android.pcap", "dhcp", "udp")],
    "ntp": [("NTPv4.pcap", "ntp", "udp"),
            ("NTPv2.pcap", "ntp", "udp")],
    "snmp": [("snmp.pcap", "snmp", "udp")],
    "stun": [("stun.pcap", "stun", "udp"),
             ("stun.pcap", "stun && tcp", "tcp")],
    "sip": [("sip.pcap", "sip", "udp")],
    "rdp": [("rdp.pcap", "tcp.port==3389", "tcp")],
    "smb": [("smb_deletefile.pcap", "smb2", "tcp"),
            ("smbv1.pcap", "smb", "tcp")],
    "mqtt": [("mqtt.pcap", "mqtt", "tcp")],
    "bittorrent": [("bittorrent.pcap", "bittorrent", "tcp"),
                   ("bittorrent_utp.pcap", "udp", "udp")],
    "rtp": [("rtp.pcapng", "udp.port==50003", "udp"),
            ("rtp.pcapng", "udp.port==6000", "udp")],
}


def tshark(pcap, filt, fields):
    cmd = ["tshark", "-r", os.path.join(PCAPS, pcap), "-Y", filt, "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def flow(pcap, filt, l4):
    """(client_port, server_port, client_addr, server_addr, ipv6, [(from_client, payload)])"""
    rows = tshark(pcap, filt, [f"{l4}.stream"])
    streams = [r[0] for r in rows if r and r[0]]
    if not streams:
        return None
    stream = streams[0]
    rows = tshark(pcap, f"{l4}.stream=={stream}",
                  ["ip.src", "ipv6.src", "ip.dst", "ipv6.dst", f"{l4}.srcport", f"{l4}.dstport",
                   "tcp.flags.syn" if l4 == "tcp" else "frame.number",
                   "tcp.flags.ack" if l4 == "tcp" else "frame.number", f"{l4}.payload"])
    client = None
    pkts = []
    for src4, src6, dst4, dst6, sport, dport, syn, ack, payload in rows:
        src = (src4 or src6).split(",")[-1]  # innermost IP when tunnelled
        dst = (dst4 or dst6).split(",")[-1]
        me = (src, int(sport))
        if client is None:
            # The client is who sends the SYN (TCP), else who sends first.
            if l4 == "tcp" and syn == "1" and ack == "1":
                client = ((dst, int(dport)), me)
            else:
                client = (me, (dst, int(dport)))
        if payload:
            pkts.append((me == client[0], bytes.fromhex(payload.replace(":", ""))))
        if len(pkts) >= MAX_PKTS:
            break
    (caddr, cport), (saddr, sport) = client
    ipv6 = ":" in caddr
    return cport, sport, addr_bytes(caddr), addr_bytes(saddr), ipv6, pkts


def addr_bytes(a):
    import ipaddress
    return ipaddress.ip_address(a).packed


def detector_names():
    """The detectors' names in the order of sonde_dpi::proto::DETECTORS."""
    with open(os.path.join(HERE, "..", "src", "proto", "mod.rs")) as fh:
        return re.findall(r'^\s*(?:tcp|udp|both)\("(\w+)",', fh.read(), re.M)


def encode(fl, l4, with_addrs, prefix=b""):
    cport, sport, caddr, saddr, ipv6, pkts = fl
    flags = (1 if l4 == "udp" else 0) | (2 if ipv6 and with_addrs else 0)
    out = bytearray(prefix) + struct.pack(">BHH", flags, cport, sport)
    if with_addrs:
        out += caddr + saddr
    for from_client, payload in pkts:
        room = MAX_SEED - len(out) - 2
        if room <= 0:
            break
        payload = payload[:min(room, 0x7fff)]
        out += struct.pack(">H", len(payload) | (0 if from_client else 0x8000)) + payload
    return bytes(out)


def main():
    names = detector_names()
    dirs = {t: os.path.join(HERE, "corpus", t) for t in ("detectors", "dispatch")}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for target, sources in SOURCES.items():
        index = names.index(target)
        for i, (pcap, filt, l4) in enumerate(sources):
            fl = flow(pcap, filt, l4)
            if fl is None or not fl[5]:
                print(f"warning: {target}: no flow for {filt!r} in {pcap}", file=sys.stderr)
                continue
            name = f"{target}-{os.path.splitext(pcap)[0]}-{i}"
            with open(os.path.join(dirs["detectors"], name), "wb") as fh:
                fh.write(encode(fl, l4, False, bytes([index])))
            with open(os.path.join(dirs["dispatch"], name), "wb") as fh:
                fh.write(encode(fl, l4, True))
            print(f"{target}: {name}: {len(fl[5])} packets")


if __name__ == "__main__":
    main()
