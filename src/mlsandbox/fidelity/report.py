"""Fidelity figures and reports: per scenario a JSON document and a self-contained HTML page (tables and
inline SVG plots, nothing external), and an index over the scenarios with the overall figures."""

from __future__ import annotations

import html
import math
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.evaluation.report import REPORT_CSS, figure_svg, pyplot
from mlsandbox.fidelity.compare import TripleComparison, ks_statistic

SUCCESS_AGREEMENT_TARGET = 0.95
AUC_DIFF_TARGET = 0.02


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Figures(_Model):
    """The fidelity figures of a set of triples."""

    triples: int
    comparable: int
    """Triples that ran on both backends."""
    success_agreement: float | None
    success_flips: int = 0
    """Comparable triples whose success differs between the backends."""
    flips_by_margin: int = 0
    """Success flips whose holdout AUCs differ by more than :data:`AUC_DIFF_TARGET` (or where one side
    registered no model): a twin that rewards what the real world punishes, not a borderline case."""
    median_abs_auc_diff: float | None
    p90_abs_auc_diff: float | None = None
    max_abs_auc_diff: float | None = None
    auc_pairs: int
    mean_reward_diff: float | None
    mean_abs_reward_diff: float | None
    component_mean_diffs: dict[str, float] = Field(default_factory=dict)
    mean_steps_local: float | None
    mean_steps_sim: float | None
    diverged: int
    median_divergence_step: float | None
    job_duration_ks: float | None
    job_cpu_ks: float | None
    jobs_local: int
    jobs_sim: int


class ScenarioFidelity(_Model):
    scenario: str
    figures: Figures
    triples: list[TripleComparison]


class KindFigures(_Model):
    """The fidelity figures of the triples of one kind of work: success agreement and the error of the
    goal metric on the holdout (sim against local)."""

    triples: int
    comparable: int
    success_agreement: float | None
    metrics: list[str] = Field(default_factory=list)
    """The goal metrics of the kind's triples."""
    metric_pairs: int = 0
    """Comparable triples where both backends graded a model."""
    median_abs_metric_diff: float | None = None
    max_abs_metric_diff: float | None = None
    median_rel_metric_error: float | None = None
    """Median of |sim - local| / |local| of the holdout metric."""


def kind_figures(triples: list[TripleComparison]) -> dict[str, KindFigures]:
    """:class:`KindFigures` per kind of work (the local trace's kind)."""
    out: dict[str, KindFigures] = {}
    for kind in sorted({t.local.kind for t in triples}):
        mine = [t for t in triples if t.local.kind == kind]
        ok = [t for t in mine if t.comparable]
        pairs = [t for t in ok if t.metric_diff is not None]
        diffs = [abs(t.metric_diff) for t in pairs if t.metric_diff is not None]
        rel = [
            abs(t.metric_diff) / abs(t.local.holdout_metric)
            for t in pairs
            if t.metric_diff is not None and t.local.holdout_metric
        ]
        out[kind] = KindFigures(
            triples=len(mine),
            comparable=len(ok),
            success_agreement=_mean([float(t.success_agrees) for t in ok]),
            metrics=sorted({t.local.metric for t in mine if t.local.metric}),
            metric_pairs=len(pairs),
            median_abs_metric_diff=statistics.median(diffs) if diffs else None,
            max_abs_metric_diff=max(diffs) if diffs else None,
            median_rel_metric_error=statistics.median(rel) if rel else None,
        )
    return out


class FidelityIndex(_Model):
    created: str
    backends: tuple[str, str]
    seeds: int
    base_seed: int
    agents: list[str]
    machine: dict[str, Any]
    figures: Figures
    targets: dict[str, float]
    scenarios: dict[str, Figures]
    pages: dict[str, str]
    kinds: dict[str, KindFigures] = Field(default_factory=dict)
    """Per kind of work (an index written before kinds existed has none)."""


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _quantile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile (linear interpolation between order statistics); None for no values."""
    if not xs:
        return None
    ordered = sorted(xs)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def figures(triples: list[TripleComparison]) -> Figures:
    ok = [t for t in triples if t.comparable]
    aucs = [abs(t.auc_diff) for t in ok if t.auc_diff is not None]
    comps: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        for k, v in t.component_diffs.items():
            comps[k].append(v)
    div = [t.divergence.step for t in ok if t.divergence is not None]
    jobs_l = [j for t in ok for j in t.local.jobs]
    jobs_s = [j for t in ok for j in t.sim.jobs]
    return Figures(
        triples=len(triples),
        comparable=len(ok),
        success_agreement=_mean([float(t.success_agrees) for t in ok]),
        success_flips=sum(1 for t in ok if not t.success_agrees),
        flips_by_margin=sum(
            1
            for t in ok
            if not t.success_agrees and (t.auc_diff is None or abs(t.auc_diff) > AUC_DIFF_TARGET)
        ),
        median_abs_auc_diff=statistics.median(aucs) if aucs else None,
        p90_abs_auc_diff=_quantile(aucs, 0.9),
        max_abs_auc_diff=max(aucs) if aucs else None,
        auc_pairs=len(aucs),
        mean_reward_diff=_mean([t.reward_diff for t in ok]),
        mean_abs_reward_diff=_mean([abs(t.reward_diff) for t in ok]),
        component_mean_diffs={k: statistics.fmean(v) for k, v in sorted(comps.items())},
        mean_steps_local=_mean([float(len(t.local.steps)) for t in ok]),
        mean_steps_sim=_mean([float(len(t.sim.steps)) for t in ok]),
        diverged=len(div),
        median_divergence_step=statistics.median(div) if div else None,
        job_duration_ks=ks_statistic(
            [j.duration_s for j in jobs_l if j.duration_s is not None],
            [j.duration_s for j in jobs_s if j.duration_s is not None],
        ),
        job_cpu_ks=ks_statistic([j.cpu_seconds for j in jobs_l], [j.cpu_seconds for j in jobs_s]),
        jobs_local=len(jobs_l),
        jobs_sim=len(jobs_s),
    )


# ------------------------------------------------------------------------------------------------ plots


def plot_job_durations(triples: list[TripleComparison]) -> str:
    """Job wall durations and CPU-seconds on each backend, as empirical CDFs side by side."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.0))
    for ax, what, label in (
        (axes[0], "duration_s", "job wall time (s)"),
        (axes[1], "cpu_seconds", "job CPU-seconds"),
    ):
        for side, color in (("local", "C0"), ("sim", "C1")):
            values = sorted(
                float(getattr(j, what))
                for t in triples
                if t.comparable
                for j in getattr(t, side).jobs
                if getattr(j, what) is not None
            )
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", color=color, label=f"{side} ({len(values)})")
        a = [
            float(getattr(j, what))
            for t in triples
            if t.comparable
            for j in t.local.jobs
            if getattr(j, what) is not None
        ]
        b = [
            float(getattr(j, what))
            for t in triples
            if t.comparable
            for j in t.sim.jobs
            if getattr(j, what) is not None
        ]
        ks = ks_statistic(a, b)
        ax.set_title(f"KS = {ks:.2f}" if ks is not None else "no jobs on one side", fontsize=9)
        ax.set_xlabel(label)
        ax.set_ylabel("share of jobs")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
    return figure_svg(fig)


def plot_auc(triples: list[TripleComparison]) -> str:
    """Holdout AUC on local against sim, one dot per triple where both registered a model."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    pts = [(t.local.holdout_auc, t.sim.holdout_auc, t.agent) for t in triples if t.auc_diff is not None]
    agents = list(dict.fromkeys(a for _, _, a in pts))
    for i, agent in enumerate(agents):
        xs = [x for x, _, a in pts if a == agent]
        ys = [y for _, y, a in pts if a == agent]
        ax.scatter(xs, ys, s=14, color=f"C{i}", label=agent)
    lo = min([0.5, *[min(x, y) for x, y, _ in pts if x is not None and y is not None]])
    ax.plot([lo, 1.0], [lo, 1.0], color="#999", lw=0.8)
    ax.set_xlabel("holdout AUC, local")
    ax.set_ylabel("holdout AUC, sim")
    if agents:
        ax.legend(fontsize=7)
    return figure_svg(fig)


def plot_components(triples: list[TripleComparison]) -> str:
    """Mean reward per component on each backend."""
    plt = pyplot()
    comps = sorted({k for t in triples if t.comparable for k in (*t.local.components, *t.sim.components)})
    fig, ax = plt.subplots(figsize=(max(4.5, 0.7 * len(comps) + 2), 3.0))
    width = 0.38
    for i, side in enumerate(("local", "sim")):
        ys = [
            _mean([getattr(t, side).components.get(k, 0.0) for t in triples if t.comparable]) or 0.0
            for k in comps
        ]
        ax.bar([j + (i - 0.5) * width for j in range(len(comps))], ys, width, label=side, color=f"C{i}")
    ax.set_xticks(range(len(comps)))
    ax.set_xticklabels(comps, rotation=30, ha="right")
    ax.axhline(0, color="#999", lw=0.6)
    ax.set_ylabel("mean reward per episode")
    ax.legend(fontsize=7)
    return figure_svg(fig)


# ------------------------------------------------------------------------------------------------- html


def _fmt(x: float | None, spec: str = "{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def _td(value: Any, left: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("l" if left else "", cls) if c)
    attr = f' class="{classes}"' if classes else ""
    return f"<td{attr}>{html.escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(
        f'<th class="l">{html.escape(h)}</th>' if i == 0 else f"<th>{html.escape(h)}</th>"
        for i, h in enumerate(headers)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join('<tr>' + ''.join(r) + '</tr>' for r in rows)}</tbody></table>"


_EXTRA_CSS = "td.bad{background:#fde2e2}td.good{background:#e3f5e1}pre{font-size:.8em;white-space:pre-wrap}"


def _page(title: str, meta: str, body: list[str]) -> str:
    return "".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{REPORT_CSS}{_EXTRA_CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1><p class='meta'>{html.escape(meta)}</p>",
            *body,
            "</body></html>",
        ]
    )


def _figures_rows(f: Figures) -> list[list[str]]:
    return [
        [_td("triples (comparable)", True), _td(f"{f.triples} ({f.comparable})")],
        [
            _td("success agreement", True),
            _td(
                _fmt(f.success_agreement, "{:.0%}"),
                cls="good" if (f.success_agreement or 0) >= SUCCESS_AGREEMENT_TARGET else "bad",
            ),
        ],
        [
            _td("median |holdout AUC difference|", True),
            _td(
                f"{_fmt(f.median_abs_auc_diff, '{:.4f}')} ({f.auc_pairs} pairs)",
                cls=""
                if f.median_abs_auc_diff is None
                else ("good" if f.median_abs_auc_diff <= AUC_DIFF_TARGET else "bad"),
            ),
        ],
        [
            _td("success flips (by a margin)", True),
            _td(f"{f.success_flips} ({f.flips_by_margin})", cls="good" if f.flips_by_margin == 0 else "bad"),
        ],
        [
            _td("|holdout AUC difference| p90 / max", True),
            _td(
                f"{_fmt(f.p90_abs_auc_diff, '{:.4f}')} / {_fmt(f.max_abs_auc_diff, '{:.4f}')}",
                cls=""
                if f.p90_abs_auc_diff is None
                else ("good" if f.p90_abs_auc_diff <= AUC_DIFF_TARGET else "bad"),
            ),
        ],
        [_td("mean reward difference (sim - local)", True), _td(_fmt(f.mean_reward_diff, "{:+.3f}"))],
        [_td("mean |reward difference|", True), _td(_fmt(f.mean_abs_reward_diff))],
        [
            _td("mean steps local / sim", True),
            _td(f"{_fmt(f.mean_steps_local, '{:.1f}')} / {_fmt(f.mean_steps_sim, '{:.1f}')}"),
        ],
        [
            _td("trajectories that diverge", True),
            _td(f"{f.diverged} (median first step {_fmt(f.median_divergence_step, '{:.0f}')})"),
        ],
        [_td("jobs local / sim", True), _td(f"{f.jobs_local} / {f.jobs_sim}")],
        [
            _td("KS job wall time / CPU-seconds", True),
            _td(f"{_fmt(f.job_duration_ks, '{:.2f}')} / {_fmt(f.job_cpu_ks, '{:.2f}')}"),
        ],
    ]


def scenario_html(sf: ScenarioFidelity, meta: str) -> str:
    rows = []
    for t in sf.triples:
        d = t.divergence
        div = "-" if d is None else f"step {d.step}: {d.kind}"
        rows.append(
            [
                _td(t.agent, True),
                _td(t.seed),
                _td(
                    f"{'yes' if t.local.success else 'no'} / {'yes' if t.sim.success else 'no'}",
                    cls="good" if t.success_agrees else "bad",
                ),
                _td(f"{t.local.reward:+.2f} / {t.sim.reward:+.2f}"),
                _td(f"{_fmt(t.local.holdout_auc, '{:.4f}')} / {_fmt(t.sim.holdout_auc, '{:.4f}')}"),
                _td(f"{len(t.local.steps)} / {len(t.sim.steps)}"),
                _td(div, True),
                _td(t.local.error or t.sim.error or "", True),
            ]
        )
    comp_rows = [[_td(k, True), _td(f"{v:+.4f}")] for k, v in sf.figures.component_mean_diffs.items()]
    details = []
    for t in sf.triples:
        d = t.divergence
        if d is None:
            continue
        lines = [f"{t.agent}, seed {t.seed}: first divergence at step {d.step} ({d.kind})"]
        if d.kind == "action":
            lines += [f"  local action: {d.local_action}", f"  sim action:   {d.sim_action}"]
        else:
            lines += [f"  action: {d.local_action}", *(f"  {p}" for p in d.paths)]
        details.append(f"<pre>{html.escape(chr(10).join(lines))}</pre>")
    body = [
        "<h2>Figures</h2>",
        _table(["figure", "value"], _figures_rows(sf.figures)),
        "<h2>Triples (local / sim)</h2>",
        _table(
            ["agent", "seed", "success", "reward", "holdout AUC", "steps", "first divergence", "error"], rows
        ),
        "<h2>Reward per component</h2>",
        f"<div class='plot'>{plot_components(sf.triples)}</div>",
        _table(["component", "mean difference (sim - local)"], comp_rows),
        "<h2>Holdout AUC</h2>",
        f"<div class='plot'>{plot_auc(sf.triples)}</div>",
        "<h2>Job durations</h2>",
        f"<div class='plot'>{plot_job_durations(sf.triples)}</div>",
        "<h2>Where trajectories diverge</h2>",
        *(details or ["<p>Every trajectory is the same on both backends (actions and observations).</p>"]),
    ]
    return _page(f"Fidelity: {sf.scenario}", meta, body)


def index_html(index: FidelityIndex) -> str:
    rows = []
    for sid, f in index.scenarios.items():
        page = index.pages.get(sid, "")
        rows.append(
            [
                f'<td class="l"><a href="{html.escape(page)}">{html.escape(sid)}</a></td>',
                _td(f"{f.comparable}/{f.triples}"),
                _td(
                    _fmt(f.success_agreement, "{:.0%}"),
                    cls="good" if (f.success_agreement or 0) >= SUCCESS_AGREEMENT_TARGET else "bad",
                ),
                _td(_fmt(f.median_abs_auc_diff, "{:.4f}")),
                _td(_fmt(f.mean_reward_diff, "{:+.2f}")),
                _td(f"{_fmt(f.mean_steps_local, '{:.1f}')} / {_fmt(f.mean_steps_sim, '{:.1f}')}"),
                _td(f.diverged),
                _td(_fmt(f.job_duration_ks, "{:.2f}")),
            ]
        )
    machine = index.machine
    meta = (
        f"{index.backends[0]} against {index.backends[1]} · agents {', '.join(index.agents)} · {index.seeds} seed(s) "
        f"from base {index.base_seed} · {machine.get('cpus')} x {machine.get('cpu_model')} · {index.created}"
    )
    body = [
        "<h2>Overall</h2>",
        _table(["figure", "value"], _figures_rows(index.figures)),
        f"<p>Targets: success agreement &ge; {SUCCESS_AGREEMENT_TARGET:.0%} of triples, median |holdout AUC "
        f"difference| &le; {AUC_DIFF_TARGET}.</p>",
        "<h2>Kinds of work</h2>",
        _table(
            [
                "kind",
                "triples",
                "success agreement",
                "metric",
                "median |metric diff|",
                "median relative error",
            ],
            [
                [
                    f'<td class="l">{html.escape(kind)}</td>',
                    _td(f"{k.comparable}/{k.triples}"),
                    _td(
                        _fmt(k.success_agreement, "{:.0%}"),
                        cls="good" if (k.success_agreement or 0) >= SUCCESS_AGREEMENT_TARGET else "bad",
                    ),
                    _td(", ".join(k.metrics)),
                    _td(f"{_fmt(k.median_abs_metric_diff, '{:.4f}')} ({k.metric_pairs} pairs)"),
                    _td(_fmt(k.median_rel_metric_error, "{:.1%}")),
                ]
                for kind, k in index.kinds.items()
            ],
        ),
        "<h2>Scenarios</h2>",
        _table(
            [
                "scenario",
                "triples",
                "success agreement",
                "median |AUC diff|",
                "reward diff",
                "steps local / sim",
                "diverged",
                "KS job time",
            ],
            rows,
        ),
    ]
    return _page("mlsandbox fidelity: local against sim", meta, body)


def write_scenario(out: Path, sf: ScenarioFidelity, meta: str) -> str:
    """Write ``<scenario>.json`` and ``<scenario>.html``; the page's file name."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{sf.scenario}.json").write_text(sf.model_dump_json(indent=1))
    (out / f"{sf.scenario}.html").write_text(scenario_html(sf, meta))
    return f"{sf.scenario}.html"


def write_index(out: Path, index: FidelityIndex) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(index.model_dump_json(indent=1))
    path = out / "index.html"
    path.write_text(index_html(index))
    return path


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


__all__ = [
    "AUC_DIFF_TARGET",
    "SUCCESS_AGREEMENT_TARGET",
    "FidelityIndex",
    "Figures",
    "KindFigures",
    "ScenarioFidelity",
    "figures",
    "index_html",
    "kind_figures",
    "now",
    "scenario_html",
    "write_index",
    "write_scenario",
]
