"""The services of a local sandbox: how each one is launched and how its health is probed.

Four services, each a child process in its own process group:

- ``minio``: the MinIO server (object storage), root credentials generated per sandbox.
- ``mlflow``: the MLflow tracking server and model registry; SQLite backend store; artifacts proxied
  to MinIO (``s3://mlflow-artifacts``) so clients need no S3 credentials for artifacts.
- ``prefect-server``: the Prefect API (SQLite, no UI, no analytics).
- ``prefect-worker``: one Prefect ``process`` worker polling the ``mlsandbox`` work pool.

Nothing here keeps state: :mod:`mlsandbox.backends.local.backend` decides when to launch and records pids.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict

from mlsandbox import paths
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import MissingToolError
from mlsandbox.plugins import ServiceSpec

from .supervisor import marker_env

MINIO = "minio"
MLFLOW = "mlflow"
PREFECT_SERVER = "prefect-server"
PREFECT_WORKER = "prefect-worker"
SERVICE_NAMES: tuple[str, ...] = (MINIO, MLFLOW, PREFECT_SERVER, PREFECT_WORKER)
TOXIPROXY = "toxiproxy"
"""The network-fault proxy in front of MinIO and MLflow: optional (started when its binary is installed)."""
PROXIED: tuple[str, ...] = (MINIO, MLFLOW)

ARTIFACT_BUCKET = "mlflow-artifacts"
WORK_POOL = "mlsandbox"
HOST = "127.0.0.1"

# Variables of the calling environment that would point a service at something else than its sandbox.
_FOREIGN_PREFIXES = ("PREFECT_", "MLFLOW_", "AWS_", "MINIO_", "MLSANDBOX_")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ports(_Model):
    """TCP ports on 127.0.0.1, chosen free at start."""

    minio: int
    minio_console: int
    mlflow: int
    prefect: int
    toxiproxy: int | None = None
    """Toxiproxy's API (None: no proxy in this sandbox)."""
    minio_proxy: int | None = None
    mlflow_proxy: int | None = None

    @classmethod
    def allocate(cls, proxy: bool = False) -> Ports:
        """Distinct free ports (each bound once by the kernel's choice, then released)."""
        sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(7 if proxy else 4)]
        try:
            for s in sockets:
                s.bind((HOST, 0))
            found = [s.getsockname()[1] for s in sockets]
        finally:
            for s in sockets:
                s.close()
        minio, console, mlflow, prefect = found[:4]
        ports = cls(minio=minio, minio_console=console, mlflow=mlflow, prefect=prefect)
        if proxy:
            ports.toxiproxy, ports.minio_proxy, ports.mlflow_proxy = found[4:]
        return ports


class Credentials(_Model):
    """MinIO root credentials of one sandbox."""

    access_key: str
    secret_key: str

    @classmethod
    def generate(cls) -> Credentials:
        return cls(access_key=f"mls-{secrets.token_hex(6)}", secret_key=secrets.token_urlsafe(24))


@dataclass(frozen=True)
class Layout:
    """Where a sandbox keeps its files (all under one directory)."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def log(self, service: str) -> Path:
        return self.logs_dir / f"{service}.log"

    @property
    def minio_data(self) -> Path:
        return self.root / "minio"

    @property
    def mlflow_dir(self) -> Path:
        return self.root / "mlflow"

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    @property
    def mlflow_db(self) -> Path:
        return self.mlflow_dir / "mlflow.db"

    @property
    def prefect_db(self) -> Path:
        return self.prefect_home / "prefect.db"

    @property
    def worker_dir(self) -> Path:
        return self.root / "prefect-worker"


@dataclass(frozen=True)
class Launch:
    """A command line ready to be spawned."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


# ------------------------------------------------------------------------------------------- tools


def minio_binary() -> Path:
    """The MinIO server binary installed by ``make setup``; :class:`MissingToolError` if absent."""
    path = paths.bin_dir() / "minio"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingToolError(
            f"the MinIO server binary is missing: expected an executable at {path}. "
            "Run `make setup` (or scripts/setup.sh) to install it."
        )
    return path


def toxiproxy_binary() -> Path | None:
    """The Toxiproxy server installed by ``make setup`` (None when absent: no network faults)."""
    path = paths.bin_dir() / "toxiproxy-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def venv_tool(name: str) -> Path:
    """An entry point installed next to the running interpreter (the project venv's, never a global one)."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise MissingToolError(
            f"`{name}` is not installed next to {sys.executable} (expected {path}): "
            "run `make setup` (or scripts/setup.sh) to build the project venv."
        )
    return path


# ---------------------------------------------------------------------------------------- launches


def endpoints(ports: Ports, credentials: Credentials) -> Endpoints:
    return Endpoints(
        s3_url=f"http://{HOST}:{ports.minio}",
        s3_access_key=credentials.access_key,
        s3_secret_key=credentials.secret_key,
        mlflow_url=f"http://{HOST}:{ports.mlflow}",
        prefect_api_url=f"http://{HOST}:{ports.prefect}/api",
    )


def proxied_endpoints(ports: Ports, credentials: Credentials) -> Endpoints:
    """What the agent's and the workloads' clients use: MinIO and MLflow through Toxiproxy when it runs."""
    direct = endpoints(ports, credentials)
    if ports.minio_proxy is None or ports.mlflow_proxy is None:
        return direct
    return direct.model_copy(
        update={
            "s3_url": f"http://{HOST}:{ports.minio_proxy}",
            "mlflow_url": f"http://{HOST}:{ports.mlflow_proxy}",
        }
    )


def toxiproxy_launch(layout: Layout, ports: Ports, base: dict[str, str]) -> Launch:
    """Toxiproxy with one proxy per client-facing service (``minio``, ``mlflow``), created at start."""
    binary = toxiproxy_binary()
    if binary is None or ports.toxiproxy is None:
        raise MissingToolError("toxiproxy-server is not installed: run `make setup`")
    config = [
        {"name": MINIO, "listen": f"{HOST}:{ports.minio_proxy}", "upstream": f"{HOST}:{ports.minio}"},
        {"name": MLFLOW, "listen": f"{HOST}:{ports.mlflow_proxy}", "upstream": f"{HOST}:{ports.mlflow}"},
    ]
    work = layout.root / "toxiproxy"
    work.mkdir(parents=True, exist_ok=True)
    (work / "proxies.json").write_text(json.dumps(config, indent=2))
    argv = [
        str(binary),
        "-host",
        HOST,
        "-port",
        str(ports.toxiproxy),
        "-config",
        str(work / "proxies.json"),
        "-seed",
        "1",
    ]
    return Launch(argv=argv, env=dict(base), cwd=work)


def toxiproxy_url(ports: Ports) -> str | None:
    return None if ports.toxiproxy is None else f"http://{HOST}:{ports.toxiproxy}"


def child_env(sandbox: str, home: str, extra: dict[str, str]) -> dict[str, str]:
    """The calling environment without foreign service settings, plus the sandbox marker and ``extra``.

    Bytecode is always cached, in ``$MLSANDBOX_HOME/pycache`` (never in the checkout or the venv): with
    ``PYTHONDONTWRITEBYTECODE`` every start would compile mlflow and prefect again (~10 CPU-seconds per
    process, 37 s instead of 8 s for the Prefect server on two cores).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(paths.home() / "pycache"))
    env.update(PYTHONUNBUFFERED="1", DO_NOT_TRACK="1")
    env.update(marker_env(sandbox, home))
    env.update(extra)
    return env


def minio_launch(layout: Layout, ports: Ports, creds: Credentials, base: dict[str, str]) -> Launch:
    argv = [
        str(minio_binary()),
        "server",
        str(layout.minio_data),
        "--address",
        f"{HOST}:{ports.minio}",
        "--console-address",
        f"{HOST}:{ports.minio_console}",
    ]
    env = {
        **base,
        "MINIO_ROOT_USER": creds.access_key,
        "MINIO_ROOT_PASSWORD": creds.secret_key,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
    }
    return Launch(argv=argv, env=env, cwd=layout.minio_data)


MLFLOW_ONE_PROCESS = Path(__file__).with_name("mlflow_server.py")
"""The launcher script that runs ``mlflow server`` as one process."""


def mlflow_launch(layout: Layout, ports: Ports, creds: Credentials, base: dict[str, str]) -> Launch:
    ep = endpoints(ports, creds)
    venv_tool("mlflow")  # a clear error when MLflow is not installed
    argv = [
        sys.executable,
        "-P",
        str(MLFLOW_ONE_PROCESS),  # `mlflow server`, as one process (see there)
        "server",
        "--backend-store-uri",
        f"sqlite:///{layout.mlflow_db}",
        "--serve-artifacts",
        "--artifacts-destination",
        f"s3://{ARTIFACT_BUCKET}",
        "--host",
        HOST,
        "--port",
        str(ports.mlflow),
        "--workers",
        "1",
    ]
    env = {
        **base,
        "MLFLOW_S3_ENDPOINT_URL": ep.s3_url,
        "AWS_ACCESS_KEY_ID": creds.access_key,
        "AWS_SECRET_ACCESS_KEY": creds.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    return Launch(argv=argv, env=env, cwd=layout.mlflow_dir)


def _prefect_env(layout: Layout, ports: Ports, base: dict[str, str]) -> dict[str, str]:
    return {
        **base,
        "PREFECT_HOME": str(layout.prefect_home),
        "PREFECT_API_URL": f"http://{HOST}:{ports.prefect}/api",
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{layout.prefect_db}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
    }


def prefect_server_launch(layout: Layout, ports: Ports, base: dict[str, str]) -> Launch:
    argv = [
        str(venv_tool("prefect")),
        "server",
        "start",
        "--host",
        HOST,
        "--port",
        str(ports.prefect),
        "--no-ui",
        "--analytics-off",
    ]
    return Launch(argv=argv, env=_prefect_env(layout, ports, base), cwd=layout.prefect_home)


def prefect_worker_launch(layout: Layout, ports: Ports, worker_name: str, base: dict[str, str]) -> Launch:
    argv = [
        str(venv_tool("prefect")),
        "worker",
        "start",
        "--pool",
        WORK_POOL,
        "--type",
        "process",
        "--name",
        worker_name,
    ]
    # Poll for scheduled flow runs every 2 s (default 10 s): a pipeline run starts within a step or two.
    env = {**_prefect_env(layout, ports, base), "PREFECT_WORKER_QUERY_SECONDS": "2"}
    return Launch(argv=argv, env=env, cwd=layout.worker_dir)


@dataclass(frozen=True)
class DbTemplate:
    """A migrated, empty SQLite database (one per package version) that new sandboxes start from.

    Migrating a fresh database costs each server many CPU-seconds at every cold start (~10 s for the
    Prefect server on two cores); copying a migrated one costs nothing. Built once by running the
    package's own migration command into a scratch file.
    """

    name: Literal["prefect", "mlflow"]

    def path(self) -> Path:
        return paths.home() / "templates" / f"{self.name}-{importlib.metadata.version(self.name)}.db"

    def launch(self, work_dir: Path, base: dict[str, str]) -> Launch:
        """The migration command writing ``work_dir / 'db'``."""
        db = work_dir / "db"
        if self.name == "prefect":
            env = {
                **base,
                "PREFECT_HOME": str(work_dir),
                "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{db}",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            }
            argv = [str(venv_tool("prefect")), "server", "database", "upgrade", "-y"]
        else:
            env = {**base, "MLFLOW_DISABLE_TELEMETRY": "true"}
            argv = [str(venv_tool("mlflow")), "db", "upgrade", f"sqlite:///{db}"]
        return Launch(argv=argv, env=env, cwd=work_dir)


PREFECT_DB = DbTemplate("prefect")
MLFLOW_DB = DbTemplate("mlflow")


def url_of(service: str, ep: Endpoints, ports: Ports | None = None) -> str | None:
    if service == TOXIPROXY:
        return f"http://{HOST}:{ports.toxiproxy}" if ports is not None and ports.toxiproxy else None
    return {
        MINIO: ep.s3_url,
        MLFLOW: ep.mlflow_url,
        PREFECT_SERVER: ep.prefect_api_url,
    }.get(service)


def port_of(service: str, ports: Ports) -> int | None:
    return {
        MINIO: ports.minio,
        MLFLOW: ports.mlflow,
        PREFECT_SERVER: ports.prefect,
        TOXIPROXY: ports.toxiproxy,
    }.get(service)


# ------------------------------------------------------------------------------------------ health


def health_check_description(service: str, ep: Endpoints, worker_name: str) -> str:
    """What the health probe of ``service`` asks, for error messages."""
    return {
        MINIO: f"GET {ep.s3_url}/minio/health/live",
        MLFLOW: f"GET {ep.mlflow_url}/health",
        PREFECT_SERVER: f"GET {ep.prefect_api_url}/health",
        PREFECT_WORKER: (
            f"an ONLINE worker {worker_name!r} in POST {ep.prefect_api_url}/work_pools/{WORK_POOL}/workers/filter"
        ),
        TOXIPROXY: "GET <toxiproxy>/version",
    }[service]


def http_client(timeout: float = 3.0) -> httpx.Client:
    """A client for health probes: reuse one (creating a client costs CPU the services need at start)."""
    return httpx.Client(timeout=timeout, trust_env=False, verify=False)


def probe(service: str, ep: Endpoints, worker_name: str, client: httpx.Client) -> bool:
    """One health probe of ``service``: True when it answers as healthy."""
    try:
        if service == MINIO:
            return client.get(f"{ep.s3_url}/minio/health/live").status_code == 200
        if service == MLFLOW:
            return client.get(f"{ep.mlflow_url}/health").status_code == 200
        if service == PREFECT_SERVER:
            return client.get(f"{ep.prefect_api_url}/health").status_code == 200
        if service == PREFECT_WORKER:
            return _worker_online(client, ep, worker_name)
    except (httpx.HTTPError, ValueError):
        return False
    raise ValueError(f"unknown service {service!r}")


def _worker_online(client: httpx.Client, ep: Endpoints, worker_name: str) -> bool:
    resp = client.post(f"{ep.prefect_api_url}/work_pools/{WORK_POOL}/workers/filter", json={})
    if resp.status_code != 200:
        return False
    return any(w.get("name") == worker_name and w.get("status") == "ONLINE" for w in resp.json())


def ensure_bucket(ep: Endpoints, bucket: str = ARTIFACT_BUCKET) -> None:
    """Create ``bucket`` in the sandbox's MinIO unless it exists."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    s3 = boto3.client(
        "s3",
        endpoint_url=ep.s3_url,
        aws_access_key_id=ep.s3_access_key,
        aws_secret_access_key=ep.s3_secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}),
    )
    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in (
            "BucketAlreadyOwnedByYou",
            "BucketAlreadyExists",
        ):
            raise


# ------------------------------------------------------------------------------------ data sources
# Two more services, started on demand (the first time an episode needs them, never by ``up``, which
# stays fast): the PostgreSQL table source and the HTTP API data source. They are recorded in the
# sandbox state like the core services (so ``down`` and ``gc`` stop them) and keep their own settings
# (port, credentials) in ``<sandbox>/sources.json``.

POSTGRES = "postgres"
API_SOURCE = "api-source"
SOURCE_SERVICES: tuple[str, ...] = (POSTGRES, API_SOURCE)
POSTGRES_ADMIN = "mlsandbox"
POSTGRES_RUN_AS = "postgres"
"""The system user the PostgreSQL server runs as when the sandbox runs as root (created by Debian's
``postgresql`` package; PostgreSQL refuses to run as root)."""
_PG_EXTERNAL_PREFIX = "mlsandbox-pg-"


class SourceSettings(_Model):
    """Ports and credentials of the on-demand source services of one sandbox (``sources.json``)."""

    postgres_port: int | None = None
    postgres_password: str | None = None
    postgres_dir: str | None = None
    api_port: int | None = None


def sources_file(layout: Layout) -> Path:
    return layout.root / "sources.json"


def read_source_settings(layout: Layout) -> SourceSettings:
    try:
        return SourceSettings.model_validate_json(sources_file(layout).read_text())
    except (FileNotFoundError, ValueError):
        return SourceSettings()


def write_source_settings(layout: Layout, settings: SourceSettings) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = sources_file(layout).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(settings.model_dump_json(indent=2))
    os.replace(tmp, sources_file(layout))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def postgres_bin_dir() -> Path:
    """Debian's PostgreSQL server binaries (the newest installed major version); MissingToolError if none."""
    root = Path("/usr/lib/postgresql")
    versions = sorted(
        (p for p in root.glob("*/bin") if (p / "postgres").is_file() and (p / "initdb").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise MissingToolError(
            "the PostgreSQL server is not installed (no /usr/lib/postgresql/<version>/bin/postgres): "
            "run `make setup` as root (it installs Debian's `postgresql` package) or `apt-get install postgresql`"
        )
    return versions[-1]


def _run_as_user() -> tuple[int, int] | None:
    """(uid, gid) the PostgreSQL server runs as: the ``postgres`` system user when we are root, else None
    (the current user)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(POSTGRES_RUN_AS)
    except KeyError:
        raise MissingToolError(
            f"running as root, the PostgreSQL server needs the system user {POSTGRES_RUN_AS!r} "
            "(created by Debian's `postgresql` package): run `make setup` or `apt-get install postgresql`"
        ) from None
    return entry.pw_uid, entry.pw_gid


def _reachable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether user ``uid`` (group ``gid``) can traverse every directory down to ``path``."""
    import stat

    for parent in [*reversed(path.parents)]:
        try:
            st = parent.stat()
        except FileNotFoundError:
            return True  # created by us below a reachable parent
        if st.st_uid == uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return False
    return True


def external_postgres_root(home: str) -> Path:
    """Where PostgreSQL data directories go when the sandbox directory is not reachable by the server's
    user (the home under a private ``/root``): one directory per sandbox home under the temp directory."""
    import hashlib
    import tempfile

    digest = hashlib.sha1(home.encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"{_PG_EXTERNAL_PREFIX}{digest}"


def postgres_data_dir(layout: Layout, sandbox: str, home: str) -> Path:
    """The sandbox's PostgreSQL data directory: ``<sandbox>/postgres`` when the server's user can reach
    it, else ``<tmp>/mlsandbox-pg-<home hash>/<sandbox>`` (removed with the sandbox by ``down``/``gc``)."""
    user = _run_as_user()
    inside = layout.root / "postgres"
    if user is None or _reachable_by(inside, *user):
        return inside
    return external_postgres_root(home) / sandbox


def remove_external_postgres_dir(sandbox: str, home: str) -> None:
    """Delete the sandbox's PostgreSQL data directory outside the sandbox directory, if any."""
    import shutil

    shutil.rmtree(external_postgres_root(home) / sandbox, ignore_errors=True)


def stale_external_postgres_dirs(home: str, live: set[str]) -> list[Path]:
    """External PostgreSQL data directories of this home whose sandbox is not in ``live``."""
    root = external_postgres_root(home)
    if not root.is_dir():
        return []
    return [p for p in sorted(root.iterdir()) if p.is_dir() and p.name not in live]


def prepare_postgres_dir(data_dir: Path) -> None:
    """Create the data directory (and its parent) so that the server's user owns it, mode 0700."""
    user = _run_as_user()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        if data_dir.parent.name.startswith(_PG_EXTERNAL_PREFIX):
            data_dir.parent.chmod(0o755)
        os.chown(data_dir, *user)
    data_dir.chmod(0o700)


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the PostgreSQL user when we are root (``setpriv`` execs: the pid stays the same and
    the environment, sandbox marker included, is kept)."""
    user = _run_as_user()
    if user is None:
        return argv
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise MissingToolError("`setpriv` (util-linux) is needed to run PostgreSQL as a non-root user")
    return [setpriv, f"--reuid={user[0]}", f"--regid={user[1]}", "--init-groups", "--", *argv]


def postgres_initdb_launch(data_dir: Path, password_file: Path, base: dict[str, str]) -> Launch:
    argv = [
        str(postgres_bin_dir() / "initdb"),
        "-D",
        str(data_dir),
        "-U",
        POSTGRES_ADMIN,
        f"--pwfile={password_file}",
        "--auth=scram-sha-256",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
        "--no-instructions",
    ]
    return Launch(argv=_as_server_user(argv), env={**base, "LC_ALL": "C"}, cwd=data_dir)


def postgres_launch(data_dir: Path, port: int, base: dict[str, str]) -> Launch:
    """The server on 127.0.0.1:``port`` only (no Unix socket), tuned for a throw-away sandbox database."""
    settings = {
        "listen_addresses": HOST,
        "port": str(port),
        "unix_socket_directories": "",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "shared_buffers": "16MB",
        "max_connections": "40",
        "logging_collector": "off",
        "log_min_messages": "warning",
    }
    argv = [str(postgres_bin_dir() / "postgres"), "-D", str(data_dir)]
    for key, value in settings.items():
        argv += ["-c", f"{key}={value}"]
    return Launch(argv=_as_server_user(argv), env={**base, "LC_ALL": "C"}, cwd=data_dir)


def postgres_dsn(port: int, password: str, dbname: str = "postgres", user: str = POSTGRES_ADMIN) -> str:
    return f"host={HOST} port={port} dbname={dbname} user={user} password={password} connect_timeout=3"


def probe_postgres(port: int, password: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(postgres_dsn(port, password), autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def api_source_dir(layout: Layout) -> Path:
    """What the API data source serves: ``datasets/<id>/{data.parquet,meta.json}``; its fault file."""
    return layout.root / "api-source"


def api_fault_file(layout: Layout) -> Path:
    return api_source_dir(layout) / "fault.json"


def api_source_launch(layout: Layout, port: int, base: dict[str, str]) -> Launch:
    from mlsandbox.workloads.fault_hook import ENV_VAR

    root = api_source_dir(layout)
    argv = [
        sys.executable,
        "-m",
        "mlsandbox.workloads.api_source",
        "--host",
        HOST,
        "--port",
        str(port),
        "--root",
        str(root),
    ]
    return Launch(argv=argv, env={**base, ENV_VAR: str(api_fault_file(layout))}, cwd=root)


def probe_api_source(port: int, client: httpx.Client) -> bool:
    try:
        return client.get(f"http://{HOST}:{port}/health").status_code == 200
    except httpx.HTTPError:
        return False


# ------------------------------------------------------------------------------------ plug-in services

RESERVED_SERVICE_NAMES: frozenset[str] = frozenset({*SERVICE_NAMES, TOXIPROXY, *SOURCE_SERVICES})
"""Names a plug-in service may not take."""


def plugin_service_dir(layout: Layout, name: str) -> Path:
    return layout.root / "plugin-services" / name


def plugin_service_launch(
    layout: Layout, name: str, spec: ServiceSpec, port: int, ep: Endpoints, sandbox: str, base: dict[str, str]
) -> tuple[Launch, ServiceSpec]:
    """How a plug-in service (:class:`~mlsandbox.plugins.ServiceSpec`) is started, and its spec with the
    placeholders filled in (:class:`~mlsandbox.plugins.PluginError` for an unknown one)."""
    work = plugin_service_dir(layout, name)
    values = {
        "port": str(port),
        "python": sys.executable,
        "dir": str(work),
        "sandbox": sandbox,
        "s3_url": ep.s3_url,
        "mlflow_url": ep.mlflow_url,
        "prefect_api_url": ep.prefect_api_url,
    }
    rendered = spec.render(values)
    return Launch(argv=rendered.argv, env={**base, **rendered.env}, cwd=work), rendered


def probe_plugin_service(url: str | None, client: httpx.Client) -> bool:
    """A plug-in service's health URL answers below 500 (no URL: True; the caller checks the process)."""
    if url is None:
        return True
    try:
        return client.get(url).status_code < 500
    except httpx.HTTPError:
        return False
