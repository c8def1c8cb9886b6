"""The reference solution of a family of any kind of work: the reference checklist (inspect, prepare,
train, register, healing what fails on the way) with the preparation and algorithm the dataset's kind
prescribes for what the profile shows (:meth:`mlsandbox.tasks.kind.TaskKind.policy`). The kind is read
from the first observation's deliverable."""

from __future__ import annotations

from typing import Any

from mlsandbox.agents.scripted import Obs, ReferenceAgent, Script
from mlsandbox.tasks.kind import TaskKind
from mlsandbox.tasks.registry import DEFAULT_KIND, get


def observed_kind(first: Obs) -> TaskKind:
    """The kind of work the first observation's deliverable names (the default kind when it names none)."""
    deliverable = (first.get("result") or {}).get("deliverable") or {}
    return get(str(deliverable.get("kind") or DEFAULT_KIND))


def quick_algorithms(kind: TaskKind) -> tuple[str, ...]:
    """The kind's algorithms that fit in seconds (every one but the neural network), in the kind's order:
    what the random and degenerate agents draw from (binary: logistic regression, random forest, gradient
    boosting, as before kinds existed)."""
    return tuple(a for a in kind.algorithms if a != "mlp")


class KindReferenceAgent(ReferenceAgent):
    """:class:`ReferenceAgent` with the kind's policy for preparation and algorithm."""

    name = "kind_reference"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self._kind: TaskKind | None = None

    def script(self, first: Obs) -> Script:
        self._kind = observed_kind(first)
        yield from super().script(first)

    def cleaning(self, profile: dict[str, Any]) -> list[str]:
        kind = self._kind or get(DEFAULT_KIND)
        policy = kind.policy(profile)
        self.algorithm = policy.algorithm
        return list(policy.preparations)


__all__ = ["KindReferenceAgent", "observed_kind", "quick_algorithms"]
