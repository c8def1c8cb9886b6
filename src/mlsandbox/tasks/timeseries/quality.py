"""What ``check_data_quality`` reports for a forecasting history, and the preparation steps that fix it.

The profile is plain JSON: the date range, duplicate dates, absent days, rows that are not settled yet
(ingested sooner after their date than the usual delay), the largest change of level between
consecutive four-week windows, the calendar holidays that stand out, and the issues in words. Steps
(each returns the new frame and what it changed; the input is never modified):

* ``dedupe_dates``: keep, for each date, the row ingested last (the restated value);
* ``drop_unsettled``: drop rows ingested less than ``settle_days`` after their date (default: the usual
  delay, the median over the rows);
* ``fill_gaps``: one row per day from the first to the last date, an absent day filled with the mean of
  the same weekday a week before and a week after (linear interpolation where both are absent too); the
  ingestion column is dropped: filled days were never ingested.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from mlsandbox.workloads.forecasting import LEVEL_WINDOW, SEASON, holiday_multipliers

Step = Literal["dedupe_dates", "drop_unsettled", "fill_gaps"]
STEPS: tuple[Step, ...] = get_args(Step)


def _delay_days(frame: pd.DataFrame, time_column: str, ingested_column: str) -> pd.Series:
    delay = pd.to_datetime(frame[ingested_column]) - pd.to_datetime(frame[time_column])
    return delay.dt.total_seconds() / 86_400


def profile(frame: pd.DataFrame, time_column: str, value_column: str, ingested_column: str) -> dict[str, Any]:
    """The data-quality profile of a forecasting history."""
    missing = [c for c in (time_column, value_column) if c not in frame.columns]
    if missing:
        raise KeyError(f"columns {missing} are not in the data (columns: {list(frame.columns)})")
    days = pd.to_datetime(frame[time_column]).dt.normalize()
    out: dict[str, Any] = {
        "rows": len(frame),
        "first_date": days.min().date().isoformat() if len(frame) else None,
        "last_date": days.max().date().isoformat() if len(frame) else None,
        "missing_values": int(frame[value_column].isna().sum()),
    }
    duplicated = days[days.duplicated(keep=False)]
    out["duplicate_dates"] = int(duplicated.nunique())
    out["duplicate_date_examples"] = sorted({d.date().isoformat() for d in duplicated})[:5]
    unique = days.drop_duplicates().sort_values()
    full = pd.date_range(unique.min(), unique.max(), freq="D") if len(unique) else pd.DatetimeIndex([])
    absent = full.difference(pd.DatetimeIndex(unique))
    runs: list[dict[str, Any]] = []
    for day in absent:
        if runs and (day - pd.Timestamp(runs[-1]["end"])).days == 1:
            runs[-1]["end"], runs[-1]["days"] = day.date().isoformat(), runs[-1]["days"] + 1
        else:
            runs.append({"start": day.date().isoformat(), "end": day.date().isoformat(), "days": 1})
    out["absent_days"] = len(absent)
    out["gaps"] = runs[:10]
    issues: list[dict[str, str]] = []
    if ingested_column in frame.columns:
        delay = _delay_days(frame, time_column, ingested_column)
        usual = float(delay.median()) if len(delay) else 0.0
        early = frame.loc[delay < np.floor(usual)]
        latest = early[~days.duplicated(keep=False).loc[early.index]]
        out["usual_ingestion_delay_days"] = round(usual, 2)
        out["unsettled_rows"] = len(early)
        out["unsettled_newest_dates"] = sorted(pd.to_datetime(latest[time_column]).dt.date.astype(str))[-7:]
        if len(latest):
            out["unsettled_tail_shortfall"] = _tail_shortfall(frame, days, latest.index, value_column)
        if len(early):
            issues.append({
                "issue": f"{len(early)} rows were ingested sooner than the usual {usual:.1f} days after their date "
                "(values still arriving)"
            })  # fmt: skip
    if out["duplicate_dates"]:
        issues.append({"issue": f"{out['duplicate_dates']} dates have more than one row"})
    if out["absent_days"]:
        issues.append({"issue": f"{out['absent_days']} days are absent in {len(runs)} gaps"})
    series = (
        pd.Series(frame[value_column].to_numpy(dtype=np.float64), index=days)
        .groupby(level=0)
        .last()
        .asfreq("D")
    )
    out["level_change"] = _level_change(series)
    out["weekly_pattern"] = _weekly(series)
    values = series.to_numpy()
    if len(series):
        multipliers = holiday_multipliers(values, series.index[0].date())
        out["holidays"] = {k: round(v, 3) for k, v in sorted(multipliers.items()) if abs(v - 1) > 0.2}
    out["issues"] = issues
    return out


def _tail_shortfall(frame: pd.DataFrame, days: pd.Series, rows: pd.Index, value_column: str) -> float | None:
    """How far below the same weekday one week earlier the unsettled rows are (mean relative shortfall)."""
    by_day = pd.Series(frame[value_column].to_numpy(dtype=np.float64), index=days).groupby(level=0).max()
    ratios = []
    for i in rows:
        week_before = days.loc[i] - pd.Timedelta(days=SEASON)
        if week_before in by_day.index and by_day[week_before] > 0:
            ratios.append(1 - float(frame.loc[i, value_column]) / float(by_day[week_before]))
    return round(float(np.mean(ratios)), 3) if ratios else None


def _level_change(series: pd.Series) -> dict[str, Any] | None:
    """The largest relative change between the means of consecutive four-week windows."""
    means = series.rolling(LEVEL_WINDOW, min_periods=SEASON * 2).mean()
    after = means.shift(-LEVEL_WINDOW)
    change = (after / means - 1).dropna()
    if change.empty:
        return None
    at = change.abs().idxmax()
    return {
        "date": (at + pd.Timedelta(days=1)).date().isoformat(),
        "relative_change": round(float(change[at]), 3),
    }


def _weekly(series: pd.Series) -> dict[str, float]:
    ratio = series / series.rolling(LEVEL_WINDOW, min_periods=SEASON).mean()
    names = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
    by_dow = ratio.groupby(ratio.index.day_of_week).median()
    return {names[int(k)]: round(float(v), 3) for k, v in by_dow.items() if np.isfinite(v)}


def prepare(
    frame: pd.DataFrame,
    step: Step,
    *,
    time_column: str,
    value_column: str,
    ingested_column: str,
    settle_days: float | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Apply one preparation ``step``; returns the new frame (fresh 0..n-1 index) and what changed."""
    if step == "dedupe_dates":
        order = [time_column, ingested_column] if ingested_column in frame.columns else [time_column]
        ordered = frame.sort_values(order, kind="stable")
        out = ordered.drop_duplicates(time_column, keep="last")
        return out.reset_index(drop=True), {"rows_removed": len(frame) - len(out)}
    if step == "drop_unsettled":
        if ingested_column not in frame.columns:
            wanted = repr(ingested_column) if ingested_column else "of ingestion times ('ingested_at')"
            raise KeyError(
                f"drop_unsettled needs the column {wanted}, which this table lacks (columns: {list(frame.columns)})"
            )
        delay = _delay_days(frame, time_column, ingested_column)
        threshold = float(np.floor(delay.median())) if settle_days is None else float(settle_days)
        out = frame.loc[delay >= threshold]
        return out.reset_index(drop=True), {"rows_removed": len(frame) - len(out), "settle_days": threshold}
    if step == "fill_gaps":
        days = pd.to_datetime(frame[time_column]).dt.normalize()
        if days.duplicated().any():
            raise ValueError("fill_gaps needs one row per date: dedupe the dates first")
        series = (
            pd.Series(frame[value_column].to_numpy(dtype=np.float64), index=days).sort_index().asfreq("D")
        )
        filled = int(series.isna().sum())
        week = pd.concat([series.shift(SEASON), series.shift(-SEASON)], axis=1).mean(axis=1)
        series = series.fillna(week).interpolate(limit_direction="both")
        out = pd.DataFrame({time_column: series.index.date.astype(str), value_column: series.to_numpy()})
        return out, {"days_filled": filled}
    raise ValueError(f"unknown preparation step {step!r}; choose one of {list(STEPS)}")


__all__ = ["STEPS", "Step", "prepare", "profile"]
