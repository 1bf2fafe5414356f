// A probe client's latency while hostile clients attack the same Purser (bench/hostile/run.sh).
//   node load.mjs --url URL --key KEY --model MODEL --probes N [--attack bodies|events|reports|none]
//        [--attackers K] [--body-bytes B] [--attack-model MODEL]
//        [--report-key KEY --reports PATH,PATH,...]   (reports: GETs of those paths in a loop)
// The probe sends N small chat requests one after another and prints one JSON line with the
// percentiles of their latencies (ms), how many failed, and what the attackers got done.
import http from "node:http";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, v, i, all) => (i % 2 === 0 ? [...acc, [v.slice(2), all[i + 1]]] : acc), []),
);
const url = new URL(args.url);
const probes = Number(args.probes ?? 300);
const attack = args.attack ?? "none";
const attackers = Number(args.attackers ?? 6);
const bodyBytes = Number(args["body-bytes"] ?? 15 * 1024 * 1024);

function post(body, { agent, stream = false } = {}) {
  return new Promise((resolve) => {
    const started = process.hrtime.bigint();
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: "/v1/chat/completions",
        method: "POST",
        agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          authorization: `Bearer ${args.key}`,
        },
      },
      (res) => {
        let bytes = 0;
        res.on("data", (d) => (bytes += d.length));
        res.on("end", () =>
          resolve({ status: res.statusCode, ms: Number(process.hrtime.bigint() - started) / 1e6, bytes }),
        );
        res.on("error", () => resolve({ status: 0, ms: 0, bytes }));
      },
    );
    req.on("error", () => resolve({ status: 0, ms: Number(process.hrtime.bigint() - started) / 1e6, bytes: 0 }));
    req.end(body);
  });
}

function get(path, agent) {
  return new Promise((resolve) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path, method: "GET", agent,
        headers: { authorization: `Bearer ${args["report-key"]}` } },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode }));
        res.on("error", () => resolve({ status: 0 }));
      },
    );
    req.on("error", () => resolve({ status: 0 }));
    req.end();
  });
}

let stop = false;
const done = { requests: 0, statuses: {}, ms: 0 };
async function reporter() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const paths = args.reports.split(",");
  for (let i = 0; !stop; i++) {
    const started = process.hrtime.bigint();
    const r = await get(paths[i % paths.length], agent);
    done.ms += Number(process.hrtime.bigint() - started) / 1e6;
    done.requests++;
    done.statuses[r.status] = (done.statuses[r.status] ?? 0) + 1;
  }
  agent.destroy();
}
async function attacker() {
  if (attack === "reports") return reporter();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const big =
    attack === "bodies"
      ? JSON.stringify({
          model: args["attack-model"],
          max_tokens: 1,
          messages: [{ role: "user", content: "x".repeat(bodyBytes - 200) }],
        })
      : JSON.stringify({
          model: args["attack-model"],
          stream: true,
          max_tokens: 1,
          messages: [{ role: "user", content: "flood me" }],
        });
  while (!stop) {
    const r = await post(big, { agent });
    done.requests++;
    done.statuses[r.status] = (done.statuses[r.status] ?? 0) + 1;
  }
  agent.destroy();
}

const workers = attack === "none" ? [] : Array.from({ length: attackers }, attacker);
if (attack !== "none") await new Promise((r) => setTimeout(r, 1000)); // let the attack build up
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const small = JSON.stringify({ model: args.model, max_tokens: 8, messages: [{ role: "user", content: "hi" }] });
const latencies = [];
let failed = 0;
for (let i = 0; i < probes; i++) {
  const r = await post(small, { agent });
  if (r.status !== 200) failed++;
  latencies.push(r.ms);
}
stop = true;
await Promise.all(workers);
agent.destroy();
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
console.log(
  JSON.stringify({
    attack,
    probes,
    failed,
    p50_ms: +at(0.5).toFixed(2),
    p99_ms: +at(0.99).toFixed(2),
    max_ms: +latencies[latencies.length - 1].toFixed(2),
    attack_requests: done.requests,
    attack_statuses: done.statuses,
    attack_mean_ms: done.requests ? +(done.ms / done.requests).toFixed(1) : 0,
  }),
);
