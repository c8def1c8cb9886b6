// Small DOM and formatting helpers shared by the pages. Text is always inserted as text nodes (never as
// HTML), so whatever an agent wrote into an observation is shown, not interpreted.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function api(path, { method = "GET", body, headers = {} } = {}) {
  const opts = { method, credentials: "same-origin", headers: { Accept: "application/json", ...headers } };
  if (method !== "GET") opts.headers["X-Console"] = "1";
  if (body !== undefined) opts.body = body;
  const response = await fetch(path, opts);
  if (response.status === 401) {
    window.location.assign("/");
    throw new ApiError(401, "signed out");
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const detail = data && typeof data === "object" ? data.detail : data;
    throw new ApiError(response.status, typeof detail === "string" ? detail : response.statusText);
  }
  return data;
}

export function announce(message) {
  const region = document.getElementById("announce");
  if (region) region.textContent = message;
}

// ------------------------------------------------------------------------------------------ formats

export function num(x, digits = 2) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toFixed(digits);
}

export function signed(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const v = Number(x);
  return (v > 0 ? "+" : v < 0 ? "−" : "±") + Math.abs(v).toFixed(digits);
}

export function pct(x, digits = 0) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return `${(100 * x).toFixed(digits)}%`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Number(seconds));
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function clock(unix) {
  if (!unix) return "–";
  const d = new Date(unix * 1000);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export function ago(unix) {
  if (!unix) return "–";
  return `${duration(Date.now() / 1000 - unix)} ago`;
}

export function badge(text, kind) {
  return h("span", { class: `badge badge-${kind || "neutral"}` }, text);
}

export function outcomeBadge(outcome) {
  const kinds = { success: "good", failure: "bad", running: "live", incomplete: "neutral" };
  return badge(outcome, kinds[outcome]);
}

export function statusBadge(status) {
  const kinds = { live: "live", finished: "neutral", ended: "neutral", stopped: "warn", running: "good" };
  return badge(status, kinds[status]);
}

export function actionText(raw, type) {
  if (raw && typeof raw === "object" && !Array.isArray(raw)) {
    const params = Object.entries(raw)
      .filter(([k]) => k !== "type")
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`);
    return `${raw.type ?? type ?? "?"}(${params.join(", ")})`;
  }
  if (typeof raw === "string") return raw.length > 120 ? `${raw.slice(0, 117)}...` : raw;
  return type || "?";
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

export function table(columns, rows, { caption, className } = {}) {
  // columns: [{label, cell: row => node|text, num?: bool}]
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: className || "" },
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : "" }, c.label)))),
      h(
        "tbody",
        {},
        rows.map((r) => h("tr", {}, columns.map((c) => h("td", { class: c.num ? "num" : "" }, c.cell(r))))),
      ),
    ),
  );
}

export function hashQuery() {
  const i = window.location.hash.indexOf("?");
  return new URLSearchParams(i >= 0 ? window.location.hash.slice(i + 1) : "");
}

export function enc(s) {
  return encodeURIComponent(s);
}

// Replace a container's content and give focus back to the element with the same id (polling pages
// re-render while someone may be tabbing through them).
export function replaceKeepFocus(el, ...children) {
  const active = document.activeElement;
  const id = active && active.id && el.contains(active) ? active.id : null;
  replace(el, ...children);
  if (id) {
    const again = document.getElementById(id);
    if (again) again.focus({ preventScroll: true });
  }
  return el;
}
