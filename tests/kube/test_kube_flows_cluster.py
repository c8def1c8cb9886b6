"""Prefect flows on the kube backend: each flow run is a Job of a Kubernetes work pool.

The real Prefect worker (``prefect worker start --type kubernetes``, from ``prefect-kubernetes``, as the
chart runs it) polls the local sandbox's Prefect server and creates the Jobs on the real API server; kwok
plays their pods. Nothing runs inside them here, so a run stays Pending until its pod ends: a failed pod
fails the Job, and the worker's observer marks the run Crashed, which is what the agent sees.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_kube_serving_cluster import WORKLOAD_ENDPOINTS, runtime_of, wait_for
from tests.helpers import ok as _ok

from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.backends.kube.controlplane import OUTCOME_ANNOTATION
from mlsandbox.backends.kube.flows import FLOW_COMPONENT
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario


@pytest.fixture()
def work_pool(control_plane: Any, sandbox: Any, tmp_path: Path) -> Iterator[str]:
    """A Kubernetes work pool on the sandbox's Prefect server, with its worker against this API server."""
    pool = f"kube-{secrets.token_hex(3)}"
    api = sandbox.endpoints().prefect_api_url
    env = {
        **os.environ,
        "PREFECT_API_URL": api,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "KUBECONFIG": str(control_plane.kubeconfig),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = (tmp_path / "worker.log").open("wb")
    prefect = Path(sys.executable).parent / "prefect"
    worker = subprocess.Popen(
        [str(prefect), "worker", "start", "--pool", pool, "--type", "kubernetes", "--name", pool],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def online() -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        resp = httpx.post(f"{api}/work_pools/{pool}/workers/filter", json={}, timeout=5)
        return resp.status_code == 200 and any(w.get("status") == "ONLINE" for w in resp.json())

    try:
        wait_for(online, "the Kubernetes worker to be online", timeout=120)
        yield pool
    finally:
        worker.terminate()
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        httpx.delete(f"{api}/work_pools/{pool}", timeout=5)


def test_flow_runs_are_jobs_of_the_kubernetes_work_pool(
    backend: KubeBackend, sandbox: Any, work_pool: str
) -> None:
    rt = runtime_of(backend, sandbox.endpoints(), work_pool=work_pool)
    data = load_builtin("pipeline-failure-upstream").model_dump(mode="json")
    data["pipelines"]["start_runs"] = []  # its start waits for runs that, under kwok, never run
    data["max_steps"] = 2000  # the test polls with steps
    gw = Gateway(rt, Scenario.model_validate(data), seed=3, sandbox=sandbox.name)
    gw.start()
    selector = f"app.kubernetes.io/component={FLOW_COMPONENT}"
    jobs = lambda: rt.cluster.list("batch/v1", "Job", rt.namespace, selector)  # noqa: E731
    try:
        started = _ok(
            gw,
            {
                "type": "run_flow",
                "name": "ingestion",
                "parameters": {"dataset": "customers", "batch": "2026-11-26"},
            },
        )
        assert started["flow_run_id"] == "fr-1"
        (job,) = wait_for(jobs, "the worker to create the flow run's Job", timeout=90)
        labels = job["metadata"]["labels"]
        assert labels["mlsandbox.world.episode"] == gw.state.episode_id
        assert labels["mlsandbox.dev/flow-sandbox"] == backend.name
        assert "mlsandbox.dev/sandbox" not in labels  # not one of the agent's jobs
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "mlsandbox/trainer:0.1.0"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["MLFLOW_TRACKING_URI"] == WORKLOAD_ENDPOINTS.mlflow_url  # in-cluster endpoints
        assert env["MLSANDBOX_EPISODE"] == gw.state.episode_id and env["MLSANDBOX_NO_TORCH"] == "1"
        assert rt.jobs.list(gw.state.job_label) == []  # flow runs are not the agent's training jobs

        # Submitted (the observer may have seen the pod pending); nothing runs in a kwok pod.
        def submitted() -> dict[str, Any] | None:
            v = _ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
            return v if v["state"] in ("Pending", "InfrastructurePending") else None

        wait_for(submitted, "the run to be submitted", timeout=60)

        # The pod fails: the Job fails, the worker's observer marks the run Crashed.
        (pod,) = wait_for(
            lambda: rt.cluster.list("v1", "Pod", rt.namespace, selector), "the flow run's pod", timeout=60
        )
        rt.cluster.patch(
            "v1",
            "Pod",
            pod["metadata"]["name"],
            rt.namespace,
            {"metadata": {"annotations": {OUTCOME_ANNOTATION: "Failed"}}},
        )

        def crashed() -> dict[str, Any] | None:
            v = _ok(gw, {"type": "get_flow_run", "flow_run_id": "fr-1"})
            return v if v["state"] == "Crashed" else None

        view = wait_for(crashed, "the run to be marked Crashed", timeout=120)
        assert view["state"] == "Crashed"
    finally:
        gw.close()
    wait_for(lambda: not jobs() or None, "the episode's flow-run Jobs to go", timeout=30)
