"""The console in a real browser (Chromium driven by Playwright) over a real sandbox and real episodes.

A real ``mlsandbox bench`` (the reference agent and the random agent on ``tabular-ops-tracker-outage``,
whose plan slows the lake and kills the tracker) runs on the session's sandbox while the console watches
it from outside, as a person would: its live episode page grows step by step without reloading; once it
is over, the fault ground truth is laid over the timeline and the charts; the benchmark page links each
row to its episode and to the replay of its trajectory; the replay steps with the keyboard. A wrong token
and a real session token of the HTTP gateway are both refused.

With ``MLSANDBOX_CONSOLE_SCREENSHOTS=DIR`` the main pages are also saved as PNG files in DIR (the README's
screenshots come from there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

expect.set_options(timeout=20_000)  # a loaded 2-core machine

SCENARIO = "tabular-ops-tracker-outage"
SCREENSHOTS = os.environ.get("MLSANDBOX_CONSOLE_SCREENSHOTS")


def _shot(page: Any, name: str, *, full_page: bool = False, mask: list[Any] | None = None) -> None:
    if not SCREENSHOTS:
        return
    from PIL import Image

    out = Path(SCREENSHOTS)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    if full_page:
        page.screenshot(path=str(path), full_page=True, mask=mask or [])
    else:
        page.screenshot(path=str(path), mask=mask or [])  # a page's viewport, or one element (a locator)
    with Image.open(path) as img:  # a palette PNG: a fraction of the size, the same to the eye
        img.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def _api(console: Any, path: str, **params: Any) -> Any:
    r = httpx.get(
        console.url + path, params=params, headers={"Authorization": f"Bearer {console.token}"}, timeout=30
    )
    r.raise_for_status()
    return r.json()


def _chart_points(page: Any, selector: str) -> list[int]:
    """Points of every dataset of the chart drawn in ``selector``'s canvas (as Chart.js holds them)."""
    return page.eval_on_selector(
        selector,
        "c => window.Chart.getChart(c).data.datasets.map(d => d.data.filter(p => p !== null).length)",
    )


@pytest.fixture(scope="module")
def bench(console: Any, sandbox: Any) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``mlsandbox bench`` running in the background on the session's sandbox."""
    out = console.bench_root / "tracker-outage"
    log = console.bench_root / "bench.log"
    cmd = [str(Path(sys.executable).with_name("mlsandbox")), "bench", "--suite", "builtin", "--family", SCENARIO,
           "--agent", "reference", "--agent", "random", "--episodes", "1", "--out", str(out), "--name", sandbox.name]  # fmt: skip
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)


@pytest.fixture(scope="module")
def bench_done(bench: tuple[subprocess.Popen[bytes], Path], console: Any) -> Path:
    proc, out = bench
    rc = proc.wait(timeout=600)
    assert rc == 0, (console.bench_root / "bench.log").read_text()[-3000:]
    return out


def test_a_wrong_token_and_a_gateway_session_token_are_refused(
    browser: Any, console: Any, sandbox: Any
) -> None:
    from mlsandbox.gateway.sessions import CreateSessionRequest, SessionManager

    browser.clear_cookies()
    tab = browser.new_page()
    manager = SessionManager(sandbox.runtime(), sandbox.name)
    try:
        response = tab.goto(f"{console.url}/?token=not-the-console-token-at-all")
        assert response is not None and response.status == 401
        expect(tab.get_by_role("alert")).to_contain_text("not valid")
        assert tab.evaluate("fetch('/api/episodes').then(r => r.status)") == 401
        created = manager.create(CreateSessionRequest(scenario="tabular-quality-basic", seed=3))
        response = tab.goto(f"{console.url}/?token={created.token}")  # a real token of the HTTP gateway
        assert response is not None and response.status == 401
        bearer = {"Authorization": f"Bearer {created.token}"}
        assert httpx.get(console.url + "/api/episodes", headers=bearer).status_code == 401
        assert tab.context.cookies() == []
        # The sign-in form with the console's own token opens it; the session's episode is listed as an
        # episode of the HTTP interface.
        tab.get_by_label("Access token").fill(console.token)
        tab.get_by_role("button", name="Sign in").click()
        expect(tab.get_by_role("heading", name="Episodes", level=1)).to_be_visible()
        row = tab.locator(
            "table.episodes tbody tr", has=tab.get_by_role("link", name=created.info["episode_id"])
        )
        expect(row).to_contain_text("http")
        expect(row).to_contain_text("live")
    finally:
        manager.close_all()
        tab.close()


def test_a_live_episode_grows_without_reloading_then_shows_its_ground_truth(
    page: Any, console: Any, sandbox: Any, bench: tuple[subprocess.Popen[bytes], Path]
) -> None:
    tab = page.page
    proc, _ = bench
    deadline = time.monotonic() + 180
    live = []
    while not live:
        assert proc.poll() is None, "the benchmark ended before its episode was seen live"
        assert time.monotonic() < deadline, "no live episode of the benchmark appeared"
        live = _api(console, "/api/episodes", sandbox=sandbox.name, scenario=SCENARIO, agent="reference",
                    status="live")["episodes"]  # fmt: skip
        time.sleep(0.3)
    episode = live[0]["episode"]
    # From the list (as a person would), then the page stays put while the steps come in.
    tab.goto(f"{console.url}/#/episodes?sandbox={sandbox.name}&status=live")
    tab.get_by_role("link", name=episode).click()
    expect(tab.get_by_role("heading", name=f"Episode {episode}")).to_be_visible()
    expect(tab.locator(".live-note")).to_contain_text("Live")
    tab.evaluate("window.__sameDocument = true")
    steps = tab.locator("ol.timeline > li.step")
    seen = {steps.count()}
    while len(seen) < 3:
        assert time.monotonic() < deadline + 120, (
            f"the live page did not grow: step counts seen {sorted(seen)}"
        )
        tab.wait_for_timeout(200)
        seen.add(steps.count())
        if "finished" in tab.locator("#episode-status").inner_text():
            break
    assert len(seen) >= 3, f"the episode ended before the page saw it grow: {sorted(seen)}"
    _shot(tab, "episode-live")
    expect(tab.locator("#episode-status")).to_contain_text("finished", timeout=240_000)
    assert tab.evaluate("window.__sameDocument === true"), "the page reloaded"

    summary = _api(console, "/api/episodes", sandbox=sandbox.name, scenario=SCENARIO, agent="reference")[
        "episodes"
    ][0]
    assert summary["episode"] == episode and summary["outcome"] == "success"
    expect(steps).to_have_count(summary["steps"])
    expect(tab.get_by_test_id("step-count")).to_have_text(f"{summary['steps']} / {summary['max_steps']}")
    # The timeline: each step's action, its reward, and the observation on demand.
    first = steps.first
    expect(first.locator("summary")).to_contain_text("Step 1")
    first.locator("summary").click()
    expect(first.locator("pre").first).to_contain_text("[step 1]")
    # The ground truth over the timeline: the faults injected, the one the agent detected and mitigated.
    expect(tab.locator("ul.marks li.injected")).to_have_count(2)
    expect(tab.locator("ul.marks li.detected").first).to_be_visible()
    expect(tab.locator("ul.marks li.mitigated").first).to_be_visible()
    assert tab.locator("ol.timeline > li.in-fault").count() >= 1
    expect(tab.locator("#sec-faults tbody tr")).to_have_count(2)
    # Charts drawn with data, the faults shaded on the step charts.
    charts = tab.locator("#sec-charts canvas")
    expect(charts).to_have_count(2)
    assert max(_chart_points(tab, "#sec-charts figure:nth-of-type(1) canvas")) == summary["steps"]
    assert _chart_points(tab, "#sec-charts figure:nth-of-type(2) canvas")[0] == summary["steps"]
    bands = tab.eval_on_selector(
        "#sec-charts canvas", "c => window.Chart.getChart(c).options.plugins.bands.bands.length"
    )
    assert bands == 2
    # Jobs with their logs and CPU-seconds, the runs and the registered model.
    assert tab.locator("#sec-jobs tbody tr", has_text="succeeded").count() >= 1
    for summary_el in tab.locator("details.job-log > summary").all():
        summary_el.click()
    expect(tab.locator("details.job-log pre", has_text="val_auc").first).to_be_visible()
    assert sum(_chart_points(tab, "#sec-jobs canvas")) >= 2
    expect(tab.locator("#sec-runs")).to_contain_text("churn")
    for opened in [first.locator("summary"), *tab.locator("details.job-log > summary").all()]:
        opened.click()  # closed again for the screenshot (a failed job's log holds the machine's paths)
    _shot(tab, "episode", full_page=True)


def test_benchmark_rows_link_to_their_episode_and_replay(page: Any, console: Any, bench_done: Path) -> None:
    tab = page.page
    tab.goto(f"{console.url}/#/benchmarks")
    tab.get_by_role("link", name=bench_done.name).click()
    expect(tab.get_by_role("heading", name=f"Benchmark run {bench_done.name}")).to_be_visible()
    leaderboard = tab.locator("table").first
    expect(leaderboard.locator("tbody tr")).to_have_count(2)
    expect(leaderboard.locator("tbody tr").first).to_contain_text("reference")
    expect(leaderboard.locator("tbody tr").first).to_contain_text("1.00 [")
    assert _chart_points(tab, "figure.chart canvas") == [2]  # success rate per agent: two bars
    _shot(tab, "benchmark", full_page=True, mask=[tab.locator(".run-path")])  # a temporary directory
    rows = tab.locator("table").last.locator("tbody tr")
    expect(rows).to_have_count(2)
    reference = rows.filter(has_text="reference")
    reference.get_by_role("link", name="episode").click()
    expect(tab.get_by_role("heading", level=1)).to_contain_text("Episode ")
    expect(tab.locator("dl.meta").first).to_contain_text("reference")
    tab.go_back()
    tab.locator("table").last.locator("tbody tr").filter(has_text="reference").get_by_role(
        "link", name="replay"
    ).click()
    expect(tab.get_by_role("heading", name="Replay: ")).to_contain_text("reference")


def test_replay_steps_through_a_trajectory_with_the_keyboard(
    page: Any, console: Any, bench_done: Path
) -> None:
    tab = page.page
    tab.goto(f"{console.url}/#/replay")
    tab.get_by_role("link", name=f"{SCENARIO}__reference__7.jsonl").click()
    trajectory = bench_done / "trajectories" / f"{SCENARIO}__reference__7.jsonl"
    last = trajectory.read_text().count('"kind":"step"') + 1  # the reset, every step, the end
    position = tab.locator("#replay-position")
    expect(position).to_have_text(f"Reset (position 0 of {last})")
    expect(tab.locator("#replay-panel pre")).to_contain_text("[step 0] reset: ok")
    tab.keyboard.press("ArrowRight")
    expect(position).to_contain_text("Step 1 ")
    expect(tab.locator("#replay-panel pre")).to_contain_text("-- step 1 · action")
    tab.keyboard.press("j")
    expect(position).to_contain_text("Step 2 ")
    tab.keyboard.press("ArrowLeft")
    expect(position).to_contain_text("Step 1 ")
    tab.keyboard.press("t")  # the structured view
    expect(tab.get_by_label("Structured")).to_be_checked()
    expect(tab.get_by_role("heading", name="Observation after the action")).to_be_visible()
    tab.keyboard.press("End")
    expect(position).to_have_text(f"End (position {last} of {last})")
    expect(tab.get_by_role("heading", name="Solved")).to_be_visible()
    tab.keyboard.press("Home")
    expect(position).to_contain_text("Reset")
    tab.get_by_role("button", name="Next →").click()
    expect(position).to_contain_text("Step 1 ")
    tab.get_by_label("Text (as the agent read it)").check()
    expect(tab.locator("#replay-panel pre")).to_contain_text("-- step 1 · action")
    _shot(tab, "replay")
    # A file from elsewhere, opened from the page.
    tab.goto(f"{console.url}/#/replay")
    tab.get_by_label("Open a trajectory file").set_input_files(
        str(bench_done / "trajectories" / f"{SCENARIO}__random__7.jsonl")
    )
    expect(tab.get_by_role("heading", name="Replay: uploaded file")).to_be_visible()
    tab.keyboard.press("End")
    expect(tab.get_by_role("heading", name="Not solved")).to_be_visible()


def test_sandboxes_page_shows_the_services_and_their_health(page: Any, console: Any, sandbox: Any) -> None:
    tab = page.page
    tab.goto(f"{console.url}/#/sandboxes")
    card = tab.locator(f'section[data-sandbox="{sandbox.name}"]')
    expect(card.get_by_role("heading", name=sandbox.name)).to_be_visible()
    services = card.locator("tbody tr")
    expect(services.filter(has_text="mlflow")).to_contain_text("running")
    assert services.count() >= 4
    for row in services.all():
        expect(row).to_contain_text("running")
    expect(card.get_by_role("button", name="Start")).to_be_disabled()
    expect(card.get_by_role("button", name="Stop")).to_be_enabled()
    expect(card).to_contain_text("ephemeral, owned by pid")
    _shot(tab, "sandboxes")


def test_keyboard_focus_labels_and_contrast(page: Any, console: Any, bench_done: Path) -> None:
    tab = page.page
    for route in ("#/episodes", "#/sandboxes", "#/benchmarks", "#/replay"):
        tab.goto(f"{console.url}/{route}")
        tab.wait_for_load_state("networkidle")
        unlabelled = tab.evaluate(
            """() => [...document.querySelectorAll('input, select, button, textarea')]
                 .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                               && !el.textContent.trim())
                 .map(el => el.outerHTML)"""
        )
        assert unlabelled == [], f"{route}: controls without a label: {unlabelled}"
        low = tab.evaluate(CONTRAST_SCRIPT)
        assert low == [], f"{route}: text below 4.5:1 contrast: {low[:5]}"
        if route == "#/episodes":
            _shot(tab, "episodes")
    # Keyboard: the first Tab reaches the skip link, then the main navigation; focus is visible.
    tab.goto(f"{console.url}/#/episodes")
    tab.reload()
    expect(tab.get_by_role("heading", name="Episodes", level=1)).to_be_visible()
    tab.keyboard.press("Tab")
    assert tab.evaluate("document.activeElement.textContent") == "Skip to content"
    outline = tab.evaluate(
        "getComputedStyle(document.activeElement).outlineStyle + ' ' + getComputedStyle(document.activeElement).outlineWidth"
    )
    assert outline.startswith("solid") and float(outline.split()[1].removesuffix("px")) >= 2
    names = []
    for _ in range(6):
        tab.keyboard.press("Tab")
        names.append(tab.evaluate("document.activeElement.textContent.trim()"))
    assert {"Sandboxes", "Episodes", "Replay", "Benchmarks"} <= set(names), names
    tab.keyboard.press("Shift+Tab")  # from Sign out back to Benchmarks, then Replay
    tab.keyboard.press("Shift+Tab")
    tab.keyboard.press("Enter")
    expect(tab.get_by_role("heading", name="Replay a trajectory", level=1)).to_be_visible()


CONTRAST_SCRIPT = """() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = ({r, g, b}) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = (el) => { for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0.5) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || !el.getClientRects().length) continue;
    const s = getComputedStyle(el);
    if (s.visibility === 'hidden' || el.closest('.visually-hidden, [hidden], button:disabled')) continue;
    const fg = parse(s.color); const back = bg(el);
    const [a, b] = [lum(fg), lum(back)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < 4.5) out.push(`${ratio.toFixed(2)} ${el.tagName}.${el.className}: ${n.textContent.trim().slice(0, 40)}`);
  }
  return out;
}"""


def test_deployment_charts_draw_the_serving_telemetry(page: Any, console: Any, runtime: Any) -> None:
    """The deployment section from the records the gateway writes: the real :class:`Telemetry` and the
    serving pack's part over the real serving monitor, its scrapes given here (a serving episode takes
    minutes: this tier stays quick; the monitor's own scraping is tested in tests/unit/test_monitoring.py),
    in the sandbox's audit log, where the console reads it."""
    from collections import deque

    from mlsandbox.backends import get_backend
    from mlsandbox.gateway import Gateway
    from mlsandbox.gateway.packs.serving.handlers import ServingState, World
    from mlsandbox.scenario import load_builtin
    from mlsandbox.world.serving.monitoring import Alert, Monitor, Snapshot

    scenario = load_builtin("serving-deploy-slo")
    assert scenario.serving is not None
    # The episode's own world is an in-process sim sandbox with a file audit log (so telemetry is on);
    # its records go to the session sandbox's audit log.
    sim = get_backend("sim", "charts", audit_dir=str(Path(console.bench_root) / "sim-audit")).runtime()
    gw = Gateway(sim, scenario, seed=9, labels={"interface": "env", "agent": "fixture"})
    serving = sim.serving.open(gw.state.episode_id, dict([gw.state.job_label]))
    monitor = Monitor(scenario.serving, serving, gw.state.serving, sim.clock, production="churn")
    gw.episode.pack_state(ServingState).world = World(scenario.serving, serving, monitor)
    state = gw.state
    monitor.t0 = time.time() - 60
    series: deque[Snapshot] = deque()
    monitor.series["churn"] = series
    records = [{"t": monitor.t0, "event": "start", "episode": state.episode_id, "scenario": scenario.id, "seed": 9,
                **gw.telemetry.start(gw)}]  # fmt: skip
    total = errors = slow = 0.0
    for step in range(1, 4):
        for k in range(10):  # ten scrapes a step, 50 requests/s; at step 2 slow answers and errors
            t = 10.0 * (step - 1) + k + 1
            total += 50
            errors += 4.0 if step == 2 else 0.5
            slow += 20.0 if step == 2 else 0.0
            series.append(Snapshot(t, total, errors, {0.01: total - slow, 0.5: total, float("inf"): total},
                                   40.0 + 30.0 * (step == 2), 180.0, 2))  # fmt: skip
        if step == 2:
            monitor.alerts.append(
                Alert("alert-1", "HighLatency", "churn", "latency_p99_ms", ">", 250, "critical", 15.0, 300.0)
            )
        state.step, state.done = step, step == 3
        obs = {"step": step, "ok": True, "action": "get_metrics", "result": {}, "error": None,
               "budget": {"credits": 60, "credits_used": step, "steps_left": 20 - step}}  # fmt: skip
        info: dict[str, Any] = {"step": step, "reward_components": {"step_cost": -0.02}}
        if state.done:
            info["grade"] = {"success": False, "reason": "fixture"}
        records.append({"t": monitor.t0 + 10.0 * step, "event": "step", "episode": state.episode_id, "raw": {"type": "get_metrics"},
                        "observation": obs, "reward": -0.02, "info": info, "telemetry": gw.telemetry.step(gw)})  # fmt: skip
    for record in records:
        runtime.audit.append(state.episode_id, record)
    try:
        tab = page.page
        tab.goto(f"{console.url}/#/episodes/{runtime.sandbox}/{state.episode_id}")
        box = tab.locator('#sec-serving div.grid[data-target="churn"]')
        expect(box.locator("canvas")).to_have_count(3)
        points = [
            _chart_points(tab, f'#sec-serving div.grid[data-target="churn"] figure:nth-of-type({i}) canvas')
            for i in (1, 2, 3)
        ]
        assert points[0] == [29, 29, 29]  # latency p50/p95/p99: one point between consecutive scrapes
        assert points[2] == [29, 29]  # requests/s and replicas up
        lines = tab.eval_on_selector(
            '#sec-serving div.grid[data-target="churn"] figure:nth-of-type(1) canvas',
            "c => window.Chart.getChart(c).options.plugins.bands.lines.map(l => l.label)",
        )
        assert lines == ["alert-1 HighLatency"]
        expect(tab.locator("#sec-alerts tbody tr")).to_contain_text("HighLatency")
        _shot(tab.locator("#sec-serving"), "deployments")
    finally:
        location = runtime.audit.location(state.episode_id)
        if location is not None:
            Path(location).unlink(missing_ok=True)
