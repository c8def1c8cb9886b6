"""A kind of work from outside mlsandbox: predict a count (support calls next month, returns per order).

The dataset is a table whose target is a whole number >= 0: the regression generator's number, rounded
and floored at zero. The trainer fits it as a regression (``fit_task``), the grader scores the mean
absolute error against a bar relative to always predicting the holdout's median count. Declared once here
and registered through the ``mlsandbox.kinds`` entry point; mlsandbox itself is not edited.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

from mlsandbox.data.spec import TabularDataset
from mlsandbox.data.tabular import generate_tabular
from mlsandbox.tasks import Generated, Metric, Policy, Serving, TaskKind
from mlsandbox.tasks.tabular_common import cleaning_plan, features_and_target
from mlsandbox.workloads.trainer import REGRESSION_PARAMETERS


class CountDataset(TabularDataset):
    """A table whose target counts something (a whole number, at least 0)."""

    kind: Literal["example_counts"] = "example_counts"  # type: ignore[assignment]
    task: Literal["regression"] = "regression"


def _counts(values: Any) -> np.ndarray:
    return np.maximum(0, np.round(np.asarray(values, dtype=float))).astype(np.int64)


class Counts(TaskKind):
    name = "example_counts"
    title = "counts (example plug-in kind)"
    spec = CountDataset
    metrics = (Metric("mae", "min", "mean absolute error of the predicted counts"),)
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = {
        a: REGRESSION_PARAMETERS[a] for a in ("random_forest", "gradient_boosting")
    }
    fit_task = "regression"
    serving = Serving("rows of feature columns", "a count per row")

    def generate(self, spec: Any, seed: int) -> Generated:
        data = generate_tabular(spec, seed)
        target = spec.target
        position = data.train_table.schema.get_field_index(target)
        train = data.train_table.set_column(
            position, target, pa.array(_counts(data.train_table.column(target).to_numpy()))
        )
        holdout = data.holdout.copy()
        holdout[target] = _counts(holdout[target])
        return Generated(train, holdout, {**data.manifest, "kind": self.name})

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        x, y = features_and_target(holdout, spec.target)
        return float(np.mean(np.abs(_counts(model.predict(x)) - y)))

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        _, y = features_and_target(holdout, spec.target)
        return float(np.mean(np.abs(np.median(y) - y)))

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        return [{"prediction": int(v)} for v in _counts(model.predict(frame))]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        return Policy(cleaning_plan(profile), "gradient_boosting")


KIND = Counts()
