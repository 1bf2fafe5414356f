// Audit: the tamper-evident log, newest first, 25 entries a page, filtered by action, actor and
// time; who did what to whom by name, and what changed in words; for platform admins, the result
// of verifying its hash chain.
import { useState } from "preact/hooks";

import { ErrorNote, Table, api, html, usePoll, when } from "../lib.js";

const PAGE = 25;

// Fields a reader does not need in the summary (the raw entry keeps them).
const HIDDEN = new Set(["id", "created_at", "hash", "percent_used", "remaining", "reserved", "spent",
  "previous_valid_until", "revoked_at", "derived_from", "tenant", "window"]);

// "2026-12-01T22:48:28.123Z" as "Dec 1, 22:48" (local time); other text as it is.
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d/;
const shortTime = (t) => new Date(t).toLocaleString("en-US", { month: "short", day: "numeric",
  hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });

// Everything the caller may see that has a name, by id.
async function directory() {
  const lists = await Promise.all(["tenants", "teams", "users", "service-accounts", "keys"]
    .map((l) => api(`/api/v1/${l}`).catch(() => ({ data: [] }))));
  const names = new Map();
  for (const l of lists) for (const x of l.data) names.set(x.id, x.name);
  return names;
}

// A value in words: ids as names, {kind, id} as "team ml", lists joined, empties left out.
function words(v, names) {
  if (v === null || v === undefined || v === "") return null;
  if (Array.isArray(v)) return v.length === 0 ? null : v.map((x) => words(x, names)).join(", ");
  if (typeof v === "object") {
    if (v.kind && v.id) return `${v.kind.replace("_", " ")} ${names.get(v.id) ?? v.id}`;
    return Object.entries(v).map(([k, x]) => `${k} ${words(x, names) ?? "—"}`).join(", ");
  }
  if (typeof v === "string" && names.has(v)) return names.get(v);
  if (typeof v === "string" && ISO.test(v)) return shortTime(v);
  return String(v);
}

// What an entry says: for a change, each field that changed ("limit: 40.00 → 60.00"); otherwise
// the fields that matter.
function Details({ entry, names }) {
  const { before, after } = entry;
  let parts = [];
  if (before && after && typeof before === "object" && typeof after === "object") {
    for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
      if (HIDDEN.has(k) && k !== "revoked_at") continue;
      const was = words(before[k], names), is = words(after[k], names);
      if (was !== is) parts.push([k, `${was ?? "—"} → ${is ?? "—"}`]);
    }
  } else {
    const o = after ?? before;
    if (o && typeof o === "object") {
      // What was made: its fields that say something (not the zeros and falses of defaults).
      parts = Object.entries(o).filter(([k, v]) => !HIDDEN.has(k) && v !== 0 && v !== false)
        .map(([k, v]) => [k, words(v, names)]).filter(([, v]) => v !== null);
    } else if (o !== null && o !== undefined) {
      parts = [["", String(o)]];
    }
  }
  const raw = JSON.stringify({ before, after }, null, 2);
  return html`<div class="audit-details">
    ${parts.length === 0 ? html`<span class="muted">—</span>` : html`<ul class="changes">
      ${parts.map(([k, v]) => html`<li>${k && html`<span class="muted">${k.replaceAll("_", " ")}</span> `}${v}</li>`)}
    </ul>`}
    <details><summary>the entry as recorded</summary><pre class="raw">${raw}</pre></details>
  </div>`;
}

export function Audit({ me }) {
  const [filters, setFilters] = useState({ action: "", actor: "", from: "" });
  const [draft, setDraft] = useState(filters);
  // The pages above this one, newest first: each the `before` it was read with (null: the top).
  const [pages, setPages] = useState([null]);
  const [verdict, setVerdict] = useState(null);
  const [failure, setFailure] = useState(null);
  const before = pages[pages.length - 1];
  const { data, error } = usePoll(async () => {
    const names = await directory();
    const q = new URLSearchParams({ order: "desc", limit: String(PAGE) });
    if (filters.action) q.set("action", filters.action);
    if (filters.actor) {
      // A name or an id.
      const id = [...names].find(([, n]) => n === filters.actor)?.[0] ?? filters.actor;
      q.set("actor", id);
    }
    if (filters.from) q.set("from", new Date(filters.from).toISOString());
    if (before) q.set("before", String(before));
    return { names, page: await api(`/api/v1/audit?${q}`) };
  }, [JSON.stringify(filters), before]);
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
  const rows = data?.page.data ?? [];
  const pager = data && html`<div class="pager" role="group" aria-label="Pages">
    <button class="link" disabled=${pages.length === 1} onClick=${() => setPages([null])}>Newest</button>
    <button class="link" disabled=${pages.length === 1} onClick=${() => setPages(pages.slice(0, -1))}>‹ Newer</button>
    <span class="muted">${rows.length ? `entries ${rows[0].seq}–${rows[rows.length - 1].seq} · ` : ""}page ${pages.length}</span>
    <button class="link" disabled=${!data.page.more} onClick=${() => setPages([...pages, rows[rows.length - 1].seq])}>Older ›</button>
  </div>`;
  const who = (e) => html`<span class="nowrap">${e.actor_name ?? (e.actor === "system" ? "Purser" : e.actor)}</span>
    <span class="role">${e.actor_role}</span>`;
  const target = (e) => {
    const [kind] = e.target.split(":");
    if (!e.target_name) return html`<code class="small">${e.target}</code>`;
    return kind === "wallet" ? e.target_name
      : html`<span class="muted small">${kind.replace("_", " ")}</span> ${e.target_name}`;
  };
  return html`<h2>Audit log</h2>
    <${ErrorNote} error=${error || failure} />
    <form class="card row" aria-label="Filter the audit log"
      onSubmit=${(e) => { e.preventDefault(); setPages([null]); setFilters(draft); }}>
      ${field("action", "Action", "text", "key.create, or key. for all")}
      ${field("actor", "Actor", "text", "a name or an id")}
      ${field("from", "Since", "datetime-local")}
      <button type="submit">Filter</button>
    </form>
    ${me.role === "platform-admin" ? html`<div class="card row">
      <button onClick=${verify}>Verify the chain</button>
      ${verdict && html`<span id="verdict" class=${`pill ${verdict.ok ? "ok" : "bad"}`}>${verdict.ok
        ? `intact: ${verdict.entries} entries` : `broken at entry ${verdict.first_bad_seq}: ${verdict.problem}`}</span>`}
    </div>` : html`<p class="muted">Verifying the whole chain is for platform admins.</p>`}
    ${data && html`<div class="card">${pager}<${Table} label="Audit entries" rows=${rows} sortable=${false}
      empty="No entries match."
      columns=${[{ key: "seq", title: "#", num: true }, { key: "at", title: "When", render: (e) => html`<span class="nowrap" title=${when(e.at)}>${shortTime(e.at)}</span>` },
        { key: "actor", title: "Who", render: who },
        { key: "action", title: "Action", render: (e) => html`<code class="action">${e.action}</code>` },
        { key: "target", title: "Target", render: target },
        { key: "after", title: "What", render: (e) => html`<${Details} entry=${e} names=${data.names} />` }]} />
      ${pager}</div>`}`;
}
