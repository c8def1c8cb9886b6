"""The operator on a real API server, as the chart deploys it: for the kube tests and ``bench_kube``.

:class:`Testbed` starts a local control plane (:mod:`mlsandbox.backends.kube.controlplane`), installs
the Sandbox CRD from the chart and Chaos Mesh's kinds, grants the operator the chart's own ClusterRole
(rendered by ``helm template``: a rule the chart forgets fails here as it would in a cluster), and runs
the operator as its own process (``python -m kopf run --standalone``) under that identity.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from mlsandbox.backends.kube import controlplane
from mlsandbox.backends.kube.client import KubernetesApi
from mlsandbox.backends.kube.schemas import CHART_DIR, tool
from mlsandbox.errors import BackendError

from .model import GROUP, PLURAL, VERSION

OPERATOR_USER = "mlsandbox-operator"
RELEASE = "mlsandbox"
CONTROL_NAMESPACE = "mlsandbox"


def chart_documents(*extra: str) -> list[dict[str, Any]]:
    """``helm template`` of the chart (release ``mlsandbox`` in ``mlsandbox``, CRDs included)."""
    out = subprocess.run(
        [
            str(tool("helm")),
            "template",
            RELEASE,
            str(CHART_DIR),
            "-n",
            CONTROL_NAMESPACE,
            "--include-crds",
            *extra,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


class Testbed:
    """A control plane with the CRDs and the operator running. Use :func:`testbed`."""

    __test__ = False  # not a pytest test class

    def __init__(self, cp: controlplane.ControlPlane, operator_token: str) -> None:
        self.cp = cp
        self.operator_token = operator_token
        self.api_client = cp.api_client()
        self.api = KubernetesApi(self.api_client)
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_log = cp.root / "operator.log"

    # ------------------------------------------------------------------------------------------ setup

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    def install(self) -> None:
        docs = chart_documents()
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        chaos = controlplane.chaos_mesh_crds()
        for crd in [*crds, *chaos]:
            self.api.apply(crd)
        controlplane.wait_established(self.api_client, [c["metadata"]["name"] for c in [*crds, *chaos]])
        (role,) = [
            d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == f"{RELEASE}-operator"
        ]
        self.api.apply(role)
        self.api.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{RELEASE}-operator-testbed"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role["metadata"]["name"],
                },
                "subjects": [
                    {"kind": "User", "name": OPERATOR_USER, "apiGroup": "rbac.authorization.k8s.io"}
                ],
            }
        )
        for ns in (CONTROL_NAMESPACE, "team-a", "team-b"):
            self.namespace(ns)

    def namespace(self, name: str) -> str:
        self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def start_operator(self) -> None:
        kubeconfig = self.cp.root / "operator.kubeconfig"
        config = yaml.safe_load(self.cp.kubeconfig.read_text())
        config["users"][0]["user"]["token"] = self.operator_token
        kubeconfig.write_text(yaml.safe_dump(config))
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "MLSANDBOX_CONTROL_NAMESPACE": CONTROL_NAMESPACE,
            "MLSANDBOX_RELEASE": RELEASE,
            "MLSANDBOX_OPERATOR_HEALTH_INTERVAL_S": os.environ.get(
                "MLSANDBOX_OPERATOR_HEALTH_INTERVAL_S", "3"
            ),
            controlplane.MARKER_ENV: str(self.cp.root),
        }
        with open(self.operator_log, "wb") as log:
            self.operator = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "--standalone",
                    "--all-namespaces",
                    "-m",
                    "mlsandbox.k8s_operator.handlers",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop_operator(self) -> None:
        """Stop the operator and leave the control plane running (idempotent)."""
        if self.operator is not None and self.operator.poll() is None:
            self.operator.terminate()
            try:
                self.operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.operator.kill()
                self.operator.wait(timeout=10)

    def stop(self) -> None:
        self.stop_operator()
        self.cp.stop()

    def log_tail(self, lines: int = 40) -> str:
        if not self.operator_log.exists():
            return ""
        return "\n".join(self.operator_log.read_text(errors="replace").splitlines()[-lines:])

    # --------------------------------------------------------------------------------------- sandboxes

    def create_sandbox(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        self.api.apply(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Sandbox",
                "metadata": {"name": name, "namespace": namespace},
                "spec": dict(spec),
            }
        )

    def sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.get(f"{GROUP}/{VERSION}", "Sandbox", name, namespace)

    def patch_spec(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        from kubernetes import client

        client.CustomObjectsApi(self.api_client).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": dict(patch)}
        )

    def delete_sandbox(self, namespace: str, name: str) -> None:
        self.api.delete(f"{GROUP}/{VERSION}", "Sandbox", name, namespace)

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> float:
        """Seconds until ``predicate()`` holds; BackendError with the operator's log otherwise."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.operator is not None and self.operator.poll() is not None:
                raise BackendError(f"the operator exited with {self.operator.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(Exception):
                if predicate():
                    return time.monotonic() - started
            time.sleep(0.05)
        raise BackendError(f"{what}: not after {timeout:.0f} s\noperator log:\n{self.log_tail()}")

    def wait_phase(
        self, namespace: str, name: str, phase: str, *, episode: int | None = None, timeout: float = 60.0
    ) -> float:
        def ok() -> bool:
            status = (self.sandbox(namespace, name) or {}).get("status") or {}
            return status.get("phase") == phase and (episode is None or status.get("episode") == episode)

        return self.wait(f"sandbox {namespace}/{name} {phase}", ok, timeout)


@contextlib.contextmanager
def testbed(*, operator: bool = True) -> Iterator[Testbed]:
    token = secrets.token_hex(16)
    cp = controlplane.start(extra_tokens={token: (OPERATOR_USER, ())})
    bed = Testbed(cp, token)
    try:
        bed.install()
        if operator:
            bed.start_operator()
        yield bed
    finally:
        bed.stop()
