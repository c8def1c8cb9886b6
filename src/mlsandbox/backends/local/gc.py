"""Garbage collection of local sandboxes: whatever a crashed or killed run left behind is stopped.

A sandbox is garbage when

- its directory has no readable state (a start that crashed before writing it, or a torn-down leftover);
- its start was interrupted (state still ``starting`` and nobody holds its lock);
- it is ephemeral and the process that owns it is gone (pid dead, or reused by another process);
- it is persistent and some of its services are not running.

A live ephemeral sandbox (owner still running) and a healthy persistent one are never touched, nor is a
sandbox whose lock is held (an ``up`` or ``down`` in progress). Then every process carrying the marker of a
sandbox that has no state any more (jobs, flow runs, services of a crashed start) is stopped, and so is
every job or model-server replica whose owning process is gone; their (then empty) cgroups are removed.

A sandbox that is left running may still carry faults injected by an episode whose process died (Toxiproxy
toxics, a disabled proxy, a bucket quota, a SIGSTOPped service, cut job limits): each process journals
them under ``<sandbox>/faults/``, and the journals of gone processes are undone here.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict

from mlsandbox import paths
from mlsandbox.backends.local.faults.control import killed_on_purpose, undo_stale_journals
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import BackendError

from . import services as svc
from . import supervisor
from .backend import SandboxState, home_key, read_state, sandbox_lock, teardown

ORPHAN_STOP_TIMEOUT_S = 3.0


class SandboxInfo(BaseModel):
    """One sandbox as `mlsandbox list` shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dir: str
    phase: Literal["starting", "running", "unknown"]
    ephemeral: bool | None = None
    owner_pid: int | None = None
    owner_alive: bool | None = None
    services_running: int = 0
    services_total: int = len(svc.SERVICE_NAMES)
    endpoints: Endpoints | None = None


def _sandbox_names() -> list[str]:
    root = paths.sandboxes_dir()
    if not root.is_dir():
        return []
    names = []
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            continue
        try:
            names.append(paths.validate_sandbox_name(entry.name))
        except ValueError:
            continue
    return names


def list_sandboxes() -> list[SandboxInfo]:
    """Every sandbox directory under the sandbox home, with what its state says and what still runs."""
    infos = []
    for name in _sandbox_names():
        layout = svc.Layout(paths.sandbox_dir(name))
        try:
            state = read_state(layout)
        except BackendError:
            state = None
        if state is None:
            infos.append(SandboxInfo(name=name, dir=str(layout.root), phase="unknown"))
            continue
        infos.append(
            SandboxInfo(
                name=name,
                dir=str(layout.root),
                phase=state.phase,
                ephemeral=state.ephemeral,
                owner_pid=state.owner.pid if state.owner else None,
                owner_alive=state.owner_alive() if state.owner else None,
                services_running=len(svc.SERVICE_NAMES) - len(state.dead_services()),
                endpoints=state.endpoints,
            )
        )
    return infos


def garbage_reason(
    state: SandboxState | None, readable: bool = True, excused: set[str] | frozenset[str] = frozenset()
) -> str | None:
    """Why a sandbox (whose lock is free) is garbage, or None when it must be left alone."""
    if not readable:
        return "its state file is unreadable"
    if state is None:
        return "it has no state (left by a crashed start)"
    if state.phase == "starting":
        return "its start was interrupted"
    if state.ephemeral:
        if state.owner_alive():
            return None
        owner = state.owner.pid if state.owner else "?"
        return f"it is ephemeral and its owner process {owner} is gone"
    dead = [name for name in state.dead_services() if name not in excused]
    if dead:
        return f"services not running: {', '.join(dead)}"
    return None


def collect_garbage() -> list[str]:
    """Stop and remove every garbage sandbox, then stop orphaned marked processes; one line per removal."""
    home = home_key()
    lines = [line for name in _sandbox_names() if (line := _collect_sandbox(name, home))]
    lines += _collect_orphans(home)
    lines += _collect_orphan_jobs(home)
    lines += _collect_postgres_dirs(home)
    _remove_stale_locks()
    return lines


def _remove_stale_locks() -> None:
    """Lock files of sandboxes whose directory is gone (free ones only; see ``backend._acquire``)."""
    root = paths.sandboxes_dir()
    if not root.is_dir():
        return
    for lock in root.glob(".*.lock"):
        name = lock.name[1 : -len(".lock")]
        try:
            directory = paths.sandbox_dir(name)
        except ValueError:
            continue
        with sandbox_lock(name, blocking=False) as acquired:
            if acquired and not directory.exists():
                lock.unlink(missing_ok=True)


def _collect_sandbox(name: str, home: str) -> str | None:
    with sandbox_lock(name, blocking=False) as acquired:
        if not acquired:
            return None  # an up/down of it is in progress
        layout = svc.Layout(paths.sandbox_dir(name))
        readable = True
        try:
            state = read_state(layout)
        except BackendError:
            state, readable = None, False
        # Faults of episodes whose process died are undone first (toxics, quotas, SIGSTOPs, job limits);
        # a service killed as a fault by a live episode is down on purpose, not broken.
        lines = undo_stale_journals(layout.root, state) if state is not None else []
        reason = garbage_reason(state, readable, killed_on_purpose(layout.root))
        if reason is None:
            return "\n".join(lines) or None
        stopped = teardown(name, home, layout, state, remove_data=True)
        return f"sandbox {name}: {reason}; stopped {len(stopped)} process(es), removed {layout.root}"


def _collect_orphans(home: str) -> list[str]:
    """Stop marked processes of sandboxes that have no state (their process groups when they lead them)."""
    by_sandbox: dict[str, list[psutil.Process]] = defaultdict(list)
    for proc in supervisor.find_marked(None, home):
        name = supervisor.marker_of(proc)
        if name is not None:
            by_sandbox[name].append(proc)
    lines = []
    for name, procs in sorted(by_sandbox.items()):
        try:
            layout = svc.Layout(paths.sandbox_dir(name))
        except ValueError:  # not a valid sandbox name: no sandbox can own these processes
            lines.append(_stop_orphans(name, procs))
            continue
        with sandbox_lock(name, blocking=False) as acquired:
            if acquired and not layout.state_file.exists():
                lines.append(_stop_orphans(name, procs))
    return lines


def _stop_orphans(name: str, procs: list[psutil.Process]) -> str:
    stopped = supervisor.stop([], extra=_with_marked_groups(procs), timeout=ORPHAN_STOP_TIMEOUT_S)
    _remove_cgroups({name}, sandbox_gone=True)
    return f"orphans of sandbox {name}: stopped {len(stopped)} process(es)"


def _remove_cgroups(names: set[str], sandbox_gone: bool = False) -> None:
    """The (now empty) cgroups of jobs and model-server replicas of ``names``, when they were nested in
    ours; with ``sandbox_gone`` also the sandbox's own (empty) cgroup directories."""
    from .jobs import cgroups_available, remove_stale_cgroups, sandbox_cgroup_dirs

    if not names or not cgroups_available():
        return
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            remove_stale_cgroups(paths.validate_sandbox_name(name))
            if sandbox_gone:
                for d in sandbox_cgroup_dirs(name):
                    with contextlib.suppress(OSError):
                        d.rmdir()


def _with_marked_groups(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` plus the members of every process group whose leader is one of them (same marker)."""
    leaders = set()
    for proc in procs:
        try:
            pgid = os.getpgid(proc.pid)
        except ProcessLookupError:
            continue
        if any(p.pid == pgid for p in procs):
            leaders.add(pgid)
    targets = {p.pid: p for p in procs}
    if leaders:
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) in leaders:
                    targets[proc.pid] = proc
            except (ProcessLookupError, PermissionError):
                continue
    return list(targets.values())


def _collect_orphan_jobs(home: str) -> list[str]:
    """Stop jobs (and their process groups) whose owning process is gone, in sandboxes that live on."""
    from .jobs import OWNER_ENV

    gone: dict[str, list[psutil.Process]] = defaultdict(list)
    for proc in supervisor.find_marked(None, home):
        try:
            owner = proc.environ().get(OWNER_ENV)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if not owner or "-" not in owner:
            continue
        pid_s, _, ticks_s = owner.partition("-")
        try:
            alive = supervisor.start_ticks(int(pid_s)) == int(ticks_s)
        except ValueError:
            alive = False
        if not alive:
            gone[owner].append(proc)
    lines = []
    sandboxes: set[str] = set()
    for owner, procs in sorted(gone.items()):
        sandboxes.update(n for p in procs if (n := supervisor.marker_of(p)))
        stopped = supervisor.stop([], extra=_with_marked_groups(procs), timeout=1.0)
        lines.append(f"jobs of gone process {owner.split('-')[0]}: stopped {len(stopped)} process(es)")
    _remove_cgroups(sandboxes)  # jobs' and replicas' (model servers carry the owner marker too)
    return lines


def _collect_postgres_dirs(home: str) -> list[str]:
    """PostgreSQL source data kept outside a sandbox directory whose sandbox is gone."""
    import shutil

    lines = []
    for path in svc.stale_external_postgres_dirs(home, set(_sandbox_names())):
        shutil.rmtree(path, ignore_errors=True)
        lines.append(f"postgres data of gone sandbox {path.name}: removed {path}")
    return lines
