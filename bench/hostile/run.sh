#!/usr/bin/env bash
# bench/hostile: what a hostile client costs everyone else. A probe client sends small chat
# requests one after another (through the gateway to `purser sim llm`) and its latency is
# measured, in one run:
#   (a) alone (the baseline),
#   (b) while 6 clients send the largest allowed bodies (15 MiB each, in a loop),
#   (c) while 6 clients stream from an upstream that sends the largest allowed events (1 MiB,
#       64 per answer).
# Reported: the probe's p50/p99 in each, and the ratio to the baseline.
# Results: bench/results/hostile.json.   bench/hostile/run.sh BUILD_DIR   (env: PROBES=300;
# EVENT_LIMIT= for a purser older than providers[].max_event_bytes, to compare with it)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
probes=${PROBES:-300}
event_limit=${EVENT_LIMIT-", max_event_bytes: 1Mi"}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --ttft-ms 0 --tokens-per-s 0 --threads 2 >"$tmp/sim.log" 2>&1 &
pids+=($!)
hostile_port=$(free_port)
node bench/hostile/upstream.mjs "$hostile_port" $((1024 * 1024 - 64)) 64 >"$tmp/hostile.log" 2>&1 &
pids+=($!)
sink_port=$(free_port)
node bench/hostile/upstream.mjs "$sink_port" 0 0 >"$tmp/sink.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"

purser_port=$(free_port)
admin=bench-admin-key-0123456789abcdef
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$purser_port
log: {level: error}
providers:
  - {name: sim, kind: openai, base_url: http://127.0.0.1:$sim_port/v1}
  - {name: hostile, kind: openai, base_url: http://127.0.0.1:$hostile_port/v1${event_limit}}
  - {name: sink, kind: openai, base_url: http://127.0.0.1:$sink_port/v1}
routes:
  - {model: bench, targets: [{provider: sim, model: sim-small}]}
  - {model: flood, targets: [{provider: hostile, model: flood}]}
  - {model: sink, targets: [{provider: sink, model: sink}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
CONF
PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" >"$tmp/purser.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$purser_port/healthz"
bench_member "http://127.0.0.1:$purser_port" "$admin"

load() { node bench/hostile/load.mjs --url "http://127.0.0.1:$purser_port" --key "$key" --model bench \
  --probes "$probes" "$@"; }
load --probes 50 >/dev/null  # warm up
alone=$(load --attack none)
bodies=$(load --attack bodies --attackers 6 --attack-model sink)
events=$(load --attack events --attackers 6 --attack-model flood)
cores=$(nproc)
echo "hostile ($cores cores; probe: $probes small chat requests in a row)"
for run in alone bodies events; do
  r=${!run}
  printf '  %-7s probe p50 %6s ms  p99 %7s ms  max %7s ms  failed %s  attack requests %s %s\n' "$run" \
    "$(field "$r" p50_ms)" "$(field "$r" p99_ms)" "$(field "$r" max_ms)" "$(field "$r" failed)" \
    "$(field "$r" attack_requests)" "$(field "$r" attack_statuses | tr -d '\n')"
done
echo "  probe p99 vs alone: 15 MiB bodies x6 $(ratio "$(field "$bodies" p99_ms)" "$(field "$alone" p99_ms)")x," \
  "1 MiB events x6 $(ratio "$(field "$events" p99_ms)" "$(field "$alone" p99_ms)")x"
mkdir -p bench/results
printf '{"cores": %s, "purser": "%s", "alone": %s, "bodies": %s, "events": %s}\n' "$cores" \
  "$("$purser" version | head -1)" "$alone" "$bodies" "$events" >"${RESULT:-bench/results/hostile.json}"
