"""Synthetic tabular data: specs, generation, defects and formats, measured on the bytes actually written."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from mlsandbox.data import (
    CategoricalColumn,
    Defects,
    NumericColumn,
    TabularDataset,
    format_of,
    from_bytes,
    generate_tabular,
    profile_frame,
    roc_auc,
    to_bytes,
)
from mlsandbox.data.tabular import solve_intercept

FORMATS = ["csv", "parquet"]


def customers(**overrides: object) -> TabularDataset:
    """The dataset of the tabular-quality-basic scenario (with overrides)."""
    spec: dict[str, object] = {
        "name": "customers",
        "rows": 4000,
        "holdout_rows": 2000,
        "target": "label",
        "positive_rate": 0.3,
        "signal_strength": 1.0,
        "columns": [
            {"type": "numeric", "name": "tenure_months", "mean": 24, "std": 12, "weight": -1.2},
            {"type": "numeric", "name": "monthly_spend", "mean": 70, "std": 25, "weight": 0.9},
            {"type": "numeric", "name": "support_calls", "mean": 2, "std": 1.5, "weight": 1.1},
            {"type": "numeric", "name": "age", "mean": 45, "std": 14, "weight": 0.0},
            {"type": "numeric", "name": "discount_pct", "mean": 10, "std": 5, "weight": -0.4},
            {
                "type": "categorical",
                "name": "plan",
                "categories": ["basic", "standard", "premium"],
                "weights": [0.6, 0.0, -0.6],
            },
            {"type": "categorical", "name": "region", "categories": ["north", "south", "east", "west"]},
        ],
        "defects": {
            "missing_rate": 0.12,
            "missing_columns": ["tenure_months", "monthly_spend", "support_calls", "plan"],
            "outlier_rate": 0.03,
            "outlier_columns": ["monthly_spend", "support_calls"],
        },
    }
    spec.update(overrides)
    return TabularDataset.model_validate(spec)


def written(df: pd.DataFrame, fmt: str) -> pd.DataFrame:
    return from_bytes(to_bytes(df, fmt), fmt)  # type: ignore[arg-type]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ spec


def _error(**overrides: object) -> str:
    with pytest.raises(ValidationError) as e:
        customers(**overrides)
    return str(e.value)


def test_duplicate_columns_are_named() -> None:
    cols = [
        {"type": "numeric", "name": "a"},
        {"type": "numeric", "name": "b"},
        {"type": "numeric", "name": "a"},
    ]
    assert "duplicate column names: ['a']" in _error(columns=cols, defects={})


def test_unknown_defect_columns_are_named() -> None:
    msg = _error(defects={"missing_rate": 0.1, "missing_columns": ["age", "nope", "zzz"]})
    assert "defects.missing_columns names unknown or non-numeric columns: ['nope', 'zzz']" in msg


def test_outliers_on_a_categorical_column_are_rejected() -> None:
    msg = _error(defects={"outlier_rate": 0.1, "outlier_columns": ["plan"]})
    assert "defects.outlier_columns names unknown or non-numeric columns: ['plan']" in msg


def test_target_must_not_be_a_feature() -> None:
    assert "target 'age' must not also be a feature column" in _error(target="age")


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ({"type": "numeric", "name": "Bad-Name"}, "columns.0.numeric.name"),
        ({"type": "categorical", "name": "c", "categories": ["a", "a", "b"]}, "duplicate categories: ['a']"),
        ({"type": "categorical", "name": "c", "categories": ["a", "NA"]}, "would be read back as missing"),
        ({"type": "categorical", "name": "c", "categories": ["a", "b"], "weights": [1.0]}, "weights has 1"),
        (
            {"type": "categorical", "name": "c", "categories": ["a", "b"], "probabilities": [0.5, 0.6]},
            "probabilities must sum to 1",
        ),
    ],
)
def test_bad_columns_are_rejected_precisely(column: dict[str, object], expected: str) -> None:
    assert expected in _error(columns=[column], defects={})


def test_outliers_must_stay_a_minority_of_present_values() -> None:
    msg = _error(defects={"missing_rate": 0.5, "outlier_rate": 0.3})
    assert "outlier_rate 0.3 is more than 0.4 of the values left after missing_rate 0.5" in msg
    customers(defects={"missing_rate": 0.5, "outlier_rate": 0.2})  # 0.2 / 0.5 = 0.4: allowed


def test_default_defect_columns() -> None:
    spec = customers(defects={"missing_rate": 0.1, "outlier_rate": 0.05})
    assert spec.missing_columns() == [c.name for c in spec.columns]
    assert spec.outlier_columns() == [
        "tenure_months",
        "monthly_spend",
        "support_calls",
        "age",
        "discount_pct",
    ]
    assert customers(defects={}).missing_columns() == []


def test_negative_seed_is_rejected() -> None:
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        generate_tabular(customers(), -1)


# ------------------------------------------------------------------------------------------ shape


def test_columns_in_spec_order_target_last_and_manifest_is_json() -> None:
    spec = customers()
    g = generate_tabular(spec, 7)
    names = [c.name for c in spec.columns] + ["label"]
    assert list(g.train.columns) == names == list(g.holdout.columns) == g.manifest["columns"]
    assert (len(g.train), len(g.holdout)) == (4000, 2000)
    text = json.dumps(g.manifest, allow_nan=False)
    assert json.loads(text) == g.manifest
    assert g.manifest["schema"]["plan"]["categories"] == ["basic", "standard", "premium"]
    assert g.manifest["schema"]["label"] == {"kind": "target", "dtype": "int", "classes": [0, 1]}
    assert {(d["column"], d["kind"]) for d in g.manifest["defects"]} == {
        ("tenure_months", "missing"),
        ("monthly_spend", "missing"),
        ("support_calls", "missing"),
        ("plan", "missing"),
        ("monthly_spend", "outlier"),
        ("support_calls", "outlier"),
    }


# ------------------------------------------------------------------------------------------ defects


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_values_at_the_requested_rate_in_the_written_file(fmt: str) -> None:
    spec = customers()
    g = generate_tabular(spec, 7)
    df = written(g.train, fmt)
    expected = round(0.12 * spec.rows)
    missing = {d["column"]: d for d in g.manifest["defects"] if d["kind"] == "missing"}
    for name in df.columns:
        mask = df[name].isna().to_numpy()
        if name in missing:
            assert mask.sum() == expected == missing[name]["count"]
            assert abs(mask.mean() - 0.12) < 0.001
            assert np.flatnonzero(mask).tolist() == missing[name]["rows"]
        else:
            assert mask.sum() == 0, name


@pytest.mark.parametrize("fmt", FORMATS)
def test_outliers_at_the_requested_rate_and_caught_by_the_profile(fmt: str) -> None:
    spec = customers()
    g = generate_tabular(spec, 7)
    df = written(g.train, fmt)
    profile = profile_frame(df, "label")["column_profiles"]
    for d in (d for d in g.manifest["defects"] if d["kind"] == "outlier"):
        name, rows = d["column"], np.asarray(d["rows"])
        assert d["count"] == len(rows) == round(0.03 * spec.rows)
        values = df[name].to_numpy()
        assert not np.isnan(values[rows]).any(), "outliers are placed on present values"
        lo, hi = profile[name]["iqr_fences"]
        assert ((values[rows] < lo) | (values[rows] > hi)).all(), (
            "every injected outlier is beyond the fences"
        )
        assert (values[rows] < lo).any() and (values[rows] > hi).any(), "both signs"
        present = (~np.isnan(values)).sum()
        natural = profile[name]["outliers"] - len(rows)
        assert 0 <= natural <= 0.015 * present, "beyond the injected ones only Normal tails (~0.7%)"


def test_outliers_stay_detectable_at_the_largest_allowed_share() -> None:
    spec = customers(rows=2000, defects={"missing_rate": 0.5, "outlier_rate": 0.2})
    g = generate_tabular(spec, 3)
    df = written(g.train, "parquet")
    for d in (d for d in g.manifest["defects"] if d["kind"] == "outlier"):
        lo, hi = profile_frame(df)["column_profiles"][d["column"]]["iqr_fences"]
        values = df[d["column"]].to_numpy()[d["rows"]]
        assert ((values < lo) | (values > hi)).all()


def test_holdout_is_clean() -> None:
    g = generate_tabular(customers(), 7)
    df = written(g.holdout, "parquet")
    assert not df.isna().any().any()
    for name, col in profile_frame(df, "label")["column_profiles"].items():
        if name != "label" and col["dtype"] == "float":
            assert col["outlier_rate"] < 0.02, name


# ------------------------------------------------------------------------------------------ determinism


def _hashes(spec: TabularDataset, seed: int) -> list[str]:
    g = generate_tabular(spec, seed)
    return [sha(to_bytes(df, fmt)) for df in (g.train, g.holdout) for fmt in FORMATS] + [
        sha(json.dumps(g.manifest).encode())
    ]


def test_same_seed_gives_identical_bytes_and_manifest() -> None:
    assert _hashes(customers(), 7) == _hashes(customers(), 7)


def test_different_seed_gives_different_bytes() -> None:
    a, b = _hashes(customers(), 7), _hashes(customers(), 8)
    assert all(x != y for x, y in zip(a, b, strict=True))


@pytest.mark.slow  # a fresh interpreter importing pandas and pyarrow: seconds on a busy machine
def test_bytes_do_not_depend_on_the_process() -> None:
    """No hash randomisation, timestamps or ids: a fresh interpreter writes the same bytes."""
    code = textwrap.dedent(
        """
        import hashlib, json, sys
        from mlsandbox.data import TabularDataset, generate_tabular, to_bytes
        g = generate_tabular(TabularDataset.model_validate_json(sys.stdin.read()), 7)
        print(json.dumps([hashlib.sha256(to_bytes(df, f)).hexdigest()
                          for df in (g.train, g.holdout) for f in ("csv", "parquet")]
                         + [hashlib.sha256(json.dumps(g.manifest).encode()).hexdigest()]))
        """
    )
    spec = customers()
    out = subprocess.run(
        [sys.executable, "-c", code], input=spec.model_dump_json(), capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == _hashes(spec, 7)


def test_adding_a_column_leaves_the_other_columns_alone() -> None:
    base = customers(defects={})
    extra = customers(
        columns=[*base.model_dump()["columns"], {"type": "numeric", "name": "noise"}], defects={}
    )
    a, b = generate_tabular(base, 5), generate_tabular(extra, 5)
    pd.testing.assert_frame_equal(a.train, b.train.drop(columns="noise"))
    pd.testing.assert_frame_equal(a.holdout, b.holdout.drop(columns="noise"))


# ------------------------------------------------------------------------------------------ signal


def _features(df: pd.DataFrame) -> np.ndarray:
    x = df.drop(columns="label")
    numeric = x.select_dtypes("number")
    numeric = (numeric - numeric.mean()) / numeric.std()
    dummies = pd.get_dummies(x.select_dtypes(exclude="number"), dtype=float)
    return pd.concat([numeric, dummies], axis=1).to_numpy()


def _holdout_auc(spec: TabularDataset, seed: int) -> tuple[float, float]:
    g = generate_tabular(spec, seed)
    train, holdout = written(g.train, "csv"), written(g.holdout, "parquet")
    model = LogisticRegression(max_iter=1000).fit(_features(train), train["label"])
    auc = roc_auc_score(holdout["label"], model.predict_proba(_features(holdout))[:, 1])
    return float(auc), g.manifest["signal"]["bayes_auc_holdout"]


def test_signal_is_learnable_up_to_the_bayes_auc() -> None:
    auc, bayes = _holdout_auc(customers(rows=20_000, holdout_rows=20_000, defects={}), 11)
    assert 0.8 < bayes < 0.95
    assert bayes - 0.015 < auc <= bayes + 0.005


def test_no_signal_gives_chance_auc() -> None:
    auc, bayes = _holdout_auc(
        customers(rows=20_000, holdout_rows=20_000, signal_strength=0.0, defects={}), 11
    )
    assert bayes == 0.5
    assert abs(auc - 0.5) < 0.03


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.5, 0.9])
def test_positive_rate_matches_the_request(rate: float) -> None:
    g = generate_tabular(customers(rows=20_000, positive_rate=rate), 2)
    labels = written(g.train, "csv")["label"]
    assert set(labels.unique()) <= {0, 1}
    assert abs(labels.mean() - rate) < 0.015
    assert labels.mean() == g.manifest["target"]["positive_rate_train"]
    assert abs(g.manifest["target"]["positive_rate_holdout"] - rate) < 0.04


def test_intercept_solves_the_mean_probability() -> None:
    eta = np.random.default_rng(0).gamma(2.0, 2.0, size=10_000)  # skewed log-odds
    for rate in (0.01, 0.3, 0.99):
        b = solve_intercept(eta, rate)
        assert abs(np.mean(1 / (1 + np.exp(-(b + eta)))) - rate) < 1e-9
    assert solve_intercept(np.zeros(10), 0.2) == pytest.approx(np.log(0.2 / 0.8), abs=1e-12)


def test_roc_auc_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(1)
    y = rng.random(500) < 0.3
    scores = np.round(rng.random(500) + y * 0.3, 1)  # many ties
    assert roc_auc(y, scores) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    assert roc_auc(np.ones(5), np.arange(5)) is None


def test_category_probabilities_and_numeric_moments() -> None:
    spec = customers(
        rows=50_000,
        defects={},
        columns=[
            {"type": "numeric", "name": "x", "mean": 100, "std": 0.01},
            {
                "type": "categorical",
                "name": "c",
                "categories": ["a", "b", "c"],
                "probabilities": [0.7, 0.2, 0.1],
            },
        ],
    )
    g = generate_tabular(spec, 1)
    df = written(g.train, "csv")
    shares = df["c"].value_counts(normalize=True)
    assert abs(shares["a"] - 0.7) < 0.01 and abs(shares["c"] - 0.1) < 0.01
    assert abs(df["x"].mean() - 100) < 0.001 and abs(df["x"].std() - 0.01) < 0.0005
    assert g.manifest["schema"]["x"]["decimals"] == 4  # precision follows the std


# ------------------------------------------------------------------------------------------ formats


def _awkward_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "f": [1.5, np.nan, -0.1, 1e-7, 123456.789],
            "s": ["a,b", 'quote "q"', None, "ünïcode", "line\nbreak"],
            "i": [1, 2, 3, 4, 5],
        }
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_preserves_values(fmt: str) -> None:
    df = _awkward_frame()
    back = written(df, fmt)
    assert list(back.columns) == ["f", "s", "i"]
    np.testing.assert_array_equal(back["f"].to_numpy(), df["f"].to_numpy())  # NaN equal NaN
    assert back["s"].isna().tolist() == [False, False, True, False, False]
    assert back["s"].dropna().tolist() == df["s"].dropna().tolist()
    assert pd.api.types.is_string_dtype(back["s"]) and back["i"].tolist() == [1, 2, 3, 4, 5]
    assert to_bytes(back, fmt) == to_bytes(df, fmt)  # written again: the same bytes


@pytest.mark.parametrize("fmt", FORMATS)
def test_generated_frames_round_trip_exactly(fmt: str) -> None:
    g = generate_tabular(customers(), 7)
    pd.testing.assert_frame_equal(written(g.train, fmt), g.train, check_dtype=False)


def test_csv_layout() -> None:
    lines = to_bytes(_awkward_frame(), "csv").decode().split("\n")
    assert lines[0] == "f,s,i"  # the header is never quoted
    assert lines[1:3] == ['1.5,"a,b",1', ',"quote ""q""",2']  # only the cells that need quotes
    plain = pd.DataFrame(
        {"f": [12.0, np.nan, 1e-7, -0.5, 1e16], "s": ["a", "b", None, "c", "d"], "b": [True] * 5}
    )
    assert (
        to_bytes(plain, "csv").decode()
        == "f,s,b\n12.0,a,true\n,b,true\n1e-7,,true\n-0.5,c,true\n1e+16,d,true\n"
    )
    assert to_bytes(pd.DataFrame({"x": [1.0]}, index=[42]), "csv") == b"x\n1.0\n"
    nullable = pd.DataFrame({"n": pd.array([1, None], dtype="Int64"), "q": ["a,b", "c"], "t": [False, True]})
    assert to_bytes(nullable, "csv") == b'n,q,t\n1,"a,b",false\n,c,true\n'  # same rendering when quoting


def test_csv_falls_back_to_pandas_for_mixed_objects() -> None:
    df = pd.DataFrame({"m": [1, "a", 2.5]})
    assert to_bytes(df, "csv") == b"m\n1\na\n2.5\n"
    assert from_bytes(to_bytes(df, "csv"), "csv")["m"].tolist() == ["1", "a", "2.5"]


def test_parquet_has_no_index_and_no_pandas_metadata() -> None:
    data = to_bytes(pd.DataFrame({"x": [1.0, 2.0]}, index=[7, 9]), "parquet")
    schema = pq.read_schema(pa.BufferReader(data))
    assert schema.names == ["x"]
    assert b"pandas" not in (schema.metadata or {})
    assert b"pandas_version" not in data


@pytest.mark.parametrize(
    ("key", "fmt"),
    [
        ("raw/customers.csv", "csv"),
        ("raw/customers.parquet", "parquet"),
        ("a/B.PQ", "parquet"),
        ("x.CSV", "csv"),
    ],
)
def test_format_of(key: str, fmt: str) -> None:
    assert format_of(key) == fmt


@pytest.mark.parametrize("key", ["raw/customers.json", "raw/customers.csv.gz", "raw/csv", ".csv", "raw/"])
def test_format_of_rejects_unsupported(key: str) -> None:
    with pytest.raises(ValueError, match="unsupported data format"):
        format_of(key)


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported data format 'json'"):
        to_bytes(pd.DataFrame({"x": [1]}), "json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unsupported data format 'xlsx'"):
        from_bytes(b"", "xlsx")  # type: ignore[arg-type]


def test_catalog_sized_dataset_defaults_on_numeric_defects() -> None:
    spec = TabularDataset(
        name="tiny",
        rows=50,
        columns=[NumericColumn(name="a", weight=1.0), CategoricalColumn(name="b", categories=["x", "y"])],
        defects=Defects(missing_rate=0.1, outlier_rate=0.1),
    )
    g = generate_tabular(spec, 0)
    df = written(g.train, "csv")
    assert df["a"].isna().sum() == df["b"].isna().sum() == 5
    outliers = [d for d in g.manifest["defects"] if d["kind"] == "outlier"]
    assert [(d["column"], d["count"]) for d in outliers] == [("a", 5)]
