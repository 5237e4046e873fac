#!/usr/bin/env bash
# The user's whole job at 100, 100k and 1M flows (issue 17's table, BENCHMARKS.md §24): sonde
# -r with the flows kept (a JSON file, or --data-dir), with no output, with DPI off, beside
# nfpcapd (nfdump files) and softflowd (NetFlow to a local port nobody reads) on the same pcaps.
#
#   scripts/bench-million.sh [OLD_SONDE]   # OLD_SONDE: a build to compare with (optional)
#
# Pcaps (sonde's generator, 64-byte frames, in $WORK, default /tmp/sonde-bench-million):
#   h100.pcap    3M packets among 100 hosts (10.0.0.0/8): few flows, all long
#   h100k.pcap   3M packets among 100k hosts
#   rand1m.pcap  1M packets, each a new flow from a random source: a million flows
#   h100x10.pcap 30M packets among 100 hosts (only with PCAPS="... h100x10"): the file input
#                without start-up and end in the way (2.4 GB)
# PCAPS picks the pcaps (default "h100 h100k rand1m"). Beside the peers, "tcpdump -r, filter
# rejecting all" is libpcap's read loop with a BPF filter and no output: what reading the file
# through libpcap costs by itself.
# Each run $REPEATS times (default 3): the median of CPU seconds (user + sys), and max RSS and
# wall time of that run; Mpps per CPU-second = packets / CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-}
NEW=target/release/sonde
WORK=${WORK:-/tmp/sonde-bench-million}
REPEATS=${REPEATS:-3}
mkdir -p "$WORK"
[ -x "$NEW" ] || { echo "build sonde first (make build)" >&2; exit 1; }
for t in nfpcapd softflowd tcpdump; do
    command -v $t >/dev/null || { echo "$t missing (scripts/setup-bench-deps.sh)" >&2; exit 1; }
done
PCAPS=${PCAPS:-h100 h100k rand1m}
declare -A PACKETS=([h100]=3000000 [h100k]=3000000 [rand1m]=1000000 [h100x10]=30000000)
[ -f "$WORK/h100.pcap" ] || $NEW --synthetic hosts=100,size=64,packets=3M -w "$WORK/h100.pcap" -q
[ -f "$WORK/h100k.pcap" ] || $NEW --synthetic hosts=100k,size=64,packets=3M -w "$WORK/h100k.pcap" -q
[ -f "$WORK/rand1m.pcap" ] ||
    $NEW --synthetic hosts=100k,size=64,packets=1M,random-src -w "$WORK/rand1m.pcap" -q
if [[ " $PCAPS " == *" h100x10 "* ]] && [ ! -f "$WORK/h100x10.pcap" ]; then
    $NEW --synthetic hosts=100,size=64,packets=30M -w "$WORK/h100x10.pcap" -q
fi

run() { # label packets command...
    local label=$1 packets=$2 vals=()
    shift 2
    for _ in $(seq "$REPEATS"); do
        rm -rf "$WORK/out" && mkdir -p "$WORK/out"
        /usr/bin/time -f "%U %S %M %e" -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/err.txt" ||
            { echo "failed: $*" >&2; cat "$WORK/err.txt" >&2; exit 1; }
        vals+=("$(awk '{printf "%.2f %d %.2f", $1+$2, $3/1024, $4}' "$WORK/time.txt")")
    done
    printf '%s\n' "${vals[@]}" | sort -n | sed -n "$(((REPEATS + 1) / 2))p" |
        awk -v l="$label" -v p="$packets" \
            '{printf "| %s | %.2f | %.2f | %d | %.2f |\n", l, $1, p / $1 / 1e6, $2, $3}'
}

for p in $PCAPS; do
    f="$WORK/$p.pcap"
    n=${PACKETS[$p]}
    echo "### $p.pcap ($n packets)"
    echo "| run | CPU s | Mpps per CPU-s | max RSS MiB | wall s |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for build in ${OLD:+old} new; do
        bin=$NEW
        [ "$build" = old ] && bin=$OLD
        run "sonde $build, --flows-out JSON" "$n" "$bin" -r "$f" -q --flows-out "$WORK/out/flows.json"
        run "sonde $build, --data-dir" "$n" "$bin" -r "$f" -q --data-dir "$WORK/out/data"
    done
    run "sonde new, --flows-out JSON, --dpi off" "$n" "$NEW" -r "$f" -q --dpi off \
        --flows-out "$WORK/out/flows.json"
    run "sonde new, no output" "$n" "$NEW" -r "$f" -q
    run "sonde new, no output, --dpi off" "$n" "$NEW" -r "$f" -q --dpi off
    run "nfpcapd -r (nfdump files)" "$n" nfpcapd -r "$f" -w "$WORK/out"
    run "softflowd -r (NetFlow v9 to 127.0.0.1:9)" "$n" softflowd -r "$f" -n 127.0.0.1:9 \
        -m 2000000 -c none -p "$WORK/out/softflowd.pid"
    run "tcpdump -r, filter rejecting all (libpcap's read loop)" "$n" tcpdump -r "$f" -n \
        'ether proto 0x88b5'
    echo
done
