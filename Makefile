# Purser's two commands are `make run` and `make test`; each does its own set-up.
#
#   make run      set-up, Release build, then the demo (scripts/demo.mjs): examples/demo.yaml with
#                 simulated model servers, tenants, traffic and GPU workloads (PORT=8091 to move it)
#   make test     set-up, Debug build with ASan+UBSan, every test, a one-line summary
#   make test-tsan  the unit and integration tests under ThreadSanitizer (build/tsan)
#   make test-long  long property runs: the money's invariants and the cycle modes' equivalence
#                   over many more cases
#   make bench    benchmarks side by side with their baselines (never part of make test)
#   make fuzz     builds the fuzz targets with AFL++ and runs each for FUZZ_SECONDS (60)
#   make format   clang-format the C++ sources in place
#   make tidy     clang-tidy over the sources (uses the Debug build's compile_commands.json)

SHELL := /bin/bash
JOBS ?= $(shell nproc)
CMAKE_GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
RELEASE_DIR := build/release
DEBUG_DIR := build/debug
BENCH_DIR := build/bench
DEMO_CONFIG ?= examples/demo.yaml

.PHONY: all setup build build-debug run test test-tsan test-long bench fuzz format tidy clean

all: build

setup:
	@scripts/setup

# Each build tree is configured once and reused (ccache shares objects across trees).
build: setup
	@[ -f $(RELEASE_DIR)/CMakeCache.txt ] || cmake -S . -B $(RELEASE_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DPURSER_TESTS=OFF
	cmake --build $(RELEASE_DIR) --parallel $(JOBS) --target purser

build-debug: setup
	@[ -f $(DEBUG_DIR)/CMakeCache.txt ] || cmake -S . -B $(DEBUG_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DPURSER_SANITIZE=ON
	cmake --build $(DEBUG_DIR) --parallel $(JOBS)

# The demo's platform admin key (a fresh data directory adopts it at first start).
DEMO_ADMIN_KEY ?= purser-demo-admin-key-change-me

# make run PORT=8091 puts the demo's Purser on another port than 8080.
run: build
	@mkdir -p var
	@echo "purser: starting the demo (simulated model servers, tenants, traffic, GPU workloads); Ctrl-C stops it"
	node scripts/demo.mjs --purser $(RELEASE_DIR)/purser --config $(DEMO_CONFIG) --data var --admin-key $(DEMO_ADMIN_KEY) $(if $(PORT),--port $(PORT))

test: build-debug
	@scripts/run-tests $(DEBUG_DIR)

TSAN_DIR := build/tsan
test-tsan: setup
	@[ -f $(TSAN_DIR)/CMakeCache.txt ] || cmake -S . -B $(TSAN_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DPURSER_TSAN=ON
	cmake --build $(TSAN_DIR) --parallel $(JOBS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $${TSAN_OPTIONS:-}" \
	  ctest --test-dir $(TSAN_DIR) --parallel $(JOBS) --output-on-failure --exclude-regex '^fuzz_smoke\.'

test-long: build-debug
	PURSER_PROPERTY_CASES=$${PURSER_PROPERTY_CASES:-400} $(DEBUG_DIR)/tests/ledger/ledger_test \
	  --gtest_filter='MoneyPropertyTest.*'
	PURSER_EQUIVALENCE_CASES=$${PURSER_EQUIVALENCE_CASES:-10000} $(DEBUG_DIR)/tests/fleet/fleet_test \
	  --gtest_filter='CycleModeEquivalenceTest.*'

bench:
	@scripts/setup bench
	@[ -f $(BENCH_DIR)/CMakeCache.txt ] || cmake -S . -B $(BENCH_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DPURSER_TESTS=OFF -DPURSER_BENCH=ON
	cmake --build $(BENCH_DIR) --parallel $(JOBS)
	@bench/run $(BENCH_DIR)

fuzz:
	@scripts/setup fuzz
	@[ -f build/fuzz/CMakeCache.txt ] || CXX=afl-g++ AFL_QUIET=1 cmake -S . -B build/fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPURSER_TESTS=OFF -DPURSER_FUZZ=ON -DPURSER_CCACHE=OFF "-DCMAKE_CXX_FLAGS=-fsanitize=undefined -fno-sanitize-recover=undefined"
	AFL_QUIET=1 cmake --build build/fuzz --parallel $(JOBS) --target http_request_fuzz config_fuzz numbers_fuzz url_fuzz json_fuzz model_api_fuzz sse_fuzz manifest_fuzz openb_fuzz prom_text_fuzz
	@fuzz/run build/fuzz

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

# clang-tidy parses with clang: version 16 or later is needed for std::expected (C++23) and
# Boost's coroutine support; Debian 12 ships 14, so this says so instead of printing noise.
tidy: build-debug
	@v=$$(clang-tidy --version | sed -nE 's/.*version ([0-9]+).*/\1/p' | head -1); \
	if [ "$${v:-0}" -lt 16 ]; then \
	  echo "make tidy: clang-tidy $$v cannot parse std::expected or Boost 1.74 coroutines; it needs 16 or later" >&2; exit 1; \
	fi
	@git ls-files 'src/*.cc' | xargs clang-tidy -p $(DEBUG_DIR) --quiet

clean:
	rm -rf build
