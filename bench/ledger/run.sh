#!/usr/bin/env bash
# bench/ledger: reserve+settle operations per second (1 and 2 threads) beside a mutex baseline,
# and durable usage events per second through the journal (batch and always) beside the two
# SQLite commits per event it replaced.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
mkdir -p bench/results
"$build/bench/ledger_bench" --benchmark_min_time=1 --benchmark_format=json \
  --benchmark_out=bench/results/ledger.json --benchmark_out_format=json >/dev/null
node -e '
const r = JSON.parse(require("fs").readFileSync("bench/results/ledger.json", "utf8"));
const rate = n => r.benchmarks.find(b => b.name === n).items_per_second;
console.log(`ledger (${r.context.num_cpus} cores): reserve+settle per second, chain of 3 wallets`);
for (const t of [1, 2]) {
  const a = rate(`BM_ReserveSettle/real_time/threads:${t}`), b = rate(`BM_BaselineMutexArithmetic/real_time/threads:${t}`);
  console.log(`  ${t} thread(s): ${Math.round(a).toLocaleString("en")} /s   baseline (mutex arithmetic) ${Math.round(b).toLocaleString("en")} /s   ratio ${(a / b).toFixed(2)}`);
}'
"$build/bench/durable_bench" "$tmp" 20000 64 2>/dev/null | tee bench/results/ledger_durable.json
