"""The kube backend's model deployments: the Deployment and Service builders, the view read back (the
protocol's ``DeploymentView``, the same keys as on local), and the episode's serving against an in-memory
API server (rollouts, their undo on a failing replica, episode isolation, cleanup).

Every built manifest is validated with ``kubeconform -strict`` against the Kubernetes schemas of the pinned
version (offline; a missing tool fails with a hint to run ``make setup``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import schemas
from mlsandbox.backends.kube import serving as KS
from mlsandbox.backends.kube.manifests import S3_SECRET_NAME, SANDBOX_LABEL
from mlsandbox.backends.protocols.serving import DeploymentView, ReplicaView, ServingError
from mlsandbox.errors import MissingToolError

EPISODE = ("mlsandbox.world.episode", "7-0a1b2c3d")


def spec(**overrides: Any) -> KS.ModelServerSpec:
    values: dict[str, Any] = {
        "deployment": "churn",
        "model": "churn",
        "registry_name": "ep-7-0a1b2c3d.churn",
        "version": "2",
        "replicas": 2,
        "machine": "cpu-small",
        "cpus": 1.0,
        "memory_mb": 2048,
        "credits_per_second": 0.05,
        "labels": dict([EPISODE]),
    }
    return KS.ModelServerSpec(**{**values, **overrides})


def build(s: KS.ModelServerSpec, history: list[str] | None = None) -> dict[str, Any]:
    return KS.model_server_deployment(
        s,
        namespace="sbx-mlsandbox-s1",
        sandbox="s1",
        image="mlsandbox/model-server:0.1.0",
        endpoints=ENDPOINTS,
        s3_secret=S3_SECRET_NAME,
        history=history,
    )


def validate(docs: list[dict[str, Any]]) -> None:
    try:
        report = schemas.kubeconform(docs)
    except MissingToolError as exc:
        pytest.fail(str(exc))
    assert len(report.results) == len(docs), report.results
    assert not report.failures, report.describe()


def test_a_replica_may_request_a_share_of_its_machines_cpu_with_the_same_limits() -> None:
    """One small machine's cluster: replicas request a quarter of their CPU, so that two fit on two
    CPUs beside the chart; limits (the kernel's throttling and OOM kill) stay the machine's."""
    s = spec()
    dep = KS.model_server_deployment(
        s, namespace="sbx-mlsandbox-s1", sandbox="s1", image="m:1", endpoints=ENDPOINTS, cpu_request=0.25
    )
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "2048Mi"},
        "limits": {"cpu": "1000m", "memory": "2048Mi"},
    }
    feature, _ = KS.feature_service_manifests(
        namespace="n", sandbox="s1", image="m:1", endpoints=ENDPOINTS, bucket="b", key="k",
        id_column="id", labels={}, cpu_request=0.25,
    )  # fmt: skip
    (container,) = feature["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "125m", "memory": "512Mi"}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    with pytest.raises(ValueError, match="cpu_request"):
        KS.server_resources(1.0, 512, 0)


def test_the_deployment_serves_the_version_with_the_machines_limits_and_a_health_probe() -> None:
    dep = build(spec())
    assert dep["apiVersion"] == "apps/v1" and dep["kind"] == "Deployment"
    assert dep["metadata"]["name"] == "churn" and dep["metadata"]["namespace"] == "sbx-mlsandbox-s1"
    assert dep["spec"]["replicas"] == 2
    strategy = dep["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "mlsandbox/model-server:0.1.0"
    assert container["command"][:3] == ["python", "-m", "mlsandbox.workloads.model_server"]
    assert "models:/ep-7-0a1b2c3d.churn/2" in container["command"]
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {
            "cpu": "1000m",
            "memory": "2048Mi",
        }
    )
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    env = {e["name"]: e for e in container["env"]}
    assert env["MLSANDBOX_MODEL_NAME"]["value"] == "churn"
    assert env["MLSANDBOX_REGISTRY_NAME"]["value"] == "ep-7-0a1b2c3d.churn"
    assert env["MLSANDBOX_MODEL_VERSION"]["value"] == "2"
    assert env["MLFLOW_TRACKING_URI"]["value"] == ENDPOINTS.mlflow_url
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == ENDPOINTS.s3_url
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": S3_SECRET_NAME,
        "key": "secret-key",
    }
    assert "secret-secret" not in str(dep)
    assert KS.spec_of(dep) == spec()
    assert KS.history_of(dep) == ["2"]
    validate([dep])


def test_labels_carry_the_sandbox_and_episode_and_the_selector_never_the_version() -> None:
    dep = build(spec())
    svc = KS.model_server_service(spec(), namespace="sbx-mlsandbox-s1", sandbox="s1")
    for labels in (
        dep["metadata"]["labels"],
        dep["spec"]["template"]["metadata"]["labels"],
        svc["metadata"]["labels"],
    ):
        assert labels[EPISODE[0]] == EPISODE[1]  # what the operator's warm reset selects
        assert labels[SANDBOX_LABEL] == "s1"
        assert labels["app.kubernetes.io/component"] == "model-server"
    assert dep["spec"]["template"]["metadata"]["labels"][KS.VERSION_LABEL] == "2"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector == svc["spec"]["selector"] == {SANDBOX_LABEL: "s1", KS.DEPLOYMENT_LABEL: "churn"}
    assert all(dep["spec"]["template"]["metadata"]["labels"][k] == v for k, v in selector.items())
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    # A new version changes the pod template only where the version is.
    v3 = build(spec(version="3"), history=["2", "3"])
    assert v3["spec"]["selector"] == dep["spec"]["selector"]
    assert KS.history_of(v3) == ["2", "3"]
    assert "models:/ep-7-0a1b2c3d.churn/3" in v3["spec"]["template"]["spec"]["containers"][0]["command"]
    validate([svc, v3])


@pytest.mark.parametrize(
    ("deployment", "expected"),
    [("churn", "churn"), ("Churn_Model", "churn-model"), ("a-", None), ("x" * 64, None)],
)
def test_server_names_are_service_names(deployment: str, expected: str | None) -> None:
    name = KS.server_name(deployment)
    if expected is not None:
        assert name == expected
    assert KS._DNS_1035.match(name) and len(name) <= 63, name
    assert KS.server_name(deployment) == name  # stable


def test_invalid_specs_are_refused_before_anything_is_built() -> None:
    with pytest.raises(ValidationError):
        spec(replicas=-1)
    with pytest.raises(ValidationError):
        spec(version="0")
    with pytest.raises(ValidationError):
        spec(memory_mb=0)
    with pytest.raises(ValueError, match="not a valid Kubernetes label"):
        build(spec(labels={"mlsandbox.world.episode": "not a label value"}))


def _pod(name: str, created: str, status: dict[str, Any], version: str = "2") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "labels": {KS.VERSION_LABEL: version}},
        "status": status,
    }


def test_the_view_reads_replicas_rollout_and_an_oom_killed_replica() -> None:
    dep = build(spec(version="3"), history=["2", "3"])
    dep["metadata"]["generation"] = 2
    dep["status"] = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}
    running = _pod(
        "churn-a",
        "2026-01-01T00:00:01Z",
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "model-server", "state": {"running": {}}}],
        },
        version="3",
    )
    oom = _pod(
        "churn-b",
        "2026-01-01T00:00:00Z",
        {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "model-server", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
        version="3",
    )
    pending = _pod(
        "churn-c",
        "2026-01-01T00:00:02Z",
        {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
            ],
        },
    )
    view = KS.describe(dep, [running, oom, pending])
    assert type(view) is DeploymentView
    assert view.deployment == "churn" and view.model == "churn" and view.version == "3"
    assert view.machine == "cpu-small" and view.limits.model_dump() == {"cpus": 1.0, "memory_mb": 2048}
    assert view.environment == "default"
    assert view.replicas == 2 and view.replicas_up == 1
    assert view.rollout == "progressing"
    assert view.version_history == ["2", "3"]
    states = view.model_dump(mode="json")["replica_states"]
    assert [s["state"] for s in states] == ["exited", "running", "starting"]  # oldest first
    assert states[0] == {
        "replica": 0,
        "version": "3",
        "state": "exited",
        "exit_code": 137,
        "reason": "OOMKilled",
        "message": "killed by the kernel: out of memory (memory limit 2048 MiB)",
    }
    assert states[1]["version"] == "3" and states[1]["reason"] is None
    assert states[2]["version"] == "2" and states[2]["reason"] == "Unschedulable"
    assert states[2]["message"] == "0/1 nodes"

    dep["status"]["readyReplicas"] = 2
    second = copy.deepcopy(running)
    second["metadata"]["name"] = "churn-d"
    assert KS.describe(dep, [running, second]).rollout == "complete"
    # The Deployment's status lags: it still counts a replica whose pod has just exited. The view counts
    # what the pods say, so it never reports a replica up beside no running one.
    lagging = KS.describe(dep, [running, oom])
    assert lagging.replicas_up == 1 and lagging.rollout == "progressing"
    assert KS.describe(dep, [oom]).replicas_up == 0
    with pytest.raises(ServingError, match="not made by mlsandbox") as refused:
        KS.describe({"metadata": {"name": "other"}}, [])
    assert refused.value.code == "conflict"


def test_a_rollout_fails_on_a_new_replica_that_exits_or_cannot_start() -> None:
    def r(state: str, version: str = "2", reason: str | None = None, code: int | None = None) -> ReplicaView:
        return ReplicaView(replica=0, version=version, state=state, reason=reason, exit_code=code)  # type: ignore[arg-type]

    assert KS.rollout_failure([r("running"), r("starting")], "2") is None
    assert KS.rollout_failure([r("starting", reason="Unschedulable")], "2") is None  # may still be placed
    why = KS.rollout_failure([r("running"), r("exited", reason="Error", code=3)], "2")
    assert why is not None and "exit code 3" in why and "Error" in why
    assert KS.rollout_failure([r("starting", reason="ErrImageNeverPull")], "2") is not None
    assert KS.rollout_failure([r("starting", reason="CrashLoopBackOff")], "2") is not None
    assert KS.rollout_failure([r("exited", version="1", reason="OOMKilled", code=137)], "2") is None


def test_the_feature_service_and_the_replicas_feature_url() -> None:
    url = "http://feature-service.sbx-mlsandbox-s1.svc:8081"
    dep = build(spec(feature_url=url))
    command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--feature-url") + 1] == url
    assert "--feature-url" not in build(spec())["spec"]["template"]["spec"]["containers"][0]["command"]

    fdep, fsvc = KS.feature_service_manifests(
        namespace="sbx-mlsandbox-s1",
        sandbox="s1",
        image="mlsandbox/model-server:0.1.0",
        endpoints=ENDPOINTS,
        bucket="ep-7",
        key="online/features.parquet",
        id_column="entity_id",
        labels=dict([EPISODE]),
        s3_secret=S3_SECRET_NAME,
        port=9123,
    )
    assert fdep["metadata"]["name"] == fsvc["metadata"]["name"] == KS.FEATURE_SERVICE_NAME
    for obj in (fdep, fsvc):
        labels = obj["metadata"]["labels"]
        assert labels[EPISODE[0]] == EPISODE[1] and labels[SANDBOX_LABEL] == "s1"
        assert labels["app.kubernetes.io/component"] == "feature-service"
    (container,) = fdep["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["python", "-m", "mlsandbox.workloads.feature_service"]
    args = container["command"]
    assert args[args.index("--bucket") + 1] == "ep-7" and args[args.index("--port") + 1] == "9123"
    assert container["ports"][0]["containerPort"] == 9123
    assert fsvc["spec"]["ports"][0]["port"] == 9123
    assert fsvc["spec"]["selector"] == fdep["spec"]["selector"]["matchLabels"]
    assert "secret-secret" not in str(fdep)
    validate([fdep, fsvc])
    # Another port for the model server moves the container port, the probe's named port and the Service.
    moved = KS.model_server_service(spec(), namespace="sbx-mlsandbox-s1", sandbox="s1", port=9000)
    assert moved["spec"]["ports"][0] == {
        "name": "http",
        "port": 9000,
        "targetPort": "http",
        "protocol": "TCP",
    }
