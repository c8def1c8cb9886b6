"""Typed specs of synthetic datasets: what to generate, with which signal and which defects.

Scenarios embed these specs; the generators in this package turn them into data plus a manifest.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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

    _name = field_validator("name")(_check_name)

    @field_validator("mean", "std", "weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


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


Column = Annotated[NumericColumn | CategoricalColumn, Field(discriminator="type")]


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


class TabularDataset(_Model):
    """A synthetic tabular classification dataset with a learnable binary target."""

    kind: Literal["tabular"] = "tabular"
    name: str
    rows: int = Field(ge=50, le=5_000_000)
    holdout_rows: int = Field(default=2000, ge=50, le=1_000_000)
    columns: list[Column] = Field(min_length=1)
    target: str = "label"
    positive_rate: float = Field(default=0.5, gt=0, lt=1)
    """Share of the positive class (class imbalance when far from 0.5)."""
    signal_strength: float = Field(default=1.0, ge=0)
    """Scales the column weights: larger gives an easier problem."""
    defects: Defects = Defects()
    formats: list[Literal["csv", "parquet"]] = Field(default_factory=lambda: ["csv"], min_length=1)

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
        return self

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
