#!/usr/bin/env bash
# bench/placement: the FGD paper's experiment (../shared/specs/placement-benchmark.md) replayed
# with every policy on every openb trace, seeds 42-51, beside the paper's own figures; and
# placement decisions per second: the replay on the 1,213-node openb cluster and on a synthetic
# 10,000-node one (the openb node list repeated), and the Placer `purser serve` admits through
# (placer_bench) on both, with binpack as the in-run baseline. Writes
# bench/results/placement.jsonl and bench/results/placer.jsonl and prints the tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
data=${PURSER_SHARED_DIR:-../shared}/data/openb
if [ ! -d "$data" ]; then
  echo "bench/placement: no openb traces at $data (set PURSER_SHARED_DIR); skipped"
  exit 0
fi
mkdir -p bench/results
out=bench/results/placement.jsonl
: >"$out"
for trace in default cpu050 gpushare40 gpuspec10 multigpu20; do
  for policy in random dotprod clustering packing best_fit fgd default; do
    for seed in 42 43 44 45 46 47 48 49 50 51; do
      line=$(taskset -c 0 "$build/purser" sim placement --nodes "$data/openb_node_list_gpu_node.csv" \
        --pods "$data/openb_pod_list_$trace.csv" --policy "$policy" --seed "$seed")
      echo "{\"trace\": \"$trace\", \"result\": $line}" >>"$out"
    done
  done
done
node - "$out" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
// The paper's allocation at 130 % (mean of seeds 42-51), from the spec.
const paper = {
  default: {random: 87.47, dotprod: 90.85, clustering: 91.88, packing: 92.00, best_fit: 93.08, fgd: 95.39},
  cpu050: {random: 91.24, dotprod: 93.27, clustering: 93.79, packing: 93.72, best_fit: 93.79, fgd: 95.21},
  gpushare40: {random: 86.00, dotprod: 89.56, clustering: 90.02, packing: 90.03, best_fit: 91.69, fgd: 94.15},
  gpuspec10: {random: 87.43, dotprod: 90.39, clustering: 92.18, packing: 92.46, best_fit: 93.30, fgd: 94.95},
  multigpu20: {random: 88.69, dotprod: 92.06, clustering: 93.56, packing: 93.71, best_fit: 93.93, fgd: 95.65},
};
const policies = ["random", "dotprod", "clustering", "packing", "best_fit", "fgd", "default"];
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
console.log("placement: allocation % at 130 % arrived, mean of seeds 42-51 (paper's figure; difference)");
console.log(["trace", ...policies].join(" | "));
let decisions = 0, seconds = 0;
for (const trace of Object.keys(paper)) {
  const cells = [trace];
  for (const p of policies) {
    const rs = rows.filter((r) => r.trace === trace && r.result.policy === p).map((r) => r.result);
    if (rs.length === 0) { cells.push("-"); continue; }
    for (const r of rs) { decisions += r.arrivals; seconds += r.runtime_s; }
    const m = mean(rs.map((r) => r.allocation_ratio_130));
    const ref = paper[trace][p];
    cells.push(ref === undefined ? m.toFixed(2) : `${m.toFixed(2)} (${ref.toFixed(2)}; ${(m - ref >= 0 ? "+" : "")}${(m - ref).toFixed(2)})`);
  }
  console.log(cells.join(" | "));
}
console.log(`placement decisions per second over all replays (one core, 1,213 nodes): ${Math.round(decisions / seconds).toLocaleString("en")}`);
JS

# The synthetic 10,000-node cluster: the openb node list repeated, renamed.
synth=$(mktemp -d)
trap 'rm -rf "$synth"' EXIT
awk -F, 'NR == 1 { print; next } { row[n++] = $0 }
  END { for (i = 0; i < 10000; i++) { split(row[i % n], f, ",");
        printf "synth-node-%05d,%s,%s,%s,%s\n", i, f[2], f[3], f[4], f[5] } }' \
  "$data/openb_node_list_gpu_node.csv" >"$synth/nodes.csv"
placer=bench/results/placer.jsonl
: >"$placer"
for policy in fgd default; do
  line=$(taskset -c 0 "$build/purser" sim placement --nodes "$synth/nodes.csv" \
    --pods "$data/openb_pod_list_default.csv" --policy "$policy" --seed 42)
  echo "{\"bench\": \"replay-10000\", \"result\": $line}" >>"$placer"
done
for size in 1213 10000; do
  for args in "binpack 2000" "default 2000" "default 2000 gang"; do
    # shellcheck disable=SC2086
    line=$(taskset -c 0 "$build/bench/placer_bench" "$data/openb_node_list_gpu_node.csv" \
      "$data/openb_pod_list_default.csv" "$size" $args)
    echo "{\"bench\": \"placer\", \"result\": $line}" >>"$placer"
  done
done
node - "$placer" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
console.log("placement on 10,000 nodes (openb default trace, seed 42, one core):");
for (const r of rows.filter((r) => r.bench === "replay-10000").map((r) => r.result)) {
  console.log(`  replay ${r.policy}: ${r.arrivals} decisions in ${r.runtime_s.toFixed(1)} s = ` +
    `${Math.round(r.arrivals / r.runtime_s)}/s; allocation at 130 % ${r.allocation_ratio_130} %`);
}
console.log("Placer (purser serve's path), decisions per second, one core:");
const placer = rows.filter((r) => r.bench === "placer").map((r) => r.result);
for (const size of [1213, 10000]) {
  const base = placer.find((r) => r.nodes === size && r.policy === "binpack" && !r.gangs);
  for (const r of placer.filter((r) => r.nodes === size)) {
    console.log(`  ${size} nodes, ${r.policy}${r.gangs ? " with rack gangs" : ""}: ` +
      `${r.decisions_per_s}/s (${(r.decisions_per_s / base.decisions_per_s).toFixed(2)}x binpack)`);
  }
}
JS
