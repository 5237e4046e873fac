"""tshark as an oracle for sonde's per-flow counters.

Everything "expected" in this module is computed from tshark's own output, never from sonde:

* ``tshark -q -z conv,tcp -z conv,udp`` gives the conversation table: per conversation and per
  direction, frames (exact) and bytes (frame lengths, link layer included; tshark 4.0 prints
  them rounded to kB/MB above 9999 bytes).
* ``tshark -T fields`` gives, for every frame, its length, its layer stack (``frame.protocols``)
  and the fields of every IP / TCP / UDP layer in it. From these we rebuild the membership of
  each conversation frame by frame and check it against the conversation table (frames must be
  equal, byte totals must print the same way tshark prints them). That is the self-check that
  keeps this harness honest: if our reading of tshark disagrees with tshark's own table, the
  test fails as an oracle error, not as a sonde error.
* sonde counts IP bytes (IPv4 total length, IPv6 40 + payload length) as NetFlow does. The
  expected bytes of a direction are therefore

      conv bytes - sum over the conversation's frames of (frame.len - IP length)

  where the IP length is the one of the IP header the TCP/UDP header sits on (for a tunnelled
  packet the inner header, which is the innermost IP layer that carries the transport).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import subprocess
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

# tshark layers after which a transport layer is an *error quote* (the header of the offending
# packet inside an ICMP error). tshark does not feed those to its conversation taps, and sonde
# counts the ICMP packet as an ICMP flow, so they belong to no TCP/UDP conversation.
ERROR_CARRIERS = {"icmp", "icmpv6"}

# Layers that make a TCP/UDP conversation the *outer* part of a tunnel that sonde decapsulates
# (sonde reports the inner flow instead). GRE and IP-in-IP never form a TCP/UDP conversation
# themselves, so only the UDP-based ones matter for the outer side.
SONDE_UDP_TUNNELS = {"vxlan": 4789, "gtp": 2152, "capwap": 5247}
# Any tunnel layer: used to explain inner conversations of encapsulations sonde does not peel.
OTHER_TUNNEL_LAYERS = {"teredo", "udpencap", "openvpn", "wg", "l2tp", "geneve", "ayiya"}

Endpoint = Tuple[str, int]  # (address text as tshark prints it, port)
ConvKey = Tuple[int, FrozenSet[Endpoint]]  # (IP protocol number, {endpoint, endpoint})

PROTO_NUM = {"tcp": 6, "udp": 17}
PROTO_NAME = {6: "tcp", 17: "udp"}

FIELDS = [
    "frame.number",
    "frame.len",
    "frame.protocols",
    "ip.len",
    "ip.src",
    "ip.dst",
    "ipv6.plen",
    "ipv6.src",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "ip.fragment",
    "ipv6.fragment",
    "ip.proto",
    "ip.flags.mf",
    "ip.frag_offset",
    "ipv6.nxt",
    "ipv6.fraghdr.nxt",
    "ipv6.fraghdr.offset",
    "ipv6.fraghdr.more",
    "tcp.hdr_len",
]


class OracleError(AssertionError):
    """Our reading of tshark's per-frame output disagrees with tshark's own tables."""


def norm_addr(a: str) -> str:
    """Canonical text of an address, so sonde's and tshark's spellings compare equal."""
    import ipaddress

    return str(ipaddress.ip_address(a))


def tshark(args: List[str], timeout: int = 300) -> str:
    p = subprocess.run(
        ["tshark", "-n"] + args,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if p.returncode != 0:
        raise OracleError(f"tshark {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout


def capinfos_packets(pcap: str) -> int:
    p = subprocess.run(["capinfos", "-c", "-M", pcap], capture_output=True, text=True, timeout=120)
    m = re.search(r"Number of packets:\s*(\d+)", p.stdout)
    if not m:
        raise OracleError(f"capinfos -c -M {pcap}: no packet count in {p.stdout!r} {p.stderr!r}")
    return int(m.group(1))


# ---------------------------------------------------------------------------------------------
# Conversation table
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ConvRow:
    proto: int
    a: Endpoint
    b: Endpoint
    frames_b_to_a: int  # column "<-": frames sent by B to A
    bytes_b_to_a: str  # as printed, e.g. "8236 bytes", "429 kB"
    frames_a_to_b: int  # column "->": frames sent by A to B
    bytes_a_to_b: str


_CONV_HEADER = re.compile(r"^(TCP|UDP) Conversations$")
_BYTES = r"(\d+ (?:bytes|kB|MB|GB|TB))"
_CONV_ROW = re.compile(
    r"^(\S+):(\d+)\s+<->\s+(\S+):(\d+)\s+(\d+)\s+" + _BYTES + r"\s+(\d+)\s+" + _BYTES
    + r"\s+(\d+)\s+" + _BYTES + r"\s+"
)


def parse_conv(text: str) -> List[ConvRow]:
    """Parses the text of ``tshark -q -z conv,tcp -z conv,udp`` (tshark 4.0 layout).

    Column meaning, checked against dns.pcap (3 frames: .20:53 -> .8:32795 twice, the reverse
    once; tshark prints ``192.168.170.20:53 <-> 192.168.170.8:32795  1 75 bytes  2 151 bytes``):
    the ``<-`` column counts frames sent by the right-hand endpoint B to A, the ``->`` column
    frames sent by A to B.
    """
    rows: List[ConvRow] = []
    proto: Optional[int] = None
    for line in text.splitlines():
        h = _CONV_HEADER.match(line.strip())
        if h:
            proto = PROTO_NUM[h.group(1).lower()]
            continue
        m = _CONV_ROW.match(line)
        if m:
            if proto is None:
                raise OracleError(f"conversation row before a table header: {line!r}")
            rows.append(
                ConvRow(
                    proto=proto,
                    a=(norm_addr(m.group(1)), int(m.group(2))),
                    b=(norm_addr(m.group(3)), int(m.group(4))),
                    frames_b_to_a=int(m.group(5)),
                    bytes_b_to_a=m.group(6),
                    frames_a_to_b=int(m.group(7)),
                    bytes_a_to_b=m.group(8),
                )
            )
        elif proto is not None and re.match(r"^\S+:\d+\s+<->", line):
            raise OracleError(f"unparsed conversation row: {line!r}")
    return rows


def tshark_size_text(n: int) -> str:
    """How tshark 4.0's conversation table prints a byte count (format_size, SI units)."""
    if n < 10_000:
        return f"{n} bytes"
    for unit, div in (("kB", 10**3), ("MB", 10**6), ("GB", 10**9), ("TB", 10**12)):
        if n < div * 10_000 or unit == "TB":
            return f"{n // div} {unit}"
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------
# Per-frame dissection
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class IpLayer:
    version: int
    src: str
    dst: str
    length: int  # IPv4 total length, or 40 + IPv6 payload length
    proto: int  # IPv4 protocol; IPv6: next header after the fragment header if any
    frag_offset: int = 0
    more_frags: bool = False

    @property
    def is_fragment(self) -> bool:
        return self.frag_offset != 0 or self.more_frags


@dataclasses.dataclass
class Transport:
    proto: int
    src: Endpoint
    dst: Endpoint
    ip_index: int  # index of the IP layer it sits on, in the frame's IP layers
    in_error: bool  # quoted inside an ICMP error
    bogus: bool  # TCP header length < 20: tshark stops there and feeds no conversation tap
    layers_above: List[str]  # protocol names after this transport layer


@dataclasses.dataclass
class Frame:
    number: int
    length: int
    protocols: List[str]
    ips: List[IpLayer]
    transports: List[Transport]
    fragments: List[int]  # frames that make up a datagram reassembled in this frame
    is_fragment: bool  # this frame carries an IP fragment (first or later)


def _split(v: str) -> List[str]:
    return [x for x in v.split(",")] if v != "" else []


def dissect(pcap: str) -> Dict[int, Frame]:
    out = tshark(
        ["-r", pcap, "-T", "fields", "-E", "header=n", "-E", "separator=/t", "-E", "occurrence=a",
         "-E", "aggregator=,"]
        + [x for f in FIELDS for x in ("-e", f)]
    )
    frames: Dict[int, Frame] = {}
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) < len(FIELDS):
            cols += [""] * (len(FIELDS) - len(cols))
        f = dict(zip(FIELDS, cols))
        num = int(f["frame.number"])
        protos = f["frame.protocols"].split(":")
        v4 = list(zip(_split(f["ip.src"]), _split(f["ip.dst"]), _split(f["ip.len"]),
                      _split(f["ip.proto"]), _split(f["ip.frag_offset"]), _split(f["ip.flags.mf"])))
        v6 = list(zip(_split(f["ipv6.src"]), _split(f["ipv6.dst"]), _split(f["ipv6.plen"]),
                      _split(f["ipv6.nxt"])))
        fh6 = list(zip(_split(f["ipv6.fraghdr.nxt"]), _split(f["ipv6.fraghdr.offset"]),
                       _split(f["ipv6.fraghdr.more"])))
        if fh6 and len(v6) != 1:
            raise OracleError(f"{pcap} frame {num}: IPv6 fragment header with {len(v6)} IPv6 "
                              f"layers: cannot tell which one it belongs to")
        tcp = list(zip(_split(f["tcp.srcport"]), _split(f["tcp.dstport"]),
                       _split(f["tcp.hdr_len"])))
        udp = list(zip(_split(f["udp.srcport"]), _split(f["udp.dstport"])))
        counts = {p: protos.count(p) for p in ("ip", "ipv6", "tcp", "udp")}
        if (counts["ip"], counts["ipv6"], counts["tcp"], counts["udp"]) != (
            len(v4), len(v6), len(tcp), len(udp)
        ):
            raise OracleError(
                f"{pcap} frame {num}: layer stack {f['frame.protocols']} does not align with "
                f"field occurrences ip={len(v4)} ipv6={len(v6)} tcp={len(tcp)} udp={len(udp)}"
            )
        ips: List[IpLayer] = []
        transports: List[Transport] = []
        i4 = i6 = it = iu = 0
        in_error = False
        for pos, p in enumerate(protos):
            if p == "ip":
                s, d, ln, pr, fo, mf = v4[i4]
                i4 += 1
                ips.append(IpLayer(4, norm_addr(s), norm_addr(d), int(ln), int(pr), int(fo),
                                   mf in ("1", "True")))
            elif p == "ipv6":
                s, d, pl, nx = v6[i6]
                i6 += 1
                layer = IpLayer(6, norm_addr(s), norm_addr(d), 40 + int(pl), int(nx))
                if fh6:
                    layer.proto = int(fh6[0][0])
                    layer.frag_offset = int(fh6[0][1])
                    layer.more_frags = fh6[0][2] in ("1", "True")
                ips.append(layer)
            elif p in ERROR_CARRIERS:
                in_error = True
            elif p in ("tcp", "udp"):
                bogus = False
                if p == "tcp":
                    sp, dp, hl = tcp[it]
                    it += 1
                    bogus = hl != "" and int(hl) < 20
                else:
                    sp, dp = udp[iu]
                    iu += 1
                if not ips:
                    raise OracleError(f"{pcap} frame {num}: {p} layer without an IP layer")
                ip = ips[-1]
                transports.append(
                    Transport(
                        proto=PROTO_NUM[p],
                        src=(ip.src, int(sp)),
                        dst=(ip.dst, int(dp)),
                        ip_index=len(ips) - 1,
                        in_error=in_error,
                        bogus=bogus,
                        layers_above=protos[pos + 1:],
                    )
                )
        frag_list = [int(x) for x in _split(f["ip.fragment"]) + _split(f["ipv6.fragment"])]
        is_frag = any(ip.is_fragment for ip in ips)
        frames[num] = Frame(num, int(f["frame.len"]), protos, ips, transports, frag_list, is_frag)
    return frames


# ---------------------------------------------------------------------------------------------
# Expected counters per conversation
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Dir:
    pkts: int = 0
    bytes: int = 0

    def add(self, p: int, b: int) -> None:
        self.pkts += p
        self.bytes += b

    def t(self) -> Tuple[int, int]:
        return (self.pkts, self.bytes)


@dataclasses.dataclass
class ExpectedConv:
    key: ConvKey
    # Directed counters keyed by (src endpoint, dst endpoint).
    frames: Dict[Tuple[Endpoint, Endpoint], Dir]  # tshark frames and frame bytes
    ip: Dict[Tuple[Endpoint, Endpoint], Dir]  # tshark frames and IP bytes (the plain oracle)
    ip_frag: Dict[Tuple[Endpoint, Endpoint], Dir]  # reassembled datagrams expanded to fragments
    tshark_rows: int = 0  # conversation-table rows with these endpoints
    has_fragments: bool = False
    outer_tunnel: Optional[str] = None  # sonde-decapsulated tunnel every frame carries
    # Frames (IP counts) of this conversation that carry a tunnel sonde peels, when not all do
    # (a CAPWAP data channel carries IP and also ARP, CDP or encrypted frames).
    peeled: Dict[Tuple[Endpoint, Endpoint], Dir] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(Dir))
    inner_of: Optional[str] = None  # encapsulation (not peeled by sonde) around every frame
    frame_numbers: List[int] = dataclasses.field(default_factory=list)
    # Later IP fragments in no tshark conversation (their datagram was not reassembled, or its
    # transport header is bogus). sonde cannot learn their ports, so it counts them in a flow
    # with ports 0; this pseudo-conversation holds what tshark says those fragments are.
    orphan_fragments: bool = False


def sonde_tunnel_above(t: Transport) -> Optional[str]:
    """The tunnel sonde peels right above this UDP header, if tshark decoded one there that
    carries a packet (VXLAN to UDP 4789 carrying Ethernet, GTP-U on UDP 2152 carrying IP,
    CAPWAP data on UDP 5247 carrying an 802.11 frame with LLC, or Ethernet, then IP)."""
    if t.proto != 17 or len(t.layers_above) < 2:
        return None
    layer, nxt = t.layers_above[0], t.layers_above[1]
    if layer == "vxlan" and t.dst[1] == SONDE_UDP_TUNNELS["vxlan"] and nxt == "eth":
        return layer
    if layer == "gtp" and SONDE_UDP_TUNNELS["gtp"] in (t.src[1], t.dst[1]) and nxt in ("ip", "ipv6"):
        return "gtp-u"
    if layer == "capwap.data" and SONDE_UDP_TUNNELS["capwap"] in (t.src[1], t.dst[1]):
        inner = t.layers_above[1:4]
        if inner[:2] in (["wlan", "llc"], ["eth", "ethertype"]) and inner[2:] in (["ip"], ["ipv6"]):
            return "capwap"
    return None


def conv_key(proto: int, a: Endpoint, b: Endpoint) -> ConvKey:
    return (proto, frozenset((a, b)))


def key_text(key: ConvKey) -> str:
    proto, eps = key
    e = sorted(eps)
    if len(e) == 1:
        e = e * 2
    fmt = lambda ep: (f"[{ep[0]}]:{ep[1]}" if ":" in ep[0] else f"{ep[0]}:{ep[1]}")
    return f"{PROTO_NAME.get(proto, proto)} {fmt(e[0])} <-> {fmt(e[1])}"


def expected_conversations(pcap: str) -> Tuple[Dict[ConvKey, ExpectedConv], Dict[int, Frame]]:
    """Builds expected per-direction counters from tshark, and self-checks them against
    tshark's conversation table."""
    frames = dissect(pcap)
    rows = parse_conv(tshark(["-q", "-r", pcap, "-z", "conv,tcp", "-z", "conv,udp"]))
    convs: Dict[ConvKey, ExpectedConv] = {}

    def get(key: ConvKey) -> ExpectedConv:
        c = convs.get(key)
        if c is None:
            c = convs[key] = ExpectedConv(
                key, collections.defaultdict(Dir), collections.defaultdict(Dir),
                collections.defaultdict(Dir),
            )
        return c

    outer: Dict[ConvKey, List[Optional[str]]] = collections.defaultdict(list)
    inner: Dict[ConvKey, List[Optional[str]]] = collections.defaultdict(list)
    for fr in frames.values():
        for t in fr.transports:
            if t.in_error or t.bogus:
                continue
            key = conv_key(t.proto, t.src, t.dst)
            c = get(key)
            d = (t.src, t.dst)
            ip = fr.ips[t.ip_index]
            c.frames[d].add(1, fr.length)
            c.ip[d].add(1, ip.length)
            c.frame_numbers.append(fr.number)
            if fr.fragments:
                c.has_fragments = True
                for n in fr.fragments:
                    ff = frames[n]
                    c.ip_frag[d].add(1, ff.ips[t.ip_index].length)
            else:
                c.ip_frag[d].add(1, ip.length)
            if fr.is_fragment:
                c.has_fragments = True
            tunnel = sonde_tunnel_above(t)
            outer[key].append(tunnel)
            if tunnel:
                c.peeled[d].add(1, ip.length)
            # An encapsulation below this transport that sonde does not peel (e.g. Teredo):
            # sonde reports the outer flow, tshark also this inner one.
            below = fr.protocols[: fr.protocols.index("tcp" if t.proto == 6 else "udp")]
            inner[key].append(next((l for l in below if l in OTHER_TUNNEL_LAYERS), None))
    # Frames accounted above, directly or as a fragment of a reassembled datagram.
    covered = set()
    for fr in frames.values():
        if any(not t.in_error and not t.bogus for t in fr.transports):
            covered.add(fr.number)
            covered.update(fr.fragments)
    for fr in frames.values():
        if fr.number in covered:
            continue
        later = [ip for ip in fr.ips if ip.frag_offset != 0]
        if not later:
            continue
        ip = later[0]
        src, dst = (ip.src, 0), (ip.dst, 0)
        key = conv_key(ip.proto, src, dst)
        c = get(key)
        c.orphan_fragments = True
        c.has_fragments = True
        c.ip[(src, dst)].add(1, ip.length)
        c.ip_frag[(src, dst)].add(1, ip.length)
        c.frame_numbers.append(fr.number)

    for key, tuns in outer.items():
        if all(tuns) and len(set(tuns)) == 1:
            convs[key].outer_tunnel = tuns[0]
    for key, tuns in inner.items():
        if all(tuns) and len(set(tuns)) == 1:
            convs[key].inner_of = tuns[0]

    # Self-check against the conversation table: frames exact, bytes as tshark prints them.
    table: Dict[ConvKey, Dict[Tuple[Endpoint, Endpoint], List]] = collections.defaultdict(
        lambda: collections.defaultdict(lambda: [0, []])
    )
    nrows: Dict[ConvKey, int] = collections.Counter()
    for r in rows:
        key = conv_key(r.proto, r.a, r.b)
        nrows[key] += 1
        for d, fr_n, by in (((r.b, r.a), r.frames_b_to_a, r.bytes_b_to_a),
                            ((r.a, r.b), r.frames_a_to_b, r.bytes_a_to_b)):
            table[key][d][0] += fr_n
            table[key][d][1].append(by)
    problems = []
    for key in set(table) | {k for k, c in convs.items() if not c.orphan_fragments}:
        if key not in convs:
            problems.append(f"{key_text(key)}: in tshark's table but no frame found")
            continue
        if key not in table:
            problems.append(f"{key_text(key)}: frames found but not in tshark's table")
            continue
        convs[key].tshark_rows = nrows[key]
        for d in set(table[key]) | set(convs[key].frames):
            tf, tb = table[key][d]
            mine = convs[key].frames[d]
            if tf != mine.pkts:
                problems.append(f"{key_text(key)} {d}: table {tf} frames, ours {mine.pkts}")
            # With one row per direction the printed bytes must be how tshark prints our sum.
            nz = [b for b in tb if not b.startswith("0 ")]
            if len(nz) == 1 and nz[0] != tshark_size_text(mine.bytes):
                problems.append(
                    f"{key_text(key)} {d}: table {nz[0]}, ours {mine.bytes} "
                    f"({tshark_size_text(mine.bytes)})"
                )
    if problems:
        raise OracleError(f"{pcap}: per-frame reading disagrees with tshark's conversation "
                          f"table:\n  " + "\n  ".join(sorted(problems)[:30]))
    return convs, frames


# ---------------------------------------------------------------------------------------------
# sonde side
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SondeConv:
    key: ConvKey
    dirs: Dict[Tuple[Endpoint, Endpoint], Dir]
    records: List[dict]

    @property
    def vlans(self) -> List[int]:
        return sorted({int(r.get("VLAN_ID", 0) or 0) for r in self.records})

    @property
    def fragments(self) -> int:
        return sum(int(r.get("FRAGMENTS", 0) or 0) for r in self.records)

    @property
    def tunnels(self) -> List[str]:
        return sorted({str(r.get("TUNNEL", "none")) for r in self.records})


def record_endpoints(r: dict) -> Tuple[int, Endpoint, Endpoint]:
    if "IPV4_SRC_ADDR" in r:
        s, d = r["IPV4_SRC_ADDR"], r["IPV4_DST_ADDR"]
    else:
        s, d = r["IPV6_SRC_ADDR"], r["IPV6_DST_ADDR"]
    return (
        int(r["PROTOCOL"]),
        (norm_addr(s), int(r.get("L4_SRC_PORT", 0) or 0)),
        (norm_addr(d), int(r.get("L4_DST_PORT", 0) or 0)),
    )


def load_jsonl(path: str) -> List[dict]:
    out = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise AssertionError(f"{path}:{n}: not JSON ({e}): {line[:200]}")
    return out


def sonde_conversations(records: Iterable[dict]) -> Dict[ConvKey, SondeConv]:
    """Sums sonde's records per (protocol, unordered endpoints).

    Records with the same key are added up: sonde may legitimately emit several records for
    one 5-tuple (a TCP flow closed by FIN/RST and idle for 10 s ends, and a later packet with
    the same 5-tuple opens a new record), and it keeps flows on different VLANs apart while
    tshark's TCP/UDP conversation table ignores VLANs. Counters are kept per direction by
    endpoint (SRC -> DST is IN_*, DST -> SRC is OUT_*), so summing is exact whichever side
    each record calls the client.
    """
    convs: Dict[ConvKey, SondeConv] = {}
    for r in records:
        proto, s, d = record_endpoints(r)
        key = conv_key(proto, s, d)
        c = convs.setdefault(key, SondeConv(key, collections.defaultdict(Dir), []))
        c.records.append(r)
        c.dirs[(s, d)].add(int(r["IN_PKTS"]), int(r["IN_BYTES"]))
        c.dirs[(d, s)].add(int(r["OUT_PKTS"]), int(r["OUT_BYTES"]))
    return convs


def directed_equal(a: Dict[Tuple[Endpoint, Endpoint], Dir], b: Dict[Tuple[Endpoint, Endpoint], Dir]) -> bool:
    keys = set(a) | set(b)
    return all(a.get(k, Dir()).t() == b.get(k, Dir()).t() for k in keys)


def directed_text(c: Dict[Tuple[Endpoint, Endpoint], Dir], key: ConvKey) -> str:
    eps = sorted(key[1])
    if len(eps) == 1:
        eps = eps * 2
    a, b = eps
    ab = c.get((a, b), Dir())
    ba = c.get((b, a), Dir())
    return f"A->B {ab.pkts} pkts {ab.bytes} B, B->A {ba.pkts} pkts {ba.bytes} B"


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

EXACT = "exact"
# Reasons for a legitimate difference. Each is checked from tshark's output, not assumed.
R_FRAGMENTS = "(a) IP fragments: tshark counts one frame per reassembled datagram, sonde every " \
              "fragment"
R_TUNNEL_OUTER = "(b) tunnel outer conversation: sonde reports the inner flow only"
R_TUNNEL_INNER = "(c) inner conversation of an encapsulation sonde does not decapsulate"
R_TUNNEL_SOME = "(d) tunnel outer conversation, some frames: sonde reports their inner flows"


def minus(a: Dict[Tuple[Endpoint, Endpoint], Dir],
          b: Dict[Tuple[Endpoint, Endpoint], Dir]) -> Dict[Tuple[Endpoint, Endpoint], Dir]:
    out: Dict[Tuple[Endpoint, Endpoint], Dir] = collections.defaultdict(Dir)
    for d, v in a.items():
        w = b.get(d, Dir())
        if v.pkts > w.pkts:
            out[d] = Dir(v.pkts - w.pkts, v.bytes - w.bytes)
    return out


@dataclasses.dataclass
class Outcome:
    key: ConvKey
    status: str  # EXACT, a reason above, or "MISMATCH"
    detail: str
    tshark_rows: int = 0
    sonde_records: int = 0
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "MISMATCH"


def compare(expected: Dict[ConvKey, ExpectedConv], sonde: Dict[ConvKey, SondeConv]) -> List[Outcome]:
    out: List[Outcome] = []
    keys = {k for k in expected} | {k for k in sonde if k[0] in PROTO_NAME}
    for key in sorted(keys, key=key_text):
        e = expected.get(key)
        s = sonde.get(key)
        notes = []
        if e and e.tshark_rows > 1:
            notes.append(f"tshark splits it into {e.tshark_rows} conversations (summed)")
        if s and len(s.records) > 1:
            notes.append(f"{len(s.records)} sonde records (summed)")
        if s and len(s.vlans) > 1:
            notes.append(f"VLANs {s.vlans} (tshark's conversations ignore VLAN)")
        note = "; ".join(notes)
        nrows = e.tshark_rows if e else 0
        nrec = len(s.records) if s else 0
        if e and s:
            if e.orphan_fragments and directed_equal(e.ip, s.dirs):
                out.append(Outcome(
                    key, R_FRAGMENTS,
                    f"later fragments in no tshark conversation (first fragment missing, or its "
                    f"transport header undecodable), counted by sonde with ports 0: "
                    f"{directed_text(s.dirs, key)} == tshark's fragment frames", nrows, nrec,
                    note))
            elif directed_equal(e.ip, s.dirs):
                out.append(Outcome(key, EXACT, directed_text(s.dirs, key), nrows, nrec, note))
            elif e.peeled and directed_equal(minus(e.ip, e.peeled), s.dirs):
                out.append(Outcome(
                    key, R_TUNNEL_SOME,
                    f"tshark {directed_text(e.ip, key)}, less the frames carrying a tunnel "
                    f"sonde peels {directed_text(e.peeled, key)} == sonde", nrows, nrec, note))
            elif e.has_fragments and directed_equal(e.ip_frag, s.dirs):
                out.append(Outcome(
                    key, R_FRAGMENTS,
                    f"tshark {directed_text(e.ip, key)}; expanded to fragments "
                    f"{directed_text(e.ip_frag, key)} == sonde", nrows, nrec, note))
            else:
                exp = e.ip_frag if e.has_fragments else e.ip
                what = ("tshark's later fragments in no conversation" if e.orphan_fragments
                        else "tshark, fragments expanded" if e.has_fragments else "tshark")
                out.append(Outcome(
                    key, "MISMATCH",
                    f"expected ({what}) {directed_text(exp, key)}; "
                    f"sonde {directed_text(s.dirs, key)}", nrows, nrec, note))
        elif e:
            if e.outer_tunnel:
                out.append(Outcome(
                    key, R_TUNNEL_OUTER,
                    f"every frame carries {e.outer_tunnel}; tshark {directed_text(e.ip, key)}",
                    nrows, 0, note))
            elif e.inner_of:
                out.append(Outcome(
                    key, R_TUNNEL_INNER,
                    f"every frame is inside {e.inner_of}, which sonde counts as the outer UDP "
                    f"flow; tshark {directed_text(e.ip, key)}", nrows, 0, note))
            else:
                exp = (f"tshark, fragments expanded: {directed_text(e.ip_frag, key)}"
                       if e.has_fragments else f"tshark {directed_text(e.ip, key)}")
                out.append(Outcome(key, "MISMATCH", f"missing in sonde; {exp}", nrows, 0, note))
        else:
            assert s is not None
            out.append(Outcome(
                key, "MISMATCH",
                f"sonde only (no tshark conversation): {directed_text(s.dirs, key)}, "
                f"fragments={s.fragments} tunnel={s.tunnels}", 0, nrec, note))
    return out


def ipv4_endpoints(pcap: str) -> Dict[str, Tuple[int, int]]:
    """IPv4 endpoint -> (packets sent, packets received), from ``tshark -z endpoints,ip``."""
    out = tshark(["-r", str(pcap), "-q", "-z", "endpoints,ip"])
    eps = {}
    for line in out.splitlines():
        m = re.match(r"^(\d+\.\d+\.\d+\.\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)",
                     line.strip())
        if m:
            eps[m.group(1)] = (int(m.group(4)), int(m.group(6)))
    return eps


def record_directions(records) -> "collections.Counter":
    """Packets and bytes per direction (proto, from, to) of flow records (JSON, nProbe keys):
    the same traffic gives the same counter whatever flows it was cut into."""
    import collections
    c = collections.Counter()
    for r in records:
        proto, a, b = record_endpoints(r)
        c[(proto, a, b, "pkts")] += int(r["IN_PKTS"])
        c[(proto, a, b, "bytes")] += int(r["IN_BYTES"])
        c[(proto, b, a, "pkts")] += int(r["OUT_PKTS"])
        c[(proto, b, a, "bytes")] += int(r["OUT_BYTES"])
    return +c
