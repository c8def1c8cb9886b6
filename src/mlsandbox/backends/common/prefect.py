"""The Prefect server's API as the sandbox uses it (a :class:`prefect.client.orchestration.SyncPrefectClient`
bound to one sandbox's server: no global Prefect settings are read or changed).

A deployment points at a flow of :mod:`mlsandbox.workloads.flows` by module path, targets the sandbox's
work pool and carries the environment its runs need (the sandbox's endpoints). On ``local`` that is a
``process`` pool whose worker runs each flow run as ``python -m prefect.engine`` in a child process; on
``kube`` a ``kubernetes`` pool whose worker runs it as a Job (image, namespace and labels as job
variables). A retry sets a finished run back
to ``AwaitingRetry`` (a scheduled state, as Prefect's UI does): the worker runs the same flow run again.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

WORK_POOL = "mlsandbox"
FLOW_ENTRYPOINTS = {
    "ingestion": "mlsandbox.workloads.flows.ingestion",
    "training": "mlsandbox.workloads.flows.training",
    "batch-scoring": "mlsandbox.workloads.flows.batch_scoring",
}
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})


@dataclass(frozen=True)
class FlowRunView:
    id: str
    name: str
    flow: str
    state_type: str
    state_name: str
    message: str | None
    run_count: int
    parameters: dict[str, Any]
    start_time: datetime | None
    end_time: datetime | None

    @property
    def finished(self) -> bool:
        return self.state_type in TERMINAL_STATES


class PrefectPipelines:
    """Deploy, run, inspect and retry flows on the Prefect server at ``api_url`` (``.../api``)."""

    def __init__(self, api_url: str) -> None:
        from prefect.client.orchestration import SyncPrefectClient

        self.api_url = api_url
        self._client = SyncPrefectClient(api_url, httpx_settings={"timeout": 15.0})
        self._client.__enter__()
        self._flow_names: dict[str, str] = {}

    def close(self) -> None:
        self._client.__exit__(None, None, None)

    def deploy(
        self,
        flow: str,
        name: str,
        env: dict[str, str],
        tags: list[str],
        *,
        work_pool: str = WORK_POOL,
        job_variables: dict[str, Any] | None = None,
    ) -> str:
        """Create (or update) the deployment ``name`` of ``flow`` on ``work_pool`` (its runs get ``env``
        and ``job_variables``, e.g. a Kubernetes pool's image and namespace); returns its id."""
        flow_id = self._client.create_flow_from_name(flow)
        deployment_id = self._client.create_deployment(
            flow_id,
            name,
            entrypoint=FLOW_ENTRYPOINTS[flow],
            work_pool_name=work_pool,
            job_variables={**(job_variables or {}), "env": env},
            pull_steps=[],
            tags=tags,
            enforce_parameter_schema=False,
        )
        return str(deployment_id)

    def delete_deployment(self, deployment_id: str) -> None:
        from prefect.exceptions import ObjectNotFound

        with contextlib.suppress(ObjectNotFound):
            self._client.delete_deployment(uuid.UUID(deployment_id))

    def run(self, deployment_id: str, parameters: dict[str, Any], name: str) -> FlowRunView:
        fr = self._client.create_flow_run_from_deployment(
            uuid.UUID(deployment_id), parameters=parameters, name=name
        )
        return self._view(fr)

    def get(self, flow_run_id: str) -> FlowRunView:
        """:class:`KeyError` for an unknown flow run."""
        from prefect.exceptions import ObjectNotFound

        try:
            return self._view(self._client.read_flow_run(uuid.UUID(flow_run_id)))
        except ObjectNotFound:
            raise KeyError(f"flow run {flow_run_id} does not exist") from None

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]:
        """The run's log lines (its flow's and its tasks'), oldest first, as ``time LEVEL logger: message``."""
        import logging

        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
        from prefect.client.schemas.sorting import LogSort

        logs = self._client.read_logs(
            LogFilter(flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])),
            limit=limit,
            sort=LogSort.TIMESTAMP_ASC,
        )
        return [
            f"{log.timestamp:%H:%M:%S} {logging.getLevelName(log.level)} {log.name}: {log.message}"
            for log in logs
        ]

    def log_lines_containing(self, flow_run_id: str, text: str, page: int = 200) -> list[str]:
        """Every log message of the run that contains ``text``, oldest first (all pages: the server
        answers at most ``page`` = its default limit of 200 logs per request)."""
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
        from prefect.client.schemas.sorting import LogSort

        found: list[str] = []
        offset = 0
        while True:
            logs = self._client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])),
                limit=page,
                offset=offset,
                sort=LogSort.TIMESTAMP_ASC,
            )
            found += [log.message for log in logs if text in log.message]
            if len(logs) < page:
                return found
            offset += page

    def task_runs(self, flow_run_id: str) -> list[dict[str, Any]]:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        runs = self._client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(flow_run_id)]))
        )
        runs = sorted(runs, key=lambda t: t.expected_start_time or t.created or datetime.min)
        return [
            {"task": t.name, "state": t.state.name if t.state else None, "run_count": t.run_count}
            for t in runs
        ]

    def retry(self, flow_run_id: str) -> FlowRunView:
        """Schedule a finished run again (state ``AwaitingRetry``); the worker picks it up."""
        from prefect.states import AwaitingRetry

        self._client.set_flow_run_state(uuid.UUID(flow_run_id), AwaitingRetry(), force=True)
        return self.get(flow_run_id)

    def cancel(self, flow_run_id: str) -> None:
        from prefect.states import Cancelled

        self._client.set_flow_run_state(uuid.UUID(flow_run_id), Cancelled(), force=True)

    def delete_flow_run(self, flow_run_id: str) -> None:
        from prefect.exceptions import ObjectNotFound

        with contextlib.suppress(ObjectNotFound):
            self._client.delete_flow_run(uuid.UUID(flow_run_id))

    def _flow_name(self, flow_id: Any) -> str:
        key = str(flow_id)
        if key not in self._flow_names:
            self._flow_names[key] = self._client.read_flow(flow_id).name
        return self._flow_names[key]

    def _view(self, fr: Any) -> FlowRunView:
        st = fr.state
        return FlowRunView(
            id=str(fr.id),
            name=fr.name,
            flow=self._flow_name(fr.flow_id),
            state_type=str(st.type.value) if st else "SCHEDULED",
            state_name=st.name if st else "Scheduled",
            message=st.message if st else None,
            run_count=fr.run_count,
            parameters=dict(fr.parameters or {}),
            start_time=fr.start_time,
            end_time=fr.end_time,
        )
