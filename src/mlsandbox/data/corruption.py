"""Data corruption as pure functions: each returns the changed data and a ground-truth record.

Inputs are never modified. Randomness comes from ``seed`` only. Records are JSON-serialisable and carry
``fault`` (the function's kind), what was touched (columns, rows, bytes) and the parameters, so a
perturbation engine can apply a fault to a real object and a grader can check the agent found it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from mlsandbox.data.defects import OUTLIER_STD_RANGE
from mlsandbox.data.randomness import check_seed, rng_for


@dataclass(frozen=True)
class Corruption:
    data: Any
    """The changed frame or bytes."""
    record: dict[str, Any]
    """Ground truth: what changed, where and how much."""


def _rows(n: int, rate: float, rng: np.random.Generator, pool: np.ndarray | None = None) -> np.ndarray:
    if not 0 < rate < 1:
        raise ValueError(f"rate must be in (0, 1), got {rate}")
    pool = np.arange(n) if pool is None else pool
    k = min(round(rate * n), pool.size)
    return np.sort(pool[rng.choice(pool.size, k, replace=False)])


def _columns(df: pd.DataFrame, columns: list[str] | None) -> list[str]:
    names = [str(c) for c in df.columns] if columns is None else columns
    unknown = sorted(set(names) - {str(c) for c in df.columns})
    if unknown:
        raise ValueError(f"unknown columns {unknown}; columns: {list(df.columns)}")
    return names


def inject_nulls(df: pd.DataFrame, rate: float, seed: int, columns: list[str] | None = None) -> Corruption:
    """Set ``round(rate * rows)`` present cells of each column to missing (MCAR)."""
    check_seed(seed)
    out = df.copy()
    touched = {}
    for name in _columns(df, columns):
        column = out[name]
        if pd.api.types.is_integer_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
            column = column.astype("Float64" if pd.api.types.is_integer_dtype(column.dtype) else "boolean")
        rows = _rows(
            len(df), rate, rng_for(seed, "fault", "nulls", name), np.flatnonzero(column.notna().to_numpy())
        )
        column = column.copy()
        column.iloc[rows] = None
        out[name] = column
        touched[name] = rows.tolist()
    return Corruption(out, {"fault": "nulls", "rate": rate, "rows": touched})


def inject_outliers(df: pd.DataFrame, rate: float, seed: int, columns: list[str] | None = None) -> Corruption:
    """Replace present values of numeric columns by mean ± U(8, 15) std (far outside 1.5 IQR)."""
    check_seed(seed)
    out = df.copy()
    touched = {}
    numeric = [
        c
        for c in df.columns
        if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
    ]
    for name in _columns(df, columns) if columns is not None else [str(c) for c in numeric]:
        if name not in numeric:
            raise ValueError(f"column {name!r} is not numeric")
        x = np.array(out[name].to_numpy(dtype=np.float64, na_value=np.nan), copy=True)
        rng = rng_for(seed, "fault", "outliers", name)
        rows = _rows(len(df), rate, rng, np.flatnonzero(~np.isnan(x)))
        mean, std = float(np.nanmean(x)), float(np.nanstd(x)) or 1.0
        signs = rng.choice([-1.0, 1.0], size=rows.size)
        x[rows] = mean + signs * rng.uniform(*OUTLIER_STD_RANGE, size=rows.size) * std
        out[name] = x
        touched[name] = rows.tolist()
    return Corruption(out, {"fault": "outliers", "rate": rate, "rows": touched})


def inject_label_noise(df: pd.DataFrame, target: str, rate: float, seed: int) -> Corruption:
    """Move ``rate`` of the labels to another class present in the column."""
    check_seed(seed)
    _columns(df, [target])
    out = df.copy()
    y = out[target]
    classes = sorted(y.dropna().unique().tolist(), key=str)
    if len(classes) < 2:
        raise ValueError(f"target {target!r} has fewer than two classes")
    rng = rng_for(seed, "fault", "label_noise", target)
    rows = _rows(len(df), rate, rng, np.flatnonzero(y.notna().to_numpy()))
    index = {c: i for i, c in enumerate(classes)}
    shift = rng.integers(1, len(classes), size=rows.size)
    new = [
        classes[(index[v] + s) % len(classes)]
        for v, s in zip(y.iloc[rows].tolist(), shift.tolist(), strict=True)
    ]
    y = y.copy()
    y.iloc[rows] = new
    out[target] = y
    return Corruption(out, {"fault": "label_noise", "column": target, "rate": rate, "rows": rows.tolist()})


def inject_drift(
    df: pd.DataFrame, column: str, shift_std: float, seed: int, scale: float = 1.0
) -> Corruption:
    """Covariate shift of a numeric column: ``x -> mean + scale * (x - mean) + shift_std * std``."""
    check_seed(seed)
    _columns(df, [column])
    x = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
    mean, std = float(np.nanmean(x)), float(np.nanstd(x))
    out = df.copy()
    out[column] = mean + scale * (x - mean) + shift_std * std
    record = {
        "fault": "drift",
        "column": column,
        "shift_std": shift_std,
        "scale": scale,
        "mean": mean,
        "std": std,
    }
    return Corruption(out, record)


def change_schema(
    df: pd.DataFrame,
    change: Literal["rename", "drop", "retype"],
    column: str,
    new_name: str | None = None,
    new_type: Literal["string", "float", "int"] = "string",
) -> Corruption:
    """Rename, drop or retype one column (retype to string writes numbers as text)."""
    _columns(df, [column])
    out = df.copy()
    record: dict[str, Any] = {"fault": "schema_change", "change": change, "column": column}
    if change == "rename":
        if not new_name or new_name in df.columns:
            raise ValueError(f"new_name must be a new column name, got {new_name!r}")
        out = out.rename(columns={column: new_name})
        record["new_name"] = new_name
    elif change == "drop":
        out = out.drop(columns=column)
    else:
        old = str(df[column].dtype)
        if new_type == "string":
            out[column] = df[column].astype("str").where(df[column].notna(), None)
        elif new_type == "float":
            out[column] = pd.to_numeric(df[column], errors="coerce").astype("float64")
        else:
            out[column] = pd.to_numeric(df[column], errors="coerce").round().astype("Int64")
        record.update(old_type=old, new_type=new_type)
    return Corruption(out, record)


def corrupt_bytes(data: bytes, seed: int, count: int = 16, skip: int = 0) -> Corruption:
    """Overwrite ``count`` bytes at random offsets at or after ``skip`` with different random values."""
    check_seed(seed)
    if not 0 <= skip < len(data):
        raise ValueError(f"skip must be inside the data (0..{len(data) - 1}), got {skip}")
    rng = rng_for(seed, "fault", "corrupt")
    span = len(data) - skip
    offsets = np.sort(skip + rng.choice(span, min(count, span), replace=False))
    buf = bytearray(data)
    for off in offsets.tolist():
        buf[off] = (buf[off] + int(rng.integers(1, 256))) % 256
    return Corruption(bytes(buf), {"fault": "corrupt_bytes", "offsets": offsets.tolist(), "size": len(data)})


def truncate_bytes(data: bytes, keep_fraction: float) -> Corruption:
    """Keep only the first ``keep_fraction`` of the bytes (an interrupted upload)."""
    if not 0 <= keep_fraction < 1:
        raise ValueError(f"keep_fraction must be in [0, 1), got {keep_fraction}")
    keep = int(len(data) * keep_fraction)
    return Corruption(data[:keep], {"fault": "truncate", "kept_bytes": keep, "original_bytes": len(data)})
