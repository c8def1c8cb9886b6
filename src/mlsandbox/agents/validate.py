"""Scenario validation: a scenario (built-in id or YAML file) loads, and its reference solution solves it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import StepRecord, run_episode
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.scenario import load_scenario

DEFAULT_REFERENCE_GOALS = ("registered_model_auc",)
"""Goal types the default ``reference`` agent is written for."""


@dataclass
class Validation:
    scenario: str
    difficulty: int
    reference: str
    solved: bool
    reason: str
    reward: float
    steps: int
    wall_s: float


def check_loads(ids: list[str]) -> dict[str, str]:
    """Scenario id -> why it does not load or has no usable reference agent (empty: all fine)."""
    problems: dict[str, str] = {}
    for sid in ids:
        try:
            sc = load_scenario(sid)
            make_agent(sc.reference_agent)
            if sc.reference_agent == "reference" and sc.goal.type not in DEFAULT_REFERENCE_GOALS:
                problems[sid] = (
                    f"goal type {sc.goal.type!r} has no default reference solution: set reference_agent"
                )
        except Exception as e:
            problems[sid] = str(e)
    return problems


def validate_scenario(
    env: MLSandboxEnv,
    scenario_id: str,
    *,
    seed: int | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> Validation:
    """Run the scenario's reference solution for one episode; solved = the goal is met and no hard
    constraint was broken."""
    sc = load_scenario(scenario_id)
    t0 = time.perf_counter()
    ep_seed = sc.seed if seed is None else seed
    try:
        res = run_episode(
            env, make_agent(sc.reference_agent, seed=ep_seed), seed=ep_seed, scenario=sc, on_step=on_step
        )
    except Exception as e:
        return Validation(
            sc.id,
            sc.difficulty,
            sc.reference_agent,
            False,
            f"{type(e).__name__}: {e}",
            0.0,
            0,
            time.perf_counter() - t0,
        )
    violation: dict[str, Any] = res.final_info.get("constraint_violation") or {}
    reason = (res.grade or {}).get("reason", "not graded")
    solved = res.success and not violation
    if violation:
        reason = f"constraint broken: {violation.get('message')}"
    return Validation(
        sc.id, sc.difficulty, sc.reference_agent, solved, reason, res.total_reward, len(res.steps), res.wall_s
    )
