// Episodes: every episode logged in this machine's sandboxes (whatever interface ran it), live and
// finished, filterable by sandbox, scenario, agent, interface, outcome and status. The list refreshes
// itself; filters live in the address (#/episodes?scenario=...), so a filtered list can be shared.

import { ago, api, enc, h, hashQuery, num, outcomeBadge, replace, replaceKeepFocus, signed, statusBadge, table } from "../dom.js";

const POLL_MS = 2000;
const FILTERS = [
  ["sandbox", "Sandbox"],
  ["scenario", "Scenario"],
  ["agent", "Agent"],
  ["interface", "Interface"],
  ["outcome", "Outcome"],
  ["status", "Status"],
];

export function render(main) {
  const query = hashQuery();
  const selects = {};
  const count = h("p", { class: "muted", role: "status" });
  const list = h("div");
  let timer = null;
  let stopped = false;

  function wanted() {
    const q = new URLSearchParams();
    for (const [key] of FILTERS) if (selects[key].value) q.set(key, selects[key].value);
    return q;
  }

  function onChange() {
    const q = wanted().toString();
    window.history.replaceState(null, "", `#/episodes${q ? `?${q}` : ""}`);
    load();
  }

  const toolbar = h(
    "form",
    { class: "toolbar", "aria-label": "Filter episodes", onsubmit: (e) => e.preventDefault() },
    FILTERS.map(([key, label]) => {
      const select = h("select", { id: `filter-${key}`, name: key, onchange: onChange }, h("option", { value: "" }, "any"));
      const initial = query.get(key);
      if (initial) select.append(h("option", { value: initial, selected: true }, initial));
      selects[key] = select;
      return h("div", { class: "field" }, h("label", { for: `filter-${key}` }, label), select);
    }),
    h(
      "button",
      {
        type: "button",
        class: "quiet",
        onclick: () => {
          for (const [key] of FILTERS) selects[key].value = "";
          onChange();
        },
      },
      "Clear filters",
    ),
  );

  function fillFacets(facets) {
    for (const [key] of FILTERS) {
      const select = selects[key];
      const current = select.value;
      const values = new Set(facets[key] || []);
      if (current) values.add(current);
      const have = [...select.options].map((o) => o.value).slice(1);
      const next = [...values].sort();
      if (have.join("\u0000") === next.join("\u0000")) continue;
      replace(select, h("option", { value: "" }, "any"), next.map((v) => h("option", { value: v, selected: v === current }, v)));
    }
  }

  async function load() {
    try {
      const data = await api(`/api/episodes?${wanted().toString()}`);
      fillFacets(data.facets);
      count.textContent = `${data.total} episode${data.total === 1 ? "" : "s"}${data.total > data.episodes.length ? ` (newest ${data.episodes.length} shown)` : ""}`;
      replaceKeepFocus(
        list,
        data.episodes.length
          ? table(
              [
                {
                  label: "Episode",
                  cell: (e) => h("a", { href: `#/episodes/${enc(e.sandbox)}/${enc(e.episode)}`, id: `ep-${e.sandbox}-${e.episode}` }, e.episode),
                },
                { label: "Sandbox", cell: (e) => e.sandbox },
                { label: "Scenario", cell: (e) => e.scenario },
                { label: "Agent", cell: (e) => e.agent || "–" },
                { label: "Interface", cell: (e) => e.interface || "–" },
                { label: "Started", cell: (e) => ago(e.started_at) },
                { label: "Steps", cell: (e) => `${e.steps}${e.max_steps ? ` / ${e.max_steps}` : ""}`, num: true },
                { label: "Reward", cell: (e) => signed(e.reward), num: true },
                { label: "Credits", cell: (e) => `${num(e.credits_used)}${e.credits ? ` / ${num(e.credits, 0)}` : ""}`, num: true },
                { label: "Status", cell: (e) => statusBadge(e.status) },
                { label: "Outcome", cell: (e) => outcomeBadge(e.outcome) },
              ],
              data.episodes,
              { caption: "Episodes, newest first", className: "episodes" },
            )
          : h("p", { class: "muted" }, "No episode matches. Episodes appear here as soon as any interface starts one (mlsandbox run, bench, the env, the HTTP gateway, MCP)."),
      );
    } catch (e) {
      replace(list, h("p", { class: "error" }, `Could not list episodes: ${e.message}`));
    }
  }

  replace(main, h("h1", {}, "Episodes"), toolbar, count, list);
  const tick = async () => {
    await load();
    if (!stopped) timer = window.setTimeout(tick, POLL_MS);
  };
  tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
