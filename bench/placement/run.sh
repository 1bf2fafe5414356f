#!/usr/bin/env bash
# bench/placement: the FGD paper's experiment (bench/placement/README.md defines it) replayed
# with every policy on every openb trace, seeds 42-51, beside the paper's own figures; and
# placement decisions per second: the replay on the 1,213-node openb cluster and on a synthetic
# 10,000-node one (the openb node list repeated), and the Placer `purser serve` admits through
# (placer_bench) on both, with binpack as the in-run baseline. Also `fgd` and `default` on
# synthetic stand-ins for the traces the shared data does not hold (variants.cjs). Writes
# bench/results/placement.jsonl, placement-synthetic.jsonl and placer.jsonl and prints the
# tables: allocation at 130 % and 100 %, pods left pending at 100 %, fragmentation over time.
# JOBS=2 runs two replays at a time (the decisions per second are then not one core's).
# SEEDS="42 43" runs fewer seeds (a quick look; the tables still say 42-51).
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
synthetic=bench/results/placement-synthetic.jsonl
: >"$out"
: >"$synthetic"
# Runs one replay per line of stdin ("TRACE-NAME PODS-CSV POLICY SEED"), JOBS at a time (default
# 1, pinned to core 0, so the decisions per second are one core's), appending to $1.
replays() {
  local dest=$1
  if [ "${JOBS:-1}" = 1 ]; then pin="taskset -c 0"; else pin=""; fi
  xargs -P "${JOBS:-1}" -L 1 sh -c \
    'echo "{\"trace\": \"$0\", \"result\": $('"$pin"' '"$build"'/purser sim placement --nodes '"$data"'/openb_node_list_gpu_node.csv --pods "$1" --policy "$2" --seed "$3")}"' \
    >>"$dest"
}
seeds=${SEEDS:-42 43 44 45 46 47 48 49 50 51}
for trace in default cpu050 gpushare40 gpuspec10 multigpu20; do
  for policy in random dotprod clustering packing best_fit fgd default; do
    for seed in $seeds; do echo "$trace $data/openb_pod_list_$trace.csv $policy $seed"; done
  done
done | replays "$out"
# The families' other members, which the shared data does not hold: synthetic stand-ins.
variants=$(mktemp -d)
node bench/placement/variants.cjs "$data" "$variants"
for trace in gpuspec20 gpuspec25 gpuspec33 gpushare20 gpushare60 gpushare80 gpushare100 \
  multigpu30 multigpu50 cpu100 cpu200 cpu250; do
  for policy in fgd default; do
    for seed in $seeds; do echo "$trace $variants/openb_pod_list_$trace.csv $policy $seed"; done
  done
done | replays "$synthetic"
rm -rf "$variants"
node - "$out" "$synthetic" <<'JS'
const fs = require("fs");
const load = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
const rows = load(process.argv[2]), synthetic = load(process.argv[3]);
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
const signed = (v) => (v >= 0 ? "+" : "") + v.toFixed(2);
const of = (set, trace, policy) => set.filter((r) => r.trace === trace && r.result.policy === policy).map((r) => r.result);
const m = (set, trace, policy, f) => mean(of(set, trace, policy).map(f));
const traces = Object.keys(paper);

console.log("placement: allocation % at 130 % arrived, mean of seeds 42-51 (paper's figure; difference)");
console.log(["trace", ...policies, "default - fgd"].join(" | "));
let decisions = 0, seconds = 0;
for (const trace of traces) {
  const cells = [trace];
  for (const p of policies) {
    const rs = of(rows, trace, p);
    if (rs.length === 0) { cells.push("-"); continue; }
    for (const r of rs) { decisions += r.arrivals; seconds += r.runtime_s; }
    const v = mean(rs.map((r) => r.allocation_ratio_130)), ref = paper[trace][p];
    cells.push(ref === undefined ? v.toFixed(2) : `${v.toFixed(2)} (${ref.toFixed(2)}; ${signed(v - ref)})`);
  }
  cells.push(signed(m(rows, trace, "default", (r) => r.allocation_ratio_130) - m(rows, trace, "fgd", (r) => r.allocation_ratio_130)));
  console.log(cells.join(" | "));
}
console.log("\nplacement: allocation % at 100 % arrived, mean of seeds 42-51");
console.log(["trace", ...policies, "default - fgd"].join(" | "));
for (const trace of traces) {
  const cells = [trace, ...policies.map((p) => m(rows, trace, p, (r) => r.allocation_ratio_100).toFixed(2))];
  cells.push(signed(m(rows, trace, "default", (r) => r.allocation_ratio_100) - m(rows, trace, "fgd", (r) => r.allocation_ratio_100)));
  console.log(cells.join(" | "));
}
console.log("\nplacement: pods left pending by 100 % arrived (their GPUs), mean of seeds 42-51");
console.log(["trace", ...policies].join(" | "));
for (const trace of traces) {
  console.log([trace, ...policies.map((p) =>
    `${m(rows, trace, p, (r) => r.failed_100).toFixed(0)} (${m(rows, trace, p, (r) => r.failed_gpus_100).toFixed(0)})`)].join(" | "));
}
console.log("\nplacement: fragmentation % of GPU capacity as demand arrives, default trace, mean of seeds 42-51");
const ratios = of(rows, "default", "fgd")[0].fragmentation_by_arrival.map(([ratio]) => ratio);
console.log(["policy", ...ratios.map((r) => `${r} %`)].join(" | "));
for (const p of policies) {
  const rs = of(rows, "default", p);
  console.log([p, ...ratios.map((_, i) => mean(rs.map((r) => r.fragmentation_by_arrival[i][1])).toFixed(2))].join(" | "));
}
console.log("\nplacement: synthetic stand-ins for the unpublished traces (bench/placement/variants.cjs), seeds 42-51");
console.log("trace | fgd 100 % | default 100 % | default - fgd | fgd 130 % | default 130 % | default - fgd");
const d100 = [], d130 = [];
for (const trace of [...traces, ...new Set(synthetic.map((r) => r.trace))]) {
  const set = traces.includes(trace) ? rows : synthetic;
  const f1 = m(set, trace, "fgd", (r) => r.allocation_ratio_100), g1 = m(set, trace, "default", (r) => r.allocation_ratio_100);
  const f3 = m(set, trace, "fgd", (r) => r.allocation_ratio_130), g3 = m(set, trace, "default", (r) => r.allocation_ratio_130);
  d100.push(g1 - f1);
  d130.push(g3 - f3);
  console.log([trace + (traces.includes(trace) ? "" : " (synthetic)"), f1.toFixed(2), g1.toFixed(2), signed(g1 - f1), f3.toFixed(2), g3.toFixed(2), signed(g3 - f3)].join(" | "));
}
console.log(`default - fgd over all ${d100.length}: at 100 % min ${signed(Math.min(...d100))} mean ${signed(mean(d100))}; at 130 % min ${signed(Math.min(...d130))} mean ${signed(mean(d130))}`);
console.log(`placement decisions per second over the public replays (1,213 nodes): ${Math.round(decisions / seconds).toLocaleString("en")}`);
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
