"""The declared Runtime and the Backend that hands it out.

A :class:`Backend` brings a sandbox's services up and down (``up``/``down``/``is_alive``/``status``) and
hands out a :class:`Runtime`: every capability the world uses, each a protocol of its own module. Every
backend implements every capability, or refuses it (or one operation of it, or a fault type) with
:class:`~mlsandbox.errors.Unsupported`, and says so in :meth:`Backend.support` without starting anything.
A backend hides *where* things run, never *what* happens: the same call means the same on every backend
and returns the same models.

Backends are plug-ins: the ``mlsandbox.backends`` entry-point group names :class:`BackendType` objects,
each with a typed config model (see :mod:`mlsandbox.backends.registry`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from mlsandbox.backends.protocols.audit import AuditLog
from mlsandbox.backends.protocols.clock import Clock
from mlsandbox.backends.protocols.common import Model, Support
from mlsandbox.backends.protocols.config import ConfigStore
from mlsandbox.backends.protocols.environments import Environments
from mlsandbox.backends.protocols.faults import FaultControl
from mlsandbox.backends.protocols.flows import Flows
from mlsandbox.backends.protocols.jobs import Jobs
from mlsandbox.backends.protocols.serving import ModelServing
from mlsandbox.backends.protocols.sources import SourceHosting
from mlsandbox.backends.protocols.storage import ObjectStore
from mlsandbox.backends.protocols.tracking import Tracking
from mlsandbox.backends.protocols.workspaces import Workspaces


class ServiceStatus(Model):
    """One service of a running sandbox, as `mlsandbox status` shows it."""

    name: str
    state: Literal["running", "starting", "stopped", "unhealthy"]
    url: str | None = None
    port: int | None = None
    pid: int | None = None
    rss_bytes: int | None = None
    """Memory of the service's process (on kube: its pods' containers' working set, as the kubelet
    reports it)."""
    uptime_s: float | None = None
    detail: str | None = None
    """Where it runs, when that is not a process of this machine (kube: pod, node, restarts)."""


class SandboxListing(Model):
    """A sandbox of a backend known on this machine, as a listing tells it without probing its services
    (what ``mlsandbox console`` lists). Fields a backend does not know are None."""

    name: str
    phase: Literal["starting", "running", "unknown"] = "unknown"
    """``running`` once started (its services may have died since: see :attr:`services_running`)."""
    services_running: bool | None = None
    """Every service's process is alive (no health probe)."""
    ephemeral: bool | None = None
    """Owned by a process (``owner_pid``): garbage once it is gone."""
    owner_pid: int | None = None
    owner_alive: bool | None = None
    created_at: float | None = None
    """When it was started (Unix time)."""


class Endpoints(Model):
    """How clients reach a sandbox's services (what workloads get in their environment). Backend-internal:
    the world never needs it."""

    s3_url: str
    s3_access_key: str
    s3_secret_key: str
    mlflow_url: str
    prefect_api_url: str


@runtime_checkable
class Runtime(Protocol):
    """Every capability the world uses, over a running sandbox (handed out by :meth:`Backend.runtime`)."""

    @property
    def backend(self) -> str:
        """The backend's name (``local``, ``kube``, ``sim``, a plug-in's)."""
        ...

    @property
    def sandbox(self) -> str: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def object_store(self) -> ObjectStore: ...
    @property
    def tracking(self) -> Tracking: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def serving(self) -> ModelServing: ...
    @property
    def sources(self) -> SourceHosting: ...
    @property
    def flows(self) -> Flows: ...
    @property
    def config(self) -> ConfigStore: ...
    @property
    def environments(self) -> Environments: ...
    @property
    def workspaces(self) -> Workspaces:
        """The episodes' code workspaces (refused with :class:`~mlsandbox.errors.Unsupported` where agent
        code cannot run isolated)."""
        ...

    @property
    def faults(self) -> FaultControl: ...

    def support(self) -> Support:
        """What this runtime refuses, and why (the backend's support, refined by what is running)."""
        ...

    def new_episode_id(self, seed: int) -> str:
        """The id of a new episode of this sandbox, unique in it (it names the episode's bucket,
        experiment, job label and audit log): :func:`random_episode_id` on backends whose sandboxes
        several processes share (local, kube); derived from the sandbox's seed on sim, so that a run is
        reproducible, ids included."""
        ...

    def close(self) -> None:
        """Stop what this runtime started for its client (jobs of this process); the services are the
        backend's."""
        ...


def random_episode_id(seed: int) -> str:
    """``<seed mod 100000>-<8 random hex digits>``: an episode id no other process will make."""
    return f"{seed % 100000}-{uuid.uuid4().hex[:8]}"


@runtime_checkable
class Backend(Protocol):
    """Lifecycle of a sandbox's services. ``up`` is idempotent: it attaches to services already running."""

    @property
    def kind(self) -> str:
        """The backend's registered name."""
        ...

    @property
    def name(self) -> str:
        """The sandbox's name."""
        ...

    def up(self, *, ephemeral: bool = False) -> None:
        """Start the services (or attach to them). ``ephemeral``: they belong to this process, and
        ``mlsandbox gc`` removes them when it dies."""
        ...

    def down(self) -> None:
        """Stop everything this sandbox started; idempotent."""
        ...

    def is_alive(self) -> bool: ...
    def status(self) -> list[ServiceStatus]: ...

    def runtime(self) -> Runtime:
        """Every capability over the running services; :class:`~mlsandbox.errors.NotRunningError` if down."""
        ...

    def support(self) -> Support:
        """What this backend refuses, and why, known without starting anything."""
        ...


class BackendConfig(Model):
    """Base of each backend's typed config (a ``type`` literal names the backend)."""

    type: str
    name: str = "default"
    """The sandbox's name."""


@dataclass(frozen=True)
class BackendType:
    """A registered backend: its name, config model, factory and static support (entry point value)."""

    name: str
    description: str
    config: type[BackendConfig]
    create: Callable[[Any], Backend]
    """Make the backend from an instance of ``config`` (nothing is started)."""
    origin: str = "builtin"
    in_process: bool = False
    """The backend's whole sandbox lives in the calling process (no service, process or socket): making
    one is cheap, so a gateway gives each session a sandbox of its own."""
    sandboxes: Callable[[], list[SandboxListing]] | None = None
    """The backend's sandboxes known on this machine, cheaply (no service is probed); None when the
    backend cannot list them (an in-process backend has none outside its process)."""
