"""The built-in serving scenarios are solvable: their reference agent meets each goal within the budget.

The agent (``mlsandbox.agents.serving_reference``) acts as an on-call engineer would: it reads alerts and
metrics and reacts to them, through the gateway only (no look at hidden state). The grade comes from
hidden ground truth; the trajectory shows the agent reacted to what the scenario throws at it.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.slow

Step = tuple[dict[str, Any], dict[str, Any]]


def play(runtime: Any, sandbox: Any, scenario_id: str) -> tuple[list[Step], dict[str, Any]]:
    """One episode of the scenario's reference agent: (action, observation) pairs and the grade."""
    sc = load_builtin(scenario_id)
    assert sc.reference_agent.endswith(":ServingReferenceAgent")
    gw = Gateway(runtime, sc, seed=sc.seed, sandbox=sandbox.name)
    try:
        obs = gw.start()
        agent = make_agent(sc.reference_agent, seed=sc.seed)
        agent.reset(obs)
        steps: list[Step] = []
        while True:
            action = agent.act(obs)
            res = gw.step(action)
            obs = res.observation
            steps.append((action, obs))
            if res.terminated or res.truncated:
                break
        assert res.terminated and action["type"] == "submit", "the agent ran out of steps"
        return steps, res.info["grade"]
    finally:
        gw.close()


def results(steps: list[Step], action_type: str) -> list[dict[str, Any]]:
    """The results of the successful actions of one type, in order."""
    return [o["result"] for a, o in steps if a["type"] == action_type and o["ok"]]


def test_deploy_best_run_and_hold_the_slo(runtime: Any, sandbox: Any) -> None:
    steps, grade = play(runtime, sandbox, "serving-deploy-slo")
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


def test_traffic_spike_scale_out_and_back(runtime: Any, sandbox: Any) -> None:
    steps, grade = play(runtime, sandbox, "serving-traffic-spike")
    assert grade["success"], grade["reason"]
    scaled = results(steps, "scale")
    assert [s["replicas_up"] for s in scaled] == [3, 1], scaled
    # It scaled out because the surge alert fired, and the surge was real traffic.
    i = next(i for i, (a, _) in enumerate(steps) if a["type"] == "scale")
    before = steps[i - 1][1]["result"]["alerts"]
    assert any(x["rule"] == "TrafficSurge" and x["state"] == "firing" for x in before)
    m = results(steps, "get_metrics")[-1]
    assert max(p[1] or 0 for p in m["series"]["client_rps"]) > 10


def test_drift_detect_retrain_roll_out(runtime: Any, sandbox: Any) -> None:
    steps, grade = play(runtime, sandbox, "serving-drift-rollout")
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
