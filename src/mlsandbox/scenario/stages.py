"""A curriculum stage of a declared scenario: how much easier than the scenario it is.

:class:`Loosening` is what ``mlsandbox train``'s curriculum plays before a family as declared (see
:mod:`mlsandbox.agents.curriculum`, which applies it). It lives with the scenario because a family may
declare its own stages (the scenario's ``curriculum:``): the family's author knows when the default stages
would teach a dead end (a loosened bar that a weaker solution meets, whose partial score the policy then
never leaves).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, Self, TypeVar

from pydantic import ConfigDict


@dataclass(frozen=True)
class Loosening:
    """How much easier than the declared scenario a stage is (``Loosening()`` is the scenario itself)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # a stage in a scenario file: a typo is an error

    bar: float = 1.0
    """Factor (at least 1) moving the goal's bar toward easy."""
    budget: float = 1.0
    """Factor (at least 1) on ``max_steps`` and ``budget.credits``."""
    defects: float = 1.0
    """Share (0 to 1) of the declared defects kept."""
    faults: float = 1.0
    """Share (0 to 1) of the declared faults kept: each one's duration shortened to it, none at 0."""

    def __post_init__(self) -> None:
        if self.bar < 1 or self.budget < 1:
            raise ValueError(f"bar and budget are factors of at least 1, got {self.bar} and {self.budget}")
        if not 0 <= self.defects <= 1:
            raise ValueError(f"defects is a share from 0 to 1, got {self.defects}")
        if not 0 <= self.faults <= 1:
            raise ValueError(f"faults is a share from 0 to 1, got {self.faults}")

    @property
    def declared(self) -> bool:
        return self.bar == 1 and self.budget == 1 and self.defects == 1 and self.faults == 1

    def at_least_as_easy_as(self, other: Loosening) -> bool:
        return (
            self.bar >= other.bar
            and self.budget >= other.budget
            and self.defects <= other.defects
            and self.faults <= other.faults
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class _Graded(Protocol):
    def at_least_as_easy_as(self, other: Self, /) -> bool: ...


_Stage = TypeVar("_Stage", bound=_Graded)


def check_harder(stages: Sequence[_Stage]) -> None:
    """Raise :class:`ValueError` naming the first pair of stages where the later one is not strictly
    harder (at least as hard in every respect, and not the same)."""
    for easier, harder in itertools.pairwise(stages):
        if not easier.at_least_as_easy_as(harder) or easier == harder:
            raise ValueError(f"stages must get strictly harder: {easier} then {harder}")


def with_declared(stages: Sequence[Loosening]) -> list[Loosening]:
    """``stages`` ending with the scenario as declared (``Loosening()``), added when they do not."""
    return [*stages] if stages and stages[-1].declared else [*stages, Loosening()]


__all__ = ["Loosening", "check_harder", "with_declared"]
