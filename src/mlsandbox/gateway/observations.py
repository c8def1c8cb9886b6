"""Observations: one JSON-able shape for every step, success or error.

``{"step", "ok", "action", "result", "error", "budget"}`` -- ``result`` holds what the action returned,
``error`` holds ``{"code", "message", "details"}`` when the action was rejected. Ids, wall-clock times and
timings are not part of observations (they go to ``info``), so the first observation after a seeded reset
is identical every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlsandbox.errors import ActionError


@dataclass
class StepResult:
    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def ok_observation(step: int, action: str, result: dict[str, Any], budget: dict[str, Any]) -> dict[str, Any]:
    return {"step": step, "ok": True, "action": action, "result": result, "error": None, "budget": budget}


def error_observation(
    step: int, action: str | None, err: ActionError, budget: dict[str, Any]
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.details is not None:
        error["details"] = err.details
    return {"step": step, "ok": False, "action": action, "result": None, "error": error, "budget": budget}
