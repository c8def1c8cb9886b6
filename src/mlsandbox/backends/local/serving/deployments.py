"""Deployments: named groups of model-server replicas serving one model version, and a balancing client.

A deployment's replicas are separate processes (:class:`~mlsandbox.backends.local.serving.processes.ProcessHost`).
Changing the version (a new deployment of an existing name, or a rollback) is a rolling replacement: the
new replicas start and must answer their health check before they take traffic; only then are the old
ones stopped, so a version that fails to load leaves the old one serving. Requests are spread over the
live replicas round-robin by :meth:`Deployments.post`, which tries the next replica when one refuses the
connection (a dead replica costs a retry, not an error, while another is up).

Each replica runs under its machine's limits (memory and CPU quota, see
:mod:`mlsandbox.backends.local.serving.processes`) and, with a named environment, under that environment's interpreter
(:class:`Placement`). A replica the kernel killed for memory stays in the deployment as ``exited`` with
``reason: OOMKilled`` until it is replaced (``scale``, a rollout) or the deployment is removed.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlsandbox.backends.local.serving.processes import ProcessHost, ServingError, ServingProcess

MODEL_SERVER = "mlsandbox.workloads.model_server"
FEATURE_SERVICE = "mlsandbox.workloads.feature_service"


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

    def describe(self) -> dict[str, Any]:
        states = []
        for i, r in enumerate(self.replicas):
            row: dict[str, Any] = {"replica": i, "state": "running"}
            if not r.alive():
                row["state"] = "exited"
                row.update(r.termination() or {})
            states.append(row)
        return {
            "deployment": self.name,
            "model": self.model,
            "version": self.version,
            "machine": self.machine,
            "limits": {"cpus": self.placement.cpus, "memory_mb": self.placement.memory_mb},
            "environment": self.placement.environment,
            "replicas": len(self.replicas),
            "replicas_up": sum(1 for s in states if s["state"] == "running"),
            "replica_states": states,
            "version_history": list(self.history),
        }


class Deployments:
    """The deployments of one episode (thread safe: the traffic and monitoring threads read them)."""

    def __init__(self, host: ProcessHost) -> None:
        self.host = host
        self.items: dict[str, Deployment] = {}
        self.feature_service: ServingProcess | None = None
        self.lock = threading.RLock()
        self.client = httpx.Client(timeout=5.0, limits=httpx.Limits(max_connections=64))

    # ------------------------------------------------------------------------------ feature service

    def start_feature_service(self, bucket: str, key: str, id_column: str = "entity_id") -> ServingProcess:
        proc = self.host.start(
            "feature-service",
            FEATURE_SERVICE,
            ["--bucket", bucket, "--key", key, "--id-column", id_column],
            cpus=0.5,
            what="feature_service",
        )
        try:
            self.host.wait_ready([proc], timeout_s=60)
        except ServingError:
            self.host.stop([proc])
            raise
        self.feature_service = proc
        return proc

    # ---------------------------------------------------------------------------------- replicas

    def _start_replicas(
        self, deployment: str, registry_name: str, version: str, n: int, placement: Placement
    ) -> list[ServingProcess]:
        args = ["--model-uri", f"models:/{registry_name}/{version}"]
        if self.feature_service is not None:
            args += ["--feature-url", self.feature_service.url]
        procs: list[ServingProcess] = []
        try:
            for _ in range(n):
                procs.append(
                    self.host.start(
                        deployment,
                        MODEL_SERVER,
                        args,
                        cpus=placement.cpus,
                        memory_mb=placement.memory_mb,
                        python=placement.python,
                        what=f"model_server:{deployment}",
                    )
                )
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
        return dep, True

    def get(self, name: str) -> Deployment:
        with self.lock:
            dep = self.items.get(name)
            known = ", ".join(sorted(self.items)) or "none"
        if dep is None:
            raise ServingError("not_found", f"deployment {name!r} does not exist (deployments: {known})")
        return dep

    def set_version(
        self, name: str, version: str, replicas: int | None = None, placement: Placement | None = None
    ) -> Deployment:
        dep = self.get(name)
        n = replicas or len(dep.replicas)
        placement = placement or dep.placement
        new = self._start_replicas(name, dep.registry_name, version, n, placement)
        with self.lock:
            old, dep.replicas = dep.replicas, new
            dep.version, dep.placement = version, placement
            dep.history.append(version)
        self.host.stop(old)
        return dep

    def scale(self, name: str, replicas: int) -> Deployment:
        dep = self.get(name)
        # Replicas that died are replaced as part of scaling to the asked number.
        dead = [r for r in dep.replicas if not r.alive()]
        with self.lock:
            dep.replicas = [r for r in dep.replicas if r not in dead]
        self.host.stop(dead)
        have = len(dep.replicas)
        if replicas > have:
            new = self._start_replicas(name, dep.registry_name, dep.version, replicas - have, dep.placement)
            with self.lock:
                dep.replicas = dep.replicas + new
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
        return dep

    def close(self) -> None:
        with self.lock:
            self.items.clear()
            self.feature_service = None
        self.host.stop_all()
        self.client.close()

    # ----------------------------------------------------------------------------------- requests

    def post(self, name: str, body: bytes, timeout_s: float = 5.0) -> httpx.Response:
        """Send a request to the deployment (round-robin over live replicas, next one on a refused
        connection). :class:`ServingError` when the deployment does not exist or no replica answers."""
        with self.lock:
            dep = self.items.get(name)
            replicas = list(dep.replicas) if dep else []
        if dep is None:
            raise ServingError("not_found", f"deployment {name!r} does not exist")
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
                return self.client.post(
                    r.url + "/predict",
                    content=body,
                    headers={"content-type": "application/json"},
                    timeout=timeout_s,
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
        raise ServingError("unavailable", f"deployment {name!r}: no replica accepts connections ({last})")
