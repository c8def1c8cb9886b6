"""Named, independent random streams: one generator per purpose under one seed."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


def rng_for(seed: int, *purpose: str) -> np.random.Generator:
    """A generator for one purpose, independent of every other purpose under the same seed."""
    digest = hashlib.blake2b("/".join(purpose).encode(), digest_size=16).digest()
    entropy = [seed, int.from_bytes(digest, "little")]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


def check_seed(seed: object) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return seed


def workers() -> int:
    """Threads for column-parallel work (numpy and Arrow release the GIL); results never depend on it."""
    return max(1, min(4, os.cpu_count() or 1))


def parallel_map(fn: Callable[[T], R], items: Iterable[T], min_items: int = 2) -> list[R]:
    """``[fn(x) for x in items]`` on a small thread pool, in order; serial for few items."""
    items = list(items)
    if len(items) < min_items or workers() == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers()) as pool:
        return list(pool.map(fn, items))


def sorted_sample(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """``k`` distinct integers of ``[0, n)``, uniformly at random, in ascending order (int64).

    Draws with replacement into a bitmap until ``k`` distinct values are marked, then unmarks a random
    surplus: the marked set is exchangeable, so given its size it is a uniform subset, and so is what is
    left of it. About ``n * log(n / (n - k))`` draws; when ``k > n / 2`` the complement is drawn instead.
    For ``k`` a tenth of ``n`` this is several times faster than ``choice(n, k, replace=False)`` followed
    by a sort (no permutation of ``n`` values, no sort: the bitmap gives the rows in order).
    """
    if not 0 <= k <= n:
        raise ValueError(f"cannot draw {k} distinct values from {n}")
    if 2 * k > n:
        mask = np.ones(n, dtype=bool)
        mask[sorted_sample(rng, n, n - k)] = False
        return np.flatnonzero(mask)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    mask = np.zeros(n, dtype=bool)
    marked = 0
    while marked < k:
        missing, free = k - marked, n - marked  # free - missing >= n - k >= n / 2
        # the expected draws to mark `missing` of the `free` unmarked values, plus three standard
        # deviations' worth, so that a second round is rare
        draws = int(free * math.log(free / (free - missing)) + 3 * math.sqrt(missing)) + 16
        mask[rng.integers(0, n, size=draws)] = True
        marked = int(np.count_nonzero(mask))
    rows = np.flatnonzero(mask)
    if marked > k:
        rows = np.delete(rows, rng.choice(marked, marked - k, replace=False))
    return rows
