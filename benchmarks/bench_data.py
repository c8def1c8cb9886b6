"""Throughput of the synthetic tabular generator: generate, serialise, profile, clean.

Run: ``.venv/bin/python benchmarks/bench_data.py [rows]`` (default 1,000,000 rows x 20 columns).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from mlsandbox.data.clean import clean_frame
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.profile import profile_frame
from mlsandbox.data.spec import CategoricalColumn, Defects, NumericColumn, TabularDataset
from mlsandbox.data.tabular import generate_tabular


def mixed_spec(rows: int) -> TabularDataset:
    """14 numeric + 6 categorical feature columns (20), with missing values and outliers."""
    numeric = [
        NumericColumn(name=f"x{i}", mean=10.0 * i, std=1.0 + i, weight=(0.5 if i % 3 == 0 else 0.0))
        for i in range(14)
    ]
    categorical = [
        CategoricalColumn(
            name=f"c{i}",
            categories=[f"level_{j}" for j in range(3 + i)],
            weights=[0.2 * j for j in range(3 + i)] if i < 2 else None,
        )
        for i in range(6)
    ]
    return TabularDataset(
        name="bench",
        rows=rows,
        holdout_rows=min(rows, 100_000),
        columns=[*numeric, *categorical],
        positive_rate=0.2,
        defects=Defects(missing_rate=0.1, outlier_rate=0.02),
    )


def timed(label: str, rows: int, fn: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    print(f"{label:<28} {seconds:7.2f} s   {rows / seconds:>12,.0f} rows/s")
    return result


def main(rows: int = 1_000_000) -> None:
    spec = mixed_spec(rows)
    print(f"{rows:,} rows x {len(spec.columns)} feature columns (+ target)")
    start = time.perf_counter()
    generated = timed("generate_tabular", rows, lambda: generate_tabular(spec, seed=1))
    parquet = timed("to_bytes parquet", rows, lambda: to_bytes(generated.train, "parquet"))
    total = time.perf_counter() - start
    print(f"{'generate + parquet bytes':<28} {total:7.2f} s   {rows / total:>12,.0f} rows/s")
    csv = timed("to_bytes csv", rows, lambda: to_bytes(generated.train, "csv"))
    print(f"sizes: parquet {len(parquet) / 1e6:.1f} MB, csv {len(csv) / 1e6:.1f} MB")
    timed("profile_frame", rows, lambda: profile_frame(generated.train, spec.target))
    for strategy in ("drop_na", "impute_median", "clip_outliers"):
        timed(
            f"clean_frame {strategy}", rows, lambda s=strategy: clean_frame(generated.train, s, spec.target)
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
