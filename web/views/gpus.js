// GPU pools: per flavor, GPUs in the inventory and how many are allocated; a node map with
// every GPU and the shares placed on it.
import { ErrorNote, api, html, usePoll } from "../lib.js";

function GpuBox({ gpu }) {
  const used = gpu.used_milli / 10;
  const label = `GPU ${gpu.index} (${gpu.model}): ${used}% of memory allocated` +
    (gpu.cores_used ? `, ${gpu.cores_used}% of compute` : "") +
    gpu.shares.map((s) => `; ${s.workload ?? "another team's workload"} ${s.gpu_milli / 10}%`).join("");
  return html`<div class="gpu" title=${label} aria-label=${label} data-used=${gpu.used_milli}>
    ${gpu.shares.map((s) => html`<div class=${`slice ${s.workload ? "" : "other"}`}
      style=${`height: ${s.gpu_milli / 10}%`}></div>`)}
    <span class="gpu-index">${gpu.index}</span>
  </div>`;
}

export function Gpus() {
  const { data, error } = usePoll(() => api("/api/v1/fleet/nodes"));
  if (!data) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  if (!data.placement) {
    return html`<h2>GPU pools</h2><p class="muted">This fleet declares no nodes (fleet.nodes in the
      configuration), so admission is by quota alone; see the Queues view.</p>`;
  }
  const pools = new Map();
  for (const n of data.data) {
    const names = n.flavors?.length ? n.flavors : [n.gpu_model ?? "CPU only"];
    for (const f of names) {
      const p = pools.get(f) ?? { name: f, gpus: 0, allocated: 0, nodes: 0, model: n.gpu_model };
      p.gpus += n.gpu_count;
      p.allocated += n.gpus.reduce((a, g) => a + g.used_milli, 0) / 1000;
      p.nodes += 1;
      pools.set(f, p);
    }
  }
  return html`<h2>GPU pools</h2>
    <${ErrorNote} error=${error} />
    <div class="pools">${[...pools.values()].map((p) => html`<section class="card pool" aria-label=${p.name}>
      <h3>${p.name}</h3>
      <div class="big">${p.allocated.toFixed(2)} <span class="muted">of ${p.gpus} GPUs allocated</span></div>
      <div class="muted small">${p.nodes} node(s) · ${p.model ?? ""}</div>
    </section>`)}</div>
    <h3>Nodes <span class="muted small">policy: ${data.policy}</span></h3>
    <div class="nodes">${data.data.map((n) => html`<section class="card node" aria-label=${n.name}>
      <div class="node-head"><strong>${n.name}</strong>
        <span class="muted small">${n.rack ? `rack ${n.rack} · ` : ""}CPU ${n.cpu_used}/${n.cpu}</span></div>
      <div class="gpus">${n.gpus.map((g) => html`<${GpuBox} gpu=${g} />`)}</div>
    </section>`)}</div>`;
}
