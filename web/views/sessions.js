// Agent runs: one session's model and tool calls in order (x-purser-session, or a tool call's
// _meta), with what each cost, its tokens, duration and whether it failed, and the run's totals —
// so a lead sees what an agent spent and why. The recent runs of the caller's own scope are listed
// to pick from; any run can be looked up by its id (#/sessions/<id>). The API shows each reader
// only the calls they may read spend of.
import { useEffect, useState } from "preact/hooks";

import { ErrorNote, Table, api, count, html, money, usePoll, when } from "../lib.js";

const sessionInHash = () => {
  const [, id] = location.hash.replace(/^#\/?/, "").split("/");
  return id ? decodeURIComponent(id) : "";
};

// The scope whose runs a role sees by default; platform admins look runs up by id.
function ownScope(me) {
  if (me.role === "member") return `${me.kind}:${me.id}`;
  if (me.role === "team-lead" && me.team) return `team:${me.team.id}`;
  if (me.role === "tenant-admin" && me.tenant) return `tenant:${me.tenant.id}`;
  return null;
}

function Recent({ me, onPick }) {
  const scope = ownScope(me);
  const { data, error } = usePoll(async () => {
    if (!scope) return [];
    const from = new Date(Date.now() - 7 * 24 * 3600 * 1000).toISOString();
    const spend = await api(`/api/v1/spend?scope=${encodeURIComponent(scope)}&group_by=session` +
                            `&from=${encodeURIComponent(from)}`);
    return spend.data.filter((r) => r.group !== "");
  }, [scope], 10000);
  if (!scope) return null;
  return html`<section class="card" aria-label="Recent runs">
    <h3>Runs in the last 7 days</h3>
    <${ErrorNote} error=${error} />
    ${data && html`<${Table} label="Recent runs" rows=${data} onRow=${(r) => onPick(r.group)}
      empty="No calls named a session in the last 7 days."
      columns=${[
        { key: "group", title: "Session" },
        { key: "requests", title: "Calls", num: true, sort: (r) => r.requests },
        { key: "cost", title: "Cost", num: true, sort: (r) => Number(r.cost), render: (r) => money(r.cost) },
      ]} />`}
  </section>`;
}

function Run({ id }) {
  const { data, error } = usePoll(() => api(`/api/v1/sessions/${encodeURIComponent(id)}`), [id], 5000);
  if (error && !data) return html`<${ErrorNote} error=${error} />`;
  if (!data) return html`<p class="loading">Loading the run…</p>`;
  const t = data.total;
  return html`<section class="card" aria-label="Run">
    <h3>Run <code id="session-id">${data.id}</code></h3>
    <dl class="facts" id="session-total">
      <dt>Cost</dt><dd id="session-cost">${money(t.cost)}</dd>
      <dt>Calls</dt><dd id="session-calls">${count(t.calls)} (${count(t.model_calls)} model, ${count(t.tool_calls)} tool)</dd>
      <dt>Failed</dt><dd id="session-errors">${count(t.errors)}</dd>
      <dt>Time in calls</dt><dd>${(t.duration_ms / 1000).toFixed(1)} s</dd>
      <dt>Tokens</dt><dd>${count(t.tokens.input)} in, ${count(t.tokens.output)} out</dd>
      <dt>From</dt><dd>${when(data.first_at)} to ${when(data.last_at)}</dd>
    </dl>
    ${data.truncated && html`<p class="muted">Only the first ${count(data.data.length)} calls are shown.</p>`}
    <${Table} label="Calls" sortable=${false} rows=${data.data.map((c, i) => ({ ...c, n: i + 1 }))}
      columns=${[
        { key: "n", title: "#", num: true },
        { key: "at", title: "At", render: (c) => when(c.at) },
        { key: "kind", title: "Kind" },
        { key: "model", title: "Model or tool", render: (c) => c.tool ?? c.model },
        { key: "status", title: "Outcome", render: (c) => c.status >= 200 && c.status < 300
          ? "ok" : html`<span class="bad">failed (${c.status})</span>` },
        { key: "latency_ms", title: "ms", num: true },
        { key: "tokens", title: "Tokens in / out", num: true,
          render: (c) => (c.kind === "tool" ? "—" : `${count(c.tokens.input)} / ${count(c.tokens.output)}`) },
        { key: "cost", title: "Cost", num: true, render: (c) => money(c.cost) },
      ]} />
  </section>`;
}

export function Sessions({ me }) {
  const [id, setId] = useState(sessionInHash());
  const [draft, setDraft] = useState(id);
  useEffect(() => {
    const on = () => {
      setId(sessionInHash());
      setDraft(sessionInHash());
    };
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  const pick = (s) => {
    location.hash = `#/sessions/${encodeURIComponent(s)}`;
  };
  return html`<div>
    <h2>Agent runs</h2>
    <form class="card row" aria-label="Find a run" onSubmit=${(e) => {
      e.preventDefault();
      if (draft.trim()) pick(draft.trim());
    }}>
      <label for="session-lookup">Session</label>
      <input id="session-lookup" value=${draft} onInput=${(e) => setDraft(e.target.value)}
        placeholder="the x-purser-session of a run" />
      <button type="submit">Show</button>
    </form>
    ${id && html`<${Run} id=${id} />`}
    <${Recent} me=${me} onPick=${pick} />
  </div>`;
}
