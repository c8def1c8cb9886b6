"""Profile additions: datetimes, and top values of high-cardinality columns without a full sort."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from mlsandbox.data import clean_frame, profile_frame
from mlsandbox.data.profile import _value_counts


def test_top_values_of_many_ties_match_the_full_ordering() -> None:
    rng = np.random.default_rng(0)
    ids = pd.Series([f"id{v}" for v in rng.permutation(30_000)] + ["id5"] * 3 + [None], dtype="str")
    top = profile_frame(pd.DataFrame({"c": ids}))["column_profiles"]["c"]
    expected = _value_counts(ids)
    assert top["distinct"] == len(expected) == 30_000
    assert [(d["value"], d["count"]) for d in top["top_values"]] == expected[:10]


def test_datetime_columns_are_profiled_and_imputed_as_json() -> None:
    df = pd.DataFrame(
        {
            "t": pd.to_datetime(["2024-01-02 03:04:05", None, "2024-01-01 00:00:00", "2024-01-01 00:00:00"]),
            "y": [0, 1, 0, 1],
        }
    )
    profile = profile_frame(df, "y")["column_profiles"]["t"]
    assert profile == {
        "dtype": "datetime",
        "missing": 1,
        "missing_rate": 0.25,
        "min": "2024-01-01T00:00:00",
        "max": "2024-01-02T03:04:05",
        "distinct": 2,
    }
    out, summary = clean_frame(df, "impute_median", "y")
    assert out["t"].isna().sum() == 0 and summary["fill_values"]["t"] == "2024-01-01T00:00:00"
    json.dumps(summary, allow_nan=False)
