"""The local backend: a sandbox's services as supervised child processes of this machine.

A sandbox is a name and a directory (:func:`mlsandbox.paths.sandbox_dir`) holding:

- ``state.json``: the :class:`~mlsandbox.backends.local.sandbox.SandboxState` (ports, credentials,
  endpoints, each service's pid, process group and start time, and for an ephemeral sandbox the process
  that owns it);
- one data directory per service (``minio/``, ``mlflow/``, ``prefect/``, ``prefect-worker/``);
- ``logs/<service>.log``: stdout and stderr of each service, truncated at each start.

Every process of a sandbox carries ``MLSANDBOX_SANDBOX=<name>`` and ``MLSANDBOX_HOME=<home>`` in its
environment (descendants inherit it), so whatever escapes the process groups is still found and stopped.
An flock (``<sandboxes>/.<name>.lock``) serialises ``up``/``down``/garbage collection of one sandbox.

This module is the top of the package: :class:`LocalBackend` starts and stops a whole sandbox and hands out
its runtime; what the other modules need of a sandbox (its state, its lock, one service at a time) is
:mod:`~mlsandbox.backends.local.sandbox`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from mlsandbox.backends.protocols import (
    BackendConfig,
    BackendType,
    SandboxListing,
    ServiceStatus,
    Support,
)
from mlsandbox.errors import NotRunningError, ServiceStartError

from . import services as svc
from . import supervisor
from .sandbox import (
    LOG_TAIL_LINES,
    LocalSandbox,
    SandboxState,
    ServiceRecord,
    read_state_lenient,
    sandbox_lock,
    teardown,
    toxiproxy_up,
    write_state,
)
from .supervisor import ProcessRecord

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Runtime

KIND = "local"
DEFAULT_HEALTH_TIMEOUT_S = 90.0


# --------------------------------------------------------------------------------------- the backend


class LocalBackend(LocalSandbox):
    """A sandbox whose services (MinIO, MLflow, Prefect server and worker) are child processes here.

    ``up`` starts them (or attaches when they are already running and healthy), ``down`` stops them and
    deletes the sandbox's directory. Two sandboxes with different names run side by side: every port is
    chosen free at start.
    """

    @property
    def kind(self) -> str:
        return KIND

    def support(self) -> Support:
        from mlsandbox.backends.local.runtime import static_support

        return static_support()

    # ---------------------------------------------------------------------------------- lifecycle

    def up(self, ephemeral: bool = False, timeout: float = DEFAULT_HEALTH_TIMEOUT_S) -> None:
        """Start the sandbox's services, or attach to them when they are already running and healthy.

        ``ephemeral``: the sandbox belongs to the calling process and is garbage once that process is
        gone (:func:`~mlsandbox.backends.local.gc.collect_garbage` stops it); otherwise it is persistent
        and lives until :meth:`down`. Attaching to an ephemeral sandbox without ``ephemeral`` makes it
        persistent; attaching with it to one whose owner is gone makes the caller its owner.

        A sandbox that is partly dead is repaired: what is left of it is stopped and every service is
        started again on its existing data. Each health check waits up to ``timeout`` seconds; a service
        that fails raises :class:`ServiceStartError` (with the tail of its log) after everything this
        call started has been stopped. Ctrl-C or SIGTERM during ``up`` stops everything too.

        Then the plug-in services with ``start: up`` that do not run yet are started
        (:mod:`~mlsandbox.backends.local.plugin_services`); one that fails is left out with a warning.
        """
        started = self._up(ephemeral, timeout)
        from .plugin_services import start_plugin_services

        with _exit_on_sigterm():
            try:
                start_plugin_services(self)
            except (KeyboardInterrupt, SystemExit):
                # Ctrl-C or SIGTERM before up returned: what this call started stops, as during the
                # core services' start (a sandbox it only attached to is left running).
                if started:
                    with sandbox_lock(self.name):
                        state = read_state_lenient(self.layout)
                        teardown(self.name, self.home, self.layout, state, remove_data=False)
                raise

    def _up(self, ephemeral: bool, timeout: float) -> bool:
        """Start the core services (True), or attach to them when they run and answer (False)."""
        with sandbox_lock(self.name):
            previous = read_state_lenient(self.layout)
            if previous is not None and previous.phase == "running" and self._healthy(previous):
                self._attach(previous, ephemeral)
                return False
            svc.minio_binary()  # a missing binary fails before anything is stopped or started
            if previous is not None or supervisor.find_marked(self.name, self.home):
                teardown(self.name, self.home, self.layout, previous, remove_data=previous is None)
            if previous is None:
                shutil.rmtree(self.dir, ignore_errors=True)  # a fresh start begins clean
            self._start(ephemeral, timeout, previous)
            return True

    def down(self) -> None:
        """Stop everything this sandbox started and delete its directory (state, data and logs).

        Stops the recorded services (SIGTERM to each process group, SIGKILL after a few seconds) and every
        other process carrying this sandbox's marker (jobs, flow runs, their children). The next ``up``
        starts from empty stores. Idempotent; never signals a process of another sandbox, nor a recycled
        pid (identity is checked by start time).
        """
        with sandbox_lock(self.name):
            teardown(self.name, self.home, self.layout, read_state_lenient(self.layout), remove_data=True)

    def is_alive(self) -> bool:
        """True when every service's process runs and its health check answers."""
        state = read_state_lenient(self.layout)
        return state is not None and state.phase == "running" and self._healthy(state)

    def status(self) -> list[ServiceStatus]:
        """One entry per service: state, url, port, pid, RSS of its process tree, uptime."""
        state = read_state_lenient(self.layout)
        if state is None:
            return [ServiceStatus(name=name, state="stopped") for name in svc.SERVICE_NAMES]
        healthy = self._probe_all(state)
        rows = [self._service_status(state, name, healthy[name]) for name in svc.SERVICE_NAMES]
        if svc.TOXIPROXY in state.service_names():  # the fault proxy: healthy while its process runs
            record = state.services.get(svc.TOXIPROXY)
            alive = record is not None and supervisor.is_alive(record.process)
            rows.append(self._service_status(state, svc.TOXIPROXY, alive))
        return rows

    def runtime(self) -> Runtime:
        """Operations over the running services; :class:`NotRunningError` when the sandbox is not up."""
        state = self.running_state()
        dead = state.dead_services()
        if dead:
            raise NotRunningError(
                f"sandbox {self.name!r} is not healthy: {', '.join(dead)} not running; "
                "run `mlsandbox up` to repair it"
            )
        from mlsandbox.backends.local.runtime import LocalRuntime

        return LocalRuntime(
            endpoints=state.client_endpoints or state.endpoints, sandbox_dir=self.dir, sandbox_name=self.name
        )

    # ------------------------------------------------------------------------------------ helpers

    def _probe_all(self, state: SandboxState) -> dict[str, bool]:
        with svc.http_client() as client:

            def one(name: str) -> bool:
                record = state.services.get(name)
                return (
                    record is not None
                    and supervisor.is_alive(record.process)
                    and svc.probe(name, state.endpoints, state.worker_name, client)
                )

            with ThreadPoolExecutor(max_workers=len(svc.SERVICE_NAMES)) as pool:
                return dict(zip(svc.SERVICE_NAMES, pool.map(one, svc.SERVICE_NAMES), strict=True))

    def _healthy(self, state: SandboxState) -> bool:
        return all(self._probe_all(state).values()) and not state.dead_services()

    def _service_status(self, state: SandboxState, name: str, healthy: bool) -> ServiceStatus:
        record = state.services.get(name)
        url = svc.url_of(name, state.endpoints, state.ports)
        port = svc.port_of(name, state.ports)
        if record is None or not supervisor.is_alive(record.process):
            return ServiceStatus(name=name, state="stopped", url=url, port=port)
        if healthy:
            current: Literal["running", "starting", "unhealthy"] = "running"
        else:
            current = "starting" if state.phase == "starting" else "unhealthy"
        return ServiceStatus(
            name=name,
            state=current,
            url=url,
            port=port,
            pid=record.process.pid,
            rss_bytes=supervisor.tree_rss(record.process),
            uptime_s=supervisor.uptime(record.process),
        )

    def _attach(self, state: SandboxState, ephemeral: bool) -> None:
        if not ephemeral and state.ephemeral:
            state.ephemeral, state.owner = False, None
        elif ephemeral and state.ephemeral and not state.owner_alive():
            state.owner = ProcessRecord.of(os.getpid())
        else:
            return
        write_state(self.layout, state)

    def _start(self, ephemeral: bool, timeout: float, previous: SandboxState | None) -> None:
        ports = svc.Ports.allocate(proxy=svc.toxiproxy_binary() is not None)
        credentials = previous.credentials if previous else svc.Credentials.generate()
        state = SandboxState(
            name=self.name,
            home=self.home,
            phase="starting",
            ephemeral=ephemeral,
            owner=ProcessRecord.of(os.getpid()) if ephemeral else None,
            created_at=time.time(),
            ports=ports,
            credentials=credentials,
            endpoints=svc.endpoints(ports, credentials),
            client_endpoints=svc.proxied_endpoints(ports, credentials),
            worker_name=f"{svc.WORK_POOL}-{self.name}-{secrets.token_hex(3)}",
        )
        write_state(self.layout, state)
        started = False
        with _exit_on_sigterm():
            try:
                _Startup(self, state, timeout).run()
                state.phase = "running"
                write_state(self.layout, state)
                started = True
            finally:
                if not started:
                    teardown(self.name, self.home, self.layout, state, remove_data=False)


class _Cancelled(Exception):
    """Raised inside a startup thread once another thread failed or the caller was interrupted."""


class _Startup:
    """Starts the services in three concurrent chains: MinIO (+ bucket), MLflow, Prefect server -> worker."""

    def __init__(self, backend: LocalBackend, state: SandboxState, timeout: float) -> None:
        self.backend = backend
        self.layout = backend.layout
        self.state = state
        self.timeout = timeout
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self.base_env = svc.child_env(backend.name, backend.home, {})
        self._client = svc.http_client()

    def run(self) -> None:
        chains: list[Callable[[], None]] = [self._minio, self._mlflow, self._prefect]
        if self.state.ports.toxiproxy is not None:
            chains.append(self._toxiproxy)
        with (
            self._client,
            ThreadPoolExecutor(max_workers=len(chains), thread_name_prefix="mlsandbox-up") as pool,
        ):
            futures = [pool.submit(chain) for chain in chains]
            try:
                _wait_all(futures)
            finally:
                self.cancel.set()  # no-op on success; on failure or interrupt the other chains stop early

    # -------------------------------------------------------------------------------- the chains

    def _minio(self) -> None:
        self._launch(
            svc.MINIO, svc.minio_launch(self.layout, self.state.ports, self.state.credentials, self.base_env)
        )
        self._wait_healthy(svc.MINIO)
        try:
            svc.ensure_bucket(self.state.endpoints)
        except Exception as exc:
            raise self._failure(
                svc.MINIO, f"creating the bucket {svc.ARTIFACT_BUCKET!r} failed: {exc}"
            ) from exc

    def _toxiproxy(self) -> None:
        self._launch(svc.TOXIPROXY, svc.toxiproxy_launch(self.layout, self.state.ports, self.base_env))
        self._wait_healthy(svc.TOXIPROXY)

    def _mlflow(self) -> None:
        self._seed_db(svc.MLFLOW_DB, self.layout.mlflow_db)
        self._launch(
            svc.MLFLOW,
            svc.mlflow_launch(self.layout, self.state.ports, self.state.credentials, self.base_env),
        )
        self._wait_healthy(svc.MLFLOW)

    def _prefect(self) -> None:
        self._seed_db(svc.PREFECT_DB, self.layout.prefect_db)
        self._launch(
            svc.PREFECT_SERVER, svc.prefect_server_launch(self.layout, self.state.ports, self.base_env)
        )
        self._wait_healthy(svc.PREFECT_SERVER)
        launch = svc.prefect_worker_launch(
            self.layout, self.state.ports, self.state.worker_name, self.base_env
        )
        self._launch(svc.PREFECT_WORKER, launch)
        self._wait_healthy(svc.PREFECT_WORKER)

    # ------------------------------------------------------------------------------------- steps

    def _launch(self, name: str, launch: svc.Launch) -> None:
        if self.cancel.is_set():
            raise _Cancelled
        with self._lock:  # spawn and record together: an interrupt never leaves an unrecorded child
            try:
                process = supervisor.spawn(
                    launch.argv, env=launch.env, log_path=self.layout.log(name), cwd=launch.cwd
                )
            except OSError as exc:
                raise ServiceStartError(
                    f"{name} could not be started in sandbox {self.backend.name!r}: {launch.argv[0]}: {exc}"
                ) from exc
            self.state.services[name] = ServiceRecord(
                name=name,
                process=process,
                port=svc.port_of(name, self.state.ports),
                url=svc.url_of(name, self.state.endpoints),
                log=str(self.layout.log(name)),
            )
            write_state(self.layout, self.state)

    def _seed_db(self, template: svc.DbTemplate, target: Path) -> None:
        """Start a server from a copy of the migrated template database (built once per version)."""
        if target.exists():  # a repaired sandbox keeps its data
            return
        path = template.path()
        if not path.exists():
            self._build_template(template, path)
        if path.exists():  # best effort: without it the server migrates a fresh database itself
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)

    def _build_template(self, template: svc.DbTemplate, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._file_lock(path.with_suffix(".lock")):
            if path.exists():  # another sandbox built it while we waited
                return
            work = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".build-{template.name}-"))
            try:
                launch = template.launch(work, self.base_env)
                log = self.layout.logs_dir / f"{template.name}-template.log"
                process = supervisor.spawn(launch.argv, env=launch.env, log_path=log, cwd=launch.cwd)
                if self._wait_exit(process) == 0 and (work / "db").is_file():
                    os.replace(work / "db", path)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    @contextlib.contextmanager
    def _file_lock(self, path: Path) -> Iterator[None]:
        """An flock taken by polling, so that cancellation is noticed while waiting."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self.cancel.wait(0.2):
                        raise _Cancelled from None
            yield
        finally:
            os.close(fd)

    def _wait_exit(self, process: ProcessRecord) -> int | None:
        """Wait for a helper process to exit (stopping it on cancel or timeout); its exit code."""
        deadline = time.monotonic() + self.timeout
        while supervisor.is_alive(process):
            if self.cancel.is_set() or time.monotonic() > deadline:
                supervisor.stop([process], timeout=1.0)
                if self.cancel.is_set():
                    raise _Cancelled
                return None
            self.cancel.wait(0.2)
        return supervisor.exit_code(process)

    def _wait_healthy(self, name: str) -> None:
        record = self.state.services[name]
        deadline = time.monotonic() + self.timeout
        while True:
            if self.cancel.is_set():
                raise _Cancelled
            if (
                toxiproxy_up(self._client, self.state.ports)
                if name == svc.TOXIPROXY
                else svc.probe(name, self.state.endpoints, self.state.worker_name, self._client)
            ):
                with self._lock:
                    ready = time.time() - record.process.create_time
                    self.state.services[name] = record.model_copy(update={"ready_s": round(ready, 2)})
                    write_state(self.layout, self.state)
                return
            if not supervisor.is_alive(record.process):
                code = supervisor.exit_code(record.process)
                raise self._failure(
                    name, f"the process exited (code {code}) before its health check answered"
                )
            if time.monotonic() > deadline:
                raise self._failure(name, f"no healthy answer within {self.timeout:.0f} s")
            self.cancel.wait(0.5)

    def _failure(self, name: str, what: str) -> ServiceStartError:
        log = self.layout.log(name)
        check = svc.health_check_description(name, self.state.endpoints, self.state.worker_name)
        tail = supervisor.tail(log, LOG_TAIL_LINES) or "(empty)"
        return ServiceStartError(
            f"{name} failed to start in sandbox {self.backend.name!r}: {what} (health check: {check}).\n"
            f"Last {LOG_TAIL_LINES} lines of {log}:\n{textwrap.indent(tail, '    ')}"
        )


def _wait_all(futures: list[Future[None]]) -> None:
    """Wait for every future; re-raise the first real failure (interruptible: polls in short waits)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
        for future in done:
            exc = future.exception()
            if exc is not None and not isinstance(exc, _Cancelled):
                raise exc


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while starting, so ``finally`` blocks stop the children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------------------------ registration


class LocalBackendConfig(BackendConfig):
    """The local backend's config: the sandbox's name (its directory under ``$MLSANDBOX_HOME``)."""

    type: Literal["local"] = "local"


def _create(config: LocalBackendConfig) -> LocalBackend:
    return LocalBackend(config.name)


def _sandboxes() -> list[SandboxListing]:
    from mlsandbox.backends.local.gc import sandbox_listings

    return sandbox_listings()


BACKEND_TYPE = BackendType(
    name=KIND,
    description="services as supervised processes of this machine (MinIO, MLflow, Prefect), jobs in cgroups",
    config=LocalBackendConfig,
    create=_create,
    sandboxes=_sandboxes,
)
"""The ``local`` entry of the ``mlsandbox.backends`` group."""
