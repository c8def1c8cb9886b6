"""Drift statistics between two samples of a column: two-sample KS and PSI (numpy only).

* ``ks_statistic``: the largest gap between the two empirical CDFs (0: same sample, 1: disjoint).
* ``psi``: population stability index over the reference's decile bins (numeric) or the categories
  (text); ``sum((a - e) * ln(a / e))`` with shares floored at 1e-4. Rules of thumb: < 0.1 stable,
  0.1-0.25 moderate, > 0.25 significant drift.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

_FLOOR = 1e-4


def ks_statistic(reference: np.ndarray, current: np.ndarray) -> float | None:
    a = np.sort(np.asarray(reference, dtype=np.float64))
    b = np.sort(np.asarray(current, dtype=np.float64))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if a.size == 0 or b.size == 0:
        return None
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / a.size
    cdf_b = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _psi(expected: np.ndarray, actual: np.ndarray) -> float:
    e = np.maximum(expected / max(expected.sum(), 1), _FLOOR)
    a = np.maximum(actual / max(actual.sum(), 1), _FLOOR)
    return float(np.sum((a - e) * np.log(a / e)))


def psi_numeric(reference: np.ndarray, current: np.ndarray, bins: int = 10) -> float | None:
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(current, dtype=np.float64)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if a.size == 0 or b.size == 0:
        return None
    edges = np.unique(np.quantile(a, np.linspace(0, 1, bins + 1)[1:-1]))
    return _psi(
        np.bincount(np.searchsorted(edges, a, side="right"), minlength=edges.size + 1).astype(float),
        np.bincount(np.searchsorted(edges, b, side="right"), minlength=edges.size + 1).astype(float),
    )


def psi_categorical(reference: pd.Series, current: pd.Series) -> float | None:
    a, b = reference.dropna().astype(str), current.dropna().astype(str)
    if a.empty or b.empty:
        return None
    levels = sorted(set(a.unique()) | set(b.unique()))
    ca = a.value_counts().reindex(levels, fill_value=0).to_numpy(dtype=float)
    cb = b.value_counts().reindex(levels, fill_value=0).to_numpy(dtype=float)
    return _psi(ca, cb)


def column_drift(reference: pd.DataFrame, current: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """KS (numeric) and PSI per column present in both frames, in the reference's column order."""
    out: dict[str, dict[str, Any]] = {}
    for name in reference.columns:
        if name not in current.columns:
            continue
        a, b = reference[name], current[name]
        numeric = all(
            pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype) for s in (a, b)
        )
        if numeric:
            x, y = (
                a.to_numpy(dtype=np.float64, na_value=np.nan),
                b.to_numpy(dtype=np.float64, na_value=np.nan),
            )
            stats = {"kind": "numeric", "ks": ks_statistic(x, y), "psi": psi_numeric(x, y)}
        else:
            stats = {"kind": "categorical", "ks": None, "psi": psi_categorical(a, b)}
        out[str(name)] = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in stats.items()}
    return out
