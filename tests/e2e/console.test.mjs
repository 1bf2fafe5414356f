// The console in a real browser: served by purser itself, it loads with no outside requests and
// shows the server's live status from the API.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { launchBrowser, startPurser } from "./harness.mjs";

let purser;
let browser;

before(async () => {
  purser = await startPurser();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (purser) {
    const { code } = await purser.stop();
    assert.equal(code, 0, `purser should exit cleanly on SIGTERM:\n${purser.stderr()}`);
  }
});

test("the console shows live server status using only purser's own assets", async () => {
  const page = await browser.newPage();
  const origins = new Set();
  const failures = [];
  page.on("request", (req) => origins.add(new URL(req.url()).origin));
  page.on("pageerror", (err) => failures.push(err.message));
  page.on("console", (msg) => msg.type() === "error" && failures.push(msg.text()));

  const response = await page.goto(purser.url + "/");
  assert.equal(response.status(), 200);
  assert.equal(await page.title(), "Purser");

  await page.locator("#health").filter({ hasText: "healthy" }).waitFor();
  await page.locator("#ready").filter({ hasText: "ready" }).waitFor();
  const installation = await page.locator("#installation").textContent();
  assert.match(installation, /^[0-9a-hjkmnp-tv-z]{26}$/, "installation id from /api/v1/info");
  assert.match(await page.locator("#version").textContent(), /^v\d+\.\d+\.\d+ · /);

  assert.deepEqual([...origins], [purser.url], "every request goes to purser itself");
  assert.deepEqual(failures, [], "no script errors");
});

test("health and metrics answer over plain HTTP from a Node client", async () => {
  const health = await fetch(purser.url + "/healthz");
  assert.equal(health.status, 200);
  assert.equal(await health.text(), "ok\n");
  const metrics = await fetch(purser.url + "/metrics");
  assert.match(metrics.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
  assert.match(await metrics.text(), /^purser_http_connections_total \d+$/m);
  const missing = await fetch(purser.url + "/no/such/page");
  assert.equal(missing.status, 404);
  assert.equal(missing.headers.get("content-type"), "application/problem+json");
  const problem = await missing.json();
  assert.equal(problem.status, 404);
  assert.equal(problem.title, "Not Found");
});
