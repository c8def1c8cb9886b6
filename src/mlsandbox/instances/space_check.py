"""A family's parameter space checked: instances drawn from it must pass the validity gates (a range that
makes unsolvable instances is reported with the instances that failed)."""

from __future__ import annotations

from collections.abc import Callable

from mlsandbox.instances.generate import Gates, generate
from mlsandbox.instances.models import Instance, Rejection
from mlsandbox.scenario import Scenario


def check_space(
    family: Scenario,
    n: int,
    *,
    gates: Gates,
    seed: int = 0,
    on_result: Callable[[Instance | Rejection], None] | None = None,
) -> list[Rejection]:
    """Draw ``n`` candidates of the family and gate each; the ones that failed (empty: the space is sound
    on this sample)."""
    g = generate(family, n, gates=gates, seed=seed, on_result=on_result, max_attempts=n)
    return g.rejected


__all__ = ["check_space"]
