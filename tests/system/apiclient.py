"""A tiny client for sonde's REST API in the system tests: GET a path, read its JSON, or the
status and JSON error of a request that must fail."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import urllib.error
import urllib.request


def get(base, path):
    """(status, Content-Type, body) of GET base+path."""
    with urllib.request.urlopen(base + path, timeout=10) as r:
        body = r.read().decode()
        return r.status, r.headers.get("Content-Type", ""), body


def get_json(base, path):
    status, _, body = get(base, path)
    assert status == 200
    return json.loads(body)


def error(base, path):
    """(status, JSON body) of a request the API must refuse."""
    try:
        get(base, path)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    raise AssertionError(f"{path} did not fail")


def wait_for_whole_file(base: str, proc, packets: int, timeout: float = 30) -> None:
    """Waits until the API of `proc` (a sonde reading a file) counts all `packets` of it."""
    deadline = time.time() + timeout
    while True:
        try:
            if get_json(base, "/api/v1/interface")["packets"] == packets:
                return
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.time() < deadline, "the API never showed the whole file"
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)


@contextlib.contextmanager
def serving(sonde_bin, pcap, *args, duration=60):
    """sonde reading `pcap` with the API on a free port (no logins) and `args`, yielded as
    (base URL, process) once the API shows every packet of the file; stopped with Ctrl-C
    (SIGINT) after, so that its outputs are complete."""
    import oracle
    from conftest import free_port

    port = free_port()
    proc = subprocess.Popen(
        [str(sonde_bin), "-r", str(pcap), "--http", f"127.0.0.1:{port}", "--no-auth",
         "--duration", str(duration), "-q", *(str(a) for a in args)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_whole_file(base, proc, oracle.capinfos_packets(str(pcap)))
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
