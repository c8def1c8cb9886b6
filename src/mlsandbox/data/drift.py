"""Datasets that drift over time: a series of time-partitioned batches of one tabular spec.

Each drift has a schedule giving its intensity in [0, 1] per batch (``sudden``: 1 from ``start`` on;
``gradual``: a linear ramp over ``ramp`` batches from ``start``; ``seasonal``: ``(1 - cos(2 pi (b - start) /
period)) / 2`` from ``start``; ``recurring``: 1 for ``on`` batches, 0 for ``off`` batches, repeating from
``start``). At intensity ``i``:

* covariate shift: a numeric column's mean moves by ``i * shift`` of its std; a categorical column's
  probabilities move linearly to ``probabilities``; a boolean's probability to ``probability``;
* concept drift: a column's weight in the target moves linearly to ``weight`` (class balance kept);
* prior shift: the positive rate moves linearly to ``positive_rate``.

Batch ``b`` is ``generate_tabular`` of the spec with those parameters (and a time column covering the
batch's period), under a seed derived from ``(seed, b)``. The manifest lists, per batch, its period, each
drift's intensity and the effective parameters, plus every batch's own manifest (defects included).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.seeds import check_seed
from mlsandbox.data.spec import (
    BooleanColumn,
    CategoricalColumn,
    DatetimeColumn,
    NumericColumn,
    TabularDataset,
    _check_name,
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Schedule(_Model):
    pattern: Literal["sudden", "gradual", "seasonal", "recurring"] = "sudden"
    start: int = Field(ge=0)
    """First batch (0-based) where the drift can be non-zero."""
    ramp: int = Field(default=3, ge=1)
    """gradual: batches to reach full intensity."""
    period: int = Field(default=4, ge=2)
    """seasonal: batches per cycle."""
    on: int = Field(default=2, ge=1)
    """recurring: batches at full intensity in each cycle."""
    off: int = Field(default=2, ge=1)
    """recurring: batches back at zero in each cycle."""

    def intensity(self, batch: int) -> float:
        k = batch - self.start
        if k < 0:
            return 0.0
        if self.pattern == "sudden":
            return 1.0
        if self.pattern == "gradual":
            return min(1.0, (k + 1) / self.ramp)
        if self.pattern == "seasonal":
            return round((1.0 - math.cos(2 * math.pi * k / self.period)) / 2.0, 12)
        return 1.0 if k % (self.on + self.off) < self.on else 0.0


class CovariateShift(_Model):
    type: Literal["covariate_shift"] = "covariate_shift"
    column: str
    schedule: Schedule
    shift: float = 0.0
    """Numeric: mean shift at full intensity, in the column's std."""
    scale: float = Field(default=1.0, gt=0)
    """Numeric: std multiplier at full intensity."""
    probabilities: list[float] | None = None
    """Categorical: the category probabilities at full intensity."""
    probability: float | None = Field(default=None, gt=0, lt=1)
    """Boolean: the share of true at full intensity."""


class ConceptDrift(_Model):
    type: Literal["concept_drift"] = "concept_drift"
    column: str
    weight: float
    """Numeric or boolean column's weight in the target at full intensity."""
    schedule: Schedule


class PriorShift(_Model):
    type: Literal["prior_shift"] = "prior_shift"
    positive_rate: float = Field(gt=0, lt=1)
    schedule: Schedule


Drift = Annotated[CovariateShift | ConceptDrift | PriorShift, Field(discriminator="type")]


class DriftingDataset(_Model):
    """A tabular dataset delivered as ``batches`` time-partitioned batches with declared drifts."""

    kind: Literal["drifting"] = "drifting"
    base: TabularDataset
    """The spec of every batch (``rows`` ignored: each batch has ``batch_rows``)."""
    batches: int = Field(ge=2, le=240)
    batch_rows: int = Field(ge=50, le=5_000_000)
    start: datetime = datetime(2024, 1, 1)
    period: Literal["day", "week", "month"] = "month"
    time_column: str | None = "event_time"
    drifts: list[Drift] = Field(default_factory=list)

    @field_validator("time_column")
    @classmethod
    def _time_name(cls, v: str | None) -> str | None:
        return None if v is None else _check_name(v)

    @model_validator(mode="after")
    def _consistent(self) -> DriftingDataset:
        columns = {c.name: c for c in self.base.columns}
        if self.time_column is not None and (
            self.time_column in columns or self.time_column == self.base.target
        ):
            raise ValueError(f"time_column {self.time_column!r} is already a column of the base dataset")
        for i, d in enumerate(self.drifts):
            where = f"drifts.{i} ({d.type})"
            if d.schedule.start >= self.batches:
                raise ValueError(f"{where}: schedule.start {d.schedule.start} is past the last batch")
            if isinstance(d, PriorShift):
                if self.base.task != "classification":
                    raise ValueError(f"{where}: prior shift needs a classification target")
                continue
            column = columns.get(d.column)
            if column is None:
                raise ValueError(f"{where}: unknown column {d.column!r}")
            if isinstance(d, ConceptDrift) and not isinstance(column, NumericColumn | BooleanColumn):
                raise ValueError(f"{where}: column {d.column!r} must be numeric or boolean")
            if isinstance(d, CovariateShift):
                _check_covariate(where, d, column)
        return self


def _check_covariate(where: str, d: CovariateShift, column: Any) -> None:
    if isinstance(column, NumericColumn):
        if d.probabilities is not None or d.probability is not None:
            raise ValueError(f"{where}: a numeric column takes shift/scale, not probabilities")
        if d.shift == 0.0 and d.scale == 1.0:
            raise ValueError(f"{where}: set shift or scale")
    elif isinstance(column, CategoricalColumn):
        p = d.probabilities
        if p is None or len(p) != len(column.categories) or any(x <= 0 for x in p) or abs(sum(p) - 1) > 1e-6:
            raise ValueError(
                f"{where}: a categorical column needs probabilities: {len(column.categories)} positive "
                "numbers summing to 1"
            )
    elif isinstance(column, BooleanColumn):
        if d.probability is None:
            raise ValueError(f"{where}: a boolean column needs probability")
    else:
        raise ValueError(f"{where}: column {d.column!r} cannot drift (numeric, categorical or boolean only)")


# ------------------------------------------------------------------------------------------ generation


@dataclass(frozen=True, eq=False)
class GeneratedBatches:
    batches: list[Any]
    """One generated batch (``train_table``, ``holdout``, ``manifest``) per batch, oldest first."""
    manifest: dict[str, Any]


def _add_period(moment: datetime, period: str, k: int) -> datetime:
    if period == "day":
        return datetime.fromordinal(moment.toordinal() + k).replace(
            hour=moment.hour, minute=moment.minute, second=moment.second
        )
    if period == "week":
        return _add_period(moment, "day", 7 * k)
    month = moment.month - 1 + k
    return moment.replace(year=moment.year + month // 12, month=month % 12 + 1, day=1)


def batch_seed(seed: int, batch: int) -> int:
    import numpy as np  # here, not at import: the scenario models import this module's specs

    return int(np.random.SeedSequence([seed, batch]).generate_state(1, dtype=np.uint32)[0])


def _blend(a: list[float], b: list[float], i: float) -> list[float]:
    return [(1 - i) * x + i * y for x, y in zip(a, b, strict=True)]


def batch_spec(spec: DriftingDataset, batch: int) -> tuple[TabularDataset, dict[str, Any]]:
    """The tabular spec of one batch, and the effective parameters that drifted. The batch's spec is of
    the base spec's own model: a regression or multi-class base stays of its kind."""
    columns = {c.name: c for c in spec.base.columns}
    updates: dict[str, dict[str, Any]] = {}
    effective: dict[str, Any] = {}
    positive_rate = spec.base.positive_rate
    for d in spec.drifts:
        i = d.schedule.intensity(batch)
        if isinstance(d, PriorShift):
            positive_rate = (1 - i) * spec.base.positive_rate + i * d.positive_rate
            effective["positive_rate"] = positive_rate
            continue
        column = columns[d.column]
        change = updates.setdefault(d.column, {})
        if isinstance(d, ConceptDrift):
            base_weight = column.weight  # type: ignore[union-attr]
            change["weight"] = (1 - i) * base_weight + i * d.weight
        elif isinstance(column, NumericColumn):
            change["mean"] = column.mean + i * d.shift * column.std
            change["std"] = column.std * ((1 - i) + i * d.scale)
        elif isinstance(column, CategoricalColumn):
            base_p = column.probabilities or [1 / len(column.categories)] * len(column.categories)
            change["probabilities"] = _blend(base_p, d.probabilities or base_p, i)
        elif isinstance(column, BooleanColumn):
            change["probability"] = (1 - i) * column.probability + i * (d.probability or column.probability)
        effective[d.column] = dict(change)
    new_columns = [
        c.model_copy(update=updates[c.name]) if c.name in updates else c for c in spec.base.columns
    ]
    begin, end = _add_period(spec.start, spec.period, batch), _add_period(spec.start, spec.period, batch + 1)
    if spec.time_column is not None:
        new_columns.insert(0, DatetimeColumn(name=spec.time_column, start=begin, end=end))
    data = spec.base.model_dump()
    data.update(rows=spec.batch_rows, columns=[c.model_dump() for c in new_columns])
    if spec.base.task == "classification":
        data["positive_rate"] = positive_rate
    return type(spec.base).model_validate(data), effective


def generate_batches(
    spec: DriftingDataset, seed: int, generate: Callable[[TabularDataset, int], Any] | None = None
) -> GeneratedBatches:
    """Generate every batch (oldest first) and the manifest of the drift. ``generate`` makes one batch
    from its spec and seed (default: :func:`~mlsandbox.data.tabular.generate_tabular`; the world passes
    the spec's kind's generator); what it returns has ``train_table``, ``holdout`` and ``manifest``."""
    from mlsandbox.data.tabular import generate_tabular

    check_seed(seed)
    make = generate or generate_tabular
    batches, described = [], []
    for b in range(spec.batches):
        tab, effective = batch_spec(spec, b)
        generated = make(tab, batch_seed(seed, b))
        batches.append(generated)
        begin, end = _add_period(spec.start, spec.period, b), _add_period(spec.start, spec.period, b + 1)
        described.append(
            {
                "batch": b,
                "start": begin.isoformat(),
                "end": end.isoformat(),
                "rows": spec.batch_rows,
                "intensity": [d.schedule.intensity(b) for d in spec.drifts],
                "effective": effective,
                "manifest": generated.manifest,
            }
        )
    drifts = []
    for d in spec.drifts:
        active = [b for b in range(spec.batches) if d.schedule.intensity(b) > 0]
        drifts.append(
            {
                **d.model_dump(mode="json"),
                "first_drifted_batch": active[0] if active else None,
                "batches": active,
            }
        )
    manifest = {
        "generator": "drifting",
        "dataset": spec.base.name,
        "seed": seed,
        "batches": described,
        "drifts": drifts,
        "period": spec.period,
        "time_column": spec.time_column,
    }
    return GeneratedBatches(batches=batches, manifest=manifest)
