#!/usr/bin/env bash
# Egress on the user's whole job (BENCHMARKS.md §25): sonde -r with the flows kept as JSON and
# the chosen packets written to a pcap ring, beside tcpdump -r -w with the same BPF expression
# (a packet recorder's filter, no flows), on the same pcap.
#
#   scripts/bench-egress.sh
#
# The pcap is h100k.pcap of scripts/bench-million.sh (3M 64-byte UDP frames among 100k hosts,
# in $WORK, default /tmp/sonde-bench-million; made here if missing). Each row runs $REPEATS
# times (default 3): the median of CPU seconds (user + sys), that run's max RSS and wall time,
# and the packets it wrote (capinfos on the output).
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=target/release/sonde
WORK=${WORK:-/tmp/sonde-bench-million}
REPEATS=${REPEATS:-3}
NET=${NET:-10.0.0.0/18}
mkdir -p "$WORK"
[ -x "$NEW" ] || { echo "build sonde first (make build)" >&2; exit 1; }
for t in tcpdump capinfos; do
    command -v $t >/dev/null || { echo "$t missing (scripts/setup-test-deps.sh)" >&2; exit 1; }
done
PCAP=$WORK/h100k.pcap
PACKETS=3000000
[ -f "$PCAP" ] || $NEW --synthetic hosts=100k,size=64,packets=3M -w "$PCAP" -q

run() { # label command...
    local label=$1 vals=()
    shift
    for _ in $(seq "$REPEATS"); do
        rm -rf "$WORK/out" && mkdir -p "$WORK/out"
        /usr/bin/time -f "%U %S %M %e" -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/err.txt" ||
            { echo "failed: $*" >&2; cat "$WORK/err.txt" >&2; exit 1; }
        vals+=("$(awk '{printf "%.2f %d %.2f", $1+$2, $3/1024, $4}' "$WORK/time.txt")")
    done
    local written=0 f
    for f in "$WORK"/out/*.pcap; do
        [ -e "$f" ] || continue
        written=$((written + $(capinfos -c -M "$f" | awk '/Number of packets/ {print $NF}')))
    done
    printf '%s\n' "${vals[@]}" | sort -n | sed -n "$(((REPEATS + 1) / 2))p" |
        awk -v l="$label" -v p="$PACKETS" -v w="$written" \
            '{printf "| %s | %.2f | %.2f | %d | %.2f | %d |\n", l, $1, p / $1 / 1e6, $2, $3, w}'
}

echo "| h100k.pcap (3M packets), $NET chosen | CPU s | Mpps per CPU-s | max RSS MiB | wall s | packets written |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
FLOWS=(--flows-out "$WORK/out/flows.json" -q)
run "sonde --flows-out JSON, no egress" $NEW -r "$PCAP" "${FLOWS[@]}"
run "sonde --flows-out JSON, --egress-hosts $NET" \
    $NEW -r "$PCAP" "${FLOWS[@]}" --egress-pcap "$WORK/out" --egress-hosts "$NET"
run "sonde --flows-out JSON, --egress-shunt-after 8" \
    $NEW -r "$PCAP" "${FLOWS[@]}" --egress-pcap "$WORK/out" --egress-shunt-after 8
run "sonde --flows-out JSON, every packet to the ring" \
    $NEW -r "$PCAP" "${FLOWS[@]}" --egress-pcap "$WORK/out"
run "tcpdump -r -w 'net $NET'" tcpdump -r "$PCAP" -w "$WORK/out/t.pcap" "net $NET"
run "tcpdump -r -w (every packet)" tcpdump -r "$PCAP" -w "$WORK/out/t.pcap"
