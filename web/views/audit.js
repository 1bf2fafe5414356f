// Audit: the tamper-evident log, newest first, filtered by action, actor and time; and, for
// platform admins, the result of verifying its hash chain.
import { useState } from "preact/hooks";

import { ErrorNote, Table, api, html, usePoll, when } from "../lib.js";

export function Audit({ me }) {
  const [filters, setFilters] = useState({ action: "", actor: "", from: "" });
  const [draft, setDraft] = useState(filters);
  const [verdict, setVerdict] = useState(null);
  const [failure, setFailure] = useState(null);
  const { data, error } = usePoll(() => {
    const q = new URLSearchParams({ order: "desc", limit: "200" });
    if (filters.action) q.set("action", filters.action);
    if (filters.actor) q.set("actor", filters.actor);
    if (filters.from) q.set("from", new Date(filters.from).toISOString());
    return api(`/api/v1/audit?${q}`);
  }, [JSON.stringify(filters)]);
  const verify = async () => {
    setFailure(null);
    try {
      setVerdict(await api("/api/v1/audit/verify"));
    } catch (e) {
      setFailure(e);
    }
  };
  const field = (key, label, type = "text", placeholder = "") => html`<label>${label}
    <input type=${type} value=${draft[key]} placeholder=${placeholder}
      onInput=${(e) => setDraft({ ...draft, [key]: e.target.value })} /></label>`;
  const show = (v) => (v === null || v === undefined ? "" : JSON.stringify(v));
  return html`<h2>Audit log</h2>
    <${ErrorNote} error=${error || failure} />
    <form class="card row" aria-label="Filter the audit log"
      onSubmit=${(e) => { e.preventDefault(); setFilters(draft); }}>
      ${field("action", "Action", "text", "key.create, or key. for all")}
      ${field("actor", "Actor id")}
      ${field("from", "Since", "datetime-local")}
      <button type="submit">Filter</button>
    </form>
    ${me.role === "platform-admin" ? html`<div class="card row">
      <button onClick=${verify}>Verify the chain</button>
      ${verdict && html`<span id="verdict" class=${`pill ${verdict.ok ? "ok" : "bad"}`}>${verdict.ok
        ? `intact: ${verdict.entries} entries` : `broken at entry ${verdict.first_bad_seq}: ${verdict.problem}`}</span>`}
    </div>` : html`<p class="muted">Verifying the whole chain is for platform admins.</p>`}
    ${data && html`<div class="card"><${Table} label="Audit entries" rows=${data.data} sortable=${false}
      empty="No entries match."
      columns=${[{ key: "seq", title: "#", num: true }, { key: "at", title: "When", render: (e) => when(e.at) },
        { key: "actor", title: "Actor", render: (e) => `${e.actor} (${e.actor_role})` },
        { key: "action", title: "Action" }, { key: "target", title: "Target" },
        { key: "after", title: "Details", render: (e) => html`<code class="small">${show(e.after ?? e.before)}</code>` }]} /></div>`}`;
}
