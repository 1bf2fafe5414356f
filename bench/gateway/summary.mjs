// Summarises a bench/gateway run: medians over the rounds with [min–max].
//   node bench/gateway/summary.mjs TMP ROUNDS CORES CONNECTIONS DURATION   (prints JSON)
import fs from "node:fs";

const [dir, roundsText, cores, connections, duration] = process.argv.slice(2);
const rounds = Number(roundsText);
const rows = fs
  .readFileSync(`${dir}/results.txt`, "utf8")
  .trim()
  .split("\n")
  .map((l) => {
    const [round, kind, who, rps, p50, p99, cpuNs, errors] = l.split(" ");
    return { round: +round, kind, who, rps: +rps, p50: +p50, p99: +p99, cpuNs: +cpuNs, errors: +errors };
  });
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const spread = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });
const at = (kind, who, round) => rows.find((r) => r.kind === kind && r.who === who && r.round === round);
const contenders = [...new Set(rows.map((r) => r.who))];
const roundList = Array.from({ length: rounds }, (_, i) => i + 1);

const out = { cores: +cores, connections: +connections, duration, rounds, contenders: {} };
for (const who of contenders) {
  const per = (f) => roundList.map((r) => f(r)).filter((x) => Number.isFinite(x));
  const c = {
    rps: spread(per((r) => at("load", who, r).rps)),
    rps_vs_nginx: spread(per((r) => at("load", who, r).rps / at("load", "nginx", r).rps)),
    cpu_us_per_request: spread(per((r) => at("load", who, r).cpuNs / 1000)),
    cpu_vs_nginx: spread(per((r) => at("load", who, r).cpuNs / at("load", "nginx", r).cpuNs)),
    errors_under_load: rows.filter((r) => r.who === who && r.kind === "load").reduce((a, r) => a + r.errors, 0),
    low_load_p50_us: spread(per((r) => at("low", who, r).p50)),
    low_load_p99_us: spread(per((r) => at("low", who, r).p99)),
    added_p50_us: spread(per((r) => at("low", who, r).p50 - at("low", "direct", r).p50)),
    added_p99_us: spread(per((r) => at("low", who, r).p99 - at("low", "direct", r).p99)),
  };
  const ttft = roundList
    .map((r) => `${dir}/ttft-${who}-${r}.json`)
    .filter((f) => fs.existsSync(f))
    .map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
  if (ttft.length) {
    c.ttft_ms = spread(ttft.map((t) => median(t.ttft_ms)));
    c.stream_text_chunks = spread(ttft.map((t) => median(t.tokens)));
  }
  out.contenders[who] = c;
}
for (const who of Object.keys(out.contenders)) {
  const c = out.contenders[who];
  if (c.ttft_ms && out.contenders.direct?.ttft_ms) {
    c.added_ttft_ms = spread(
      roundList
        .filter((r) => fs.existsSync(`${dir}/ttft-${who}-${r}.json`))
        .map(
          (r) =>
            median(JSON.parse(fs.readFileSync(`${dir}/ttft-${who}-${r}.json`, "utf8")).ttft_ms) -
            median(JSON.parse(fs.readFileSync(`${dir}/ttft-direct-${r}.json`, "utf8")).ttft_ms),
        ),
    );
  }
}
const f = (s, d = 2) => `${s.median.toFixed(d)} [${s.min.toFixed(d)}–${s.max.toFixed(d)}]`;
const lines = [
  `gateway (${cores} cores; ${rounds} rounds interleaved; wrk -t1 -c${connections} -d${duration}; 16-token chat)`,
  `  contender       req/s vs nginx         CPU/request µs (vs nginx)          added p50 µs (c=1)     added p99 µs (c=1)     added TTFT ms (100-token stream)`,
];
for (const [who, c] of Object.entries(out.contenders)) {
  lines.push(
    `  ${who.padEnd(14)}  ${f(c.rps_vs_nginx).padEnd(21)}  ${f(c.cpu_us_per_request, 0)} (${f(c.cpu_vs_nginx)})`.padEnd(76) +
      `  ${f(c.added_p50_us, 0).padEnd(21)}  ${f(c.added_p99_us, 0).padEnd(21)}  ${c.added_ttft_ms ? f(c.added_ttft_ms) : "-"}` +
      (c.errors_under_load ? `  non-2xx ${c.errors_under_load}` : ""),
  );
}
out.text = lines.join("\n");
console.log(JSON.stringify(out, null, 1));
