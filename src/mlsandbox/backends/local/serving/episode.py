"""Model serving on the local backend, behind the declared protocol
(:class:`~mlsandbox.backends.protocols.serving.ModelServing`).

:class:`LocalServing` is the runtime's ``serving``; :meth:`LocalServing.open` gives an episode its
:class:`LocalEpisodeServing`: the episode's :class:`~mlsandbox.backends.local.serving.deployments.Deployments`
(replicas as supervised processes, each under its machine's cgroup or rlimits) and its feature service,
all under ``<sandbox>/serving/<episode>/`` and marked with the episode id (``MLSANDBOX_EPISODE``), which
is what ``mlsandbox gc`` and the tests select; the episode's ``labels`` are not needed here.

Requests go straight to a replica's port (round-robin); scrapes read each replica's ``/metrics``; CPU and
memory per replica are read from the process (psutil). A named environment runs the replicas under the
interpreter of the environment the runtime's
:meth:`~mlsandbox.backends.protocols.environments.Environments.for_serving` builds from it (its
requirements plus the model server's packages).
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from mlsandbox.backends.local.serving.deployments import Deployment, Deployments, Placement
from mlsandbox.backends.local.serving.processes import ProcessHost, ServingProcess
from mlsandbox.backends.protocols import Endpoints, ServiceHealth
from mlsandbox.backends.protocols.environments import DEFAULT_KEY, EnvironmentBuildError, Environments
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    EpisodeServing,
    ModelServing,
    ReplicaRef,
    ReplicaStats,
    ServingError,
    ServingResponse,
    check_set_version,
)


class LocalEpisodeServing:
    """The deployments of one episode on a local sandbox (see the module docstring)."""

    def __init__(self, host: ProcessHost, environments: Callable[[], Environments]) -> None:
        self.host = host
        self.deployments = Deployments(host)
        self._environments = environments
        self._procs: dict[str, psutil.Process] = {}
        self._stats_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"LocalEpisodeServing(episode={self.host.episode_id!r})"

    # ---------------------------------------------------------------------------------- operations

    def _placement(self, spec: DeploymentSpec) -> Placement:
        from mlsandbox.backends.local import venvs

        python = None
        environment = "default"
        if spec.environment is not None:
            environment = spec.environment.name
            try:
                served = self._environments().for_serving(spec.environment.env)
                if served.key != DEFAULT_KEY:
                    python = str(venvs.interpreter(served.key))
            except (ValueError, KeyError, EnvironmentBuildError) as e:
                raise ServingError(
                    "environment_build_failed",
                    f"environment {environment!r} cannot run the model server: {e}",
                ) from None
        m = spec.machine
        return Placement(
            m.name, m.cpus, m.memory_mb, m.credits_per_second, environment, python, spec.response
        )

    def deploy(self, spec: DeploymentSpec) -> tuple[DeploymentView, bool]:
        placement = self._placement(spec)
        dep, created = self.deployments.deploy(
            spec.deployment, spec.model, spec.registry_name, spec.version, spec.replicas, placement
        )
        return dep.view(), created

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        check_set_version(self.deployments.get(deployment).view(), version)
        return self.deployments.set_version(deployment, version).view()

    def scale(self, deployment: str, replicas: int) -> DeploymentView:
        return self.deployments.scale(deployment, replicas).view()

    def undeploy(self, deployment: str) -> DeploymentView:
        return self.deployments.undeploy(deployment).view()

    def get(self, deployment: str) -> DeploymentView:
        return self.deployments.get(deployment).view()

    def list(self) -> list[DeploymentView]:
        return [d.view() for d in self._items()]

    def _items(self) -> builtins.list[Deployment]:
        with self.deployments.lock:
            return sorted(self.deployments.items.values(), key=lambda d: d.name)

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        self.deployments.start_feature_service(bucket, key, id_column)

    # ------------------------------------------------------------------------- requests and scrapes

    def feature_service_health(self, *, timeout_s: float = 2.0) -> ServiceHealth:
        return self.deployments.feature_service_health(timeout_s)

    def restart_feature_service(self) -> ServiceHealth:
        self.deployments.restart_feature_service()
        return self.deployments.feature_service_health()

    def feature_service_logs(self, tail: int = 50) -> str:
        return self.deployments.feature_service_logs(tail)

    def request(
        self,
        deployment: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float,
        content_type: str = "application/json",
    ) -> ServingResponse:
        return self.deployments.request(
            deployment, path, body, timeout_s=timeout_s, content_type=content_type
        )

    def replicas(self) -> dict[str, builtins.list[ReplicaRef]]:
        with self.deployments.lock:
            groups = {d.name: list(d.replicas) for d in self.deployments.items.values()}
            fs = self.deployments.feature_service
        if fs is not None:
            groups[FEATURE_SERVICE] = [fs]
        return {
            target: [ReplicaRef(target=target, replica=p.name, ready=_ready(p)) for p in procs]
            for target, procs in groups.items()
        }

    def _proc(self, ref: ReplicaRef) -> ServingProcess:
        proc = self.host.procs.get(ref.replica)
        if proc is None:
            raise ServingError("unavailable", f"replica {ref.replica} of {ref.target!r} is gone")
        return proc

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        proc = self._proc(ref)
        if proc.port is None:
            raise ServingError("unavailable", f"replica {ref.replica} of {ref.target!r} is not ready")
        try:
            resp = self.deployments.client.get(proc.url + "/metrics", timeout=timeout_s)
        except httpx.TimeoutException:
            raise ServingError(
                "timeout", f"replica {ref.replica} did not answer within {timeout_s} s"
            ) from None
        except httpx.HTTPError as e:
            raise ServingError("unavailable", f"replica {ref.replica}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise ServingError("unavailable", f"replica {ref.replica} answered {resp.status_code}")
        return resp.text

    def stats(self, ref: ReplicaRef) -> ReplicaStats:
        """CPU percent since the previous call (None on the first) and RSS of the replica's process."""
        with self._stats_lock:
            p = self._procs.get(ref.replica)
            if p is None:
                proc = self.host.procs.get(ref.replica)
                p = proc.process() if proc is not None else None
                if p is None:
                    return ReplicaStats()
                self._procs[ref.replica] = p
                with contextlib.suppress(psutil.Error):
                    p.cpu_percent(None)  # primes the counter: the first reading is meaningless
                return ReplicaStats()
            try:
                return ReplicaStats(cpu_percent=p.cpu_percent(None), memory_mb=p.memory_info().rss / 2**20)
            except psutil.Error:
                self._procs.pop(ref.replica, None)
                return ReplicaStats()

    def credits_per_second(self) -> float:
        return sum(len(d.replicas) * d.credits_per_second for d in self._items())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.deployments.close()


def _ready(proc: ServingProcess) -> bool:
    return proc.port is not None and proc.alive()


class LocalServing:
    """The runtime's ``serving`` on a local sandbox: each episode's deployments as processes."""

    def __init__(
        self,
        sandbox_dir: Path,
        sandbox_name: str,
        endpoints: Endpoints,
        environments: Callable[[], Environments],
    ) -> None:
        self.sandbox_dir = Path(sandbox_dir)
        self.sandbox_name = sandbox_name
        self.endpoints = endpoints
        self._environments = environments

    def __repr__(self) -> str:
        return f"LocalServing(sandbox={self.sandbox_name!r})"

    def open(self, episode_id: str, labels: dict[str, str]) -> LocalEpisodeServing:
        """The episode's deployments (its processes carry the episode id; ``labels`` are not needed)."""
        host = ProcessHost(self.sandbox_dir, self.sandbox_name, self.endpoints, episode_id)
        return LocalEpisodeServing(host, self._environments)


def _conforms(serving: LocalServing, episode: LocalEpisodeServing) -> tuple[ModelServing, EpisodeServing]:
    """What the type checker verifies: these implement the declared protocols."""
    return serving, episode


__all__ = ["LocalEpisodeServing", "LocalServing"]
