"""Model deployments of the kube backend against a real API server with its Deployment and ReplicaSet
controllers, with kwok as the node (``control_plane`` in tests/kube/conftest.py).

kwok marks a scheduled pod Running and Ready (it runs no process, so the readiness probe is not what
makes it ready here); everything else - the Deployment's rollout and status, the ReplicaSets, the
Service, the operator's warm reset and the agent's observations through the gateway - is the real code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from tests.helpers import ENDPOINTS as WORKLOAD_ENDPOINTS

from mlsandbox.backends.kube import serving as KS
from mlsandbox.backends.kube.backend import KubeBackend
from mlsandbox.backends.kube.deployments import KubeEpisodeServing
from mlsandbox.backends.kube.manifests import SANDBOX_LABEL
from mlsandbox.backends.kube.runtime import KubeRuntime
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.backends.protocols.serving import (
    DeploymentSpec,
    DeploymentView,
    Machine,
    ReplicaView,
    ServingError,
)

T = TypeVar("T")
EPISODE = ("mlsandbox.world.episode", "ep-srv")
TINY = Machine(name="cpu-tiny", cpus=0.25, memory_mb=256, credits_per_second=0.01)


def wait_for(fn: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def spec(**overrides: Any) -> DeploymentSpec:
    values: dict[str, Any] = {
        "deployment": "churn",
        "model": "churn",
        "registry_name": "ep-srv.churn",
        "version": "1",
        "replicas": 2,
        "machine": TINY,
    }
    return DeploymentSpec(**{**values, **overrides})


def episode(rt: KubeRuntime, labels: tuple[str, str] = EPISODE) -> KubeEpisodeServing:
    """The episode's serving, as the serving pack opens it."""
    return rt.serving.open(labels[1], dict([labels]))


def runtime_of(
    backend: KubeBackend, endpoints: Endpoints = WORKLOAD_ENDPOINTS, **options: Any
) -> KubeRuntime:
    """The backend's runtime with clients on ``endpoints`` (Jobs and pods get the in-cluster ones)."""
    return KubeRuntime(
        backend.cluster,
        sandbox=backend.name,
        namespace=backend.namespace,
        control_namespace=backend.control_namespace,
        endpoints=endpoints,
        workload_endpoints=WORKLOAD_ENDPOINTS,
        image="mlsandbox/trainer:0.1.0",
        server_image="mlsandbox/model-server:0.1.0",
        **options,
    )


def _objects(rt: KubeRuntime, name: str = "churn") -> tuple[Any, Any]:
    return (
        rt.cluster.get("apps/v1", "Deployment", name, rt.namespace),
        rt.cluster.get("v1", "Service", name, rt.namespace),
    )


def _template_versions(rt: KubeRuntime) -> set[str]:
    pods = rt.cluster.list("v1", "Pod", rt.namespace, f"{KS.DEPLOYMENT_LABEL}=churn")
    return {
        p["metadata"]["labels"][KS.VERSION_LABEL] for p in pods if not p["metadata"].get("deletionTimestamp")
    }


# --------------------------------------------------------------------------------------------- backend


def test_deploy_makes_a_ready_deployment_and_service_and_scale_changes_ready_replicas(
    backend: KubeBackend,
) -> None:
    rt = runtime_of(backend)
    ep = episode(rt)
    view, created = ep.deploy(spec())
    assert created is True and type(view) is DeploymentView
    assert view.rollout == "complete" and view.replicas == 2 and view.replicas_up == 2
    assert [s.state for s in view.replica_states] == ["running", "running"]
    assert [list(r) for r in view.model_dump()["replica_states"]] == [list(ReplicaView.model_fields)] * 2

    dep, svc = _objects(rt)
    assert dep is not None and svc is not None
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "mlsandbox/model-server:0.1.0"
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {
            "cpu": "250m",
            "memory": "256Mi",
        }
    )
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    for labels in (dep["metadata"]["labels"], svc["metadata"]["labels"]):
        assert labels[EPISODE[0]] == EPISODE[1] and labels[SANDBOX_LABEL] == backend.name
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["port"] == 8080
    pods = rt.cluster.list("v1", "Pod", rt.namespace, f"{KS.DEPLOYMENT_LABEL}=churn")
    assert len(pods) == 2 and all(p["metadata"]["labels"][EPISODE[0]] == EPISODE[1] for p in pods)
    assert rt.cluster.get("v1", "Secret", "mlsandbox-s3", rt.namespace) is not None

    up = ep.scale("churn", 3)
    assert up.replicas == 3 and up.replicas_up == 3
    assert (rt.cluster.get("apps/v1", "Deployment", "churn", rt.namespace) or {})["status"][
        "readyReplicas"
    ] == 3
    down = ep.scale("churn", 1)
    assert down.replicas == 1 and down.replicas_up == 1
    assert ep.credits_per_second() == pytest.approx(0.01)
    assert [d.deployment for d in ep.list()] == ["churn"]
    other = episode(rt, ("mlsandbox.world.episode", "another"))
    assert other.list() == [] and other.credits_per_second() == 0.0
    with pytest.raises(ServingError, match="belongs to another episode") as refused:
        other.scale("churn", 2)
    assert refused.value.code == "conflict"

    with pytest.raises(ServingError, match="0 or more") as refused:
        ep.scale("churn", -1)
    assert refused.value.code == "invalid_parameters"
    with pytest.raises(ServingError, match=r"deployment 'nope' does not exist \(deployments: churn\)"):
        ep.scale("nope", 1)
    with pytest.raises(ServingError, match="serves model 'churn', not 'other'"):
        ep.deploy(spec(model="other", registry_name="ep-srv.other"))


def test_a_new_version_rolls_out_and_rollback_restores_the_previous_one(backend: KubeBackend) -> None:
    rt = runtime_of(backend)
    serving = episode(rt)
    serving.deploy(spec())
    view, created = serving.deploy(spec(version="2"))
    assert created is False
    assert view.version == "2" and view.version_history == ["1", "2"]
    dep, _ = _objects(rt)
    assert "models:/ep-srv.churn/2" in dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert dep["metadata"]["generation"] == 2  # the pod template changed: a rolling update
    wait_for(lambda: _template_versions(rt) == {"2"} or None, "the version-2 pods to replace the others")
    assert serving.get("churn").replicas_up == 2

    with pytest.raises(ServingError, match="never served version 7"):
        serving.set_version("churn", "7")
    with pytest.raises(ServingError, match="already serves version 2"):
        serving.set_version("churn", "2")
    back = serving.set_version("churn", "1")
    assert back.version == "1" and back.version_history == ["1", "2", "1"]
    dep, _ = _objects(rt)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "models:/ep-srv.churn/1" in container["command"]
    assert {e["name"]: e.get("value") for e in container["env"]}["MLSANDBOX_MODEL_VERSION"] == "1"
    wait_for(lambda: _template_versions(rt) == {"1"} or None, "the version-1 pods to come back")


def test_an_oom_killed_replica_shows_in_get_deployment_and_is_replaced(backend: KubeBackend) -> None:
    rt = runtime_of(backend)
    ep = episode(rt)
    ep.deploy(spec(replicas=1))
    (pod,) = rt.cluster.list("v1", "Pod", rt.namespace, f"{KS.DEPLOYMENT_LABEL}=churn")
    rt.cluster.patch(
        "v1",
        "Pod",
        pod["metadata"]["name"],
        rt.namespace,
        {"metadata": {"annotations": {"mlsandbox.dev/kwok-outcome": "OOMKilled"}}},
    )

    def oom_row() -> ReplicaView | None:
        rows = ep.get("churn").replica_states
        return next((r for r in rows if r.state == "exited"), None)

    row = wait_for(oom_row, "the OOM kill in the view")
    assert row.exit_code == 137 and row.reason == "OOMKilled" and row.version == "1"
    assert row.message is not None and "memory limit 256 MiB" in row.message
    view = wait_for(
        lambda: ((v := ep.get("churn")).replicas_up == 1 and v) or None,
        "the ReplicaSet to replace the killed replica",
    )
    assert [r.state for r in view.replica_states].count("running") == 1


def test_undeploy_removes_both_objects_and_down_removes_the_rest(backend: KubeBackend) -> None:
    rt = runtime_of(backend)
    ep = episode(rt)
    ep.deploy(spec())
    ep.deploy(spec(deployment="churn_b"), wait=False)
    last = ep.undeploy("churn")
    assert last.deployment == "churn"
    assert _objects(rt) == (None, None)
    wait_for(
        lambda: not rt.cluster.list("v1", "Pod", rt.namespace, f"{KS.DEPLOYMENT_LABEL}=churn") or None,
        "the undeployed replicas to go",
    )
    with pytest.raises(ServingError, match="does not exist") as refused:
        ep.undeploy("churn")
    assert refused.value.code == "not_found"
    assert _objects(rt, "churn-b")[0] is not None
    backend.down()
    assert _objects(rt, "churn-b") == (None, None)


# ------------------------------------------------------------------------------------ operator reset


def test_the_operators_warm_reset_removes_the_episodes_deployments(control_plane: Any) -> None:
    bed = control_plane
    spec_ = {
        "scenario": "tabular-quality-basic",
        "seed": 3,
        "budget": {"cpu": "2", "memory": "4Gi", "maxPods": 5},
    }
    bed.namespace("team-srv")
    bed.create_sandbox("team-srv", "reset", spec_)
    bed.wait_phase("team-srv", "reset", "Ready")
    backend = KubeBackend("reset", control_namespace="team-srv", api_client=bed.api_client)
    backend.up()
    rt = runtime_of(backend)
    ep = episode(rt)
    view, _ = ep.deploy(spec())
    assert view.replicas_up == 2  # admitted under the sandbox's quota and limit range
    bed.patch_spec("team-srv", "reset", {"episode": 1})
    bed.wait_phase("team-srv", "reset", "Ready", episode=1)
    bed.wait("the episode's Deployment and Service are gone", lambda: _objects(rt) == (None, None))
    bed.wait(
        "the episode's pods are gone",
        lambda: not rt.cluster.list("v1", "Pod", rt.namespace, f"{KS.DEPLOYMENT_LABEL}=churn"),
    )
    assert ep.list() == []
    names = {s["metadata"]["name"] for s in rt.cluster.list("v1", "Service", rt.namespace)}
    assert {"minio", "mlflow", "prefect"} <= names  # the sandbox's own services stay


# --------------------------------------------------------------------------------- through the gateway


def test_serving_actions_through_the_gateway_on_the_cluster(backend: KubeBackend, sandbox: Any) -> None:
    """The agent's actions: object store and tracker from a local sandbox, deployments on the API server."""
    from mlsandbox.gateway.dispatcher import Gateway
    from mlsandbox.scenario import load_builtin

    rt = runtime_of(backend, endpoints=sandbox.endpoints())
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3, sandbox=sandbox.name)
    gw.start()
    model = gw.scenario.goal.model_name
    deployments = lambda: rt.cluster.list("apps/v1", "Deployment", rt.namespace)  # noqa: E731
    try:
        # kwok runs no trainer, so no run can be registered here: the episode records version 1 as
        # registered (what register_model does after a real training run).
        gw.state.registered.append((model, "1"))

        obs = gw.step({"type": "deploy_model", "name": model, "version": "4"}).observation
        assert not obs["ok"] and obs["error"]["code"] == "not_found"
        assert "has no version 4 (versions: 1)" in obs["error"]["message"]
        obs = gw.step(
            {"type": "deploy_model", "name": model, "version": "1", "machine": "gpu-huge"}
        ).observation
        assert not obs["ok"] and obs["error"]["code"] == "invalid_parameters"
        assert "unknown machine 'gpu-huge'" in obs["error"]["message"]
        obs = gw.step({"type": "deploy_model", "name": model, "version": "1", "replicas": 9}).observation
        assert not obs["ok"] and "limit of" in obs["error"]["message"]
        assert deployments() == []
        assert rt.cluster.list("v1", "Service", rt.namespace) == []

        obs = gw.step({"type": "deploy_model", "name": model, "version": "1", "replicas": 1}).observation
        assert obs["ok"], obs["error"]
        result = obs["result"]
        assert result["created"] is True and result["replicas_up"] == 1 and result["version"] == "1"
        assert result["limits"] == {"cpus": 1.0, "memory_mb": 2048}  # cpu-small of the scenario
        assert result["evaluated"] is False  # no run behind the version: a risky deployment
        assert gw.state.serving.served_version == "1"
        (dep,) = deployments()
        assert dep["metadata"]["labels"][EPISODE[0]] == gw.state.episode_id

        obs = gw.step({"type": "scale", "deployment": model, "replicas": -1}).observation
        assert not obs["ok"]
        assert deployments()[0]["spec"]["replicas"] == 1
        obs = gw.step({"type": "scale", "deployment": model, "replicas": 2}).observation
        assert obs["ok"], obs["error"]
        assert obs["result"]["replicas_before"] == 1 and obs["result"]["replicas_up"] == 2

        obs = gw.step({"type": "get_deployment"}).observation
        assert obs["ok"] and [d["deployment"] for d in obs["result"]["deployments"]] == [model]
        obs = gw.step({"type": "predict", "deployment": model, "instances": [{"x": 1}]}).observation
        # Through the API server's proxy to the pod's port, where nothing listens under kwok here.
        assert not obs["ok"] and obs["error"]["code"] == "unavailable", obs["error"]
        assert "has no replica that answers" in obs["error"]["message"]
        obs = gw.step({"type": "rollback", "deployment": model, "version": "1"}).observation
        assert not obs["ok"] and obs["error"]["code"] == "conflict"
        assert gw.state.extra_credits > 0
    finally:
        gw.close()
    assert deployments() == []  # the episode's deployments go with it
    assert rt.cluster.list("v1", "Service", rt.namespace) == []
