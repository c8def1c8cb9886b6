"""Tabular multi-class classification: a generated table whose target is one of several named classes
(a ticket's priority, a claim's severity), graded by macro-F1 on the hidden holdout.

The classes are ordered bands of a latent score: the regression generator's
``signal_strength * sum(weights * z) + class_noise * e``, cut at the quantiles that give each class its
share (``class_shares``, default equal). Label noise (``defects.injections: label_noise``) moves a share of
the training labels to another class at random; the holdout is always clean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from mlsandbox.data.spec import LabelNoise, TabularDataset
from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind
from mlsandbox.tasks.tabular_common import cleaning_plan, features_and_target
from mlsandbox.workloads.trainer import ESTIMATOR_PARAMETERS


class MulticlassDataset(TabularDataset):
    """A table whose target is one of ``classes`` (at least three)."""

    kind: Literal["tabular_multiclass"] = "tabular_multiclass"  # type: ignore[assignment]
    classes: list[str] = Field(min_length=3, max_length=20)
    """The class labels, in the order of the latent score's bands (lowest first)."""
    class_shares: list[float] | None = None
    """Share of each class (same length as ``classes``, summing to 1; default: equal shares)."""
    class_noise: float = Field(default=0.5, gt=0)
    """Noise of the latent score (larger: classes overlap more, a lower attainable macro-F1)."""

    @field_validator("classes")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v) or any(not c.strip() for c in v):
            raise ValueError(f"classes must be distinct non-empty labels, got {v}")
        return v

    @model_validator(mode="after")
    def _shares(self) -> MulticlassDataset:
        if self.class_shares is not None:
            if len(self.class_shares) != len(self.classes):
                raise ValueError(
                    f"class_shares has {len(self.class_shares)} entries but classes has {len(self.classes)}"
                )
            if any(not p > 0 for p in self.class_shares) or abs(sum(self.class_shares) - 1) > 1e-6:
                raise ValueError(f"class_shares must be positive and sum to 1, got {self.class_shares}")
        return self

    def shares(self) -> list[float]:
        return list(self.class_shares or [1.0 / len(self.classes)] * len(self.classes))

    def latent(self) -> TabularDataset:
        """The regression spec whose target is the latent score (label noise is applied to the classes)."""
        data = self.model_dump(exclude={"kind", "classes", "class_shares", "class_noise", "positive_rate"})
        data["defects"]["injections"] = [
            i for i in data["defects"]["injections"] if i.get("type") != "label_noise"
        ]
        data.update(task="regression", noise_std=self.class_noise)
        return TabularDataset.model_validate(data)


def _bands(spec: MulticlassDataset, score: Any, cuts: Any) -> Any:
    import numpy as np

    return np.asarray(spec.classes, dtype=object)[np.searchsorted(cuts, score, side="right")]


class TabularMulticlass(TaskKind):
    name = "tabular_multiclass"
    title = "tabular multi-class classification"
    spec = MulticlassDataset
    metrics = (
        Metric("macro_f1", "max", "F1 score averaged over the classes, each class counting the same"),
        Metric("accuracy", "max", "share of rows whose predicted class is right"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = ESTIMATOR_PARAMETERS
    fit_task = "multiclass"
    serving = Serving("rows of feature columns", "a class label and its probability per row", "multiclass")

    def generate(self, spec: Any, seed: int) -> Generated:
        import numpy as np
        import pyarrow as pa

        from mlsandbox.data.randomness import rng_for
        from mlsandbox.data.tabular import generate_tabular

        assert isinstance(spec, MulticlassDataset)
        data = generate_tabular(spec.latent(), seed)
        target = spec.target
        score = np.asarray(data.train_table.column(target).to_numpy(), dtype=float)
        cuts = np.quantile(score, np.cumsum(spec.shares())[:-1])
        labels = _bands(spec, score, cuts)
        defects = list(data.manifest["defects"])
        for inj in spec.defects.injections:
            if isinstance(inj, LabelNoise):
                rng = rng_for(seed, spec.name, "train", "multiclass_label_noise")
                rows = np.flatnonzero(rng.random(labels.size) < inj.rate)
                shift = rng.integers(1, len(spec.classes), size=rows.size)
                index = {c: i for i, c in enumerate(spec.classes)}
                now = np.array([index[c] for c in labels[rows]], dtype=np.int64)
                labels[rows] = np.asarray(spec.classes, dtype=object)[(now + shift) % len(spec.classes)]
                defects.append({"type": "label_noise", "rate": inj.rate, "rows": rows.tolist()})
        position = data.train_table.schema.get_field_index(target)
        train = data.train_table.set_column(position, target, pa.array(labels.tolist(), type=pa.string()))
        holdout = data.holdout.copy()
        holdout[target] = _bands(spec, holdout[target].to_numpy(dtype=float), cuts)
        counts = {
            c: int(n) for c, n in zip(spec.classes, [(labels == c).sum() for c in spec.classes], strict=True)
        }
        manifest = {
            **data.manifest,
            "kind": self.name,
            "target": {"name": target, "classes": list(spec.classes), "class_counts_train": counts},
            "class_cuts": [float(c) for c in cuts],
            "defects": defects,
        }
        return Generated(train, holdout, manifest)

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        import numpy as np

        x, y = features_and_target(holdout, spec.target)
        predicted = np.asarray(model.predict(x)).astype(str)
        y = np.asarray(y).astype(str)
        if self.metric(metric).name == "accuracy":
            return float(np.mean(predicted == y))
        from sklearn.metrics import f1_score

        return float(f1_score(y, predicted, average="macro", labels=sorted(set(y))))

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """The majority-class predictor's figure on the holdout."""
        import numpy as np

        _, y = features_and_target(holdout, spec.target)
        y = np.asarray(y).astype(str)
        values, counts = np.unique(y, return_counts=True)
        majority = values[counts.argmax()]
        if self.metric(metric).name == "accuracy":
            return float(counts.max() / y.size)
        # F1 of the majority class (its precision is its share, its recall 1); 0 for every other class.
        share = counts.max() / y.size
        return float(2 * share / (1 + share) / len(values)) if majority is not None else 0.0

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        return [{"prediction": str(v)} for v in model.predict(frame)]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        return Policy(cleaning_plan(profile), "gradient_boosting")


KIND = TabularMulticlass()

__all__ = ["KIND", "MulticlassDataset", "TabularMulticlass"]
