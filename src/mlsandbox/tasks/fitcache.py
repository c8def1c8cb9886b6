"""A bounded, process-wide cache of real fits, shared by the kinds' in-process fits (``sim``).

A key is (kind, digest of the training bytes, algorithm, hyperparameters, seed): an episode that trains
the same thing again, or vector envs that share a seed, pay for the fit once. Cached values are shared
read-only.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

KEPT = 64
"""Fits kept (a fitted booster or a TF-IDF vocabulary with its linear model is at most a few MiB)."""

T = TypeVar("T")

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_LOCK = threading.Lock()


def fit_key(
    kind: str, digest: str, algorithm: str, hyperparams: dict[str, Any], seed: int
) -> tuple[Any, ...]:
    return (kind, digest, algorithm, json.dumps(hyperparams, sort_keys=True, default=str), seed)


def kept(key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """The cached value under ``key``, else ``compute()`` (kept, the oldest dropped beyond :data:`KEPT`)."""
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            hit: T = _CACHE[key]
            return hit
    value = compute()
    with _LOCK:
        _CACHE[key] = value
        while len(_CACHE) > KEPT:
            _CACHE.popitem(last=False)
    return value


def clear() -> None:
    """Forget every kept fit (tests, benchmarks measuring fresh fits)."""
    with _LOCK:
        _CACHE.clear()


__all__ = ["KEPT", "clear", "fit_key", "kept"]
