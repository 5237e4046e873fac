#!/usr/bin/env bash
# Starts a single-node Apache Kafka 4.1 broker (KRaft: broker and controller in one process) on
# 127.0.0.1 for tests, with its data and log under DIR, on free ports. Prints one line when the
# broker answers, then returns (the broker keeps running):
#
#   BOOTSTRAP=127.0.0.1:PORT PID=PID
#
# The caller stops it with `kill PID`; with KAFKA_PARENT_PID set, the broker is also stopped
# when that process ends (a test binary has no teardown for a shared broker). Kafka's jars come from Maven Central once
# (tests/servers/kafka/pom.xml, into target/servers/kafka/lib); needs java (17+) and mvn
# (scripts/setup-test-deps.sh installs them).
#
# Run again on the same DIR, it restarts that broker (same ports, same data).
#
# Usage: scripts/kafka-server.sh DIR [PARTITIONS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:?usage: scripts/kafka-server.sh DIR [PARTITIONS]}
PARTITIONS=${2:-4}
LIB=$ROOT/target/servers/kafka/lib

if [ ! -e "$LIB/.complete" ]; then
    mkdir -p "$LIB"
    (cd "$ROOT/tests/servers/kafka" &&
        mvn -q -B dependency:copy-dependencies -DoutputDirectory="$LIB" >&2)
    touch "$LIB/.complete"
fi

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# A new broker's configuration and storage, on free ports.
create() {
PORT=$(free_port)
CONTROLLER=$(free_port)
while [ "$CONTROLLER" = "$PORT" ]; do CONTROLLER=$(free_port); done

mkdir -p "$DIR/data"
cat > "$DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data
num.partitions=$PARTITIONS
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
EOF

ID=$(java -cp "$CP" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
java -cp "$CP" kafka.tools.StorageTool format -t "$ID" -c "$DIR/server.properties" --standalone \
    >"$DIR/format.log" 2>&1
}

CP="$LIB/*"
if [ -f "$DIR/server.properties" ]; then
    # A restart: the same ports and data (a test stopping the broker mid-run).
    PORT=$(sed -n 's/^listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\),.*/\1/p' "$DIR/server.properties")
else
    create
fi
nohup java -Xmx512m -cp "$CP" kafka.Kafka "$DIR/server.properties" \
    >>"$DIR/kafka.log" 2>&1 </dev/null &
PID=$!

# Ready when the broker accepts connections (it listens once it has started; its log stays
# quiet: slf4j binds no logger).
for _ in $(seq 1 300); do
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "kafka-server: the broker exited; its log:" >&2
        tail -20 "$DIR/kafka.log" >&2
        exit 1
    fi
    if (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        if [ -n "${KAFKA_PARENT_PID:-}" ]; then
            nohup bash -c "while kill -0 $KAFKA_PARENT_PID 2>/dev/null; do sleep 1; done; kill $PID" \
                >/dev/null 2>&1 </dev/null &
        fi
        echo "BOOTSTRAP=127.0.0.1:$PORT PID=$PID"
        exit 0
    fi
    sleep 0.2
done
echo "kafka-server: not ready after 60 s; its log:" >&2
tail -20 "$DIR/kafka.log" >&2
kill "$PID" 2>/dev/null || true
exit 1
