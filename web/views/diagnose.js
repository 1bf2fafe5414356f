// "Why?": asks GET /api/v1/diagnose about one object (a route, a workload, a person) and shows
// the ranked findings with their evidence: each metric drawn as a small chart over the window,
// log lines and events as they were, then what an operator may do next. Read-only.
import { useState } from "preact/hooks";
import { Chart, ErrorNote, api, html } from "../lib.js";

const CAUSES = {
  kv_cache_exhaustion: "KV cache exhausted", replica_saturation: "replica saturated",
  gpu_hardware_fault: "GPU hardware fault", gpu_thermal_throttle: "GPU thermal throttling",
  gpu_memory_oom: "GPU out of memory", nvlink_degraded: "NVLink degraded",
  upstream_errors: "provider failing", upstream_rate_limited: "provider rate-limiting",
  bad_config_change: "configuration change", budget_exhausted: "budget exhausted",
  quota_exhausted: "quota exhausted", preemption_churn: "preemption churn",
  noisy_neighbor: "noisy neighbour", idle_allocation: "idle GPUs", traffic_shift: "traffic changed",
  none: "nothing wrong found",
};

const short = (v) => {
  if (v === null || v === undefined || !Number.isFinite(v)) return "—";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  return v.toLocaleString("en-US", { maximumFractionDigits: a >= 100 ? 0 : 3 });
};
const labelText = (labels) => Object.entries(labels ?? {}).map(([k, v]) => `${k}="${v}"`).join(", ");

function EvidenceItem({ e }) {
  if (e.kind === "metric") {
    return html`<li class="evidence metric">
      <div><code>${e.name}</code><span class="muted"> {${labelText(e.labels)}}</span></div>
      <div>${e.summary}</div>
      ${e.points && e.points.length > 1 && html`<${Chart} points=${e.points} label=${e.summary}
        height=${90} format=${short} empty="No samples in the window." />`}
    </li>`;
  }
  if (e.kind === "log") {
    return html`<li class="evidence log"><span class="muted">${e.time} ${e.source}</span>
      <pre>${e.line}</pre></li>`;
  }
  return html`<li class="evidence event"><span class="muted">${e.time} ${e.source}</span>
    <strong> ${e.event_kind}</strong> ${e.object} <span class="muted">${e.message ?? ""}</span></li>`;
}

function Finding({ f, first }) {
  const subject = f.subject ? `${f.subject.kind} ${f.subject.name}` : "";
  return html`<div class=${`finding ${first ? "first" : ""}`} data-cause=${f.cause}>
    <h4>${CAUSES[f.cause] ?? f.cause}${subject && html` · <span>${subject}</span>`}
      <span class="muted"> ${Math.round(f.confidence * 100)}% confidence</span></h4>
    <p>${f.explanation}</p>
    ${f.evidence.length > 0 && html`<ul class="evidence-list">
      ${f.evidence.map((e, i) => html`<${EvidenceItem} key=${i} e=${e} />`)}</ul>`}
    ${f.next_steps.length > 0 && html`<details open=${first}><summary>Next steps</summary>
      <ul>${f.next_steps.map((s, i) => html`<li key=${i}>${s}</li>`)}</ul></details>`}
  </div>`;
}

// The narrator's plain-language summary, when the server has one; the findings below it are the
// evidence, and the answer.
function Narration({ n }) {
  if (!n) return null;
  if (n.text) {
    return html`<div class="why-narration"><p class="muted small">In short, as ${n.route} put it
      (the findings below are the evidence):</p><p>${n.text}</p></div>`;
  }
  return html`<p class="muted small">No summary: ${n.error}</p>`;
}

// A "Why?" button; the findings open below it. kind: route | workload | user | team | queue |
// node | fleet; symptom as the API takes it.
export function WhyButton({ kind, name, symptom = "any", since = "30m", label }) {
  const [open, setOpen] = useState(false);
  const [state, setState] = useState({ data: null, error: null, loading: false });
  const ask = async () => {
    if (open) {
      setOpen(false);
      return;
    }
    setOpen(true);
    setState({ data: null, error: null, loading: true });
    const q = new URLSearchParams({ kind, symptom, since });
    if (name) q.set("name", name);
    try {
      setState({ data: await api(`/api/v1/diagnose?${q}`), error: null, loading: false });
    } catch (e) {
      setState({ data: null, error: e, loading: false });
    }
  };
  return html`<span class="why">
    <button class="why-button" aria-expanded=${open} title=${`Why? Diagnose ${label ?? name ?? kind}`}
      onClick=${(ev) => { ev.stopPropagation(); ask(); }}>Why?</button>
    ${open && html`<div class="why-panel" role="region" aria-label=${`Diagnosis of ${label ?? name ?? kind}`}
        onClick=${(ev) => ev.stopPropagation()}>
      ${state.loading && html`<p class="loading">Looking at the last ${since}…</p>`}
      <${ErrorNote} error=${state.error} />
      ${state.data && html`<p class="muted small">From ${state.data.window.start} to ${state.data.window.end};
        read-only, nothing was changed.</p>
        <${Narration} n=${state.data.narration} />
        ${state.data.findings.map((f, i) => html`<${Finding} key=${i} f=${f} first=${i === 0} />`)}`}
    </div>`}
  </span>`;
}
