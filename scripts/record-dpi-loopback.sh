#!/usr/bin/env bash
# Records tests/dpi_loopback/: one small pcap per protocol, each of a real client talking to a
# real server on 127.0.0.1, so sonde's application detection can be compared with nDPI's
# ndpiReader (tests/system/ndpi_reader.py) on traffic nobody tuned either of them for.
#
# Run by hand, as root, on Debian bookworm (not in CI): scripts/record-dpi-loopback.sh [PROTO...]
# With no argument it records every protocol (ALL, at the end); with names (http, tls, dns, ...)
# only those.
# Re-runnable: it overwrites the captures it makes. Every server it starts is stopped on exit;
# scratch files live in a temporary directory that is removed on exit. Services the packages
# would start on install are kept from starting (the script runs each server itself, in the
# foreground, on 127.0.0.1).
#
# It installs with apt-get (only what is missing; the packages' own services are kept from
# starting):
#   tcpdump curl openssl bind9-dnsutils (dig) dnsmasq-base openssh-server openssh-client
#   mosquitto mosquitto-clients swaks libnet-ssleay-perl (swaks --tls) python3-aiosmtpd
#   python3-pyftpdlib snmpd snmp chrony ntpsec-ntpdate sipsak kamailio socat bsdutils (logger)
#   tftpd-hpa tftp-hpa freeradius freeradius-utils (radtest) slapd ldap-utils krb5-kdc
#   krb5-admin-server (kadmin.local) krb5-user ngircd python3-hypercorn python3-h2 samba
#   smbclient redis-server redis-tools mariadb-server mariadb-client postgresql-15
#   postgresql-client-15 openvpn wireguard-go wireguard-tools iputils-ping
# WireGuard needs /dev/net/tun and CAP_NET_ADMIN (wireguard-go makes two tun interfaces,
# sondewg0 and sondewg1, removed when it stops).
# The Python servers run on Debian's /usr/bin/python3 (the python3-* packages above).
#
# The captures are written with `tcpdump -i lo -s 0 -U -w FILE FILTER` (pcap, not pcapng), the
# filter naming the server's ports so that other loopback traffic stays out.
set -uo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$REPO/tests/dpi_loopback"
PY=/usr/bin/python3
HOST=www.example.test

if [ "$(id -u)" -ne 0 ]; then
    echo "record-dpi-loopback: run as root (it binds standard ports and runs daemons)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
PKGS=(tcpdump curl openssl bind9-dnsutils dnsmasq-base openssh-server openssh-client mosquitto
    mosquitto-clients swaks libnet-ssleay-perl python3-aiosmtpd python3-pyftpdlib snmpd snmp chrony
    ntpsec-ntpdate sipsak kamailio socat bsdutils tftpd-hpa tftp-hpa freeradius freeradius-utils
    slapd ldap-utils krb5-kdc krb5-admin-server krb5-user ngircd python3-hypercorn python3-h2 samba
    smbclient redis-server redis-tools mariadb-server mariadb-client postgresql-15
    postgresql-client-15 openvpn wireguard-go wireguard-tools iputils-ping)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "record-dpi-loopback: installing ${missing[*]}"
    # Keep the packages' own services from starting (a container's policy-rc.d may do so already).
    policy_made=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_made=1
    fi
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
    [ "$policy_made" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/record-dpi-loopback.XXXXXX)"
chmod 755 "$WORK"
PIDS=()
TCPDUMP=""
FAILED=()
MADE=()

stop_servers() {
    local p
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    PIDS=()
}

cleanup() {
    [ -n "$TCPDUMP" ] && kill -INT "$TCPDUMP" 2>/dev/null
    stop_servers
    # Servers that fork away from the pid we started (postgres, slapd) are stopped by their own
    # pid files here.
    [ -f "$WORK/pg/postmaster.pid" ] &&
        kill -TERM "$(head -1 "$WORK/pg/postmaster.pid")" 2>/dev/null
    sleep 0.5
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# spawn NAME CMD...: start a server in the background, its output in $WORK/NAME.log.
spawn() {
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 &
    PIDS+=($!)
}

# wait_listen tcp|udp PORT: until something listens there (10 s at most).
wait_listen() {
    local flag=-lnt
    [ "$1" = udp ] && flag=-lnu
    for _ in $(seq 100); do
        ss -H "$flag" "sport = :$2" | grep -q . && return 0
        sleep 0.1
    done
    echo "record-dpi-loopback: nothing listens on $1 port $2" >&2
    return 1
}

# cap_start NAME FILTER...: record loopback into $OUT/NAME.pcap.
cap_start() {
    local name=$1
    shift
    rm -f "$OUT/$name.pcap"
    tcpdump -i lo -s 0 -U -n -w "$OUT/$name.pcap" "$@" 2>"$WORK/$name.tcpdump" &
    TCPDUMP=$!
    CAPNAME=$name
    for _ in $(seq 100); do
        grep -qs "listening on" "$WORK/$name.tcpdump" && return 0
        sleep 0.1
    done
    return 1
}

cap_stop() {
    sleep 1
    kill -INT "$TCPDUMP" 2>/dev/null
    wait "$TCPDUMP" 2>/dev/null
    TCPDUMP=""
    # tcpdump writes as its own user: give the file to whoever owns the directory
    chown --reference="$OUT" "$OUT/$CAPNAME.pcap"
    MADE+=("$CAPNAME")
}

# A certificate for www.example.test, shared by the TLS servers.
make_cert() {
    [ -f "$WORK/cert.pem" ] && return 0
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$HOST" \
        -addext "subjectAltName=DNS:$HOST" \
        -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
}

# ---------------------------------------------------------------------------------------------

rec_http() {
    mkdir -p "$WORK/www"
    printf '<html><body>sonde loopback test page</body></html>\n' >"$WORK/www/index.html"
    printf 'hello from the sonde loopback capture\n' >"$WORK/www/hello.txt"
    spawn http $PY -m http.server 80 --bind 127.0.0.1 --directory "$WORK/www"
    wait_listen tcp 80 || return 1
    cap_start http-curl tcp port 80 || return 1
    curl -sS -o /dev/null --resolve "$HOST:80:127.0.0.1" "http://$HOST/"
    curl -sS -o /dev/null --resolve "$HOST:80:127.0.0.1" "http://$HOST/hello.txt"
    cap_stop
}

rec_tls() {
    make_cert || return 1
    spawn tls openssl s_server -accept 127.0.0.1:443 -cert "$WORK/cert.pem" -key "$WORK/key.pem" \
        -www
    wait_listen tcp 443 || return 1
    cap_start tls13-curl tcp port 443 || return 1
    curl -sS -k -o /dev/null --tlsv1.3 --resolve "$HOST:443:127.0.0.1" "https://$HOST/"
    cap_stop
    cap_start tls12-openssl tcp port 443 || return 1
    printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$HOST" |
        openssl s_client -connect 127.0.0.1:443 -servername "$HOST" -tls1_2 -quiet -ign_eof \
            >/dev/null 2>&1
    cap_stop
}

rec_dns() {
    spawn dns dnsmasq --no-daemon --conf-file=/dev/null --no-resolv --no-hosts --user=root \
        --listen-address=127.0.0.1 --bind-interfaces -p 53 --address=/example.test/127.0.0.2
    wait_listen udp 53 || return 1
    cap_start dns-udp-dig port 53 || return 1
    dig +short +notcp @127.0.0.1 "$HOST" A >/dev/null
    dig +short +notcp @127.0.0.1 mail.example.test MX >/dev/null
    cap_stop
    cap_start dns-tcp-dig port 53 || return 1
    dig +short +tcp @127.0.0.1 "$HOST" A >/dev/null
    cap_stop
}

rec_ssh() {
    mkdir -p /run/sshd
    ssh-keygen -q -t ed25519 -N '' -C 'throwaway host key' -f "$WORK/ssh_host_ed25519_key"
    spawn ssh /usr/sbin/sshd -D -e -f /dev/null -h "$WORK/ssh_host_ed25519_key" \
        -o ListenAddress=127.0.0.1:22 -o PidFile=none -o PasswordAuthentication=no \
        -o KbdInteractiveAuthentication=no
    wait_listen tcp 22 || return 1
    cap_start ssh-openssh tcp port 22 || return 1
    # No key is accepted: the exchange runs up to the refused authentication.
    ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o IdentitiesOnly=yes -o IdentityFile=/dev/null -p 22 nobody@127.0.0.1 true 2>/dev/null
    cap_stop
}

rec_mqtt() {
    printf 'listener 1883 127.0.0.1\nallow_anonymous true\npersistence false\n' \
        >"$WORK/mosquitto.conf"
    spawn mqtt mosquitto -c "$WORK/mosquitto.conf"
    wait_listen tcp 1883 || return 1
    cap_start mqtt-mosquitto tcp port 1883 || return 1
    timeout 10 mosquitto_sub -h 127.0.0.1 -p 1883 -t sonde/test -C 1 -i sonde-sub >/dev/null &
    local sub=$!
    sleep 0.5
    mosquitto_pub -h 127.0.0.1 -p 1883 -t sonde/test -m 'hello from sonde' -q 1 -i sonde-pub
    wait "$sub"
    cap_stop
}

rec_smtp() {
    make_cert || return 1
    cat >"$WORK/smtpd.py" <<'EOF'
import asyncio, ssl, sys
from aiosmtpd.controller import Controller

class Sink:
    async def handle_DATA(self, server, session, envelope):
        return "250 Message accepted for delivery"

ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
plain = Controller(Sink(), hostname="127.0.0.1", port=25, server_hostname="mail.example.test")
tls = Controller(Sink(), hostname="127.0.0.1", port=587, server_hostname="mail.example.test",
                 tls_context=ctx)
plain.start()
tls.start()
try:
    asyncio.get_event_loop().run_until_complete(asyncio.Event().wait())
finally:
    plain.stop()
    tls.stop()
EOF
    spawn smtp $PY "$WORK/smtpd.py" "$WORK/cert.pem" "$WORK/key.pem"
    wait_listen tcp 25 || return 1
    wait_listen tcp 587 || return 1
    local msg=(--from sender@example.test --to rcpt@example.test --helo client.example.test
        --header 'Subject: sonde loopback test' --body 'hello from the sonde loopback capture')
    cap_start smtp-swaks tcp port 25 || return 1
    swaks --server 127.0.0.1 --port 25 "${msg[@]}" >/dev/null
    cap_stop
    cap_start smtp-starttls-swaks tcp port 587 || return 1
    swaks --server 127.0.0.1 --port 587 --tls "${msg[@]}" >/dev/null
    cap_stop
}

rec_ftp() {
    mkdir -p "$WORK/ftp"
    printf 'hello from the sonde loopback capture\n' >"$WORK/ftp/hello.txt"
    spawn ftp $PY -m pyftpdlib -i 127.0.0.1 -p 21 -r 60000-60009 -d "$WORK/ftp"
    wait_listen tcp 21 || return 1
    cap_start ftp-curl tcp port 21 or tcp portrange 60000-60009 || return 1
    curl -sS -o /dev/null ftp://127.0.0.1/hello.txt
    curl -sS -o /dev/null --list-only ftp://127.0.0.1/
    cap_stop
}

rec_snmp() {
    printf 'rocommunity public 127.0.0.1\nsysLocation sonde loopback\n%s\n' \
        'sysContact nobody@example.test' \
        >"$WORK/snmpd.conf"
    spawn snmp snmpd -f -Lo -C -c "$WORK/snmpd.conf" -p "$WORK/snmpd.pid" udp:127.0.0.1:161
    wait_listen udp 161 || return 1
    cap_start snmp-snmpget udp port 161 || return 1
    snmpget -v2c -c public -On 127.0.0.1 1.3.6.1.2.1.1.1.0 1.3.6.1.2.1.1.6.0 >/dev/null
    snmpget -v1 -c public -On 127.0.0.1 1.3.6.1.2.1.1.5.0 >/dev/null
    cap_stop
}

rec_ntp() {
    cat >"$WORK/chrony.conf" <<EOF
port 123
bindaddress 127.0.0.1
allow 127.0.0.1
local stratum 8
cmdport 0
pidfile $WORK/chronyd.pid
driftfile $WORK/chrony.drift
EOF
    spawn ntp chronyd -d -x -f "$WORK/chrony.conf"
    wait_listen udp 123 || return 1
    cap_start ntp-ntpdate udp port 123 || return 1
    ntpdate -q 127.0.0.1 >/dev/null
    sleep 0.5
    ntpdate -q 127.0.0.1 >/dev/null
    cap_stop
}

rec_sip() {
    # Kamailio with Debian's default configuration (no database): it answers OPTIONS for itself
    # (200 Keepalive) and looks the user up for OPTIONS to a user (404, nobody registered).
    mkdir -p "$WORK/kamailio"
    spawn sip kamailio -DD -E -f /etc/kamailio/kamailio.cfg -l udp:127.0.0.1:5060 \
        -P "$WORK/kamailio/kamailio.pid" -Y "$WORK/kamailio" -m 32 -M 8
    wait_listen udp 5060 || return 1
    cap_start sip-sipsak udp port 5060 || return 1
    timeout 5 sipsak -s sip:127.0.0.1:5060 -H 127.0.0.1 >/dev/null 2>&1
    timeout 5 sipsak -s sip:sonde@127.0.0.1:5060 -H 127.0.0.1 >/dev/null 2>&1
    cap_stop
}

rec_syslog() {
    spawn syslog-udp socat -u UDP-RECV:514,bind=127.0.0.1 OPEN:/dev/null
    spawn syslog-tcp socat -u TCP-LISTEN:514,bind=127.0.0.1,reuseaddr,fork OPEN:/dev/null
    wait_listen udp 514 || return 1
    wait_listen tcp 514 || return 1
    cap_start syslog-udp-logger udp port 514 || return 1
    logger --server 127.0.0.1 --port 514 --udp --rfc3164 -t sonde -p user.notice \
        'hello from the sonde loopback capture'
    logger --server 127.0.0.1 --port 514 --udp --rfc5424 -t sonde -p daemon.warning \
        'second message'
    cap_stop
    cap_start syslog-tcp-logger tcp port 514 || return 1
    logger --server 127.0.0.1 --port 514 --tcp --rfc5424 -t sonde -p user.notice \
        'hello from the sonde loopback capture'
    cap_stop
}

rec_tftp() {
    mkdir -p "$WORK/tftp"
    printf 'hello from the sonde loopback capture\n' >"$WORK/tftp/hello.txt"
    chmod -R a+rX "$WORK/tftp"
    spawn tftp in.tftpd --foreground --address 127.0.0.1:69 --port-range 60100:60109 \
        --user root --secure "$WORK/tftp"
    wait_listen udp 69 || return 1
    cap_start tftp-tftp-hpa udp port 69 or udp portrange 60100-60109 || return 1
    (cd "$WORK" && tftp 127.0.0.1 69 -c get hello.txt "$WORK/tftp-got.txt")
    cap_stop
}

rec_radius() {
    # Debian's default configuration: client localhost, secret testing123. No user "sonde":
    # the request is rejected, which is still RADIUS both ways.
    spawn radius freeradius -f -l stdout
    wait_listen udp 1812 || return 1
    cap_start radius-radtest udp port 1812 or udp port 1813 || return 1
    radtest sonde secretpw 127.0.0.1 0 testing123 >/dev/null 2>&1
    cap_stop
}

rec_ldap() {
    # slapd with Debian's configuration from the package (debconf); the client reads the root
    # DSE, which answers anonymous searches.
    spawn ldap slapd -d 0 -h ldap://127.0.0.1:389/ -u openldap -g openldap
    wait_listen tcp 389 || return 1
    cap_start ldap-ldapsearch tcp port 389 || return 1
    ldapsearch -x -H ldap://127.0.0.1:389/ -b '' -s base '(objectClass=*)' namingContexts >/dev/null
    ldapsearch -x -H ldap://127.0.0.1:389/ -b 'dc=example,dc=test' '(uid=sonde)' >/dev/null
    cap_stop
}

rec_kerberos() {
    # A realm of its own (EXAMPLE.TEST) with a user and a service; kinit gets a ticket-granting
    # ticket (AS exchange, with the pre-authentication round), kvno a service ticket (TGS).
    # Once over UDP (the client's default) and once over TCP (udp_preference_limit = 1).
    local k="$WORK/krb5" t
    mkdir -p "$k"
    for t in udp tcp; do
        {
            printf '[libdefaults]\n    default_realm = EXAMPLE.TEST\n'
            printf '    dns_lookup_kdc = false\n    dns_lookup_realm = false\n'
            [ "$t" = tcp ] && printf '    udp_preference_limit = 1\n'
            printf '[realms]\n    EXAMPLE.TEST = {\n        kdc = 127.0.0.1:88\n    }\n'
        } >"$k/krb5-$t.conf"
    done
    cat >"$k/kdc.conf" <<EOF
[kdcdefaults]
    kdc_listen = 127.0.0.1:88
    kdc_tcp_listen = 127.0.0.1:88
[realms]
    EXAMPLE.TEST = {
        database_name = $k/principal
        key_stash_file = $k/stash
        acl_file = $k/kadm5.acl
    }
EOF
    export KRB5_CONFIG="$k/krb5-udp.conf" KRB5_KDC_PROFILE="$k/kdc.conf"
    kdb5_util create -s -r EXAMPLE.TEST -P masterpw >/dev/null 2>&1 || return 1
    kadmin.local -r EXAMPLE.TEST -q "addprinc -pw alicepw alice" >/dev/null 2>&1 || return 1
    kadmin.local -r EXAMPLE.TEST -q "addprinc -randkey host/$HOST" >/dev/null 2>&1 || return 1
    spawn kerberos krb5kdc -n -r EXAMPLE.TEST
    wait_listen udp 88 || return 1
    wait_listen tcp 88 || return 1
    for t in udp tcp; do
        export KRB5_CONFIG="$k/krb5-$t.conf" KRB5CCNAME="FILE:$k/ccache-$t"
        cap_start "kerberos-$t-kinit" "$t" port 88 || return 1
        echo alicepw | kinit alice@EXAMPLE.TEST >/dev/null
        kvno "host/$HOST@EXAMPLE.TEST" >/dev/null
        cap_stop
        klist -s || return 1
    done
    unset KRB5_CONFIG KRB5_KDC_PROFILE KRB5CCNAME
}

rec_irc() {
    cat >"$WORK/ngircd.conf" <<EOF
[Global]
    Name = irc.example.test
    Info = sonde loopback IRC server
    Listen = 127.0.0.1
    Ports = 6667
[Limits]
    PingTimeout = 120
[Options]
    PAM = no
    Ident = no
    DNS = no
EOF
    spawn irc ngircd -n -f "$WORK/ngircd.conf"
    wait_listen tcp 6667 || return 1
    cat >"$WORK/ircclient.py" <<'EOF'
import socket, time
s = socket.create_connection(("127.0.0.1", 6667), timeout=5)
def send(line):
    s.sendall(line.encode() + b"\r\n")
def read_until(token):
    buf = b""
    deadline = time.time() + 5
    while token not in buf and time.time() < deadline:
        buf += s.recv(4096)
    return buf
send("NICK sonde")
send("USER sonde 0 * :sonde loopback test")
read_until(b" 376 ")       # end of MOTD
send("JOIN #sonde")
read_until(b" 366 ")       # end of NAMES
send("PRIVMSG #sonde :hello from the sonde loopback capture")
send("QUIT :bye")
read_until(b"ERROR")
s.close()
EOF
    cap_start irc-python tcp port 6667 || return 1
    $PY "$WORK/ircclient.py"
    cap_stop
}

rec_http2() {
    cat >"$WORK/h2app.py" <<'EOF'
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b"hello from the sonde loopback capture\n"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
EOF
    # hypercorn imports the app from its working directory, $WORK
    spawn http2 $PY -m hypercorn --bind 127.0.0.1:8080 --workers 1 h2app:app
    wait_listen tcp 8080 || return 1
    cap_start http2-curl tcp port 8080 || return 1
    local h2=(curl -sS -o /dev/null --http2-prior-knowledge --resolve "$HOST:8080:127.0.0.1")
    "${h2[@]}" "http://$HOST:8080/"
    "${h2[@]}" "http://$HOST:8080/two"
    cap_stop
}

rec_smb() {
    mkdir -p "$WORK/smb/share" "$WORK/smb/state" "$WORK/smb/priv"
    cat >"$WORK/smb/smb.conf" <<EOF
[global]
    workgroup = SONDE
    netbios name = SONDETEST
    server role = standalone server
    interfaces = 127.0.0.1
    bind interfaces only = yes
    smb ports = 445
    disable netbios = yes
    map to guest = Bad User
    lock directory = $WORK/smb/state
    state directory = $WORK/smb/state
    cache directory = $WORK/smb/state
    private dir = $WORK/smb/priv
    pid directory = $WORK/smb/state
    ncalrpc dir = $WORK/smb/state/ncalrpc
    log file = $WORK/smb/log.%m
    load printers = no
    printcap name = /dev/null
[share]
    path = $WORK/smb/share
    guest ok = yes
    read only = yes
EOF
    # its own session: smbd signals its process group when it stops
    spawn smb setsid smbd --foreground --no-process-group --debug-stdout -s "$WORK/smb/smb.conf"
    wait_listen tcp 445 || return 1
    cap_start smb-smbclient tcp port 445 || return 1
    smbclient -s "$WORK/smb/smb.conf" -N -L //127.0.0.1 >/dev/null 2>&1
    smbclient -s "$WORK/smb/smb.conf" -N //127.0.0.1/share -c ls >/dev/null 2>&1
    cap_stop
    # smbd started samba-dcerpcd (and its rpcd_* workers) on demand; it is not smbd's child
    stop_servers
    local pid
    pid=$(cat "$WORK/smb/state/samba-dcerpcd.pid" 2>/dev/null)
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    return 0
}

rec_redis() {
    spawn redis redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$WORK"
    wait_listen tcp 6379 || return 1
    cap_start redis-redis-cli tcp port 6379 || return 1
    redis-cli -h 127.0.0.1 -p 6379 SET sonde:test 'hello from sonde' >/dev/null
    redis-cli -h 127.0.0.1 -p 6379 GET sonde:test >/dev/null
    cap_stop
}

rec_mysql() {
    mkdir -p "$WORK/mysql"
    mariadb-install-db --user=root --datadir="$WORK/mysql" \
        --auth-root-authentication-method=normal \
        >/dev/null 2>&1 || return 1
    spawn mysql mariadbd --no-defaults --user=root --datadir="$WORK/mysql" \
        --socket="$WORK/mysql.sock" --pid-file="$WORK/mysql.pid" --port=3306 \
        --bind-address=127.0.0.1 --skip-ssl --skip-log-bin
    wait_listen tcp 3306 || return 1
    cap_start mysql-mariadb tcp port 3306 || return 1
    mariadb --no-defaults -h 127.0.0.1 -P 3306 -u root -e 'SELECT VERSION(); SELECT 1+1;' >/dev/null
    cap_stop
}

rec_postgres() {
    mkdir -p "$WORK/pg"
    chown postgres:postgres "$WORK/pg"
    local bin=/usr/lib/postgresql/15/bin
    su postgres -s /bin/sh -c "$bin/initdb -D '$WORK/pg' -A trust -U postgres" >/dev/null 2>&1 ||
        return 1
    spawn postgres su postgres -s /bin/sh -c \
        "exec $bin/postgres -D '$WORK/pg' -h 127.0.0.1 -p 5432 -k '$WORK/pg'"
    wait_listen tcp 5432 || return 1
    cap_start postgres-psql tcp port 5432 || return 1
    psql -h 127.0.0.1 -p 5432 -U postgres -c 'SELECT version();' >/dev/null
    cap_stop
}

rec_openvpn() {
    # Point-to-point TLS mode on the "null" device: no tunnel interface, but the control channel
    # (TLS handshake inside OpenVPN's reliability layer) and the keepalive pings of the data
    # channel are the real thing. Both ends use the one self-signed certificate as their CA.
    make_cert || return 1
    local common=(--dev null --ca "$WORK/cert.pem" --cert "$WORK/cert.pem" --key "$WORK/key.pem"
        --ping 1 --verb 3 --data-ciphers AES-256-GCM)
    spawn openvpn-udp openvpn --proto udp4 --local 127.0.0.1 --lport 1194 --tls-server --dh none \
        "${common[@]}"
    wait_listen udp 1194 || return 1
    cap_start openvpn-udp-openvpn udp port 1194 || return 1
    timeout 5 openvpn --proto udp4 --remote 127.0.0.1 1194 --nobind --tls-client "${common[@]}" \
        >"$WORK/openvpn-udp-client.out" 2>&1
    cap_stop
    grep -q "Initialization Sequence Completed" "$WORK/openvpn-udp-client.out" || return 1
    spawn openvpn-tcp openvpn --proto tcp4-server --local 127.0.0.1 --lport 1194 --tls-server \
        --dh none "${common[@]}"
    wait_listen tcp 1194 || return 1
    cap_start openvpn-tcp-openvpn tcp port 1194 || return 1
    timeout 5 openvpn --proto tcp4-client --remote 127.0.0.1 1194 --tls-client "${common[@]}" \
        >"$WORK/openvpn-tcp-client.out" 2>&1
    cap_stop
    grep -q "Initialization Sequence Completed" "$WORK/openvpn-tcp-client.out" || return 1
}

rec_wireguard() {
    # Two userspace WireGuard interfaces (wireguard-go on /dev/net/tun) peered over 127.0.0.1.
    # Pings from sondewg0 to 10.77.0.2 (an address no interface has) make sondewg0 shake hands
    # with sondewg1 and send them encrypted; sondewg1 accepts and drops them (nothing answers).
    [ -c /dev/net/tun ] || return 1
    umask 077
    wg genkey >"$WORK/wg0.key"
    wg genkey >"$WORK/wg1.key"
    umask 022
    WG_PROCESS_FOREGROUND=1 spawn wg0 wireguard-go -f sondewg0
    WG_PROCESS_FOREGROUND=1 spawn wg1 wireguard-go -f sondewg1
    for _ in $(seq 50); do
        [ -S /var/run/wireguard/sondewg0.sock ] && [ -S /var/run/wireguard/sondewg1.sock ] && break
        sleep 0.1
    done
    wg set sondewg0 listen-port 51820 private-key "$WORK/wg0.key" \
        peer "$(wg pubkey <"$WORK/wg1.key")" endpoint 127.0.0.1:51821 \
        allowed-ips 10.77.0.0/24 || return 1
    wg set sondewg1 listen-port 51821 private-key "$WORK/wg1.key" \
        peer "$(wg pubkey <"$WORK/wg0.key")" endpoint 127.0.0.1:51820 \
        allowed-ips 10.77.0.1/32 || return 1
    ip addr add 10.77.0.1/24 dev sondewg0 || return 1
    ip link set sondewg0 up && ip link set sondewg1 up || return 1
    cap_start wireguard-wireguard-go udp port 51820 or udp port 51821 || return 1
    ping -c 3 -i 0.3 -W 1 10.77.0.2 >/dev/null
    cap_stop
}

ALL=(http tls dns ssh mqtt smtp ftp snmp ntp sip syslog tftp radius ldap kerberos irc http2 smb
    redis mysql postgres openvpn wireguard)
WANT=("$@")
[ "${#WANT[@]}" -eq 0 ] && WANT=("${ALL[@]}")

cd "$WORK" || exit 1
for proto in "${WANT[@]}"; do
    echo "record-dpi-loopback: $proto"
    touch "$WORK/.started"
    if ! "rec_$proto"; then
        FAILED+=("$proto")
        for f in "$WORK"/*.log; do
            [ "$f" -nt "$WORK/.started" ] && { echo "--- ${f##*/}"; tail -n 5 "$f"; }
        done >&2
        if [ -n "$TCPDUMP" ]; then
            kill -INT "$TCPDUMP" 2>/dev/null
            wait "$TCPDUMP" 2>/dev/null
            TCPDUMP=""
        fi
    fi
    stop_servers
done

for name in "${MADE[@]}"; do
    printf 'record-dpi-loopback: %-28s %6s packets %8s bytes\n' "$name.pcap" \
        "$(tcpdump -r "$OUT/$name.pcap" 2>/dev/null | wc -l)" "$(stat -c %s "$OUT/$name.pcap")"
done
if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "record-dpi-loopback: FAILED: ${FAILED[*]} (their servers' logs are above)" >&2
    exit 1
fi
