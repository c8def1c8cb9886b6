"""Named, independent random streams: one generator per purpose under one seed."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

import numpy as np

from mlsandbox.data.seeds import check_seed

__all__ = [
    "SERIAL_BELOW_ROWS",
    "check_seed",
    "parallel_map",
    "rng_for",
    "serial_if",
    "sorted_sample",
    "workers",
]

T = TypeVar("T")
R = TypeVar("R")


def rng_for(seed: int, *purpose: str) -> np.random.Generator:
    """A generator for one purpose, independent of every other purpose under the same seed."""
    digest = hashlib.blake2b("/".join(purpose).encode(), digest_size=16).digest()
    entropy = [seed, int.from_bytes(digest, "little")]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


def workers() -> int:
    """Threads for column-parallel work (numpy and Arrow release the GIL), at most the CPUs this process
    may run on (a process pinned to one core works serially); results never depend on it."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


SERIAL_BELOW_ROWS = 50_000
"""Tables of fewer rows are generated and written serially: for them a thread pool (its threads started,
the GIL handed back and forth) costs more than the work it shares out."""

_SERIAL: ContextVar[bool] = ContextVar("mlsandbox_data_serial", default=False)


@contextmanager
def serial_if(small: bool) -> Iterator[None]:
    """Within the block, :func:`parallel_map` runs serially when ``small`` (or an outer block said so)."""
    token = _SERIAL.set(_SERIAL.get() or small)
    try:
        yield
    finally:
        _SERIAL.reset(token)


def parallel_map(fn: Callable[[T], R], items: Iterable[T], min_items: int = 2) -> list[R]:
    """``[fn(x) for x in items]`` on a small thread pool, in order; serial for few items, on one CPU and
    inside ``serial_if(True)``."""
    items = list(items)
    if len(items) < min_items or _SERIAL.get() or workers() == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers()) as pool:
        return list(pool.map(fn, items))


_SPARSE = 8
"""Below one allowed value in 8, ``sorted_sample`` draws among the allowed values' positions (most draws
over ``[0, n)`` would be dropped)."""


def sorted_sample(rng: np.random.Generator, n: int, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """``k`` distinct integers of ``[0, n)`` (of those where ``allowed`` is true, when given), uniformly at
    random, in ascending order (int64).

    Draws with replacement into a bitmap (draws that are not allowed are dropped) until ``k`` distinct
    values are marked, then unmarks a random surplus: the marked set is exchangeable, so given its size it
    is a uniform subset, and so is what is left of it. About ``m * log(m / (m - k))`` useful draws for
    ``m`` allowed values; when ``k > m / 2`` the complement is drawn instead. For ``k`` a tenth of ``n``
    this is several times faster than ``choice(n, k, replace=False)`` and a sort, and it needs no array of
    the allowed rows: the bitmap gives the rows in order.
    """
    m = n if allowed is None else int(np.count_nonzero(allowed))
    if not 0 <= k <= m:
        raise ValueError(f"cannot draw {k} distinct values from {m}")
    if 2 * k > m:
        keep = np.ones(n, dtype=bool) if allowed is None else allowed.copy()
        keep[sorted_sample(rng, n, m - k, allowed)] = False
        return np.flatnonzero(keep)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    if allowed is not None and m * _SPARSE < n:  # few allowed: draw positions among them instead
        return np.flatnonzero(allowed)[sorted_sample(rng, m, k)]
    mask = np.zeros(n, dtype=bool)
    marked = 0
    while marked < k:
        missing, free = k - marked, m - marked  # free - missing >= m - k >= m / 2
        # the expected useful draws to mark `missing` of the `free` unmarked values, plus three standard
        # deviations' worth, so that a second round is rare; scaled up for the draws that are not allowed
        useful = free * math.log(free / (free - missing)) + 3 * math.sqrt(missing) + 16
        drawn = rng.integers(0, n, size=int(useful * n / m))
        mask[drawn if allowed is None else drawn[allowed[drawn]]] = True
        marked = int(np.count_nonzero(mask))
    rows = np.flatnonzero(mask)
    if marked > k:
        rows = np.delete(rows, rng.choice(marked, marked - k, replace=False))
    return rows
