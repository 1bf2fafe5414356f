// The official OpenAI and Anthropic SDKs against purser serve in front of purser sim llm: what a
// practitioner's code sees, streaming and not, including the errors.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

import { startPurser, startSim } from "./harness.mjs";

const ADMIN = "e2e-platform-admin-key-0123456789";
let purser, simA, simB, key, userId, openai, anthropic;

async function admin(path, body) {
  const r = await fetch(purser.url + path, {
    method: body ? "POST" : "GET",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await r.json();
  assert.ok(r.ok, `${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

before(async () => {
  simA = await startSim(["--ttft-ms", "5", "--tokens-per-s", "2000", "--api-keys", "sk-a"]);
  simB = await startSim(["--ttft-ms", "5", "--tokens-per-s", "2000", "--api-keys", "sk-b"]);
  purser = await startPurser(
    `providers:
  - {name: sim-a, kind: openai, base_url: ${simA.url}/v1, api_keys: [sk-a]}
  - {name: sim-b, kind: anthropic, base_url: ${simB.url}, api_keys: [sk-b]}
routes:
  - {model: chat-default, targets: [{provider: sim-a, model: sim-small}]}
  - {model: embed, targets: [{provider: sim-a, model: sim-embed}]}
  - {model: claude, targets: [{provider: sim-b, model: sim-claude}]}
prices:
  - {provider: sim-a, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
  - {provider: sim-a, model: sim-embed, input_per_mtok: "0.02", output_per_mtok: "0"}
  - {provider: sim-b, model: sim-claude, input_per_mtok: "3.00", output_per_mtok: "15.00"}
`,
    { PURSER_ADMIN_KEY: ADMIN },
  );
  const tenant = await admin("/api/v1/tenants", { name: "acme" });
  const team = await admin("/api/v1/teams", { tenant: tenant.id, name: "ml" });
  const user = await admin("/api/v1/users", { tenant: tenant.id, team: team.id, name: "dana" });
  userId = user.id;
  key = (await admin("/api/v1/keys", { owner: { kind: "user", id: user.id }, name: "sdk" })).key;
  openai = new OpenAI({ apiKey: key, baseURL: `${purser.url}/v1`, maxRetries: 0 });
  anthropic = new Anthropic({ apiKey: key, baseURL: purser.url, maxRetries: 0 });
});

after(async () => {
  if (purser) assert.equal((await purser.stop()).code, 0, purser.stderr());
  await simA?.stop();
  await simB?.stop();
});

const messages = [{ role: "user", content: "What does a budget protect?" }];

test("OpenAI chat, not streamed", async () => {
  const r = await openai.chat.completions.create({ model: "chat-default", messages, max_tokens: 8 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, "chat-default", "the alias answers, not the upstream model");
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(r.choices[0].message.content.length > 0);
});

test("OpenAI chat, streamed, costs what the same tokens cost unstreamed", async () => {
  const prompt = [{ role: "user", content: "Same question, twice." }];
  const whole = await openai.chat.completions.create({ model: "chat-default", messages: prompt, max_tokens: 12 });
  const stream = await openai.chat.completions.create({
    model: "chat-default", messages: prompt, max_tokens: 12, stream: true,
  });
  let text = "";
  let sawUsage = false;
  for await (const chunk of stream) {
    assert.equal(chunk.model, "chat-default");
    if (chunk.usage) sawUsage = true;
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(sawUsage, false, "the usage chunk the client did not ask for is not forwarded");
  const usage = await admin(`/api/v1/usage?scope=user:${userId}`);
  const last2 = usage.data.slice(-2);
  assert.equal(last2[0].cost, last2[1].cost, "streamed spend equals unstreamed spend");
  assert.equal(last2[1].estimated, false);
});

test("OpenAI stream with include_usage gets its usage chunk", async () => {
  const stream = await openai.chat.completions.create({
    model: "chat-default", messages, max_tokens: 4, stream: true, stream_options: { include_usage: true },
  });
  let usage;
  for await (const chunk of stream) usage = chunk.usage ?? usage;
  assert.equal(usage.completion_tokens, 4);
});

test("OpenAI embeddings and models", async () => {
  const e = await openai.embeddings.create({ model: "embed", input: ["a", "b"] });
  assert.equal(e.data.length, 2);
  const models = [];
  for await (const m of openai.models.list()) models.push(m.id);
  assert.deepEqual(models.sort(), ["chat-default", "claude", "embed"]);
});

test("Anthropic messages, streamed and not", async () => {
  const m = await anthropic.messages.create({ model: "claude", max_tokens: 6, messages });
  assert.equal(m.type, "message");
  assert.equal(m.model, "claude", "the alias answers, not the upstream model");
  assert.equal(m.usage.output_tokens, 6);
  const stream = anthropic.messages.stream({ model: "claude", max_tokens: 6, messages });
  let text = "";
  stream.on("text", (t) => (text += t));
  const final = await stream.finalMessage();
  assert.equal(final.model, "claude");
  assert.equal(text, m.content[0].text);
  assert.equal(final.usage.output_tokens, 6);
});

test("errors surface as the SDKs' own exception classes", async () => {
  await assert.rejects(
    () => new OpenAI({ apiKey: "wrong", baseURL: `${purser.url}/v1`, maxRetries: 0 })
      .chat.completions.create({ model: "chat-default", messages }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
  await assert.rejects(
    () => openai.chat.completions.create({ model: "no-such-model", messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found",
  );
  await assert.rejects(
    () => openai.chat.completions.create({ model: "chat-default" }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400,
  );
  await assert.rejects(
    () => new Anthropic({ apiKey: "wrong", baseURL: purser.url, maxRetries: 0 })
      .messages.create({ model: "claude", max_tokens: 5, messages }),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401,
  );
  await assert.rejects(
    () => anthropic.messages.create({ model: "nope", max_tokens: 5, messages }),
    (e) => e instanceof Anthropic.NotFoundError && e.status === 404,
  );
});

test("each SDK reaches a model of the other API kind through one alias", async () => {
  // The OpenAI SDK, served by an Anthropic-kind upstream.
  const whole = await openai.chat.completions.create({ model: "claude", messages, max_tokens: 6 });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.usage.completion_tokens, 6);
  assert.equal(whole.choices[0].finish_reason, "length");
  const stream = await openai.chat.completions.create({
    model: "claude", messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage?.completion_tokens, 6);

  // The Anthropic SDK, served by an OpenAI-kind upstream.
  const msg = await anthropic.messages.create({ model: "chat-default", max_tokens: 5, messages });
  assert.equal(msg.type, "message");
  assert.equal(msg.stop_reason, "max_tokens");
  assert.equal(msg.usage.output_tokens, 5);
  const events = [];
  const s = anthropic.messages.stream({ model: "chat-default", max_tokens: 5, messages });
  for await (const e of s) events.push(e.type);
  const final = await s.finalMessage();
  assert.equal(final.content[0].text, msg.content[0].text);
  assert.equal(final.usage.output_tokens, 5);
  assert.deepEqual([events[0], events.at(-1)], ["message_start", "message_stop"]);
});

test("a budget runs out with insufficient_quota", async () => {
  await admin("/api/v1/wallets", { scope: { kind: "user", id: userId }, limit: "0.000001" });
  await assert.rejects(
    () => openai.chat.completions.create({ model: "chat-default", messages, max_tokens: 50 }),
    (e) => e instanceof OpenAI.RateLimitError && e.status === 429 && e.code === "budget_exceeded"
      && e.type === "insufficient_quota" && e.headers.get("x-should-retry") === "false",
  );
});
