#!/usr/bin/env node
// The demo `make run` starts: two simulated model servers, `purser serve` with
// examples/demo.yaml, then (once, into ./var) two tenants with teams, people and wallets — Dana
// spending far more than the rest, Ana past an alert — thirty days of their history, a handful of
// GPU workloads, and background traffic through the gateway, so every view of the console has
// data from the first minute.
//
//   node scripts/demo.mjs [--purser build/release/purser] [--config examples/demo.yaml]
//                         [--data var] [--admin-key KEY] [--rate 3] [--port 8080]
//                         [--openai-port 8101] [--anthropic-port 8102]
//
// --port puts Purser on another port than the configuration's (`make run PORT=8091`). The
// simulated servers' ports must be those the configuration's providers point at.
//
// Ctrl-C stops everything: the servers run in process groups of their own, so the terminal's
// signal reaches only this script, which asks each of them once to stop (Purser drains the
// requests in flight first). Keys the demo made are kept in <data>/demo-keys.json.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join, resolve } from "node:path";

const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => {
  if (a.startsWith("--")) pairs.push([a.slice(2), all[i + 1]]);
  return pairs;
}, []));
const purserBin = args.purser ?? "build/release/purser";
const config = args.config ?? "examples/demo.yaml";
const data = args.data ?? "var";
const adminKey = args["admin-key"] ?? process.env.PURSER_ADMIN_KEY ?? "purser-demo-admin-key-change-me";
const rate = Number(args.rate ?? 3);  // requests per second through the gateway
const openaiPort = args["openai-port"] ?? "8101";
const anthropicPort = args["anthropic-port"] ?? "8102";
const port = args.port;  // Purser's, when not the configuration's
let servePort;  // the served model's first replica's (the next one's is one more)

// A free loopback port whose next one is free too (for the served model's two replicas).
async function freePortPair() {
  const listenOn = (p) => new Promise((res) => {
    const s = net.createServer();
    s.once("error", () => res(null));
    s.listen(p, "127.0.0.1", () => { const got = s.address().port; s.close(() => res(got)); });
  });
  for (;;) {
    const p = await listenOn(0);
    if (p !== null && p < 65535 && (await listenOn(p + 1)) !== null) return p;
  }
}

const children = [];
function start(name, argv, env = {}) {
  // detached: a process group of its own, out of reach of the terminal's Ctrl-C (see stop()).
  const child = spawn(purserBin, argv, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
    detached: true,
  });
  child.done = new Promise((resolve) => child.on("exit", resolve));
  children.push(child);
  const listening = new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http\S+)/);
      if (m) resolve(m[1]);
    });
    // Warnings and errors only: the servers' info lines would bury the demo's own messages.
    child.stderr.on("data", (d) => {
      for (const line of String(d).split("\n")) {
        if (/warn|error|critical|cannot/i.test(line)) process.stderr.write(`[${name}] ${line}\n`);
        if (/address already in use/i.test(line)) {
          process.stderr.write(
            name === "purser"
              ? "demo: that port is taken; start the demo on another with `make run PORT=8091`\n"
              : `demo: ${name}'s port is taken; free it (the configuration's providers point there)\n`,
          );
        }
      }
    });
    child.on("exit", (code) => {
      reject(new Error(`${name} exited (${code}) before listening`));
      if (!stopping) {
        console.error(`demo: ${name} stopped (exit ${code}); stopping the demo`);
        stop(1);
      }
    });
  });
  return listening;
}

let stopping = false;
// Stops the demo's running jobs (their pods would outlive Purser, as a restart is meant to find
// them), then every server (Purser drains its requests first), and exits once they have, or
// after 15 s.
function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  const jobs = base ? Promise.race([stopJobs(), new Promise((r) => setTimeout(r, 3_000))]) : Promise.resolve();
  jobs.then(() => {
    for (const c of children) c.kill("SIGTERM");
    const deadline = new Promise((resolve) => setTimeout(resolve, 15_000));
    Promise.race([Promise.all(children.map((c) => c.done)), deadline]).then(() => process.exit(code));
  });
}
async function stopJobs() {
  try {
    const live = await call("/api/v1/workloads");
    await Promise.all(live.data.filter((w) => w.state === "running" || w.state === "admitted")
      .map((w) => call(`/api/v1/workloads/${w.name}`, { method: "DELETE" }).catch(() => {})));
  } catch {
    // Purser is already gone: nothing to ask.
  }
}
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));

let base;
async function call(path, { method = "GET", body, key = adminKey, headers = {} } = {}) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${json?.detail ?? text}`);
  return json;
}

// Tenants, teams, people, wallets and keys, made once; their keys are kept in the data folder.
const PEOPLE = [
  // tenant, team, name, role, monthly wallet, traffic weight, spent this month before the demo
  // started, dollars a day in the weeks before the month began
  ["acme", "ml", "olivia", "tenant-admin", null, 0, 0, 0],
  ["acme", "ml", "dana", "member", "40.00", 10, 46, 1.1],
  ["acme", "ml", "ana", "member", "40.00", 1, 31, 0.9],  // past her 75 % alert: amber
  ["acme", "ml", "bo", "member", "40.00", 1, 9, 0.4],
  ["acme", "serving", "carol", "team-lead", "40.00", 1, 4, 0.2],
  ["globex", "labs", "gus", "tenant-admin", "60.00", 1, 5, 0.3],
  ["globex", "labs", "hana", "member", "60.00", 1, 12, 0.6],
];

// A repeatable pseudo-random sequence (the history has the same shape at every start).
function seeded(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// What people spent before the demo started, hour by hour over the last 30 days, as usage that
// ran elsewhere (POST /api/v1/usage): this month's sums to each one's `before` and counts in this
// month's wallets; the days before the month began are history, in the reports only. Working
// hours and weekdays weigh more.
function history(people, now) {
  const HOUR = 3600e3;
  const random = seeded(2026);
  const monthStart = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  const first = Math.floor((now.getTime() - 30 * 24 * HOUR) / HOUR) * HOUR;
  const weight = (t) => {
    const d = new Date(t);
    const working = d.getUTCHours() >= 8 && d.getUTCHours() < 19 ? 1 : 0.12;
    const weekend = d.getUTCDay() === 0 || d.getUTCDay() === 6 ? 0.3 : 1;
    return working * weekend * (0.4 + 1.2 * random());
  };
  const MODELS = [["gpt-4o", 0.55], ["claude", 0.3], ["gpt-4o-mini", 0.15]];
  const events = [];
  for (const p of people) {
    const hours = [];
    for (let t = first; t < now.getTime(); t += HOUR) hours.push({ t, w: weight(t) });
    // This month: cents shared out by weight, the rounding left over given to the busiest hour.
    const month = hours.filter((h) => h.t >= monthStart);
    const total = month.reduce((sum, h) => sum + h.w, 0);
    let left = Math.round(p.before * 100);
    for (const h of month) h.cents = Math.floor((p.before * 100 * h.w) / total);
    left -= month.reduce((sum, h) => sum + h.cents, 0);
    if (month.length > 0) month.reduce((a, b) => (b.w > a.w ? b : a)).cents += left;
    // Before it: about `daily` a day (a weekday's weights sum to about 12).
    for (const h of hours) if (h.t < monthStart) h.cents = Math.round((p.daily * 100 * h.w) / 12);
    for (const h of hours) {
      if (!h.cents) continue;
      const at = new Date(h.t + Math.floor(random() * Math.min(HOUR, now.getTime() - h.t)));
      const day = at.toISOString().slice(0, 10);
      let pick = random(), model = MODELS[0][0];
      for (const [m, share] of MODELS) if ((pick -= share) < 0) { model = m; break; }
      const cost = h.cents / 100;
      events.push({
        id: `demo-${p.name}-${h.t / HOUR}`, at: at.toISOString(),
        owner: { kind: "user", id: p.id }, key: p.key_id, model, route: model,
        session_id: `${p.name}-${day}`, cost: cost.toFixed(2),
        tokens: { input: Math.round(cost * 250_000), output: Math.round(cost * 40_000) },
        status: 200, latency_ms: 600 + Math.floor(random() * 2400),
      });
    }
  }
  return events;
}

async function seed() {
  const file = join(data, "demo-keys.json");
  if (existsSync(file)) return JSON.parse(readFileSync(file, "utf8"));
  const tenants = {};
  // Priority is granted per tenant: acme's serving may run at production-inference (1000).
  for (const [name, limit, max] of [["acme", "140.00", 1000], ["globex", "150.00", 0]]) {
    tenants[name] = await call("/api/v1/tenants", { method: "POST",
      body: { name, priority: { max_workload_priority: max } } });
    await call("/api/v1/wallets", { method: "POST", body: { scope: { kind: "tenant", id: tenants[name].id },
      limit, period: "monthly", hard: false, alert_at: [50, 80, 100] } });
  }
  const teams = {};
  for (const [tenant, team] of [["acme", "ml"], ["acme", "serving"], ["globex", "labs"]]) {
    teams[team] = await call("/api/v1/teams", { method: "POST", body: { tenant: tenants[tenant].id, name: team } });
  }
  const keys = [];
  const spenders = [];
  for (const [tenant, team, name, role, limit, weight, before, daily] of PEOPLE) {
    const u = await call("/api/v1/users", { method: "POST",
      body: { tenant: tenants[tenant].id, team: teams[team].id, name, role, email: `${name}@${tenant}.example` } });
    if (limit) {
      await call("/api/v1/wallets", { method: "POST", body: { scope: { kind: "user", id: u.id }, limit,
        period: "monthly", hard: false, alert_at: [75, 100] } });
    }
    const k = await call("/api/v1/keys", { method: "POST", body: { owner: { kind: "user", id: u.id }, name: `${name}-laptop` } });
    keys.push({ tenant, team, name, role, weight, key: k.key });
    if (before > 0 || daily > 0) spenders.push({ name, id: u.id, key_id: k.id, before, daily });
  }
  const events = history(spenders, new Date());
  for (let i = 0; i < events.length; i += 1000) {
    await call("/api/v1/usage", { method: "POST", body: { events: events.slice(i, i + 1000) } });
  }
  mkdirSync(data, { recursive: true });
  writeFileSync(file, JSON.stringify(keys, null, 2), { mode: 0o600 });
  return keys;
}

// A handful of workloads: a gang that must share a rack (training for half an hour), a sweep
// (done in half a minute), a notebook on a GPU share, a job too large for the queue (pending,
// with its why), and production serving. The ones with a command run as local processes: see
// `purser logs ml/llama-finetune`.
async function submitWorkloads(keys) {
  const key = (name) => keys.find((k) => k.name === name).key;
  const jobs = [
    ["dana", { name: "llama-finetune", queue: "research", pod_sets: [{ name: "workers", count: 2,
      requests: { cpu: "16", memory: "128Gi", "nvidia.com/gpu": "4" }, topology: { required: "rack" },
      command: ["/bin/sh", "-c", "trap 'echo checkpoint saved; exit 0' TERM; " +
        "for step in $(seq 1 1800); do echo \"worker $PURSER_POD_INDEX step $step/1800 on GPUs $CUDA_VISIBLE_DEVICES " +
        "of $PURSER_NODE\"; sleep 1; done"] }] }],
    ["ana", { name: "eval-sweep", queue: "research", pod_sets: [{ name: "main", count: 4,
      requests: { cpu: "4", memory: "32Gi", "nvidia.com/gpu": "1" },
      command: ["/bin/sh", "-c", "for i in $(seq 1 30); do echo \"shard $PURSER_POD_INDEX batch $i/30\"; " +
        "sleep 1; done; echo \"shard $PURSER_POD_INDEX: accuracy 0.8$PURSER_POD_INDEX\""] }] }],
    ["dana", { name: "notebook", queue: "research", pod_sets: [{ name: "main", count: 1,
      requests: { cpu: "2", memory: "16Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480" } }] }],
    ["bo", { name: "pretrain-70b", queue: "research", pod_sets: [{ name: "workers", count: 4,
      requests: { cpu: "32", memory: "256Gi", "nvidia.com/gpu": "8" } }] }],
    ["carol", { name: "llm-serving", queue: "production", priority_class: "production-inference",
      serve: { route: "llama-fleet", port: servePort, model: "llama-3-8b", health: "/healthz" },
      pod_sets: [{ name: "replicas", count: 2, requests: { cpu: "8", memory: "64Gi", "nvidia.com/gpu": "2" },
        command: ["/bin/sh", "-c", `exec ${resolve(purserBin)} sim llm --listen 127.0.0.1:$PURSER_SERVE_PORT ` +
          "--models $PURSER_SERVE_MODEL --ttft-ms 80 --tokens-per-s 300"] }] }],
  ];
  for (const [who, w] of jobs) {
    try {
      await call("/api/v1/workloads", { method: "POST", key: key(who), body: w });
    } catch (e) {
      if (!/409|already/.test(e.message)) console.error(`demo: ${w.name}: ${e.message}`);
    }
  }
}

const PROMPTS = ["Summarise this incident report", "Draft a reply to the customer", "Explain this stack trace",
  "Write unit tests for the parser", "Translate the release notes", "Review this pull request"];

// Background traffic: people chosen by weight (Dana most), routes at random, a session per person.
function traffic(keys) {
  const pool = keys.flatMap((k) => Array(k.weight).fill(k));
  const routes = ["gpt-4o", "gpt-4o", "gpt-4o-mini", "claude", "llama-fleet"];
  let sent = 0, failed = 0;
  const one = async () => {
    const who = pool[Math.floor(Math.random() * pool.length)];
    const model = routes[Math.floor(Math.random() * routes.length)];
    try {
      await call("/v1/chat/completions", { method: "POST", key: who.key,
        headers: { "X-Purser-Session": `${who.name}-${new Date().getUTCHours()}` },
        body: { model, max_tokens: who.name === "dana" ? 1500 : 300,
                messages: [{ role: "user", content: PROMPTS[Math.floor(Math.random() * PROMPTS.length)] }] } });
      sent++;
    } catch (e) {
      failed++;
    }
  };
  setInterval(one, 1000 / rate);
  setInterval(() => console.log(`demo: traffic: ${sent} requests answered, ${failed} refused (wallets, limits)`), 60_000);
}

async function main() {
  await Promise.all([
    start("sim-openai", ["sim", "llm", "--listen", `127.0.0.1:${openaiPort}`, "--models", "gpt-4o,gpt-4o-mini",
      "--api-keys", "sk-demo-openai", "--ttft-ms", "120", "--tokens-per-s", "400", "--fail-rate", "0.01"]),
    start("sim-anthropic", ["sim", "llm", "--listen", `127.0.0.1:${anthropicPort}`, "--models", "claude-sonnet-4",
      "--api-keys", "sk-demo-anthropic", "--ttft-ms", "200", "--tokens-per-s", "300"]),
  ]);
  mkdirSync(data, { recursive: true });
  const listen = port ? ["--listen", `127.0.0.1:${port}`] : [];
  base = await start("purser", ["serve", "--config", config, "--data", data, ...listen], {
    PURSER_ADMIN_KEY: adminKey,
  });
  const keys = await seed();
  servePort = await freePortPair();
  await submitWorkloads(keys);
  traffic(keys);
  const admin = keys.find((k) => k.role === "tenant-admin" && k.tenant === "acme");
  const dana = keys.find((k) => k.name === "dana");
  console.log(`
demo: the console is at ${base}/
demo:   platform admin key:      ${adminKey}
demo:   acme's tenant admin key: ${admin.key}   (olivia)
demo: in another terminal, paste these lines (the README's "Try it" uses them):
export PURSER_SERVER=${base} PURSER_KEY=${adminKey}
export ACME_KEY=${admin.key} DANA_KEY=${dana.key}
demo: traffic runs at ${rate} requests/s through the gateway; Ctrl-C stops the demo.
demo: the model llama-fleet is served from the fleet (serving/llm-serving, two replicas of
demo:   \`purser sim llm\` on the demo GPUs): call it through the gateway like any other.`);
}

main().catch((e) => {
  console.error(`demo: ${e.message}`);
  stop(1);
});
