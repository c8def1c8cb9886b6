"""Fault control: the mechanisms that make a fault real on a backend, for the perturbation engine and for
the agent's operations actions (health, logs, restart). Signals, cgroups, Toxiproxy, MinIO quotas and
fault hooks on local; scaling, native faults and Chaos Mesh on kube; simulated symptoms on sim.

A mechanism a backend lacks raises :class:`~mlsandbox.errors.Unsupported`; :meth:`FaultControl.
unavailable` names every fault type refused here, with the reason, without trying.
"""

from __future__ import annotations

from typing import Any, Protocol

from mlsandbox.backends.protocols.common import Model


class ServiceHealth(Model):
    """A service as a client sees it: does it answer its health check, how fast, or what error."""

    service: str
    healthy: bool
    latency_ms: float | None = None
    error: str | None = None


class ServiceControl(Protocol):
    """The sandbox's core services (what an operator, a fault or the agent may do to them)."""

    def names(self) -> list[str]: ...

    def kill(self, service: str) -> None:
        """Stop the service at once (all its processes, its pods); it stays down until restarted."""
        ...

    def freeze(self, service: str) -> None:
        """Suspend it: connections hang (SIGSTOP on local, pod failure on kube)."""
        ...

    def thaw(self, service: str) -> None: ...

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        """Stop (if running) and start the service again on its data; wait until healthy unless not ``wait``."""
        ...

    def health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        """Probe it the way clients reach it (through the sandbox's proxy where there is one)."""
        ...

    def logs(self, service: str, tail: int = 50) -> str: ...


class NetworkControl(Protocol):
    """Network faults on the client-facing endpoints (``minio``, ``mlflow``)."""

    def endpoints(self) -> list[str]: ...

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        """Add (or replace) the toxic ``name`` (``latency``, ``bandwidth``, ``timeout``, ``reset_peer``)."""
        ...

    def remove_toxic(self, endpoint: str, name: str) -> None:
        """Remove a toxic; no error when it is not there."""
        ...

    def set_enabled(self, endpoint: str, enabled: bool) -> None: ...

    def reset(self) -> None:
        """Remove every toxic and enable every endpoint."""
        ...


class HttpFault(Model):
    """What an HTTP service's fault hook does to the requests it serves."""

    error_rate: float
    status: int
    delay_ms: int = 0
    seed: int = 0


class FaultControl(Protocol):
    @property
    def services(self) -> ServiceControl: ...

    @property
    def network(self) -> NetworkControl:
        """:class:`~mlsandbox.errors.Unsupported` when the backend has no network fault mechanism."""
        ...

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        """A hard quota on a bucket (None: no quota); writes over it fail with the store's own error."""
        ...

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut a running job's limits (remembered, so a crash leaves nothing cut behind)."""
        ...

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        """Give a job its limits back (no error when it has ended)."""
        ...

    def set_http_fault(self, target: str, fault: HttpFault) -> None:
        """Make the HTTP service ``target`` (``http:NAME``: a deployment, the feature service, an API
        source) answer ``fault.status`` to a share of its requests, or delay them."""
        ...

    def clear_http_fault(self, target: str) -> None: ...

    def start_contention(self, key: str, target: str, workers: int) -> None:
        """Compete for the CPU of ``target`` (``service:NAME`` or ``jobs``) with ``workers`` burners
        (idempotent per ``key``); processes of the target that start later are caught by
        :meth:`refresh_contention`."""
        ...

    def refresh_contention(self, key: str, target: str) -> None: ...

    def stop_contention(self, key: str) -> None:
        """Stop the burners and give the target its CPUs back (idempotent)."""
        ...

    def recover_all(self) -> list[str]:
        """Undo every change this control made that is still in place (what a crash would leave); what
        was undone."""
        ...

    def unavailable(self) -> dict[str, str]:
        """Fault types that cannot be made real here, each with the reason."""
        ...
