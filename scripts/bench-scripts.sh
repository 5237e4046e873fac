#!/usr/bin/env bash
# What a per-second Lua script that walks every host costs the whole job (BENCHMARKS.md §17b):
# sonde on synthetic traffic of N hosts, one shard, without a script and with
# examples/lua/walk_hosts.lua, the same duration; packets per CPU-second of the whole process,
# and the script's time per call as the probe measured it (building the host tables included).
#   scripts/bench-scripts.sh [HOSTS ...]      (default: 10000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
SONDE=${SONDE:-target/release/sonde}
SECS=${SECS:-15}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '| hosts | script | packets | CPU s | Mpps per CPU-s | max RSS MB | script calls | ms per call (mean) | ms per call (max) |\n'
printf '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for hosts in "${@:-10000 100000}"; do
  for with in none walk_hosts.lua; do
    args=()
    [ "$with" = none ] || args=(--script examples/lua/walk_hosts.lua)
    "$SONDE" --synthetic "hosts=$hosts,size=64" --duration "$SECS" -q --stats-json "$out/s.json" "${args[@]}"
    python3 - "$out/s.json" "$hosts" "$with" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
sc = (s["alerts"].get("scripts") or [None])[0]
calls = sc["calls"] if sc else 0
mean = sc["total_ns"] / calls / 1e6 if sc and calls else 0
mx = sc["max_ns"] / 1e6 if sc else 0
print(f"| {int(sys.argv[2]):,} | {sys.argv[3]} | {s['packets']:,} | {s['cpu_s']:.2f} | "
      f"{s['packets'] / s['cpu_s'] / 1e6:.2f} | {s['max_rss_bytes'] >> 20} | {calls} | "
      f"{mean:.1f} | {mx:.1f} |")
PY
  done
done
