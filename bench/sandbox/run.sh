#!/usr/bin/env bash
# bench/sandbox: what the local pod's wall costs at start, per pod (p50/p99 of N starts of
# /bin/true), beside a plain fork + exec in the same run: the executor without isolation, as root
# (namespaces, the view, a team's account), with the pod's cgroups, and as an unprivileged user
# (user namespaces). Results: bench/results/sandbox.json.
#   bench/sandbox/run.sh BUILD_DIR   (env: STARTS=200)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
mkdir -p bench/results
"$build/bench/sandbox_bench" "${STARTS:-200}" | tee bench/results/sandbox.json
