"""The data-quality profile of a frame: what an engineer would look at before training.

Numbers are plain JSON values: floats rounded to 6 decimal places, ``None`` where a statistic does not
exist (NaN, empty column). Key order is fixed (columns in frame order), so equal frames give equal JSON.

Conventions (shared with :mod:`mlsandbox.data.clean`):

* numeric: non-boolean integer and float columns; std is the sample std (ddof=1);
* quartiles use linear interpolation (numpy/pandas default); a value is an outlier when it is below
  ``Q1 - 1.5 * IQR`` or above ``Q3 + 1.5 * IQR``, computed on the non-missing values;
* top values: the 10 most frequent non-missing values, by count (desc), then value (asc).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

IQR_FACTOR = 1.5
TOP_VALUES = 10
DECIMALS = 6


def simple_dtype(series: pd.Series) -> str:
    """``bool``, ``int``, ``float``, ``datetime`` or ``string`` (everything else: text, categories, mixed
    objects)."""
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        return "datetime"
    if pd.api.types.is_bool_dtype(series.dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(series.dtype):
        return "int"
    if pd.api.types.is_float_dtype(series.dtype):
        return "float"
    return "string"


def is_numeric(series: pd.Series) -> bool:
    return simple_dtype(series) in ("int", "float")


def number(value: Any) -> float | None:
    """A plain float rounded to 6 places, or None for NaN/inf/missing."""
    if value is None or value is pd.NA:
        return None
    x = float(value)
    if not math.isfinite(x):
        return None
    return round(x, DECIMALS) + 0.0


def iqr_fences(values: pd.Series | np.ndarray) -> tuple[float, float] | None:
    """``(Q1 - 1.5 IQR, Q3 + 1.5 IQR)`` of the non-missing values; None when there are none."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return None
    q1, q3 = np.quantile(x, [0.25, 0.75])
    return _fences(q1, q3)


def _fences(q1: float, q3: float) -> tuple[float, float]:
    iqr = q3 - q1
    return float(q1 - IQR_FACTOR * iqr), float(q3 + IQR_FACTOR * iqr)


def outlier_mask(values: pd.Series | np.ndarray) -> np.ndarray:
    """True where a value lies outside the 1.5-IQR fences (missing values are never outliers)."""
    x = np.asarray(values, dtype=np.float64)
    fences = iqr_fences(x)
    if fences is None:
        return np.zeros(x.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return (x < fences[0]) | (x > fences[1])


def check_unique_columns(df: pd.DataFrame) -> None:
    dupes = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if dupes:
        raise ValueError(f"duplicate column names: {dupes}")


def _numeric_stats(series: pd.Series) -> dict[str, Any]:
    x = series.to_numpy(dtype=np.float64, na_value=np.nan)
    present = x[~np.isnan(x)]
    if present.size == 0:
        return dict.fromkeys(("min", "max", "mean", "std", "median", "outliers", "outlier_rate"), None)
    q1, q3 = np.quantile(present, [0.25, 0.75])  # one selection for the quartiles and the fences
    fences = _fences(q1, q3)
    outliers = int(np.count_nonzero((present < fences[0]) | (present > fences[1])))
    return {
        "min": number(present.min()),
        "max": number(present.max()),
        "mean": number(present.mean()),
        "std": number(present.std(ddof=1)) if present.size > 1 else None,
        "median": number(np.median(present)),
        "q1": number(q1),
        "q3": number(q3),
        "iqr_fences": [number(fences[0]), number(fences[1])],
        "outliers": outliers,
        "outlier_rate": number(outliers / present.size),
    }


def _label(value: Any) -> Any:
    """A JSON-friendly value: numpy scalars to Python, integral floats to int."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _value_counts(series: pd.Series) -> list[tuple[Any, int]]:
    counts = series.dropna().value_counts(sort=False)
    pairs = [(_label(v), int(c)) for v, c in counts.items()]
    return sorted(pairs, key=lambda vc: (-vc[1], str(vc[0])))


_PYTHON_TIES = 10_000
"""Tied values beyond this many are ordered by Arrow (as UTF-8 text) instead of one Python sort."""


def _top_counts(series: pd.Series, k: int) -> tuple[int, list[tuple[Any, int]]]:
    """The number of distinct non-missing values and the ``k`` most frequent, ordered as
    :func:`_value_counts` orders them, without sorting every distinct value (ids: a million of them)."""
    counts = series.dropna().value_counts(sort=False)
    distinct = len(counts)
    if distinct > k:
        values = counts.to_numpy()
        threshold = np.partition(values, distinct - k)[distinct - k]  # the k-th largest count
        tied = values == threshold
        need = k - int(np.count_nonzero(values > threshold))
        if int(np.count_nonzero(tied)) > max(_PYTHON_TIES, need):
            above, ties = counts[values > threshold], counts[tied]
            text = pa.array(ties.index.astype(str), type=pa.large_string())
            chosen = pc.select_k_unstable(pa.table({"key": text}), k=need, sort_keys=[("key", "ascending")])
            chosen = chosen.to_numpy()
            ties = ties.iloc[np.sort(chosen)]
            counts = pd.concat([above, ties])
        else:  # the same pairs as above and ties one after the other: the sort below orders them alike
            counts = counts[values >= threshold]
    pairs = sorted(((_label(v), int(c)) for v, c in counts.items()), key=lambda vc: (-vc[1], str(vc[0])))
    return distinct, pairs[:k]


def most_frequent(series: pd.Series) -> Any:
    """The mode of the non-missing values (ties: the smallest as text); None when all are missing."""
    _, pairs = _top_counts(series, 1)
    return pairs[0][0] if pairs else None


def _categorical_stats(series: pd.Series) -> dict[str, Any]:
    distinct, pairs = _top_counts(series, TOP_VALUES)
    return {
        "distinct": distinct,
        "top_values": [{"value": v, "count": c} for v, c in pairs],
    }


def _datetime_stats(series: pd.Series) -> dict[str, Any]:
    """Range and distinct count; timestamps as ISO 8601 text at second resolution, whatever the unit."""
    present = series.dropna()
    if present.empty:
        return {"min": None, "max": None, "distinct": 0}
    seconds = present.astype("datetime64[s]")
    return {
        "min": seconds.min().isoformat(),
        "max": seconds.max().isoformat(),
        "distinct": int(seconds.nunique()),
    }


def profile_column(series: pd.Series, missing: int | None = None) -> dict[str, Any]:
    """One column's statistics (``missing``: its count of missing values, when the caller has it)."""
    rows = len(series)
    if missing is None:
        missing = int(series.isna().sum())
    profile: dict[str, Any] = {
        "dtype": simple_dtype(series),
        "missing": missing,
        "missing_rate": number(missing / rows) if rows else 0.0,
    }
    if is_numeric(series):
        profile.update(_numeric_stats(series))
    elif profile["dtype"] == "datetime":
        profile.update(_datetime_stats(series))
    else:
        profile.update(_categorical_stats(series))
    return profile


def profile_target(series: pd.Series) -> dict[str, Any]:
    pairs = sorted(_value_counts(series), key=lambda vc: str(vc[0]))
    present = sum(c for _, c in pairs)
    minority = min((c for _, c in pairs), default=0)
    return {
        "name": str(series.name),
        "missing": int(series.isna().sum()),
        "classes": {str(v): c for v, c in pairs},
        "minority_share": number(minority / present) if present else None,
    }


def conflicting_rows(df: pd.DataFrame, target: str) -> np.ndarray:
    """A mask of the rows whose features repeat an earlier row's while their label differs from the
    label first seen with those features (conflicting duplicates)."""
    features = [c for c in df.columns if c != target]
    if df.empty or not features:
        return np.zeros(len(df), dtype=bool)
    keys = pd.util.hash_pandas_object(df[features], index=False).to_numpy()
    first = df[target].groupby(keys, sort=False).transform("first")
    return np.asarray((df[target] != first).to_numpy(), dtype=bool)


def profile_frame(df: pd.DataFrame, target: str | None = None) -> dict[str, Any]:
    """Rows, columns, duplicates, per-column quality statistics and, given a target, its class balance and
    the rows whose features repeat an earlier row's with another label (``conflicting_duplicate_rows``)."""
    if target is not None and target not in df.columns:
        raise ValueError(f"target column {target!r} is not in the frame; columns: {list(df.columns)}")
    check_unique_columns(df)
    rows = len(df)
    na = df.isna().to_numpy()  # once for the frame's and the columns' counts
    per_column = na.sum(axis=0) if df.size else np.zeros(len(df.columns), dtype=np.int64)
    return {
        "rows": rows,
        "columns": len(df.columns),
        "duplicate_rows": int(df.duplicated().sum()) if rows else 0,
        "missing_cells": int(per_column.sum()),
        "rows_with_missing": int(na.any(axis=1).sum()) if rows else 0,
        "column_profiles": {
            str(name): profile_column(df.iloc[:, i], int(per_column[i])) for i, name in enumerate(df.columns)
        },
        "target": profile_target(df[target]) if target is not None else None,
        "conflicting_duplicate_rows": int(conflicting_rows(df, target).sum()) if target is not None else None,
    }
