// The console's router: one page per hash route; a page's render(main, ...params) may return a cleanup
// function (closing its event stream, stopping its polling, destroying its charts) run on navigation.

import { h, replace } from "./dom.js";
import * as benchmarks from "./pages/benchmarks.js";
import * as episode from "./pages/episode.js";
import * as episodes from "./pages/episodes.js";
import * as replay from "./pages/replay.js";
import * as sandboxes from "./pages/sandboxes.js";

const ROUTES = [
  { re: /^\/sandboxes$/, nav: "sandboxes", render: sandboxes.render },
  { re: /^\/episodes$/, nav: "episodes", render: episodes.render },
  { re: /^\/episodes\/([^/]+)\/([^/]+)$/, nav: "episodes", render: episode.render },
  { re: /^\/replay$/, nav: "replay", render: replay.render },
  { re: /^\/replay\/([^/]+)\/([^/]+)$/, nav: "replay", render: replay.render },
  { re: /^\/benchmarks$/, nav: "benchmarks", render: benchmarks.renderList },
  { re: /^\/benchmarks\/([^/]+)$/, nav: "benchmarks", render: benchmarks.renderRun },
];

let cleanup = null;
let lastPath = null;

function route() {
  const hash = window.location.hash || "#/episodes";
  const [path] = hash.slice(1).split("?");
  const main = document.getElementById("main");
  const firstLoad = lastPath === null;
  const samePage = path === lastPath;
  lastPath = path;
  if (cleanup) {
    try {
      cleanup();
    } catch (e) {
      console.error(e);
    }
    cleanup = null;
  }
  for (const a of document.querySelectorAll("header.top nav a")) a.removeAttribute("aria-current");
  const match = ROUTES.map((r) => [r, path.match(r.re)]).find(([, m]) => m);
  if (!match) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/episodes" }, "Episodes")));
    return;
  }
  const [r, m] = match;
  const link = document.querySelector(`header.top nav a[data-nav="${r.nav}"]`);
  if (link) link.setAttribute("aria-current", "page");
  replace(main);
  const params = m.slice(1).map((s) => decodeURIComponent(s));
  try {
    cleanup = r.render(main, ...params) || null;
  } catch (e) {
    replace(main, h("h1", {}, "Something went wrong"), h("p", { class: "error" }, String(e)));
  }
  // After a navigation, focus moves to the new page's content (as a page load would start over); on the
  // first load it stays at the top, where the skip link is.
  if (!samePage && !firstLoad) main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
if (!window.location.hash) window.history.replaceState(null, "", "#/episodes");
route();
