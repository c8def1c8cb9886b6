"""CPU contention on a local sandbox: burner processes competing with a target for one CPU.

The burners (``mlsandbox.workloads.burn``) run as the sandbox's processes (marked like its jobs, so the
garbage collector knows whose they are); with ``pin`` they and the target's processes are pinned to one
CPU (``sched_setaffinity``), so the target gets a fraction of it. The burners and every pinned process's
original affinity are journaled; :func:`undo_contention` kills and restores them for a process that is gone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.faults.journal import Journal, UndoContention
from mlsandbox.backends.local.supervisor import ProcessRecord

BURN_SECONDS = 86400
"""CPU seconds a burner would run for (it is killed long before)."""


@dataclass
class _Contention:
    target: str
    burners: list[subprocess.Popen[bytes]]
    cpu: int | None
    records: list[ProcessRecord]
    pinned: dict[int, tuple[ProcessRecord, list[int]]] = field(default_factory=dict)
    caught: set[str] = field(default_factory=set)
    """What :meth:`Contention.pin` was told the pinned processes belong to (job ids)."""


def _restore_affinity(record: ProcessRecord, cpus: list[int]) -> None:
    if supervisor.is_alive(record):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(record.pid, set(cpus))


class Contention:
    """The burners of each contention ``key`` of one sandbox, and the processes pinned with them."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._active: dict[str, _Contention] = {}
        self._lock = threading.Lock()

    def target(self, key: str) -> str | None:
        with self._lock:
            c = self._active.get(key)
            return None if c is None else c.target

    def start(self, key: str, target: str, workers: int, *, env: Mapping[str, str], pin: bool = True) -> None:
        """Start ``workers`` burners for ``key`` (idempotent) with environment ``env`` (the sandbox's
        process markers), pinned to the last CPU of this process's set when ``pin``."""
        if workers < 1:
            raise ValueError(f"contention needs at least one worker, got {workers}")
        with self._lock:
            if key in self._active:
                return
            cpu = max(os.sched_getaffinity(0)) if pin else None
            argv = [sys.executable, "-m", "mlsandbox.workloads.burn", "--cpu-seconds", str(BURN_SECONDS)]
            burners: list[subprocess.Popen[bytes]] = []
            try:
                for _ in range(workers):
                    proc = subprocess.Popen(
                        argv,
                        env=dict(env),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                    burners.append(proc)
                    if cpu is not None:
                        os.sched_setaffinity(proc.pid, {cpu})
                c = _Contention(target, burners, cpu, [ProcessRecord.of(p.pid) for p in burners])
            except BaseException:
                for proc in burners:
                    proc.kill()
                    proc.wait()
                raise
            self._active[key] = c
            self._journal(key, c)

    def pin(self, key: str, pids: Iterable[int], owner: str | None = None) -> bool:
        """Pin processes to the contended CPU (their affinity is given back on stop). True when some were
        pinned now, the first time for ``owner`` (a job id) when one is given; False without a pinned CPU."""
        with self._lock:
            c = self._active.get(key)
            if c is None or c.cpu is None:
                return False
            new = []
            for pid in pids:
                if pid in c.pinned:
                    continue
                try:
                    record = ProcessRecord.of(pid)
                    original = sorted(os.sched_getaffinity(pid))
                    c.pinned[pid] = (record, original)
                    os.sched_setaffinity(pid, {c.cpu})
                    new.append(pid)
                except Exception:  # gone meanwhile
                    c.pinned.pop(pid, None)
            if not new:
                return False
            self._journal(key, c)
            if owner is None:
                return True
            if owner in c.caught:
                return False
            c.caught.add(owner)
            return True

    def stop(self, key: str) -> None:
        """Kill the burners and give pinned processes their CPUs back (idempotent)."""
        with self._lock:
            c = self._active.pop(key, None)
            if c is None:
                return
            for proc in c.burners:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            for proc in c.burners:
                proc.wait()
            for record, cpus in c.pinned.values():
                _restore_affinity(record, cpus)
            self.journal.remove(f"contention:{key}")

    def active_keys(self) -> list[str]:
        with self._lock:
            return list(self._active)

    def _journal(self, key: str, c: _Contention) -> None:
        self.journal.add(
            f"contention:{key}", UndoContention(burners=c.records, pinned=list(c.pinned.values()))
        )


def undo_contention(entry: UndoContention) -> None:
    """Kill a gone process's burners and give the processes it pinned their CPUs back."""
    for record in entry.burners:
        proc = supervisor.get_process(record)
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.kill()
    for record, cpus in entry.pinned:
        _restore_affinity(record, cpus)
