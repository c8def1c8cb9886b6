"""Grade of the ``deployment_slo`` goal: the model being served, and the SLO held while it was.

The ``serving`` action pack and its monitor keep the episode's
:class:`~mlsandbox.world.episode.ServingRecord` (``state.serving``): ``served_version`` (the version of the
goal's model that its deployment serves with at least one replica up; None when none), ``slo_violation_s``
and ``observed_s`` (seconds of production traffic with the SLO violated, and in all). The served
version is scored on the hidden holdout (the dataset's, or the latest production drift phase's when the
goal says ``holdout: production``: ``ground_truth.production_holdouts``); the task score is the AUC score
times the share of time the SLO held. A goal with a bar of its dataset kind's metric (``threshold`` or
``baseline_ratio``) scores the served version by that metric instead of ROC AUC (as the
``registered_model_metric`` grade does).
The SLO is judged only over enough traffic (:meth:`~mlsandbox.scenario.serving.Serving.required_observation_s`:
one SLO window, and through the scenario's last spike): an episode that ends sooner does not succeed, and its
score is scaled by the share of that time it watched.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from mlsandbox.backends.protocols import Tracking
from mlsandbox.evaluation.metric_grade import metric_bar, progress
from mlsandbox.evaluation.reward import Grade
from mlsandbox.scenario.serving import DeploymentSLOGoal
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)


def grade_deployment_slo(state: EpisodeState, tracking: Tracking) -> Grade:
    goal = state.scenario.goal
    if not isinstance(goal, DeploymentSLOGoal):
        raise TypeError(f"a {goal.type} goal is not graded as deployment_slo")
    record = state.serving
    version = record.served_version
    observed = record.observed_s
    violated = record.slo_violation_s
    fraction = violated / observed if observed > 0 else 0.0
    details = {
        "served_version": version,
        "slo_violation_s": round(violated, 3),
        "serving_observed_s": round(observed, 3),
        "slo_violation_fraction": round(fraction, 6),
        "risky_deployments": record.risky_deployments,
    }
    if not version:
        return Grade(
            goal.model_name, None, None, 0.0, False, f"no deployment serves {goal.model_name!r}", details
        )
    truth = state.ground_truth
    production = goal.holdout == "production"
    holdout = (truth.production_holdouts if production else truth.holdouts).get(goal.dataset)
    if holdout is None:
        key = f"{goal.dataset}@production" if production else goal.dataset
        return Grade(goal.model_name, version, None, 0.0, False, f"no holdout {key!r} to grade on", details)
    serving = state.scenario.serving
    required = serving.required_observation_s() if serving is not None else 0.0
    watched = min(1.0, observed / required) if required > 0 else 1.0
    details["serving_required_s"] = round(required, 3)
    slo_ok = fraction <= goal.max_violation_fraction
    slo_reason = (
        f"SLO violated {fraction:.1%} of {observed:.0f} s ({'<=' if slo_ok else '>'} "
        f"{goal.max_violation_fraction:.0%})"
    )
    if watched < 1.0:
        slo_reason += f"; only {observed:.0f} s of production traffic watched, the SLO needs {required:.0f} s"
    if goal.by_metric:
        return _grade_by_metric(
            state, tracking, version, holdout, details, fraction, watched, slo_ok, slo_reason
        )
    target = state.scenario.dataset(goal.dataset).target
    x, y = holdout.drop(columns=[target]), holdout[target].to_numpy()
    try:
        model = tracking.load_model(state.registry_name(goal.model_name), version)
        from sklearn.metrics import roc_auc_score  # after the load: see grade_registered_model_auc

        auc = float(roc_auc_score(y, np.asarray(model.predict_proba(x))[:, 1]))
    except Exception as e:  # a model that cannot score the holdout earns nothing
        log.info("grading failed: %s", e)
        return Grade(
            goal.model_name, version, None, 0.0, False, f"served model could not score: {e}", details
        )
    if not np.isfinite(auc):
        return Grade(goal.model_name, version, None, 0.0, False, "holdout AUC is not finite", details)
    auc_score = float(np.clip((auc - 0.5) / (goal.min_auc - 0.5), 0.0, 1.0))
    score = auc_score * (1.0 - min(1.0, fraction)) * watched
    success = auc >= goal.min_auc and slo_ok and watched >= 1.0
    reason = (
        f"served version {version}: holdout AUC {auc:.4f} {'>=' if auc >= goal.min_auc else '<'} "
        f"{goal.min_auc}; {slo_reason}"
    )
    return Grade(goal.model_name, version, auc, score, success, reason, details)


def _grade_by_metric(
    state: EpisodeState,
    tracking: Tracking,
    version: str,
    holdout: Any,
    details: dict[str, Any],
    fraction: float,
    watched: float,
    slo_ok: bool,
    slo_reason: str,
) -> Grade:
    """The served version scored by its dataset kind's metric against the goal's bar (see
        :func:`~mlsandbox.evaluation.metric_grade.metric_bar`), times the share of time the SLO held. A goal with a bar of its dataset kind's metric (``threshold`` or
    ``baseline_ratio``) scores the served version by that metric instead of ROC AUC (as the
    ``registered_model_metric`` grade does)."""
    goal = state.scenario.goal
    spec = state.scenario.dataset(goal.dataset)
    kind = kind_of(spec)
    metric, baseline, bar = metric_bar(goal, spec, holdout)
    details.update(kind=kind.name, metric=metric.name, baseline=round(baseline, 6), bar=round(bar, 6))
    try:
        model = tracking.load_model(state.registry_name(goal.model_name), version)
        value = kind.score(metric.name, model, holdout, spec)
    except Exception as e:  # a model that cannot score the holdout earns nothing
        log.info("grading failed: %s", e)
        return Grade(
            goal.model_name, version, None, 0.0, False, f"served model could not score: {e}", details
        )
    if not math.isfinite(value):
        return Grade(
            goal.model_name, version, None, 0.0, False, f"holdout {metric.name} is not finite", details
        )
    details["holdout_metric"] = round(value, 6)
    met = metric.better(value, bar)
    score = progress(metric, value, baseline, bar) * (1.0 - min(1.0, fraction)) * watched
    relation = (">=" if met else "<") if metric.direction == "max" else ("<=" if met else ">")
    reason = (
        f"served version {version}: holdout {metric.name} {value:.4f} {relation} {bar:.4f} "
        f"(baseline {baseline:.4f}); {slo_reason}"
    )
    return Grade(goal.model_name, version, None, score, met and slo_ok and watched >= 1.0, reason, details)
