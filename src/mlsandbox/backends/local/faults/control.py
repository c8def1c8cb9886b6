"""The :class:`~mlsandbox.backends.protocols.FaultControl` of a local sandbox, and the recovery of what a
crashed process left behind.

The mechanisms live in modules of their own:

- :mod:`.service_control`: SIGKILL / SIGSTOP / SIGCONT of a service's process group, restart through the
  backend, health as clients see it (through the proxy), logs;
- :mod:`.toxiproxy`: toxics on the Toxiproxy proxies in front of MinIO and MLflow, proxies disabled for
  "endpoint down";
- :mod:`.contention`: CPU burners (``mlsandbox.workloads.burn``) pinned with the target's processes to
  one CPU (``sched_setaffinity``);
- :mod:`.hooks`: the internal fault hook of the sandbox's own HTTP services (a control file, see
  :mod:`mlsandbox.workloads.fault_hook`);
- here: a hard bucket quota through MinIO's admin API, job limits through the jobs' cgroups
  (``LocalJobs.set_resources``; RLIMIT_DATA without cgroups).

Every change that would outlive a crash of the process making it is written first to the process's
journal (:mod:`.journal`) and removed from it once undone. :meth:`LocalFaultControl.recover_all` undoes
this process's journal; :func:`undo_stale_journals` (called by the garbage collector) undoes the journal
of every process that is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlsandbox.backends.common.minio import set_bucket_quota
from mlsandbox.backends.local import services as svc
from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.faults.contention import Contention, undo_contention
from mlsandbox.backends.local.faults.hooks import HttpHooks
from mlsandbox.backends.local.faults.journal import (
    Journal,
    UndoBucketQuota,
    UndoConfigScope,
    UndoContention,
    UndoFrozen,
    UndoHookFile,
    UndoJobLimits,
    UndoKilled,
    UndoProxyDisabled,
    UndoToxic,
    killed_on_purpose,
    read_journals,
)
from mlsandbox.backends.local.faults.service_control import LocalServiceControl
from mlsandbox.backends.local.faults.toxiproxy import ToxiproxyControl, undo_network
from mlsandbox.backends.local.jobs import OWNER_ENV, LocalJobs, choose_limits, owner_marker
from mlsandbox.backends.protocols import NETWORK_FAULTS, Endpoints, HttpFault
from mlsandbox.errors import BackendError, Unsupported

BACKEND = "local"
NO_TOXIPROXY = "toxiproxy-server is not installed (run `make setup`)"


def _limits_note(limits: str, note: str = "") -> dict[str, str]:
    """The job-limit faults refused under ``limits`` (``cgroup``, ``rlimit`` or ``none``)."""
    if limits == "cgroup":
        return {}
    reason = note or (
        "a job's CPU quota needs cgroup v1 and root; jobs here are limited by rlimits "
        "(memory: RLIMIT_DATA/RLIMIT_AS, CPU time: RLIMIT_CPU)"
        if limits == "rlimit"
        else "job limits are off (MLSANDBOX_JOB_LIMITS=none, or no root and cgroup v1)"
    )
    out = {"cpu_throttle": reason}
    if limits != "rlimit":
        out["memory_limit"] = reason
    return out


class LocalFaultControl:
    """The :class:`~mlsandbox.backends.protocols.FaultControl` of a local sandbox (see the module)."""

    def __init__(self, backend: Any, client_endpoints: Endpoints, jobs: LocalJobs) -> None:
        self.backend = backend  # a LocalBackend (not imported: it imports this module's package)
        self.journal = Journal(backend.dir)
        self.jobs = jobs
        self._services = LocalServiceControl(backend, self.journal, client_endpoints)
        state = backend._running_state()
        url = svc.toxiproxy_url(state.ports)
        self._network = ToxiproxyControl(url, self.journal) if url else None
        self._direct = state.endpoints
        self._hooks = HttpHooks(self.journal)
        self._contention = Contention(self.journal)
        self.sandbox_name = backend.name
        self.client_endpoints = client_endpoints

    @property
    def services(self) -> LocalServiceControl:
        return self._services

    @property
    def network(self) -> ToxiproxyControl:
        if self._network is None:
            raise Unsupported("faults.network", BACKEND, NO_TOXIPROXY)
        return self._network

    # ---------------------------------------------------------------------------------- http fault hooks

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        """Write the fault-hook control file the service ``target`` registered (journaled)."""
        self._hooks.set(target, fault, episode_id=episode_id)

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        self._hooks.clear(target, episode_id=episode_id)

    # ------------------------------------------------------------------------------------ cpu contention

    def _contention_target(self, target: str) -> str | None:
        """The service name of a ``service:NAME`` target, None for ``jobs``; ValueError otherwise."""
        if target == "jobs":
            return None
        kind, _, name = target.partition(":")
        if kind != "service" or not name:
            raise ValueError(f"a contention target is service:NAME or jobs, got {target!r}")
        self._services._record(name)  # an unknown or absent service fails here, before any burner
        return name

    def _service_pids(self, service: str) -> list[int]:
        return [p.pid for p in supervisor.process_tree(self._services._record(service))]

    def start_contention(self, key: str, target: str, workers: int, *, pin: bool = True) -> None:
        """Start ``workers`` CPU burners (idempotent per ``key``); a service's processes are pinned at once."""
        service = self._contention_target(target)
        env = {
            **os.environ,
            **supervisor.marker_env(self.sandbox_name, str(self.jobs.home)),
            OWNER_ENV: owner_marker(),
        }
        self._contention.start(key, target, workers, env=env, pin=pin)
        if service is not None:
            self._contention.pin(key, self._service_pids(service))

    def refresh_contention(self, key: str, jobs: Sequence[str] = ()) -> list[str]:
        target = self._contention.target(key)
        if target is None:
            return []
        if target.startswith("service:"):
            with contextlib.suppress(ValueError, BackendError):  # the service is gone: nothing to pin
                self._contention.pin(key, self._service_pids(target.split(":", 1)[1]))
            return []
        caught = []
        for job_id in dict.fromkeys(jobs):
            try:
                pids = list(self.jobs.pids(job_id))
            except KeyError:
                continue
            if self._contention.pin(key, pids, owner=job_id):
                caught.append(job_id)
        return caught

    def stop_contention(self, key: str) -> None:
        self._contention.stop(key)

    # ----------------------------------------------------------------------------------------- limits

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        key = f"quota:{bucket}"
        if quota_bytes:
            self.journal.add(key, UndoBucketQuota(bucket=bucket))
        set_bucket_quota(self._direct, bucket, quota_bytes)
        if not quota_bytes:
            self.journal.remove(key)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        """Cut a running job's limits (journaled: the garbage collector restores the cgroup values)."""
        key = f"job:{job_id}"
        if key not in self.journal.entry_keys():
            dirs = self.jobs.cgroup_dirs(job_id)
            undo = UndoJobLimits(job_id=job_id)
            if dirs:
                memory, cpu = dirs
                with contextlib.suppress(OSError, ValueError):
                    undo.cpu_dir, undo.cpu_quota_us = str(cpu), int((cpu / "cpu.cfs_quota_us").read_text())
                    undo.memory_dir = str(memory)
                    undo.memory_limit_bytes = int((memory / "memory.limit_in_bytes").read_text())
            self.journal.add(key, undo)
        self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        self.journal.remove(f"job:{job_id}")

    # --------------------------------------------------------------------------------------- recovery

    def recover_all(self) -> list[str]:
        """Undo the fault changes this process's journal holds for the sandbox (frozen services first:
        the other undos need the services answering); a service killed as a fault is restarted. The
        episodes' config scopes, journaled by the config store, are the store's to close."""
        done: list[str] = []
        for key in self._contention.active_keys():
            self._contention.stop(key)
            done.append(f"contention:{key}")
        entries = [
            (key, entry)
            for key, entry in self.journal.entries().items()
            if not isinstance(entry, UndoConfigScope)
        ]
        entries.sort(key=lambda kv: not isinstance(kv[1], UndoFrozen))
        state = self.backend._running_state()
        for key, entry in entries:
            try:
                if isinstance(entry, UndoKilled):
                    if not self._services.health(entry.service, timeout=2.0).healthy:
                        self._services.restart(entry.service, wait=True)
                else:
                    undo_entry(entry, state)
            except Exception as e:  # best effort: the rest is still undone
                done.append(f"{key}: not undone ({type(e).__name__}: {e})")
                continue
            self.journal.remove(key)
            done.append(key)
        return done

    def unavailable(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self._network is None:
            out.update(dict.fromkeys(NETWORK_FAULTS, NO_TOXIPROXY))
        out.update(_limits_note(self.jobs.limits))
        return out


def unavailable_here() -> dict[str, str]:
    """Fault types a new local sandbox on this machine cannot make real (without starting one): no
    Toxiproxy binary, or jobs without cgroups (``MLSANDBOX_JOB_LIMITS``, root, cgroup v1)."""
    out: dict[str, str] = {}
    if svc.toxiproxy_binary() is None:
        out.update(dict.fromkeys(NETWORK_FAULTS, NO_TOXIPROXY))
    try:
        limits, note = choose_limits(), ""
    except ValueError as e:
        limits, note = "none", str(e)
    out.update(_limits_note(limits, note))
    return out


# ------------------------------------------------------------------------------------ garbage collection


def undo_entry(entry: Any, state: Any) -> None:
    """Undo one journal entry on the sandbox whose state is ``state`` (a
    :class:`~mlsandbox.backends.local.backend.SandboxState`). A killed service is left to a restart."""
    if isinstance(entry, UndoToxic | UndoProxyDisabled):
        undo_network(entry, svc.toxiproxy_url(state.ports))
    elif isinstance(entry, UndoBucketQuota):
        with contextlib.suppress(BackendError):
            set_bucket_quota(state.endpoints, entry.bucket, None)
    elif isinstance(entry, UndoFrozen):
        if supervisor.is_alive(entry.process):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(entry.process.pgid, signal.SIGCONT)
    elif isinstance(entry, UndoContention):
        undo_contention(entry)
    elif isinstance(entry, UndoConfigScope):
        from mlsandbox.backends.common.config_store import PrefectConfigStore

        store = PrefectConfigStore(state.endpoints.prefect_api_url)
        try:
            store.close_scope(entry.prefix)
        finally:
            store.close()
    elif isinstance(entry, UndoHookFile):
        Path(entry.path).unlink(missing_ok=True)
    elif isinstance(entry, UndoJobLimits):
        if entry.cpu_dir and entry.cpu_quota_us is not None:
            with contextlib.suppress(OSError):
                (Path(entry.cpu_dir) / "cpu.cfs_quota_us").write_text(str(entry.cpu_quota_us))
        if entry.memory_dir and entry.memory_limit_bytes is not None:
            with contextlib.suppress(OSError):
                (Path(entry.memory_dir) / "memory.limit_in_bytes").write_text(str(entry.memory_limit_bytes))


def undo_stale_journals(sandbox_dir: Path, state: Any) -> list[str]:
    """Undo the journaled faults of every process that is gone; one line per journal undone."""
    lines = []
    for path, journal in read_journals(sandbox_dir):
        if journal is None:
            path.unlink(missing_ok=True)
            continue
        if supervisor.is_alive(journal.owner):
            continue
        failed = 0
        # Frozen services first: the other undos (a quota through MinIO's admin API, config variables on
        # Prefect) need the services answering.
        entries = sorted(journal.entries.values(), key=lambda e: not isinstance(e, UndoFrozen))
        for entry in entries:
            try:
                undo_entry(entry, state)
            except Exception:  # best effort: the rest is still undone
                failed += 1
        path.unlink(missing_ok=True)
        kinds = sorted({e.type for e in journal.entries.values()})
        lines.append(
            f"sandbox {state.name}: undid {len(journal.entries)} fault change(s) of gone process "
            f"{journal.owner.pid} ({', '.join(kinds)}){f'; {failed} failed' if failed else ''}"
        )
    return lines


__all__ = [
    "LocalFaultControl",
    "killed_on_purpose",
    "unavailable_here",
    "undo_entry",
    "undo_stale_journals",
]
