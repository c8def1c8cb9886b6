"""Throughput of the synthetic data engine; figures printed and saved to ``.bench/data.json``.

Run: ``.venv/bin/python benchmarks/bench_data.py [rows]`` (default 1,000,000 rows x 20 feature columns).

* end to end: spec -> generated Arrow table (with defects) -> Parquet bytes, in rows/s (wall and CPU);
* the stages apart: generation, Parquet, CSV, the pandas frame, profile and cleaning (v1 API);
* the other formats (Avro, JSON Lines, dirty Excel) on a smaller slice;
* SDV GaussianCopula, when the optional ``sdv`` extra is installed: fitted on a seed slice of the same
  data, then sampling the same number of rows and writing them to Parquet; the ratio is ours / SDV.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlsandbox.data.clean import clean_frame
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.profile import profile_frame
from mlsandbox.data.spec import TabularDataset
from mlsandbox.data.tabular import generate_tabular

OUT = Path(__file__).resolve().parents[1] / ".bench" / "data.json"
SDV_SEED_ROWS = 5_000
SDV_MAX_ROWS = 200_000
OTHER_FORMAT_ROWS = 20_000


def mixed_spec(rows: int) -> TabularDataset:
    """20 feature columns: 11 numeric (bounded, integer, dependent), 5 categorical, 2 boolean, a datetime
    and an id; 10% missing values and 2% outliers (the v1 defects, on every column)."""
    numeric: list[dict[str, Any]] = [
        {
            "type": "numeric",
            "name": f"x{i}",
            "mean": 10.0 * i,
            "std": 1.0 + i,
            "weight": 0.5 if i % 3 == 0 else 0.0,
        }
        for i in range(8)
    ]
    numeric += [
        {
            "type": "numeric",
            "name": "tenure",
            "mean": 24,
            "std": 12,
            "min": 0,
            "integer": True,
            "weight": -0.8,
        },
        {"type": "numeric", "name": "calls", "mean": 2, "std": 1.5, "min": 0, "integer": True, "weight": 0.6},
        {"type": "numeric", "name": "spend", "mean": 70, "std": 25, "min": 0, "depends_on": {"tenure": 0.5}},
    ]
    categorical = [
        {
            "type": "categorical",
            "name": f"c{i}",
            "categories": [f"level_{j}" for j in range(3 + i)],
            **({"weights": [0.2 * j for j in range(3 + i)]} if i < 2 else {}),
        }
        for i in range(5)
    ]
    others = [
        {"type": "boolean", "name": "member", "probability": 0.3, "weight": 0.5},
        {"type": "boolean", "name": "promo", "probability": 0.1},
        {"type": "datetime", "name": "signup"},
        {"type": "id", "name": "customer_id", "prefix": "C", "digits": 9},
    ]
    return TabularDataset.model_validate(
        {
            "name": "bench",
            "rows": rows,
            "holdout_rows": min(rows, 100_000),
            "columns": [*numeric, *categorical, *others],
            "positive_rate": 0.2,
            "defects": {"missing_rate": 0.1, "outlier_rate": 0.02},
        }
    )


def timed(label: str, rows: int, fn: Callable[[], Any], results: dict[str, Any]) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    results[label] = {
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "rows_per_s": round(rows / wall),
    }
    print(f"{label:<34} {wall:7.2f} s  (cpu {cpu:6.2f} s) {rows / wall:>13,.0f} rows/s")
    return value


def _sdv(
    spec: TabularDataset, seed_frame: Any, rows: int, ours_rows_per_s: float, results: dict[str, Any]
) -> None:
    from mlsandbox.data.sdv_synth import fit_gaussian_copula

    n = min(rows, SDV_MAX_ROWS)
    synthesizer = timed(
        f"sdv fit ({len(seed_frame):,} seed rows)",
        len(seed_frame),
        lambda: fit_gaussian_copula(seed_frame),
        results,
    )

    def sample_and_write() -> bytes:
        sample = synthesizer.sample(num_rows=n)
        frame = next(iter(sample.values())) if isinstance(sample, dict) else sample
        return to_bytes(frame, "parquet")

    timed("sdv sample + parquet", n, sample_and_write, results)
    sdv_rate = results["sdv sample + parquet"]["rows_per_s"]
    results["ratio_ours_to_sdv"] = round(ours_rows_per_s / sdv_rate, 1)
    print(f"{'ours / SDV GaussianCopula':<34} {results['ratio_ours_to_sdv']:7.1f} x  (SDV at {n:,} rows)")


def main(rows: int = 1_000_000) -> dict[str, Any]:
    spec = mixed_spec(rows)
    results: dict[str, Any] = {
        "rows": rows,
        "feature_columns": len(spec.columns),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(
        f"{rows:,} rows x {len(spec.columns)} feature columns (+ target); load average {results['load_average_1m']}"
    )
    generate_tabular(mixed_spec(1000), seed=0)  # warm imports and thread pool

    def end_to_end() -> bytes:
        return to_bytes(generate_tabular(spec, seed=1).train_table, "parquet")

    timed("end to end: generate + parquet", rows, end_to_end, results)
    generated = timed(
        "generate_tabular (arrow tables)", rows, lambda: generate_tabular(spec, seed=1), results
    )
    parquet = timed(
        "to_bytes parquet (from table)", rows, lambda: to_bytes(generated.train_table, "parquet"), results
    )
    csv = timed("to_bytes csv (from table)", rows, lambda: to_bytes(generated.train_table, "csv"), results)
    frame = timed("pandas frame (GeneratedTabular.train)", rows, lambda: generated.train, results)
    results["parquet_mb"], results["csv_mb"] = round(len(parquet) / 1e6, 1), round(len(csv) / 1e6, 1)
    print(f"sizes: parquet {results['parquet_mb']} MB, csv {results['csv_mb']} MB")
    timed("profile_frame", rows, lambda: profile_frame(frame, spec.target), results)
    timed(
        "clean_frame impute_median", rows, lambda: clean_frame(frame, "impute_median", spec.target), results
    )
    small = generate_tabular(mixed_spec(OTHER_FORMAT_ROWS), seed=1).train_table
    for fmt in ("avro", "jsonl", "excel"):
        timed(
            f"to_bytes {fmt} ({OTHER_FORMAT_ROWS:,} rows)",
            OTHER_FORMAT_ROWS,
            lambda f=fmt: to_bytes(small, f),
            results,
        )  # type: ignore[misc]
    ours = results["end to end: generate + parquet"]["rows_per_s"]
    if importlib.util.find_spec("sdv") is not None:
        _sdv(spec, frame.head(SDV_SEED_ROWS), rows, ours, results)
    else:
        results["sdv"] = "not installed (pip install 'mlsandbox[sdv]')"
        print("SDV: not installed; install the 'sdv' extra for the side-by-side figure")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {OUT}")
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
