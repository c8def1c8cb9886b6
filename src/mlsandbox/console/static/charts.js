// Charts: Chart.js (vendored, static/vendor) with one theme, two small plug-ins of our own (interval
// whiskers; shaded bands and marker lines for faults and alerts) and, under every chart, its data as a
// table for people who do not read charts (screen readers, keyboard users, copy and paste).

import { h, replace } from "./dom.js";

// Okabe-Ito hues, darkened where needed so every line has at least 3:1 contrast on white.
export const PALETTE = ["#0072B2", "#B84D00", "#007A55", "#A23E7B", "#5B4A9F", "#7A5F00", "#3B3B3B", "#1D6C93"];
export const FAULT = "rgba(184, 77, 0, 0.14)";
export const FAULT_LINE = "#B84D00";
export const GOOD_LINE = "#007A55";
export const ALERT_LINE = "#A23E7B";

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

const intervalPlugin = {
  id: "intervals",
  // Whiskers from dataset.intervals[i] = [low, high] (null: none), on the value axis of the element.
  afterDatasetsDraw(chart) {
    const { ctx } = chart;
    chart.data.datasets.forEach((ds, di) => {
      if (!ds.intervals || !chart.isDatasetVisible(di)) return;
      const meta = chart.getDatasetMeta(di);
      const horizontal = chart.options.indexAxis === "y";
      const valueScale = horizontal ? chart.scales[meta.xAxisID] : chart.scales[meta.yAxisID];
      ctx.save();
      ctx.strokeStyle = ds.intervalColor || "#1b1f24";
      ctx.lineWidth = 1.5;
      meta.data.forEach((el, i) => {
        const iv = ds.intervals[i];
        if (!iv || iv[0] === null || iv[1] === null) return;
        const a = valueScale.getPixelForValue(iv[0]);
        const b = valueScale.getPixelForValue(iv[1]);
        ctx.beginPath();
        if (horizontal) {
          ctx.moveTo(a, el.y);
          ctx.lineTo(b, el.y);
          ctx.moveTo(a, el.y - 5);
          ctx.lineTo(a, el.y + 5);
          ctx.moveTo(b, el.y - 5);
          ctx.lineTo(b, el.y + 5);
        } else {
          ctx.moveTo(el.x, a);
          ctx.lineTo(el.x, b);
          ctx.moveTo(el.x - 5, a);
          ctx.lineTo(el.x + 5, a);
          ctx.moveTo(el.x - 5, b);
          ctx.lineTo(el.x + 5, b);
        }
        ctx.stroke();
      });
      ctx.restore();
    });
  },
};

const bandsPlugin = {
  id: "bands",
  // options.plugins.bands = {bands: [{from, to, color, label}], lines: [{x, color, label, dash}]} in x units.
  beforeDatasetsDraw(chart, _args, opts) {
    const { ctx, chartArea: area } = chart;
    const x = chart.scales.x;
    if (!x || !opts) return;
    ctx.save();
    for (const band of opts.bands || []) {
      const a = Math.max(area.left, x.getPixelForValue(band.from));
      const b = Math.min(area.right, x.getPixelForValue(band.to));
      if (b <= a) continue;
      ctx.fillStyle = band.color || FAULT;
      ctx.fillRect(a, area.top, b - a, area.bottom - area.top);
    }
    ctx.restore();
  },
  afterDatasetsDraw(chart, _args, opts) {
    const { ctx, chartArea: area } = chart;
    const x = chart.scales.x;
    if (!x || !opts) return;
    ctx.save();
    ctx.font = "11px system-ui, sans-serif";
    let row = 0;
    for (const line of opts.lines || []) {
      const px = x.getPixelForValue(line.x);
      if (px < area.left || px > area.right) continue;
      ctx.strokeStyle = line.color || "#1b1f24";
      ctx.lineWidth = 1.5;
      ctx.setLineDash(line.dash || [4, 3]);
      ctx.beginPath();
      ctx.moveTo(px, area.top);
      ctx.lineTo(px, area.bottom);
      ctx.stroke();
      if (line.label) {
        ctx.setLineDash([]);
        ctx.fillStyle = line.color || "#1b1f24";
        ctx.fillText(line.label, Math.min(px + 3, area.right - ctx.measureText(line.label).width), area.top + 11 + 12 * (row % 3));
        row += 1;
      }
    }
    ctx.restore();
  },
};

let themed = false;

function theme() {
  if (themed) return;
  const C = window.Chart;
  if (!C) throw new Error("Chart.js did not load");
  C.defaults.font.family = getComputedStyle(document.body).fontFamily;
  C.defaults.font.size = 12;
  C.defaults.color = "#2b3138";
  C.defaults.borderColor = "#d5dae0";
  C.defaults.animation = false;
  C.defaults.maintainAspectRatio = false;
  C.defaults.plugins.legend.labels.boxWidth = 14;
  C.register(intervalPlugin, bandsPlugin);
  themed = true;
}

let counter = 0;

// A chart in a <figure>: caption, canvas (role img, with a text summary), and a data table under it.
// spec: {type, data, options, title, summary: () => string, table: () => {columns: [...], rows: [[...]]}}
// The figure is appended to ``parent`` before the chart is made, so it is measured at its real size.
export function makeChart(parent, spec) {
  theme();
  counter += 1;
  const id = `chart-${counter}`;
  const canvas = h("canvas", { role: "img", id, "aria-label": spec.title });
  const tableBox = h("div", { class: "table-wrap" });
  const box = h("div", { class: "chart-box" }, canvas);
  if (spec.height) box.style.height = `${spec.height}px`; // CSSOM: inline style attributes are refused by the CSP
  const figure = h(
    "figure",
    { class: `chart ${spec.className || ""}` },
    h("figcaption", {}, spec.title),
    box,
    h("details", { class: "chart-data" }, h("summary", {}, `Data: ${spec.title}`), tableBox),
  );
  parent.append(figure);
  const chart = new window.Chart(canvas, { type: spec.type, data: spec.data, options: spec.options || {} });
  const handle = {
    figure,
    chart,
    spec,
    refresh() {
      if (spec.summary) canvas.setAttribute("aria-label", `${spec.title}. ${spec.summary()}`);
      if (spec.table) renderTable(tableBox, spec.table());
      chart.update("none");
    },
    destroy() {
      chart.destroy();
    },
  };
  handle.refresh();
  return handle;
}

const MAX_TABLE_ROWS = 300;

function renderTable(box, { columns, rows }) {
  const shown = rows.length > MAX_TABLE_ROWS ? rows.slice(rows.length - MAX_TABLE_ROWS) : rows;
  replace(
    box,
    rows.length > shown.length ? h("p", { class: "muted" }, `The last ${shown.length} of ${rows.length} rows.`) : null,
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, shown.map((r) => h("tr", {}, r.map((v) => h("td", {}, v === null || v === undefined ? "–" : String(v)))))),
    ),
  );
}

export function axisTitle(text) {
  return { display: true, text };
}
