// Agents through Purser's MCP door, with the official TypeScript SDK on both sides: grants to a
// team, a server credential set through the API (sealed, never shown, the caller's key never
// upstream), rate limits counting tool calls, one run's model and tool calls adding up, and the
// upstreams that misbehave — one that hangs, one that answers 5 MB, one that answers something
// that is not JSON-RPC — and a client going on across a restart of the Purser it talks to.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, request as httpRequest } from "node:http";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import * as z from "zod/v4";

import { launchBrowser, startPurser, startSim } from "./harness.mjs";

const ADMIN_KEY = "mcp-agents-admin-key-0123456789abcdef";

async function listen(server) {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return `http://127.0.0.1:${server.address().port}`;
}

// An SDK server, stateless, whose tools are { name: async (text) => reply }; every request's
// headers are kept in `seen`.
async function startUpstream(name, tools, prompts = {}) {
  const seen = [];
  const build = () => {
    const s = new McpServer({ name, version: "1.0.0" });
    for (const [prompt, text] of Object.entries(prompts)) {
      s.registerPrompt(prompt, { description: `${name}'s ${prompt}`, argsSchema: { who: z.string() } },
        ({ who }) => ({ messages: [{ role: "user", content: { type: "text", text: text(who) } }] }));
    }
    for (const [tool, reply] of Object.entries(tools)) {
      s.registerTool(tool, { description: `${name}'s ${tool}`, inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: "text", text: await reply(text) }] }));
    }
    return s;
  };
  const http = createServer(async (req, res) => {
    seen.push(req.headers);
    if (req.method !== "POST") return res.writeHead(405, { Allow: "POST" }).end();
    const server = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  const base = await listen(http);
  return { url: `${base}/mcp`, seen, close: () => new Promise((r) => http.close(r)) };
}

// A server that opens sessions and lists a tool properly, then answers its calls with a body
// that is not JSON-RPC (cut off mid-object).
async function startBrokenUpstream() {
  const http = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      const m = JSON.parse(body);
      if (m.id === undefined) return res.writeHead(202).end();
      const answer = (result) =>
        res.writeHead(200, { "Content-Type": "application/json" })
          .end(JSON.stringify({ jsonrpc: "2.0", id: m.id, result }));
      if (m.method === "initialize") {
        return answer({ protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
          serverInfo: { name: "broken", version: "1" } });
      }
      if (m.method === "tools/list") {
        return answer({ tools: [{ name: "garble", inputSchema: { type: "object" } }] });
      }
      res.writeHead(200, { "Content-Type": "application/json" }).end('{"jsonrpc": "2.0", "res');
    });
  });
  const base = await listen(http);
  return { url: `${base}/mcp`, close: () => new Promise((r) => http.close(r)) };
}

// What a client's load balancer is: one address in front of whichever Purser runs now.
async function startBalancer() {
  let target = null;
  const http = createServer((req, res) => {
    const t = new URL(target);
    const up = httpRequest({ host: t.hostname, port: t.port, path: req.url, method: req.method,
      headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    up.on("error", () => res.writeHead(502).end());
    req.pipe(up);
  });
  const url = await listen(http);
  return { url, point: (to) => (target = to), close: () => new Promise((r) => http.close(r)) };
}

let demo, slow, broken, sim, balancer, purser, config;
let userId, teamId, tenantId, key, leadKey, lastRun;

async function call(path, { method = "GET", body, expect } = {}) {
  const res = await fetch(purser.url + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => null);
  if (expect !== undefined) {
    assert.equal(res.status, expect, `${method} ${path}: ${JSON.stringify(data)}`);
  } else {
    assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
  }
  return data;
}

async function makeKey(body) {
  return (await call("/api/v1/keys", { method: "POST",
    body: { owner: { kind: "user", id: userId }, ...body } })).key;
}

async function connect(withKey, { url = `${purser.url}/mcp`, session, extra = {} } = {}) {
  const headers = { Authorization: `Bearer ${withKey}`, ...extra };
  if (session) headers["x-purser-session"] = session;
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

const names = async (client) => (await client.listTools()).tools.map((t) => t.name).sort();

before(async () => {
  demo = await startUpstream("demo", {
    echo: (t) => `demo says ${t}`,
    big: () => "x".repeat(5 * 1024 * 1024),
  }, { greet: (who) => `hello ${who}` });
  slow = await startUpstream("slow", { hang: () => new Promise(() => {}) });
  broken = await startBrokenUpstream();
  sim = await startSim(["--ttft-ms", "1", "--tokens-per-s", "5000", "--api-keys", "sk-sim"]);
  balancer = await startBalancer();
  config = `providers:
  - {name: sim, kind: openai, base_url: ${sim.url}/v1, api_keys: [sk-sim]}
routes:
  - {model: chat, targets: [{provider: sim, model: sim-small}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "1000.00", output_per_mtok: "2000.00"}
mcp:
  servers:
    - {name: demo, url: ${demo.url}, caller_header: X-Purser-Caller}
    - {name: slow, url: ${slow.url}, timeout: 1s}
    - {name: broken, url: ${broken.url}}
  prices:
    - {server: demo, tool: "*", per_call: "0.25"}
`;
  purser = await startPurser(config, { PURSER_ADMIN_KEY: ADMIN_KEY });
  balancer.point(purser.url);
  const tenant = await call("/api/v1/tenants", { method: "POST", body: { name: "acme" } });
  tenantId = tenant.id;
  teamId = (await call("/api/v1/teams", { method: "POST", body: { tenant: tenant.id, name: "ml" } })).id;
  userId = (await call("/api/v1/users", { method: "POST",
    body: { tenant: "acme", team: "ml", name: "dana" } })).id;
  await call("/api/v1/wallets", { method: "POST",
    body: { scope: { kind: "user", id: userId }, limit: "100.00", period: "monthly", hard: true } });
  key = await makeKey({ name: "agent", tools: ["demo/*", "slow/*", "broken/*"] });
});

after(async () => {
  await purser?.stop();
  for (const s of [demo, slow, broken, balancer]) await s?.close();
  await sim?.stop();
});

test("a team's grant reaches its keys without tools of their own; a key's own list wins", async () => {
  const bare = await makeKey({ name: "bare" });
  let client = await connect(bare);
  assert.deepEqual(await names(client), []);
  await client.close();
  const granted = await call(`/api/v1/teams/${teamId}/tools`, { method: "PUT", body: { tools: ["demo/echo"] } });
  assert.deepEqual(granted.tools, ["demo/echo"]);
  client = await connect(bare);
  assert.deepEqual(await names(client), ["demo.echo"]);
  assert.equal((await client.callTool({ name: "demo.echo", arguments: { text: "t" } })).content[0].text,
    "demo says t");
  await assert.rejects(client.callTool({ name: "demo.big", arguments: { text: "t" } }), /demo\.big/);
  await client.close();
  // A key's own list is what it may call, whatever its team grants.
  client = await connect(await makeKey({ name: "own", tools: ["slow/hang"] }));
  assert.deepEqual(await names(client), ["slow.hang"]);
  await client.close();
  await call(`/api/v1/teams/${teamId}/tools`, { method: "PUT", body: { tools: [] } });
  client = await connect(bare);
  assert.deepEqual(await names(client), []);
  await client.close();
  // A bad pattern is refused, naming the field; a grant is audited.
  const bad = await call(`/api/v1/teams/${teamId}/tools`, { method: "PUT", body: { tools: ["demo.echo"] }, expect: 400 });
  assert.match(JSON.stringify(bad), /tools/);
  const audit = await call("/api/v1/audit?action=team.tools");
  assert.ok((audit.data ?? audit).some((e) => e.action === "team.tools"), JSON.stringify(audit));
});

test("the server's credential is set through the API, sealed and never shown; the caller's key never reaches it", async () => {
  const set = await call("/api/v1/mcp/servers/demo/credential", { method: "PUT",
    body: { api_key: "upstream-own-secret" } });
  assert.equal(set.credential, "api");
  const listed = await call("/api/v1/mcp/servers");
  assert.ok(!JSON.stringify(listed).includes("upstream-own-secret"));
  assert.equal(listed.data.find((s) => s.name === "demo").credential, "api");
  demo.seen.length = 0;
  const client = await connect(key);
  await client.callTool({ name: "demo.echo", arguments: { text: "who" } });
  await client.close();
  const calls = demo.seen.filter((h) => h["x-purser-caller"]);
  assert.ok(calls.length > 0, "the upstream was told who calls");
  assert.equal(calls[0]["x-purser-caller"],
    `kind=user, id="${userId}", tenant="${tenantId}", team="${teamId}"`);
  for (const h of demo.seen) {
    assert.equal(h.authorization, "Bearer upstream-own-secret");
    assert.ok(!JSON.stringify(h).includes(key), "the caller's Purser key reached the upstream");
  }
  // Not for members to set.
  await fetch(`${purser.url}/api/v1/mcp/servers/demo/credential`, {
    method: "PUT", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify({ api_key: "mine" }),
  }).then((r) => assert.equal(r.status, 403));
});

test("prompts pass through under the tools' names and rules", async () => {
  let client = await connect(key);
  const { prompts } = await client.listPrompts();
  assert.deepEqual(prompts.map((p) => p.name), ["demo.greet"]);
  const got = await client.getPrompt({ name: "demo.greet", arguments: { who: "dana" } });
  assert.equal(got.messages[0].content.text, "hello dana");
  await client.close();
  client = await connect(await makeKey({ name: "slow-only", tools: ["slow/hang"] }));
  assert.deepEqual((await client.listPrompts()).prompts, []);
  await assert.rejects(client.getPrompt({ name: "demo.greet", arguments: { who: "x" } }), /demo\.greet/);
  await client.close();
});

test("rate limits count tool calls", async () => {
  const limited = await makeKey({ name: "limited", tools: ["demo/echo"], rpm: 2 });
  const client = await connect(limited);
  await client.callTool({ name: "demo.echo", arguments: { text: "1" } });
  await client.callTool({ name: "demo.echo", arguments: { text: "2" } });
  await assert.rejects(client.callTool({ name: "demo.echo", arguments: { text: "3" } }), /rate limit/);
  await client.close();
});

test("one run's model and tool calls add up in its session", async () => {
  const run = `run-${Date.now()}`;
  lastRun = run;
  const chat = await fetch(`${purser.url}/v1/chat/completions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", "x-purser-session": run },
    body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "plan" }], max_tokens: 8 }),
  });
  assert.equal(chat.status, 200, await chat.clone().text());
  await chat.json();
  const client = await connect(key, { session: run });
  await client.callTool({ name: "demo.echo", arguments: { text: "step 1" } });
  await assert.rejects(client.callTool({ name: "broken.garble", arguments: {} }));
  await client.close();
  // A call may name its run in _meta instead of the header.
  const other = await connect(key);
  await other.callTool({ name: "demo.echo", arguments: { text: "step 2" }, _meta: { "purser/session": run } });
  await other.close();

  const session = await call(`/api/v1/sessions/${encodeURIComponent(run)}`);
  assert.deepEqual(session.data.map((c) => c.kind), ["model", "tool", "tool", "tool"]);
  assert.deepEqual(session.data.slice(1).map((c) => c.tool), ["demo.echo", "broken.garble", "demo.echo"]);
  assert.deepEqual(session.data.slice(1).map((c) => c.server), ["demo", "broken", "demo"]);
  assert.equal(session.total.calls, 4);
  assert.equal(session.total.model_calls, 1);
  assert.equal(session.total.tool_calls, 3);
  assert.equal(session.total.errors, 1);
  assert.ok(session.data[0].tokens.output > 0);
  assert.ok(Number(session.data[0].cost) > 0);
  assert.equal(session.data[1].cost, "0.25");
  const sum = session.data.reduce((n, c) => n + Number(c.cost), 0);
  assert.ok(Math.abs(sum - Number(session.total.cost)) < 1e-9, `${sum} vs ${session.total.cost}`);
  // Another tenant's member sees nothing of it, as if it did not exist.
  await call("/api/v1/tenants", { method: "POST", body: { name: "globex" } });
  await call("/api/v1/teams", { method: "POST", body: { tenant: "globex", name: "ops" } });
  const eve = await call("/api/v1/users", { method: "POST", body: { tenant: "globex", team: "ops", name: "eve" } });
  const eveKey = (await call("/api/v1/keys", { method: "POST",
    body: { owner: { kind: "user", id: eve.id }, name: "eve" } })).key;
  const peek = await fetch(`${purser.url}/api/v1/sessions/${encodeURIComponent(run)}`,
    { headers: { Authorization: `Bearer ${eveKey}` } });
  assert.equal(peek.status, 404);
  // Tool spend in spend reports.
  const spend = await call(`/api/v1/spend?scope=user:${userId}&group_by=tool`);
  assert.ok(spend.data.some((r) => r.group === "demo.echo" && Number(r.cost) > 0), JSON.stringify(spend));
});

test("a run's cap stops a runaway loop, and a cap that is no amount is refused", async () => {
  const run = `capped-${Date.now()}`;
  const client = await connect(key, { session: run, extra: { "x-purser-session-budget": "0.60" } });
  await client.callTool({ name: "demo.echo", arguments: { text: "1" } });
  await client.callTool({ name: "demo.echo", arguments: { text: "2" } });
  await assert.rejects(client.callTool({ name: "demo.echo", arguments: { text: "3" } }),
    /session "capped-\d+" reached its cap of 0\.60/);
  await client.close();
  // Calls of the run without the header are still held to its cap.
  const again = await connect(key, { session: run });
  await assert.rejects(again.callTool({ name: "demo.echo", arguments: { text: "4" } }), /cap of 0\.60/);
  await again.close();
  assert.equal((await call(`/api/v1/sessions/${run}`)).total.cost, "0.50");
  // The model API reads the header alike.
  const bad = await fetch(`${purser.url}/v1/chat/completions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json",
      "x-purser-session": run, "x-purser-session-budget": "lots" },
    body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "x" }] }),
  });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /x-purser-session-budget must be a positive amount/);
  const over = await fetch(`${purser.url}/v1/chat/completions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", "x-purser-session": run },
    body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "x" }], max_tokens: 200 }),
  });
  assert.equal(over.status, 429, await over.clone().text());
  assert.match((await over.json()).error.message, /reached its cap/);
});

test("the console shows a lead one run's calls in order, with what each cost", async () => {
  const lead = await call("/api/v1/users", { method: "POST",
    body: { tenant: "acme", team: "ml", name: "lee", role: "team-lead" } });
  leadKey = (await call("/api/v1/keys", { method: "POST",
    body: { owner: { kind: "user", id: lead.id }, name: "lee" } })).key;
  const browser = await launchBrowser();
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${purser.url}/`);
    await page.locator("#key").fill(leadKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("navigation").getByRole("link", { name: "Agent runs" }).click();
    // The team's recent runs list this one; picking it shows the run.
    await page.getByRole("table", { name: "Recent runs" }).getByText(lastRun).click();
    await page.locator("#session-calls").filter({ hasText: "4 (1 model, 3 tool)" }).waitFor();
    assert.equal(await page.locator("#session-id").textContent(), lastRun);
    const rows = page.getByRole("table", { name: "Calls" }).locator("tbody tr");
    assert.equal(await rows.count(), 4);
    assert.match(await rows.nth(1).textContent(), /demo\.echo.*ok.*\$0\.25/);
    assert.match(await rows.nth(2).textContent(), /broken\.garble.*failed/);
    assert.equal(await page.locator("#session-errors").textContent(), "1");
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});

test("an upstream that hangs is cut at its timeout, and Purser goes on", async () => {
  const client = await connect(key);
  await assert.rejects(client.callTool({ name: "slow.hang", arguments: { text: "x" } }), /slow|in time/);
  assert.equal((await client.callTool({ name: "demo.echo", arguments: { text: "after" } })).content[0].text,
    "demo says after");
  await client.close();
});

test("an answer of 5 MB is refused, never relayed", async () => {
  const client = await connect(key);
  await assert.rejects(client.callTool({ name: "demo.big", arguments: { text: "x" } }), /more than \d+ bytes/);
  await client.close();
});

test("an upstream that answers something other than JSON-RPC is an error, not a crash", async () => {
  const client = await connect(key);
  await assert.rejects(client.callTool({ name: "broken.garble", arguments: {} }), /broken/);
  assert.ok((await names(client)).includes("broken.garble"));
  assert.equal((await client.callTool({ name: "demo.echo", arguments: { text: "still" } })).content[0].text,
    "demo says still");
  await client.close();
});

test("one client goes on across a restart of the Purser behind its address", async () => {
  const client = await connect(key, { url: `${balancer.url}/mcp` });
  const spent = async () => Number((await call(`/api/v1/wallets?scope=user:${userId}`)).data[0].spent);
  await client.callTool({ name: "demo.echo", arguments: { text: "before" } });
  const before = await spent();
  const dir = purser.dir;
  await purser.stop({ keep: true });
  purser = await startPurser(config, { PURSER_ADMIN_KEY: ADMIN_KEY }, { dir });
  balancer.point(purser.url);
  const answer = await client.callTool({ name: "demo.echo", arguments: { text: "after" } });
  assert.equal(answer.content[0].text, "demo says after");
  assert.equal(await spent(), before + 0.25);
  // The credential set through the API outlived the restart, sealed in the store.
  const listed = await call("/api/v1/mcp/servers");
  assert.equal(listed.data.find((s) => s.name === "demo").credential, "api");
  await client.close();
});
