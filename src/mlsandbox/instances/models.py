"""Generated instances of a family: their parameters, stable id, gate results and difficulty estimate."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.scenario import Scenario
from mlsandbox.scenario.space import apply_parameters


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: the text every hash of this package is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def params_hash(family: str, params: dict[str, Any]) -> str:
    """The stable hash of an instance: its family and its parameter values (sha256, hex)."""
    return hashlib.sha256(canonical({"family": family, "params": params}).encode()).hexdigest()


def instance_id(family: str, params: dict[str, Any]) -> str:
    return f"{family[:50]}-{params_hash(family, params)[:12]}"


def scenario_hash(scenario: Scenario) -> str:
    """The hash of an instance's whole scenario (catches a family edited after a suite was frozen): its
    values other than the schema's defaults, so a field the schema gains later, with a default, leaves
    every frozen instance as it was."""
    data = scenario.model_dump(mode="json", exclude={"space"}, exclude_defaults=True)
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def materialize(family: Scenario, params: dict[str, Any]) -> Scenario:
    """The family with the parameters written in: a concrete scenario with the instance's id and no space.
    Raises ValueError (pydantic's ValidationError included) when the values make no valid scenario."""
    data = apply_parameters(family.model_dump(mode="json", exclude={"space"}), params)
    iid = instance_id(family.id, params)
    data["id"] = iid
    data["title"] = f"{family.title} ({iid[-12:]})"
    return Scenario.model_validate(data)


class AgentRun(_Model):
    """One gate episode in ``sim``."""

    agent: str
    success: bool
    score: float
    reason: str
    steps: int
    margin: float | None = None
    """How far past the goal's threshold the outcome is (e.g. holdout AUC minus ``min_auc``)."""


class Difficulty(_Model):
    """Estimated from ``sim``: a thin reference margin and a rule agent that fails make an instance hard."""

    estimate: float = Field(ge=0, le=1)
    """0 (easy) to 1 (hard): half from the reference margin (0 at a margin of 0.10 or more), half from
    the rule agent (0 when it succeeds)."""
    reference_margin: float | None
    rule_success: bool


class Instance(_Model):
    """A valid instance: the family, the parameter values, and what its gates measured."""

    id: str
    family: str
    params: dict[str, Any]
    params_sha256: str
    scenario_sha256: str
    difficulty: Difficulty
    gates: list[AgentRun]


class Rejection(_Model):
    """A candidate that failed a gate (or made no valid scenario), with the reason."""

    id: str
    family: str
    params: dict[str, Any]
    gate: Literal["builds", "reference", "random", "no-op"]
    reason: str


__all__ = [
    "AgentRun",
    "Difficulty",
    "Instance",
    "Rejection",
    "canonical",
    "instance_id",
    "materialize",
    "params_hash",
    "scenario_hash",
]
