"""sonde's application labels against nDPI's own expected results (issue 3).

For every capture of the corpus, the built-in DPI's protocol per flow is compared with the
`.out` file nDPI's test suite ships (see ndpi_oracle.py for the rules). The whole corpus must
agree on at least MIN_AGREEMENT of the flows where either side names a protocol sonde claims;
`SONDE_WRITE_REPORT=1` rewrites DPI_ACCURACY.md with the per-capture table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ndpi_oracle
import oracle
from conftest import corpus_files

# Built-in: the target. nDPI: Debian's libndpi 4.2 against results made by nDPI of
# late 2024, so only a floor that catches a broken backend; the report has the real figure.
MIN_AGREEMENT = {"builtin": 0.95, "ndpi": 0.80}
HERE = Path(__file__).resolve().parent
ARGS = ["--idle-timeout", "100000", "--active-timeout", "0", "-q"]


@pytest.mark.parametrize("backend", ["builtin", "ndpi"])
def test_dpi_agrees_with_ndpi(backend, sonde, corpus, tmp_path):
    probe = sonde("-r", corpus_files()[0], "--dpi", backend, "-q")
    if backend == "ndpi" and "without the nDPI backend" in probe.stderr:
        pytest.skip("sonde built without --features ndpi")
    results = []
    for pcap in corpus_files():
        out = pcap.with_name(pcap.name + ".out")
        if not out.is_file():
            continue
        flows = tmp_path / f"{pcap.name}.jsonl"
        p = sonde("-r", pcap, "--flows-out", flows, "--dpi", backend, *ARGS)
        assert p.returncode == 0 and "panicked" not in p.stderr, f"{pcap.name}: {p.stderr}"
        labels = ndpi_oracle.sonde_labels(oracle.load_jsonl(str(flows)))
        results.append(ndpi_oracle.compare(pcap.name, ndpi_oracle.parse_out(out), labels))
    assert results, "no capture with an nDPI .out file"
    title = {"builtin": "sonde's built-in DPI", "ndpi": "sonde --dpi ndpi (Debian libndpi 4.2)"}
    report = ndpi_oracle.markdown(
        results, f"{title[backend]} vs nDPI's expected results",
        "SONDE_WRITE_REPORT=1 python3 -m pytest tests/system/test_dpi_accuracy.py")
    if os.environ.get("SONDE_WRITE_REPORT") == "1":
        name = "DPI_ACCURACY.md" if backend == "builtin" else "DPI_ACCURACY_NDPI.md"
        (HERE / name).write_text(report)
    relevant = sum(r.relevant for r in results)
    agree = sum(r.agree for r in results)
    share = agree / relevant
    summary = report.split("**Overall: ")[1].split("**")[0]
    print("\n" + summary)
    assert share >= MIN_AGREEMENT[backend], (
        f"--dpi {backend} agrees with nDPI on {agree}/{relevant} flows ({100 * share:.1f}%), "
        f"below {100 * MIN_AGREEMENT[backend]:.0f}%:\n" + "\n".join(
            f"{r.capture}: {w}" for r in results for w in (r.missed + r.wrong)[:5])[:6000])
