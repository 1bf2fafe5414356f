#!/usr/bin/env bash
# bench/admission: the admission engine alone, in virtual time, on Kueue's performance-test
# shapes (baseline, large) and on preemption-heavy variants of them (preempt-baseline,
# preempt-large: see admission_bench.cc), in both cycle modes; one cycle's time as the backlog
# grows; and `purser sim admission` end to end on the large shape written as a scenario.
# Kueue mode is the baseline beside drain mode in the same run. Kueue's own published end-to-end
# runs for its shapes are 351 s (baseline, 15,000 workloads) and 1,179 s (large, 50,000): the
# summary sets our decisions per second beside those as workloads admitted per second.
# Results: bench/results/admission.jsonl, admission_cycles.json, admission_e2e.jsonl.
#   bench/admission/run.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
bench="$build/bench/admission_bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p bench/results
out=bench/results/admission.jsonl
: >"$out"
for shape in baseline large preempt-baseline preempt-large; do
  for mode in drain kueue; do
    taskset -c 0 "$bench" "$shape" "$mode" | tee -a "$out"
  done
done
taskset -c 0 "$bench" cycle-scaling | tee bench/results/admission_cycles.json

# The command end to end on one core: reading the scenario, the engine, printing the counts.
# /usr/bin/time writes to its own file, so the command's stderr (its read/run/print breakdown)
# stays apart.
"$bench" scenario large >"$tmp/large.yaml"
e2e=bench/results/admission_e2e.jsonl
: >"$e2e"
for mode in drain kueue; do
  taskset -c 0 /usr/bin/time -f '%e %U %S %M' -o "$tmp/time-$mode" \
    "$build/purser" sim admission --summary --mode "$mode" "$tmp/large.yaml" \
    >"$tmp/out-$mode.json" 2>"$tmp/err-$mode"
  node -e '
const fs = require("fs");
const [mode, dir] = process.argv.slice(1);
const [wall, user, sys, rss] = fs.readFileSync(`${dir}/time-${mode}`, "utf8").trim().split("\n").pop().split(" ").map(Number);
const said = fs.readFileSync(`${dir}/err-${mode}`, "utf8").trim();
const m = said.match(/(\d+) cycle\(s\), (\d+) decision\(s\); read ([\d.]+) ms, run ([\d.]+) ms .*print ([\d.]+) ms/);
if (!m) throw new Error(`no breakdown in the command'"'"'s stderr: ${said}`);
const counts = JSON.parse(fs.readFileSync(`${dir}/out-${mode}.json`, "utf8"));
console.log(JSON.stringify({
  scenario: "large", mode, scenario_bytes: fs.statSync(`${dir}/large.yaml`).size,
  wall_seconds: wall, cpu_seconds: +(user + sys).toFixed(2), user_seconds: user, sys_seconds: sys,
  max_rss_mib: +(rss / 1024).toFixed(1), cycles: +m[1], decisions: +m[2],
  read_ms: +m[3], run_ms: +m[4], print_ms: +m[5],
  admitted: counts.admitted, preempted: counts.preempted, pending: counts.pending, stderr: said}));
' "$mode" "$tmp" | tee -a "$e2e"
done

node -e '
const fs = require("fs");
const read = f => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
const lines = read("bench/results/admission.jsonl");
const e2e = read("bench/results/admission_e2e.jsonl");
const get = (s, m) => lines.find(l => l.shape === s && l.mode === m);
const shapes = ["baseline", "large", "preempt-baseline", "preempt-large"];
// Kueue'"'"'s published end-to-end runs of its scheduler performance test: workloads, seconds.
const kueue = {baseline: [15000, 351], large: [50000, 1179]};
const n = x => Math.round(x).toLocaleString("en-US");
const pad = (s, w) => String(s).padStart(w);
console.log(`admission (one core): engine seconds, drain vs kueue mode`);
for (const s of shapes) {
  const d = get(s, "drain"), k = get(s, "kueue");
  console.log(`  ${s}: drain ${d.engine_seconds.toFixed(3)} s (${n(d.decisions_per_second)} decisions/s)   kueue ${k.engine_seconds.toFixed(3)} s   ratio ${(k.engine_seconds / d.engine_seconds).toFixed(2)}`);
}
console.log(`
decisions (admissions + preemptions) per second, beside Kueue'"'"'s published figure as workloads
admitted per second (15,000 / 351 s, 50,000 / 1,179 s). Kueue'"'"'s figure is its end-to-end run
(API server, controllers, the test'"'"'s own timeline); ours is the engine alone in virtual time,
so the ratio is not like for like.`);
console.log(`  ${"shape".padEnd(17)} ${"mode".padEnd(5)} ${pad("admissions", 10)} ${pad("preemptions", 11)} ${pad("engine s", 9)} ${pad("decisions/s", 11)} ${pad("Kueue wl/s", 10)} ${pad("ratio", 7)}`);
for (const s of shapes) {
  for (const m of ["drain", "kueue"]) {
    const l = get(s, m);
    const kw = kueue[s] ? kueue[s][0] / kueue[s][1] : null;
    console.log(`  ${s.padEnd(17)} ${m.padEnd(5)} ${pad(n(l.admissions), 10)} ${pad(n(l.preemptions), 11)} ${pad(l.engine_seconds.toFixed(3), 9)} ${pad(n(l.decisions_per_second), 11)} ${pad(kw ? kw.toFixed(1) : "-", 10)} ${pad(kw ? `${n(l.decisions_per_second / kw)}x` : "-", 7)}`);
  }
}
console.log(`
preemption-heavy shapes: every workload finishes; preemptions by reason`);
for (const s of ["preempt-baseline", "preempt-large"]) {
  for (const m of ["drain", "kueue"]) {
    const l = get(s, m);
    const reasons = Object.entries(l.preemptions_by_reason).map(([r, c]) => `${r} ${n(c)}`).join(", ");
    console.log(`  ${s} ${m}: ${n(l.finished)} of ${n(l.workloads)} finished, ${n(l.preemptions)} preemptions (${reasons}), ${n(l.cycles)} cycles`);
  }
}
console.log(`
purser sim admission --summary, large shape as a scenario (${(e2e[0].scenario_bytes / 1048576).toFixed(1)} MiB of YAML), one core (goal: under 5 s)`);
for (const e of e2e) {
  console.log(`  ${e.mode.padEnd(5)} wall ${e.wall_seconds.toFixed(2)} s, CPU ${e.cpu_seconds.toFixed(2)} s (user ${e.user_seconds.toFixed(2)}, sys ${e.sys_seconds.toFixed(2)}), max RSS ${e.max_rss_mib.toFixed(0)} MiB; read ${(e.read_ms / 1000).toFixed(2)} s, run ${(e.run_ms / 1000).toFixed(2)} s (${e.cycles} cycles, ${n(e.decisions)} decisions), print ${e.print_ms.toFixed(1)} ms; ${e.wall_seconds < 5 ? "under" : "OVER"} 5 s`);
}'
