#!/usr/bin/env bash
# Installs what sonde's tests need, on Debian/Ubuntu. Idempotent: installs only what is missing,
# and runs `apt-get update` only when something has to be installed.
#
#   tshark, capinfos  oracle for tests/system (packages tshark, wireshark-common)
#   nfdump, softflowd, pmacct   flow-protocol peers (nfcapd reads sonde's export; softflowd and
#                     pmacctd feed its collector): installed by scripts/setup-bench-deps.sh
#   libpcap-dev       to build sonde (live capture and BPF filters)
#   iproute2          `ip`, for live-capture tests
#   setpriv           util-linux, to run sonde as an unprivileged user in tests
#   pytest            python3 -m pytest (apt python3-pytest, or pip when python3 is not Debian's)
#   chromium          the browser tests/browser drives (through npm playwright-core)
#   tcpdump, nmap (nmap, nping), hping3, curl, bind9-dnsutils (dig)
#                     tests/system/test_analytics.py records scans, floods and ordinary traffic
#                     on loopback with them, and reads the ground truth back with tcpdump
#   default-jre-headless, maven   a Kafka broker for the Kafka sink and source tests
#                     (scripts/kafka-server.sh fetches Kafka's jars from Maven Central once)
#   kcat, protobuf-compiler (protoc)   read and decode what sonde produces to Kafka
#   clickhouse-server ClickHouse 18.16 for the ClickHouse sink tests (scripts/clickhouse-server.sh)
#   chdb-core (pip)   current ClickHouse in-process, to check sonde's schema on it
#   cassandra-driver (pip)   reads back what the Cassandra sink wrote (the node itself:
#                     scripts/cassandra-server.sh fetches Cassandra 5.0's jars from Maven Central
#                     once; it runs on the java 17 above)
#   aiosmtpd (pip)    the SMTP server the --notify smtp:// tests (crates/notify/tests) send to
#   ndpi_4.2.orig.tar.gz (deb.debian.org)   nDPI 4.2's test captures and expected results,
#                     the second DPI accuracy set (scripts/fetch-ndpi-tests.sh, into .cache/)
#   mmdb-bin          mmdblookup (libmaxminddb), the oracle for --geoip-dir countries
#                     (tests/system/test_geoip.py)
#   libmaxmind-db-writer-perl   MaxMind's writer: the tests' City databases
#                     (scripts/make-city-mmdb.pl)
#   rrdtool           the RRD side of the Cassandra statistics benchmark (scripts/bench-cassandra.sh)
#   libndpi-bin       ndpiReader, nDPI's labels for the loopback captures in tests/dpi_loopback/
#                     (tests/system/ndpi_reader.py)
#
# Usage: scripts/setup-test-deps.sh   (as root, or with sudo available)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -E"
    else
        echo "setup-test-deps: must run as root (or with sudo)" >&2
        exit 1
    fi
fi

# package -> a file or command that proves it is installed
declare -A PROBE=(
    [tshark]="cmd:tshark"
    [wireshark-common]="cmd:capinfos"
    [libpcap-dev]="file:/usr/include/pcap/pcap.h"
    [iproute2]="cmd:ip"
    [util-linux]="cmd:setpriv"
    [chromium]="file:/usr/bin/chromium"
    [tcpdump]="cmd:tcpdump"
    [nmap]="cmd:nping"
    [hping3]="cmd:hping3"
    [curl]="cmd:curl"
    [bind9-dnsutils]="cmd:dig"
    [default-jre-headless]="cmd:java"
    [maven]="cmd:mvn"
    [kcat]="cmd:kcat"
    [protobuf-compiler]="cmd:protoc"
    [clickhouse-server]="cmd:clickhouse-server"
    [rrdtool]="cmd:rrdtool"
    [mmdb-bin]="cmd:mmdblookup"
    [libndpi-bin]="cmd:ndpiReader"
    [libmaxmind-db-writer-perl]="perl:MaxMind::DB::Writer::Tree"
)

missing=()
for pkg in tshark wireshark-common libpcap-dev iproute2 util-linux chromium \
    tcpdump nmap hping3 curl bind9-dnsutils default-jre-headless maven kcat protobuf-compiler \
    clickhouse-server rrdtool libndpi-bin mmdb-bin libmaxmind-db-writer-perl; do
    probe="${PROBE[$pkg]}"
    case "$probe" in
        cmd:*) command -v "${probe#cmd:}" >/dev/null 2>&1 && continue ;;
        file:*) [ -e "${probe#file:}" ] && continue ;;
        perl:*) perl -M"${probe#perl:}" -e 1 >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$pkg")
done

need_pytest=0
if ! python3 -m pytest --version >/dev/null 2>&1; then
    need_pytest=1
fi

# Debian's python3 gets pytest from apt; any other python3 (pyenv, venv) from pip.
PY_IS_SYSTEM=0
case "$(command -v python3 || true)" in
    /usr/bin/python3) PY_IS_SYSTEM=1 ;;
esac
if [ "$need_pytest" = 1 ] && [ "$PY_IS_SYSTEM" = 1 ]; then
    missing+=(python3-pytest)
fi
# pyzmq plays ntopng and nProbe in test_zmq_chain.py: Debian's python3-zmq, else pip.
need_pyzmq=0
if ! python3 -c 'import zmq' >/dev/null 2>&1; then
    need_pyzmq=1
    if [ "$PY_IS_SYSTEM" = 1 ]; then
        missing+=(python3-zmq)
        need_pyzmq=0
    fi
fi
need_chdb=0
if ! python3 -c 'import chdb' >/dev/null 2>&1; then
    need_chdb=1
fi
need_cassandra_driver=0
if ! python3 -c 'import cassandra.cluster' >/dev/null 2>&1; then
    need_cassandra_driver=1
fi
need_aiosmtpd=0
if ! python3 -c 'import aiosmtpd' >/dev/null 2>&1; then
    need_aiosmtpd=1
fi
if [ "$need_chdb" = 1 ] || [ "$need_cassandra_driver" = 1 ] || [ "$need_aiosmtpd" = 1 ]; then
    if [ "$PY_IS_SYSTEM" = 1 ] && ! python3 -m pip --version >/dev/null 2>&1; then
        missing+=(python3-pip)
    fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-test-deps: installing ${missing[*]}"
    # tshark asks whether non-root users may capture; answer no, without a prompt.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    echo "setup-test-deps: system packages already installed"
fi

if [ "$need_pytest" = 1 ] && [ "$PY_IS_SYSTEM" = 0 ]; then
    echo "setup-test-deps: installing pytest with pip for $(command -v python3)"
    python3 -m pip install --quiet pytest
fi
if [ "$need_pyzmq" = 1 ]; then
    echo "setup-test-deps: installing pyzmq with pip for $(command -v python3)"
    python3 -m pip install --quiet pyzmq
fi
if [ "$need_chdb" = 1 ]; then
    echo "setup-test-deps: installing chdb-core with pip for $(command -v python3)"
    if [ "$PY_IS_SYSTEM" = 1 ]; then
        $SUDO python3 -m pip install --quiet --break-system-packages chdb-core
    else
        python3 -m pip install --quiet chdb-core
    fi
fi
if [ "$need_cassandra_driver" = 1 ]; then
    echo "setup-test-deps: installing cassandra-driver with pip for $(command -v python3)"
    if [ "$PY_IS_SYSTEM" = 1 ]; then
        $SUDO python3 -m pip install --quiet --break-system-packages cassandra-driver
    else
        python3 -m pip install --quiet cassandra-driver
    fi
fi
if [ "$need_aiosmtpd" = 1 ]; then
    echo "setup-test-deps: installing aiosmtpd with pip for $(command -v python3)"
    if [ "$PY_IS_SYSTEM" = 1 ]; then
        $SUDO python3 -m pip install --quiet --break-system-packages aiosmtpd
    else
        python3 -m pip install --quiet aiosmtpd
    fi
fi

# The flow-protocol peers (with their services kept from starting).
"$(dirname "$0")/setup-bench-deps.sh"

# nDPI 4.2's own test captures and results (Debian's source package), the second DPI set.
"$(dirname "$0")/fetch-ndpi-tests.sh"

# Check the result.
for c in tshark capinfos editcap ip setpriv chromium nfcapd nfdump softflowd pmacctd \
    tcpdump nmap nping hping3 curl dig java mvn kcat protoc clickhouse-server rrdtool ndpiReader; do
    command -v "$c" >/dev/null 2>&1 || { echo "setup-test-deps: $c still missing" >&2; exit 1; }
done
[ -e /usr/include/pcap/pcap.h ] || { echo "setup-test-deps: libpcap headers still missing" >&2; exit 1; }
python3 -m pytest --version >/dev/null 2>&1 || { echo "setup-test-deps: pytest still missing" >&2; exit 1; }
python3 -c 'import aiosmtpd' >/dev/null 2>&1 || { echo "setup-test-deps: aiosmtpd still missing" >&2; exit 1; }
python3 -c 'import zmq' >/dev/null 2>&1 || { echo "setup-test-deps: pyzmq (python3-zmq) still missing" >&2; exit 1; }
echo "setup-test-deps: ok ($(tshark --version 2>/dev/null | head -1))"
