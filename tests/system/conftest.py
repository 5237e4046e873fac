"""Fixtures for sonde's system tests (run the release binary against real captures).

Environment:
  SONDE_BIN           sonde binary (default <repo>/target/release/sonde; built if missing)
  SONDE_CORPUS        capture directory (default <repo>/../shared/corpus/ndpi)
  SONDE_WRITE_REPORT  =1: (re)write tests/system/EXACTNESS.md from the tshark comparison

Needs tshark and capinfos (scripts/setup-test-deps.sh installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402  (tests/system/report.py)


def corpus_dir() -> Path:
    return Path(os.environ.get("SONDE_CORPUS", str(REPO.parent / "shared" / "corpus" / "ndpi")))


def corpus_files() -> List[Path]:
    d = corpus_dir()
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in (".pcap", ".pcapng") and p.is_file())


def _build_sonde() -> None:
    # cargo waits on its own build-directory lock if another build holds it.
    p = subprocess.run(
        ["cargo", "build", "--release", "-p", "sonde", "--features", "sonde/ndpi"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if p.returncode != 0:
        pytest.fail(f"cargo build --release -p sonde --features ndpi failed:\n{p.stderr[-4000:]}", pytrace=False)


@pytest.fixture(scope="session")
def sonde_bin() -> Path:
    env = os.environ.get("SONDE_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.fail(f"SONDE_BIN={env} does not exist", pytrace=False)
        return path.resolve()
    path = REPO / "target" / "release" / "sonde"
    if not path.is_file():
        _build_sonde()
    if not path.is_file():
        pytest.fail(f"{path} missing after cargo build", pytrace=False)
    return path


@pytest.fixture(scope="session")
def corpus() -> Path:
    d = corpus_dir()
    if not corpus_files():
        pytest.skip(f"no captures in {d} (set SONDE_CORPUS)")
    return d


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (run scripts/setup-test-deps.sh)")


@pytest.fixture(scope="session")
def tshark_tools() -> None:
    _need("tshark")
    _need("capinfos")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fresh directory per test for sonde's output files."""
    return tmp_path


class SondeRunner:
    def __init__(self, binary: Path):
        self.binary = binary

    def __call__(self, *args: str, timeout: int = 300, user=None) -> subprocess.CompletedProcess:
        cmd = [str(self.binary)] + [str(a) for a in args]
        if user is not None:
            cmd = user + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def sonde(sonde_bin: Path) -> SondeRunner:
    return SondeRunner(sonde_bin)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not report.RESULTS:
        return
    terminalreporter.write_sep("=", "sonde vs tshark, per capture")
    for line in report.table_lines():
        terminalreporter.write_line(line)
    if os.environ.get("SONDE_WRITE_REPORT") == "1":
        path = HERE / "EXACTNESS.md"
        want = {p.name for p in corpus_files()}
        if want - set(report.RESULTS):
            terminalreporter.write_line(
                f"{path.name} not written: {len(want - set(report.RESULTS))} of {len(want)} "
                f"captures did not run (the report covers the whole corpus)")
        else:
            path.write_text(report.markdown())
            terminalreporter.write_line(f"wrote {path}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="session")
def analytics_recording(tmp_path_factory):
    """Scans, floods and ordinary traffic recorded on loopback with nmap, nping, hping3, curl
    and dig, once per session (tests/system/analytics_captures.py). Needs root."""
    import analytics_captures

    if os.geteuid() != 0:
        pytest.skip("recording scans and floods on loopback needs root")
    missing = analytics_captures.missing_tools()
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (run scripts/setup-test-deps.sh)")
    try:
        return analytics_captures.record(tmp_path_factory.mktemp("analytics"))
    except analytics_captures.RecordError as e:
        pytest.fail(f"recording the analytics scenarios failed: {e}", pytrace=False)


def _server(script: str, args: list, tmp_path_factory, pattern: str):
    """Starts a server script of scripts/ (it prints its address and PID once ready); yields
    the address and stops the server at the end of the session."""
    import re
    import signal
    import subprocess
    d = tmp_path_factory.mktemp(script.split("-")[0])
    out = subprocess.run([str(REPO / "scripts" / script), str(d), *args], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, f"{script}: {out.stderr}"
    m = re.search(pattern + r"=(\S+) PID=(\d+)", out.stdout)
    assert m, out.stdout
    yield m.group(1)
    os.kill(int(m.group(2)), signal.SIGTERM)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A Kafka 4.1 broker on 127.0.0.1 (topics of 4 partitions): its bootstrap address."""
    import shutil
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.fail("java and mvn are needed for the Kafka tests: run scripts/setup-test-deps.sh")
    yield from _server("kafka-server.sh", ["4"], tmp_path_factory, "BOOTSTRAP")


@pytest.fixture(scope="session")
def clickhouse(tmp_path_factory):
    """Debian's ClickHouse 18.16 on 127.0.0.1: its HTTP address."""
    import shutil
    if not shutil.which("clickhouse-server"):
        pytest.fail("clickhouse-server is needed: run scripts/setup-test-deps.sh")
    yield from _server("clickhouse-server.sh", [], tmp_path_factory, "HTTP")


@pytest.fixture(scope="session")
def cassandra(tmp_path_factory):
    """Apache Cassandra 5.0, one node on 127.0.0.1: its CQL address."""
    import shutil
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.fail("java and mvn are needed for the Cassandra tests: run scripts/setup-test-deps.sh")
    yield from _server("cassandra-server.sh", [], tmp_path_factory, "CQL")
