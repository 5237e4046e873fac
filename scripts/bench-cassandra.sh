#!/usr/bin/env bash
# The Cassandra sink's benchmark (BENCHMARKS.md, section 16). Starts a Cassandra 5.0 node on
# 127.0.0.1 (scripts/cassandra-server.sh) in a scratch directory, prints two Markdown tables,
# and stops the node:
#
# 1. Flow records into Cassandra beside the local store: the same synthetic flows (FLOWS of
#    them, one packet each, random sources) with no output, with `--data-dir` only, with
#    `--export cassandra://…` only (with and without the per-minute statistics), and with both
#    in one run; wall and CPU seconds of sonde
#    (/usr/bin/time), records per second, and bytes per record on disk (Cassandra: the keyspace's
#    SSTables after `nodetool flush`, LZ4-compressed as Cassandra's default; the local store:
#    the data directory).
# 2. Seed 002's Fig. 4: one minute of per-minute statistics for SERIES series, Cassandra
#    (the sink's counter updates) against rrdtool (one RRD file per series)
#    (crates/probe/examples/cassandra_stats_bench.rs).
#
# Needs target/release/sonde (make build), java and mvn, rrdtool (scripts/setup-test-deps.sh).
# Usage: scripts/bench-cassandra.sh [FLOWS] [SERIES] [MINUTES]   (defaults 100000 1000,10000,100000 3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FLOWS=${1:-100000}
SERIES=${2:-1000,10000,100000}
MINUTES=${3:-3}
SONDE=$ROOT/target/release/sonde
WORK=$(mktemp -d /tmp/sonde-bench-cassandra.XXXXXX)
[ -x "$SONDE" ] || { echo "bench-cassandra: build sonde first (make build)" >&2; exit 1; }

out=$("$ROOT/scripts/cassandra-server.sh" "$WORK/node")
CQL=$(echo "$out" | sed -n 's/.*CQL=\([^ ]*\).*/\1/p')
PID=$(echo "$out" | sed -n 's/.*PID=\([0-9]*\).*/\1/p')
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT

(cd "$ROOT" && cargo build -q --release -p sonde-probe --example cassandra_stats_bench)

SYN="hosts=$FLOWS,size=64,packets=$FLOWS,random-src"
# CPU seconds of a process so far (utime + stime).
cpu_of() { awk -v t="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print ($12 + $13) / t}' "/proc/$1/stat"; }
run() { # NAME ARGS… → one table row
    local name=$1
    shift
    local stats=$WORK/$name.json
    local node0 node1
    node0=$(cpu_of "$PID")
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/$name.time" \
        "$SONDE" --synthetic "$SYN" -q --stats-json "$stats" "$@" >/dev/null
    node1=$(cpu_of "$PID")
    read -r wall user sys rss <"$WORK/$name.time"
    python3 - "$name" "$stats" "$wall" "$user" "$sys" "$rss" "$FLOWS" "$node0" "$node1" <<'EOF'
import json, sys
name, stats, wall, user, sys_, rss, flows, node0, node1 = sys.argv[1:]
s = json.load(open(stats))
sinks = {x["name"].split(":")[0]: x for x in s.get("sinks", [])}
cpu = float(user) + float(sys_)
cells = []
for k in ("cassandra",):
    if k in sinks:
        x = sinks[k]
        cells.append(f"{x['records']:,} written, {x['dropped']} dropped, {x['queue_dropped']} dropped at the queue")
node = float(node1) - float(node0)
print(f"| {name} | {float(wall):.2f} | {cpu:.2f} | {node:.2f} | {int(flows) / float(wall):,.0f} | "
      f"{int(rss) / 1024:.0f} MiB | {'; '.join(cells) or '-'} |")
EOF
}

echo "Flows: $FLOWS (sonde --synthetic $SYN), Cassandra 5.0 on 127.0.0.1, $(nproc) CPUs"
echo
# Untimed: a warm-up run (the node's JIT), and the keyspaces of the timed runs created (by a
# run of two flows), so that the timed runs do not include creating tables.
"$SONDE" --synthetic "hosts=$((FLOWS / 5)),size=64,packets=$((FLOWS / 5)),random-src" -q \
    --export "cassandra://$CQL/bench_warmup" >/dev/null
for ks in bench_only bench_flows bench_both; do
    "$SONDE" --synthetic hosts=2,size=64,packets=2 -q --export "cassandra://$CQL/$ks" >/dev/null
done
echo "| output | wall s | sonde CPU s | node CPU s | records / wall s | max RSS | Cassandra sink |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
run none
run data-dir --data-dir "$WORK/local-only"
run cassandra --export "cassandra://$CQL/bench_only"
run cassandra-flows-only --export "cassandra://$CQL/bench_flows?stats=off"
run both --data-dir "$WORK/local" --export "cassandra://$CQL/bench_both"

"$ROOT/scripts/cassandra-server.sh" "$WORK/node" nodetool flush >/dev/null
# Allocated bytes (the local store's series rings are sparse files).
size() { du -s -B1 "$@" 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
flows_b=$(size "$WORK"/node/data/bench_both/flows-*)
stats_b=$(size "$WORK"/node/data/bench_both/stats_1m_*)
hist_b=$(size "$WORK/local/flows")
local_b=$(size "$WORK/local")
echo
echo "On disk after the run with both (bytes per record):"
echo
echo "| store | bytes | bytes / record |"
echo "| --- | --- | --- |"
awk -v f="$flows_b" -v s="$stats_b" -v h="$hist_b" -v l="$local_b" -v n="$FLOWS" 'BEGIN {
    printf "| Cassandra flows table (SSTables, LZ4) | %.0f | %.1f |\n", f, f / n
    printf "| Cassandra per-minute statistics tables | %.0f | %.1f |\n", s, s / n
    printf "| local flow history (--data-dir flows/) | %.0f | %.1f |\n", h, h / n
    printf "| local store, all of --data-dir (history, hosts, series rings allocated) | %.0f | %.1f |\n", l, l / n
}'
echo
echo "Statistics: one minute for N series, $MINUTES minutes each"
echo
"$ROOT/target/release/examples/cassandra_stats_bench" "$CQL" --series "$SERIES" \
    --minutes "$MINUTES" --rrd-dir "$WORK/rrd" --cassandra-pid "$PID"
