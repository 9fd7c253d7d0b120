# Strata: build, lint and test.
#
#   make test         everything (what CI runs through .ci/run; the order is at `test:`)
#   make deps         apt packages (if missing) + Python venv (if requirements changed)
#                     + compat/node's npm packages (if package-lock.json changed)
#                     + compat/java's jars (if pom.xml changed)
#   make build        test-bin, release-bin and compat-bin
#   make test-bin     target/release/strata-test: the release build with the test
#                     hooks (cargo feature test-hooks), which the test suites run
#   make release-bin  cargo build --release (target/release/strata, production)
#   make compat-bin   compat/rust's test client (target/compat-rust)
#   make lint         cargo fmt --check + cargo clippy -D warnings
#   make msrv         cargo check with Cargo.toml's rust-version toolchain (rustup
#                     installs it if missing), the lock file as it is
#   make deb          target/debian/strata_<version>_amd64.deb (scripts/build-deb.sh)
#   make package      builds the .deb, installs it, serves from it, purges it
#   make unit         cargo test --release --workspace --tests
#   make pytest       the Python suites: tests/wire, tests/tool (strata-bench) and compat
#   make bench        every bench/scenarios/*.toml side by side (strata, memcached, redis)
#   make bench-venv   .venv-bench: libcachesim for bench/policies.py (requirements-bench.txt)
#   make wire|compat  one of them
#   make wire-epoll   the wire suite with the workers on epoll (-o io=epoll)
#   make memccapable  libmemcached's memccapable protocol checker
#   make capacity     1M small items into -m 64
#   make concurrency  64 connections of mixed verified load (CONCURRENCY_SECS=20)
#   make miri         the store's unit tests under Miri (Stacked Borrows;
#                     MIRI_MODELS="stacked tree" adds Tree Borrows); installs the
#                     nightly toolchain's miri component if missing
#   make fuzz         cargo-fuzz on FUZZ_TARGET (binary_decoder, text_parser,
#                     meta_parser or udp_header) for FUZZ_SECS, from its kept
#                     corpus (nightly; not in `test`); `make fuzz-all` runs the
#                     four in turn
#
# WIRE_TARGET=memcached runs the server-facing stages against Debian's
# memcached instead of target/release/strata-test (and skips the cargo build).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO ?= cargo
# Where the release binaries land (CARGO_TARGET_DIR is honoured); the
# suites and scripts find them through these variables.
BIN_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))/release
export STRATA_BIN := $(BIN_DIR)/strata-test
export STRATA_PROD_BIN := $(BIN_DIR)/strata
export STRATA_BENCH_BIN := $(BIN_DIR)/strata-bench
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
PYTEST_FLAGS ?= -q --timeout=300 --durations=15
# The server-facing suites run in PYTEST_WORKERS processes (pytest-xdist):
# a test mostly waits on a server, so three keep two cores busy (the
# default pass: 197 s in one process, 99 s in three). tests/harness.py
# gives each worker its own ports. PYTEST_WORKERS=0 runs them in one.
PYTEST_WORKERS ?= 3
PYTEST_PAR := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS))
REQUIREMENTS := requirements-test.txt
REQ_STAMP := $(VENV)/.requirements-test.installed
APT_PACKAGES := memcached openssl dpkg-dev binutils libmemcached-tools redis-server nodejs npm sasl2-bin prometheus systemd nutcracker libmemcached-dev zlib1g-dev libzstd-dev pkg-config php-cli php-memcached default-jdk-headless maven
NODE_DIR := compat/node
NODE_LOCK := $(NODE_DIR)/package-lock.json
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
JAVA_DIR := compat/java
JAVA_STAMP := $(JAVA_DIR)/lib/.installed
CONCURRENCY_SECS ?= 20
FUZZ_SECS ?= 300
FUZZ_TARGET ?= binary_decoder
FUZZ_TARGETS := binary_decoder text_parser meta_parser udp_header
WIRE_DIR := $(wildcard tests/wire)

# Server-facing stages need the release binaries (the test build and the
# production one), unless they run against memcached.
SERVER_DEPS := deps $(if $(filter memcached,$(WIRE_TARGET)),,build)

.PHONY: msrv deb package bench bench-venv test deps apt venv node java build test-bin release-bin compat-bin lint fmt clippy unit pytest wire wire-epoll wire-flash compat compat-memcached \
        memccapable capacity concurrency clean-venv fuzz fuzz-all fuzz-check miri miri-setup miri-build msrv-setup

# Stages in order, but for one group run side by side: the production
# build spends most of its time in its single-threaded fat-LTO link, which
# leaves a core to the test client's build, the MSRV check, the fuzz check
# and Miri's build (each in its own target directory; cargo shares make's
# job slots: their cargo lines start with `+`, which also means that
# `make -n` runs them).
# Their output comes out whole, a stage at a time (--output-sync). The
# toolchains they need are installed first, one at a time (rustup).
# Tried: every CPU-bound stage in one make -j3 graph (Miri beside cargo
# test): no faster on a fresh clone (17:06 against 17:12, both cores full
# either way), and cargo test's timed tests then ran beside two Miri
# processes: a snapshot whose hand-off waits 50 ms failed once. Also
# tried: Miri at nice 19 in the background beside every later stage (the
# server-facing stages leave 29% of two cores idle): slower on a fresh
# clone (1,501 s against 1,467): niced, Miri got little CPU until the last
# stage and then ran alone, while the stages beside it slowed (the crash
# simulator 122 s against 90-106, the default pytest pass 144 s against
# 111: wake-up latency and caches). And a session of its own (setsid) is
# a scheduling group of its own with autogroups on, which nice does not
# reach.
SIDE_BY_SIDE := release-bin compat-bin msrv fuzz-check miri-build
LATER_STAGES := fmt clippy unit miri package pytest wire-epoll wire-flash compat-memcached memccapable capacity concurrency
test: deps
	@$(MAKE) --no-print-directory test-bin msrv-setup miri-setup
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(SIDE_BY_SIDE)
	@$(MAKE) --no-print-directory $(LATER_STAGES)
	@echo "==> [$$(date -u +%T)] make test: all stages passed"

deps: apt venv node java

apt:
	@missing=""; \
	provided=$$(dpkg-query -W -f='$${Status}|$${Provides}\n' 2>/dev/null | sed -n 's/^[^|]* ok installed|//p'); \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q "ok installed" \
	    || grep -qE "(^|[ ,])$$p([ ,(]|$$)" <<<"$$provided" \
	    || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "==> [$$(date -u +%T)] apt-get install$$missing"; \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(VPY):
	$(PYTHON) -m venv $(VENV)

venv: $(VPY)
	@if ! cmp -s $(REQUIREMENTS) $(REQ_STAMP); then \
	  echo "==> [$$(date -u +%T)] pip install -r $(REQUIREMENTS)"; \
	  $(VPY) -m pip install -q --disable-pip-version-check -r $(REQUIREMENTS); \
	  cp $(REQUIREMENTS) $(REQ_STAMP); \
	fi

# memjs for compat/test_memjs.py; npm ci again whenever the lock file changes.
node:
	@if [ $(NODE_LOCK) -nt $(NODE_STAMP) ]; then \
	  echo "==> [$$(date -u +%T)] npm ci --prefix $(NODE_DIR)"; \
	  npm ci --prefix $(NODE_DIR) --no-audit --no-fund; \
	  touch $(NODE_STAMP); \
	fi

# spymemcached and xmemcached for compat/test_java_clients.py, copied from
# Maven Central into compat/java/lib whenever compat/java/pom.xml changes.
java:
	@if [ $(JAVA_DIR)/pom.xml -nt $(JAVA_STAMP) ]; then \
	  echo "==> [$$(date -u +%T)] mvn dependency:copy-dependencies ($(JAVA_DIR))"; \
	  rm -rf $(JAVA_DIR)/lib; \
	  mvn -q -B -Dstyle.color=never -f $(JAVA_DIR)/pom.xml dependency:copy-dependencies; \
	  touch $(JAVA_STAMP); \
	fi

# The binary the wire, compat and flash suites run (tests/harness.py): the
# release build with the test hooks (hidden flags and commands; the cargo
# feature test-hooks, docs/design.md "Test hooks"), copied to its own path
# in target/release.
# $(BIN_DIR)/strata is the production build once release-bin has run
# after it (`make build` runs both; both builds are kept, so putting one
# back costs nothing once built). The two share every dependency's
# artifacts (both build the whole workspace: with -p strata alone, cargo
# would unify the dependencies' features differently and build them, and
# all that uses them, a third time); only the crates with hooks, persist
# and the final link are built twice.
TEST_BIN := $(BIN_DIR)/strata-test
test-bin:
	@echo "==> [$$(date -u +%T)] cargo build --release --features strata/test-hooks (-> $(TEST_BIN))"
	+$(CARGO) build --release --features strata/test-hooks
	cp -f $(BIN_DIR)/strata $(TEST_BIN)

release-bin:
	@echo "==> [$$(date -u +%T)] cargo build --release"
	+$(CARGO) build --release

compat-bin:
	@echo "==> [$$(date -u +%T)] cargo build (compat/rust: the memcache crate's checks; a test client, unoptimised builds in half the time)"
	+CARGO_TARGET_DIR=target/compat-rust $(CARGO) build --locked --manifest-path compat/rust/Cargo.toml

build: test-bin release-bin compat-bin

lint: fmt clippy fuzz-check

fmt:
	@echo "==> [$$(date -u +%T)] cargo fmt --check"
	+$(CARGO) fmt --all -- --check

# Twice: every target with the test hooks on (the unit tests turn them on
# anyway), and the production build's code without them. In the builds'
# profile: the build scripts (zstd's C library, ring's) and proc macros
# those builds already ran and compiled serve again (on a fresh clone:
# 84 s without it, 47 s with it).
clippy:
	@echo "==> [$$(date -u +%T)] cargo clippy"
	+$(CARGO) clippy --release --workspace --all-targets --features strata/test-hooks -- -D warnings
	@echo "==> [$$(date -u +%T)] cargo clippy (production build: no test hooks)"
	+$(CARGO) clippy --release --workspace -- -D warnings

# The fuzz crate is outside the workspace; make sure it still type-checks
# (without compiling libFuzzer's C++, which only `make fuzz` links).
fuzz-check:
	@echo "==> [$$(date -u +%T)] cargo check fuzz"
	+$(CARGO) check --quiet --manifest-path fuzz/Cargo.toml --no-default-features

# The corpora in fuzz/corpus/<target> are kept in git (minimised with
# `cargo fuzz cmin`); text.dict gives the fuzzer the protocols' words.
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) +$(NIGHTLY) fuzz run $(FUZZ_TARGET) corpus/$(FUZZ_TARGET) -- \
	  -dict=text.dict -max_total_time=$(FUZZ_SECS)

fuzz-all:
	@for t in $(FUZZ_TARGETS); do $(MAKE) --no-print-directory fuzz FUZZ_TARGET=$$t || exit 1; done

# Cargo.toml's rust-version is a claim this checks: the workspace with
# every target, on that toolchain, with Cargo.lock as it is (a dependency
# update that needs a newer compiler fails here, not on a user's machine).
# Its own target directory: another toolchain's artifacts would displace
# the stable ones.
MSRV := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
# Builds that link nothing of zstd's (a type check, Miri, which calls no C)
# take the system's headers through pkg-config instead of compiling zstd's
# C library again: 66 s of one core each (libzstd-dev, make deps).
NO_ZSTD_C := ZSTD_SYS_USE_PKG_CONFIG=1
msrv-setup:
	@rustup toolchain list | grep -q "^$(MSRV)-" \
	  || rustup toolchain install $(MSRV) --profile minimal

msrv: msrv-setup
	@echo "==> [$$(date -u +%T)] cargo +$(MSRV) check --workspace --all-targets --locked"
	+$(NO_ZSTD_C) CARGO_TARGET_DIR=target/msrv $(CARGO) +$(MSRV) check --quiet --workspace --all-targets --locked

# The Debian package, from the production build alone (scripts/build-deb.sh;
# CARGO_TARGET_DIR is honoured, the .deb lands in its debian/).
deb: release-bin
	scripts/build-deb.sh

# The package installed for real (dpkg -i), started with its own
# configuration file as its own user, talked to, stopped, purged:
# tests/pkg/test_deb.py, which leaves the machine as it found it.
# `build` first: both builds, in the order that leaves target/release/strata
# the production one for the suites that run after (make deb alone builds
# only that one).
package: deps build deb
	@echo "==> [$$(date -u +%T)] pytest tests/pkg (the Debian package)"
	STRATA_PKG_TEST=1 $(PYTEST) $(PYTEST_FLAGS) tests/pkg

# --tests (lib, bins, integration tests): no doc-test pass (the crates have no doc tests;
# rustdoc would still compile each crate for none: ~25 s of a core).
unit:
	@echo "==> [$$(date -u +%T)] cargo test --release --workspace --tests"
	+$(CARGO) test --release --workspace --tests

# The store is where most unsafe code is (arena.rs and its callers); Miri runs its unit tests
# (sized for Miri, about a thousand times slower: tests that fill megabytes
# are skipped there, loops shortened) and checks every access for undefined
# behaviour and data races. `make test` runs Stacked Borrows;
# MIRI_MODELS="stacked tree" adds Tree Borrows. parking_lot's lock queue
# casts integers to pointers under contention, hence permissive provenance.
# Miri interprets a test binary on one core: the tests run as two processes
# at once, MIRI_HEAVY (the slowest, about half of the time) and every other
# one, so that both cores work (the times the harness prints are Miri's
# virtual clock, not the wall's). A name here that no longer exists only
# moves that test to the second process. Where a test spends its time
# under Miri: MIRIFLAGS="-Zmiri-report-progress=200000" prints its stack
# every 200,000 basic blocks (the test's own helpers were most of it once);
# `-- -Zunstable-options --report-time` after the test filter prints each
# test's time on that clock, which is how the two halves are balanced
# (2026-12-03: 189 s and 183 s, the stage 4 min where it had been 8).
NIGHTLY ?= nightly
MIRI_MODELS ?= stacked
MIRIFLAGS_stacked := -Zmiri-permissive-provenance
MIRIFLAGS_tree := -Zmiri-permissive-provenance -Zmiri-tree-borrows
MIRI_HEAVY := churn_tests::overwrite_churn_keeps_every_key_at_70_percent_live model_tests::never_wrong_with_eviction \
  model_tests::agrees_with_a_model_without_eviction churn_tests::nothing_live_is_evicted_while_a_segment_of_dead_bytes_is_left \
  churn_tests::size_bands_add_up_and_the_crawler_takes_only_expired_items image_tests::restored_images_read_back_with_their_cas_flags_and_times \
  cut_tests::segments_of_the_cut_freed_before_their_copy_are_handed_off image_tests::images_stay_whole_while_writers_evict \
  model_tests::threads_share_the_store
miri-setup:
	@rustup toolchain list | grep -q "^$(NIGHTLY)" \
	  || rustup toolchain install $(NIGHTLY) --profile minimal
	@rustup component list --toolchain $(NIGHTLY) --installed | grep -q "^miri" \
	  || rustup component add --toolchain $(NIGHTLY) miri rust-src
	+@$(CARGO) +$(NIGHTLY) miri setup >/dev/null

# The sysroot and the test binary for Miri (its own target directory):
# make test builds them beside the production build.
miri-build: miri-setup
	@echo "==> [$$(date -u +%T)] cargo miri test -p strata-store --no-run"
	+$(NO_ZSTD_C) MIRIFLAGS="$(MIRIFLAGS_stacked)" $(CARGO) +$(NIGHTLY) miri test -p strata-store --lib -q --no-run

miri: miri-build
	+@for m in $(MIRI_MODELS); do \
	  echo "==> [$$(date -u +%T)] cargo miri test -p strata-store ($$m borrows, two processes)"; \
	  case $$m in stacked) f="$(MIRIFLAGS_stacked)";; tree) f="$(MIRIFLAGS_tree)";; *) echo "unknown model $$m"; exit 2;; esac; \
	  $(NO_ZSTD_C) MIRIFLAGS="$$f" $(CARGO) +$(NIGHTLY) miri test -p strata-store --lib -q -- --exact $(MIRI_HEAVY) & pid=$$!; \
	  rest=0; $(NO_ZSTD_C) MIRIFLAGS="$$f" $(CARGO) +$(NIGHTLY) miri test -p strata-store --lib -q -- --exact \
	    $(addprefix --skip ,$(MIRI_HEAVY)) || rest=$$?; \
	  heavy=0; wait $$pid || heavy=$$?; \
	  [ $$heavy -eq 0 ] && [ $$rest -eq 0 ] || { echo "miri: failed (heavy $$heavy, rest $$rest)"; exit 1; }; \
	done

pytest: $(SERVER_DEPS)
	@echo "==> [$$(date -u +%T)] pytest $(WIRE_DIR) tests/tool compat"
	$(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) $(WIRE_DIR) tests/tool compat

wire: $(SERVER_DEPS)
	$(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) tests/wire

# The wire suite again with the workers on epoll (the default is io_uring
# where the kernel has it; tests/harness.py adds -o io=$$STRATA_IO). Tests
# marked one_event_loop (the store's, snapshots', Prometheus's: no event
# loop of their own) run in the default pass only.
wire-epoll: $(SERVER_DEPS)
	@if [ "$(WIRE_TARGET)" = memcached ]; then exit 0; fi; \
	echo "==> [$$(date -u +%T)] pytest tests/wire (STRATA_IO=epoll)"; \
	STRATA_IO=epoll $(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) tests/wire

# The wire and compat suites again over the flash tier: every server gets a
# flash file and writes every item to it at once (tests/harness.py), so
# reads come from flash; tests that depend on items staying in memory are
# marked not_over_flash and skipped, with the reason. Reads from flash
# park their connections until the I/O threads are done, which each event
# loop drives its own way: the wire suite runs over both.
wire-flash: $(SERVER_DEPS)
	@if [ "$(WIRE_TARGET)" = memcached ]; then exit 0; fi; \
	echo "==> [$$(date -u +%T)] pytest tests/wire compat (STRATA_FLASH=1)"; \
	STRATA_FLASH=1 $(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) tests/wire compat && \
	echo "==> [$$(date -u +%T)] pytest tests/wire (STRATA_FLASH=1 STRATA_IO=epoll)" && \
	STRATA_FLASH=1 STRATA_IO=epoll $(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) tests/wire

compat: $(SERVER_DEPS)
	$(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) compat

# The client-library suites against Debian's memcached too, so that each
# behaviour they assert is memcached's (make test; about a minute).
compat-memcached: $(SERVER_DEPS)
	@if [ "$(WIRE_TARGET)" = memcached ]; then exit 0; fi; \
	echo "==> [$$(date -u +%T)] pytest compat (WIRE_TARGET=memcached)"; \
	WIRE_TARGET=memcached $(PYTEST) $(PYTEST_FLAGS) $(PYTEST_PAR) compat

memccapable: $(SERVER_DEPS)
	@echo "==> [$$(date -u +%T)] memccapable"
	STRATA_BIN=$(STRATA_PROD_BIN) MEMCCAPABLE_BINARY=yes timeout 600 scripts/memccapable.sh

capacity: $(SERVER_DEPS)
	@echo "==> [$$(date -u +%T)] capacity"
	timeout 600 $(VPY) scripts/capacity.py

concurrency: $(SERVER_DEPS)
	@echo "==> [$$(date -u +%T)] concurrency"
	timeout 600 $(VPY) scripts/concurrency.py --secs $(CONCURRENCY_SECS)
	@echo "==> [$$(date -u +%T)] concurrency, compression on (small dictionaries, retrained as values change)"
	timeout 600 $(VPY) scripts/concurrency.py --secs $(CONCURRENCY_SECS) --expect-compressed --server-arg=-o \
	  --server-arg=compression=on,compression_dict_size=1k,compression_train_bytes=16k,compression_sample=1

# Benchmarks, not tests: minutes per scenario; results under BENCH_OUT.
BENCH_OUT ?= target/bench
BENCH_VENV := .venv-bench
BENCH_REQ_STAMP := $(BENCH_VENV)/.requirements-bench.installed
bench-venv:
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	@if ! cmp -s requirements-bench.txt $(BENCH_REQ_STAMP); then \
	  echo "==> [$$(date -u +%T)] pip install -r requirements-bench.txt ($(BENCH_VENV))"; \
	  $(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-bench.txt; \
	  cp requirements-bench.txt $(BENCH_REQ_STAMP); \
	fi

bench: deps build bench-venv
	@for f in bench/scenarios/*.toml; do \
	  echo "==> [$$(date -u +%T)] strata-bench scenario $$f"; \
	  $(STRATA_BENCH_BIN) scenario "$$f" --out $(BENCH_OUT); \
	done

clean-venv:
	rm -rf $(VENV)
