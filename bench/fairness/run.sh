#!/usr/bin/env bash
# bench/fairness: two tenants' critical traffic on one saturated route. A model server that runs
# one request at a time (`purser sim llm --max-num-seqs 1`) sits behind a route that queues in
# Purser while it is saturated; tenant "big" sends critical requests from 4 teams (4 clients
# each), tenant "small" from 1 team (4 clients), so that both always have requests waiting. Both
# were granted critical keys by the platform admin. Reported: each tenant's share of the requests
# served, against the equal share each is due (the goal: within 10 points of 50 %), and the same
# with standard keys. PURSER= runs another build of purser against the same load (an older one
# shares by team, not by tenant: 4 teams to 1 gives "small" a fifth).
# Results: bench/results/fairness.json.   bench/fairness/run.sh BUILD_DIR   (env: REQUESTS=300)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser=${PURSER:-$build/purser}
requests=${REQUESTS:-300}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --models m --ttft-ms 0 --tokens-per-s 200 \
  --max-num-seqs 1 --kv-cache-tokens 16 >"$tmp/sim.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"
purser_port=$(free_port)
admin=bench-admin-key-0123456789abcdef
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$purser_port
log: {level: error}
providers:
  - {name: sim, kind: openai, base_url: http://127.0.0.1:$sim_port/v1,
     metrics_url: http://127.0.0.1:$sim_port/metrics, engine: vllm}
routes:
  - model: chat
    targets: [{provider: sim, model: m}]
    saturation: {queue: 1, kv_cache: 0.5}
    queue: {max_wait: 60s, max_waiting: 64}
observe: {interval: 50ms}
CONF
PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" \
  >"$tmp/purser.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$purser_port/healthz"
node bench/fairness/load.mjs "http://127.0.0.1:$purser_port" "$admin" "$requests" |
  tee bench/results/fairness.json
