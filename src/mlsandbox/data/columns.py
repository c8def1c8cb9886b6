"""Clean feature columns of one split: values plus the standardised latent values behind them.

Internal representation (shared by the defect injectors and the frame builder):

* numeric, boolean (0/1), datetime (epoch seconds), id (its number): float64, NaN for missing;
* categorical: int32 codes into the column's dictionary, -1 for missing.

Every column has its own generator seeded from ``(seed, dataset, split, "feature", column)``: adding a
column leaves the others unchanged, and the thread pool that draws them never changes a value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from mlsandbox.data.randomness import parallel_map, rng_for
from mlsandbox.data.spec import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    DatetimeColumn,
    IdColumn,
    MissingMAR,
    MissingMNAR,
    NumericColumn,
    TabularDataset,
)

MISSING_CODE = -1
_EPOCH = np.datetime64("1970-01-01T00:00:00", "s")


@dataclass
class Split:
    """The columns of one split while it is being built (mutated in place by the defect injectors)."""

    n: int
    values: dict[str, np.ndarray]
    latent: dict[str, np.ndarray]
    """Standardised clean values of the numeric and boolean columns that need them (signal, dependencies,
    MAR/MNAR; see :func:`latent_needed`)."""
    dictionaries: dict[str, list[str]] = field(default_factory=dict)
    """Categorical columns: their categories, then any injected spelling variants."""
    junk: dict[str, tuple[np.ndarray, list[str]]] = field(default_factory=dict)
    """Type-corrupted numeric columns: rows and the junk text written there (the column becomes text)."""
    decimals: dict[str, int] = field(default_factory=dict)
    """Numeric columns whose values need more decimals than the spec's (unit mix-ups)."""


def decimals_for(column: NumericColumn) -> int:
    """Decimal places a numeric column is rounded to: 2, or more when the std is small (3 digits of std);
    0 for integer columns."""
    if column.integer:
        return 0
    return min(12, max(2, 2 - math.floor(math.log10(column.std))))


def finish_numeric(column: NumericColumn, z: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Latent standard scores to the column's values: scaled, rounded, clipped to its bounds (in ``z``'s
    own memory when ``in_place``: the scores are then gone)."""
    if in_place:
        values = z
        values *= column.std
    else:
        values = z * column.std  # in place from here: the same operations as round(z * std + mean) + 0.0
    values += column.mean
    np.round(values, decimals_for(column), out=values)
    values += 0.0  # no -0.0
    if column.min is not None or column.max is not None:
        np.clip(values, column.min, column.max, out=values)
    return values


def category_probabilities(column: CategoricalColumn) -> np.ndarray:
    if column.probabilities is None:
        return np.full(len(column.categories), 1.0 / len(column.categories))
    p = np.asarray(column.probabilities, dtype=np.float64)
    return p / p.sum()


_COMPARE_MAX_CATEGORIES = 8
"""Up to this many categories, codes are counted by one comparison per bound (about twice as fast as
``searchsorted``); beyond it, searched."""


def _codes(column: CategoricalColumn, rng: np.random.Generator, n: int) -> np.ndarray:
    cdf = np.cumsum(category_probabilities(column))
    u = rng.random(n)
    if len(cdf) > _COMPARE_MAX_CATEGORIES:
        return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int32)
    codes = np.zeros(n, dtype=np.int32)
    for bound in cdf[:-1]:  # the number of bounds <= u: the same codes, without a binary search per row
        codes += u >= bound
    return codes


def seconds(moment: datetime) -> int:
    return int((np.datetime64(moment, "s") - _EPOCH).astype(np.int64))


def _id_numbers(spec: TabularDataset, column: IdColumn, seed: int, offset: int, n: int) -> np.ndarray:
    """Distinct numbers for rows ``offset .. offset + n`` (train first, then holdout): an affine bijection
    modulo ``10**digits`` with a multiplier coprime to 10, so ids never repeat across splits."""
    modulus = 10**column.digits
    rng = rng_for(seed, spec.name, "id", column.name)
    a = int(rng.integers(modulus // 10, modulus)) | 1
    if a % 5 == 0:
        a += 2
    b = int(rng.integers(0, modulus))
    index = np.arange(offset, offset + n, dtype=np.int64)
    return ((a % modulus) * index + b) % modulus  # < 10**12 * 5e6 < 2**63: no overflow


def latent_needed(spec: TabularDataset) -> set[str]:
    """Columns whose latent scores are read after the draw: the signal's (for the columns that use them),
    dependencies' parents, missing-at-random drivers and missing-not-at-random columns. The others are
    finished in place: a column of memory less each (fresh memory is slow to touch)."""
    needed: set[str] = set()
    for column in spec.columns:
        if isinstance(column, NumericColumn):
            uses_latent = column.depends_on or column.min is not None or column.max is not None
            if column.weight != 0.0 and (uses_latent or column.integer):
                needed.add(column.name)
            needed.update(column.depends_on or {})
    for injection in spec.defects.injections:
        if isinstance(injection, MissingMAR):
            needed.add(injection.driver)
        elif isinstance(injection, MissingMNAR):
            needed.add(injection.column)
    return needed


def _independent(
    spec: TabularDataset, column: Column, seed: int, split: str, n: int, offset: int, keep: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """A column's values, and its latent scores when ``keep``."""
    rng = rng_for(seed, spec.name, split, "feature", column.name)
    if isinstance(column, NumericColumn):
        z = rng.standard_normal(n)
        return (finish_numeric(column, z), z) if keep else (finish_numeric(column, z, in_place=True), None)
    if isinstance(column, CategoricalColumn):
        return _codes(column, rng, n), None
    if isinstance(column, BooleanColumn):
        flags = (rng.random(n) < column.probability).astype(np.float64)
        p = column.probability
        return flags, ((flags - p) / math.sqrt(p * (1 - p)) if keep else None)
    if isinstance(column, DatetimeColumn):
        secs = rng.integers(seconds(column.start), seconds(column.end), size=n, dtype=np.int64)
        return secs.astype(np.float64), None
    return _id_numbers(spec, column, seed, offset, n).astype(np.float64), None


def draw_split(spec: TabularDataset, seed: int, split: str, n: int, offset: int = 0) -> Split:
    """Clean columns of one split; ``offset`` is the split's first row number (ids stay unique)."""
    dependent = spec.dependency_order()
    by_name = {c.name: c for c in spec.columns}
    free = [c for c in spec.columns if c.name not in dependent]
    needed = latent_needed(spec)
    drawn = parallel_map(lambda c: _independent(spec, c, seed, split, n, offset, c.name in needed), free)
    values: dict[str, np.ndarray] = {}
    latent: dict[str, np.ndarray] = {}
    for column, (v, z) in zip(free, drawn, strict=True):
        values[column.name] = v
        if z is not None:
            latent[column.name] = z
    for name in dependent:  # parents first
        column = by_name[name]
        assert isinstance(column, NumericColumn) and column.depends_on
        rng = rng_for(seed, spec.name, split, "feature", name)
        coefs = column.depends_on
        z = rng.standard_normal(n) * math.sqrt(1.0 - sum(c * c for c in coefs.values()))
        for parent, c in sorted(coefs.items()):
            z += c * latent[parent]
        if name in needed:
            latent[name], values[name] = z, finish_numeric(column, z)
        else:
            values[name] = finish_numeric(column, z, in_place=True)
    ordered = {c.name: values[c.name] for c in spec.columns}
    dictionaries = {c.name: list(c.categories) for c in spec.columns if isinstance(c, CategoricalColumn)}
    return Split(n=n, values=ordered, latent=latent, dictionaries=dictionaries)
