"""In-memory implementations of the data-source, flows, config and environments capabilities, and a
runtime around them, for unit tests of the sources, flows, config and compute packs through the real
Gateway. No thread, socket or process; time is a virtual clock (:class:`fault_fakes.ManualClock`).

- :class:`MemorySourceHosting` implements :class:`~mlsandbox.backends.protocols.SourceHosting` whole: the
  API source answers like the real one (bearer token, a token bucket of ``burst`` requests refilled at
  ``rate_limit_per_s`` on the clock with ``Retry-After``, JSON and CSV pages with ``X-Next-Page``, an HTTP
  fault answering its status first); PostgreSQL keeps roles and tables and refuses a wrong password or a
  stopped server with the client's texts.
- :class:`MemoryFlows` implements :class:`~mlsandbox.backends.protocols.Flows`: runs are records whose
  state the test moves (:meth:`MemoryFlows.finish`), with their log lines.
- :class:`MemoryConfig` and :class:`MemoryEnvironments`: the config store and environments.
- :class:`MemoryRuntime`: those, an object store and the parts of tracking an episode's start and end use
  (the rest refused with :class:`~mlsandbox.errors.Unsupported`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tests.unit.fault_fakes import ManualClock

from mlsandbox.backends.protocols import (
    DEFAULT_KEY,
    REFERENCES,
    ApiDataset,
    ApiProbe,
    EnvironmentInfo,
    FlowRunView,
    HttpAnswer,
    HttpFault,
    ModelVersionInfo,
    ObjectInfo,
    ServiceHealth,
    SourceError,
    SourceProbe,
    Support,
    TableRows,
    TaskRunView,
)
from mlsandbox.backends.protocols.runtime import random_episode_id
from mlsandbox.backends.protocols.sources import API_SOURCE, POSTGRES
from mlsandbox.errors import Unsupported

BACKEND = "memory"


# ------------------------------------------------------------------------------------------- sources


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Table:
    owner: str
    name: str
    frame: pd.DataFrame


class MemorySourceServers:
    """The sandbox's source servers (shared by its episodes)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.running = {API_SOURCE: False, POSTGRES: False}
        self.datasets: dict[str, tuple[ApiDataset, pd.DataFrame]] = {}
        self.buckets: dict[tuple[str, str], _Bucket] = {}
        self.faults: dict[tuple[str, str], HttpFault] = {}
        """(episode, target name) -> the HTTP fault set on the API source through it."""
        self.hooks: dict[tuple[str, str], str] = {}
        """(episode, target name) -> the dataset it names."""
        self.roles: dict[str, str] = {}
        self.databases: dict[str, _Table] = {}
        self.logs: dict[str, list[str]] = {API_SOURCE: [], POSTGRES: []}
        self.requests = 0

    def start(self, service: str) -> None:
        if not self.running[service]:
            self.running[service] = True
            self.logs[service].append(f"{service} started")

    def stop(self, service: str) -> bool:
        was = self.running[service]
        self.running[service] = False
        if was:
            self.logs[service].append(f"{service} shut down")
        return was

    def fault(self) -> HttpFault | None:
        return next(iter(self.faults.values()), None)


def _answer(status: int, body: Any, headers: dict[str, str] | None = None) -> HttpAnswer:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpAnswer(status=status, headers={k.lower(): v for k, v in (headers or {}).items()}, body=data)


class MemoryEpisodeSources:
    """One episode's view of :class:`MemorySourceServers` (see the protocol)."""

    def __init__(self, servers: MemorySourceServers, episode_id: str) -> None:
        self.servers = servers
        self.episode_id = episode_id
        self.published: dict[str, str] = {}
        self.created: dict[str, str] = {}
        self.closed = False

    # api
    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        self.servers.start(API_SOURCE)
        self.servers.datasets[dataset.dataset_id] = (dataset, pd.read_parquet(io.BytesIO(parquet)))
        self.servers.hooks[(self.episode_id, dataset.name)] = dataset.dataset_id
        self.published[dataset.dataset_id] = dataset.name

    def update_access(self, dataset: ApiDataset) -> None:
        if dataset.dataset_id not in self.servers.datasets:
            raise KeyError(dataset.dataset_id)
        rows = self.servers.datasets[dataset.dataset_id][1]
        self.servers.datasets[dataset.dataset_id] = (dataset, rows)

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        s = self.servers
        if not s.running[API_SOURCE]:
            raise SourceError("unavailable", "cannot reach memory://api-source: ConnectError: refused")
        s.requests += 1
        fault = s.fault()
        if fault is not None and fault.error_rate >= 1.0:
            return _answer(fault.status, {"error": "injected", "message": f"injected fault {fault.status}"})
        found = s.datasets.get(dataset_id)
        if found is None:
            return _answer(404, {"error": "not_found", "message": f"no dataset {dataset_id!r}"})
        meta, frame = found
        if token != meta.token:
            return _answer(401, {"error": "unauthorized", "message": "missing or invalid bearer token"})
        now = s.clock.monotonic()
        bucket = s.buckets.setdefault((dataset_id, token), _Bucket(meta.burst, now))
        bucket.tokens = min(meta.burst, bucket.tokens + (now - bucket.at) * meta.rate_limit_per_s)
        bucket.at = now
        if bucket.tokens < 1.0:
            retry = max(1, math.ceil((1.0 - bucket.tokens) / meta.rate_limit_per_s))
            message = {"error": "rate_limited", "message": f"retry after {retry} s"}
            return _answer(429, message, {"Retry-After": str(retry)})
        bucket.tokens -= 1.0
        page, size = int(params.get("page", 1)), int(params.get("page_size", 500))
        if not 1 <= size <= meta.max_page_size:
            return _answer(400, {"error": "invalid_page_size", "message": "bad page size"})
        pages = max(1, math.ceil(len(frame) / size))
        chunk = frame.iloc[(page - 1) * size : page * size]
        nxt = page + 1 if page < pages else None
        if params.get("format") == "csv":
            headers = {"X-Total-Rows": str(len(frame))}
            if nxt is not None:
                headers["X-Next-Page"] = str(nxt)
            return _answer(200, chunk.to_csv(index=False).encode(), headers)
        records = json.loads(chunk.to_json(orient="records"))
        return _answer(200, {"total_rows": len(frame), "next_page": nxt, "records": records})

    # postgres
    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        self.servers.start(POSTGRES)
        self.servers.roles[role] = password
        self.servers.databases[database] = _Table(role, table, pd.read_parquet(io.BytesIO(parquet)))
        self.created[database] = role

    def set_password(self, role: str, password: str) -> None:
        self.servers.roles[role] = password

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        s = self.servers
        if not s.running[POSTGRES]:
            raise SourceError("unavailable", "connection to server at memory failed: Connection refused")
        if s.roles.get(user) != password:
            raise SourceError("auth", f'password authentication failed for user "{user}"')
        found = s.databases[database]
        rows = found.frame if limit is None else found.frame.head(limit)
        buf = io.BytesIO()
        rows.to_parquet(buf, index=False)
        return TableRows(parquet=buf.getvalue(), total_rows=len(found.frame))

    # services
    def address(self, service: str) -> str:
        return f"memory://{service}"

    def health(self, probe: SourceProbe) -> ServiceHealth:
        s = self.servers
        service = API_SOURCE if isinstance(probe, ApiProbe) else POSTGRES
        if not s.running[service]:
            return ServiceHealth(service=service, healthy=False, error="ConnectError: refused")
        if isinstance(probe, ApiProbe) and s.fault() is not None:
            return ServiceHealth(service=service, healthy=False, error="HTTP 503: injected")
        return ServiceHealth(service=service, healthy=True, latency_ms=1.0)

    def stop(self, service: str) -> bool:
        return self.servers.stop(service)

    def start(self, service: str) -> None:
        self.servers.start(service)

    def restart(self, service: str) -> None:
        self.servers.stop(service)
        if service == API_SOURCE:
            self.servers.faults.clear()
        self.servers.start(service)

    def logs(self, service: str, tail: int = 50) -> str:
        return "\n".join(self.servers.logs[service][-tail:])

    def close(self) -> None:
        s = self.servers
        for dataset_id, name in self.published.items():
            s.datasets.pop(dataset_id, None)
            s.hooks.pop((self.episode_id, name), None)
            s.faults.pop((self.episode_id, name), None)
        for database, role in self.created.items():
            s.databases.pop(database, None)
            s.roles.pop(role, None)
        self.published, self.created, self.closed = {}, {}, True


class MemorySourceHosting:
    def __init__(self, clock: ManualClock) -> None:
        self.servers = MemorySourceServers(clock)
        self.opened: list[MemoryEpisodeSources] = []

    def open(self, episode_id: str) -> MemoryEpisodeSources:
        found = MemoryEpisodeSources(self.servers, episode_id)
        self.opened.append(found)
        return found


class MemoryFaults:
    """The HTTP faults of the fault control (what the sources pack and ``http:NAME`` plans use)."""

    def __init__(self, servers: MemorySourceServers) -> None:
        self.servers = servers

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        if (episode_id, target) not in self.servers.hooks:
            raise KeyError(f"no HTTP service {target!r}")
        self.servers.faults[(episode_id, target)] = fault

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        self.servers.faults.pop((episode_id, target), None)

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        return (episode_id, target) in self.servers.faults

    def recover_all(self) -> list[str]:
        return []


# --------------------------------------------------------------------------------------------- flows


@dataclass
class MemoryRun:
    view: FlowRunView
    environment: str | None
    logs: list[str] = field(default_factory=list)
    deleted: bool = False


class MemoryEpisodeFlows:
    def __init__(self, flows: MemoryFlows, episode_id: str, labels: dict[str, str]) -> None:
        self.flows = flows
        self.episode_id = episode_id
        self.labels = labels
        self.closed = False

    def run(
        self, flow: str, parameters: dict[str, Any], *, name: str, environment: str | None = None
    ) -> FlowRunView:
        if environment is not None:
            self.flows.interpreter(environment)
        run_id = f"run-{len(self.flows.runs) + 1}"
        view = FlowRunView(
            id=run_id,
            name=name,
            flow=flow,
            state_type="SCHEDULED",
            state_name="Scheduled",
            parameters=dict(parameters),
        )
        self.flows.runs[run_id] = MemoryRun(view, environment)
        return view

    def _run(self, flow_run_id: str) -> MemoryRun:
        found = self.flows.runs.get(flow_run_id)
        if found is None or found.deleted:
            raise KeyError(f"flow run {flow_run_id} does not exist")
        return found

    def get(self, flow_run_id: str) -> FlowRunView:
        return self._run(flow_run_id).view

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]:
        return self._run(flow_run_id).logs[:limit]

    def log_lines_containing(self, flow_run_id: str, text: str) -> list[str]:
        return [line for line in self._run(flow_run_id).logs if text in line]

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]:
        run = self._run(flow_run_id)
        return [TaskRunView(name="pull-0", state_type=run.view.state_type, state_name=run.view.state_name)]

    def retry(self, flow_run_id: str) -> FlowRunView:
        run = self._run(flow_run_id)
        run.view = run.view.model_copy(update={"state_type": "SCHEDULED", "state_name": "AwaitingRetry"})
        return run.view

    def cancel(self, flow_run_id: str) -> None:
        run = self._run(flow_run_id)
        run.view = run.view.model_copy(update={"state_type": "CANCELLED", "state_name": "Cancelled"})

    def close(self) -> None:
        for run in self.flows.runs.values():
            if not run.view.finished:
                run.view = run.view.model_copy(update={"state_type": "CANCELLED", "state_name": "Cancelled"})
            run.deleted = True
        self.closed = True


class MemoryFlows:
    def __init__(self, interpreter: Callable[[str], str]) -> None:
        self.interpreter = interpreter
        self.runs: dict[str, MemoryRun] = {}
        self.opened: list[MemoryEpisodeFlows] = []

    def open(self, episode_id: str, labels: dict[str, str]) -> MemoryEpisodeFlows:
        found = MemoryEpisodeFlows(self, episode_id, dict(labels))
        self.opened.append(found)
        return found

    def finish(self, run_id: str, state: str, *, logs: list[str] = (), run_count: int = 1) -> None:  # type: ignore[assignment]
        """Move a run to a final state (``COMPLETED``, ``FAILED``...) with its log lines."""
        run = self.runs[run_id]
        run.logs += list(logs)
        run.view = run.view.model_copy(
            update={"state_type": state, "state_name": state.title(), "run_count": run_count}
        )


# ------------------------------------------------------------------------------------ config, envs


class MemoryConfig:
    """Config values in memory; the job config is the fake sandbox's endpoints."""

    JOB_CONFIG = {
        "s3_endpoint_url": "memory://s3",
        "s3_access_key_id": "memory-access",
        "s3_secret_access_key": "memory-secret-key-1234",
        "mlflow_tracking_uri": "memory://mlflow",
    }

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.scopes: set[str] = set()

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        self.values[name] = value

    def delete(self, name: str) -> None:
        self.values.pop(name, None)

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self.values if n.startswith(prefix))

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        self.scopes.add(prefix)
        for key, value in values.items():
            self.set(prefix + key, value)

    def close_scope(self, prefix: str) -> None:
        for name in self.names(prefix):
            self.delete(name)
        self.scopes.discard(prefix)

    def job_config(self) -> dict[str, str]:
        return dict(self.JOB_CONFIG)

    def references(self) -> dict[str, str]:
        return {ref: self.JOB_CONFIG[key] for ref, key in REFERENCES.items()}


class MemoryEnvironments:
    """Environments as records: a requirement naming ``nothing-such`` cannot be installed."""

    def __init__(self) -> None:
        self.built: dict[str, EnvironmentInfo] = {}

    def default(self) -> EnvironmentInfo:
        return EnvironmentInfo(key=DEFAULT_KEY, requirements=[], packages={"scikit-learn": "9.9.9"})

    def build(self, requirements: list[str]) -> EnvironmentInfo:
        from mlsandbox.backends.protocols import EnvironmentBuildError

        if any("://" in r or "@" in r for r in requirements):
            raise ValueError(f"only names with version specifiers are allowed: {requirements}")
        if any(r.startswith("nothing-such") for r in requirements):
            raise EnvironmentBuildError("No solution found when resolving dependencies")
        key = hashlib.sha256(json.dumps(sorted(requirements)).encode()).hexdigest()[:16]
        pins = dict(r.split("==", 1) for r in requirements if "==" in r)
        info = EnvironmentInfo(key=key, requirements=sorted(requirements), packages=pins)
        self.built[key] = info
        return info

    def get(self, key: str) -> EnvironmentInfo:
        if key == DEFAULT_KEY:
            return self.default()
        return self.built[key]

    def for_serving(self, env: EnvironmentInfo) -> EnvironmentInfo:
        return env if env.key == DEFAULT_KEY else self.build([*env.requirements, "fastapi"])

    def score(self, key: str, model_name: str, version: str, rows: Any) -> list[float]:
        from mlsandbox.backends.protocols import ModelScoreError

        self.get(key)
        raise ModelScoreError(f"model {model_name!r} version {version}: the fake tracking keeps no models")


# -------------------------------------------------------------------------------------------- runtime


class MemoryObjectStore:
    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, bytes]] = {}

    def create_bucket(self, bucket: str) -> None:
        self.buckets.setdefault(bucket, {})

    def delete_bucket(self, bucket: str) -> None:
        self.buckets.pop(bucket, None)

    def bucket_exists(self, bucket: str) -> bool:
        return bucket in self.buckets

    def list_buckets(self) -> list[str]:
        return sorted(self.buckets)

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        if bucket not in self.buckets:
            raise KeyError(f"bucket {bucket!r} does not exist")
        self.buckets[bucket][key] = bytes(data)

    def get_object(self, bucket: str, key: str) -> bytes:
        try:
            return self.buckets[bucket][key]
        except KeyError:
            raise KeyError(f"object s3://{bucket}/{key} does not exist") from None

    def delete_object(self, bucket: str, key: str) -> None:
        self.buckets.get(bucket, {}).pop(key, None)

    def object_exists(self, bucket: str, key: str) -> bool:
        return key in self.buckets.get(bucket, {})

    def list_objects(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        if bucket not in self.buckets:
            raise KeyError(f"bucket {bucket!r} does not exist")
        return [
            ObjectInfo(key=k, size=len(v), last_modified=0.0)
            for k, v in sorted(self.buckets[bucket].items())
            if k.startswith(prefix)
        ]


class MemoryTracking:
    """Experiments and registered versions; what an episode's start, flows and end need."""

    def __init__(self) -> None:
        self.experiments: dict[str, str] = {}
        self.versions: list[ModelVersionInfo] = []

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str:
        experiment_id = str(len(self.experiments) + 1)
        self.experiments[experiment_id] = name
        return experiment_id

    def delete_experiment(self, experiment_id: str) -> None:
        self.experiments.pop(experiment_id, None)

    def list_model_versions(self, name_prefix: str) -> list[ModelVersionInfo]:
        return [v for v in self.versions if v.name.startswith(name_prefix)]

    def delete_registered_model(self, name: str) -> None:
        self.versions = [v for v in self.versions if v.name != name]

    def __getattr__(self, name: str) -> Any:
        raise Unsupported(f"tracking.{name}", BACKEND, "this fake tracks experiments and versions only")


class NoJobs:
    def list(self, label: Any = None) -> list[Any]:
        return []

    def cleanup(self, label: Any) -> None:
        pass


class MemoryAudit:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        self.records.append(record)

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("episode") == episode_id]

    def location(self, episode_id: str) -> str | None:
        return None


class MemoryRuntime:
    """The capabilities the sources, flows, config and compute packs use, in memory."""

    backend = BACKEND
    sandbox = "memory"

    def __init__(self, *, sources: Any = None, flows: Any = None, environments: Any = None) -> None:
        self.clock = ManualClock()
        self.audit = MemoryAudit()
        self.object_store = MemoryObjectStore()
        self.tracking = MemoryTracking()
        self.jobs = NoJobs()
        self.hosting = MemorySourceHosting(self.clock)
        self.sources = sources if sources is not None else self.hosting
        self.faults = MemoryFaults(self.hosting.servers)
        self.config = MemoryConfig()
        self.environments = environments if environments is not None else MemoryEnvironments()
        self.flows = flows if flows is not None else MemoryFlows(self._interpreter)

    def _interpreter(self, key: str) -> str:
        return f"/envs/{self.environments.get(key).key}/bin/python"

    def support(self) -> Support:
        return Support(backend=BACKEND)

    def new_episode_id(self, seed: int) -> str:
        return random_episode_id(seed)

    def close(self) -> None:
        pass
