"""Serving families of the new tabular kinds on the sim backend: the reference agent deploys the kind's
model and succeeds (graded by the kind's metric with the SLO); random and do-nothing agents fail; the
sim's replicas answer in the kind's response shape."""

from __future__ import annotations

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

FAMILIES = {"serving-regression-eta-slo": "rmse", "serving-multiclass-triage-slo": "macro_f1"}


def _run(scenario: str, agent: str, seed: int = 0) -> tuple[dict[str, object], list[dict[str, object]]]:
    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-serving-kinds")
    try:
        res = run_episode(env, make_agent(agent, seed=seed), seed=seed)
    finally:
        env.close()
    assert res.grade is not None
    predicts = [s.observation for s in res.steps if s.action.get("type") == "predict"]
    return res.grade, predicts


@pytest.mark.parametrize("scenario", sorted(FAMILIES))
def test_reference_serves_the_kind_and_random_and_do_nothing_fail(scenario: str) -> None:
    grade, predicts = _run(scenario, load_builtin(scenario).reference_agent)
    assert grade["success"], grade
    assert grade["metric"] == FAMILIES[scenario]
    first = predicts[0] if predicts else {}
    assert first.get("ok") and first["result"]["status"] == 200, predicts  # type: ignore[index]
    answer = first["result"]
    if FAMILIES[scenario] == "rmse":  # a number per row, no probability
        assert all(isinstance(v, float) for v in answer["predictions"]) and answer["probabilities"] is None  # type: ignore[index]
    else:  # a class label and its probability
        assert all(isinstance(v, str) for v in answer["predictions"]) and answer["probabilities"]  # type: ignore[index]
    for agent in ("random", "do-nothing"):
        grade, _ = _run(scenario, agent)
        assert not grade["success"], (agent, grade)
