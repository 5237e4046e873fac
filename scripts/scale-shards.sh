#!/bin/bash
# Scaling of sonde's synthetic source over shards (BENCHMARKS.md §23): wall, user and system
# seconds per shard count with enough packets that the run's fixed start and stop (~0.2 s) do not
# dominate, then as many independent one-shard processes as CPUs at once, as the control.
#   SONDE=target/release/sonde P=400M H=10k THREADS="1 2 4 8 16" scripts/scale-shards.sh
SONDE=${SONDE:-target/release/sonde}
P=${P:-400M}
N=$(nproc)
TIMEFORMAT='%R %U %S'
echo "packets=$P hosts=${H:-10k} cpus=$N"
for t in ${THREADS:-1 2 4 8 12 16}; do
    r=$( { time "$SONDE" --synthetic hosts=${H:-10k},size=64,packets=$P --threads $t \
        --stats-json /tmp/st$t.json -q >/dev/null 2>&1; } 2>&1 )
    pk=$(grep -o '"ip_packets": *[0-9]*' /tmp/st$t.json | head -1 | grep -o '[0-9]*$')
    echo "threads=$t wall_user_sys=$r packets=$pk"
done
r=$( { time (for i in $(seq $N); do "$SONDE" --synthetic hosts=${H:-10k},size=64,packets=$P -q \
    >/dev/null 2>&1 & done; wait); } 2>&1 )
echo "control=$N wall_user_sys=$r packets_each=$P"
