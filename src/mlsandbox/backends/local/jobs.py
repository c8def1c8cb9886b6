"""Batch jobs as child processes of this machine (the ``local`` backend's :class:`Jobs`).

Each job runs ``python -m mlsandbox.workloads.<workload> *args`` in its own session and process group,
with stdout and stderr in ``<sandbox_dir>/jobs/<job_id>.log`` and its working directory in
``<sandbox_dir>/jobs/<job_id>/``. Its environment is this process's, plus the sandbox endpoints (S3,
MLflow, Prefect), thread-count variables from ``cpus``, ``spec.env``, and the sandbox's marker
(``MLSANDBOX_SANDBOX=<sandbox_name>``, ``MLSANDBOX_HOME=<home>``) by which its garbage collector finds
stray processes.

Limits. As root on a cgroup v1 hierarchy, a job runs in its own memory and cpu cgroups
``<own cgroup>/mlsandbox/<sandbox_name>/<owner>/<job_id>.<random>`` (nested under the cgroup of the process
that runs :class:`LocalJobs`, so jobs stay inside whatever limits that process is under; ``<owner>`` names
that process, so the garbage collector removes the cgroups of a process that is gone:
:mod:`mlsandbox.backends.local.cgroups`):
``memory.limit_in_bytes = memory_mb`` (no swap) and ``cpu.cfs_quota_us`` from ``cpus``. A tiny ``sh``
shim joins the cgroups and then ``exec``s the workload, so every byte and cycle of the job is accounted.
The kernel OOM-kills a job that goes over its memory: it fails with exit code 137 and its log ends with a
line saying it ran out of memory.

Without root or cgroup v1 (or with ``MLSANDBOX_JOB_LIMITS=rlimit``), jobs are limited by rlimits set in
the child before it starts (``preexec_fn``): ``RLIMIT_DATA = memory_mb`` (private writable memory: heap
and anonymous mappings, what the job really allocates), ``RLIMIT_AS = memory_mb + 768 MiB`` (address
space, with room for the shared libraries numpy, scikit-learn and MLflow map) and, when the job has a
wall-clock limit, ``RLIMIT_CPU = timeout_s x cpus`` seconds (the kernel sends SIGXCPU). A job over its
memory fails with the library's own ``MemoryError`` (exit 1), not the kernel's 137. The CPU *rate* is
limited only through the thread-count variables; a running job's memory limit can be cut (``prlimit``),
its CPU quota cannot. ``MLSANDBOX_JOB_LIMITS`` = ``auto`` (default: cgroups when available, else
rlimits) | ``cgroup`` | ``rlimit`` | ``none``.

Accounting. A waiter thread per job reaps it with :func:`os.wait4`: real CPU seconds (user + system,
including reaped children) and peak RSS. While a job runs, CPU seconds and RSS come from psutil over its
process tree, sampled at most every :data:`USAGE_SAMPLE_S` (walking the process table costs several ms,
and the gateway asks after every step). A job killed by a signal reports ``128 + signal`` (SIGKILL: 137). When a job ends, any
process left in its group or cgroup is killed and the cgroup removed.

All methods are thread safe.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import errno
import math
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mlsandbox import paths
from mlsandbox.backends.local import cgroups as cgroup_layout
from mlsandbox.backends.local.cgroups import CGROUP_ROOT
from mlsandbox.backends.local.supervisor import marker_env
from mlsandbox.backends.local.workspaces import LocalWorkspaces
from mlsandbox.backends.protocols import DEFAULT_KEY, Endpoints, JobSpec, JobStatus
from mlsandbox.errors import BackendError
from mlsandbox.workloads.contract import (
    NOTE_PREFIX,
    endpoint_env,
    parse_result,
    tail_lines,
    thread_env,
)

CFS_PERIOD_US = 100_000
KILL_WAIT_S = 5.0
_JOB_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
LIMITS_ENV = "MLSANDBOX_JOB_LIMITS"
LIMIT_MODES = ("cgroup", "rlimit", "none")
AS_ALLOWANCE_MB = 768
USAGE_SAMPLE_S = 0.5
"""A running job's CPU seconds and RSS are sampled at most this often (its final figures are exact)."""
"""Address space allowed above ``memory_mb`` under rlimits (code and shared libraries mapped, not used)."""
# Joins the cgroups given as $1 and $2, then becomes the workload (exit 125: could not join).
CGROUP_SHIM = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'
)
"""``sh -c CGROUP_SHIM NAME N PROCS_FILE... COMMAND...``: join the N cgroups, then exec the command
(:meth:`Cgroup.shim_args`)."""


# ------------------------------------------------------------------------------------------- cgroups


def cgroups_available() -> bool:
    """Whether jobs can get their own memory and cpu cgroups: root, cgroup v1, both writable."""
    if os.geteuid() != 0:
        return False
    checks = {"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}
    return all(
        (CGROUP_ROOT / c / knob).is_file() and os.access(CGROUP_ROOT / c, os.W_OK)
        for c, knob in checks.items()
    )


def choose_limits(requested: str | None = None) -> str:
    """The limit mechanism for jobs: ``requested`` or ``$MLSANDBOX_JOB_LIMITS`` (``auto``: cgroups when
    available, else rlimits). :class:`ValueError` for an unknown mode or cgroups that are not there."""
    mode = (requested or os.environ.get(LIMITS_ENV) or "auto").strip().lower()
    if mode == "auto":
        return "cgroup" if cgroups_available() else "rlimit"
    if mode not in LIMIT_MODES:
        raise ValueError(f"{LIMITS_ENV}={mode!r}: use auto, {', '.join(LIMIT_MODES)}")
    if mode == "cgroup" and not cgroups_available():
        raise ValueError("job cgroups need root and a writable cgroup v1 hierarchy (memory and cpu)")
    return mode


def rlimits_for(memory_mb: int, cpus: float, timeout_s: float | None) -> dict[int, int]:
    """The rlimits of a job under the ``rlimit`` mechanism (resource -> soft and hard limit)."""
    limits = {
        resource.RLIMIT_DATA: memory_mb << 20,
        resource.RLIMIT_AS: (memory_mb + AS_ALLOWANCE_MB) << 20,
    }
    if timeout_s is not None:
        limits[resource.RLIMIT_CPU] = max(1, math.ceil(timeout_s * max(cpus, 0.01)))
    return limits


def _rlimit_preexec(limits: dict[int, int]) -> Any:
    def apply() -> None:  # runs in the child between fork and exec: setrlimit only
        for which, value in limits.items():
            if which == resource.RLIMIT_CPU:  # SIGXCPU at the soft limit, SIGKILL a second later
                resource.setrlimit(which, (value, value + 1))
            else:
                resource.setrlimit(which, (value, value))

    return apply


_TREE_LOCK = threading.Lock()  # between making and removing the shared parent directories


def sandbox_cgroup_dirs(sandbox_name: str) -> list[Path]:
    """The memory and cpu cgroup directories of ``sandbox_name`` in this process's own cgroups (each holds
    one directory per owning process: :mod:`mlsandbox.backends.local.cgroups`)."""
    return cgroup_layout.sandbox_dirs(sandbox_name)


class Cgroup:
    """A job's memory and cpu cgroups (v1), in this process's owner directory of the sandbox (see
    :mod:`mlsandbox.backends.local.cgroups`)."""

    def __init__(self, sandbox_name: str, job_id: str, home: str | None = None) -> None:
        # One directory per job *instance*: a forgotten job's late clean-up can never remove (and kill)
        # the cgroup of a new job that reuses its id.
        leaf = f"{job_id}.{secrets.token_hex(4)}"
        home = home or str(paths.home().resolve())
        dirs = [d / leaf for d in cgroup_layout.owner_dirs(sandbox_name, home)]
        self.memory, self.cpu = dirs[0], dirs[1]
        self.cpuacct: Path | None = dirs[2] if len(dirs) > 2 else None
        """The CPU accounting directory when cpuacct is a hierarchy of its own (else it is ``cpu``)."""

    @property
    def dirs(self) -> list[Path]:
        return [self.memory, self.cpu, *([self.cpuacct] if self.cpuacct is not None else [])]

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def shim_args(self) -> list[str]:
        """What follows ``sh -c CGROUP_SHIM NAME`` before the command: the count and the procs files."""
        files = self.procs_files
        return [str(len(files)), *files]

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by every process that has been in the group (cpuacct), None when unreadable."""
        for d in (self.cpuacct, self.cpu):
            if d is None:
                continue
            try:
                return int((d / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                continue
        return None

    def create(self, memory_mb: int, cpus: float) -> None:
        """Make both groups and set their limits; never touches a group that still holds processes."""
        for d in self.dirs:
            if d.exists() and not _remove_cgroup_dir(d):
                raise BackendError(f"cgroup {d} is still in use by processes of an earlier job {d.name!r}")
        created: list[Path] = []
        try:
            for d in self.dirs:
                _make_cgroup_dir(d)
                created.append(d)
            limit = str(memory_mb << 20)
            (self.memory / "memory.limit_in_bytes").write_text(limit)
            memsw = self.memory / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # no swapping past the limit (as on Kubernetes)
                memsw.write_text(limit)
            (self.cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (self.cpu / "cpu.cfs_quota_us").write_text(str(max(1000, int(cpus * CFS_PERIOD_US))))
        except OSError as exc:
            for d in created:  # still empty: nothing has joined yet
                _remove_cgroup_dir(d)
            raise BackendError(f"could not set up the cgroups of job {self.memory.name!r}: {exc}") from exc

    def set_memory(self, memory_mb: int) -> int:
        """Set the memory limit; when the group already uses more (the kernel refuses with EBUSY), set it
        to what it uses now, so its next allocation is OOM-killed. Returns the limit set, in MiB."""
        limit = memory_mb << 20
        try:
            (self.memory / "memory.limit_in_bytes").write_text(str(limit))
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            usage = int((self.memory / "memory.usage_in_bytes").read_text())
            limit = -(-usage // 4096) * 4096
            (self.memory / "memory.limit_in_bytes").write_text(str(limit))
        memsw = self.memory / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            with contextlib.suppress(OSError):
                memsw.write_text(str(limit))
        return limit >> 20

    def set_cpus(self, cpus: float) -> None:
        (self.cpu / "cpu.cfs_quota_us").write_text(str(max(1000, int(cpus * CFS_PERIOD_US))))

    def cpu_quota_us(self) -> int:
        return int((self.cpu / "cpu.cfs_quota_us").read_text())

    def oom_kills(self) -> int:
        """How many processes the kernel OOM-killed in this group (failcnt when the kernel has no counter)."""
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
            return int((self.memory / "memory.failcnt").read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def max_usage_bytes(self) -> int | None:
        """The group's memory high-water mark (page cache included), or None when unreadable."""
        try:
            return int((self.memory / "memory.max_usage_in_bytes").read_text())
        except (OSError, ValueError):
            return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in Path(procs).read_text().split())
        return sorted(found)

    def remove(self) -> None:
        """Kill what is left in the group, then remove both directories (best effort, a few seconds)."""
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if all(_remove_cgroup_dir(d) for d in self.dirs) or time.monotonic() > deadline:
                return
            time.sleep(0.05)


def _make_cgroup_dir(path: Path) -> None:
    """mkdir with parents; retried when another process removes an (empty) parent meanwhile."""
    for attempt in range(3):
        try:
            with _TREE_LOCK:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.mkdir()
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


_remove_cgroup_dir = cgroup_layout.remove_dir


def remove_stale_cgroups(sandbox_name: str, home: str | None = None) -> list[cgroup_layout.CgroupRemoval]:
    """Remove the job cgroups of ``sandbox_name`` in this process's own cgroups whose owning process is
    gone (what is left in them is killed first); see :func:`mlsandbox.backends.local.cgroups.collect`."""
    roots = {d.parent for d in sandbox_cgroup_dirs(sandbox_name) if d.is_dir()}
    if not roots:
        return []
    found = cgroup_layout.collect(
        home or str(paths.home().resolve()), roots=sorted(roots), legacy=lambda name: name == sandbox_name
    )
    return [r for r in found if r.sandbox == sandbox_name]


# ------------------------------------------------------------------------------------------ processes

OWNER_ENV = "MLSANDBOX_JOB_OWNER"
"""``<pid>-<start ticks>`` of the process that started a job: a job whose owner is gone is garbage."""


def owner_marker() -> str:
    from mlsandbox.backends.local.supervisor import start_ticks

    return f"{os.getpid()}-{start_ticks(os.getpid())}"


def exit_code_of(wait_status: int) -> int:
    """The shell convention: the exit status, or 128 + N for a process killed by signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _tree_usage(pid: int) -> tuple[float, int]:
    """CPU seconds (including reaped children) and RSS bytes of a running process and its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0
    cpu, rss = 0.0, 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            cpu += times.user + times.system
            if proc is root:
                cpu += times.children_user + times.children_system
            rss += proc.memory_info().rss
    return cpu, rss


# -------------------------------------------------------------------------------------------------- jobs


def _validate(spec: JobSpec) -> None:
    if not _JOB_ID_RE.match(spec.job_id):
        raise ValueError(
            f"invalid job id {spec.job_id!r}: use 1-63 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    if spec.cpus <= 0 or spec.memory_mb <= 0:
        raise ValueError(f"job {spec.job_id!r}: cpus and memory_mb must be positive")
    if spec.timeout_s is not None and spec.timeout_s <= 0:
        raise ValueError(f"job {spec.job_id!r}: timeout_s must be positive")


@dataclass(eq=False)
class _Job:
    spec: JobSpec
    log_path: Path
    work_dir: Path
    state: str = "queued"
    popen: subprocess.Popen[bytes] | None = None
    cgroup: Cgroup | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    cpu_seconds: float = 0.0
    peak_rss_bytes: int | None = None
    usage_sampled_at: float = float("-inf")
    result: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False
    timed_out: bool = False
    timer: threading.Timer | None = None
    done: threading.Event = field(default_factory=threading.Event)
    unsaved_notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    def status(self) -> JobStatus:
        return JobStatus(
            job_id=self.spec.job_id,
            state=self.state,  # type: ignore[arg-type]
            exit_code=self.exit_code,
            started_at=self.started_at,
            finished_at=self.finished_at,
            cpu_seconds=round(self.cpu_seconds, 3),
            peak_rss_bytes=self.peak_rss_bytes,
            result=dict(self.result),
        )

    def note(self, message: str) -> None:
        """Append a supervisor line to the job's log (as a kubelet event would tell); kept in memory when
        the log cannot be written (a full disk), and shown after the log's lines."""
        line = f"{NOTE_PREFIX} {message}"
        try:
            with self.log_path.open("a") as f:
                f.write(line + "\n")
        except OSError:
            self.unsaved_notes.append(line)


@dataclass(eq=False)
class _Registry:
    """The jobs of one running sandbox in this process, shared by every LocalJobs made for it."""

    sandbox_name: str
    use_cgroups: bool
    home: str
    jobs: dict[str, _Job] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def close(self) -> None:
        """Kill and forget every job; remove this process's (then empty) cgroup directories of the
        sandbox, and the sandbox's and ``mlsandbox`` ones when no other process uses them."""
        _kill_all(self.jobs, self.lock)
        with self.lock:
            self.jobs.clear()
        if self.use_cgroups:
            with _TREE_LOCK:  # an empty cgroup left in our parent's cgroup would keep it from being removed
                for owner in cgroup_layout.owner_dirs(self.sandbox_name, self.home):
                    if _remove_cgroup_dir(owner) and _remove_cgroup_dir(owner.parent):
                        _remove_cgroup_dir(owner.parent.parent)  # "mlsandbox"


_REGISTRIES: dict[tuple[str, str], _Registry] = {}
_REGISTRIES_LOCK = threading.Lock()


def _registry(key: tuple[str, str], sandbox_name: str, use_cgroups: bool, home: str) -> _Registry:
    with _REGISTRIES_LOCK:
        registry = _REGISTRIES.get(key)
        if registry is None:
            if use_cgroups:
                remove_stale_cgroups(sandbox_name, home)
            registry = _REGISTRIES[key] = _Registry(sandbox_name, use_cgroups, home)
        return registry


@atexit.register
def _kill_everything() -> None:
    """Jobs live in their own sessions: stop them all when the interpreter exits (also on Ctrl-C)."""
    with _REGISTRIES_LOCK:
        registries = list(_REGISTRIES.values())
    for registry in registries:
        registry.close()


class LocalJobs:
    """Jobs of one sandbox as child processes (see the module docstring for limits and accounting).

    Every LocalJobs of the same running sandbox (same directory and endpoints) in this process shares
    one registry of jobs: handing out a new runtime does not lose track of running jobs, and two
    runtimes cannot start two jobs with the same id.
    """

    def __init__(
        self,
        sandbox_dir: Path,
        sandbox_name: str,
        endpoints: Endpoints,
        *,
        use_cgroups: bool | None = None,
        home: str | None = None,
        limits: str | None = None,
    ) -> None:
        self.jobs_dir = Path(sandbox_dir) / "jobs"
        self.sandbox_name = sandbox_name
        self.home = home or str(paths.home().resolve())  # as in the sandbox's process marker
        self.endpoints = endpoints
        if limits is None and use_cgroups is not None:
            limits = "cgroup" if use_cgroups else "none"
        self.limits = choose_limits(limits)
        """``cgroup``, ``rlimit`` or ``none`` (see the module docstring)."""
        self.use_cgroups = self.limits == "cgroup"
        self._key = (str(Path(sandbox_dir).resolve()), endpoints.model_dump_json())
        registry = _registry(self._key, sandbox_name, self.use_cgroups, self.home)
        self._registry = registry
        self._jobs, self._lock = registry.jobs, registry.lock
        self.workspaces: LocalWorkspaces | None = None
        """Where ``script`` jobs run (set by the runtime; without it they are refused)."""

    # ---------------------------------------------------------------------------------------- protocol

    def submit(self, spec: JobSpec) -> JobStatus:
        """Start the job now; :class:`ValueError` for an invalid spec or an already used job id."""
        _validate(spec)
        job = _Job(
            spec=spec, log_path=self.jobs_dir / f"{spec.job_id}.log", work_dir=self.jobs_dir / spec.job_id
        )
        with self._lock:
            if spec.job_id in self._jobs:
                raise ValueError(f"job {spec.job_id!r} already exists")
            self._jobs[spec.job_id] = job
        try:
            self._start(job)
        except BaseException:
            with self._lock:
                self._jobs.pop(spec.job_id, None)
            if job.cgroup is not None:
                job.cgroup.remove()
            raise
        return self.get(spec.job_id)

    def get(self, job_id: str) -> JobStatus:
        """Raise :class:`KeyError` for an unknown job."""
        with self._lock:
            job = self._job(job_id)
            running_pid = job.popen.pid if job.state == "running" and job.popen else None
            now = time.monotonic()
            if (
                running_pid is not None
                and job.cpu_seconds > 0
                and now - job.usage_sampled_at < USAGE_SAMPLE_S
            ):
                running_pid = None  # sampled a moment ago (and it had started): that figure stands
            elif running_pid is not None:
                job.usage_sampled_at = now
        if running_pid is not None:
            cpu, rss = _tree_usage(running_pid)
            counted = job.cgroup.cpu_seconds() if job.cgroup is not None else None
            cpu = max(cpu, counted or 0.0)  # the group counts the processes a sandbox's init reaps too
            with self._lock:
                if job.state == "running":
                    job.cpu_seconds = max(job.cpu_seconds, cpu)
                    job.peak_rss_bytes = max(job.peak_rss_bytes or 0, rss) or None
        with self._lock:
            return job.status()

    def logs(self, job_id: str, tail: int = 50) -> str:
        """The last ``tail`` lines of the job's combined stdout and stderr (all of it when ``tail`` <= 0)."""
        with self._lock:
            job = self._job(job_id)
            path, unsaved = job.log_path, list(job.unsaved_notes)
        text = tail_lines(path, tail)
        if unsaved:
            lines = [*text.splitlines(), *unsaved]
            text = "\n".join(lines[-tail:] if tail > 0 else lines) + "\n"
        return text

    def cancel(self, job_id: str, grace_s: float = 2.0) -> JobStatus:
        """SIGTERM the job's process group, SIGKILL it after ``grace_s``; a finished job is left as is."""
        with self._lock:
            job = self._job(job_id)
            if job.finished:
                return job.status()
            job.cancel_requested = True
        self._stop(job, grace_s)
        return self.get(job_id)

    def set_resources(
        self, job_id: str, cpus: float | None = None, memory_mb: int | None = None
    ) -> JobStatus:
        """Change a job's CPU quota and/or memory limit: at once in its cgroups when it runs, and in its
        spec (what ``get`` and a retry see). A memory limit below what the job already uses is set to its
        current usage (the kernel cannot shrink it further): its next allocation is OOM-killed.
        :class:`KeyError` for an unknown job; :class:`ValueError` for a finished job or without cgroups."""
        if (cpus is not None and cpus <= 0) or (memory_mb is not None and memory_mb <= 0):
            raise ValueError("cpus and memory_mb must be positive")
        with self._lock:
            job = self._job(job_id)
            if job.finished:
                raise ValueError(f"job {job_id!r} is {job.state}: limits apply to a queued or running job")
            if self.limits == "rlimit" and cpus is not None:
                raise ValueError(
                    "a job's CPU quota cannot be changed here: it needs cgroup v1 and root "
                    "(jobs are limited by rlimits; their memory limit can be changed)"
                )
            if self.limits == "none":
                raise ValueError("job limits cannot be changed here: cgroups need root and cgroup v1")
            update: dict[str, Any] = {}
            if cpus is not None:
                update["cpus"] = cpus
            if memory_mb is not None:
                update["memory_mb"] = memory_mb
            job.spec = job.spec.model_copy(update=update)
            cgroup = job.cgroup if job.state == "running" else None
        if cgroup is not None:
            try:
                if cpus is not None:
                    cgroup.set_cpus(cpus)
                if memory_mb is not None:
                    cgroup.set_memory(memory_mb)
            except FileNotFoundError:
                pass  # the job ended meanwhile: its cgroup is gone
        elif self.limits == "rlimit" and memory_mb is not None:
            for pid in self.pids(job_id):  # the next allocation past the limit fails (MemoryError)
                for which, value in rlimits_for(memory_mb, 1.0, None).items():
                    with contextlib.suppress(OSError, ValueError):
                        resource.prlimit(pid, which, (value, value))
        return self.get(job_id)

    def pids(self, job_id: str) -> list[int]:
        """Pids of a running job's process tree ([] when it is not running)."""
        with self._lock:
            job = self._job(job_id)
            pid = job.popen.pid if job.popen is not None and job.state == "running" else None
        if pid is None:
            return []
        try:
            root = psutil.Process(pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return []

    def cgroup_dirs(self, job_id: str) -> list[Path]:
        """The memory and cpu cgroup directories of a running job ([] when it has none)."""
        with self._lock:
            job = self._job(job_id)
            return [] if job.cgroup is None or job.finished else [job.cgroup.memory, job.cgroup.cpu]

    def list(self, label: tuple[str, str] | None = None) -> list[JobStatus]:
        """Jobs in submission order, only those carrying ``label`` = (key, value) when given."""
        with self._lock:
            ids = [j.spec.job_id for j in self._matching(label)]
        statuses = []
        for job_id in ids:
            with contextlib.suppress(KeyError):  # forgotten meanwhile
                statuses.append(self.get(job_id))
        return statuses

    def cleanup(self, label: tuple[str, str]) -> None:
        """Kill and forget every job carrying ``label``; remove their cgroups, logs and work dirs."""
        with self._lock:
            jobs = self._matching(label)
            for job in jobs:
                job.cancel_requested = job.cancel_requested or not job.finished
        for job in jobs:  # kill all first, then wait for each
            if job.popen is not None and not job.done.is_set():
                _signal_group(job.popen.pid, signal.SIGKILL)
        for job in jobs:
            self._stop(job, grace_s=0.0)
        with self._lock:
            for job in jobs:
                if self._jobs.get(job.spec.job_id) is job:
                    del self._jobs[job.spec.job_id]
        for job in jobs:
            job.log_path.unlink(missing_ok=True)
            shutil.rmtree(job.work_dir, ignore_errors=True)

    # -------------------------------------------------------------------------------------------- extra

    def close(self) -> None:
        """Kill and forget every job of the sandbox (for every LocalJobs sharing it) and remove the job
        cgroups; logs stay on disk. Idempotent."""
        self._registry.close()
        with _REGISTRIES_LOCK:
            if _REGISTRIES.get(self._key) is self._registry:
                del _REGISTRIES[self._key]

    def env_for(self, spec: JobSpec) -> dict[str, str]:
        """The job's environment: ours + endpoints + thread counts + spec.env + the sandbox marker
        (``MLSANDBOX_SANDBOX``/``MLSANDBOX_HOME``, by which the garbage collector finds strays)."""
        return {
            **os.environ,
            **endpoint_env(**self.endpoints.model_dump()),
            **thread_env(spec.cpus),
            "PYTHONUNBUFFERED": "1",
            "MLSANDBOX_JOB_ID": spec.job_id,
            OWNER_ENV: owner_marker(),
            **spec.env,
            **marker_env(self.sandbox_name, self.home),
        }

    # ---------------------------------------------------------------------------------------- internals

    def _job(self, job_id: str) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id!r}") from None

    def _matching(self, label: tuple[str, str] | None) -> builtins.list[_Job]:
        return [j for j in self._jobs.values() if label is None or j.spec.labels.get(label[0]) == label[1]]

    def _script_launch(self, spec: JobSpec) -> tuple[builtins.list[str], dict[str, str]]:
        """The isolated command and the environment of a ``script`` job (see
        :mod:`mlsandbox.backends.local.workspaces`)."""
        if self.workspaces is None:
            raise ValueError("script jobs need the sandbox's workspaces")
        command, env = self.workspaces.launch(spec, thread_env(spec.cpus))
        return command, {**env, OWNER_ENV: owner_marker(), **marker_env(self.sandbox_name, self.home)}

    def _command(self, job: _Job, script: builtins.list[str] | None = None) -> builtins.list[str]:
        command = script or [sys.executable, "-m", f"mlsandbox.workloads.{job.spec.workload}", *job.spec.args]
        if job.spec.environment not in (None, DEFAULT_KEY):
            # A named environment: its interpreter runs the (self-contained) workload file by path.
            from mlsandbox.backends.local.venvs import interpreter

            workload = Path(__file__).resolve().parents[2] / "workloads" / f"{job.spec.workload}.py"
            command = [str(interpreter(job.spec.environment)), str(workload), *job.spec.args]
        if job.cgroup is None:
            return command
        return ["/bin/sh", "-c", CGROUP_SHIM, "mlsandbox-job", *job.cgroup.shim_args(), *command]

    def _start(self, job: _Job) -> None:
        spec = job.spec
        job.work_dir.mkdir(parents=True, exist_ok=True)
        script, env = self._script_launch(spec) if spec.workload == "script" else (None, self.env_for(spec))
        if self.use_cgroups:
            cgroup = Cgroup(self.sandbox_name, spec.job_id, self.home)
            cgroup.create(spec.memory_mb, spec.cpus)
            job.cgroup = cgroup  # only once it is ours to remove
        preexec = (
            _rlimit_preexec(rlimits_for(spec.memory_mb, spec.cpus, spec.timeout_s))
            if self.limits == "rlimit"
            else None
        )
        with job.log_path.open("wb") as log:
            popen = subprocess.Popen(
                self._command(job, script),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=job.work_dir,
                start_new_session=True,
                preexec_fn=preexec,  # only setrlimit runs in the child
            )
        with self._lock:
            job.popen, job.started_at, job.state = popen, time.time(), "running"
            if spec.timeout_s is not None:
                job.timer = threading.Timer(spec.timeout_s, self._on_timeout, args=(job,))
                job.timer.daemon = True
                job.timer.start()
        threading.Thread(target=self._reap, args=(job,), name=f"job-{spec.job_id}", daemon=True).start()
        if job.cancel_requested:  # cancelled while starting
            self._stop(job, grace_s=0.0)

    def _stop(self, job: _Job, grace_s: float) -> None:
        """Signal the job's group (TERM then KILL after ``grace_s``) and wait until it has been reaped."""
        if job.popen is None or job.done.is_set():
            return
        if grace_s > 0:
            _signal_group(job.popen.pid, signal.SIGTERM)
            if job.done.wait(grace_s):
                return
        _signal_group(job.popen.pid, signal.SIGKILL)
        job.done.wait(KILL_WAIT_S)

    def _on_timeout(self, job: _Job) -> None:
        with self._lock:
            if job.finished or job.popen is None:
                return
            job.timed_out = True
        job.note(f"timed out after {job.spec.timeout_s:g} s; killing the job")
        _signal_group(job.popen.pid, signal.SIGKILL)

    def _reap(self, job: _Job) -> None:
        """Waiter thread: reap the job, account it, kill leftovers, remove its cgroup, set its final state."""
        assert job.popen is not None
        try:
            _, wait_status, usage = os.wait4(job.popen.pid, 0)
        except ChildProcessError:  # reaped elsewhere (someone called waitpid(-1)): no status to tell
            wait_status, usage = 255 << 8, resource.getrusage(resource.RUSAGE_CHILDREN)
            job.note("exit status lost: the process was reaped outside mlsandbox")
        job.popen.returncode = os.waitstatus_to_exitcode(wait_status)
        finished_at = time.time()
        _signal_group(job.popen.pid, signal.SIGKILL)  # no process outlives its job
        oom_kills = job.cgroup.oom_kills() if job.cgroup is not None else 0
        counted = job.cgroup.cpu_seconds() if job.cgroup is not None else None
        cgroup_peak = job.cgroup.max_usage_bytes() if job.cgroup is not None else None
        if job.cgroup is not None:
            job.cgroup.remove()
        exit_code = exit_code_of(wait_status)
        with self._lock:
            cancelled, timed_out = job.cancel_requested, job.timed_out
            if job.timer is not None:
                job.timer.cancel()
        self._note_end(job, wait_status, oom_kills, cancelled or timed_out)
        result = parse_result(tail_lines(job.log_path, 200)) if exit_code == 0 else {}
        with self._lock:
            job.exit_code, job.finished_at, job.result = exit_code, finished_at, result
            # Every process that was in the job's group (cpuacct), which counts what the wait status
            # cannot: processes reaped by another than the job's first one (a sandbox's own init).
            job.cpu_seconds = max(usage.ru_utime + usage.ru_stime, counted or 0.0)
            # Not ru_maxrss: a forked child starts with its parent's high-water mark, so a small job
            # forked from a big process would report the parent's size. The cgroup's own high-water
            # mark when there is one, else the largest RSS sampled while it ran.
            if cgroup_peak is not None:
                job.peak_rss_bytes = cgroup_peak
            if exit_code == 0 and not timed_out:
                job.state = "succeeded"
            else:
                job.state = "cancelled" if cancelled and not timed_out else "failed"
        job.done.set()

    def _note_end(self, job: _Job, wait_status: int, oom_kills: int, expected: bool) -> None:
        if exit_code_of(wait_status) != 0 and not expected:
            full = _disk_full(job.log_path)
            if full is not None:  # its output (a traceback included) could not be written: say why
                job.note(
                    f"failed: no space left on the sandbox's disk ({full}); its output could not be written"
                )
        if oom_kills:
            limit = f"memory limit {job.spec.memory_mb} MiB"
            if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGKILL:
                job.note(f"killed: out of memory (OOMKilled, {limit})")
            else:
                job.note(f"{oom_kills} process(es) of the job killed: out of memory (OOMKilled, {limit})")
        elif os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGXCPU:
            job.note("killed by signal SIGXCPU: CPU time limit exceeded (RLIMIT_CPU)")
        elif os.WIFSIGNALED(wait_status) and not expected:
            job.note(f"killed by signal {signal.Signals(os.WTERMSIG(wait_status)).name}")
        elif job.cancel_requested and not job.timed_out:
            job.note("cancelled")


DISK_FULL_BYTES = 1 << 20
"""Less free space than this on the file system of a job's log: the disk is full for the job."""


def _disk_full(path: Path) -> str | None:
    """How full the file system holding ``path`` is, when it has less than :data:`DISK_FULL_BYTES` free
    (None otherwise, or when it cannot be told)."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= DISK_FULL_BYTES:
        return None
    return f"{free >> 10} KiB free of {(st.f_blocks * st.f_frsize) >> 20} MiB"


def _kill_all(jobs: dict[str, _Job], lock: threading.RLock) -> None:
    """Kill every running job's group and wait until it is reaped (its cgroup removed)."""
    with lock:
        running = [j for j in jobs.values() if j.popen is not None and not j.finished]
        for job in running:
            job.cancel_requested = True
    for job in running:
        assert job.popen is not None
        _signal_group(job.popen.pid, signal.SIGKILL)
    for job in running:
        if not job.done.wait(KILL_WAIT_S) and job.cgroup is not None:
            job.cgroup.remove()
