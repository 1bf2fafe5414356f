// The floor for bench/fleet_run: the same N processes started and waited for directly, C at a
// time, with no scheduler in between.   node baseline.mjs --count N --concurrency C --command JSON
import { spawn } from "node:child_process";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, v, i, all) => (i % 2 === 0 ? [...acc, [v.slice(2), all[i + 1]]] : acc), []),
);
const count = Number(args.count ?? 1000);
const concurrency = Number(args.concurrency ?? 16);
const [program, ...rest] = JSON.parse(args.command ?? '["true"]');
const started = process.hrtime.bigint();
let next = 0, failed = 0;
async function runner() {
  while (next < count) {
    next++;
    await new Promise((resolve) => {
      const p = spawn(program, rest, { stdio: "ignore" });
      p.on("exit", (code) => { if (code !== 0) failed++; resolve(); });
      p.on("error", () => { failed++; resolve(); });
    });
  }
}
await Promise.all(Array.from({ length: concurrency }, runner));
const wall_s = Number(process.hrtime.bigint() - started) / 1e9;
console.log(JSON.stringify({ processes: count, failed, wall_s: Number(wall_s.toFixed(2)), per_s: Number((count / wall_s).toFixed(1)) }));
