"""The real-node tier: one control plane and one real node on this machine, shared by every test.

``node_cluster`` (session, in tests/conftest.py so that tests/conformance shares it) is a
:class:`~mlsandbox.k8s_operator.node_testbed.NodeCluster` brought up by what ``mlsandbox cluster up``
runs (:func:`mlsandbox.k8s_operator.local_cluster.up`, the built-in real node, owned by the session): the
control plane, the node (containerd, kubelet, kube-proxy, kube-router, CoreDNS), the chart (MinIO,
MLflow, Prefect server and worker, the operator) and the episodes' images; ``kube_node_cluster`` is the
same cluster;
``node_sandbox`` a Ready Sandbox there with the environment a client needs — what a test of the kube
backend on real pods asks for. Images come from :mod:`mlsandbox.backends.kube.node_images` (built when
their inputs change, cached after).

Needs root (without it every test here is skipped, saying so), ``scripts/install-kube-tools.sh
--with-node`` (``scripts/run-tests.sh`` runs it as root) and a docker engine the first time the images are
built (``scripts/docker-engine.sh``); without those the fixture fails with that instruction.

Every test here is marked ``node`` (and ``services``: ``make test-fast`` leaves them out). Order, after
every other test of the session: the pods' tests (cheapest), the chart's, the kube backend's on real
pods, then the lifecycle tests (``test_node_lifecycle.py``), last: the first of them stops the shared
node and checks that nothing is left, against the node's ``baseline``: the machine's state (iptables
chains, ipsets, links, mounts, kernel settings) that the node took under the machine's node lock before
it changed anything.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlsandbox.k8s_operator.node_testbed import NodeCluster, pod_ready

HERE = Path(__file__).resolve().parent
LAST = "test_node_lifecycle.py"
TEST_IMAGE = "mlsandbox/base:bookworm"

# Chaos Mesh's test needs its binaries built from its Go module (scripts/build-chaos-mesh.sh: about 40
# minutes cold), which the default run does not build: it is collected only when asked for, with
# MLSANDBOX_CHAOS_MESH=1 (`make node-chaos-test`), never skipped silently.
collect_ignore = [] if os.environ.get("MLSANDBOX_CHAOS_MESH") == "1" else ["test_node_chaos_mesh.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == HERE:
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.services)

    # After every other test of the session, so that the node runs for this tier alone: the pods' tests
    # first (cheapest), then the chart's, then the backend's on real pods, then the lifecycle tests, which
    # stop the shared node.
    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath))
        if path.parent != HERE:
            return 0
        return {"test_node_pods.py": 1, "test_node_chart.py": 2, LAST: 4}.get(path.name, 3)

    items.sort(key=rank)


@pytest.fixture()
def namespace(node_cluster: NodeCluster) -> Iterator[str]:
    """A namespace of this test, deleted after it (its pods are stopped by the kubelet)."""
    name = f"t-{secrets.token_hex(3)}"
    node_cluster.namespace(name)
    # The service account controller makes `default` shortly after the namespace.
    node_cluster.wait(
        "default service account",
        lambda: core(node_cluster).read_namespaced_service_account("default", name) is not None,
    )
    yield name
    with contextlib.suppress(Exception):
        core(node_cluster).delete_namespace(name)


# ------------------------------------------------------------------------------------------- helpers


def core(cluster: NodeCluster) -> Any:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client)


def pod_manifest(
    name: str,
    command: list[str],
    *,
    labels: dict[str, str] | None = None,
    memory: str = "128Mi",
    image: str = TEST_IMAGE,
    ports: list[int] = (),  # type: ignore[assignment]
    restart: str = "Never",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "ports": [{"containerPort": p} for p in ports],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": memory},
                        "limits": {"cpu": "500m", "memory": memory},
                    },
                }
            ],
        },
    }


def run_pod(cluster: NodeCluster, ns: str, manifest: dict[str, Any]) -> None:
    core(cluster).create_namespaced_pod(ns, manifest)


def wait_pod(cluster: NodeCluster, ns: str, name: str, *, ready: bool = True, timeout: float = 120) -> Any:
    """The pod once Ready (or, with ``ready=False``, once it ended); a failure says what the pod did."""
    api = core(cluster)
    deadline = time.monotonic() + timeout
    pod = None
    while time.monotonic() < deadline:
        pod = api.read_namespaced_pod(name, ns)
        if ready and pod_ready(pod):
            return pod
        if pod.status.phase in ("Succeeded", "Failed"):
            if not ready:
                return pod
            break
        time.sleep(0.2)
    raise AssertionError(
        f"pod {ns}/{name} not {'Ready' if ready else 'finished'}: {pod.status if pod else None}\n"
        f"{cluster.describe_pods(ns)}\nkubelet:\n{cluster.node.log('kubelet', 20)}"
    )


def exec_in(cluster: NodeCluster, ns: str, pod: str, command: list[str]) -> str:
    """``kubectl exec``: through the API server to the kubelet's streaming server."""
    from kubernetes.stream import stream

    return str(
        stream(
            core(cluster).connect_get_namespaced_pod_exec,
            pod,
            ns,
            command=command,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
    )
