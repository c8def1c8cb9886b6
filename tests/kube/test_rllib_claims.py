"""A rollout worker claims a Sandbox of its own from the operator, with exactly the permissions of
``examples/kuberay/rbac.yaml`` (applied to the real API server, used through the ServiceAccount's token):
create -> Ready, the kube backend on it (a training Job in the sandbox's namespace), a restarted runner
taking its Sandbox back, another run refused, and release -> the operator removes the namespace."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mlsandbox.backends.kube.backend import sandbox_namespace
from mlsandbox.backends.kube.runtime import KubeRuntime
from mlsandbox.backends.protocols import Endpoints, JobSpec
from mlsandbox.errors import BackendError, NotRunningError
from mlsandbox.integrations.kube_claims import SandboxClaim, claim_name
from mlsandbox.k8s_operator.testbed import Testbed

RBAC = Path(__file__).resolve().parents[2] / "examples" / "kuberay" / "rbac.yaml"
POOL = RBAC.with_name("pool.yaml")
G, V = "mlsandbox.dev", "v1alpha1"
ENDPOINTS = Endpoints(
    s3_url="http://mls-mlsandbox-minio.mlsandbox.svc:9000",
    s3_access_key="access",
    s3_secret_key="secret",
    mlflow_url="http://mls-mlsandbox-mlflow.mlsandbox.svc:5000",
    prefect_api_url="http://mls-mlsandbox-prefect-server.mlsandbox.svc:4200/api",
)


def _rbac_in(control: str, suffix: str) -> list[dict[str, Any]]:
    """rbac.yaml for the control namespace ``control`` (cluster-wide names made unique)."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for d in docs:
        meta = d["metadata"]
        if "namespace" in meta:
            meta["namespace"] = control
        if d["kind"].startswith("Cluster"):
            meta["name"] += f"-{suffix}"
        if "roleRef" in d and d["roleRef"]["kind"] == "ClusterRole":
            d["roleRef"]["name"] += f"-{suffix}"
        for s in d.get("subjects", []):
            s["namespace"] = control
    return docs


def _runner_api(bed: Testbed, prefix: str) -> tuple[str, Any]:
    """A control namespace with rbac.yaml applied in it, and an API client with its ServiceAccount's token."""
    suffix = secrets.token_hex(3)
    control = f"{prefix}{suffix}"
    bed.namespace(control)
    for doc in _rbac_in(control, suffix):
        bed.api.apply(doc)
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = (
        client.CoreV1Api(bed.api_client)
        .create_namespaced_service_account_token("mlsandbox-rllib", control, request)
        .status.token
    )
    return control, bed.cp.api_client(token=token)


def test_a_runner_claims_its_own_sandbox_with_the_kuberay_permissions(control_plane: Testbed) -> None:
    bed = control_plane
    control, runner_api = _runner_api(bed, "ctl-rl")

    name = claim_name("ppo", 1)
    claim = SandboxClaim(
        name,
        scenario="tabular-quality-basic",
        control_namespace=control,
        owner="run-a",
        api_client=runner_api,
    )
    t0 = time.monotonic()
    assert claim.acquire(timeout=60) == name
    print(f"claim -> Ready: {time.monotonic() - t0:.2f} s")
    namespace = sandbox_namespace(control, name)
    core = client.CoreV1Api(bed.api_client)
    assert core.read_namespace(namespace).metadata.labels["mlsandbox.dev/sandbox"] == name
    sandbox = bed.sandbox(control, name)
    assert sandbox is not None and sandbox["metadata"]["labels"]["mlsandbox.dev/claimed-by"] == "run-a"

    # The kube backend on the claimed sandbox, as the runner: a training Job in the sandbox's namespace.
    backend = claim.backend()
    backend.up()
    rt = KubeRuntime(
        backend.cluster,
        sandbox=name,
        namespace=backend.namespace,
        control_namespace=control,
        endpoints=ENDPOINTS,
        workload_endpoints=ENDPOINTS,
        image="mlsandbox/trainer:0.1.0",
    )
    status = rt.jobs.submit(
        JobSpec(job_id="job-1", workload="trainer", args=["--help"], cpus=0.5, memory_mb=256)
    )
    assert status.state in ("queued", "pending", "running") and rt.jobs.get("job-1").job_id == "job-1"
    jobs = client.BatchV1Api(bed.api_client).list_namespaced_job(namespace).items
    assert [j.metadata.labels["mlsandbox.dev/sandbox"] for j in jobs] == [
        name
    ]  # made by the runner's account
    assert rt.jobs.delete_all() == 1

    # The runner's account reaches Sandboxes in its control namespace only.
    other = client.CustomObjectsApi(runner_api)
    with pytest.raises(ApiException) as denied:
        other.create_namespaced_custom_object(
            "mlsandbox.dev", "v1alpha1", "default", "sandboxes",
            {"apiVersion": "mlsandbox.dev/v1alpha1", "kind": "Sandbox", "metadata": {"name": "x"},
             "spec": {"scenario": "tabular-quality-basic"}},
        )  # fmt: skip
    assert denied.value.status == 403

    # Another run cannot take the Sandbox; the same run (a runner restarted on another pod) takes it back.
    with pytest.raises(BackendError, match="not this worker's"):
        SandboxClaim(
            name, scenario="x", control_namespace=control, owner="run-b", api_client=runner_api
        ).acquire(5)
    again = SandboxClaim(name, scenario="x", control_namespace=control, owner="run-a", api_client=runner_api)
    assert again.acquire(timeout=30) == name

    # Release: the Sandbox goes, and with it (the operator's finalizer) its namespace.
    again.release()
    claim.release()
    claim.release()  # idempotent

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except ApiException as e:
            return e.status == 404
        return False

    seconds = bed.wait(f"namespace {namespace} deleted", gone, timeout=120)
    bed.wait(f"Sandbox {name} deleted (finalizer released)", lambda: bed.sandbox(control, name) is None)
    print(f"release -> namespace gone: {seconds:.2f} s")


def test_a_claim_the_operator_fails_for_good_says_why_at_once_and_leaves_nothing(
    control_plane: Testbed,
) -> None:
    """A Sandbox of a scenario the operator does not know is Failed for good: the claim says so in
    seconds (not after its timeout) and deletes what it made."""
    bed = control_plane
    control, runner_api = _runner_api(bed, "ctl-rlbad")
    name = claim_name("bad", 1)
    claim = SandboxClaim(
        name, scenario="no-such-scenario", control_namespace=control, owner="run-a", api_client=runner_api
    )
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="UnknownScenario: unknown scenario 'no-such-scenario'"):
        claim.acquire(timeout=300)  # a NotRunningError after 300 s would be the wrong path
    seconds = time.monotonic() - t0
    print(f"claim of an unknown scenario refused in {seconds:.1f} s")
    assert not claim.acquired
    bed.wait(f"Sandbox {name} deleted", lambda: bed.sandbox(control, name) is None)


def test_a_runner_claims_a_ready_sandbox_from_the_warm_pool(control_plane: Testbed) -> None:
    bed = control_plane
    control, runner_api = _runner_api(bed, "ctl-rp")
    custom = client.CustomObjectsApi(bed.api_client)
    pool = yaml.safe_load(POOL.read_text())
    pool["metadata"]["namespace"] = control
    pool["spec"]["size"] = 1
    pool["spec"]["template"]["budget"] = {"cpu": "1", "memory": "1Gi", "maxPods": 5}
    custom.create_namespaced_custom_object(G, V, control, "sandboxpools", pool)

    def pool_status() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(G, V, control, "sandboxpools", "ppo").get("status") or {}

    bed.wait("pool ppo full", lambda: pool_status().get("readyReplicas") == 1, timeout=120)
    try:
        claim = SandboxClaim(
            claim_name("ppo", 1),
            scenario="ignored: the pool's template",
            pool="ppo",
            control_namespace=control,
            owner="run-a",
            api_client=runner_api,
        )
        t0 = time.monotonic()
        member = claim.acquire(timeout=60)
        print(f"pool claim -> Bound and Ready: {time.monotonic() - t0:.2f} s")
        # Bound to the pool's Ready member, made by the runner's account as a SandboxClaim.
        assert member == claim.sandbox and member.startswith("ppo-") and member != claim.name
        found = bed.sandbox(control, member)
        assert found is not None
        labels = found["metadata"]["labels"]
        assert labels["mlsandbox.dev/pool-state"] == "claimed"
        assert labels["mlsandbox.dev/claim"] == claim.name
        made = custom.get_namespaced_custom_object(G, V, control, "sandboxclaims", claim.name)
        assert made["metadata"]["labels"]["mlsandbox.dev/claimed-by"] == "run-a"
        backend = claim.backend()
        backend.up()
        assert backend.namespace == sandbox_namespace(control, member)

        # Another run cannot take the claim; the same run (a restarted runner) gets the same Sandbox.
        with pytest.raises(BackendError, match=r"SandboxClaim .* is not this worker's"):
            SandboxClaim(
                claim.name, scenario="x", pool="ppo", control_namespace=control, owner="run-b",
                api_client=runner_api,
            ).acquire(5)  # fmt: skip
        again = SandboxClaim(
            claim.name,
            scenario="x",
            pool="ppo",
            control_namespace=control,
            owner="run-a",
            api_client=runner_api,
        )
        assert again.acquire(timeout=30) == member

        # A pool that does not exist: the claim stays Pending, and the runner gives up saying why.
        lost = SandboxClaim(
            claim_name("ppo", 2), scenario="x", pool="nope", control_namespace=control, owner="run-a",
            api_client=runner_api,
        )  # fmt: skip
        with pytest.raises(NotRunningError, match=r"Pending.*no SandboxPool nope"):
            lost.acquire(timeout=8)
        lost.release()

        # Release: the claim goes and the Sandbox leaves the runner: back to the pool after a warm reset,
        # or deleted since the pool already made a replacement behind the claim (its size is 1 here).
        claim.release()

        def released() -> bool:
            gone = not custom.list_namespaced_custom_object(G, V, control, "sandboxclaims")["items"]
            left = bed.sandbox(control, member)
            state = ((left or {}).get("metadata") or {}).get("labels", {}).get("mlsandbox.dev/pool-state")
            return gone and (left is None or state == "available")

        bed.wait(f"claim {claim.name} released, Sandbox {member} no longer claimed", released, timeout=120)
        status = pool_status()
        assert status.get("readyReplicas") == 1 and not status.get("claimed"), status
    finally:
        custom.delete_namespaced_custom_object(G, V, control, "sandboxpools", "ppo")
