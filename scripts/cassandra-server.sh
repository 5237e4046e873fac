#!/usr/bin/env bash
# Starts a single-node Apache Cassandra 5.0 on 127.0.0.1 for tests, with its data, commit log
# and log under DIR, on free ports. Prints one line when its CQL port answers, then returns (the
# node keeps running):
#
#   CQL=127.0.0.1:PORT PID=PID
#
# The caller stops it with `kill PID`; with CASSANDRA_PARENT_PID set, the node is also stopped
# when that process ends (a test binary has no teardown for a shared server). Cassandra's jars
# come from Maven Central once (tests/servers/cassandra/pom.xml, into
# target/servers/cassandra/lib, ~66 MB); needs java 17 and mvn (scripts/setup-test-deps.sh
# installs them). Up in about 20-30 s; about 1.5 GB of memory (a 1 GB heap).
#
# Run again on the same DIR, it restarts that node (same ports, same data). With `nodetool ARGS…`
# after DIR, it runs Cassandra's nodetool against that running node instead (its JMX port, local
# only, is in DIR/jmx_port), e.g. `scripts/cassandra-server.sh DIR nodetool flush sonde`.
#
# Usage: scripts/cassandra-server.sh DIR [nodetool ARGS…]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:?usage: scripts/cassandra-server.sh DIR}
LIB=$ROOT/target/servers/cassandra/lib
JAVA=${CASSANDRA_JAVA:-java}

if [ ! -e "$LIB/.complete" ]; then
    mkdir -p "$LIB"
    (cd "$ROOT/tests/servers/cassandra" &&
        mvn -q -B dependency:copy-dependencies -DoutputDirectory="$LIB" >&2)
    touch "$LIB/.complete"
fi

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# A new node's configuration, on free ports.
create() {
CQL=$(free_port)
STORAGE=$(free_port)
while [ "$STORAGE" = "$CQL" ]; do STORAGE=$(free_port); done
JMX=$(free_port)
while [ "$JMX" = "$CQL" ] || [ "$JMX" = "$STORAGE" ]; do JMX=$(free_port); done
echo "$JMX" > "$DIR/jmx_port"
mkdir -p "$DIR/conf" "$DIR/data" "$DIR/commitlog" "$DIR/hints" "$DIR/saved_caches" "$DIR/cdc"
cat > "$DIR/conf/cassandra.yaml" <<EOF
cluster_name: sonde-test
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$STORAGE"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $STORAGE
native_transport_port: $CQL
start_native_transport: true
data_file_directories:
  - $DIR/data
commitlog_directory: $DIR/commitlog
hints_directory: $DIR/hints
saved_caches_directory: $DIR/saved_caches
cdc_raw_directory: $DIR/cdc
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
memtable_heap_space: 128MiB
memtable_offheap_space: 128MiB
# Counter tables: the per-minute statistics (sonde's Cassandra sink).
counter_cache_size: 16MiB
EOF
cat > "$DIR/conf/logback.xml" <<EOF
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$DIR/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
EOF
}

DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
# The --add-exports/--add-opens of Cassandra's conf/jvm17-server.options.
OPENS=()
for m in java.base/jdk.internal.misc java.base/jdk.internal.ref java.base/sun.nio.ch \
    java.management.rmi/com.sun.jmx.remote.internal.rmi java.rmi/sun.rmi.registry \
    java.rmi/sun.rmi.server java.sql/java.sql java.base/java.lang.ref jdk.unsupported/sun.misc; do
    OPENS+=(--add-exports "$m=ALL-UNNAMED")
done
for m in java.base/java.lang.module java.base/jdk.internal.loader java.base/jdk.internal.ref \
    java.base/jdk.internal.reflect java.base/jdk.internal.math java.base/jdk.internal.module \
    java.base/jdk.internal.util.jar jdk.management/com.sun.management.internal \
    java.base/sun.nio.ch java.base/java.io java.base/java.nio java.base/java.util.concurrent \
    java.base/java.util java.base/java.util.concurrent.atomic java.base/java.lang \
    java.base/java.math java.base/java.lang.reflect java.base/java.net; do
    OPENS+=(--add-opens "$m=ALL-UNNAMED")
done

if [ "${2:-}" = nodetool ]; then
    shift 2
    exec "$JAVA" "${OPENS[@]}" -cp "$LIB/*" org.apache.cassandra.tools.NodeTool \
        -h 127.0.0.1 -p "$(cat "$DIR/jmx_port")" "$@"
fi

if [ -f "$DIR/conf/cassandra.yaml" ]; then
    # A restart: the same ports and data (a test stopping the node mid-run).
    CQL=$(sed -n 's/^native_transport_port: \([0-9]*\)/\1/p' "$DIR/conf/cassandra.yaml")
else
    create
fi

JAMM=$(ls "$LIB"/jamm-*.jar | head -1)

nohup "$JAVA" -Xms1g -Xmx1g -Xss512k -XX:+UseG1GC -XX:+HeapDumpOnOutOfMemoryError \
    -XX:HeapDumpPath="$DIR" -javaagent:"$JAMM" -Djdk.attach.allowAttachSelf=true "${OPENS[@]}" \
    -Dcassandra-foreground=yes -Dcassandra.config="file://$DIR/conf/cassandra.yaml" \
    -Dlogback.configurationFile="$DIR/conf/logback.xml" -Dcassandra.logdir="$DIR" \
    -Dcassandra.storagedir="$DIR" -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.superuser_setup_delay_ms=0 -Dcassandra.ring_delay_ms=1000 \
    -Dcassandra.jmx.local.port="$(cat "$DIR/jmx_port")" \
    -cp "$DIR/conf:$LIB/*" org.apache.cassandra.service.CassandraDaemon \
    >>"$DIR/cassandra.out" 2>&1 </dev/null &
PID=$!

# Ready when the CQL port accepts connections (the node opens it last, once it serves).
for _ in $(seq 1 600); do
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "cassandra-server: the node exited; its log:" >&2
        tail -20 "$DIR/cassandra.out" "$DIR/system.log" >&2 || true
        exit 1
    fi
    if (echo >"/dev/tcp/127.0.0.1/$CQL") 2>/dev/null; then
        if [ -n "${CASSANDRA_PARENT_PID:-}" ]; then
            nohup bash -c "while kill -0 $CASSANDRA_PARENT_PID 2>/dev/null; do sleep 1; done; kill $PID" \
                >/dev/null 2>&1 </dev/null &
        fi
        echo "CQL=127.0.0.1:$CQL PID=$PID"
        exit 0
    fi
    sleep 0.2
done
echo "cassandra-server: not ready after 120 s; its log:" >&2
tail -20 "$DIR/system.log" >&2 || true
kill "$PID" 2>/dev/null || true
exit 1
