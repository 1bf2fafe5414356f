#!/usr/bin/env bash
# Google Benchmark micro-benchmarks; prints each piece beside its baseline as a ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
out=bench/results/micro.json
"$build/bench/micro_bench" --benchmark_min_time=0.5 --benchmark_format=json --benchmark_out="$out" \
  --benchmark_out_format=json >/dev/null
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const ns = Object.fromEntries(r.benchmarks.map(b => [b.name, b.cpu_time]));
const pairs = [["BM_MoneyParse", "BM_BaselineStrtod"], ["BM_RouterMatchExact", "BM_BaselineHashLookup"],
               ["BM_RouterMatchParam", "BM_BaselineHashLookup"], ["BM_QuantityParse", "BM_BaselineStrtod"]];
console.log(`micro (${r.context.num_cpus} cores): ns per operation, and the ratio to its baseline`);
for (const [a, b] of pairs) {
  console.log(`  ${a.padEnd(22)} ${ns[a].toFixed(1).padStart(7)} ns   vs ${b.padEnd(22)} ${ns[b].toFixed(1).padStart(7)} ns   ratio ${(ns[a] / ns[b]).toFixed(2)}`);
}' "$out"
