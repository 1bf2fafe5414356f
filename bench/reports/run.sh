#!/usr/bin/env bash
# bench/reports: a slow report slows only itself. A store of EVENTS usage events (one million by
# default, spread over 30 days, all of one tenant) is written straight into Purser's SQLite file;
# then a probe client sends small chat requests one after another through the gateway (to
# `purser sim llm`), in one run:
#   (a) alone (the baseline),
#   (b) while one console tab loads the 30-day overview's heaviest reads in a loop (the tenant's
#       spend by day over 30 days, the routes' statistics over 30 days),
#   (c) the same with 4 tabs.
# Reported: the probe's p50/p99/max in each, the ratio to the baseline, and how long the reports
# themselves took. Results: bench/results/reports.json.
#   bench/reports/run.sh BUILD_DIR   (env: EVENTS=1000000 PROBES=300 THREADS=2)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
events=${EVENTS:-1000000}
probes=${PROBES:-300}
threads=${THREADS:-2}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT
command -v sqlite3 >/dev/null || { echo "bench/reports: needs the sqlite3 command (apt install sqlite3)" >&2; exit 1; }

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --ttft-ms 0 --tokens-per-s 0 --threads 1 >"$tmp/sim.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"
purser_port=$(free_port)
admin=bench-admin-key-0123456789abcdef
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$purser_port
threads: $threads
log: {level: error}
providers:
  - {name: sim, kind: openai, base_url: http://127.0.0.1:$sim_port/v1}
routes:
  - {model: bench, targets: [{provider: sim, model: sim-small}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
CONF
start_purser() {
  PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" >>"$tmp/purser.log" 2>&1 &
  purser_pid=$!
  pids+=($purser_pid)
  wait_for "http://127.0.0.1:$purser_port/healthz"
}
start_purser
bench_member "http://127.0.0.1:$purser_port" "$admin"
kill -TERM "$purser_pid"
wait "$purser_pid" 2>/dev/null || true

# The usage of the tenant's last 30 days, as the ledger records it.
now_ms=$(($(date +%s) * 1000))
step=$((30 * 24 * 3600 * 1000 / events))
sqlite3 "$tmp/var/purser.db" >/dev/null <<SQL
PRAGMA journal_mode=WAL;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $events)
INSERT INTO usage_events (id, at_ms, tenant_id, team_id, user_id, service_account_id, key_id,
  session_id, route, provider, model, input_tokens, output_tokens, cached_input_tokens,
  cache_write_tokens, reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated,
  recovered)
SELECT 'seed-' || i, $now_ms - i * $step, '$tenant', '$team', '$user', '', 'seed-key', '',
  'bench', 'sim', 'sim-small', 100 + i % 50, 20 + i % 7, 0, 0, 0, 27000, 5 + i % 20, 2, 200, 0, 0
FROM n;
SQL
start_purser

from=$(date -u -d '30 days ago' +%Y-%m-%dT%H:%M:%SZ)
reports="/api/v1/spend?scope=tenant:$tenant&group_by=day&from=$from,/api/v1/routes?from=$from"
load() { node bench/hostile/load.mjs --url "http://127.0.0.1:$purser_port" --key "$key" --model bench \
  --probes "$probes" --report-key "$admin" --reports "$reports" "$@"; }
load --probes 50 >/dev/null  # warm up
alone=$(load --attack none)
one=$(load --attack reports --attackers 1)
four=$(load --attack reports --attackers 4)
cores=$(nproc)
echo "reports ($cores cores, $threads workers; $events usage events; probe: $probes small chat requests in a row)"
for run in alone one four; do
  r=${!run}
  printf '  %-5s probe p50 %7s ms  p99 %8s ms  max %8s ms  failed %s  reports %s %s mean %s ms\n' "$run" \
    "$(field "$r" p50_ms)" "$(field "$r" p99_ms)" "$(field "$r" max_ms)" "$(field "$r" failed)" \
    "$(field "$r" attack_requests)" "$(field "$r" attack_statuses | tr -d '\n')" "$(field "$r" attack_mean_ms)"
done
echo "  probe p50/p99 vs alone: 1 tab $(ratio "$(field "$one" p50_ms)" "$(field "$alone" p50_ms)")x/$(ratio "$(field "$one" p99_ms)" "$(field "$alone" p99_ms)")x," \
  "4 tabs $(ratio "$(field "$four" p50_ms)" "$(field "$alone" p50_ms)")x/$(ratio "$(field "$four" p99_ms)" "$(field "$alone" p99_ms)")x"
mkdir -p bench/results
printf '{"cores": %s, "workers": %s, "events": %s, "purser": "%s", "alone": %s, "one_tab": %s, "four_tabs": %s}\n' \
  "$cores" "$threads" "$events" "$("$purser" version | head -1)" "$alone" "$one" "$four" >"${RESULT:-bench/results/reports.json}"
