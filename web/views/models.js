// Models: the routes this key may use, their targets with provider and state (from the model
// servers' own metrics when they are scraped: queue, KV cache, time to first token p95), and
// their traffic over the last 24 hours: latency p50/p95, error rate, tokens and cost per 1,000
// requests.
import { Chart, ErrorNote, Table, api, count, html, money, usePoll } from "../lib.js";
import { WhyButton } from "./diagnose.js";

const ms = (v) => (v === null || v === undefined ? "—" : `${count(v)} ms`);
const pct = (v) => `${(Number(v) * 100).toFixed(1)}%`;
const maybe = (v, f) => (v === null || v === undefined ? "—" : f(v));
const tok = (s) => count(Number(s.tokens.input) + Number(s.tokens.output));

// What a scraped target's server reported over the last 15 minutes.
function TargetCharts({ target }) {
  const { data, error } = usePoll(() => api(`/api/v1/targets/${encodeURIComponent(target.provider)}/series`));
  const title = `${target.provider} · ${target.model}`;
  return html`<div class="card target-charts" data-provider=${target.provider}>
    <h3>${title} <span class=${`pill state-${target.state}`}>${target.state}</span>
      <span class="muted">${target.reason}</span></h3>
    <${ErrorNote} error=${error} />
    ${data && html`<div class="grid-2">
      <${Chart} points=${data.queue} label=${`${title} requests waiting`} height=${120}
        format=${(v) => count(Math.round(v))} empty="No queue reported yet." />
      <${Chart} points=${data.kv_cache_usage} label=${`${title} KV cache`} height=${120}
        format=${(v) => pct(v)} range=${[0, 1]} empty="No KV cache usage reported yet." />
    </div>`}
  </div>`;
}

export function Models() {
  const { data, error } = usePoll(() => api("/api/v1/routes"));
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const rows = [];
  const scraped = [];  // one chart card per scraped server, however many routes it serves
  for (const r of data.data) {
    for (const t of r.targets) {
      if (t.observed_at && !scraped.some((s) => s.provider === t.provider)) scraped.push(t);
    }
    rows.push({ route: r.alias, strategy: r.strategy, stats: r.stats, header: true });
    for (const t of r.targets) rows.push({ route: r.alias, target: t, stats: t.stats });
  }
  const columns = [
    { key: "route", title: "Route / target", render: (r) => (r.header
      ? html`<strong>${r.route}</strong> <span class="muted">${r.strategy}</span>
          <${WhyButton} kind="route" name=${r.route} />`
      : html`<span class="indent">${r.target.provider} · ${r.target.model}</span>`) },
    { key: "state", title: "State", render: (r) => (r.header ? "" :
      html`<span class=${`pill state-${r.target.state}`} title=${r.target.reason}>${r.target.state}</span>`) },
    { key: "queue", title: "Queue", num: true,
      render: (r) => (r.header ? "" : maybe(r.target.queue, count)) },
    { key: "kv", title: "KV cache", num: true,
      render: (r) => (r.header ? "" : maybe(r.target.kv_cache_usage, pct)) },
    { key: "ttft", title: "TTFT p95", num: true,
      render: (r) => (r.header ? "" : ms(r.target.ttft_p95_ms === null ? null : Math.round(r.target.ttft_p95_ms))) },
    { key: "requests", title: "Requests", num: true, render: (r) => count(r.stats.requests) },
    { key: "p50", title: "p50", num: true, render: (r) => ms(r.stats.latency_ms.p50) },
    { key: "p95", title: "p95", num: true, render: (r) => ms(r.stats.latency_ms.p95) },
    { key: "errors", title: "Errors", num: true, render: (r) => pct(r.stats.error_rate) },
    { key: "tokens", title: "Tokens", num: true, render: (r) => tok(r.stats) },
    { key: "cost", title: "Cost / 1k requests", num: true,
      render: (r) => (r.stats.cost_per_1k_requests === null ? "—" : money(r.stats.cost_per_1k_requests)) },
  ];
  return html`<h2>Models</h2>
    <${ErrorNote} error=${error} />
    <p class="muted">Traffic since ${new Date(data.from).toLocaleString()}, ${data.scope === "platform"
      ? "all tenants" : data.scope === "tenant" ? "your tenant" : "your team"}.</p>
    <div class="card"><${Table} label="Routes" columns=${columns} rows=${rows} sortable=${false}
      empty="No model routes are configured." /></div>
    ${scraped.map((t) => html`<${TargetCharts} key=${t.provider} target=${t} />`)}`;
}
