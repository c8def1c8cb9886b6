"""The audit log in files: one JSON-lines file per episode, ``<dir>/<episode>.jsonl`` (:class:`FileAuditLog`)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

_EPISODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class FileAuditLog:
    """Records appended as JSON lines (keys sorted, anything not JSON written as its ``str``) to a file per
    episode under ``directory``, made on the first append. Safe for several threads of one process; each
    record is one ``write`` of a whole line."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()

    def path(self, episode_id: str) -> Path:
        if not _EPISODE_RE.match(episode_id):
            raise ValueError(f"invalid episode id {episode_id!r} for an audit log file name")
        return self.directory / f"{episode_id}.jsonl"

    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str, sort_keys=True) + "\n"
        path = self.path(episode_id)
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(line)

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        try:
            text = self.path(episode_id).read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # the last line of a log being written by another process
                continue
        return out

    def episodes(self) -> list[str]:
        files = list(self.directory.glob("*.jsonl")) if self.directory.is_dir() else []
        files.sort(key=lambda p: (p.stat().st_mtime, p.name))
        return [p.stem for p in files if _EPISODE_RE.match(p.stem)]

    def location(self, episode_id: str) -> str | None:
        return str(self.path(episode_id))

    def __repr__(self) -> str:
        return f"FileAuditLog({str(self.directory)!r})"


__all__ = ["FileAuditLog"]
