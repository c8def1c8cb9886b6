"""``sorted_sample``: k distinct values of [0, n), uniform over the k-subsets, ascending."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy.stats import chisquare

from mlsandbox.data.randomness import rng_for, sorted_sample


@pytest.mark.parametrize(
    ("n", "k"),
    [(0, 0), (10, 0), (1, 1), (10, 3), (10, 5), (10, 6), (10, 10), (1_000, 999), (1_000_000, 100_000)],
)
def test_distinct_in_range_and_ascending(n: int, k: int) -> None:
    rows = sorted_sample(np.random.default_rng(n + k), n, k)
    assert rows.dtype == np.int64 and rows.size == k
    assert np.all(np.diff(rows) > 0)
    if k:
        assert rows[0] >= 0 and rows[-1] < n


@pytest.mark.parametrize(("n", "k"), [(10, 3), (8, 5), (12, 2)])
def test_every_subset_is_equally_likely(n: int, k: int) -> None:
    """A chi-square test over all k-subsets (30,000 draws; it fails at p < 0.001, one run in a thousand
    for a fair sampler, and the seed is fixed)."""
    rng = np.random.default_rng(1000 * n + k)
    index = {c: i for i, c in enumerate(combinations(range(n), k))}
    counts = np.zeros(len(index))
    for _ in range(30_000):
        counts[index[tuple(sorted_sample(rng, n, k).tolist())]] += 1
    assert chisquare(counts).pvalue > 1e-3


def test_the_same_generator_state_gives_the_same_rows() -> None:
    a = sorted_sample(rng_for(1, "x"), 100_000, 10_000)
    assert np.array_equal(a, sorted_sample(rng_for(1, "x"), 100_000, 10_000))
    assert not np.array_equal(a, sorted_sample(rng_for(2, "x"), 100_000, 10_000))


@pytest.mark.parametrize(("n", "k"), [(5, 6), (5, -1)])
def test_impossible_counts_are_refused(n: int, k: int) -> None:
    with pytest.raises(ValueError, match="cannot draw"):
        sorted_sample(np.random.default_rng(0), n, k)


def test_only_allowed_values_are_drawn_and_uniformly() -> None:
    allowed = np.zeros(12, dtype=bool)
    allowed[[0, 2, 3, 5, 7, 8, 11]] = True
    members = np.flatnonzero(allowed).tolist()
    rng = np.random.default_rng(7)
    for k in range(len(members) + 1):  # below and above half: the bitmap and the complement
        rows = sorted_sample(rng, 12, k, allowed).tolist()
        assert len(rows) == k and set(rows) <= set(members) and rows == sorted(rows)
    index = {c: i for i, c in enumerate(combinations(members, 2))}
    counts = np.zeros(len(index))
    for _ in range(20_000):
        counts[index[tuple(sorted_sample(rng, 12, 2, allowed).tolist())]] += 1
    assert chisquare(counts).pvalue > 1e-3
    with pytest.raises(ValueError, match="cannot draw 8 distinct values from 7"):
        sorted_sample(rng, 12, 8, allowed)


def test_few_allowed_values_among_many() -> None:
    """One allowed value in a thousand: drawn among the allowed positions, not over the whole range."""
    allowed = np.zeros(1_000_000, dtype=bool)
    allowed[::1000] = True
    rows = sorted_sample(np.random.default_rng(3), allowed.size, 300, allowed)
    assert rows.size == 300 and np.all(rows % 1000 == 0) and np.all(np.diff(rows) > 0)
