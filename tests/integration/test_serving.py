"""Serving against real services: model-server replicas, the feature service, real traffic and alerts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
import psutil
import pytest
from tests.helpers import err as step_err
from tests.helpers import ok as step_ok

from mlsandbox.backends.local.serving.processes import EPISODE_ENV, SERVING_ENV
from mlsandbox.backends.protocols.serving import FEATURE_SERVICE, DeploymentView, ReplicaView
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.packs.serving.handlers import ServingState
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario
from mlsandbox.workloads.fault_hook import clear_fault, hook_file, write_fault

SCRIPT_TIMEOUT = 900.0  # a shared, loaded machine can make one training job take minutes


def serving_procs(episode: str, what: str | None = None) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(EPISODE_ENV) == episode and (what is None or env.get(SERVING_ENV) == what):
            found.append(p)
    return found


def wait_job(gw: Gateway, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + SCRIPT_TIMEOUT
    while time.monotonic() < deadline:
        gw.episode.refresh_jobs()
        if gw.state.jobs[job_id].state in ("succeeded", "failed", "cancelled"):
            return step_ok(gw, {"type": "get_job", "job_id": job_id})
        time.sleep(0.5)
    raise AssertionError(f"{job_id} did not finish")


def train_and_register(
    gw: Gateway, dataset: str, name: str, hyperparams: dict[str, Any] | None = None
) -> str:
    job = step_ok(
        gw,
        {
            "type": "train_model",
            "dataset": dataset,
            "algorithm": "logistic_regression",
            "hyperparams": hyperparams or {},
        },
    )
    done = wait_job(gw, job["job_id"])
    assert done["state"] == "succeeded", done
    return str(step_ok(gw, {"type": "register_model", "run_id": done["run_id"], "name": name})["version"])


def _scenario() -> Scenario:
    data = load_builtin("serving-deploy-slo").model_dump(mode="json")
    data["serving"]["alerts"] = [
        {
            "name": "SlowModel",
            "metric": "latency_p99_ms",
            "op": ">",
            "threshold": 600,
            "for_s": 2,
            "window_s": 3,
        }
    ]
    data["serving"]["traffic"]["rate_rps"] = 5
    data["max_steps"] = 500  # alert polling takes steps
    return Scenario.model_validate(data)


@pytest.fixture(scope="module")
def gw(runtime: Any, sandbox: Any) -> Iterator[Gateway]:
    g = Gateway(runtime, _scenario(), seed=3, sandbox=sandbox.name)
    g.start()
    try:
        yield g
    finally:
        g.close()


@pytest.fixture(scope="module")
def versions(gw: Gateway) -> tuple[str, str]:
    clean = step_ok(
        gw, {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"}
    )
    v1 = train_and_register(gw, clean["dataset"], "churn")
    # A second version of the same run: rollouts and rollbacks are told apart by the version served.
    run_id = gw.state.jobs["job-1"].run_id
    v2 = str(step_ok(gw, {"type": "register_model", "run_id": run_id, "name": "churn"})["version"])
    return v1, v2


def test_deployment_predicts_like_the_mlflow_model(
    gw: Gateway, versions: tuple[str, str], runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow.pyfunc

    v1, _ = versions
    dep = step_ok(gw, {"type": "deploy_model", "name": "churn", "version": v1, "replicas": 1})
    assert dep["replicas_up"] == 1 and dep["version"] == v1 and dep["created"] is True
    # The protocol's view, the same keys as on kube, and nothing else.
    assert list(dep) == [*DeploymentView.model_fields, "created", "evaluated"]
    assert [list(r) for r in dep["replica_states"]] == [list(ReplicaView.model_fields)]
    assert dep["rollout"] == "complete" and dep["replica_states"][0]["version"] == v1
    assert dep["evaluated"] is True  # its run logged val_auc >= 0.75
    assert len(serving_procs(gw.state.episode_id, "model_server:churn")) >= 1
    assert len(serving_procs(gw.state.episode_id, "feature_service")) >= 1

    holdout = gw.state.ground_truth.holdouts["customers"].head(25)
    features = holdout.drop(columns=["label"])
    rows = [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in features.to_dict("records")]
    out = step_ok(gw, {"type": "predict", "deployment": "churn", "instances": rows})
    assert out["status"] == 200 and out["version"] == v1

    uri = f"models:/{gw.state.registry_name('churn')}/{v1}"
    from mlsandbox.workloads.contract import endpoint_env

    for k, v in endpoint_env(**runtime.endpoints.model_dump()).items():
        monkeypatch.setenv(k, v)
    expected = mlflow.pyfunc.load_model(uri).predict(features)
    assert out["predictions"] == [int(v) for v in expected]
    assert len(set(out["predictions"])) == 2  # both classes: the comparison means something

    # By entity id: the model server fetches the features from the feature service.
    ids = ["p0-1", "p0-2", "p0-3"]
    by_id = step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ids})
    assert by_id["status"] == 200 and len(by_id["predictions"]) == 3

    # Bad requests behave as a real server's.
    bad = dict(rows[0])
    del bad["plan"]
    bad["tenure_months"] = "long"
    err = step_ok(gw, {"type": "predict", "deployment": "churn", "instances": [bad]})
    assert err["status"] == 422
    locs = {tuple(d["loc"]) for d in err["error"]}
    assert ("body", "instances", 0, "plan") in locs and ("body", "instances", 0, "tenure_months") in locs
    unknown = step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["nobody"]})
    assert unknown["status"] == 404

    # Production traffic runs and is monitored; machine time is charged.
    time.sleep(4)
    m = step_ok(
        gw, {"type": "get_metrics", "target": "churn", "names": ["rps", "client_rps"], "window_s": 10}
    )
    assert m["summary"]["rps"] and m["summary"]["rps"] > 0
    assert m["summary"]["client_rps"] and m["summary"]["client_rps"] > 0
    assert gw.state.extra_credits > 0
    assert gw.state.serving.served_version == v1


def test_bad_deployments_are_refused_cleanly(gw: Gateway, versions: tuple[str, str]) -> None:
    assert step_err(gw, {"type": "deploy_model", "name": "churn", "version": "99"})["code"] == "not_found"
    assert step_err(gw, {"type": "deploy_model", "name": "nope", "version": "1"})["code"] == "not_found"
    assert step_err(gw, {"type": "scale", "deployment": "ghost", "replicas": 2})["code"] == "not_found"
    err = step_err(gw, {"type": "deploy_model", "name": "churn", "version": "1", "machine": "gpu-huge"})
    assert err["code"] == "invalid_parameters"
    err = step_err(gw, {"type": "scale", "deployment": "churn", "replicas": 9})
    assert err["code"] == "invalid_parameters"


def test_scale_changes_the_number_of_replica_processes(gw: Gateway, versions: tuple[str, str]) -> None:
    ep = gw.state.episode_id
    out = step_ok(gw, {"type": "scale", "deployment": "churn", "replicas": 2})
    assert out["replicas_up"] == 2
    assert len(serving_procs(ep, "model_server:churn")) == 2
    out = step_ok(gw, {"type": "scale", "deployment": "churn", "replicas": 1})
    assert out["replicas_up"] == 1
    assert len(serving_procs(ep, "model_server:churn")) == 1


def test_rollout_and_rollback(gw: Gateway, versions: tuple[str, str]) -> None:
    v1, v2 = versions
    out = step_ok(gw, {"type": "deploy_model", "name": "churn", "version": v2})
    assert out["created"] is False and out["version"] == v2 and out["version_history"] == [v1, v2]
    p = step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["p0-5"]})
    assert p["version"] == v2
    back = step_ok(gw, {"type": "rollback", "deployment": "churn", "version": v1})
    assert back["version"] == v1
    p = step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["p0-5"]})
    assert p["version"] == v1
    assert len(serving_procs(gw.state.episode_id, "model_server:churn")) == 1
    assert step_err(gw, {"type": "rollback", "deployment": "churn", "version": "7"})["code"] == "conflict"


def test_latency_alert_fires_and_resolves(gw: Gateway, versions: tuple[str, str]) -> None:
    # The deployment's fault hook, registered for http:churn faults of this episode (every replica's).
    hook = hook_file("churn", scope=gw.state.episode_id)
    assert hook is not None
    write_fault(hook, delay_ms=1000)
    try:
        fired = _poll(
            gw, lambda alerts: [a for a in alerts if a["rule"] == "SlowModel" and a["state"] == "firing"]
        )
        alert = fired[-1]
        assert alert["value"] > 600
        acked = step_ok(gw, {"type": "ack_alert", "alert_id": alert["alert_id"]})
        assert acked["acked"] is True
    finally:
        clear_fault(hook)
    resolved = _poll(
        gw,
        lambda alerts: [a for a in alerts if a["alert_id"] == alert["alert_id"] and a["state"] == "resolved"],
    )
    assert resolved[0]["resolved_s"] > resolved[0]["started_s"]
    assert gw.state.serving.slo_violation_s > 0  # 1 s > the 250 ms SLO


def test_feature_service_fault_shows_downstream(gw: Gateway, versions: tuple[str, str]) -> None:
    hook = hook_file(FEATURE_SERVICE, scope=gw.state.episode_id)
    assert hook is not None
    write_fault(hook, error_rate=1.0, status=503)
    try:
        time.sleep(0.3)  # the hook re-reads its file at most every 100 ms
        out = step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["p0-7"]})
        assert out["status"] == 502 and "feature service" in str(out["error"])
    finally:
        clear_fault(hook)
    time.sleep(0.3)
    assert step_ok(gw, {"type": "predict", "deployment": "churn", "entity_ids": ["p0-7"]})["status"] == 200


def test_undeploy_and_close_leave_no_process(gw: Gateway, versions: tuple[str, str]) -> None:
    ep = gw.state.episode_id
    v1, _ = versions
    step_ok(gw, {"type": "deploy_model", "name": "churn", "version": v1, "deployment": "side"})
    assert len(serving_procs(ep, "model_server:side")) == 1
    assert hook_file("side", scope=ep) is not None
    step_ok(gw, {"type": "undeploy", "deployment": "side"})
    assert serving_procs(ep, "model_server:side") == []
    assert hook_file("side", scope=ep) is None  # its fault hook goes with it
    assert step_err(gw, {"type": "get_deployment", "deployment": "side"})["code"] == "not_found"
    assert len(serving_procs(ep)) == 2  # churn's replica and the feature service live on
    world = gw.episode.pack_state(ServingState).world
    assert world is not None and world.traffic is not None and world.traffic.running
    gw.close()  # the episode ends: every serving process of it stops
    assert serving_procs(ep) == []
    assert hook_file("churn", scope=ep) is None and hook_file(FEATURE_SERVICE, scope=ep) is None
    assert not world.traffic.running and world.closed


def test_model_server_load_failure_exits_with_the_reason(runtime: Any, tmp_path: Any) -> None:
    from mlsandbox.workloads.contract import endpoint_env

    env = {**os.environ, **endpoint_env(**runtime.endpoints.model_dump())}
    port_file = tmp_path / "port"
    proc = subprocess.run(
        [sys.executable, "-m", "mlsandbox.workloads.model_server", "--model-uri", "models:/no-such-model/1",
         "--port", "0", "--port-file", str(port_file)],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 3
    assert "cannot fetch models:/no-such-model/1" in proc.stderr
    assert not port_file.exists()


def test_gc_stops_serving_processes_of_a_dead_episode(sandbox: Any, runtime: Any, tmp_path: Any) -> None:
    from mlsandbox.backends.local import collect_garbage

    # A separate process starts a feature service as an episode would, then dies without cleaning up.
    frame = pd.DataFrame({"entity_id": ["a", "b"], "x": [1.0, 2.0]})
    path = tmp_path / "f.parquet"
    frame.to_parquet(path)
    code = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from mlsandbox.backends.local import LocalBackend
        from mlsandbox.backends.local.serving.processes import ProcessHost
        b = LocalBackend({sandbox.name!r})
        host = ProcessHost(b.dir, b.name, b.endpoints(), "gc-test-episode")
        p = host.start("fs", "mlsandbox.workloads.feature_service", ["--path", {str(path)!r}], cpus=0.5,
                       what="feature_service")
        host.wait_ready([p])
        print(p.record.pid, flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[-1])
    assert psutil.pid_exists(pid) and serving_procs("gc-test-episode")
    collect_garbage()
    deadline = time.monotonic() + 10
    while serving_procs("gc-test-episode") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert serving_procs("gc-test-episode") == []


def _poll(gw: Gateway, pick: Any, timeout: float = 45.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pick(step_ok(gw, {"type": "get_alerts"})["alerts"])
        if found:
            return found
        time.sleep(1.0)
    raise AssertionError(f"no matching alert within {timeout} s: {step_ok(gw, {'type': 'get_alerts'})}")
