"""A family of the image kind on real services: the trainer job decodes the images and fits the
pixel-feature baseline, MLflow holds the run and the skops model (its own types trusted), and the grader
loads the registered version and scores it on the hidden holdout by accuracy."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv

pytestmark = pytest.mark.services


def test_reference_solves_an_image_family(sandbox: Any) -> None:
    env = MLSandboxEnv("images-parts-sorting", sandbox=sandbox.name, start_sandbox=False)
    try:
        res = run_episode(env, make_agent("kind_reference", seed=1), seed=1)
    finally:
        env.close()
    assert res.grade is not None and res.grade["success"], res.grade
    assert res.grade["metric"] == "accuracy"
    jobs = [
        s.observation["result"]
        for s in res.steps
        if s.action.get("type") == "get_job" and s.observation["ok"]
    ]
    assert any("val_accuracy" in (j.get("metrics") or {}) for j in jobs), jobs
