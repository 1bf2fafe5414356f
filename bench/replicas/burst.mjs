// A client that spreads chat requests over several Purser replicas, round robin, with a fixed
// number in flight, and counts the answers: for bench/replicas/run.sh.
//
//   node burst.mjs --ports 8001,8002 --key pk-... [--model chat] [--concurrency 32]
//        [--until-refused 50] [--max 20000] [--rps 0] [--seconds 0]
//        [--kill-pid PID --kill-port PORT --kill-after N] [--after N --run "shell command"]
//
// --until-refused K: a worker stops after K budget refusals in a row. --rps R with --seconds S:
// an open loop of R requests a second for S seconds instead (for rate limits), every admitted
// request's time since the start recorded. --kill-*: SIGKILL that replica once N requests were
// answered, and stop sending to it. --after/--run: run a shell command once N were answered.
// Prints one JSON object: ok, budget, rate, other, elapsed_ms (and admitted_at_ms with --rps).
import http from 'node:http';
import { exec } from 'node:child_process';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const ports = args.ports.split(',').map(Number);
const key = args.key;
const model = args.model ?? 'chat';
const concurrency = Number(args.concurrency ?? 32);
const untilRefused = Number(args['until-refused'] ?? 50);
const max = Number(args.max ?? 20000);
const rps = Number(args.rps ?? 0);
const seconds = Number(args.seconds ?? 0);
const killPid = args['kill-pid'] ? Number(args['kill-pid']) : 0;
const killPort = Number(args['kill-port'] ?? 0);
const killAfter = Number(args['kill-after'] ?? 0);
const runAfter = Number(args.after ?? 0);
const runCommand = args.run ?? '';

const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency * 2 });
const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
const counts = { ok: 0, budget: 0, rate: 0, other: 0 };
const admittedAt = [];
let killed = false;
let killedAt = null;
let ran = false;
let sent = 0;
let next = 0;
const started = Date.now();

function post(port) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': Buffer.byteLength(body) } },
    (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', () => resolve({ status: 0, text: '' }));
    });
    req.on('error', () => resolve({ status: 0, text: '' }));
    req.setTimeout(30000, () => { req.destroy(); });
    req.end(body);
  });
}

function pickPort() {
  for (;;) {
    const port = ports[next++ % ports.length];
    if (!(killed && port === killPort)) return port;
  }
}

function record(r) {
  if (r.status === 200) {
    counts.ok++;
    if (rps > 0) admittedAt.push(Date.now() - started);
  } else if (r.status === 429 && r.text.includes('budget')) counts.budget++;
  else if (r.status === 429) counts.rate++;
  else counts.other++;
  if (killPid && !killed && counts.ok >= killAfter) {
    killed = true;
    killedAt = counts.ok;
    try { process.kill(killPid, 'SIGKILL'); } catch (e) { process.stderr.write(`kill failed: ${e.message}\n`); }
  }
  if (runCommand && !ran && counts.ok >= runAfter) {
    ran = true;
    exec(runCommand, (err) => { if (err) process.stderr.write(`--run failed: ${err.message}\n`); });
  }
}

async function worker() {
  let refused = 0;
  while (sent < max && refused < untilRefused) {
    sent++;
    const r = await post(pickPort());
    record(r);
    refused = r.status === 429 && r.text.includes('budget') ? refused + 1 : 0;
  }
}

async function openLoop() {
  const inFlight = new Set();
  const total = rps * seconds;
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rps;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const p = post(pickPort()).then(record);
    inFlight.add(p);
    p.finally(() => inFlight.delete(p));
  }
  await Promise.all([...inFlight]);
}

if (rps > 0) await openLoop();
else await Promise.all(Array.from({ length: concurrency }, worker));
const out = { ...counts, elapsed_ms: Date.now() - started, killed_at: killedAt };
if (rps > 0) out.admitted_at_ms = admittedAt;
console.log(JSON.stringify(out));
agent.destroy();
