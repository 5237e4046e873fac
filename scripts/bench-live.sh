#!/usr/bin/env bash
# Live capture at increasing rates (issue 17, BENCHMARKS.md §26, §27): a generator sends
# 64-byte frames into one end of a veth pair this script makes; each tool captures the other
# end alone, at each rate: sonde through its own TPACKET_V3 ring (--capture ring), through
# libpcap (--capture pcap) and through AF_XDP (--capture xdp), each doing the whole job (flows
# kept as JSON, DPI on), and tcpdump -w /dev/null, nfpcapd -i and softflowd -i. For each: the
# packets the generator sent, those the tool received and those the kernel dropped for it,
# and the tool's CPU per packet received (user + sys of its process).
#
#   sudo scripts/bench-live.sh     # RATES="0 250000 500000 1000000 1500000 top" SECONDS_EACH=3
#
# The generator is sonde-send (crates/bench: sendmmsg batches on an AF_PACKET socket), pinned
# to CPU 0, where the kernel's receive work for the veth also runs; every tool is pinned to
# CPU 1 (CPUS_GEN / CPUS_TOOL change that). GEN=tcpreplay uses tcpreplay instead. Rate 0 sends
# nothing: each tool's idle cost over the same wall time (start, 1.5 s before sending,
# SECONDS_EACH, 1 s after), to read the rows above it against. TOOLS picks the rows (ring,
# pcap, xdp, tcpdump, nfpcapd, softflowd; a name twice runs it twice); SONDE_ARGS adds flags
# to sonde's job.
#
# Needs root (veth pair, capture), tcpdump, nfpcapd, softflowd, editcap (and tcpreplay for
# GEN=tcpreplay). The pcap is the first 500k frames of scripts/bench-million.sh's h100k.pcap
# (100k hosts), looped.
set -euo pipefail
cd "$(dirname "$0")/.."
SONDE=$PWD/target/release/sonde
SEND=$PWD/target/release/sonde-send
WORK=${WORK:-/tmp/sonde-bench-live}
RATES=${RATES:-0 250000 500000 1000000 1500000 top}
SECS=${SECONDS_EACH:-3}
GEN=${GEN:-sonde-send}
CPUS_GEN=${CPUS_GEN:-0}
CPUS_TOOL=${CPUS_TOOL:-1}
TOOLS=${TOOLS:-ring pcap xdp tcpdump nfpcapd softflowd}
read -r -a SONDE_EXTRA <<<"${SONDE_ARGS:-}"
[ "$(id -u)" = 0 ] || { echo "needs root (a veth pair, live capture)" >&2; exit 1; }
for t in tcpdump nfpcapd softflowd softflowctl editcap taskset; do
    command -v $t >/dev/null || { echo "$t missing" >&2; exit 1; }
done
if [ "$GEN" = tcpreplay ]; then
    command -v tcpreplay >/dev/null || { echo "tcpreplay missing" >&2; exit 1; }
else
    [ -x "$SEND" ] || { echo "$SEND missing: cargo build --release -p sonde-bench" >&2; exit 1; }
fi
mkdir -p "$WORK"
SRC=${SRC:-/tmp/sonde-bench-million/h100k.pcap}
mkdir -p "$(dirname "$SRC")"
[ -f "$SRC" ] || $SONDE --synthetic hosts=100k,size=64,packets=3M -w "$SRC" -q
[ -f "$WORK/live.pcap" ] || editcap -r "$SRC" "$WORK/live.pcap" 1-500000
A=sdbA$$; B=sdbB$$
ip link add $A type veth peer name $B
trap 'ip link del $A 2>/dev/null || true' EXIT
for e in $A $B; do
    sysctl -qw net.ipv6.conf.$e.disable_ipv6=1
    ip link set $e up
done

send() { # rate -> "packets-sent achieved-pps"
    local rate=$1 n
    if [ "$rate" = 0 ]; then
        # The idle baseline: the tool's own cost over the same time with nothing to capture.
        sleep "$SECS"; echo "0 0"; return
    fi
    if [ "$rate" = top ]; then n=$((3000000 * SECS)); else n=$((rate * SECS)); fi
    if [ "$GEN" = tcpreplay ]; then
        local pace=(--topspeed); [ "$rate" = top ] || pace=(--pps "$rate")
        taskset -c "$CPUS_GEN" tcpreplay -i $A "${pace[@]}" -K -l $((n / 500000 + 1)) -L $n \
            "$WORK/live.pcap" 2>&1 |
            awk '/Actual:/ {n = $2} /Rated:/ {for (i = 1; i < NF; i++) if ($(i + 1) ~ /^pps/) r = $i}
                 END {printf "%d %.0f\n", n, r}'
    else
        # "sonde-send: N packets in S s (R pps)"
        local pace=(); [ "$rate" = top ] || pace=(--pps "$rate")
        taskset -c "$CPUS_GEN" "$SEND" -i $A -r "$WORK/live.pcap" --count $n "${pace[@]}" |
            awk '{gsub("\\(", "", $7); printf "%d %.0f\n", $2, $7}'
    fi
}

# The last line of time's output (a first line may say the tool ended by a signal).
cpu_of() { tail -n 1 "$WORK/time.txt" | awk '{printf "%.3f", $1 + $2}'; }

row() { # tool rate "sent achieved-pps" received dropped
    local cpu sent got; cpu=$(cpu_of); read -r sent got <<<"$3"
    awk -v t="$1" -v r="$2" -v g="$got" -v s="$sent" -v rx="$4" -v d="$5" -v c="$cpu" 'BEGIN {
        printf "| %s | %s | %d | %d | %d | %d | %.2f | %.0f |\n", t, r, g, s, rx, d, c,
               (rx > 0 ? c / rx * 1e9 : 0) }'
}

# Starts a tool (pinned, under time), waits, sends, waits; $pid is time's, $sent what went.
run_tool() { # command...
    taskset -c "$CPUS_TOOL" /usr/bin/time -f "%U %S" -o "$WORK/time.txt" "$@" &
    pid=$!; sleep 1.5
    sent=$(send "$rate"); sleep 1
}
stop_tool() { # signal
    kill -"$1" $(pgrep -P $pid) 2>/dev/null || kill -"$1" $pid; wait $pid || true
}

echo "| tool | rate asked (pps) | rate sent (pps) | sent | received | kernel dropped | CPU s | CPU ns per packet |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for rate in $RATES; do
    for tool in $TOOLS; do
        case $tool in
        ring | pcap | xdp)
            # sonde: the whole job (flows as JSON, DPI on); counts from its summary.
            rm -f "$WORK/stats.json" "$WORK/flows.json"
            run_tool $SONDE -i $B --capture $tool --flows-out "$WORK/flows.json" \
                --stats-json "$WORK/stats.json" -q "${SONDE_EXTRA[@]}"
            stop_tool INT
            read -r rx dr < <(python3 -c "import json; c=json.load(open('$WORK/stats.json'))['capture']; print(c['received'], c['dropped'])")
            row "sonde --capture $tool" "$rate" "$sent" "$rx" "$dr"
            ;;
        tcpdump)
            run_tool tcpdump -i $B -w /dev/null 2>"$WORK/tcpdump.txt"
            stop_tool INT
            rx=$(awk '/received by filter/ {print $1}' "$WORK/tcpdump.txt")
            dr=$(awk '/dropped by kernel/ {print $1}' "$WORK/tcpdump.txt")
            row "tcpdump -w /dev/null" "$rate" "$sent" "$rx" "$dr"
            ;;
        nfpcapd)
            rm -rf "$WORK/nf" && mkdir -p "$WORK/nf"
            run_tool nfpcapd -i $B -w "$WORK/nf" >"$WORK/nfpcapd.txt" 2>&1
            stop_tool INT
            rx=$(awk '/Total: Processed:/ {gsub(",", "", $3); print $3}' "$WORK/nfpcapd.txt")
            # nfpcapd says what it processed, not what the kernel dropped: the difference is loss.
            row "nfpcapd -i" "$rate" "$sent" "${rx:-0}" "$((${sent%% *} - ${rx:-0}))"
            ;;
        softflowd)
            rm -f "$WORK/sf.ctl"
            run_tool softflowd -i $B -n 127.0.0.1:9995 -d -c "$WORK/sf.ctl" >/dev/null 2>&1
            softflowctl -c "$WORK/sf.ctl" statistics >"$WORK/sf.txt" 2>&1 || true
            stop_tool TERM
            rx=$(awk '/received by libpcap/ {print $NF}' "$WORK/sf.txt")
            dr=$(awk '/dropped by libpcap/ {print $NF}' "$WORK/sf.txt")
            row "softflowd -i" "$rate" "$sent" "${rx:-0}" "${dr:-0}"
            ;;
        esac
    done
done
