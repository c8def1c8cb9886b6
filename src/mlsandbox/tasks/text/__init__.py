"""Text classification: labelled support tickets or clinical notes, graded by macro-F1 on the hidden
holdout (see :mod:`.spec` for the defects, :mod:`mlsandbox.workloads.text_classifier` for the
algorithms)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind
from mlsandbox.tasks.text.spec import TextClassificationDataset
from mlsandbox.workloads.text_classifier import ESTIMATOR_PARAMETERS, VECTORIZER_PARAMETERS, VECTORIZER_PREFIX


def _columns(frame: Any, target: str | None) -> tuple[str, str, str | None]:
    """The text, label and time columns of a text frame (by the spec's defaults, else the longest
    string column is the text)."""
    columns = [str(c) for c in frame.columns]
    label = target if target in columns else "label"
    if "text" in columns:
        text = "text"
    else:
        candidates = [c for c in columns if c != label and frame[c].dtype == object]
        text = max(
            candidates, key=lambda c: frame[c].fillna("").astype(str).str.len().mean(), default=columns[0]
        )
    return text, str(label), "created_at" if "created_at" in columns else None


class TextClassification(TaskKind):
    name = "text_classification"
    title = "text classification"
    spec = TextClassificationDataset
    metrics = (
        Metric("macro_f1", "max", "F1 score averaged over the labels, each label counting the same"),
        Metric("accuracy", "max", "share of documents whose predicted label is right"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = {
        name: params | {VECTORIZER_PREFIX + p for p in VECTORIZER_PARAMETERS}
        for name, params in ESTIMATOR_PARAMETERS.items()
    }
    preparations = ("drop_empty", "dedupe", "drop_short")
    formats = ("csv", "parquet", "jsonl")
    fit_task = "text"
    calibration_stand_ins: ClassVar[Mapping[str, str]] = {
        "linear_svc": "logistic_regression",
        "naive_bayes": "logistic_regression",
    }
    calibration_sizes = (None, 6000)
    """Documents: the families' own and 6,000."""
    serving = Serving("documents (text)", "a label per document", None)  # linear_svc has no probabilities

    def generate(self, spec: Any, seed: int) -> Generated:
        import pyarrow as pa

        from mlsandbox.tasks.text.generate import generate_text_classification

        assert isinstance(spec, TextClassificationDataset)
        data = generate_text_classification(spec, seed)
        manifest = {**data.manifest, "kind": self.name, "target": spec.target}
        return Generated(pa.Table.from_pandas(data.train, preserve_index=False), data.holdout, manifest)

    def profile(self, frame: Any, target: str | None) -> dict[str, Any]:
        from mlsandbox.tasks.text.quality import profile

        text, label, time_column = _columns(frame, target)
        return profile(frame, text, label, time_column)

    def prepare(self, frame: Any, strategy: str, target: str | None) -> tuple[Any, dict[str, Any]]:
        from mlsandbox.tasks.text.quality import prepare

        text, label, _ = _columns(frame, target)
        step: Any = strategy
        return prepare(frame, step, text_column=text, label_column=label)

    def trainer_args(self, spec: Any) -> list[str]:
        return ["--task", self.fit_task, "--column", spec.text_column]

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        from mlsandbox.workloads.text_classifier import evaluate

        return float(evaluate(model, holdout, spec.text_column, spec.target)[self.metric(metric).name])

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """The majority label's figure on the holdout."""
        counts = holdout[spec.target].astype(str).value_counts()
        share = float(counts.iloc[0] / counts.sum())
        if self.metric(metric).name == "accuracy":
            return share
        return 2 * share / (1 + share) / len(counts)

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        text, _, _ = _columns(frame, None)
        return [{"label": str(v)} for v in model.predict(frame[[text]].fillna("").astype(str))]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        steps: list[str] = []
        if profile.get("empty_documents") or profile.get("missing_labels"):
            steps.append("drop_empty")
        if profile.get("duplicate_rows") or profile.get("texts_with_conflicting_labels"):
            steps.append("dedupe")
        if profile.get("short_documents"):
            steps.append("drop_short")
        return Policy(tuple(steps), "logistic_regression")


KIND = TextClassification()

__all__ = ["KIND", "TextClassification", "TextClassificationDataset"]
