"""Synthetic tabular classification data: a clean generative model, then defects on the training split.

``generate_tabular(spec, seed)`` draws

* the agent-visible ``train`` frame (with the spec's defects injected),
* a hidden, clean ``holdout`` frame from the same distribution (for grading models),
* a JSON-serialisable ``manifest`` with the ground truth: schema, true signal, every injected defect.

Model: numeric columns ~ Normal(mean, std), rounded to a precision that follows the std; categorical
columns drawn with the spec's probabilities (uniform by default); the target is Bernoulli with
``logit = intercept + signal_strength * (sum_j weight_j * (x_j - mean_j) / std_j + sum_c weight_c[x_c])``,
where the intercept is solved on the training rows so that the expected positive rate equals
``positive_rate``. Labels come from the clean features; defects only corrupt features afterwards.

Randomness: every draw has its own generator, seeded from ``(seed, dataset name, split, purpose, column)``,
so adding or removing a column leaves the other columns' values (and their defects) unchanged.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mlsandbox.data.spec import CategoricalColumn, NumericColumn, TabularDataset

GENERATOR_VERSION = 1
"""Bumped whenever the same spec and seed would produce different data."""

OUTLIER_STD_RANGE = (8.0, 15.0)
"""Outliers sit at mean ± U(8, 15) * std: far beyond the 1.5-IQR fences (about ± 2.7 std)."""

_MISSING_CODE = -1


@dataclass(frozen=True, eq=False)
class GeneratedTabular:
    """One generated dataset: what the agent sees, what grades it, and the ground truth."""

    train: pd.DataFrame
    """Agent-visible data with the injected defects; feature columns in spec order, target last."""
    holdout: pd.DataFrame
    """Hidden clean data from the same distribution, same columns."""
    manifest: dict[str, Any]
    """JSON-serialisable ground truth (schema, signal, defects with row indices)."""


# ------------------------------------------------------------------------------------------ randomness


def _rng(seed: int, *purpose: str) -> np.random.Generator:
    """A generator for one purpose, independent of every other purpose under the same seed."""
    digest = hashlib.blake2b("/".join(purpose).encode(), digest_size=16).digest()
    entropy = [seed, int.from_bytes(digest, "little")]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


# ------------------------------------------------------------------------------------------ features


def decimals_for(column: NumericColumn) -> int:
    """Decimal places a numeric column is rounded to: 2, or more when the std is small (3 digits of std)."""
    return min(12, max(2, 2 - math.floor(math.log10(column.std))))


def _draw_numeric(column: NumericColumn, rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.standard_normal(n) * column.std + column.mean
    return np.round(values, decimals_for(column)) + 0.0  # + 0.0 turns -0.0 into 0.0


def _category_probabilities(column: CategoricalColumn) -> np.ndarray:
    if column.probabilities is None:
        return np.full(len(column.categories), 1.0 / len(column.categories))
    p = np.asarray(column.probabilities, dtype=np.float64)
    return p / p.sum()


def _draw_codes(column: CategoricalColumn, rng: np.random.Generator, n: int) -> np.ndarray:
    cdf = np.cumsum(_category_probabilities(column))
    codes = np.searchsorted(cdf, rng.random(n), side="right")
    return np.minimum(codes, len(column.categories) - 1).astype(np.int32)


def _draw_features(spec: TabularDataset, seed: int, split: str, n: int) -> dict[str, np.ndarray]:
    """Clean feature arrays by column name: float64 values, or int32 category codes."""
    features: dict[str, np.ndarray] = {}
    for column in spec.columns:
        rng = _rng(seed, spec.name, split, "feature", column.name)
        if isinstance(column, NumericColumn):
            features[column.name] = _draw_numeric(column, rng, n)
        else:
            features[column.name] = _draw_codes(column, rng, n)
    return features


# ------------------------------------------------------------------------------------------ target


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _linear_predictor(spec: TabularDataset, features: dict[str, np.ndarray], n: int) -> np.ndarray:
    """The log-odds without the intercept, signal strength applied."""
    eta = np.zeros(n)
    for column in spec.columns:
        if isinstance(column, NumericColumn):
            if column.weight != 0.0:
                eta += column.weight * ((features[column.name] - column.mean) / column.std)
        elif column.weights is not None and any(w != 0.0 for w in column.weights):
            eta += np.asarray(column.weights, dtype=np.float64)[features[column.name]]
    return eta * spec.signal_strength


def solve_intercept(eta: np.ndarray, rate: float, tol: float = 1e-12) -> float:
    """The intercept b with mean(sigmoid(b + eta)) == rate (safeguarded Newton on a sure bracket)."""
    target = math.log(rate / (1.0 - rate))
    span = float(np.max(np.abs(eta))) if eta.size else 0.0
    lo, hi = target - span - 1.0, target + span + 1.0  # mean < rate at lo, > rate at hi
    b = target - float(np.mean(eta)) if eta.size else target
    b = min(max(b, lo), hi)
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
        b = step if lo < step < hi else 0.5 * (lo + hi)
        if hi - lo <= tol:
            break
    return b


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


# ------------------------------------------------------------------------------------------ defects


def _count(rate: float, rows: int) -> int:
    return round(rate * rows)


def _inject_missing(spec: TabularDataset, seed: int, features: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    rate = spec.defects.missing_rate
    records = []
    for name in spec.missing_columns():
        values = features[name]
        rng = _rng(seed, spec.name, "train", "missing", name)
        rows = np.sort(rng.choice(values.size, _count(rate, values.size), replace=False))
        values[rows] = _MISSING_CODE if values.dtype.kind == "i" else np.nan
        records.append(_defect_record(name, "missing", rate, rows))
    return records


def _inject_outliers(
    spec: TabularDataset, seed: int, features: dict[str, np.ndarray]
) -> list[dict[str, Any]]:
    rate = spec.defects.outlier_rate
    by_name = {c.name: c for c in spec.columns if isinstance(c, NumericColumn)}
    records = []
    for name in spec.outlier_columns():
        column, values = by_name[name], features[name]
        rng = _rng(seed, spec.name, "train", "outlier", name)
        present = np.flatnonzero(~np.isnan(values))
        k = min(_count(rate, values.size), present.size)
        rows = np.sort(present[rng.choice(present.size, k, replace=False)])
        signs = np.where(np.arange(k) < k // 2, -1.0, 1.0)
        rng.shuffle(signs)
        magnitude = rng.uniform(*OUTLIER_STD_RANGE, size=k)
        values[rows] = np.round(column.mean + signs * magnitude * column.std, decimals_for(column)) + 0.0
        records.append(_defect_record(name, "outlier", rate, rows))
    return records


def _defect_record(column: str, kind: str, rate: float, rows: np.ndarray) -> dict[str, Any]:
    return {"column": column, "kind": kind, "rate": rate, "count": int(rows.size), "rows": rows.tolist()}


# ------------------------------------------------------------------------------------------ frames


def _string_column(categories: list[str], codes: np.ndarray) -> pd.Series:
    """Category codes (-1: missing) as a pandas string column, decoded by Arrow without Python objects."""
    missing = codes == _MISSING_CODE
    indices = pa.array(codes, type=pa.int32(), mask=missing if missing.any() else None)
    decoded = pa.DictionaryArray.from_arrays(indices, pa.array(categories, type=pa.string())).cast(
        pa.string()
    )
    return decoded.to_pandas()


def _frame(spec: TabularDataset, features: dict[str, np.ndarray], labels: np.ndarray) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for column in spec.columns:
        values = features[column.name]
        if isinstance(column, CategoricalColumn):
            data[column.name] = _string_column(column.categories, values)
        else:
            data[column.name] = values
    data[spec.target] = labels.astype(np.int64)
    return pd.DataFrame(data)


# ------------------------------------------------------------------------------------------ manifest


def _schema(spec: TabularDataset) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for column in spec.columns:
        if isinstance(column, NumericColumn):
            schema[column.name] = {
                "kind": "numeric",
                "dtype": "float",
                "mean": column.mean,
                "std": column.std,
                "decimals": decimals_for(column),
            }
        else:
            schema[column.name] = {
                "kind": "categorical",
                "dtype": "string",
                "categories": list(column.categories),
                "probabilities": _category_probabilities(column).tolist(),
            }
    schema[spec.target] = {"kind": "target", "dtype": "int", "classes": [0, 1]}
    return schema


def _signal(spec: TabularDataset, intercept: float, bayes_auc: float | None) -> dict[str, Any]:
    numeric = {c.name: c.weight for c in spec.columns if isinstance(c, NumericColumn)}
    categorical = {
        c.name: dict(zip(c.categories, c.weights or [0.0] * len(c.categories), strict=True))
        for c in spec.columns
        if isinstance(c, CategoricalColumn)
    }
    return {
        "logit": "intercept + signal_strength * (sum_j weight_j * (x_j - mean_j) / std_j "
        "+ sum_c category_weight_c[x_c])",
        "signal_strength": spec.signal_strength,
        "intercept": intercept,
        "weights": numeric,
        "category_weights": categorical,
        "bayes_auc_holdout": bayes_auc,
    }


# ------------------------------------------------------------------------------------------ entry point


def generate_tabular(spec: TabularDataset, seed: int) -> GeneratedTabular:
    """Generate the training data (with defects), the clean holdout and the ground-truth manifest.

    Deterministic: the same spec and seed give identical frames and manifest.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    train = _draw_features(spec, seed, "train", spec.rows)
    holdout = _draw_features(spec, seed, "holdout", spec.holdout_rows)

    eta_train = _linear_predictor(spec, train, spec.rows)
    eta_holdout = _linear_predictor(spec, holdout, spec.holdout_rows)
    intercept = solve_intercept(eta_train, spec.positive_rate)
    p_train = _sigmoid(intercept + eta_train)
    p_holdout = _sigmoid(intercept + eta_holdout)
    y_train = _rng(seed, spec.name, "train", "label").random(spec.rows) < p_train
    y_holdout = _rng(seed, spec.name, "holdout", "label").random(spec.holdout_rows) < p_holdout

    defects = _inject_missing(spec, seed, train) + _inject_outliers(spec, seed, train)
    manifest = {
        "generator": "tabular",
        "generator_version": GENERATOR_VERSION,
        "dataset": spec.name,
        "seed": seed,
        "rows": spec.rows,
        "holdout_rows": spec.holdout_rows,
        "columns": [c.name for c in spec.columns] + [spec.target],
        "schema": _schema(spec),
        "target": {
            "name": spec.target,
            "positive_rate": spec.positive_rate,
            "positive_rate_train": float(y_train.mean()),
            "positive_rate_holdout": float(y_holdout.mean()),
        },
        "signal": _signal(spec, intercept, roc_auc(y_holdout, p_holdout)),
        "defects": defects,
    }
    return GeneratedTabular(
        train=_frame(spec, train, y_train),
        holdout=_frame(spec, holdout, y_holdout),
        manifest=manifest,
    )
