"""Synthetic tabular data: a clean generative model, then defects on the training split.

``generate_tabular(spec, seed)`` draws

* the agent-visible ``train`` frame (with the spec's defects injected),
* a hidden, clean ``holdout`` frame from the same distribution (for grading models),
* a JSON-serialisable ``manifest`` with the ground truth: schema, true signal, every injected defect.

Model: numeric columns ~ Normal(mean, std) (optionally linear-Gaussian on parent columns, see
``NumericColumn.depends_on``), rounded to a precision that follows the std, clipped to their bounds;
categorical columns drawn with the spec's probabilities (uniform by default); boolean columns
Bernoulli(probability); datetimes uniform in their range; ids unique. The linear predictor is
``eta = signal_strength * (sum_j weight_j * z_j + sum_c weight_c[x_c] + sum_b weight_b * x_b)`` with ``z_j``
the standardised latent value of numeric column j. Classification: the target is Bernoulli with
``logit = intercept + eta``, the intercept solved on the training rows so that the expected positive rate
equals ``positive_rate``. Regression: ``y = target_mean + eta + noise_std * e``. Labels come from the clean
features; defects only corrupt features (and, for label noise, labels) afterwards.

Randomness: every draw has its own generator, seeded from ``(seed, dataset name, split, purpose, column)``,
so adding or removing a column leaves the other columns' values (and their defects) unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mlsandbox.data.columns import (
    Split,
    category_probabilities,
    decimals_for,
    draw_split,
)
from mlsandbox.data.defects import OUTLIER_STD_RANGE, Injector, rows_to_lists
from mlsandbox.data.frames import build_table, to_frame
from mlsandbox.data.randomness import (
    SERIAL_BELOW_ROWS,
    check_seed,
    parallel_map,
    rng_for,
    serial_if,
    workers,
)
from mlsandbox.data.spec import (
    BooleanColumn,
    CategoricalColumn,
    DatetimeColumn,
    IdColumn,
    NumericColumn,
    TabularDataset,
)

GENERATOR_VERSION = 2
"""Bumped whenever the same spec and seed would produce different data."""

__all__ = [
    "GENERATOR_VERSION",
    "OUTLIER_STD_RANGE",
    "GeneratedTabular",
    "decimals_for",
    "generate_tabular",
    "roc_auc",
    "solve_intercept",
]


@dataclass(frozen=True, eq=False)
class GeneratedTabular:
    """One generated dataset: what the agent sees, what grades it, and the ground truth.

    The Arrow tables are what gets written (``to_bytes`` takes them directly: no pandas on the way); the
    pandas frames are built from them on first use and hold the same values.
    """

    train_table: pa.Table
    """Agent-visible data with the injected defects; feature columns in spec order, target last."""
    holdout_table: pa.Table
    """Hidden clean data from the same distribution, same columns."""
    manifest: dict[str, Any]
    """JSON-serialisable ground truth (schema, signal, defects with row indices)."""
    _spec: TabularDataset
    _splits: tuple[Split, Split]

    @cached_property
    def train(self) -> pd.DataFrame:
        return to_frame(self._spec, self._splits[0], self.train_table)

    @cached_property
    def holdout(self) -> pd.DataFrame:
        return to_frame(self._spec, self._splits[1], self.holdout_table)


# ------------------------------------------------------------------------------------------ target


_SIGMOID_CHUNK = 1 << 18


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``0.5 * (1 + tanh(x / 2))`` elementwise; large arrays in chunks on the thread pool (numpy releases
    the GIL; every element gets the same operations, so the values do not depend on the chunking)."""
    if x.size < 2 * _SIGMOID_CHUNK:
        return 0.5 * (1.0 + np.tanh(0.5 * x))
    out = np.empty_like(x, dtype=np.float64)

    def chunk(start: int) -> None:
        part = slice(start, start + _SIGMOID_CHUNK)
        out[part] = 0.5 * (1.0 + np.tanh(0.5 * x[part]))

    parallel_map(chunk, range(0, x.size, _SIGMOID_CHUNK))
    return out


def _linear_predictor(spec: TabularDataset, split: Split) -> np.ndarray:
    """The signal without intercept, signal strength applied."""
    eta = np.zeros(split.n)
    for column in spec.columns:
        if isinstance(column, NumericColumn):
            if column.weight != 0.0:
                if column.depends_on or column.min is not None or column.max is not None or column.integer:
                    eta += column.weight * split.latent[column.name]
                else:  # v1: the rounded value, standardised
                    eta += column.weight * ((split.values[column.name] - column.mean) / column.std)
        elif isinstance(column, CategoricalColumn):
            if column.weights is not None and any(w != 0.0 for w in column.weights):
                eta += np.asarray(column.weights, dtype=np.float64)[split.values[column.name]]
        elif isinstance(column, BooleanColumn) and column.weight != 0.0:
            eta += column.weight * split.values[column.name]
    return eta * spec.signal_strength


def solve_intercept(eta: np.ndarray, rate: float, tol: float = 1e-12) -> float:
    """The intercept b with mean(sigmoid(b + eta)) == rate (safeguarded Newton on a sure bracket)."""
    return _solve_intercept(eta, rate, tol)[0]


_WARM_START_STRIDE = 16
"""Large problems first solve on every 16th row: Newton on all rows then starts close to the root and
needs two or three full passes instead of five or six."""


def _solve_intercept(eta: np.ndarray, rate: float, tol: float = 1e-12) -> tuple[float, np.ndarray | None]:
    """``(b, sigmoid(b + eta))``; the probabilities are ``None`` when the last step was a bisection."""
    target = math.log(rate / (1.0 - rate))
    span = float(np.max(np.abs(eta))) if eta.size else 0.0
    lo, hi = target - span - 1.0, target + span + 1.0  # mean < rate at lo, > rate at hi
    if eta.size >= 2 * _SIGMOID_CHUNK:
        b = _solve_intercept(eta[::_WARM_START_STRIDE].copy(), rate, 1e-6)[0]
    else:
        b = target - float(np.mean(eta)) if eta.size else target
    b = min(max(b, lo), hi)
    s: np.ndarray | None = None
    for _ in range(200):
        s = _sigmoid(b + eta)
        f = float(np.mean(s)) - rate
        if abs(f) <= tol:
            break
        if f > 0:
            hi = b
        else:
            lo = b
        slope = float(np.mean(s * (1.0 - s)))
        step = b - f / slope if slope > 0 else math.nan
        b, s = (step if lo < step < hi else 0.5 * (lo + hi)), None
        if hi - lo <= tol:
            break
    return b, s


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """ROC AUC (Mann-Whitney, ties counted half); None when only one class is present."""
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum = float(average_rank[inverse][y].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def _regression_decimals(spec: TabularDataset) -> int:
    return min(12, max(2, 2 - math.floor(math.log10(spec.noise_std))))


# ------------------------------------------------------------------------------------------ manifest


def _schema(spec: TabularDataset) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for column in spec.columns:
        if isinstance(column, NumericColumn):
            entry: dict[str, Any] = {
                "kind": "numeric",
                "dtype": "int" if column.integer else "float",
                "mean": column.mean,
                "std": column.std,
                "decimals": decimals_for(column),
            }
            for key in ("min", "max", "depends_on"):
                if getattr(column, key) is not None:
                    entry[key] = getattr(column, key)
            schema[column.name] = entry
        elif isinstance(column, CategoricalColumn):
            schema[column.name] = {
                "kind": "categorical",
                "dtype": "string",
                "categories": list(column.categories),
                "probabilities": category_probabilities(column).tolist(),
            }
        elif isinstance(column, BooleanColumn):
            schema[column.name] = {"kind": "boolean", "dtype": "bool", "probability": column.probability}
        elif isinstance(column, DatetimeColumn):
            schema[column.name] = {
                "kind": "datetime",
                "dtype": "datetime",
                "start": column.start.isoformat(),
                "end": column.end.isoformat(),
            }
        else:
            assert isinstance(column, IdColumn)
            schema[column.name] = {
                "kind": "id",
                "dtype": "string",
                "prefix": column.prefix,
                "digits": column.digits,
            }
    if spec.task == "classification":
        schema[spec.target] = {"kind": "target", "dtype": "int", "classes": [0, 1]}
    else:
        schema[spec.target] = {"kind": "target", "dtype": "float", "task": "regression"}
    return schema


def _signal(spec: TabularDataset, intercept: float, quality: dict[str, Any]) -> dict[str, Any]:
    numeric = {c.name: c.weight for c in spec.columns if isinstance(c, NumericColumn)}
    categorical = {
        c.name: dict(zip(c.categories, c.weights or [0.0] * len(c.categories), strict=True))
        for c in spec.columns
        if isinstance(c, CategoricalColumn)
    }
    signal: dict[str, Any] = {
        "logit": "intercept + signal_strength * (sum_j weight_j * (x_j - mean_j) / std_j "
        "+ sum_c category_weight_c[x_c])",
        "signal_strength": spec.signal_strength,
        "intercept": intercept,
        "weights": numeric,
        "category_weights": categorical,
    }
    booleans = {c.name: c.weight for c in spec.columns if isinstance(c, BooleanColumn)}
    if booleans:
        signal["boolean_weights"] = booleans
    if spec.task == "regression":
        signal["logit"] = None
        signal["mean"] = (
            "target_mean + signal_strength * (sum_j weight_j * z_j + sum_c category_weight_c[x_c] "
            "+ sum_b weight_b * x_b) + noise_std * e"
        )
        signal["noise_std"] = spec.noise_std
    signal.update(quality)
    return signal


# ------------------------------------------------------------------------------------------ entry point


def _train_labels(spec: TabularDataset, seed: int, eta_train: np.ndarray) -> tuple[float, np.ndarray]:
    """``(intercept or target mean, clean training labels)`` from the training rows' linear predictor."""
    if spec.task == "classification":
        intercept, p_train = _solve_intercept(eta_train, spec.positive_rate)
        if p_train is None:
            p_train = _sigmoid(intercept + eta_train)
        return intercept, rng_for(seed, spec.name, "train", "label").random(spec.rows) < p_train
    return spec.target_mean, _regression_labels(spec, seed, "train", eta_train)


def _regression_labels(spec: TabularDataset, seed: int, split: str, eta: np.ndarray) -> np.ndarray:
    noise = rng_for(seed, spec.name, split, "label").standard_normal(eta.size) * spec.noise_std
    return np.round(spec.target_mean + eta + noise, _regression_decimals(spec)) + 0.0


def _holdout_labels(
    spec: TabularDataset, seed: int, intercept: float, holdout: Split
) -> tuple[np.ndarray, dict[str, Any]]:
    """The holdout labels and the quality figures of the true model on them."""
    eta_holdout = _linear_predictor(spec, holdout)
    if spec.task == "classification":
        p_holdout = _sigmoid(intercept + eta_holdout)
        y_holdout = rng_for(seed, spec.name, "holdout", "label").random(spec.holdout_rows) < p_holdout
        return y_holdout, {"bayes_auc_holdout": roc_auc(y_holdout, p_holdout)}
    y_holdout = _regression_labels(spec, seed, "holdout", eta_holdout)
    mean_holdout = spec.target_mean + eta_holdout
    residual = float(np.mean((y_holdout - mean_holdout) ** 2))
    total = float(np.var(y_holdout))
    r2 = 1.0 - residual / total if total > 0 else None
    return y_holdout, {"bayes_r2_holdout": r2, "bayes_rmse_holdout": math.sqrt(residual)}


def _target_summary(spec: TabularDataset, y_train: np.ndarray, y_holdout: np.ndarray) -> dict[str, Any]:
    if spec.task == "classification":
        return {
            "name": spec.target,
            "positive_rate": spec.positive_rate,
            "positive_rate_train": float(y_train.mean()),
            "positive_rate_holdout": float(y_holdout.mean()),
        }
    return {
        "name": spec.target,
        "task": "regression",
        "mean_train": float(y_train.mean()),
        "std_train": float(y_train.std()),
        "mean_holdout": float(y_holdout.mean()),
    }


def _holdout(
    spec: TabularDataset, seed: int, intercept: float
) -> tuple[Split, pa.Table, np.ndarray, dict[str, Any]]:
    """The clean holdout split, its table, its labels and the true model's quality on it."""
    holdout = draw_split(spec, seed, "holdout", spec.holdout_rows, offset=spec.rows)
    y_holdout, quality = _holdout_labels(spec, seed, intercept, holdout)
    holdout.latent.clear()
    return holdout, build_table(spec, holdout, y_holdout), y_holdout, quality


class _Inline:
    """An executor that runs what it is given at once, on the calling thread (small tables, one CPU)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args))
        return done

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def generate_tabular(spec: TabularDataset, seed: int) -> GeneratedTabular:
    """Generate the training data (with defects), the clean holdout and the ground-truth manifest.

    Deterministic: the same spec and seed give identical tables, frames and manifest.

    Order (the values do not depend on it: every draw has its own generator): the clean training rows;
    their labels on a second thread while the defects are chosen (the labels come from the clean
    features, and the defects need them only for label noise and duplicates); then three things at once:
    the training table, the holdout (it needs only the intercept) and the defect records' row lists (the
    one step that holds the GIL throughout). Tables under :data:`SERIAL_BELOW_ROWS` rows, and any table
    on one CPU, are made on the calling thread, in the same order.
    """
    check_seed(seed)
    small = spec.rows + spec.holdout_rows < SERIAL_BELOW_ROWS or workers() == 1
    with serial_if(small):
        return _generate(spec, seed, _Inline() if small else ThreadPoolExecutor(2, "tabular"))


def _generate(spec: TabularDataset, seed: int, executor: ThreadPoolExecutor | _Inline) -> GeneratedTabular:
    train = draw_split(spec, seed, "train", spec.rows)
    eta_train = _linear_predictor(spec, train)  # from the clean values, before the defects change them
    with executor as pool:
        labelled = pool.submit(_train_labels, spec, seed, eta_train)
        injector = Injector(spec, seed, train, lambda: labelled.result()[1].copy())
        defects = injector.run()
        intercept, y_train_clean = labelled.result()
        y_train = injector.labels
        del eta_train
        train.latent.clear()  # only the values are needed from here on (the frames are built from them)
        held = pool.submit(_holdout, spec, seed, intercept)
        listed = pool.submit(rows_to_lists, defects)
        train_table = build_table(spec, train, y_train)
        holdout, holdout_table, y_holdout, quality = held.result()
        listed.result()
    manifest = {
        "generator": "tabular",
        "generator_version": GENERATOR_VERSION,
        "dataset": spec.name,
        "seed": seed,
        "rows": spec.rows,
        "holdout_rows": spec.holdout_rows,
        "columns": [c.name for c in spec.columns] + [spec.target],
        "schema": _schema(spec),
        "target": _target_summary(spec, y_train_clean, y_holdout),  # before label noise: the true rates
        "signal": _signal(spec, intercept, quality),
        "defects": defects,
    }
    return GeneratedTabular(
        train_table=train_table,
        holdout_table=holdout_table,
        manifest=manifest,
        _spec=spec,
        _splits=(train, holdout),
    )
