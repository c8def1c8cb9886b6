"""Synthetic univariate time series with known anomalies, regime changes and gaps.

``value(t) = level + trend * t + sum_k amplitude_k * sin(2 pi t / period_k + phase_k) + regimes(t)
+ noise_std * scale(t) * e_t`` on a regular grid of ``length`` steps of ``step_seconds``. Then:

* anomalies, placed apart from each other, from regime changes and from the ends:
  ``point`` adds ``± magnitude * noise_std`` at one step; ``contextual`` flips the seasonal component
  (``-2 * seasonal``) where it is near its extreme, so the value stays in the global range but is wrong
  for its phase; ``collective`` holds the value flat at its first value over ``length`` steps (a stuck
  sensor: each value plausible, the run not);
* regime changes: from step ``at`` on, the level moves by ``level_shift``, the trend by ``trend_change``
  and the noise is multiplied by ``noise_scale``;
* missing intervals: runs of steps whose rows are absent from the output (the sensor was offline).

The manifest gives every anomaly, regime change and gap by step index and timestamp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.spec import _check_name


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Seasonality(_Model):
    period: float = Field(gt=1)
    """In steps (24 for daily on an hourly grid)."""
    amplitude: float = Field(gt=0)
    phase: float = 0.0


class Anomalies(_Model):
    type: Literal["point", "contextual", "collective"]
    count: int = Field(ge=1, le=10_000)
    magnitude: float = Field(default=6.0, gt=0)
    """point: the jump in noise standard deviations."""
    length: int = Field(default=12, ge=2, le=10_000)
    """collective: steps held flat."""


class RegimeChange(_Model):
    at: int = Field(ge=1)
    level_shift: float = 0.0
    trend_change: float = 0.0
    noise_scale: float = Field(default=1.0, gt=0)


class MissingIntervals(_Model):
    count: int = Field(ge=1)
    min_length: int = Field(default=1, ge=1)
    max_length: int = Field(default=24, ge=1)

    @model_validator(mode="after")
    def _order(self) -> MissingIntervals:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length {self.min_length} must not exceed max_length {self.max_length}")
        return self


class TimeSeriesSpec(_Model):
    kind: Literal["timeseries"] = "timeseries"
    name: str
    length: int = Field(ge=50, le=20_000_000)
    start: datetime = datetime(2024, 1, 1)
    step_seconds: int = Field(default=3600, ge=1)
    level: float = 100.0
    trend: float = 0.0
    """Change per step."""
    seasonalities: list[Seasonality] = Field(default_factory=list)
    noise_std: float = Field(default=1.0, gt=0)
    anomalies: list[Anomalies] = Field(default_factory=list)
    regime_changes: list[RegimeChange] = Field(default_factory=list)
    missing: MissingIntervals | None = None
    value_column: str = "value"
    time_column: str = "timestamp"

    _names = field_validator("name", "value_column", "time_column")(_check_name)

    @model_validator(mode="after")
    def _consistent(self) -> TimeSeriesSpec:
        late = [r.at for r in self.regime_changes if r.at >= self.length]
        if late:
            raise ValueError(
                f"regime_changes at {late} are past the end of the series (length {self.length})"
            )
        if any(a.type == "contextual" for a in self.anomalies) and not self.seasonalities:
            raise ValueError("contextual anomalies need at least one seasonality (they break its pattern)")
        if self.value_column == self.time_column:
            raise ValueError("value_column and time_column must differ")
        taken = sum(a.count * (a.length if a.type == "collective" else 1) for a in self.anomalies)
        if self.missing is not None:
            taken += self.missing.count * self.missing.max_length
        if taken * 3 > self.length:
            raise ValueError(
                f"anomalies and gaps would cover {taken} of {self.length} steps: keep them under 1/3"
            )
        return self


@dataclass(frozen=True, eq=False)
class GeneratedSeries:
    table: pa.Table
    """The agent-visible series: ``time_column``, ``value_column``; gaps are absent rows."""
    clean: np.ndarray
    """The series on the full grid before anomalies (for graders)."""
    manifest: dict[str, Any]

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.to_pandas()


def _decimals(noise_std: float) -> int:
    return min(12, max(2, 3 - math.floor(math.log10(noise_std))))


class _Placer:
    """Non-overlapping intervals on the grid, kept a margin apart from each other and the ends."""

    def __init__(self, length: int, rng: np.random.Generator, blocked: list[int]) -> None:
        self.length, self.rng = length, rng
        self.taken = np.zeros(length, dtype=bool)
        for at in blocked:
            self.taken[max(0, at - 3) : at + 3] = True

    def place(self, size: int, margin: int = 3, allowed: np.ndarray | None = None) -> int:
        for _ in range(10_000):
            start = int(self.rng.integers(margin, self.length - size - margin))
            window = slice(start - margin, start + size + margin)
            if self.taken[window].any() or (allowed is not None and not allowed[start]):
                continue
            self.taken[window] = True
            return start
        raise ValueError(
            "could not place every anomaly and gap apart from each other: the series is too short"
        )


def generate_timeseries(spec: TimeSeriesSpec, seed: int) -> GeneratedSeries:
    check_seed(seed)
    n = spec.length
    t = np.arange(n, dtype=np.float64)
    seasonal = np.zeros(n)
    for s in spec.seasonalities:
        seasonal += s.amplitude * np.sin(2 * np.pi * t / s.period + s.phase)
    base = spec.level + spec.trend * t
    scale = np.ones(n)
    for r in sorted(spec.regime_changes, key=lambda r: r.at):
        after = t >= r.at
        base[after] += r.level_shift + r.trend_change * (t[after] - r.at)
        scale[after] = r.noise_scale
    noise = rng_for(seed, spec.name, "noise").standard_normal(n) * spec.noise_std * scale
    decimals = _decimals(spec.noise_std)
    clean = np.round(base + seasonal + noise, decimals) + 0.0
    values = clean.copy()

    rng = rng_for(seed, spec.name, "placement")
    placer = _Placer(n, rng, [r.at for r in spec.regime_changes])
    anomalies: list[dict[str, Any]] = []
    amplitude = float(np.max(np.abs(seasonal))) if spec.seasonalities else 0.0
    extreme = np.abs(seasonal) > 0.7 * amplitude if amplitude else None
    for group in spec.anomalies:
        for _ in range(group.count):
            size = group.length if group.type == "collective" else 1
            start = placer.place(size, allowed=extreme if group.type == "contextual" else None)
            if group.type == "point":
                sign = 1.0 if rng.random() < 0.5 else -1.0
                values[start] = round(
                    values[start] + sign * group.magnitude * spec.noise_std * scale[start], decimals
                )
            elif group.type == "contextual":
                values[start] = round(values[start] - 2.0 * seasonal[start], decimals)
            else:
                values[start : start + size] = values[start]
            anomalies.append({"type": group.type, "start": start, "end": start + size})
    anomalies.sort(key=lambda a: a["start"])

    gaps: list[dict[str, Any]] = []
    keep = np.ones(n, dtype=bool)
    if spec.missing is not None:
        for _ in range(spec.missing.count):
            size = int(rng.integers(spec.missing.min_length, spec.missing.max_length + 1))
            start = placer.place(size)
            keep[start : start + size] = False
            gaps.append({"start": start, "end": start + size})
        gaps.sort(key=lambda g: g["start"])

    step = np.timedelta64(spec.step_seconds, "s")
    stamps = np.datetime64(spec.start, "s") + np.arange(n) * step

    def when(i: int) -> str:
        return (spec.start + timedelta(seconds=spec.step_seconds * i)).isoformat()

    for item in (*anomalies, *gaps):
        item["start_time"], item["end_time"] = when(item["start"]), when(item["end"])
    table = pa.table(
        {spec.time_column: pa.array(stamps[keep], type=pa.timestamp("s")), spec.value_column: values[keep]}
    )
    manifest = {
        "generator": "timeseries",
        "dataset": spec.name,
        "seed": seed,
        "length": n,
        "rows": int(keep.sum()),
        "step_seconds": spec.step_seconds,
        "decimals": decimals,
        "components": {
            "level": spec.level,
            "trend": spec.trend,
            "seasonalities": [s.model_dump() for s in spec.seasonalities],
            "noise_std": spec.noise_std,
        },
        "anomalies": anomalies,
        "regime_changes": [{**r.model_dump(), "time": when(r.at)} for r in spec.regime_changes],
        "missing_intervals": gaps,
    }
    return GeneratedSeries(table=table, clean=clean, manifest=manifest)
