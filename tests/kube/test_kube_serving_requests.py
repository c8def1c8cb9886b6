"""Requests to model deployments on the kube backend: predictions, production traffic, metric scrapes and
alerts reach the replicas through the API server's proxy.

kwok gives every pod the node's address, which is this machine's (see ``controlplane``): the real model
server and the real feature service run here as processes on the ports the pods declare, loading the
model from the local sandbox's registry and the features from its lake, exactly as the pods' commands
say. So the Deployments, Services, Endpoints and the API server's service and pod proxies are the
cluster's, the servers are the real workloads, and only the container around them is missing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from test_kube_serving_cluster import runtime_of, wait_for  # tests/kube is on sys.path
from tests.helpers import err as _err
from tests.helpers import ok as _ok

from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.packs.serving.handlers import ServingState
from mlsandbox.scenario import load_builtin
from mlsandbox.workloads.contract import endpoint_env

SCENARIO = "serving-deploy-slo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


class Server:
    """A workload process standing behind a simulated pod (its port on this machine)."""

    def __init__(self, module: str, args: list[str], port: int, env: dict[str, str], log: Any) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--host", "0.0.0.0", "--port", str(port)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{module} did not start (exit {self.proc.returncode})")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture()
def trained_run(sandbox: Any, runtime: Any) -> Iterator[str]:
    """The run of a model trained by a real training job of a local episode on the scenario's data."""
    local = Gateway(runtime, load_builtin(SCENARIO), seed=5, sandbox=sandbox.name)
    local.start()
    try:
        clean = _ok(
            local, {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"}
        )
        job = _ok(
            local, {"type": "train_model", "dataset": clean["dataset"], "algorithm": "logistic_regression"}
        )
        deadline = time.monotonic() + 900
        while local.state.jobs[job["job_id"]].state not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, "the training job did not finish"
            time.sleep(0.5)
            local.episode.refresh_jobs()
        done = _ok(local, {"type": "get_job", "job_id": job["job_id"]})
        assert done["state"] == "succeeded", done
        yield done["run_id"]
    finally:
        local.close()


def test_predictions_traffic_metrics_and_alerts_go_through_the_api_server(
    backend: KubeBackend, sandbox: Any, trained_run: str, tmp_path: Any
) -> None:
    server_port, feature_port = _free_port(), _free_port()
    rt = runtime_of(backend, sandbox.endpoints(), server_port=server_port, feature_port=feature_port)
    gw = Gateway(rt, load_builtin(SCENARIO), seed=5, sandbox=sandbox.name)
    gw.start()
    model = gw.scenario.goal.model_name
    name = gw.state.registry_name(model)
    # The episode's registered model, as register_model makes it (kwok runs no trainer: the run is local).
    version = rt.tracking.register_model(trained_run, name).version
    gw.state.registered.append((model, str(version)))
    env = endpoint_env(**sandbox.endpoints().model_dump())
    log = (tmp_path / "servers.log").open("wb")
    servers: list[Server] = []
    try:
        servers.append(
            Server(
                "mlsandbox.workloads.feature_service",
                ["--bucket", gw.state.bucket, "--key", "online/features.parquet", "--id-column", "entity_id"],
                feature_port,
                env,
                log,
            )
        )
        dep = _ok(gw, {"type": "deploy_model", "name": model, "version": str(version), "replicas": 1})
        assert dep["replicas_up"] == 1 and dep["evaluated"] is True  # the run's val_auc passes
        (pod,) = rt.cluster.list(
            "apps/v1", "Deployment", rt.namespace, "app.kubernetes.io/component=model-server"
        )
        command = pod["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--feature-url") + 1] == (
            f"http://feature-service.{rt.namespace}.svc:{feature_port}"
        )
        fs = rt.cluster.get("apps/v1", "Deployment", "feature-service", rt.namespace)
        assert fs is not None and fs["metadata"]["labels"]["mlsandbox.world.episode"] == gw.state.episode_id

        # No model server behind the pod yet: the API server cannot reach it, and the agent is told so.
        err = _err(gw, {"type": "predict", "deployment": model, "entity_ids": ["e1"]})
        assert err["code"] == "unavailable" and "has no replica that answers" in err["message"]

        servers.append(
            Server(
                "mlsandbox.workloads.model_server",
                [
                    "--model-uri",
                    f"models:/{name}/{version}",
                    "--feature-url",
                    f"http://127.0.0.1:{feature_port}",
                ],
                server_port,
                env,
                log,
            )
        )
        population = gw.episode.pack_state(ServingState).population
        assert population is not None
        ids = list(population.features["entity_id"][:3])
        out = _ok(gw, {"type": "predict", "deployment": model, "entity_ids": ids})
        assert out["status"] == 200 and len(out["predictions"]) == 3
        assert out["version"] == str(version) and all(0 <= p <= 1 for p in out["probabilities"])
        out = _ok(gw, {"type": "predict", "deployment": model, "instances": [{"tenure_months": "many"}]})
        assert out["status"] in (400, 422) and out["error"]  # the model server's own answer, passed on
        assert (
            _err(gw, {"type": "predict", "deployment": "nope", "entity_ids": ["e1"]})["code"] == "not_found"
        )

        # The production traffic started with the deployment; the monitor scrapes the pods' /metrics.
        def served() -> dict[str, Any] | None:
            view = _ok(gw, {"type": "get_metrics", "target": model, "window_s": 30})
            return view if (view["summary"].get("client_rps") or 0) > 0 and view["summary"]["rps"] else None

        view = wait_for(served, "production traffic through the API server", timeout=60)
        summary = view["summary"]
        assert summary["replicas_up"] == 1 and summary["error_rate"] == 0.0
        assert summary["cpu_percent"] is None  # kwok runs no kubelet whose resource metrics say it
        features = _ok(gw, {"type": "get_metrics", "target": "feature-service", "window_s": 30})
        assert features["summary"]["rps"] > 0

        # The replica stops answering: clients see errors and the alert fires.
        servers[1].stop()
        err = _err(gw, {"type": "predict", "deployment": model, "entity_ids": ids})
        assert err["code"] == "unavailable"

        def firing() -> list[dict[str, Any]] | None:
            alerts = _ok(gw, {"type": "get_alerts"})["alerts"]
            return [a for a in alerts if a["rule"] == "HighErrorRate" and a["state"] == "firing"] or None

        wait_for(firing, "the error-rate alert", timeout=60)
    finally:
        gw.close()
        for s in servers:
            s.stop()
        log.close()
    assert rt.cluster.list("apps/v1", "Deployment", rt.namespace) == []  # model servers and features
    assert rt.cluster.list("v1", "Service", rt.namespace) == []
