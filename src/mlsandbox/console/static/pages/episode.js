// One episode: its step timeline (action, observation as text and structured, error, reward components),
// reward and budget over the steps, jobs with logs and CPU/memory, runs and registered models,
// deployments with latency / error-rate / RPS charts, alerts, and once it is over the fault ground truth
// laid over the timeline and the step charts. A live episode follows its audit log through Server-Sent
// Events: the page grows as the steps come, without reloading.

import { ALERT_LINE, FAULT, FAULT_LINE, GOOD_LINE, axisTitle, color, makeChart } from "../charts.js";
import {
  actionText,
  announce,
  api,
  badge,
  clock,
  duration,
  enc,
  h,
  json,
  num,
  outcomeBadge,
  replace,
  replaceKeepFocus,
  signed,
  statusBadge,
  table,
} from "../dom.js";

function emptyState() {
  return {
    meta: {},
    summary: null,
    steps: [],
    jobs: {},
    jobSamples: [],
    registrations: [],
    files: {},
    scripts: {},
    models: [],
    deployments: [],
    alerts: [],
    series: {},
    faults: null,
    grade: null,
    metrics: null,
    closed: false,
  };
}

export function merge(st, d) {
  if (d.meta) st.meta = d.meta;
  st.steps.push(...(d.steps || []));
  Object.assign(st.jobs, d.jobs || {});
  st.jobSamples.push(...(d.job_samples || []));
  st.registrations.push(...(d.registrations || []));
  for (const f of d.workspace_files || []) st.files[f.path] = f;
  Object.assign(st.scripts, d.scripts || {});
  for (const [target, points] of Object.entries(d.series || {})) {
    if (!st.series[target]) st.series[target] = [];
    st.series[target].push(...points);
  }
  for (const key of ["models", "deployments", "alerts", "faults", "grade", "metrics"]) {
    if (d[key] !== undefined && d[key] !== null) st[key] = d[key];
  }
  if (d.closed) st.closed = true;
}

function t0(st) {
  return st.meta.started_at || (st.steps[0] && st.steps[0].t) || 0;
}

function done(st) {
  return st.grade !== null;
}

function status(st) {
  if (done(st)) return "finished";
  if (st.closed) return "ended";
  return st.summary ? st.summary.status : "live";
}

function outcome(st) {
  if (done(st)) return st.grade.success ? "success" : "failure";
  return status(st) === "live" ? "running" : "incomplete";
}

function totalReward(st) {
  return st.steps.reduce((a, s) => a + (s.reward || 0), 0);
}

// ------------------------------------------------------------------------------------ fault overlay

// Whether the agent made the fault's symptom go away, not merely outlasted its duration (as the reward's
// fault_mitigated component counts it).
function agentMitigated(f) {
  if (f.error || f.mitigated_step === null || f.mitigated_step === undefined || f.detected_step === null || f.detected_step === undefined) return false;
  return !(f.recovered_by === "expiry" && f.recovered_step === f.mitigated_step);
}

function faultMarks(st) {
  // step -> [{kind, text}], and the set of steps a fault was active on
  const marks = new Map();
  const active = new Set();
  const add = (step, kind, text) => {
    if (step === null || step === undefined) return;
    if (!marks.has(step)) marks.set(step, []);
    marks.get(step).push({ kind, text });
  };
  const last = st.steps.length ? st.steps[st.steps.length - 1].step : 0;
  for (const f of st.faults || []) {
    if (f.error) continue;
    const label = `${f.name} (${f.fault} on ${f.target})`;
    add(f.injected_step, "injected", `fault injected: ${label}`);
    add(f.detected_step, "detected", `detected: ${f.name}`);
    const mitigated = agentMitigated(f);
    if (mitigated) add(f.mitigated_step, "mitigated", `mitigated: ${f.name}`);
    if (f.recovered_step !== null && f.recovered_step !== undefined && !(mitigated && f.recovered_step === f.mitigated_step)) {
      add(f.recovered_step, "recovered", `over (${f.recovered_by || "recovered"}): ${f.name}`);
    }
    const end = f.recovered_step ?? last;
    for (let s = f.injected_step; s <= end; s += 1) active.add(s);
  }
  return { marks, active };
}

function faultOverlay(st) {
  const bands = [];
  const lines = [];
  const last = st.steps.length ? st.steps[st.steps.length - 1].step : 0;
  for (const f of st.faults || []) {
    if (f.error) continue;
    bands.push({ from: f.injected_step - 0.5, to: (f.recovered_step ?? last) + 0.5, color: FAULT });
    if (f.detected_step !== null && f.detected_step !== undefined) lines.push({ x: f.detected_step, color: FAULT_LINE, label: `detected ${f.name}` });
    if (agentMitigated(f)) lines.push({ x: f.mitigated_step, color: GOOD_LINE, label: `mitigated ${f.name}`, dash: [] });
  }
  return { bands, lines };
}

// ------------------------------------------------------------------------------------------ charts

// Components that were not zero at some step (the others would only crowd the legend).
function componentNames(st) {
  return [...new Set(st.steps.flatMap((s) => Object.entries(s.components).filter(([, v]) => v).map(([k]) => k)))].sort();
}

const STEP_TICKS = { stepSize: 1, precision: 0 };

function lastStep(st) {
  return st.steps.length ? st.steps[st.steps.length - 1].step : 1;
}

function rewardChart(parent, st) {
  const spec = {
    type: "bar",
    title: "Reward per step, by component, and cumulative reward",
    height: 260,
    data: { datasets: [] },
    options: {
      interaction: { mode: "nearest", axis: "x", intersect: false },
      scales: {
        x: { type: "linear", title: axisTitle("step"), ticks: STEP_TICKS, offset: false },
        y: { stacked: true, title: axisTitle("reward") },
        y2: { position: "right", title: axisTitle("cumulative"), grid: { drawOnChartArea: false } },
      },
      plugins: { bands: {} },
    },
  };
  spec.update = () => {
    const names = componentNames(st);
    const datasets = names.map((name, i) => ({
      label: name,
      data: st.steps.map((s) => ({ x: s.step, y: s.components[name] || 0 })),
      backgroundColor: color(i + 1),
      stack: "c",
      yAxisID: "y",
      order: 2,
      barPercentage: 0.9,
      categoryPercentage: 1,
    }));
    let total = 0;
    datasets.push({
      type: "line",
      label: "cumulative reward",
      data: st.steps.map((s) => ({ x: s.step, y: (total += s.reward) })),
      borderColor: color(0),
      backgroundColor: color(0),
      yAxisID: "y2",
      order: 1,
      pointRadius: 2.5,
    });
    spec.data.datasets = datasets;
    spec.options.plugins.bands = faultOverlay(st);
    spec.options.scales.x.min = 0;
    spec.options.scales.x.max = Math.max(1, lastStep(st)) + 1;
  };
  spec.summary = () => `${st.steps.length} steps, total reward ${signed(totalReward(st))}.`;
  spec.table = () => {
    const names = componentNames(st);
    let total = 0;
    return {
      columns: ["step", "reward", "cumulative", ...names],
      rows: st.steps.map((s) => [s.step, num(s.reward, 4), num((total += s.reward), 4), ...names.map((n) => num(s.components[n] || 0, 4))]),
    };
  };
  spec.update();
  const handle = makeChart(parent, spec);
  return handle;
}

function budgetChart(parent, st) {
  const spec = {
    type: "line",
    title: "Credits used over the steps",
    height: 260,
    data: { datasets: [] },
    options: {
      scales: {
        x: { type: "linear", title: axisTitle("step"), ticks: STEP_TICKS },
        y: { title: axisTitle("credits"), beginAtZero: true },
      },
      plugins: { bands: {} },
    },
  };
  spec.update = () => {
    const limit = st.meta.credits ?? (st.steps[0] && st.steps[0].credits);
    const last = st.steps.length ? st.steps[st.steps.length - 1].step : 1;
    spec.data.datasets = [
      { label: "credits used", data: st.steps.map((s) => ({ x: s.step, y: s.credits_used })), borderColor: color(0), backgroundColor: color(0), pointRadius: 2.5 },
    ];
    if (limit !== null && limit !== undefined) {
      spec.data.datasets.push({ label: `budget (${num(limit, 0)} credits)`, data: [{ x: 0, y: limit }, { x: Math.max(1, last), y: limit }], borderColor: color(1), borderDash: [6, 4], pointRadius: 0 });
    }
    spec.options.plugins.bands = faultOverlay(st);
  };
  spec.summary = () => {
    const s = st.steps[st.steps.length - 1];
    return s ? `${num(s.credits_used, 3)} credits used after step ${s.step}; ${s.steps_left} steps left.` : "No step yet.";
  };
  spec.table = () => ({
    columns: ["step", "credits used", "steps left"],
    rows: st.steps.map((s) => [s.step, num(s.credits_used, 4), s.steps_left]),
  });
  spec.update();
  return makeChart(parent, spec);
}

function jobChart(parent, st, field, title, yLabel) {
  const spec = {
    type: "line",
    title,
    height: 220,
    data: { datasets: [] },
    options: { scales: { x: { type: "linear", title: axisTitle("seconds since the episode started") }, y: { title: axisTitle(yLabel), beginAtZero: true } } },
  };
  spec.update = () => {
    const ids = [...new Set(st.jobSamples.map((p) => p.job_id))];
    spec.data.datasets = ids.map((id, i) => ({
      label: id,
      data: st.jobSamples.filter((p) => p.job_id === id && p[field] !== null && p[field] !== undefined).map((p) => ({ x: p.t - t0(st), y: p[field] })),
      borderColor: color(i),
      backgroundColor: color(i),
      pointRadius: 2.5,
    }));
  };
  spec.summary = () => {
    const last = {};
    for (const p of st.jobSamples) if (p[field] !== null && p[field] !== undefined) last[p.job_id] = p[field];
    return Object.entries(last).map(([k, v]) => `${k}: ${num(v, 1)} ${yLabel}`).join("; ") || "No sample yet.";
  };
  spec.table = () => ({
    columns: ["seconds", "step", "job", "state", yLabel],
    rows: st.jobSamples.map((p) => [num(p.t - t0(st), 1), p.step, p.job_id, p.state, p[field]]),
  });
  spec.update();
  return makeChart(parent, spec);
}

function servingCharts(parent, st, target) {
  const x = { type: "linear", title: axisTitle("seconds since the episode started") };
  const lines = () =>
    (st.alerts || [])
      .filter((a) => a.target === target)
      .flatMap((a) => [
        { x: a.started_at - t0(st), color: ALERT_LINE, label: `${a.alert_id} ${a.rule}` },
        ...(a.resolved_at ? [{ x: a.resolved_at - t0(st), color: GOOD_LINE, label: `${a.alert_id} resolved`, dash: [] }] : []),
      ]);
  const pts = () => st.series[target] || [];
  const make = (title, yLabel, fields, scale = 1) => {
    const spec = {
      type: "line",
      title: `${target}: ${title}`,
      height: 220,
      data: { datasets: [] },
      options: { scales: { x, y: { title: axisTitle(yLabel), beginAtZero: true } }, plugins: { bands: {} } },
    };
    spec.update = () => {
      spec.data.datasets = fields.map(([field, label], i) => ({
        label,
        data: pts().map((p) => ({ x: p.t - t0(st), y: p[field] === null || p[field] === undefined ? null : p[field] * scale })),
        borderColor: color(i),
        backgroundColor: color(i),
        pointRadius: 0,
        borderWidth: 2,
        spanGaps: false,
      }));
      spec.options.plugins.bands = { lines: lines() };
    };
    spec.summary = () => {
      const p = pts()[pts().length - 1];
      return p ? fields.map(([f, label]) => `${label} ${p[f] === null ? "no data" : num(p[f] * scale, 2)}`).join(", ") + " at the last scrape." : "No scrape yet.";
    };
    spec.table = () => ({
      columns: ["seconds", ...fields.map(([, label]) => label)],
      rows: pts().map((p) => [num(p.t - t0(st), 1), ...fields.map(([f]) => (p[f] === null ? null : num(p[f] * scale, 3)))]),
    });
    spec.update();
    return spec;
  };
  const box = h("div", { class: "grid", "data-target": target });
  parent.append(h("h3", {}, target), box);
  return [
    makeChart(box, make("latency", "ms", [["latency_p50_ms", "p50 ms"], ["latency_p95_ms", "p95 ms"], ["latency_p99_ms", "p99 ms"]])),
    makeChart(box, make("error rate", "% of requests", [["error_rate", "errors %"]], 100)),
    makeChart(box, make("requests per second", "requests/s", [["rps", "requests/s"], ["replicas_up", "replicas up"]])),
  ];
}

// ------------------------------------------------------------------------------------------ sections

function metaList(st, sandbox, episode) {
  const labels = st.meta.labels || {};
  const last = st.steps[st.steps.length - 1];
  const maxSteps = st.meta.max_steps ?? (last ? last.step + last.steps_left : null);
  const item = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, v));
  return h(
    "dl",
    { class: "meta" },
    item("Sandbox", h("a", { href: `#/episodes?sandbox=${enc(sandbox)}` }, sandbox)),
    item("Scenario", h("a", { href: `#/episodes?scenario=${enc(st.meta.scenario || "")}` }, st.meta.scenario || "?")),
    item("Seed", st.meta.seed ?? "–"),
    item("Agent", labels.agent || "–"),
    item("Interface", labels.interface || "–"),
    item("Started", clock(t0(st))),
    item("Steps", h("span", { "data-testid": "step-count" }, `${st.steps.length}${maxSteps ? ` / ${maxSteps}` : ""}`)),
    item("Total reward", signed(totalReward(st))),
    item("Credits used", last ? `${num(last.credits_used, 3)}${st.meta.credits ? ` / ${num(st.meta.credits, 0)}` : ""}` : "–"),
    item("Invalid actions", st.steps.filter((s) => !s.ok && !s.violation).length),
    item("Outcome", h("span", {}, outcomeBadge(outcome(st)), st.grade && st.grade.reason ? ` ${st.grade.reason}` : "")),
  );
}

function stepItem(st, s, overlay) {
  const rel = s.t && t0(st) ? `+${duration(s.t - t0(st))}` : "";
  const errorBadge = s.ok ? badge("ok", "good") : badge(s.violation ? "constraint violation" : (s.error && s.error.code) || "error", "bad");
  const body = h("div", { class: "step-body" });
  const details = h(
    "details",
    {
      ontoggle: () => {
        if (details.open && !body.childElementCount) buildStepBody(body, s);
      },
    },
    h(
      "summary",
      {},
      h("span", { class: "n" }, `Step ${s.step}`),
      h("span", { class: "t" }, rel),
      h("span", { class: "act" }, actionText(s.raw, s.action)),
      errorBadge,
      h("span", { class: "rw", title: "reward of this step" }, signed(s.reward)),
    ),
    body,
  );
  const chips = Object.entries(s.components)
    .filter(([, v]) => v)
    .map(([k, v]) => h("span", { class: "chip" }, `${k} ${signed(v)}`));
  const li = h(
    "li",
    { class: `step${s.ok ? "" : " error"}`, id: `step-${s.step}`, "data-step": s.step },
    details,
    s.error ? h("p", { class: "error-text" }, `${s.error.code}: ${s.error.message}`) : null,
    chips.length ? h("div", { class: "chips" }, chips) : null,
  );
  decorate(li, s.step, overlay);
  return li;
}

function decorate(li, step, overlay) {
  const old = li.querySelector("ul.marks");
  if (old) old.remove();
  li.classList.toggle("in-fault", overlay.active.has(step));
  const marks = overlay.marks.get(step);
  if (marks) li.append(h("ul", { class: "marks", "aria-label": `ground truth at step ${step}` }, marks.map((m) => h("li", { class: m.kind }, m.text))));
}

function buildStepBody(body, s) {
  const comps = Object.entries(s.components).filter(([, v]) => v);
  replace(
    body,
    h("section", {}, h("h4", {}, "Observation as text (what an LLM agent reads)"), h("pre", {}, s.text)),
    h(
      "section",
      {},
      h("h4", {}, "Action as sent"),
      h("pre", {}, typeof s.raw === "string" ? s.raw : json(s.raw)),
      h("h4", {}, "Reward components (the others were zero)"),
      comps.length
        ? table(
            [
              { label: "component", cell: (r) => r[0] },
              { label: "value", cell: (r) => signed(r[1], 4), num: true },
            ],
            comps,
          )
        : h("p", { class: "muted" }, "none"),
      h("h4", {}, "Observation (structured)"),
      h("pre", {}, json(s.observation)),
    ),
  );
}

function jobsSection(st, openLogs) {
  const jobs = Object.values(st.jobs);
  if (!jobs.length) return h("p", { class: "muted" }, "No job in this episode yet.");
  const stateKinds = { succeeded: "good", failed: "bad", cancelled: "warn", running: "live", queued: "neutral" };
  return h(
    "div",
    {},
    table(
      [
        { label: "Job", cell: (j) => j.job_id },
        { label: "State", cell: (j) => badge(j.state, stateKinds[j.state]) },
        { label: "Algorithm", cell: (j) => j.algorithm || "–" },
        { label: "Dataset", cell: (j) => j.dataset || "–" },
        { label: "CPU s", cell: (j) => num(j.cpu_seconds, 2), num: true },
        { label: "Peak memory", cell: (j) => (j.peak_rss_mb ? `${num(j.peak_rss_mb, 0)} MiB` : "–"), num: true },
        { label: "Run", cell: (j) => (j.run_id ? h("code", {}, j.run_id.slice(0, 12)) : "–") },
        { label: "Exit", cell: (j) => j.exit_code ?? "–", num: true },
      ],
      jobs,
      { caption: "Jobs" },
    ),
    jobs.map((j) => {
      const d = h(
        "details",
        { class: "job-log", open: openLogs.has(j.job_id), ontoggle: () => (d.open ? openLogs.add(j.job_id) : openLogs.delete(j.job_id)) },
        h("summary", {}, `Log of ${j.job_id} (last ${(j.log_tail || []).length} lines)`),
        h("pre", {}, (j.log_tail || []).join("\n") || "(empty)"),
      );
      return d;
    }),
  );
}

function runsSection(st) {
  const runs = Object.values(st.jobs).filter((j) => j.run_id);
  const regByVersion = new Map(st.registrations.map((r) => [`${r.name}/${r.version}`, r]));
  const models = (st.models && st.models.length ? st.models : st.registrations).map((m) => ({ ...m, ...(regByVersion.get(`${m.name}/${m.version}`) || {}) }));
  return h(
    "div",
    {},
    runs.length
      ? table(
          [
            { label: "Run", cell: (r) => h("code", {}, r.run_id) },
            { label: "Job", cell: (r) => r.job_id },
            { label: "Algorithm", cell: (r) => r.algorithm || "–" },
            { label: "Dataset", cell: (r) => r.dataset || "–" },
            { label: "Metrics", cell: (r) => Object.entries(r.metrics || {}).map(([k, v]) => `${k} ${num(v, 4)}`).join(", ") || "–" },
          ],
          runs,
          { caption: "Tracked runs (from the episode's training jobs)" },
        )
      : h("p", { class: "muted" }, "No finished training run yet."),
    models.length
      ? table(
          [
            { label: "Model", cell: (m) => m.name },
            { label: "Version", cell: (m) => m.version, num: true },
            { label: "From run", cell: (m) => (m.run_id ? h("code", {}, m.run_id) : "–") },
            { label: "Registered at step", cell: (m) => m.step ?? "–", num: true },
          ],
          models,
          { caption: "Registered models" },
        )
      : h("p", { class: "muted" }, "No model registered yet."),
  );
}

// The workspace: the files the agent wrote (the last write of each path) and the scripts it ran, with
// their state and output (the job's log tail, or what the agent read with get_logs).
function workspaceSection(st, openFiles) {
  const files = Object.values(st.files).sort((a, b) => a.path.localeCompare(b.path));
  const scripts = Object.values(st.scripts);
  if (!files.length && !scripts.length) return h("p", { class: "muted" }, "The agent did not use its workspace.");
  const keep = (key, el) => {
    el.open = openFiles.has(key);
    el.addEventListener("toggle", () => (el.open ? openFiles.add(key) : openFiles.delete(key)));
    return el;
  };
  return h(
    "div",
    {},
    table(
      [
        { label: "File", cell: (f) => h("code", {}, f.path) },
        { label: "Bytes", cell: (f) => num(f.bytes, 0), num: true },
        { label: "Written at step", cell: (f) => f.step, num: true },
      ],
      files,
      { caption: "Workspace files" },
    ),
    files.map((f) =>
      keep(
        `file:${f.path}`,
        h("details", { class: "job-log" }, h("summary", {}, `${f.path}${f.truncated ? " (first part)" : ""}`), h("pre", {}, f.content || "(empty)")),
      ),
    ),
    scripts.length
      ? table(
          [
            { label: "Job", cell: (r) => r.job_id },
            { label: "Script", cell: (r) => h("code", {}, r.script) },
            { label: "Run at step", cell: (r) => r.step, num: true },
            { label: "State", cell: (r) => (st.jobs[r.job_id] || {}).state || r.state },
          ],
          scripts,
          { caption: "Scripts run" },
        )
      : null,
    scripts.map((r) => {
      const lines = (st.jobs[r.job_id] || {}).log_tail || r.output || [];
      return keep(`out:${r.job_id}`, h("details", { class: "job-log" }, h("summary", {}, `Output of ${r.job_id} (${r.script})`), h("pre", {}, lines.join("\n") || "(no output read yet)")));
    }),
  );
}

function alertsSection(st) {
  if (!st.alerts || !st.alerts.length) return h("p", { class: "muted" }, "No alert fired.");
  return table(
    [
      { label: "Alert", cell: (a) => a.alert_id },
      { label: "Rule", cell: (a) => a.rule },
      { label: "Target", cell: (a) => a.target },
      { label: "Severity", cell: (a) => a.severity },
      { label: "State", cell: (a) => badge(a.state, a.state === "firing" ? "bad" : "good") },
      { label: "Condition", cell: (a) => h("code", {}, a.condition) },
      { label: "Value", cell: (a) => num(a.value, 3), num: true },
      { label: "Fired", cell: (a) => `+${duration(a.started_at - t0(st))}`, num: true },
      { label: "Resolved", cell: (a) => (a.resolved_at ? `+${duration(a.resolved_at - t0(st))}` : "–"), num: true },
      { label: "Acked", cell: (a) => (a.acked ? "yes" : "no") },
    ],
    st.alerts,
    { caption: "Alerts" },
  );
}

function faultsSection(st) {
  if (!done(st) && !st.closed) return h("p", { class: "muted" }, "The ground truth (which faults were injected, when the agent detected and mitigated them) is shown once the episode is over.");
  const faults = st.faults || [];
  if (!faults.length) return h("p", { class: "muted" }, "No fault was injected in this episode.");
  return table(
    [
      { label: "Fault", cell: (f) => f.name },
      { label: "Type", cell: (f) => f.fault },
      { label: "Target", cell: (f) => f.target },
      { label: "Injected at step", cell: (f) => f.injected_step, num: true },
      { label: "Detected at step", cell: (f) => f.detected_step ?? "–", num: true },
      { label: "Mitigated at step", cell: (f) => (agentMitigated(f) ? f.mitigated_step : "–"), num: true },
      { label: "Over at step", cell: (f) => (f.recovered_step ?? "–") + (f.recovered_by ? ` (${f.recovered_by})` : ""), num: true },
      { label: "Time to detect", cell: (f) => duration(f.time_to_detect_s), num: true },
      { label: "Time to mitigate", cell: (f) => (agentMitigated(f) ? duration(f.time_to_mitigate_s) : "–"), num: true },
      { label: "Note", cell: (f) => f.error || "" },
    ],
    faults,
    { caption: "Fault ground truth" },
  );
}

function gradeSection(st) {
  if (!st.grade) return h("p", { class: "muted" }, "Graded at the last step.");
  const item = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)));
  const metrics = st.metrics || {};
  return h(
    "div",
    {},
    h("dl", { class: "meta" }, Object.entries(st.grade).map(([k, v]) => item(k, v))),
    h("h3", {}, "Episode metrics"),
    h("dl", { class: "meta" }, Object.entries(metrics).map(([k, v]) => item(k, v ?? "–"))),
  );
}

// ------------------------------------------------------------------------------------------ page

export function render(main, sandbox, episode) {
  const st = emptyState();
  const charts = [];
  const made = { steps: false, jobs: false };
  const servingByTarget = new Map();
  const openLogs = new Set();
  const openFiles = new Set();
  let source = null;
  let offset = 0;
  let stopped = false;
  let retry = null;

  const sections = {};
  const section = (id, title) => {
    const body = h("div", { id: `${id}-body` });
    sections[id] = body;
    return h("section", { id, "aria-labelledby": `${id}-h` }, h("h2", { id: `${id}-h` }, title), body);
  };
  const head = h("div");
  const liveNote = h("p", { role: "status", class: "muted" });
  const timeline = h("ol", { class: "timeline", "aria-label": "Steps" });
  const jumps = [
    ["sec-charts", "Reward and budget"],
    ["sec-timeline", "Timeline"],
    ["sec-jobs", "Jobs"],
    ["sec-runs", "Runs and models"],
    ["sec-workspace", "Workspace"],
    ["sec-serving", "Deployments"],
    ["sec-alerts", "Alerts"],
    ["sec-faults", "Fault ground truth"],
    ["sec-grade", "Grade"],
  ];
  replace(
    main,
    h("p", {}, h("a", { href: "#/episodes" }, "← Episodes")),
    head,
    liveNote,
    h(
      "nav",
      { "aria-label": "Sections of this episode", class: "toolbar" },
      jumps.map(([id, label]) => h("button", { type: "button", class: "quiet", onclick: () => document.getElementById(id).scrollIntoView() }, label)),
    ),
    section("sec-charts", "Reward and budget"),
    section("sec-timeline", "Timeline"),
    section("sec-jobs", "Jobs"),
    section("sec-runs", "Runs and models"),
    section("sec-workspace", "Workspace"),
    section("sec-serving", "Deployments"),
    section("sec-alerts", "Alerts"),
    section("sec-faults", "Fault ground truth"),
    section("sec-grade", "Grade"),
  );
  const noSteps = h("p", { class: "muted" }, "No step yet.");
  sections["sec-timeline"].append(noSteps, timeline);
  const chartGrid = h("div", { class: "grid" });
  sections["sec-charts"].append(chartGrid);
  const jobsBody = h("div");
  const jobCharts = h("div", { class: "grid" });
  sections["sec-jobs"].append(jobsBody, jobCharts);
  const servingTable = h("div");
  const servingBox = h("div");
  sections["sec-serving"].append(servingTable, servingBox);

  function renderAll(newSteps) {
    replace(
      head,
      h("h1", {}, `Episode ${episode}`),
      st.meta.title ? h("p", { class: "muted" }, st.meta.title) : null,
      h("p", { id: "episode-status" }, statusBadge(status(st)), " ", outcomeBadge(outcome(st))),
      metaList(st, sandbox, episode),
    );
    liveNote.textContent = status(st) === "live" ? "Live: this page follows the episode as it runs." : "";
    if (status(st) === "live") liveNote.className = "live-note";
    else liveNote.className = "muted";

    const overlay = faultMarks(st);
    const have = timeline.children.length;
    for (const s of newSteps) timeline.append(stepItem(st, s, overlay));
    if (st.faults) for (const li of [...timeline.children].slice(0, have)) decorate(li, Number(li.dataset.step), overlay);
    noSteps.hidden = st.steps.length > 0;

    if (!made.steps && st.steps.length) {
      charts.push(rewardChart(chartGrid, st), budgetChart(chartGrid, st));
      made.steps = true;
    }
    if (!made.jobs && st.jobSamples.length) {
      charts.push(jobChart(jobCharts, st, "cpu_seconds", "CPU-seconds of each job", "CPU-seconds"));
      charts.push(jobChart(jobCharts, st, "peak_rss_mb", "Peak memory of each job", "MiB"));
      made.jobs = true;
    }
    for (const target of Object.keys(st.series)) {
      if (!servingByTarget.has(target)) servingByTarget.set(target, servingCharts(servingBox, st, target));
    }
    for (const c of [...charts, ...[...servingByTarget.values()].flat()]) {
      c.spec.update();
      c.refresh();
    }
    replaceKeepFocus(jobsBody, jobsSection(st, openLogs));
    replaceKeepFocus(sections["sec-runs"], runsSection(st));
    replaceKeepFocus(sections["sec-workspace"], workspaceSection(st, openFiles));
    replaceKeepFocus(
      servingTable,
      st.deployments.length
        ? table(
            [
              { label: "Deployment", cell: (d) => d.deployment },
              { label: "Model", cell: (d) => d.model ?? "–" },
              { label: "Version", cell: (d) => d.version ?? "–", num: true },
              { label: "Machine", cell: (d) => d.machine ?? "–" },
              { label: "Replicas up", cell: (d) => `${d.replicas_up ?? "?"} / ${d.replicas}`, num: true },
            ],
            st.deployments,
            { caption: "Deployments now" },
          )
        : Object.keys(st.series).length
          ? h("p", { class: "muted" }, "No deployment now.")
          : h("p", { class: "muted" }, "No deployment in this episode."),
    );
    replaceKeepFocus(sections["sec-alerts"], alertsSection(st));
    replaceKeepFocus(sections["sec-faults"], faultsSection(st));
    replaceKeepFocus(sections["sec-grade"], gradeSection(st));
  }

  function connect() {
    if (stopped) return;
    source = new EventSource(`/api/episodes/${enc(sandbox)}/${enc(episode)}/events?offset=${offset}`);
    source.addEventListener("delta", (ev) => {
      const d = JSON.parse(ev.data);
      offset = d.offset;
      const before = st.steps.length;
      merge(st, d);
      const fresh = st.steps.slice(before);
      renderAll(fresh);
      if (fresh.length) {
        const s = fresh[fresh.length - 1];
        announce(`Step ${s.step}: ${s.action || "?"} ${s.ok ? "ok" : "error"}`);
      }
      if (done(st) && st.closed) close();
    });
    source.addEventListener("gone", () => {
      close();
      liveNote.textContent = "The episode's log is gone (its sandbox was stopped).";
    });
    source.addEventListener("reset", () => {
      close();
      load();
    });
    source.onerror = () => {
      // The browser would reconnect from the first offset; reconnect from where this page is instead.
      close();
      if (!stopped) retry = window.setTimeout(connect, 2000);
    };
  }

  function close() {
    if (source) source.close();
    source = null;
  }

  async function load() {
    try {
      const data = await api(`/api/episodes/${enc(sandbox)}/${enc(episode)}`);
      Object.assign(st, emptyState());
      for (const c of charts.splice(0)) c.destroy();
      made.steps = made.jobs = false;
      for (const list of servingByTarget.values()) for (const c of list) c.destroy();
      servingByTarget.clear();
      replace(timeline);
      replace(chartGrid);
      replace(jobCharts);
      replace(servingBox);
      st.summary = data.summary;
      merge(st, data.view);
      offset = data.offset;
      renderAll(st.steps);
      if (!st.closed && status(st) !== "stopped") connect();
    } catch (e) {
      replace(head, h("h1", {}, `Episode ${episode}`), h("p", { class: "error" }, e.message));
    }
  }

  load();
  return () => {
    stopped = true;
    window.clearTimeout(retry);
    close();
    for (const c of charts) c.destroy();
    for (const list of servingByTarget.values()) for (const c of list) c.destroy();
  };
}
