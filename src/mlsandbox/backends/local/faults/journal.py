"""The undo journal of a local sandbox: what a process changed or made that would outlive its crash.

Every fault mechanism writes an undo record here *before* it makes a change (a toxic, a disabled proxy,
a quota, a SIGSTOP, a cut job limit, burner processes and pinned CPUs, an episode's config variables, a
fault-hook control file) and removes it once the change is undone. The runtime's clients do the same for
what an episode makes on the shared services (its bucket, MLflow experiment and registered models, Prefect
deployments and flow runs, API-source datasets, PostgreSQL database and role). The journal of a process is one file,
``<sandbox>/faults/<pid>-<ticks>.json``, rewritten atomically; :func:`read_journals` reads every one of a
sandbox, so the garbage collector can undo the journal of a process that is gone
(:func:`mlsandbox.backends.local.faults.control.undo_stale_journals`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.supervisor import ProcessRecord

JOURNAL_DIR = "faults"
log = logging.getLogger(__name__)


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


# ------------------------------------------------------------------ what an episode (or a session) made
# Written by the local runtime's clients when the thing is made and removed when it is deleted, so the
# garbage collector removes what a process that died made on a sandbox that lives on.


class UndoBucket(_Model):
    """A bucket made through the runtime's object store (deleted with everything in it)."""

    type: Literal["bucket"] = "bucket"
    bucket: str


class UndoExperiment(_Model):
    """An MLflow experiment made through the runtime's tracking client (deleted: it leaves the active
    list; MLflow keeps deleted experiments until its garbage collection)."""

    type: Literal["experiment"] = "experiment"
    name: str


class UndoRegisteredModel(_Model):
    """A registered model (every version) made through the runtime's tracking client."""

    type: Literal["registered_model"] = "registered_model"
    name: str


class UndoFlows(_Model):
    """An episode's flows on the Prefect server: its deployments (tagged ``episode:<id>``) and their runs
    (unfinished ones cancelled, then deleted)."""

    type: Literal["flows"] = "flows"
    episode_id: str


class UndoApiDataset(_Model):
    """A dataset an episode published on the API source, and its fault-hook registration."""

    type: Literal["api_dataset"] = "api_dataset"
    dataset_id: str
    source: str
    episode_id: str


class UndoDatabase(_Model):
    """An episode's PostgreSQL database and its login role."""

    type: Literal["database"] = "database"
    database: str
    role: str


Undo = Annotated[
    UndoToxic
    | UndoProxyDisabled
    | UndoBucketQuota
    | UndoFrozen
    | UndoKilled
    | UndoJobLimits
    | UndoContention
    | UndoConfigScope
    | UndoHookFile
    | UndoBucket
    | UndoExperiment
    | UndoRegisteredModel
    | UndoFlows
    | UndoApiDataset
    | UndoDatabase,
    Field(discriminator="type"),
]


class JournalFile(_Model):
    owner: ProcessRecord
    entries: dict[str, Undo] = Field(default_factory=dict)


_JOURNAL_ADAPTER: TypeAdapter[JournalFile] = TypeAdapter(JournalFile)


class _Shared:
    """The one in-memory copy of a journal file in this process (every :class:`Journal` of it shares it,
    so two writers in one process never overwrite each other's records)."""

    def __init__(self, path: Path, owner: ProcessRecord) -> None:
        self.lock = threading.Lock()
        self.data = JournalFile(owner=owner)
        self.unsaved = False
        """The last write failed (a full disk): the file is behind the records in memory."""
        self.deferred: dict[str, Callable[[], object]] = {}
        """Removals that failed, by journal key (see :meth:`Journal.defer`)."""
        if path.is_file():
            with contextlib.suppress(ValueError, OSError):
                self.data = JournalFile.model_validate_json(path.read_text())


_SHARED: dict[tuple[int, Path], _Shared] = {}
_SHARED_LOCK = threading.Lock()


class Journal:
    """The undo records of this process for one sandbox (one file, rewritten atomically). Every Journal of
    the same sandbox in one process shares its records."""

    def __init__(self, sandbox_dir: Path) -> None:
        self.owner = ProcessRecord.of(os.getpid())
        self.path = Path(sandbox_dir) / JOURNAL_DIR / f"{self.owner.pid}-{self.owner.start_ticks}.json"
        key = (self.owner.pid, self.path.resolve())  # by pid too: a forked child has a journal of its own
        with _SHARED_LOCK:
            shared = _SHARED.get(key)
            if shared is None or (shared.data.entries and not shared.unsaved and not self.path.is_file()):
                # (records whose file is gone belong to a sandbox of the same name that was removed)
                shared = _SHARED[key] = _Shared(self.path, self.owner)
        self._shared = shared
        self._lock = shared.lock

    @property
    def _data(self) -> JournalFile:
        return self._shared.data

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

    # ---------------------------------------------------------------------- removals that failed

    def defer(self, key: str, retry: Callable[[], object]) -> None:
        """Remember that removing what ``key`` records failed (a full disk, a service down): ``retry`` is
        called again by :meth:`retry_deferred` (the record stays, so gc removes it if this process dies)."""
        with self._lock:
            self._shared.deferred[key] = retry

    def retry_deferred(self) -> list[str]:
        """Retry every deferred removal once (the local runtime does at each episode start); the keys that
        failed again."""
        with self._lock:
            pending, self._shared.deferred = dict(self._shared.deferred), {}
        failed = []
        for key, retry in pending.items():
            try:
                retry()
            except Exception as e:  # it stays deferred (the retry defers itself again)
                log.info("journal %s: removing %s failed again: %s", self.path.name, key, e)
                failed.append(key)
                with self._lock:
                    self._shared.deferred.setdefault(key, retry)
        return failed

    def _write(self) -> None:
        """Rewrite the file; a write that fails (a full disk) is logged and tried again at the next change:
        the records stay in memory."""
        try:
            if not self._data.entries:
                self.path.unlink(missing_ok=True)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")
                try:
                    tmp.write_text(self._data.model_dump_json(indent=2))
                    os.replace(tmp, self.path)
                finally:
                    tmp.unlink(missing_ok=True)
        except OSError as e:
            if not self._shared.unsaved:
                log.warning("journal %s could not be written: %s", self.path, e)
            self._shared.unsaved = True
            return
        self._shared.unsaved = False


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
