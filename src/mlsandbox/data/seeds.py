"""Seed checking, apart from the random streams (:mod:`mlsandbox.data.randomness`) so that the specs that
check a seed can be imported without numpy (the CLI's scenario listing loads them)."""

from __future__ import annotations


def check_seed(seed: object) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return seed
