// Single sign-on in a real browser: Purser as an OpenID Connect relying party of a certified
// provider (oidc-provider, tests/e2e/oidc_provider.mjs) on loopback. Sign-in with PKCE, four
// groups mapped to four roles (and a role changed at the next sign-in), an unmapped person
// refused with nothing created, the session cookie's flags, CSRF refused, sign-out, a disabled
// user's session ended, a tampered state, nonce and ID token refused, and `purser login --oidc`
// (the device grant) from the CLI. Screenshots under $PURSER_TEST_OUTPUT/sso/.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { launchBrowser, purserBinary, startPurser } from "./harness.mjs";
import { startOidcProvider } from "./oidc_provider.mjs";

const ADMIN_KEY = "sso-test-admin-key-0123456789abcdef";
const shots = join(process.env.PURSER_TEST_OUTPUT ?? "build/test-output", "sso");
mkdirSync(shots, { recursive: true });

// The provider's people: their groups are read at each sign-in.
const accounts = {
  opal: { groups: ["platform-ops"] },
  olivia: { groups: ["acme-admins"] },
  leo: { groups: ["acme-leads", "acme-ml"] },
  dana: { groups: ["acme-ml"] },
  mallory: { groups: ["contractors"] },
  erin: { groups: ["acme-ml"] },
};

let idp;
let purser;
let browser;

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

// whoami as a browser would send it: with the session cookie only.
async function whoamiWithCookie(cookie) {
  return fetch(`${purser.url}/api/v1/whoami`, { headers: { Cookie: `purser_session=${cookie}` } });
}

async function audit(action) {
  const data = await call(`/api/v1/audit?action=${action}&limit=100`);
  return data.data;
}

// A browser context of its own (the provider remembers who signed in), its web fonts blocked
// (no network here), every request to the provider's authorization endpoint kept.
async function freshContext() {
  const context = await browser.newContext();
  await context.route(/fonts\.googleapis\.com/, (r) => r.abort());
  const authorizations = [];
  context.on("request", (r) => {
    if (r.url().startsWith(`${idp.issuer}/auth?`)) authorizations.push(new URL(r.url()));
  });
  return { context, authorizations };
}

// Walks the provider's development pages: the login form, then consent (and, for the device
// grant, the code's confirmation) until it leaves the provider or says it is done.
async function throughProvider(page, login) {
  for (let step = 0; step < 8; step++) {
    await page.waitForLoadState("domcontentloaded");
    if (!page.url().startsWith(idp.issuer)) return;
    if ((await page.title()) === "Sign-in Success") return;
    if (await page.locator('input[name="login"]').count()) {
      await page.fill('input[name="login"]', login);
      await page.fill('input[name="password"]', "any password");
      await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
    } else {
      const button = page.locator('button[autofocus], button[type="submit"]:not([name="abort"])').first();
      await Promise.all([page.waitForNavigation(), button.click()]);
    }
  }
  throw new Error(`still at the provider after 8 pages: ${page.url()}`);
}

// Signs `login` in through the console's button; returns { context, page, authorizations }.
async function signIn(login) {
  const { context, authorizations } = await freshContext();
  const page = await context.newPage();
  await page.goto(`${purser.url}/`);
  await page.click("#sso-signin");
  await throughProvider(page, login);
  return { context, page, authorizations };
}

async function sessionCookie(context) {
  return (await context.cookies(purser.url)).find((c) => c.name === "purser_session");
}

before(async () => {
  idp = await startOidcProvider({ accounts });
  purser = await startPurser(
    `oidc:
  issuer: ${idp.issuer}
  client_id: ${idp.clientId}
  client_secret: ${idp.clientSecret}
  redirect_url: /auth/oidc/callback
  scopes: [openid, profile, email, groups]
  display_name: Example SSO
  roles:
    - {group: platform-ops, role: platform_admin}
    - {group: acme-admins, tenant: acme, role: tenant_admin}
    - {group: acme-leads, tenant: acme, team: research, role: team_lead}
    - {group: acme-ml, tenant: acme, team: research, role: member}
`,
    { PURSER_ADMIN_KEY: ADMIN_KEY },
  );
  browser = await launchBrowser();
  const acme = await call("/api/v1/tenants", { method: "POST", body: { name: "acme" } });
  await call("/api/v1/teams", { method: "POST", body: { tenant: acme.id, name: "research" } });
});

after(async () => {
  if (process.env.PURSER_E2E_LOGS) console.log(purser?.stderr());
  await browser?.close();
  await purser?.stop();
  await idp?.close();
});

test("the console offers the provider beside the key, and signs in with PKCE", async () => {
  const { context, page, authorizations } = await signIn("dana");
  await page.waitForSelector("#whoami");
  assert.match(await page.textContent("#whoami"), /dana · acme \/ research/);
  assert.match(await page.textContent("#whoami"), /member/);
  await page.screenshot({ path: join(shots, "signed-in.png") });
  // The authorization request: the code flow with PKCE S256, a state and a nonce.
  assert.equal(authorizations.length, 1);
  const q = authorizations[0].searchParams;
  assert.equal(q.get("response_type"), "code");
  assert.equal(q.get("code_challenge_method"), "S256");
  assert.match(q.get("code_challenge"), /^[A-Za-z0-9_-]{43}$/);
  assert.ok(q.get("state").length >= 32 && q.get("nonce").length >= 32);
  assert.equal(q.get("redirect_uri"), `${purser.url}/auth/oidc/callback`);
  await context.close();
});

test("the session cookie: HttpOnly, SameSite=Lax, for the whole site, not readable by the page", async () => {
  const { context, page } = await signIn("erin");
  await page.waitForSelector("#whoami");
  const cookie = await sessionCookie(context);
  assert.ok(cookie, "no purser_session cookie");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Lax");
  assert.equal(cookie.path, "/");
  assert.equal(cookie.secure, false, "plain HTTP here: Secure is set only under TLS");
  assert.equal(cookie.expires, -1, "a browser-session cookie: the server's record holds the expiry");
  assert.match(cookie.value, /^pss_[A-Za-z0-9_-]{43}$/);
  assert.equal(await page.evaluate(() => document.cookie.includes("purser_session")), false);
  // The pending sign-in's cookie was spent by the callback.
  assert.equal((await context.cookies(`${purser.url}/auth/oidc/callback`)).some((c) => c.name === "purser_oidc"), false);
  await context.close();
});

test("four groups map to four roles, made at first sign-in and changed at the next", async () => {
  const expected = {
    opal: { role: "platform-admin", tenant: null, team: null },
    olivia: { role: "tenant-admin", tenant: "acme", team: null },
    leo: { role: "team-lead", tenant: "acme", team: "research" },  // the first matching entry
    dana: { role: "member", tenant: "acme", team: "research" },
  };
  for (const [login, want] of Object.entries(expected)) {
    const { context, page } = await signIn(login);
    await page.waitForSelector("#whoami");
    const me = await page.evaluate(async () => (await fetch("/api/v1/whoami")).json());
    assert.equal(me.name, login);
    assert.equal(me.role, want.role, login);
    assert.equal(me.tenant?.name ?? null, want.tenant, login);
    assert.equal(me.team?.name ?? null, want.team, login);
    assert.equal(me.key_id, null);
    assert.equal(me.session.kind, "console");
    await page.screenshot({ path: join(shots, `role-${login}.png`) });
    await context.close();
  }
  const users = (await call("/api/v1/users")).data;
  for (const login of Object.keys(expected)) {
    assert.equal(users.filter((u) => u.name === login).length, 1, `one user ${login}`);
    assert.equal(users.find((u) => u.name === login).signs_in, true);
  }
  const created = (await audit("user.jit_create")).map((e) => e.target);
  for (const login of Object.keys(expected)) {
    const id = users.find((u) => u.name === login).id;
    assert.ok(created.includes(`user:${id}`), `jit creation of ${login} audited`);
  }
  // Leo leaves the leads' group: at his next sign-in he is a member, and it is audited.
  accounts.leo.groups = ["acme-ml"];
  const { context, page } = await signIn("leo");
  await page.waitForSelector("#whoami");
  const me = await page.evaluate(async () => (await fetch("/api/v1/whoami")).json());
  assert.equal(me.role, "member");
  const changes = await audit("user.sign_in_update");
  const leo = users.find((u) => u.name === "leo");
  const change = changes.find((e) => e.target === `user:${leo.id}`);
  assert.ok(change, "the role change is audited");
  assert.equal(change.before.role, "team-lead");
  assert.equal(change.after.role, "member");
  assert.equal((await call("/api/v1/users")).data.filter((u) => u.name === "leo").length, 1);
  await context.close();
});

test("a person in no mapped group gets a page saying so, and nothing is created", async () => {
  const before = (await call("/api/v1/users")).data.length;
  const { context, page } = await signIn("mallory");
  await page.waitForSelector("#sign-in-refused");
  assert.match(await page.textContent("#sign-in-refused"), /mallory is in no group that may use Purser/);
  await page.screenshot({ path: join(shots, "refused.png") });
  assert.equal(await sessionCookie(context), undefined);
  const users = (await call("/api/v1/users")).data;
  assert.equal(users.length, before);
  assert.ok(!users.some((u) => u.name === "mallory"));
  const refusals = await audit("auth.sign_in_refused");
  assert.ok(refusals.some((e) => e.actor === "mallory" && /no group/.test(e.after.reason)));
  await context.close();
});

test("a change made with the cookie needs the CSRF token; reads and keys do not", async () => {
  const { context, page } = await signIn("dana");
  await page.waitForSelector("#whoami");
  const results = await page.evaluate(async () => {
    const me = await (await fetch("/api/v1/whoami")).json();
    const body = JSON.stringify({ owner: { kind: "user", id: me.id }, name: "from-the-page" });
    const headers = { "Content-Type": "application/json" };
    const without = await fetch("/api/v1/keys", { method: "POST", headers, body });
    const wrong = await fetch("/api/v1/keys", {
      method: "POST", headers: { ...headers, "X-Purser-CSRF": "not-the-token" }, body });
    const right = await fetch("/api/v1/keys", {
      method: "POST", headers: { ...headers, "X-Purser-CSRF": me.session.csrf_token }, body });
    return { without: [without.status, await without.text()], wrong: wrong.status, right: right.status };
  });
  assert.equal(results.without[0], 403);
  assert.match(results.without[1], /CSRF/);
  assert.equal(results.wrong, 403);
  assert.equal(results.right, 201);
  // A bearer key is never asked for a CSRF token.
  const dana = (await call("/api/v1/users")).data.find((u) => u.name === "dana");
  await call("/api/v1/keys", { method: "POST", body: { owner: { kind: "user", id: dana.id }, name: "by-admin" } });
  await context.close();
});

test("sign-out ends the session on the server, not just in the browser", async () => {
  const { context, page } = await signIn("olivia");
  await page.waitForSelector("#whoami");
  const cookie = (await sessionCookie(context)).value;
  assert.equal((await whoamiWithCookie(cookie)).status, 200);
  await page.click("text=Sign out");
  await page.waitForSelector("#key");
  assert.equal((await whoamiWithCookie(cookie)).status, 401, "the old cookie, replayed, is refused");
  assert.equal(await sessionCookie(context), undefined);
  await page.reload();
  await page.waitForSelector("#key");
  const outs = await audit("auth.sign_out");
  assert.ok(outs.some((e) => typeof e.after.session === "string"));
  await context.close();
});

test("disabling a user ends their sessions, refuses their keys and their next sign-in", async () => {
  const { context, page } = await signIn("erin");
  await page.waitForSelector("#whoami");
  const cookie = (await sessionCookie(context)).value;
  const erin = (await call("/api/v1/users")).data.find((u) => u.name === "erin");
  const key = await call("/api/v1/keys", { method: "POST", body: { owner: { kind: "user", id: erin.id }, name: "erin-key" } });
  await call(`/api/v1/users/${erin.id}/disable`, { method: "POST", body: {} });
  assert.equal((await whoamiWithCookie(cookie)).status, 401);
  const byKey = await fetch(`${purser.url}/api/v1/whoami`, { headers: { Authorization: `Bearer ${key.key}` } });
  assert.equal(byKey.status, 401);
  assert.match((await byKey.json()).detail, /disabled/);
  await page.reload();
  await page.waitForSelector("#key");
  // The provider still vouches for her; Purser does not let her in.
  await page.click("#sso-signin");
  await throughProvider(page, "erin");
  await page.waitForSelector("#sign-in-refused");
  assert.match(await page.textContent("#sign-in-refused"), /disabled/);
  await context.close();
  await call(`/api/v1/users/${erin.id}/enable`, { method: "POST", body: {} });
});

test("a tampered state, nonce or ID token is refused", async () => {
  const tamperedWith = async (param, value) => {
    // The sign-in begun through the context's own request client (it shares the browser's
    // cookies), so the provider's URL can be altered before the browser goes there.
    const { context } = await freshContext();
    const begun = await context.request.get(`${purser.url}/auth/oidc/login`, { maxRedirects: 0 });
    assert.equal(begun.status(), 302);
    const url = new URL(begun.headers().location);
    assert.ok(url.searchParams.get(param));
    url.searchParams.set(param, value);
    const page = await context.newPage();
    await page.goto(url.toString());
    await throughProvider(page, "dana");
    await page.waitForSelector("#sign-in-refused");
    const text = await page.textContent("#sign-in-refused");
    assert.equal(await sessionCookie(context), undefined);
    await context.close();
    return text;
  };
  assert.match(await tamperedWith("state", "a-state-the-attacker-chose-0123456789"), /state does not match/);
  assert.match(await tamperedWith("nonce", "a-nonce-the-attacker-chose-0123456789"), /nonce/);
  idp.tamper.idToken = true;
  try {
    const { context, page } = await signIn("dana");
    await page.waitForSelector("#sign-in-refused");
    assert.match(await page.textContent("#sign-in-refused"), /signature/);
    assert.equal(await sessionCookie(context), undefined);
    await context.close();
  } finally {
    idp.tamper.idToken = false;
  }
  // A callback with no sign-in begun in this browser.
  const res = await fetch(`${purser.url}/auth/oidc/callback?code=x&state=y`);
  assert.equal(res.status, 400);
  assert.match(await res.text(), /no sign-in was started/);
});

test("purser login --oidc: the device grant, a short-lived token kept for this server", async () => {
  const home = mkdtempSync(join(tmpdir(), "purser-cli-"));
  const env = { ...process.env, XDG_CONFIG_HOME: home, PURSER_SERVER: purser.url, PURSER_KEY: "" };
  try {
    const cli = spawn(purserBinary, ["login", "--oidc"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    cli.stderr.on("data", (d) => (err += d));
    const exited = new Promise((resolve) => cli.on("exit", resolve));
    const url = await new Promise((resolve, reject) => {
      cli.stdout.on("data", (d) => {
        out += d;
        const m = out.match(/open (http\S+)/);
        if (m) resolve(m[1]);
      });
      cli.on("exit", () => reject(new Error(`purser login exited: ${out}${err}`)));
    });
    const { context } = await freshContext();
    const page = await context.newPage();
    await page.goto(url);
    await throughProvider(page, "dana");
    assert.equal(await exited, 0, `${out}${err}`);
    assert.match(out, /Signed in to .* as dana \(member in acme\/research\)/);
    await context.close();
    const file = join(home, "purser", "credentials.json");
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const stored = JSON.parse(readFileSync(file, "utf8"))[purser.url];
    assert.match(stored.token, /^pss_/);
    // The token works as a bearer (no CSRF: it is not a cookie) and is a CLI session.
    const me = await (await fetch(`${purser.url}/api/v1/whoami`, { headers: { Authorization: `Bearer ${stored.token}` } })).json();
    assert.equal(me.name, "dana");
    assert.equal(me.session.kind, "cli");
    const run = (args) => new Promise((resolve) => {
      const p = spawn(purserBinary, args, { env, stdio: ["ignore", "pipe", "pipe"] });
      let text = "";
      p.stdout.on("data", (d) => (text += d));
      p.stderr.on("data", (d) => (text += d));
      p.on("exit", (code) => resolve({ code, text }));
    });
    const keys = await run(["keys", "create", "--name", "from-cli"]);
    assert.equal(keys.code, 0, keys.text);
    const out2 = await run(["logout"]);
    assert.equal(out2.code, 0, out2.text);
    const after = await fetch(`${purser.url}/api/v1/whoami`, { headers: { Authorization: `Bearer ${stored.token}` } });
    assert.equal(after.status, 401);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
