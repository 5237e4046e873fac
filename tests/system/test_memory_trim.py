"""The hand-back of free heap memory (`malloc_trim` every SONDE_MALLOC_TRIM_S seconds, glibc):
a thread named `malloc-trim` runs by default, none with 0, and a value that is not a number of
seconds is named in a warning and the default is used (the run goes on and counts everything)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import oracle

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "demo.pcap"


def _threads_of_a_running_sonde(sonde_bin, env_value):
    env = dict(os.environ)
    env.pop("SONDE_MALLOC_TRIM_S", None)
    if env_value is not None:
        env["SONDE_MALLOC_TRIM_S"] = env_value
    proc = subprocess.Popen([str(sonde_bin), "-r", SAMPLE, "--replay", "loop", "--duration", "30",
                             "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 10
        names = set()
        while time.time() < deadline and proc.poll() is None:
            names = {Path(t, "comm").read_text().strip()
                     for t in Path(f"/proc/{proc.pid}/task").glob("*")}
            if "malloc-trim" in names or len(names) > 3:
                break
            time.sleep(0.2)
        return names
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_the_trim_thread_runs_by_default_and_not_with_zero(sonde_bin):
    assert "malloc-trim" in _threads_of_a_running_sonde(sonde_bin, None)
    assert "malloc-trim" in _threads_of_a_running_sonde(sonde_bin, "5")
    names = _threads_of_a_running_sonde(sonde_bin, "0")
    assert len(names) > 3 and "malloc-trim" not in names, names


def test_a_bad_period_is_named_and_the_run_goes_on(sonde_bin, workdir):
    stats = workdir / "s.json"
    env = dict(os.environ, SONDE_MALLOC_TRIM_S="ten")
    p = subprocess.run([str(sonde_bin), "-r", SAMPLE, "-q", "--stats-json", stats], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert 'SONDE_MALLOC_TRIM_S="ten"' in p.stderr and "seconds" in p.stderr, p.stderr
    assert json.loads(stats.read_text())["packets"] == oracle.capinfos_packets(str(SAMPLE))
