"""A Sandbox of its own for each rollout worker on a cluster (the kube backend and the ``Sandbox`` operator).

At scale, each RLlib EnvRunner (a Ray actor, on any node of a KubeRay cluster) runs its episodes on a
sandbox of its own, so rollouts spread over many namespaces and nodes. :class:`SandboxClaim` creates the
``Sandbox`` object ``<prefix>-<worker index>`` in the control namespace (the operator turns it into its
namespace, quota, network policies and RBAC), waits until it is Ready, and deletes it on :meth:`release`
(the operator then removes the namespace and everything in it). A Sandbox that already exists with the
same claim label (a runner restarted by Ray) is reused; one made by someone else is never touched.

Every claimed Sandbox carries ``mlsandbox.dev/claimed-by: <owner>`` (``MLSANDBOX_CLAIM_OWNER``, one value
for a whole run), so ``kubectl delete sandboxes -l mlsandbox.dev/claimed-by=<owner>`` removes what a
crashed run left. The operator's warm pool (a ``SandboxClaim`` on a ``SandboxPool``: an already Ready
Sandbox, a warm reset on release) is not used here yet; this class is where claiming from it goes.
"""

from __future__ import annotations

import os
import re
import socket
import time
from typing import Any

from mlsandbox.backends.kube.backend import DEFAULT_CONTROL_NAMESPACE, KubeBackend
from mlsandbox.backends.kube.cluster import ApiRefused, Cluster
from mlsandbox.errors import BackendError, NotRunningError

SANDBOX_API_VERSION = "mlsandbox.dev/v1alpha1"
CLAIM_LABEL = "mlsandbox.dev/claimed-by"
_LABEL_RE = re.compile(r"[^A-Za-z0-9_.-]")


def claim_name(prefix: str, worker_index: int) -> str:
    """The Sandbox of worker ``worker_index`` (0 is the driver's local runner): ``<prefix>-<index>``."""
    if worker_index < 0:
        raise ValueError(f"worker_index must be >= 0, got {worker_index}")
    return f"{prefix}-{worker_index}"


def default_owner() -> str:
    """Who holds the claims of this process: ``MLSANDBOX_CLAIM_OWNER`` (one value for a whole run, e.g. the
    RayJob's name, so a runner restarted on another pod takes its Sandbox back), else the pod's or host's name."""
    owner = os.environ.get("MLSANDBOX_CLAIM_OWNER") or os.environ.get("HOSTNAME") or socket.gethostname()
    return _LABEL_RE.sub("-", owner)[:63].strip("-.") or "unknown"


class SandboxClaim:
    """The Sandbox ``name`` for one rollout worker: created (or reused) by :meth:`acquire`, deleted by
    :meth:`release`. ``spec`` is the Sandbox's spec besides ``scenario`` and ``seed`` (budget, access)."""

    def __init__(
        self,
        name: str,
        *,
        scenario: str,
        seed: int = 0,
        spec: dict[str, Any] | None = None,
        control_namespace: str | None = None,
        owner: str | None = None,
        api_client: Any | None = None,
        kubeconfig: str | None = None,
    ) -> None:
        self.name = name
        self.control_namespace = (
            control_namespace or os.environ.get("MLSANDBOX_CONTROL_NAMESPACE") or DEFAULT_CONTROL_NAMESPACE
        )
        self.owner = owner or default_owner()
        self.spec = {**(spec or {}), "scenario": scenario, "seed": seed}
        self._api_client = api_client
        self._kubeconfig = kubeconfig
        self._cluster: Cluster | None = None
        self.acquired = False

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self._api_client, kubeconfig=self._kubeconfig)
        return self._cluster

    def backend(self) -> KubeBackend:
        """The kube backend of the claimed sandbox (same API client)."""
        return KubeBackend(
            self.name,
            control_namespace=self.control_namespace,
            api_client=self._api_client,
            kubeconfig=self._kubeconfig,
        )

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": SANDBOX_API_VERSION,
            "kind": "Sandbox",
            "metadata": {
                "name": self.name,
                "namespace": self.control_namespace,
                "labels": {CLAIM_LABEL: self.owner, "app.kubernetes.io/managed-by": "mlsandbox-rllib"},
            },
            "spec": self.spec,
        }

    def acquire(self, timeout: float = 300.0) -> str:
        """Create the Sandbox (or take back our own), wait until it is Ready; its name."""
        existing = self.cluster.get(SANDBOX_API_VERSION, "Sandbox", self.name, self.control_namespace)
        if existing is not None:
            holder = ((existing.get("metadata") or {}).get("labels") or {}).get(CLAIM_LABEL)
            if holder != self.owner:
                raise BackendError(
                    f"Sandbox {self.control_namespace}/{self.name} exists and is not this worker's "
                    f"({CLAIM_LABEL}={holder!r}, this worker is {self.owner!r}): use another prefix"
                )
        else:
            try:
                self.cluster.create(self.manifest())
            except ApiRefused as exc:
                raise BackendError(
                    f"cannot create Sandbox {self.control_namespace}/{self.name}: {exc} (the runner's "
                    "ServiceAccount needs create on sandboxes.mlsandbox.dev, see examples/kuberay)"
                ) from exc
        self.acquired = True
        deadline = time.monotonic() + timeout
        backend = self.backend()
        while True:
            try:
                backend.up()
                return self.name
            except NotRunningError as exc:
                if time.monotonic() > deadline:
                    raise NotRunningError(
                        f"claimed Sandbox {self.name!r} not Ready after {timeout:.0f} s: {exc}"
                    ) from exc
                time.sleep(1.0)

    def release(self) -> None:
        """Delete the Sandbox if this claim made or took it (idempotent); the operator removes its namespace."""
        if not self.acquired:
            return
        self.acquired = False
        self.cluster.delete(SANDBOX_API_VERSION, "Sandbox", self.name, self.control_namespace)


__all__ = ["CLAIM_LABEL", "SandboxClaim", "claim_name", "default_owner"]
