"""Simple, deterministic cleaning strategies, each returning the new frame and what it changed.

Every strategy first drops the rows whose target is missing (a row without a label cannot be used to
train or to grade; the target is never filled in), and never changes the target values otherwise.
Feature columns (all but the target):

* ``drop_na``: drop every row with any missing value.
* ``impute_mean`` / ``impute_median``: fill numeric columns with their mean / median (an integer column
  that needs a non-integral fill becomes float) and other columns with their mode (ties: the smallest
  value as text).
* ``clip_outliers``: clip numeric columns to their 1.5-IQR fences (see :mod:`mlsandbox.data.profile`;
  integer columns to the integers inside the fences); missing values stay missing.
* ``drop_conflicting_duplicates``: drop every row whose features repeat an earlier row's with another
  label (the first-seen label stays; exact duplicates are kept). Needs the target.

The input frame is never modified; the result has a fresh 0..n-1 index.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from mlsandbox.data.profile import (
    check_unique_columns,
    conflicting_rows,
    iqr_fences,
    is_numeric,
    most_frequent,
    number,
    simple_dtype,
)

Strategy = Literal["drop_na", "impute_mean", "impute_median", "clip_outliers", "drop_conflicting_duplicates"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)


def _feature_columns(df: pd.DataFrame, target: str | None) -> list[str]:
    return [c for c in df.columns if c != target]


def _drop_missing_target(df: pd.DataFrame, target: str | None) -> pd.DataFrame:
    if target is None:
        return df
    return df.loc[df[target].notna()]


def _drop_conflicting(df: pd.DataFrame, target: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    if target is None:
        raise ValueError("drop_conflicting_duplicates needs the dataset's target column")
    mask = conflicting_rows(df, target)
    return df.loc[~mask], {"conflicting_rows_dropped": int(mask.sum())}


def _drop_na(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    return df.dropna(), {}


def _fill_value(series: pd.Series, strategy: Strategy) -> Any:
    if is_numeric(series):
        x = series.to_numpy(dtype=np.float64, na_value=np.nan)
        x = x[~np.isnan(x)]
        return float(np.mean(x) if strategy == "impute_mean" else np.median(x))
    return most_frequent(series)


def _impute(df: pd.DataFrame, strategy: Strategy, target: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    imputed: dict[str, int] = {}
    fill_values: dict[str, Any] = {}
    skipped: list[str] = []
    out = df.copy()
    for name in _feature_columns(df, target):
        series = out[name]
        missing = int(series.isna().sum())
        if missing == 0:
            continue
        if missing == len(series):
            skipped.append(str(name))
            continue
        value = _fill_value(series, strategy)
        if is_numeric(series):
            integral = simple_dtype(series) == "int" and float(value).is_integer()
            series = series.astype("Int64" if integral else "float64")
            value = int(value) if integral else value
        out[name] = series.fillna(value)
        imputed[str(name)] = missing
        if isinstance(value, pd.Timestamp):
            value_json: Any = value.isoformat()
        else:
            value_json = number(value) if isinstance(value, float) else value
        fill_values[str(name)] = value_json
    return out, {"cells_imputed": imputed, "fill_values": fill_values, "skipped_all_missing": skipped}


def _fences(x: np.ndarray, integer: bool) -> tuple[float, float] | None:
    """The 1.5-IQR fences of a column's values (NaN where missing); an integer column's narrowed to the
    integers inside them."""
    fences = iqr_fences(x)
    if fences is None or not integer:
        return fences
    return float(math.ceil(fences[0])), float(math.floor(fences[1]))


def _clip(df: pd.DataFrame, target: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    clipped: dict[str, int] = {}
    fences_used: dict[str, list[float | None]] = {}
    out = df.copy()
    for name in _feature_columns(df, target):
        series = out[name]
        if not is_numeric(series):
            continue
        x = series.to_numpy(dtype=np.float64, na_value=np.nan)
        fences = _fences(x, simple_dtype(series) == "int")
        if fences is None:
            continue
        lo, hi = fences
        with np.errstate(invalid="ignore"):
            count = int(np.count_nonzero((x < lo) | (x > hi)))  # missing values are never outside
        fences_used[str(name)] = [number(lo), number(hi)]
        if count:
            if simple_dtype(series) == "int":
                out[name] = series.clip(int(lo), int(hi))
            else:
                out[name] = series.clip(lo, hi)
            clipped[str(name)] = count
    return out, {"values_clipped": clipped, "fences": fences_used}


def clean_frame(
    df: pd.DataFrame, strategy: Strategy, target: str | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Apply one cleaning strategy; return the new frame and a JSON-serialisable summary of changes."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown cleaning strategy {strategy!r}: expected one of {list(STRATEGIES)}")
    if target is not None and target not in df.columns:
        raise ValueError(f"target column {target!r} is not in the frame; columns: {list(df.columns)}")
    check_unique_columns(df)
    labelled = _drop_missing_target(df, target)
    if strategy == "drop_na":
        out, details = _drop_na(labelled)
    elif strategy == "clip_outliers":
        out, details = _clip(labelled, target)
    elif strategy == "drop_conflicting_duplicates":
        out, details = _drop_conflicting(labelled, target)
    else:
        out, details = _impute(labelled, strategy, target)
    out = out.reset_index(drop=True)
    summary: dict[str, Any] = {
        "strategy": strategy,
        "target": target,
        "rows_before": len(df),
        "rows_after": len(out),
        "rows_dropped": len(df) - len(out),
        "rows_dropped_missing_target": len(df) - len(labelled),
        "cells_imputed": {},
        "fill_values": {},
        "values_clipped": {},
    }
    summary.update(details)
    return out, summary
