"""The goal of any kind of work: a registered model whose metric on the hidden holdout meets a bar.

``metric`` is one the dataset's kind declares (default: the kind's first); the bar is either absolute
(``threshold``) or relative to the kind's trivial predictor on the same holdout (``baseline_ratio``: a
``min`` metric such as RMSE must be at most ``ratio x baseline``, a ``max`` metric at least
``ratio x baseline``). The grade's score rises linearly from the baseline to the bar.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlsandbox.tasks.registry import kind_of


class MetricGoal(BaseModel):
    """A registered model graded by its kind's metric on the hidden holdout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["registered_model_metric"] = "registered_model_metric"
    dataset: str
    """The dataset whose hidden holdout grades the registered model (its kind names the metrics)."""
    model_name: str = Field(default="model", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    """The registered model name the agent must deliver (its latest version is graded)."""
    metric: str | None = None
    """A metric of the dataset's kind (None: the kind's default)."""
    threshold: float | None = None
    """The metric's value that counts as success (its direction is the metric's)."""
    baseline_ratio: float | None = Field(default=None, gt=0)
    """The bar as a multiple of the kind's trivial predictor's figure on the holdout."""

    @model_validator(mode="after")
    def _one_bar(self) -> MetricGoal:
        if (self.threshold is None) == (self.baseline_ratio is None):
            raise ValueError("goal: give exactly one of threshold or baseline_ratio")
        return self


def check_metric_goal(goal: Any, datasets: dict[str, Any]) -> None:
    """A :class:`ValueError` naming ``goal.metric`` when the metric does not fit the dataset's kind (and
    the metric ``roc_auc`` for a ``registered_model_auc`` goal, or a ``deployment_slo`` goal without a
    bar of the kind's metric)."""
    spec = datasets.get(goal.dataset)
    if spec is None:
        return
    kind = kind_of(spec)
    if goal.type in ("registered_model_metric", "predictions_file") or getattr(goal, "by_metric", False):
        metric, field = goal.metric, "goal.metric"
    elif goal.type == "registered_model_auc":
        metric, field = "roc_auc", "goal.type registered_model_auc"
    elif goal.type == "deployment_slo":
        metric, field = "roc_auc", "goal.min_auc (a deployment_slo goal without threshold or baseline_ratio)"
    else:
        return
    try:
        kind.metric(metric)
    except KeyError as e:
        raise ValueError(f"{field}: {e.args[0]} (dataset {goal.dataset!r})") from None


def goal_metric(goal: Any, spec: Any) -> str:
    """The metric a goal grades by (``roc_auc`` for the AUC goals, with ``+slo`` for a deployment's)."""
    if goal.type in ("registered_model_metric", "predictions_file"):
        return kind_of(spec).metric(goal.metric).name
    if goal.type == "deployment_slo" and getattr(goal, "by_metric", False):
        return f"{kind_of(spec).metric(goal.metric).name}+slo"
    return "roc_auc+slo" if goal.type == "deployment_slo" else "roc_auc"


__all__ = ["MetricGoal", "check_metric_goal", "goal_metric"]
