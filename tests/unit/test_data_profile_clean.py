"""Data-quality profile (exact numbers on a hand-built frame) and cleaning strategies (on written bytes)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from mlsandbox.data import (
    STRATEGIES,
    TabularDataset,
    clean_frame,
    from_bytes,
    generate_tabular,
    iqr_fences,
    outlier_mask,
    profile_frame,
    to_bytes,
)


def hand_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "x": [1.0, 2.0, 3.0, 4.0, 100.0, np.nan, 1.0],
            "n": [5, 5, 6, 7, 8, 9, 5],
            "c": ["a", "b", "a", None, "a", "b", "a"],
            "y": [0, 1, 0, 0, 1, 0, 0],
        }
    )


# ------------------------------------------------------------------------------------------ profile


def test_profile_of_a_hand_built_frame_is_exact() -> None:
    # x present: [1, 2, 3, 4, 100, 1] -> sorted [1, 1, 2, 3, 4, 100]; quartiles at positions 1.25 and 3.75
    q1, q3 = 1.0 + 0.25 * (2.0 - 1.0), 3.0 + 0.75 * (4.0 - 3.0)  # 1.25, 3.75
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)  # -2.5, 7.5
    x = [1.0, 2.0, 3.0, 4.0, 100.0, 1.0]
    mean_x = sum(x) / 6
    std_x = math.sqrt(sum((v - mean_x) ** 2 for v in x) / 5)
    # n: [5, 5, 6, 7, 8, 9, 5] sorted [5, 5, 5, 6, 7, 8, 9]; quartiles at positions 1.5 and 4.5
    n = [5, 5, 6, 7, 8, 9, 5]
    std_n = math.sqrt(sum((v - 45 / 7) ** 2 for v in n) / 6)
    expected = {
        "rows": 7,
        "columns": 4,
        "duplicate_rows": 1,  # the last row repeats the first
        "missing_cells": 2,
        "rows_with_missing": 2,
        "column_profiles": {
            "x": {
                "dtype": "float",
                "missing": 1,
                "missing_rate": round(1 / 7, 6),
                "min": 1.0,
                "max": 100.0,
                "mean": round(mean_x, 6),
                "std": round(std_x, 6),
                "median": 2.5,
                "q1": q1,
                "q3": q3,
                "iqr_fences": [lo, hi],
                "outliers": 1,
                "outlier_rate": round(1 / 6, 6),
            },
            "n": {
                "dtype": "int",
                "missing": 0,
                "missing_rate": 0.0,
                "min": 5.0,
                "max": 9.0,
                "mean": round(45 / 7, 6),
                "std": round(std_n, 6),
                "median": 6.0,
                "q1": 5.0,
                "q3": 7.5,
                "iqr_fences": [1.25, 11.25],
                "outliers": 0,
                "outlier_rate": 0.0,
            },
            "c": {
                "dtype": "string",
                "missing": 1,
                "missing_rate": round(1 / 7, 6),
                "distinct": 2,
                "top_values": [{"value": "a", "count": 4}, {"value": "b", "count": 2}],
            },
            "y": {
                "dtype": "int",
                "missing": 0,
                "missing_rate": 0.0,
                "min": 0.0,
                "max": 1.0,
                "mean": round(2 / 7, 6),
                "std": round(math.sqrt((2 * (5 / 7) ** 2 + 5 * (2 / 7) ** 2) / 6), 6),
                "median": 0.0,
                "q1": 0.0,
                "q3": 0.5,
                "iqr_fences": [-0.75, 1.25],
                "outliers": 0,
                "outlier_rate": 0.0,
            },
        },
        "target": {"name": "y", "missing": 0, "classes": {"0": 5, "1": 2}, "minority_share": round(2 / 7, 6)},
        "conflicting_duplicate_rows": 0,
    }
    profile = profile_frame(hand_frame(), "y")
    assert profile == expected
    assert json.dumps(profile) == json.dumps(expected), "same key order"


def test_profile_is_json_without_nan_for_degenerate_columns() -> None:
    df = pd.DataFrame(
        {"empty": [np.nan, np.nan], "one": [3.0, np.nan], "flag": [True, False], "t": ["u", "v"]}
    )
    profile = profile_frame(df, "t")
    json.dumps(profile, allow_nan=False)
    cols = profile["column_profiles"]
    assert cols["empty"]["mean"] is None and cols["empty"]["outliers"] is None
    assert cols["one"]["std"] is None and cols["one"]["mean"] == 3.0 and cols["one"]["outliers"] == 0
    assert cols["flag"]["dtype"] == "bool" and cols["flag"]["distinct"] == 2
    assert profile["target"]["classes"] == {"u": 1, "v": 1} and profile["target"]["minority_share"] == 0.5


def test_profile_without_target_and_with_a_wrong_one() -> None:
    assert profile_frame(hand_frame())["target"] is None
    with pytest.raises(ValueError, match="target column 'label' is not in the frame"):
        profile_frame(hand_frame(), "label")


def test_fences_and_mask_agree_with_the_profile() -> None:
    df = hand_frame()
    assert iqr_fences(df["x"]) == (-2.5, 7.5)
    assert outlier_mask(df["x"]).tolist() == [False, False, False, False, True, False, False]
    assert iqr_fences(pd.Series([np.nan])) is None


# ------------------------------------------------------------------------------------------ cleaning


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """A defective training table, as read back from the CSV an agent would get."""
    spec = TabularDataset.model_validate(
        {
            "name": "customers",
            "rows": 3000,
            "positive_rate": 0.3,
            "columns": [
                {"type": "numeric", "name": "tenure", "mean": 24, "std": 12, "weight": -1.0},
                {"type": "numeric", "name": "spend", "mean": 70, "std": 25, "weight": 1.0},
                {"type": "numeric", "name": "age", "mean": 45, "std": 14},
                {
                    "type": "categorical",
                    "name": "plan",
                    "categories": ["basic", "premium"],
                    "weights": [0.5, -0.5],
                },
            ],
            "defects": {"missing_rate": 0.1, "outlier_rate": 0.04, "outlier_columns": ["spend", "age"]},
        }
    )
    g = generate_tabular(spec, 21)
    return from_bytes(to_bytes(g.train, "csv"), "csv")


def test_impute_fills_every_gap_and_leaves_the_target(raw: pd.DataFrame) -> None:
    for strategy, stat in (("impute_mean", np.mean), ("impute_median", np.median)):
        out, summary = clean_frame(raw, strategy, "label")
        assert not out.isna().any().any()
        assert len(out) == len(raw) and summary["rows_dropped"] == 0
        pd.testing.assert_series_equal(out["label"], raw["label"])
        assert summary["cells_imputed"] == {name: 300 for name in ("tenure", "spend", "age", "plan")}
        for name in ("tenure", "spend", "age"):
            fill = float(stat(raw[name].dropna()))
            assert summary["fill_values"][name] == round(fill, 6)
            assert (out[name][raw[name].isna()] == fill).all()
            pd.testing.assert_series_equal(out[name][raw[name].notna()], raw[name][raw[name].notna()])
        mode = raw["plan"].value_counts().idxmax()
        assert summary["fill_values"]["plan"] == mode and (out["plan"][raw["plan"].isna()] == mode).all()
        json.dumps(summary, allow_nan=False)


def test_clip_removes_every_outlier_and_nothing_else(raw: pd.DataFrame) -> None:
    before = profile_frame(raw, "label")["column_profiles"]
    out, summary = clean_frame(raw, "clip_outliers", "label")
    after = profile_frame(out, "label")["column_profiles"]
    for name in ("tenure", "spend", "age"):
        assert after[name]["outliers"] == 0
        assert summary["values_clipped"].get(name, 0) == before[name]["outliers"]
        assert summary["fences"][name] == before[name]["iqr_fences"]
        assert after[name]["missing"] == before[name]["missing"]
    assert summary["values_clipped"]["spend"] >= 0.04 * len(raw)
    pd.testing.assert_series_equal(out["label"], raw["label"])
    pd.testing.assert_series_equal(out["plan"], raw["plan"])
    json.dumps(summary, allow_nan=False)


def test_drop_na_keeps_only_complete_rows(raw: pd.DataFrame) -> None:
    out, summary = clean_frame(raw, "drop_na", "label")
    complete = raw.notna().all(axis=1)
    assert len(out) == int(complete.sum()) < len(raw)
    assert summary["rows_dropped"] == len(raw) - len(out) and summary["rows_after"] == len(out)
    assert not out.isna().any().any()
    assert out["label"].tolist() == raw["label"][complete].tolist()
    assert list(out.index) == list(range(len(out)))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rows_without_a_target_are_dropped_by_every_strategy(strategy: str) -> None:
    df = hand_frame().assign(y=[0.0, 1.0, np.nan, 0.0, 1.0, 0.0, 0.0])
    original = df.copy()
    out, summary = clean_frame(df, strategy, "y")  # type: ignore[arg-type]
    assert summary["rows_dropped_missing_target"] == 1
    assert not out["y"].isna().any()
    pd.testing.assert_frame_equal(df, original)  # the input is never modified
    again, summary_again = clean_frame(df, strategy, "y")  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(out, again)
    assert summary == summary_again


def test_impute_keeps_integers_when_it_can_and_skips_empty_columns() -> None:
    df = pd.DataFrame(
        {"n": pd.array([1, 2, None, 9], dtype="Int64"), "empty": [np.nan] * 4, "y": [0, 1, 0, 1]}
    )
    out, summary = clean_frame(df, "impute_median", "y")
    assert out["n"].tolist() == [1, 2, 2, 9] and str(out["n"].dtype) == "Int64"
    assert summary["skipped_all_missing"] == ["empty"] and out["empty"].isna().all()
    out, _ = clean_frame(df, "impute_mean", "y")
    assert out["n"].tolist() == [1.0, 2.0, 4.0, 9.0]


def test_clip_keeps_integer_columns_integer() -> None:
    df = pd.DataFrame({"n": [1, 2, 3, 4, 5, 6, 7, 100], "y": [0, 1] * 4})
    out, summary = clean_frame(df, "clip_outliers", "y")
    assert out["n"].dtype == np.int64 and out["n"].max() == 11  # floor(6.25 + 1.5 * 3.5) = floor(11.5)
    assert summary["values_clipped"] == {"n": 1}


def test_bad_strategy_and_target_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown cleaning strategy 'fix_it'"):
        clean_frame(hand_frame(), "fix_it", "y")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target column 'label' is not in the frame"):
        clean_frame(hand_frame(), "drop_na", "label")


def test_drop_conflicting_duplicates_keeps_the_first_seen_label_and_exact_duplicates() -> None:
    df = pd.DataFrame(
        {
            "a": [1.0, 2.0, 1.0, 2.0, 1.0, 3.0],
            "b": ["x", "y", "x", "y", "x", "z"],
            "y": [1, 0, 0, 0, 1, 1],
        }
    )
    assert profile_frame(df, "y")["conflicting_duplicate_rows"] == 1
    out, summary = clean_frame(df, "drop_conflicting_duplicates", "y")
    assert summary["conflicting_rows_dropped"] == 1
    assert out.to_dict("list") == {
        "a": [1.0, 2.0, 2.0, 1.0, 3.0],
        "b": ["x", "y", "y", "x", "z"],
        "y": [1, 0, 0, 1, 1],
    }
    with pytest.raises(ValueError, match="target"):
        clean_frame(df, "drop_conflicting_duplicates", None)
