#!/usr/bin/env bash
# bench/admission: the admission engine alone, in virtual time, on Kueue's performance-test
# shapes (baseline, large) in both cycle modes, and one cycle's time as the backlog grows.
# Kueue mode is the baseline beside drain mode in the same run; Kueue's own published end-to-end
# runs for these shapes are 351 s (baseline) and 1,179 s (large).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
mkdir -p bench/results
out=bench/results/admission.jsonl
: >"$out"
for shape in baseline large; do
  for mode in drain kueue; do
    taskset -c 0 "$build/bench/admission_bench" "$shape" "$mode" | tee -a "$out"
  done
done
taskset -c 0 "$build/bench/admission_bench" cycle-scaling | tee bench/results/admission_cycles.json
node -e '
const lines = require("fs").readFileSync("bench/results/admission.jsonl", "utf8").trim().split("\n").map(JSON.parse);
const get = (s, m) => lines.find(l => l.shape === s && l.mode === m);
console.log(`admission (one core): engine seconds, drain vs kueue mode`);
for (const s of ["baseline", "large"]) {
  const d = get(s, "drain"), k = get(s, "kueue");
  console.log(`  ${s}: drain ${d.engine_seconds.toFixed(3)} s (${d.admissions_per_second} admissions/s)   kueue ${k.engine_seconds.toFixed(3)} s   ratio ${(k.engine_seconds / d.engine_seconds).toFixed(2)}`);
}'
