#!/usr/bin/env bash
# Builds every cargo-fuzz target (crates/dpi/fuzz: `detectors`, every DPI detector alone, the
# first input byte picking it, and `dispatch`, the whole DPI engine;
# crates/analytics/fuzz: `filter_expr` and `bpf`; crates/wire/fuzz: `decode`;
# crates/flowproto/fuzz: `collect`; crates/capture/fuzz: `pcap_file`; crates/export/fuzz:
# `zmq_json` and `ntopng_zmq`; crates/history/fuzz: `filter_text`; crates/sonde/fuzz:
# `config_file`; crates/scripts/fuzz: `lua`) and runs each for a few seconds from its seed corpus. Exits
# non-zero when a target crashes (panic, sanitizer report, timeout, out of memory) and prints
# per target the executions done (libFuzzer's final "Done N runs" line).
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 10)
#   FUZZ_MAX_LEN   libFuzzer -max_len (default 4096)
#   FUZZ_JOBS      targets fuzzed at the same time (default: CPU count)
#   FUZZ_TARGETS   space-separated subset of targets (default: all)
#   FUZZ_WORK      directory for the grown corpora and logs (default: a temporary one, removed
#                  at the end; scripts/fuzz-long.sh keeps one under target/fuzz-work)
#   FUZZ_ARGS      extra libFuzzer arguments
#
# Needs the nightly toolchain (installed with rustup when missing) and cargo-fuzz (installed
# with `cargo install cargo-fuzz --locked` when missing). The committed seed corpora under
# crates/*/fuzz/corpus are only read; new inputs go to FUZZ_WORK, which starts from the grown
# corpora of earlier long runs (tests/fuzz-corpora/TARGET.tar.xz) when it has none.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"

SECONDS_PER_TARGET=${FUZZ_SECONDS:-10}
MAX_LEN=${FUZZ_MAX_LEN:-4096}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
PROJECTS=(crates/dpi crates/wire crates/flowproto crates/analytics crates/capture crates/export
    crates/history crates/sonde crates/scripts)
# One target directory for both fuzz projects, so libFuzzer itself is compiled once.
TARGET_DIR=$ROOT/target/fuzz

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
HOST=$(rustc +nightly -vV | sed -n 's/^host: //p')

# Release build with debug assertions (so integer overflow panics too) and AddressSanitizer.
declare -A BIN SEEDS
ALL=()
fuzz_build() {
    (cd "$1" && cargo +nightly fuzz build --debug-assertions --target-dir "$TARGET_DIR")
}
for proj in "${PROJECTS[@]}"; do
    echo "fuzz: building $proj/fuzz"
    if ! fuzz_build "$proj"; then
        # Seen once in CI: a C compile inside a dependency's build script failed with no
        # reason in the part of the log kept. Say what the machine had left, then try once
        # more one job at a time (less memory) before giving up.
        echo "fuzz: building $proj/fuzz failed; disk and memory now:"
        df -h . "${TMPDIR:-/tmp}" || true
        free -m || true
        echo "fuzz: building $proj/fuzz again with one job"
        CARGO_BUILD_JOBS=1 fuzz_build "$proj"
    fi
    for t in $(cd "$proj" && cargo +nightly fuzz list); do
        BIN[$t]=$TARGET_DIR/$HOST/release/$t
        SEEDS[$t]=$ROOT/$proj/fuzz/corpus/$t
        ALL+=("$t")
    done
done

TARGETS=(${FUZZ_TARGETS:-${ALL[@]}})
if [[ -n "${FUZZ_WORK:-}" ]]; then
    WORK=$FUZZ_WORK
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/sonde-fuzz.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi

# Runs one target; its log goes to $WORK/<target>.log, its exit status to $WORK/<target>.rc.
fuzz_one() {
    local t=$1 bin=${BIN[$1]:-} rc=0
    if [[ -z "$bin" ]]; then
        echo "fuzz: no target named $t" >"$WORK/$t.log"
        echo 2 >"$WORK/$t.rc"
        return
    fi
    mkdir -p "$WORK/corpus/$t" "$WORK/artifacts"
    # The corpus the long runs grew (tests/FUZZING.md), when this work directory has none yet.
    local grown=$ROOT/tests/fuzz-corpora/$t.tar.xz
    if [[ -f "$grown" && -z "$(ls -A "$WORK/corpus/$t")" ]]; then
        tar -xJf "$grown" -C "$WORK/corpus"
    fi
    # -timeout: one input taking this long is a hang; -rss_limit_mb: libFuzzer's default.
    "$bin" -max_total_time="$SECONDS_PER_TARGET" -max_len="$MAX_LEN" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$WORK/artifacts/$t-" ${FUZZ_ARGS:-} \
        "$WORK/corpus/$t" "${SEEDS[$t]}" >"$WORK/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$WORK/$t.rc"
}

echo "fuzz: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET}s each, $JOBS at a time, -max_len=$MAX_LEN"
running=0
for t in "${TARGETS[@]}"; do
    if ((running >= JOBS)); then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait || true

failed=()
printf '%-12s %12s %8s  %s\n' target executions exec/s result
for t in "${TARGETS[@]}"; do
    rc=$(cat "$WORK/$t.rc" 2>/dev/null || echo '?')
    execs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$WORK/$t.log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$WORK/$t.log" | tail -1)
    if [[ -z "$execs" ]]; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t.log" | tail -1)
    fi
    result=ok
    if [[ "$rc" != 0 ]]; then
        result="FAILED (exit $rc)"
        failed+=("$t")
    fi
    printf '%-12s %12s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
done

for t in "${failed[@]}"; do
    echo
    echo "==== $t: end of the libFuzzer log ===="
    grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' "$WORK/$t.log" | tail -40
    for a in "$WORK/artifacts/$t-"*; do
        [[ -f "$a" ]] || continue
        echo "---- reproducer $(basename "$a") ($(wc -c <"$a") bytes), hex:"
        od -An -tx1 -v "$a" | tr -d ' \n' | fold -w 128
        echo
        if [[ -z "${FUZZ_WORK:-}" ]]; then
            mkdir -p "$ROOT/target/fuzz-artifacts"
            cp "$a" "$ROOT/target/fuzz-artifacts/"
            echo "(kept as target/fuzz-artifacts/$(basename "$a"); replay with: $TARGET_DIR/$HOST/release/$t target/fuzz-artifacts/$(basename "$a"))"
        fi
    done
done

if ((${#failed[@]})); then
    echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
    exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran without a crash"
