"""Model serving: deployments of registered model versions as replicas behind one address, the episode's
feature service, requests to a deployment and scrapes of each replica (supervised processes on local,
Deployments and Services on kube, a calibrated queueing model on sim).

The world (the serving pack, production traffic, the monitor, the alerts, the grade) uses only what is
declared here, so a deployment means the same on every backend: the same views, the same error codes.
Everything crossing the seam is a model or bytes (no process, pod, port or URL), so a backend may keep
its deployments in memory.

Meaning shared by every backend:

- a deployment ``NAME`` of an episode is reached at one address; a request goes to one ready replica;
- changing the version (``deploy`` of an existing name, ``set_version``) is a rolling replacement: the
  new replicas must be ready before the old ones stop; when they do not become ready the deployment is
  left as it was (the old version keeps serving) and :class:`ServingError` ``deploy_failed`` says why;
- each replica runs under its machine's CPU and memory limits; a replica over its memory is killed by the
  kernel and shows as ``exited`` with exit code 137 and reason ``OOMKilled``;
- replicas cost their machine's price per second while asked for (:meth:`EpisodeServing.credits_per_second`).

What differs, and is documented by each backend: whether a replica that died is replaced on its own
(kube's ReplicaSet does; local replaces it on the next ``scale`` or rollout), and whether a replica's CPU
and memory are read (:class:`ReplicaStats`).
"""

from __future__ import annotations

import builtins
from typing import Literal, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model
from mlsandbox.backends.protocols.environments import EnvironmentInfo
from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.errors import BackendError
from mlsandbox.tasks.kind import ResponseShape

FEATURE_SERVICE = "feature-service"
"""The target name of the episode's feature service (in scrapes, metrics and faults)."""

SERVING_ERROR_CODES: tuple[str, ...] = (
    "not_found",
    "conflict",
    "invalid_parameters",
    "unavailable",
    "timeout",
    "deploy_failed",
    "environment_build_failed",
    "backend_error",
)
"""Every code a :class:`ServingError` carries (the agent's error codes)."""


class ServingError(BackendError):
    """A serving operation that cannot be done; ``code`` (one of :data:`SERVING_ERROR_CODES`) is the
    agent's error code, ``message`` says why in words an engineer would use:

    - ``not_found``: no such deployment (the message names the deployments there are);
    - ``conflict``: the deployment serves another model, never served that version, already serves it, or
      its name is taken by something the episode did not make;
    - ``invalid_parameters``: a value the backend refuses (e.g. replicas below 0);
    - ``unavailable`` / ``timeout``: a request that no replica answered (in time);
    - ``deploy_failed``: new replicas that did not become ready (the replica's reason and log tail);
    - ``environment_build_failed``: the named environment cannot run the model server;
    - ``backend_error``: the sandbox itself failed (a cgroup that cannot be made).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Machine(Model):
    """The machine type replicas run on: their limits and price."""

    name: str
    cpus: float = Field(gt=0)
    memory_mb: int = Field(gt=0)
    credits_per_second: float = Field(ge=0)


class ServingEnvironment(Model):
    """A named Python environment of the episode the replicas run with (what ``environment`` names)."""

    name: str
    env: EnvironmentInfo
    """The environment as built (its requirements); the backend adds what the model server needs
    (:meth:`~mlsandbox.backends.protocols.environments.Environments.for_serving`)."""


class DeploymentSpec(Model):
    """What ``deploy`` makes or updates: ``replicas`` replicas of ``registry_name`` version ``version``."""

    deployment: str = Field(min_length=1, max_length=64)
    """The agent's name for the deployment (its address)."""
    model: str = Field(min_length=1)
    """The agent's model name (what views show)."""
    registry_name: str = Field(min_length=1)
    """The name of the model in the registry (episode-scoped)."""
    version: str = Field(pattern=r"^[1-9][0-9]*$")
    replicas: int = Field(ge=0)
    machine: Machine
    environment: ServingEnvironment | None = None
    """A named environment of the episode (None: the model server's own). Backend-specific: a backend
    whose replicas run a fixed image refuses it with :class:`~mlsandbox.errors.Unsupported`
    (``serving.environment``)."""
    response: ResponseShape | None = None
    """What the replicas answer per row (the dataset kind's :attr:`~mlsandbox.tasks.kind.Serving.shape`,
    the model server's ``--response``); None: what the model is decides."""


class ReplicaView(Model):
    """One replica of a deployment, oldest first."""

    replica: int
    """Its position in the deployment's list (0 = the oldest)."""
    version: str | None
    """The model version it serves (during a rollout, old and new replicas differ)."""
    state: Literal["running", "starting", "stopping", "exited"]
    exit_code: int | None = None
    reason: str | None = None
    """``OOMKilled`` (exit code 137, killed by the kernel for memory), ``Killed``, ``Error``, or why a
    replica does not start (an image that cannot be pulled, a pod that cannot be scheduled)."""
    message: str | None = None


class Limits(Model):
    cpus: float
    memory_mb: int


class DeploymentView(Model):
    """A deployment as the agent sees it (``get_deployment``): the same keys on every backend."""

    deployment: str
    model: str
    version: str
    machine: str
    limits: Limits
    environment: str
    """The named environment the replicas run with, ``default`` for the model server's own."""
    replicas: int
    """Replicas asked for."""
    replicas_up: int
    """Replicas running and ready (counted from :attr:`replica_states`)."""
    rollout: Literal["complete", "progressing"]
    """``complete`` when every replica asked for runs the current version and is ready; ``progressing``
    while replicas start, stop or are replaced (also after one died, until it is replaced)."""
    replica_states: list[ReplicaView]
    version_history: list[str]
    """Versions this deployment has served, oldest first (what ``rollback`` may go back to)."""


class ServingResponse(Model):
    """A deployment's (or replica's) HTTP answer, whatever its status."""

    status: int
    body: bytes
    content_type: str | None = None
    elapsed_s: float | None = None
    """How long the answer took, when the backend says it: a backend whose clock does not move while
    requests overlap (sim's virtual clock) gives each request's latency here; None: the caller measures
    it on the runtime's clock."""


class ReplicaRef(Model):
    """One scrape target: a replica of a deployment (or of the feature service)."""

    target: str
    """A deployment name, or :data:`FEATURE_SERVICE`."""
    replica: str
    """The backend's id of the replica (stable while it lives; a new replica gets a new id)."""
    ready: bool
    """Running and ready: only ready replicas are scraped and counted up."""


class ReplicaStats(Model):
    """What the backend can say of a replica's resource use (None: not read on this backend)."""

    cpu_percent: float | None = None
    memory_mb: float | None = None


def check_set_version(view: DeploymentView, version: str) -> None:
    """The refusal of ``set_version(view.deployment, version)`` (every backend gives the same):
    :class:`ServingError` ``conflict`` for a version the deployment never served or serves now."""
    if version not in view.version_history:
        raise ServingError(
            "conflict",
            f"deployment {view.deployment!r} never served version {version} "
            f"(served: {', '.join(view.version_history)}); use deploy_model for a new version",
        )
    if version == view.version:
        raise ServingError("conflict", f"deployment {view.deployment!r} already serves version {version}")


def not_found(deployment: str, known: list[str]) -> ServingError:
    """The ``not_found`` refusal of a deployment that does not exist (naming those that do)."""
    names = ", ".join(sorted(known)) or "none"
    return ServingError("not_found", f"deployment {deployment!r} does not exist (deployments: {names})")


class EpisodeServing(Protocol):
    """The deployments of one episode. Thread safe: production traffic and the monitor call it from
    their tickers while the agent's actions run. Operations that change a deployment return once the
    change is complete (replicas ready) or has failed."""

    def deploy(self, spec: DeploymentSpec) -> tuple[DeploymentView, bool]:
        """Create the deployment, or roll it to ``spec`` (its version, replicas, machine and environment;
        new replicas ready before old ones go); the view and whether it was created.
        :class:`ServingError` ``conflict`` when it serves another model, ``deploy_failed`` (with the
        replica's reason and log tail) when the new replicas do not become ready: a new deployment is
        removed, an existing one keeps serving what it served. ``environment_build_failed`` when the
        named environment cannot run the model server; :class:`~mlsandbox.errors.Unsupported`
        (``serving.environment``) on a backend without named environments for replicas."""
        ...

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        """Roll the deployment back (or forward) to a version it served before, with the same replicas
        (see :func:`check_set_version` for the ``conflict`` refusals); ``deploy_failed`` as for
        ``deploy``."""
        ...

    def scale(self, deployment: str, replicas: int) -> DeploymentView:
        """Set the number of replicas: new ones start and must be ready, extra ones stop, replicas that
        died are replaced. ``invalid_parameters`` below 0; ``deploy_failed`` when new replicas do not
        become ready (the deployment keeps the replicas it had)."""
        ...

    def undeploy(self, deployment: str) -> DeploymentView:
        """Remove the deployment and its replicas; its last view."""
        ...

    def get(self, deployment: str) -> DeploymentView:
        """``not_found`` (naming the deployments there are) when it does not exist."""
        ...

    def list(self) -> list[DeploymentView]:
        """Every deployment of the episode, by name."""
        ...

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        """Start the episode's feature service on the features at ``bucket/key`` (a parquet object with an
        ``id_column``) and wait until it is ready (idempotent); replicas deployed afterwards look entity
        ids up in it. ``unavailable`` when it does not become ready."""
        ...

    def feature_service_health(self, *, timeout_s: float = 2.0) -> ServiceHealth:
        """Probe the feature service's ``/health`` as a client would (its fault hook answers there too).
        ``unavailable`` when it was never started."""
        ...

    def restart_feature_service(self) -> ServiceHealth:
        """Stop the feature service and start it again on the same address and table, then probe it. A
        fresh process: whatever state made the old one sick goes with it (an ``http:feature-service``
        fault is cleared). Requests by entity id fail meanwhile. ``unavailable`` when it was never
        started or does not come back."""
        ...

    def feature_service_logs(self, tail: int = 50) -> str:
        """The last ``tail`` lines of the feature service's log (``unavailable`` when never started)."""
        ...

    def request(
        self,
        deployment: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float,
        content_type: str = "application/json",
    ) -> ServingResponse:
        """POST ``body`` to ``path`` of the deployment, as any client of its address would (one ready
        replica answers, whatever its status). ``not_found`` when the deployment does not exist,
        ``unavailable`` when no replica answers, ``timeout`` when none answers within ``timeout_s``."""
        ...

    def replicas(self) -> dict[str, builtins.list[ReplicaRef]]:
        """Every scrape target and its replicas: each deployment (with an empty list when it has none) and
        the feature service once started. May be up to a second old."""
        ...

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        """The replica's ``/metrics`` (Prometheus text); ``unavailable`` or ``timeout`` when it does not
        answer with 200."""
        ...

    def stats(self, ref: ReplicaRef) -> ReplicaStats:
        """CPU (percent since the previous call for this replica) and resident memory, when the backend
        reads them; a first call may return None for CPU."""
        ...

    def credits_per_second(self) -> float:
        """What the episode's replicas cost now (replicas asked for x their machine's price)."""
        ...

    def close(self) -> None:
        """Remove every deployment and the feature service of the episode (idempotent)."""
        ...


class ModelServing(Protocol):
    def open(self, episode_id: str, labels: dict[str, str]) -> EpisodeServing:
        """The deployments of the episode ``episode_id``; ``labels`` mark everything made for it (what a
        garbage collection or a warm reset selects). Starts nothing; cheap."""
        ...
