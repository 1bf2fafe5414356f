// Submits N short workloads to a Purser and waits until every one has ended (bench/fleet_run).
//   node load.mjs --url URL --key KEY --count N --concurrency C --command JSON
// Prints one JSON line: the wall time, workloads per second, how many succeeded, and, from the
// server's own timestamps, the time from admission to the process's start and from submission to
// the end, as percentiles (ms).
import http from "node:http";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, v, i, all) => (i % 2 === 0 ? [...acc, [v.slice(2), all[i + 1]]] : acc), []),
);
const url = new URL(args.url);
const count = Number(args.count ?? 1000);
const concurrency = Number(args.concurrency ?? 8);
const command = JSON.parse(args.command ?? '["true"]');
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      {
        host: url.hostname, port: url.port, path, method, agent,
        headers: {
          authorization: `Bearer ${args.key}`,
          ...(data ? { "content-type": "application/json", "content-length": Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        let s = "";
        res.on("data", (d) => (s += d));
        res.on("end", () => resolve({ status: res.statusCode, body: s ? JSON.parse(s) : null }));
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : null;
};
const ms = (t) => Date.parse(t);

const started = process.hrtime.bigint();
let next = 0, refused = 0;
async function submitter() {
  while (next < count) {
    const i = next++;
    const r = await call("POST", "/api/v1/workloads", {
      name: `job-${i}`, queue: "batch",
      pod_sets: [{ name: "main", count: 1, requests: { cpu: "1" }, command }],
    });
    if (r.status !== 201) refused++;
  }
}
await Promise.all(Array.from({ length: concurrency }, submitter));
// Wait for the last to end (bounded: a stuck fleet fails the benchmark instead of hanging it).
let ended = [];
for (let polls = 0; polls < 60000; polls++) {
  const r = await call("GET", "/api/v1/workloads");
  if (r.body.data.length === 0) break;
  await new Promise((res) => setTimeout(res, 20));
}
const wall_s = Number(process.hrtime.bigint() - started) / 1e9;
ended = (await call("GET", "/api/v1/workloads?state=finished")).body.data;
const toStart = [], toEnd = [];
for (const w of ended) {
  if (!w.pods.length || !w.admitted_at) continue;
  toStart.push(ms(w.pods[0].started_at) - ms(w.admitted_at));
  toEnd.push(ms(w.finished_at) - ms(w.submitted_at));
}
console.log(JSON.stringify({
  workloads: count, refused, ended: ended.length,
  succeeded: ended.filter((w) => w.state === "succeeded").length,
  wall_s: Number(wall_s.toFixed(2)), per_s: Number((count / wall_s).toFixed(1)),
  admission_to_start_ms: { p50: pct(toStart, 50), p99: pct(toStart, 99), max: pct(toStart, 100) },
  submit_to_end_ms: { p50: pct(toEnd, 50), p99: pct(toEnd, 99), max: pct(toEnd, 100) },
}));
