// The REST views the console reads, against purser serve in front of purser sim llm, called as
// the console calls them: who a key is, the routes with their traffic, the audit log filtered,
// and ClusterQueues filtered to what a tenant may use.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import OpenAI from "openai";

import { startPurser, startSim } from "./harness.mjs";

const ADMIN = "console-api-admin-key-0123456789";
let purser, sim;
const keys = {};

async function get(path, key = ADMIN) {
  const r = await fetch(purser.url + path, { headers: { authorization: `Bearer ${key}` } });
  return { status: r.status, body: await r.json() };
}
async function post(path, body, key = ADMIN) {
  const r = await fetch(purser.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = await r.json();
  assert.ok(r.ok, `${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

const FLEET = `apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: acme-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: globex-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: research, name: main}
spec: {clusterQueue: acme-queue}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: labs, name: main}
spec: {clusterQueue: globex-queue}
`;

before(async () => {
  sim = await startSim(["--ttft-ms", "5", "--tokens-per-s", "5000", "--api-keys", "sk-sim"]);
  const dir = mkdtempSync(join(tmpdir(), "purser-console-api-"));
  writeFileSync(join(dir, "fleet.yaml"), FLEET);
  purser = await startPurser(
    `providers:
  - {name: sim, kind: openai, base_url: ${sim.url}/v1, api_keys: [sk-sim]}
routes:
  - {model: chat, targets: [{provider: sim, model: sim-small}]}
  - {model: spare, targets: [{provider: sim, model: sim-large}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "1.00", output_per_mtok: "2.00"}
fleet:
  manifests: [${join(dir, "fleet.yaml")}]
`,
    { PURSER_ADMIN_KEY: ADMIN },
  );
  const acme = await post("/api/v1/tenants", { name: "acme" });
  const globex = await post("/api/v1/tenants", { name: "globex" });
  const research = await post("/api/v1/teams", { tenant: acme.id, name: "research" });
  const labs = await post("/api/v1/teams", { tenant: globex.id, name: "labs" });
  for (const [name, tenant, team, role] of [["olivia", acme, research, "tenant-admin"],
    ["dana", acme, research, "member"], ["gus", globex, labs, "member"]]) {
    const u = await post("/api/v1/users", { tenant: tenant.id, team: team.id, name, role });
    keys[name] = (await post("/api/v1/keys", { owner: { kind: "user", id: u.id }, name: `${name}-key` })).key;
  }
  const openai = new OpenAI({ apiKey: keys.dana, baseURL: `${purser.url}/v1`, maxRetries: 0 });
  for (let i = 0; i < 5; i++) {
    await openai.chat.completions.create({ model: "chat", max_tokens: 20,
      messages: [{ role: "user", content: `question ${i}` }] });
  }
  const other = new OpenAI({ apiKey: keys.gus, baseURL: `${purser.url}/v1`, maxRetries: 0 });
  await other.chat.completions.create({ model: "chat", max_tokens: 20, messages: [{ role: "user", content: "hi" }] });
});

after(async () => {
  if (purser) assert.equal((await purser.stop()).code, 0, purser.stderr());
  await sim?.stop();
});

test("whoami names the key's person, role, tenant and team", async () => {
  const admin = await get("/api/v1/whoami");
  assert.equal(admin.status, 200);
  assert.equal(admin.body.role, "platform-admin");
  assert.equal(admin.body.tenant, null);
  const dana = (await get("/api/v1/whoami", keys.dana)).body;
  assert.equal(dana.name, "dana");
  assert.equal(dana.role, "member");
  assert.equal(dana.tenant.name, "acme");
  assert.equal(dana.team.name, "research");
  const bad = await get("/api/v1/whoami", "pk-nope-nope");
  assert.equal(bad.status, 401);
  assert.ok(bad.body.detail, "a readable reason");
});

test("routes carry their targets' health and traffic, scoped to the caller", async () => {
  const all = (await get("/api/v1/routes")).body;
  assert.equal(all.scope, "platform");
  const chat = all.data.find((r) => r.alias === "chat");
  assert.equal(chat.stats.requests, 6, "both tenants' requests");
  assert.equal(chat.stats.errors, 0);
  assert.ok(chat.stats.latency_ms.p50 > 0 && chat.stats.latency_ms.p95 >= chat.stats.latency_ms.p50);
  assert.ok(Number(chat.stats.cost) > 0);
  assert.ok(Number(chat.stats.cost_per_1k_requests) > 0);
  assert.equal(chat.targets[0].provider, "sim");
  assert.equal(chat.targets[0].health, "healthy");
  // Not scraped (no metrics_url): its state is its traffic's, and no server facts are claimed.
  assert.equal(chat.targets[0].state, "healthy");
  assert.equal(chat.targets[0].reason, "its requests succeed");
  assert.equal(chat.targets[0].queue, null);
  assert.equal(chat.targets[0].kv_cache_usage, null);
  assert.equal(chat.targets[0].observed_at, null);
  assert.equal(chat.targets[0].stats.requests, 6);
  const spare = all.data.find((r) => r.alias === "spare");
  assert.equal(spare.stats.requests, 0);
  assert.equal(spare.stats.latency_ms.p50, null);
  assert.equal(spare.targets[0].health, "unknown");
  assert.equal(spare.targets[0].state, "unknown");

  const team = (await get("/api/v1/routes", keys.dana)).body;
  assert.equal(team.scope, "team");
  assert.equal(team.data.find((r) => r.alias === "chat").stats.requests, 5, "only the team's traffic");
  const tenant = (await get("/api/v1/routes", keys.olivia)).body;
  assert.equal(tenant.scope, "tenant");
  assert.equal(tenant.data.find((r) => r.alias === "chat").stats.requests, 5);
  const later = (await get(`/api/v1/routes?from=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).body;
  assert.equal(later.data.find((r) => r.alias === "chat").stats.requests, 0);
  const bad = await get("/api/v1/routes?from=yesterday");
  assert.equal(bad.status, 400);
});

test("the audit log filters by action and actor, newest first", async () => {
  const keysMade = (await get("/api/v1/audit?action=key.&order=desc")).body.data;
  assert.ok(keysMade.length >= 3);
  assert.ok(keysMade.every((e) => e.action.startsWith("key.")), JSON.stringify(keysMade.map((e) => e.action)));
  for (let i = 1; i < keysMade.length; i++) assert.ok(keysMade[i - 1].seq > keysMade[i].seq);
  const tenants = (await get("/api/v1/audit?action=tenant.create")).body.data;
  assert.equal(tenants.length, 2);
  assert.ok(tenants[0].seq < tenants[1].seq, "oldest first by default");
  const byActor = (await get(`/api/v1/audit?actor=${tenants[0].actor}&action=team.create`)).body.data;
  assert.equal(byActor.length, 2);
  const bad = await get("/api/v1/audit?order=sideways");
  assert.equal(bad.status, 400);
  assert.match(bad.body.detail, /asc .* desc/);
  // A tenant admin reads only its tenant's entries.
  const olivia = (await get("/api/v1/audit?action=team.create", keys.olivia)).body.data;
  assert.equal(olivia.length, 1);
});

test("ClusterQueues are listed only to those whose teams may use them", async () => {
  const names = async (key) => (await get("/api/v1/queues", key)).body.data.map((q) => q.name).sort();
  assert.deepEqual(await names(ADMIN), ["acme-queue", "globex-queue"]);
  assert.deepEqual(await names(keys.olivia), ["acme-queue"]);
  assert.deepEqual(await names(keys.dana), ["acme-queue"]);
  assert.deepEqual(await names(keys.gus), ["globex-queue"]);
});
