// The console's Models view in a real browser, for a route whose server Purser scrapes: each
// target's state with its reason, queue, KV cache and time to first token, and a card with the
// server's queue and KV cache over time — and the same facts over the API.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { launchBrowser, startPurser, startSim } from "./harness.mjs";

const ADMIN_KEY = "models-test-admin-key-0123456789";
const shots = join(process.env.PURSER_TEST_OUTPUT ?? "build/test-output", "console");
mkdirSync(shots, { recursive: true });

let purser;
let sim;
let browser;

async function get(path) {
  const res = await fetch(purser.url + path, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
  return { status: res.status, body: await res.json().catch(() => null) };
}

// Polls `check` (bounded) until it returns something truthy.
async function until(check, what) {
  for (let i = 0; i < 300; i++) {
    const v = await check();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`never: ${what}`);
}

before(async () => {
  sim = await startSim(["--models", "m", "--ttft-ms", "0", "--tokens-per-s", "0"]);
  purser = await startPurser(
    `providers:\n  - {name: gpu-a, kind: openai, base_url: ${sim.url}/v1, metrics_url: ${sim.url}/metrics}\n` +
    `routes:\n  - {model: chat, strategy: slo, targets: [{provider: gpu-a, model: m}]}\n` +
    `observe: {interval: 100ms}\n`,
    { PURSER_ADMIN_KEY: ADMIN_KEY });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (purser) {
    const { code } = await purser.stop();
    assert.equal(code, 0, `purser should exit cleanly on SIGTERM:\n${purser.stderr()}`);
  }
  await sim?.stop();
});

test("a scraped target's state, facts and history come over the API", async () => {
  const target = await until(async () => {
    const t = (await get("/api/v1/routes")).body.data[0].targets[0];
    return t.state === "healthy" ? t : null;
  }, "gpu-a healthy");
  assert.equal(target.reason, "within its objectives");
  assert.equal(target.queue, 0);
  assert.equal(target.kv_cache_usage, 0);
  assert.ok(target.observed_at);
  const series = await until(async () => {
    const s = (await get("/api/v1/targets/gpu-a/series?since=5m")).body;
    return s.queue.length >= 2 ? s : null;
  }, "two scrapes of history");
  assert.equal(series.provider, "gpu-a");
  assert.ok(series.kv_cache_usage.length >= 2);
  assert.deepEqual(series.queue.at(-1).length, 2, "[unix seconds, value]");
  assert.equal((await get("/api/v1/targets/nobody/series")).status, 404);
  assert.equal((await get("/api/v1/targets/gpu-a/series?since=forever")).status, 400);
});

test("the Models view shows each scraped server's state and a chart of its queue and KV cache", async () => {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  await page.goto(purser.url + "/");
  await page.locator("#key").fill(ADMIN_KEY);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation").getByRole("link", { name: "Models" }).click();
  const row = page.getByRole("row").filter({ hasText: "gpu-a · m" });
  await row.locator(".state-healthy").waitFor();
  assert.equal(await row.locator(".state-healthy").getAttribute("title"), "within its objectives");
  const card = page.locator('.target-charts[data-provider="gpu-a"]');
  await card.locator('[aria-label="gpu-a · m requests waiting"]').waitFor();
  await card.locator('[aria-label="gpu-a · m KV cache"]').waitFor();
  await page.screenshot({ path: join(shots, "models.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test("Why? on a route opens its diagnosis, read-only, with the window it looked at", async () => {
  // Over the API first: the same answer the button shows, with the question echoed.
  const answer = await until(async () => {
    const r = await get("/api/v1/diagnose?kind=route&name=chat&symptom=slow&since=5m");
    return r.status === 200 ? r.body : null;
  }, "a diagnosis of route chat");
  assert.deepEqual(answer.question, { kind: "route", name: "chat", symptom: "slow" });
  assert.ok(answer.findings.length >= 1);
  assert.equal((await get("/api/v1/diagnose?kind=route&name=chat&symptom=sad")).status, 400);

  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  await page.goto(purser.url + "/");
  await page.locator("#key").fill(ADMIN_KEY);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation").getByRole("link", { name: "Models" }).click();
  const row = page.getByRole("row").filter({ hasText: "chat" }).first();
  await row.getByRole("button", { name: "Why?" }).click();
  const panel = page.getByRole("region", { name: "Diagnosis of chat" });
  await panel.locator(".finding").first().waitFor();
  assert.match(await panel.textContent(), /read-only, nothing was changed/);
  assert.ok((await panel.locator(".finding").count()) >= 1);
  await page.screenshot({ path: join(shots, "models-why.png"), fullPage: true });
  // A second click closes it.
  await row.getByRole("button", { name: "Why?" }).click();
  assert.equal(await panel.count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});
