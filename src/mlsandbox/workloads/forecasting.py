"""Forecasting, for real: the algorithms a trainer job fits, their forecasts and the metrics.

``seasonal_naive`` repeats the last observed value of the same weekday. ``gradient_boosting``
(scikit-learn's ``GradientBoostingRegressor``: no OpenMP, so a fit costs the same on a busy machine) and
``ridge`` learn the next day's value relative to the recent level (the mean of the previous 28 days) from
lag ratios (1, 7, 14, 21, 28 days), the day of the week and the time of year, on the series adjusted for
the calendar's holidays (each holiday's multiplier estimated from its past occurrences against the usual
ratio of its weekday), and forecast the horizon recursively (each forecast day becomes a lag of the next,
the holiday multipliers applied back). Gaps in the history are missing lags: the booster takes them,
``ridge`` refuses them with scikit-learn's own error. Two rows for one date make pandas refuse the series.

Metrics: MASE (the mean absolute error over the horizon divided by the in-sample mean absolute error of
the seasonal-naive one-season-ahead forecast on the history) and sMAPE (percent). Heavy imports are
deferred; it imports nothing from mlsandbox, so the trainer job runs it in any image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

SEASON = 7
"""The seasonal period in days: the seasonal-naive baseline repeats the last week."""
CALENDAR: dict[str, tuple[int, int, float]] = {
    "new_year": (1, 1, 0.3),
    "valentines_day": (2, 14, 1.35),
    "independence_day": (7, 4, 0.5),
    "halloween": (10, 31, 1.4),
    "singles_day": (11, 11, 1.8),
    "christmas_eve": (12, 24, 1.7),
    "christmas": (12, 25, 0.2),
    "boxing_day": (12, 26, 1.5),
    "new_years_eve": (12, 31, 1.3),
}
"""The public holiday calendar (name: month, day, default effect), the same dates every year: the
generator applies the effects, the calendar features of a forecaster read the dates."""
ALGORITHMS = ("seasonal_naive", "gradient_boosting", "ridge")
ESTIMATOR_PARAMETERS: dict[str, frozenset[str]] = {
    "seasonal_naive": frozenset(),
    "gradient_boosting": frozenset(
        ["alpha", "ccp_alpha", "criterion", "init", "learning_rate", "loss", "max_depth", "max_features",
         "max_leaf_nodes", "min_impurity_decrease", "min_samples_leaf", "min_samples_split",
         "min_weight_fraction_leaf", "n_estimators", "n_iter_no_change", "random_state", "subsample", "tol",
         "validation_fraction", "verbose", "warm_start"]
    ),
    "ridge": frozenset(["alpha", "copy_X", "fit_intercept", "max_iter", "positive", "random_state", "solver", "tol"]),
}  # fmt: skip
"""Each algorithm's estimator parameters as scikit-learn spells them (``get_params()`` of the pinned
version; a unit test holds them equal), kept as data so validating an action imports no scikit-learn."""
LAGS = (1, 7, 14, 21, 28)
LEVEL_WINDOW = 28
HOLIDAY_DATES = {(month, day): name for name, (month, day, _) in CALENDAR.items()}


def hyperparameter_problems(algorithm: str, hyperparams: dict[str, Any]) -> list[str]:
    """What is wrong with ``hyperparams`` for ``algorithm`` (empty: nothing)."""
    if algorithm not in ESTIMATOR_PARAMETERS:
        return [f"unknown algorithm {algorithm!r} for forecasting; choose one of {list(ALGORITHMS)}"]
    unknown = sorted(set(hyperparams) - ESTIMATOR_PARAMETERS[algorithm])
    if not unknown:
        return []
    known = sorted(ESTIMATOR_PARAMETERS[algorithm]) or "none"
    return [f"{algorithm} has no parameter(s) {unknown}; its parameters: {known}"]


def daily_series(frame: Any, time_column: str, value_column: str) -> Any:
    """The frame as a daily pandas series (absent days are NaN). Duplicate dates raise pandas' own
    ``ValueError`` (cannot reindex on an axis with duplicate labels)."""
    import numpy as np
    import pandas as pd

    index = pd.DatetimeIndex(pd.to_datetime(frame[time_column]).dt.normalize(), name=time_column)
    series = pd.Series(pd.to_numeric(frame[value_column]).to_numpy(dtype=np.float64), index=index)
    return series.sort_index().asfreq("D")


def _row(values: np.ndarray, t: int, day: date) -> list[float] | None:
    import numpy as np

    window = values[max(0, t - LEVEL_WINDOW) : t]
    present = window[~np.isnan(window)]
    if present.size < SEASON:
        return None
    level = float(present.mean())
    if level <= 0:
        return None
    lags = [values[t - k] / level if t - k >= 0 else math.nan for k in LAGS]
    dow = [1.0 if day.weekday() == k else 0.0 for k in range(SEASON)]
    angle = 2 * math.pi * day.timetuple().tm_yday / 365.25
    return [*lags, *dow, math.sin(angle), math.cos(angle), level]


def holiday_name(day: date) -> str | None:
    return HOLIDAY_DATES.get((day.month, day.day))


def holiday_multipliers(values: np.ndarray, start: date) -> dict[str, float]:
    """Each calendar holiday's multiplier seen in ``values``: the median, over its occurrences, of its
    ratio to the recent level divided by the usual (median non-holiday) ratio of its weekday."""
    import numpy as np

    ratios: dict[int, list[float]] = {k: [] for k in range(SEASON)}
    seen: dict[str, list[tuple[int, float]]] = {}
    for t in range(LEVEL_WINDOW, values.size):
        window = values[t - LEVEL_WINDOW : t]
        present = window[~np.isnan(window)]
        if math.isnan(values[t]) or present.size < SEASON or present.mean() <= 0:
            continue
        day = start + timedelta(days=t)
        ratio = float(values[t] / present.mean())
        name = holiday_name(day)
        if name is None:
            ratios[day.weekday()].append(ratio)
        else:
            seen.setdefault(name, []).append((day.weekday(), ratio))
    usual = {k: float(np.median(v)) if v else 1.0 for k, v in ratios.items()}
    return {name: float(np.median([r / usual[k] for k, r in items])) for name, items in seen.items()}


def _adjusted(values: np.ndarray, start: date, multipliers: dict[str, float]) -> np.ndarray:
    out = values.copy()
    for t in range(values.size):
        name = holiday_name(start + timedelta(days=t))
        if name in multipliers:
            out[t] = values[t] / multipliers[name]
    return out


def _matrix(values: np.ndarray, start: date) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    rows, targets = [], []
    for t in range(max(LAGS), values.size):
        if math.isnan(values[t]):
            continue
        row = _row(values, t, start + timedelta(days=t))
        if row is None:
            continue
        rows.append(row[:-1])
        targets.append(values[t] / row[-1])
    if not rows:
        raise ValueError(
            f"too little history to learn from: fewer than {SEASON} observed days before any day"
        )
    return np.asarray(rows), np.asarray(targets)


def make_estimator(algorithm: str, hyperparams: dict[str, Any], seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import Ridge

    if algorithm == "gradient_boosting":
        return GradientBoostingRegressor(random_state=seed).set_params(**hyperparams)
    if algorithm == "ridge":
        return Ridge(alpha=1.0, random_state=seed).set_params(**hyperparams)
    raise ValueError(f"unknown algorithm {algorithm!r}")


@dataclass(eq=False)
class Forecaster:
    """A fitted forecaster: the history it saw (daily, NaN for gaps) and, but for ``seasonal_naive``, its
    estimator. ``predict`` takes a frame with the time column (or dates) and returns one value per date."""

    algorithm: str
    start: str
    """The history's first date (ISO: a date object would be a type outside the libraries' to a model
    loader that trusts only those)."""
    history: np.ndarray
    time_column: str = "date"
    estimator: Any = None
    hyperparams: dict[str, Any] = field(default_factory=dict)
    multipliers: dict[str, float] = field(default_factory=dict)
    """Each holiday's multiplier learned from the history (the series is modelled without them)."""

    @property
    def end(self) -> date:
        """The first day after the history."""
        return self.first + timedelta(days=int(self.history.size))

    @property
    def first(self) -> date:
        """The history's first date."""
        return date.fromisoformat(self.start)

    def forecast(self, days: Sequence[date]) -> np.ndarray:
        import numpy as np

        if not days:
            return np.zeros(0)
        last = max(days)
        ahead = (last - self.end).days + 1
        adjusted = _adjusted(self.history, self.first, self.multipliers)
        values = np.concatenate([adjusted, np.full(max(ahead, 0), np.nan)])
        for t in range(self.history.size, values.size):
            values[t] = self._next(values, t)
        values = values * np.asarray(
            [
                self.multipliers.get(holiday_name(self.first + timedelta(days=t)) or "", 1.0)
                for t in range(values.size)
            ]
        )
        out = []
        for d in days:
            t = (d - self.first).days
            if t < self.history.size:
                raise ValueError(f"{d} is inside the history (it ends {self.end - timedelta(days=1)})")
            out.append(values[t])
        return np.asarray(out, dtype=np.float64)

    def _next(self, values: np.ndarray, t: int) -> float:
        import numpy as np

        if self.estimator is None:
            for back in range(t - SEASON, -1, -SEASON):
                if not math.isnan(values[back]):
                    return float(values[back])
            return math.nan
        row = _row(values, t, self.first + timedelta(days=t))
        if row is None:
            raise ValueError(f"no level to forecast day {t}: fewer than {SEASON} known days before it")
        ratio = float(self.estimator.predict(np.asarray([row[:-1]]))[0])
        return max(0.0, ratio * row[-1])

    def predict(self, frame: Any) -> np.ndarray:
        """One forecast per row of ``frame[time_column]`` (or per item of a list of dates)."""
        import pandas as pd

        raw = frame[self.time_column] if hasattr(frame, "columns") else frame
        days = [d.date() for d in pd.to_datetime(pd.Series(list(raw)))]
        return self.forecast(days)


def fit_forecaster(
    frame: Any, algorithm: str, hyperparams: dict[str, Any], seed: int, *, time_column: str, value_column: str
) -> Forecaster:
    """Fit ``algorithm`` on the whole of ``frame`` (raises the libraries' own errors on bad input)."""
    import numpy as np

    series = daily_series(frame, time_column, value_column)
    if series.empty:
        raise ValueError("the series is empty")
    values = series.to_numpy(dtype=np.float64)
    start = series.index[0].date()
    model = Forecaster(
        algorithm, start.isoformat(), values, time_column=time_column, hyperparams=dict(hyperparams)
    )
    if algorithm == "seasonal_naive":
        if hyperparams:
            raise TypeError(f"seasonal_naive takes no parameters, got {sorted(hyperparams)}")
        return model
    model.multipliers = holiday_multipliers(values, start)
    x, y = _matrix(_adjusted(values, start, model.multipliers), start)
    model.estimator = make_estimator(algorithm, hyperparams, seed).fit(x, y)
    return model


def mase_scale(history: np.ndarray) -> float:
    """The in-sample mean absolute error of the one-season-ahead seasonal-naive forecast."""
    import numpy as np

    diffs = np.abs(history[SEASON:] - history[:-SEASON])
    diffs = diffs[~np.isnan(diffs)]
    return float(diffs.mean()) if diffs.size else math.nan


def scores(actual: np.ndarray, forecast: np.ndarray, scale: float) -> dict[str, float]:
    """``mase`` and ``smape`` (percent) of ``forecast`` against ``actual``."""
    import numpy as np

    error = np.abs(actual - forecast)
    denom = np.abs(actual) + np.abs(forecast)
    smape = float(np.mean(np.where(denom > 0, 2 * error / np.where(denom > 0, denom, 1), 0.0)) * 100)
    mase = float(error.mean() / scale) if scale > 0 else math.inf
    return {"mase": mase if math.isfinite(mase) else math.inf, "smape": smape}


def evaluate(
    model: Forecaster, history: np.ndarray, actual_frame: Any, value_column: str
) -> dict[str, float]:
    """The model's and the seasonal-naive baseline's scores on ``actual_frame`` (dates after the history
    ``history`` ends), the MASE scale taken from ``history``. A forecast that is not finite scores
    ``inf``."""
    import numpy as np
    import pandas as pd

    days = [d.date() for d in pd.to_datetime(actual_frame[model.time_column])]
    actual = actual_frame[value_column].to_numpy(dtype=np.float64)
    scale = mase_scale(history)
    forecast = model.forecast(days)
    baseline = Forecaster("seasonal_naive", model.start, history, time_column=model.time_column).forecast(
        days
    )
    own = (
        scores(actual, forecast, scale) if np.isfinite(forecast).all() else {"mase": math.inf, "smape": 200.0}
    )
    base = scores(actual, baseline, scale)
    return {
        "mase": own["mase"],
        "smape": own["smape"],
        "baseline_mase": base["mase"],
        "relative_mase": own["mase"] / base["mase"] if base["mase"] > 0 else math.inf,
    }


def validate(
    frame: Any,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    *,
    time_column: str,
    value_column: str,
    horizon: int = 28,
) -> dict[str, float]:
    """``val_*`` metrics of ``algorithm`` fitted on all but the last ``horizon`` days of ``frame`` and
    scored on them (against the seasonal-naive forecast of the same history)."""
    import numpy as np

    series = daily_series(frame, time_column, value_column)
    cut = series.index[-1] - np.timedelta64(horizon, "D")
    train = series[series.index <= cut]
    held = series[series.index > cut].dropna()
    fitted = fit_forecaster(
        train.rename(value_column).reset_index(), algorithm, hyperparams, seed,
        time_column=time_column, value_column=value_column,
    )  # fmt: skip
    held_frame = held.rename(value_column).reset_index()
    return {
        f"val_{k}": round(v, 6) for k, v in evaluate(fitted, fitted.history, held_frame, value_column).items()
    }


@dataclass(frozen=True)
class FitOutcome:
    """A real fit: its validation metrics and the model fitted on all rows, or how it failed."""

    rows: int
    metrics: dict[str, float] = field(default_factory=dict)
    model: Forecaster | None = None
    failure: tuple[str, str] | None = None


def fit(
    frame: Any,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    *,
    time_column: str,
    value_column: str,
) -> FitOutcome:
    """:func:`fit_job` in process (``sim``): the libraries' refusals become the failure (``invalid_data``
    for the data, ``invalid_hyperparameter`` for the parameters)."""
    try:
        metrics, model = fit_job(
            frame, algorithm, hyperparams, seed, value_column, time_column, lambda _: None
        )
    except (KeyError, TypeError, ValueError) as e:
        message = f"{type(e).__name__}: {e}"
        data = isinstance(e, KeyError) or any(
            w in str(e) for w in ("NaN", "duplicate", "history", "empty", "level")
        )
        return FitOutcome(
            rows=len(frame), failure=("invalid_data" if data else "invalid_hyperparameter", message)
        )
    return FitOutcome(rows=len(frame), metrics=metrics, model=model)


def fit_job(
    frame: Any,
    algorithm: str,
    hyperparams: dict[str, Any],
    seed: int,
    target: str,
    column: str | None,
    say: Any = print,
) -> tuple[dict[str, float], Forecaster]:
    """The trainer job's fit: validation metrics on the last four weeks, then the model fitted on every
    row (raises the libraries' own errors)."""
    time_column = column or "date"
    say(f"validating {algorithm} on the last 28 days of {len(frame)} rows ...")
    metrics = validate(frame, algorithm, hyperparams, seed, time_column=time_column, value_column=target)
    say(f"fitting {algorithm} on every row ...")
    model = fit_forecaster(frame, algorithm, hyperparams, seed, time_column=time_column, value_column=target)
    return metrics, model


__all__ = [
    "ALGORITHMS",
    "CALENDAR",
    "ESTIMATOR_PARAMETERS",
    "SEASON",
    "FitOutcome",
    "Forecaster",
    "daily_series",
    "evaluate",
    "fit",
    "fit_forecaster",
    "fit_job",
    "hyperparameter_problems",
    "mase_scale",
    "scores",
    "validate",
]
