#!/usr/bin/env bash
# What the detectors cost the whole job (BENCHMARKS.md §18): the same inputs through two sonde
# builds (BEFORE and AFTER, e.g. the commit before a detector change and after it), DPI off
# and built-in, one shard; packets per CPU-second of the whole process (user + sys), median of
# REPEATS runs, runs alternated so both builds see the same machine.
#   synthetic mix:  --synthetic hosts=10k,packets=PACKETS,payload=mix  (HTTP, TLS, DNS flows)
#   random payloads: bench-data/random-payload.pcap (scripts/random-payload-pcap.py: 100k flows,
#                   half TCP half UDP, random ports, 12 packets of 60-400 random bytes each): the
#                   worst case, every candidate detector tries each flow's first 10 packets;
#                   read with -r, flow records written with --flows-out
#   scripts/bench-dpi-detectors.sh BEFORE_BINARY AFTER_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${1:?BEFORE sonde binary}
AFTER=${2:?AFTER sonde binary}
PACKETS=${PACKETS:-5M}
REPEATS=${REPEATS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
RANDOM_PCAP=bench-data/random-payload.pcap
mkdir -p bench-data
[ -f "$RANDOM_PCAP" ] || scripts/random-payload-pcap.py "$RANDOM_PCAP" 100000

# CPU seconds (user + sys) and packets of one run: prints "CPU PACKETS".
run_synthetic() { # BINARY DPI PAYLOAD
  "$1" --synthetic "hosts=10k,packets=$PACKETS,payload=$3" --dpi "$2" -q --stats-json "$out/s.json"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["cpu_s"], s["packets"])' "$out/s.json"
}
run_capture() { # BINARY DPI FILE
  "$1" -r "$3" --dpi "$2" -q --flows-out "$out/f.jsonl" --stats-json "$out/s.json"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["cpu_s"], s["packets"])' "$out/s.json"
}

printf '| input | build | DPI | packets | CPU s (median of %s) | Mpps per CPU-s |\n' "$REPEATS"
printf '| --- | --- | --- | ---: | ---: | ---: |\n'
for input in "synthetic mix" "random payloads"; do
  declare -A cpus=() pk=()
  for r in $(seq "$REPEATS"); do
    for build in before after; do
      bin=$BEFORE; [ $build = after ] && bin=$AFTER
      for dpi in off builtin; do
        case $input in
          "synthetic mix") read -r c n < <(run_synthetic "$bin" $dpi mix) ;;
          *) read -r c n < <(run_capture "$bin" $dpi "$RANDOM_PCAP") ;;
        esac
        cpus[$build-$dpi]+="$c "; pk[$build-$dpi]=$n
      done
    done
  done
  for key in before-off before-builtin after-off after-builtin; do
    python3 - "$input" "${key%-*}" "${key#*-}" "${pk[$key]}" ${cpus[$key]} <<'PY'
import statistics, sys
inp, build, dpi, packets = sys.argv[1:5]
cpu = statistics.median(float(c) for c in sys.argv[5:])
print(f"| {inp} | {build} | {dpi} | {int(packets):,} | {cpu:.2f} | {int(packets) / cpu / 1e6:.2f} |")
PY
  done
  unset cpus pk
done
