"""Time series: anomalies found where the manifest says, regimes, gaps, determinism."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from mlsandbox.data import TimeSeriesSpec, from_bytes, generate_timeseries, to_bytes


def spec(**overrides: Any) -> TimeSeriesSpec:
    data: dict[str, Any] = {
        "name": "cpu_load",
        "length": 24 * 7 * 12,
        "level": 50,
        "trend": 0.001,
        "seasonalities": [{"period": 24, "amplitude": 10}, {"period": 168, "amplitude": 4}],
        "noise_std": 1.0,
        "anomalies": [
            {"type": "point", "count": 6, "magnitude": 8},
            {"type": "contextual", "count": 4},
            {"type": "collective", "count": 2, "length": 12},
        ],
        "regime_changes": [{"at": 1500, "level_shift": 15, "noise_scale": 1.5}],
        "missing": {"count": 3, "min_length": 5, "max_length": 10},
    }
    data.update(overrides)
    return TimeSeriesSpec.model_validate(data)


@pytest.fixture(scope="module")
def series() -> Any:
    return generate_timeseries(spec(), 2)


def full_grid(g: Any) -> pd.Series:
    df = from_bytes(to_bytes(g.table, "csv"), "csv")
    grid = pd.date_range("2024-01-01", periods=g.manifest["length"], freq="h")
    return df.set_index("timestamp")["value"].reindex(grid)


def test_gaps_are_absent_rows_at_the_recorded_places(series: Any) -> None:
    values = full_grid(series).to_numpy()
    gaps = series.manifest["missing_intervals"]
    assert len(gaps) == 3
    missing = np.flatnonzero(np.isnan(values)).tolist()
    assert missing == [i for g in gaps for i in range(g["start"], g["end"])]
    assert series.manifest["rows"] == series.manifest["length"] - len(missing)


def test_anomalies_are_where_the_manifest_says(series: Any) -> None:
    values = full_grid(series).to_numpy()
    residual = values - series.clean
    changed = np.flatnonzero(np.abs(np.nan_to_num(residual)) > 1e-9)
    anomalies = series.manifest["anomalies"]
    recorded = {i for a in anomalies for i in range(a["start"], a["end"])}
    assert set(changed.tolist()) <= recorded
    for a in anomalies:
        window = values[a["start"] : a["end"]]
        if a["type"] == "point":
            assert abs(residual[a["start"]]) > 7.9, "a point anomaly is a jump of `magnitude` noise stds"
        elif a["type"] == "contextual":
            local = series.clean[max(0, a["start"] - 168) : a["start"] + 168]
            low, high = local.min(), local.max()
            assert low - 5 < window[0] < high + 5 and abs(residual[a["start"]]) > 10, "in range, out of phase"
        else:
            assert np.ptp(window) == 0 and len(window) == 12, "collective: a flat run"
    # a simple detector (distance to the rolling median) finds the single-step anomalies as the largest jumps
    s = pd.Series(values)
    jump = (s - s.rolling(5, center=True, min_periods=3).median()).abs()
    single = {a["start"] for a in anomalies if a["type"] in ("point", "contextual")}
    top = set(jump.nlargest(len(single)).index.tolist())
    assert len(top & single) >= len(single) - 2


def test_regime_change_shifts_the_level(series: Any) -> None:
    clean = series.clean
    before, after = clean[1300:1500].mean(), clean[1500:1700].mean()
    assert 12 < after - before < 18
    assert series.manifest["regime_changes"][0]["time"] == "2024-03-03T12:00:00"


def test_same_seed_same_bytes(series: Any) -> None:
    again = generate_timeseries(spec(), 2)
    for fmt in ("csv", "parquet"):
        assert to_bytes(again.table, fmt) == to_bytes(series.table, fmt)
    assert again.manifest == series.manifest


def test_bad_specs() -> None:
    with pytest.raises(ValidationError, match="contextual anomalies need at least one seasonality"):
        spec(seasonalities=[])
    with pytest.raises(ValidationError, match="past the end of the series"):
        spec(regime_changes=[{"at": 10**6}])
    with pytest.raises(ValidationError, match="keep them under 1/3"):
        spec(length=200, anomalies=[{"type": "collective", "count": 10, "length": 10}], regime_changes=[])
