#!/usr/bin/env bash
# Starts a ClickHouse server (Debian's clickhouse-server) on 127.0.0.1 for tests, with its
# data under DIR and free ports. Prints one line once it answers /ping, then returns (the
# server keeps running):
#
#   HTTP=127.0.0.1:PORT PID=PID TCP=127.0.0.1:PORT
#
# With CLICKHOUSE_CLUSTER="HOST:TCPPORT,…" the server knows a cluster `sonde_test` of those
# shards (one replica each; `self` is this server), for Distributed tables.
#
# The caller stops it with `kill PID`; with CLICKHOUSE_PARENT_PID set, it is also stopped when
# that process ends. Run again on the same DIR, it restarts that server (same ports, same data).
# Usage: scripts/clickhouse-server.sh DIR
set -euo pipefail
DIR=${1:?usage: scripts/clickhouse-server.sh DIR}
command -v clickhouse-server >/dev/null ||
    { echo "clickhouse-server: not installed (scripts/setup-test-deps.sh installs it)" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# A new server's configuration, on free ports.
create() {
HTTP=$(free_port)
TCP=$(free_port)
INTER=$(free_port)
mkdir -p "$DIR/data/" "$DIR/tmp/" "$DIR/user_files/" "$DIR/log"
DIR=$(cd "$DIR" && pwd)
cat > "$DIR/users.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default></default></quotas>
</yandex>
EOF
cat > "$DIR/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$DIR/log/server.log</log><errorlog>$DIR/log/error.log</errorlog><console>0</console></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$HTTP</http_port>
  <tcp_port>$TCP</tcp_port>
  <interserver_http_port>$INTER</interserver_http_port>
  <path>$DIR/data/</path>
  <tmp_path>$DIR/tmp/</tmp_path>
  <user_files_path>$DIR/user_files/</user_files_path>
  <users_config>$DIR/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>53687091</mark_cache_size>
  <!-- Kafka engine tables of a new consumer group read their topic from the start. -->
  <kafka><auto_offset_reset>earliest</auto_offset_reset></kafka>
  $(cluster)
</yandex>
EOF
}

# The cluster of CLICKHOUSE_CLUSTER, if set.
cluster() {
    [ -n "${CLICKHOUSE_CLUSTER:-}" ] || return 0
    local s host port
    printf '<remote_servers><sonde_test>'
    for s in ${CLICKHOUSE_CLUSTER//,/ }; do
        [ "$s" = self ] && s=127.0.0.1:$TCP
        host=${s%:*} port=${s##*:}
        printf '<shard><replica><host>%s</host><port>%s</port></replica></shard>' "$host" "$port"
    done
    printf '</sonde_test></remote_servers>'
}

if [ -f "$DIR/config.xml" ]; then
    # A restart: the same ports and data (a test stopping the server mid-run).
    DIR=$(cd "$DIR" && pwd)
    HTTP=$(sed -n 's/.*<http_port>\([0-9]*\)<.*/\1/p' "$DIR/config.xml")
    TCP=$(sed -n 's/.*<tcp_port>\([0-9]*\)<.*/\1/p' "$DIR/config.xml")
else
    create
fi
nohup clickhouse-server --config-file="$DIR/config.xml" >>"$DIR/log/stdout.log" 2>&1 </dev/null &
PID=$!
for _ in $(seq 1 150); do
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "clickhouse-server: exited; its log:" >&2
        tail -20 "$DIR/log/stdout.log" "$DIR/log/error.log" >&2 2>/dev/null || true
        exit 1
    fi
    if curl -sf "http://127.0.0.1:$HTTP/ping" >/dev/null 2>&1; then
        if [ -n "${CLICKHOUSE_PARENT_PID:-}" ]; then
            nohup bash -c "while kill -0 $CLICKHOUSE_PARENT_PID 2>/dev/null; do sleep 1; done; kill $PID" \
                >/dev/null 2>&1 </dev/null &
        fi
        echo "HTTP=127.0.0.1:$HTTP PID=$PID TCP=127.0.0.1:$TCP"
        exit 0
    fi
    sleep 0.2
done
echo "clickhouse-server: no answer to /ping after 30 s" >&2
kill "$PID" 2>/dev/null || true
exit 1
