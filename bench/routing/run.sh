#!/usr/bin/env bash
# bench/routing: round-robin vs least_loaded vs slo (cache- and load-aware) on simulated replicas
# in virtual time; see routing_bench.cc. Results: bench/results/routing.json.
#   bench/routing/run.sh BUILD_DIR   (env: REPLICAS=8 REQUESTS=3000 SEED=42)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
mkdir -p bench/results
"$build/bench/routing_bench" --replicas "${REPLICAS:-8}" --requests "${REQUESTS:-3000}" \
  --seed "${SEED:-42}" --json bench/results/routing.json
