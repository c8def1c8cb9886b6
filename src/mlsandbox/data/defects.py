"""Defects injected into the training split, each at an exact count with a ground-truth record.

Order: duplicate rows are chosen first (and kept out of every other defect, so they stay exact copies),
then MCAR missing values and outliers (v1, same random streams), then ``defects.injections`` in spec
order, each on cells that are present and untouched; the duplicated rows are copied last. Records are
``{"column", "kind", "rate", "count", "rows", ...}`` with row indices of the written file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from mlsandbox.data.columns import MISSING_CODE, Split, decimals_for
from mlsandbox.data.randomness import parallel_map, rng_for, sorted_sample
from mlsandbox.data.spec import _NA_TOKENS as NA_TOKENS
from mlsandbox.data.spec import (
    ConflictingDuplicates,
    Duplicates,
    InconsistentCategories,
    LabelNoise,
    MissingMAR,
    MissingMNAR,
    NumericColumn,
    TabularDataset,
    TypeCorruption,
    UnitMixup,
)

OUTLIER_STD_RANGE = (8.0, 15.0)
"""Outliers sit at mean ± U(8, 15) * std: far beyond the 1.5-IQR fences (about ± 2.7 std)."""

JUNK_PATTERNS = ("{}?", "~{}", "{} units", "'{}", "#{}")
"""How type corruption spoils a number's text; none of them parses as a number."""


def count_for(rate: float, rows: int) -> int:
    return round(rate * rows)


def record(column: str | None, kind: str, rate: float, rows: np.ndarray, **extra: Any) -> dict[str, Any]:
    """A defect's record; its row indices stay an array until :func:`rows_to_lists` (JSON wants lists)."""
    return {
        "column": column,
        "kind": kind,
        "rate": rate,
        "count": int(rows.size),
        "rows": rows,
        **extra,
    }


def rows_to_lists(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with their row arrays as lists, in place (done late: it is the slow part for big data)."""
    for rec in records:
        for key in ("rows", "sources"):
            if isinstance(rec.get(key), np.ndarray):
                rec[key] = rec[key].tolist()
    return records


def is_missing(values: np.ndarray) -> np.ndarray:
    return values == MISSING_CODE if values.dtype.kind == "i" else np.isnan(values)


def _weighted_rows(rng: np.random.Generator, pool: np.ndarray, score: np.ndarray, k: int) -> np.ndarray:
    """k rows of ``pool`` drawn without replacement with probability ∝ exp(score) (Gumbel top-k)."""
    keys = score + rng.gumbel(size=pool.size)
    if k >= pool.size:
        return np.sort(pool)
    top = np.argpartition(-keys, k - 1)[:k]
    return np.sort(pool[top])


class Injector:
    """Applies a spec's defects to the training split and the labels, recording each one."""

    def __init__(
        self, spec: TabularDataset, seed: int, split: Split, labels: np.ndarray | Callable[[], np.ndarray]
    ) -> None:
        """``labels``: the array, or a function giving it (called when a defect first needs the labels, so
        they can be computed on another thread meanwhile); changed in place."""
        self.spec, self.seed, self.split, self._labels = spec, seed, split, labels
        self.n = split.n
        self.blocked = np.zeros(self.n, dtype=bool)  # rows taking part in duplication
        self.touched: dict[str, np.ndarray] = {}
        self.records: list[dict[str, Any]] = []
        self.numeric = {c.name: c for c in spec.columns if isinstance(c, NumericColumn)}

    @property
    def labels(self) -> np.ndarray:
        if not isinstance(self._labels, np.ndarray):
            self._labels = self._labels()
        return self._labels

    def rng(self, *purpose: str) -> np.random.Generator:
        return rng_for(self.seed, self.spec.name, "train", *purpose)

    def free_mask(self, column: str) -> np.ndarray:
        """Rows of a column that are present and untouched by any defect (duplicated rows excluded)."""
        bad = self.blocked | is_missing(self.split.values[column])
        if column in self.touched:
            bad |= self.touched[column]
        return ~bad

    def free_rows(self, column: str) -> np.ndarray:
        return np.flatnonzero(self.free_mask(column))

    def touch(self, column: str, rows: np.ndarray) -> None:
        mask = self.touched.setdefault(column, np.zeros(self.n, dtype=bool))
        mask[rows] = True

    def pick(self, allowed: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        """``k`` rows (fewer when fewer are allowed) where ``allowed`` is true, at random, ascending."""
        return sorted_sample(rng, self.n, min(k, int(np.count_nonzero(allowed))), allowed)

    # -------------------------------------------------------------------------------------------- run

    def run(self) -> list[dict[str, Any]]:
        """The defects' records, row indices as arrays (see :func:`rows_to_lists`)."""
        dupes = [i for i in self.spec.defects.injections if isinstance(i, Duplicates)]
        pairs = self._choose_duplicates(dupes[0]) if dupes else None
        flips = [i for i in self.spec.defects.injections if isinstance(i, ConflictingDuplicates)]
        flipped = self._choose_conflicting(flips[0]) if flips else None
        self._missing_mcar()
        self._outliers()
        for inj in self.spec.defects.injections:
            if isinstance(inj, MissingMAR | MissingMNAR):
                self._missing_weighted(inj)
            elif isinstance(inj, LabelNoise):
                self._label_noise(inj)
            elif isinstance(inj, InconsistentCategories):
                self._inconsistent(inj)
            elif isinstance(inj, UnitMixup):
                self._unit_mixup(inj)
            elif isinstance(inj, TypeCorruption):
                self._type_corruption(inj)
        if pairs is not None:
            self._copy_duplicates(dupes[0], *pairs)
        if flipped is not None:
            self._copy_conflicting(flips[0], *flipped)
        return self.records

    # ---------------------------------------------------------------------------------------- v1 defects

    def _missing_mcar(self) -> None:
        rate = self.spec.defects.missing_rate
        allowed = ~self.blocked if self.blocked.any() else None
        k = count_for(rate, self.n)

        def apply(name: str) -> dict[str, Any]:  # one generator per column: the same rows in any thread
            values = self.split.values[name]
            rows = sorted_sample(self.rng("missing", name), self.n, k, allowed)
            values[rows] = MISSING_CODE if values.dtype.kind == "i" else np.nan
            return record(name, "missing", rate, rows)

        self.records.extend(parallel_map(apply, self.spec.missing_columns()))

    def _outliers(self) -> None:
        rate = self.spec.defects.outlier_rate

        def apply(name: str) -> np.ndarray:  # columns are independent: one generator each
            column, values = self.numeric[name], self.split.values[name]
            rng = self.rng("outlier", name)
            rows = self.pick(self.free_mask(name), count_for(rate, self.n), rng)
            k = rows.size
            signs = np.where(np.arange(k) < k // 2, -1.0, 1.0)
            rng.shuffle(signs)
            magnitude = rng.uniform(*OUTLIER_STD_RANGE, size=k)
            values[rows] = np.round(column.mean + signs * magnitude * column.std, decimals_for(column)) + 0.0
            return rows

        names = self.spec.outlier_columns()
        for name, rows in zip(names, parallel_map(apply, names), strict=True):
            self.touch(name, rows)
            self.records.append(record(name, "outlier", rate, rows))

    # -------------------------------------------------------------------------------------- injections

    def _choose_duplicates(self, inj: Duplicates) -> tuple[np.ndarray, np.ndarray]:
        k = count_for(inj.rate, self.n)
        rng = self.rng("duplicates")
        chosen = sorted_sample(rng, self.n, 2 * k)
        self.blocked[chosen] = True
        is_target = np.zeros(2 * k, dtype=bool)  # a random half of the chosen rows are overwritten
        is_target[sorted_sample(rng, 2 * k, k)] = True
        sources = chosen[~is_target]
        rng.shuffle(sources)  # each target copies a random other chosen row
        return chosen[is_target], sources

    def _copy_duplicates(self, inj: Duplicates, targets: np.ndarray, sources: np.ndarray) -> None:
        for values in self.split.values.values():
            values[targets] = values[sources]
        self.labels[targets] = self.labels[sources]
        self.records.append(record(None, "duplicate", inj.rate, targets, sources=sources))

    def _choose_conflicting(self, inj: ConflictingDuplicates) -> tuple[np.ndarray, np.ndarray]:
        """(targets: the last free rows of the file, sources: earlier free rows of the other class, drawn
        with replacement); all of them kept out of every other defect."""
        labels = self.labels
        if labels.dtype != np.bool_:
            raise ValueError("conflicting_duplicates needs a binary target")
        free = np.flatnonzero(~self.blocked)
        k = min(count_for(inj.rate, self.n), free.size // 2)
        targets = free[free.size - k :]
        other = bool(1 - inj.label)
        pool = free[: free.size - k]
        pool = pool[labels[pool] == other]
        if k == 0 or pool.size == 0:
            return targets[:0], targets[:0]
        sources = np.sort(self.rng("conflicting_duplicates").choice(pool, size=k, replace=True))
        self.blocked[targets] = True
        self.blocked[sources] = True
        return targets, sources

    def _copy_conflicting(self, inj: ConflictingDuplicates, targets: np.ndarray, sources: np.ndarray) -> None:
        for values in self.split.values.values():
            values[targets] = values[sources]
        self.labels[targets] = bool(inj.label)
        self.records.append(
            record(self.spec.target, "conflicting_duplicate", inj.rate, targets, sources=sources)
        )

    def _missing_weighted(self, inj: MissingMAR | MissingMNAR) -> None:
        name = inj.column
        pool = self.free_rows(name)
        rng = self.rng(inj.type, name)
        if isinstance(inj, MissingMAR):
            score = inj.strength * self.split.latent[inj.driver][pool]
            extra: dict[str, Any] = {"driver": inj.driver, "strength": inj.strength}
        else:
            score = inj.strength * self.split.latent[name][pool]
            extra = {"strength": inj.strength}
        rows = _weighted_rows(rng, pool, score, count_for(inj.rate, self.n))
        values = self.split.values[name]
        values[rows] = MISSING_CODE if values.dtype.kind == "i" else np.nan
        self.records.append(record(name, inj.type, inj.rate, rows, **extra))

    def _label_noise(self, inj: LabelNoise) -> None:
        rows = self.pick(~self.blocked, count_for(inj.rate, self.n), self.rng("label_noise"))
        self.labels[rows] = ~self.labels[rows]
        self.records.append(record(self.spec.target, "label_noise", inj.rate, rows))

    def _inconsistent(self, inj: InconsistentCategories) -> None:
        name = inj.column
        categories = self.split.dictionaries[name]
        base = len(categories)
        spellings = variants_for(categories, inj.variants)
        offsets: list[int] = []
        flat: list[str] = []
        for category in categories:
            offsets.append(len(flat))
            flat.extend(spellings[category])
        rng = self.rng("inconsistent", name)
        rows = self.pick(self.free_mask(name), count_for(inj.rate, self.n), rng)
        codes = self.split.values[name]
        original = codes[rows]
        counts = np.asarray([len(spellings[c]) for c in categories])
        choice = (rng.random(rows.size) * counts[original]).astype(np.int32)
        codes[rows] = base + np.asarray(offsets, dtype=np.int32)[original] + choice
        self.split.dictionaries[name] = [*categories, *flat]
        self.touch(name, rows)
        self.records.append(record(name, "inconsistent_category", inj.rate, rows, variants=spellings))

    def _unit_mixup(self, inj: UnitMixup) -> None:
        name, column = inj.column, self.numeric[inj.column]
        rows = self.pick(self.free_mask(name), count_for(inj.rate, self.n), self.rng("unit_mixup", name))
        decimals = decimals_for(column) + max(0, math.ceil(-math.log10(inj.factor)))
        values = self.split.values[name]
        values[rows] = np.round(values[rows] * inj.factor, decimals) + 0.0
        if decimals != decimals_for(column):
            self.split.decimals[name] = decimals
        self.touch(name, rows)
        extra = {"factor": inj.factor, "unit_note": inj.unit_note}
        self.records.append(record(name, "unit_mixup", inj.rate, rows, **extra))

    def _type_corruption(self, inj: TypeCorruption) -> None:
        name = inj.column
        rng = self.rng("type_corruption", name)
        rows = self.pick(self.free_mask(name), count_for(inj.rate, self.n), rng)
        patterns = rng.integers(0, len(JUNK_PATTERNS), size=rows.size)
        self.split.junk[name] = (rows, [JUNK_PATTERNS[p] for p in patterns])  # filled with the text later
        self.touch(name, rows)
        self.records.append(record(name, "type_corruption", inj.rate, rows))


def variants_for(categories: list[str], given: dict[str, list[str]] | None) -> dict[str, list[str]]:
    """Other spellings of each category, never equal to a real category."""
    real = set(categories)
    out: dict[str, list[str]] = {}
    for category in categories:
        if given is not None and category in given:
            candidates = given[category]
        else:
            candidates = [category.upper(), category.title(), f"{category}."]
        seen: list[str] = []
        for v in candidates:
            if v not in real and v not in seen and v.strip() not in NA_TOKENS:
                seen.append(v)
        out[category] = seen or [f"{category}."]
    return out
