"""Flows: the episode's Prefect pipelines (ingestion, training, batch scoring) deployed, run, inspected,
retried and cleaned up (Prefect server + process worker on local, Prefect + its Kubernetes worker with a
Job per run on kube, simulated runs with Prefect's states on sim). Where a run executes (its placement)
is the backend's business; what it does and the states it reaches are the same everywhere."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model

FLOWS = ("ingestion", "training", "batch-scoring")
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})


class FlowRunView(Model):
    id: str
    name: str
    flow: str
    state_type: str
    """Prefect's state type: ``SCHEDULED``, ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CRASHED``,
    ``CANCELLED``, ..."""
    state_name: str
    message: str | None = None
    run_count: int = 0
    parameters: dict[str, Any] = Field(default_factory=dict)
    start_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state_type in TERMINAL_STATES


class TaskRunView(Model):
    name: str
    state_type: str
    state_name: str


class EpisodeFlows(Protocol):
    """The flows of one episode: deployed on first use, carrying the episode's environment."""

    def run(
        self, flow: str, parameters: dict[str, Any], *, name: str, environment: str | None = None
    ) -> FlowRunView:
        """Start a run of ``flow`` (one of :data:`FLOWS`); ``environment`` is a named environment's key."""
        ...

    def get(self, flow_run_id: str) -> FlowRunView:
        """:class:`KeyError` for a run that does not exist."""
        ...

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]: ...

    def log_lines_containing(self, flow_run_id: str, text: str) -> list[str]:
        """Every log line of the run containing ``text`` (however long the log)."""
        ...

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]: ...

    def retry(self, flow_run_id: str) -> FlowRunView: ...

    def cancel(self, flow_run_id: str) -> None: ...

    def close(self) -> None:
        """Cancel unfinished runs, delete the runs, the deployments and whatever ran them (processes,
        Jobs); idempotent."""
        ...


class Flows(Protocol):
    def open(self, episode_id: str, labels: dict[str, str]) -> EpisodeFlows: ...
