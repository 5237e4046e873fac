#!/usr/bin/env bash
# Two sonde builds run in turn on one pcap (old, new, old, new, …), for a change too small to
# show in scripts/bench-million.sh's medians on a noisy machine: each pair sees the same
# moment's machine. Prints each build's median CPU seconds (user + sys), min and max, and the
# median run's max RSS.
#
#   scripts/ab-pairs.sh OLD_SONDE NEW_SONDE PAIRS PCAP [sonde options…]
#   e.g. scripts/ab-pairs.sh /tmp/old/sonde target/release/sonde 5 \
#            /tmp/sonde-bench-million/rand1m.pcap --data-dir @OUT/data
#
# "@OUT" in an option is replaced by a scratch directory emptied before every run.
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,12p "$0" >&2; exit 2; }
OLD=$1 NEW=$2 PAIRS=$3 PCAP=$4
shift 4
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
[ -f "$PCAP" ] || { echo "no such pcap: $PCAP" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
args=("${@//@OUT/$WORK/out}")
for _ in $(seq "$PAIRS"); do
    for b in old new; do
        bin=$OLD
        [ $b = new ] && bin=$NEW
        rm -rf "$WORK/out" && mkdir -p "$WORK/out"
        /usr/bin/time -f "%U %S %M" -o "$WORK/time" "$bin" -r "$PCAP" -q "${args[@]}" \
            >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
        awk '{printf "%.2f %d\n", $1 + $2, $3 / 1024}' "$WORK/time" >>"$WORK/$b"
    done
done
for b in old new; do
    sort -n "$WORK/$b" | awk -v b=$b '{c[NR] = $1; r[NR] = $2}
        END {m = int((NR + 1) / 2)
             printf "%s: median CPU %.2f s (min %.2f, max %.2f), max RSS %d MiB\n", b, c[m], c[1], c[NR], r[m]}'
done
