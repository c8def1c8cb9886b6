"""Batch jobs: a workload run with limits, its state, logs and result (processes in cgroups on local,
batch/v1 Jobs on kube, a calibrated surrogate on sim)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model


class JobSpec(Model):
    """A batch job: a workload module run with arguments, in its own process (or pod)."""

    job_id: str
    workload: Literal["trainer", "burn", "script"]
    """A module of :mod:`mlsandbox.workloads` (``burn``: a small CPU/memory load generator), or ``script``:
    the agent's own Python in its :attr:`workspace`, run isolated (``args``: the script's path in the
    workspace, then its arguments)."""
    args: list[str]
    cpus: float = 1.0
    memory_mb: int = 1024
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = None
    """Wall-clock limit: the job is killed and fails when it runs longer (``None``: no limit)."""
    environment: str | None = None
    """The key of an environment of :class:`~mlsandbox.backends.protocols.environments.Environments` to
    run the workload in (None: the backend's default); an unknown key is a :class:`KeyError` of
    :meth:`Jobs.submit`."""
    workspace: str | None = None
    """The workspace (see :mod:`~mlsandbox.backends.protocols.workspaces`) a ``script`` job runs in."""


JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class JobStatus(Model):
    job_id: str
    state: JobState
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
