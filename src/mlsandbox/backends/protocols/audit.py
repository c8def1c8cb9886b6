"""Where the audit log of each episode goes (every step, as JSON): a file per episode under the sandbox's
directory on local, under the client's state directory on kube, memory or a directory on sim."""

from __future__ import annotations

from typing import Any, Protocol


class AuditLog(Protocol):
    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        """Append one JSON-able record to the episode's log."""
        ...

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        """Every record of the episode's log, oldest first (empty when there is none; a record being
        written is not there yet)."""
        ...

    def episodes(self) -> list[str]:
        """The episodes with a log, least recently written first (the last one is the latest)."""
        ...

    def location(self, episode_id: str) -> str | None:
        """Where a person finds the episode's log (a file path), None when it is kept in memory only."""
        ...
