"""A Sandbox of its own for each rollout worker on a cluster (the kube backend and the ``Sandbox`` operator).

At scale, each RLlib EnvRunner (a Ray actor, on any node of a KubeRay cluster) runs its episodes on a
sandbox of its own, so rollouts spread over many namespaces and nodes. :class:`SandboxClaim` creates the
``Sandbox`` object ``<prefix>-<worker index>`` in the control namespace (the operator turns it into its
namespace, quota, network policies and RBAC), waits until it is Ready, and deletes it on :meth:`release`
(the operator then removes the namespace and everything in it). A Sandbox that already exists with the
same claim label (a runner restarted by Ray) is reused; one made by someone else is never touched.

Every claimed Sandbox carries ``mlsandbox.dev/claimed-by: <owner>`` (``MLSANDBOX_CLAIM_OWNER``, one value
for a whole run), so ``kubectl delete sandboxes -l mlsandbox.dev/claimed-by=<owner>`` removes what a
crashed run left.

With ``pool=NAME`` the worker takes a Sandbox from the operator's warm pool instead: the claim is a
``SandboxClaim`` ``<prefix>-<worker index>`` on the ``SandboxPool`` NAME (in the control namespace, same
label), which the operator binds at once to an already Ready member; :attr:`SandboxClaim.sandbox` is that
member. Releasing deletes the ``SandboxClaim``: the member goes back to the pool after a warm reset (or is
deleted, as the pool's ``onRelease`` says). The pool's size caps how many workers start without waiting.
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
CLAIM_KIND = "SandboxClaim"
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
    :meth:`release`. ``spec`` is the Sandbox's spec besides ``scenario`` and ``seed`` (budget, access).
    With ``pool``, a ``SandboxClaim`` of that name on the pool instead (``scenario``, ``seed`` and ``spec``
    are then the pool's template's); :attr:`sandbox` is the Sandbox it is bound to."""

    def __init__(
        self,
        name: str,
        *,
        scenario: str,
        seed: int = 0,
        spec: dict[str, Any] | None = None,
        pool: str | None = None,
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
        self.pool = pool
        self.sandbox: str | None = None if pool else name
        """The claimed Sandbox (with a pool, known once the claim is bound)."""
        self._api_client = api_client
        self._kubeconfig = kubeconfig
        self._cluster: Cluster | None = None
        self.acquired = False

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self._api_client, kubeconfig=self._kubeconfig)
        return self._cluster

    @property
    def kind(self) -> str:
        """What this claim creates: a ``Sandbox``, or a ``SandboxClaim`` on the pool."""
        return CLAIM_KIND if self.pool else "Sandbox"

    def backend(self) -> KubeBackend:
        """The kube backend of the claimed sandbox (same API client)."""
        if self.sandbox is None:
            raise NotRunningError(f"claim {self.name!r} on pool {self.pool!r} is not bound yet: acquire() it")
        return KubeBackend(
            self.sandbox,
            control_namespace=self.control_namespace,
            api_client=self._api_client,
            kubeconfig=self._kubeconfig,
        )

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": SANDBOX_API_VERSION,
            "kind": self.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.control_namespace,
                "labels": {CLAIM_LABEL: self.owner, "app.kubernetes.io/managed-by": "mlsandbox-rllib"},
            },
            "spec": {"poolRef": {"name": self.pool}} if self.pool else self.spec,
        }

    def acquire(self, timeout: float = 300.0) -> str:
        """Create the Sandbox or the pool's SandboxClaim (or take back our own), wait until the Sandbox is
        Ready; its name."""
        kind = self.kind
        existing = self.cluster.get(SANDBOX_API_VERSION, kind, self.name, self.control_namespace)
        if existing is not None:
            holder = ((existing.get("metadata") or {}).get("labels") or {}).get(CLAIM_LABEL)
            if holder != self.owner:
                raise BackendError(
                    f"{kind} {self.control_namespace}/{self.name} exists and is not this worker's "
                    f"({CLAIM_LABEL}={holder!r}, this worker is {self.owner!r}): use another prefix"
                )
        else:
            try:
                self.cluster.create(self.manifest())
            except ApiRefused as exc:
                plural = "sandboxclaims" if self.pool else "sandboxes"
                raise BackendError(
                    f"cannot create {kind} {self.control_namespace}/{self.name}: {exc} (the runner's "
                    f"ServiceAccount needs create on {plural}.mlsandbox.dev, see examples/kuberay)"
                ) from exc
        self.acquired = True
        deadline = time.monotonic() + timeout
        if self.pool:
            self.sandbox = self._bound(deadline, timeout)
        backend = self.backend()
        while True:
            try:
                backend.up()
                return str(self.sandbox)
            except NotRunningError as exc:
                failed = self._failed()
                if failed is not None:  # the operator will not retry it: say why now, leave nothing
                    self.release()
                    raise BackendError(f"claimed Sandbox {self.sandbox!r} failed: {failed}") from exc
                if time.monotonic() > deadline:
                    raise NotRunningError(
                        f"claimed Sandbox {self.sandbox!r} not Ready after {timeout:.0f} s: {exc}"
                    ) from exc
                time.sleep(1.0)

    def _failed(self) -> str | None:
        """The operator's reason when it failed the Sandbox for good (phase ``Failed``: an unknown
        scenario, an invalid spec, a namespace that is not its own), else None."""
        sandbox = self.cluster.get(SANDBOX_API_VERSION, "Sandbox", str(self.sandbox), self.control_namespace)
        status = (sandbox or {}).get("status") or {}
        if status.get("phase") != "Failed":
            return None
        ready = {c.get("type"): c for c in status.get("conditions") or []}.get("Ready") or {}
        return f"{ready.get('reason')}: {ready.get('message')}"

    def _bound(self, deadline: float, timeout: float) -> str:
        """The Sandbox the operator bound the pool claim to (``status.sandbox`` once ``Bound``)."""
        where = f"SandboxClaim {self.control_namespace}/{self.name} on pool {self.pool!r}"
        status: dict[str, Any] = {}
        while True:
            claim = self.cluster.get(SANDBOX_API_VERSION, CLAIM_KIND, self.name, self.control_namespace)
            status = (claim or {}).get("status") or {}
            phase = status.get("phase")
            if phase == "Bound" and status.get("sandbox"):
                return str(status["sandbox"])
            if phase in ("Failed", "Lost") or claim is None:
                reasons = "; ".join(str(c.get("message")) for c in status.get("conditions") or [])
                raise BackendError(f"{where}: {phase or 'deleted'} ({reasons or 'no reason given'})")
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        reasons = "; ".join(str(c.get("message")) for c in status.get("conditions") or [])
        raise NotRunningError(
            f"{where} not bound after {timeout:.0f} s (phase {status.get('phase')!r}: "
            f"{reasons or 'no status yet'}); a pool with no Ready Sandbox free makes its claims wait, a "
            "larger pool (spec.size) serves more workers at once"
        )

    def release(self) -> None:
        """Delete the Sandbox, or the pool's SandboxClaim, if this claim made or took it (idempotent): the
        operator removes the Sandbox's namespace, or returns the pool's Sandbox after a warm reset."""
        if not self.acquired:
            return
        self.acquired = False
        self.cluster.delete(SANDBOX_API_VERSION, self.kind, self.name, self.control_namespace)


__all__ = ["CLAIM_LABEL", "SandboxClaim", "claim_name", "default_owner"]
