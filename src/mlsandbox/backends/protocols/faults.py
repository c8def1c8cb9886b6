"""Fault control: the mechanisms that make a fault real on a backend, for the perturbation engine and for
the agent's operations actions (health, logs, restart). Signals, cgroups, Toxiproxy, MinIO quotas and
fault hooks on local; scaling, native faults and Chaos Mesh on kube; simulated symptoms on sim.

Every backend implements the whole of :class:`FaultControl`. A mechanism it lacks (here, or on this
machine or cluster) raises :class:`~mlsandbox.errors.Unsupported` with capability ``fault:TYPE`` (or
``faults.network`` for the network as a whole), and :meth:`FaultControl.unavailable` names every fault
type refused here, with the reason, without trying anything. What a fault type needs besides fault
control (the config store, the data sources) is the runtime's other capabilities; the perturbation
engine asks :meth:`~mlsandbox.backends.protocols.Runtime.support` for those.

Nothing crosses the seam as a pid, a path or a URL: services and endpoints are named, jobs are their
backend ids, HTTP services are the names of ``http:NAME`` targets, contention is keyed by the caller.
Every change that would outlive a crash of the process that made it is remembered by the backend (a
journal on local, labels and annotations on kube), so :meth:`FaultControl.recover_all` and the backend's
garbage collector can undo it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model
from mlsandbox.faultkinds import NETWORK_FAULTS as NETWORK_FAULTS

# NETWORK_FAULTS: the fault types acting through :attr:`FaultControl.network` (from their declarations).


class ServiceHealth(Model):
    """A service as a client sees it: does it answer its health check, how fast, or what error."""

    service: str
    healthy: bool
    latency_ms: float | None = None
    error: str | None = None


class NoSuchTarget(LookupError):
    """A fault names a target this sandbox does not have (an ``http:NAME`` no service registered); the
    message says which targets there are."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such target"


class ServiceControl(Protocol):
    """The sandbox's core services (what an operator, a fault or the agent may do to them). An unknown
    service is a :class:`ValueError` naming the services there are."""

    def names(self) -> list[str]: ...

    def kill(self, service: str) -> None:
        """Stop the service at once (all its processes, its pods); it stays down until restarted."""
        ...

    def freeze(self, service: str) -> None:
        """Suspend it: connections hang (SIGSTOP on local, pod failure on kube)."""
        ...

    def thaw(self, service: str) -> None:
        """Undo :meth:`freeze` (idempotent)."""
        ...

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        """Stop (if running) and start the service again on its data; wait until healthy unless not ``wait``."""
        ...

    def health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        """Probe it the way clients reach it (through the sandbox's proxy where there is one)."""
        ...

    def logs(self, service: str, tail: int = 50) -> str: ...


class NetworkControl(Protocol):
    """Network faults on the client-facing endpoints (``minio``, ``mlflow``), in Toxiproxy's terms. An
    unknown endpoint is a :class:`ValueError`; a kind this backend cannot make real raises
    :class:`~mlsandbox.errors.Unsupported` (``fault:KIND``)."""

    def endpoints(self) -> list[str]: ...

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        """Add (or replace) the toxic ``name`` of ``kind`` (``latency``: ``latency``, ``jitter`` in ms;
        ``bandwidth``: ``rate`` in KB/s; ``timeout``, ``reset_peer``: ``timeout`` in ms). ``stream`` is
        the direction (a backend that shapes both directions says so)."""
        ...

    def remove_toxic(self, endpoint: str, name: str) -> None:
        """Remove a toxic; no error when it is not there."""
        ...

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        """``False``: connections to the endpoint are refused (or hang) until enabled again."""
        ...

    def reset(self) -> None:
        """Remove every toxic and enable every endpoint."""
        ...


class HttpFault(Model):
    """What an HTTP service's fault hook does to the requests it serves: ``error_rate`` of them get
    ``status``; every one is delayed by ``delay_ms`` first; the draw is seeded by ``seed``."""

    error_rate: float = Field(ge=0, le=1)
    status: int = Field(ge=500, le=599)
    delay_ms: int = Field(default=0, ge=0)
    seed: int = 0


class FaultControl(Protocol):
    """Every fault mechanism of a backend over one running sandbox (``Runtime.faults``)."""

    @property
    def services(self) -> ServiceControl: ...

    @property
    def network(self) -> NetworkControl:
        """The endpoints' network; :class:`~mlsandbox.errors.Unsupported` (``faults.network``) when the
        backend has no network fault mechanism here (no Toxiproxy, no Chaos Mesh)."""
        ...

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        """A hard quota on a bucket (None: no quota); writes over it fail with the store's own error."""
        ...

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut a running job's limits (remembered, so a crash leaves nothing cut behind). :class:`KeyError`
        for an unknown job, :class:`ValueError` when the limits cannot be enforced here."""
        ...

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        """Give a job its limits back (no error when it has ended)."""
        ...

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        """Make the HTTP service ``target`` (the NAME of an ``http:NAME`` target: a model deployment, the
        feature service, an API source, as the episode ``episode_id`` knows it) answer as ``fault`` says
        (idempotent: the last call wins). :class:`NoSuchTarget` when no such service is there;
        :class:`~mlsandbox.errors.Unsupported` (``fault:http_errors``) on a backend without the mechanism."""
        ...

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        """The service answers normally again (idempotent; no error for an unknown target)."""
        ...

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        """Whether a fault this control set on the HTTP service ``target`` is still in effect (False once
        cleared, whoever cleared it: a restart of a service whose state the fault was)."""
        ...

    def start_contention(self, key: str, target: str, workers: int, *, pin: bool = True) -> None:
        """Compete for the CPU of ``target`` with ``workers`` CPU burners (idempotent per ``key``).
        ``target`` is ``service:NAME`` (a core service) or ``jobs`` (the jobs handed to
        :meth:`refresh_contention`). ``pin``: the burners and the target share one CPU; else the burners
        spread over every CPU. :class:`~mlsandbox.errors.Unsupported` (``fault:cpu_contention``) without
        the mechanism."""
        ...

    def refresh_contention(self, key: str, jobs: Sequence[str] = ()) -> list[str]:
        """Catch what started since: new processes of a service target, and the running ``jobs`` (backend
        job ids) of a ``jobs`` target. Returns the jobs caught for the first time (an ended or unknown
        job is skipped); nothing for an unknown ``key``."""
        ...

    def stop_contention(self, key: str) -> None:
        """Stop the burners and give the target its CPUs back (idempotent)."""
        ...

    def recover_all(self) -> list[str]:
        """Undo every change this control made that is still in place (what a crash would leave behind):
        one line per thing undone."""
        ...

    def unavailable(self) -> dict[str, str]:
        """Fault types that cannot be made real on this sandbox, each with the reason (nothing is tried)."""
        ...
