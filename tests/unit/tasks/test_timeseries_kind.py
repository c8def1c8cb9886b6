"""The time-series forecasting kind: its generator's defects, profile, preparation and real fits."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mlsandbox.tasks.registry import get
from mlsandbox.tasks.timeseries import KIND
from mlsandbox.tasks.timeseries.generate import generate_forecasting
from mlsandbox.tasks.timeseries.quality import prepare, profile
from mlsandbox.tasks.timeseries.spec import ForecastingDataset, Gaps, LateArrival, LevelShift
from mlsandbox.workloads import forecasting

SPEC = ForecastingDataset(
    name="store_sales",
    trend=0.15,
    level_shifts=[LevelShift(at_day=400, factor=0.7)],
    gaps=Gaps(count=4),
    late=LateArrival(restated_share=0.05),
)
COLUMNS = {"time_column": "date", "value_column": "sales"}


def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    for step in KIND.policy(profile(frame, "date", "sales", "ingested_at")).preparations:
        frame, _ = prepare(frame, step, ingested_column="ingested_at", **COLUMNS)  # type: ignore[arg-type]
    return frame


def test_spec_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="past the history"):
        ForecastingDataset(name="s", history_days=200, level_shifts=[LevelShift(at_day=300, factor=2)])
    with pytest.raises(ValueError, match="not in the calendar"):
        ForecastingDataset(name="s", holiday_effects={"easter": 2.0})
    with pytest.raises(ValueError, match="extra"):
        ForecastingDataset.model_validate({"name": "s", "colour": "red"})


def test_generator_is_deterministic_and_its_manifest_names_every_defect() -> None:
    a, b = generate_forecasting(SPEC, 3), generate_forecasting(SPEC, 3)
    pd.testing.assert_frame_equal(a.train, b.train)
    m = a.manifest
    assert len(m["gaps"]) == 4 and len(m["unsettled"]) == 3 and m["restated"] and m["level_shifts"]
    assert len(a.holdout) == SPEC.horizon and a.holdout["date"].iloc[0] == m["horizon_start"]
    dates = a.train["date"]
    assert dates.duplicated().sum() == len(m["restated"])
    assert not set(a.holdout["date"]) & set(dates)


def test_profile_reports_the_defects_and_preparation_fixes_them() -> None:
    data = generate_forecasting(SPEC, 1)
    found = profile(data.train, "date", "sales", "ingested_at")
    assert found["duplicate_dates"] > 0 and found["absent_days"] > 0 and found["unsettled_rows"] > 0
    assert found["unsettled_tail_shortfall"] > 0.2
    assert found["level_change"]["relative_change"] < -0.2
    assert found["holidays"]["christmas"] < 0.5
    assert KIND.policy(found).preparations == ("dedupe_dates", "drop_unsettled", "fill_gaps")
    clean = _prepared(data.train)
    after = profile(clean, "date", "sales", "ingested_at")
    assert after["duplicate_dates"] == 0 and after["absent_days"] == 0 and after["issues"] == []


def test_hyperparameters_are_checked_against_the_estimators() -> None:
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import Ridge

    assert forecasting.ESTIMATOR_PARAMETERS["gradient_boosting"] == set(
        GradientBoostingRegressor().get_params()
    )
    assert forecasting.ESTIMATOR_PARAMETERS["ridge"] == set(Ridge().get_params())
    assert forecasting.hyperparameter_problems("gradient_boosting", {"n_estimators": 5}) == []
    assert "max_iter" in forecasting.hyperparameter_problems("gradient_boosting", {"max_iter": 5})[0]
    assert forecasting.hyperparameter_problems("seasonal_naive", {"period": 7})
    with pytest.raises(ValueError, match="does not fit"):
        get("timeseries_forecasting").check_algorithm("logistic_regression")


def test_raw_data_fails_as_real_code_fails() -> None:
    data = generate_forecasting(SPEC, 1)
    out = forecasting.fit(data.train, "gradient_boosting", {}, 1, **COLUMNS)
    assert out.failure is not None and "duplicate labels" in out.failure[1]
    deduped, _ = prepare(data.train, "dedupe_dates", ingested_column="ingested_at", **COLUMNS)
    out = forecasting.fit(deduped, "ridge", {}, 1, **COLUMNS)
    assert out.failure is not None and "NaN" in out.failure[1]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_sensible_pipeline_beats_the_bar_and_degenerate_ones_fail_it(seed: int) -> None:
    data = KIND.generate(SPEC, seed)
    raw = data.train_table.to_pandas()
    clean = _prepared(raw)
    holdout = data.holdout
    baseline = KIND.baseline("mase", holdout, SPEC)
    bar = 0.75 * baseline

    def holdout_mase(frame: pd.DataFrame, algorithm: str, hyperparams: dict[str, int]) -> float:
        out = forecasting.fit(frame, algorithm, hyperparams, seed, **COLUMNS)
        assert out.failure is None and out.model is not None
        assert math.isfinite(out.metrics["val_mase"])
        return KIND.score("mase", out.model, holdout, SPEC)

    assert holdout_mase(clean, "gradient_boosting", {}) <= bar
    assert holdout_mase(clean, "ridge", {}) <= bar
    assert holdout_mase(clean, "gradient_boosting", {"n_estimators": 1, "max_depth": 1}) > bar
    assert holdout_mase(clean, "seasonal_naive", {}) > bar
    deduped, _ = prepare(raw, "dedupe_dates", ingested_column="ingested_at", **COLUMNS)
    gaps_filled, _ = prepare(deduped, "fill_gaps", ingested_column="ingested_at", **COLUMNS)
    # The unsettled tail left in: the forecast starts from values still arriving.
    assert holdout_mase(gaps_filled, "gradient_boosting", {}) > holdout_mase(clean, "gradient_boosting", {})


def test_predictions_are_a_horizon_out() -> None:
    data = KIND.generate(SPEC, 1)
    clean = _prepared(data.train_table.to_pandas())
    model = forecasting.fit(clean, "gradient_boosting", {}, 1, **COLUMNS).model
    request = pd.DataFrame({"date": data.holdout["date"].head(3)})
    out = KIND.predictions(model, request)
    assert [r["date"] for r in out] == list(request["date"]) and all(r["forecast"] > 0 for r in out)


def test_the_fitted_forecaster_is_a_model_the_grader_may_load() -> None:
    import skops.io

    from mlsandbox.backends.common.mlflow_tracking import SAFE_TRUSTED_PREFIXES

    data = KIND.generate(SPEC, 1)
    model = forecasting.fit(_prepared(data.train_table.to_pandas()), "ridge", {}, 1, **COLUMNS).model
    blob = skops.io.dumps(model)
    trusted = skops.io.get_untrusted_types(data=blob)
    assert all(t.startswith(SAFE_TRUSTED_PREFIXES) for t in trusted), trusted
    loaded = skops.io.loads(blob, trusted=trusted)
    assert KIND.score("mase", loaded, data.holdout, SPEC) == KIND.score("mase", model, data.holdout, SPEC)


def test_a_deployment_of_the_model_answers_a_forecast_per_date() -> None:
    from mlsandbox.workloads.model_server import LoadedModel

    data = KIND.generate(SPEC, 1)
    model = forecasting.fit(_prepared(data.train_table.to_pandas()), "ridge", {}, 1, **COLUMNS).model
    served = LoadedModel(model, "forecast", "1", [("date", "string")])
    values, _ = served.predict(pd.DataFrame({"date": list(data.holdout["date"].head(7))}))
    assert len(values) == 7 and all(v > 0 for v in values)
