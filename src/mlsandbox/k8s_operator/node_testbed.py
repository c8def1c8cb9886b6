"""The chart on a real node of this machine: for ``mlsandbox cluster up`` (which brings it up:
:mod:`.local_cluster`), the real-node test tier (the same) and ``bench_kube``.

:class:`NodeCluster` is a control plane (``controlplane.start(kwok=False)``), a node
(:mod:`mlsandbox.backends.kube.node`: containerd, kubelet, kube-proxy, kube-router, CoreDNS) and, once
:meth:`NodeCluster.install_chart` ran, the ``charts/mlsandbox`` release installed by ``helm`` with the
images of :mod:`mlsandbox.backends.kube.node_images`: MinIO, MLflow, the Prefect server and its
Kubernetes worker, and the operator running in-cluster from its image under the chart's ClusterRole.
The Sandbox helpers are :class:`~.testbed.Testbed`'s.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from mlsandbox.backends.kube import controlplane, node, node_images
from mlsandbox.backends.kube.schemas import CHART_DIR, tool
from mlsandbox.errors import BackendError

from .testbed import CONTROL_NAMESPACE, RELEASE, Testbed

CHART_IMAGES = ("minio", "mlflow", "prefect", "gateway", "trainer")
"""The images the chart runs (the trainer's is passed to the operator for training Jobs)."""
EPISODE_IMAGES = ("trainer", "model-server", "postgres")
"""What the kube backend's episodes run besides the chart: training Jobs and flow runs (trainer), model
deployments and the feature service (model server), the PostgreSQL source (postgres; the API source runs
the gateway's image, which the chart's operator runs already)."""
CHART_UID = 10001
"""The user and group the chart's pods run as (``podSecurityContext`` in ``charts/mlsandbox/values.yaml``):
the owner of the node directories they keep data in."""
PERSISTED = ("mlflow",)
"""The chart's services whose data lives in a directory of the node (``persistence.hostPath``), removed
with the node: MLflow's store, so that a tracker restarted by a fault keeps the sandbox's runs and models
(its artifacts are in MinIO)."""
NODE_PORTS = {"minio": 30900, "mlflow": 30500, "prefect": 30420}
"""The chart's NodePorts on the node (``charts/mlsandbox/ci/node-values.yaml``, as on kind)."""


class NodeCluster(Testbed):
    """A control plane, a real node and (after :meth:`install_chart`) the chart. Use
    :func:`.local_cluster.up`."""

    def __init__(self, cp: controlplane.ControlPlane, real_node: node.Node) -> None:
        super().__init__(cp, operator_token="")
        self.node = real_node
        self.chart_installed = False

    def install_chart(self, *extra: str, timeout: float = 900.0, say: Callable[[str], None] = print) -> float:
        """``helm upgrade --install`` of the chart (release ``mlsandbox`` in ``mlsandbox``), waiting for
        every Deployment to be available; the chart's images are built and imported first when their
        inputs changed. Seconds the install took (images excluded)."""
        self.node.import_images(dict.fromkeys([*CHART_IMAGES, *EPISODE_IMAGES]), say)
        started = time.monotonic()
        done = subprocess.run(
            [
                str(tool("helm")),
                "upgrade",
                "--install",
                RELEASE,
                str(CHART_DIR),
                "--kubeconfig",
                str(self.cp.kubeconfig),
                "--namespace",
                CONTROL_NAMESPACE,
                "--create-namespace",
                "-f",
                str(CHART_DIR / "ci" / "node-values.yaml"),
                *node_images.chart_values(CHART_IMAGES),
                # Clients of this machine call MLflow at the node's address (its Host header).
                "--set-json",
                f'mlflow.extraAllowedHosts=["{self.node.ip}:{NODE_PORTS["mlflow"]}"]',
                *self._persistence_values(),
                *extra,
                "--wait",
                "--timeout",
                f"{int(timeout)}s",
            ],
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
        if done.returncode != 0:
            raise BackendError(
                f"helm install failed:\n{done.stdout}\n{done.stderr}\n{self.describe_pods(CONTROL_NAMESPACE)}"
            )
        self.chart_installed = True
        for ns in ("team-a", "team-b"):
            self.namespace(ns)
        return time.monotonic() - started

    def _persistence_values(self) -> list[str]:
        """``--set`` arguments keeping :data:`PERSISTED` services' data in directories of the node's own
        tree (made here, owned by the pods' user)."""
        args = []
        for service in PERSISTED:
            folder = self.node.root / "volumes" / service
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, CHART_UID, CHART_UID)
            folder.chmod(0o700)
            args += [
                "--set",
                f"{service}.persistence.enabled=true",
                "--set",
                f"{service}.persistence.hostPath={folder}",
            ]
        return args

    def client_env(self) -> dict[str, str]:
        """What ``mlsandbox --backend kube`` on this machine needs in its environment to use a sandbox of
        this cluster: the kubeconfig, the chart's namespace, its services at the node's NodePorts and the
        S3 keys of its MinIO Secret (the backend would read them from there too), the images."""
        import base64

        from kubernetes import client

        ip, ports = self.node.ip, NODE_PORTS
        keys = {}
        secrets: list[Any] = (
            client.CoreV1Api(self.api_client)
            .list_namespaced_secret(CONTROL_NAMESPACE, label_selector="app.kubernetes.io/component=minio")
            .items
        )
        for secret in secrets:
            data = secret.data or {}
            if "access-key" in data and "secret-key" in data:
                keys = {
                    "MLSANDBOX_KUBE_S3_ACCESS_KEY": base64.b64decode(data["access-key"]).decode(),
                    "MLSANDBOX_KUBE_S3_SECRET_KEY": base64.b64decode(data["secret-key"]).decode(),
                }
        return {
            **keys,
            "KUBECONFIG": str(self.cp.kubeconfig),
            "MLSANDBOX_CONTROL_NAMESPACE": CONTROL_NAMESPACE,
            "MLSANDBOX_KUBE_S3_URL": f"http://{ip}:{ports['minio']}",
            "MLSANDBOX_KUBE_MLFLOW_URL": f"http://{ip}:{ports['mlflow']}",
            "MLSANDBOX_KUBE_PREFECT_URL": f"http://{ip}:{ports['prefect']}/api",
            "MLSANDBOX_TRAINER_IMAGE": node_images.by_name(["trainer"])[0].ref,
            "MLSANDBOX_MODEL_SERVER_IMAGE": node_images.by_name(["model-server"])[0].ref,
            "MLSANDBOX_KUBE_API_SOURCE_IMAGE": node_images.by_name(["gateway"])[0].ref,
            "MLSANDBOX_KUBE_POSTGRES_IMAGE": node_images.by_name(["postgres"])[0].ref,
        }

    def describe_pods(self, namespace: str) -> str:
        """One line per pod of ``namespace`` (phase, container states) and the last lines of each of its
        containers' logs."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client)
        lines = []
        with contextlib.suppress(Exception):
            pods: list[Any] = core.list_namespaced_pod(namespace).items
            for pod in pods:
                status, name = pod.status, pod.metadata.name
                states = []
                for container in [
                    *(status.init_container_statuses or []),
                    *(status.container_statuses or []),
                ]:
                    state = container.state
                    detail = (
                        f"waiting {state.waiting.reason}" if state.waiting
                        else f"terminated {state.terminated.reason} {state.terminated.exit_code}" if state.terminated
                        else "running"
                    )  # fmt: skip
                    states.append(
                        f"{container.name}: {detail}, ready={container.ready}, restarts={container.restart_count}"
                    )
                lines.append(f"{name} {status.phase}: {'; '.join(states)}")
                for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
                    with contextlib.suppress(Exception):
                        log = core.read_namespaced_pod_log(
                            name, namespace, container=container.name, tail_lines=15
                        )
                        lines += [f"    [{container.name}] {line}" for line in log.splitlines()]
        return "\n".join(lines)

    def start_operator(self) -> None:
        """The operator runs in-cluster (the chart's Deployment): nothing to start here."""

    def log_tail(self, lines: int = 40) -> str:
        """The operator pod's log."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client)
        with contextlib.suppress(Exception):
            pods: list[Any] = core.list_namespaced_pod(
                CONTROL_NAMESPACE, label_selector="app.kubernetes.io/component=operator"
            ).items
            if pods:
                return str(
                    core.read_namespaced_pod_log(pods[0].metadata.name, CONTROL_NAMESPACE, tail_lines=lines)
                )
        return ""

    def stop(self) -> list[str]:  # type: ignore[override]
        """Stop the node, then the control plane; what the node's teardown removed."""
        try:
            return self.node.stop()
        finally:
            self.cp.stop()


def pod_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
