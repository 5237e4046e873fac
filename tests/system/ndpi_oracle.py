"""nDPI's expected results (`<capture>.out` from nDPI's own test suite) as an oracle for
sonde's application labels, and the agreement report.

A flow line of a `.out` file looks like
    `\t3\tTCP 192.168.2.126:49372 <-> 14.136.136.108:80 [proto: 7.295/HTTP.1kxun][IP: 0/Unknown]...`
The label is the name after the slash: `HTTP.1kxun` is protocol HTTP carrying application
1kxun; `TLS` has no application; `WhatsApp` is an application nDPI knows without a carrier
protocol; `GTP:79/IPSec` is the inner flow of a tunnel. sonde and nDPI are compared on the
protocol part (the name before the dot).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

from oracle import norm_addr

# The protocols sonde's built-in DPI claims to detect (crates/dpi/src/proto/).
CLAIMED = frozenset({
    "TLS", "HTTP", "HTTP_Connect", "DNS", "MDNS", "LLMNR", "QUIC", "SSH", "NTP", "SMTP", "IMAP",
    "POP3", "FTP_CONTROL", "SIP", "RTP", "RTCP", "BitTorrent", "SMBv1", "SMBv23", "RDP", "SNMP",
    "MQTT", "STUN", "DHCP", "SMTPS", "IMAPS", "POPS", "DTLS", "NetBIOS", "IRC", "Kerberos",
    "LDAP", "Radius", "SSDP", "Syslog", "TFTP", "WireGuard", "OpenVPN", "IPSec", "Tor",
    "DNScrypt", "AVASTSecureDNS",
})

L4 = {"TCP": 6, "UDP": 17, "ICMP": 1, "ICMPV6": 58}

_LINE = re.compile(
    r"^\s*\d+\s+(?P<l4>\S+)\s+(?P<a>\S+)\s+(?:<->|->|<-)\s+(?P<b>\S+)\s+(?P<rest>.*)$")
_PROTO = re.compile(r"\[proto: (?:[^:\]/]+:)?[0-9.]+/(?P<name>[^\]]+)\]")
_SNI = re.compile(r"\[Hostname/SNI: (?P<sni>[^\]]*)\]")

Key = Tuple[int, FrozenSet[Tuple[str, int]]]


@dataclasses.dataclass
class NdpiFlow:
    key: Key
    label: str      # e.g. "TLS.Google"
    guessed: bool   # nDPI matched it by port/IP, not by payload
    sni: Optional[str]

    @property
    def proto(self) -> str:
        return self.label.split(".")[0]

    @property
    def names(self) -> Tuple[str, ...]:
        """Both parts of the label: nDPI writes SMB as `NetBIOS.SMBv23` (the session layer
        first), DTLS media as `DTLS.GoogleCall`: either part may be the protocol sonde names."""
        return tuple(self.label.split(".", 1))


def _endpoint(text: str) -> Tuple[str, int]:
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
    else:
        addr, _, port = text.rpartition(":")
    try:
        return norm_addr(addr), int(port or 0)
    except ValueError:
        # nDPI sometimes prints an IPv6 address with a stray trailing "::".
        return norm_addr(addr.rstrip(":")), int(port or 0)


def parse_out(path: Path) -> List[NdpiFlow]:
    flows = []
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m or m["l4"] not in L4:
            continue
        p = _PROTO.search(m["rest"])
        if not p:
            continue
        key = (L4[m["l4"]], frozenset({_endpoint(m["a"]), _endpoint(m["b"])}))
        s = _SNI.search(m["rest"])
        guessed = "Confidence: Match by port" in m["rest"] or "Confidence: Match by IP" in m["rest"]
        flows.append(NdpiFlow(key, p["name"], guessed, s["sni"] if s else None))
    return flows


def sonde_labels(records: List[dict]) -> Dict[Key, str]:
    """sonde's label per (protocol, unordered endpoints); the first record's when several."""
    out: Dict[Key, str] = {}
    for r in records:
        if "IPV4_SRC_ADDR" in r:
            s, d = r["IPV4_SRC_ADDR"], r["IPV4_DST_ADDR"]
        else:
            s, d = r["IPV6_SRC_ADDR"], r["IPV6_DST_ADDR"]
        key = (int(r["PROTOCOL"]), frozenset({(norm_addr(s), int(r.get("L4_SRC_PORT", 0))),
                                              (norm_addr(d), int(r.get("L4_DST_PORT", 0)))}))
        out.setdefault(key, str(r.get("L7_PROTO_NAME", "Unknown")))
    return out


@dataclasses.dataclass
class Agreement:
    capture: str
    flows: int = 0
    relevant: int = 0     # nDPI or sonde says a claimed protocol
    agree: int = 0
    missed: List[str] = dataclasses.field(default_factory=list)   # nDPI claimed, sonde other
    wrong: List[str] = dataclasses.field(default_factory=list)    # sonde claimed, nDPI other
    # Per counted flow: nDPI's label parts and sonde's protocol, for the per-protocol table.
    pairs: List[Tuple[Tuple[str, ...], str]] = dataclasses.field(default_factory=list)

    @property
    def share(self) -> Optional[float]:
        return self.agree / self.relevant if self.relevant else None


def compare(capture: str, ndpi: List[NdpiFlow], sonde: Dict[Key, str]) -> Agreement:
    a = Agreement(capture)
    for f in ndpi:
        a.flows += 1
        s_label = sonde.get(f.key)
        s_proto = (s_label or "missing").split(".")[0]
        if s_proto == "NetBIOS" and s_label.split(".")[-1] in ("SMBv1", "SMBv23"):
            # sonde too puts the session layer first (`NetBIOS.SMBv23`): the protocol is SMB.
            s_proto = s_label.split(".")[-1]
        if not CLAIMED.intersection(f.names) and s_proto not in CLAIMED:
            continue
        a.relevant += 1
        a.pairs.append((f.names, s_proto))
        if s_proto in f.names:
            a.agree += 1
            continue
        ends = " <-> ".join(f"{h}:{p}" for h, p in sorted(f.key[1]))
        what = f"{ends}: nDPI {f.label}{' (guessed)' if f.guessed else ''}, sonde {s_label}"
        if CLAIMED.intersection(f.names):
            a.missed.append(what)
        else:
            a.wrong.append(what)
    return a


def total(results: List[Agreement]) -> Agreement:
    tot = Agreement("TOTAL")
    for r in results:
        tot.flows += r.flows
        tot.relevant += r.relevant
        tot.agree += r.agree
        tot.missed += r.missed
        tot.wrong += r.wrong
        tot.pairs += r.pairs
    return tot


@dataclasses.dataclass
class ProtoScore:
    """One protocol: `ndpi` flows nDPI gives it (of which sonde `found`), `sonde` flows sonde
    gives it (of which nDPI agrees on `right`)."""
    proto: str
    ndpi: int = 0
    found: int = 0
    sonde: int = 0
    right: int = 0

    @property
    def recall(self) -> Optional[float]:
        return self.found / self.ndpi if self.ndpi else None

    @property
    def precision(self) -> Optional[float]:
        return self.right / self.sonde if self.sonde else None


def per_protocol(results: List[Agreement]) -> Dict[str, ProtoScore]:
    """Recall and precision per claimed protocol; `TOTAL` over every counted flow (recall:
    flows nDPI labels with a claimed protocol that sonde labels the same; precision: flows
    sonde labels with a claimed protocol that nDPI labels the same)."""
    scores: Dict[str, ProtoScore] = {p: ProtoScore(p) for p in sorted(CLAIMED)}
    tot = ProtoScore("TOTAL")
    for names, s_proto in total(results).pairs:
        agree = s_proto in names
        claimed = [n for n in names if n in CLAIMED]
        for n in claimed:
            scores[n].ndpi += 1
            scores[n].found += agree
        if claimed:
            tot.ndpi += 1
            tot.found += agree
        if s_proto in CLAIMED:
            scores[s_proto].sonde += 1
            scores[s_proto].right += agree
            tot.sonde += 1
            tot.right += agree
    out = {p: s for p, s in scores.items() if s.ndpi or s.sonde}
    out["TOTAL"] = tot
    return out


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown_section(results: List[Agreement], heading: str, about: str) -> str:
    """One set's report: the totals, the per-protocol table, the per-capture table, and every
    flow that disagrees."""
    tot = total(results)
    scores = per_protocol(results)
    t = scores["TOTAL"]
    lines = [
        f"## {heading}",
        "",
        about,
        "",
        f"**Overall: {tot.agree} of {tot.relevant} flows agree ({_pct(tot.share)}); "
        f"{len(tot.missed)} missed, {len(tot.wrong)} wrong; recall {_pct(t.recall)}, "
        f"precision {_pct(t.precision)}.**",
        "",
        "| protocol | nDPI flows | sonde found | recall | sonde flows | nDPI agrees | precision |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in scores.values():
        lines.append(f"| {s.proto} | {s.ndpi} | {s.found} | {_pct(s.recall)} | {s.sonde} | "
                     f"{s.right} | {_pct(s.precision)} |")
    lines += [
        "",
        "| capture | flows | counted | agree | missed | wrong | agreement |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results + [tot]:
        lines.append(f"| {r.capture} | {r.flows} | {r.relevant} | {r.agree} | {len(r.missed)} | "
                     f"{len(r.wrong)} | {_pct(r.share)} |")
    lines += ["", f"### {heading}: flows that disagree", ""]
    for r in results:
        for w in r.missed:
            lines.append(f"* {r.capture}: missed: {w}")
        for w in r.wrong:
            lines.append(f"* {r.capture}: wrong: {w}")
    return "\n".join(lines) + "\n"


RULES = "\n".join([
    "Every flow of the reference is matched to sonde's record with the same protocol and",
    "endpoints. A flow counts when the reference or sonde labels it with one of the protocols",
    "sonde claims:",
    f"{', '.join(sorted(CLAIMED))}.",
    "It agrees when sonde's protocol is the reference's (the part before the dot of",
    "`TLS.Google`), or the part after it where nDPI puts a session layer first",
    "(`NetBIOS.SMBv23`; sonde's `NetBIOS.SMBv23` is SMBv23 too). `missed`: the reference says a claimed protocol, sonde something else;",
    "`wrong`: sonde claims a protocol where the reference says another. Recall: of the flows the",
    "reference gives a claimed protocol, the share sonde labels the same; precision: of the flows",
    "sonde gives a claimed protocol, the share the reference labels the same. Labels nDPI only",
    "guessed from the port are marked `(guessed)` and count like the others.",
])


def markdown(results: List[Agreement], title: str, command: str) -> str:
    return "\n".join([
        f"# {title}",
        "",
        f"Generated by `{command}`. Do not edit by hand.",
        "",
        RULES,
        "",
        markdown_section(results, "nDPI's test captures in ../shared/corpus/ndpi/",
                         "Reference: the `.out` file nDPI's test suite keeps beside each capture."),
    ])
