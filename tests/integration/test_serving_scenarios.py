"""The built-in serving scenarios are solvable: a scripted sequence of actions meets each goal.

Each script acts as an on-call engineer would: it reads alerts and metrics and reacts to them, through
the gateway only (no look at hidden state). The grade comes from hidden ground truth.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 900.0


def act(gw: Gateway, action: dict[str, Any]) -> dict[str, Any]:
    obs = gw.step(action).observation
    assert obs["ok"], (action, obs["error"])
    return obs["result"]


def train(gw: Gateway, dataset: str) -> dict[str, Any]:
    job = act(gw, {"type": "train_model", "dataset": dataset, "algorithm": "logistic_regression"})
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        out = act(gw, {"type": "wait", "seconds": 20})
        if any(j["job_id"] == job["job_id"] and j["state"] in ("succeeded", "failed") for j in out["jobs"]):
            break
    done = act(gw, {"type": "get_job", "job_id": job["job_id"]})
    assert done["state"] == "succeeded", f"{done['state']}: {done.get('log_tail')}"
    return done


def wait_for(gw: Gateway, check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        act(gw, {"type": "wait", "seconds": 3})
    raise AssertionError(f"timed out waiting for {what}")


def firing(gw: Gateway, rule: str) -> bool:
    return any(
        a["rule"] == rule and a["state"] == "firing" for a in act(gw, {"type": "get_alerts"})["alerts"]
    )


def submit(gw: Gateway) -> dict[str, Any]:
    result = gw.step({"type": "submit"})
    assert result.terminated
    return result.info["grade"]


@pytest.fixture()
def episode(runtime: Any, sandbox: Any) -> Any:
    made: list[Gateway] = []

    def make(scenario_id: str) -> Gateway:
        sc = load_builtin(scenario_id).model_copy(update={"max_steps": 400})
        gw = Gateway(runtime, sc, seed=sc.seed, sandbox=sandbox.name)
        made.append(gw)
        gw.start()
        return gw

    yield make
    for gw in made:
        gw.close()


def test_deploy_best_run_and_hold_the_slo(episode: Any) -> None:
    gw = episode("serving-deploy-slo")
    clean = act(
        gw, {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"}
    )
    job = train(gw, clean["dataset"])
    assert job["metrics"]["val_auc"] >= 0.75
    v = act(gw, {"type": "register_model", "run_id": job["run_id"], "name": "churn"})["version"]
    dep = act(gw, {"type": "deploy_model", "name": "churn", "version": v})
    assert dep["evaluated"] is True
    assert act(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["p0-1"]})["status"] == 200
    act(gw, {"type": "wait", "seconds": 15})
    m = act(gw, {"type": "get_metrics", "target": "churn", "window_s": 15})
    assert m["summary"]["client_rps"] > 0
    grade = submit(gw)
    assert grade["success"], grade["reason"]
    assert grade["served_version"] == v and grade["risky_deployments"] == 0


def test_traffic_spike_scale_out_and_back(episode: Any) -> None:
    gw = episode("serving-traffic-spike")
    job = train(gw, "raw/customers.parquet")
    v = act(gw, {"type": "register_model", "run_id": job["run_id"], "name": "churn"})["version"]
    act(gw, {"type": "deploy_model", "name": "churn", "version": v, "replicas": 1})
    wait_for(gw, lambda: firing(gw, "TrafficSurge"), 120, "the traffic surge alert")
    assert act(gw, {"type": "scale", "deployment": "churn", "replicas": 3})["replicas_up"] == 3
    wait_for(gw, lambda: not firing(gw, "TrafficSurge"), 150, "the surge to end")
    act(gw, {"type": "scale", "deployment": "churn", "replicas": 1})
    m = act(
        gw,
        {"type": "get_metrics", "target": "churn", "names": ["client_rps", "replicas_up"], "window_s": 120},
    )
    assert max(p[1] or 0 for p in m["series"]["client_rps"]) > 10  # the surge was real traffic
    grade = submit(gw)
    assert grade["success"], grade["reason"]


def test_drift_detect_retrain_roll_out(episode: Any) -> None:
    gw = episode("serving-drift-rollout")
    job = train(gw, "raw/customers.parquet")
    v1 = act(gw, {"type": "register_model", "run_id": job["run_id"], "name": "churn"})["version"]
    act(gw, {"type": "deploy_model", "name": "churn", "version": v1})
    wait_for(gw, lambda: firing(gw, "FeatureDrift") or firing(gw, "LowLiveAccuracy"), 120, "a drift alert")
    m = act(gw, {"type": "get_metrics", "target": "churn", "names": ["feature_drift_psi", "live_accuracy"]})
    assert m["feature_drift_psi_by_column"]["monthly_spend"] > 0.25

    def enough_labels() -> bool:
        names = {d["name"] for d in act(gw, {"type": "list_datasets"})["datasets"]}
        if "prod/labelled.parquet" not in names:
            return False
        rows = act(gw, {"type": "check_data_quality", "dataset": "prod/labelled.parquet"})["profile"]["rows"]
        return rows >= 500

    wait_for(gw, enough_labels, 180, "labelled production data")
    job2 = train(gw, "prod/labelled.parquet")
    assert job2["metrics"]["val_auc"] >= 0.7
    v2 = act(gw, {"type": "register_model", "run_id": job2["run_id"], "name": "churn"})["version"]
    out = act(gw, {"type": "deploy_model", "name": "churn", "version": v2})
    assert out["version_history"] == [v1, v2] and out["evaluated"] is True
    grade = submit(gw)
    assert grade["success"], grade["reason"]
    assert grade["served_version"] == v2
