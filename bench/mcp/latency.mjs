// Sequential tools/call latency, directly to the upstream and through Purser's /mcp, in
// interleaved rounds (drift hits both alike), one keep-alive connection each.
//   node latency.mjs UPSTREAM_URL PURSER_URL KEY [CALLS] [ROUNDS]
// Prints one JSON object: p50/p99/mean in microseconds per path and the added latency.
import { Agent, request } from "node:http";

const [upstream, purser, key, callsArg, roundsArg] = process.argv.slice(2);
const calls = Number(callsArg ?? 2000);
const rounds = Number(roundsArg ?? 5);
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function post(url, headers, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: "POST", agent,
      headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        "Content-Length": Buffer.byteLength(body), ...headers } }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`${res.statusCode} ${text}`))));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const targets = {
  direct: { url: upstream, headers: {}, name: "echo" },
  purser: { url: `${purser}/mcp`, headers: { Authorization: `Bearer ${key}` }, name: "bench.echo" },
};
const samples = { direct: [], purser: [] };
let id = 0;
async function one(t, keep) {
  const body = JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call",
    params: { name: t.name, arguments: { text: "hello" } } });
  const start = process.hrtime.bigint();
  const text = await post(t.url, t.headers, body);
  const us = Number(process.hrtime.bigint() - start) / 1000;
  if (!text.includes('"hello"')) throw new Error(`unexpected answer: ${text}`);
  if (keep) keep.push(us);
}
for (const t of Object.values(targets)) for (let i = 0; i < 200; ++i) await one(t);  // warm-up
for (let r = 0; r < rounds; ++r) {
  for (const [name, t] of Object.entries(targets)) {
    for (let i = 0; i < calls / rounds; ++i) await one(t, samples[name]);
  }
}
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const stats = (xs) => ({ p50_us: Math.round(pct(xs, 50)), p99_us: Math.round(pct(xs, 99)),
  mean_us: Math.round(xs.reduce((a, b) => a + b, 0) / xs.length), calls: xs.length });
const direct = stats(samples.direct);
const through = stats(samples.purser);
console.log(JSON.stringify({ direct, purser: through,
  added_p50_us: through.p50_us - direct.p50_us, added_p99_us: through.p99_us - direct.p99_us,
  ratio_p50: +(through.p50_us / direct.p50_us).toFixed(2) }, null, 2));
agent.destroy();
