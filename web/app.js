// The Purser console: sign in with a key, then views of spend, people, models, GPUs, queues, keys,
// agent runs and the audit log, each showing only what the key's role may see (the API decides; the
// console asks it). Reads nothing but Purser's own REST API; refreshes every few seconds.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";

import { ApiError, api, html, session } from "./lib.js";
import { Audit } from "./views/audit.js";
import { Gpus } from "./views/gpus.js";
import { Keys } from "./views/keys.js";
import { Models } from "./views/models.js";
import { Overview } from "./views/overview.js";
import { People } from "./views/people.js";
import { Queues } from "./views/queues.js";
import { Sessions } from "./views/sessions.js";

const VIEWS = [
  { id: "overview", title: "Overview", view: Overview },
  { id: "people", title: "People", view: People, roles: ["platform-admin", "tenant-admin", "team-lead"] },
  { id: "models", title: "Models", view: Models },
  { id: "gpus", title: "GPU pools", view: Gpus },
  { id: "queues", title: "Queues", view: Queues },
  { id: "keys", title: "Keys", view: Keys },
  { id: "sessions", title: "Agent runs", view: Sessions },
  { id: "audit", title: "Audit", view: Audit, roles: ["platform-admin", "tenant-admin"] },
];

function ServerStatus() {
  const [s, setS] = useState({ health: "checking…", ready: "checking…" });
  useEffect(() => {
    const load = async () => {
      const next = {};
      try {
        const info = await (await fetch("/api/v1/info")).json();
        next.version = `v${info.version} · ${info.commit}`;
        next.installation = info.installation_id;
        next.warnings = info.warnings ?? [];
      } catch (e) {
        next.version = "unreachable";
      }
      try {
        next.health = (await fetch("/healthz")).ok ? "healthy" : "unhealthy";
      } catch (e) {
        next.health = "unreachable";
      }
      try {
        next.ready = (await fetch("/readyz")).ok ? "ready" : "not ready";
      } catch (e) {
        next.ready = "unreachable";
      }
      setS(next);
    };
    load();
    const t = setInterval(load, 5000);
    return () => clearInterval(t);
  }, []);
  const pill = (ok) => `pill ${ok ? "ok" : "bad"}`;
  return html`<section class="card status" aria-label="Server">
    <dl>
      <dt>Health</dt><dd><span id="health" class=${pill(s.health === "healthy")}>${s.health}</span></dd>
      <dt>Ready</dt><dd><span id="ready" class=${pill(s.ready === "ready")}>${s.ready}</span></dd>
      <dt>Version</dt><dd id="version">${s.version ?? "—"}</dd>
      <dt>Installation</dt><dd id="installation">${s.installation ?? "—"}</dd>
    </dl>
    ${(s.warnings ?? []).length > 0 && html`<ul id="warnings" class="warnings" role="alert">
      ${s.warnings.map((w) => html`<li>${w}</li>`)}
    </ul>`}
  </section>`;
}

// Single sign-on, when the server has it: "Sign in with <issuer>" beside the key field.
function SingleSignOn({ sso }) {
  if (!sso?.enabled) return null;
  const back = encodeURIComponent(location.pathname + location.hash);
  return html`<div class="sso">
    <a class="button" id="sso-signin" href=${`${sso.login_url}?return_to=${back}`}>
      Sign in with ${sso.display_name}</a>
    <p class="muted">or with an API key:</p>
  </div>`;
}

function SignIn({ onSignedIn, notice, sso }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(notice);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const me = await api("/api/v1/whoami", { key: key.trim() });
      session.set(key.trim());
      onSignedIn(me);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401
        ? `That key was not accepted: ${err.message}`
        : err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<main class="signin">
    <h1>Purser</h1>
    <form class="card" onSubmit=${submit} aria-label="Sign in">
      <h2>Sign in</h2>
      <${SingleSignOn} sso=${sso} />
      <label for="key">API key</label>
      <input id="key" name="key" type="password" autocomplete="off" required
        value=${key} onInput=${(e) => setKey(e.target.value)} placeholder="pk-…" />
      <button type="submit" disabled=${busy}>${busy ? "Signing in…" : "Sign in"}</button>
      ${error && html`<p class="error" role="alert" id="signin-error">${error}</p>`}
      <p class="muted">Platform admins, tenant admins and team leads see what their role allows.</p>
    </form>
    <${ServerStatus} />
  </main>`;
}

function currentView() {
  const id = location.hash.replace(/^#\/?/, "") || "overview";
  return id.split("/")[0];
}

function Shell({ me, onSignOut }) {
  const [view, setView] = useState(currentView());
  useEffect(() => {
    const on = () => setView(currentView());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  const allowed = VIEWS.filter((v) => !v.roles || v.roles.includes(me.role));
  const active = allowed.find((v) => v.id === view) ?? allowed[0];
  const who = me.tenant ? `${me.name} · ${me.tenant.name}${me.team ? " / " + me.team.name : ""}` : me.name;
  return html`<div class="shell">
    <header class="bar">
      <h1>Purser</h1>
      <nav aria-label="Views">${allowed.map((v) => html`<a href=${`#/${v.id}`}
        aria-current=${v === active ? "page" : undefined}>${v.title}</a>`)}</nav>
      <span class="who" id="whoami">${who} <span class="role">${me.role}</span></span>
      <button class="link" onClick=${onSignOut}>Sign out</button>
    </header>
    <main id="view" data-view=${active.id}>
      <${active.view} me=${me} />
    </main>
  </div>`;
}

function App() {
  const [me, setMe] = useState(null);
  const [checking, setChecking] = useState(true);
  const [notice, setNotice] = useState(null);
  const [sso, setSso] = useState(null);
  const signedIn = (who) => {
    if (who.session) session.setCsrf(who.session.csrf_token);
    setMe(who);
  };
  useEffect(() => {
    // A key kept for this tab, else the sign-in cookie when the server says this browser has a
    // live session (asked first, so that a visitor who is not signed in meets no refusal).
    const withKey = !!session.key();
    (async () => {
      let info = null;
      try {
        const r = await fetch("/auth/oidc/info", { headers: { Accept: "application/json" } });
        if (r.ok) info = await r.json();
      } catch (e) {
        info = null;
      }
      setSso(info);
      if (!withKey && !info?.signed_in) return;
      try {
        signedIn(await api("/api/v1/whoami"));
      } catch (e) {
        session.clear();
        if (withKey) setNotice(`Your key is no longer accepted: ${e.message}`);
      }
    })().finally(() => setChecking(false));
  }, []);
  // A key revoked while signed in: the next 401 sends the user back to sign in.
  useEffect(() => {
    const on = (e) => {
      session.clear();
      setMe(null);
      setNotice(`Signed out: ${e.detail}`);
    };
    addEventListener("purser:unauthorized", on);
    return () => removeEventListener("purser:unauthorized", on);
  }, []);
  if (checking) return html`<p class="loading">Signing in…</p>`;
  if (!me) return html`<${SignIn} onSignedIn=${signedIn} notice=${notice} sso=${sso} />`;
  return html`<${Shell} me=${me} onSignOut=${async () => {
    // A session ends on the server (everywhere); a key only leaves this tab.
    if (me.session) {
      try {
        await api("/auth/signout", { method: "POST" });
      } catch (e) {
        setNotice(`The session may not have ended: ${e.message}`);
      }
    }
    session.clear();
    setMe(null);
  }} />`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
