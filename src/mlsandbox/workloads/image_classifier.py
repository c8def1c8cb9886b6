"""Image classification, for real: pixel features and a linear model (scikit-learn), or a small CNN (PyTorch).

The data is a table with one encoded image per row (``image``: PNG or JPEG bytes, or the same bytes in
base64 when they came through JSON) and its ``label``. Algorithms:

* ``logistic_regression``: :class:`ImageFeatures` (a downsampled grey image, colour histograms and
  histograms of gradient orientations per cell) scaled and fed to ``LogisticRegression``; hyperparameters
  are the estimator's own (``C``, ``class_weight``, ...).
* ``cnn``: :class:`ImagePixels` and :class:`SmallCNN`, two convolution blocks and a linear head trained
  with Adam on PyTorch CPU (``epochs``, ``learning_rate``, ``batch_size``, ``channels``, ``weight_decay``,
  ``class_weight``). Training needs PyTorch (the ``rl`` extra); the fitted network keeps its weights as
  numpy arrays and predicts with numpy, so loading and serving it need no PyTorch.

Every image a model reads must decode and have the size of the first one it was fitted on: an unreadable
file or a size mismatch raises a ``ValueError`` naming the row (the pipeline does not hide defects). The
metrics are accuracy and macro-F1. Heavy imports are deferred; it imports nothing from mlsandbox outside
the workloads package, so the trainer job runs it in any image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALGORITHMS = ("logistic_regression", "cnn")
TORCH_ALGORITHMS = frozenset({"cnn"})
"""The algorithms that train with PyTorch (the trainer lets their job import it)."""
INSTALL_TORCH = "pip install 'mlsandbox[rl]'"
"""The install command that brings PyTorch (named when an algorithm needs it and it is missing; the same
as :data:`mlsandbox.workloads.image_models.INSTALL_TORCH`)."""
ESTIMATOR_PARAMETERS: dict[str, frozenset[str]] = {
    "logistic_regression": frozenset(
        ["C", "class_weight", "dual", "fit_intercept", "intercept_scaling", "l1_ratio", "max_iter", "n_jobs",
         "penalty", "random_state", "solver", "tol", "verbose", "warm_start"]
    ),
    "cnn": frozenset(["batch_size", "channels", "class_weight", "epochs", "learning_rate", "random_state",
                      "weight_decay"]),
}  # fmt: skip
"""Each algorithm's estimator parameters (``get_params()``; a unit test holds them equal), as data so
validating an action imports nothing heavy."""
VALIDATION_FRACTION = 0.2


def hyperparameter_problems(algorithm: str, hyperparams: dict[str, Any]) -> list[str]:
    """What is wrong with ``hyperparams`` for ``algorithm`` (empty: nothing)."""
    if algorithm not in ESTIMATOR_PARAMETERS:
        return [f"unknown algorithm {algorithm!r} for image classification; choose one of {list(ALGORITHMS)}"]
    unknown = sorted(set(hyperparams) - ESTIMATOR_PARAMETERS[algorithm])
    if unknown:
        return [
            f"{algorithm} has no parameter(s) {unknown}; its parameters: {sorted(ESTIMATOR_PARAMETERS[algorithm])}"
        ]
    return []


def torch_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------------------------------------------------ pipelines


def make_pipeline(algorithm: str, hyperparams: dict[str, Any], seed: int, column: str = "image") -> Any:
    """The feature step (reading ``column`` of a frame: the model takes rows, as a deployment gets them)
    and the estimator, with ``hyperparams`` set."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from mlsandbox.workloads.image_models import ImageFeatures, ImagePixels, SmallCNN

    if algorithm == "logistic_regression":
        model = LogisticRegression(max_iter=2000, random_state=seed).set_params(**hyperparams)
        return Pipeline([("features", ImageFeatures(column)), ("scale", StandardScaler()), ("model", model)])
    if algorithm == "cnn":
        cnn = SmallCNN(random_state=seed).set_params(**hyperparams)
        return Pipeline([("pixels", ImagePixels(column)), ("model", cnn)])
    raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {list(ALGORITHMS)}")


def macro_f1(actual: Any, predicted: Any) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(list(actual), list(predicted), average="macro", zero_division=0))


def evaluate(model: Any, frame: Any, column: str, label_column: str) -> dict[str, float]:
    """``accuracy`` and ``macro_f1`` of ``model`` on ``frame``."""
    from sklearn.metrics import accuracy_score

    predicted = [str(p) for p in model.predict(frame[[column]])]
    actual = frame[label_column].astype(str).tolist()
    return {"accuracy": float(accuracy_score(actual, predicted)), "macro_f1": macro_f1(actual, predicted)}


@dataclass(frozen=True)
class FitOutcome:
    """A real fit: validation metrics and the fitted pipeline, or how it failed."""

    train_rows: int
    val_rows: int
    metrics: dict[str, float] = field(default_factory=dict)
    model: Any = None
    failure: tuple[str, str] | None = None


def fit(
    frame: Any, algorithm: str, hyperparams: dict[str, Any], seed: int, *, column: str, label_column: str
) -> FitOutcome:
    """:func:`fit_job` in process: an unreadable or mis-sized image is ``invalid_data``, anything else
    the libraries refuse ``invalid_hyperparameter``."""
    rows = len(frame)
    val_rows = round(rows * VALIDATION_FRACTION)
    try:
        metrics, pipeline = fit_job(frame, algorithm, hyperparams, seed, label_column, column, lambda _: None)
    except (KeyError, TypeError, ValueError, ArithmeticError, ImportError) as e:
        message = f"{type(e).__name__}: {e}"
        data = isinstance(e, KeyError) or "image" in str(e)
        return FitOutcome(
            rows - val_rows, val_rows, failure=("invalid_data" if data else "invalid_hyperparameter", message)
        )
    return FitOutcome(rows - val_rows, val_rows, metrics=metrics, model=pipeline)


def fit_job(
    frame: Any,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    target: str,
    column: str | None,
    say: Any = print,
) -> tuple[dict[str, float], Any]:
    """The trainer job's fit: split (stratified), fit and validate (raises the libraries' own errors)."""
    from sklearn.model_selection import train_test_split

    image_column = column or "image"
    if image_column not in frame.columns or target not in frame.columns:
        raise KeyError(f"columns {image_column!r} and {target!r} must be in the data: {list(frame.columns)}")
    if algorithm in TORCH_ALGORITHMS and not torch_available():
        raise ImportError(
            f"algorithm {algorithm!r} trains with PyTorch, which is not installed: {INSTALL_TORCH}"
        )
    train, val = train_test_split(
        frame, test_size=VALIDATION_FRACTION, random_state=seed, stratify=frame[target]
    )
    say(f"fitting {algorithm} on {len(train)} images ({len(val)} held out for validation) ...")
    pipeline = make_pipeline(algorithm, hyperparams, seed, image_column)
    labels = train[target].astype(str).to_numpy()
    if algorithm == "cnn":
        pixels = pipeline.named_steps["pixels"].fit(train[[image_column]])
        pipeline.named_steps["model"].fit(pixels.transform(train[[image_column]]), labels, say=say)
    else:
        pipeline.fit(train[[image_column]], labels)
    metrics = {f"val_{k}": round(v, 6) for k, v in evaluate(pipeline, val, image_column, target).items()}
    return metrics, pipeline


__all__ = [
    "ALGORITHMS",
    "ESTIMATOR_PARAMETERS",
    "INSTALL_TORCH",
    "TORCH_ALGORITHMS",
    "FitOutcome",
    "evaluate",
    "fit",
    "fit_job",
    "hyperparameter_problems",
    "macro_f1",
    "make_pipeline",
    "torch_available",
]
