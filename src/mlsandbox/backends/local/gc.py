"""Garbage collection of local sandboxes: whatever a crashed or killed run left behind is stopped.

A sandbox is garbage when

- its directory has no readable state (a start that crashed before writing it, or a torn-down leftover);
- its start was interrupted (state still ``starting`` and nobody holds its lock);
- it is ephemeral and the process that owns it is gone (pid dead, or reused by another process);
- it is persistent and some of its services are not running (other than those a live process killed
  as a fault).

A live ephemeral sandbox (owner still running) and a healthy persistent one are never touched, nor is a
sandbox whose lock is held (an ``up`` or ``down`` in progress). Every process carrying the marker of a
sandbox that has no state any more (jobs, flow runs, services of a crashed start) is stopped, and so is
every job or model-server replica whose owning process is gone; then the cgroups of every gone owner are
removed (:mod:`mlsandbox.backends.local.cgroups`: found wherever they are nested, what is left in them
killed, retried until the kernel lets go of the last task).

A sandbox that is left running may still carry what an episode whose process died changed or made: faults
(Toxiproxy toxics, a disabled proxy, a bucket quota, a SIGSTOPped or killed service, cut job limits, CPU
burners, fault-hook files) and resources (its bucket, MLflow experiment and registered models, Prefect
deployments and flow runs, config variables, API-source datasets, PostgreSQL database and role). Each
process journals them under ``<sandbox>/faults/``, and the journals of gone processes are undone here (a
service such a process killed is started again).

:func:`collect_garbage_report` says what it removed, one :class:`GcItem` per thing (``mlsandbox gc`` prints
them as a table, or JSON with ``--json``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict

from mlsandbox import paths
from mlsandbox.backends.local.faults.control import killed_on_purpose, undo_stale_journals
from mlsandbox.backends.protocols import Endpoints, SandboxListing
from mlsandbox.errors import BackendError

from . import cgroups as cgroup_layout
from . import services as svc
from . import supervisor
from .gc_report import GcItem
from .sandbox import SandboxState, home_key, read_state, sandbox_lock, teardown

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
    created_at: float | None = None


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
                created_at=state.created_at,
            )
        )
    return infos


def sandbox_listings() -> list[SandboxListing]:
    """The sandboxes of this machine's sandbox home for the backend registry (``BackendType.sandboxes``)."""
    return [
        SandboxListing(
            name=i.name,
            phase=i.phase,
            services_running=None if i.phase == "unknown" else i.services_running == i.services_total,
            ephemeral=i.ephemeral,
            owner_pid=i.owner_pid,
            owner_alive=i.owner_alive,
            created_at=i.created_at,
        )
        for i in list_sandboxes()
    ]


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


def collect_garbage_report() -> list[GcItem]:
    """Remove what dead owners left, one :class:`GcItem` per thing removed, undone or restarted:

    1. jobs and model-server replicas whose owning process is gone (in sandboxes that live on), then the
       code workspaces such processes opened (their tmpfs unmounted, their directories removed);
    2. garbage sandboxes (stopped, their directory removed); in the others, the journals of gone processes
       undone (faults, and what their episodes made: buckets, experiments, registered models, flows, config
       variables, API datasets, databases; a service they killed is started again);
    3. marked processes of sandboxes that have no state any more;
    4. the cgroups of gone processes (killing what is left in them, retried until the kernel lets go);
    5. PostgreSQL data kept outside a gone sandbox's directory, stale lock files.
    """
    home = home_key()
    items = _collect_orphan_jobs(home)
    items += _collect_workspaces()
    for name in _sandbox_names():
        items += _collect_sandbox(name, home)
    items += _collect_orphans(home)
    items += _collect_cgroups(home)
    items += _collect_postgres_dirs(home)
    _remove_stale_locks()
    return items


def collect_garbage() -> list[str]:
    """:func:`collect_garbage_report` as one line of text per item."""
    return [item.line for item in collect_garbage_report()]


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


def _collect_sandbox(name: str, home: str) -> list[GcItem]:
    layout = svc.Layout(paths.sandbox_dir(name))
    with sandbox_lock(name, blocking=False) as acquired:
        if not acquired:
            return []  # an up/down of it is in progress
        state, readable = _state_of(layout)
        # Garbage whatever its services do: no state, an interrupted start, an owner that is gone.
        reason = garbage_reason(state, readable, excused=frozenset(svc.RESERVED_SERVICE_NAMES))
        if reason is not None or state is None:
            return [_teardown_item(name, home, layout, state, reason or "it has no state")]
    # It lives on: undo what gone processes left in it (outside the lock: restarting a service a gone
    # process killed as a fault takes it). A service killed by a live episode is down on purpose.
    items = undo_stale_journals(layout.root, state)
    with sandbox_lock(name, blocking=False) as acquired:
        if not acquired:
            return items
        state, readable = _state_of(layout)
        reason = garbage_reason(state, readable, killed_on_purpose(layout.root))
        if reason is not None:
            items.append(_teardown_item(name, home, layout, state, reason))
    return items


def _state_of(layout: svc.Layout) -> tuple[SandboxState | None, bool]:
    try:
        return read_state(layout), True
    except BackendError:
        return None, False


def _teardown_item(
    name: str, home: str, layout: svc.Layout, state: SandboxState | None, reason: str
) -> GcItem:
    stopped = teardown(name, home, layout, state, remove_data=True)
    return GcItem(
        kind="sandbox",
        sandbox=name,
        what=f"sandbox {name}",
        detail=f"{reason}; stopped {len(stopped)} process(es), removed {layout.root}",
    )


def _collect_orphans(home: str) -> list[GcItem]:
    """Stop marked processes of sandboxes that have no state (their process groups when they lead them)."""
    by_sandbox: dict[str, list[psutil.Process]] = defaultdict(list)
    for proc in supervisor.find_marked(None, home):
        name = supervisor.marker_of(proc)
        if name is not None:
            by_sandbox[name].append(proc)
    items = []
    for name, procs in sorted(by_sandbox.items()):
        try:
            layout = svc.Layout(paths.sandbox_dir(name))
        except ValueError:  # not a valid sandbox name: no sandbox can own these processes
            items.append(_stop_orphans(name, procs))
            continue
        with sandbox_lock(name, blocking=False) as acquired:
            if acquired and not layout.state_file.exists():
                items.append(_stop_orphans(name, procs))
    return items


def _stop_orphans(name: str, procs: list[psutil.Process]) -> GcItem:
    stopped = supervisor.stop([], extra=_with_marked_groups(procs), timeout=ORPHAN_STOP_TIMEOUT_S)
    return GcItem(
        kind="processes",
        sandbox=name,
        what=f"orphans of sandbox {name}",
        detail=f"stopped {len(stopped)} process(es)",
    )


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


def _collect_orphan_jobs(home: str) -> list[GcItem]:
    """Stop jobs and replicas (and their process groups) whose owning process is gone."""
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
    items = []
    for owner, procs in sorted(gone.items()):
        sandboxes = sorted({n for p in procs if (n := supervisor.marker_of(p))})
        stopped = supervisor.stop([], extra=_with_marked_groups(procs), timeout=1.0)
        items.append(
            GcItem(
                kind="processes",
                sandbox=", ".join(sandboxes) or None,
                what=f"jobs of gone process {owner.split('-')[0]}",
                detail=f"stopped {len(stopped)} process(es)",
            )
        )
    return items


def _collect_workspaces() -> list[GcItem]:
    """Code workspaces whose owning process (a gateway) is gone: tmpfs unmounted, directories removed
    (before any sandbox's directory is: a mounted tmpfs would keep it)."""
    from .workspaces import collect_stale

    root = paths.sandboxes_dir()
    items = []
    for path, mounted in collect_stale(root, lambda sandbox: not svc.Layout(sandbox).state_file.exists()):
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        items.append(
            GcItem(
                kind="workspace",
                sandbox=rel.parts[0] if rel.parts else None,
                what=f"workspace {path.name}",
                detail=f"{'unmounted its tmpfs and ' if mounted else ''}removed {path}",
                ok=not path.exists(),
            )
        )
    return items


def _collect_cgroups(home: str) -> list[GcItem]:
    """The memory and cpu cgroups of jobs and replicas whose owning process is gone (anywhere in the
    hierarchies: the owner may have run in another cgroup than this process)."""
    from .jobs import cgroups_available

    if not cgroups_available():
        return []
    live = set(_sandbox_names())
    items = []
    for r in cgroup_layout.collect(home, legacy=lambda name: name not in live):
        killed = f"; killed {r.killed} process(es) left in it" if r.killed else ""
        owner = f" of gone process {r.owner.split('-')[0]}" if r.owner != "-" else ""
        items.append(
            GcItem(
                kind="cgroup",
                sandbox=r.sandbox,
                what=f"cgroup {r.leaf}{owner}",
                detail=(f"{' and '.join(r.controllers)} removed{killed}" if r.removed else r.detail),
                ok=r.removed,
            )
        )
    return items


def _collect_postgres_dirs(home: str) -> list[GcItem]:
    """PostgreSQL source data kept outside a sandbox directory whose sandbox is gone."""
    import shutil

    items = []
    for path in svc.stale_external_postgres_dirs(home, set(_sandbox_names())):
        shutil.rmtree(path, ignore_errors=True)
        items.append(
            GcItem(
                kind="postgres_data",
                sandbox=path.name,
                what=f"postgres data of gone sandbox {path.name}",
                detail=f"removed {path}",
            )
        )
    return items
