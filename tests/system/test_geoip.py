"""--geoip-dir: the country and AS number of every address, checked against oracles outside sonde.

The databases are the free ones `make geoip` installs (geoip/node_modules/@ip-location-db):
countries from geo-whois-asn-country.mmdb (MaxMind format), AS numbers and names from
asn-ipv4.csv and asn-ipv6.csv (ranges).

- Countries: `mmdblookup` (Debian's mmdb-bin, libmaxminddb's own tool) on the same .mmdb file,
  for every address in every corpus capture (tshark lists them, tunnels' inner ones included).
- AS numbers: the CSV ranges read here with Python's ipaddress module, the range that starts
  last holding an address where ranges overlap (sonde's documented rule; the file has one
  overlap).
- Special-purpose addresses (private, loopback, link-local, multicast, documentation, …) are
  placed nowhere, whatever the database says (the free database puts 192.168.0.0/16 in AU).

Then the same answers must come out where a user sees them: SRC_AS, DST_AS, SRC_IP_COUNTRY and
DST_IP_COUNTRY in --flows-out; country, asn and as_name of hosts and flows in the REST API, its
?country= and ?asn= filters, and /api/v1/top/countries and /asns added up from the hosts; and
nfdump's sas/das columns of sonde's NetFlow v5, v9 and IPFIX export.
"""

from __future__ import annotations

import bisect
import collections
import csv
import ipaddress
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from apiclient import error as api_error, get_json, serving
from conftest import REPO, corpus_files

GEO_DIR = REPO / "geoip" / "node_modules" / "@ip-location-db"
COUNTRY_MMDB = GEO_DIR / "geo-whois-asn-country-mmdb" / "geo-whois-asn-country.mmdb"
ASN_CSV = {4: GEO_DIR / "asn" / "asn-ipv4.csv", 6: GEO_DIR / "asn" / "asn-ipv6.csv"}

# Written from the IANA special-purpose registries (RFC 6890 and its updates), not from sonde.
SPECIAL = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.2.0/24", "192.168.0.0/16", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
    "240.0.0.0/4", "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "2001:db8::/32",
)]


def special(a) -> bool:
    if a.version == 6 and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return any(a.version == n.version and a in n for n in SPECIAL)


@pytest.fixture(scope="session")
def geo_dir() -> Path:
    if not COUNTRY_MMDB.is_file() or not ASN_CSV[4].is_file():
        pytest.fail(f"{GEO_DIR} has no databases: run `make geoip` (npm ci in geoip/)",
                    pytrace=False)
    if shutil.which("mmdblookup") is None:
        pytest.fail("mmdblookup missing: run scripts/setup-test-deps.sh (Debian's mmdb-bin)",
                    pytrace=False)
    return GEO_DIR


def mmdb_country(addr: str) -> Optional[str]:
    """libmaxminddb's answer for `addr` (None: no record)."""
    p = subprocess.run(["mmdblookup", "-f", str(COUNTRY_MMDB), "-i", addr, "country_code"],
                       capture_output=True, text=True, timeout=30)
    m = re.search(r'"([A-Za-z]{2})" <utf8_string>', p.stdout)
    if p.returncode == 0 and m:
        return m.group(1).upper()
    assert "Could not find an entry" in p.stderr + p.stdout or p.returncode != 0, p
    return None


class AsRanges:
    """The CSV ranges, and the AS of an address by the rule: the covering range that starts
    last (for equal starts, the shorter one)."""

    def __init__(self):
        self.by_version: Dict[int, Tuple[List[int], List[Tuple[int, int, int]]]] = {}
        self.names: Dict[int, str] = {}
        for version, path in ASN_CSV.items():
            rows = []
            with open(path, newline="") as f:
                for r in csv.reader(f):
                    s, e = int(ipaddress.ip_address(r[0])), int(ipaddress.ip_address(r[1]))
                    asn = int(r[2])
                    rows.append((s, e, asn))
                    if len(r) > 3 and r[3]:
                        self.names.setdefault(asn, r[3])
            rows.sort(key=lambda t: (t[0], -t[1]))
            self.by_version[version] = ([r[0] for r in rows], rows)
        self.nests = {v: self._nests(v) for v in self.by_version}

    def asn(self, a) -> Optional[int]:
        if a.version == 6 and a.ipv4_mapped is not None:
            a = a.ipv4_mapped
        starts, rows = self.by_version[a.version]
        x = int(a)
        i = bisect.bisect_right(starts, x)
        # The ranges starting at or before x, latest first; the first that holds x wins. With
        # no range inside another, only the latest can hold x.
        while i > 0:
            i -= 1
            if rows[i][1] >= x:
                return rows[i][2]
            if not self.nests[a.version]:
                break
        return None

    def _nests(self, version: int) -> bool:
        """Whether any range lies inside an earlier one."""
        end = -1
        for _, e, _ in self.by_version[version][1]:
            if e <= end:
                return True
            end = max(end, e)
        return False


@pytest.fixture(scope="session")
def as_ranges(geo_dir) -> AsRanges:
    return AsRanges()


def capture_addresses(pcap: Path) -> List[str]:
    p = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=,", "-e", "ip.src",
         "-e", "ip.dst", "-e", "ipv6.src", "-e", "ipv6.dst"],
        capture_output=True, text=True, timeout=300)
    out = set()
    for line in p.stdout.splitlines():
        out.update(a for a in line.split(",") if a)
    return sorted(out)


@pytest.fixture(scope="session")
def corpus_addresses(corpus, tshark_tools) -> List[str]:
    addrs = set()
    for pcap in corpus_files():
        addrs.update(capture_addresses(pcap))
    assert len(addrs) >= 50, f"only {len(addrs)} addresses in the corpus"
    return sorted(addrs, key=lambda a: (":" in a, a))


def expected(addr: str, as_ranges: AsRanges) -> Tuple[Optional[str], Optional[int]]:
    a = ipaddress.ip_address(addr)
    if special(a):
        return None, None
    return mmdb_country(addr), as_ranges.asn(a)


@pytest.fixture(scope="session")
def oracle_answers(corpus_addresses, as_ranges) -> Dict[str, Tuple[Optional[str], Optional[int]]]:
    return {a: expected(a, as_ranges) for a in corpus_addresses}


def sonde_lookup(sonde, geo_dir: Path, addrs: List[str]) -> Dict[str, dict]:
    p = subprocess.run([str(sonde.binary), "geoip", str(geo_dir)], input="\n".join(addrs),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(rows) == len(addrs)
    return {str(ipaddress.ip_address(a)): r for a, r in zip(addrs, rows)}


def test_every_corpus_address_has_the_oracles_country_and_as(sonde, geo_dir, oracle_answers,
                                                             as_ranges):
    got = sonde_lookup(sonde, geo_dir, list(oracle_answers))
    wrong = []
    placed = with_as = 0
    for addr, (country, asn) in oracle_answers.items():
        r = got[str(ipaddress.ip_address(addr))]
        if (r["country"], r["asn"]) != (country, asn):
            wrong.append((addr, (r["country"], r["asn"]), (country, asn)))
        if asn is not None and r["as_name"] != as_ranges.names.get(asn):
            wrong.append((addr, r["as_name"], as_ranges.names.get(asn)))
        placed += country is not None
        with_as += asn is not None
    assert not wrong, f"{len(wrong)} of {len(oracle_answers)} differ, e.g. {wrong[:10]}"
    # The comparison means something only if most addresses are placed.
    assert placed > len(oracle_answers) // 2 and with_as > len(oracle_answers) // 2, \
        (placed, with_as, len(oracle_answers))


def test_the_demo_capture_places_its_outside_servers(sonde, geo_dir, as_ranges, tshark_tools):
    """`make run`'s capture (scripts/make-demo-pcap.py): its outside servers stand on public
    addresses the free databases place in several countries and ASes, as the oracles say, so
    the first run's geo cards fill; its office addresses are placed nowhere."""
    addrs = capture_addresses(REPO / "samples" / "demo.pcap")
    answers = {a: expected(a, as_ranges) for a in addrs}
    got = sonde_lookup(sonde, geo_dir, addrs)
    wrong = [(a, want, (got[str(ipaddress.ip_address(a))]["country"],
                        got[str(ipaddress.ip_address(a))]["asn"]))
             for a, want in answers.items()
             if (got[str(ipaddress.ip_address(a))]["country"],
                 got[str(ipaddress.ip_address(a))]["asn"]) != want]
    assert not wrong, wrong[:10]
    countries = {c for c, _ in answers.values() if c}
    asns = {n for _, n in answers.values() if n}
    assert len(countries) >= 8 and len(asns) >= 8, (countries, asns)
    office = [a for a in addrs if a.startswith(("10.", "fd00:"))]
    assert office and all(answers[a] == (None, None) for a in office)


def test_special_addresses_are_placed_nowhere(sonde, geo_dir):
    addrs = ["192.168.1.13", "10.0.0.1", "172.20.1.1", "127.0.0.1", "169.254.3.4", "100.64.1.1",
             "224.0.0.251", "255.255.255.255", "fd00::1", "fe80::1", "ff02::1", "::1",
             "::ffff:192.168.1.1", "2001:db8::5"]
    # The database itself places the first one (its data bug), so this is sonde's rule at work.
    assert mmdb_country("192.168.1.13") is not None
    for addr, r in sonde_lookup(sonde, geo_dir, addrs).items():
        assert (r["country"], r["asn"], r["as_name"]) == (None, None, None), (addr, r)


def test_bad_geoip_dirs_and_addresses_are_named(sonde, tmp_path):
    p = sonde("-r", str(REPO / "samples" / "demo.pcap"), "--geoip-dir", str(tmp_path / "none"))
    assert p.returncode != 0 and "--geoip-dir" in p.stderr and "none" in p.stderr, p.stderr
    (tmp_path / "empty").mkdir()
    p = sonde("-r", str(REPO / "samples" / "demo.pcap"), "--geoip-dir", str(tmp_path / "empty"))
    assert p.returncode != 0 and "no GeoIP database in" in p.stderr and "make geoip" in p.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "asn-ipv4.csv").write_text("1.0.0.0,1.0.0.255,13335,A\n1.0.1.0,1.0.1.9,AS?,B\n")
    p = sonde("-r", str(REPO / "samples" / "demo.pcap"), "--geoip-dir", str(bad))
    assert p.returncode != 0 and "asn-ipv4.csv line 2" in p.stderr and "AS?" in p.stderr, p.stderr
    (bad / "asn-ipv4.csv").unlink()
    (bad / "GeoLite2-Country.mmdb").write_bytes(b"\0" * 100)
    p = sonde("-r", str(REPO / "samples" / "demo.pcap"), "--geoip-dir", str(bad))
    assert p.returncode != 0 and "not a readable MaxMind database" in p.stderr, p.stderr
    p = sonde("geoip", str(tmp_path / "none"), "8.8.8.8")
    assert p.returncode != 0 and "--geoip-dir" not in p.stdout


# Captures with many public addresses, IPv4 and IPv6.
RUN_CAPTURES = ["android.pcap", "whatsapp_login_call.pcap", "quic-mvfst-27.pcapng",
                "443-chrome.pcap"]


def _addr_of(rec: dict, side: str) -> str:
    return rec.get(f"IPV4_{side}_ADDR") or rec[f"IPV6_{side}_ADDR"]


@pytest.mark.parametrize("name", RUN_CAPTURES)
def test_flow_records_carry_both_ends_country_and_as(sonde, corpus, geo_dir, as_ranges, workdir,
                                                     name):
    pcap = corpus / name
    if not pcap.exists():
        pytest.skip(f"{name} not in the corpus")
    out = workdir / "flows.json"
    p = sonde("-r", str(pcap), "--geoip-dir", str(geo_dir), "--flows-out", str(out), "-q")
    assert p.returncode == 0, p.stderr
    records = [json.loads(l) for l in out.read_text().splitlines()]
    assert records
    placed = 0
    for r in records:
        for side in ("SRC", "DST"):
            country, asn = expected(_addr_of(r, side), as_ranges)
            assert r.get(f"{side}_IP_COUNTRY") == country, (side, r)
            assert r[f"{side}_AS"] == (asn or 0), (side, r)
            placed += country is not None
    assert placed > 0, f"no address of {name} is placed"
    # Without the flag, none of the fields.
    p = sonde("-r", str(pcap), "--flows-out", str(out), "-q")
    assert p.returncode == 0, p.stderr
    for l in out.read_text().splitlines():
        assert not {"SRC_AS", "DST_AS", "SRC_IP_COUNTRY", "DST_IP_COUNTRY"} & set(json.loads(l))


def test_api_hosts_flows_filters_and_top_places(sonde_bin, corpus, geo_dir, as_ranges, workdir):
    pcap = corpus / "android.pcap"
    if not pcap.exists():
        pytest.skip("android.pcap not in the corpus")
    with serving(sonde_bin, pcap, "--geoip-dir", geo_dir) as (base, _):
        assert get_json(base, "/api/v1/interface")["geoip"] == {"countries": True, "asns": True,
                                                                "cities": False}
        hosts = get_json(base, "/api/v1/hosts?limit=10000")["hosts"]
        assert len(hosts) > 10
        by_country: Dict[str, List[int]] = collections.defaultdict(lambda: [0, 0])
        by_as: Dict[int, List[int]] = collections.defaultdict(lambda: [0, 0])
        unknown = [0, 0]
        for h in hosts:
            country, asn = expected(h["ip"], as_ranges)
            assert (h["country"], h["asn"]) == (country, asn), h
            assert h["as_name"] == (as_ranges.names.get(asn) if asn else None), h
            b = h["sent_bytes"] + h["rcvd_bytes"]
            for key, table in ((country, by_country), (asn, by_as)):
                if key is None:
                    continue
                table[key][0] += b
                table[key][1] += 1
            if country is None:
                unknown[0] += b
                unknown[1] += 1
        assert len(by_country) >= 2 and len(by_as) >= 3, (by_country, by_as)
        top = get_json(base, "/api/v1/top/countries?n=1000")
        assert {r["country"]: [r["bytes"], r["hosts"]] for r in top["rows"]} == dict(by_country)
        assert [top["unknown"]["bytes"], top["unknown"]["hosts"]] == unknown
        byte_order = [r["bytes"] for r in top["rows"]]
        assert byte_order == sorted(byte_order, reverse=True)
        top = get_json(base, "/api/v1/top/asns?n=1000")
        assert {r["asn"]: [r["bytes"], r["hosts"]] for r in top["rows"]} == dict(by_as)
        for r in top["rows"]:
            assert r["name"] == as_ranges.names.get(r["asn"]), r
        # Filters: exactly the hosts placed there.
        country = max(by_country, key=lambda c: by_country[c][1])
        got = get_json(base, f"/api/v1/hosts?limit=10000&country={country.lower()}")["hosts"]
        assert sorted(h["ip"] for h in got) == sorted(h["ip"] for h in hosts
                                                      if h["country"] == country)
        asn = max(by_as, key=lambda a: by_as[a][1])
        got = get_json(base, f"/api/v1/hosts?limit=10000&asn=AS{asn}")["hosts"]
        assert sorted(h["ip"] for h in got) == sorted(h["ip"] for h in hosts if h["asn"] == asn)
        status, text = api_error(base, "/api/v1/hosts?country=USA")
        assert status == 400 and "two-letter" in str(text)
        status, text = api_error(base, "/api/v1/hosts?asn=google")
        assert status == 400 and "AS number" in str(text)
        # Flows: both ends, under client_ and server_.
        flows = get_json(base, "/api/v1/flows?limit=1000")["flows"]
        assert flows
        for f in flows:
            for side in ("client", "server"):
                country, asn = expected(f[side], as_ranges)
                assert (f[f"{side}_country"], f[f"{side}_asn"]) == (country, asn), f
        # The host page too.
        h = max(hosts, key=lambda h: h["asn"] is not None)
        page = get_json(base, f"/api/v1/hosts/{h['ip']}")
        assert page["host"][0]["country"] == h["country"] and page["host"][0]["asn"] == h["asn"]


def test_without_databases_the_api_says_how_to_get_them(sonde_bin, corpus, workdir):
    pcap = corpus / "android.pcap"
    if not pcap.exists():
        pytest.skip("android.pcap not in the corpus")
    with serving(sonde_bin, pcap) as (base, _):
        iface = get_json(base, "/api/v1/interface")
        assert iface["geoip"] is None
        status, text = api_error(base, "/api/v1/top/countries")
        assert status == 404 and "--geoip-dir" in str(text)
        status, text = api_error(base, "/api/v1/hosts?country=US")
        assert status == 400 and "--geoip-dir" in str(text)
        host = get_json(base, "/api/v1/hosts?limit=1")["hosts"][0]
        assert "country" not in host and "asn" not in host


@pytest.mark.parametrize("fmt", ["netflow5", "netflow9", "ipfix"])
def test_nfdump_reads_the_as_numbers_of_our_export(fmt, sonde, corpus, geo_dir, as_ranges,
                                                   workdir):
    """NetFlow v5 (16-bit AS, a larger one as AS_TRANS 23456), v9 and IPFIX (SRC_AS/DST_AS,
    bgpSource/DestinationAsNumber) carry each end's AS; nfdump shows them as sas/das."""
    from test_flow_export import Nfcapd, _need

    _need("nfcapd")
    _need("nfdump")
    pcap = corpus / "android.pcap"
    if not pcap.exists():
        pytest.skip("android.pcap not in the corpus")
    cap = Nfcapd(workdir)
    try:
        p = sonde("-r", pcap, "--geoip-dir", geo_dir, "--export", f"{fmt}://127.0.0.1:{cap.port}",
                  "-q")
    finally:
        cap.stop()
    assert p.returncode == 0, p.stderr
    out = subprocess.run(["nfdump", "-R", str(cap.dir), "-o", "csv"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    header = lines[0].split(",")
    rows = [dict(zip(header, (v.strip() for v in l.split(",")))) for l in lines[1:]]
    rows = [r for r in rows if r.get("sa") and r.get("pr")]
    assert rows, out.stdout
    with_as = 0
    for r in rows:
        for addr, got in ((r["sa"], r["sas"]), (r["da"], r["das"])):
            want = expected(addr, as_ranges)[1] or 0
            if fmt == "netflow5" and want > 65535:
                want = 23456
            assert int(got) == want, (fmt, addr, r)
            with_as += want != 0
    assert with_as > 0, "no exported address has an AS"


def test_history_queries_filter_by_country_and_as(sonde, corpus, geo_dir, as_ranges, workdir):
    """`sonde query flows --country/--asn` (and hosts, apps): exactly the stored flows with
    an end placed there, by the oracle's answers for their addresses."""
    pcap = corpus / "android.pcap"
    if not pcap.exists():
        pytest.skip("android.pcap not in the corpus")
    data = workdir / "data"
    p = sonde("-r", pcap, "--data-dir", data, "-q")
    assert p.returncode == 0, p.stderr

    def query(*args):
        p = sonde("query", "--data-dir", data, "--geoip-dir", geo_dir, "flows", "--format",
                  "jsonl", "--limit", "100000", *args)
        assert p.returncode == 0, p.stderr
        return [json.loads(l) for l in p.stdout.splitlines()]

    every = query()
    assert len(every) > 10
    ends = lambda r: (_addr_of(r, "SRC"), _addr_of(r, "DST"))
    for r in every:  # stored flows read with --geoip-dir carry the fields too
        for side, addr in zip(("SRC", "DST"), ends(r)):
            assert r[f"{side}_AS"] == (expected(addr, as_ranges)[1] or 0), r
    key = lambda r: (ends(r), r["L4_SRC_PORT"], r["L4_DST_PORT"], r["PROTOCOL"],
                     r["FLOW_START_MILLISECONDS"])
    countries = collections.Counter(c for r in every for c in
                                    {expected(a, as_ranges)[0] for a in ends(r)} if c)
    asns = collections.Counter(a for r in every for a in
                               {expected(x, as_ranges)[1] for x in ends(r)} if a)
    assert countries and asns
    for country in countries:
        want = sorted(key(r) for r in every
                      if country in {expected(a, as_ranges)[0] for a in ends(r)})
        assert sorted(key(r) for r in query("--country", country.lower())) == want, country
    for asn in list(asns)[:5]:
        want = sorted(key(r) for r in every if asn in {expected(a, as_ranges)[1] for a in ends(r)})
        assert sorted(key(r) for r in query("--asn", f"AS{asn}")) == want, asn
    # Errors name the flag and the fix.
    p = sonde("query", "--data-dir", data, "flows", "--country", "US")
    assert p.returncode != 0 and "--geoip-dir" in p.stderr, p.stderr
    p = sonde("query", "--data-dir", data, "--geoip-dir", geo_dir, "flows", "--country", "USA")
    assert p.returncode != 0 and "two-letter" in p.stderr, p.stderr
    p = sonde("query", "--data-dir", data, "--geoip-dir", geo_dir, "hosts", "--asn", "x1")
    assert p.returncode != 0 and "AS number" in p.stderr, p.stderr
    # The API's history filters give the same flows (another sonde serving that directory).
    with serving(sonde.binary, pcap, "--data-dir", data, "--geoip-dir", geo_dir) as (base, _):
        country = countries.most_common(1)[0][0]
        got = get_json(base, f"/api/v1/history/flows?country={country}&limit=1000")["flows"]
        assert sorted(key(r) for r in got) == sorted(key(r) for r in query("--country", country))
        status, text = api_error(base, "/api/v1/history/flows?asn=zz")
        assert status == 400 and "AS number" in str(text)


CITY_NAMES = ["Falkenstein", "São Paulo", "Zürich", "Kraków", "<b>Ōsaka</b> & \"Co\"", ""]


def test_a_city_database_names_every_hosts_city(sonde, sonde_bin, workdir, tshark_tools):
    """A City database (written here with MaxMind's writer, scripts/make-city-mmdb.pl) covering
    the demo capture's outside servers: `sonde geoip`, the hosts and flows of the API and
    --flows-out give each address the city `mmdblookup` reads from the same file (none where
    the record has no city, and none for the office's private addresses)."""
    if shutil.which("perl") is None or subprocess.run(
            ["perl", "-MMaxMind::DB::Writer::Tree", "-e", "1"], capture_output=True).returncode:
        pytest.fail("MaxMind::DB::Writer missing: run scripts/setup-test-deps.sh "
                    "(Debian's libmaxmind-db-writer-perl)", pytrace=False)
    demo = REPO / "samples" / "demo.pcap"
    public = [a for a in capture_addresses(demo) if not special(ipaddress.ip_address(a))]
    assert len(public) >= 10, public
    nets = sorted({str(ipaddress.ip_network(f"{a}/{24 if '.' in a else 48}", strict=False))
                   for a in public})
    lines = [f"{n}\tDE\t{CITY_NAMES[i % len(CITY_NAMES)]}" for i, n in enumerate(nets)]
    db_dir = workdir / "city-db"
    db_dir.mkdir()
    p = subprocess.run([str(REPO / "scripts" / "make-city-mmdb.pl"),
                        str(db_dir / "GeoLite2-City.mmdb")],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr

    def oracle_city(addr: str) -> Optional[str]:
        q = subprocess.run(["mmdblookup", "-f", str(db_dir / "GeoLite2-City.mmdb"), "-i", addr,
                            "city", "names", "en"], capture_output=True, text=True, timeout=30)
        m = re.search(r'"(.*)" <utf8_string>', q.stdout)  # printed as it is stored
        return m.group(1) if m else None

    addrs = capture_addresses(demo)
    want = {str(ipaddress.ip_address(a)): (None if special(ipaddress.ip_address(a))
                                           else oracle_city(a)) for a in addrs}
    named = {c for c in want.values() if c}
    assert len(named) >= 4 and any(c is None for c in want.values()), want
    got = sonde_lookup(sonde, db_dir, addrs)
    assert {a: r["city"] for a, r in got.items()} == want
    flows_out = workdir / "city-flows.json"
    with serving(sonde_bin, demo, "--geoip-dir", db_dir, "--flows-out", flows_out) as (base, _):
        assert get_json(base, "/api/v1/interface")["geoip"]["cities"] is True
        hosts = get_json(base, "/api/v1/hosts?limit=10000")["hosts"]
        flows = get_json(base, "/api/v1/flows?limit=10000")["flows"]
    assert hosts and flows
    for h in hosts:
        assert h["city"] == want[str(ipaddress.ip_address(h["ip"]))], h
    for f in flows:
        for side in ("client", "server"):
            assert f[f"{side}_city"] == want[str(ipaddress.ip_address(f[side]))], f
    records = [json.loads(l) for l in flows_out.read_text().splitlines()]
    assert records
    for r in records:
        for key, side in (("SRC_IP_CITY", "SRC"), ("DST_IP_CITY", "DST")):
            assert r.get(key) == want[str(ipaddress.ip_address(_addr_of(r, side)))], r
    assert any(r.get("DST_IP_CITY") for r in records)
