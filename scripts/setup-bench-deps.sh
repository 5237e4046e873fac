#!/usr/bin/env bash
# Installs the peers that `make bench` runs side by side with sonde, on Debian/Ubuntu. Idempotent:
# installs only what is missing, and runs `apt-get update` only when something has to be installed.
#
#   nfpcapd, nfdump   package nfdump       (pcap -> nfcapd files; nfdump reads them back to verify)
#   ndpiReader        package libndpi-bin  (nDPI's flow reader)
#   softflowd         package softflowd    (NetFlow probe)
#   pmacctd           package pmacct       (pmacct's libpcap daemon)
#   rrdtool           package rrdtool      (round-robin time series: the history write benchmark)
#   fastnetmon        package fastnetmon   (DDoS detection peer: `sonde-bench --only detect`)
#   tcpdump           package tcpdump      (timestamps the attack's first packet in that section)
#   tcpreplay         package tcpreplay    (its replay pace is checked there)
#   hping3            package hping3       (for making attack captures by hand)
#   ip                package iproute2     (the section's network namespaces and veth pair)
#
# The packages ship services (nfdump, softflowd, pmacct, fastnetmon); they are installed with a
# policy-rc.d that forbids starting them, so nothing is left running and the install never waits
# on a daemon. The detect section runs its own fastnetmon with its own configuration file.
# A peer that is missing after this script is reported as such in the benchmark tables; the
# script fails only when nothing could be installed at all.
#
# Usage: scripts/setup-bench-deps.sh   (as root, or with sudo available)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -E"
    else
        echo "setup-bench-deps: must run as root (or with sudo)" >&2
        exit 1
    fi
fi

# package -> the commands that prove it is installed
declare -A PROBE=(
    [nfdump]="nfpcapd nfdump"
    [libndpi-bin]="ndpiReader"
    [softflowd]="softflowd"
    [pmacct]="pmacctd"
    [rrdtool]="rrdtool"
    [fastnetmon]="fastnetmon"
    [tcpdump]="tcpdump"
    [tcpreplay]="tcpreplay"
    [hping3]="hping3"
    [iproute2]="ip"
)
PKGS=(nfdump libndpi-bin softflowd pmacct rrdtool fastnetmon tcpdump tcpreplay hping3 iproute2)

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }

missing=()
for pkg in "${PKGS[@]}"; do
    for c in ${PROBE[$pkg]}; do
        if ! have "$c"; then
            missing+=("$pkg")
            break
        fi
    done
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-bench-deps: installing ${missing[*]}"
    # Keep the packages' services from starting (restored afterwards if we created it).
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    cleanup() { if [ "$made_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi; }
    trap cleanup EXIT
    $SUDO apt-get update -q </dev/null
    $SUDO apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" </dev/null
else
    echo "setup-bench-deps: peers already installed"
fi

# Check the result; a missing peer is a warning (the bench reports it), not a failure.
found=0
for pkg in "${PKGS[@]}"; do
    for c in ${PROBE[$pkg]}; do
        if have "$c"; then
            found=$((found + 1))
        else
            echo "setup-bench-deps: warning: $c (package $pkg) is still missing" >&2
        fi
    done
done
if [ "$found" -eq 0 ]; then
    echo "setup-bench-deps: no peer could be installed" >&2
    exit 1
fi
echo "setup-bench-deps: ok"
