"""One local sandbox: its directory, its recorded state, its lock, and control of its services.

A sandbox is a name and a directory (:func:`mlsandbox.paths.sandbox_dir`) holding ``state.json`` (the
:class:`SandboxState`), one data directory per service and ``logs/<service>.log``. An flock
(``<sandboxes>/.<name>.lock``) serialises ``up``/``down``/garbage collection of one sandbox.

:class:`LocalSandbox` reads the state of a running sandbox and starts, probes and reads the logs of its
services one at a time: what the fault mechanisms, the source and plug-in services and the garbage
collector need. Starting and stopping the whole sandbox is :class:`~mlsandbox.backends.local.backend.
LocalBackend`'s (a ``LocalSandbox`` too), which sits above every other module of this package.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlsandbox import paths
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import BackendError, NotRunningError

from . import services as svc
from . import supervisor
from .supervisor import ProcessRecord

STOP_TIMEOUT_S = 3.0  # grace between SIGTERM and SIGKILL (the Prefect worker takes ~9 s to exit)
LOG_TAIL_LINES = 30


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServiceRecord(_Model):
    """One started service: its process and where it listens."""

    name: str
    process: ProcessRecord
    port: int | None = None
    url: str | None = None
    log: str
    ready_s: float | None = None
    """Seconds from spawn to the first healthy answer (None until healthy)."""


class SandboxState(_Model):
    """What ``state.json`` holds: everything needed to reach, inspect and stop a sandbox."""

    version: Literal[1] = 1
    name: str
    home: str
    phase: Literal["starting", "running"]
    ephemeral: bool
    owner: ProcessRecord | None = None
    """The process an ephemeral sandbox belongs to (garbage once it is gone); None when persistent."""
    created_at: float
    ports: svc.Ports
    credentials: svc.Credentials
    endpoints: Endpoints
    worker_name: str
    services: dict[str, ServiceRecord] = Field(default_factory=dict)
    client_endpoints: Endpoints | None = None
    """What the agent's and the workloads' clients use (MinIO and MLflow through Toxiproxy when it runs);
    None: the direct ``endpoints``."""

    def owner_alive(self) -> bool:
        return self.owner is None or supervisor.is_alive(self.owner)

    def service_names(self) -> tuple[str, ...]:
        """The services of this sandbox: the four core ones, plus Toxiproxy when it was started."""
        return (*svc.SERVICE_NAMES, svc.TOXIPROXY) if self.ports.toxiproxy else svc.SERVICE_NAMES

    def dead_services(self) -> list[str]:
        """Services whose process is not running (never started, exited, or pid recycled)."""
        return [
            name
            for name in self.service_names()
            if name not in self.services or not supervisor.is_alive(self.services[name].process)
        ]


# ------------------------------------------------------------------------------------------- state


def home_key() -> str:
    """The sandbox home as written into every marker (absolute, symlinks resolved)."""
    return str(paths.home().resolve())


def read_state(layout: svc.Layout) -> SandboxState | None:
    """The sandbox's state; None when there is none; :class:`BackendError` when it cannot be read."""
    try:
        raw = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    try:
        return SandboxState.model_validate_json(raw)
    except (ValidationError, json.JSONDecodeError) as exc:
        raise BackendError(f"unreadable sandbox state {layout.state_file}: {exc}") from exc


def read_state_lenient(layout: svc.Layout) -> SandboxState | None:
    """The sandbox's state; None when there is none or it cannot be read."""
    try:
        return read_state(layout)
    except BackendError:
        return None


def write_state(layout: svc.Layout, state: SandboxState) -> None:
    """Write ``state.json`` atomically (readers never see half a file)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_file.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, layout.state_file)


def _lock_path(name: str) -> Path:
    return paths.sandboxes_dir() / f".{paths.validate_sandbox_name(name)}.lock"


def _acquire(lock_path: Path, blocking: bool) -> int | None:
    """An fd holding the flock on ``lock_path`` (None when busy and not ``blocking``).

    The lock file of a removed sandbox is deleted by its holder; whoever then wins the lock on the
    deleted file sees that the path now names another file (or none) and locks again.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.fstat(fd).st_ino == os.stat(lock_path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


@contextlib.contextmanager
def sandbox_lock(name: str, *, blocking: bool = True) -> Iterator[bool]:
    """Hold the sandbox's lock; yields False (without holding it) when not ``blocking`` and it is busy."""
    fd = _acquire(_lock_path(name), blocking)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)  # closing releases the flock


def teardown(
    name: str, home: str, layout: svc.Layout, state: SandboxState | None, *, remove_data: bool
) -> list[int]:
    """Stop every process of the sandbox (recorded services and anything carrying its marker).

    With ``remove_data`` the whole sandbox directory goes; otherwise only ``state.json``. Returns the pids
    that were signalled. Call with the sandbox lock held.
    """
    records = [s.process for s in state.services.values()] if state else []
    stopped = supervisor.stop(records, extra=supervisor.find_marked(name, home), timeout=STOP_TIMEOUT_S)
    # Anything started by a dying process while we were stopping (a job spawning a child): once more.
    leftovers = supervisor.find_marked(name, home)
    if leftovers:
        stopped += supervisor.stop([], extra=leftovers, timeout=1.0)
    if remove_data:
        shutil.rmtree(layout.root, ignore_errors=True)
        svc.remove_external_postgres_dir(name, home)  # the PostgreSQL source's data, when kept outside
        _lock_path(name).unlink(missing_ok=True)  # safe while held: see _acquire
    else:
        layout.state_file.unlink(missing_ok=True)
    return stopped


def toxiproxy_up(client: Any, ports: svc.Ports) -> bool:
    """Whether the sandbox's Toxiproxy answers (False when it has none)."""
    url = svc.toxiproxy_url(ports)
    if url is None:
        return False
    try:
        return bool(client.get(f"{url}/version").status_code == 200)
    except Exception:
        return False


class LocalSandbox:
    """A local sandbox by name: its state and its services, one at a time (see the module docstring)."""

    def __init__(self, name: str | None = None) -> None:
        self.name: str = paths.validate_sandbox_name(name or paths.default_sandbox_name())
        self.home: str = home_key()
        self.dir: Path = paths.sandbox_dir(self.name)
        self.layout = svc.Layout(self.dir)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dir={str(self.dir)!r})"

    def state(self) -> SandboxState | None:
        """The sandbox's recorded state (None when it is not up)."""
        return read_state(self.layout)

    def endpoints(self) -> Endpoints:
        return self.running_state().endpoints

    def log_path(self, service: str) -> Path:
        return self.layout.log(service)

    # ------------------------------------------------------------------------------ service control

    def launch_of(self, state: SandboxState, name: str) -> svc.Launch:
        """How service ``name`` of this sandbox is started (the same ports, credentials and data)."""
        base = svc.child_env(self.name, self.home, {})
        ports, creds = state.ports, state.credentials
        launches: dict[str, Callable[[], svc.Launch]] = {
            svc.MINIO: lambda: svc.minio_launch(self.layout, ports, creds, base),
            svc.MLFLOW: lambda: svc.mlflow_launch(self.layout, ports, creds, base),
            svc.PREFECT_SERVER: lambda: svc.prefect_server_launch(self.layout, ports, base),
            svc.PREFECT_WORKER: lambda: svc.prefect_worker_launch(
                self.layout, ports, state.worker_name, base
            ),
            svc.TOXIPROXY: lambda: svc.toxiproxy_launch(self.layout, ports, base),
        }
        if name not in launches or name not in state.service_names():
            raise ValueError(f"unknown service {name!r}; services: {', '.join(state.service_names())}")
        return launches[name]()

    def start_service(self, name: str) -> ProcessRecord:
        """Start service ``name`` again after it stopped (its old process group is stopped first).

        The log is appended to (what the service printed before it died stays readable). Returns at once:
        wait for health with :meth:`service_healthy`.
        """
        with sandbox_lock(self.name):
            state = self.running_state()
            launch = self.launch_of(state, name)
            old = state.services.get(name)
            if old is not None and supervisor.is_alive(old.process):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(old.process.pgid, signal.SIGCONT)  # a frozen group cannot act on SIGTERM
                supervisor.stop([old.process], timeout=STOP_TIMEOUT_S)
            process = supervisor.spawn(
                launch.argv, env=launch.env, log_path=self.layout.log(name), cwd=launch.cwd, append=True
            )
            state.services[name] = ServiceRecord(
                name=name,
                process=process,
                port=svc.port_of(name, state.ports),
                url=svc.url_of(name, state.endpoints),
                log=str(self.layout.log(name)),
            )
            write_state(self.layout, state)
            return process

    def service_healthy(self, name: str, client: Any = None) -> bool:
        """One direct health probe of service ``name`` (not through the proxy)."""
        state = self.running_state()
        record = state.services.get(name)
        if record is None or not supervisor.is_alive(record.process):
            return False
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(svc.http_client())
            if name == svc.TOXIPROXY:
                return toxiproxy_up(client, state.ports)
            return svc.probe(name, state.endpoints, state.worker_name, client)

    def running_state(self) -> SandboxState:
        """The state of the running sandbox; :class:`NotRunningError` when it is not up."""
        state = read_state_lenient(self.layout)
        if state is None or state.phase != "running":
            raise NotRunningError(
                f"sandbox {self.name!r} is not up (no running state in {self.dir}): "
                f"start it with `mlsandbox up` or LocalBackend({self.name!r}).up()"
            )
        return state
