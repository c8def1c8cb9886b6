"""Drifting batches: drift statistics stay flat before the drift point and grow after it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from mlsandbox.data import column_drift, from_bytes, generate_batches, ks_statistic, psi_numeric, to_bytes
from mlsandbox.data.drift import DriftingDataset, Schedule

BASE: dict[str, Any] = {
    "name": "transactions",
    "rows": 100,
    "holdout_rows": 200,
    "positive_rate": 0.2,
    "columns": [
        {"type": "numeric", "name": "amount", "mean": 50, "std": 10, "weight": 1.0},
        {"type": "numeric", "name": "age", "mean": 40, "std": 12, "weight": 0.5},
        {"type": "categorical", "name": "channel", "categories": ["web", "store", "app"]},
    ],
}


def drifting(**overrides: Any) -> DriftingDataset:
    spec: dict[str, Any] = {
        "base": BASE,
        "batches": 8,
        "batch_rows": 3000,
        "drifts": [
            {
                "type": "covariate_shift",
                "column": "amount",
                "shift": 1.0,
                "schedule": {"pattern": "sudden", "start": 4},
            },
            {
                "type": "covariate_shift",
                "column": "channel",
                "probabilities": [0.1, 0.1, 0.8],
                "schedule": {"pattern": "gradual", "start": 2, "ramp": 4},
            },
            {
                "type": "concept_drift",
                "column": "age",
                "weight": -1.5,
                "schedule": {"pattern": "sudden", "start": 6},
            },
            {
                "type": "prior_shift",
                "positive_rate": 0.5,
                "schedule": {"pattern": "recurring", "start": 5, "on": 1, "off": 1},
            },
        ],
    }
    spec.update(overrides)
    return DriftingDataset.model_validate(spec)


@pytest.fixture(scope="module")
def batches() -> Any:
    return generate_batches(drifting(), 4)


def test_schedules() -> None:
    assert [Schedule(pattern="sudden", start=2).intensity(b) for b in range(4)] == [0, 0, 1, 1]
    assert [Schedule(pattern="gradual", start=1, ramp=2).intensity(b) for b in range(4)] == [0, 0.5, 1, 1]
    assert [Schedule(pattern="recurring", start=0, on=1, off=2).intensity(b) for b in range(5)] == [
        1,
        0,
        0,
        1,
        0,
    ]
    seasonal = [Schedule(pattern="seasonal", start=0, period=4).intensity(b) for b in range(5)]
    assert seasonal == [0.0, 0.5, 1.0, 0.5, 0.0]


def test_covariate_shift_is_visible_only_after_the_drift_point(batches: Any) -> None:
    read = [from_bytes(to_bytes(b.train_table, "parquet"), "parquet") for b in batches.batches]
    ks = [ks_statistic(read[0]["amount"].to_numpy(), df["amount"].to_numpy()) for df in read]
    assert max(ks[1:4]) < 0.06 and min(ks[4:]) > 0.3, ks
    psi = [column_drift(read[0], df)["channel"]["psi"] for df in read]
    assert psi[1] < 0.02 and psi[1] < psi[2] < psi[3] < psi[4] < psi[5] and psi[5] > 0.5, psi
    assert batches.manifest["drifts"][0]["first_drifted_batch"] == 4
    assert batches.manifest["batches"][5]["effective"]["amount"]["mean"] == 60.0


def test_concept_drift_and_prior_shift(batches: Any) -> None:
    def age_label_corr(b: Any) -> float:
        return float(np.corrcoef(b.train["age"], b.train["label"])[0, 1])

    assert all(age_label_corr(b) > 0.05 for b in batches.batches[:6])
    assert all(age_label_corr(b) < -0.15 for b in batches.batches[6:])
    rates = [float(b.train["label"].mean()) for b in batches.batches]
    assert (
        all(abs(r - 0.2) < 0.03 for r in rates[:5])
        and abs(rates[5] - 0.5) < 0.03
        and abs(rates[6] - 0.2) < 0.03
    )
    assert [d["intensity"][3] for d in batches.manifest["batches"]] == [0, 0, 0, 0, 0, 1, 0, 1]


def test_batches_are_time_partitioned_and_deterministic(batches: Any) -> None:
    first, second = batches.batches[0].train, batches.batches[1].train
    assert first["event_time"].max() < second["event_time"].min()
    assert batches.manifest["batches"][1]["start"] == "2024-02-01T00:00:00"
    again = generate_batches(drifting(), 4)
    assert to_bytes(again.batches[3].train_table, "csv") == to_bytes(batches.batches[3].train_table, "csv")


def test_psi_is_zero_for_equal_samples() -> None:
    x = np.random.default_rng(0).normal(size=5000)
    assert psi_numeric(x, x) == 0.0 and ks_statistic(x, x) == 0.0


@pytest.mark.parametrize(
    ("drift", "message"),
    [
        (
            {"type": "covariate_shift", "column": "nope", "shift": 1, "schedule": {"start": 1}},
            "unknown column 'nope'",
        ),
        ({"type": "covariate_shift", "column": "channel", "schedule": {"start": 1}}, "needs probabilities"),
        (
            {"type": "concept_drift", "column": "channel", "weight": 1, "schedule": {"start": 1}},
            "must be numeric or boolean",
        ),
        ({"type": "prior_shift", "positive_rate": 0.4, "schedule": {"start": 9}}, "past the last batch"),
    ],
)
def test_bad_drifts_are_rejected(drift: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        drifting(drifts=[drift])
