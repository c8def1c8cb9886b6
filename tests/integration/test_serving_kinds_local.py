"""A deployment of a regression model on real services: the reference agent deploys it under the SLO,
the model server (started with the kind's response shape) answers numbers, the served version is graded
by RMSE against the goal's bar."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services


def test_a_regression_model_is_served_under_its_slo(sandbox: Any) -> None:
    scenario = "serving-regression-eta-slo"
    env = MLSandboxEnv(scenario, sandbox=sandbox.name, start_sandbox=False)
    try:
        res = run_episode(env, make_agent(load_builtin(scenario).reference_agent, seed=3), seed=3)
    finally:
        env.close()
    trail = [
        (s.action.get("type"), s.observation.get("ok"), str(s.observation.get("error"))[:300])
        for s in res.steps
    ]
    assert res.grade is not None and res.grade["success"], (
        res.grade.get("reason") if res.grade else None,
        trail,
    )
    assert res.grade["metric"] == "rmse" and res.grade["kind"] == "tabular_regression"
    deploys = [s.observation for s in res.steps if s.action.get("type") == "deploy_model"]
    assert deploys and deploys[0]["ok"] and deploys[0]["result"]["evaluated"], deploys
    answers = [
        s.observation["result"]
        for s in res.steps
        if s.action.get("type") == "predict" and s.observation.get("ok")
    ]
    assert answers and answers[0]["status"] == 200, answers
    predictions = answers[0].get("predictions")
    assert predictions and all(isinstance(v, float) for v in predictions), answers[0]
    assert answers[0].get("probabilities") is None
