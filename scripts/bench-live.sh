#!/usr/bin/env bash
# Live capture at increasing rates (issue 17, BENCHMARKS.md §26): tcpreplay sends 64-byte
# frames into one end of a veth pair this script makes; sonde (-i, through libpcap's
# TPACKET_V3 ring, flows kept as JSON, DPI on), tcpdump -w /dev/null, nfpcapd -i and
# softflowd -i capture the other end, one at a time, at each rate. For each: the packets the
# generator sent, those the tool received and those the kernel dropped for it, and the tool's
# CPU per packet received (user + sys of its process).
#
#   sudo scripts/bench-live.sh            # RATES="0 100000 200000 top" SECONDS_EACH=3
#
# Rate 0 sends nothing: each tool's idle cost over the same wall time (start, 1.5 s before
# sending, SECONDS_EACH, 1 s after), to read the rows above it against.
#
# Needs root (veth pair, capture), tcpreplay, tcpdump, nfpcapd, softflowd. The pcap is the
# first 500k frames of scripts/bench-million.sh's h100k.pcap (100k hosts), looped.
set -euo pipefail
cd "$(dirname "$0")/.."
SONDE=$PWD/target/release/sonde
WORK=${WORK:-/tmp/sonde-bench-live}
RATES=${RATES:-0 100000 200000 top}
SECS=${SECONDS_EACH:-3}
[ "$(id -u)" = 0 ] || { echo "needs root (a veth pair, live capture)" >&2; exit 1; }
for t in tcpreplay tcpdump nfpcapd softflowd softflowctl editcap; do
    command -v $t >/dev/null || { echo "$t missing" >&2; exit 1; }
done
mkdir -p "$WORK"
SRC=${SRC:-/tmp/sonde-bench-million/h100k.pcap}
[ -f "$SRC" ] || $SONDE --synthetic hosts=100k,size=64,packets=3M -w "$SRC" -q
[ -f "$WORK/live.pcap" ] || editcap -r "$SRC" "$WORK/live.pcap" 1-500000
A=sdbA$$; B=sdbB$$
ip link add $A type veth peer name $B
trap 'ip link del $A 2>/dev/null || true' EXIT
for e in $A $B; do
    sysctl -qw net.ipv6.conf.$e.disable_ipv6=1
    ip link set $e up
done

send() { # rate -> packets sent
    local rate=$1 n
    if [ "$rate" = 0 ]; then
        # The idle baseline: the tool's own cost over the same time with nothing to capture.
        sleep "$SECS"; echo "0 0"; return
    elif [ "$rate" = top ]; then
        n=$((1500000 * SECS))
        tcpreplay -i $A --topspeed -K -l $((n / 500000 + 1)) -L $n "$WORK/live.pcap" 2>&1
    else
        n=$((rate * SECS))
        tcpreplay -i $A --pps "$rate" -K -l $((n / 500000 + 1)) -L $n "$WORK/live.pcap" 2>&1
    fi | awk '/Actual:/ {n = $2} /Rated:/ {for (i = 1; i < NF; i++) if ($(i + 1) ~ /^pps/) r = $i}
              END {printf "%d %.0f\n", n, r}'
}

# The last line of time's output (a first line may say the tool ended by a signal).
cpu_of() { tail -n 1 "$WORK/time.txt" | awk '{printf "%.3f", $1 + $2}'; }

row() { # tool rate "sent achieved-pps" received dropped
    local cpu sent got; cpu=$(cpu_of); read -r sent got <<<"$3"
    awk -v t="$1" -v r="$2" -v g="$got" -v s="$sent" -v rx="$4" -v d="$5" -v c="$cpu" 'BEGIN {
        printf "| %s | %s | %d | %d | %d | %d | %.2f | %.0f |\n", t, r, g, s, rx, d, c,
               (rx > 0 ? c / rx * 1e9 : 0) }'
}

echo "| tool | rate asked (pps) | rate sent (pps) | sent | received | kernel dropped | CPU s | CPU ns per packet |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for rate in $RATES; do
    # sonde: the whole job (flows as JSON, DPI on); counts from its summary.
    rm -f "$WORK/stats.json" "$WORK/flows.json"
    /usr/bin/time -f "%U %S" -o "$WORK/time.txt" \
        $SONDE -i $B --flows-out "$WORK/flows.json" --stats-json "$WORK/stats.json" -q &
    pid=$!; sleep 1.5
    sent=$(send "$rate"); sleep 1
    kill -INT $(pgrep -P $pid) 2>/dev/null || kill -INT $pid; wait $pid || true
    read -r rx dr < <(python3 -c "import json,sys; c=json.load(open('$WORK/stats.json'))['capture']; print(c['received'], c['dropped'])")
    row "sonde -i (libpcap)" "$rate" "$sent" "$rx" "$dr"

    /usr/bin/time -f "%U %S" -o "$WORK/time.txt" tcpdump -i $B -w /dev/null 2>"$WORK/tcpdump.txt" &
    pid=$!; sleep 1.5
    sent=$(send "$rate"); sleep 1
    kill -INT $(pgrep -P $pid) 2>/dev/null || kill -INT $pid; wait $pid || true
    rx=$(awk '/received by filter/ {print $1}' "$WORK/tcpdump.txt")
    dr=$(awk '/dropped by kernel/ {print $1}' "$WORK/tcpdump.txt")
    row "tcpdump -w /dev/null" "$rate" "$sent" "$rx" "$dr"

    rm -rf "$WORK/nf" && mkdir -p "$WORK/nf"
    /usr/bin/time -f "%U %S" -o "$WORK/time.txt" nfpcapd -i $B -w "$WORK/nf" >"$WORK/nfpcapd.txt" 2>&1 &
    pid=$!; sleep 1.5
    sent=$(send "$rate"); sleep 1
    kill -INT $(pgrep -P $pid) 2>/dev/null || kill -INT $pid; wait $pid || true
    rx=$(awk '/Total: Processed:/ {gsub(",", "", $3); print $3}' "$WORK/nfpcapd.txt")
    # nfpcapd says what it processed, not what the kernel dropped: the difference is loss.
    row "nfpcapd -i" "$rate" "$sent" "${rx:-0}" "$((${sent%% *} - ${rx:-0}))"

    rm -f "$WORK/sf.ctl"
    /usr/bin/time -f "%U %S" -o "$WORK/time.txt" \
        softflowd -i $B -n 127.0.0.1:9995 -d -c "$WORK/sf.ctl" >/dev/null 2>&1 &
    pid=$!; sleep 1.5
    sent=$(send "$rate"); sleep 1
    softflowctl -c "$WORK/sf.ctl" statistics >"$WORK/sf.txt" 2>&1 || true
    kill -TERM $(pgrep -P $pid) 2>/dev/null || kill -TERM $pid; wait $pid || true
    rx=$(awk '/received by libpcap/ {print $NF}' "$WORK/sf.txt")
    dr=$(awk '/dropped by libpcap/ {print $NF}' "$WORK/sf.txt")
    row "softflowd -i" "$rate" "$sent" "${rx:-0}" "${dr:-0}"
done
