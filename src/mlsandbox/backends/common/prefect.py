"""The Prefect server's API as the sandbox uses it, and the episode flows of the backends that run a real
Prefect (local, kube).

:class:`PrefectPipelines` is a :class:`prefect.client.orchestration.SyncPrefectClient` bound to one
server (no global Prefect settings are read or changed). A deployment points at a flow of
:mod:`mlsandbox.workloads.flows` by module path, targets a work pool and carries the environment its runs
need (the sandbox's endpoints). On ``local`` that is a ``process`` pool whose worker runs each flow run as
``python -m prefect.engine`` in a child process; on ``kube`` a ``kubernetes`` pool whose worker runs it
as a Job (image, namespace and labels as job variables). A retry sets a finished run back to
``AwaitingRetry`` (a scheduled state, as Prefect's UI does): the worker runs the same flow run again.

:class:`PrefectFlows` is the :class:`~mlsandbox.backends.protocols.Flows` of such a backend: the backend
gives it where runs go (:class:`FlowPlacement`), how an environment key becomes an interpreter (or why it
cannot), and what deletes whatever ran an episode's flows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mlsandbox.backends.protocols.flows import FLOWS, FlowRunView, TaskRunView
from mlsandbox.errors import BackendError, Unsupported

log = logging.getLogger(__name__)

WORK_POOL = "mlsandbox"
FLOW_ENTRYPOINTS = {
    "ingestion": "mlsandbox.workloads.flows.ingestion",
    "training": "mlsandbox.workloads.flows.training",
    "batch-scoring": "mlsandbox.workloads.flows.batch_scoring",
}


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

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        runs = self._client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(flow_run_id)]))
        )
        runs = sorted(runs, key=lambda t: t.expected_start_time or t.created or datetime.min)
        return [
            TaskRunView(
                name=t.name,
                state_type=str(t.state.type.value) if t.state else None,
                state_name=t.state.name if t.state else None,
                run_count=t.run_count,
            )
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


# ------------------------------------------------------------------------------------- episode flows


@dataclass(frozen=True)
class FlowPlacement:
    """Where an episode's flow runs go: the work pool, the environment of the runs (how they reach the
    sandbox's services) and the pool's job variables (a Kubernetes pool's image, namespace, labels)."""

    work_pool: str
    env: dict[str, str]
    job_variables: dict[str, Any] = field(default_factory=dict)


EPISODE_ENV = "MLSANDBOX_EPISODE"
NO_TORCH_ENV = "MLSANDBOX_NO_TORCH"
"""Set in the flow runs' environment (:data:`mlsandbox.workloads.flows.NO_TORCH_ENV`): the flows train and
score scikit-learn models only."""
PYTHON_PARAMETER = "python"
"""The parameter of ``training`` and ``batch-scoring`` that names the interpreter they work with."""


class PrefectEpisodeFlows:
    """The :class:`~mlsandbox.backends.protocols.EpisodeFlows` of one episode on a Prefect server.

    The client and the deployments (one per flow, ``ep-<episode>``) are made on the first run.
    ``interpreter`` turns an environment key into the interpreter the run works with (raising
    :class:`~mlsandbox.errors.Unsupported` where runs cannot take one); ``cleanup`` deletes whatever ran
    the episode's flows (called by :meth:`close`).
    """

    def __init__(
        self,
        api_url: str,
        episode_id: str,
        placement: FlowPlacement,
        *,
        interpreter: Callable[[str], str],
        cleanup: Callable[[], object] | None = None,
    ) -> None:
        self.api_url = api_url
        self.episode_id = episode_id
        self.placement = placement
        self._interpreter = interpreter
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._api: PrefectPipelines | None = None
        self._deployments: dict[str, str] = {}
        self._runs: list[str] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"PrefectEpisodeFlows(episode={self.episode_id!r}, pool={self.placement.work_pool!r})"

    # ------------------------------------------------------------------------------------ the protocol

    def run(
        self, flow: str, parameters: dict[str, Any], *, name: str, environment: str | None = None
    ) -> FlowRunView:
        if flow not in FLOWS:
            raise ValueError(f"unknown flow {flow!r}; flows: {', '.join(FLOWS)}")
        params = dict(parameters)
        if environment is not None:
            params[PYTHON_PARAMETER] = self._interpreter(environment)
        api = self._client()
        deployment = self._deployment(flow)
        view = api.run(deployment, params, name=name)
        with self._lock:
            self._runs.append(view.id)
        return view

    def get(self, flow_run_id: str) -> FlowRunView:
        return self._client().get(flow_run_id)

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]:
        return self._client().logs(flow_run_id, limit)

    def log_lines_containing(self, flow_run_id: str, text: str) -> list[str]:
        return self._client().log_lines_containing(flow_run_id, text)

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]:
        return self._client().task_runs(flow_run_id)

    def retry(self, flow_run_id: str) -> FlowRunView:
        return self._client().retry(flow_run_id)

    def cancel(self, flow_run_id: str) -> None:
        self._client().cancel(flow_run_id)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            api, runs, deployments = self._api, list(self._runs), list(self._deployments.values())
            self._api = None
        try:
            if api is not None:
                for run_id in runs:
                    try:
                        if not api.get(run_id).finished:
                            api.cancel(run_id)
                    except Exception as e:  # deleting it below is what matters
                        log.warning("flow run %s: %s", run_id, e)
                    api.delete_flow_run(run_id)
                for deployment in deployments:
                    api.delete_deployment(deployment)
        finally:
            if api is not None:
                api.close()
            if self._cleanup is not None:
                self._cleanup()

    # ----------------------------------------------------------------------------------------- helpers

    def _client(self) -> PrefectPipelines:
        with self._lock:
            if self._closed:
                raise BackendError(f"the flows of episode {self.episode_id} are closed")
            if self._api is None:
                self._api = PrefectPipelines(self.api_url)
            return self._api

    def _deployment(self, flow: str) -> str:
        """The episode's deployment of ``flow``; every flow is deployed at the first call."""
        with self._lock:
            if self._deployments:
                return self._deployments[flow]
            api = self._api
            assert api is not None
            p = self.placement
            env = {**p.env, EPISODE_ENV: self.episode_id, NO_TORCH_ENV: "1"}
            made: dict[str, str] = {}
            try:
                for name in FLOW_ENTRYPOINTS:
                    made[name] = api.deploy(
                        name,
                        f"ep-{self.episode_id}",
                        env,
                        tags=[f"episode:{self.episode_id}"],
                        work_pool=p.work_pool,
                        job_variables=p.job_variables,
                    )
            except Exception as e:
                for deployment in made.values():
                    with contextlib.suppress(Exception):
                        api.delete_deployment(deployment)
                raise BackendError(f"the orchestrator cannot deploy the flows: {e}") from e
            self._deployments = made
            return made[flow]


class PrefectFlows:
    """The :class:`~mlsandbox.backends.protocols.Flows` of a backend that runs a Prefect server at
    ``api_url``: ``placement(labels)`` says where an episode's runs go, ``interpreter(key)`` turns an
    environment key into an interpreter, ``cleanup(labels)`` deletes what ran an episode's flows."""

    def __init__(
        self,
        api_url: str,
        placement: Callable[[Mapping[str, str]], FlowPlacement],
        *,
        interpreter: Callable[[str], str],
        cleanup: Callable[[Mapping[str, str]], object] | None = None,
    ) -> None:
        self.api_url = api_url
        self._placement = placement
        self._interpreter = interpreter
        self._cleanup = cleanup

    def open(self, episode_id: str, labels: dict[str, str]) -> PrefectEpisodeFlows:
        cleanup = self._cleanup
        return PrefectEpisodeFlows(
            self.api_url,
            episode_id,
            self._placement(dict(labels)),
            interpreter=self._interpreter,
            cleanup=(lambda: cleanup(dict(labels))) if cleanup is not None else None,
        )


def no_environments(backend: str, reason: str) -> Callable[[str], str]:
    """An ``interpreter`` for a backend whose flow runs cannot take a named environment."""

    def refuse(key: str) -> str:
        raise Unsupported("flows.environment", backend, reason)

    return refuse


__all__ = [
    "FLOW_ENTRYPOINTS",
    "WORK_POOL",
    "FlowPlacement",
    "PrefectEpisodeFlows",
    "PrefectFlows",
    "PrefectPipelines",
    "no_environments",
]
