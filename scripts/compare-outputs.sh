#!/usr/bin/env bash
# Byte-for-byte comparison of two sonde builds' outputs on every pcap of the corpus: for a change
# that must not change what sonde writes (a speed or memory change).
#
#   scripts/compare-outputs.sh OLD_SONDE [NEW_SONDE]   # NEW_SONDE: default target/release/sonde
#
# Each pcap (*.pcap and *.pcapng under $CORPUS, default ../shared/corpus: not nDPI's expected
# results, *.pcap.out) is read by both builds: JSON and CSV flows, plain and with GeoIP
# ($GEOIP_DIR, default geoip/node_modules/@ip-location-db, when present) and local networks, and
# JSON with --dpi ndpi; every run also writes --hosts-out, compared too. Prints each difference
# and a count; exits 1 when anything differs.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: scripts/compare-outputs.sh OLD_SONDE [NEW_SONDE]}
NEW=${2:-target/release/sonde}
CORPUS=${CORPUS:-../shared/corpus}
GEOIP_DIR=${GEOIP_DIR:-geoip/node_modules/@ip-location-db}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
variants=("")
if [ -d "$GEOIP_DIR" ]; then
    variants+=("--geoip-dir $GEOIP_DIR --local-networks 10.0.0.0/8,192.168.0.0/16,fd00::/8")
else
    variants+=("--local-networks 10.0.0.0/8,192.168.0.0/16,fd00::/8")
fi
variants+=("--dpi ndpi")
runs=0 differ=0 empty=0
while IFS= read -r f; do
    for extra in "${variants[@]}"; do
        for fmt in json csv; do
            [ "$extra" = "--dpi ndpi" ] && [ $fmt = csv ] && continue
            for b in old new; do
                bin=$OLD
                [ $b = new ] && bin=$NEW
                # shellcheck disable=SC2086 # $extra is a list of flags
                "$bin" -r "$f" -q --flows-out "$OUT/$b.$fmt" --flows-format $fmt \
                    --hosts-out "$OUT/$b.hosts" $extra >/dev/null 2>&1
            done
            runs=$((runs + 1))
            [ -s "$OUT/new.$fmt" ] || empty=$((empty + 1))
            cmp -s "$OUT/old.$fmt" "$OUT/new.$fmt" ||
                { differ=$((differ + 1)); echo "differs: $f flows $fmt $extra"; }
            cmp -s "$OUT/old.hosts" "$OUT/new.hosts" ||
                { differ=$((differ + 1)); echo "differs: $f hosts $fmt $extra"; }
        done
    done
done < <(find "$CORPUS" \( -name '*.pcap' -o -name '*.pcapng' \) | sort)
echo "$runs runs (flows and hosts files each), $differ differ, $empty with no flow output"
[ "$differ" -eq 0 ]
