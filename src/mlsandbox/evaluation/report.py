"""A self-contained HTML report of a benchmark: leaderboard, pass@k and pass^k, per-family tables and inline
SVG plots.

The page has no external reference (no script, no stylesheet, no image file): the plots are SVG made
with matplotlib and inlined, so the file can be mailed or archived as is.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlsandbox.evaluation.results import EpisodeRow, FaultWindow, GroupSummary, leaderboard, summarize

REPORT_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:70em;
color:#222;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.meta{color:#666}.plot svg{max-width:100%;height:auto}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(28em,1fr));gap:1em;align-items:start}
.plots h3{font-size:1em;margin:.2em 0}
dl.run{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;font-size:.9em}dl.run dt{color:#666}
dl.run dd{margin:0}
"""


def figure_svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG markup (the figure is closed)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def pyplot() -> Any:
    """matplotlib's ``pyplot`` set up for the reports' SVG plots (no display, text kept as text)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9})
    return plt


def plot_family_success(families: list[GroupSummary]) -> str:
    """Grouped bars: success rate per family and agent, with the 95% interval as error bars."""
    plt = pyplot()
    fams = sorted({g.family or "" for g in families})
    agents = list(dict.fromkeys(g.agent for g in families))
    width = 0.8 / max(1, len(agents))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(fams) * max(1, len(agents)) + 2), 3.4))
    for i, agent in enumerate(agents):
        xs, ys, lo, hi = [], [], [], []
        for j, fam in enumerate(fams):
            g = next((g for g in families if g.agent == agent and g.family == fam), None)
            if g is None or g.success_rate["n"] == 0:
                continue
            s = g.success()
            xs.append(j + (i - (len(agents) - 1) / 2) * width)
            ys.append(s.value)
            lo.append(s.value - s.low)
            hi.append(s.high - s.value)
        bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=agent, edgecolor=f"C{i}", linewidth=1.5)
        # Every bar carries its value, so a 0% bar (no height) is still seen and read.
        ax.bar_label(bars, labels=[f"{y:.0%}" for y in ys], padding=2, fontsize=7)
    ax.set_xticks(range(len(fams)))
    # rotation_mode="anchor": each label's end sits under its own group, not under the next one.
    ax.set_xticklabels(fams, rotation=30, ha="right", rotation_mode="anchor")
    ax.axhline(0, color="#444", linewidth=0.8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("success rate (95% CI)")
    ax.legend(fontsize=8)
    return figure_svg(fig)


def plot_pass_k(agents: list[GroupSummary]) -> str:
    """Per agent: pass@k (solid) and pass^k (dashed) against k, the unbiased estimators over tasks."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for i, g in enumerate(agents):
        if not g.pass_at_k:
            continue
        ks = [int(k) for k in g.pass_at_k]
        ax.plot(ks, list(g.pass_at_k.values()), marker="o", color=f"C{i}", label=f"{g.agent} pass@k")
        ax.plot(
            ks, list(g.pass_all_k.values()), marker="s", ls="--", color=f"C{i}", label=f"{g.agent} pass^k"
        )
    ax.set_xlabel("k (episodes per task)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("probability")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return figure_svg(fig)


def _pass_k_rows(groups: list[GroupSummary], ks: list[str], *, family: bool) -> list[list[str]]:
    rows = []
    for g in groups:
        cells = [_cell(g.family if family else g.agent, left=True)]
        if family:
            cells.append(_cell(g.agent, left=True))
        cells += [_cell(g.tasks), _cell(g.episodes_per_task)]
        cells += [_cell(_num(g.pass_at_k.get(k))) for k in ks]
        cells += [_cell(_num(g.pass_all_k.get(k))) for k in ks]
        rows.append(cells)
    return rows


def _k_columns(groups: list[GroupSummary]) -> list[str]:
    return sorted({k for g in groups for k in g.pass_at_k}, key=int)


def plot_reward_distribution(rows: list[EpisodeRow]) -> str:
    """Per agent: the episode rewards as a box plot with every episode as a dot."""
    plt = pyplot()
    by_agent: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.error is None:
            by_agent[r.agent].append(r.reward)
    agents = list(by_agent)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(agents) + 2), 3.2))
    if agents:
        ax.boxplot([by_agent[a] for a in agents], showfliers=False)
        for i, a in enumerate(agents, 1):
            n = len(by_agent[a])
            xs = [i + (k - (n - 1) / 2) * (0.3 / max(1, n)) for k in range(n)]
            ax.scatter(xs, by_agent[a], s=10, alpha=0.7)
        ax.set_xticks(range(1, len(agents) + 1))
        ax.set_xticklabels(agents)
    ax.set_ylabel("episode reward")
    return figure_svg(fig)


def plot_cost_vs_success(rows: list[EpisodeRow]) -> str:
    """Credits used against the task score, one dot per episode, a marker per agent (filled: success)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    markers = "osD^v<>p*h"
    for i, agent in enumerate(dict.fromkeys(r.agent for r in rows)):
        mine = [r for r in rows if r.agent == agent and r.error is None]
        for ok in (True, False):
            pts = [r for r in mine if r.success == ok]
            if not pts:
                continue
            ax.scatter(
                [r.credits_used for r in pts],
                [r.score for r in pts],
                marker=markers[i % len(markers)],
                facecolors=f"C{i}" if ok else "none",
                edgecolors=f"C{i}",
                label=f"{agent} ({'success' if ok else 'failure'})",
            )
    ax.set_xlabel("credits used")
    ax.set_ylabel("task score")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    return figure_svg(fig)


def _trajectory_cell(row: EpisodeRow, base: Path | None) -> str:
    """A link to the episode's trajectory (relative to the report's directory when it is under it) and
    the command that replays it."""
    if not row.trajectory:
        return _cell("-", left=True)
    path = Path(row.trajectory)
    href = str(path)
    if base is not None:
        try:
            href = str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            href = path.resolve().as_uri()
    link = f'<a href="{html.escape(href, quote=True)}">{html.escape(path.name)}</a>'
    return f'<td class="l">{link}<br><code>mlsandbox replay {html.escape(str(path))}</code></td>'


def _difficulty_rows(rows: list[EpisodeRow]) -> list[list[str]]:
    """Per agent and scenario difficulty: episodes, success (Wilson 95%), mean reward (Student's t)."""
    from mlsandbox.evaluation.stats import mean_ci, wilson

    groups: dict[tuple[str, int], list[EpisodeRow]] = defaultdict(list)
    for r in rows:
        if r.error is None:
            groups[(r.agent, r.difficulty)].append(r)
    order = {a: i for i, a in enumerate(dict.fromkeys(r.agent for r in rows))}
    out = []
    for (agent, difficulty), rs in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        s = wilson(sum(r.success for r in rs), len(rs))
        out.append(
            [
                _cell(agent, left=True),
                _cell(difficulty),
                _cell(len(rs)),
                _cell(f"{s.value:.0%} [{_num(s.low, '{:.0%}')}, {_num(s.high, '{:.0%}')}]"),
                _cell(mean_ci([r.reward for r in rs]).text("{:+.2f}")),
                _cell(_num(sum(r.invalid_actions for r in rs) / max(1, sum(r.steps for r in rs)), "{:.0%}")),
                _cell(_num(sum(r.wall_s for r in rs) / len(rs), "{:.1f}")),
            ]
        )
    return out


def _run_block(provenance: dict[str, Any] | None) -> str:
    """The version, commit and machine the benchmark ran on."""
    if not provenance:
        return ""
    m = provenance.get("machine") or {}
    items = [
        ("mlsandbox", provenance.get("version")),
        ("commit", provenance.get("commit") or "not a git checkout"),
        ("machine", f"{m.get('cpus')} x {m.get('cpu_model')}" if m else None),
        ("python", m.get("python")),
        ("platform", m.get("platform")),
    ]
    body = "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items if v is not None
    )
    return f"<dl class='run'>{body}</dl>"


MAX_TIMELINES = 60
"""Episodes drawn as step timelines at most (the first ones of the run; every episode keeps its row)."""


def episode_steps(row: EpisodeRow) -> list[dict[str, Any]] | None:
    """The step records of the episode's trajectory file (None when it has none or it cannot be read)."""
    if not row.trajectory:
        return None
    try:
        lines = Path(row.trajectory).read_text().splitlines()
        recs = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return None
    return [r for r in recs if isinstance(r, dict) and r.get("kind") == "step"]


def _action_name(action: Any) -> str:
    if isinstance(action, dict):
        return str(action.get("type"))
    return "(raw text)"


FAULT_FILL = "#ff7f0e"
"""Fault windows: an orange band from injection to recovery (to the last step while still active)."""


def _fault_marks(
    windows: list[FaultWindow], steps: list[dict[str, Any]], x: Callable[[float], float], height: int
) -> str:
    """The fault windows behind a timeline: a band per fault, a triangle where the agent detected it and a
    tick where it mitigated it, each with a tooltip."""
    if not windows:
        return ""
    numbers = [int(st.get("step") or i + 1) for i, st in enumerate(steps)]
    first, last = numbers[0], numbers[-1]

    def at(step: int) -> float:
        # Step numbers count actions taken; a fault injected when n steps were taken acts from step n + 1.
        return x(min(max(step, first), last) - first)

    parts = []
    for w in windows:
        start = at(w.injected_step + 1)
        end = at(w.recovered_step) if w.recovered_step is not None else at(last)
        end = max(end, start + 3)
        tip = f"{w.fault} on {w.target}: injected after step {w.injected_step}"
        if w.detected_step is not None:
            tip += f", detected at step {w.detected_step}"
        if w.mitigated_step is not None:
            tip += f", mitigated at step {w.mitigated_step}"
        if w.recovered_step is not None:
            tip += f", ended at step {w.recovered_step} ({w.recovered_by})"
        title = f"<title>{html.escape(tip)}</title>"
        parts.append(
            f"<rect class='fault' x='{start:.1f}' y='0' width='{end - start:.1f}' height='{height}' "
            f"fill='{FAULT_FILL}' fill-opacity='0.18'>{title}</rect>"
        )
        if w.detected_step is not None:
            d = at(w.detected_step)
            parts.append(
                f"<path class='detected' d='M{d - 4:.1f},0 L{d + 4:.1f},0 L{d:.1f},7 Z' fill='{FAULT_FILL}'>"
                f"{title}</path>"
            )
        if w.mitigated_step is not None:
            m = at(w.mitigated_step)
            parts.append(
                f"<path class='mitigated' d='M{m - 4:.1f},{height - 6} L{m - 1:.1f},{height - 2} "
                f"L{m + 5:.1f},{height - 10}' fill='none' stroke='#2ca02c' stroke-width='2'>{title}</path>"
            )
    return "".join(parts)


def timeline_svg(
    steps: list[dict[str, Any]],
    width: int = 420,
    height: int = 90,
    faults: list[FaultWindow] | None = None,
) -> str:
    """One episode's steps as a small inline SVG: the running reward as a line, one dot per step (red: an
    invalid action, the agent's error observation), each dot's tooltip naming the action and its reward;
    behind them each fault's window (injected to recovered), where the agent detected and mitigated it."""
    if not steps:
        return "<svg width='0' height='0'></svg>"
    running, total = [], 0.0
    for st in steps:
        total += float(st.get("reward") or 0.0)
        running.append(total)
    lo, hi = min(0.0, *running), max(0.0, *running)
    span = (hi - lo) or 1.0
    pad_l, pad_r, pad_y = 44, 8, 8
    n = len(steps)

    def x(i: float) -> float:
        return pad_l + (width - pad_l - pad_r) * (i / max(1, n - 1))

    def y(v: float) -> float:
        return pad_y + (height - 2 * pad_y) * (1 - (v - lo) / span)

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(running))
    dots = []
    for i, (st, v) in enumerate(zip(steps, running, strict=True)):
        bad = not bool((st.get("next_observation") or {}).get("ok", True))
        tip = f"step {st.get('step')} {_action_name(st.get('action'))}: {float(st.get('reward') or 0):+.3f}"
        tip += f" (total {v:+.3f}){' invalid' if bad else ''}"
        color = "#d62728" if bad else "#1f77b4"
        dots.append(
            f"<circle cx='{x(i):.1f}' cy='{y(v):.1f}' r='{3.5 if bad else 2.5}' fill='{color}'>"
            f"<title>{html.escape(tip)}</title></circle>"
        )
    zero = y(0.0)
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>"
        + _fault_marks(faults or [], steps, x, height)
        + f"<line x1='{pad_l}' x2='{width - pad_r}' y1='{zero:.1f}' y2='{zero:.1f}' stroke='#bbb'/>"
        f"<text x='2' y='{pad_y + 4}' font-size='9'>{hi:+.2f}</text>"
        f"<text x='2' y='{height - pad_y + 2}' font-size='9'>{lo:+.2f}</text>"
        f"<polyline points='{points}' fill='none' stroke='#1f77b4' stroke-width='1.5'/>"
        + "".join(dots)
        + "</svg>"
    )


def _timelines(rows: list[EpisodeRow], steps: dict[int, list[dict[str, Any]]], base: Path | None) -> str:
    if not steps:
        return "<p class='meta'>No trajectories were recorded (bench --no-trajectories).</p>"
    parts = [
        "<p class='meta'>Running reward per step; red dots are invalid actions (hover a dot for the action); "
        "orange bands are injected faults, from injection to recovery, with a triangle where the agent "
        "detected one and a green tick where it mitigated it. "
        f"At most {MAX_TIMELINES} episodes are drawn.</p><div class='plots'>"
    ]
    for i, r in enumerate(rows):
        if i not in steps:
            continue
        invalid = sum(not (st.get("next_observation") or {}).get("ok", True) for st in steps[i])
        head = (
            f"{html.escape(r.scenario)} · {html.escape(r.agent)} · seed {r.seed} · "
            f"{'success' if r.success else 'not solved'} · reward {r.reward:+.2f} · {invalid} invalid"
        )
        link = _trajectory_cell(r, base).removeprefix('<td class="l">').removesuffix("</td>")
        parts.append(
            f"<div class='plot' id='episode-{i}'><h3>{head}</h3>{timeline_svg(steps[i], faults=r.fault_windows)}<br>{link}</div>"
        )
    parts.append("</div>")
    return "".join(parts)


def plot_action_histogram(rows: list[EpisodeRow], steps: dict[int, list[dict[str, Any]]]) -> str:
    """Per agent: how often it chose each action type (share of its steps), over the drawn episodes."""
    plt = pyplot()
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i, recs in steps.items():
        for st in recs:
            counts[rows[i].agent][_action_name(st.get("action"))] += 1
    agents = list(counts)
    actions = sorted({a for c in counts.values() for a in c})
    fig, ax = plt.subplots(figsize=(5.5, max(2.5, 0.28 * len(actions) * max(1, len(agents)) + 1)))
    height = 0.8 / max(1, len(agents))
    for k, agent in enumerate(agents):
        total = sum(counts[agent].values()) or 1
        ys = [j + (k - (len(agents) - 1) / 2) * height for j in range(len(actions))]
        ax.barh(ys, [counts[agent].get(a, 0) / total for a in actions], height, label=agent, color=f"C{k}")
    ax.set_yticks(range(len(actions)))
    ax.set_yticklabels(actions)
    ax.invert_yaxis()
    ax.set_xlabel("share of the agent's steps")
    if agents:
        ax.legend(fontsize=7)
    return figure_svg(fig)


def _usage(row: EpisodeRow) -> dict[str, Any] | None:
    usage = row.extra.get("usage")
    return usage if isinstance(usage, dict) else None


def _tokens(row: EpisodeRow) -> int:
    usage = _usage(row) or {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def _cost(row: EpisodeRow) -> float:
    return float((_usage(row) or {}).get("cost_usd", 0.0))


def plot_tokens_vs_success(rows: list[EpisodeRow]) -> str:
    """Tokens an LLM agent used against the task score, one dot per episode (filled: success); the
    USD cost, when the agent priced its tokens, in the legend per agent."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for i, agent in enumerate(dict.fromkeys(r.agent for r in rows if _usage(r))):
        mine = [r for r in rows if r.agent == agent and r.error is None and _usage(r)]
        cost = sum(_cost(r) for r in mine)
        for ok in (True, False):
            pts = [r for r in mine if r.success == ok]
            if pts:
                ax.scatter(
                    [_tokens(r) for r in pts],
                    [r.score for r in pts],
                    facecolors=f"C{i}" if ok else "none",
                    edgecolors=f"C{i}",
                    label=f"{agent} ({'success' if ok else 'failure'}; ${cost:.2f} in all)",
                )
    ax.set_xlabel("tokens per episode (prompt + completion)")
    ax.set_ylabel("task score")
    ax.set_ylim(-0.05, 1.05)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return figure_svg(fig)


def _cell(value: Any, left: bool = False) -> str:
    cls = ' class="l"' if left else ""
    return f"<td{cls}>{html.escape(str(value))}</td>"


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(
        f'<th class="l">{html.escape(h)}</th>' if i == 0 else f"<th>{html.escape(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _mean_wall(rows: list[EpisodeRow], agent: str) -> float | None:
    walls = [r.wall_s for r in rows if r.agent == agent and r.error is None]
    return sum(walls) / len(walls) if walls else None


def render_html(
    rows: list[EpisodeRow],
    *,
    title: str = "mlsandbox benchmark",
    meta: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    base: Path | None = None,
) -> str:
    """The whole report as one HTML document: ``provenance`` (:func:`~mlsandbox.evaluation.provenance.
    provenance`) in its header; trajectory links relative to ``base`` (the report's directory)."""
    agents, families = summarize(rows)
    board = leaderboard(agents)
    lb_rows = []
    for rank, g in enumerate(board, 1):
        s, r = g.success(), g.reward()
        lb_rows.append(
            [
                _cell(f"{rank}. {g.agent}", left=True),
                _cell(g.episodes),
                _cell(f"{s.value:.0%} [{_num(s.low, '{:.0%}')}, {_num(s.high, '{:.0%}')}]"),
                _cell(r.text("{:+.2f}")),
                _cell(_num(g.mean_credits, "{:.2f}")),
                _cell(_num(g.mean_steps, "{:.1f}")),
                _cell(_num(g.mean_time_to_detect_steps, "{:.1f}")),
                _cell(_num(g.mean_time_to_mitigate_steps, "{:.1f}")),
                _cell(_num(_mean_wall(rows, g.agent), "{:.1f}")),
                _cell(g.invalid_actions),
                _cell(_num(g.invalid_action_rate, "{:.0%}")),
                _cell(g.errors),
            ]
        )
    fam_rows = []
    for g in families:
        s, r = g.success(), g.reward()
        fam_rows.append(
            [
                _cell(g.family, left=True),
                _cell(g.agent, left=True),
                _cell(g.episodes),
                _cell(f"{s.value:.0%} [{_num(s.low, '{:.0%}')}, {_num(s.high, '{:.0%}')}]"),
                _cell(r.text("{:+.2f}")),
                *(_cell(f"{g.mean_vector.get(o, 0.0):+.2f}") for o in g.mean_vector),
            ]
        )
    objectives = list(families[0].mean_vector) if families else []
    ks = _k_columns(board + families)
    k_headers = [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks]
    steps: dict[int, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        if len(steps) >= MAX_TIMELINES:
            break
        recs = episode_steps(row)
        if recs:
            steps[i] = recs
    ep_rows = [
        [
            (
                f'<td class="l"><a href="#episode-{i}">{html.escape(r.scenario)}</a></td>'
                if i in steps
                else _cell(r.scenario, left=True)
            ),
            _cell(r.agent, left=True),
            _cell(r.seed),
            _cell(f"{r.reward:+.3f}"),
            _cell("yes" if r.success else "no"),
            _cell(r.steps),
            _cell(f"{r.credits_used:.2f}"),
            _cell(r.invalid_actions),
            _cell(r.constraint_violation or r.error or ""),
            _cell(f"{r.wall_s:.1f}"),
            _trajectory_cell(r, base),
        ]
        for i, r in enumerate(rows)
    ]
    meta = dict(meta or {})
    meta.setdefault("generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    meta_html = " · ".join(f"{html.escape(str(k))}: {html.escape(str(v))}" for k, v in meta.items())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{REPORT_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p class='meta'>{meta_html} · {len(rows)} episodes</p>",
        _run_block(provenance),
        "<h2>Leaderboard</h2>",
        _table(
            [
                "agent",
                "episodes",
                "success (95% CI)",
                "mean reward (95% CI)",
                "credits",
                "steps",
                "TTD steps",
                "TTM steps",
                "wall s / episode",
                "invalid actions",
                "invalid / step",
                "harness errors",
            ],
            lb_rows,
        ),
        "<p class='meta'>Invalid actions: the agent's actions the gateway rejected (error observations, "
        "episodes that ran). Harness errors: episodes that could not be run at all (the sandbox broke, the "
        "agent raised). A mean over fewer than two episodes has no interval (n/a).</p>",
        "<h2>pass@k and pass^k</h2>",
        "<p class='meta'>Over the tasks (scenario variants) each agent ran, k up to the fewest episodes of a "
        "task: pass@k is the chance that at least one of k episodes succeeds, pass^k that all k do (unbiased "
        "estimators from n episodes with c successes, averaged over tasks).</p>",
        f"<div class='plot'>{plot_pass_k(board)}</div>",
        _table(["agent", "tasks", "episodes / task", *k_headers], _pass_k_rows(board, ks, family=False)),
        _table(
            ["family", "agent", "tasks", "episodes / task", *k_headers],
            _pass_k_rows(families, ks, family=True),
        ),
        "<h2>Success per scenario family</h2>",
        _table(
            ["family", "agent", "episodes", "success (95% CI)", "mean reward (95% CI)", *objectives], fam_rows
        ),
        "<h2>By difficulty</h2>",
        _table(
            [
                "agent",
                "difficulty",
                "episodes",
                "success (95% CI)",
                "mean reward (95% CI)",
                "invalid / step",
                "wall s / episode",
            ],
            _difficulty_rows(rows),
        ),
        "<h2>Plots</h2><div class='plots'>",
        f"<div class='plot'><h3>Success per family</h3>{plot_family_success(families)}</div>",
        f"<div class='plot'><h3>Reward distribution</h3>{plot_reward_distribution(rows)}</div>",
        f"<div class='plot'><h3>Cost against success</h3>{plot_cost_vs_success(rows)}</div>",
        *(
            [f"<div class='plot'><h3>Actions per agent</h3>{plot_action_histogram(rows, steps)}</div>"]
            if steps
            else []
        ),
        *(
            [f"<div class='plot'><h3>Tokens against success</h3>{plot_tokens_vs_success(rows)}</div>"]
            if any(_usage(r) for r in rows)
            else []
        ),
        "</div>",
        "<h2>Episode timelines</h2>",
        _timelines(rows, steps, base),
        "<h2>Episodes</h2>",
        _table(
            [
                "scenario",
                "agent",
                "seed",
                "reward",
                "success",
                "steps",
                "credits",
                "invalid",
                "violation / harness error",
                "wall s",
                "trajectory",
            ],
            ep_rows,
        ),
        "</body></html>",
    ]
    return "\n".join(parts)
