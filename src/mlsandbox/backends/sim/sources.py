"""Data-source hosting of a ``sim`` sandbox: the HTTP API source and "PostgreSQL" in memory.

The API source answers as :mod:`mlsandbox.workloads.api_source` does, byte for byte where the connector
reads bytes: pages of JSON or CSV, a bearer token (401 with ``WWW-Authenticate``), a token bucket per
(dataset, token) refilled on the virtual clock (429 with ``Retry-After`` in whole seconds), 400 for a bad
page or page size, 404 for an unknown dataset, and the episode's HTTP fault (503 with the fault hook's
body) before all that. "PostgreSQL" keeps databases owned by login roles with passwords and a table of
rows each; a query as the wrong password, as an unknown role, on an unknown database or table, or on a
stopped server fails with the PostgreSQL client's texts (the calibration's), classified as on local.

The servers are the sandbox's, started on an episode's first use (their start is charged to the clock),
shared by its episodes; what an episode publishes or creates goes with :meth:`SimEpisodeSources.close`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from mlsandbox.backends.protocols import (
    ApiDataset,
    ApiProbe,
    HttpAnswer,
    ServiceHealth,
    SourceError,
    SourceProbe,
    TableRows,
)
from mlsandbox.backends.protocols.sources import API_SOURCE, POSTGRES, SOURCE_SERVICES
from mlsandbox.backends.sim.world import SimWorld
from mlsandbox.errors import ServiceStartError

if TYPE_CHECKING:
    from mlsandbox.backends.sim.faults import HttpTargets

START_S = {API_SOURCE: 1.2, POSTGRES: 2.5}
"""Seconds a source server takes to start (estimates of the local servers' start)."""
REQUEST_S = {API_SOURCE: 0.004, POSTGRES: 0.006}
DEFAULT_PAGE_SIZE = 500
_PG_TYPES = {"i": "bigint", "u": "bigint", "f": "double precision", "b": "boolean"}


@dataclass
class _Api:
    table: pa.Table
    dataset: ApiDataset
    episode: str


@dataclass
class _Database:
    owner: str
    table: str
    rows: pa.Table
    episode: str


@dataclass
class _Server:
    state: str = "stopped"
    """``stopped`` (never started, or stopped), ``running`` or ``frozen``."""
    started: bool = False
    log: list[str] = field(default_factory=list)


class SimSourceHosting:
    """The sandbox's source servers (:class:`~mlsandbox.backends.protocols.SourceHosting`)."""

    def __init__(self, world: SimWorld, http: HttpTargets) -> None:
        self.world = world
        self.http = http
        self.servers: dict[str, _Server] = {s: _Server() for s in SOURCE_SERVICES}
        self.api: dict[str, _Api] = {}
        self.buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self.roles: dict[str, str] = {}
        self.databases: dict[str, _Database] = {}

    def open(self, episode_id: str) -> SimEpisodeSources:
        return SimEpisodeSources(self, episode_id)

    # --------------------------------------------------------------------------- servers as services

    def known_services(self) -> tuple[str, ...]:
        return SOURCE_SERVICES

    def running_services(self) -> list[str]:
        """The source servers started so far (services of the sandbox from then on)."""
        return [s for s in SOURCE_SERVICES if self.servers[s].started]

    def ensure(self, service: str) -> None:
        server = self.servers[service]
        if server.state == "running":
            return
        if server.state == "frozen":
            return
        self.world.clock.charge(START_S[service])
        server.state = "running"
        server.started = True
        stamp = self.world.timestamp()
        if service == POSTGRES:
            server.log += [
                f"{stamp} LOG:  starting PostgreSQL",
                f'{stamp} LOG:  listening on IPv4 address "{self.world.address.hosts[POSTGRES]}", port {self.world.address.ports[POSTGRES]}',
                f"{stamp} LOG:  database system is ready to accept connections",
            ]
        else:
            server.log += [
                f"{stamp} INFO:     Started server process",
                f"{stamp} INFO:     Uvicorn running on http://{self.world.address.hosts[API_SOURCE]}:{self.world.address.ports[API_SOURCE]}",
            ]

    def stop(self, service: str) -> bool:
        server = self.servers[service]
        was = server.state == "running"
        if server.state != "stopped":
            server.state = "stopped"
            stamp = self.world.timestamp()
            if service == POSTGRES:
                server.log.append(f"{stamp} LOG:  received immediate shutdown request")
        return was

    def freeze(self, service: str) -> None:
        if self.servers[service].state == "running":
            self.servers[service].state = "frozen"

    def thaw(self, service: str) -> None:
        if self.servers[service].state == "frozen":
            self.servers[service].state = "running"

    def restart(self, service: str) -> None:
        self.stop(service)
        self.ensure(service)
        if service == API_SOURCE:  # a restarted API source comes back without its injected faults
            for (_, name), target in self.http.targets.items():
                if any(a.dataset.name == name for a in self.api.values()):
                    target.fault = None
        if self.servers[service].state != "running":
            raise ServiceStartError(f"{service} did not come back")

    def logs(self, service: str, tail: int = 50) -> str:
        lines = self.servers[service].log
        chosen = lines if tail <= 0 else lines[-tail:]
        return "".join(line + "\n" for line in chosen)

    def service_health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        """A probe of the server as the sandbox's admin (``restart_service`` and ``get_service_health``
        through fault control)."""
        server = self.servers[service]
        if not server.started:
            return ServiceHealth(service=service, healthy=False, error="not started")
        if server.state == "frozen":
            self.world.clock.charge(timeout)
            return ServiceHealth(service=service, healthy=False, error=f"timed out after {timeout:g} s")
        if server.state != "running":
            return ServiceHealth(service=service, healthy=False, error=self._down_error(service))
        self.world.clock.charge(REQUEST_S[service])
        return ServiceHealth(service=service, healthy=True, latency_ms=REQUEST_S[service] * 1000)

    def _down_error(self, service: str) -> str:
        if service == POSTGRES:
            text = self.world.calibration.errors["sources.postgres_unreachable"].text
            return "OperationalError: " + " ".join(
                text.format(
                    host=self.world.address.hosts[POSTGRES], port=self.world.address.ports[POSTGRES]
                ).split()
            )
        return "ConnectError: [Errno 111] Connection refused"

    # ------------------------------------------------------------------------------------------- api

    def api_answer(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, episode: str
    ) -> HttpAnswer:
        entry = self.api.get(dataset_id)
        if entry is not None:
            target = self.http.get(entry.episode, entry.dataset.name)
            if target is not None:
                status, delay = target.draw()
                self.world.clock.charge(delay)
                if status is not None:
                    body = json.dumps({"error": "internal fault", "status": status}).encode()
                    return HttpAnswer(
                        status=status,
                        headers={"content-type": "application/json", "content-length": str(len(body))},
                        body=body,
                    )
        if entry is None:
            return _json(404, {"error": "not_found", "message": f"no dataset {dataset_id!r}"})
        expected = entry.dataset.token
        if not token or token.strip() != expected:
            return _json(
                401,
                {"error": "unauthorized", "message": "missing or invalid bearer token"},
                {"www-authenticate": 'Bearer realm="mlsandbox", error="invalid_token"'},
            )
        wait = self._take(dataset_id, token.strip(), entry.dataset)
        if wait is not None:
            retry = max(1, math.ceil(wait))
            return _json(
                429,
                {"error": "rate_limited", "message": f"rate limit exceeded; retry after {retry} s"},
                {"retry-after": str(retry)},
            )
        try:
            page = int(params.get("page", 1))
            page_size = int(params.get("page_size", DEFAULT_PAGE_SIZE))
        except (TypeError, ValueError):
            return _json(
                422, {"detail": [{"loc": ["query", "page"], "msg": "Input should be a valid integer"}]}
            )
        fmt = str(params.get("format", "json"))
        max_page = entry.dataset.max_page_size
        if not 1 <= page_size <= max_page:
            return _json(
                400, {"error": "invalid_page_size", "message": f"page_size must be within 1..{max_page}"}
            )
        total = entry.table.num_rows
        pages = max(1, math.ceil(total / page_size))
        if not 1 <= page <= pages:
            return _json(400, {"error": "invalid_page", "message": f"page must be within 1..{pages}"})
        chunk = entry.table.slice((page - 1) * page_size, page_size)
        next_page = page + 1 if page < pages else None
        if fmt == "csv":
            from mlsandbox.data.formats import to_bytes

            body = to_bytes(chunk, "csv")
            headers = {
                "content-type": "text/csv; charset=utf-8",
                "x-total-rows": str(total),
                "x-total-pages": str(pages),
            }
            if next_page is not None:
                headers["x-next-page"] = str(next_page)
            headers["content-length"] = str(len(body))
            return HttpAnswer(status=200, headers=headers, body=body)
        if fmt != "json":
            return _json(400, {"error": "invalid_format", "message": "format must be json or csv"})
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in chunk.to_pylist()]
        return _json(
            200,
            {
                "dataset": dataset_id,
                "page": page,
                "page_size": page_size,
                "total_rows": total,
                "total_pages": pages,
                "next_page": next_page,
                "records": rows,
            },
        )

    def _take(self, dataset_id: str, token: str, dataset: ApiDataset) -> float | None:
        rate = float(dataset.rate_limit_per_s)
        burst = float(dataset.burst)
        now = self.world.clock.monotonic()
        tokens, at = self.buckets.get((dataset_id, token), (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens >= 1.0:
            self.buckets[(dataset_id, token)] = (tokens - 1.0, now)
            return None
        self.buckets[(dataset_id, token)] = (tokens, now)
        return (1.0 - tokens) / rate


class SimEpisodeSources:
    """One episode's view of the source servers (:class:`~mlsandbox.backends.protocols.EpisodeSources`)."""

    def __init__(self, hosting: SimSourceHosting, episode_id: str) -> None:
        self.hosting = hosting
        self.episode_id = episode_id
        self.world = hosting.world
        self._published: dict[str, str] = {}
        self._databases: dict[str, str] = {}

    # ------------------------------------------------------------------------------------------- api

    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        h = self.hosting
        h.ensure(API_SOURCE)
        if h.servers[API_SOURCE].state != "running":
            raise SourceError("unavailable", self._unreachable(API_SOURCE, dataset.dataset_id))
        table = pq.read_table(pa.BufferReader(parquet))
        h.api[dataset.dataset_id] = _Api(table, dataset, self.episode_id)
        self._published[dataset.dataset_id] = dataset.name
        h.http.register(self.episode_id, dataset.name)
        self.world.clock.charge(0.002 + len(parquet) / 200e6)

    def update_access(self, dataset: ApiDataset) -> None:
        entry = self.hosting.api.get(dataset.dataset_id)
        if entry is None:
            raise KeyError(f"dataset {dataset.dataset_id!r} is not published")
        entry.dataset = dataset

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        h = self.hosting
        server = h.servers[API_SOURCE]
        if server.state == "frozen":
            self.world.clock.charge(timeout_s)
            url = f"http://{self.world.address.hosts[API_SOURCE]}:{self.world.address.ports[API_SOURCE]}/v1/datasets/{dataset_id}/records"
            raise SourceError("unavailable", f"cannot reach {url}: ReadTimeout: timed out")
        if server.state != "running":
            raise SourceError("unavailable", self._unreachable(API_SOURCE, dataset_id))
        self.world.clock.charge(REQUEST_S[API_SOURCE])
        return h.api_answer(dataset_id, params, token, self.episode_id)

    def _unreachable(self, service: str, dataset_id: str = "") -> str:
        errors = self.world.calibration.errors
        if service == API_SOURCE:
            return errors["sources.api_unreachable"].text.format(
                host=self.world.address.hosts[API_SOURCE],
                port=self.world.address.ports[API_SOURCE],
                dataset=dataset_id,
            )
        return " ".join(
            errors["sources.postgres_unreachable"]
            .text.format(host=self.world.address.hosts[POSTGRES], port=self.world.address.ports[POSTGRES])
            .split()
        )

    # -------------------------------------------------------------------------------------- postgres

    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        h = self.hosting
        h.ensure(POSTGRES)
        if h.servers[POSTGRES].state != "running":
            raise SourceError("unavailable", self._unreachable(POSTGRES))
        if role in h.roles:
            raise SourceError("error", f'DuplicateObject: role "{role}" already exists')
        if database in h.databases:
            raise SourceError("error", f'DuplicateDatabase: database "{database}" already exists')
        h.roles[role] = password
        rows = pq.read_table(pa.BufferReader(parquet))
        h.databases[database] = _Database(role, table, rows, self.episode_id)
        self._databases[database] = role
        self.world.clock.charge(0.05 + rows.num_rows * 2e-6)

    def set_password(self, role: str, password: str) -> None:
        h = self.hosting
        if h.servers[POSTGRES].state != "running":
            raise SourceError("unavailable", self._unreachable(POSTGRES))
        if role not in h.roles:
            raise SourceError("error", f'UndefinedObject: role "{role}" does not exist')
        h.roles[role] = password

    def _connect(self, database: str, user: str, password: str | None, timeout_s: float = 3.0) -> _Database:
        h = self.hosting
        server = h.servers[POSTGRES]
        errors = self.world.calibration.errors
        fill = {
            "host": self.world.address.hosts[POSTGRES],
            "port": self.world.address.ports[POSTGRES],
            "role": user,
        }
        if server.state == "frozen":
            self.world.clock.charge(timeout_s)
            raise SourceError(
                "unavailable",
                f'connection failed: connection to server at "{self.world.address.hosts[POSTGRES]}", port {self.world.address.ports[POSTGRES]} failed: timeout expired',
            )
        if server.state != "running":
            raise SourceError("unavailable", self._unreachable(POSTGRES))
        self.world.clock.charge(REQUEST_S[POSTGRES])
        if user not in h.roles:
            raise SourceError(
                "unavailable", " ".join(errors["sources.postgres_no_role"].text.format(**fill).split())
            )
        if password != h.roles[user]:
            raise SourceError("auth", " ".join(errors["sources.postgres_auth"].text.format(**fill).split()))
        db = h.databases.get(database)
        if db is None:
            raise SourceError(
                "unavailable",
                f'connection failed: connection to server at "{self.world.address.hosts[POSTGRES]}", port {self.world.address.ports[POSTGRES]} failed: '
                f'FATAL: database "{database}" does not exist',
            )
        return db

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        db = self._connect(database, user, password)
        if table != db.table:
            raise SourceError(
                "error",
                f'UndefinedTable: relation "{table}" does not exist\nLINE 1: SELECT count(*) FROM "{table}"\n'
                "                             ^",
            )
        rows = db.rows if limit is None else db.rows.slice(0, max(0, limit))
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink)
        body = sink.getvalue().to_pybytes()
        self.world.clock.charge(rows.num_rows * 1e-6)
        return TableRows(parquet=body, total_rows=db.rows.num_rows)

    # ------------------------------------------------------------------------------------- services

    def address(self, service: str) -> str:
        _check(service)
        if not self.hosting.servers[service].started:
            return "(not started)"
        return f"{self.world.address.hosts[service]}:{self.world.address.ports[service]}"

    def health(self, probe: SourceProbe) -> ServiceHealth:
        if isinstance(probe, ApiProbe):
            server = self.hosting.servers[API_SOURCE]
            if not server.started:
                return ServiceHealth(service=API_SOURCE, healthy=False, error="not started")
            try:
                answer = self.api_get(
                    probe.dataset_id, {"page": 1, "page_size": 1}, probe.token, timeout_s=5.0
                )
            except SourceError as e:
                error = e.message.split(": ", 1)[1] if e.message.startswith("cannot reach") else e.message
                if "ReadTimeout" in error:
                    error = "timed out after 5 s"
                return ServiceHealth(service=API_SOURCE, healthy=False, error=error)
            if not (200 <= answer.status < 300 or answer.status == 429):
                detail = " ".join(answer.body.decode(errors="replace").split())[:200]
                return ServiceHealth(
                    service=API_SOURCE, healthy=False, error=f"HTTP {answer.status}: {detail}"
                )
            return ServiceHealth(service=API_SOURCE, healthy=True, latency_ms=REQUEST_S[API_SOURCE] * 1000)
        server = self.hosting.servers[POSTGRES]
        if not server.started:
            return ServiceHealth(service=POSTGRES, healthy=False, error="not started")
        try:
            self._connect(probe.database, probe.user, probe.password, timeout_s=5.0)
        except SourceError as e:
            return ServiceHealth(
                service=POSTGRES, healthy=False, error=f"OperationalError: {e.message}"[:300]
            )
        return ServiceHealth(service=POSTGRES, healthy=True, latency_ms=REQUEST_S[POSTGRES] * 1000)

    def stop(self, service: str) -> bool:
        return self.hosting.stop(_check(service))

    def start(self, service: str) -> None:
        self.hosting.ensure(_check(service))

    def restart(self, service: str) -> None:
        self.hosting.restart(_check(service))

    def logs(self, service: str, tail: int = 50) -> str:
        return self.hosting.logs(_check(service), tail)

    def close(self) -> None:
        h = self.hosting
        for dataset_id, name in self._published.items():
            h.api.pop(dataset_id, None)
            h.http.unregister(self.episode_id, name)
            for key in [k for k in h.buckets if k[0] == dataset_id]:
                del h.buckets[key]
        for database, role in self._databases.items():
            h.databases.pop(database, None)
            h.roles.pop(role, None)
        self._published.clear()
        self._databases.clear()


def _check(service: str) -> str:
    if service not in SOURCE_SERVICES:
        raise ValueError(f"unknown source service {service!r}; known: {', '.join(SOURCE_SERVICES)}")
    return service


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _json(status: int, content: Any, headers: dict[str, str] | None = None) -> HttpAnswer:
    """An answer as Starlette's ``JSONResponse`` renders it."""
    body = json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()
    out = {"content-length": str(len(body)), "content-type": "application/json", **(headers or {})}
    return HttpAnswer(status=status, headers=out, body=body)


__all__ = ["SimEpisodeSources", "SimSourceHosting"]
