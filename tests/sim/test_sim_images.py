"""Families of the image classification kind on the sim backend, through real fits of the pixel-feature
baseline: the reference agent succeeds from what it observes, the random and do-nothing agents fail."""

from __future__ import annotations

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

FAMILIES = (
    "images-parts-sorting",
    "images-rare-parts",
    "images-new-camera-blur",
    "images-night-shift-slow-lake",
    "images-quality-new-camera",
)


def _grade(scenario: str, agent: str, seed: int = 0) -> dict[str, object]:
    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-images")
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
    for agent in ("random", "do-nothing"):
        grade = _grade(scenario, agent)
        assert not grade["success"], (agent, grade)


def test_the_cnn_is_refused_on_sim_as_unsupported_and_changes_nothing() -> None:
    env = MLSandboxEnv("images-parts-sorting", backend="sim", sandbox="sim-images-cnn")
    try:
        env.reset(seed=0)
        action = {"type": "train_model", "dataset": "raw/parts.parquet", "algorithm": "cnn"}
        env.step(action)
        observation = env.last_observation
        assert observation is not None
        error = observation["error"]
        assert error["code"] == "unsupported" and "PyTorch" in error["message"], error
        assert not env.episode.jobs
    finally:
        env.close()
