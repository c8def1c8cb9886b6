"""Supervised child processes: started in their own process group, tracked by identity, stopped for sure.

A child is recorded as a :class:`ProcessRecord`: its pid, its process group and its start time in clock
ticks since boot (``/proc/<pid>/stat`` field 22). pids are recycled (``pid_max`` is 32768 here), so every
signal goes only to a process whose start time still matches the record: a recycled pid is never signalled.

Every child also carries an environment marker (``MLSANDBOX_SANDBOX``/``MLSANDBOX_HOME``, see
:func:`marker_env`) that its descendants inherit, so processes that left the group (``setsid``) are still
found by :func:`find_marked` and stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict

MARKER_ENV = "MLSANDBOX_SANDBOX"
HOME_ENV = "MLSANDBOX_HOME"

# Popen objects of the children this process started: kept so they can be reaped (no zombies, no
# "subprocess is still running" warnings) and so their exit codes are known.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ProcessRecord(BaseModel):
    """Identity of a started process: pid plus start time, so a recycled pid is never mistaken for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    pgid: int
    start_ticks: int
    """Start time in clock ticks since boot (exact; used for identity)."""
    create_time: float
    """Start time as unix seconds (psutil's ``create_time``; for display and uptime)."""

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        """Record the running process ``pid``; raise :class:`psutil.NoSuchProcess` if there is none."""
        ticks = start_ticks(pid)
        if ticks is None:
            raise psutil.NoSuchProcess(pid)
        proc = psutil.Process(pid)
        return cls(pid=pid, pgid=os.getpgid(pid), start_ticks=ticks, create_time=proc.create_time())


def marker_env(sandbox: str, home: str) -> dict[str, str]:
    """The environment marker every process of sandbox ``sandbox`` (under ``home``) carries."""
    return {MARKER_ENV: sandbox, HOME_ENV: home}


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None when there is no such (non-zombie) process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # zombie or dead: gone for every purpose here
        return None
    return int(fields[19])


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path,
    append: bool = False,
) -> ProcessRecord:
    """Start ``argv`` in a new session (its own process group), stdout and stderr to ``log_path``
    (truncated first unless ``append``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as log:
        proc = subprocess.Popen(
            [os.fspath(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    ticks = start_ticks(proc.pid)
    if ticks is None:  # exited already: keep a record that will never match a live process
        return ProcessRecord(pid=proc.pid, pgid=proc.pid, start_ticks=-1, create_time=time.time())
    return ProcessRecord(
        pid=proc.pid, pgid=proc.pid, start_ticks=ticks, create_time=psutil.Process(proc.pid).create_time()
    )


def get_process(record: ProcessRecord) -> psutil.Process | None:
    """The live process ``record`` names, or None when it exited (or its pid now belongs to another)."""
    reap()
    if start_ticks(record.pid) != record.start_ticks:
        return None
    try:
        return psutil.Process(record.pid)
    except psutil.NoSuchProcess:
        return None


def is_alive(record: ProcessRecord) -> bool:
    return get_process(record) is not None


EXIT_STATUS_WAIT_S = 5.0
"""How long :func:`exit_code` waits for the status of a child that is gone but not collectable yet."""


def exit_code(record: ProcessRecord) -> int | None:
    """Exit code of a child this process started and that has exited; None otherwise.

    A process whose main thread has ended is a zombie here (not alive) while its other threads still run
    or die (a server the kernel killed for memory frees it thread by thread), and its status cannot be
    collected until the last one has ended: for such a child, wait up to :data:`EXIT_STATUS_WAIT_S`."""
    proc = _CHILDREN.get(record.pid)
    if proc is None:
        return None
    code = proc.poll()
    if code is None and start_ticks(record.pid) is None:
        try:
            code = proc.wait(timeout=EXIT_STATUS_WAIT_S)
        except subprocess.TimeoutExpired:
            return None
    return code


def process_tree(record: ProcessRecord) -> list[psutil.Process]:
    """The process and all its descendants (empty when it is gone)."""
    root = get_process(record)
    if root is None:
        return []
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(record: ProcessRecord) -> int:
    """Resident memory of the process and its descendants, in bytes (0 when gone)."""
    total = 0
    for proc in process_tree(record):
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def uptime(record: ProcessRecord) -> float | None:
    return time.time() - record.create_time if is_alive(record) else None


def _protected_pids() -> set[int]:
    """This process and its ancestors: never signalled, whatever they carry in their environment."""
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def find_marked(sandbox: str | None, home: str) -> list[psutil.Process]:
    """Live processes carrying the marker of ``sandbox`` under ``home`` (any sandbox there when None)."""
    protected = _protected_pids()
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        if proc.pid in protected:
            continue
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        name = env.get(MARKER_ENV)
        if name is None or env.get(HOME_ENV) != home:
            continue
        if sandbox is None or name == sandbox:
            found.append(proc)
    return found


def marker_of(proc: psutil.Process) -> str | None:
    """The sandbox name in ``proc``'s environment marker, if any."""
    try:
        return proc.environ().get(MARKER_ENV)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_proc(proc: psutil.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        proc.send_signal(sig)  # psutil refuses to signal a pid that now belongs to another process


def _live_leaders(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    return [r for r in records if is_alive(r)]


def stop(
    records: Iterable[ProcessRecord],
    *,
    extra: Iterable[psutil.Process] = (),
    timeout: float = 5.0,
) -> list[int]:
    """Stop the recorded processes, their process groups and descendants, and ``extra`` processes.

    SIGTERM first, SIGKILL whatever is left after ``timeout`` seconds. A record whose process is gone (or
    whose pid was recycled) is skipped: its group is only signalled while its leader is the recorded one.
    Returns the pids that were signalled.
    """
    protected = _protected_pids()
    leaders = _live_leaders(records)
    targets: dict[int, psutil.Process] = {}
    for record in leaders:
        for proc in process_tree(record):
            targets[proc.pid] = proc
    for proc in _group_members({r.pgid for r in leaders}):
        targets[proc.pid] = proc
    for proc in extra:
        targets[proc.pid] = proc
    for pid in protected:
        targets.pop(pid, None)

    for record in leaders:
        _signal_group(record.pgid, signal.SIGTERM)
    for proc in targets.values():
        _signal_proc(proc, signal.SIGTERM)

    deadline = time.monotonic() + timeout
    _wait_gone(leaders, list(targets.values()), deadline)

    for record in _live_leaders(leaders):
        _signal_group(record.pgid, signal.SIGKILL)
    for proc in targets.values():
        _signal_proc(proc, signal.SIGKILL)
    _wait_gone(leaders, list(targets.values()), time.monotonic() + 5.0)
    reap()
    return sorted(targets)


def _group_members(pgids: set[int]) -> list[psutil.Process]:
    """Processes in the given process groups (including members whose parent already exited)."""
    if not pgids:
        return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in pgids:
                members.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def _wait_gone(leaders: list[ProcessRecord], procs: list[psutil.Process], deadline: float) -> None:
    while time.monotonic() < deadline:
        reap()
        if not _live_leaders(leaders) and not any(_running(p) for p in procs):
            return
        time.sleep(0.05)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def reap() -> None:
    """Collect the exit status of every child of ours that has exited (no zombies left behind)."""
    for proc in list(_CHILDREN.values()):
        proc.poll()


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
