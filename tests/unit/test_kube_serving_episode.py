"""The kube backend's episode serving (``KubeServing.open``) against an in-memory API server: the edge
this unit test fakes is the cluster (objects stored as dicts, a ReplicaSet that makes one pod per replica
of the current template and marks it ready unless its version is set to crash). The cluster tier runs the
same code against a real API server."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from tests.helpers import ENDPOINTS

from mlsandbox.backends.kube import serving as KS
from mlsandbox.backends.kube.deployments import KubeEpisodeServing, KubeServing
from mlsandbox.backends.kube.manifests import SANDBOX_LABEL
from mlsandbox.backends.protocols import EnvironmentInfo
from mlsandbox.backends.protocols.serving import (
    DeploymentSpec,
    DeploymentView,
    Machine,
    ServingEnvironment,
    ServingError,
)
from mlsandbox.errors import Unsupported

EPISODE = {"mlsandbox.world.episode": "ep-1"}
MACHINE = Machine(name="cpu-small", cpus=1.0, memory_mb=2048, credits_per_second=0.05)


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in (selector or "").split(","):
        if term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
    return True


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class MemoryCluster:
    """Deployments, Services and Secrets as dicts; pods derived from each Deployment's template."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.crash: set[str] = set()
        """Model versions whose containers exit with status 3 (a model that does not load)."""
        self.pods_of: dict[str, list[dict[str, Any]]] = {}
        self._ids = itertools.count()

    # The ReplicaSet: one pod per replica of the current template (new pods when the template changes).
    def _reconcile(self, name: str) -> None:
        dep = self.objects.get(("Deployment", name))
        if dep is None:
            self.pods_of.pop(name, None)
            return
        template = dep["spec"]["template"]
        version = template["metadata"]["labels"].get(KS.VERSION_LABEL)
        pods = [
            p for p in self.pods_of.get(name, []) if p["metadata"]["labels"].get(KS.VERSION_LABEL) == version
        ]
        want = dep["spec"]["replicas"]
        while len(pods) < want:
            pods.append(self._pod(name, template, version))
        pods = pods[:want]
        self.pods_of[name] = pods
        ready = sum(1 for p in pods if KS.running(p))
        dep["metadata"]["generation"] = dep["metadata"].get("generation", 0) + 1
        dep["status"] = {
            "observedGeneration": dep["metadata"]["generation"],
            "replicas": len(pods),
            "updatedReplicas": len(pods),
            "readyReplicas": ready,
        }

    def _pod(self, name: str, template: dict[str, Any], version: str | None) -> dict[str, Any]:
        meta = {
            "name": f"{name}-{version}-{next(self._ids)}",
            "labels": dict(template["metadata"]["labels"]),
            "creationTimestamp": f"2026-01-01T00:00:{next(self._ids):02d}Z",
        }
        if version in self.crash:
            status = {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "model-server",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}},
                    }
                ],
            }
        else:
            status = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "model-server", "state": {"running": {}}}],
            }
        return {"metadata": meta, "status": status}

    # The Cluster methods the serving uses.
    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[Any]:
        if kind == "Pod":
            pods = [p for ps in self.pods_of.values() for p in ps]
            return [copy.deepcopy(p) for p in pods if _matches(p, selector)]
        return [copy.deepcopy(o) for (k, _), o in self.objects.items() if k == kind and _matches(o, selector)]

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in self.objects:
            from mlsandbox.backends.kube.cluster import ApiRefused

            raise ApiRefused(409, "exists")
        self.objects[key] = copy.deepcopy(manifest)
        if manifest["kind"] == "Deployment":
            self._reconcile(key[1])
        return manifest

    def apply(self, manifest: dict[str, Any]) -> None:
        key = (manifest["kind"], manifest["metadata"]["name"])
        self.objects[key] = copy.deepcopy(manifest)
        if manifest["kind"] == "Deployment":
            self._reconcile(key[1])

    def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, body: dict[str, Any], **_: Any
    ) -> Any:
        obj = self.objects.get((kind, name))
        if obj is None:
            return None
        _merge(obj, body)
        if kind == "Deployment":
            self._reconcile(name)
        return copy.deepcopy(obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, **_: Any) -> bool:
        if kind == "Pod":
            for pods in self.pods_of.values():
                pods[:] = [p for p in pods if p["metadata"]["name"] != name]
            return True
        found = self.objects.pop((kind, name), None) is not None
        if kind == "Deployment":
            self._reconcile(name)
        return found

    def pod_log(
        self, name: str, namespace: str, *, tail: int | None = None, container: str | None = None
    ) -> str:
        return "cannot load the model: InconsistentVersionWarning\n" if "-" in name else ""


def serving(cluster: MemoryCluster, sandbox: str = "s1", **options: Any) -> KubeServing:
    return KubeServing(
        cluster,  # type: ignore[arg-type]
        namespace="sbx-s1",
        sandbox=sandbox,
        image="mlsandbox/model-server:0.1.0",
        endpoints=ENDPOINTS,
        **options,
    )


def spec(version: str = "1", replicas: int = 2, **overrides: Any) -> DeploymentSpec:
    values: dict[str, Any] = {
        "deployment": "churn",
        "model": "churn",
        "registry_name": "ep-1.churn",
        "version": version,
        "replicas": replicas,
        "machine": MACHINE,
    }
    return DeploymentSpec(**{**values, **overrides})


@pytest.fixture()
def cluster() -> MemoryCluster:
    return MemoryCluster()


@pytest.fixture()
def episode(cluster: MemoryCluster) -> KubeEpisodeServing:
    return serving(cluster, rollout_timeout_s=5.0).open("ep-1", EPISODE)


def test_deploy_scale_rollback_and_the_view(cluster: MemoryCluster, episode: KubeEpisodeServing) -> None:
    view, created = episode.deploy(spec())
    assert created and type(view) is DeploymentView
    assert view.rollout == "complete" and view.replicas == view.replicas_up == 2
    assert view.version_history == ["1"] and {r.version for r in view.replica_states} == {"1"}
    dep = cluster.objects[("Deployment", "churn")]
    assert dep["metadata"]["labels"]["mlsandbox.world.episode"] == "ep-1"
    assert dep["metadata"]["labels"][SANDBOX_LABEL] == "s1"
    assert ("Service", "churn") in cluster.objects and ("Secret", "mlsandbox-s3") in cluster.objects
    assert episode.credits_per_second() == pytest.approx(0.1)

    view, created = episode.deploy(spec(version="2"))
    assert not created and view.version == "2" and view.version_history == ["1", "2"]
    assert episode.scale("churn", 3).replicas_up == 3
    assert episode.credits_per_second() == pytest.approx(0.15)
    with pytest.raises(ServingError, match="never served version 7") as refused:
        episode.set_version("churn", "7")
    assert refused.value.code == "conflict"
    with pytest.raises(ServingError, match="already serves version 2"):
        episode.set_version("churn", "2")
    back = episode.set_version("churn", "1")
    assert back.version == "1" and back.version_history == ["1", "2", "1"] and back.replicas == 3
    with pytest.raises(ServingError) as refused:
        episode.scale("churn", -1)
    assert refused.value.code == "invalid_parameters"
    with pytest.raises(ServingError, match=r"'ghost' does not exist \(deployments: churn\)") as refused:
        episode.get("ghost")
    assert refused.value.code == "not_found"
    with pytest.raises(ServingError, match="serves model 'churn', not 'other'"):
        episode.deploy(spec(model="other", registry_name="ep-1.other"))
    assert [v.deployment for v in episode.list()] == ["churn"]
    assert set(episode._refresh()) == {"churn"}
    assert [r.ready for r in episode.replicas()["churn"]] == [True, True, True]


def test_a_version_that_does_not_start_is_undone_and_the_old_one_keeps_serving(
    cluster: MemoryCluster, episode: KubeEpisodeServing
) -> None:
    episode.deploy(spec())
    cluster.crash.add("2")
    with pytest.raises(ServingError) as failed:
        episode.deploy(spec(version="2"))
    assert failed.value.code == "deploy_failed"
    assert "2 did not start" in failed.value.message and "exit code 3" in failed.value.message
    assert "cannot load the model" in failed.value.message  # the new replica's log tail
    view = episode.get("churn")
    assert view.version == "1" and view.version_history == ["1"] and view.replicas_up == 2
    assert {r.version for r in view.replica_states} == {"1"}

    # A new deployment whose replicas do not start is removed.
    cluster.crash.add("5")
    with pytest.raises(ServingError) as failed:
        episode.deploy(spec(version="5", deployment="side"))
    assert failed.value.code == "deploy_failed"
    assert ("Deployment", "side") not in cluster.objects and ("Service", "side") not in cluster.objects
    assert [v.deployment for v in episode.list()] == ["churn"]

    # Scaling up with replicas that do not start gives the deployment its replicas back.
    cluster.crash.add("1")
    with pytest.raises(ServingError) as failed:
        episode.scale("churn", 4)
    assert failed.value.code == "deploy_failed"
    assert cluster.objects[("Deployment", "churn")]["spec"]["replicas"] == 2


def test_episodes_of_one_sandbox_do_not_touch_each_others_deployments(cluster: MemoryCluster) -> None:
    mine = serving(cluster).open("ep-1", EPISODE)
    other = serving(cluster).open("ep-2", {"mlsandbox.world.episode": "ep-2"})
    mine.deploy(spec())
    assert other.list() == [] and other.credits_per_second() == 0.0
    with pytest.raises(ServingError, match="belongs to another episode") as refused:
        other.deploy(spec(version="2"))
    assert refused.value.code == "conflict"
    assert mine.get("churn").version == "1"
    other.close()
    assert ("Deployment", "churn") in cluster.objects  # closing another episode leaves mine
    mine.close()
    mine.close()  # idempotent
    assert not [k for k in cluster.objects if k[0] in ("Deployment", "Service")]


def test_named_environments_are_refused_before_anything_is_made(
    cluster: MemoryCluster, episode: KubeEpisodeServing
) -> None:
    env = ServingEnvironment(
        name="sk15", env=EnvironmentInfo(key="0123456789abcdef", requirements=[], packages={})
    )
    with pytest.raises(Unsupported) as refused:
        episode.deploy(spec(environment=env))
    assert refused.value.capability == "serving.environment" and refused.value.backend == "kube"
    assert not [k for k in cluster.objects if k[0] == "Deployment"]


def test_the_feature_service_is_started_once_and_replicas_get_its_address(
    cluster: MemoryCluster, episode: KubeEpisodeServing
) -> None:
    # The feature service's Deployment has no model version: the fake's ReplicaSet makes its pod ready.
    episode.start_feature_service("ep-1", "online/features.parquet", "entity_id")
    episode.start_feature_service("ep-1", "online/features.parquet", "entity_id")
    fs = cluster.objects[("Deployment", KS.FEATURE_SERVICE_NAME)]
    assert fs["metadata"]["labels"]["mlsandbox.world.episode"] == "ep-1"
    episode.deploy(spec())
    command = cluster.objects[("Deployment", "churn")]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--feature-url") + 1] == "http://feature-service.sbx-s1.svc:8081"
    assert [r.ready for r in episode._refresh()["feature-service"]] == [True]
    episode.close()
    assert not [k for k in cluster.objects if k[0] in ("Deployment", "Service")]


def test_the_api_servers_own_refusals_are_told_from_the_servers_answers() -> None:
    import httpx

    from mlsandbox.backends.kube.deployments import _api_refusal

    status = {"kind": "Status", "message": 'no endpoints available for service "churn"'}
    assert _api_refusal(httpx.Response(503, json=status)) == 'no endpoints available for service "churn"'
    assert _api_refusal(httpx.Response(403, json={**status, "message": "forbidden"})) == "forbidden"
    assert _api_refusal(httpx.Response(503, json={"detail": "model down"})) is None  # the server's own
    assert _api_refusal(httpx.Response(422, json={"kind": "Status"})) is None
    assert _api_refusal(httpx.Response(502, text="bad gateway")) is None
