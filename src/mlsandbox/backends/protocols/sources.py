"""Data-source hosting: the HTTP API source and the PostgreSQL server an episode's connectors read from
(processes on local, pods on kube, memory on sim). Lake batches need no host: they are objects written to
the episode's bucket when they arrive.

The connector's logic (paging, waiting out 429s, retrying 5xx, turning errors into the agent's codes,
marking faults detected) is the world's; the backend serves the data and answers requests the way the
real server does (the same statuses, headers and client error texts), so the same faults give the same
symptoms everywhere. Everything crosses the seam as bytes and models: rows as Parquet bytes, answers as
:class:`HttpAnswer`; no path, socket or process is handed out.

Support keys: ``sources.api`` and ``sources.postgres`` (a backend that cannot host one raises
:class:`~mlsandbox.errors.Unsupported` with that capability from every operation on it).
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model
from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.errors import BackendError

API_SOURCE = "api-source"
POSTGRES = "postgres"
SOURCE_SERVICES = (API_SOURCE, POSTGRES)
"""The source servers, by their service names (``get_service_health``, ``restart_service``)."""
SUPPORT_KEYS = {API_SOURCE: "sources.api", POSTGRES: "sources.postgres"}
"""Source server -> its key in :class:`~mlsandbox.backends.protocols.common.Support`."""


class SourceError(BackendError):
    """A request to a source server that failed the way its client sees it: ``kind`` is ``unavailable``
    (connection refused, server down), ``auth`` (login or token refused) or ``error`` (anything else);
    the message is the client library's own text."""

    def __init__(self, kind: Literal["unavailable", "auth", "error"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class ApiDataset(Model):
    """A dataset published on the API source, with its access rules."""

    dataset_id: str
    """Unique among the sandbox's published datasets (``GET /v1/datasets/<dataset_id>/records``)."""
    name: str
    """The source's name in the episode: the server's HTTP fault target for this episode."""
    token: str
    """The bearer token the server accepts."""
    rate_limit_per_s: float
    burst: int
    max_page_size: int


class HttpAnswer(Model):
    """An HTTP answer as the client received it, whatever its status."""

    status: int
    headers: dict[str, str]
    """Header names in lower case (``retry-after``, ``x-next-page``)."""
    body: bytes


class TableRows(Model):
    """Rows read from a table: Parquet bytes (column types kept) and the table's total row count."""

    parquet: bytes
    total_rows: int


class ApiProbe(Model):
    """Probe the API source as the episode's connector: an authenticated GET of one record."""

    type: Literal["api"] = "api"
    dataset_id: str
    token: str | None


class PostgresProbe(Model):
    """Probe PostgreSQL as the episode's connector: ``SELECT 1`` on its database as its role."""

    type: Literal["postgres"] = "postgres"
    database: str
    user: str
    password: str | None


SourceProbe = Annotated[ApiProbe | PostgresProbe, Field(discriminator="type")]


class EpisodeSources(Protocol):
    """The source servers as one episode uses them. The servers are the sandbox's (started on first use,
    shared by its episodes); what the episode publishes or creates is its own and goes with
    :meth:`close`."""

    # -- the HTTP API source ------------------------------------------------------------------------
    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        """Serve the rows (Parquet bytes) under ``dataset.dataset_id`` with its token and rate limit,
        starting the server if needed. The server's HTTP faults are then the target ``dataset.name`` of
        this episode for :meth:`~mlsandbox.backends.protocols.FaultControl.set_http_fault` (what
        ``http:<name>`` plan faults and the ``api_unavailable`` fault use); a restart clears them."""
        ...

    def update_access(self, dataset: ApiDataset) -> None:
        """Change a published dataset's token or limits (a credentials rotation)."""
        ...

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        """``GET /v1/datasets/<id>/records`` with a bearer token, as the connector sends it: the server's
        answer whatever its status (401, 429 with Retry-After, 503 from its fault hook);
        :class:`SourceError` ``unavailable`` (naming where it tried) when the server cannot be reached."""
        ...

    # -- PostgreSQL ---------------------------------------------------------------------------------
    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        """A database owned by a new login role, holding ``table`` with the rows (Parquet bytes),
        starting the server if needed."""
        ...

    def set_password(self, role: str, password: str) -> None:
        """Change a role's password on the server (a credentials rotation)."""
        ...

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        """Rows of ``table`` (the first ``limit``, or all) as ``user``, and the table's row count;
        :class:`SourceError` (``auth`` for a refused login, ``unavailable`` when the server cannot be
        reached, ``error`` for anything else) with the client's own message."""
        ...

    # -- the servers as services of the episode ----------------------------------------------------
    def address(self, service: str) -> str:
        """Where the episode's messages say the server is (``127.0.0.1:5433``, a Service name)."""
        ...

    def health(self, probe: SourceProbe) -> ServiceHealth:
        """Probe the server as the episode's client would; unhealthy with the client's error when the
        probe fails (a 429 of a rate-limited client counts as healthy)."""
        ...

    def stop(self, service: str) -> bool:
        """Stop the server (its data kept): connections are refused until :meth:`start`. True when it
        was running."""
        ...

    def start(self, service: str) -> None:
        """Start the server on its data unless it runs; wait until it answers."""
        ...

    def restart(self, service: str) -> None:
        """Stop and start the server on its data (same address, data, roles and published datasets),
        without an injected API fault; :class:`~mlsandbox.errors.ServiceStartError` when it does not
        come back."""
        ...

    def logs(self, service: str, tail: int = 50) -> str:
        """The last ``tail`` lines of the server's log."""
        ...

    def close(self) -> None:
        """Remove what the episode published or created (datasets, databases and roles, its HTTP fault
        targets); idempotent. The servers keep running."""
        ...


class SourceHosting(Protocol):
    def open(self, episode_id: str) -> EpisodeSources:
        """The episode's view of the source servers (cheap: nothing starts before it is used)."""
        ...


__all__ = [
    "API_SOURCE",
    "POSTGRES",
    "SOURCE_SERVICES",
    "SUPPORT_KEYS",
    "ApiDataset",
    "ApiProbe",
    "EpisodeSources",
    "HttpAnswer",
    "PostgresProbe",
    "SourceError",
    "SourceHosting",
    "SourceProbe",
    "TableRows",
]
