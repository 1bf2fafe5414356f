// Keys: create (the secret is shown once, with a copy button), list, revoke and rotate, within
// what the signed-in role may do (the API refuses the rest, and the refusal is shown). A key's
// priority orders its requests when a model's servers are saturated; a key gives at most its own
// unless an admin makes it.
import { useState } from "preact/hooks";

import { ErrorNote, Table, api, html, usePoll, when } from "../lib.js";

// Most important last, as the API orders them; sorting by priority sorts by this.
const PRIORITIES = ["sheddable", "standard", "critical"];

function Secret({ secret, onDone }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret.key);
      setCopied(true);
    } catch (e) {
      setCopied(false);
    }
  };
  return html`<div class="card secret" role="status" aria-label="New key">
    <p><strong>${secret.title}.</strong> This is the only time the secret is shown; store it now.</p>
    <code id="new-secret">${secret.key}</code>
    <div class="row"><button onClick=${copy}>${copied ? "Copied" : "Copy"}</button>
      <button class="link" onClick=${onDone}>Done</button></div>
  </div>`;
}

export function Keys({ me }) {
  const [name, setName] = useState("");
  const [owner, setOwner] = useState("");
  const [priority, setPriority] = useState("standard");
  const [secret, setSecret] = useState(null);
  const [failure, setFailure] = useState(null);
  const { data, error, reload } = usePoll(async () => {
    const keys = (await api("/api/v1/keys")).data;
    let owners = [];
    if (me.role !== "member") {
      const [users, accounts] = await Promise.all([api("/api/v1/users"), api("/api/v1/service-accounts")]);
      owners = [...users.data.map((u) => ({ kind: "user", id: u.id, name: u.name })),
                ...accounts.data.map((a) => ({ kind: "service_account", id: a.id, name: a.name }))];
    }
    return { keys, owners };
  });
  const act = async (fn) => {
    setFailure(null);
    try {
      await fn();
      await reload();
    } catch (e) {
      setFailure(e);
    }
  };
  const create = (e) => {
    e.preventDefault();
    act(async () => {
      const body = { name: name.trim() };
      if (owner) {
        const [kind, id] = owner.split(":");
        body.owner = { kind, id };
      }
      // Left out, the API gives standard (a sheddable key's own keys stay sheddable).
      if (priority !== "standard") body.priority = priority;
      const k = await api("/api/v1/keys", { method: "POST", body });
      setSecret({ title: `Key "${k.name}" created`, key: k.key });
      setName("");
      setPriority("standard");
    });
  };
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const ownerName = Object.fromEntries(data.owners.map((o) => [o.id, o.name]));
  ownerName[me.id] = me.name;
  const columns = [
    { key: "name", title: "Name" },
    { key: "owner", title: "Owner", render: (k) => ownerName[k.owner.id] ?? `${k.owner.kind} ${k.owner.id}`,
      sort: (k) => ownerName[k.owner.id] ?? k.owner.id },
    { key: "priority", title: "Priority", render: (k) => k.priority ?? "standard",
      sort: (k) => PRIORITIES.indexOf(k.priority ?? "standard") },
    { key: "created_at", title: "Created", render: (k) => when(k.created_at) },
    { key: "expires_at", title: "Expires", render: (k) => when(k.expires_at) },
    { key: "state", title: "State", sort: (k) => (k.revoked_at ? 1 : 0),
      render: (k) => (k.revoked_at ? html`<span class="pill bad">revoked</span>` : html`<span class="pill ok">active</span>`) },
    { key: "actions", title: "", nosort: true, render: (k) => (k.revoked_at ? "" : html`<span class="row">
      <button class="small" aria-label=${`Rotate ${k.name}`} onClick=${(e) => { e.stopPropagation(); act(async () => {
        const r = await api(`/api/v1/keys/${k.id}/rotate`, { method: "POST", body: {} });
        setSecret({ title: `Key "${k.name}" rotated`, key: r.key });
      }); }}>Rotate</button>
      <button class="small danger" aria-label=${`Revoke ${k.name}`} onClick=${(e) => { e.stopPropagation();
        if (confirm(`Revoke the key "${k.name}"? Requests with it will be refused at once.`)) {
          act(() => api(`/api/v1/keys/${k.id}`, { method: "DELETE" }));
        } }}>Revoke</button></span>`) },
  ];
  return html`<h2>Keys</h2>
    <${ErrorNote} error=${error || failure} />
    ${secret && html`<${Secret} secret=${secret} onDone=${() => setSecret(null)} />`}
    <form class="card row" onSubmit=${create} aria-label="Create a key">
      <label>Name <input id="key-name" required maxlength="64" value=${name}
        onInput=${(e) => setName(e.target.value)} /></label>
      ${data.owners.length > 0 && html`<label>Owner <select id="key-owner" value=${owner}
        onChange=${(e) => setOwner(e.target.value)}>
        <option value="">myself</option>
        ${data.owners.map((o) => html`<option value=${`${o.kind}:${o.id}`}>${o.name} (${o.kind.replace("_", " ")})</option>`)}
      </select></label>`}
      <label>Priority <select id="key-priority" value=${priority}
        onChange=${(e) => setPriority(e.target.value)}>
        <option value="standard">standard</option>
        <option value="critical">critical</option>
        <option value="sheddable">sheddable</option>
      </select></label>
      <button type="submit">Create key</button>
    </form>
    <div class="card"><${Table} label="Keys" columns=${columns} rows=${data.keys} /></div>`;
}
