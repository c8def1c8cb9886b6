"""Episodes of the built-in scenarios with ``--backend kube`` on real pods of the real node.

The chart's MinIO, MLflow and Prefect (server and Kubernetes worker) and the operator run as pods; the
episode's training Jobs, model servers, feature service and flow runs are pods of the sandbox's namespace
running the trainer and model-server images. ``mlsandbox run`` runs ``tabular-quality-basic`` from the
command line as a user would; ``serving-deploy-slo`` and ``pipeline-failure-upstream`` run their reference
agents in process, with a look at the cluster after each step (what the pods did, not only what the agent
was told). Each must succeed, and leave none of its objects behind in the sandbox's namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mlsandbox.backends.kube import manifests as M
from mlsandbox.backends.kube.flows import FLOW_COMPONENT
from mlsandbox.backends.kube.node import NODE_NAME
from mlsandbox.backends.kube.serving import COMPONENT as SERVER_COMPONENT

EPISODE_LABEL = "mlsandbox.world.episode"
"""Every object of an episode carries it (the operator's warm reset deletes by it too)."""

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.agents.runner import StepRecord
    from mlsandbox.backends.kube.cluster import Cluster

pytestmark = pytest.mark.timeout(1800)

CLI = str(Path(sys.executable).parent / "mlsandbox")


def episode_objects(cluster: Cluster, namespace: str) -> dict[str, list[str]]:
    """What episodes leave in the sandbox's namespace: Jobs, Deployments, Services, Secrets, pods of an
    episode."""
    selector = EPISODE_LABEL
    found = {}
    kinds = (
        ("batch/v1", "Job"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "Secret"),
        ("v1", "Pod"),
    )
    for api, kind in kinds:
        names = [o["metadata"]["name"] for o in cluster.list(api, kind, namespace, selector)]
        if names:
            found[kind] = names
    return found


def wait_gone(cluster: Cluster, namespace: str, timeout: float = 120) -> dict[str, list[str]]:
    """The episode's objects once gone (pods take their grace period); what is left otherwise."""
    deadline = time.monotonic() + timeout
    left = episode_objects(cluster, namespace)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = episode_objects(cluster, namespace)
    return left


def run_in_process(box: NodeSandbox, scenario: str, agent: str, look: Any) -> Any:
    """The scenario's episode with ``agent`` through the Gymnasium env on ``--backend kube``, ``look(record)``
    after each step; the result. The env gets the sandbox's cluster, endpoints and images as the kube
    backend's typed config, not from this process's environment."""
    from mlsandbox.agents import make_agent
    from mlsandbox.agents.runner import run_episode
    from mlsandbox.env.gym_env import MLSandboxEnv
    from mlsandbox.scenario import load_scenario

    sc = load_scenario(scenario)
    env = MLSandboxEnv(sc, backend="kube", sandbox=box.name, backend_config=box.backend_config())
    try:
        return run_episode(env, make_agent(agent, seed=sc.seed), seed=sc.seed, on_step=look)
    finally:
        env.close()


def test_mlsandbox_run_tabular_quality_basic_on_real_pods(node_sandbox: NodeSandbox) -> None:
    """The user's command, from this machine: a training Job of the trainer image logs to the chart's
    MLflow from its pod, and the model it registered is graded on the holdout."""
    started = time.monotonic()
    args = ["run", "--backend", "kube", "--name", node_sandbox.name, "--scenario", "tabular-quality-basic"]
    done = subprocess.run(
        [CLI, *args, "--agent", "rule", "--quiet"],
        env={**os.environ, **node_sandbox.env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout + done.stderr
    print(
        f"mlsandbox run tabular-quality-basic on real pods: {time.monotonic() - started:.1f} s\n{out[-600:]}"
    )
    assert done.returncode == 0, out
    assert "success: holdout AUC" in done.stdout, out
    left = wait_gone(node_sandbox.backend().cluster, node_sandbox.namespace)
    assert not left, f"the episode left {left}"


def test_serving_deploy_slo_on_real_pods(node_sandbox: NodeSandbox) -> None:
    """Model servers of the model-server image pass their readiness probe and answer ``predict`` and the
    production traffic (through the API server's proxy to the pods); the SLO holds and the grade says so."""
    cluster = node_sandbox.backend().cluster
    ns = node_sandbox.namespace
    seen: dict[str, Any] = {"deployed": [], "predictions": 0, "scrapes": 0}

    def look(rec: StepRecord) -> None:
        obs, action = rec.observation, rec.action
        kind = action.get("type") if isinstance(action, dict) else None
        if kind == "deploy_model" and obs.get("ok"):
            name = action["name"]
            selector = f"{M.COMPONENT_LABEL}={SERVER_COMPONENT}"
            pods = cluster.list("v1", "Pod", ns, selector)
            assert pods, f"no model-server pod in {ns} after deploy_model"
            for pod in pods:
                (container,) = pod["spec"]["containers"]
                assert container["image"] == node_sandbox.env["MLSANDBOX_MODEL_SERVER_IMAGE"]
                assert container["readinessProbe"]["httpGet"]["path"] == "/health"
                assert pod["spec"]["nodeName"] == NODE_NAME
                conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
                statuses = pod["status"]["containerStatuses"]
                if conditions.get("Ready") == "True":
                    assert all(s["ready"] and "running" in s["state"] for s in statuses), statuses
            assert any(
                {c["type"]: c["status"] for c in p["status"]["conditions"]}.get("Ready") == "True"
                for p in pods
            ), "no model server passed its readiness probe"
            seen["deployed"].append(name)
        if kind == "predict":
            assert obs["ok"], obs["error"]
            seen["predictions"] += len(obs["result"]["predictions"])
        if kind == "get_metrics" and obs.get("ok"):
            # Production traffic answered by the replicas: the clients' latencies of the last window.
            latencies = [v for _, v in obs["result"]["series"].get("client_latency_p99_ms", []) if v]
            seen["scrapes"] += bool(latencies)

    res = run_in_process(
        node_sandbox, "serving-deploy-slo", "mlsandbox.agents.serving_reference:ServingReferenceAgent", look
    )
    print(f"serving-deploy-slo on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}")
    assert res.success, res.grade
    assert seen["deployed"] and seen["predictions"] > 0 and seen["scrapes"] > 0, seen
    assert res.grade["serving_observed_s"] > 30, res.grade  # the production traffic ran against the replicas
    left = wait_gone(cluster, ns)
    assert not left, f"the episode left {left}"


def test_pipeline_failure_upstream_on_real_pods(node_sandbox: NodeSandbox) -> None:
    """Prefect flow runs become Jobs of the trainer image that the chart's worker starts in the sandbox's
    namespace: the broken upstream batch fails with Prefect's state and its error in the logs, the
    repaired runs and the training flow complete, and the training flow registers the graded model."""
    cluster = node_sandbox.backend().cluster
    ns = node_sandbox.namespace
    states: dict[str, set[str]] = {}
    flow_pods: dict[str, dict[str, Any]] = {}

    def look(rec: StepRecord) -> None:
        obs, action = rec.observation, rec.action
        kind = action.get("type") if isinstance(action, dict) else None
        if kind == "get_flow_run" and obs.get("ok"):
            run = obs["result"]
            states.setdefault(run["flow"], set()).add(run["state"])
        for pod in cluster.list("v1", "Pod", ns, f"{M.COMPONENT_LABEL}={FLOW_COMPONENT}"):
            flow_pods[pod["metadata"]["name"]] = pod

    res = run_in_process(
        node_sandbox,
        "pipeline-failure-upstream",
        "mlsandbox.agents.pipeline_reference:PipelineReferenceAgent",
        look,
    )
    print(
        f"pipeline-failure-upstream on real pods: {res.wall_s:.1f} s, {len(res.steps)} steps, grade {res.grade}"
    )
    assert res.success, res.grade
    assert "Failed" in states.get("ingestion", set()) and "Completed" in states["ingestion"], states
    assert "Completed" in states.get("training", set()), states
    assert flow_pods, "no flow-run pod was seen in the sandbox's namespace"
    for pod in flow_pods.values():
        (container,) = pod["spec"]["containers"]
        assert container["image"] == node_sandbox.env["MLSANDBOX_TRAINER_IMAGE"]
        assert pod["spec"]["nodeName"] == NODE_NAME
    finished = [
        s["state"]["terminated"]
        for p in flow_pods.values()
        for s in p["status"].get("containerStatuses") or []
        if "terminated" in (s.get("state") or {})
    ]
    assert finished, "no flow-run pod was seen finishing"
    left = wait_gone(cluster, ns)
    assert not left, f"the episode left {left}"
