"""The ``registered_models`` grader: each model of the goal graded as a ``registered_model_auc`` goal's
(by its own deadline), the task score weighted by priority, success when every ``high`` model reaches its
bar (see :mod:`mlsandbox.scenario.models_goal`)."""

from __future__ import annotations

from mlsandbox.backends.protocols import Tracking
from mlsandbox.evaluation.reward import Grade, grade_model_auc
from mlsandbox.scenario.models_goal import PRIORITY_WEIGHTS, RegisteredModelsGoal
from mlsandbox.world.episode import EpisodeState


def grade_registered_models(state: EpisodeState, tracking: Tracking) -> Grade:
    goal = state.scenario.goal
    assert isinstance(goal, RegisteredModelsGoal)
    grades = [
        (m, grade_model_auc(state, tracking, m.model_name, m.dataset, m.min_auc, m.deadline_s))
        for m in goal.models
    ]
    weights = [PRIORITY_WEIGHTS[m.priority] for m, _ in grades]
    score = sum(w * g.score for w, (_, g) in zip(weights, grades, strict=True)) / sum(weights)
    missed = [m.model_name for m, g in grades if m.priority == "high" and not g.success]
    reason = "; ".join(f"{m.model_name} ({m.priority}): {g.reason}" for m, g in grades)
    primary = next(g for m, g in grades if m is goal.primary)
    details = {
        "models": [
            {
                "model": m.model_name,
                "priority": m.priority,
                "version": g.version,
                "holdout_auc": None if g.auc is None else round(g.auc, 6),
                "score": round(g.score, 6),
                "success": g.success,
            }
            for m, g in grades
        ]
    }
    return Grade(primary.model, primary.version, primary.auc, score, not missed, reason, details)


__all__ = ["grade_registered_models"]
