"""Image classification: photos of parts labelled by shape, or by inspection class (``ok``, ``scratch``,
``chip``, ``stain``), graded by accuracy (or macro-F1) on the hidden holdout (see :mod:`.spec` for the
defects, :mod:`mlsandbox.workloads.image_classifier` for the algorithms: a pixel-feature logistic
regression always, a small CNN where PyTorch is installed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mlsandbox.tasks.images.spec import ImageClassificationDataset
from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind, TrainSlot
from mlsandbox.workloads.image_classifier import (
    ESTIMATOR_PARAMETERS,
    INSTALL_TORCH,
    TORCH_ALGORITHMS,
    torch_available,
)

IMBALANCED = 2.5
"""The label-count ratio (largest to smallest class) above which the rule agent weights the classes."""
SHIFTED_BRIGHTNESS = 0.15
"""The relative change of the newest images' brightness above which the rule agent augments brightness."""
SHIFTED_SHARPNESS = 0.6
"""The newest images' sharpness ratio below which the rule agent augments with blur."""


def _columns(frame: Any, target: str | None) -> tuple[str, str, str | None, str | None]:
    """The image, label, time and file columns of an image frame (by the spec's defaults, else the
    first column holding bytes is the image)."""
    columns = [str(c) for c in frame.columns]
    label = target if target in columns else "label"
    if "image" in columns:
        image = "image"
    else:
        image = next(
            (c for c in columns if len(frame) and isinstance(frame[c].iloc[0], bytes | bytearray)), columns[0]
        )
    return (
        image,
        str(label),
        "captured_at" if "captured_at" in columns else None,
        "file" if "file" in columns else None,
    )


class ImageClassification(TaskKind):
    name = "image_classification"
    title = "image classification"
    spec = ImageClassificationDataset
    metrics = (
        Metric("accuracy", "max", "share of images whose predicted label is right"),
        Metric("macro_f1", "max", "F1 score averaged over the labels, each label counting the same"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = ESTIMATOR_PARAMETERS
    preparations = ("drop_unreadable", "resize", "augment_brightness", "augment_blur")
    formats = ("parquet",)
    fit_task = "images"
    calibration_stand_ins: ClassVar[Mapping[str, str]] = {"cnn": "mlp"}
    calibration_sizes = (None, 3000)
    """Images: the families' own (1,200) and 3,000 (the CNN's epochs take about 5 s of one core on the
    families' and 9 s on 3,000, so the sweep's ``kinds`` section stays within half an hour)."""
    serving = Serving("images (PNG or JPEG bytes, base64 in JSON)", "a label per image", None)
    rl_train_slots = (
        TrainSlot("logistic_regression"),
        TrainSlot("cnn"),
        TrainSlot("logistic_regression", (("class_weight", "balanced"),)),
    )
    """The pixel-feature model, the CNN, and the pixel-feature model with its classes weighted (what the
    rule policy trains when a class is rare): an RL policy can answer an imbalance too."""

    def generate(self, spec: Any, seed: int) -> Generated:
        import pyarrow as pa

        from mlsandbox.tasks.images.generate import generate_image_classification

        assert isinstance(spec, ImageClassificationDataset)
        data = generate_image_classification(spec, seed)
        manifest = {**data.manifest, "kind": self.name, "target": spec.target}
        return Generated(pa.Table.from_pandas(data.train, preserve_index=False), data.holdout, manifest)

    def profile(self, frame: Any, target: str | None) -> dict[str, Any]:
        from mlsandbox.tasks.images.quality import profile

        image, label, time_column, file_column = _columns(frame, target)
        return profile(frame, image, label, time_column, file_column)

    def prepare(self, frame: Any, strategy: str, target: str | None) -> tuple[Any, dict[str, Any]]:
        from mlsandbox.tasks.images.quality import prepare

        image, label, _, _ = _columns(frame, target)
        step: Any = strategy
        return prepare(frame, step, image_column=image, label_column=label)

    def trainer_args(self, spec: Any) -> list[str]:
        return ["--task", self.fit_task, "--column", spec.image_column]

    def check_algorithm(self, algorithm: str, hyperparams: Mapping[str, object] | None = None) -> None:
        """As the base, and an algorithm that trains with PyTorch is refused where it is not installed."""
        super().check_algorithm(algorithm, hyperparams)
        if algorithm in TORCH_ALGORITHMS and not torch_available():
            raise ValueError(
                f"algorithm {algorithm!r} trains with PyTorch, which is not installed: {INSTALL_TORCH}"
            )

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        from mlsandbox.workloads.image_classifier import evaluate

        return float(evaluate(model, holdout, spec.image_column, spec.target)[self.metric(metric).name])

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """The majority label's figure on the holdout."""
        counts = holdout[spec.target].astype(str).value_counts()
        share = float(counts.iloc[0] / counts.sum())
        if self.metric(metric).name == "accuracy":
            return share
        return 2 * share / (1 + share) / len(counts)

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        image, _, _, _ = _columns(frame, None)
        return [{"label": str(v)} for v in model.predict(frame[[image]])]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        steps: list[str] = []
        if profile.get("unreadable_images") or profile.get("missing_labels"):
            steps.append("drop_unreadable")
        if len(profile.get("image_sizes") or {}) > 1:
            steps.append("resize")
        by_time = profile.get("by_time") or {}
        brightness = by_time.get("brightness_ratio")
        if brightness is not None and abs(float(brightness) - 1) > SHIFTED_BRIGHTNESS:
            steps.append("augment_brightness")
        sharpness = by_time.get("sharpness_ratio")
        if sharpness is not None and float(sharpness) < SHIFTED_SHARPNESS:
            steps.append("augment_blur")
        hyperparams: dict[str, Any] = {}
        if float(profile.get("imbalance_ratio") or 1) > IMBALANCED:
            hyperparams["class_weight"] = "balanced"
        return Policy(tuple(steps), "logistic_regression", hyperparams)


KIND = ImageClassification()

__all__ = ["KIND", "ImageClassification", "ImageClassificationDataset"]
