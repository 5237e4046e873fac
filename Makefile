# sonde: the two entry points are `make run` and `make test` (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
# The nDPI backend (--dpi ndpi) links Debian's libndpi, which scripts/setup.sh installs.
FEATURES ?= --features sonde/ndpi
SONDE := target/release/sonde
SAMPLE := samples/demo.pcap

.PHONY: setup console geoip screenshots build run test test-unit test-system bench bench-quick lint fmt fuzz-smoke fuzz-long

setup:
	scripts/setup.sh

# The web console (console/, TypeScript + Vite): built into console/dist, which the Rust build
# embeds, so it comes before every cargo build of sonde.
console:
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); if (a < 20 || (a === 20 && b < 19)) { console.error("make console: Vite 7 needs Node.js 20.19 or later, found " + process.version); process.exit(1); }'
	cd console && npm ci --no-audit --no-fund && npm run build

# Free GeoIP databases (countries: geo-whois-asn-country, CC0; AS numbers and names: RouteViews,
# NRO and DB-IP data, CC BY 4.0), pinned in geoip/package-lock.json, into
# geoip/node_modules/@ip-location-db: what `--geoip-dir` reads. ~80 MB unpacked.
GEOIP_DIR := geoip/node_modules/@ip-location-db
geoip:
	cd geoip && npm ci --no-audit --no-fund

build: setup console
	$(CARGO) build --release -p sonde $(FEATURES)

# The main job on the embedded default: sonde replays the bundled capture at its real pace,
# printing a stats line per second and every flow as JSON when it ends, and keeping history in
# ./sonde-data (the console's History page and traffic charts; it grows with each run).
run: build geoip
	$(SONDE) -r $(SAMPLE) --replay loop --stats-interval 1 --stats-json - --http 127.0.0.1:3000 --data-dir sonde-data --geoip-dir $(GEOIP_DIR) \
		--local-networks 10.0.0.0/8,fd00::/8

test: setup console geoip
	scripts/setup-test-deps.sh
	$(CARGO) build --release -p sonde $(FEATURES)
	@# A unit test that hangs fails here with its name (libtest prints it after 60 s) instead of
	@# using up CI's time; timeout signals cargo and the test binaries it started.
	timeout --kill-after=30 3000 $(CARGO) test --workspace $(FEATURES) || { rc=$$?; [ $$rc -ne 124 ] || echo "make test: cargo test ran past 3000 s (a hung test: see 'has been running for over 60 seconds' above)"; exit $$rc; }
	python3 -m pytest tests/system -q
	cd tests/browser && npm ci --no-audit --no-fund && node --test --test-concurrency=1

# The README's screenshots (docs/screenshots/), retaken by the browser tests that show those
# pages (needs what `make test` installs, and a built sonde).
screenshots: geoip
	cd tests/browser && npm ci --no-audit --no-fund && SONDE_DOC_SCREENSHOTS=1 node --test --test-concurrency=1 firstrun.test.js geo.test.js tcp.test.js localnet.test.js analytics.test.js

bench: setup
	scripts/setup-bench-deps.sh
	$(CARGO) build --release -p sonde -p sonde-bench $(FEATURES)
	target/release/sonde-bench --out bench-results.md

bench-quick: setup
	scripts/setup-bench-deps.sh
	$(CARGO) build --release -p sonde -p sonde-bench $(FEATURES)
	target/release/sonde-bench --quick --out bench-results-quick.md

# Clippy builds every crate, so it needs the C libraries (setup) and the console it embeds.
lint: setup console
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings

fmt:
	$(CARGO) fmt --all

# Every cargo-fuzz target (crates/*/fuzz, see tests/FUZZING.md), FUZZ_SECONDS each (default 10); needs
# the nightly toolchain, installs cargo-fuzz when missing.
fuzz-smoke:
	scripts/fuzz-smoke.sh

# The same, longer (FUZZ_SECONDS, default 300), keeping the corpora under target/fuzz-work.
fuzz-long:
	scripts/fuzz-long.sh
