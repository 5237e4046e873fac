#!/usr/bin/env bash
# Installs what building and running sonde needs on Debian/Ubuntu: a C toolchain, libpcap's
# headers (live capture, BPF filters), libndpi (the --dpi ndpi backend) and libzmq (JSON flows
# over ZMQ), and checks for a Rust toolchain. Idempotent: apt-get runs only when something is
# missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -E"; fi

missing=()
[ -e /usr/include/pcap/pcap.h ] || missing+=(libpcap-dev)
[ -e /usr/include/ndpi/ndpi_api.h ] || missing+=(libndpi-dev)
[ -e /usr/include/zmq.h ] || missing+=(libzmq3-dev)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v make >/dev/null 2>&1 || missing+=(make)
# The web console is built with npm (make console checks that Node is 20.19 or later).
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        echo "setup: cargo is in ~/.cargo/bin; add it to PATH: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
    else
        echo "setup: no Rust toolchain; install one with rustup (https://rustup.rs), then re-run" >&2
    fi
    exit 1
fi
