"""A family's parameter space: which fields of the scenario an instance may change, and over what range.

A family (a scenario of the catalogue) may declare ``space:``. Each parameter is a *path* into the
scenario (dots between keys; a number indexes a list; a name selects the list element with that
``name``) and a *domain* to draw its value from::

    space:
      parameters:
        seed: {type: int, low: 1000, high: 999999}
        datasets.customers.defects.missing_rate: {type: float, low: 0.02, high: 0.25}
        perturbations.slow-lake.fault.latency_ms: {type: int, low: 100, high: 400}
        budget.credits: {type: choice, values: [40, 60, 80]}

An instance of the family is the family with one value per parameter written at its path
(:func:`apply_parameters`); ``mlsandbox tasks generate`` draws them (see :mod:`mlsandbox.instances`).
"""

from __future__ import annotations

import copy
import random
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Model):
    """An integer drawn uniformly from ``low`` to ``high`` (both included)."""

    type: Literal["int"] = "int"
    low: int
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


class FloatRange(_Model):
    """A number drawn uniformly from ``low`` to ``high``, rounded to ``digits`` decimals."""

    type: Literal["float"] = "float"
    low: float
    high: float
    digits: int = Field(default=3, ge=0, le=8)

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def draw(self, rng: random.Random) -> float:
        return round(rng.uniform(self.low, self.high), self.digits)


class Choice(_Model):
    """One of ``values`` (any YAML values: numbers, strings, mappings), drawn uniformly."""

    type: Literal["choice"] = "choice"
    values: list[Any] = Field(min_length=1)

    def draw(self, rng: random.Random) -> Any:
        return copy.deepcopy(rng.choice(self.values))


Domain = Annotated[IntRange | FloatRange | Choice, Field(discriminator="type")]


class ParameterSpace(_Model):
    """The parameters an instance of a family draws, by path into the scenario."""

    parameters: dict[str, Domain] = Field(min_length=1)

    @field_validator("parameters")
    @classmethod
    def _paths(cls, v: dict[str, Any]) -> dict[str, Any]:
        for path in v:
            split_path(path)
        if "id" in v or "title" in v or any(p == "space" or p.startswith("space.") for p in v):
            raise ValueError("id, title and space are not parameters")
        return v

    def draw(self, rng: random.Random) -> dict[str, Any]:
        """One value per parameter, in the declared order (so a seeded stream is reproducible)."""
        return {path: domain.draw(rng) for path, domain in self.parameters.items()}


def split_path(path: str) -> list[str]:
    parts = path.split(".")
    if not path or any(not _SEGMENT_RE.match(p) for p in parts):
        raise ValueError(f"{path!r} is not a parameter path (keys, indexes or names separated by dots)")
    return parts


def _step(node: Any, part: str, path: str) -> Any:
    """The child of ``node`` at ``part``, or a ValueError naming the path."""
    if isinstance(node, dict):
        if part not in node:
            raise ValueError(f"parameter {path!r}: no field {part!r} (fields: {', '.join(sorted(node))})")
        return node[part]
    if isinstance(node, list):
        if part.isdigit():
            i = int(part)
            if i >= len(node):
                raise ValueError(f"parameter {path!r}: index {i} is past the {len(node)} elements")
            return node[i]
        for item in node:
            if isinstance(item, dict) and item.get("name") == part:
                return item
        names = [str(item.get("name")) for item in node if isinstance(item, dict) and "name" in item]
        raise ValueError(f"parameter {path!r}: no element named {part!r} (names: {', '.join(names)})")
    raise ValueError(f"parameter {path!r}: {part!r} is below a value, not a mapping or list")


def read_parameter(data: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in a scenario's data (a ValueError when the path leads nowhere)."""
    node: Any = data
    for part in split_path(path):
        node = _step(node, part, path)
    return node


def apply_parameters(data: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A copy of a scenario's data with each parameter's value written at its path."""
    out = copy.deepcopy(data)
    for path, value in params.items():
        *parents, last = split_path(path)
        node: Any = out
        for part in parents:
            node = _step(node, part, path)
        if isinstance(node, dict):
            if last not in node:
                raise ValueError(f"parameter {path!r}: no field {last!r}")
            node[last] = copy.deepcopy(value)
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = copy.deepcopy(value)
        else:
            raise ValueError(f"parameter {path!r}: cannot write {last!r} here")
    return out


__all__ = [
    "Choice",
    "Domain",
    "FloatRange",
    "IntRange",
    "ParameterSpace",
    "apply_parameters",
    "read_parameter",
    "split_path",
]
