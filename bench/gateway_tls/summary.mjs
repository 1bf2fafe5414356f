// Summarises bench/gateway_tls/run.sh's rounds: medians with [min–max] per contender and load,
// and the ratios that say what TLS costs Purser and how that compares with nginx's.
//   node summary.mjs RESULTS ROUNDS CORES CONNECTIONS CLOSE_CONNECTIONS DURATION
import { readFileSync } from 'node:fs';

const [file, rounds, cores, connections, closeConnections, duration] = process.argv.slice(2);
const rows = readFileSync(file, 'utf8').trim().split('\n').map((line) => {
  const [round, kind, contender, rps, p50, p99, cpuNs, non2xx, socketErrors] = line.split(' ');
  return { round: +round, kind, contender, rps: +rps, p50: +p50, p99: +p99, cpuNs: +cpuNs,
           non2xx: +non2xx, socketErrors: +socketErrors };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const stats = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });

const out = { cores: +cores, rounds: +rounds, connections: +connections,
              close_connections: +closeConnections, duration, loads: {} };
const lines = [`gateway over TLS (${cores} cores, ${rounds} rounds of ${duration}; keep-alive ` +
               `c=${connections}, new connection per request c=${closeConnections})`];
for (const kind of ['keepalive', 'close']) {
  const byContender = {};
  for (const c of ['nginx', 'nginx_tls', 'purser', 'purser_tls']) {
    const mine = rows.filter((r) => r.kind === kind && r.contender === c);
    if (!mine.length) continue;
    byContender[c] = {
      rps: stats(mine.map((r) => r.rps)),
      p50_us: stats(mine.map((r) => r.p50)),
      p99_us: stats(mine.map((r) => r.p99)),
      cpu_us_per_request: stats(mine.map((r) => r.cpuNs / 1000)),
      failures: mine.reduce((n, r) => n + r.non2xx + r.socketErrors, 0),
    };
  }
  const m = (c, f) => byContender[c][f].median;
  const ratios = {
    purser_tls_over_purser_rps: m('purser_tls', 'rps') / m('purser', 'rps'),
    purser_tls_over_nginx_tls_rps: m('purser_tls', 'rps') / m('nginx_tls', 'rps'),
    nginx_tls_over_nginx_rps: m('nginx_tls', 'rps') / m('nginx', 'rps'),
    purser_tls_cpu_added_us: m('purser_tls', 'cpu_us_per_request') - m('purser', 'cpu_us_per_request'),
    nginx_tls_cpu_added_us: m('nginx_tls', 'cpu_us_per_request') - m('nginx', 'cpu_us_per_request'),
  };
  out.loads[kind] = { contenders: byContender, ratios };
  lines.push(`  ${kind === 'close' ? 'new connection per request' : 'keep-alive'}:`);
  for (const [c, s] of Object.entries(byContender)) {
    lines.push(`    ${c.padEnd(11)} ${s.rps.median.toFixed(0).padStart(7)} req/s ` +
               `[${s.rps.min.toFixed(0)}–${s.rps.max.toFixed(0)}]  p50 ${s.p50_us.median.toFixed(0)} µs  ` +
               `p99 ${s.p99_us.median.toFixed(0)} µs  CPU ${s.cpu_us_per_request.median.toFixed(1)} µs/req` +
               (s.failures ? `  FAILURES ${s.failures}` : ''));
  }
  lines.push(`    purser-tls/purser ${ratios.purser_tls_over_purser_rps.toFixed(2)}×, ` +
             `purser-tls/nginx-tls ${ratios.purser_tls_over_nginx_tls_rps.toFixed(2)}×, ` +
             `nginx-tls/nginx ${ratios.nginx_tls_over_nginx_rps.toFixed(2)}×; TLS adds ` +
             `${ratios.purser_tls_cpu_added_us.toFixed(1)} µs CPU per request to Purser, ` +
             `${ratios.nginx_tls_cpu_added_us.toFixed(1)} to nginx`);
}
out.text = lines.join('\n');
console.log(JSON.stringify(out, null, 2));
