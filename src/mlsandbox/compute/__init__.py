"""Compute pool: capacity-aware scheduling of jobs and machine reservations over a backend's jobs."""

from mlsandbox.compute.pool import (
    MACHINE_LABEL,
    RESERVATION_LABEL,
    Pool,
    PooledRuntime,
    pool_of,
    restore_pool,
    shrink_pool,
)

__all__ = [
    "MACHINE_LABEL",
    "RESERVATION_LABEL",
    "Pool",
    "PooledRuntime",
    "pool_of",
    "restore_pool",
    "shrink_pool",
]
