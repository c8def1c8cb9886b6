"""The fault journal of a local sandbox: what a process changed that would outlive its crash.

Every fault mechanism writes an undo record here *before* it makes a change (a toxic, a disabled proxy,
a quota, a SIGSTOP, a cut job limit, burner processes and pinned CPUs, an episode's config variables, a
fault-hook control file) and removes it once the change is undone. The journal of a process is one file,
``<sandbox>/faults/<pid>-<ticks>.json``, rewritten atomically; :func:`read_journals` reads every one of a
sandbox, so the garbage collector can undo the journal of a process that is gone
(:func:`mlsandbox.backends.local.faults.control.undo_stale_journals`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.supervisor import ProcessRecord

JOURNAL_DIR = "faults"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UndoToxic(_Model):
    type: Literal["toxic"] = "toxic"
    endpoint: str
    name: str


class UndoProxyDisabled(_Model):
    type: Literal["proxy_disabled"] = "proxy_disabled"
    endpoint: str


class UndoBucketQuota(_Model):
    type: Literal["bucket_quota"] = "bucket_quota"
    bucket: str


class UndoFrozen(_Model):
    type: Literal["frozen"] = "frozen"
    service: str
    process: ProcessRecord


class UndoKilled(_Model):
    """Nothing to undo (a restart brings it back): marks a service down on purpose, so that the garbage
    collector does not take the sandbox for broken while the process that killed it lives."""

    type: Literal["killed"] = "killed"
    service: str


class UndoJobLimits(_Model):
    type: Literal["job_limits"] = "job_limits"
    job_id: str
    cpu_dir: str | None = None
    cpu_quota_us: int | None = None
    memory_dir: str | None = None
    memory_limit_bytes: int | None = None


class UndoContention(_Model):
    """CPU burners to kill and processes whose CPU affinity to give back."""

    type: Literal["contention"] = "contention"
    burners: list[ProcessRecord] = Field(default_factory=list)
    pinned: list[tuple[ProcessRecord, list[int]]] = Field(default_factory=list)


class UndoConfigScope(_Model):
    """An episode's config variables (every Prefect variable whose name starts with ``prefix``)."""

    type: Literal["config_scope"] = "config_scope"
    prefix: str


class UndoHookFile(_Model):
    """A fault-hook control file of an HTTP service (removed: the service answers normally again)."""

    type: Literal["hook_file"] = "hook_file"
    path: str


Undo = Annotated[
    UndoToxic
    | UndoProxyDisabled
    | UndoBucketQuota
    | UndoFrozen
    | UndoKilled
    | UndoJobLimits
    | UndoContention
    | UndoConfigScope
    | UndoHookFile,
    Field(discriminator="type"),
]


class JournalFile(_Model):
    owner: ProcessRecord
    entries: dict[str, Undo] = Field(default_factory=dict)


_JOURNAL_ADAPTER: TypeAdapter[JournalFile] = TypeAdapter(JournalFile)


class Journal:
    """The undo records of this process for one sandbox (one file, rewritten atomically)."""

    def __init__(self, sandbox_dir: Path) -> None:
        self.owner = ProcessRecord.of(os.getpid())
        self.path = Path(sandbox_dir) / JOURNAL_DIR / f"{self.owner.pid}-{self.owner.start_ticks}.json"
        self._lock = threading.Lock()
        self._data = JournalFile(owner=self.owner)
        if self.path.is_file():
            with contextlib.suppress(ValueError, OSError):
                self._data = JournalFile.model_validate_json(self.path.read_text())

    def add(self, key: str, undo: Undo) -> None:
        with self._lock:
            self._data.entries[key] = undo
            self._write()

    def remove(self, key: str) -> None:
        with self._lock:
            if self._data.entries.pop(key, None) is not None:
                self._write()

    def get(self, key: str) -> Undo | None:
        with self._lock:
            return self._data.entries.get(key)

    def entry_keys(self) -> list[str]:
        with self._lock:
            return list(self._data.entries)

    def entries(self) -> dict[str, Undo]:
        with self._lock:
            return dict(self._data.entries)

    def _write(self) -> None:
        if not self._data.entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_text(self._data.model_dump_json(indent=2))
        os.replace(tmp, self.path)


def read_journals(sandbox_dir: Path) -> list[tuple[Path, JournalFile | None]]:
    """Every journal of a sandbox (None for a file that cannot be read)."""
    root = Path(sandbox_dir) / JOURNAL_DIR
    if not root.is_dir():
        return []
    out: list[tuple[Path, JournalFile | None]] = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append((path, _JOURNAL_ADAPTER.validate_json(path.read_text())))
        except (ValueError, OSError):
            out.append((path, None))
    return out


def killed_on_purpose(sandbox_dir: Path) -> set[str]:
    """Services that a live process killed as a fault (down on purpose, not broken)."""
    return {
        e.service
        for _, journal in read_journals(sandbox_dir)
        if journal is not None and supervisor.is_alive(journal.owner)
        for e in journal.entries.values()
        if isinstance(e, UndoKilled)
    }
