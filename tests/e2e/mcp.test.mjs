// MCP tools through Purser's door with the official TypeScript SDK on both sides: SDK servers
// upstream (two of them with an `echo` each), the SDK client at <purser>/mcp with a Purser key.
// A key sees and calls only its tools (and nothing for `secret`), names stay put, every call is
// priced on the caller's wallet, and a hard wallet without room refuses the call.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import * as z from "zod/v4";

import { startPurser } from "./harness.mjs";

const ADMIN_KEY = "mcp-test-admin-key-0123456789abcdef";

// An SDK server over Streamable HTTP on 127.0.0.1:0, stateless (a server per request).
async function startUpstream(name, tools) {
  const build = () => {
    const s = new McpServer({ name, version: "1.0.0" });
    for (const [tool, reply] of Object.entries(tools)) {
      s.registerTool(tool, { description: `${name}'s ${tool}`, inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: "text", text: reply(text) }] }));
    }
    return s;
  };
  const http = createServer(async (req, res) => {
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
  http.listen(0, "127.0.0.1");
  await once(http, "listening");
  return {
    url: `http://127.0.0.1:${http.address().port}/mcp`,
    close: () => new Promise((resolve) => http.close(resolve)),
  };
}

let demo;
let other;
let purser;
let key;
let userId;

async function call(path, { method = "GET", body } = {}) {
  const res = await fetch(purser.url + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => null);
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
  return data;
}

async function connect(withKey) {
  const client = new Client({ name: "e2e", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${purser.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${withKey}` } },
  });
  await client.connect(transport);
  return client;
}

before(async () => {
  demo = await startUpstream("demo", { echo: (t) => `demo says ${t}`, secret: () => "the secret" });
  other = await startUpstream("other", { echo: (t) => `other says ${t}` });
  purser = await startPurser(
    `mcp:
  servers:
    - {name: demo, url: ${demo.url}}
    - {name: other, url: ${other.url}}
  prices:
    - {server: demo, tool: echo, per_call: "0.25"}
`,
    { PURSER_ADMIN_KEY: ADMIN_KEY },
  );
  const tenant = await call("/api/v1/tenants", { method: "POST", body: { name: "acme" } });
  await call("/api/v1/teams", { method: "POST", body: { tenant: tenant.id, name: "ml" } });
  const user = await call("/api/v1/users", { method: "POST", body: { tenant: "acme", team: "ml", name: "dana" } });
  userId = user.id;
  const made = await call("/api/v1/keys", {
    method: "POST", body: { owner: { kind: "user", id: user.id }, name: "agent", tools: ["demo/echo"] },
  });
  key = made.key;
  assert.deepEqual(made.tools, ["demo/echo"]);
  await call("/api/v1/wallets", {
    method: "POST", body: { scope: { kind: "user", id: user.id }, limit: "0.50", period: "monthly", hard: true },
  });
});

after(async () => {
  await purser?.stop();
  await demo?.close();
  await other?.close();
});

test("the SDK client lists only the key's tools and calls one through Purser", async () => {
  const client = await connect(key);
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  assert.ok(names.some((n) => n.endsWith("echo")), names.join(", "));
  assert.deepEqual(names, ["demo.echo"]);
  assert.ok(!names.some((n) => n.includes("secret")));
  const answer = await client.callTool({ name: "demo.echo", arguments: { text: "hi" } });
  assert.equal(answer.content[0].text, "demo says hi");
  await assert.rejects(client.callTool({ name: "demo.secret", arguments: { text: "x" } }), /demo\.secret/);
  await assert.rejects(client.callTool({ name: "other.echo", arguments: { text: "x" } }), /other\.echo/);
  await client.close();
});

test("each call is priced on the wallet, and a hard wallet without room refuses the call", async () => {
  const spent = async () => {
    const w = await call(`/api/v1/wallets?scope=user:${userId}`);
    return Number((w.data ?? w)[0].spent);
  };
  const before = await spent();
  const client = await connect(key);
  await client.callTool({ name: "demo.echo", arguments: { text: "a" } });
  assert.equal((await spent()) - before, 0.25);
  // 0.50 in all: the wallet is full, and the next call is refused before it runs.
  if ((await spent()) < 0.5) await client.callTool({ name: "demo.echo", arguments: { text: "b" } });
  assert.equal(await spent(), 0.5);
  await assert.rejects(client.callTool({ name: "demo.echo", arguments: { text: "c" } }), /wallet|budget|limit/i);
  await client.close();
});

test("a key without tools sees none, and a request without a key is refused", async () => {
  const bare = await call("/api/v1/keys", {
    method: "POST", body: { owner: { kind: "user", id: userId }, name: "no-tools" },
  });
  const client = await connect(bare.key);
  assert.deepEqual((await client.listTools()).tools, []);
  await client.close();
  const res = await fetch(`${purser.url}/mcp`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(res.status, 401);
});
