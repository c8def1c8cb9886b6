"""Tabular binary classification: the kind every scenario without a ``kind`` asks for.

A generated table (:func:`mlsandbox.data.tabular.generate_tabular`) with a 0/1 target, trained by the
trainer's classifiers and graded by ROC AUC on the hidden holdout (goal ``registered_model_auc``, or
``registered_model_metric`` with ``roc_auc`` or ``accuracy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mlsandbox.data.spec import TabularDataset
from mlsandbox.tasks.kind import Generated, Metric, Policy, TaskKind, TrainSlot
from mlsandbox.tasks.tabular_common import cleaning_plan, features_and_target
from mlsandbox.workloads.trainer import ESTIMATOR_PARAMETERS


class TabularBinary(TaskKind):
    name = "tabular"
    title = "tabular binary classification"
    spec = TabularDataset
    metrics = (
        Metric("roc_auc", "max", "ROC AUC of the positive class's probability", "val_auc"),
        Metric("accuracy", "max", "share of rows whose predicted label is right"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = ESTIMATOR_PARAMETERS
    fit_task = "binary"
    rl_train_slots = (
        TrainSlot("logistic_regression"),
        TrainSlot("random_forest"),
        TrainSlot("gradient_boosting"),
        TrainSlot("mlp", (("learning_rate_init", 0.01),)),
    )
    """The algorithms at their defaults, the neural network with its learning rate set to its default
    explicitly: a job that names its rate keeps it when the training defaults go bad (a
    ``divergent_learning_rate`` fault changes only the rate a job leaves unset)."""

    def generate(self, spec: Any, seed: int) -> Generated:
        from mlsandbox.data.tabular import generate_tabular

        data = generate_tabular(spec, seed)
        return Generated(data.train_table, data.holdout, data.manifest)

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        import numpy as np

        x, y = features_and_target(holdout, spec.target)
        if self.metric(metric).name == "accuracy":
            return float(np.mean(np.asarray(model.predict(x)) == y))
        proba = np.asarray(model.predict_proba(x))[:, 1]
        # Imported when grading, after the model's load (see mlsandbox.evaluation.reward).
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(y, proba))

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        import numpy as np

        _, y = features_and_target(holdout, spec.target)
        if self.metric(metric).name == "accuracy":
            return float(max(np.mean(y), 1 - np.mean(y)))
        return 0.5

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        return Policy(cleaning_plan(profile), "gradient_boosting")


KIND = TabularBinary()

__all__ = ["KIND", "TabularBinary"]
