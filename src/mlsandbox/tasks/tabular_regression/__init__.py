"""Tabular regression: a generated table with a numeric target, graded by RMSE (or MAE) on the hidden
holdout, usually against a bar relative to the mean predictor's error (``baseline_ratio`` of the goal)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from mlsandbox.data.spec import TabularDataset
from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind
from mlsandbox.tasks.tabular_common import cleaning_plan, features_and_target
from mlsandbox.workloads.trainer import REGRESSION_PARAMETERS


class RegressionDataset(TabularDataset):
    """A table whose target is a number: ``target_mean + signal_strength * sum(weights * z) + noise_std *
    e`` (see :class:`~mlsandbox.data.spec.TabularDataset`)."""

    kind: Literal["tabular_regression"] = "tabular_regression"  # type: ignore[assignment]
    task: Literal["regression"] = "regression"


def _errors(metric: str, predicted: Any, y: Any) -> float:
    import numpy as np

    residual = np.asarray(predicted, dtype=float) - np.asarray(y, dtype=float)
    if metric == "mae":
        return float(np.mean(np.abs(residual)))
    return float(np.sqrt(np.mean(residual**2)))


class TabularRegression(TaskKind):
    name = "tabular_regression"
    title = "tabular regression"
    spec = RegressionDataset
    metrics = (
        Metric("rmse", "min", "root mean squared error of the predictions"),
        Metric("mae", "min", "mean absolute error of the predictions"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = REGRESSION_PARAMETERS
    fit_task = "regression"
    calibration_stand_ins: ClassVar[Mapping[str, str]] = {"ridge": "logistic_regression"}
    serving = Serving("rows of feature columns", "a number per row", "number")

    def generate(self, spec: Any, seed: int) -> Generated:
        # The generator reads a regression from the spec's fields; its manifest says which kind made it.
        from mlsandbox.data.tabular import generate_tabular

        data = generate_tabular(spec, seed)
        return Generated(data.train_table, data.holdout, {**data.manifest, "kind": self.name})

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        x, y = features_and_target(holdout, spec.target)
        return _errors(self.metric(metric).name, model.predict(x), y)

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """The mean predictor's error: every row predicted as the holdout's mean target."""
        import numpy as np

        _, y = features_and_target(holdout, spec.target)
        y = np.asarray(y, dtype=float)
        return _errors(self.metric(metric).name, np.full(y.shape, y.mean()), y)

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        return [{"prediction": float(v)} for v in model.predict(frame)]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        return Policy(cleaning_plan(profile), "gradient_boosting")


KIND = TabularRegression()

__all__ = ["KIND", "RegressionDataset", "TabularRegression"]
