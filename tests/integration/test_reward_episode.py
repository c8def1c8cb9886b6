"""The reward vector and hard constraints on real episodes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.env.reward_vector import MultiObjectiveReward
from mlsandbox.evaluation.reward import COMPONENTS, OBJECTIVES
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services

SCENARIO = "churn-clean-small"


@pytest.fixture()
def env(sandbox: Any):
    e = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    yield e
    e.close()


def _variant(**update: Any) -> Any:
    base = load_builtin(SCENARIO)
    data = base.model_dump(mode="json")
    for key, value in update.items():
        data[key] = value
    return type(base).model_validate(data)


def test_components_sum_to_the_reward_at_every_step_of_a_solved_episode(env: MLSandboxEnv) -> None:
    sc = _variant(
        reward={
            **load_builtin(SCENARIO).reward.model_dump(),
            "shaping": {"data_inspected": 0.5, "model_registered": 1.0},
        }
    )
    res = run_episode(env, make_agent("reference", seed=3), seed=3, scenario=sc)
    assert res.success, res.grade
    assert res.steps
    for s in res.steps:
        comps = s.info["reward_components"]
        vector = s.info["reward_vector"]
        assert set(comps) == set(COMPONENTS)
        assert list(vector) == list(OBJECTIVES)
        assert math.isclose(sum(comps.values()), s.reward, abs_tol=1e-9)
        assert math.isclose(sum(vector.values()), s.reward, abs_tol=1e-9)
    # Shaping paid something along the way and nothing net over the finished episode.
    shaping = [s.info["reward_components"]["shaping"] for s in res.steps]
    assert shaping[0] == pytest.approx(0.5)
    assert sum(shaping) == pytest.approx(0.0, abs=1e-9)
    # The final step carries the grade and the episode metrics; costs were charged.
    last = res.steps[-1].info
    assert last["grade"]["success"] is True
    assert last["metrics"]["credits_used"] > 0
    assert res.components["task"] > 0 and res.components["compute"] < 0


def test_multi_objective_wrapper_returns_the_whole_vector(env: MLSandboxEnv) -> None:
    mo = MultiObjectiveReward(env)
    assert mo.reward_space.shape == (len(OBJECTIVES),)
    mo.reset(seed=4)
    vec, info = None, {}
    for action in ({"type": "list_datasets"}, {"type": "no_such_action"}, {"type": "submit"}):
        _, vec, terminated, _, info = mo.step(action)
        assert isinstance(vec, np.ndarray) and vec.dtype == np.float32
        assert mo.reward_space.contains(vec)
        assert float(vec.sum()) == pytest.approx(info["scalar_reward"], abs=1e-5)
    assert terminated
    process = OBJECTIVES.index("process")
    assert vec is not None and vec[process] < 0  # the step cost of the submit
    comp = MultiObjectiveReward(env, level="components")
    assert comp.reward_space.shape == (len(COMPONENTS),)


def test_forbidden_action_ends_the_episode_with_the_penalty(env: MLSandboxEnv) -> None:
    sc = _variant(
        constraints={
            "forbidden_actions": [
                {
                    "action": "restart_service",
                    "params": {"service": "minio"},
                    "reason": "the data lake is shared",
                }
            ]
        }
    )
    env.reset(seed=5, options={"scenario": sc})
    _, _, term1, _, info1 = env.step({"type": "get_service_health", "service": "minio"})  # allowed
    assert not term1 and info1["error"] is None
    _, reward, terminated, truncated, info = env.step({"type": "restart_service", "service": "minio"})
    assert terminated and not truncated
    assert info["error"] == "constraint_violation"
    assert info["constraint_violation"]["kind"] == "forbidden_action"
    assert "the data lake is shared" in info["constraint_violation"]["message"]
    comps = info["reward_components"]
    assert comps["constraint_violation"] == -sc.reward.constraint_violation
    assert comps["invalid_action"] == 0.0  # a violation, not an invalid action
    assert reward == pytest.approx(sum(comps.values()))
    assert info["grade"]["success"] is False
    # The refused action did not run: MinIO was not restarted, the episode is over.
    _, _, t2, _, info2 = env.step({"type": "list_datasets"})
    assert t2 and info2["error"] == "episode_over"


def test_hard_budget_ends_the_episode_when_credits_run_over(env: MLSandboxEnv) -> None:
    sc = _variant(
        budget={"credits": 0.3, "credits_per_cpu_second": 1.0, "max_job_seconds": 120},
        constraints={"budget": True},
    )
    env.reset(seed=6, options={"scenario": sc})
    _, _, terminated, _, info = env.step(
        {"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "random_forest"}
    )
    steps = 1
    while not terminated and steps < 20:
        _, _, terminated, _, info = env.step({"type": "wait", "seconds": 5})
        steps += 1
    assert terminated, "the job's CPU-seconds should have broken the 0.3-credit hard budget"
    assert info["constraint_violation"]["kind"] == "budget"
    assert info["reward_components"]["constraint_violation"] < 0
    assert info["reward_components"]["task"] == 0.0
    assert info["credits_used"] > 0.3
