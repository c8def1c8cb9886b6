"""What one episode left (an :class:`EpisodeTrace`) and how two traces of the same (scenario, seed,
agent) on two backends compare (a :class:`TripleComparison`): success, reward per component, holdout
AUC, steps, job durations, and the first step at which the trajectories diverge.

Divergence is judged on what an agent could act on, not on figures that are expected to differ between
a real run and a simulated one: at each step the actions are compared, then the observations with their
numbers left out (CPU-seconds, metrics, credits and timings are compared as figures elsewhere), ids and
digits in texts masked and long texts cut to their first line. The first step where either differs is
the divergence, with the paths that differ.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepTrace(_Model):
    step: int
    action: dict[str, Any] | str
    ok: bool
    error_code: str | None = None
    view: Any
    """The observation as compared (numbers out, texts masked: :func:`comparable`)."""
    observation: dict[str, Any]
    """The observation itself (``result`` cut to a few thousand characters), for the report."""


class JobTrace(_Model):
    job_id: str
    algorithm: str
    state: str
    duration_s: float | None
    cpu_seconds: float


class EpisodeTrace(_Model):
    """One episode of one agent on one backend."""

    backend: str
    scenario: str
    agent: str
    seed: int
    success: bool = False
    score: float = 0.0
    holdout_auc: float | None = None
    kind: str = "tabular"
    """The kind of work (the goal dataset's)."""
    metric: str | None = None
    """The metric the goal grades by (``roc_auc`` for the AUC goals)."""
    holdout_metric: float | None = None
    """That metric of the graded model on the hidden holdout (None: no model was graded)."""
    grade_reason: str | None = None
    reward: float = 0.0
    components: dict[str, float] = Field(default_factory=dict)
    steps: list[StepTrace] = Field(default_factory=list)
    jobs: list[JobTrace] = Field(default_factory=list)
    credits_used: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    """Why the episode could not run (then nothing else is meaningful)."""


class Divergence(_Model):
    step: int
    kind: Literal["action", "observation", "length"]
    local_action: Any = None
    sim_action: Any = None
    paths: list[str] = Field(default_factory=list)
    """Where the observations differ (``result.state: 'running' != 'succeeded'``), at most a few."""


class TripleComparison(_Model):
    """One (scenario, seed, agent) on the two backends."""

    scenario: str
    agent: str
    seed: int
    local: EpisodeTrace
    sim: EpisodeTrace
    success_agrees: bool
    reward_diff: float
    """sim minus local."""
    component_diffs: dict[str, float]
    auc_diff: float | None
    metric_diff: float | None = None
    """The goal metric on the holdout, sim minus local (any kind; the AUC difference for AUC goals)."""
    steps_diff: int
    divergence: Divergence | None

    @property
    def comparable(self) -> bool:
        return self.local.error is None and self.sim.error is None


# ------------------------------------------------------------------------------------------- masking

_HEX = re.compile(r"\b[0-9a-f]{8,}\b")
_DIGITS = re.compile(r"\d+(\.\d+)?")
_TEXT_CHARS = 120
VOLATILE_KEYS = frozenset(
    {"run_id", "model_id", "model_uri", "experiment_id", "episode_id", "flow_run_id_backend", "start_time",
     "end_time", "created_at", "timings", "size_bytes"}
)  # fmt: skip
"""Keys whose values differ between any two runs (ids, times): compared as present, not by value."""


def mask_text(text: str) -> str:
    """A text with ids and numbers masked, its first line only, cut to a length."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _DIGITS.sub("#", _HEX.sub("<id>", first))[:_TEXT_CHARS]


def comparable(value: Any, key: str | None = None) -> Any:
    """What of an observation two backends must agree on (see the module docstring)."""
    if key in VOLATILE_KEYS:
        return "<volatile>"
    if isinstance(value, dict):
        return {str(k): comparable(v, str(k)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value) and key in ("log_tail", "logs", "lines"):
            return f"<{len(value)} lines>"
        return [comparable(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, str):
        return mask_text(value) if "\n" in value or len(value) > 40 else _HEX.sub("<id>", value)
    return repr(value)


def differences(a: Any, b: Any, path: str = "", limit: int = 6) -> list[str]:
    """Paths where two comparable views differ, each with both values (at most ``limit``)."""
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k not in x:
                    out.append(f"{p}.{k}: only on sim")
                elif k not in y:
                    out.append(f"{p}.{k}: only on local")
                else:
                    walk(x[k], y[k], f"{p}.{k}")
            return
        if isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                out.append(f"{p}: {len(x)} items on local, {len(y)} on sim")
                return
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{p}[{i}]")
            return
        if x != y:
            out.append(f"{p}: {json.dumps(x)[:80]} on local, {json.dumps(y)[:80]} on sim")

    walk(a, b, path)
    return out


def first_divergence(local: EpisodeTrace, sim: EpisodeTrace) -> Divergence | None:
    """The first step where the actions or the comparable observations differ (None: the same)."""
    for a, b in zip(local.steps, sim.steps, strict=False):
        if comparable(a.action) != comparable(b.action):
            return Divergence(step=a.step, kind="action", local_action=a.action, sim_action=b.action)
        if a.view != b.view:
            return Divergence(
                step=a.step,
                kind="observation",
                local_action=a.action,
                sim_action=b.action,
                paths=differences(a.view, b.view, "observation"),
            )
    if len(local.steps) != len(sim.steps):
        n = min(len(local.steps), len(sim.steps))
        return Divergence(
            step=n + 1, kind="length", paths=[f"{len(local.steps)} steps on local, {len(sim.steps)} on sim"]
        )
    return None


def compare(local: EpisodeTrace, sim: EpisodeTrace) -> TripleComparison:
    keys = sorted(set(local.components) | set(sim.components))
    auc_diff = None
    if local.holdout_auc is not None and sim.holdout_auc is not None:
        auc_diff = sim.holdout_auc - local.holdout_auc
    metric_diff = None
    if local.holdout_metric is not None and sim.holdout_metric is not None:
        metric_diff = sim.holdout_metric - local.holdout_metric
    return TripleComparison(
        scenario=local.scenario,
        agent=local.agent,
        seed=local.seed,
        local=local,
        sim=sim,
        success_agrees=local.success == sim.success,
        reward_diff=sim.reward - local.reward,
        component_diffs={k: sim.components.get(k, 0.0) - local.components.get(k, 0.0) for k in keys},
        auc_diff=auc_diff,
        metric_diff=metric_diff,
        steps_diff=len(sim.steps) - len(local.steps),
        divergence=first_divergence(local, sim),
    )


def ks_statistic(a: list[float], b: list[float]) -> float | None:
    """The two-sample Kolmogorov-Smirnov statistic (None when a side is empty)."""
    xs, ys = sorted(v for v in a if math.isfinite(v)), sorted(v for v in b if math.isfinite(v))
    if not xs or not ys:
        return None
    from scipy.stats import ks_2samp

    return float(ks_2samp(xs, ys).statistic)


__all__ = [
    "Divergence",
    "EpisodeTrace",
    "JobTrace",
    "StepTrace",
    "TripleComparison",
    "comparable",
    "compare",
    "differences",
    "first_divergence",
    "ks_statistic",
    "mask_text",
]
