"""The dataset spec of the time-series forecasting kind: a daily demand series and its defects.

The signal: a level with a yearly growth ``trend``, a day-of-week pattern, a yearly wave, holiday effects
and multiplicative noise. The defects an engineer has to notice before fitting:

* ``level_shifts``: from a day on the level moves by a factor (a store refit, a price change);
* ``gaps``: runs of days absent from the file (an ingestion outage);
* ``late``: the newest ``unsettled_days`` days are still arriving (their values are a fraction of the
  truth), and a share of older days was first written partially and later restated (two rows for the
  same date; the later ``ingested_at`` holds the settled value).

The hidden holdout is the ``horizon`` days right after the history, before any defect.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.spec import _check_name
from mlsandbox.workloads.forecasting import CALENDAR, SEASON


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LevelShift(_Model):
    at_day: int = Field(ge=1)
    """Index of the first day at the new level."""
    factor: float = Field(gt=0.1, le=10)


class Gaps(_Model):
    count: int = Field(ge=1, le=100)
    max_length: int = Field(default=5, ge=1, le=60)


class LateArrival(_Model):
    unsettled_days: int = Field(default=3, ge=1, le=14)
    """The newest days still arriving."""
    arrived: float = Field(default=0.4, gt=0, lt=1)
    """The share of the newest day's value arrived so far (rising linearly to 1 past the unsettled days)."""
    settle_days: int = Field(default=4, ge=1, le=30)
    """Days after which a date's value is settled (``ingested_at - date``)."""
    restated_share: float = Field(default=0.0, ge=0, le=0.5)
    """Share of older days written twice: first partially, then restated with the settled value."""

    @model_validator(mode="after")
    def _settled_after_unsettled(self) -> LateArrival:
        if self.settle_days <= self.unsettled_days:
            raise ValueError(
                f"settle_days {self.settle_days} must exceed unsettled_days {self.unsettled_days}"
            )
        return self


class ForecastingDataset(_Model):
    """A daily series to forecast ``horizon`` days ahead."""

    kind: Literal["timeseries_forecasting"] = "timeseries_forecasting"
    name: str
    start: date = date(2023, 1, 1)
    history_days: int = Field(default=700, ge=120, le=3650)
    horizon: int = Field(default=28, ge=SEASON, le=90)
    level: float = Field(default=1000.0, gt=0)
    trend: float = Field(default=0.0, ge=-0.5, le=2.0)
    """Relative growth per year (0.1: +10 % a year)."""
    weekly: list[float] = Field(default_factory=lambda: [0.9, 0.95, 1.0, 1.0, 1.1, 1.35, 0.7])
    """Day-of-week multipliers, Monday first."""
    yearly_amplitude: float = Field(default=0.1, ge=0, lt=0.9)
    noise: float = Field(default=0.05, ge=0, le=1)
    """Relative standard deviation of the daily noise."""
    holiday_effects: dict[str, float] = Field(default_factory=dict)
    """Overrides of the calendar's effects by holiday name: the day's value is multiplied by the effect
    (0.2: mostly closed; 1.8: a peak; 1: no effect)."""
    level_shifts: list[LevelShift] = Field(default_factory=list)
    gaps: Gaps | None = None
    late: LateArrival | None = None
    formats: list[Literal["csv", "parquet"]] = Field(default_factory=lambda: ["csv"], min_length=1)  # type: ignore[arg-type]
    time_column: str = "date"
    target: str = "sales"
    ingested_column: str = "ingested_at"

    _names = field_validator("name", "time_column", "target", "ingested_column")(_check_name)

    @model_validator(mode="after")
    def _consistent(self) -> ForecastingDataset:
        if len(self.weekly) != SEASON or any(w <= 0 for w in self.weekly):
            raise ValueError(f"weekly must be {SEASON} positive multipliers (Monday first)")
        late = sorted(s.at_day for s in self.level_shifts if s.at_day >= self.history_days)
        if late:
            raise ValueError(f"level_shifts at days {late} are past the history ({self.history_days} days)")
        columns = [self.time_column, self.target, self.ingested_column]
        if len(set(columns)) != len(columns):
            raise ValueError(f"time_column, target and ingested_column must differ: {columns}")
        if self.gaps is not None and self.gaps.count * self.gaps.max_length * 4 > self.history_days:
            raise ValueError("gaps would cover more than a quarter of the history")
        unknown = sorted(set(self.holiday_effects) - set(CALENDAR))
        if unknown:
            raise ValueError(f"holiday_effects names {unknown} are not in the calendar: {sorted(CALENDAR)}")
        bad = sorted(k for k, v in self.holiday_effects.items() if not 0 < v <= 10)
        if bad:
            raise ValueError(f"holiday_effects of {bad} must be in (0, 10]")
        return self

    def effects(self) -> dict[str, float]:
        """Every calendar holiday's effect in this dataset."""
        return {name: self.holiday_effects.get(name, default) for name, (_, _, default) in CALENDAR.items()}


__all__ = ["CALENDAR", "SEASON", "ForecastingDataset", "Gaps", "LateArrival", "LevelShift"]
