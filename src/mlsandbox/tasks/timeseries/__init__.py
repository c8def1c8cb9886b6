"""Time-series forecasting: a daily demand series to forecast a horizon ahead, graded by MASE on the
hidden horizon against a bar relative to the seasonal-naive forecast (see :mod:`.spec` for the defects,
:mod:`mlsandbox.workloads.forecasting` for the algorithms)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mlsandbox.tasks.kind import Generated, Metric, Policy, Serving, TaskKind
from mlsandbox.tasks.timeseries.spec import ForecastingDataset
from mlsandbox.workloads.forecasting import ESTIMATOR_PARAMETERS

HISTORY_ATTR = "history"
"""The holdout frame's ``attrs`` key holding the true history's values (the MASE scale, the baseline)."""


def _columns(frame: Any, target: str | None) -> tuple[str, str, str]:
    """The date, value and ingestion columns of a forecasting frame (by the spec's defaults, else by
    position: the first column is the date)."""
    columns = [str(c) for c in frame.columns]
    time_column = "date" if "date" in columns else columns[0]
    value = target if target in columns else next((c for c in columns if c != time_column), time_column)
    ingested = "ingested_at" if "ingested_at" in columns else ""
    return time_column, str(value), ingested


class TimeseriesForecasting(TaskKind):
    name = "timeseries_forecasting"
    title = "time-series forecasting"
    spec = ForecastingDataset
    metrics = (
        Metric("mase", "min", "mean absolute error over the horizon / in-sample seasonal-naive error"),
        Metric("smape", "min", "symmetric mean absolute percentage error over the horizon (percent)"),
    )
    algorithms: ClassVar[Mapping[str, frozenset[str]]] = ESTIMATOR_PARAMETERS
    preparations = ("dedupe_dates", "drop_unsettled", "fill_gaps")
    formats = ("csv", "parquet")
    fit_task = "forecasting"
    calibration_stand_ins: ClassVar[Mapping[str, str]] = {
        "seasonal_naive": "logistic_regression",
        "ridge": "logistic_regression",
    }
    size_field = "history_days"
    calibration_sizes = (None, 2100)
    """Days of history: the families' own (about 700) and six years."""
    serving = Serving("dates to forecast (a horizon)", "a forecast value per date", "number")

    def generate(self, spec: Any, seed: int) -> Generated:
        import pyarrow as pa

        from mlsandbox.tasks.timeseries.generate import generate_forecasting

        assert isinstance(spec, ForecastingDataset)
        data = generate_forecasting(spec, seed)
        holdout = data.holdout.copy()
        holdout.attrs[HISTORY_ATTR] = data.history[spec.target].to_numpy(dtype=float)
        holdout.attrs["start"] = spec.start.isoformat()
        manifest = {**data.manifest, "kind": self.name, "target": spec.target}
        return Generated(pa.Table.from_pandas(data.train, preserve_index=False), holdout, manifest)

    def profile(self, frame: Any, target: str | None) -> dict[str, Any]:
        from mlsandbox.tasks.timeseries.quality import profile

        time_column, value, ingested = _columns(frame, target)
        return profile(frame, time_column, value, ingested)

    def prepare(self, frame: Any, strategy: str, target: str | None) -> tuple[Any, dict[str, Any]]:
        from mlsandbox.tasks.timeseries.quality import prepare

        time_column, value, ingested = _columns(frame, target)
        step: Any = strategy
        return prepare(frame, step, time_column=time_column, value_column=value, ingested_column=ingested)

    def trainer_args(self, spec: Any) -> list[str]:
        return ["--task", self.fit_task, "--column", spec.time_column]

    def _figures(self, forecast: Any, holdout: Any, spec: Any) -> dict[str, float]:
        import numpy as np

        from mlsandbox.workloads.forecasting import mase_scale, scores

        values = np.asarray(forecast, dtype=float)
        if values.shape != (len(holdout),) or not np.isfinite(values).all():
            return {"mase": float("inf"), "smape": 200.0}
        actual = holdout[spec.target].to_numpy(dtype=float)
        return scores(actual, values, mase_scale(holdout.attrs[HISTORY_ATTR]))

    def score(self, metric: str, model: Any, holdout: Any, spec: Any) -> float:
        forecast = model.predict(holdout[[spec.time_column]])
        return float(self._figures(forecast, holdout, spec)[self.metric(metric).name])

    def baseline(self, metric: str, holdout: Any, spec: Any) -> float:
        """The seasonal-naive forecast's figure (the last true week repeated) on the horizon."""
        from mlsandbox.workloads.forecasting import Forecaster

        start = str(holdout.attrs["start"])
        naive = Forecaster("seasonal_naive", start, holdout.attrs[HISTORY_ATTR], time_column=spec.time_column)
        forecast = naive.predict(holdout[[spec.time_column]])
        return float(self._figures(forecast, holdout, spec)[self.metric(metric).name])

    def predictions(self, model: Any, frame: Any) -> list[dict[str, Any]]:
        time_column = getattr(model, "time_column", "date")
        values = model.predict(frame)
        return [
            {"date": str(d), "forecast": float(v)} for d, v in zip(frame[time_column], values, strict=True)
        ]

    def policy(self, profile: Mapping[str, Any]) -> Policy:
        steps: list[str] = []
        if profile.get("duplicate_dates"):
            steps.append("dedupe_dates")
        if profile.get("unsettled_rows"):
            steps.append("drop_unsettled")
        if profile.get("absent_days"):
            steps.append("fill_gaps")
        return Policy(tuple(steps), "gradient_boosting")


KIND = TimeseriesForecasting()

__all__ = ["KIND", "ForecastingDataset", "TimeseriesForecasting"]
