#!/usr/bin/env bash
# bench/gpushare: what the GPU share shim costs per intercepted call (fake driver), beside the
# direct call in the same run — without the shim, with it and no limit, under a memory cap, under
# a compute cap (kernels of no length, so the bucket never makes a launch wait and only its
# bookkeeping shows) — and how close the compute cap holds a saturating launch loop to 25 % and
# 50 % over 10 s of the fake's launch-driven utilisation. Results: bench/results/gpushare.json.
#   bench/gpushare/run.sh BUILD_DIR   (env: CALLS=200000 SECONDS_PER_RUN=10)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
mkdir -p bench/results
shim="$build/libpurser-gpushare.so"
drivers="$build/fakes_gpu/driver"
bin="$build/bench/gpushare_bench"
calls=${CALLS:-200000}
region=$(mktemp -u /tmp/purser-gpushare-bench.XXXXXX)
run() { env LD_LIBRARY_PATH="$drivers" FAKE_CUDA_NS_PER_BLOCK=0 "$@" "$bin" "$calls"; rm -f "$region"; }
direct=$(run)
no_limit=$(run LD_PRELOAD="$shim")
memory=$(run LD_PRELOAD="$shim" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" \
  CUDA_DEVICE_MEMORY_LIMIT_0=1024m)
compute=$(run LD_PRELOAD="$shim" CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" CUDA_DEVICE_SM_LIMIT=50)
at25=$(bench/gpushare/accuracy.sh "$build" 25 "${SECONDS_PER_RUN:-10}")
at50=$(bench/gpushare/accuracy.sh "$build" 50 "${SECONDS_PER_RUN:-10}")
cat <<JSON | tee bench/results/gpushare.json
{
  "cores": $(nproc),
  "per_call_ns": {"direct": $direct, "shim_no_limit": $no_limit, "memory_cap": $memory,
                  "compute_cap": $compute},
  "sm_limit_25": "$at25",
  "sm_limit_50": "$at50"
}
JSON
