"""sonde's application labels against nDPI's, on three capture sets (issues 3 and 19).

1. The development corpus (`../shared/corpus/ndpi/`): nDPI's test captures with the `.out`
   results of nDPI's test suite.
2. nDPI 4.2's own test captures from Debian's source package (scripts/fetch-ndpi-tests.sh puts
   them in .cache/ndpi-4.2), minus those of the same name in the corpus, against the `.out`
   results shipped with them: captures nobody tuned the detectors on.
3. Captures recorded here from real clients and servers on loopback (tests/dpi_loopback/, made
   by scripts/record-dpi-loopback.sh), against nDPI's own reader (`ndpiReader`, Debian's
   libndpi-bin 4.2) run on them now.

See ndpi_oracle.py for how flows are matched and counted. Agreement, recall and precision must
each reach their floor on every set; `SONDE_WRITE_REPORT=1` rewrites DPI_ACCURACY.md (built-in
DPI, all three sets) and DPI_ACCURACY_NDPI.md (the nDPI backend on the corpus).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import ndpi_oracle
import ndpi_reader
import oracle
from conftest import REPO, corpus_files

HERE = Path(__file__).resolve().parent
ARGS = ["--idle-timeout", "100000", "--active-timeout", "0", "-q"]
COMMAND = "SONDE_WRITE_REPORT=1 python3 -m pytest tests/system/test_dpi_accuracy.py"
NDPI_SET = Path(os.environ.get("SONDE_NDPI_TESTS", str(REPO / ".cache" / "ndpi-4.2")))
LOOPBACK = REPO / "tests" / "dpi_loopback"

# Floors per set: agreement, recall and precision of the built-in DPI. The nDPI backend is
# Debian's libndpi 4.2 against results made by nDPI of late 2024 (the corpus), so only a floor
# that catches a broken backend; its report has the real figure.
FLOOR = {"corpus": 0.97, "ndpi-4.2": 0.97, "loopback": 0.97}
NDPI_BACKEND_FLOOR = 0.80


def _sonde_labels(sonde, pcap: Path, backend: str, tmp: Path) -> Tuple[Dict, str]:
    """sonde's labels for one capture, or ({}, why) when sonde cannot read the file."""
    flows = tmp / f"{pcap.name}.jsonl"
    p = sonde("-r", pcap, "--flows-out", flows, "--dpi", backend, *ARGS)
    assert "panicked" not in p.stderr, f"{pcap.name}: {p.stderr}"
    if p.returncode != 0:
        why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
        return {}, why.replace(str(pcap), pcap.name)
    return ndpi_oracle.sonde_labels(oracle.load_jsonl(str(flows))), ""


def _run_set(sonde, pairs, backend, tmp) -> Tuple[List[ndpi_oracle.Agreement], List[str]]:
    """(agreements, captures sonde refused and why) for (capture, reference flows) pairs."""
    results, refused = [], []
    for pcap, reference in pairs:
        labels, why = _sonde_labels(sonde, pcap, backend, tmp)
        if why:
            refused.append(f"{pcap.name}: {why}")
            continue
        results.append(ndpi_oracle.compare(pcap.name, reference(), labels))
    return results, refused


def _corpus_pairs():
    return [(p, lambda p=p: ndpi_oracle.parse_out(p.with_name(p.name + ".out")))
            for p in corpus_files() if p.with_name(p.name + ".out").is_file()]


def _ndpi_set_pairs():
    taken = {p.name for p in corpus_files()}
    pcaps = sorted(p for p in (NDPI_SET / "pcap").iterdir()
                   if p.suffix in (".pcap", ".pcapng", ".cap") and p.name not in taken)
    return [(p, lambda p=p: ndpi_oracle.parse_out(NDPI_SET / "result" / (p.name + ".out")))
            for p in pcaps if (NDPI_SET / "result" / (p.name + ".out")).is_file()]


def _expected_loopback() -> Dict[Tuple[str, int, int], str]:
    """tests/dpi_loopback/expected.tsv: (capture, transport, port) -> the label the flows
    carry by construction, where ndpiReader says otherwise."""
    out = {}
    for line in (LOOPBACK / "expected.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            capture, l4, port, label, _why = line.split("\t")
            out[(capture, ndpi_oracle.L4[l4], int(port))] = label
    return out


def _loopback_reference(pcap: Path, expected: bool) -> List[ndpi_oracle.NdpiFlow]:
    flows = ndpi_reader.ndpi_reader_flows(pcap)
    if not expected:
        return flows
    fixed = _expected_loopback()
    for f in flows:
        for _addr, port in f.key[1]:
            label = fixed.get((pcap.name, f.key[0], port))
            if label:
                f.label, f.guessed = label, False
    return flows


def _loopback_pairs(expected: bool = True):
    return [(p, lambda p=p: _loopback_reference(p, expected))
            for p in sorted(LOOPBACK.glob("*.pcap"))]


def _check(name: str, results, floor: float) -> List[str]:
    """The floors of one set: a list of what fell short (empty when all hold)."""
    tot = ndpi_oracle.total(results)
    score = ndpi_oracle.per_protocol(results)["TOTAL"]
    short = []
    for what, value in (("agreement", tot.share), ("recall", score.recall),
                        ("precision", score.precision)):
        if value is None or value < floor:
            short.append(f"{name}: {what} {value} below {floor}")
    if short:
        short += [f"  {r.capture}: {w}" for r in results for w in (r.missed + r.wrong)][:40]
    return short


def test_builtin_dpi_agrees_with_ndpi_on_three_sets(sonde, corpus, tmp_path):
    if not (NDPI_SET / ".complete").is_file():
        pytest.fail(f"nDPI 4.2's test set is missing from {NDPI_SET}: "
                    "run scripts/fetch-ndpi-tests.sh (scripts/setup-test-deps.sh does)")
    ndpi_reader.ndpi_reader_path()  # a clear error when ndpiReader is not installed
    sets = {}
    for name, pairs in (("corpus", _corpus_pairs()), ("ndpi-4.2", _ndpi_set_pairs()),
                        ("loopback", _loopback_pairs()),
                        ("loopback-raw", _loopback_pairs(expected=False))):
        assert pairs, f"the {name} set has no capture"
        sets[name] = _run_set(sonde, pairs, "builtin", tmp_path)
    about = {
        "corpus": ("Set 1: the development corpus, ../shared/corpus/ndpi/",
                   "Reference: the `.out` file nDPI's test suite keeps beside each capture."),
        "ndpi-4.2": ("Set 2: nDPI 4.2's test captures (Debian source package), not in the corpus",
                     "Captures and reference from `ndpi_4.2.orig.tar.gz` (deb.debian.org, "
                     "nDPI's `tests/pcap` and `tests/result`, LGPL-3.0; fetched by "
                     "`scripts/fetch-ndpi-tests.sh`), leaving out the captures whose names are "
                     "in the corpus. The detectors were not developed on these."),
        "loopback": ("Set 3: real clients and servers recorded on loopback, tests/dpi_loopback/",
                     "Reference: `ndpiReader` (Debian's libndpi-bin 4.2) run on each capture "
                     "(tests/system/ndpi_reader.py), except the flows "
                     "`tests/dpi_loopback/expected.tsv` names, whose protocol is known by "
                     "construction and where nDPI 4.2 is wrong or silent (each line says why). "
                     "How each capture was recorded is in tests/dpi_loopback/README.md."),
        "loopback-raw": ("Set 3 against ndpiReader alone",
                         "The same captures with ndpiReader's labels for every flow, "
                         "expected.tsv not applied (reported, no floor)."),
    }
    parts = ["# sonde's built-in DPI vs nDPI", "",
             f"Generated by `{COMMAND}`. Do not edit by hand.", "", ndpi_oracle.RULES, ""]
    failures = []
    for name, (results, refused) in sets.items():
        heading, text = about[name]
        if refused:
            text += "\n\nsonde refused these files (so they are not counted):\n" + "\n".join(
                f"* {r}" for r in refused)
        parts.append(ndpi_oracle.markdown_section(results, heading, text))
        if name in FLOOR:
            failures += _check(name, results, FLOOR[name])
        tot = ndpi_oracle.total(results)
        score = ndpi_oracle.per_protocol(results)["TOTAL"]
        print(f"\n{name}: {tot.agree}/{tot.relevant} agree, recall {score.recall:.3f}, "
              f"precision {score.precision:.3f}")
    if os.environ.get("SONDE_WRITE_REPORT") == "1":
        (HERE / "DPI_ACCURACY.md").write_text("\n".join(parts))
    assert not failures, "\n".join(failures)


def test_ndpi_backend_agrees_with_ndpi(sonde, corpus, tmp_path):
    probe = sonde("-r", corpus_files()[0], "--dpi", "ndpi", "-q")
    if "without the nDPI backend" in probe.stderr:
        pytest.skip("sonde built without --features ndpi")
    results, refused = _run_set(sonde, _corpus_pairs(), "ndpi", tmp_path)
    assert results and not refused, refused
    report = ndpi_oracle.markdown(results, "sonde --dpi ndpi (Debian libndpi 4.2) vs nDPI's "
                                  "expected results", COMMAND)
    if os.environ.get("SONDE_WRITE_REPORT") == "1":
        (HERE / "DPI_ACCURACY_NDPI.md").write_text(report)
    tot = ndpi_oracle.total(results)
    assert tot.share >= NDPI_BACKEND_FLOOR, (
        f"--dpi ndpi agrees with nDPI on {tot.agree}/{tot.relevant} flows, below "
        f"{100 * NDPI_BACKEND_FLOOR:.0f}%:\n"
        + "\n".join(f"{r.capture}: {w}" for r in results for w in (r.missed + r.wrong)[:5]))
