"""Families of the new kinds on the sim backend: the reference agent succeeds, the random and do-nothing
agents fail; the trainer's real fit follows the kind (a regressor's RMSE, a classifier's macro-F1)."""

from __future__ import annotations

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

FAMILIES = (
    "regression-delivery-times",
    "regression-claims-cost-tracker-outage",
    "multiclass-ticket-priority",
    "multiclass-crop-type-slow-lake",
)


def _grade(scenario: str, agent: str, seed: int = 0) -> dict[str, object]:
    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-kinds")
    try:
        res = run_episode(env, make_agent(agent, seed=seed), seed=seed)
    finally:
        env.close()
    assert res.grade is not None
    return res.grade


@pytest.mark.parametrize("scenario", FAMILIES)
def test_reference_succeeds_and_random_and_do_nothing_fail(scenario: str) -> None:
    reference = _grade(scenario, load_builtin(scenario).reference_agent)
    assert reference["success"], reference
    assert reference["kind"] == load_builtin(scenario).work()[0]
    for agent in ("random", "do-nothing"):
        grade = _grade(scenario, agent)
        assert not grade["success"], (agent, grade)
