"""Data-source hosting on the kube backend: the HTTP API source and PostgreSQL as pods of the episode.

Lake batches are objects in the episode's bucket and need no host. The two servers are started on an
episode's first use of them, each a one-replica Deployment and a Service of the sandbox's namespace
carrying the episode's labels (:mod:`.source_manifests`), and deleted when the episode closes (the
operator's warm reset deletes them by label too). The gateway reaches each through a port-forward of the
API server (:class:`~mlsandbox.backends.kube.portforward.PortForwarder`): PostgreSQL speaks TCP, which the
API server's service proxy does not carry, and the proxy drops the ``Authorization`` header the API
source checks. The episode's jobs and the agent's code reach the servers at their Services' names, which
is what :meth:`KubeEpisodeSources.address` says.

- API datasets and the API source's HTTP fault are written through its control listener (on the pod's
  loopback address: reachable over a port-forward only, which the agent's role cannot open;
  :mod:`.control_listener`); the server re-reads them at the next request, as on ``local``.
- PostgreSQL: the admin password is the episode's (a Secret of the namespace); databases, login roles
  and tables are made over the forwarded port with psycopg, as on ``local``.
- Stopping a server scales its Deployment to zero (connections are refused until it starts); restarting
  it replaces its pod. A new pod starts with empty data (emptyDir volumes), so what the episode published
  or created is written again, with the passwords and access rules as they are now, before the server is
  used (an injected API fault is not: a restarted server comes back without it, as on ``local``). A pod
  the agent deleted is replaced by its Deployment and seeded the same way at the next request.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlsandbox.backends.common.postgres import read_table
from mlsandbox.backends.protocols.faults import HttpFault, ServiceHealth
from mlsandbox.backends.protocols.sources import (
    API_SOURCE,
    POSTGRES,
    SOURCE_SERVICES,
    ApiDataset,
    ApiProbe,
    HttpAnswer,
    SourceError,
    SourceProbe,
    TableRows,
)
from mlsandbox.errors import NotRunningError, ServiceStartError

from . import source_manifests as SM
from .cluster import ApiRefused, Cluster
from .control_listener import (
    ControlListener,
    ControlUnreachable,
    PodFaultHook,
    http_target,
    register_http_target,
    running_pod,
    unregister_http_target,
)
from .portforward import PortForwarder

log = logging.getLogger(__name__)

BACKEND = "kube"
EPISODE_LABEL = "mlsandbox.world.episode"
"""The label of an episode's objects (what the operator's warm reset deletes by)."""
START_TIMEOUT_S = 180.0
SEED_CHECK_S = 2.0
"""How often a request checks whether the server's pod was replaced (and needs its data again)."""
DEPLOYMENT_API = ("apps/v1", "Deployment")
UNSUPPORTED: dict[str, str] = {}
"""What :meth:`KubeRuntime.support` refuses of the sources: nothing (both run as pods)."""

_PG_TYPES = {"i": "bigint", "f": "double precision", "b": "boolean", "M": "timestamp"}
"""pandas dtype kind -> the column type of a source table (anything else: text), as on ``local``."""


@dataclass
class _Database:
    role: str
    password: str
    table: str
    parquet: bytes


@dataclass
class _Server:
    service: str
    name: str
    forwards: dict[int, PortForwarder] = field(default_factory=dict)
    """Remote port -> its forwarder."""
    seeded_pod: str | None = None
    """The uid of the pod that holds the episode's data."""
    checked_at: float = -1.0e9


class KubeSourceHosting:
    """The :class:`~mlsandbox.backends.protocols.SourceHosting` of the kube backend."""

    def __init__(
        self,
        cluster: Cluster | None = None,
        *,
        namespace: str = "",
        sandbox: str = "",
        api_image: str = "",
        postgres_image: str = "",
        image_pull_policy: str = "IfNotPresent",
        cpu_request: float = 1.0,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.sandbox = sandbox
        self.api_image = api_image
        self.postgres_image = postgres_image
        self.image_pull_policy = image_pull_policy
        self.cpu_request = cpu_request
        self.start_timeout_s = start_timeout_s

    def open(self, episode_id: str) -> KubeEpisodeSources:
        return KubeEpisodeSources(self, episode_id)

    def cleanup(self, labels: Mapping[str, str] | None = None) -> int:
        """Delete the source servers (of the episode ``labels`` names, or all of the sandbox): their
        Deployments, Services, Secrets and pods; how many Deployments."""
        if self.cluster is None:
            return 0
        selector = {SM.SOURCE_LABEL: "", **(labels or {})}
        text = ",".join(k if not v else f"{k}={v}" for k, v in selector.items())
        text += f",mlsandbox.dev/sandbox={self.sandbox}"
        deps = self.cluster.list(*DEPLOYMENT_API, self.namespace, text)
        for dep in deps:
            self.cluster.delete(
                *DEPLOYMENT_API, dep["metadata"]["name"], self.namespace, propagation="Background"
            )
        for api in (("v1", "Service"), ("v1", "Secret")):
            for obj in self.cluster.list(*api, self.namespace, text):
                self.cluster.delete(*api, obj["metadata"]["name"], self.namespace)
        for pod in self.cluster.list("v1", "Pod", self.namespace, text):
            self.cluster.delete("v1", "Pod", pod["metadata"]["name"], self.namespace, grace_period_s=0)
        return len(deps)


class KubeEpisodeSources:
    """The source servers of one episode on kube (see the module and
    :class:`~mlsandbox.backends.protocols.EpisodeSources`)."""

    def __init__(self, hosting: KubeSourceHosting, episode_id: str) -> None:
        self.hosting = hosting
        self.episode_id = episode_id
        self.labels = {EPISODE_LABEL: episode_id}
        self._lock = threading.RLock()
        self._servers: dict[str, _Server] = {}
        self._datasets: dict[str, tuple[ApiDataset, bytes]] = {}
        self._databases: dict[str, _Database] = {}
        self._admin_password = secrets.token_urlsafe(18)
        self._http: httpx.Client | None = None
        self._control: ControlListener | None = None
        self._hook: PodFaultHook | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"KubeEpisodeSources(namespace={self.hosting.namespace!r}, episode={self.episode_id!r})"

    @property
    def cluster(self) -> Cluster:
        if self.hosting.cluster is None:
            raise NotRunningError("no cluster is configured for the kube backend's sources")
        return self.hosting.cluster

    # ----------------------------------------------------------------------------------------- api

    def publish(self, dataset: ApiDataset, parquet: bytes) -> None:
        with self._lock:
            self._datasets[dataset.dataset_id] = (dataset, parquet)
            self._ensure(API_SOURCE)
            self._write_dataset(dataset, parquet)
        register_http_target(self.episode_id, dataset.name, self)

    def update_access(self, dataset: ApiDataset) -> None:
        with self._lock:
            known = self._datasets.get(dataset.dataset_id)
            if known is None:
                raise KeyError(f"dataset {dataset.dataset_id!r} is not published on the API source")
            self._datasets[dataset.dataset_id] = (dataset, known[1])
            self._admin("PUT", f"/datasets/{dataset.dataset_id}/meta.json", _meta(dataset))

    def api_get(
        self, dataset_id: str, params: dict[str, str | int], token: str | None, *, timeout_s: float
    ) -> HttpAnswer:
        server = self._server(API_SOURCE)
        if server is None:
            raise SourceError("unavailable", "the API source has not been started in this episode")
        self._reseed_if_replaced(server)
        host, port = self._forward(server, SM.API_PORT).address
        url = f"http://{host}:{port}/v1/datasets/{dataset_id}/records"
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        try:
            resp = self._client().get(url, params=params, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as e:
            where = self.address(API_SOURCE)
            raise SourceError("unavailable", f"cannot reach {where}: {type(e).__name__}: {e}") from None
        return HttpAnswer(
            status=resp.status_code,
            headers={k.lower(): v for k, v in resp.headers.items()},
            body=resp.content,
        )

    def set_http_fault(self, fault: HttpFault) -> None:
        """Make the API source answer as ``fault`` says (its fault hook, through the control listener)."""
        try:
            self._fault_hook().set(fault)
        except ControlUnreachable as e:
            raise SourceError("unavailable", str(e)) from None

    def clear_http_fault(self) -> None:
        with contextlib.suppress(NotRunningError):
            self._fault_hook().clear()

    def http_fault_active(self) -> bool:
        """Whether the fault set here is still in the API source's pod (a new pod starts without it)."""
        with self._lock:
            hook = self._hook
        return hook is not None and hook.active()

    # ------------------------------------------------------------------------------------ postgres

    def create_database(self, database: str, role: str, password: str, table: str, parquet: bytes) -> None:
        with self._lock:
            self._ensure(POSTGRES)  # a new server is seeded with the databases made before this one
            record = _Database(role, password, table, parquet)
            self._create_database(database, record)
            self._databases[database] = record

    def set_password(self, role: str, password: str) -> None:
        import psycopg
        from psycopg import sql

        with self._lock:
            for db in self._databases.values():
                if db.role == role:
                    db.password = password
            with psycopg.connect(self._dsn(), autocommit=True) as admin:
                admin.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
                )

    def query(
        self, database: str, user: str, password: str | None, table: str, *, limit: int | None = None
    ) -> TableRows:
        server = self._server(POSTGRES)
        if server is None:
            raise SourceError("unavailable", "the PostgreSQL source has not been started in this episode")
        self._reseed_if_replaced(server)
        return read_table(self._dsn(database, user, password or ""), table, limit)

    # ------------------------------------------------------------------------------------ services

    def address(self, service: str) -> str:
        name = SM.object_name(_check(service), self.episode_id)
        if service not in self._servers:
            return "(not started)"
        port = SM.API_PORT if service == API_SOURCE else SM.POSTGRES_PORT
        return f"{name}.{self.hosting.namespace}.svc:{port}"

    def health(self, probe: SourceProbe) -> ServiceHealth:
        t0 = time.perf_counter()
        if isinstance(probe, ApiProbe):
            service = API_SOURCE
            try:
                answer = self.api_get(
                    probe.dataset_id, {"page": 1, "page_size": 1}, probe.token, timeout_s=5.0
                )
            except SourceError as e:
                return ServiceHealth(service=service, healthy=False, error=e.message)
            if not (200 <= answer.status < 300 or answer.status == 429):
                detail = " ".join(answer.body.decode(errors="replace").split())[:200]
                return ServiceHealth(service=service, healthy=False, error=f"HTTP {answer.status}: {detail}")
        else:
            import psycopg

            service = POSTGRES
            server = self._server(POSTGRES)
            if server is None:
                return ServiceHealth(service=service, healthy=False, error="not started")
            try:
                with psycopg.connect(
                    self._dsn(probe.database, probe.user, probe.password or ""), autocommit=True
                ) as conn:
                    conn.execute("SELECT 1").fetchone()
            except psycopg.Error as e:
                text = " ".join(str(e).split())[:300]
                return ServiceHealth(service=service, healthy=False, error=f"{type(e).__name__}: {text}")
        latency = round((time.perf_counter() - t0) * 1000, 1)
        return ServiceHealth(service=service, healthy=True, latency_ms=latency)

    def stop(self, service: str) -> bool:
        """Scale the server's Deployment to zero and wait until its pod is gone."""
        server = self._server(_check(service))
        if server is None:
            return False
        was_running = self._ready_pod(server) is not None
        self._scale(server, 0)
        deadline = time.monotonic() + self.hosting.start_timeout_s
        while self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(service)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.25)
        with self._lock:
            server.seeded_pod = None
        return was_running

    def start(self, service: str) -> None:
        with self._lock:
            server = self._server(_check(service))
            if server is None:
                self._ensure(service)
                return
            self._scale(server, 1)
            self._wait_seeded(server)

    def restart(self, service: str) -> None:
        """A new pod of the server (the old one deleted), seeded with the episode's data."""
        with self._lock:
            server = self._server(_check(service))
            if server is None:
                raise NotRunningError(f"the {service} source service has not been started in this episode")
            self._scale(server, 1)
            for pod in self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(service)):
                self.cluster.delete(
                    "v1", "Pod", pod["metadata"]["name"], self.hosting.namespace, grace_period_s=0
                )
            server.seeded_pod = None
            self._wait_seeded(server)

    def logs(self, service: str, tail: int = 50) -> str:
        pods = self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(_check(service)))
        if not pods:
            return ""
        name = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")[-1]["metadata"][
            "name"
        ]
        try:
            return self.cluster.pod_log(name, self.hosting.namespace, tail=tail)
        except ApiRefused as e:
            return f"(no log: {e})"

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            servers, self._servers = dict(self._servers), {}
            client, self._http = self._http, None
            names = [ds.name for ds, _ in self._datasets.values()]
            self._datasets.clear()
            self._databases.clear()
            control, self._control, self._hook = self._control, None, None
        for name in names:
            unregister_http_target(self.episode_id, name, self)
        if control is not None:
            control.close()
        for server in servers.values():
            for forward in server.forwards.values():
                forward.close()
        if client is not None:
            client.close()
        if servers and self.hosting.cluster is not None:
            try:
                self.hosting.cleanup(self.labels)
            except Exception as e:  # the warm reset and down remove what is left
                log.warning("episode %s: removing the source servers failed: %s", self.episode_id, e)

    # ------------------------------------------------------------------------------------- servers

    def _server(self, service: str) -> _Server | None:
        with self._lock:
            return self._servers.get(service)

    def _selector(self, service: str) -> str:
        match = SM.selector(service, self.hosting.sandbox, self.labels)
        return ",".join(f"{k}={v}" for k, v in match.items())

    def _ensure(self, service: str) -> _Server:
        """Create the server's objects unless this episode did, and wait until its pod is ready and seeded."""
        with self._lock:
            if self._closed:
                raise NotRunningError(f"episode {self.episode_id} is closed")
            server = self._servers.get(service)
            if server is not None:
                self._reseed_if_replaced(server, force=True)
                return server
            h = self.hosting
            common: dict[str, Any] = {
                "namespace": h.namespace,
                "sandbox": h.sandbox,
                "episode_id": self.episode_id,
                "episode_labels": self.labels,
                "image_pull_policy": h.image_pull_policy,
                "cpu_request": h.cpu_request,
            }
            manifests: tuple[dict[str, Any], ...]
            if service == API_SOURCE:
                manifests = SM.api_source_manifests(image=h.api_image, **common)
            else:
                manifests = SM.postgres_manifests(
                    image=h.postgres_image, password=self._admin_password, **common
                )
            try:
                for manifest in manifests:
                    self.cluster.apply(manifest)
            except ApiRefused as e:
                raise ServiceStartError(f"the cluster refused the {service} source server: {e}") from None
            server = _Server(service=service, name=SM.object_name(service, self.episode_id))
            self._servers[service] = server
            self._wait_seeded(server)
            return server

    def _wait_seeded(self, server: _Server) -> None:
        """Wait until the server's pod is ready and answers, then seed it if it is new."""
        deadline = time.monotonic() + self.hosting.start_timeout_s
        while True:
            pod = self._ready_pod(server)
            if pod is not None and self._answers(server):
                break
            if time.monotonic() > deadline:
                tail = self.logs(server.service, 20)
                raise ServiceStartError(
                    f"the {server.service} source server of episode {self.episode_id} was not ready after "
                    f"{self.hosting.start_timeout_s:.0f} s{self._pod_problem(server)}.\n{tail}"
                )
            time.sleep(0.5)
        self._seed(server, pod)

    def _reseed_if_replaced(self, server: _Server, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - server.checked_at < SEED_CHECK_S:
            return
        server.checked_at = now
        pod = self._ready_pod(server)
        if pod is None or pod["metadata"].get("uid") == server.seeded_pod:
            return
        with self._lock:
            if self._answers(server):
                self._seed(server, pod)

    def _seed(self, server: _Server, pod: Mapping[str, Any]) -> None:
        uid = pod["metadata"].get("uid")
        with self._lock:
            if server.seeded_pod == uid:
                return
            if server.service == API_SOURCE:
                for dataset, parquet in self._datasets.values():
                    self._write_dataset(dataset, parquet)
            else:
                for database, record in self._databases.items():
                    self._create_database(database, record)
            server.seeded_pod = uid

    def _ready_pod(self, server: _Server) -> dict[str, Any] | None:
        for pod in self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(server.service)):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return dict(pod)
        return None

    def _running_pod(self, service: str) -> str | None:
        """A running pod of the server, ready or not (:func:`.control_listener.running_pod`)."""
        return running_pod(self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(service)))

    def _pod_problem(self, server: _Server) -> str:
        for pod in self.cluster.list("v1", "Pod", self.hosting.namespace, self._selector(server.service)):
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                waiting = (status.get("state") or {}).get("waiting") or {}
                if waiting.get("reason"):
                    return f" ({waiting['reason']}: {waiting.get('message') or ''})"
            return f" (pod {pod['metadata']['name']}: {(pod.get('status') or {}).get('phase')})"
        return " (no pod: see the Deployment's events)"

    def _answers(self, server: _Server) -> bool:
        if server.service == API_SOURCE:
            try:
                self._admin("GET", "/health", b"", timeout_s=3.0)
            except (SourceError, NotRunningError):
                return False
            return True
        import psycopg

        try:
            with psycopg.connect(self._dsn(connect_timeout=3), autocommit=True) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _scale(self, server: _Server, replicas: int) -> None:
        self.cluster.patch(
            *DEPLOYMENT_API, server.name, self.hosting.namespace, {"spec": {"replicas": replicas}}
        )

    def _forward(self, server: _Server, port: int) -> PortForwarder:
        with self._lock:
            forward = server.forwards.get(port)
            if forward is None:
                ns, selector = self.hosting.namespace, self._selector(server.service)

                def find() -> str | None:
                    pod = self._ready_pod(server)
                    return None if pod is None else str(pod["metadata"]["name"])

                forward = PortForwarder(self.cluster.api_client, ns, find, port)
                log.debug("episode %s: %r for %s", self.episode_id, forward, selector)
                server.forwards[port] = forward
            return forward

    # ------------------------------------------------------------------------------------- helpers

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=10.0, trust_env=False)
            return self._http

    def _listener(self) -> ControlListener:
        """The API source's control listener (:mod:`.control_listener`)."""
        with self._lock:
            if self._server(API_SOURCE) is None:
                raise NotRunningError("the API source has not been started in this episode")
            if self._control is None:
                self._control = ControlListener(
                    self.cluster.api_client,
                    self.hosting.namespace,
                    lambda: self._running_pod(API_SOURCE),
                    SM.API_ADMIN_PORT,
                    "the API source",
                )
            return self._control

    def _fault_hook(self) -> PodFaultHook:
        with self._lock:
            if self._hook is None:
                self._hook = PodFaultHook(self._listener())
            return self._hook

    def _admin(self, method: str, path: str, body: bytes, *, timeout_s: float = 30.0) -> None:
        try:
            self._listener().request(method, path, body, timeout_s=timeout_s)
        except ControlUnreachable as e:
            raise SourceError("unavailable", str(e)) from None

    def _write_dataset(self, dataset: ApiDataset, parquet: bytes) -> None:
        self._admin("PUT", f"/datasets/{dataset.dataset_id}/data.parquet", parquet)
        self._admin("PUT", f"/datasets/{dataset.dataset_id}/meta.json", _meta(dataset))

    def _dsn(
        self,
        dbname: str = "postgres",
        user: str = SM.POSTGRES_ADMIN,
        password: str | None = None,
        *,
        connect_timeout: int = 5,
    ) -> str:
        server = self._server(POSTGRES)
        if server is None:
            raise SourceError("unavailable", "the PostgreSQL source has not been started in this episode")
        host, port = self._forward(server, SM.POSTGRES_PORT).address
        secret = self._admin_password if password is None else password
        parts = {
            "host": host,
            "port": str(port),
            "dbname": dbname,
            "user": user,
            "password": secret,
            "connect_timeout": str(connect_timeout),
            "sslmode": "disable",
        }
        return " ".join(f"{k}={_quote(v)}" for k, v in parts.items())

    def _create_database(self, database: str, record: _Database) -> None:
        import pandas as pd
        import psycopg
        from psycopg import sql

        frame = pd.read_parquet(io.BytesIO(record.parquet))
        with psycopg.connect(self._dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(record.role), sql.Literal(record.password)
                )
            )
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(database), sql.Identifier(record.role)
                )
            )
        columns = [
            sql.SQL("{} {}").format(
                sql.Identifier(str(c)), sql.SQL(_PG_TYPES.get(frame[c].dtype.kind, "text"))
            )
            for c in frame.columns
        ]
        with psycopg.connect(self._dsn(database, record.role, record.password)) as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {} ({})").format(
                    sql.Identifier(record.table), sql.SQL(", ").join(columns)
                )
            )
            names = sql.SQL(", ").join(sql.Identifier(str(c)) for c in frame.columns)
            with (
                conn.cursor() as cur,
                cur.copy(
                    sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(record.table), names)
                ) as copy,
            ):
                for row in frame.astype(object).where(frame.notna(), None).itertuples(index=False, name=None):
                    copy.write_row(row)


def _meta(dataset: ApiDataset) -> bytes:
    return json.dumps(
        {
            "token": dataset.token,
            "rate_limit_per_s": dataset.rate_limit_per_s,
            "burst": dataset.burst,
            "max_page_size": dataset.max_page_size,
        }
    ).encode()


def _quote(value: str) -> str:
    """A libpq connection-string value, quoted."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check(service: str) -> str:
    if service not in SOURCE_SERVICES:
        raise ValueError(f"unknown source service {service!r}; known: {', '.join(SOURCE_SERVICES)}")
    return service


def _conforms(hosting: KubeSourceHosting) -> Any:
    """What the type checker verifies: these implement the declared protocols."""
    from mlsandbox.backends.protocols.sources import EpisodeSources, SourceHosting

    checked: tuple[SourceHosting, EpisodeSources] = (hosting, hosting.open("check"))
    return checked


__all__ = ["UNSUPPORTED", "KubeEpisodeSources", "KubeSourceHosting", "http_target"]
