"""Model serving: deployments of registered model versions as replicas behind one address, the episode's
feature service, requests to a deployment and scrapes of each replica (supervised processes on local,
Deployments and Services on kube, a calibrated queueing model on sim).

The world (the serving pack, production traffic, the monitor, the alerts, the grade) uses only what is
declared here, so a deployment means the same on every backend: the same views, the same error codes.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model
from mlsandbox.errors import BackendError

FEATURE_SERVICE = "feature-service"
"""The target name of the episode's feature service (in scrapes, metrics and faults)."""


class ServingError(BackendError):
    """A serving operation that cannot be done; ``code`` is the agent's error code (``not_found``,
    ``conflict``, ``invalid_parameters``, ``unavailable``, ``timeout``, ``deploy_failed``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Machine(Model):
    """The machine type replicas run on: their limits and price."""

    name: str
    cpus: float
    memory_mb: int
    credits_per_second: float


class DeploymentSpec(Model):
    """What ``deploy`` makes or updates: ``replicas`` replicas of ``registry_name`` version ``version``."""

    deployment: str
    """The agent's name for the deployment (its address)."""
    model: str
    """The agent's model name (what views show)."""
    registry_name: str
    """The name of the model in the registry (episode-scoped)."""
    version: str
    replicas: int = Field(ge=0)
    machine: Machine
    environment: str | None = None
    """A named Python environment of the episode (None: the server's own)."""


class ReplicaView(Model):
    replica: int
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
    replicas: int
    """Replicas asked for."""
    replicas_up: int
    """Replicas running and ready."""
    rollout: Literal["complete", "progressing"]
    replica_states: list[ReplicaView]
    version_history: list[str]
    """Versions this deployment has served, oldest first (what ``rollback`` may go back to)."""


class ServingResponse(Model):
    """A deployment's (or replica's) HTTP answer."""

    status: int
    body: bytes
    content_type: str | None = None


class ReplicaRef(Model):
    """One scrape target: a replica of a deployment (or the feature service)."""

    target: str
    """A deployment name, or :data:`FEATURE_SERVICE`."""
    replica: str
    """The backend's id of the replica (a pid-named process, a pod)."""
    ready: bool


class ReplicaStats(Model):
    """What the backend can say of a replica's resource use (None: not read on this backend)."""

    cpu_percent: float | None = None
    memory_mb: float | None = None


class EpisodeServing(Protocol):
    """The deployments of one episode. Thread safe: production traffic and the monitor call it from
    their tickers while the agent's actions run."""

    def deploy(self, spec: DeploymentSpec) -> tuple[DeploymentView, bool]:
        """Create the deployment, or roll it to ``spec`` (new replicas ready before old ones go); the view
        and whether it was created. :class:`ServingError` ``deploy_failed`` with the replica's log tail
        when the new replicas do not become ready (the old ones keep serving)."""
        ...

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        """Roll the deployment back (or forward) to a version it served before."""
        ...

    def scale(self, deployment: str, replicas: int) -> DeploymentView: ...

    def undeploy(self, deployment: str) -> DeploymentView:
        """Remove the deployment and its replicas; its last view."""
        ...

    def get(self, deployment: str) -> DeploymentView:
        """:class:`ServingError` ``not_found`` (naming the deployments there are) when it does not exist."""
        ...

    def list(self) -> list[DeploymentView]:
        """Every deployment of the episode, by name."""
        ...

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        """Start the episode's feature service on the features at ``bucket/key`` (idempotent); replicas
        deployed afterwards look entity ids up in it."""
        ...

    def request(self, deployment: str, path: str, body: bytes, *, timeout_s: float) -> ServingResponse:
        """POST ``body`` to ``path`` of the deployment, as any client of its address would (one ready
        replica answers). :class:`ServingError` ``not_found``, ``unavailable`` or ``timeout``."""
        ...

    def replicas(self) -> list[ReplicaRef]:
        """Every replica to scrape: each deployment's, and the feature service's."""
        ...

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        """The replica's ``/metrics`` (Prometheus text); :class:`ServingError` when it does not answer."""
        ...

    def stats(self, ref: ReplicaRef) -> ReplicaStats: ...

    def credits_per_second(self) -> float:
        """What the episode's replicas cost now (replicas asked for x their machine's price)."""
        ...

    def close(self) -> None:
        """Remove every deployment and the feature service of the episode (idempotent)."""
        ...


class ModelServing(Protocol):
    def open(self, episode_id: str, labels: dict[str, str]) -> EpisodeServing:
        """The deployments of the episode ``episode_id``; ``labels`` mark everything made for it."""
        ...
