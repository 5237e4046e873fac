"""Run nDPI's own reader (`ndpiReader`, Debian package libndpi-bin) on a capture and return its
flows in the shape of ndpi_oracle.NdpiFlow, for captures that have no `.out` file from nDPI's test
suite (tests/dpi_loopback/, recorded by scripts/record-dpi-loopback.sh).

`ndpiReader -i CAPTURE -q -t -v 2 -w FILE` (the options nDPI's own tests/do.sh runs it with;
without `-v 2` the file has no flow lines) writes the same flow lines nDPI's test suite keeps in its
`.out` files (`\t1\tTCP 127.0.0.1:46482 <-> 127.0.0.1:18080 [proto: 7/HTTP][...]`), so
ndpi_oracle.parse_out reads them.

Usage as a script: python3 tests/system/ndpi_reader.py CAPTURE...   (prints one line per flow)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ndpi_oracle  # noqa: E402  (tests/system/ndpi_oracle.py)


class NdpiReaderMissing(RuntimeError):
    """ndpiReader is not installed."""


def ndpi_reader_path() -> str:
    path = shutil.which("ndpiReader")
    if path is None:
        raise NdpiReaderMissing(
            "ndpiReader not found on PATH: install Debian's libndpi-bin "
            "(apt-get install libndpi-bin, or scripts/setup-test-deps.sh)")
    return path


def ndpi_reader_flows(pcap: Path, extra_args: Optional[Sequence[str]] = None,
                      timeout: float = 120.0) -> List[ndpi_oracle.NdpiFlow]:
    """ndpiReader's flows for `pcap` (pcap or pcapng), parsed by ndpi_oracle.parse_out.

    Raises NdpiReaderMissing when ndpiReader is not installed, FileNotFoundError when the capture
    does not exist, and RuntimeError when ndpiReader fails or writes no result file."""
    reader = ndpi_reader_path()
    pcap = Path(pcap)
    if not pcap.is_file():
        raise FileNotFoundError(f"no capture {pcap}")
    with tempfile.TemporaryDirectory(prefix="ndpi-reader-") as tmp:
        out = Path(tmp) / "result.out"
        cmd = [reader, "-i", str(pcap), "-q", "-t", "-v", "2", "-w", str(out),
               *(extra_args or ())]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            tail = proc.stdout.decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
        return ndpi_oracle.parse_out(out)


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for name in argv:
        for f in ndpi_reader_flows(Path(name)):
            ends = " <-> ".join(f"{h}:{p}" for h, p in sorted(f.key[1]))
            guessed = " (guessed)" if f.guessed else ""
            sni = f" sni={f.sni}" if f.sni else ""
            print(f"{name}\t{f.key[0]}\t{ends}\t{f.label}{guessed}{sni}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
