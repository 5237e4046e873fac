#!/usr/bin/env bash
# Host churn with history on disk (BENCHMARKS.md §20): sonde -r on a capture whose client
# addresses change every minute (scripts/churn-pcap.py), with --data-dir, against nfpcapd
# keeping the same flows on disk, on the same file in the same run.
#
#   scripts/bench-churn.sh [SONDE_BEFORE]     # SONDE_BEFORE: an older binary to compare
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-churn
mkdir -p "$out"
pcap=$out/churn.pcap
[ -f "$pcap" ] || python3 scripts/churn-pcap.py "$pcap"
sonde=target/release/sonde
before=${1:-}
row() { # name, command...
  local name=$1; shift
  rm -rf "$out/d"; mkdir -p "$out/d"
  /usr/bin/time -f "%e %M" -o "$out/time" "$@" > /dev/null 2> "$out/stderr" || { cat "$out/stderr"; exit 1; }
  read -r wall rss < "$out/time"
  local cols="" series=""
  if [ -f "$out/st.json" ] && [ -d "$out/d/series" ]; then
    cols=$(python3 -c "import json; s=json.load(open('$out/st.json'))['series']; print(s.get('host_columns', '-'), s['refused_keys'])")
    series=$(du -sm "$out/d/series" | cut -f1)
  fi
  printf '| %s | %.2f | %d | %s | %s | %s MB |\n' "$name" "$wall" $((rss / 1024)) "${cols% *}" "${cols#* }" "$(du -sm "$out/d" | cut -f1)"
  rm -f "$out/st.json"
}
echo "| run | wall (s) | max RSS (MiB) | host series columns | refused keys | on disk |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
row "nfpcapd -r (flows on disk)" nfpcapd -r "$pcap" -w "$out/d"
if [ -n "$before" ]; then
  row "sonde before, --data-dir" "$before" -r "$pcap" -q --data-dir "$out/d" --stats-json "$out/st.json"
fi
row "sonde, --data-dir" "$sonde" -r "$pcap" -q --data-dir "$out/d" --stats-json "$out/st.json"
row "sonde, --data-dir --series-reuse-after 0" "$sonde" -r "$pcap" -q --data-dir "$out/d" --series-reuse-after 0 --stats-json "$out/st.json"
row "sonde, no output" "$sonde" -r "$pcap" -q
