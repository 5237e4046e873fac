#!/usr/bin/env bash
# Fetches nDPI 4.2's own test captures and expected results from Debian's source package
# (ndpi_4.2.orig.tar.gz, the release Debian's libndpi 4.2 is built from), for the second DPI
# accuracy set of tests/system/test_dpi_accuracy.py. Idempotent: does nothing when the set is
# already there.
#
#   DEST (default .cache/ndpi-4.2 in the repository)
#     pcap/      nDPI's tests/pcap (captures)
#     result/    nDPI's tests/result (ndpiReader's output for each capture: the expected labels)
#     COPYING    nDPI's licence (LGPL-3.0); the captures come with nDPI's source under it
#
# Usage: scripts/fetch-ndpi-tests.sh [DEST]
set -euo pipefail

cd "$(dirname "$0")/.."
DEST="${1:-.cache/ndpi-4.2}"
URL="http://deb.debian.org/debian/pool/main/n/ndpi/ndpi_4.2.orig.tar.gz"
SHA256="e54ce8fe13adc5d747be7553513657fae78f796e0bd459e122c280cc06ce4daf"

if [ -f "$DEST/.complete" ]; then
    exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-ndpi-tests: downloading $URL (126 MB)" >&2
curl -fsSL --retry 3 -o "$tmp/ndpi.tar.gz" "$URL"
echo "$SHA256  $tmp/ndpi.tar.gz" | sha256sum -c --quiet - || {
    echo "fetch-ndpi-tests: $URL does not have the expected SHA-256 $SHA256" >&2
    exit 1
}
tar -xzf "$tmp/ndpi.tar.gz" -C "$tmp" nDPI-4.2/tests/pcap nDPI-4.2/tests/result nDPI-4.2/COPYING
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp/nDPI-4.2/tests/pcap" "$tmp/nDPI-4.2/tests/result" "$tmp/nDPI-4.2/COPYING" "$DEST/"
touch "$DEST/.complete"
echo "fetch-ndpi-tests: $(ls "$DEST/pcap" | wc -l) captures in $DEST" >&2
