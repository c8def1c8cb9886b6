"""Reward v1: task completion graded on the hidden holdout, step cost, compute credits, invalid actions.

Every component is reported by name; the scalar reward is their sum (the weights are applied here, from
the scenario's ``reward`` section), so ``sum(components.values()) == reward`` always holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from mlsandbox.backends.base import Tracking
from mlsandbox.episode import EpisodeState

log = logging.getLogger(__name__)

COMPONENTS = ("task", "success_bonus", "step_cost", "compute", "invalid_action")


@dataclass(frozen=True)
class Grade:
    """The task grade at episode end (hidden ground truth: goes to ``info``, never to observations)."""

    model: str | None
    version: str | None
    auc: float | None
    score: float
    success: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "holdout_auc": None if self.auc is None else round(self.auc, 6),
            "score": round(self.score, 6),
            "success": self.success,
            "reason": self.reason,
        }


def grade_episode(state: EpisodeState, tracking: Tracking) -> Grade:
    """Grade the latest registered version of the goal's model on the hidden holdout."""
    goal = state.scenario.goal
    versions = [v for (n, v) in state.registered if n == goal.model_name]
    if not versions:
        return Grade(goal.model_name, None, None, 0.0, False, f"no model registered as {goal.model_name!r}")
    version = versions[-1]
    holdout = state.ground_truth.holdouts[goal.dataset]
    target = state.scenario.dataset(goal.dataset).target
    x, y = holdout.drop(columns=[target]), holdout[target].to_numpy()
    try:
        model = tracking.load_model(state.registry_name(goal.model_name), version)
        proba = np.asarray(model.predict_proba(x))[:, 1]
        auc = float(roc_auc_score(y, proba))
    except Exception as e:  # a model that cannot score the holdout earns nothing
        log.info("grading failed: %s", e)
        return Grade(goal.model_name, version, None, 0.0, False, f"model could not score the holdout: {e}")
    if not np.isfinite(auc):
        return Grade(goal.model_name, version, None, 0.0, False, "holdout AUC is not finite")
    score = float(np.clip((auc - 0.5) / (goal.min_auc - 0.5), 0.0, 1.0))
    success = auc >= goal.min_auc
    reason = f"holdout AUC {auc:.4f} {'>=' if success else '<'} {goal.min_auc}"
    return Grade(goal.model_name, version, auc, score, success, reason)


def step_components(
    state: EpisodeState, *, invalid: bool, credits_delta: float, grade: Grade | None
) -> dict[str, float]:
    """The weighted reward components of one step. ``grade`` is given on the final step only."""
    w = state.scenario.reward
    comps = {
        "task": 0.0,
        "success_bonus": 0.0,
        "step_cost": -w.step_cost,
        "compute": -w.compute * max(0.0, credits_delta),
        "invalid_action": -w.invalid_action if invalid else 0.0,
    }
    if grade is not None:
        comps["task"] = w.task * grade.score
        comps["success_bonus"] = w.success_bonus if grade.success else 0.0
    return comps
