// What every view shares: the API client (the signed-in key, errors as readable messages),
// formatting, the wallet status colour, polling, and small components.
import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

// Signed in with an API key (kept for this tab), or through the identity provider (the server's
// HttpOnly purser_session cookie, which this page never sees, and the CSRF token whoami gives,
// kept in memory only and sent with every change).
const KEY = "purser.key";
let csrf = null;
export const session = {
  key: () => sessionStorage.getItem(KEY),
  set: (k) => sessionStorage.setItem(KEY, k),
  setCsrf: (token) => {
    csrf = token;
  },
  cookie: () => csrf !== null,
  clear: () => {
    sessionStorage.removeItem(KEY);
    csrf = null;
  },
};

// An API error carries the server's problem detail (RFC 9457) as its message.
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function api(path, { method = "GET", body, key = session.key() } = {}) {
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (!key && csrf && method !== "GET") headers["X-Purser-CSRF"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, "Purser could not be reached; is the server running?");
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (e) {
    data = null;
  }
  if (!res.ok) {
    const detail = data && (data.detail || data.title);
    if (res.status === 401 && (key ? key === session.key() : session.cookie())) {
      dispatchEvent(new CustomEvent("purser:unauthorized", { detail: detail || "the key was refused" }));
    }
    throw new ApiError(res.status, detail ? `${detail}` : `The server answered ${res.status}.`);
  }
  return data;
}

// Re-fetches every `ms` milliseconds while mounted; returns { data, error, reload }.
export function usePoll(load, deps = [], ms = 5000) {
  const [state, setState] = useState({ data: null, error: null });
  const tick = useRef(0);
  const run = async () => {
    const mine = ++tick.current;
    try {
      const data = await load();
      if (mine === tick.current) setState({ data, error: null });
    } catch (e) {
      if (mine === tick.current) setState((s) => ({ data: s.data, error: e }));
    }
  };
  useEffect(() => {
    run();
    const t = setInterval(run, ms);
    return () => {
      tick.current++;
      clearInterval(t);
    };
  }, deps);
  return { ...state, reload: run };
}

export function money(text) {
  const n = Number(text ?? 0);
  return `$${n.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
export const count = (n) => Number(n ?? 0).toLocaleString("en-US");
export const when = (t) => (t ? new Date(t).toLocaleString() : "—");

// Green under the first alert threshold, amber past it, red at or over a hard limit or the last
// threshold.
export function walletStatus(w) {
  if (!w) return "none";
  const pct = Number(w.percent_used);
  const alerts = w.alert_at ?? [];
  if ((w.hard && pct >= 100) || (alerts.length > 0 && pct >= alerts[alerts.length - 1])) return "red";
  if (alerts.length > 0 && pct >= alerts[0]) return "amber";
  if (alerts.length === 0 && pct >= 100) return "red";
  return "green";
}

const STATUS_WORDS = { green: "on track", amber: "past an alert", red: "at its limit", none: "no wallet" };
export function StatusDot({ status }) {
  return html`<span class=${`dot ${status}`} data-status=${status}
    title=${STATUS_WORDS[status]}><span class="sr">${STATUS_WORDS[status]}</span></span>`;
}

export function Bar({ percent, status }) {
  const p = Math.max(0, Math.min(100, Number(percent)));
  return html`<div class="meter" role="meter" aria-valuemin="0" aria-valuemax="100"
      aria-valuenow=${Number(percent)}>
    <div class=${`fill ${status}`} style=${`width: ${p}%`}></div>
  </div>`;
}

export function ErrorNote({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error.message}</p>`;
}

export function Table({ columns, rows, empty = "Nothing here yet.", onRow, sortable = true, label }) {
  const [sort, setSort] = useState(null);
  let shown = rows;
  if (sort) {
    const col = columns.find((c) => c.key === sort.key);
    const val = col.sort ?? ((r) => r[col.key]);
    shown = [...rows].sort((a, b) => {
      const x = val(a), y = val(b);
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return sort.desc ? -c : c;
    });
  }
  const header = (c) => {
    const cls = c.num ? "num" : "";
    if (!sortable || c.nosort) return html`<th scope="col" class=${cls}>${c.title}</th>`;
    const active = sort && sort.key === c.key;
    const aria = active ? (sort.desc ? "descending" : "ascending") : "none";
    return html`<th scope="col" class=${cls} aria-sort=${aria}>
      <button class="sort" onClick=${() => setSort({ key: c.key, desc: active ? !sort.desc : true })}>
        ${c.title}${active ? (sort.desc ? " ▾" : " ▴") : ""}</button></th>`;
  };
  if (rows.length === 0) return html`<p class="muted">${empty}</p>`;
  return html`<table aria-label=${label}>
    <thead><tr>${columns.map(header)}</tr></thead>
    <tbody>${shown.map((r) => html`<tr class=${onRow ? "clickable" : ""}
        onClick=${onRow ? () => onRow(r) : undefined}>
      ${columns.map((c) => html`<td class=${c.num ? "num" : ""}>${c.render ? c.render(r) : r[c.key]}</td>`)}
    </tr>`)}</tbody>
  </table>`;
}

// A time series with uPlot (loaded as a global by index.html): x in seconds, one y series;
// `format` writes a value (money by default), `range` fixes the y axis ([min, max]), `empty` is
// said when there are no points.
export function Chart({ points, label, height = 180, format = money, range = null,
                        empty = "No spend in this period yet." }) {
  const box = useRef(null);
  useEffect(() => {
    if (!box.current || typeof uPlot === "undefined") return undefined;
    const width = Math.max(300, box.current.clientWidth || 600);
    const xs = points.map((p) => p[0]);
    const ys = points.map((p) => p[1]);
    const plot = new uPlot(
      {
        width, height,
        series: [{}, { label, stroke: "#2f5fb3", fill: "rgba(47, 95, 179, 0.12)",
                       value: (u, v) => (v == null ? "—" : format(v)) }],
        axes: [{}, { values: (u, vals) => vals.map((v) => format(v)) , size: 70 }],
        legend: { show: true },
        ...(range ? { scales: { y: { range } } } : {}),
      },
      [xs, ys], box.current);
    return () => plot.destroy();
  }, [JSON.stringify(points)]);
  if (points.length === 0) return html`<p class="muted">${empty}</p>`;
  return html`<div class="chart" ref=${box} aria-label=${label}></div>`;
}
