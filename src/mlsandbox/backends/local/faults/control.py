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
    UndoApiDataset,
    UndoBucket,
    UndoBucketQuota,
    UndoConfigScope,
    UndoContention,
    UndoDatabase,
    UndoExperiment,
    UndoFlows,
    UndoFrozen,
    UndoHookFile,
    UndoJobLimits,
    UndoKilled,
    UndoProxyDisabled,
    UndoRegisteredModel,
    UndoToxic,
    killed_on_purpose,
    read_journals,
)
from mlsandbox.backends.local.faults.service_control import LocalServiceControl
from mlsandbox.backends.local.faults.toxiproxy import ToxiproxyControl, undo_network
from mlsandbox.backends.local.gc_report import GcItem, GcKind
from mlsandbox.backends.local.jobs import OWNER_ENV, LocalJobs, choose_limits, owner_marker
from mlsandbox.backends.local.sandbox import LocalSandbox
from mlsandbox.backends.protocols import NETWORK_FAULTS, Endpoints, HttpFault
from mlsandbox.errors import BackendError, Unsupported

BACKEND = "local"
MADE = (
    UndoConfigScope,
    UndoBucket,
    UndoExperiment,
    UndoRegisteredModel,
    UndoFlows,
    UndoApiDataset,
    UndoDatabase,
)
"""Journal entries of what episodes made (not fault changes): removed by their owners, or by gc."""
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

    def __init__(self, backend: LocalSandbox, client_endpoints: Endpoints, jobs: LocalJobs) -> None:
        self.backend = backend
        self.journal = Journal(backend.dir)
        self.jobs = jobs
        self._services = LocalServiceControl(backend, self.journal, client_endpoints)
        state = backend.running_state()
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

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        return self._hooks.active(target, episode_id=episode_id)

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
        the other undos need the services answering); a service killed as a fault is restarted. What the
        episodes made (config scopes, buckets, experiments, flows, ...), journaled by the runtime's
        clients, is theirs to remove."""
        done: list[str] = []
        for key in self._contention.active_keys():
            self._contention.stop(key)
            done.append(f"contention:{key}")
        entries = [
            (key, entry) for key, entry in self.journal.entries().items() if not isinstance(entry, MADE)
        ]
        entries.sort(key=lambda kv: not isinstance(kv[1], UndoFrozen))
        state = self.backend.running_state()
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


def undo_entry(entry: Any, state: Any) -> str:
    """Undo one journal entry on the sandbox whose state is ``state`` (a
    :class:`~mlsandbox.backends.local.sandbox.SandboxState`); what was done. A killed service is left to
    a restart (:func:`undo_stale_journals` restarts those of a gone process)."""
    from mlsandbox.backends.local import episode_journal as made
    from mlsandbox.paths import sandbox_dir

    if isinstance(entry, UndoBucket):
        return made.undo_bucket(entry, state.endpoints)
    if isinstance(entry, UndoExperiment):
        return made.undo_experiment(entry, state.endpoints)
    if isinstance(entry, UndoRegisteredModel):
        return made.undo_registered_model(entry, state.endpoints)
    if isinstance(entry, UndoFlows):
        return made.undo_flows(entry, state.endpoints, state.name, state.home)
    if isinstance(entry, UndoApiDataset):
        return made.undo_api_dataset(entry, sandbox_dir(state.name))
    if isinstance(entry, UndoDatabase):
        return made.undo_database(entry, state.name)
    _undo_fault(entry, state)
    done: dict[type, str] = {
        UndoConfigScope: "deleted",
        UndoToxic: "removed",
        UndoProxyDisabled: "enabled again",
        UndoBucketQuota: "lifted",
        UndoFrozen: "resumed (SIGCONT)",
        UndoContention: "burners stopped, CPU affinity given back",
        UndoHookFile: "cleared",
        UndoJobLimits: "restored",
    }
    return done.get(type(entry), "undone")


def _undo_fault(entry: Any, state: Any) -> None:
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


_UNDO_ORDER: tuple[type, ...] = (UndoFrozen, UndoKilled)
"""Frozen services are thawed first and killed ones restarted next: the other undos (a quota through
MinIO's admin API, config variables on Prefect, an experiment on MLflow) need the services answering."""


def _order(entry: Any) -> int:
    """Frozen, killed, the other faults, then what the episodes made."""
    if isinstance(entry, MADE):
        return len(_UNDO_ORDER) + 1
    return next((i for i, kind in enumerate(_UNDO_ORDER) if isinstance(entry, kind)), len(_UNDO_ORDER))


def _describe(entry: Any) -> tuple[GcKind, str]:
    """How a journal entry is named in the garbage collector's report."""
    if isinstance(entry, UndoBucket):
        return "bucket", entry.bucket
    if isinstance(entry, UndoExperiment):
        return "experiment", entry.name
    if isinstance(entry, UndoRegisteredModel):
        return "registered_model", entry.name
    if isinstance(entry, UndoFlows):
        return "flows", f"flows of episode {entry.episode_id}"
    if isinstance(entry, UndoApiDataset):
        return "api_dataset", f"{entry.source} ({entry.dataset_id})"
    if isinstance(entry, UndoDatabase):
        return "database", entry.database
    if isinstance(entry, UndoConfigScope):
        return "config", f"variables {entry.prefix}*"
    if isinstance(entry, UndoKilled):
        return "service", entry.service
    if isinstance(entry, UndoToxic):
        return "fault", f"toxic {entry.name} on {entry.endpoint}"
    if isinstance(entry, UndoProxyDisabled):
        return "fault", f"proxy {entry.endpoint} disabled"
    if isinstance(entry, UndoBucketQuota):
        return "fault", f"quota on bucket {entry.bucket}"
    if isinstance(entry, UndoFrozen):
        return "fault", f"{entry.service} frozen (SIGSTOP)"
    if isinstance(entry, UndoJobLimits):
        return "fault", f"limits of job {entry.job_id}"
    if isinstance(entry, UndoContention):
        return "fault", f"CPU contention ({len(entry.burners)} burner(s))"
    if isinstance(entry, UndoHookFile):
        return "fault", f"HTTP fault hook {Path(entry.path).name}"
    return "fault", str(getattr(entry, "type", entry))


def _restart_killed(service: str, state: Any) -> str:
    """Start a service that a gone process killed as a fault (it would otherwise stay down), and wait
    until it answers; its data and port are the same."""
    backend = LocalSandbox(state.name)
    if service in svc.SOURCE_SERVICES:
        from mlsandbox.backends.local.sources import SourceServices

        services = SourceServices(backend)
        if services.is_running(service):
            return "running (nothing to do)"
        services.ensure(service)
        return "started again on its data"
    record = state.services.get(service)
    if record is not None and supervisor.is_alive(record.process):
        return "running (nothing to do)"
    control = LocalServiceControl(backend, Journal(backend.dir), state.client_endpoints or state.endpoints)
    health = control.restart(service, wait=True)
    if not health.healthy:
        raise BackendError(f"restarted, but not healthy: {health.error}")
    return "started again on its data (it was killed as a fault)"


def undo_stale_journals(sandbox_dir: Path, state: Any) -> list[GcItem]:
    """Undo the journal of every process that is gone (faults, and what its episodes made on the
    services; a service it killed is started again); one item per entry."""
    items: list[GcItem] = []
    for path, journal in read_journals(sandbox_dir):
        if journal is None:
            path.unlink(missing_ok=True)
            continue
        if supervisor.is_alive(journal.owner):
            continue
        for entry in sorted(journal.entries.values(), key=_order):
            kind, what = _describe(entry)
            try:
                if isinstance(entry, UndoKilled):
                    detail = _restart_killed(entry.service, state)
                else:
                    detail = undo_entry(entry, state)
                ok = True
            except Exception as e:  # best effort: the rest is still undone
                detail, ok = f"{type(e).__name__}: {e}", False
            items.append(
                GcItem(
                    kind=kind,
                    sandbox=state.name,
                    what=what,
                    detail=f"{detail}; left by gone process {journal.owner.pid}",
                    ok=ok,
                )
            )
        path.unlink(missing_ok=True)
    return items


__all__ = [
    "LocalFaultControl",
    "killed_on_purpose",
    "unavailable_here",
    "undo_entry",
    "undo_stale_journals",
]
