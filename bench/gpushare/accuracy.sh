#!/usr/bin/env bash
# One compute-cap accuracy run: gpu_probe's saturating launch loop (0.5 ms kernels) for about
# SECONDS seconds under CUDA_DEVICE_SM_LIMIT=$2, against the fake driver's launch-driven
# utilisation. Prints the probe's line.
#   bench/gpushare/accuracy.sh BUILD_DIR PERCENT [SECONDS]
set -euo pipefail
build=$1 percent=$2 seconds=${3:-10}
region=$(mktemp -u /tmp/purser-gpushare-bench.XXXXXX)
launches=$((seconds * 2000 * percent / 100))
env LD_PRELOAD="$build/libpurser-gpushare.so" LD_LIBRARY_PATH="$build/fakes_gpu/driver" \
  CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" CUDA_DEVICE_SM_LIMIT="$percent" \
  "$build/fakes_gpu/gpu_probe" launch "$launches" 50
rm -f "$region"
