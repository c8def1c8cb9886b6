"""The proxy model the simulator fits on a job's real rows instead of running the trainer.

:func:`fit_proxy` encodes the table as the trainer's pipeline does (numeric columns standardised, missing
numeric values imputed with the training median, categorical columns one-hot encoded, unknown
categories ignored) and fits an L2-regularised logistic regression with a few Newton steps: a couple of
milliseconds for 4,000 rows x 20 columns. It sees the actual rows, so cleaning choices, defects, drift
and label noise move its AUC the way they move the trainer's.

:class:`ProxyModel` is what the simulator registers: a plain Python object with ``predict_proba`` and
``predict`` over a pandas frame (columns by name, extra columns ignored), like the pipeline the trainer
logs. ``noise_sd`` adds a deterministic, seeded perturbation of each row's score (a hash of the row's
encoded values), which lowers its AUC by a calibrated amount: the same row always gets the same score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

L2 = 1.0
"""Ridge penalty (the trainer's LogisticRegression default ``C = 1`` on the same scale)."""
NEWTON_STEPS = 8


Frame: TypeAlias = pa.Table | pd.DataFrame
"""Rows as an Arrow table (what the simulator reads from its object store) or a pandas frame (what the
grading code passes)."""


def as_table(frame: Frame) -> pa.Table:
    if isinstance(frame, pa.Table):
        return frame
    return pa.Table.from_pandas(frame, preserve_index=False)


def is_numeric_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def numeric_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric column as float64 with NaN for missing values."""
    if pa.types.is_boolean(column.type):
        column = pc.cast(column, pa.int8())
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        column = pc.cast(column, pa.float64(), safe=False)
    arr = column.to_numpy(zero_copy_only=False) if isinstance(column, pa.Array) else None
    if arr is None:
        arr = column.to_numpy()
    return np.asarray(arr, dtype=np.float64)


def _strings(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, pa.string())
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = pc.cast(column, pa.string())
    return column


@dataclass
class Encoding:
    """How rows become the proxy's design matrix (fitted on the training rows)."""

    numeric: list[str]
    centres: np.ndarray
    scales: np.ndarray
    fills: np.ndarray
    """Per numeric column: the training median (what a missing value becomes), standardised."""
    lower: np.ndarray
    upper: np.ndarray
    """Per numeric column: the training 1.5-IQR fences, standardised (values beyond are clipped, so
    the proxy is robust to outliers the way tree ensembles are; an algorithm they hurt gets its
    correction from the calibration)."""
    categorical: list[tuple[str, list[str]]]

    @property
    def width(self) -> int:
        return len(self.numeric) + sum(len(c) for _, c in self.categorical)

    def transform(self, frame: Frame) -> np.ndarray:
        table = as_table(frame)
        n = table.num_rows
        names = set(table.column_names)
        out = np.zeros((n, self.width), dtype=np.float64)
        if self.numeric:
            block = np.empty((n, len(self.numeric)), dtype=np.float64)
            for j, name in enumerate(self.numeric):
                block[:, j] = numeric_values(table.column(name)) if name in names else np.nan
            block = (block - self.centres) / self.scales
            missing = np.isnan(block)
            if missing.any():
                block = np.where(missing, self.fills, block)
            block = np.clip(block, self.lower, self.upper)
            out[:, : len(self.numeric)] = block
        col = len(self.numeric)
        for name, cats in self.categorical:
            if name in names and cats:
                idx = pc.index_in(_strings(table.column(name)), value_set=pa.array(cats, pa.string()))
                codes = np.asarray(pc.fill_null(idx, -1).to_numpy(), dtype=np.int64)
                known = codes >= 0
                out[np.flatnonzero(known), col + codes[known]] = 1.0
            col += len(cats)
        return out


def fit_encoding(frame: Frame, max_categories: int = 50) -> Encoding:
    table = as_table(frame)
    numeric = [n for n in table.column_names if is_numeric_type(table.schema.field(n).type)]
    categorical = [n for n in table.column_names if n not in numeric]
    centres, scales, fills, lower, upper = [], [], [], [], []
    for name in numeric:
        x = numeric_values(table.column(name))
        present = x[~np.isnan(x)]
        if present.size == 0:
            centres.append(0.0)
            scales.append(1.0)
            fills.append(0.0)
            lower.append(-np.inf)
            upper.append(np.inf)
            continue
        q1, median, q3 = np.quantile(present, [0.25, 0.5, 0.75])
        lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
        inside = present[(present >= lo) & (present <= hi)] if q3 > q1 else present
        mu = float(inside.mean()) if inside.size else float(median)
        sd = float(inside.std()) if inside.size > 1 else 0.0
        sd = sd or float(present.std()) or 1.0
        centres.append(mu)
        scales.append(sd)
        fills.append((float(median) - mu) / sd)
        lower.append((lo - mu) / sd if q3 > q1 else -np.inf)
        upper.append((hi - mu) / sd if q3 > q1 else np.inf)
    cats = []
    for name in categorical:
        counts = pc.value_counts(_strings(table.column(name)).drop_null())
        values = sorted(str(v) for v in counts.field("values").to_pylist())[:max_categories]
        cats.append((name, values))
    return Encoding(
        numeric, np.array(centres), np.array(scales), np.array(fills), np.array(lower), np.array(upper), cats
    )


def newton_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2, steps: int = NEWTON_STEPS) -> np.ndarray:
    """Weights (intercept last) of an L2-regularised logistic regression (the intercept is not penalised)."""
    n, d = x.shape
    xa = np.empty((n, d + 1))
    xa[:, :d] = x
    xa[:, d] = 1.0
    w = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[d] = 1e-8
    for _ in range(steps):
        eta = np.clip(xa @ w, -30.0, 30.0)
        p = 1.0 / (1.0 + np.exp(-eta))
        grad = xa.T @ (p - y) + penalty * w
        s = p * (1.0 - p)
        hess = (xa * s[:, None]).T @ xa + np.diag(penalty)
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        w -= step
        if float(np.max(np.abs(step))) < 1e-6:
            break
    return w


def auc(y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC with ties counted half (the Mann-Whitney statistic); NaN with one class only."""
    y = np.asarray(y, dtype=bool)
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = pd.Series(scores).rank(method="average").to_numpy()
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def _row_noise(x: np.ndarray, seed: int) -> np.ndarray:
    """A standard normal value per row, a deterministic function of the row's values and ``seed``."""
    rng = np.random.default_rng(seed)
    d = x.shape[1]
    a = rng.normal(size=d) * 12.9898
    b = rng.normal(size=d) * 78.233
    u1 = np.modf(np.abs(np.sin(x @ a + 0.5) * 43758.5453))[0]
    u2 = np.modf(np.abs(np.sin(x @ b + 1.5) * 24634.6345))[0]
    u1 = np.clip(u1, 1e-12, 1.0)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


@dataclass
class ProxyModel:
    """A fitted proxy (see the module docstring): ``predict_proba`` over a frame of feature columns."""

    encoding: Encoding
    weights: np.ndarray
    classes_: np.ndarray
    noise_sd: float = 0.0
    noise_seed: int = 0
    algorithm: str = "proxy"
    feature_names_in_: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))

    def decision_function(self, frame: Frame) -> np.ndarray:
        x = self.encoding.transform(frame)
        eta = x @ self.weights[:-1] + self.weights[-1]
        if self.noise_sd > 0:
            eta = eta + self.noise_sd * _row_noise(x, self.noise_seed)
        return eta

    def predict_proba(self, frame: Frame) -> np.ndarray:
        eta = np.clip(self.decision_function(frame), -30.0, 30.0)
        p1 = 1.0 / (1.0 + np.exp(-eta))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, frame: Frame) -> np.ndarray:
        proba = self.predict_proba(frame)
        return self.classes_[(proba[:, 1] >= 0.5).astype(int)]

    def __repr__(self) -> str:
        return f"ProxyModel({self.algorithm}, width={self.encoding.width}, noise_sd={self.noise_sd:.3f})"


@dataclass
class ProxyFit:
    """A proxy fitted on the training part of a job's rows, and its figures on the validation part."""

    model: ProxyModel
    val_auc: float
    val_accuracy: float
    val_log_loss: float
    val_scores: np.ndarray
    """Logits of the validation rows (before any noise)."""
    val_labels: np.ndarray
    train_rows: int
    val_rows: int


def split_indices(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices: the split the trainer makes (scikit-learn's stratified
    ``train_test_split`` with ``random_state=seed``), so the proxy is scored on the same rows."""
    from sklearn.model_selection import train_test_split

    rows = np.arange(y.size)
    try:
        train, val = train_test_split(rows, test_size=fraction, random_state=seed, stratify=y)
    except ValueError:  # a class too small to stratify: the trainer fails there; split unstratified
        train, val = train_test_split(rows, test_size=fraction, random_state=seed)
    return np.asarray(train), np.asarray(val)


def _labels(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(the sorted classes, a mask of labelled rows) of a target column."""
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
    values = column.drop_null().to_numpy(zero_copy_only=False)
    classes = np.unique(values) if len(values) else np.array([])
    return classes, valid


def fit_proxy(
    frame: Frame, target: str, *, seed: int, validation_fraction: float = 0.2, algorithm: str = "proxy"
) -> ProxyFit:
    """Fit the proxy on ``frame`` (features and ``target``), holding out ``validation_fraction``
    (stratified, seeded). :class:`ValueError` when the target does not have exactly two classes."""
    table = as_table(frame)
    column = table.column(target)
    classes, valid = _labels(column)
    if classes.size != 2:
        raise ValueError(f"the target {target!r} has {classes.size} classes; the proxy needs two")
    if not valid.all():
        table = table.filter(pa.array(valid))
        column = table.column(target)
    y = (np.asarray(column.to_numpy(zero_copy_only=False)) == classes[1]).astype(np.float64)
    features = table.drop_columns([target])
    train_idx, val_idx = split_indices(y, validation_fraction, seed)
    train = features.take(pa.array(train_idx))
    enc = fit_encoding(train)
    x_all = enc.transform(features)
    x_train, x_val = x_all[train_idx], x_all[val_idx]
    w = newton_logistic(x_train, y[train_idx])
    scores = x_val @ w[:-1] + w[-1]
    y_val = y[val_idx]
    p = 1.0 / (1.0 + np.exp(-np.clip(scores, -30, 30)))
    eps = 1e-15
    log_loss = float(-np.mean(y_val * np.log(p + eps) + (1 - y_val) * np.log(1 - p + eps)))
    model = ProxyModel(
        enc,
        w,
        classes,
        algorithm=algorithm,
        feature_names_in_=np.array(features.column_names, dtype=object),
    )
    return ProxyFit(
        model=model,
        val_auc=auc(y_val, scores),
        val_accuracy=float(np.mean((p >= 0.5) == (y_val == 1))),
        val_log_loss=log_loss,
        val_scores=scores,
        val_labels=y_val,
        train_rows=int(train_idx.size),
        val_rows=int(val_idx.size),
    )


def noise_for(scores: np.ndarray, labels: np.ndarray, current_auc: float, target_auc: float) -> float:
    """The standard deviation of score noise that takes a scorer of AUC ``current_auc`` to ``target_auc``
    (binormal approximation over the within-class variance of ``scores``); 0 when the target is not
    lower."""
    if not (math.isfinite(current_auc) and math.isfinite(target_auc)) or target_auc >= current_auc:
        return 0.0
    target_auc = max(target_auc, 0.5005)
    from statistics import NormalDist

    phi_inv = NormalDist().inv_cdf
    a, b = phi_inv(min(current_auc, 0.9999)), phi_inv(target_auc)
    pos, neg = scores[labels == 1], scores[labels == 0]
    if pos.size < 2 or neg.size < 2:
        return 0.0
    v = 0.5 * (float(pos.var()) + float(neg.var()))
    return float(math.sqrt(max(0.0, v * ((a / b) ** 2 - 1.0))))


def feature_summary(frame: Frame, target: str) -> dict[str, float]:
    """What the job models read of the rows (see ``JOB_FEATURES`` in the calibration schema)."""
    table = as_table(frame)
    rows = table.num_rows
    names = [n for n in table.column_names if n != target]
    numeric = [n for n in names if is_numeric_type(table.schema.field(n).type)]
    categorical = [n for n in names if n not in numeric]
    cells = max(1, rows * max(1, len(names)))
    missing = 0
    any_missing = np.zeros(rows, dtype=bool)
    outliers, numeric_cells = 0, 0
    for n in names:
        col = table.column(n)
        if n in numeric:
            x = numeric_values(col)
            na = np.isnan(x)
            present = x[~na]
            numeric_cells += present.size
            if present.size:
                q1, q3 = np.quantile(present, [0.25, 0.75])
                lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
                outliers += int(np.count_nonzero((present < lo) | (present > hi)))
        else:
            na = ~np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        missing += int(na.sum())
        any_missing |= na
    onehot = len(numeric) + sum(pc.count_distinct(table.column(n)).as_py() for n in categorical)
    positive = 0.0
    if target in table.column_names and rows:
        classes, valid = _labels(table.column(target))
        if classes.size:
            y = np.asarray(table.column(target).to_numpy(zero_copy_only=False))
            positive = float(np.mean(y[valid] == classes[-1])) if valid.any() else 0.0
    return {
        "rows": float(rows),
        "log10_rows": math.log10(max(rows, 1)),
        "columns": float(len(names)),
        "numeric_columns": float(len(numeric)),
        "categorical_columns": float(len(categorical)),
        "onehot_width": float(onehot),
        "missing_fraction": missing / cells,
        "rows_with_missing_fraction": float(any_missing.mean()) if rows else 0.0,
        "outlier_fraction": outliers / numeric_cells if numeric_cells else 0.0,
        "positive_rate": positive,
    }


__all__ = [
    "Encoding",
    "ProxyFit",
    "ProxyModel",
    "auc",
    "feature_summary",
    "fit_encoding",
    "fit_proxy",
    "newton_logistic",
    "noise_for",
    "split_indices",
]
