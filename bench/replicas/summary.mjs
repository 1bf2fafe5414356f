// Summarises bench/replicas/run.sh's raw results (argument: its temporary directory, the core
// count) as JSON with a `text` table.
import fs from 'node:fs';

const [dir, cores] = process.argv.slice(2);
const limitNanos = 1e9;
const read = (f) => (fs.existsSync(`${dir}/${f}`) ? fs.readFileSync(`${dir}/${f}`, 'utf8') : '');
const exact = read('exact.txt').trim().split('\n').filter(Boolean).map((line) => {
  const [n, variant, first, second, spent, over, leased, recorded, reserved] = line.split(' ');
  const a = JSON.parse(first);
  const b = JSON.parse(second);
  return {
    replicas: Number(n), variant, answered: a.ok + b.ok, refused_budget: a.budget + b.budget,
    other: a.other + b.other + a.rate + b.rate, spent_nanos: Number(spent), spent_ratio: Number(spent) / limitNanos,
    over_used_nanos: Number(over), leased_after_nanos: Number(leased), recorded: Number(recorded),
    reserved_after: reserved, elapsed_ms: a.elapsed_ms + b.elapsed_ms, killed_at_answered: a.killed_at ?? null,
    first_burst: a, second_burst: b,
  };
});
const one = exact.find((e) => e.replicas === 1 && e.variant === 'plain');
for (const e of exact) e.answered_vs_one = one ? e.answered / one.answered : null;

const rate = JSON.parse(fs.readFileSync(`${dir}/rate.json`, 'utf8'));
const minutes = [];
for (let m = 1; (m + 1) * 60000 <= Math.max(0, ...rate.admitted_at_ms) + 60000 && m < 60; m++) {
  const n = rate.admitted_at_ms.filter((t) => t >= m * 60000 && t < (m + 1) * 60000).length;
  // Whole minutes only, the first (the bucket starts full) left out.
  if ((m + 1) * 60000 <= rate.elapsed_ms) minutes.push({ minute: m + 1, admitted: n });
}

const throughput = read('throughput.txt').trim().split('\n').filter(Boolean).map((line) => {
  const [db, n, rps, reqs, trips] = line.split(' ');
  return { store: db === 'sqlite' ? 'sqlite' : 'postgres', replicas: Number(n), rps: Number(rps),
    requests: Number(reqs), round_trips: Number(trips), round_trips_per_request: Number(trips) / Math.max(1, Number(reqs)) };
});
const sqlite = throughput.find((t) => t.store === 'sqlite');
for (const t of throughput) t.rps_vs_sqlite = sqlite ? t.rps / sqlite.rps : null;

const lines = [`bench/replicas on ${cores} cores`, '', 'exactness (hard wallet $1.00):'];
for (const e of exact) {
  lines.push(`  ${e.replicas} replica(s) ${e.variant.padEnd(9)} answered ${e.answered} (x${e.answered_vs_one?.toFixed(4)} of 1 replica)` +
    ` spent ${(e.spent_ratio * 100).toFixed(3)}% of the limit, recorded ${e.recorded}, reserved after ${e.reserved_after},` +
    ` lease over-use ${e.over_used_nanos}, leased after ${e.leased_after_nanos}, other answers ${e.other}`);
}
lines.push('', `rate (100 a minute, 4 replicas, 4 requests a second offered): ${minutes.map((m) => `minute ${m.minute}: ${m.admitted}`).join(', ')}`);
lines.push('', 'throughput:');
for (const t of throughput) {
  lines.push(`  ${t.replicas} on ${t.store}: ${t.rps.toFixed(0)} req/s (x${t.rps_vs_sqlite?.toFixed(2)} of 1 on SQLite), ${t.round_trips_per_request.toFixed(3)} round trips a request`);
}
console.log(JSON.stringify({ cores: Number(cores), exact, rate: { minutes, offered_per_second: 4, limit_per_minute: 100, counts: { ok: rate.ok, rate: rate.rate, other: rate.other } }, throughput, text: lines.join('\n') }, null, 2));
