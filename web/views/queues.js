// Queues and workloads: per ClusterQueue its quota, usage, borrowed and lent; pending workloads
// with why they wait, in words; admitted and running ones (with their state), finished ones; the
// fleet's events.
import { useState } from "preact/hooks";

import { ErrorNote, Table, api, html, money, usePoll, when } from "../lib.js";
import { WhyButton } from "./diagnose.js";

// A workload as the API lists it names itself "namespace/name"; older answers gave the name alone.
const fullName = (w) => (w.name.includes("/") ? w.name : `${w.namespace}/${w.name}`);

function Why({ workload }) {
  const [ns, ...rest] = fullName(workload).split("/");
  const path = `/api/v1/workloads/${encodeURIComponent(ns)}/${encodeURIComponent(rest.join("/"))}/why`;
  const { data, error } = usePoll(() => api(path), [path], 10000);
  if (error) return html`<${ErrorNote} error=${error} />`;
  if (!data) return html`<p class="loading">Asking why…</p>`;
  return html`<ul class="why">${data.explanation.map((line) => html`<li>${line}</li>`)}</ul>`;
}

const gpus = (w) => w.pod_sets.map((p) => `${p.count}× ${Object.entries(p.requests)
  .map(([k, v]) => `${k} ${v}`).join(", ")}`).join("; ");

// Where an admitted workload's pods run (with an inventory): node and GPU indices per pod.
const placedOn = (w) => {
  const pods = (w.admission?.pod_sets ?? []).flatMap((p) => p.placements ?? []);
  if (pods.length === 0) return "—";
  return pods.map((p) => (p.gpus.length ? `${p.node} [${p.gpus.join(",")}${p.gpu_milli < 1000
    ? ` · ${p.gpu_milli / 10}%` : ""}]` : p.node)).join("; ");
};

export function Queues() {
  const [open, setOpen] = useState(null);
  const { data, error } = usePoll(async () => {
    const [queues, live, finished, events] = await Promise.all([
      api("/api/v1/queues"), api("/api/v1/workloads"), api("/api/v1/workloads?state=finished"),
      api("/api/v1/fleet/events")]);
    return { queues: queues.data, live: live.data, finished: finished.data, events: events.data };
  });
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const qrows = [];
  for (const q of data.queues) {
    for (const r of q.resources) {
      qrows.push({ queue: q.name, cohort: q.cohort ?? "—", pending: q.pending, admitted: q.admitted, ...r });
    }
  }
  const pending = data.live.filter((w) => w.state === "pending");
  // Admitted and not finished: waiting for its pods, running them, or unknown after a restart.
  const admitted = data.live.filter((w) => w.state !== "pending" && w.state !== "suspended");
  return html`<h2>Queues and workloads</h2>
    <${ErrorNote} error=${error} />
    <div class="card"><${Table} label="ClusterQueues" rows=${qrows} empty="No ClusterQueues you can use."
      columns=${[
        { key: "queue", title: "ClusterQueue" }, { key: "cohort", title: "Cohort" },
        { key: "flavor", title: "Flavor" }, { key: "resource", title: "Resource" },
        { key: "nominal", title: "Nominal", num: true }, { key: "usage", title: "Used", num: true },
        { key: "borrowed", title: "Borrowed", num: true }, { key: "lent", title: "Lent", num: true },
        { key: "pending", title: "Pending", num: true }, { key: "admitted", title: "Admitted", num: true }]} /></div>
    <h3>Pending</h3>
    <div class="card">${pending.length === 0 ? html`<p class="muted">Nothing is waiting.</p>` :
      pending.map((w) => html`<div class="workload">
        <button class="link" aria-expanded=${open === w.name}
          onClick=${() => setOpen(open === w.name ? null : w.name)}>${w.name}</button>
        <span class="pill">${w.reason}</span> <span class="muted">${gpus(w)}</span>
        <${WhyButton} kind="workload" name=${fullName(w)} symptom="pending" />
        <div class="muted small">${w.message}</div>
        ${open === w.name && html`<${Why} workload=${w} />`}
      </div>`)}</div>
    <h3>Admitted and running</h3>
    <div class="card"><${Table} label="Admitted workloads" rows=${admitted} empty="Nothing is running."
      columns=${[{ key: "name", title: "Workload", render: (w) => html`${w.name}
          <${WhyButton} kind="workload" name=${fullName(w)} />` },
        { key: "state", title: "State" },
        { key: "cluster_queue", title: "ClusterQueue" },
        { key: "asks", title: "Asks", render: gpus, nosort: true },
        { key: "placed", title: "Placed on", nosort: true, render: placedOn },
        { key: "admitted_at", title: "Admitted", render: (w) => when(w.admitted_at) },
        { key: "preemptions", title: "Preempted", num: true },
        { key: "gpu_charged", title: "GPU charged", num: true, render: (w) => money(w.gpu_charged),
          sort: (w) => Number(w.gpu_charged) }]} /></div>
    <h3>Finished</h3>
    <div class="card"><${Table} label="Finished workloads" rows=${data.finished.slice(0, 50)}
      empty="Nothing has finished yet."
      columns=${[{ key: "name", title: "Workload" }, { key: "finished_at", title: "Finished", render: (w) => when(w.finished_at) },
        { key: "preemptions", title: "Preempted", num: true }, { key: "gpu_charged", title: "GPU charged", num: true, render: (w) => money(w.gpu_charged),
          sort: (w) => Number(w.gpu_charged) }]} /></div>
    <h3>Events</h3>
    <div class="card"><${Table} label="Fleet events" rows=${data.events.slice(-50).reverse()} sortable=${false}
      empty="No events yet."
      columns=${[{ key: "at", title: "When", render: (e) => when(e.at) }, { key: "kind", title: "Event" },
        { key: "workload", title: "Workload" }, { key: "reason", title: "Reason" },
        { key: "message", title: "Details" }]} /></div>`;
}
