"""The built-in serving scenarios are solvable: their reference agent meets each goal within the budget.

The agent (``mlsandbox.agents.serving_reference``) acts as an on-call engineer would: it reads alerts and
metrics and reacts to them, through the gateway only (no look at hidden state). The grade comes from
hidden ground truth; the trajectory shows the agent reacted to what the scenario throws at it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.helpers import reference_episode

from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

# Graded on an SLO: the test runner runs these alone (a loaded machine would break it). The episodes are
# the ones test_reward_hacking validates (one per scenario and session).
pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.latency]

Step = tuple[dict[str, Any], dict[str, Any]]


@pytest.fixture()
def env(sandbox: Any) -> Iterator[MLSandboxEnv]:
    e = MLSandboxEnv("serving-deploy-slo", sandbox=sandbox.name, start_sandbox=False)
    yield e
    e.close()


def play(env: MLSandboxEnv, scenario_id: str) -> tuple[list[Step], dict[str, Any]]:
    """The scenario's reference agent's episode: (action, observation) pairs and the grade."""
    assert load_builtin(scenario_id).reference_agent.endswith(":ServingReferenceAgent")
    _, records = reference_episode(env, scenario_id)
    steps: list[Step] = [(r.action, r.observation) for r in records]
    last = records[-1]
    assert last.terminated and steps[-1][0]["type"] == "submit", "the agent ran out of steps"
    return steps, last.info["grade"]


def results(steps: list[Step], action_type: str) -> list[dict[str, Any]]:
    """The results of the successful actions of one type, in order."""
    return [o["result"] for a, o in steps if a["type"] == action_type and o["ok"]]


def test_deploy_best_run_and_hold_the_slo(env: MLSandboxEnv) -> None:
    steps, grade = play(env, "serving-deploy-slo")
    assert grade["success"], grade["reason"]
    assert "impute_median" in [a["strategy"] for a, _ in steps if a["type"] == "clean_dataset"]
    job = results(steps, "get_job")[-1]
    assert job["metrics"]["val_auc"] >= 0.75
    (version,) = [r["version"] for r in results(steps, "register_model")]
    (deployed,) = results(steps, "deploy_model")
    assert deployed["evaluated"] is True
    assert results(steps, "predict")[0]["status"] == 200
    assert results(steps, "get_metrics")[0]["summary"]["client_rps"] > 0
    assert grade["served_version"] == version and grade["risky_deployments"] == 0


def test_traffic_spike_scale_out_and_back(env: MLSandboxEnv) -> None:
    steps, grade = play(env, "serving-traffic-spike")
    assert grade["success"], grade["reason"]
    scaled = results(steps, "scale")
    assert [s["replicas_up"] for s in scaled] == [3, 1], scaled
    # It scaled out because the surge alert fired, and the surge was real traffic.
    i = next(i for i, (a, _) in enumerate(steps) if a["type"] == "scale")
    before = steps[i - 1][1]["result"]["alerts"]
    assert any(x["rule"] == "TrafficSurge" and x["state"] == "firing" for x in before)
    m = results(steps, "get_metrics")[-1]
    assert max(p[1] or 0 for p in m["series"]["client_rps"]) > 10


def test_drift_detect_retrain_roll_out(env: MLSandboxEnv) -> None:
    steps, grade = play(env, "serving-drift-rollout")
    assert grade["success"], grade["reason"]
    m = results(steps, "get_metrics")[0]
    assert m["feature_drift_psi_by_column"]["monthly_spend"] > 0.25
    trained = [a["dataset"] for a, _ in steps if a["type"] == "train_model"]
    assert trained[-1] == "prod/labelled.parquet"
    assert results(steps, "get_job")[-1]["metrics"]["val_auc"] >= 0.7
    v1, v2 = [r["version"] for r in results(steps, "register_model")]
    first, rollout = results(steps, "deploy_model")
    assert first["version"] == v1 and first["evaluated"] is True
    assert rollout["version_history"] == [v1, v2] and rollout["evaluated"] is True
    assert grade["served_version"] == v2
