"""Typed specs of the defects beyond v1's MCAR missing values and outliers (``Defects.injections``).

Each injection touches an exact number of cells, ``round(rate * rows)``, chosen among cells no other
defect has touched, so every rate is exact in the written file. Rows that take part in duplication are
never touched by another defect, so duplicated rows stay exact copies.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Rate = Annotated[float, Field(gt=0, lt=1)]


class MissingMAR(_Model):
    """Missing at random: a cell is more likely missing when another column (``driver``) is high."""

    type: Literal["missing_mar"] = "missing_mar"
    column: str
    rate: Rate
    driver: str
    """A numeric or boolean column; its standardised clean value drives the chance to be missing."""
    strength: float = Field(default=1.0, gt=0, le=5)
    """Rows are drawn with weight ``exp(strength * z_driver)``: for small rates the missing rows' driver
    averages about ``strength`` standard deviations above its mean."""


class MissingMNAR(_Model):
    """Missing not at random: a numeric cell is more likely missing when its own value is high."""

    type: Literal["missing_mnar"] = "missing_mnar"
    column: str
    rate: Rate
    strength: float = Field(default=1.0, gt=0, le=5)
    """Rows are drawn with weight ``exp(strength * z)`` of their own standardised clean value."""


class Duplicates(_Model):
    """``rate * rows`` rows are replaced by exact copies of other rows (label included)."""

    type: Literal["duplicates"] = "duplicates"
    rate: float = Field(gt=0, le=0.3)


class ConflictingDuplicates(_Model):
    """A batch re-sent with its labels flipped: the last ``rate * rows`` rows of the file are replaced by
    copies of earlier rows whose label is not ``label``, each copy labelled ``label`` (so it conflicts
    with the row it copies; a row may be copied more than once). Binary targets only."""

    type: Literal["conflicting_duplicates"] = "conflicting_duplicates"
    rate: float = Field(gt=0, le=0.4)
    label: Literal[0, 1] = 0
    """The label every copy carries (copies are of rows of the other class)."""


class LabelNoise(_Model):
    """A share of the classification labels is flipped (never the holdout's)."""

    type: Literal["label_noise"] = "label_noise"
    rate: float = Field(gt=0, lt=0.5)


class InconsistentCategories(_Model):
    """Categories spelled in other ways ("new york" -> "NEW YORK", "New York", "new york.")."""

    type: Literal["inconsistent_categories"] = "inconsistent_categories"
    column: str
    rate: Rate
    variants: dict[str, list[str]] | None = None
    """Spellings per category; default: upper case, title case and a trailing full stop."""

    @field_validator("variants")
    @classmethod
    def _non_empty(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if v is not None:
            empty = sorted(k for k, spellings in v.items() if not spellings or any(not s for s in spellings))
            if empty:
                raise ValueError(f"variants of {empty} must be non-empty lists of non-empty strings")
        return v


class UnitMixup(_Model):
    """A share of a numeric column recorded in another unit: multiplied by ``factor`` (1000: kg as g)."""

    type: Literal["unit_mixup"] = "unit_mixup"
    column: str
    rate: Rate
    factor: float = 1000.0
    unit_note: str = ""
    """Free text for the manifest, e.g. "grams instead of kilograms"."""

    @field_validator("factor")
    @classmethod
    def _real_change(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0 or abs(math.log10(v)) < 0.3:
            raise ValueError(f"factor must be a positive number at least 2x away from 1, got {v}")
        return v


class TypeCorruption(_Model):
    """A numeric column written as text, with junk in a share of its cells ("12.5 units", "~12.5")."""

    type: Literal["type_corruption"] = "type_corruption"
    column: str
    rate: Rate


Injection = Annotated[
    MissingMAR
    | MissingMNAR
    | Duplicates
    | ConflictingDuplicates
    | LabelNoise
    | InconsistentCategories
    | UnitMixup
    | TypeCorruption,
    Field(discriminator="type"),
]
