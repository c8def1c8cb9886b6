"""The config store: each episode's endpoints and credentials, which its training jobs read and the agent
fixes with ``get_config`` / ``set_config`` (Prefect variables on local and kube, memory on sim)."""

from __future__ import annotations

from typing import Protocol


class ConfigStore(Protocol):
    def get(self, name: str) -> str | None: ...
    def set(self, name: str, value: str) -> None: ...
    def delete(self, name: str) -> None: ...

    def names(self, prefix: str) -> list[str]:
        """Every name starting with ``prefix``."""
        ...

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        """Write an episode's values under ``prefix`` (remembered, so a crash leaves none behind)."""
        ...

    def close_scope(self, prefix: str) -> None:
        """Delete every name under ``prefix`` (idempotent)."""
        ...

    def references(self) -> dict[str, str]:
        """What ``@service:NAME`` and ``@secret:NAME`` references resolve to for this sandbox's jobs
        (``@service:minio`` -> the object store's address as jobs reach it, ...)."""
        ...
