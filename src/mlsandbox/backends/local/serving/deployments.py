"""Deployments: named groups of model-server replicas serving one model version, and a balancing client.

A deployment's replicas are separate processes (:class:`~mlsandbox.backends.local.serving.processes.ProcessHost`).
Changing the version (a new deployment of an existing name, or a rollback) is a rolling replacement: the
new replicas start and must answer their health check before they take traffic; only then are the old
ones stopped, so a version that fails to load leaves the old one serving. Requests are spread over the
live replicas round-robin by :meth:`Deployments.request`, which tries the next replica when one refuses
the connection (a dead replica costs a retry, not an error, while another is up).

Each replica runs under its machine's limits (memory and CPU quota, see
:mod:`mlsandbox.backends.local.serving.processes`) and, with a named environment, under that environment's
interpreter (:class:`Placement`). A replica the kernel killed for memory stays in the deployment as
``exited`` with ``reason: OOMKilled`` until it is replaced (``scale``, a rollout) or the deployment is
removed: nothing restarts it on its own.

Faults. Every replica of a deployment reads the deployment's fault-hook control file, registered for the
episode as the target ``http:<deployment>`` (:mod:`mlsandbox.workloads.fault_hook`); the feature service's
is ``http:feature-service``. The registrations go with the deployment (undeploy, close).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlsandbox.backends.local import supervisor
from mlsandbox.backends.local.serving.processes import ProcessHost, ServingProcess
from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentView,
    Limits,
    ReplicaView,
    ServingError,
    ServingResponse,
    not_found,
)
from mlsandbox.workloads import fault_hook

MODEL_SERVER_MODULE = "mlsandbox.workloads.model_server"
FEATURE_SERVICE_MODULE = "mlsandbox.workloads.feature_service"


@dataclass(frozen=True)
class Placement:
    """Where a deployment's replicas run: a machine type (limits and price) and a Python environment."""

    machine: str
    cpus: float
    memory_mb: int
    credits_per_second: float
    environment: str = "default"
    python: str | None = None
    """The environment's interpreter (None: the sandbox's own)."""
    response: str | None = None
    """The replicas' response shape (the model server's ``--response``; None: what the model is decides)."""


@dataclass
class Deployment:
    name: str
    model: str
    """The agent-visible registered model name."""
    registry_name: str
    version: str
    placement: Placement
    replicas: list[ServingProcess]
    history: list[str] = field(default_factory=list)
    """Versions served, oldest first."""
    created: float = field(default_factory=time.time)
    changing: int = 0
    """Operations in progress that start or replace replicas (the rollout is ``progressing``)."""
    _rr: Any = field(default_factory=itertools.count)

    @property
    def machine(self) -> str:
        return self.placement.machine

    @property
    def cpus(self) -> float:
        return self.placement.cpus

    @property
    def credits_per_second(self) -> float:
        return self.placement.credits_per_second

    def live(self) -> list[ServingProcess]:
        return [r for r in self.replicas if r.alive()]

    def view(self) -> DeploymentView:
        """The agent's view: each replica running (alive) or exited with how it ended."""
        states = []
        for i, r in enumerate(self.replicas):
            if r.alive():
                states.append(ReplicaView(replica=i, version=r.version or self.version, state="running"))
            else:
                end = r.termination() or {}
                states.append(
                    ReplicaView(
                        replica=i,
                        version=r.version or self.version,
                        state="exited",
                        exit_code=end.get("exit_code"),  # type: ignore[arg-type]
                        reason=end.get("reason"),  # type: ignore[arg-type]
                        message=end.get("message"),  # type: ignore[arg-type]
                    )
                )
        up = sum(1 for s in states if s.state == "running")
        return DeploymentView(
            deployment=self.name,
            model=self.model,
            version=self.version,
            machine=self.machine,
            limits=Limits(cpus=self.placement.cpus, memory_mb=self.placement.memory_mb),
            environment=self.placement.environment,
            replicas=len(self.replicas),
            replicas_up=up,
            rollout="complete" if self.changing == 0 and up == len(self.replicas) else "progressing",
            replica_states=states,
            version_history=list(self.history),
        )


class Deployments:
    """The deployments of one episode (thread safe: the traffic and monitoring tickers read them)."""

    def __init__(self, host: ProcessHost) -> None:
        self.host = host
        self.items: dict[str, Deployment] = {}
        self.feature_service: ServingProcess | None = None
        self.lock = threading.RLock()
        self._features_lock = threading.Lock()
        self._feature_args: list[str] = []
        self.client = httpx.Client(timeout=5.0, limits=httpx.Limits(max_connections=64))

    # ------------------------------------------------------------------------------ feature service

    def start_feature_service(self, bucket: str, key: str, id_column: str = "entity_id") -> ServingProcess:
        """Start the feature service over ``s3://bucket/key`` and wait until it is ready (idempotent);
        :class:`ServingError` ``unavailable`` (with its log tail) when it does not start."""
        with self._features_lock:
            if self.feature_service is not None:
                return self.feature_service
            self._feature_args = ["--bucket", bucket, "--key", key, "--id-column", id_column]
            proc = self._start_feature_service(0)
            with self.lock:
                self.feature_service = proc
            self._register(FEATURE_SERVICE)
            return proc

    def _start_feature_service(self, port: int) -> ServingProcess:
        proc = self.host.start(
            FEATURE_SERVICE,
            FEATURE_SERVICE_MODULE,
            self._feature_args,
            cpus=0.5,
            what="feature_service",
            fault_name=FEATURE_SERVICE,
            port=port,
        )
        try:
            self.host.wait_ready([proc], timeout_s=60)
        except ServingError as e:
            self.host.stop([proc])
            raise ServingError("unavailable", f"the feature service did not start: {e.message}") from None
        return proc

    def _running_feature_service(self) -> ServingProcess:
        with self.lock:
            proc = self.feature_service
        if proc is None:
            raise ServingError("unavailable", "the feature service is not running (no deployment yet)")
        return proc

    def restart_feature_service(self) -> ServingProcess:
        """Stop the feature service and start it again on the same port (the model servers keep its
        address); its fault-hook control file goes with the old process: the fault was its state."""
        with self._features_lock:
            old = self._running_feature_service()
            self.host.stop([old])
            fault_hook.clear_fault(self.host.fault_file(FEATURE_SERVICE))
            proc = self._start_feature_service(old.port or 0)
            with self.lock:
                self.feature_service = proc
            return proc

    def feature_service_health(self, timeout_s: float = 2.0) -> ServiceHealth:
        """``GET /health`` of the feature service, as a client sees it."""
        proc = self._running_feature_service()
        t0 = time.monotonic()
        try:
            resp = self.client.get(proc.url + "/health", timeout=timeout_s)
        except httpx.HTTPError as e:
            return ServiceHealth(service=FEATURE_SERVICE, healthy=False, error=f"{type(e).__name__}: {e}")
        ms = round((time.monotonic() - t0) * 1000, 1)
        if resp.status_code != 200:
            error = f"HTTP {resp.status_code}: {resp.text[:200]}"
            return ServiceHealth(service=FEATURE_SERVICE, healthy=False, latency_ms=ms, error=error)
        return ServiceHealth(service=FEATURE_SERVICE, healthy=True, latency_ms=ms)

    def feature_service_logs(self, tail: int) -> str:
        return supervisor.tail(self._running_feature_service().log, tail)

    # ------------------------------------------------------------------------------- fault hooks

    def _register(self, target: str) -> None:
        fault_hook.register_hook(target, self.host.fault_file(target), scope=self.host.episode_id)

    def _unregister(self, target: str) -> None:
        fault_hook.unregister_hook(target, scope=self.host.episode_id)
        self.host.fault_file(target).unlink(missing_ok=True)

    # ---------------------------------------------------------------------------------- replicas

    def _start_replicas(
        self, deployment: str, registry_name: str, version: str, n: int, placement: Placement
    ) -> list[ServingProcess]:
        args = ["--model-uri", f"models:/{registry_name}/{version}"]
        if placement.response is not None:
            args += ["--response", placement.response]
        if self.feature_service is not None:
            args += ["--feature-url", self.feature_service.url]
        procs: list[ServingProcess] = []
        try:
            for _ in range(n):
                proc = self.host.start(
                    deployment,
                    MODEL_SERVER_MODULE,
                    args,
                    cpus=placement.cpus,
                    memory_mb=placement.memory_mb,
                    python=placement.python,
                    what=f"model_server:{deployment}",
                    fault_name=deployment,
                )
                proc.version = version
                procs.append(proc)
            # A fresh environment compiles its modules on the first start, and a replica under a CPU
            # quota below one CPU starts that much slower: more time to get ready.
            timeout = (90.0 if placement.python is None else 300.0) / min(1.0, max(placement.cpus, 0.25))
            self.host.wait_ready(procs, timeout_s=timeout)
        except ServingError as e:
            self.host.stop(procs, timeout=2.0)
            where = "" if placement.python is None else f" in environment {placement.environment!r}"
            raise ServingError(e.code, f"version {version} did not start{where}: {e.message}") from None
        return procs

    def deploy(
        self,
        name: str,
        model: str,
        registry_name: str,
        version: str,
        replicas: int,
        placement: Placement,
    ) -> tuple[Deployment, bool]:
        """Create the deployment, or roll an existing one to ``version`` (on ``placement``: the new
        replicas take its machine and environment); (deployment, created)."""
        with self.lock:
            existing = self.items.get(name)
        if existing is not None:
            if existing.model != model:
                raise ServingError(
                    "conflict", f"deployment {name!r} serves model {existing.model!r}, not {model!r}"
                )
            return self.set_version(name, version, replicas=replicas, placement=placement), False
        procs = self._start_replicas(name, registry_name, version, replicas, placement)
        dep = Deployment(name, model, registry_name, version, placement, procs, [version])
        with self.lock:
            self.items[name] = dep
        self._register(name)
        return dep, True

    def get(self, name: str) -> Deployment:
        with self.lock:
            dep = self.items.get(name)
            known = list(self.items)
        if dep is None:
            raise not_found(name, known)
        return dep

    def set_version(
        self, name: str, version: str, replicas: int | None = None, placement: Placement | None = None
    ) -> Deployment:
        dep = self.get(name)
        n = len(dep.replicas) if replicas is None else replicas
        placement = placement or dep.placement
        with self.lock:
            dep.changing += 1
        try:
            new = self._start_replicas(name, dep.registry_name, version, n, placement)
            with self.lock:
                old, dep.replicas = dep.replicas, new
                dep.version, dep.placement = version, placement
                dep.history.append(version)
        finally:
            with self.lock:
                dep.changing -= 1
        self.host.stop(old)
        return dep

    def scale(self, name: str, replicas: int) -> Deployment:
        if replicas < 0:
            raise ServingError("invalid_parameters", f"replicas must be 0 or more, not {replicas}")
        dep = self.get(name)
        # Replicas that died are replaced as part of scaling to the asked number.
        dead = [r for r in dep.replicas if not r.alive()]
        with self.lock:
            dep.replicas = [r for r in dep.replicas if r not in dead]
        self.host.stop(dead)
        have = len(dep.replicas)
        if replicas > have:
            with self.lock:
                dep.changing += 1
            try:
                new = self._start_replicas(
                    name, dep.registry_name, dep.version, replicas - have, dep.placement
                )
                with self.lock:
                    dep.replicas = dep.replicas + new
            finally:
                with self.lock:
                    dep.changing -= 1
        elif replicas < have:
            with self.lock:
                dep.replicas, gone = dep.replicas[:replicas], dep.replicas[replicas:]
            self.host.stop(gone)
        return dep

    def undeploy(self, name: str) -> Deployment:
        dep = self.get(name)
        with self.lock:
            self.items.pop(name, None)
        self.host.stop(dep.replicas)
        self._unregister(name)
        return dep

    def close(self) -> None:
        with self.lock:
            targets = [*self.items, *([FEATURE_SERVICE] if self.feature_service is not None else [])]
            self.items.clear()
            self.feature_service = None
        self.host.stop_all()
        for target in targets:
            self._unregister(target)
        self.client.close()

    # ----------------------------------------------------------------------------------- requests

    def request(
        self,
        name: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float = 5.0,
        content_type: str = "application/json",
    ) -> ServingResponse:
        """POST to ``path`` of the deployment (round-robin over live replicas, the next one on a refused
        connection). :class:`ServingError` when the deployment does not exist or no replica answers."""
        with self.lock:
            dep = self.items.get(name)
            replicas = list(dep.replicas) if dep else []
            known = list(self.items)
        if dep is None:
            raise not_found(name, known)
        if not replicas:
            raise ServingError("unavailable", f"deployment {name!r} has no replica")
        start = next(dep._rr)
        last: Exception | None = None
        tried: set[str] = set()
        for k in range(2 * len(replicas)):
            if k == len(replicas):  # a rollout may have swapped the replicas meanwhile: look again
                with self.lock:
                    replicas = list(dep.replicas)
                if not replicas:
                    break
            r = replicas[(start + k) % len(replicas)]
            if r.port is None or r.name in tried:
                continue
            tried.add(r.name)
            try:
                resp = self.client.post(
                    r.url + path, content=body, headers={"content-type": content_type}, timeout=timeout_s
                )
            except httpx.ConnectError as e:
                last = e
                continue
            except httpx.TimeoutException as e:
                raise ServingError(
                    "timeout", f"deployment {name!r} did not answer within {timeout_s} s"
                ) from e
            except httpx.HTTPError as e:
                raise ServingError("unavailable", f"deployment {name!r}: {type(e).__name__}: {e}") from e
            return ServingResponse(
                status=resp.status_code, body=resp.content, content_type=resp.headers.get("content-type")
            )
        raise ServingError("unavailable", f"deployment {name!r}: no replica accepts connections ({last})")
