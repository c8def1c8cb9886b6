"""Pods on the real node: containers run, logs and exec work, Services and DNS names resolve, the kernel
OOM-kills a container over its memory limit, and NetworkPolicies are enforced (kube-router)."""

from __future__ import annotations

import ipaddress
import time

import pytest
from tests.node.conftest import core, exec_in, pod_manifest, run_pod, wait_pod

from mlsandbox.backends.kube import node
from mlsandbox.k8s_operator.node_testbed import NodeCluster

pytestmark = pytest.mark.timeout(1800)  # the first test builds and imports the images when they changed

SERVE = ["python3", "-m", "http.server", "8080", "--directory", "/etc"]


def test_the_node_is_ready_with_the_pinned_versions(node_cluster: NodeCluster) -> None:
    info = core(node_cluster).read_node(node.NODE_NAME)
    assert info.status.node_info.kubelet_version == "v1.37.2"  # version ldflags, not v0.0.0-master
    assert info.status.node_info.container_runtime_version.startswith("containerd://1.")
    assert info.spec.pod_cidr == node.POD_CIDR
    addresses = {a.type: a.address for a in info.status.addresses}
    assert addresses["InternalIP"] == node_cluster.cp.node_ip
    assert any(c.type == "Ready" and c.status == "True" for c in info.status.conditions)


def test_a_pod_runs_and_its_logs_and_exec_work(node_cluster: NodeCluster, namespace: str) -> None:
    command = ["python3", "-c", "import time; print('hello from a real pod', flush=True); time.sleep(3600)"]
    run_pod(node_cluster, namespace, pod_manifest("hello", command))
    pod = wait_pod(node_cluster, namespace, "hello")
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node.POD_CIDR)

    deadline = time.monotonic() + 30
    log = ""
    while "hello from a real pod" not in log and time.monotonic() < deadline:
        log = core(node_cluster).read_namespaced_pod_log("hello", namespace)
        time.sleep(0.2)
    assert "hello from a real pod" in log

    # The container's own hostname (the pod's name) and its cgroup memory limit (128Mi), from inside it.
    out = exec_in(
        node_cluster,
        namespace,
        "hello",
        ["sh", "-c", "hostname; cat /sys/fs/cgroup/memory/memory.limit_in_bytes"],
    )
    assert out.split() == ["hello", str(128 * 1024 * 1024)]


def test_services_and_dns_names_resolve_between_pods(node_cluster: NodeCluster, namespace: str) -> None:
    api = core(node_cluster)
    run_pod(node_cluster, namespace, pod_manifest("web", SERVE, labels={"app": "web"}, ports=[8080]))
    api.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    wait_pod(node_cluster, namespace, "web")
    # A Service whose selector matches no pod: connections to it fail at once on the node, never leave
    # the machine (where something might answer them).
    api.create_namespaced_service(
        namespace,
        {"metadata": {"name": "nobody"}, "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]}},
    )
    # A client pod fetches the server's /etc/hostname by the Service's short and full DNS names.
    # (kube-proxy programs a new Service within a second or so, longer on a busy machine: until then the
    # connection is refused, or unreachable through the node's rule for untranslated Service addresses.)
    fetch = (
        "import errno, socket, time, urllib.request\n"
        "NOT_YET = (errno.ECONNREFUSED, errno.ENETUNREACH)\n"
        f"for host in ('web', 'web.{namespace}', 'web.{namespace}.svc.cluster.local'):\n"
        "    for attempt in range(120):\n"
        "        try:\n"
        "            body = urllib.request.urlopen(f'http://{host}/hostname', timeout=10).read().decode().strip()\n"
        "            break\n"
        "        except OSError as exc:\n"
        "            reason = getattr(exc, 'reason', exc)\n"
        "            if getattr(reason, 'errno', None) not in NOT_YET or attempt == 119:\n"
        "                raise\n"
        "            time.sleep(0.5)\n"
        "    print(host, socket.gethostbyname(host), body, flush=True)\n"
        "try:\n"
        "    socket.create_connection(('nobody', 80), timeout=10)\n"
        "    print('nobody answers', flush=True)\n"
        "except OSError as exc:\n"
        "    print('nobody fails', type(exc).__name__, flush=True)\n"
    )
    run_pod(node_cluster, namespace, pod_manifest("client", ["python3", "-c", fetch]))
    done = wait_pod(node_cluster, namespace, "client", ready=False, timeout=240)
    log = api.read_namespaced_pod_log("client", namespace)
    assert done.status.phase == "Succeeded", log
    cluster_ip = api.read_namespaced_service("web", namespace).spec.cluster_ip
    *lines, last = [line.split() for line in log.strip().splitlines()]
    assert [line[0] for line in lines] == ["web", f"web.{namespace}", f"web.{namespace}.svc.cluster.local"]
    assert all(line[1:] == [cluster_ip, "web"] for line in lines), log
    assert last[:2] == ["nobody", "fails"] and last[2] != "TimeoutError", log


def test_a_container_over_its_memory_limit_is_oom_killed_by_the_kernel(
    node_cluster: NodeCluster, namespace: str
) -> None:
    hog = ["python3", "-c", "chunks = []\nwhile True: chunks.append(bytearray(16 * 1024 * 1024))"]
    run_pod(node_cluster, namespace, pod_manifest("hog", hog, memory="50Mi"))
    pod = wait_pod(node_cluster, namespace, "hog", ready=False)
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 137
    assert terminated.reason == "OOMKilled"  # what the kubelet reports from the runtime


def _reaches(cluster: NodeCluster, ns: str, pod: str, ip: str) -> bool:
    probe = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('{ip}', 8080), timeout=2).close(); print('open')\n"
        "except OSError as exc:\n"
        "    print('blocked', exc)\n"
    )
    return exec_in(cluster, ns, pod, ["python3", "-c", probe]).startswith("open")


def _eventually(check: object, expected: bool, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        value = bool(check())  # type: ignore[operator]
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_network_policies_are_enforced_between_namespaces(node_cluster: NodeCluster) -> None:
    from kubernetes import client

    api = core(node_cluster)
    net = client.NetworkingV1Api(node_cluster.api_client)
    server_ns, client_ns = f"np-srv-{time.time_ns() % 10**6}", f"np-cli-{time.time_ns() % 10**6}"
    try:
        for ns in (server_ns, client_ns):
            node_cluster.namespace(ns)
            node_cluster.wait(
                "default service account", lambda ns=ns: api.read_namespaced_service_account("default", ns)
            )
        run_pod(node_cluster, server_ns, pod_manifest("server", SERVE, ports=[8080]))
        run_pod(node_cluster, client_ns, pod_manifest("probe", ["sleep", "3600"]))
        ip = wait_pod(node_cluster, server_ns, "server").status.pod_ip
        wait_pod(node_cluster, client_ns, "probe")
        assert _reaches(node_cluster, client_ns, "probe", ip), "no policy yet: the server must be reachable"

        # Ingress to the server's namespace only from namespaces labelled access=granted.
        net.create_namespaced_network_policy(
            server_ns,
            {
                "metadata": {"name": "only-granted"},
                "spec": {
                    "podSelector": {},
                    "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"access": "granted"}}}]}],
                },
            },
        )
        assert not _eventually(lambda: _reaches(node_cluster, client_ns, "probe", ip), False), (
            f"the policy is not enforced\nkube-router:\n{node_cluster.node.log('kube-router', 30)}"
        )
        api.patch_namespace(client_ns, {"metadata": {"labels": {"access": "granted"}}})
        assert _eventually(lambda: _reaches(node_cluster, client_ns, "probe", ip), True), (
            "allowed, yet blocked"
        )
    finally:
        for ns in (server_ns, client_ns):
            api.delete_namespace(ns)
