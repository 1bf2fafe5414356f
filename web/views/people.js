// People: teams, users and service accounts with their spend this month, percent of their wallet,
// requests, tokens and a status colour; a click shows that person's spend by model and session.
import { useState } from "preact/hooks";

import { ErrorNote, StatusDot, Table, api, count, html, money, usePoll, walletStatus } from "../lib.js";
import { WhyButton } from "./diagnose.js";

const monthStart = () => {
  const d = new Date();
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)).toISOString();
};

function Detail({ person, onClose }) {
  const { data, error } = usePoll(async () => {
    const scope = `${person.kind}:${person.id}`;
    const from = encodeURIComponent(monthStart());
    const [models, sessions] = await Promise.all([
      api(`/api/v1/spend?scope=${scope}&group_by=model&from=${from}`),
      api(`/api/v1/spend?scope=${scope}&group_by=session&from=${from}`),
    ]);
    return { models, sessions };
  }, [person.id]);
  const cols = (title) => [
    { key: "group", title },
    { key: "cost", title: "Spend", num: true, render: (r) => money(r.cost), sort: (r) => Number(r.cost) },
    { key: "requests", title: "Requests", num: true, render: (r) => count(r.requests) },
    { key: "tokens", title: "Tokens", num: true, render: (r) => count(tokens(r)), sort: tokens },
  ];
  return html`<section class="card detail" aria-label=${`${person.name} in detail`}>
    <div class="detail-head"><h3>${person.name}: spend this month</h3>
      <button class="link" onClick=${onClose}>Close</button></div>
    <${ErrorNote} error=${error} />
    ${data && html`<h4>By model</h4>
      <${Table} label="Spend by model" columns=${cols("Model")}
        rows=${data.models.data.map((r) => ({ ...r, group: r.group || "(no model)" }))} />
      <h4>By session</h4>
      <${Table} label="Spend by session" columns=${cols("Session")}
        rows=${data.sessions.data.map((r) => ({ ...r, group: r.group || "(no session)" }))} />`}
  </section>`;
}

const tokens = (r) => Object.values(r.tokens ?? {}).reduce((a, b) => a + Number(b), 0);

export function People({ me }) {
  const [tenant, setTenant] = useState(null);
  const [open, setOpen] = useState(null);
  const { data, error } = usePoll(async () => {
    const [tenants, teams, users, accounts, wallets] = await Promise.all([
      api("/api/v1/tenants"), api("/api/v1/teams"), api("/api/v1/users"),
      api("/api/v1/service-accounts"), api("/api/v1/wallets")]);
    const chosen = tenant ?? me.tenant?.id ?? tenants.data[0]?.id;
    const scope = me.role === "team-lead" ? `team:${me.team.id}` : `tenant:${chosen}`;
    const from = encodeURIComponent(monthStart());
    const [byUser, byTeam] = chosen ? await Promise.all([
      api(`/api/v1/spend?scope=${scope}&group_by=user&from=${from}`),
      api(`/api/v1/spend?scope=${scope}&group_by=team&from=${from}`)]) : [{ data: [] }, { data: [] }];
    return { tenants: tenants.data, teams: teams.data, users: users.data, accounts: accounts.data,
             wallets: wallets.data, byUser: byUser.data, byTeam: byTeam.data, chosen };
  }, [tenant]);
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const spendOf = (list, id) => list.find((r) => r.group === id) ?? { cost: "0", requests: 0, tokens: {} };
  const walletOf = (kind, id) => data.wallets.find((w) => w.scope.kind === kind && w.scope.id === id && !w.model);
  const teamName = Object.fromEntries(data.teams.map((t) => [t.id, t.name]));
  const rows = [];
  const add = (kind, p, spend) => {
    const w = walletOf(kind, p.id);
    rows.push({ kind, id: p.id, name: p.name, team: teamName[p.team] ?? (kind === "team" ? "" : "—"),
                cost: Number(spend.cost), requests: spend.requests, tokens: tokens(spend),
                percent: w ? Number(w.percent_used) : null, status: walletStatus(w) });
  };
  for (const t of data.teams.filter((t) => t.tenant === data.chosen)) add("team", t, spendOf(data.byTeam, t.id));
  for (const u of data.users.filter((u) => u.tenant === data.chosen)) add("user", u, spendOf(data.byUser, u.id));
  for (const a of data.accounts.filter((a) => a.tenant === data.chosen)) {
    add("service_account", a, spendOf(data.byUser, a.id));
  }
  const columns = [
    { key: "status", title: "", nosort: true, render: (r) => html`<${StatusDot} status=${r.status} />` },
    { key: "name", title: "Name", render: (r) => html`<span class="name">${r.name}</span>
      ${r.kind !== "service_account" && html`<${WhyButton} kind=${r.kind} name=${r.name} />`}` },
    { key: "kind", title: "Kind", render: (r) => r.kind.replace("_", " ") },
    { key: "team", title: "Team" },
    { key: "cost", title: "Spend this month", num: true, render: (r) => money(r.cost) },
    { key: "percent", title: "Of wallet", num: true, sort: (r) => r.percent ?? -1,
      render: (r) => (r.percent === null ? "—" : `${r.percent}%`) },
    { key: "requests", title: "Requests", num: true, render: (r) => count(r.requests) },
    { key: "tokens", title: "Tokens", num: true, render: (r) => count(r.tokens) },
  ];
  return html`<h2>People</h2>
    <${ErrorNote} error=${error} />
    ${me.role === "platform-admin" && html`<label class="inline">Tenant
      <select value=${data.chosen} onChange=${(e) => setTenant(e.target.value)}>
        ${data.tenants.map((t) => html`<option value=${t.id}>${t.name}</option>`)}
      </select></label>`}
    <p class="muted legend"><${StatusDot} status="green" /> under its first alert
      <${StatusDot} status="amber" /> past an alert <${StatusDot} status="red" /> at a hard limit or its last alert</p>
    <div class="card"><${Table} label="People" columns=${columns} rows=${rows}
      onRow=${(r) => r.kind !== "team" && setOpen(r)} empty="No teams or people in this tenant yet." /></div>
    ${open && html`<${Detail} person=${open} onClose=${() => setOpen(null)} />`}`;
}
