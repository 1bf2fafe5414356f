// The console's status page: reads only Purser's own endpoints and refreshes every 5 seconds.
"use strict";

function setPill(id, ok, text) {
  const el = document.getElementById(id);
  el.textContent = text;
  el.className = "pill " + (ok ? "ok" : "bad");
}

async function refresh() {
  try {
    const info = await (await fetch("/api/v1/info")).json();
    document.getElementById("version").textContent = `v${info.version} · ${info.commit}`;
    document.getElementById("installation").textContent = info.installation_id;
    document.getElementById("started").textContent = new Date(info.started_at).toLocaleString();
    document.getElementById("workers").textContent = info.workers;
  } catch (e) {
    document.getElementById("version").textContent = "unreachable";
  }
  try {
    const health = await fetch("/healthz");
    setPill("health", health.ok, health.ok ? "healthy" : `HTTP ${health.status}`);
  } catch (e) {
    setPill("health", false, "unreachable");
  }
  try {
    const ready = await fetch("/readyz");
    const text = await ready.text();
    setPill("ready", ready.ok, ready.ok ? "ready" : "not ready");
    document.getElementById("ready-detail").textContent =
      ready.ok ? "" : text.split("\n").slice(1).join("; ");
  } catch (e) {
    setPill("ready", false, "unreachable");
  }
}

refresh();
setInterval(refresh, 5000);
