"""Observations: one JSON-able shape for every step, success or error.

:class:`Observation` is that shape, defined once: ``{"step", "ok", "action", "result", "error", "budget"}``
-- ``result`` holds what the action returned, ``error`` holds an :class:`ObservationError` (``{"code",
"message", "details"}``) when the action was rejected, ``budget`` the episode's :class:`Budget`. Every
interface takes it from here: the in-process env and the gateway's audit log (as the dict of
:meth:`Observation.as_dict`), the HTTP gateway's sessions and its OpenAPI schema, MCP's structured tool
output and OpenEnv's observation type.

Ids, wall-clock times and timings are not part of observations (they go to ``info``), so the first
observation after a seeded reset is identical every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from mlsandbox.errors import ActionError


class ObservationError(BaseModel):
    """Why an action was rejected (nothing in the sandbox changed)."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Stable machine-readable code, e.g. invalid_parameters, not_found.")
    message: str = Field(description="What was wrong, for the agent to read.")
    details: Any = Field(
        default=None,
        description="Structured details when there are any (left out otherwise); for invalid_parameters: "
        "[{field, message}].",
    )


class Budget(BaseModel):
    """What is left of the episode: compute credits, steps and, when the task has a deadline, seconds."""

    model_config = ConfigDict(extra="forbid")

    credits: float = Field(description="The episode's compute credits.")
    credits_used: float = Field(description="Credits used so far (jobs' CPU-seconds, reservations, ...).")
    steps_left: int = Field(description="Steps left before the episode truncates.")
    seconds_left: float | None = Field(
        default=None,
        description="Seconds left before the deadline by which the model must be registered (only when "
        "the task has one).",
    )
    window_credits_left: float | None = Field(
        default=None,
        description="Credits that may still be used in the rolling compute window (only when the task has "
        "one): new work does not start while it is 0.",
    )
    window_frees_in_s: float | None = Field(
        default=None,
        description="While the rolling compute window is spent: seconds until new work can start again.",
    )

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """The optional figures only where the task has them: the same dict on every interface (HTTP,
        MCP, OpenEnv) as in process. No return annotation, so the JSON Schema stays the fields'."""
        data: dict[str, Any] = handler(self)
        for name in OPTIONAL_BUDGET_FIELDS:
            if data.get(name) is None:
                data.pop(name, None)
        return data


OPTIONAL_BUDGET_FIELDS = ("seconds_left", "window_credits_left", "window_frees_in_s")
"""Budget figures only some tasks have (a deadline, a rolling compute window)."""


class Observation(BaseModel):
    """What the agent sees after a step (or a reset: ``step`` 0 and ``action`` null)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(description="Steps taken in the episode (0 after reset).")
    ok: bool = Field(description="False when the action was rejected (see `error`).")
    action: str | None = Field(description="The action's type (null after reset or for an unknown action).")
    result: dict[str, Any] | None = Field(description="What the action returned (null on an error).")
    error: ObservationError | None = Field(description="Why the action was rejected (null on success).")
    budget: Budget = Field(description="Credits, credits used, steps left.")

    def as_dict(self) -> dict[str, Any]:
        """The observation as the plain dict every in-process consumer reads (``error.details`` left out
        when it was not given)."""
        return self.model_dump(exclude_unset=True)


OBSERVATION_FIELDS: tuple[str, ...] = tuple(Observation.model_fields)
"""The observation's keys, in order."""


@dataclass
class StepResult:
    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def observation_error(err: ActionError) -> ObservationError:
    """The observation's ``error`` for a rejected action (``details`` only when the error has some)."""
    if err.details is None:
        return ObservationError(code=err.code, message=err.message)
    return ObservationError(code=err.code, message=err.message, details=err.details)


def reset_observation(result: dict[str, Any], budget: dict[str, Any]) -> dict[str, Any]:
    """The first observation of an episode: step 0, no action, ``result`` (the task and what it offers)."""
    obs = Observation(
        step=0, ok=True, action=None, result=result, error=None, budget=Budget.model_validate(budget)
    )
    return obs.as_dict()


def ok_observation(step: int, action: str, result: dict[str, Any], budget: dict[str, Any]) -> dict[str, Any]:
    obs = Observation(
        step=step, ok=True, action=action, result=result, error=None, budget=Budget.model_validate(budget)
    )
    return obs.as_dict()


def error_observation(
    step: int, action: str | None, err: ActionError, budget: dict[str, Any]
) -> dict[str, Any]:
    obs = Observation(
        step=step,
        ok=False,
        action=action,
        result=None,
        error=observation_error(err),
        budget=Budget.model_validate(budget),
    )
    return obs.as_dict()


__all__ = [
    "OBSERVATION_FIELDS",
    "Budget",
    "Observation",
    "ObservationError",
    "StepResult",
    "error_observation",
    "observation_error",
    "ok_observation",
    "reset_observation",
]
