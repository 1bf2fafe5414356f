// GPU pools: per flavor, GPUs in the inventory and how many are allocated; a node map with every
// GPU, its utilisation (from the DCGM exporters) and the shares placed on it, each labelled
// "team/workload" in its own colour, and a legend of who holds what; the workloads that are
// allocated but idle; and the efficiency of the caller's GPU time over the last 24 hours.
// Another team's workloads are grey and unnamed (the API does not name them).
import { ErrorNote, Table, api, html, usePoll } from "../lib.js";

// Distinct on white and under white text; a workload keeps its colour while the set is the same.
const PALETTE = ["#2f5fb3", "#b4531f", "#1f7a3f", "#7a3fb3", "#8a6d00", "#0f7283", "#b3306b", "#4f6b1a",
  "#5b4ab8", "#a33b3b"];
const OTHERS = "#9aa3b2";

const gpuText = (milli) => {
  const n = milli / 1000;
  return `${Number.isInteger(n) ? n : n.toFixed(2)} GPU${n === 1 ? "" : "s"}`;
};

// "ml/llama-finetune" as the team over the workload's name, and the share when not whole.
function SliceLabel({ share }) {
  const [team, ...rest] = (share.workload ?? "other team").split("/");
  const part = share.gpu_milli < 1000 ? ` · ${share.gpu_milli / 10}%` : "";
  return html`<span class="slice-label">${rest.length ? html`<span class="slice-team">${team}/</span>` : ""}
    <span>${rest.length ? rest.join("/") : team}${part}</span></span>`;
}

// "73 %", or "—" when no exporter reports the GPU (or its reading is too old to believe).
const utilText = (u) => (u === null || u === undefined ? "—" : `${Math.round(u)} %`);

// A GPU's utilisation as its exporter reports it: a figure and a thin bar.
function GpuUtil({ utilisation, at }) {
  const known = utilisation !== null && utilisation !== undefined;
  const p = known ? Math.max(0, Math.min(100, utilisation)) : 0;
  return html`<div class=${`gpu-util ${known ? "" : "unknown"}`} data-utilisation=${known ? utilisation : ""}
      title=${known ? `utilisation ${utilText(utilisation)}${at ? `, read ${new Date(at).toLocaleTimeString()}` : ""}`
        : "utilisation unknown: no exporter reports this GPU"}>
    <span class="util-text">util ${utilText(utilisation)}</span>
    <div class="util-bar" role="meter" aria-valuemin="0" aria-valuemax="100" aria-valuenow=${known ? p : 0}
      aria-label="utilisation"><div class="util-fill" style=${`width: ${p}%`}></div></div>
  </div>`;
}

function GpuBox({ gpu, colours }) {
  const used = gpu.used_milli / 10;
  const label = `GPU ${gpu.index} (${gpu.model}): ${used}% of memory allocated` +
    (gpu.cores_used ? `, ${gpu.cores_used}% of compute` : "") +
    `, utilisation ${gpu.utilisation === null || gpu.utilisation === undefined ? "unknown" : utilText(gpu.utilisation)}` +
    gpu.shares.map((s) => `; ${s.workload ?? "another team's workload"} ${s.gpu_milli / 10}%`).join("");
  return html`<div class="gpu" title=${label} aria-label=${label} data-used=${gpu.used_milli}>
    <span class="gpu-index">GPU ${gpu.index}${gpu.used_milli === 0 ? " · free" : ""}</span>
    <${GpuUtil} utilisation=${gpu.utilisation} at=${gpu.utilisation_at} />
    <div class="gpu-slices">
      ${gpu.shares.map((s) => html`<div class=${`slice ${s.workload ? "" : "other"}`}
        data-workload=${s.workload ?? ""}
        style=${`flex-grow: ${s.gpu_milli}; background: ${s.workload ? colours.get(s.workload) : OTHERS}`}>
        ${s.gpu_milli >= 250 && html`<${SliceLabel} share=${s} />`}
      </div>`)}
      ${gpu.used_milli < 1000 && html`<div class="slice free" style=${`flex-grow: ${1000 - gpu.used_milli}`}></div>`}
    </div>
  </div>`;
}

// Who holds what, over every node: by workload, its tenant, GPUs (shares summed) and nodes.
function holders(nodes) {
  const byWorkload = new Map();
  let others = 0;
  for (const n of nodes) {
    for (const g of n.gpus) {
      for (const s of g.shares) {
        if (!s.workload) {
          others += s.gpu_milli;
          continue;
        }
        const h = byWorkload.get(s.workload) ?? { workload: s.workload, tenant: s.tenant, milli: 0, nodes: new Set() };
        h.milli += s.gpu_milli;
        h.nodes.add(n.name);
        byWorkload.set(s.workload, h);
      }
    }
  }
  const list = [...byWorkload.values()].sort((a, b) => a.workload.localeCompare(b.workload));
  return { list, others };
}

const hoursText = (h) => (h >= 10 ? h.toFixed(1) : h >= 0.01 ? h.toFixed(2) : h > 0 ? "< 0.01" : "0");
const efficiencyText = (e) => (e === null || e === undefined ? "—" : `${Math.round(e * 100)} %`);
const placedText = (gpus) => gpus.map((g) => `${g.node} GPU ${g.index}${g.gpu_milli < 1000
  ? ` (${g.gpu_milli / 10}% share)` : ""} at ${utilText(g.utilisation)}`).join(", ");

// Why nothing is listed as idle: none is, or nobody can tell (no utilisation reported for the
// GPUs held — no DCGM exporter scraped), or only some can be told.
function noneIdle(entries) {
  const holding = entries.filter((e) => e.live && (e.gpus ?? []).length > 0);
  const unknown = holding.filter((e) => e.recent_utilisation === null || e.recent_utilisation === undefined);
  if (holding.length > 0 && unknown.length === holding.length) {
    return "Unknown: no utilisation is reported for the GPUs held (no DCGM exporter is scraped), " +
      "so an idle allocation cannot be told.";
  }
  if (unknown.length > 0) {
    return `No measured allocation is idle; ${unknown.length} of ${holding.length} have no ` +
      "utilisation reported.";
  }
  return "No allocation is idle.";
}

// Workloads that hold GPUs and have barely used them lately (the report's idle rule).
function IdleAllocations({ report }) {
  if (!report) return html`<p class="muted">Utilisation is not available.</p>`;
  const idle = report.data.filter((e) => e.idle);
  const rule = report.idle_rule;
  // Tenants are named only when there is more than one to tell apart (as in the legend).
  const tenants = new Set(idle.map((e) => e.tenant).filter(Boolean));
  const why = `under ${rule.below_percent} % busy over the last ${rule.window_s / 60} minutes`;
  return html`<h3>Allocated but idle <span class="muted small">${why}</span></h3>
    <section class="card idle" aria-label="Allocated but idle">
      ${idle.length === 0 ? html`<p class="muted" id="idle-none">${noneIdle(report.data)}</p>` : html`<ul class="idle-list">
        ${idle.map((e) => html`<li class="idle-item" data-workload=${e.workload ?? ""}>
          <strong>${e.workload ?? "another team's workload"}</strong>${tenants.size > 1 && e.tenant
            ? html` <span class="muted">${e.tenant}</span>` : ""}${" "}<span class="muted">${
            `· ${placedText(e.gpus)} · ${utilText(e.recent_utilisation)} lately`}</span>
        </li>`)}</ul>`}
    </section>`;
}

// The caller's GPU time since the report's start: allocated, busy, and busy / observed.
function Efficiency({ report }) {
  if (!report) return null;
  const rows = report.data.filter((e) => e.workload);
  return html`<h3>GPU efficiency <span class="muted small">last 24 hours</span></h3>
    <div class="card"><${Table} label="GPU efficiency" rows=${rows}
      empty="No GPU time was recorded in the last 24 hours."
      columns=${[
        { key: "workload", title: "Workload" },
        { key: "state", title: "State", render: (e) => e.state ?? "ended" },
        { key: "allocated_gpu_hours", title: "GPU-hours", num: true, render: (e) => hoursText(e.allocated_gpu_hours) },
        { key: "busy_gpu_hours", title: "Busy GPU-hours", num: true, render: (e) => hoursText(e.busy_gpu_hours) },
        { key: "efficiency", title: "Efficiency", num: true, sort: (e) => e.efficiency ?? -1,
          render: (e) => efficiencyText(e.efficiency) },
        { key: "idle", title: "", nosort: true, render: (e) => (e.idle ? html`<span class="badge idle-badge">idle</span>` : "") },
      ]} /></div>`;
}

export function Gpus() {
  const { data: both, error } = usePoll(async () => {
    const [nodes, report] = await Promise.all([api("/api/v1/fleet/nodes"),
      // A Purser without the report still shows its node map.
      api("/api/v1/fleet/utilisation?since=24h").catch(() => null)]);
    return { nodes, report };
  });
  if (!both) return html`<${ErrorNote} error=${error} /><p class="loading">Loading…</p>`;
  const { nodes: data, report } = both;
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
  const { list, others } = holders(data.data);
  const tenants = new Set(list.map((h) => h.tenant).filter(Boolean));
  const colours = new Map(list.map((h, i) => [h.workload, PALETTE[i % PALETTE.length]]));
  return html`<h2>GPU pools</h2>
    <${ErrorNote} error=${error} />
    <div class="pools">${[...pools.values()].map((p) => html`<section class="card pool" aria-label=${p.name}>
      <h3>${p.name}</h3>
      <div class="big">${Number.isInteger(p.allocated) ? p.allocated : p.allocated.toFixed(2)}${" "}<span
        class="muted">of ${p.gpus} GPUs allocated</span></div>
      <div class="muted small">${p.nodes} node(s) · ${p.model ?? ""}</div>
    </section>`)}</div>
    <${IdleAllocations} report=${report} />
    <h3>Nodes <span class="muted small">placement policy: ${data.policy}</span></h3>
    <section class="card legend" aria-label="Who holds the GPUs">
      ${list.length === 0 && others === 0 && html`<span class="muted">Every GPU is free.</span>`}
      ${list.map((h) => html`<span class="legend-item" data-workload=${h.workload}>
        <span class="swatch" style=${`background: ${colours.get(h.workload)}`}></span>
        <strong>${h.workload}</strong>${tenants.size > 1 && h.tenant ? html` <span class="muted">${h.tenant}</span>` : ""}
        <span class="muted">· ${gpuText(h.milli)} on ${[...h.nodes].join(", ")}</span>
      </span>`)}
      ${others > 0 && html`<span class="legend-item" data-workload="">
        <span class="swatch" style=${`background: ${OTHERS}`}></span>other teams' workloads
        <span class="muted">· ${gpuText(others)}</span></span>`}
      <span class="legend-item"><span class="swatch free"></span>free</span>
    </section>
    <div class="nodes">${data.data.map((n) => html`<section class="card node" aria-label=${n.name}>
      <div class="node-head"><strong>${n.name}</strong>
        <span class="muted small">${n.rack ? `rack ${n.rack} · ` : ""}${n.gpu_model ?? ""} · CPU ${n.cpu_used}/${n.cpu}</span></div>
      <div class="gpus">${n.gpus.map((g) => html`<${GpuBox} gpu=${g} colours=${colours} />`)}</div>
    </section>`)}</div>
    <${Efficiency} report=${report} />`;
}
