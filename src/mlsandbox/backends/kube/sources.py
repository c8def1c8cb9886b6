"""Data-source hosting on the kube backend: lake sources only, for now.

Lake batches are objects in the episode's bucket and need no host, so they work here as everywhere. The
HTTP API source and PostgreSQL would be pods of the sandbox's namespace (a Deployment and a Service each,
the episode's datasets and databases made through them); until they are, every operation on them raises
:class:`~mlsandbox.errors.Unsupported` (``sources.api``, ``sources.postgres``), which the gateway turns into
an ``unsupported`` error, and an episode whose scenario has such a source does not start.
"""

from __future__ import annotations

from typing import NoReturn

from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.backends.protocols.sources import (
    API_SOURCE,
    POSTGRES,
    SUPPORT_KEYS,
    ApiDataset,
    ApiProbe,
    HttpAnswer,
    SourceProbe,
    TableRows,
)
from mlsandbox.errors import Unsupported

BACKEND = "kube"
REASON = (
    "the HTTP API and PostgreSQL sources do not run as pods of the sandbox yet "
    "(lake sources, which need only the object store, do)"
)
UNSUPPORTED: dict[str, str] = {key: REASON for key in SUPPORT_KEYS.values()}
"""What :meth:`KubeRuntime.support` says of the sources (support key -> reason)."""


def _refuse(service: str) -> NoReturn:
    raise Unsupported(SUPPORT_KEYS.get(service, "sources"), BACKEND, REASON)


class KubeEpisodeSources:
    """An episode's source servers on kube: none can be hosted yet (see the module)."""

    def __init__(self, episode_id: str) -> None:
        self.episode_id = episode_id

    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        _refuse(API_SOURCE)

    def update_access(self, dataset: ApiDataset) -> None:
        _refuse(API_SOURCE)

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        _refuse(API_SOURCE)

    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        _refuse(POSTGRES)

    def set_password(self, role: str, password: str) -> None:
        _refuse(POSTGRES)

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        _refuse(POSTGRES)

    def address(self, service: str) -> str:
        _refuse(service)

    def health(self, probe: SourceProbe) -> ServiceHealth:
        _refuse(API_SOURCE if isinstance(probe, ApiProbe) else POSTGRES)

    def stop(self, service: str) -> bool:
        _refuse(service)

    def start(self, service: str) -> None:
        _refuse(service)

    def restart(self, service: str) -> None:
        _refuse(service)

    def logs(self, service: str, tail: int = 50) -> str:
        _refuse(service)

    def close(self) -> None:
        """Nothing was published or created."""


class KubeSourceHosting:
    """The :class:`~mlsandbox.backends.protocols.SourceHosting` of the kube backend."""

    def open(self, episode_id: str) -> KubeEpisodeSources:
        return KubeEpisodeSources(episode_id)


__all__ = ["REASON", "UNSUPPORTED", "KubeEpisodeSources", "KubeSourceHosting"]
