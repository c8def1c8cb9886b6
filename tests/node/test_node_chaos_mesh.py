"""Chaos Mesh on the real node, built from its Go module (scripts/build-chaos-mesh.sh) and installed from
its own chart with local images (mlsandbox.k8s_operator.chaos_node): what it does to real pods here, and
what this kernel refuses.

- PodChaos ``pod-kill`` (the controller deletes the pod) and ``container-kill`` (chaos-daemon kills the
  container through containerd's CRI): the workload comes back;
- StressChaos CPU: chaos-daemon starts stress-ng inside the pod (its PID namespace, its cgroup), and stops
  it when the chaos object goes;
- NetworkChaos ``delay``: refused by this kernel (no netem qdisc); the chaos object's records say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from tests.node.conftest import TEST_IMAGE, core, exec_in

from mlsandbox.k8s_operator import chaos_node
from mlsandbox.k8s_operator.node_testbed import NodeCluster, pod_ready

pytestmark = pytest.mark.timeout(1800)  # the first test builds and imports the images when they changed

CHAOS = ("chaos-mesh.org", "v1alpha1")
SLEEP = ["python3", "-c", "import time; time.sleep(36000)"]


@pytest.fixture(scope="module")
def chaos(node_cluster: NodeCluster) -> Iterator[NodeCluster]:
    started = time.monotonic()
    seconds = chaos_node.install(node_cluster, say=print)
    print(f"Chaos Mesh: images and install {time.monotonic() - started:.0f} s (helm --wait {seconds:.0f} s)")
    yield node_cluster
    chaos_node.uninstall(node_cluster)


def wait(what: str, predicate: Callable[[], bool], timeout: float = 120.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"{what}: not after {timeout:.0f} s")


def victim(cluster: NodeCluster, ns: str, name: str) -> Any:
    """A one-replica Deployment of a sleeping container; its Ready pod."""
    labels = {"app": name}
    container = {
        "name": "main",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": SLEEP,
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
    }
    client.AppsV1Api(cluster.api_client).create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
                },
            },
        },
    )
    return running(cluster, ns, name)


def running(cluster: NodeCluster, ns: str, app: str, *, other_than: str = "") -> Any:
    found: list[Any] = []

    def ready() -> bool:
        pods = core(cluster).list_namespaced_pod(ns, label_selector=f"app={app}").items
        found[:] = [
            p
            for p in pods
            if pod_ready(p) and p.metadata.uid != other_than and not p.metadata.deletion_timestamp
        ]
        return bool(found)

    wait(f"a Ready pod of {ns}/{app}", ready)
    return found[0]


def create_chaos(cluster: NodeCluster, ns: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(cluster.api_client).create_namespaced_custom_object(
        *CHAOS,
        ns,
        kind.lower(),
        {"apiVersion": "/".join(CHAOS), "kind": kind, "metadata": {"name": name}, "spec": spec},
    )


def records(cluster: NodeCluster, ns: str, kind: str, name: str) -> list[dict[str, Any]]:
    obj = client.CustomObjectsApi(cluster.api_client).get_namespaced_custom_object(
        *CHAOS, ns, kind.lower(), name
    )
    return list(((obj.get("status") or {}).get("experiment") or {}).get("containerRecords") or [])


def injected(cluster: NodeCluster, ns: str, kind: str, name: str) -> bool:
    recs = records(cluster, ns, kind, name)
    return bool(recs) and all(r.get("injectedCount", 0) >= 1 for r in recs)


def selector(ns: str, app: str) -> dict[str, Any]:
    return {"namespaces": [ns], "labelSelectors": {"app": app}}


def test_pod_kill_deletes_the_pod_and_its_deployment_replaces_it(chaos: NodeCluster, namespace: str) -> None:
    first = victim(chaos, namespace, "killed")
    t = time.monotonic()
    create_chaos(
        chaos,
        namespace,
        "PodChaos",
        "kill",
        {"action": "pod-kill", "mode": "one", "selector": selector(namespace, "killed")},
    )
    wait("the PodChaos injected", lambda: injected(chaos, namespace, "PodChaos", "kill"))
    second = running(chaos, namespace, "killed", other_than=first.metadata.uid)
    print(f"pod-kill -> a new pod Ready: {time.monotonic() - t:.1f} s")
    assert second.metadata.name != first.metadata.name


def test_container_kill_goes_through_chaos_daemon_and_containerd(chaos: NodeCluster, namespace: str) -> None:
    pod = victim(chaos, namespace, "bitten")
    spec = {
        "action": "container-kill",
        "mode": "one",
        "containerNames": ["main"],
        "selector": selector(namespace, "bitten"),
    }
    create_chaos(chaos, namespace, "PodChaos", "bite", spec)

    def restarted() -> bool:
        now = core(chaos).read_namespaced_pod(pod.metadata.name, namespace)
        return any(c.restart_count >= 1 for c in now.status.container_statuses or [])

    seconds = wait("the container killed and restarted by the kubelet", restarted)
    print(f"container-kill -> the container restarted: {seconds:.1f} s")
    assert injected(chaos, namespace, "PodChaos", "bite")


def test_stress_chaos_runs_stress_ng_inside_the_pod(chaos: NodeCluster, namespace: str) -> None:
    pod = victim(chaos, namespace, "busy")
    spec = {
        "mode": "one",
        "selector": selector(namespace, "busy"),
        "stressors": {"cpu": {"workers": 1, "load": 20}},
        "duration": "10m",
    }
    create_chaos(chaos, namespace, "StressChaos", "burn", spec)
    list_comms = [
        "python3",
        "-c",
        "import os; print(*sorted({open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()}))",
    ]

    def comms() -> set[str]:
        return set(exec_in(chaos, namespace, pod.metadata.name, list_comms).split())

    seconds = wait(
        "stress-ng running in the pod's PID namespace",
        lambda: "stress-ng" in comms() or "stress-ng-cpu" in comms(),
    )
    print(f"StressChaos -> stress-ng running in the pod: {seconds:.1f} s")
    assert injected(chaos, namespace, "StressChaos", "burn")
    client.CustomObjectsApi(chaos.api_client).delete_namespaced_custom_object(
        *CHAOS, namespace, "stresschaos", "burn"
    )
    seconds = wait(
        "stress-ng stopped when the StressChaos is deleted",
        lambda: not {"stress-ng", "stress-ng-cpu"} & comms(),
    )
    print(f"StressChaos deleted -> stress-ng gone: {seconds:.1f} s")


def test_network_delay_is_refused_by_this_kernel(chaos: NodeCluster, namespace: str) -> None:
    """This kernel has no netem qdisc: chaos-daemon's tc call fails, the record says tc failed and the
    daemon's log that the kernel does not know the netem qdisc."""
    victim(chaos, namespace, "slow")
    spec = {
        "action": "delay",
        "mode": "one",
        "selector": selector(namespace, "slow"),
        "delay": {"latency": "100ms"},
    }
    create_chaos(chaos, namespace, "NetworkChaos", "lag", spec)

    def failures() -> list[str]:
        return [
            e.get("message", "")
            for r in records(chaos, namespace, "NetworkChaos", "lag")
            for e in r.get("events") or []
            if e.get("type") == "Failed"
        ]

    seconds = wait("the NetworkChaos failing to apply", lambda: bool(failures()))
    assert not injected(chaos, namespace, "NetworkChaos", "lag")
    assert "unable to set tcs" in failures()[-1], failures()[-1]
    # The record says only that tc failed; the daemon's log has tc's own error: the kernel's refusal.
    daemons = (
        core(chaos)
        .list_namespaced_pod(chaos_node.NAMESPACE, label_selector="app.kubernetes.io/component=chaos-daemon")
        .items
    )
    assert daemons, "no chaos-daemon pod"
    logs = "\n".join(
        core(chaos).read_namespaced_pod_log(p.metadata.name, chaos_node.NAMESPACE) for p in daemons
    )
    errors = [
        line.split('"errorVerbose"')[0]
        for line in logs.splitlines()
        if "addNetem" in line and "Specified qdisc kind is unknown" in line
    ]
    print(f"NetworkChaos delay refused after {seconds:.1f} s: {failures()[-1]}")
    print("chaos-daemon:", *errors[-2:], sep="\n  ")
    assert errors, logs[-3000:]
