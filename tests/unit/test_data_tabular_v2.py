"""Tabular v2: column kinds, dependencies, regression, and every defect measured on the written bytes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from sklearn.linear_model import LinearRegression

from mlsandbox.data import FORMATS, TabularDataset, from_bytes, generate_tabular, profile_frame, to_bytes

ROWS = 2000


def rich(**overrides: Any) -> TabularDataset:
    spec: dict[str, Any] = {
        "name": "customers",
        "rows": ROWS,
        "holdout_rows": 500,
        "positive_rate": 0.3,
        "columns": [
            {"type": "id", "name": "customer_id", "prefix": "C-", "digits": 8},
            {
                "type": "numeric",
                "name": "tenure_months",
                "mean": 24,
                "std": 12,
                "weight": -1.0,
                "min": 0,
                "integer": True,
            },
            {
                "type": "numeric",
                "name": "monthly_spend",
                "mean": 70,
                "std": 25,
                "weight": 0.9,
                "min": 0,
                "depends_on": {"tenure_months": 0.5},
            },
            {"type": "numeric", "name": "weight_kg", "mean": 80, "std": 12},
            {"type": "numeric", "name": "income", "mean": 50000, "std": 15000},
            {"type": "numeric", "name": "age", "mean": 45, "std": 14},
            {"type": "categorical", "name": "city", "categories": ["new york", "boston", "chicago"]},
            {"type": "boolean", "name": "is_member", "probability": 0.3, "weight": 0.7},
            {
                "type": "datetime",
                "name": "signup",
                "start": "2023-01-01T00:00:00",
                "end": "2024-01-01T00:00:00",
            },
        ],
        "defects": {
            "missing_rate": 0.05,
            "missing_columns": ["monthly_spend"],
            "outlier_rate": 0.02,
            "outlier_columns": ["monthly_spend"],
            "injections": [
                {"type": "missing_mar", "column": "income", "rate": 0.1, "driver": "age"},
                {"type": "missing_mnar", "column": "weight_kg", "rate": 0.08},
                {"type": "duplicates", "rate": 0.03},
                {"type": "label_noise", "rate": 0.05},
                {
                    "type": "inconsistent_categories",
                    "column": "city",
                    "rate": 0.06,
                    "variants": {"new york": ["NY", "New York", "NYC"]},
                },
                {"type": "unit_mixup", "column": "weight_kg", "rate": 0.04, "factor": 1000},
                {"type": "type_corruption", "column": "income", "rate": 0.05},
            ],
        },
    }
    spec.update(overrides)
    return TabularDataset.model_validate(spec)


@pytest.fixture(scope="module")
def generated() -> Any:
    return generate_tabular(rich(), 3)


@pytest.fixture(scope="module")
def payloads(generated: Any) -> dict[str, bytes]:
    return {fmt: to_bytes(generated.train_table, fmt) for fmt in FORMATS}


@pytest.fixture(scope="module", params=FORMATS)
def written(request: pytest.FixtureRequest, payloads: dict[str, bytes]) -> tuple[str, pd.DataFrame]:
    fmt = request.param
    return fmt, from_bytes(payloads[fmt], fmt)


def defect(g: Any, kind: str, column: str | None = None) -> dict[str, Any]:
    (found,) = [
        d for d in g.manifest["defects"] if d["kind"] == kind and (column is None or d["column"] == column)
    ]
    return found


# ------------------------------------------------------------------------------------------ spec errors


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"columns": [{"type": "numeric", "name": "a", "min": 5, "max": 1}]},
            "min 5.0 must be below max 1.0",
        ),
        (
            {
                "columns": [
                    {"type": "numeric", "name": "a", "depends_on": {"b": 0.9}},
                    {"type": "numeric", "name": "b", "depends_on": {"a": 0.1}},
                ]
            },
            "depends_on has a cycle",
        ),
        (
            {"columns": [{"type": "numeric", "name": "a", "depends_on": {"b": 0.8, "c": 0.8}}]},
            "squares must sum to less than 1",
        ),
        (
            {"columns": [{"type": "numeric", "name": "a", "depends_on": {"zz": 0.5}}]},
            "depends on unknown or non-numeric columns: ['zz']",
        ),
        ({"task": "regression", "positive_rate": 0.2}, "positive_rate applies to classification only"),
        ({"noise_std": 2.0}, "['noise_std'] apply to regression only"),
        ({"columns": [{"type": "id", "name": "i", "digits": 4}], "rows": 20000}, "cannot number 20500 rows"),
    ],
)
def test_bad_specs_are_rejected_precisely(change: dict[str, Any], message: str) -> None:
    base = {"defects": {}} if "columns" in change else {}
    with pytest.raises(ValidationError) as e:
        rich(**{**base, **change})
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("injection", "message"),
    [
        (
            {"type": "missing_mnar", "column": "city", "rate": 0.1},
            "column 'city' must be a numeric feature column",
        ),
        (
            {"type": "missing_mar", "column": "age", "rate": 0.1, "driver": "city"},
            "column 'city' must be a numeric or boolean",
        ),
        ({"type": "unit_mixup", "column": "age", "rate": 0.1, "factor": 1.2}, "at least 2x away from 1"),
        (
            {"type": "unit_mixup", "column": "tenure_months", "rate": 0.1, "factor": 0.01},
            "needs a whole factor",
        ),
        (
            {"type": "inconsistent_categories", "column": "city", "rate": 0.1, "variants": {"paris": ["P"]}},
            "unknown categories ['paris']",
        ),
        ({"type": "duplicates", "rate": 0.5}, "less than or equal to 0.3"),
        ({"type": "label_noise", "rate": 0.1, "column": "age"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_injections_are_rejected_precisely(injection: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as e:
        rich(defects={"injections": [injection]})
    assert message in str(e.value)


def test_regression_rejects_label_noise_and_a_spec_round_trips_through_json() -> None:
    with pytest.raises(ValidationError, match="label_noise applies to classification targets only"):
        rich(
            task="regression",
            positive_rate=0.5,
            defects={"injections": [{"type": "label_noise", "rate": 0.1}]},
        )
    spec = rich()
    assert TabularDataset.model_validate_json(spec.model_dump_json()) == spec


# ------------------------------------------------------------------------------------------ column kinds


def test_kinds_types_and_realistic_values(generated: Any) -> None:
    df = from_bytes(to_bytes(generated.holdout_table, "parquet"), "parquet")
    assert list(df.columns) == [*generated.manifest["columns"]]
    assert df["tenure_months"].dtype == np.int64 and (df["tenure_months"] >= 0).all()
    assert (df["monthly_spend"] >= 0).all()
    assert df["is_member"].dtype == bool and abs(df["is_member"].mean() - 0.3) < 0.06
    assert df["signup"].min() >= pd.Timestamp("2023-01-01") and df["signup"].max() < pd.Timestamp(
        "2024-01-01"
    )
    assert df["customer_id"].str.fullmatch(r"C-\d{8}").all()
    train_ids = set(from_bytes(to_bytes(generated.train_table, "csv"), "csv")["customer_id"])
    assert len(set(df["customer_id"])) == len(df) and not train_ids & set(df["customer_id"])


def test_declared_dependency_gives_the_declared_correlation() -> None:
    spec = rich(
        rows=40_000,
        defects={},
        columns=[
            {"type": "numeric", "name": "a", "mean": 10, "std": 2},
            {"type": "numeric", "name": "b", "mean": 0, "std": 5, "depends_on": {"a": 0.6}},
            {"type": "numeric", "name": "c", "mean": 0, "std": 1, "depends_on": {"a": -0.3, "b": 0.4}},
        ],
    )
    df = from_bytes(to_bytes(generate_tabular(spec, 1).train_table, "parquet"), "parquet")
    assert abs(df["a"].corr(df["b"]) - 0.6) < 0.02
    assert abs(df["b"].std() - 5) < 0.1  # the marginal std is kept
    assert df["c"].corr(df["b"]) > 0.2 and df["c"].corr(df["a"]) < 0.05


def test_regression_target_is_learnable_up_to_its_bayes_r2() -> None:
    spec = rich(
        task="regression",
        positive_rate=0.5,
        target="spend_next_month",
        target_mean=100.0,
        noise_std=5.0,
        rows=20_000,
        holdout_rows=5000,
        defects={},
        columns=[
            {"type": "numeric", "name": "x1", "weight": 4.0},
            {"type": "numeric", "name": "x2", "weight": -2.0},
            {"type": "numeric", "name": "noise"},
        ],
    )
    g = generate_tabular(spec, 5)
    train = from_bytes(to_bytes(g.train_table, "csv"), "csv")
    holdout = from_bytes(to_bytes(g.holdout_table, "parquet"), "parquet")
    features = ["x1", "x2", "noise"]
    model = LinearRegression().fit(train[features], train["spend_next_month"])
    r2 = model.score(holdout[features], holdout["spend_next_month"])
    bayes = g.manifest["signal"]["bayes_r2_holdout"]
    assert 0.3 < bayes < 0.6 and abs(r2 - bayes) < 0.02
    assert g.manifest["schema"]["spend_next_month"]["dtype"] == "float"


# ------------------------------------------------------------------------------------------ defects on written bytes


def test_every_defect_is_recorded_with_its_count(generated: Any) -> None:
    kinds = [(d["kind"], d["column"]) for d in generated.manifest["defects"]]
    assert kinds == [
        ("missing", "monthly_spend"),
        ("outlier", "monthly_spend"),
        ("missing_mar", "income"),
        ("missing_mnar", "weight_kg"),
        ("label_noise", "label"),
        ("inconsistent_category", "city"),
        ("unit_mixup", "weight_kg"),
        ("type_corruption", "income"),
        ("duplicate", None),
    ]
    for d in generated.manifest["defects"]:
        assert d["count"] == len(d["rows"]) == round(d["rate"] * ROWS)
    json.dumps(generated.manifest, allow_nan=False)


def test_missing_values_mcar_mar_mnar_at_the_rates(written: tuple[str, pd.DataFrame], generated: Any) -> None:
    _, df = written
    for kind, column in (
        ("missing", "monthly_spend"),
        ("missing_mar", "income"),
        ("missing_mnar", "weight_kg"),
    ):
        d = defect(generated, kind, column)
        assert np.flatnonzero(df[column].isna().to_numpy()).tolist() == d["rows"]
    mar = np.asarray(defect(generated, "missing_mar")["rows"])
    age = df["age"].to_numpy()
    assert age[mar].mean() > age.mean() + 5, "MAR: missing where the driver is high"
    clean = generated.holdout["weight_kg"]  # the holdout is clean
    observed = pd.to_numeric(df["weight_kg"], errors="coerce")
    present = observed[observed < 1000]
    assert present.mean() < 80 - 0.6, "MNAR: high values went missing"
    assert abs(clean.mean() - 80) < 1.5


def test_outliers_duplicates_and_unit_mixups(written: tuple[str, pd.DataFrame], generated: Any) -> None:
    _, df = written
    profile = profile_frame(df, "label")
    outliers = defect(generated, "outlier", "monthly_spend")["rows"]
    lo, hi = profile["column_profiles"]["monthly_spend"]["iqr_fences"]
    spend = df["monthly_spend"].to_numpy()[outliers]
    assert ((spend < lo) | (spend > hi)).all()
    dup = defect(generated, "duplicate")
    assert profile["duplicate_rows"] == dup["count"]
    assert df.iloc[dup["rows"]].reset_index(drop=True).equals(df.iloc[dup["sources"]].reset_index(drop=True))
    mix = defect(generated, "unit_mixup", "weight_kg")
    weight = df["weight_kg"].to_numpy()
    assert (weight[mix["rows"]] > 10_000).all() and int((weight > 10_000).sum()) == mix["count"]


def test_inconsistent_categories_type_corruption_and_label_noise(
    written: tuple[str, pd.DataFrame], generated: Any
) -> None:
    fmt, df = written
    variant = defect(generated, "inconsistent_category", "city")
    odd = ~df["city"].isin(["new york", "boston", "chicago"])
    assert np.flatnonzero(odd.to_numpy()).tolist() == variant["rows"]
    assert set(df["city"][odd]) <= {
        "NY",
        "New York",
        "NYC",
        "BOSTON",
        "Boston",
        "boston.",
        "CHICAGO",
        "Chicago",
        "chicago.",
    }
    corrupt = defect(generated, "type_corruption", "income")
    income = df["income"]
    assert not pd.api.types.is_numeric_dtype(income.dtype), fmt
    junk = pd.to_numeric(income, errors="coerce").isna() & income.notna()
    assert np.flatnonzero(junk.to_numpy()).tolist() == corrupt["rows"]
    noise = defect(generated, "label_noise")
    clean = generate_tabular(rich(defects={"injections": [{"type": "duplicates", "rate": 0.03}]}), 3)
    flipped = np.flatnonzero(df["label"].to_numpy() != clean.train["label"].to_numpy())
    assert flipped.tolist() == noise["rows"]


# ------------------------------------------------------------------------------------------ determinism


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_seed_same_bytes_and_table_equals_frame(fmt: str, payloads: dict[str, bytes]) -> None:
    again = generate_tabular(rich(), 3)
    assert hashlib.sha256(to_bytes(again.train_table, fmt)).digest() == hashlib.sha256(payloads[fmt]).digest()
    assert to_bytes(again.train, fmt) == payloads[fmt], "the frame writes the same bytes as the table"


def test_another_seed_gives_other_bytes_and_the_manifest_is_stable(generated: Any) -> None:
    assert json.dumps(generate_tabular(rich(), 3).manifest) == json.dumps(generated.manifest)
    assert to_bytes(generate_tabular(rich(), 10).train_table, "csv") != to_bytes(generated.train_table, "csv")


def test_profile_is_the_same_for_every_format(
    written: tuple[str, pd.DataFrame], payloads: dict[str, bytes]
) -> None:
    fmt, df = written
    reference = profile_frame(from_bytes(payloads["csv"], "csv"), "label")
    assert profile_frame(df, "label") == reference, fmt
    assert reference["column_profiles"]["signup"]["dtype"] == "datetime"


def test_v1_specs_still_write_the_v1_bytes() -> None:
    """The CSV of a v1 spec (the tabular-quality-basic dataset) under generator version 2, pinned: the
    spec's v2 features changed nothing for it."""
    from test_data_tabular import customers

    g = generate_tabular(customers(), 7)
    assert hashlib.sha256(to_bytes(g.train, "csv")).hexdigest() == (
        "e8142e9e7094e457b0f37641277c6ca7d3b39814988c978e623c84870978d79b"
    )
    assert hashlib.sha256(json.dumps(g.manifest).encode()).hexdigest() == (
        "a6c3ce0d0c4a4653633c84a85740d05abf26cc9e606327f3a456e1135f522587"
    )
