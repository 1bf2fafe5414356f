// Overview: each tenant's (or the signed-in scope's) spend this period against its wallets,
// spend over time, and the budget alerts that fired.
import { useState } from "preact/hooks";

import { Bar, Chart, ErrorNote, api, html, money, usePoll, walletStatus, when } from "../lib.js";

// The scopes this role looks at: tenants for admins, the team for a lead, oneself otherwise.
async function scopesOf(me) {
  if (me.role === "platform-admin" || me.role === "tenant-admin") {
    const tenants = (await api("/api/v1/tenants")).data;
    return tenants.map((t) => ({ kind: "tenant", id: t.id, name: t.name }));
  }
  if (me.role === "team-lead" && me.team) return [{ kind: "team", id: me.team.id, name: me.team.name }];
  return [{ kind: me.kind, id: me.id, name: me.name }];
}

const HOUR = 3600e3;
const RANGES = {
  day: { label: "Last 24 hours", group: "hour", ms: 24 * HOUR, step: HOUR },
  month: { label: "Last 30 days", group: "day", ms: 30 * 24 * HOUR, step: 24 * HOUR },
};

// The spend API's UTC buckets ("2026-11-30" or "2026-11-30T14:00") as epoch milliseconds.
const bucketMs = (group) => Date.parse(/T\d\d:\d\d$/.test(group) ? `${group}:00Z` : `${group}T00:00:00Z`);

// Every bucket of the range, zero where nothing was spent, as [seconds, dollars].
function series(rows, range) {
  const { ms, step } = RANGES[range];
  const end = Math.floor(Date.now() / step) * step;
  const byBucket = new Map((rows ?? []).map((d) => [bucketMs(d.group), Number(d.cost)]));
  const out = [];
  for (let t = end - Math.round(ms / step) * step; t <= end; t += step) {
    out.push([t / 1000, byBucket.get(t) ?? 0]);
  }
  return out;
}

export function Overview({ me }) {
  const [range, setRange] = useState("day");
  const { data, error } = usePoll(async () => {
    const scopes = await scopesOf(me);
    const wallets = (await api("/api/v1/wallets")).data;
    const from = new Date(Date.now() - RANGES[range].ms).toISOString();
    const series = await Promise.all(scopes.map((s) =>
      api(`/api/v1/spend?scope=${s.kind}:${s.id}&group_by=${RANGES[range].group}&from=${encodeURIComponent(from)}`)
        .catch(() => null)));
    let alerts = null;
    const people = {};
    if (me.role === "platform-admin" || me.role === "tenant-admin") {
      alerts = (await api("/api/v1/audit?action=budget.alert&order=desc&limit=20")).data;
      const lists = await Promise.all(["teams", "users", "service-accounts"].map((l) => api(`/api/v1/${l}`)));
      for (const l of lists) for (const p of l.data) people[p.id] = p.name;
    }
    return { scopes, wallets, series, alerts, people };
  }, [range]);
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const names = { ...data.people, ...Object.fromEntries(data.scopes.map((s) => [s.id, s.name])) };
  const walletName = (target) => {
    const w = data.wallets.find((x) => `wallet:${x.id}` === target);
    if (!w) return "a wallet";
    return `${w.scope.kind.replace("_", " ")} ${names[w.scope.id] ?? w.scope.id}`;
  };
  return html`<h2>Overview</h2>
    <${ErrorNote} error=${error} />
    <div class="toolbar" role="group" aria-label="Period">
      ${Object.entries(RANGES).map(([id, r]) => html`<button class=${range === id ? "on" : ""}
        aria-pressed=${range === id} onClick=${() => setRange(id)}>${r.label}</button>`)}
    </div>
    ${data.scopes.map((s, i) => {
      const own = data.wallets.filter((w) => w.scope.kind === s.kind && w.scope.id === s.id);
      const points = series(data.series[i]?.data, range);
      return html`<section class="card scope" data-scope=${`${s.kind}:${s.id}`} aria-label=${s.name}>
        <h3>${s.name} <span class="muted">${s.kind.replace("_", " ")}</span></h3>
        ${own.length === 0 && html`<p class="muted">No wallet on this ${s.kind}.</p>`}
        ${own.map((w) => {
          const status = walletStatus(w);
          return html`<div class="wallet" data-status=${status}>
            <div class="wallet-head">
              <span>${w.model ? `${w.model} wallet` : "Wallet"} · ${w.period}${w.hard ? " · hard limit" : ""}</span>
              <strong class="pct">${Number(w.percent_used)}% used</strong>
            </div>
            <${Bar} percent=${w.percent_used} status=${status} />
            <div class="muted small">${money(w.spent)} spent of ${money(w.limit)}${w.window
              ? ` · resets ${when(w.window.end)}` : ""}</div>
          </div>`;
        })}
        <h4>Spend, ${RANGES[range].label.toLowerCase()}: ${money(data.series[i]?.total ?? 0)}</h4>
        <${Chart} points=${points} label=${`${s.name} spend`} />
      </section>`;
    })}
    ${data.alerts && html`<section class="card">
      <h3>Alerts that fired</h3>
      ${data.alerts.length === 0 ? html`<p class="muted">No budget alerts.</p>` : html`<ul class="alerts">
        ${data.alerts.map((a) => html`<li>
          <span class="muted">${when(a.at)}</span> ${walletName(a.target)}: crossed ${a.after?.threshold}%
          (${money(a.after?.spent)} of ${money(a.after?.limit)})${names[a.tenant] ? ` · ${names[a.tenant]}` : ""}
        </li>`)}</ul>`}
    </section>`}`;
}
