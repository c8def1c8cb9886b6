"""On-demand data-source services of a local sandbox: the PostgreSQL server and the HTTP API source.

``up`` does not start them (it stays fast); :meth:`SourceServices.ensure` starts one the first time an
episode needs it and records it in the sandbox state like the core services, so ``down`` and ``gc`` stop
it (its processes carry the sandbox marker too). Starting PostgreSQL the first time runs ``initdb``
(about 1-2 s); later starts of the same sandbox reuse the data directory.

As root, the PostgreSQL server runs as the ``postgres`` system user (``setpriv``), with its data
directory owned by that user; see :func:`mlsandbox.backends.local.services.postgres_data_dir`.

:class:`LocalSourceHosting` is the local backend's :class:`~mlsandbox.backends.protocols.SourceHosting`:
an episode publishes its API datasets as files the API source serves (``datasets/<id>/``), gets its own
PostgreSQL database and login role, and reaches both as a client here (httpx, psycopg).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import secrets
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from mlsandbox import httpclients
from mlsandbox.backends.common.postgres import read_table
from mlsandbox.backends.protocols import ServiceHealth
from mlsandbox.backends.protocols.sources import (
    ApiDataset,
    ApiProbe,
    HttpAnswer,
    SourceError,
    SourceProbe,
    TableRows,
)
from mlsandbox.errors import NotRunningError, ServiceStartError

from . import services as svc
from . import supervisor
from .faults.journal import Journal, UndoApiDataset, UndoDatabase
from .sandbox import (
    LOG_TAIL_LINES,
    STOP_TIMEOUT_S,
    LocalSandbox,
    ServiceRecord,
    read_state,
    sandbox_lock,
    write_state,
)

START_TIMEOUT_S = 60.0
log = logging.getLogger(__name__)


class SourceServices:
    """The on-demand source services of one running local sandbox."""

    def __init__(self, backend: LocalSandbox) -> None:
        self.backend = backend
        self.layout = backend.layout

    @classmethod
    def of(cls, sandbox_name: str) -> SourceServices:
        return cls(LocalSandbox(sandbox_name))

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


# ----------------------------------------------------------------------------------- episode sources

_PG_TYPES = {"i": "bigint", "f": "double precision", "b": "boolean", "M": "timestamp"}
"""pandas dtype kind -> the column type of a source table (anything else: text)."""


class LocalSourceHosting:
    """The :class:`~mlsandbox.backends.protocols.SourceHosting` of a local sandbox. With a ``journal``,
    what an episode publishes and the databases it creates are journaled until its ``close`` removed them
    (the garbage collector removes those of a process that died)."""

    def __init__(self, backend: LocalSandbox, journal: Journal | None = None) -> None:
        self.backend = backend
        self.journal = journal

    def open(self, episode_id: str) -> LocalEpisodeSources:
        return LocalEpisodeSources(SourceServices(self.backend), episode_id, self.journal)


class LocalEpisodeSources:
    """The source servers of a local sandbox as one episode uses them (see
    :class:`~mlsandbox.backends.protocols.EpisodeSources`)."""

    def __init__(self, services: SourceServices, episode_id: str, journal: Journal | None = None) -> None:
        self.services = services
        self.episode_id = episode_id
        self.journal = journal
        self._lock = threading.Lock()
        self._client: Any = None
        self._published: dict[str, str] = {}
        """dataset id -> the source name its fault hook is registered under."""
        self._databases: dict[str, str] = {}
        """database -> its owner role."""

    def __repr__(self) -> str:
        return f"LocalEpisodeSources(sandbox={self.services.backend.name!r}, episode={self.episode_id!r})"

    # ----------------------------------------------------------------------------------------- api

    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        from mlsandbox.workloads.fault_hook import register_hook

        self.services.ensure(svc.API_SOURCE)
        folder = self._dataset_dir(dataset.dataset_id)
        if self.journal is not None:
            undo = UndoApiDataset(
                dataset_id=dataset.dataset_id, source=dataset.name, episode_id=self.episode_id
            )
            self.journal.add(f"api:{dataset.dataset_id}", undo)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._published[dataset.dataset_id] = dataset.name
        (folder / "data.parquet").write_bytes(parquet)
        self._write_meta(dataset)
        # Perturbation plans reach the API through its fault hook as ``http:<source name>`` (http_errors).
        register_hook(dataset.name, self.services.fault_file(), scope=self.episode_id)

    def update_access(self, dataset: ApiDataset) -> None:
        if not (self._dataset_dir(dataset.dataset_id) / "data.parquet").is_file():
            raise KeyError(f"dataset {dataset.dataset_id!r} is not published on the API source")
        self._write_meta(dataset)

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        import httpx

        url = f"{self.services.api_url()}/v1/datasets/{dataset_id}/records"
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        try:
            resp = self._http().get(url, params=params, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as e:
            raise SourceError("unavailable", f"cannot reach {url}: {type(e).__name__}: {e}") from None
        return HttpAnswer(
            status=resp.status_code,
            headers={k.lower(): v for k, v in resp.headers.items()},
            body=resp.content,
        )

    # ------------------------------------------------------------------------------------ postgres

    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        import pandas as pd
        import psycopg
        from psycopg import sql

        self.services.ensure(svc.POSTGRES)
        frame = pd.read_parquet(io.BytesIO(parquet))
        if self.journal is not None:
            self.journal.add(f"database:{database}", UndoDatabase(database=database, role=role))
        with psycopg.connect(self.services.postgres_dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            with self._lock:
                self._databases[database] = role
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role))
            )
        columns = [
            sql.SQL("{} {}").format(
                sql.Identifier(str(c)), sql.SQL(_PG_TYPES.get(frame[c].dtype.kind, "text"))
            )
            for c in frame.columns
        ]
        with psycopg.connect(self.services.postgres_dsn(database, user=role, password=password)) as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), sql.SQL(", ").join(columns))
            )
            names = sql.SQL(", ").join(sql.Identifier(str(c)) for c in frame.columns)
            with (
                conn.cursor() as cur,
                cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), names)) as copy,
            ):
                for row in frame.astype(object).where(frame.notna(), None).itertuples(index=False, name=None):
                    copy.write_row(row)

    def set_password(self, role: str, password: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.services.postgres_dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
            )

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        try:
            dsn = self.services.postgres_dsn(database, user=user, password=password)
        except NotRunningError as e:
            raise SourceError("unavailable", str(e)) from None
        return read_table(dsn, table, limit)

    # ------------------------------------------------------------------------------------ services

    def address(self, service: str) -> str:
        s = self.services.settings()
        port = {svc.POSTGRES: s.postgres_port, svc.API_SOURCE: s.api_port}[_check(service)]
        return f"{svc.HOST}:{port}" if port is not None else "(not started)"

    def health(self, probe: SourceProbe) -> ServiceHealth:
        if isinstance(probe, ApiProbe):
            path = f"/v1/datasets/{probe.dataset_id}/records?page=1&page_size=1"
            return self.services.probe(svc.API_SOURCE, path=path, token=probe.token)
        return self.services.probe(
            svc.POSTGRES, dbname=probe.database, user=probe.user, password=probe.password
        )

    def stop(self, service: str) -> bool:
        return self.services.stop(_check(service))

    def start(self, service: str) -> None:
        self.services.ensure(_check(service))

    def restart(self, service: str) -> None:
        self.services.restart(_check(service))

    def logs(self, service: str, tail: int = 50) -> str:
        return supervisor.tail(self.services.layout.log(_check(service)), tail)

    def close(self) -> None:
        from mlsandbox.workloads.fault_hook import unregister_hook

        with self._lock:
            published, self._published = dict(self._published), {}
            databases, self._databases = dict(self._databases), {}
            client, self._client = self._client, None
        for dataset_id, name in published.items():
            shutil.rmtree(self._dataset_dir(dataset_id), ignore_errors=True)
            unregister_hook(name, scope=self.episode_id)
            self._forget(f"api:{dataset_id}")
        for database, role in databases.items():
            try:
                self._drop_database(database, role)
            except Exception as e:  # cleanup goes on; gc and down remove what is left
                log.warning("episode %s: dropping database %s failed: %s", self.episode_id, database, e)
            else:
                self._forget(f"database:{database}")
        if client is not None:
            client.close()

    # ------------------------------------------------------------------------------------- helpers

    def _forget(self, key: str) -> None:
        if self.journal is not None:
            self.journal.remove(key)

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = httpclients.client(10.0)
            return self._client

    def _dataset_dir(self, dataset_id: str) -> Path:
        if not dataset_id or "/" in dataset_id or dataset_id.startswith("."):
            raise ValueError(f"invalid dataset id {dataset_id!r}")
        return self.services.api_root() / "datasets" / dataset_id

    def _write_meta(self, dataset: ApiDataset) -> None:
        meta = {
            "token": dataset.token,
            "rate_limit_per_s": dataset.rate_limit_per_s,
            "burst": dataset.burst,
            "max_page_size": dataset.max_page_size,
        }
        folder = self._dataset_dir(dataset.dataset_id)
        tmp = folder / "meta.json.tmp"
        tmp.write_text(json.dumps(meta))
        tmp.replace(folder / "meta.json")

    def _drop_database(self, database: str, role: str) -> None:
        import psycopg
        from psycopg import sql

        if not self.services.is_running(svc.POSTGRES):
            self.services.ensure(svc.POSTGRES)
        with psycopg.connect(self.services.postgres_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _check(service: str) -> str:
    if service not in svc.SOURCE_SERVICES:
        raise ValueError(f"unknown source service {service!r}; known: {', '.join(svc.SOURCE_SERVICES)}")
    return service
