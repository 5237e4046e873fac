#!/usr/bin/env bash
# What --geoip-dir and the flow writer cost on the user's whole job (`-r`, every flow written
# as JSON with --flows-out), beside nfpcapd on the same pcaps (BENCHMARKS.md §22).
#
#   scripts/bench-geoip.sh [OLD_SONDE]   # OLD_SONDE: a build to compare with (optional)
#
# Pcaps (made by sonde's generator, in $WORK, default /tmp/sonde-bench-geoip):
#   rand1m.pcap  1M packets, each a new flow from a random (mostly public) source: every
#                record has one end the databases place, the worst case for lookups
#   h100.pcap    3M packets among 100 hosts (10.0.0.0/8): the databases' load alone
# Each run 3 times; the median of CPU seconds (user + sys), max RSS and wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-}
NEW=target/release/sonde
G=geoip/node_modules/@ip-location-db
WORK=${WORK:-/tmp/sonde-bench-geoip}
mkdir -p "$WORK"
[ -x "$NEW" ] || { echo "build sonde first (make build)" >&2; exit 1; }
[ -d "$G" ] || make geoip
command -v nfpcapd >/dev/null || { echo "nfpcapd missing (scripts/setup-bench-deps.sh)" >&2; exit 1; }
[ -f "$WORK/rand1m.pcap" ] || $NEW --synthetic hosts=100k,size=64,packets=1M,random-src -w "$WORK/rand1m.pcap" -q
[ -f "$WORK/h100.pcap" ] || $NEW --synthetic hosts=100,size=64,packets=3M -w "$WORK/h100.pcap" -q

run() { # label command...
    local label=$1 vals=()
    shift
    for _ in 1 2 3; do
        rm -rf "$WORK/out" && mkdir -p "$WORK/out"
        /usr/bin/time -f "%U %S %M %e" -o "$WORK/time.txt" "$@" >/dev/null 2>&1
        vals+=("$(awk '{printf "%.2f %d %.2f", $1+$2, $3/1024, $4}' "$WORK/time.txt")")
    done
    printf '%s\n' "${vals[@]}" | sort -n | sed -n 2p |
        awk -v l="$label" '{printf "| %s | %.2f | %d | %.2f |\n", l, $1, $2, $3}'
}

for p in rand1m h100; do
    f="$WORK/$p.pcap"
    echo "### $p.pcap"
    echo "| run | CPU s | max RSS MiB | wall s |"
    echo "| --- | ---: | ---: | ---: |"
    [ -n "$OLD" ] && run "sonde $OLD, --flows-out JSON" "$OLD" -r "$f" --flows-out "$WORK/out/f.json" -q
    run "sonde, --flows-out JSON" $NEW -r "$f" --flows-out "$WORK/out/f.json" -q
    run "sonde, --flows-out JSON, --geoip-dir" $NEW -r "$f" --flows-out "$WORK/out/f.json" -q --geoip-dir "$G"
    run "nfpcapd -r (nfdump files)" nfpcapd -r "$f" -w "$WORK/out"
done
