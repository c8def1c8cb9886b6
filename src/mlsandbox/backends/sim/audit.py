"""The audit log of a ``sim`` sandbox: in memory (:class:`MemoryAuditLog`), or files in a directory
(the shared :class:`~mlsandbox.backends.common.audit.FileAuditLog`) when the config names one, so people
can watch sim episodes with ``mlsandbox watch``.

In memory, a record is kept as given (the gateway builds a fresh dict each step): nothing is serialised,
so the log costs next to nothing per step; :meth:`MemoryAuditLog.read` returns JSON-safe copies.
``max_records`` bounds what one episode keeps (the oldest go first).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any


class MemoryAuditLog:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.AuditLog`)."""

    def __init__(self, max_records: int = 10_000, max_episodes: int = 64) -> None:
        self.max_records = max_records
        self.max_episodes = max_episodes
        self._logs: dict[str, deque[dict[str, Any]]] = {}

    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        log = self._logs.pop(episode_id, None)
        if log is None:
            log = deque(maxlen=self.max_records)
            while len(self._logs) >= self.max_episodes:  # forget the least recently written
                self._logs.pop(next(iter(self._logs)))
        log.append(record)
        self._logs[episode_id] = log  # latest last

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        return [
            json.loads(json.dumps(r, default=str, sort_keys=True)) for r in self._logs.get(episode_id, ())
        ]

    def episodes(self) -> list[str]:
        return list(self._logs)

    def location(self, episode_id: str) -> str | None:
        return None

    def __repr__(self) -> str:
        return f"MemoryAuditLog(episodes={len(self._logs)})"


__all__ = ["MemoryAuditLog"]
