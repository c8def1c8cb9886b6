"""In-memory implementations of the clock and of an episode's serving, for unit tests of the serving
world (traffic, monitor) and of the protocol's meaning.

:class:`ManualClock` is a virtual clock: time moves only in :meth:`ManualClock.sleep` (or
:meth:`ManualClock.advance`), which runs the tickers due meanwhile, in time order. :class:`InMemoryServing`
implements :class:`~mlsandbox.backends.protocols.serving.EpisodeServing` whole: deployments are records,
replicas have ids and a ready flag, a request is answered by ``answer`` through one replica round-robin and
counted in that replica's Prometheus metrics (the model server's own ``HttpMetrics``), which ``scrape``
renders. No thread, socket or process.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import generate_latest

from mlsandbox.backends.protocols.faults import ServiceHealth
from mlsandbox.backends.protocols.serving import (
    FEATURE_SERVICE,
    DeploymentSpec,
    DeploymentView,
    Limits,
    ReplicaRef,
    ReplicaStats,
    ReplicaView,
    ServingError,
    ServingResponse,
    check_set_version,
    not_found,
)
from mlsandbox.workloads.http_metrics import HttpMetrics

EPOCH = 1_800_000_000.0


class ManualTicker:
    def __init__(
        self, clock: ManualClock, due: float, interval: float | None, fn: Callable[[], None]
    ) -> None:
        self.clock, self.due, self.interval, self.fn = clock, due, interval, fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A virtual clock (see the module docstring)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, ManualTicker]] = []
        self._seq = itertools.count()

    @property
    def virtual(self) -> bool:
        return True

    def time(self) -> float:
        return EPOCH + self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        end = self.now + max(0.0, seconds)
        while self._heap and self._heap[0][0] <= end:
            due, _, ticker = heapq.heappop(self._heap)
            if ticker.cancelled:
                continue
            self.now = max(self.now, due)
            ticker.fn()
            if ticker.interval is not None and not ticker.cancelled:
                ticker.due = due + ticker.interval
                heapq.heappush(self._heap, (ticker.due, next(self._seq), ticker))
        self.now = end

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> ManualTicker:
        t = ManualTicker(self, self.now + interval_s, interval_s, fn)
        heapq.heappush(self._heap, (t.due, next(self._seq), t))
        return t

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> ManualTicker:
        t = ManualTicker(self, self.now + delay_s, None, fn)
        heapq.heappush(self._heap, (t.due, next(self._seq), t))
        return t

    def tickers(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)


Answer = Callable[[str, bytes], tuple[int, bytes, float]]
"""(deployment, body) -> (status, body, seconds it took)."""


def echo_answer(deployment: str, body: bytes) -> tuple[int, bytes, float]:
    """Predicts class 1 for every id or row, in 5 ms."""
    import orjson

    req = orjson.loads(body)
    n = len(req.get("entity_ids") or req.get("instances") or [])
    return 200, orjson.dumps({"predictions": [1] * n, "version": "1"}), 0.005


@dataclass
class Replica:
    id: str
    version: str
    ready: bool = True
    exit_code: int | None = None
    reason: str | None = None
    metrics: HttpMetrics = field(default_factory=lambda: HttpMetrics("fake"))


@dataclass
class Record:
    spec: DeploymentSpec
    replicas: list[Replica]
    history: list[str]
    rr: itertools.count = field(default_factory=itertools.count)


class InMemoryServing:
    """:class:`~mlsandbox.backends.protocols.serving.EpisodeServing` in memory (see the module docstring)."""

    def __init__(self, answer: Answer = echo_answer) -> None:
        self.answer = answer
        self.items: dict[str, Record] = {}
        self.features: list[Replica] = []
        self.closed = False
        self._ids = itertools.count()
        self.fail_versions: set[str] = set()
        """Versions whose replicas never become ready (``deploy_failed``)."""

    def _replicas(self, version: str, n: int) -> list[Replica]:
        if version in self.fail_versions:
            raise ServingError("deploy_failed", f"version {version} did not start: exit status 3")
        return [Replica(f"r{next(self._ids)}", version) for _ in range(n)]

    def _view(self, rec: Record) -> DeploymentView:
        states = [
            ReplicaView(
                replica=i,
                version=r.version,
                state="running" if r.ready else "exited",
                exit_code=r.exit_code,
                reason=r.reason,
            )
            for i, r in enumerate(rec.replicas)
        ]
        up = sum(1 for s in states if s.state == "running")
        m = rec.spec.machine
        return DeploymentView(
            deployment=rec.spec.deployment,
            model=rec.spec.model,
            version=rec.spec.version,
            machine=m.name,
            limits=Limits(cpus=m.cpus, memory_mb=m.memory_mb),
            environment=rec.spec.environment.name if rec.spec.environment else "default",
            replicas=len(rec.replicas),
            replicas_up=up,
            rollout="complete" if up == len(rec.replicas) else "progressing",
            replica_states=states,
            version_history=list(rec.history),
        )

    def _get(self, deployment: str) -> Record:
        rec = self.items.get(deployment)
        if rec is None:
            raise not_found(deployment, list(self.items))
        return rec

    def deploy(self, spec: DeploymentSpec) -> tuple[DeploymentView, bool]:
        rec = self.items.get(spec.deployment)
        if rec is None:
            self.items[spec.deployment] = rec = Record(
                spec, self._replicas(spec.version, spec.replicas), [spec.version]
            )
            return self._view(rec), True
        if rec.spec.model != spec.model:
            raise ServingError("conflict", f"deployment {spec.deployment!r} serves model {rec.spec.model!r}")
        rec.replicas = self._replicas(spec.version, spec.replicas)
        rec.spec = spec
        rec.history.append(spec.version)
        return self._view(rec), False

    def set_version(self, deployment: str, version: str) -> DeploymentView:
        rec = self._get(deployment)
        check_set_version(self._view(rec), version)
        rec.replicas = self._replicas(version, len(rec.replicas))
        rec.spec = rec.spec.model_copy(update={"version": version})
        rec.history.append(version)
        return self._view(rec)

    def scale(self, deployment: str, replicas: int) -> DeploymentView:
        if replicas < 0:
            raise ServingError("invalid_parameters", f"replicas must be 0 or more, not {replicas}")
        rec = self._get(deployment)
        live = [r for r in rec.replicas if r.ready]
        if replicas > len(live):
            live += self._replicas(rec.spec.version, replicas - len(live))
        rec.replicas = live[:replicas]
        rec.spec = rec.spec.model_copy(update={"replicas": replicas})
        return self._view(rec)

    def undeploy(self, deployment: str) -> DeploymentView:
        view = self._view(self._get(deployment))
        del self.items[deployment]
        return view

    def get(self, deployment: str) -> DeploymentView:
        return self._view(self._get(deployment))

    def list(self) -> list[DeploymentView]:
        return [self._view(self.items[n]) for n in sorted(self.items)]

    def start_feature_service(self, bucket: str, key: str, id_column: str) -> None:
        if not self.features:
            self.features = [Replica(f"f{next(self._ids)}", "")]

    def feature_service_health(self, *, timeout_s: float = 2.0) -> ServiceHealth:
        if not self.features:
            raise ServingError("unavailable", "the feature service is not running")
        return ServiceHealth(service=FEATURE_SERVICE, healthy=True)

    def restart_feature_service(self) -> ServiceHealth:
        if not self.features:
            raise ServingError("unavailable", "the feature service is not running")
        self.features = [Replica(f"f{next(self._ids)}", "")]
        return self.feature_service_health()

    def feature_service_logs(self, tail: int = 50) -> str:
        return ""

    def request(
        self,
        deployment: str,
        path: str,
        body: bytes,
        *,
        timeout_s: float,
        content_type: str = "application/json",
    ) -> ServingResponse:
        rec = self._get(deployment)
        ready = [r for r in rec.replicas if r.ready]
        if not ready:
            raise ServingError("unavailable", f"deployment {deployment!r} has no replica that answers")
        replica = ready[next(rec.rr) % len(ready)]
        status, out, seconds = self.answer(deployment, body)
        if seconds > timeout_s:
            raise ServingError("timeout", f"deployment {deployment!r} did not answer within {timeout_s} s")
        replica.metrics.observe(path, status, seconds)
        return ServingResponse(status=status, body=out, content_type="application/json")

    def replicas(self) -> dict[str, builtins.list[ReplicaRef]]:
        out = {
            name: [ReplicaRef(target=name, replica=r.id, ready=r.ready) for r in rec.replicas]
            for name, rec in self.items.items()
        }
        if self.features:
            out[FEATURE_SERVICE] = [
                ReplicaRef(target=FEATURE_SERVICE, replica=r.id, ready=r.ready) for r in self.features
            ]
        return out

    def _replica(self, ref: ReplicaRef) -> Replica:
        pool = self.features if ref.target == FEATURE_SERVICE else self._get(ref.target).replicas
        for r in pool:
            if r.id == ref.replica:
                return r
        raise ServingError("unavailable", f"replica {ref.replica} is gone")

    def scrape(self, ref: ReplicaRef, *, timeout_s: float) -> str:
        r = self._replica(ref)
        if not r.ready:
            raise ServingError("unavailable", f"replica {ref.replica} does not answer")
        return generate_latest(r.metrics.registry).decode()

    def stats(self, ref: ReplicaRef) -> ReplicaStats:
        return ReplicaStats(cpu_percent=10.0, memory_mb=100.0)

    def credits_per_second(self) -> float:
        return sum(len(rec.replicas) * rec.spec.machine.credits_per_second for rec in self.items.values())

    def close(self) -> None:
        self.items.clear()
        self.features = []
        self.closed = True
