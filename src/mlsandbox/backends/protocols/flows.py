"""Flows: the episode's Prefect pipelines (ingestion, training, batch scoring) deployed, run, inspected,
retried and cleaned up (Prefect server + process worker on local, Prefect + its Kubernetes worker with a
Job per run on kube, simulated runs with Prefect's states on sim). Where a run executes (its placement:
a child process of the worker, a Job in the sandbox's namespace) is the backend's business; what it does,
its logs and the states it reaches are the same everywhere.

Support keys: ``flows.environment`` (runs in a named Python environment).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model

FLOWS = ("ingestion", "training", "batch-scoring")
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})


class FlowRunView(Model):
    """A flow run as the orchestrator reports it."""

    id: str
    name: str
    flow: str
    state_type: str
    """Prefect's state type: ``SCHEDULED``, ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CRASHED``,
    ``CANCELLED``, ..."""
    state_name: str
    """Prefect's state name (``Scheduled``, ``AwaitingRetry``, ``Running``, ``Failed``, ...)."""
    message: str | None = None
    run_count: int = 0
    """How many times it started executing (a retry adds one)."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    start_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state_type in TERMINAL_STATES


class TaskRunView(Model):
    """A task run of a flow run (``pull``, ``validate``, ``train``, ...)."""

    name: str
    state_type: str | None = None
    state_name: str | None = None
    run_count: int = 0


class EpisodeFlows(Protocol):
    """The flows of one episode: deployed on first use (one deployment per flow, carrying the sandbox's
    endpoints and the episode's labels), its runs known by the orchestrator's ids."""

    def run(
        self, flow: str, parameters: dict[str, Any], *, name: str, environment: str | None = None
    ) -> FlowRunView:
        """Start a run of ``flow`` (one of :data:`FLOWS`) named ``name``. ``environment``: the key of an
        environment of :class:`~mlsandbox.backends.protocols.environments.Environments` the run does its
        work in (None: the orchestrator's own); :class:`~mlsandbox.errors.Unsupported`
        (``flows.environment``) where runs cannot take one, :class:`KeyError` for an unknown key,
        :class:`~mlsandbox.errors.BackendError` when the flows cannot be deployed."""
        ...

    def get(self, flow_run_id: str) -> FlowRunView:
        """:class:`KeyError` for a run that does not exist."""
        ...

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]:
        """The run's first ``limit`` log lines (its flow's and tasks'), oldest first, each
        ``HH:MM:SS LEVEL logger: message``."""
        ...

    def log_lines_containing(self, flow_run_id: str, text: str) -> list[str]:
        """Every log message of the run containing ``text`` (however long the log), oldest first."""
        ...

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]:
        """The run's task runs in the order they were expected to start."""
        ...

    def retry(self, flow_run_id: str) -> FlowRunView:
        """Schedule a finished run again (``AwaitingRetry``); the same run executes once more."""
        ...

    def cancel(self, flow_run_id: str) -> None: ...

    def close(self) -> None:
        """Cancel unfinished runs, delete the runs this handle started, the deployments and whatever ran
        them (processes, Jobs); idempotent."""
        ...


class Flows(Protocol):
    def open(self, episode_id: str, labels: dict[str, str]) -> EpisodeFlows:
        """The flows of the episode ``episode_id`` (cheap: nothing is deployed before the first run);
        ``labels`` go on whatever runs its flows (the episode's job label)."""
        ...


__all__ = ["FLOWS", "TERMINAL_STATES", "EpisodeFlows", "FlowRunView", "Flows", "TaskRunView"]
