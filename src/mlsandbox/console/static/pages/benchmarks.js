// Benchmarks: the runs of mlsandbox bench found under the console's benchmark roots, and one run's
// leaderboard (success rate and mean reward with their 95% intervals, pass@k when the summary has it),
// per-family results, reward distributions, cost against success, and every episode with links to its
// episode page (while its sandbox keeps the audit log) and to the replay of its trajectory.

import { axisTitle, color, makeChart } from "../charts.js";
import { ago, api, badge, enc, h, num, pct, replace, signed, table } from "../dom.js";

export function renderList(main) {
  const body = h("div");
  replace(main, h("h1", {}, "Benchmarks"), body);
  api("/api/benchmarks")
    .then((data) => {
      replace(
        body,
        h("p", { class: "muted" }, `Runs found under ${data.roots.join(", ")} (start the console with --bench DIR to look elsewhere).`),
        data.runs.length
          ? table(
              [
                { label: "Run", cell: (r) => h("a", { href: `#/benchmarks/${enc(r.id)}` }, r.name) },
                { label: "State", cell: (r) => (r.complete ? badge("complete", "neutral") : badge("in progress", "live")) },
                { label: "Episodes", cell: (r) => r.episodes, num: true },
                { label: "Agents", cell: (r) => r.agents.join(", ") },
                { label: "Suite", cell: (r) => r.suites.join(", ") },
                { label: "Families", cell: (r) => r.families.length, num: true },
                { label: "Success", cell: (r) => pct(r.success_rate), num: true },
                { label: "Trajectories", cell: (r) => r.trajectories, num: true },
                { label: "Updated", cell: (r) => ago(r.modified_at) },
              ],
              data.runs,
              { caption: "Benchmark runs, newest first" },
            )
          : h("p", {}, "No benchmark run yet: `mlsandbox bench --out DIR` writes one."),
      );
    })
    .catch((e) => replace(body, h("p", { class: "error" }, e.message)));
  return null;
}

function interval(iv, fmt) {
  if (!iv || iv.value === null || iv.value === undefined) return "–";
  if (iv.low === null || iv.low === undefined) return fmt(iv.value);
  return `${fmt(iv.value)} [${fmt(iv.low)}, ${fmt(iv.high)}]`;
}

function rateBar(iv) {
  const bar = h("span");
  bar.style.width = `${Math.round(100 * (iv && iv.value ? iv.value : 0))}%`;
  return h("span", { class: "bar-cell" }, h("span", { class: "bar", "aria-hidden": "true" }, bar), interval(iv, (v) => num(v, 2)));
}

export function renderRun(main, benchId) {
  const charts = [];
  replace(main, h("p", {}, h("a", { href: "#/benchmarks" }, "← Benchmarks")), h("h1", {}, "Benchmark run"), h("p", { class: "muted" }, "Loading…"));
  let gone = false;
  api(`/api/benchmarks/${enc(benchId)}`)
    .then((run) => {
      if (!gone) draw(main, run, charts);
    })
    .catch((e) => replace(main, h("h1", {}, "Benchmark run"), h("p", { class: "error" }, e.message)));
  return () => {
    gone = true;
    for (const c of charts) c.destroy();
  };
}

function draw(main, run, charts) {
  const agents = run.summary.agents || [];
  const families = run.summary.families || [];
  const ks = [...new Set(agents.flatMap((g) => (g.pass_at_k || []).map((p) => p.k)))].sort((a, b) => a - b);
  const agentNames = agents.map((g) => g.agent);
  const familyNames = [...new Set(families.map((g) => g.family))].sort();
  const chartsTop = h("div", { class: "grid" });
  const chartsBottom = h("div", { class: "grid" });

  replace(
    main,
    h("p", {}, h("a", { href: "#/benchmarks" }, "← Benchmarks")),
    h("h1", {}, `Benchmark run ${run.name}`),
    h(
      "p",
      { class: "muted" },
      h("span", { class: "run-path" }, run.path),
      " · ",
      run.complete ? "complete" : "in progress (summary computed from the rows written so far)",
      run.report ? [" · ", h("a", { href: `/api/benchmarks/${enc(run.id)}/report`, target: "_blank", rel: "noopener" }, "static HTML report")] : null,
    ),
    run.problems.length ? h("div", { class: "notice" }, run.problems.map((p) => h("p", {}, p))) : null,
    h("h2", {}, "Leaderboard"),
    table(
      [
        { label: "Rank", cell: (g) => agents.indexOf(g) + 1, num: true },
        { label: "Agent", cell: (g) => g.agent },
        { label: "Episodes", cell: (g) => g.episodes, num: true },
        { label: "Success rate [95% CI]", cell: (g) => rateBar(g.success_rate) },
        { label: "Mean reward [95% CI]", cell: (g) => interval(g.mean_reward, (v) => signed(v, 2)), num: true },
        ...ks.map((k) => ({
          label: `pass@${k}`,
          cell: (g) => {
            const p = (g.pass_at_k || []).find((x) => x.k === k);
            return p ? interval(p, (v) => num(v, 2)) : "–";
          },
          num: true,
        })),
        { label: "Mean credits", cell: (g) => num(g.mean_credits, 2), num: true },
        { label: "Mean steps", cell: (g) => num(g.mean_steps, 1), num: true },
        { label: "Time to detect (steps)", cell: (g) => num(g.mean_time_to_detect_steps, 1), num: true },
        { label: "Errors", cell: (g) => g.errors, num: true },
      ],
      agents,
      { caption: `Agents ranked by success rate, then mean reward${ks.length ? "; pass@k from the summary" : " (this summary has no pass@k)"}` },
    ),
    chartsTop,
    h("h2", {}, "Per scenario family"),
    table(
      [
        { label: "Family", cell: (g) => g.family },
        { label: "Agent", cell: (g) => g.agent },
        { label: "Episodes", cell: (g) => g.episodes, num: true },
        { label: "Success rate [95% CI]", cell: (g) => rateBar(g.success_rate) },
        { label: "Mean reward [95% CI]", cell: (g) => interval(g.mean_reward, (v) => signed(v, 2)), num: true },
        { label: "Mean credits", cell: (g) => num(g.mean_credits, 2), num: true },
      ],
      families,
      { caption: "Per family and agent" },
    ),
    chartsBottom,
    h("h2", {}, "Episodes"),
    table(
      [
        { label: "Scenario", cell: (r) => r.scenario },
        { label: "Agent", cell: (r) => r.agent },
        { label: "Seed", cell: (r) => r.seed, num: true },
        { label: "Outcome", cell: (r) => (r.error ? badge("error", "bad") : r.success ? badge("success", "good") : badge("failure", "warn")) },
        { label: "Reward", cell: (r) => signed(r.reward), num: true },
        { label: "Steps", cell: (r) => r.steps, num: true },
        { label: "Credits", cell: (r) => num(r.credits_used, 2), num: true },
        { label: "Wall", cell: (r) => `${num(r.wall_s, 1)} s`, num: true },
        {
          label: "Links",
          cell: (r) => [
            r.episode_sandbox ? h("a", { href: `#/episodes/${enc(r.episode_sandbox)}/${enc(r.episode_id)}`, "data-link": "episode" }, "episode") : null,
            r.episode_sandbox && r.trajectory_file ? " · " : null,
            r.trajectory_file ? h("a", { href: `#/replay/${enc(run.id)}/${enc(r.trajectory_file)}`, "data-link": "replay" }, "replay") : null,
            !r.episode_sandbox && !r.trajectory_file ? h("span", { class: "muted" }, r.error || "–") : null,
          ],
        },
      ],
      run.rows,
      { caption: "Every episode of the run (episode: while its sandbox keeps the audit log; replay: its trajectory file)" },
    ),
  );

  if (!agents.length) return;
  // success rate per agent with its interval
  charts.push(
    makeChart(chartsTop, {
      type: "bar",
      title: "Success rate per agent (95% Wilson interval)",
      height: Math.max(160, 60 + 40 * agents.length),
      data: {
        labels: agentNames,
        datasets: [
          {
            label: "success rate",
            data: agents.map((g) => g.success_rate.value),
            intervals: agents.map((g) => [g.success_rate.low, g.success_rate.high]),
            backgroundColor: agents.map((_, i) => color(i)),
          },
        ],
      },
      options: { indexAxis: "y", scales: { x: { min: 0, max: 1, title: axisTitle("success rate") } }, plugins: { legend: { display: false } } },
      summary: () => agents.map((g) => `${g.agent} ${interval(g.success_rate, (v) => num(v, 2))}`).join("; "),
      table: () => ({ columns: ["agent", "success rate", "low", "high", "episodes"], rows: agents.map((g) => [g.agent, num(g.success_rate.value, 3), num(g.success_rate.low, 3), num(g.success_rate.high, 3), g.success_rate.n]) }),
    }),
  );
  // cost against success: one point per agent, with the success interval
  charts.push(
    makeChart(chartsTop, {
      type: "scatter",
      title: "Cost against success (mean credits per episode, success rate with its interval)",
      height: 260,
      data: {
        datasets: agents.map((g, i) => ({
          label: g.agent,
          data: [{ x: g.mean_credits, y: g.success_rate.value }],
          intervals: [[g.success_rate.low, g.success_rate.high]],
          intervalColor: color(i),
          backgroundColor: color(i),
          borderColor: color(i),
          pointRadius: 6,
          pointStyle: ["circle", "rect", "triangle", "rectRot", "star", "crossRot"][i % 6],
        })),
      },
      options: {
        scales: {
          x: { title: axisTitle("mean credits per episode"), beginAtZero: true, grace: "10%" },
          y: {
            min: -0.05,
            max: 1.05,
            title: axisTitle("success rate"),
            afterBuildTicks: (axis) => {
              axis.ticks = [0, 0.2, 0.4, 0.6, 0.8, 1].map((value) => ({ value }));
            },
          },
        },
      },
      summary: () => agents.map((g) => `${g.agent}: ${num(g.mean_credits, 2)} credits, success ${num(g.success_rate.value, 2)}`).join("; "),
      table: () => ({ columns: ["agent", "mean credits", "success rate"], rows: agents.map((g) => [g.agent, num(g.mean_credits, 3), num(g.success_rate.value, 3)]) }),
    }),
  );
  // success per family and agent
  if (familyNames.length) {
    charts.push(
      makeChart(chartsBottom, {
        type: "bar",
        title: "Success rate per family and agent (95% interval)",
        height: Math.max(220, 70 + 28 * familyNames.length * Math.max(1, agentNames.length)),
        data: {
          labels: familyNames,
          datasets: agentNames.map((a, i) => {
            const of = (f) => families.find((g) => g.agent === a && g.family === f);
            return {
              label: a,
              data: familyNames.map((f) => (of(f) ? of(f).success_rate.value : null)),
              intervals: familyNames.map((f) => (of(f) ? [of(f).success_rate.low, of(f).success_rate.high] : null)),
              backgroundColor: color(i),
            };
          }),
        },
        options: { indexAxis: "y", scales: { x: { min: 0, max: 1, title: axisTitle("success rate") } } },
        summary: () => `${familyNames.length} families, ${agentNames.length} agents.`,
        table: () => ({ columns: ["family", "agent", "success rate", "low", "high"], rows: families.map((g) => [g.family, g.agent, num(g.success_rate.value, 3), num(g.success_rate.low, 3), num(g.success_rate.high, 3)]) }),
      }),
    );
  }
  // reward distribution: every episode as a dot, per agent (jittered), successes filled
  const ran = run.rows.filter((r) => !r.error);
  const jitter = (i) => ((((i * 2654435761) >>> 0) % 1000) / 1000 - 0.5) * 0.5;
  charts.push(
    makeChart(chartsBottom, {
      type: "scatter",
      title: "Reward distribution per agent (each dot an episode; filled: solved)",
      height: 260,
      data: {
        datasets: agentNames.map((a, i) => ({
          label: a,
          data: ran.filter((r) => r.agent === a).map((r, j) => ({ x: i + jitter(j + 1), y: r.reward, success: r.success })),
          borderColor: color(i),
          backgroundColor: ran.filter((r) => r.agent === a).map((r) => (r.success ? color(i) : "rgba(255,255,255,0)")),
          pointRadius: 5,
          borderWidth: 1.5,
        })),
      },
      options: {
        scales: {
          x: { min: -0.6, max: agentNames.length - 0.4, ticks: { stepSize: 1, callback: (v) => (Number.isInteger(v) ? agentNames[v] || "" : "") }, title: axisTitle("agent") },
          y: { title: axisTitle("episode reward") },
        },
      },
      summary: () =>
        agentNames
          .map((a) => {
            const rs = ran.filter((r) => r.agent === a).map((r) => r.reward);
            return rs.length ? `${a}: ${rs.length} episodes, rewards ${num(Math.min(...rs), 2)} to ${num(Math.max(...rs), 2)}` : `${a}: none`;
          })
          .join("; "),
      table: () => ({ columns: ["agent", "scenario", "seed", "reward", "success"], rows: ran.map((r) => [r.agent, r.scenario, r.seed, num(r.reward, 3), r.success ? "yes" : "no"]) }),
    }),
  );
}
