"""The backend protocol: lifecycle apart from operations.

A :class:`Backend` brings a set of services up and down (``up``/``down``/``is_alive``/``status``) and hands
out a :class:`Runtime`: the operations the world performs on those services (object store, tracking and
registry, jobs). The ``local`` backend runs everything as child processes of this machine; a ``kube``
backend implements the same operations over the Kubernetes API. A backend hides *where* things run, never
*what* happens: the same call has the same meaning and returns the same shapes on every backend.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------- lifecycle


class ServiceStatus(_Model):
    """One service of a running sandbox, as `mlsandbox status` shows it."""

    name: str
    state: Literal["running", "starting", "stopped", "unhealthy"]
    url: str | None = None
    port: int | None = None
    pid: int | None = None
    rss_bytes: int | None = None
    uptime_s: float | None = None


class Endpoints(_Model):
    """How clients reach the services of a sandbox (what workloads get in their environment)."""

    s3_url: str
    s3_access_key: str
    s3_secret_key: str
    mlflow_url: str
    prefect_api_url: str


# --------------------------------------------------------------------------------------------- operations


class ObjectInfo(_Model):
    key: str
    size: int
    last_modified: float  # unix seconds


class ObjectStore(Protocol):
    """S3-compatible object storage (MinIO on every backend)."""

    def create_bucket(self, bucket: str) -> None: ...
    def delete_bucket(self, bucket: str) -> None:
        """Delete a bucket and every object in it; no error when it does not exist."""
        ...

    def bucket_exists(self, bucket: str) -> bool: ...
    def list_buckets(self) -> list[str]: ...
    def put_object(self, bucket: str, key: str, data: bytes) -> None: ...
    def get_object(self, bucket: str, key: str) -> bytes:
        """Raise :class:`KeyError` when the object does not exist."""
        ...

    def object_exists(self, bucket: str, key: str) -> bool: ...
    def list_objects(self, bucket: str, prefix: str = "") -> list[ObjectInfo]: ...


class RunInfo(_Model):
    run_id: str
    experiment_id: str
    status: str
    start_time: float | None = None
    end_time: float | None = None
    params: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)


class ModelVersionInfo(_Model):
    name: str
    version: str
    run_id: str | None
    source: str
    status: str
    aliases: list[str] = Field(default_factory=list)
    """Names pointing at this version (e.g. ``staging``, ``production``)."""
    created_at: float | None = None


class Tracking(Protocol):
    """Experiment tracking and model registry (the MLflow server on every backend)."""

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str: ...
    def delete_experiment(self, experiment_id: str) -> None: ...
    def list_runs(self, experiment_id: str) -> list[RunInfo]: ...
    def get_run(self, run_id: str) -> RunInfo:
        """Raise :class:`KeyError` when the run does not exist."""
        ...

    def search_runs(
        self,
        experiment_id: str,
        filter_string: str = "",
        order_by: list[str] | None = None,
        max_results: int = 100,
    ) -> list[RunInfo]:
        """Runs of one experiment matching an MLflow filter expression; :class:`ValueError` for a bad one."""
        ...

    def register_model(self, run_id: str, name: str, artifact_path: str = "model") -> ModelVersionInfo: ...
    def list_model_versions(self, name_prefix: str) -> list[ModelVersionInfo]: ...
    def set_model_alias(self, name: str, alias: str, version: str) -> ModelVersionInfo:
        """Point an alias (``staging``, ``production``) of a registered model at a version."""
        ...

    def delete_model_alias(self, name: str, alias: str) -> None: ...
    def delete_registered_model(self, name: str) -> None: ...
    def load_model(self, name: str, version: str) -> Any:
        """Load a registered model version as a Python object with ``predict_proba``/``predict``."""
        ...


class JobSpec(_Model):
    """A batch job: a workload module run with arguments, in its own process (or pod)."""

    job_id: str
    workload: Literal["trainer", "burn"]
    """A module of :mod:`mlsandbox.workloads` (``burn``: a small CPU/memory load generator)."""
    args: list[str]
    cpus: float = 1.0
    memory_mb: int = 1024
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = None
    """Wall-clock limit: the job is killed and fails when it runs longer (``None``: no limit)."""
    python: str | None = None
    """Interpreter of a named environment to run the workload with (its file, by path); None: the
    sandbox's own interpreter."""


class JobStatus(_Model):
    job_id: str
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cpu_seconds: float = 0.0
    peak_rss_bytes: int | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    """What the workload reported on success (for the trainer: run_id, metrics)."""


class Jobs(Protocol):
    """Batch jobs (child processes on `local`, batch/v1 Jobs on `kube`)."""

    def submit(self, spec: JobSpec) -> JobStatus: ...
    def get(self, job_id: str) -> JobStatus:
        """Raise :class:`KeyError` for an unknown job."""
        ...

    def logs(self, job_id: str, tail: int = 50) -> str: ...
    def cancel(self, job_id: str) -> JobStatus: ...
    def list(self, label: tuple[str, str] | None = None) -> list[JobStatus]: ...
    def cleanup(self, label: tuple[str, str]) -> None:
        """Stop and forget every job carrying ``label`` (episode end)."""
        ...

    def set_resources(
        self, job_id: str, cpus: float | None = None, memory_mb: int | None = None
    ) -> JobStatus:
        """Change the CPU quota and/or memory limit of a job (running: applied at once; the kernel
        OOM-kills it when its memory is already above the new limit). Raise :class:`KeyError` for an
        unknown job, :class:`ValueError` when limits cannot be enforced on this machine."""
        ...


# ------------------------------------------------------------------------------------- fault control


class ServiceHealth(_Model):
    """A service as a client sees it: does it answer its health check, how fast, or what error."""

    service: str
    healthy: bool
    latency_ms: float | None = None
    error: str | None = None


class ServiceControl(Protocol):
    """Operations on a sandbox's services (what an operator, a fault, or the agent may do to them)."""

    def names(self) -> list[str]: ...
    def kill(self, service: str) -> None:
        """SIGKILL the service (all its processes); it stays down until restarted."""
        ...

    def freeze(self, service: str) -> None:
        """Suspend the service's processes (SIGSTOP on local, the cgroup freezer elsewhere)."""
        ...

    def thaw(self, service: str) -> None: ...
    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        """Stop (if running) and start the service again on its data; wait until healthy unless not ``wait``."""
        ...

    def health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        """Probe the service the way clients reach it (through the sandbox's proxy where there is one)."""
        ...

    def logs(self, service: str, tail: int = 50) -> str: ...


class NetworkControl(Protocol):
    """Network faults on the client-facing endpoints of a sandbox (Toxiproxy on local, Chaos Mesh on kube)."""

    def endpoints(self) -> list[str]: ...
    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        """Add (or replace) the toxic ``name`` on the endpoint's proxy."""
        ...

    def remove_toxic(self, endpoint: str, name: str) -> None:
        """Remove a toxic; no error when it is not there."""
        ...

    def set_enabled(self, endpoint: str, enabled: bool) -> None: ...
    def reset(self) -> None:
        """Remove every toxic and enable every proxy."""
        ...


class FaultControl(Protocol):
    """Everything the perturbation engine needs from a backend to make faults real.

    Optional mechanisms (looked up with ``getattr``; a fault needing a missing one is recorded as
    unavailable): ``config`` (the config store: ``get``/``set``/``names``/``open_scope``/``close_scope``)
    and ``credentials()`` (what its keys should hold); ``start_contention(key, workers, pin=)``,
    ``pin_to_contention(key, pids)``, ``stop_contention(key)`` and ``target_pids(target)`` (CPU
    contention); ``set_http_fault(path, ...)``/``clear_http_fault(path)`` (fault hooks of HTTP services).
    """

    @property
    def services(self) -> ServiceControl: ...
    @property
    def network(self) -> NetworkControl | None:
        """None when the backend has no network fault mechanism (say why in :meth:`unavailable`)."""
        ...

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        """A hard quota on a bucket (None: no quota)."""
        ...

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut the limits of a running job (remembered so that a crash leaves nothing cut behind)."""
        ...

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        """Give a job its limits back (no error when it has ended)."""
        ...

    def unavailable(self) -> dict[str, str]:
        """Fault types that cannot be made real here, each with the reason."""
        ...


@runtime_checkable
class Runtime(Protocol):
    """The operations over a running sandbox, handed out by :meth:`Backend.runtime`."""

    @property
    def endpoints(self) -> Endpoints: ...
    @property
    def object_store(self) -> ObjectStore: ...
    @property
    def tracking(self) -> Tracking: ...
    @property
    def jobs(self) -> Jobs: ...


@runtime_checkable
class FaultCapable(Protocol):
    """A runtime that can make faults real (optional: a runtime without it runs plans with no faults)."""

    @property
    def faults(self) -> FaultControl: ...


@runtime_checkable
class Backend(Protocol):
    """Lifecycle of a sandbox's services. ``up`` is idempotent: it attaches to services already running."""

    name: str

    def up(self) -> None: ...
    def down(self) -> None:
        """Stop everything this sandbox started; idempotent."""
        ...

    def is_alive(self) -> bool: ...
    def status(self) -> list[ServiceStatus]: ...
    def runtime(self) -> Runtime:
        """Operations over the running services; raise :class:`~mlsandbox.errors.NotRunningError` if down."""
        ...
