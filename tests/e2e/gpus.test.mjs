// The GPU pools view with utilisation, in a real browser: `purser serve` with a node of two GPUs
// scraping a `purser sim dcgm` exporter whose Hostname is that node; a notebook holding one GPU
// and leaving it idle shows under "Allocated but idle", each GPU shows its utilisation, and once
// the notebook's GPU is busy the section says no allocation is idle.
// Saves screenshots under $PURSER_TEST_OUTPUT (default build/test-output)/console/.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { launchBrowser, startDcgmSim, startPurser } from "./harness.mjs";

const ADMIN_KEY = "gpus-test-admin-key-0123456789";
const shots = join(process.env.PURSER_TEST_OUTPUT ?? "build/test-output", "console");
mkdirSync(shots, { recursive: true });

const FLEET = `apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: ml, name: research}
spec: {clusterQueue: research}
`;

let dcgm, purser, browser, key, gpu;

async function call(path, { method = "GET", body, as = ADMIN_KEY } = {}) {
  const res = await fetch(purser.url + path, {
    method,
    headers: { Authorization: `Bearer ${as}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => null);
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
  return data;
}

async function setUtil(index, util) {
  const res = await fetch(`${dcgm.url}/sim/gpus`, { method: "POST", body: JSON.stringify({ gpu: index, util }) });
  assert.equal(res.status, 200);
}

before(async () => {
  dcgm = await startDcgmSim(["--hostname", "node-1", "--gpus", "2"]);
  const dir = mkdtempSync(join(tmpdir(), "purser-gpus-"));
  writeFileSync(join(dir, "fleet.yaml"), FLEET);
  purser = await startPurser(
    `observe:
  exporters: [{name: node-1-dcgm, url: "${dcgm.url}/metrics", interval: 200ms}]
fleet:
  manifests: [${join(dir, "fleet.yaml")}]
  metering_interval: 1s
  nodes:
    - {name: node-1, cpu: 64, memory: 512Gi, gpus: {count: 2, model: H100-SXM-80GB, memory: 80Gi}}
`,
    { PURSER_ADMIN_KEY: ADMIN_KEY },
  );
  const acme = await call("/api/v1/tenants", { method: "POST", body: { name: "acme" } });
  const ml = await call("/api/v1/teams", { method: "POST", body: { tenant: acme.id, name: "ml" } });
  const dana = await call("/api/v1/users", { method: "POST", body: { tenant: acme.id, team: ml.id, name: "dana" } });
  key = (await call("/api/v1/keys", { method: "POST", body: { owner: { kind: "user", id: dana.id }, name: "dana-key" } })).key;
  // A notebook that holds a GPU and runs nothing on it.
  const w = await call("/api/v1/workloads", {
    method: "POST", as: key,
    body: { name: "notebook", queue: "research", pod_sets: [{ name: "main", count: 1, requests: { "nvidia.com/gpu": "1" } }] },
  });
  assert.equal(w.state, "admitted", JSON.stringify(w));
  gpu = w.admission.pod_sets[0].placements[0].gpus[0];
  await setUtil(gpu, 4);
  await setUtil(1 - gpu, 70);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (purser) assert.equal((await purser.stop()).code, 0, purser.stderr());
  await dcgm?.stop();
});

test("the GPU pools view shows each GPU's utilisation and the allocations that are idle", async () => {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  page.on("console", (msg) => msg.type() === "error" && errors.push(msg.text()));
  await page.goto(purser.url + "/");
  await page.locator("#key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation").getByRole("link", { name: "GPU pools" }).click();
  await page.locator("#view h2").filter({ hasText: "GPU pools" }).waitFor();

  // Each GPU box: its figure and bar (views refresh every five seconds).
  const node = page.locator('section.node[aria-label="node-1"]');
  const box = (index) => node.locator(".gpu").nth(index);
  await box(gpu).locator(".util-text").filter({ hasText: "util 4 %" }).waitFor({ timeout: 30_000 });
  await box(1 - gpu).locator(".util-text").filter({ hasText: "util 70 %" }).waitFor({ timeout: 30_000 });
  assert.equal(await box(gpu).locator(".slice[data-workload]").first().getAttribute("data-workload"), "ml/notebook");

  // The notebook is allocated but idle, with its GPU.
  const idle = page.locator('[aria-label="Allocated but idle"]');
  const item = idle.locator('.idle-item[data-workload="ml/notebook"]');
  await item.waitFor({ timeout: 30_000 });
  assert.match(await item.innerText(), new RegExp(`node-1 GPU ${gpu} at 4 %`));
  await page.getByRole("table", { name: "GPU efficiency" }).getByRole("row").filter({ hasText: "ml/notebook" })
    .waitFor({ timeout: 30_000 });
  await page.screenshot({ path: join(shots, "gpus-idle.png"), fullPage: true });

  // Busy again: nothing is idle.
  await setUtil(gpu, 95);
  await idle.filter({ hasText: "No allocation is idle." }).waitFor({ timeout: 60_000 });
  await page.screenshot({ path: join(shots, "gpus-busy.png"), fullPage: true });
  assert.deepEqual(errors, [], "no script errors");
  await page.close();
});

test("with no utilisation reported for the GPUs held, the view says idle is unknown, not that none is", async () => {
  const dir = mkdtempSync(join(tmpdir(), "purser-gpus-blind-"));
  writeFileSync(join(dir, "fleet.yaml"), FLEET);
  const blind = await startPurser(
    `fleet:
  manifests: [${join(dir, "fleet.yaml")}]
  nodes:
    - {name: node-1, cpu: 64, memory: 512Gi, gpus: {count: 2, model: H100-SXM-80GB, memory: 80Gi}}
`,
    { PURSER_ADMIN_KEY: ADMIN_KEY },
  );
  try {
    const post = async (path, body, as = ADMIN_KEY) => {
      const res = await fetch(blind.url + path, { method: "POST",
        headers: { Authorization: `Bearer ${as}`, "Content-Type": "application/json" }, body: JSON.stringify(body) });
      assert.ok(res.ok, `${path}: ${res.status}`);
      return res.json();
    };
    const acme = await post("/api/v1/tenants", { name: "acme" });
    const ml = await post("/api/v1/teams", { tenant: acme.id, name: "ml" });
    const dana = await post("/api/v1/users", { tenant: acme.id, team: ml.id, name: "dana" });
    const danaKey = (await post("/api/v1/keys", { owner: { kind: "user", id: dana.id }, name: "k" })).key;
    const w = await post("/api/v1/workloads", { name: "notebook", queue: "research",
      pod_sets: [{ name: "main", count: 1, requests: { "nvidia.com/gpu": "1" } }] }, danaKey);
    assert.equal(w.state, "admitted");
    const page = await browser.newPage();
    await page.goto(blind.url + "/");
    await page.locator("#key").fill(danaKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("navigation").getByRole("link", { name: "GPU pools" }).click();
    await page.locator("#idle-none").filter({ hasText: "Unknown: no utilisation is reported" })
      .waitFor({ timeout: 30_000 });
    // Queues: the admitted notebook with its state, and why a workload too big to fit waits.
    const big = await post("/api/v1/workloads", { name: "big", queue: "research",
      pod_sets: [{ name: "main", count: 1, requests: { "nvidia.com/gpu": "8" } }] }, danaKey);
    assert.equal(big.state, "pending");
    const errors = [];
    page.on("response", (r) => r.status() >= 400 && errors.push(`${r.url()}: ${r.status()}`));
    await page.getByRole("navigation").getByRole("link", { name: "Queues" }).click();
    await page.getByRole("table", { name: "Admitted workloads" }).getByRole("row")
      .filter({ hasText: "notebook" }).filter({ hasText: "admitted" }).waitFor({ timeout: 30_000 });
    await page.getByRole("button", { name: "ml/big", exact: true }).click();
    await page.locator("ul.why li").filter({ hasText: "insufficient unused quota" }).first()
      .waitFor({ timeout: 30_000 });
    // The diagnosis asks for the workload by its own name (not "ml/ml/big").
    await page.locator(".workload").filter({ hasText: "ml/big" }).getByRole("button", { name: "Why?" }).click();
    await page.getByRole("region", { name: "Diagnosis of ml/big" }).locator("p.muted.small")
      .waitFor({ timeout: 30_000 });
    assert.deepEqual(errors, [], "no request refused");
    await page.close();
  } finally {
    await blind.stop();
  }
});
