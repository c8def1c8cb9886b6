"""Where the local backend puts job and model-server cgroups (v1), and how the leftovers of a gone process
are found and removed.

Layout, in the memory and the cpu hierarchy alike::

    <cgroup of the process running the jobs>/mlsandbox/<sandbox>/<owner>/<job id>.<random>

``<owner>`` is ``<pid>-<start ticks>-<home tag>``: the process that made the cgroups (its pid and start
time, so a recycled pid is never taken for it) and an 8-hex digest of its sandbox home
(``$MLSANDBOX_HOME``). A cgroup whose owner is gone is garbage whatever it holds: the owner was the only
one to track it. The garbage collector cannot compute the path from its own cgroup (the process that ran
the jobs may have lived in another memory cgroup, e.g. a session's), so :func:`collect` looks for every
``mlsandbox`` directory in both hierarchies and keeps to the owners of its own home.

Removing a cgroup needs it empty: the processes left in it are SIGKILLed and ``rmdir`` is retried until
the kernel has let go of the last task (an exiting process stays a member for a moment).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "cpu")
ACCOUNTING = "cpuacct"
"""The CPU accounting controller: co-mounted with ``cpu`` on most hosts (its ``cpuacct.usage`` is then in
the cpu directory); a hierarchy of its own on others, where a job gets a third directory in it."""
TOP = "mlsandbox"
"""The directory, in a process's own cgroup, under which it nests the cgroups of its sandboxes' jobs."""
COLLECT_TIMEOUT_S = 10.0
"""How long :func:`collect` keeps killing and retrying the cgroups of one gone owner."""
_OWNER_RE = re.compile(r"^(?P<pid>\d+)-(?P<ticks>\d+)-(?P<tag>[0-9a-f]{8})$")
_MAX_DEPTH = 8
"""How deep below a hierarchy's root :func:`find_roots` looks for ``mlsandbox`` directories."""


def own_cgroup(controller: str) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (``/`` when not found)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


def home_tag(home: str) -> str:
    """The 8-hex digest of a sandbox home that owner directories carry."""
    return hashlib.sha1(home.encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> int | None:
    from mlsandbox.backends.local.supervisor import start_ticks

    return start_ticks(pid)


def owner_dir_name(home: str) -> str:
    """This process's owner directory name under a sandbox's cgroup directory."""
    pid = os.getpid()
    return f"{pid}-{_start_ticks(pid)}-{home_tag(home)}"


def accounting_separate() -> bool:
    """Whether ``cpuacct`` is a v1 hierarchy of its own (not co-mounted with ``cpu``)."""
    acct, cpu = CGROUP_ROOT / ACCOUNTING, CGROUP_ROOT / "cpu"
    return (
        (acct / "cpuacct.usage").is_file()
        and cpu.is_dir()
        and acct.resolve() != cpu.resolve()
        and not (cpu / "cpuacct.usage").exists()
    )


def controllers() -> tuple[str, ...]:
    """The hierarchies a job's cgroups live in: memory, cpu, and cpuacct when it is a hierarchy of its own."""
    return (*CONTROLLERS, ACCOUNTING) if accounting_separate() else CONTROLLERS


def sandbox_dirs(sandbox_name: str) -> list[Path]:
    """The memory and cpu (then cpuacct, when separate) cgroup directories of ``sandbox_name`` in this
    process's own cgroups."""
    return [CGROUP_ROOT / c / own_cgroup(c).lstrip("/") / TOP / sandbox_name for c in controllers()]


def owner_dirs(sandbox_name: str, home: str) -> list[Path]:
    """The memory and cpu cgroup directories holding this process's jobs of ``sandbox_name``."""
    owner = owner_dir_name(home)
    return [d / owner for d in sandbox_dirs(sandbox_name)]


def owner_alive(name: str) -> bool | None:
    """Whether the process an owner directory names still runs (None: not an owner directory)."""
    m = _OWNER_RE.match(name)
    if m is None:
        return None
    return _start_ticks(int(m["pid"])) == int(m["ticks"])


def procs_of(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_dir(path: Path) -> bool:
    """``rmdir`` of a cgroup directory; True when it is gone."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def find_roots(names: Iterable[str] | None = None) -> list[Path]:
    """Every ``mlsandbox`` directory of the given v1 hierarchies (default: :func:`controllers`; whoever's
    cgroup it is nested in)."""
    found: list[Path] = []
    for controller in controllers() if names is None else names:
        base = CGROUP_ROOT / controller
        if not base.is_dir():
            continue
        stack = [(base, 0)]
        while stack:
            path, depth = stack.pop()
            try:
                entries = [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for entry in entries:
                if entry.name == TOP:
                    found.append(Path(entry.path))
                elif depth + 1 < _MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
    return sorted(found)


@dataclass
class CgroupRemoval:
    """The cgroups of one job or replica that were removed (or could not be)."""

    sandbox: str
    leaf: str
    """``<job id>.<random>``."""
    owner: str
    """The owner directory (``<pid>-<ticks>-<home tag>``), or ``-`` for the older layout without one."""
    controllers: list[str] = field(default_factory=list)
    killed: int = 0
    removed: bool = True
    detail: str = ""


def _controllers(dirs: Iterable[Path]) -> list[str]:
    names = set()
    for d in dirs:
        with contextlib.suppress(ValueError, IndexError):
            names.add(d.relative_to(CGROUP_ROOT).parts[0])
    return sorted(names)


def _remove_leaves(groups: dict[str, list[Path]], timeout_s: float) -> dict[str, tuple[int, bool]]:
    """Kill what is left in each leaf (by leaf name: its memory and cpu directories) and remove it,
    retrying until the kernel lets go of the last task or ``timeout_s`` passes. leaf -> (killed, gone)."""
    killed: dict[str, set[int]] = {leaf: set() for leaf in groups}
    pending = {leaf: list(dirs) for leaf, dirs in groups.items()}
    deadline = time.monotonic() + timeout_s
    while True:
        for leaf, dirs in list(pending.items()):
            for d in dirs:
                for pid in procs_of(d):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                    killed[leaf].add(pid)
            pending[leaf] = [d for d in dirs if not remove_dir(d)]
            if not pending[leaf]:
                del pending[leaf]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {leaf: (len(killed[leaf]), leaf not in pending) for leaf in groups}


def collect(
    home: str,
    *,
    roots: Iterable[Path] | None = None,
    legacy: Callable[[str], bool] = lambda sandbox: False,
    timeout_s: float = COLLECT_TIMEOUT_S,
) -> list[CgroupRemoval]:
    """Remove the cgroups of every gone owner of sandbox home ``home`` (under ``roots``, the ``mlsandbox``
    directories; all of this machine's when None), killing what is left in them; then the empty
    directories above. Leaves of the older layout (no owner directory) are removed only when empty and
    ``legacy(sandbox)`` says the sandbox is gone. One :class:`CgroupRemoval` per job or replica."""
    tag = home_tag(home)
    # (sandbox, owner) -> leaf name -> its directories (memory, cpu)
    garbage: dict[tuple[str, str], dict[str, list[Path]]] = {}
    owner_paths: dict[tuple[str, str], list[Path]] = {}
    old: dict[str, dict[str, list[Path]]] = {}
    for top in find_roots() if roots is None else roots:
        try:
            sandboxes = [p for p in top.iterdir() if p.is_dir()]
        except OSError:
            continue
        for sandbox in sandboxes:
            try:
                children = [p for p in sandbox.iterdir() if p.is_dir()]
            except OSError:
                continue
            if not children and legacy(sandbox.name):
                remove_dir(sandbox)  # an empty directory of a sandbox that is gone
                continue
            for child in children:
                alive = owner_alive(child.name)
                if alive is None:  # the older layout: a job's leaf right under the sandbox
                    if not procs_of(child) and legacy(sandbox.name):
                        old.setdefault(sandbox.name, {}).setdefault(child.name, []).append(child)
                    continue
                if alive or not child.name.endswith(f"-{tag}"):
                    continue
                key = (sandbox.name, child.name)
                owner_paths.setdefault(key, []).append(child)
                leaves = garbage.setdefault(key, {})
                with contextlib.suppress(OSError):
                    for leaf_dir in child.iterdir():
                        if leaf_dir.is_dir():
                            leaves.setdefault(leaf_dir.name, []).append(leaf_dir)
    out: list[CgroupRemoval] = []
    for (sandbox_name, owner), leaves in sorted(garbage.items()):
        results = _remove_leaves(leaves, timeout_s)
        for leaf, dirs in sorted(leaves.items()):
            killed, gone = results[leaf]
            out.append(
                CgroupRemoval(
                    sandbox=sandbox_name,
                    leaf=leaf,
                    owner=owner,
                    controllers=_controllers(dirs),
                    killed=killed,
                    removed=gone,
                    detail="" if gone else f"still busy after {timeout_s:g} s",
                )
            )
        for d in owner_paths[(sandbox_name, owner)]:
            remove_dir(d)
    for sandbox_name, leaves in sorted(old.items()):
        for leaf, dirs in sorted(leaves.items()):
            gone = all(remove_dir(d) for d in dirs)
            out.append(
                CgroupRemoval(
                    sandbox=sandbox_name,
                    leaf=leaf,
                    owner="-",
                    controllers=_controllers(dirs),
                    removed=gone,
                    detail="" if gone else "could not be removed",
                )
            )
    tops = {d.parent.parent for dirs in owner_paths.values() for d in dirs}
    tops |= {d.parent.parent for leaves in old.values() for ds in leaves.values() for d in ds}
    for top in tops:  # the sandbox directories, then ``mlsandbox``, when nothing else uses them
        with contextlib.suppress(OSError):
            for sandbox in top.iterdir():
                if sandbox.is_dir():
                    remove_dir(sandbox)
        remove_dir(top)
    return out
