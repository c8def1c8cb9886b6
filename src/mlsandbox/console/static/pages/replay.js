// Replay: step through a trajectory file (mlsandbox bench writes one per episode) as the agent saw it,
// as text (what the LLM adapter renders) or structured. Keyboard: ← / → (or k / j) previous and next
// step, Home / End first and last, t switches between the text and the structured view.

import { actionText, api, enc, h, json, num, replace, signed, table } from "../dom.js";

let uploaded = null; // the last trajectory opened from a file, kept while the page lives

export function render(main, benchId, file) {
  if (benchId === "upload" && uploaded) return viewer(main, uploaded, "uploaded file");
  if (benchId && file) {
    replace(main, h("h1", {}, "Replay"), h("p", { class: "muted" }, "Loading…"));
    let cleanup = null;
    let gone = false;
    api(`/api/benchmarks/${enc(benchId)}/trajectories/${enc(file)}`)
      .then((view) => {
        if (!gone) cleanup = viewer(main, view, file, benchId);
      })
      .catch((e) => replace(main, h("h1", {}, "Replay"), h("p", { class: "error" }, e.message), h("p", {}, h("a", { href: "#/replay" }, "All trajectories"))));
    return () => {
      gone = true;
      if (cleanup) cleanup();
    };
  }
  return chooser(main);
}

function chooser(main) {
  const message = h("div", { role: "status" });
  const lists = h("div");
  const input = h("input", { type: "file", id: "trajectory-file", accept: ".jsonl,application/jsonl,application/x-ndjson,text/plain" });
  input.addEventListener("change", async () => {
    const f = input.files && input.files[0];
    if (!f) return;
    try {
      const text = await f.text();
      uploaded = await api(`/api/replay?name=${enc(f.name)}`, { method: "POST", body: text, headers: { "Content-Type": "application/x-ndjson" } });
      window.location.hash = "#/replay/upload/file";
    } catch (e) {
      replace(message, h("p", { class: "error", role: "alert" }, e.message));
    }
  });
  replace(
    main,
    h("h1", {}, "Replay a trajectory"),
    h("p", { class: "muted" }, "A trajectory is one episode as JSONL: the observation the agent saw, its action, the reward, at each step (mlsandbox bench writes one per episode)."),
    h("div", { class: "toolbar" }, h("div", { class: "field" }, h("label", { for: "trajectory-file" }, "Open a trajectory file"), input)),
    message,
    h("h2", {}, "Trajectories of benchmark runs"),
    lists,
  );
  (async () => {
    try {
      const data = await api("/api/benchmarks");
      if (!data.runs.length) {
        replace(lists, h("p", { class: "muted" }, `No benchmark run found under ${data.roots.join(", ") || "the benchmark roots"}.`));
        return;
      }
      const parts = [];
      for (const run of data.runs) {
        const t = await api(`/api/benchmarks/${enc(run.id)}/trajectories`);
        parts.push(
          h("h3", {}, run.name),
          t.trajectories.length
            ? h("ul", {}, t.trajectories.map((name) => h("li", {}, h("a", { href: `#/replay/${enc(run.id)}/${enc(name)}` }, name))))
            : h("p", { class: "muted" }, "No trajectory recorded (--no-trajectories)."),
        );
      }
      replace(lists, parts);
    } catch (e) {
      replace(lists, h("p", { class: "error" }, e.message));
    }
  })();
  return null;
}

function viewer(main, view, name, benchId) {
  // Position 0 is the reset (the first observation); 1..n the steps; n+1 the end when there is one.
  const frames = [{ kind: "reset" }, ...view.steps.map((s) => ({ kind: "step", s })), ...(view.end ? [{ kind: "end" }] : [])];
  let pos = 0;
  let mode = "text";
  const ep = view.episode || {};
  const position = h("span", { class: "position", "aria-live": "polite", id: "replay-position" });
  const panel = h("div", { id: "replay-panel" });
  const stepInput = h("input", { type: "number", id: "replay-step", min: 0, max: frames.length - 1, value: 0, inputmode: "numeric" });
  const buttons = {
    first: h("button", { type: "button", class: "quiet", onclick: () => go(0) }, "First"),
    prev: h("button", { type: "button", onclick: () => go(pos - 1), "aria-keyshortcuts": "ArrowLeft" }, "← Previous"),
    next: h("button", { type: "button", onclick: () => go(pos + 1), "aria-keyshortcuts": "ArrowRight" }, "Next →"),
    last: h("button", { type: "button", class: "quiet", onclick: () => go(frames.length - 1) }, "Last"),
  };
  stepInput.addEventListener("change", () => go(Number(stepInput.value)));
  const radio = (value, label) =>
    h(
      "label",
      {},
      h("input", { type: "radio", name: "replay-view", value, checked: value === mode, onchange: () => setMode(value) }),
      ` ${label}`,
    );
  const modeBox = h("fieldset", { class: "view" }, h("legend", {}, "View"), radio("text", "Text (as the agent read it)"), radio("structured", "Structured"));

  function setMode(m) {
    mode = m;
    for (const input of modeBox.querySelectorAll("input")) input.checked = input.value === m;
    draw();
  }

  function go(i) {
    pos = Math.max(0, Math.min(frames.length - 1, i));
    draw();
  }

  function draw() {
    const f = frames[pos];
    stepInput.value = String(pos);
    buttons.first.disabled = buttons.prev.disabled = pos === 0;
    buttons.next.disabled = buttons.last.disabled = pos === frames.length - 1;
    if (f.kind === "reset") {
      position.textContent = `Reset (position 0 of ${frames.length - 1})`;
      replace(panel, h("h2", {}, "First observation"), mode === "text" ? h("pre", { class: "replay-text" }, view.initial.text) : h("pre", {}, json(view.initial.observation)));
      return;
    }
    if (f.kind === "end") {
      const e = view.end;
      position.textContent = `End (position ${pos} of ${frames.length - 1})`;
      replace(
        panel,
        h("h2", {}, e.success ? "Solved" : "Not solved"),
        mode === "text" ? h("pre", { class: "replay-text" }, e.text) : h("pre", {}, json({ ...e, text: undefined })),
      );
      return;
    }
    const s = f.s;
    position.textContent = `Step ${s.step} (position ${pos} of ${frames.length - 1})`;
    const comps = Object.entries(s.reward_components || {}).filter(([, v]) => v);
    replace(
      panel,
      h("h2", {}, `Step ${s.step}: `, h("code", {}, actionText(s.action))),
      h(
        "p",
        {},
        `reward ${signed(s.reward)} · total ${signed(s.total_reward)}`,
        s.terminated ? " · terminated" : "",
        s.truncated ? " · truncated" : "",
      ),
      mode === "text"
        ? h("pre", { class: "replay-text" }, s.text)
        : h(
            "div",
            { class: "step-body" },
            h("section", {}, h("h3", {}, "Action"), h("pre", {}, typeof s.action === "string" ? s.action : json(s.action)), h("h3", {}, "Reward components (the others were zero)"), comps.length ? table([{ label: "component", cell: (r) => r[0] }, { label: "value", cell: (r) => num(r[1], 4), num: true }], comps) : h("p", { class: "muted" }, "none")),
            h("section", {}, h("h3", {}, "Observation after the action"), h("pre", {}, json(s.next_observation))),
            h("details", {}, h("summary", {}, "Observation the action was chosen on"), h("pre", {}, json(s.observation))),
            h("details", {}, h("summary", {}, "Step info"), h("pre", {}, json(s.info))),
          ),
    );
  }

  function onKey(ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) return;
    const t = ev.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) return; // their own keys
    const keys = { ArrowRight: () => go(pos + 1), j: () => go(pos + 1), ArrowLeft: () => go(pos - 1), k: () => go(pos - 1), Home: () => go(0), End: () => go(frames.length - 1), t: () => setMode(mode === "text" ? "structured" : "text") };
    const fn = keys[ev.key];
    if (fn) {
      ev.preventDefault();
      fn();
    }
  }
  document.addEventListener("keydown", onKey);

  const title = `${ep.scenario || "?"} · agent ${ep.agent || "?"} · seed ${ep.seed ?? "?"}`;
  replace(
    main,
    h("p", {}, h("a", { href: "#/replay" }, "← All trajectories"), benchId && benchId !== "upload" ? [" · ", h("a", { href: `#/benchmarks/${enc(benchId)}` }, "its benchmark run")] : null),
    h("h1", {}, `Replay: ${name}`),
    h("p", { class: "muted" }, title, ep.episode_id ? ` · episode ${ep.episode_id}` : ""),
    h(
      "div",
      { class: "replay-nav", role: "group", "aria-label": "Step navigation" },
      buttons.first,
      buttons.prev,
      h("label", { for: "replay-step" }, "Position"),
      stepInput,
      buttons.next,
      buttons.last,
      position,
    ),
    modeBox,
    h("p", { class: "kbd-help" }, "Keys: ", h("kbd", {}, "←"), " ", h("kbd", {}, "→"), " (or ", h("kbd", {}, "k"), " ", h("kbd", {}, "j"), ") previous / next, ", h("kbd", {}, "Home"), " ", h("kbd", {}, "End"), " first / last, ", h("kbd", {}, "t"), " text or structured."),
    panel,
  );
  draw();
  return () => document.removeEventListener("keydown", onKey);
}
