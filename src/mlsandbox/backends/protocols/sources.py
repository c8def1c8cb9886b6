"""Data-source hosting: the HTTP API source and the PostgreSQL server an episode's connectors read from
(processes on local, pods on kube, memory on sim). Lake batches need no host: they are objects written to
the episode's bucket when they arrive.

The connector's logic (paging, waiting out 429s, retrying 5xx, turning errors into the agent's codes) is
the world's; the backend serves the data and answers requests the way the real server does, so the same
faults give the same symptoms everywhere.
"""

from __future__ import annotations

from typing import Literal, Protocol

from mlsandbox.backends.protocols.common import Model
from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.errors import BackendError

API_SOURCE = "api-source"
POSTGRES = "postgres"
SOURCE_SERVICES = (API_SOURCE, POSTGRES)


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
    token: str
    """The bearer token the server accepts."""
    rate_limit_per_s: float
    burst: int
    max_page_size: int


class HttpAnswer(Model):
    status: int
    headers: dict[str, str]
    body: bytes


class TableRows(Model):
    """Rows read from a table: Parquet bytes (column types kept) and the table's total row count."""

    parquet: bytes
    total_rows: int


class EpisodeSources(Protocol):
    """The source servers of one episode (started on first use; shared by the sandbox's episodes)."""

    # -- the HTTP API source ------------------------------------------------------------------------
    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        """Serve the rows (Parquet bytes) under ``dataset.dataset_id`` with its token and rate limit."""
        ...

    def update_access(self, dataset: ApiDataset) -> None:
        """Change a published dataset's token or limits (a credentials rotation)."""
        ...

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        """``GET /v1/datasets/<id>/records`` with a bearer token, as the connector sends it: the server's
        answer whatever its status (401, 429 with Retry-After, 503 from its fault hook);
        :class:`SourceError` ``unavailable`` when the server cannot be reached."""
        ...

    # -- PostgreSQL ---------------------------------------------------------------------------------
    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        """A database owned by a login role, holding ``table`` with the rows."""
        ...

    def set_password(self, role: str, password: str) -> None: ...

    def query(
        self, database: str, user: str, password: str, table: str, *, limit: int | None = None
    ) -> TableRows:
        """Rows of ``table`` as ``user``; :class:`SourceError` (``auth`` for a refused login,
        ``unavailable`` when the server is down) with the client's own message."""
        ...

    def drop_database(self, database: str, role: str | None) -> None: ...

    def address(self, service: str) -> str:
        """Where the agent's messages say the server is (``127.0.0.1:5433``, a Service name)."""
        ...

    # -- the servers as services of the episode ----------------------------------------------------
    def health(self, service: str, *, probe: dict[str, str]) -> ServiceHealth:
        """Probe the server as the episode's client would (``probe``: the client's credentials and what to
        read); unhealthy with the client's error when it fails."""
        ...

    def stop(self, service: str) -> None:
        """Stop the server (its data kept); a connection is refused until :meth:`start`."""
        ...

    def start(self, service: str) -> None: ...

    def restart(self, service: str) -> None:
        """Stop and start the server on its data (same address, data, roles and published datasets)."""
        ...

    def logs(self, service: str, tail: int = 50) -> str: ...

    def close(self) -> None:
        """Remove what the episode published or created (idempotent)."""
        ...


class SourceHosting(Protocol):
    def open(self, episode_id: str) -> EpisodeSources: ...
