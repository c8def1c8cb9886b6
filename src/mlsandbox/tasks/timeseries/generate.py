"""Generate a forecasting dataset: the agent-visible history with its defects, the hidden horizon and a
manifest of every defect.

The smooth part (level 1, trend, yearly wave, noise, level shifts) comes from
:func:`mlsandbox.data.timeseries.generate_timeseries` on a daily grid; the day-of-week pattern, the holiday
effects and the level in units are applied on top. The history's rows carry ``ingested_at``, when the
value was written: settled rows ``settle_days`` after their date, the unsettled tail on the extract's day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from mlsandbox.data.randomness import check_seed, rng_for
from mlsandbox.data.timeseries import RegimeChange, Seasonality, TimeSeriesSpec, generate_timeseries
from mlsandbox.tasks.timeseries.spec import ForecastingDataset
from mlsandbox.workloads.forecasting import CALENDAR

YEAR_DAYS = 365.25


@dataclass(frozen=True, eq=False)
class GeneratedForecasting:
    train: pd.DataFrame
    """The agent-visible history: ``time_column`` (ISO dates), ``target``, ``ingested_column``."""
    history: pd.DataFrame
    """The true history, one row per day, before any defect (for graders: the MASE scale)."""
    holdout: pd.DataFrame
    """The hidden horizon: ``time_column``, ``target``, one row per day after the history."""
    manifest: dict[str, Any]


def holiday_of(day: date, effects: dict[str, float]) -> str | None:
    for name, (month, dom, _) in CALENDAR.items():
        if day.month == month and day.day == dom and name in effects:
            return name
    return None


def generate_forecasting(spec: ForecastingDataset, seed: int) -> GeneratedForecasting:
    check_seed(seed)
    n = spec.history_days + spec.horizon
    base_spec = TimeSeriesSpec(
        name=spec.name,
        length=max(n, 50),
        step_seconds=86_400,
        level=1.0,
        trend=spec.trend / YEAR_DAYS,
        seasonalities=(
            [Seasonality(period=YEAR_DAYS, amplitude=spec.yearly_amplitude, phase=np.pi / 2)]
            if spec.yearly_amplitude > 0
            else []
        ),
        noise_std=max(spec.noise, 1e-6),
        regime_changes=[
            RegimeChange(
                at=s.at_day, level_shift=(s.factor - 1.0) * (1.0 + spec.trend * s.at_day / YEAR_DAYS)
            )
            for s in spec.level_shifts
        ],
    )
    base = np.maximum(generate_timeseries(base_spec, seed).clean[:n], 0.02)
    days = [spec.start + timedelta(days=i) for i in range(n)]
    weekly = np.asarray([spec.weekly[d.weekday()] for d in days])
    effects = spec.effects()
    holidays = [holiday_of(d, effects) for d in days]
    holiday = np.asarray([effects[h] if h else 1.0 for h in holidays])
    truth = np.round(spec.level * base * weekly * holiday, 1)
    iso = [d.isoformat() for d in days]
    h = spec.history_days
    history = pd.DataFrame({spec.time_column: iso[:h], spec.target: truth[:h]})
    holdout = pd.DataFrame({spec.time_column: iso[h:], spec.target: truth[h:]})

    rng = rng_for(seed, spec.name, "forecasting-defects")
    as_of = datetime.combine(spec.start + timedelta(days=h), datetime.min.time())
    values = truth[:h].copy()
    settle = spec.late.settle_days if spec.late else 1
    hours = rng.integers(1, 20, size=h)
    ingested = [
        min(
            datetime.combine(days[i], datetime.min.time()) + timedelta(days=settle, hours=int(hours[i])),
            as_of,
        )
        for i in range(h)
    ]
    unsettled: list[dict[str, Any]] = []
    restated: list[dict[str, Any]] = []
    extra: list[tuple[int, float, datetime]] = []
    if spec.late is not None:
        late = spec.late
        for back in range(late.unsettled_days):
            i = h - 1 - back
            share = late.arrived + (1 - late.arrived) * back / late.unsettled_days
            values[i] = round(truth[i] * share, 1)
            unsettled.append({"date": iso[i], "reported": float(values[i]), "true": float(truth[i])})
        candidates = np.arange(0, h - settle)
        count = round(late.restated_share * candidates.size)
        for i in sorted(rng.choice(candidates, size=count, replace=False).tolist()):
            partial = round(truth[i] * float(rng.uniform(0.3, 0.8)), 1)
            first = datetime.combine(days[i], datetime.min.time()) + timedelta(
                days=1, hours=int(hours[i]) % 6
            )
            extra.append((i, partial, first))
            restated.append({"date": iso[i], "first_reported": partial, "restated": float(truth[i])})
        unsettled.sort(key=lambda u: str(u["date"]))

    keep = np.ones(h, dtype=bool)
    gaps: list[dict[str, Any]] = []
    if spec.gaps is not None:
        lo, hi = 5 * 7, h - settle - 14
        taken = np.zeros(h, dtype=bool)
        for _ in range(spec.gaps.count):
            for _attempt in range(1000):
                size = int(rng.integers(1, spec.gaps.max_length + 1))
                start = int(rng.integers(lo, max(lo + 1, hi - size)))
                if not taken[max(0, start - 3) : start + size + 3].any():
                    break
            else:
                continue
            taken[start : start + size] = True
            keep[start : start + size] = False
            gaps.append({"start": iso[start], "end": iso[start + size - 1], "days": size})
        gaps.sort(key=lambda g: str(g["start"]))

    rows = [(i, float(values[i]), ingested[i]) for i in range(h) if keep[i]]
    rows += [(i, v, t) for i, v, t in extra if keep[i]]
    rows.sort(key=lambda r: (r[0], r[2]))
    train = pd.DataFrame(
        {
            spec.time_column: [iso[i] for i, _, _ in rows],
            spec.target: [v for _, v, _ in rows],
            spec.ingested_column: [t.isoformat(sep=" ") for _, _, t in rows],
        }
    )
    manifest = {
        "generator": "timeseries_forecasting",
        "dataset": spec.name,
        "seed": seed,
        "history_days": h,
        "horizon": spec.horizon,
        "rows": len(train),
        "history_end": iso[h - 1],
        "horizon_start": iso[h] if spec.horizon else None,
        "as_of": as_of.isoformat(sep=" "),
        "holidays": {iso[i]: name for i, name in enumerate(holidays) if name and effects[name] != 1.0},
        "level_shifts": [{"date": iso[s.at_day], "factor": s.factor} for s in spec.level_shifts],
        "gaps": gaps,
        "unsettled": unsettled,
        "restated": [r for r in restated if keep[iso.index(str(r["date"]))]],
        "settle_days": settle,
    }
    return GeneratedForecasting(train=train, history=history, holdout=holdout, manifest=manifest)


__all__ = ["GeneratedForecasting", "generate_forecasting", "holiday_of"]
