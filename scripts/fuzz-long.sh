#!/usr/bin/env bash
# A longer fuzz session than CI's smoke run: every target for FUZZ_SECONDS (default 300), the
# grown corpora and any crash inputs kept under target/fuzz-work/ so the next session starts
# where this one stopped. Same environment variables as scripts/fuzz-smoke.sh, e.g.
#   FUZZ_SECONDS=60 FUZZ_TARGETS="detectors dispatch" scripts/fuzz-long.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS=${FUZZ_SECONDS:-300}
export FUZZ_WORK=${FUZZ_WORK:-$PWD/target/fuzz-work}
exec scripts/fuzz-smoke.sh "$@"
