"""On-demand data-source services of a local sandbox: the PostgreSQL server and the HTTP API source.

``up`` does not start them (it stays fast); :func:`ensure_source_service` starts one the first time an
episode needs it and records it in the sandbox state like the core services, so ``down`` and ``gc`` stop
it (its processes carry the sandbox marker too). Starting PostgreSQL the first time runs ``initdb``
(about 1-2 s); later starts of the same sandbox reuse the data directory.

As root, the PostgreSQL server runs as the ``postgres`` system user (``setpriv``), with its data
directory owned by that user; see :func:`mlsandbox.backends.local.services.postgres_data_dir`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

from mlsandbox import httpclients
from mlsandbox.backends.protocols import ServiceHealth
from mlsandbox.errors import NotRunningError, ServiceStartError

from . import services as svc
from . import supervisor
from .backend import (
    LOG_TAIL_LINES,
    STOP_TIMEOUT_S,
    LocalBackend,
    ServiceRecord,
    read_state,
    sandbox_lock,
    write_state,
)

START_TIMEOUT_S = 60.0


class SourceServices:
    """The on-demand source services of one running local sandbox."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.layout = backend.layout

    @classmethod
    def of(cls, sandbox_name: str) -> SourceServices:
        return cls(LocalBackend(sandbox_name))

    # ----------------------------------------------------------------------------------- settings

    def settings(self) -> svc.SourceSettings:
        return svc.read_source_settings(self.layout)

    def fault_file(self) -> Path:
        return svc.api_fault_file(self.layout)

    def api_root(self) -> Path:
        return svc.api_source_dir(self.layout)

    def api_url(self) -> str:
        port = self.settings().api_port
        if port is None:
            raise NotRunningError("the API data source has not been started in this sandbox")
        return f"http://{svc.HOST}:{port}"

    def postgres_dsn(
        self, dbname: str = "postgres", user: str | None = None, password: str | None = None
    ) -> str:
        """libpq connection string; the admin role unless ``user`` (and its ``password``) are given."""
        s = self.settings()
        if s.postgres_port is None or s.postgres_password is None:
            raise NotRunningError("the PostgreSQL source has not been started in this sandbox")
        if user is None:
            return svc.postgres_dsn(s.postgres_port, s.postgres_password, dbname)
        return svc.postgres_dsn(s.postgres_port, password or "", dbname, user)

    # ---------------------------------------------------------------------------------- lifecycle

    def is_running(self, name: str) -> bool:
        state = read_state(self.layout)
        record = state.services.get(name) if state else None
        return record is not None and supervisor.is_alive(record.process)

    def ensure(self, name: str, timeout: float = START_TIMEOUT_S) -> None:
        """Start source service ``name`` unless its process runs; wait until it answers its health check."""
        if name not in svc.SOURCE_SERVICES:
            raise ValueError(f"unknown source service {name!r}; known: {', '.join(svc.SOURCE_SERVICES)}")
        with sandbox_lock(self.backend.name):
            state = read_state(self.layout)
            if state is None or state.phase != "running":
                raise NotRunningError(f"sandbox {self.backend.name!r} is not up: run `mlsandbox up`")
            record = state.services.get(name)
            if record is not None and supervisor.is_alive(record.process):
                return
            settings = self.settings()
            base = svc.child_env(self.backend.name, self.backend.home, {})
            if name == svc.POSTGRES:
                launch = self._postgres_launch(settings, base)
                port = settings.postgres_port
            else:
                settings.api_port = settings.api_port or svc.free_port()
                svc.api_source_dir(self.layout).mkdir(parents=True, exist_ok=True)
                launch = svc.api_source_launch(self.layout, settings.api_port, base)
                port = settings.api_port
            svc.write_source_settings(self.layout, settings)
            process = supervisor.spawn(
                launch.argv, env=launch.env, log_path=self.layout.log(name), cwd=launch.cwd, append=True
            )
            state.services[name] = ServiceRecord(
                name=name,
                process=process,
                port=port,
                url=f"http://{svc.HOST}:{port}"
                if name == svc.API_SOURCE
                else f"postgresql://{svc.HOST}:{port}",
                log=str(self.layout.log(name)),
            )
            write_state(self.layout, state)
        self._wait_healthy(name, process, timeout)

    def stop(self, name: str) -> bool:
        """Stop source service ``name`` (a real outage: the process is gone); True when it was running."""
        with sandbox_lock(self.backend.name):
            state = read_state(self.layout)
            record = state.services.get(name) if state else None
            if state is None or record is None:
                return False
            alive = supervisor.is_alive(record.process)
            if alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record.process.pgid, signal.SIGCONT)  # a frozen group cannot act on SIGTERM
                supervisor.stop([record.process], timeout=STOP_TIMEOUT_S)
            return alive

    def started(self, name: str) -> bool:
        """Whether source service ``name`` was started in this sandbox (running or not now)."""
        state = read_state(self.layout)
        return state is not None and name in state.services

    def restart(self, name: str, timeout: float = START_TIMEOUT_S) -> None:
        """Stop source service ``name`` if it runs and start it again on its data (the same port, data
        directory and credentials; PostgreSQL keeps its databases and roles, the API source its published
        datasets); wait until it answers. A restarted API source comes back without an injected fault (its
        fault-hook file is cleared), as a restarted sick server would. :class:`ServiceStartError` when it
        does not come back."""
        if not self.started(name):
            raise NotRunningError(f"the {name} source service has not been started in this sandbox")
        self.stop(name)
        if name == svc.API_SOURCE:
            from mlsandbox.workloads.fault_hook import clear_fault

            clear_fault(self.fault_file())
        self.ensure(name, timeout)

    def probe(
        self,
        name: str,
        *,
        dbname: str = "postgres",
        user: str | None = None,
        password: str | None = None,
        path: str = "/health",
        token: str | None = None,
        timeout: float = 5.0,
    ) -> ServiceHealth:
        """One health probe of source service ``name`` as a client: PostgreSQL by a ``SELECT 1`` on
        ``dbname`` as ``user`` (default: the admin role), the API by a GET of ``path`` (with ``token`` as
        its bearer token when given; 2xx, or 429 for a rate-limited client, is healthy)."""
        t0 = time.perf_counter()
        s = self.settings()
        if name == svc.POSTGRES:
            import psycopg

            if s.postgres_port is None:
                return ServiceHealth(service=name, healthy=False, error="not started")
            password = s.postgres_password if user is None else password
            dsn = svc.postgres_dsn(s.postgres_port, password or "", dbname, user or svc.POSTGRES_ADMIN)
            dsn = dsn.replace("connect_timeout=3", f"connect_timeout={max(2, int(timeout))}")
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SELECT 1").fetchone()
            except psycopg.Error as e:
                text = " ".join(str(e).split())[:300]
                return ServiceHealth(service=name, healthy=False, error=f"{type(e).__name__}: {text}")
        else:
            import httpx

            if s.api_port is None:
                return ServiceHealth(service=name, healthy=False, error="not started")
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            try:
                with httpclients.client(timeout) as client:
                    resp = client.get(f"http://{svc.HOST}:{s.api_port}{path}", headers=headers)
            except httpx.TimeoutException:
                return ServiceHealth(service=name, healthy=False, error=f"timed out after {timeout:g} s")
            except httpx.HTTPError as e:
                return ServiceHealth(service=name, healthy=False, error=f"{type(e).__name__}: {e}")
            if not (200 <= resp.status_code < 300 or resp.status_code == 429):
                detail = " ".join(resp.text.split())[:200]
                return ServiceHealth(service=name, healthy=False, error=f"HTTP {resp.status_code}: {detail}")
        latency = round((time.perf_counter() - t0) * 1000, 1)
        return ServiceHealth(service=name, healthy=True, latency_ms=latency)

    def healthy(self, name: str) -> bool:
        s = self.settings()
        if not self.is_running(name):
            return False
        if name == svc.POSTGRES:
            return s.postgres_port is not None and svc.probe_postgres(
                s.postgres_port, s.postgres_password or ""
            )
        with svc.http_client() as client:
            return s.api_port is not None and svc.probe_api_source(s.api_port, client)

    # ------------------------------------------------------------------------------------ helpers

    def _postgres_launch(self, settings: svc.SourceSettings, base: dict[str, str]) -> svc.Launch:
        data_dir = Path(settings.postgres_dir) if settings.postgres_dir else None
        if data_dir is None or not (data_dir / "PG_VERSION").is_file():
            data_dir = svc.postgres_data_dir(self.layout, self.backend.name, self.backend.home)
            settings.postgres_password = secrets.token_urlsafe(18)
            settings.postgres_dir = str(data_dir)
            self._initdb(data_dir, settings.postgres_password, base)
        settings.postgres_port = settings.postgres_port or svc.free_port()
        # A server killed without a clean shutdown leaves its pid file: the next start checks it itself.
        return svc.postgres_launch(data_dir, settings.postgres_port, base)

    def _initdb(self, data_dir: Path, password: str, base: dict[str, str]) -> None:
        import shutil

        shutil.rmtree(data_dir, ignore_errors=True)
        svc.prepare_postgres_dir(data_dir)
        pwfile = data_dir.parent / f".{data_dir.name}.pw"
        pwfile.write_text(password + "\n")
        user = svc._run_as_user()
        try:
            if user is not None:
                import os

                os.chown(pwfile, *user)
            pwfile.chmod(0o600)
            launch = svc.postgres_initdb_launch(data_dir, pwfile, base)
            log = self.layout.log("postgres-initdb")
            process = supervisor.spawn(launch.argv, env=launch.env, log_path=log, cwd=data_dir.parent)
            deadline = time.monotonic() + START_TIMEOUT_S
            while supervisor.is_alive(process) and time.monotonic() < deadline:
                time.sleep(0.1)
            if supervisor.is_alive(process):
                supervisor.stop([process], timeout=1.0)
            code = supervisor.exit_code(process)
        finally:
            pwfile.unlink(missing_ok=True)
        if code != 0:
            tail = supervisor.tail(log, LOG_TAIL_LINES)
            raise ServiceStartError(f"initdb of the PostgreSQL source failed (exit {code}):\n{tail}")

    def _wait_healthy(self, name: str, process: supervisor.ProcessRecord, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with svc.http_client() as client:
            while True:
                s = self.settings()
                if name == svc.POSTGRES:
                    ok = svc.probe_postgres(s.postgres_port or 0, s.postgres_password or "")
                else:
                    ok = svc.probe_api_source(s.api_port or 0, client)
                if ok:
                    return
                if not supervisor.is_alive(process) or time.monotonic() > deadline:
                    with contextlib.suppress(Exception):
                        self.stop(name)
                    tail = supervisor.tail(self.layout.log(name), LOG_TAIL_LINES) or "(empty)"
                    what = (
                        "exited"
                        if not supervisor.is_alive(process)
                        else f"not healthy within {timeout:.0f} s"
                    )
                    raise ServiceStartError(
                        f"{name} source service of sandbox {self.backend.name!r} {what}.\n"
                        f"Last lines of {self.layout.log(name)}:\n{tail}"
                    )
                time.sleep(0.1)
