"""The kube backend's Kubernetes-native faults (no Chaos Mesh) on real pods, and their recovery.

Each fault is injected through the sandbox's fault control and its effect is looked for where a user
would see it: a client pod's requests to a Service (wrong Service port, scale to zero), the kubelet's
verdict on a pod (wrong image: ``ErrImageNeverPull``), the scheduler's (cordoned node) and the API
server's admission (exhausted quota); the chart's Prefect worker killed by scaling it to zero and
restarted. After recovery the same checks pass again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from mlsandbox.backends.kube.faults import native as N
from mlsandbox.backends.kube.node import NODE_NAME
from mlsandbox.backends.protocols import JobSpec

if TYPE_CHECKING:
    from tests.conftest import NodeSandbox

    from mlsandbox.backends.kube.cluster import Cluster

pytestmark = pytest.mark.timeout(900)
T = TypeVar("T")
IMAGE = "mlsandbox/base:bookworm"
SMALL = {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}}
FETCH = (
    "import urllib.request, sys\n"
    "try:\n"
    "    print(urllib.request.urlopen('http://web/', timeout=3).status)\n"
    "except Exception as exc:\n"
    "    print(type(exc).__name__, exc)\n"
)


def eventually(fn: Callable[[], T | None], what: str, timeout: float = 90.0) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f} s: {what} (last: {last!r})")


def containing(text: str, part: str) -> str | None:
    return text if part in text else None


def web(ns: str) -> list[dict[str, Any]]:
    labels = {"app": "web"}
    container = {
        "name": "web",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python3", "-m", "http.server", "8080"],
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        "resources": SMALL,
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client", "namespace": ns},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "client",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                        "resources": SMALL,
                    }
                ],
            },
        },
    ]


def fetch(cluster: Cluster, ns: str) -> str:
    """What a client pod of the namespace gets from ``http://web/``: the status, or the error."""
    from kubernetes.stream import stream

    out = stream(
        cluster.core.connect_get_namespaced_pod_exec,
        "client",
        ns,
        command=["python3", "-c", FETCH],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    return str(out).strip()


def pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in cluster.list("v1", "Pod", ns, selector) if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def waiting_reasons(pod: dict[str, Any]) -> set[str]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return {(s.get("state") or {}).get("waiting", {}).get("reason") for s in statuses} - {None}


def counted_now(cluster: Cluster, ns: str, quota: str) -> bool:
    """Whether the quota's reported pod usage is the number of the namespace's pods that hold quota."""
    used = ((cluster.get("v1", "ResourceQuota", quota, ns) or {}).get("status") or {}).get("used") or {}
    live = [
        p
        for p in cluster.list("v1", "Pod", ns)
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    return "pods" in used and int(used["pods"]) == len(live)


def serving(cluster: Cluster, ns: str) -> str | None:
    answer = fetch(cluster, ns)
    return answer if answer == "200" else None


def failing(cluster: Cluster, ns: str) -> str | None:
    answer = fetch(cluster, ns)
    return answer if answer != "200" else None


def test_native_faults_act_on_real_pods_and_are_recovered(node_sandbox: NodeSandbox) -> None:
    rt = node_sandbox.backend().runtime()
    faults, cluster, ns = rt.faults, rt.cluster, node_sandbox.namespace
    for manifest in web(ns):
        cluster.create(manifest)
    try:
        eventually(lambda: all(ready(p) for p in pods(cluster, ns, "app=web")) or None, "web Ready")
        eventually(lambda: ready(cluster.get("v1", "Pod", "client", ns) or {}) or None, "client Ready")
        assert eventually(lambda: serving(cluster, ns), "web answers through its Service") == "200"

        # Wrong Service port: kube-proxy sends the Service's connections to port 1 of the pod: refused.
        faults.inject(N.WrongServicePort("web", ns))
        refused = eventually(lambda: failing(cluster, ns), "the Service refuses")
        assert "refused" in refused.lower(), refused
        assert faults.recover(N.WrongServicePort("web", ns))
        eventually(lambda: serving(cluster, ns), "the Service answers again")

        # Wrong image: the kubelet cannot start the new pod; the old one keeps serving (rolling update).
        faults.inject(N.WrongImage("web", ns))
        broken = eventually(
            lambda: [p for p in pods(cluster, ns, "app=web") if "ErrImageNeverPull" in waiting_reasons(p)],
            "the kubelet's ErrImageNeverPull",
        )
        assert broken[0]["spec"]["containers"][0]["image"] == N.MISSING_IMAGE
        assert fetch(cluster, ns) == "200"
        assert faults.recover(N.WrongImage("web", ns))

        def rolled_back() -> bool:
            now = pods(cluster, ns, "app=web")
            return bool(now) and all(ready(p) and p["spec"]["containers"][0]["image"] == IMAGE for p in now)

        eventually(rolled_back, "the original image back on every pod")

        # Scale to zero: no pod left behind the Service; back to one replica on recovery.
        faults.inject(N.ScaleToZero("web", ns))
        eventually(lambda: not pods(cluster, ns, "app=web"), "the pods gone")
        eventually(lambda: failing(cluster, ns), "the Service fails without endpoints")
        assert faults.recover(N.ScaleToZero("web", ns))
        eventually(lambda: serving(cluster, ns), "web answers after scaling back")
    finally:
        for kind, api in (("Deployment", "apps/v1"), ("Service", "v1"), ("Pod", "v1")):
            name = "client" if kind == "Pod" else "web"
            cluster.delete(api, kind, name, ns, grace_period_s=0)


def test_a_cordoned_node_and_an_exhausted_quota_hold_jobs_back_until_recovered(
    node_sandbox: NodeSandbox,
) -> None:
    rt = node_sandbox.backend().runtime()
    faults, cluster, ns = rt.faults, rt.cluster, node_sandbox.namespace
    burn = {"workload": "burn", "args": ["--sleep", "1"], "cpus": 0.1, "memory_mb": 128}
    try:
        # Cordoned: the scheduler leaves the job's pod Pending; uncordoned, it runs and succeeds.
        faults.inject(N.CordonNode(NODE_NAME))
        try:
            assert (cluster.get("v1", "Node", NODE_NAME) or {})["spec"]["unschedulable"] is True
            rt.jobs.submit(JobSpec(job_id="cordoned-1", **burn))
            logs = eventually(
                lambda: containing(rt.jobs.logs("cordoned-1"), "unschedulable"),
                "the scheduler's verdict",
            )
            assert "pod not scheduled" in logs, logs
            assert rt.jobs.get("cordoned-1").state == "queued"
        finally:
            faults.recover(N.CordonNode(NODE_NAME))
        eventually(
            lambda: rt.jobs.get("cordoned-1").state == "succeeded", "the job runs once uncordoned", 120
        )

        # Exhausted: the sandbox's quota admits no new pod; restored, the Job controller creates it.
        (quota,) = cluster.list("v1", "ResourceQuota", ns)
        name, hard = quota["metadata"]["name"], quota["spec"]["hard"]
        # The fault sets each hard limit to the quota's reported usage; the quota controller lowers that
        # usage a moment after a pod ends (the cordoned job's just did), so wait until it counts the pods
        # that hold quota now, or a stale count would leave room for one more.
        eventually(lambda: counted_now(cluster, ns, name), "usage counting the live pods", 120)
        faults.inject(N.ExhaustQuota(name, ns))
        try:
            rt.jobs.submit(JobSpec(job_id="over-quota-1", **burn))
            logs = eventually(
                lambda: containing(rt.jobs.logs("over-quota-1"), "exceeded quota"),
                "the quota's refusal",
            )
            assert "FailedCreate" in logs, logs
            assert rt.jobs.pod("over-quota-1") is None
        finally:
            faults.recover(N.ExhaustQuota(name, ns))
        assert (cluster.get("v1", "ResourceQuota", name, ns) or {})["spec"]["hard"] == hard
        eventually(
            lambda: rt.jobs.get("over-quota-1").state == "succeeded", "the job runs once restored", 180
        )
    finally:
        rt.jobs.delete_all()


def test_a_killed_chart_service_is_scaled_to_zero_and_restarted(node_sandbox: NodeSandbox) -> None:
    """``kill_service`` on kube: the Prefect worker's Deployment to zero (its pod goes), then restarted."""
    rt = node_sandbox.backend().runtime()
    services, cluster = rt.faults.services, rt.cluster
    control = node_sandbox.env["MLSANDBOX_CONTROL_NAMESPACE"]
    selector = "app.kubernetes.io/component=prefect-worker"
    assert services.health("prefect-worker").healthy
    services.kill("prefect-worker")
    try:
        eventually(lambda: not pods(cluster, control, selector), "the worker's pod gone", 60)
        health = services.health("prefect-worker")
        assert not health.healthy and "replicas ready" in (health.error or ""), health
    finally:
        restarted = services.restart("prefect-worker", timeout=180)
    assert restarted.healthy, restarted
    assert all(ready(p) for p in pods(cluster, control, selector))


def test_the_node_says_which_queueing_disciplines_its_kernel_has(node_sandbox: NodeSandbox) -> None:
    """The real node labels itself with what a probe of this kernel found (netem for NetworkChaos delay
    and loss, tbf for bandwidth), and the faults that need a discipline it lacks are refused by name
    once Chaos Mesh serves (here without it: what its check reads from the labels)."""
    from mlsandbox.backends.kube.faults.control import QDISCS_NEEDED, without_qdiscs
    from mlsandbox.backends.kube.manifests import QDISC_LABEL_PREFIX
    from mlsandbox.backends.kube.node_host import qdiscs

    cluster = node_sandbox.backend().runtime().cluster
    found = qdiscs()
    assert set(found) == {"netem", "tbf"}, found
    (node,) = cluster.list("v1", "Node")
    labels = node["metadata"]["labels"]
    for name, ok in found.items():
        assert labels[f"{QDISC_LABEL_PREFIX}{name}"] == str(ok).lower(), labels
    refused = without_qdiscs(cluster)
    lacking = {q for q, ok in found.items() if not ok}
    assert set(refused) == {f for f, needed in QDISCS_NEEDED.items() if set(needed) & lacking}, refused
    print(f"this kernel's queueing disciplines: {found}; refused fault types: {sorted(refused)}")
