// The console in a real browser against a real `purser serve` with seeded data: sign-in by role,
// what each role sees, wallet percentages and status colours, keys created and revoked from the
// page, readable errors, nothing typed rendered as HTML, and the first load's size and time.
// Each test saves a screenshot under $PURSER_TEST_OUTPUT (default build/test-output)/console/.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { launchBrowser, startPurser } from "./harness.mjs";

const ADMIN_KEY = "console-test-admin-key-0123456789";
const shots = join(process.env.PURSER_TEST_OUTPUT ?? "build/test-output", "console");
mkdirSync(shots, { recursive: true });

let purser;
let browser;
const seeded = {};

async function call(path, { method = "GET", body, key = ADMIN_KEY } = {}) {
  const res = await fetch(purser.url + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => null);
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
  return data;
}

// Spends `amount` dollars as the owner of `key` (a reservation settled at that cost).
async function spend(key, amount, session) {
  const r = await call("/api/v1/reservations", {
    method: "POST", key, body: { amount, route: "chat", provider: "sim", session_id: session },
  });
  await call(`/api/v1/reservations/${r.id}/settle`, {
    method: "POST", key, body: { cost: amount, status: 200, latency_ms: 120 },
  });
}

async function person(tenant, team, name, role = "member") {
  const u = await call("/api/v1/users", { method: "POST", body: { tenant: tenant.id, team: team.id, name, role } });
  const k = await call("/api/v1/keys", { method: "POST", body: { owner: { kind: "user", id: u.id }, name: `${name}-key` } });
  return { ...u, key: k.key, key_id: k.id };
}

before(async () => {
  purser = await startPurser("", { PURSER_ADMIN_KEY: ADMIN_KEY });
  browser = await launchBrowser();
  // Two tenants. In "acme", Dana spends far more than the rest.
  const acme = await call("/api/v1/tenants", { method: "POST", body: { name: "acme" } });
  const globex = await call("/api/v1/tenants", { method: "POST", body: { name: "globex" } });
  const research = await call("/api/v1/teams", { method: "POST", body: { tenant: acme.id, name: "research" } });
  const other = await call("/api/v1/teams", { method: "POST", body: { tenant: globex.id, name: "labs" } });
  await call("/api/v1/wallets", { method: "POST",
    body: { scope: { kind: "tenant", id: acme.id }, limit: "100.00", period: "monthly", hard: false, alert_at: [50, 80] } });
  const admin = await person(acme, research, "olivia", "tenant-admin");
  const lead = await person(acme, research, "leo", "team-lead");
  const dana = await person(acme, research, "dana");
  const ana = await person(acme, research, "ana");
  const bo = await person(acme, research, "bo");
  const gus = await person(globex, other, "gus");
  for (const [p, limit] of [[dana, "40.00"], [ana, "40.00"], [bo, "40.00"]]) {
    await call("/api/v1/wallets", { method: "POST",
      body: { scope: { kind: "user", id: p.id }, limit, period: "monthly", hard: false, alert_at: [75, 100] } });
  }
  await spend(dana.key, "30.00", "dana-1");
  await spend(dana.key, "20.00", "dana-2");  // 50 of 40: red
  await spend(ana.key, "5.00", "ana-1");      // 12.5 %: green
  await spend(bo.key, "7.00", "bo-1");        // 17.5 %: green; acme: 62 of 100
  await spend(gus.key, "3.00", "gus-1");
  Object.assign(seeded, { acme, globex, research, admin, lead, dana, ana, bo, gus });
});

after(async () => {
  await browser?.close();
  if (purser) {
    const { code } = await purser.stop();
    assert.equal(code, 0, `purser should exit cleanly on SIGTERM:\n${purser.stderr()}`);
  }
});

// A page that records every request's origin, every script error and every API refusal (4xx or
// 5xx); `refusals` lists the statuses a test expects (a revoked key's 401).
async function openPage({ refusals = [] } = {}) {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const watch = { origins: new Set(), errors: [] };
  page.on("request", (req) => watch.origins.add(new URL(req.url()).origin));
  page.on("pageerror", (err) => watch.errors.push(err.message));
  page.on("console", (msg) => msg.type() === "error" &&
    !(refusals.length > 0 && /the server responded with a status of/.test(msg.text())) &&
    watch.errors.push(msg.text()));
  page.on("response", (res) => {
    if (res.status() >= 400 && !refusals.includes(res.status())) {
      watch.errors.push(`${res.request().method()} ${res.url()}: ${res.status()}`);
    }
  });
  return { page, watch };
}

async function signIn(page, key) {
  await page.goto(purser.url + "/");
  await page.locator("#key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function go(page, view) {
  await page.getByRole("navigation").getByRole("link", { name: view }).click();
}

test("the console loads with no outside requests, small and fast, and shows the server status", async () => {
  const { page, watch } = await openPage();
  const started = Date.now();
  const response = await page.goto(purser.url + "/");
  assert.equal(response.status(), 200);
  await page.locator("#key").waitFor();
  const firstView = Date.now() - started;
  assert.equal(await page.title(), "Purser");
  await page.locator("#health").filter({ hasText: "healthy" }).waitFor();
  await page.locator("#ready").filter({ hasText: "ready" }).waitFor();
  assert.match(await page.locator("#installation").textContent(), /^[0-9a-hjkmnp-tv-z]{26}$/);
  assert.match(await page.locator("#version").textContent(), /^v\d+\.\d+\.\d+ · /);
  await page.waitForLoadState("networkidle");
  // What the browser fetched for the first view: the page and every resource (bytes on the wire).
  const bytes = await page.evaluate(() =>
    [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")]
      .reduce((sum, e) => sum + e.transferSize, 0));
  const files = await page.evaluate(() => performance.getEntriesByType("resource").length + 1);
  // Reported, not asserted as a timing: the budget is 500 KB and one second.
  console.log(`console first load: ${files} files, ${(bytes / 1024).toFixed(1)} KiB transferred, ` +
              `sign-in form shown after ${firstView} ms`);
  assert.ok(files >= 10, "the page, its modules, the libraries and the stylesheets were all counted");
  assert.ok(bytes < 500 * 1024, `first load is ${bytes} bytes`);
  assert.deepEqual([...watch.origins], [purser.url], "every request goes to purser itself");
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.screenshot({ path: join(shots, "sign-in.png"), fullPage: true });
  await page.close();
});

test("a Purser whose local pods run unisolated says so in the console and in /readyz", async () => {
  // The first console (isolated pods) shows no warning; this one, told isolation: none, does.
  const plain = await openPage();
  await plain.page.goto(purser.url + "/");
  await plain.page.locator("#ready").filter({ hasText: "ready" }).waitFor();
  assert.equal(await plain.page.locator("#warnings").count(), 0);
  await plain.page.close();
  const unwalled = await startPurser("fleet:\n  local: {isolation: none}\n", { PURSER_ADMIN_KEY: ADMIN_KEY });
  try {
    const ready = await fetch(unwalled.url + "/readyz");
    assert.equal(ready.status, 200);
    assert.match(await ready.text(), /^ready, degraded\nfleet\.local: fleet\.local\.isolation is none/);
    const { page } = await openPage();
    await page.goto(unwalled.url + "/");
    const banner = page.locator("#warnings");
    await banner.filter({ hasText: "isolation is none" }).waitFor();
    assert.match(await banner.textContent(), /run as Purser's own user/);
    await page.screenshot({ path: join(shots, "unisolated-warning.png"), fullPage: true });
    await page.close();
  } finally {
    await unwalled.stop();
  }
});

test("a platform admin sees every tenant, the 62 % wallet, and Dana in red", async () => {
  const { page, watch } = await openPage();
  await signIn(page, ADMIN_KEY);
  const clicked = Date.now();
  await page.locator("#whoami").filter({ hasText: "platform-admin" }).waitFor();
  const acme = page.locator(`[data-scope="tenant:${seeded.acme.id}"]`);
  await acme.locator(".pct").filter({ hasText: "62% used" }).waitFor();
  console.log(`console overview with data shown ${Date.now() - clicked} ms after signing in`);
  await page.locator(`[data-scope="tenant:${seeded.globex.id}"]`).waitFor();
  await page.screenshot({ path: join(shots, "platform-overview.png"), fullPage: true });

  await go(page, "People");
  await page.locator("select").selectOption(seeded.acme.id);
  const row = (name) => page.locator("tr", { has: page.locator(".name", { hasText: new RegExp(`^${name}$`) }) });
  await row("dana").locator('[data-status="red"]').waitFor();
  for (const name of ["ana", "bo"]) {
    assert.equal(await row(name).locator(".dot").getAttribute("data-status"), "green", name);
  }
  assert.match(await row("dana").textContent(), /125%/);
  // Her spend by session.
  await row("dana").click();
  await page.getByRole("region", { name: "dana in detail" }).getByText("dana-2").waitFor();
  await page.screenshot({ path: join(shots, "platform-people.png"), fullPage: true });

  await go(page, "Audit");
  // Names, not ids: who did it, what to, and what was made, in words; a page at a time.
  const entries = page.getByRole("table", { name: "Audit entries" });
  await entries.getByText("user dana's wallet").first().waitFor();
  await entries.locator("tr", { hasText: "user.create" }).filter({ hasText: "olivia" }).first()
    .getByText("tenant-admin").first().waitFor();
  const rows = await entries.locator("tbody tr").count();
  assert.ok(rows > 0 && rows <= 25, `${rows} entries on the first page`);
  assert.doesNotMatch(await entries.innerText(), new RegExp(seeded.dana.id), "no raw ids shown");
  assert.equal(await page.getByRole("button", { name: "Newest" }).first().isDisabled(), true);
  await page.getByRole("button", { name: "Verify the chain" }).click();
  await page.locator("#verdict").filter({ hasText: "intact" }).waitFor();
  await page.screenshot({ path: join(shots, "platform-audit.png"), fullPage: true });
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();
});

test("a tenant admin sees only its own tenant, in every view", async () => {
  const { page, watch } = await openPage();
  await signIn(page, seeded.admin.key);
  await page.locator("#whoami").filter({ hasText: "tenant-admin" }).waitFor();
  await page.locator(".pct").filter({ hasText: "62% used" }).waitFor();
  assert.equal(await page.locator("[data-scope]").count(), 1, "one tenant on the overview");
  // Each view, once it shows its own heading and something of acme's (or, where the view has
  // no tenant data, its settled content), must not mention globex, its team or its people.
  const views = [
    ["Overview", "Overview", "acme"], ["People", "People", "dana"], ["Models", "Models", "Traffic since"],
    ["GPU pools", "GPU pools", "declares no nodes"], ["Queues", "Queues and workloads", "No ClusterQueues"],
    ["Keys", "Keys", "dana-key"], ["Audit", "Audit log", "user.create"]];
  for (const [view, heading, marker] of views) {
    await go(page, view);
    await page.locator("#view h2").filter({ hasText: heading }).waitFor();
    await page.locator("#view").filter({ hasText: marker }).waitFor();
    const text = await page.locator("body").textContent();
    for (const secret of ["globex", "gus", "labs"]) {
      assert.ok(!text.includes(secret), `${view} shows "${secret}"`);
    }
    if (view === "People") {
      await page.locator('[data-status="red"]').first().waitFor();
      await page.screenshot({ path: join(shots, "tenant-people.png"), fullPage: true });
    }
  }
  assert.ok(await page.getByRole("table", { name: "Audit entries" }).locator("tbody tr").count() > 0,
    "the tenant's own audit entries are listed");
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();
});

test("a team lead sees its team: no tenant wallet, no audit log, no other tenant", async () => {
  const { page, watch } = await openPage();
  await signIn(page, seeded.lead.key);
  await page.locator("#whoami").filter({ hasText: "team-lead" }).waitFor();
  await page.locator(`[data-scope="team:${seeded.research.id}"]`).waitFor();
  assert.equal(await page.locator(`[data-scope^="tenant:"]`).count(), 0);
  assert.equal(await page.getByRole("navigation").getByRole("link", { name: "Audit" }).count(), 0);
  await go(page, "People");
  await page.locator('[data-status="red"]').first().waitFor();
  const text = await page.locator("body").textContent();
  for (const name of ["dana", "ana", "bo"]) assert.ok(text.includes(name), name);
  assert.ok(!text.includes("globex") && !text.includes("gus"));
  await page.screenshot({ path: join(shots, "team-lead-people.png"), fullPage: true });
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();
});

test("keys are created and revoked from the page; typed text is never HTML", async () => {
  const { page, watch } = await openPage();
  await signIn(page, seeded.admin.key);
  await go(page, "Keys");
  const name = "<b id=injected>ci-bot</b>";
  await page.locator("#key-name").fill(name);
  await page.getByRole("button", { name: "Create key" }).click();
  const secret = await page.locator("#new-secret").textContent();
  assert.match(secret, /^pk-/);
  await page.getByRole("cell", { name, exact: true }).waitFor();
  assert.equal(await page.locator("#injected").count(), 0, "the name is shown as text");
  // The new key works.
  const me = await call("/api/v1/whoami", { key: secret });
  assert.equal(me.name, "olivia");
  await page.screenshot({ path: join(shots, "key-created.png"), fullPage: true });

  page.once("dialog", (d) => d.accept());
  await page.getByRole("button", { name: `Revoke ${name}` }).click();
  const row = page.locator("tr", { has: page.getByRole("cell", { name, exact: true }) });
  await row.locator(".pill.bad").filter({ hasText: "revoked" }).waitFor();
  assert.equal(await page.locator("#injected").count(), 0, "still text after the revoke");
  const keys = await call("/api/v1/keys");
  assert.ok(keys.data.find((k) => k.name === name).revoked_at, "revoked in the API too");
  await page.screenshot({ path: join(shots, "key-revoked.png"), fullPage: true });
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();

  // Signing in with the revoked key is a readable error, not a broken page.
  const second = await openPage({ refusals: [401] });
  await signIn(second.page, secret);
  const error = second.page.locator("#signin-error");
  await error.waitFor();
  assert.match(await error.textContent(), /not accepted/);
  await second.page.screenshot({ path: join(shots, "revoked-sign-in.png"), fullPage: true });
  assert.deepEqual(second.watch.errors, [], "no script errors");
  await second.page.close();
});

test("an expired key gets a sign-in error; an API refusal is shown in words", async () => {
  const expiring = await call("/api/v1/keys", { method: "POST",
    body: { owner: { kind: "user", id: seeded.ana.id }, name: "short-lived",
            expires_at: new Date(Date.now() + 1500).toISOString() } });
  await new Promise((r) => setTimeout(r, 2000));
  const { page, watch } = await openPage({ refusals: [401, 409] });
  await signIn(page, expiring.key);
  await page.locator("#signin-error").filter({ hasText: "not accepted" }).waitFor();
  await page.screenshot({ path: join(shots, "expired-sign-in.png"), fullPage: true });

  // Rotating a key that was revoked behind the page's back: the server's reason, as text.
  const doomed = await call("/api/v1/keys", { method: "POST",
    body: { owner: { kind: "user", id: seeded.admin.id }, name: "doomed" } });
  await signIn(page, seeded.admin.key);
  await go(page, "Keys");
  await page.getByRole("cell", { name: "doomed", exact: true }).waitFor();
  await call(`/api/v1/keys/${doomed.id}`, { method: "DELETE" });
  await page.getByRole("button", { name: "Rotate doomed" }).click();
  await page.getByRole("alert").filter({ hasText: "a revoked key cannot be rotated" }).waitFor();
  await page.screenshot({ path: join(shots, "api-error.png"), fullPage: true });
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();
});

// Last: it changes the seeded spend.
test("the overview follows new spend without a reload", async () => {
  const { page, watch } = await openPage();
  await signIn(page, seeded.admin.key);
  const pct = page.locator(".pct");
  await pct.filter({ hasText: "62% used" }).waitFor();
  await spend(seeded.ana.key, "1.00", "ana-2");
  await pct.filter({ hasText: "63% used" }).waitFor({ timeout: 15_000 });
  await page.screenshot({ path: join(shots, "overview-live.png"), fullPage: true });
  assert.deepEqual(watch.errors, [], "no script errors");
  await page.close();
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
