"""Typed specs of synthetic datasets: what to generate, with which signal and which defects.

Scenarios embed these specs; the generators in this package turn them into data plus a manifest.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.defect_spec import (
    ConflictingDuplicates,
    Duplicates,
    InconsistentCategories,
    Injection,
    LabelNoise,
    MissingMAR,
    MissingMNAR,
    TypeCorruption,
    UnitMixup,
)

FileFormat = Literal["csv", "parquet", "avro", "jsonl", "excel"]
"""File formats a dataset can be written in (see :mod:`mlsandbox.data.formats`)."""

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

# Tokens that pandas.read_csv reads as missing by default: a category spelled like one of them would
# silently turn into a missing value (and inflate the missing rate) once written to CSV and read back.
_NA_TOKENS = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
     "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)  # fmt: skip

MAX_OUTLIER_SHARE = 0.4
"""Largest share of a column's present values that may be outliers: beyond it the quartiles are made of
outliers themselves and the 1.5-IQR rule can no longer tell them apart."""


def _check_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise ValueError(
            f"{v!r} is not a valid name: use lowercase letters, digits and _, starting with a letter"
        )
    return v


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NumericColumn(_Model):
    type: Literal["numeric"] = "numeric"
    name: str
    mean: float = 0.0
    std: float = Field(default=1.0, gt=0)
    weight: float = 0.0
    """Contribution of the standardised column to the target's log-odds (0: pure noise column)."""
    min: float | None = None
    """Lower bound: clean values below it are clipped to it (no negative tenure)."""
    max: float | None = None
    """Upper bound: clean values above it are clipped to it."""
    integer: bool = False
    """Round to whole numbers and write as integers (counts, ages)."""
    depends_on: dict[str, float] | None = None
    """Linear-Gaussian parents: ``z = sum_k c_k z_k + sqrt(1 - sum_k c_k^2) e`` on standardised values, so
    ``c_k`` is the correlation with parent ``k`` when the parents are independent. Parents are numeric or
    boolean columns of the same dataset; the graph must be acyclic."""

    _name = field_validator("name")(_check_name)

    @field_validator("mean", "std", "weight", "min", "max")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _bounds_and_parents(self) -> NumericColumn:
        if self.min is not None and self.max is not None and not self.min < self.max:
            raise ValueError(f"min {self.min} must be below max {self.max}")
        for bound, value in (("min", self.min), ("max", self.max)):
            if value is not None and self.integer and not float(value).is_integer():
                raise ValueError(f"{bound} {value} of an integer column must be a whole number")
        if self.depends_on is not None:
            if not self.depends_on:
                raise ValueError("depends_on must name at least one parent column (or be omitted)")
            bad = sorted(k for k, c in self.depends_on.items() if not math.isfinite(c))
            if bad:
                raise ValueError(f"depends_on coefficients of {bad} must be finite numbers")
            if self.name in self.depends_on:
                raise ValueError(f"column {self.name!r} cannot depend on itself")
            total = sum(c * c for c in self.depends_on.values())
            if total >= 1.0:
                raise ValueError(
                    f"depends_on coefficients are correlations with standardised parents: their squares "
                    f"must sum to less than 1, got {total:.4g}"
                )
        return self


class CategoricalColumn(_Model):
    type: Literal["categorical"] = "categorical"
    name: str
    categories: list[str] = Field(min_length=2)
    weights: list[float] | None = None
    """Contribution of each category to the target's log-odds (same length as ``categories``)."""
    probabilities: list[float] | None = None
    """Share of each category (same length as ``categories``, summing to 1; default: uniform)."""

    _name = field_validator("name")(_check_name)

    @field_validator("categories")
    @classmethod
    def _distinct_categories(cls, v: list[str]) -> list[str]:
        dupes = sorted({c for c in v if v.count(c) > 1})
        if dupes:
            raise ValueError(f"duplicate categories: {dupes}")
        na_like = sorted(c for c in v if c.strip() in _NA_TOKENS)
        if na_like:
            raise ValueError(f"categories {na_like} would be read back as missing values from CSV")
        return v

    @model_validator(mode="after")
    def _lengths_match(self) -> CategoricalColumn:
        for field, values in (("weights", self.weights), ("probabilities", self.probabilities)):
            if values is not None and len(values) != len(self.categories):
                raise ValueError(
                    f"{field} has {len(values)} entries but categories has {len(self.categories)}"
                )
        if self.weights is not None and not all(math.isfinite(w) for w in self.weights):
            raise ValueError("weights must be finite numbers")
        if self.probabilities is not None:
            if any(not (p > 0) for p in self.probabilities):
                raise ValueError(f"probabilities must all be > 0, got {self.probabilities}")
            if abs(sum(self.probabilities) - 1.0) > 1e-6:
                raise ValueError(f"probabilities must sum to 1, got {sum(self.probabilities)!r}")
        return self


class BooleanColumn(_Model):
    type: Literal["boolean"] = "boolean"
    name: str
    probability: float = Field(default=0.5, gt=0, lt=1)
    """Share of ``true``."""
    weight: float = 0.0
    """Contribution of ``true`` (vs ``false``) to the target's log-odds."""

    _name = field_validator("name")(_check_name)

    @field_validator("weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


class DatetimeColumn(_Model):
    """Timestamps drawn uniformly in ``[start, end)`` at one-second resolution (naive, read as UTC)."""

    type: Literal["datetime"] = "datetime"
    name: str
    start: datetime = datetime(2024, 1, 1)
    end: datetime = datetime(2025, 1, 1)

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _range(self) -> DatetimeColumn:
        if self.start.tzinfo is not None or self.end.tzinfo is not None:
            raise ValueError("start and end must be naive datetimes (they are read as UTC)")
        if not self.start < self.end:
            raise ValueError(f"start {self.start} must be before end {self.end}")
        return self


class IdColumn(_Model):
    """A unique free-text identifier per row (``prefix`` + ``digits`` zero-padded digits), train and holdout
    together; no signal."""

    type: Literal["id"] = "id"
    name: str
    prefix: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,16}$")
    digits: int = Field(default=8, ge=4, le=12)

    _name = field_validator("name")(_check_name)


Column = Annotated[
    NumericColumn | CategoricalColumn | BooleanColumn | DatetimeColumn | IdColumn, Field(discriminator="type")
]


class Defects(_Model):
    """Defects injected into the agent-visible training data at the requested rates (never the holdout)."""

    missing_rate: float = Field(default=0.0, ge=0, lt=1)
    """Fraction of cells set to missing in each affected feature column (MCAR)."""
    missing_columns: list[str] | None = None
    """Columns that get missing values (default: every feature column)."""
    outlier_rate: float = Field(default=0.0, ge=0, le=MAX_OUTLIER_SHARE)
    """Fraction of rows in each numeric column replaced by extreme values (far outside 1.5 IQR)."""
    outlier_columns: list[str] | None = None
    """Numeric columns that get outliers (default: every numeric column)."""
    injections: list[Injection] = Field(default_factory=list)
    """Further defects (MAR/MNAR missing, duplicates, label noise, inconsistent categories, unit mix-ups,
    type corruption), applied in this order after the missing values and outliers above."""

    @model_validator(mode="after")
    def _one_per_column(self) -> Defects:
        keys = [(i.type, getattr(i, "column", "")) for i in self.injections]
        repeated = sorted({f"{t}:{c}" if c else t for t, c in keys if keys.count((t, c)) > 1})
        if repeated:
            raise ValueError(f"each injection type may appear once per column; repeated: {repeated}")
        return self

    def duplicate_rate(self) -> float:
        return sum(i.rate for i in self.injections if isinstance(i, Duplicates))


class TabularDataset(_Model):
    """A synthetic tabular dataset with a learnable target: binary classification (default) or regression."""

    kind: Literal["tabular"] = "tabular"
    name: str
    rows: int = Field(ge=50, le=5_000_000)
    holdout_rows: int = Field(default=2000, ge=50, le=1_000_000)
    columns: list[Column] = Field(min_length=1)
    target: str = "label"
    task: Literal["classification", "regression"] = "classification"
    positive_rate: float = Field(default=0.5, gt=0, lt=1)
    """Share of the positive class (class imbalance when far from 0.5); classification only."""
    signal_strength: float = Field(default=1.0, ge=0)
    """Scales the column weights: larger gives an easier problem."""
    target_mean: float = 0.0
    """Regression only: ``y = target_mean + signal_strength * sum(weights * z) + noise_std * e``."""
    noise_std: float = Field(default=1.0, gt=0)
    """Regression only: the irreducible noise of the target."""
    defects: Defects = Defects()
    formats: list[FileFormat] = Field(default_factory=lambda: list[FileFormat](["csv"]), min_length=1)

    _names = field_validator("name", "target")(_check_name)

    @model_validator(mode="after")
    def _consistent(self) -> TabularDataset:
        names = [c.name for c in self.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate column names: {dupes}")
        if self.target in names:
            raise ValueError(f"target {self.target!r} must not also be a feature column")
        numeric = {c.name for c in self.columns if c.type == "numeric"}
        for field, cols, allowed in (
            ("defects.missing_columns", self.defects.missing_columns, set(names)),
            ("defects.outlier_columns", self.defects.outlier_columns, numeric),
        ):
            unknown = sorted(set(cols or []) - allowed)
            if unknown:
                raise ValueError(f"{field} names unknown or non-numeric columns: {unknown}")
        both = sorted(set(self.missing_columns()) & set(self.outlier_columns()))
        d = self.defects
        if both and d.outlier_rate > MAX_OUTLIER_SHARE * (1 - d.missing_rate):
            raise ValueError(
                f"defects: outlier_rate {d.outlier_rate} is more than {MAX_OUTLIER_SHARE} of the values "
                f"left after missing_rate {d.missing_rate} in columns {both}; outliers must stay a minority"
            )
        self._check_task()
        self._check_graph()
        self._check_injections()
        return self

    def _check_task(self) -> None:
        # Compared with the defaults (not with the fields set) so a dumped spec validates again.
        if self.task == "regression" and self.positive_rate != 0.5:
            raise ValueError("positive_rate applies to classification only; this dataset is a regression")
        if self.task == "classification":
            wrong = [
                f for f, default in (("target_mean", 0.0), ("noise_std", 1.0)) if getattr(self, f) != default
            ]
            if wrong:
                raise ValueError(f"{wrong} apply to regression only; set task: regression")
        if not math.isfinite(self.target_mean):
            raise ValueError("target_mean must be a finite number")
        id_digits = [c.digits for c in self.columns if c.type == "id"]
        if id_digits and 10 ** min(id_digits) < self.rows + self.holdout_rows:
            raise ValueError(
                f"an id column with {min(id_digits)} digits cannot number {self.rows + self.holdout_rows} rows"
            )

    def _check_graph(self) -> None:
        kinds = {c.name: c.type for c in self.columns}
        for c in self.columns:
            if c.type != "numeric" or not c.depends_on:
                continue
            bad = sorted(p for p in c.depends_on if kinds.get(p) not in ("numeric", "boolean"))
            if bad:
                raise ValueError(f"column {c.name!r} depends on unknown or non-numeric columns: {bad}")
        self.dependency_order()  # raises on a cycle

    def dependency_order(self) -> list[str]:
        """Numeric columns with parents, parents first; raises ValueError on a cycle."""
        parents = {c.name: sorted(c.depends_on) for c in self.columns if c.type == "numeric" and c.depends_on}
        order: list[str] = []
        state: dict[str, int] = {}  # 1: visiting, 2: done

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = [*path[path.index(name) :], name]
                raise ValueError(f"depends_on has a cycle: {' -> '.join(cycle)}")
            state[name] = 1
            for p in parents.get(name, []):
                visit(p, [*path, name])
            state[name] = 2
            if name in parents:
                order.append(name)

        for name in parents:
            visit(name, [])
        return order

    def _check_injections(self) -> None:
        by_name = {c.name: c for c in self.columns}

        def need(i: Injection, column: str, kinds: tuple[str, ...]) -> None:
            kind = by_name[column].type if column in by_name else None
            if kind not in kinds:
                raise ValueError(
                    f"defects.injections {i.type}: column {column!r} must be a "
                    f"{' or '.join(kinds)} feature column (got {kind or 'no such column'})"
                )

        share: dict[str, float] = {}
        for i in self.defects.injections:
            if isinstance(i, MissingMAR):
                need(i, i.column, ("numeric", "categorical", "boolean", "datetime"))
                need(i, i.driver, ("numeric", "boolean"))
                if i.driver == i.column:
                    raise ValueError("defects.injections missing_mar: driver must be another column")
            elif isinstance(i, MissingMNAR | UnitMixup | TypeCorruption):
                need(i, i.column, ("numeric",))
            elif isinstance(i, InconsistentCategories):
                need(i, i.column, ("categorical",))
                unknown = sorted(set(i.variants or {}) - set(by_name[i.column].categories))  # type: ignore[union-attr]
                if unknown:
                    raise ValueError(
                        f"defects.injections inconsistent_categories: unknown categories {unknown}"
                    )
            elif isinstance(i, LabelNoise) and self.task != "classification":
                raise ValueError("defects.injections label_noise applies to classification targets only")
            elif isinstance(i, ConflictingDuplicates) and self.task != "classification":
                raise ValueError(
                    "defects.injections conflicting_duplicates applies to classification targets only"
                )
            if isinstance(i, UnitMixup):
                column = by_name[i.column]
                if column.integer and not float(i.factor).is_integer():  # type: ignore[union-attr]
                    raise ValueError(
                        f"defects.injections unit_mixup: integer column {i.column!r} needs a whole factor"
                    )
            column_name = getattr(i, "column", None)
            if column_name is not None:
                share[column_name] = share.get(column_name, 0.0) + i.rate
        d = self.defects
        for name in self.missing_columns():
            share[name] = share.get(name, 0.0) + d.missing_rate
        for name in self.outlier_columns():
            share[name] = share.get(name, 0.0) + d.outlier_rate
        free = 1.0 - 2 * d.duplicate_rate()
        over = sorted(n for n, total in share.items() if total > 0.9 * free)
        if over:
            raise ValueError(
                f"defects: columns {over} would have more than 90% of their non-duplicated cells defective"
            )

    def missing_columns(self) -> list[str]:
        """Feature columns that receive missing values, in column order (empty when the rate is 0)."""
        if self.defects.missing_rate == 0:
            return []
        chosen = self.defects.missing_columns
        return [c.name for c in self.columns if chosen is None or c.name in chosen]

    def outlier_columns(self) -> list[str]:
        """Numeric columns that receive outliers, in column order (empty when the rate is 0)."""
        if self.defects.outlier_rate == 0:
            return []
        chosen = self.defects.outlier_columns
        return [c.name for c in self.columns if c.type == "numeric" and (chosen is None or c.name in chosen)]


# More kinds (time series, text, images) join as a discriminated union on ``kind``.
DatasetSpec = TabularDataset

__all__ = [
    "MAX_OUTLIER_SHARE",
    "BooleanColumn",
    "CategoricalColumn",
    "Column",
    "ConflictingDuplicates",
    "DatasetSpec",
    "DatetimeColumn",
    "Defects",
    "Duplicates",
    "FileFormat",
    "IdColumn",
    "InconsistentCategories",
    "Injection",
    "LabelNoise",
    "MissingMAR",
    "MissingMNAR",
    "NumericColumn",
    "TabularDataset",
    "TypeCorruption",
    "UnitMixup",
]
