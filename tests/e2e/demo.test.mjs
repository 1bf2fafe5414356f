// `make run`'s demo (scripts/demo.mjs with examples/demo.yaml), on free ports: within seconds it
// has tenants, people over, near and under their wallets, 30 days of spend, GPU workloads admitted and waiting, and
// traffic through every route — what a newcomer's console shows. It runs in a process group of
// its own, and stops as it does in a terminal: Ctrl-C signals the whole group, and a request in
// flight still completes.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { purserBinary } from "./harness.mjs";

const ADMIN = "demo-test-admin-key-0123456789";
let demo, dir, url, exited, printed;

const freePort = () => new Promise((resolve) => {
  const s = createServer();
  s.listen(0, "127.0.0.1", () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

async function get(path, key = ADMIN) {
  const r = await fetch(url + path, { headers: { authorization: `Bearer ${key}` } });
  assert.ok(r.ok, `${path}: ${r.status}`);
  return r.json();
}

// Polls `check` until it returns something truthy (or 30 s pass).
async function eventually(check, what) {
  for (let i = 0; i < 150; i++) {
    const v = await check();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`the demo never showed ${what}`);
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "purser-demo-"));
  const [openai, anthropic] = [await freePort(), await freePort()];
  const config = readFileSync("examples/demo.yaml", "utf8")
    .replace(/^listen: .*$/m, "listen: 127.0.0.1:0")
    .replaceAll("127.0.0.1:8101", `127.0.0.1:${openai}`)
    .replaceAll("127.0.0.1:8102", `127.0.0.1:${anthropic}`);
  writeFileSync(join(dir, "demo.yaml"), config);
  copyFileSync("examples/fleet.yaml", join(dir, "fleet.yaml"));
  demo = spawn("node", ["scripts/demo.mjs", "--purser", purserBinary, "--config", join(dir, "demo.yaml"),
    "--data", join(dir, "var"), "--admin-key", ADMIN, "--rate", "10",
    "--openai-port", String(openai), "--anthropic-port", String(anthropic)],
  { stdio: ["ignore", "pipe", "pipe"], detached: true });
  let out = "", err = "";
  demo.stderr.on("data", (d) => (err += d));
  exited = new Promise((resolve) => demo.on("exit", (code) => resolve(code)));
  url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the demo did not start:\n${out}\n${err}`)), 90_000);
    demo.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/the console is at (http\S+)\//);
      if (m && out.includes("tenant admin key") && /^export ACME_KEY=.*\n/m.test(out)) {
        clearTimeout(timer);
        printed = out;
        resolve(m[1]);
      }
    });
    demo.on("exit", () => reject(new Error(`the demo exited:\n${out}\n${err}`)));
  });
});

after(async () => {
  if (demo) process.kill(-demo.pid, "SIGKILL");  // only if the last test did not stop it
  rmSync(dir, { recursive: true, force: true });
});

test("the demo fills every view with live data within seconds", async () => {
  const tenants = (await get("/api/v1/tenants")).data.map((t) => t.name).sort();
  assert.deepEqual(tenants, ["acme", "globex"]);
  // Dana is far over her wallet, Ana past her first alert (75 %), the others well within.
  const users = Object.fromEntries((await get("/api/v1/users")).data.map((u) => [u.id, u.name]));
  const wallets = (await get("/api/v1/wallets")).data;
  const pct = (name) => Number(wallets.find((w) => users[w.scope.id] === name).percent_used);
  assert.ok(pct("dana") > 100, `dana at ${pct("dana")} %`);
  assert.ok(pct("ana") >= 75 && pct("ana") < 100, `ana at ${pct("ana")} %`);
  for (const name of ["bo", "carol"]) assert.ok(pct(name) < 75, `${name} at ${pct(name)} %`);
  // Spend has a history: most of the last 30 days, and most hours of the last day.
  const acme = (await get("/api/v1/tenants")).data.find((t) => t.name === "acme").id;
  const since = (hours) => encodeURIComponent(new Date(Date.now() - hours * 3600e3).toISOString());
  const days = (await get(`/api/v1/spend?scope=tenant:${acme}&group_by=day&from=${since(30 * 24)}`)).data;
  assert.ok(days.length >= 25, `spend on ${days.length} of the last 30 days`);
  const hours = (await get(`/api/v1/spend?scope=tenant:${acme}&group_by=hour&from=${since(24)}`)).data;
  assert.ok(hours.length >= 12, `spend in ${hours.length} of the last 24 hours`);
  // GPU workloads: some admitted onto the nodes, one waiting with a reason.
  const workloads = (await get("/api/v1/workloads")).data;
  assert.equal(workloads.length, 5);
  // Placed and holding their GPUs: running (the fine-tune and the sweep run as processes) or
  // admitted (what runs nothing holds its quota).
  const admitted = workloads.filter((w) => w.state === "admitted" || w.state === "running");
  assert.ok(admitted.length >= 3, JSON.stringify(workloads.map((w) => [w.name, w.state, w.reason])));
  assert.ok(workloads.some((w) => w.name === "ml/llama-finetune" && w.state === "running" && w.started_at),
    "the fine-tune runs");
  assert.ok(admitted.every((w) => w.admission.pod_sets.every((p) => p.placements.length === p.count)));
  assert.ok(workloads.some((w) => w.state === "pending" && w.reason), "one waits, with a reason");
  // The served model's two replicas join their route once healthy.
  await eventually(async () => {
    const fleet = (await get("/api/v1/routes")).data.find((r) => r.alias === "llama-fleet");
    return fleet && fleet.targets.filter((t) => t.served).length === 2;
  }, "the served model's replicas in their route");
  // Traffic through every route, the served one too.
  await eventually(async () => {
    const routes = (await get("/api/v1/routes")).data;
    return routes.length === 4 && routes.every((r) => r.stats.requests > 0);
  }, "traffic on every route");
  const nodes = await get("/api/v1/fleet/nodes");
  assert.equal(nodes.data.length, 3);
});

test("the README's Try it works as written: the printed exports, the CLI, examples/job.yaml", async () => {
  // The lines the demo printed for pasting, read as a shell would.
  const env = { ...process.env };
  for (const line of printed.split("\n").filter((l) => l.startsWith("export "))) {
    for (const pair of line.slice("export ".length).trim().split(/\s+/)) {
      const eq = pair.indexOf("=");
      env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
  }
  for (const name of ["PURSER_SERVER", "PURSER_KEY", "ACME_KEY", "DANA_KEY"]) {
    assert.ok(env[name], `the demo printed no ${name}:\n${printed}`);
  }
  assert.equal(env.PURSER_SERVER, url);
  const purser = (args, extra = {}) =>
    execFileSync(purserBinary, args, { env: { ...env, ...extra }, encoding: "utf8" });
  assert.match(purser(["tenants"]), /acme/);
  purser(["submit", "-f", "examples/job.yaml"], { PURSER_KEY: env.DANA_KEY });
  const shown = purser(["workloads", "get", "ml/hello-gpus"]);
  assert.match(shown, /^Name: ml\/hello-gpus$/m);
  assert.match(shown, /^State: (pending|admitted|running|succeeded)$/m);
  // The curl of the README: the fleet-served model, as acme's tenant admin.
  const res = await fetch(`${env.PURSER_SERVER}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${env.ACME_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "llama-fleet", messages: [{ role: "user", content: "hi" }] }),
  });
  assert.equal(res.status, 200, await res.text());
});

test("Ctrl-C, as a terminal sends it to the whole group, drains the requests in flight", async () => {
  const keys = JSON.parse(readFileSync(join(dir, "var", "demo-keys.json"), "utf8"));
  const bo = keys.find((k) => k.name === "bo");  // well within his wallet
  // A stream of 600 tokens at the simulated 400 tokens/s: in flight for over a second once its
  // header is here.
  const res = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${bo.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", stream: true, max_tokens: 600,
      messages: [{ role: "user", content: "a long answer, please" }] }),
  });
  assert.equal(res.status, 200);
  process.kill(-demo.pid, "SIGINT");  // the terminal's Ctrl-C: every process of the group
  const body = await res.text();
  assert.ok(body.includes("[DONE]"), "the stream in flight completed");
  assert.equal(await exited, 0, "the demo stops cleanly on Ctrl-C");
  demo = undefined;
});
