"""`--config FILE`: a run described by a TOML file is the run its flags describe.

The outputs of the same run, once given by flags and once by a config file, are compared
byte for byte (flows, hosts, detections, and what `sonde query` reads back from the history);
the final summary is compared without its timings. Flags win over the file, list flags add to
its lists, and a bad file is one error line naming the file, the line and the key.
"""

from __future__ import annotations

import json
import subprocess

import pytest

VOLATILE = {"elapsed_s", "cpu_s", "pps", "max_rss_bytes", "table_memory_bytes"}

CAPTURE = "netflix.pcap"
FILTER_SET = "web=http:tcp port 80;tls:tcp port 443;dns:udp port 53"


def _stable(out):
    # Output paths name the run's own directory: the same name in both.
    d = json.loads((out / "stats.json").read_text().replace(str(out), "OUT"))
    for k in VOLATILE:
        d.pop(k, None)
    return d


def _run_outputs(sonde, workdir, name, args, timeout=120):
    out = workdir / name
    out.mkdir()
    p = sonde(*args(out), "-q", timeout=timeout)
    assert p.returncode == 0, p.stderr
    return out


def _flag_args(capture):
    def args(out):
        return [
            "-r", capture,
            "--threads", "1",  # one shard: its output order is the capture's
            "--idle-timeout", "30",
            "--active-timeout", "600",
            "--max-flows", "100k",
            "--max-hosts", "50k",
            "--flows-out", out / "flows.csv",
            "--flows-format", "csv",
            "--hosts-out", out / "hosts.jsonl",
            "--stats-json", out / "stats.json",
            "--alerts-out", out / "alerts.jsonl",
            "--data-dir", out / "data",
            "--top-interval", "10",
            "--top-n", "7",
            "--filter-set", FILTER_SET,
            "--threshold", "ddos.pps=20",
            "--threshold", "scan.port_targets=5",
        ]
    return args


def _config_text(capture, out):
    return f"""
# the run of _flag_args, as a file
[input]
read = "{capture}"
threads = 1

[flows]
idle_timeout = 30
active_timeout = 600
max_flows = "100k"
max_hosts = 50000

[output]
flows = "{out / 'flows.csv'}"
flows_format = "csv"
hosts = "{out / 'hosts.jsonl'}"
stats_json = "{out / 'stats.json'}"

[history]
data_dir = "{out / 'data'}"

[analytics]
top_interval = 10
top_n = 7
alerts_out = "{out / 'alerts.jsonl'}"
thresholds = ["ddos.pps=20", "scan.port_targets=5"]

[[analytics.filter_set]]
name = "web"
match = ["http: tcp port 80", "tls: tcp port 443", "dns: udp port 53"]
"""


def _query(sonde, data, *what):
    p = sonde("query", "--data-dir", data, *what, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _assert_same_run(sonde, a, b):
    for f in ("flows.csv", "hosts.jsonl", "alerts.jsonl"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert (a / "flows.csv").stat().st_size > 0
    sa, sb = _stable(a), _stable(b)
    assert sa == sb
    assert sa["filter_sets"]["web"]["tls"]["packets"] > 0
    # A fixed range: without one, the answer names "now" and two queries a second apart differ.
    span = ["--from", "0", "--to", "1900000000"]
    for what in (["flows"], ["hosts"], ["apps"], ["top", "talkers", *span],
                 ["top", "ports", *span], ["anomalies", *span], ["series", "--family", "filters"]):
        assert _query(sonde, a / "data", *what) == _query(sonde, b / "data", *what), what


def test_a_config_file_gives_the_run_its_flags_give(sonde, corpus, workdir):
    capture = corpus / CAPTURE
    by_flags = _run_outputs(sonde, workdir, "flags", _flag_args(capture))
    out = workdir / "file"
    out.mkdir()
    conf = workdir / "sonde.toml"
    conf.write_text(_config_text(capture, out))
    check = sonde("config", "check", conf, timeout=60)
    assert check.returncode == 0, check.stderr
    assert "ok" in check.stdout
    p = sonde("--config", conf, "-q", timeout=120)
    assert p.returncode == 0, p.stderr
    _assert_same_run(sonde, by_flags, out)


def test_flags_win_over_the_file_and_lists_add(sonde, corpus, workdir):
    capture = corpus / CAPTURE
    by_flags = _run_outputs(sonde, workdir, "flags", _flag_args(capture))
    out = workdir / "mixed"
    out.mkdir()
    text = _config_text(workdir / "no-such.pcap", workdir / "elsewhere")
    # The file says other values; the flags given below must win, and the second threshold
    # (left out of the file) comes from the command line, after the file's.
    text = text.replace("idle_timeout = 30", "idle_timeout = 5")
    text = text.replace("threads = 1", "threads = 2")
    text = text.replace("top_n = 7", "top_n = 3")
    text = text.replace('thresholds = ["ddos.pps=20", "scan.port_targets=5"]',
                        'thresholds = ["ddos.pps=20"]')
    conf = workdir / "mixed.toml"
    conf.write_text(text)
    p = sonde(
        "--config", conf,
        "-r", capture,
        "--idle-timeout", "30",
        "--threads", "1",
        "--top-n", "7",
        "--threshold", "scan.port_targets=5",
        "--flows-out", out / "flows.csv",
        "--hosts-out", out / "hosts.jsonl",
        "--stats-json", out / "stats.json",
        "--alerts-out", out / "alerts.jsonl",
        "--data-dir", out / "data",
        "-q",
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    _assert_same_run(sonde, by_flags, out)


def test_the_printed_example_checks_and_runs(sonde, sonde_bin, workdir):
    ex = sonde("config", "example", timeout=30)
    assert ex.returncode == 0, ex.stderr
    # Its input is the bundled sample, relative to the file: put the file at the repo root.
    repo = sonde_bin.parent.parent.parent
    conf = workdir / "example.toml"
    conf.write_text(ex.stdout.replace('read = "samples/', f'read = "{repo}/samples/'))
    assert sonde("config", "check", conf, timeout=30).returncode == 0
    stats = workdir / "s.json"
    p = sonde("--config", conf, "--stats-json", stats, "-q", timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(stats.read_text())["packets"] > 0
    # Every section of the example is one the parser knows (each key, uncommented, parses).
    for line in ex.stdout.splitlines():
        assert not line.startswith("[") or line.strip("[]") in (
            "input", "flows", "dpi", "output", "http", "history", "analytics", "alerts",
            "trigger", "egress"), line


def test_relative_paths_are_taken_from_the_file(sonde, corpus, workdir):
    sub = workdir / "conf"
    sub.mkdir()
    (sub / "in.pcap").write_bytes((corpus / "dns.pcap").read_bytes())
    (sub / "c.toml").write_text('[input]\nread = "in.pcap"\n[output]\nstats_json = "s.json"\n')
    p = subprocess.run([str(a) for a in [sonde.binary, "--config", "c.toml", "-q"]],
                       cwd=sub, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = sonde("--config", sub / "c.toml", "-q", timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads((sub / "s.json").read_text())["packets"] > 0


BAD = [
    ("[flows]\nidle_timeout = 30\nmax_flow = 5\n", "line 3, key flows.max_flow", "max_flows"),
    ("[flow]\nidle_timeout = 30\n", "line 1", "flow"),
    ("[flows]\n\nmax_flows = \"2X\"\n", "line 3, key flows.max_flows", "not a positive count"),
    ("[flows]\nidle_timeout = 0\n", "line 2, key flows.idle_timeout", "at least 1 second"),
    ("[input]\nreplay = \"slow\"\n", "line 2, key input.replay", "realtime"),
    ("[input]\nthreads = \"two\"\n", "line 2, key input.threads", "whole number"),
    ("[input]\nsynthetic = \"hosts=0\"\n", "line 2, key input.synthetic", "hosts"),
    ("[input]\ncollect = [\"udp://nowhere\"]\n", "line 2, key input.collect", "nowhere"),
    ("[output]\nexport = [\"ipfx://127.0.0.1:1\"]\n", "line 2, key output.export", "ipfx"),
    ("[http]\nlisten = \"localhost\"\n", "line 2, key http.listen", "ADDR:PORT"),
    ("[history]\nseries_retention = [1, 2]\n", "line 2, key history.series_retention", "four"),
    ("[analytics]\nthresholds = [\"ddos.nope=3\"]\n", "line 2, key analytics.thresholds",
     "ddos.nope"),
    ("[[analytics.filter_set]]\nname = \"web\"\nmatch = [\"http: tcp prot 80\"]\n",
     "key analytics.filter_set", "'http'"),
    ("[input\nread = 3\n", "line 1", ""),
    ("[input]\nread = \"a.pcap\"\ninterface = \"lo\"\n", "-r FILE is read alone", "interface"),
    ("[input]\ninterface = 3\n", "line 2, key input.interface", "list of names"),
]


@pytest.mark.parametrize("text,where,what", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_file_is_one_error_naming_file_line_and_key(text, where, what, sonde, workdir):
    conf = workdir / "bad.toml"
    conf.write_text(text)
    for args in (("config", "check", conf), ("--config", conf, "-q")):
        p = sonde(*args, timeout=30)
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert lines[0].startswith("sonde: error: "), p.stderr
        assert str(conf) in lines[0], p.stderr
        assert where in lines[0] and what in lines[0], p.stderr


def test_a_missing_file_names_it(sonde, workdir):
    p = sonde("--config", workdir / "nope.toml", timeout=30)
    assert p.returncode != 0
    assert p.stderr.startswith("sonde: error: --config: cannot read") and "nope.toml" in p.stderr


def test_sink_queue_options_are_declared_and_reported(sonde, corpus, workdir):
    """A network sink's queue: blocks by default on a file input, drops when told to, and
    the summary says which, with records taken + dropped at the queue = records offered."""
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    stats = workdir / "s.json"
    p = sonde("-r", corpus / CAPTURE,
              "--export", f"ipfix://127.0.0.1:{port}?queue=8",
              "--export", f"netflow9://127.0.0.1:{port}?when_full=drop_newest&queue=4",
              "--stats-json", stats, "-q", timeout=60)
    rx.close()
    assert p.returncode == 0, p.stderr
    d = json.loads(stats.read_text())
    ipfix, nf9 = d["sinks"]
    assert ipfix["when_full"] == "block" and nf9["when_full"] == "drop_newest"
    flows = d["flows"]["created"]
    for s in (ipfix, nf9):
        assert s["offered"] == flows
        assert s["records"] + s["queue_dropped"] == s["offered"]
    assert ipfix["queue_dropped"] == 0
    assert ipfix["name"] == f"ipfix://127.0.0.1:{port}"


@pytest.mark.parametrize("url,what", [
    ("ipfix://127.0.0.1:9?when_full=maybe", "when_full=maybe"),
    ("ipfix://127.0.0.1:9?queue=0", "queue=0"),
    ("ipfix://127.0.0.1:9?colour=red", "colour"),
])
def test_a_bad_sink_queue_option_is_one_error(url, what, sonde, corpus):
    p = sonde("-r", corpus / CAPTURE, "--export", url, "-q", timeout=30)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sonde: error: --export"), p.stderr
    assert what in lines[0], p.stderr


def test_sonde_sinks_lists_every_kind(sonde):
    p = sonde("sinks", timeout=30)
    assert p.returncode == 0, p.stderr
    for kind in ("flows-file", "history", "netflow5", "netflow9", "ipfix", "ipfix+tcp", "zmq",
                 "cassandra"):
        assert f"\n{kind} " in "\n" + p.stdout, kind
