"""The ``registered_model_metric`` grader: the latest registered version of the goal's model, scored by
its dataset's kind (:meth:`mlsandbox.tasks.kind.TaskKind.score`) on the hidden holdout, against a bar that
is absolute or relative to the kind's trivial predictor (see :mod:`mlsandbox.scenario.metric_goal`)."""

from __future__ import annotations

import logging
import math
from typing import Any

from mlsandbox.backends.protocols import Tracking
from mlsandbox.evaluation import holdout_memo
from mlsandbox.evaluation.reward import Grade
from mlsandbox.tasks.kind import Metric
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)


def metric_bar(goal: Any, spec: Any, holdout: Any) -> tuple[Metric, float, float]:
    """The goal's metric (its ``metric``, else the dataset kind's default), the kind's trivial predictor's
    figure on ``holdout`` and the bar: ``baseline_ratio`` times that figure, or ``threshold``."""
    kind = kind_of(spec)
    metric = kind.metric(getattr(goal, "metric", None))
    baseline = kind.baseline(metric.name, holdout, spec)
    ratio = getattr(goal, "baseline_ratio", None)
    bar = float(baseline * ratio) if ratio is not None else float(getattr(goal, "threshold", 0.0) or 0.0)
    return metric, float(baseline), bar


def progress(metric: Metric, value: float, baseline: float, bar: float) -> float:
    """The score of ``value``: 0 at the baseline, 1 at the bar (linear between, clipped)."""
    span = bar - baseline
    done = (value - baseline) / span if span != 0 else float(metric.better(value, bar))
    return min(1.0, max(0.0, done))


def grade_registered_model_metric(state: EpisodeState, tracking: Tracking) -> Grade:
    goal = state.scenario.goal
    spec = state.scenario.dataset(goal.dataset)
    kind = kind_of(spec)
    holdout = state.ground_truth.holdouts[goal.dataset]
    metric, baseline, bar = metric_bar(goal, spec, holdout)
    details = {
        "kind": kind.name,
        "metric": metric.name,
        "holdout_metric": None,
        "baseline": round(baseline, 6),
        "bar": round(bar, 6),
    }  # the same keys whether or not a model is graded
    versions, late = state.graded_versions(goal.model_name)
    if not versions:
        reason = (
            state.late_reason(goal.model_name, late)
            if late
            else f"no model registered as {goal.model_name!r}"
        )
        return Grade(goal.model_name, None, None, 0.0, False, reason, details)
    version = versions[-1]
    try:
        model = tracking.load_model(state.registry_name(goal.model_name), version)
        value = holdout_memo.score(
            model,
            holdout,
            (kind.name, metric.name, spec.target),
            lambda: kind.score(metric.name, model, holdout, spec),
        )
    except Exception as e:  # a model that cannot score the holdout earns nothing
        log.info("grading failed: %s", e)
        reason = f"model could not score the holdout: {e}"
        return Grade(goal.model_name, version, None, 0.0, False, reason, details)
    if not math.isfinite(value):
        return Grade(
            goal.model_name, version, None, 0.0, False, f"holdout {metric.name} is not finite", details
        )
    score = progress(metric, value, baseline, bar)
    success = metric.better(value, bar)
    relation = (">=" if success else "<") if metric.direction == "max" else ("<=" if success else ">")
    reason = f"holdout {metric.name} {value:.4f} {relation} {bar:.4f} (baseline {baseline:.4f})"
    details["holdout_metric"] = round(value, 6)
    return Grade(goal.model_name, version, None, score, success, reason, details)


__all__ = ["grade_registered_model_metric", "metric_bar", "progress"]
