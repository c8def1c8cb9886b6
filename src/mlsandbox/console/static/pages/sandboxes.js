// Sandboxes: each sandbox the backend registry lists on this machine, its services with their health, ports, memory
// and uptime, and buttons to start or stop it.

import { api, announce, badge, bytes, clock, duration, enc, h, replace, replaceKeepFocus, table } from "../dom.js";

const POLL_MS = 3000;

function serviceBadge(state) {
  const kinds = { running: "good", starting: "live", unhealthy: "bad", stopped: "warn" };
  return badge(state, kinds[state]);
}

function sandboxCard(sb, onOp) {
  const op = sb.operation;
  const busy = op && op.running;
  const title = h("h2", { id: `sb-${sb.name}` }, sb.name);
  const status = busy
    ? badge(op.op === "start" ? "starting…" : "stopping…", "live")
    : sb.running
      ? badge("running", "good")
      : sb.phase === "starting"
        ? badge("starting", "live")
        : sb.services.length
          ? badge("degraded", "bad")
          : badge("stopped", "warn");
  const actions = h(
    "div",
    { class: "actions" },
    h(
      "button",
      {
        type: "button",
        id: `start-${sb.name}`,
        disabled: busy || sb.running,
        "aria-describedby": `sb-${sb.name}`,
        onclick: () => onOp(sb, "start"),
      },
      "Start",
    ),
    h(
      "button",
      {
        type: "button",
        id: `stop-${sb.name}`,
        class: "danger",
        disabled: busy || (!sb.services.length && sb.phase === "unknown"),
        "aria-describedby": `sb-${sb.name}`,
        onclick: () => onOp(sb, "stop"),
      },
      "Stop",
    ),
  );
  const owner =
    sb.ephemeral === null
      ? "–"
      : sb.ephemeral
        ? `ephemeral, owned by pid ${sb.owner_pid}${sb.owner_alive ? "" : " (gone)"}`
        : "persistent";
  return h(
    "section",
    { class: "card", "aria-labelledby": `sb-${sb.name}`, "data-sandbox": sb.name },
    h("header", {}, title, badge(sb.backend, "neutral"), status, actions),
    h(
      "dl",
      { class: "meta" },
      h("div", {}, h("dt", {}, "Lifetime"), h("dd", {}, owner)),
      h("div", {}, h("dt", {}, "Created"), h("dd", {}, clock(sb.created_at))),
      h("div", {}, h("dt", {}, "Memory (all services)"), h("dd", {}, bytes(sb.rss_bytes))),
      h(
        "div",
        {},
        h("dt", {}, "Episodes"),
        h("dd", {}, sb.episodes ? h("a", { href: `#/episodes?sandbox=${enc(sb.name)}` }, `${sb.episodes} episodes`) : "none"),
      ),
    ),
    op && op.error ? h("p", { class: "error", role: "alert" }, `${op.op} failed: ${op.error}`) : null,
    sb.error ? h("p", { class: "error" }, sb.error) : null,
    sb.services.length
      ? table(
          [
            { label: "Service", cell: (s) => s.name },
            { label: "Health", cell: (s) => serviceBadge(s.state) },
            { label: "URL", cell: (s) => (s.url ? h("code", {}, s.url) : "–") },
            { label: "Port", cell: (s) => s.port ?? "–", num: true },
            { label: "PID", cell: (s) => s.pid ?? "–", num: true },
            { label: "Memory", cell: (s) => bytes(s.rss_bytes), num: true },
            { label: "Uptime", cell: (s) => duration(s.uptime_s), num: true },
          ],
          sb.services,
          { caption: `Services of ${sb.name}` },
        )
      : h("p", { class: "muted" }, "No service is running."),
  );
}

export function render(main) {
  const list = h("div", { "aria-live": "off" });
  const message = h("div", { role: "status" });
  const nameInput = h("input", { id: "new-sandbox", name: "name", required: true, pattern: "[a-z0-9][a-z0-9-]{0,39}", placeholder: "e.g. default" });
  let timer = null;
  let stopped = false;

  async function load() {
    try {
      const rows = await api("/api/sandboxes");
      replaceKeepFocus(list, rows.length ? rows.map((sb) => sandboxCard(sb, operate)) : h("p", { class: "muted" }, "No sandbox on this machine yet: start one below."));
    } catch (e) {
      replace(message, h("p", { class: "error" }, `Could not list sandboxes: ${e.message}`));
    }
  }

  async function operate(sb, op) {
    if (op === "stop") {
      const warn = sb.ephemeral && sb.owner_alive
        ? `Sandbox ${sb.name} belongs to a running process (pid ${sb.owner_pid}); stopping it ends that process's episodes. Stop it?`
        : `Stop sandbox ${sb.name}? Its services, jobs and episode logs are removed.`;
      if (!window.confirm(warn)) return;
    }
    try {
      await api(`/api/sandboxes/${enc(sb.name)}/${op}`, { method: "POST" });
      announce(`${op === "start" ? "Starting" : "Stopping"} sandbox ${sb.name}`);
      replace(message);
    } catch (e) {
      replace(message, h("p", { class: "error", role: "alert" }, e.message));
    }
    load();
  }

  const form = h(
    "form",
    {
      class: "toolbar",
      onsubmit: (ev) => {
        ev.preventDefault();
        if (!nameInput.checkValidity()) {
          nameInput.reportValidity();
          return;
        }
        operate({ name: nameInput.value }, "start");
      },
    },
    h("div", { class: "field" }, h("label", { for: "new-sandbox" }, "Sandbox name"), nameInput),
    h("button", { type: "submit" }, "Start sandbox"),
  );

  replace(
    main,
    h("h1", {}, "Sandboxes"),
    h("p", { class: "muted" }, "Local sandboxes of this machine (lowercase letters, digits and dashes). Start runs `mlsandbox up`, stop runs `mlsandbox down`."),
    form,
    message,
    list,
  );
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
