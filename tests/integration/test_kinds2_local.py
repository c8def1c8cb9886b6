"""A family of the forecasting and of the text kind on real services: the trainer job fits the kind's
learner, MLflow holds the run and the model, and the grader scores the registered version on the hidden
holdout by the kind's metric."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv

pytestmark = pytest.mark.services


@pytest.mark.parametrize(
    ("scenario", "metric", "logged"),
    [
        ("forecast-store-sales-late-data", "mase", "val_mase"),
        ("text-support-ticket-routing", "macro_f1", "val_macro_f1"),
    ],
)
def test_reference_solves_a_forecasting_and_a_text_family(
    sandbox: Any, scenario: str, metric: str, logged: str
) -> None:
    env = MLSandboxEnv(scenario, sandbox=sandbox.name, start_sandbox=False)
    try:
        res = run_episode(env, make_agent("kind_reference", seed=1), seed=1)
    finally:
        env.close()
    assert res.grade is not None and res.grade["success"], res.grade
    assert res.grade["metric"] == metric
    jobs = [
        s.observation["result"]
        for s in res.steps
        if s.action.get("type") == "get_job" and s.observation["ok"]
    ]
    assert any(logged in (j.get("metrics") or {}) for j in jobs), jobs
