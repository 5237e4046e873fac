"""Bad input: every case must end with a non-zero exit status and exactly one stderr line
``sonde: error: ...`` that names the problem, and never with a panic."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import pytest

import oracle


def assert_clean_error(p: subprocess.CompletedProcess, names: str, what: str, paths=()) -> str:
    """`names`: regex (case-insensitive) the error line must match to name the problem; the
    `paths` given are cut out of the line first, so a word in a file name cannot match."""
    err = p.stderr
    assert "panicked at" not in err and "RUST_BACKTRACE" not in err, f"{what}: sonde panicked:\n{err}"
    assert p.returncode != 0, f"{what}: exit status 0, expected an error; stderr:\n{err}"
    assert p.returncode < 128 and p.returncode > 0, f"{what}: killed by a signal? rc={p.returncode}"
    lines = [l for l in err.splitlines() if l.startswith("sonde: error:")]
    assert len(lines) == 1, (
        f"{what}: expected exactly one 'sonde: error:' line on stderr, got {len(lines)}:\n{err}")
    text = lines[0]
    for path in paths:
        text = text.replace(str(path), "<path>")
    assert re.search(names, text, re.I), (
        f"{what}: the error line does not name the problem (wanted /{names}/):\n{lines[0]}")
    return lines[0]


# ---------------------------------------------------------------------------------------------
# Truncated captures
# ---------------------------------------------------------------------------------------------

def pcap_record_ends(data: bytes):
    """Offsets where each record of a classic pcap file ends (any byte order / ns variant)."""
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise ValueError("not a classic pcap")
    off, ends = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
        off += 16 + incl
        if off > len(data):
            break
        ends.append(off)
    return ends


def pcapng_record_ends(data: bytes):
    """(offset where each block ends, whether it is a packet block) for a pcapng file."""
    if data[:4] != b"\x0a\x0d\x0d\x0a":
        raise ValueError("not pcapng")
    e = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    off, ends = 0, []
    while off + 12 <= len(data):
        btype, blen = struct.unpack(e + "II", data[off:off + 8])
        if blen < 12:
            raise ValueError("bad block")
        off += blen
        if off > len(data):
            break
        ends.append((off, btype in (2, 3, 6)))
    return ends


def truncated_copy(src: Path, dst: Path, keep: int):
    """Writes `src` cut in the middle of packet record number keep+1; returns packets kept."""
    data = src.read_bytes()
    if src.suffix == ".pcap":
        ends = pcap_record_ends(data)
        assert len(ends) > keep + 1
        cut = ends[keep - 1] + (ends[keep] - ends[keep - 1]) // 2
    else:
        blocks = pcapng_record_ends(data)
        pkt_ends = [o for o, is_pkt in blocks if is_pkt]
        assert len(pkt_ends) > keep + 1
        cut = pkt_ends[keep - 1] + (pkt_ends[keep] - pkt_ends[keep - 1]) // 2
        # The cut must land inside the next packet block, not in a block before it.
        nxt = next(o for o, is_pkt in blocks if o > pkt_ends[keep - 1])
        assert nxt == pkt_ends[keep], "a non-packet block follows; pick another cut"
    dst.write_bytes(data[:cut])
    return keep


@pytest.mark.parametrize("name,keep", [("443-firefox.pcap", 300), ("http.pcapng", 6)])
def test_truncated_capture(name, keep, sonde, corpus, workdir):
    src = corpus / name
    if not src.is_file():
        pytest.skip(f"{src} not in corpus")
    bad = workdir / ("cut-" + name)
    truncated_copy(src, bad, keep)
    flows, stats = workdir / "flows.jsonl", workdir / "stats.json"
    p = sonde("-r", bad, "--flows-out", flows, "--stats-json", stats, "-q", timeout=60)
    assert_clean_error(p, r"truncat", f"capture cut inside packet {keep + 1}", [bad])
    # The complete packets before the cut were processed and their flows written. Both files
    # hold only well-formed IP packets, so every kept packet lands in a flow.
    assert flows.is_file(), "no flow records written for the complete packets"
    records = oracle.load_jsonl(str(flows))
    got = sum(int(r["IN_PKTS"]) + int(r["OUT_PKTS"]) for r in records)
    assert got == keep, f"flow records hold {got} packets, the {keep} complete ones expected"
    if stats.is_file():
        import json

        s = json.loads(stats.read_text())
        assert s["packets"] == keep, f"stats packets {s['packets']} != {keep} complete packets"


def test_truncated_global_header(sonde, corpus, workdir):
    bad = workdir / "header-only.pcap"
    bad.write_bytes((corpus / "dns.pcap").read_bytes()[:10])
    p = sonde("-r", bad, "-q", timeout=60)
    assert_clean_error(p, r"truncat|short|header|end of file|eof", "10-byte pcap", [bad])


# ---------------------------------------------------------------------------------------------
# Files that are not captures
# ---------------------------------------------------------------------------------------------

def test_not_a_capture(sonde, workdir):
    f = workdir / "notes.txt"
    f.write_text("this is not a packet capture\n" * 20)
    p = sonde("-r", f, "-q", timeout=60)
    assert_clean_error(p, r"not a pcap|format|magic|not a capture", "text file as capture", [f])


def test_missing_file(sonde, workdir):
    f = workdir / "does-not-exist.pcap"
    p = sonde("-r", f, "-q", timeout=60)
    line = assert_clean_error(p, r"no such file|not found|does not exist", "missing file", [f])
    assert "does-not-exist.pcap" in line, f"the error should name the file: {line}"


def test_empty_file(sonde, workdir):
    f = workdir / "zero-length.pcap"
    f.write_bytes(b"")
    p = sonde("-r", f, "-q", timeout=60)
    # An empty file has no header to quote: the message must say so rather than describe
    # bytes that are not there.
    assert_clean_error(p, r"empty|0 bytes|no data|truncat", "empty file", [f])


def test_directory_as_capture(sonde, workdir):
    p = sonde("-r", workdir, "-q", timeout=60)
    assert_clean_error(p, r"director", "directory as capture", [workdir])


# ---------------------------------------------------------------------------------------------
# Live capture, filters, arguments
# ---------------------------------------------------------------------------------------------

def test_unknown_interface(sonde):
    try:
        p = sonde("-i", "nosuchif0", "-q", timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("sonde -i nosuchif0 kept running instead of failing")
    assert_clean_error(p, r"nosuchif0", "unknown interface")


@pytest.mark.parametrize("cpus,why", [
    ("0-4095", r"4096 CPU\(s\) for 1 shard"),  # more CPUs than shards
    (str(os.cpu_count() + 64), r"not one sonde may run on \(allowed here: "),  # beyond the machine
    ("3-1", r"not a CPU number or a range"),
    ("1,1", r"listed twice"),
])
def test_bad_cpu_list(cpus, why, sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", "--cpus", cpus, "-q", timeout=60)
    assert_clean_error(p, why, f"--cpus {cpus}")


@pytest.mark.parametrize("bpf", ["port 99999999", "hst 1.2.3.4", "tcp port"])
def test_bad_filter(bpf, sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", "-f", bpf, "-q", timeout=60)
    assert_clean_error(p, r"filter|bpf", f"bad BPF filter {bpf!r}")


def test_no_capture_permission(sonde_bin):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user (nobody) for this check")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not installed")
    cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
           str(sonde_bin), "-i", "lo", "-q"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/",
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("sonde -i lo as nobody kept running: it should have been refused")
    assert not p.stderr.startswith("setpriv:"), \
        f"nobody cannot run {sonde_bin} (make its path world-readable):\n{p.stderr}"
    assert_clean_error(p, r"permi|privilege|not permitted|root|cap_net_raw", "capture as nobody")


def test_unknown_flag(sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", "--no-such-flag", timeout=60)
    assert_clean_error(p, r"no-such-flag", "unknown flag")


def test_zero_threads(sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", "--threads", "0", "-q", timeout=60)
    assert_clean_error(p, r"thread", "--threads 0")


def test_unwritable_output(sonde, corpus, workdir):
    out = workdir / "no-such-dir" / "flows.jsonl"
    p = sonde("-r", corpus / "dns.pcap", "--flows-out", out, "-q", timeout=60)
    line = assert_clean_error(p, r"no such file|director|cannot (write|create|open)",
                              "unwritable --flows-out", [out])
    assert str(out) in line, f"the error should name the output file: {line}"


# ---------------------------------------------------------------------------------------------
# DPI options
# ---------------------------------------------------------------------------------------------

def test_bad_services_file_names_file_and_line(sonde, corpus, workdir):
    rules = workdir / "my-services.txt"
    rules.write_text("# mine\nhost example.org Google\nhost example.net NoSuchApp\n")
    p = sonde("-r", corpus / "dns.pcap", "--dpi-services", rules, "-q", timeout=60)
    line = assert_clean_error(p, r"line 3.*unknown application 'NoSuchApp'", "bad services file",
                              [rules])
    assert str(rules) in line, f"the error should name the file: {line}"


def test_missing_services_file(sonde, corpus, workdir):
    p = sonde("-r", corpus / "dns.pcap", "--dpi-services", workdir / "nope.txt", "-q", timeout=60)
    assert_clean_error(p, r"dpi-services.*(no such file|cannot read)", "missing services file",
                       [workdir / "nope.txt"])


def test_user_services_rule_applies(sonde, workdir):
    """A user rule maps the synthetic TLS flows' SNI (www.example.com) to an application."""
    rules = workdir / "svc.txt"
    rules.write_text("host example.com NetFlix\n")
    flows = workdir / "flows.jsonl"
    p = sonde("--synthetic", "hosts=9,packets=9,payload=tls", "--dpi-services", rules,
              "--flows-out", flows, "-q", timeout=60)
    assert p.returncode == 0, p.stderr
    names = {json.loads(l)["L7_PROTO_NAME"] for l in flows.read_text().splitlines()}
    assert names == {"TLS.NetFlix"}, names


# ---------------------------------------------------------------------------------------------
# Flow protocols: collector sources and export targets
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source,names", [
    ("udp://nothost:99", r"not ADDRESS:PORT"),
    ("foo://1.2.3.4:5", r"unknown scheme 'foo'"),
])
def test_bad_collect_source(source, names, sonde):
    p = sonde("--collect", source, "-q", timeout=30)
    assert_clean_error(p, names, f"--collect {source}")


def test_collect_port_in_use(sonde):
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    try:
        p = sonde("--collect", f"udp://127.0.0.1:{port}", "--duration", "1", "-q", timeout=30)
    finally:
        busy.close()
    assert_clean_error(p, r"cannot listen.*in use", "--collect on a busy port")


@pytest.mark.parametrize("flag,target,names", [
    ("--export", "bogus://1.2.3.4:5", r"unknown format 'bogus'"),
    ("--export", "ipfix://nohost", r"not HOST:PORT"),
    ("--export", "ipfix+tcp://127.0.0.1:1", r"cannot connect"),
    ("--zmq-export", "notanendpoint", r"expected tcp://HOST:PORT"),
])
def test_bad_export_target(flag, target, names, sonde, corpus):
    p = sonde("-r", corpus / "dns.pcap", flag, target, "-q", timeout=30)
    assert_clean_error(p, names, f"{flag} {target}")
