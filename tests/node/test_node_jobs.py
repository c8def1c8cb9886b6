"""The kube backend's training Jobs on real pods, through the agent's gateway.

A training Job runs the trainer image on the node and logs to the chart's MLflow from its pod: the run is
in MLflow with the metrics the agent was told, and its model's files are in the chart's MinIO (MLflow's
artifact store, written through MLflow's proxy). A Job over its memory limit is killed by the kernel: the
container ends ``OOMKilled`` with exit code 137 as the kubelet reports it, and that reaches the agent's
``get_job``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from tests.helpers import ok

from mlsandbox.backends.kube.node import NODE_NAME

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

pytestmark = pytest.mark.timeout(900)


def wait_job(gw: Any, job_id: str, timeout: float = 300) -> dict[str, Any]:
    """The agent's ``get_job`` once the job ended."""
    deadline = time.monotonic() + timeout
    while True:
        result = ok(gw, {"type": "get_job", "job_id": job_id})
        if result["state"] in ("succeeded", "failed", "cancelled"):
            return result
        assert time.monotonic() < deadline, f"{job_id} did not end within {timeout:.0f} s: {result}"
        time.sleep(2)


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = pod["status"]["containerStatuses"]
    state: dict[str, Any] = status["state"]["terminated"]
    return state


def test_training_jobs_run_the_trainer_image_and_the_kernel_oom_kills_one_over_its_limit(
    node_sandbox: NodeSandbox,
) -> None:
    from mlsandbox.gateway.dispatcher import Gateway
    from mlsandbox.scenario import load_builtin

    rt = node_sandbox.backend().runtime()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3, sandbox=node_sandbox.name)
    gw.start()
    try:
        # Gradient boosting takes the raw table's missing values as they are.
        train = {
            "type": "train_model",
            "dataset": "raw/customers.parquet",
            "algorithm": "gradient_boosting",
        }
        ok(gw, {**train, "resources": {"cpus": 1.0, "memory_mb": 1024}})
        ok(gw, {**train, "resources": {"cpus": 0.5, "memory_mb": 128}})
        trained, killed = wait_job(gw, "job-1"), wait_job(gw, "job-2")

        # job-1: the trainer image on the node, exit 0, its run in the chart's MLflow, its model in MinIO.
        assert trained["state"] == "succeeded", trained
        pod = rt.jobs.pod(gw.state.jobs["job-1"].backend_id)
        assert pod is not None
        assert pod["spec"]["containers"][0]["image"] == node_sandbox.env["MLSANDBOX_TRAINER_IMAGE"]
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert terminated(pod)["exitCode"] == 0
        run = rt.tracking.get_run(trained["run_id"])
        assert run.metrics["val_auc"] == pytest.approx(trained["metrics"]["val_auc"])
        assert run.metrics["val_auc"] > 0.6
        artifacts = rt.object_store.list_objects("mlflow-artifacts", f"{run.experiment_id}/")
        assert any(o.key.endswith("model.skops") for o in artifacts), artifacts

        # job-2: killed by the kernel at its 128 MiB limit; the kubelet's reason reaches the agent.
        assert killed["state"] == "failed" and killed["exit_code"] == 137, killed
        assert "OOMKilled" in killed["log_tail"] and "memory limit 128 MiB" in killed["log_tail"], killed
        # What the agent reads is the job's own output, not GitPython's warning that the image has no git.
        assert "git executable" not in killed["log_tail"].lower(), killed["log_tail"]
        pod = rt.jobs.pod(gw.state.jobs["job-2"].backend_id)
        assert pod is not None
        state = terminated(pod)
        assert state["reason"] == "OOMKilled" and state["exitCode"] == 137, state
    finally:
        gw.close()
    assert rt.jobs.list() == []  # the episode's Jobs go with it
