"""Data corruption: pure functions, exact ground truth, visible in the written data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mlsandbox.data import (
    TabularDataset,
    change_schema,
    corrupt_bytes,
    from_bytes,
    generate_tabular,
    inject_drift,
    inject_label_noise,
    inject_nulls,
    inject_outliers,
    ks_statistic,
    profile_frame,
    to_bytes,
    truncate_bytes,
)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    spec = TabularDataset.model_validate(
        {
            "name": "f",
            "rows": 2000,
            "columns": [
                {"type": "numeric", "name": "x", "mean": 10, "std": 2, "weight": 1},
                {"type": "numeric", "name": "n", "mean": 5, "std": 2, "integer": True, "min": 0},
                {"type": "categorical", "name": "c", "categories": ["a", "b"]},
            ],
        }
    )
    return generate_tabular(spec, 1).train


def test_nulls_at_the_rate_in_the_written_file(frame: pd.DataFrame) -> None:
    original = frame.copy()
    result = inject_nulls(frame, 0.1, seed=3, columns=["x", "n", "c"])
    pd.testing.assert_frame_equal(frame, original)  # the input is untouched
    back = from_bytes(to_bytes(result.data, "parquet"), "parquet")
    for name in ("x", "n", "c"):
        assert np.flatnonzero(back[name].isna().to_numpy()).tolist() == result.record["rows"][name]
        assert len(result.record["rows"][name]) == 200


def test_outliers_land_beyond_the_fences(frame: pd.DataFrame) -> None:
    result = inject_outliers(frame, 0.05, seed=1, columns=["x"])
    back = from_bytes(to_bytes(result.data, "csv"), "csv")
    lo, hi = profile_frame(back)["column_profiles"]["x"]["iqr_fences"]
    x = back["x"].to_numpy()[result.record["rows"]["x"]]
    assert ((x < lo) | (x > hi)).all() and len(x) == 100


def test_label_noise_flips_exactly_the_recorded_rows(frame: pd.DataFrame) -> None:
    result = inject_label_noise(frame, "label", 0.1, seed=2)
    changed = np.flatnonzero(result.data["label"].to_numpy() != frame["label"].to_numpy())
    assert changed.tolist() == result.record["rows"] and changed.size == 200


def test_drift_moves_the_distribution(frame: pd.DataFrame) -> None:
    result = inject_drift(frame, "x", shift_std=1.0, seed=0)
    assert ks_statistic(frame["x"].to_numpy(), result.data["x"].to_numpy()) > 0.3
    assert result.record["shift_std"] == 1.0


def test_schema_changes(frame: pd.DataFrame) -> None:
    renamed = change_schema(frame, "rename", "x", new_name="x_renamed").data
    assert "x_renamed" in renamed.columns and "x" not in renamed.columns
    assert "c" not in change_schema(frame, "drop", "c").data.columns
    retyped = change_schema(frame, "retype", "n", new_type="string")
    back = from_bytes(to_bytes(retyped.data, "parquet"), "parquet")
    assert (
        pa.types.is_string(pa.array(back["n"]).type)
        or back["n"].dtype == object
        or str(back["n"].dtype) == "str"
    )
    assert retyped.record == {
        "fault": "schema_change",
        "change": "retype",
        "column": "n",
        "old_type": "int64",
        "new_type": "string",
    }
    with pytest.raises(ValueError, match="unknown columns \\['zz'\\]"):
        change_schema(frame, "drop", "zz")


def test_corrupt_and_truncated_files_fail_to_read(frame: pd.DataFrame) -> None:
    data = to_bytes(frame, "parquet")
    truncated = truncate_bytes(data, 0.5)
    assert len(truncated.data) == len(data) // 2
    with pytest.raises(Exception):  # noqa: B017 - any reader error: the agent sees it as unreadable data
        from_bytes(truncated.data, "parquet")
    corrupted = corrupt_bytes(data, seed=1, count=64, skip=len(data) - 200)
    assert sum(a != b for a, b in zip(corrupted.data, data, strict=True)) == 64
    assert corrupted.record["offsets"] == sorted(corrupted.record["offsets"])
    assert corrupt_bytes(data, seed=1, count=64).data == corrupt_bytes(data, seed=1, count=64).data
