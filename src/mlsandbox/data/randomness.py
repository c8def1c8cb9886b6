"""Named, independent random streams: one generator per purpose under one seed."""

from __future__ import annotations

import hashlib
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
