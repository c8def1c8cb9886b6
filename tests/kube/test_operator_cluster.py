"""The Sandbox operator against a real API server (etcd, kube-apiserver, controllers, scheduler, kwok).

The operator runs as its own process with the chart's ClusterRole only; everything asserted here is
what the API server stored and enforced (RBAC, quota admission, namespace deletion by its controller).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mlsandbox.k8s_operator.testbed import OPERATOR_USER, Testbed

SPEC = {"scenario": "tabular-quality-basic", "seed": 3, "budget": {"cpu": "2", "memory": "4Gi", "maxPods": 5}}


def _names(items: Any) -> set[str]:
    return {i.metadata.name for i in items.items}


def _conditions(sandbox: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in sandbox["status"]["conditions"]}


def _agent_client(bed: Testbed, namespace: str) -> Any:
    """An API client holding a real token of the agent's ServiceAccount (TokenRequest API)."""
    core = client.CoreV1Api(bed.api_client)
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = core.create_namespaced_service_account_token("agent", namespace, request).status.token
    return bed.cp.api_client(token=token)


def test_a_sandbox_gets_its_namespace_quota_rbac_services_and_ready(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-a", "demo", SPEC)
    seconds = bed.wait_phase("team-a", "demo", "Ready")
    print(f"create -> Ready: {seconds:.2f} s")
    sandbox = bed.sandbox("team-a", "demo")
    assert sandbox is not None
    ns = sandbox["status"]["namespace"]
    assert ns == "sbx-team-a-demo"
    assert _conditions(sandbox)["Ready"]["status"] == "True"
    assert sandbox["status"]["episode"] == 0
    assert "mlsandbox.dev/finalizer" in sandbox["metadata"]["finalizers"]

    core = client.CoreV1Api(bed.api_client)
    namespace = core.read_namespace(ns)
    assert namespace.metadata.labels["mlsandbox.dev/sandbox"] == "demo"
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "baseline"
    quota = core.read_namespaced_resource_quota("budget", ns)
    assert quota.spec.hard["limits.cpu"] == "2" and quota.spec.hard["pods"] == "5"
    assert _names(core.list_namespaced_limit_range(ns)) == {"defaults"}
    policies = client.NetworkingV1Api(bed.api_client).list_namespaced_network_policy(ns)
    assert len(policies.items) >= 2
    assert "agent" in _names(core.list_namespaced_service_account(ns))
    rbac = client.RbacAuthorizationV1Api(bed.api_client)
    bindings = {b.metadata.name: b for b in rbac.list_namespaced_role_binding(ns).items}
    assert set(bindings) == {"agent", "prefect-worker"}  # made under the chart's ClusterRole (bind, escalate)
    (worker,) = bindings["prefect-worker"].subjects
    assert (worker.name, worker.namespace) == ("mlsandbox-prefect-worker", "mlsandbox")
    services = {s.metadata.name: s for s in core.list_namespaced_service(ns).items}
    assert set(services) == {"minio", "mlflow", "prefect"}
    assert services["mlflow"].spec.type == "ExternalName"
    assert services["mlflow"].spec.external_name == "mlsandbox-mlflow.mlsandbox.svc.cluster.local"


def test_the_agent_token_reaches_its_namespace_only(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-a", "rbac", SPEC)
    bed.wait_phase("team-a", "rbac", "Ready")
    agent = client.CoreV1Api(_agent_client(bed, "sbx-team-a-rbac"))
    agent.list_namespaced_pod("sbx-team-a-rbac")  # allowed: read in its own namespace
    for forbidden in (
        lambda: agent.list_namespaced_pod("mlsandbox"),
        lambda: agent.list_namespaced_secret("sbx-team-a-rbac"),
        lambda: agent.delete_namespaced_resource_quota("budget", "sbx-team-a-rbac"),
    ):
        with pytest.raises(ApiException) as info:
            forbidden()
        assert info.value.status == 403
    # operate mode: the agent may create Jobs in its namespace.
    batch = client.BatchV1Api(_agent_client(bed, "sbx-team-a-rbac"))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "agent-job"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                }
            }
        },
    }
    batch.create_namespaced_job("sbx-team-a-rbac", job)


def test_the_budget_quota_is_enforced_by_admission(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-b", "quota", {**SPEC, "budget": {"cpu": "1", "memory": "1Gi", "maxPods": 2}})
    bed.wait_phase("team-b", "quota", "Ready")
    core = client.CoreV1Api(bed.api_client)

    def pod(name: str, cpu: str) -> dict[str, Any]:
        limits = {"cpu": cpu, "memory": "128Mi"}
        return {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
        }

    ns = "sbx-team-b-quota"
    with pytest.raises(ApiException) as info:  # the LimitRange: no container above the whole budget
        core.create_namespaced_pod(ns, pod("too-big", "2"))
    assert info.value.status == 403 and "maximum cpu usage per Container is 1" in info.value.body
    core.create_namespaced_pod(ns, pod("one", "200m"))
    core.create_namespaced_pod(ns, pod("two", "200m"))
    with pytest.raises(ApiException) as info:  # the ResourceQuota: maxPods 2
        core.create_namespaced_pod(ns, pod("three", "200m"))
    assert info.value.status == 403 and "exceeded quota: budget" in info.value.body
    # The operator reports the exhausted quota once the quota controller has counted the pods.
    bed.wait_phase("team-b", "quota", "Degraded", timeout=60)


def test_warm_reset_removes_the_episode_and_keeps_the_namespace(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-a", "reset", SPEC)
    bed.wait_phase("team-a", "reset", "Ready")
    ns = "sbx-team-a-reset"
    core = client.CoreV1Api(bed.api_client)
    uid = core.read_namespace(ns).metadata.uid
    batch = client.BatchV1Api(bed.api_client)
    labels = {"mlsandbox.world.episode": "ep-1"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train-1", "labels": labels},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "trainer",
                            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
            }
        },
    }
    batch.create_namespaced_job(ns, job)
    chaos = client.CustomObjectsApi(bed.api_client)
    chaos.create_namespaced_custom_object(
        "chaos-mesh.org",
        "v1alpha1",
        ns,
        "podchaos",
        {
            "apiVersion": "chaos-mesh.org/v1alpha1",
            "kind": "PodChaos",
            "metadata": {"name": "kill-minio", "labels": {"mlsandbox.dev/fault": "kill-minio"}},
            "spec": {"action": "pod-kill", "mode": "all", "selector": {"namespaces": [ns]}},
        },
    )
    bed.wait(
        "the job's pod runs",
        lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items),
    )

    since = time.time()
    bed.patch_spec("team-a", "reset", {"episode": 1})
    seconds = bed.wait_phase("team-a", "reset", "Ready", episode=1)
    print(f"warm reset -> Ready: {seconds:.2f} s")
    bed.wait("the episode's job is gone", lambda: not batch.list_namespaced_job(ns).items)
    assert not chaos.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", ns, "podchaos")["items"]
    assert core.read_namespace(ns).metadata.uid == uid  # the same namespace: a warm reset
    assert core.read_namespaced_resource_quota("budget", ns) is not None
    assert {"minio", "mlflow", "prefect"} <= _names(core.list_namespaced_service(ns))
    calls = bed.cp.audit_events(since=since, user=OPERATOR_USER)
    assert calls, "the operator made no API call for the reset"
    print(f"operator API calls during the reset: {len(calls)}")


def test_deleting_a_sandbox_removes_everything(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-b", "gone", SPEC)
    bed.wait_phase("team-b", "gone", "Ready")
    core = client.CoreV1Api(bed.api_client)
    core.create_namespaced_config_map("sbx-team-b-gone", {"metadata": {"name": "leftover"}})
    bed.delete_sandbox("team-b", "gone")
    seconds = bed.wait("the sandbox is gone", lambda: bed.sandbox("team-b", "gone") is None, timeout=120)
    print(f"delete -> gone: {seconds:.2f} s")
    with pytest.raises(ApiException) as info:
        core.read_namespace("sbx-team-b-gone")
    assert info.value.status == 404
    assert not [
        r
        for r in client.RbacAuthorizationV1Api(bed.api_client).list_role_binding_for_all_namespaces().items
        if r.metadata.namespace == "sbx-team-b-gone"
    ]


def test_an_unknown_scenario_is_recorded_as_failed(control_plane: Testbed) -> None:
    bed = control_plane
    bed.create_sandbox("team-b", "typo", {**SPEC, "scenario": "no-such-scenario"})
    bed.wait_phase("team-b", "typo", "Failed")
    sandbox = bed.sandbox("team-b", "typo")
    assert sandbox is not None
    ready = _conditions(sandbox)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "UnknownScenario"
    with pytest.raises(ApiException):
        client.CoreV1Api(bed.api_client).read_namespace("sbx-team-b-typo")
