"""Fault control of a ``sim`` sandbox (:class:`SimFaultControl`): simulated mechanisms whose symptoms are
the ones the local backend shows.

- **services**: killing a service refuses its clients' connections (the clients' errors, after their
  retries), freezing it makes them time out (after the clients' timeouts, charged to the virtual clock),
  a restart brings it back after its calibrated restart time; health probes answer as on local
  (``ConnectError: [Errno 111] Connection refused``, ``timed out after N s``, the worker ``not online``),
  and a service's log shows its start lines again after a restart. The data-source servers an episode
  started (``api-source``, ``postgres``) are services too.
- **network** (the client-facing ``minio`` and ``mlflow`` endpoints, Toxiproxy's terms): latency and
  jitter per request, bandwidth per byte, a timeout or a reset that stops the connection, an endpoint
  disabled (connections refused). They act on the gateway's calls and on a job's read of its data (the
  world keeps each change with its time, so a job brought up to the clock later reads under the faults
  of its own moment).
- **bucket quota**: puts over it fail with MinIO's ``XMinioAdminBucketQuotaExceeded``.
- **job limits**: a running job's CPU and memory limits cut at once (a memory limit below its usage
  kills it: exit code 137), and given back.
- **HTTP faults**: the episode's deployments, feature service and API source answer ``status`` for
  ``error_rate`` of their requests (a seeded draw) after ``delay_ms``.
- **CPU contention**: burners sharing one CPU with the episode's running jobs (each then gets
  ``1 / (1 + workers)`` of a CPU) or slowing a service's answers by the same factor.

Every change is kept, so :meth:`SimFaultControl.recover_all` undoes whatever is still in place. No fault
type is refused (:meth:`SimFaultControl.unavailable` is empty): each has a simulated mechanism.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlsandbox.backends.protocols import HttpFault, NoSuchTarget, ServiceHealth, Unsupported
from mlsandbox.backends.sim.jobs import MACHINE_CPUS, SimJobs
from mlsandbox.backends.sim.world import ENDPOINTS, SERVICES, SimWorld
from mlsandbox.faultkinds import TOXIC_TYPES

if TYPE_CHECKING:
    from mlsandbox.backends.sim.sources import SimSourceHosting
    from mlsandbox.backends.sim.storage import MemoryObjectStore

PROBE_TIMEOUT_S = 5.0
TOXIC_KINDS = TOXIC_TYPES
"""The toxics simulated here: those the network faults declare (Toxiproxy's other toxics are refused, not
faked)."""


@dataclass
class HttpTarget:
    """An HTTP service of an episode that faults can act on (a deployment, the feature service, an API
    source), with the fault in effect and its seeded draw."""

    fault: HttpFault | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def set(self, fault: HttpFault, seed: int) -> None:
        self.fault = fault
        self.rng = random.Random(seed)

    def draw(self) -> tuple[int | None, float]:
        """(the error status to answer, or None; the delay in seconds) for one request."""
        f = self.fault
        if f is None:
            return None, 0.0
        status = f.status if f.error_rate > 0 and self.rng.random() < f.error_rate else None
        return status, f.delay_ms / 1000.0


class HttpTargets:
    """The episodes' HTTP fault targets, by (episode, name)."""

    def __init__(self) -> None:
        self.targets: dict[tuple[str, str], HttpTarget] = {}

    def register(self, episode_id: str, name: str) -> HttpTarget:
        return self.targets.setdefault((episode_id, name), HttpTarget())

    def unregister(self, episode_id: str, name: str) -> None:
        self.targets.pop((episode_id, name), None)

    def get(self, episode_id: str, name: str) -> HttpTarget | None:
        return self.targets.get((episode_id, name))

    def names(self, episode_id: str) -> list[str]:
        return sorted(n for (e, n) in self.targets if e == episode_id)


class SimServiceControl:
    """The sandbox's services (see the module docstring)."""

    def __init__(self, world: SimWorld, sources: Callable[[], SimSourceHosting]) -> None:
        self.world = world
        self._sources = sources

    def names(self) -> list[str]:
        return [*SERVICES, *self._sources().running_services()]

    def _check(self, service: str) -> None:
        if service in SERVICES:
            return
        sources = self._sources()
        if service in sources.known_services() and service not in sources.running_services():
            kind = "PostgreSQL" if service == "postgres" else "HTTP API"
            raise ValueError(
                f"service {service!r} is not running in this sandbox: it is started on demand by an episode "
                f"with a {kind} data source; services: {', '.join(self.names())}"
            )
        if service not in self.names():
            raise ValueError(f"unknown service {service!r}; services: {', '.join(self.names())}")

    def kill(self, service: str) -> None:
        self._check(service)
        if service in SERVICES:
            self.world.set_state(service, "killed")
        else:
            self._sources().stop(service)

    def freeze(self, service: str) -> None:
        self._check(service)
        if service in SERVICES:
            self.world.set_state(service, "frozen")
        else:
            self._sources().freeze(service)

    def thaw(self, service: str) -> None:
        self._check(service)
        if service in SERVICES:
            if self.world.services[service].state == "frozen":
                self.world.set_state(service, "running")
        else:
            self._sources().thaw(service)

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        self._check(service)
        t0 = self.world.clock.monotonic()
        if service not in SERVICES:
            try:
                self._sources().restart(service)
            except Exception as e:
                return ServiceHealth(service=service, healthy=False, error=f"{type(e).__name__}: {e}")
            return ServiceHealth(
                service=service, healthy=True, latency_ms=round((self.world.clock.monotonic() - t0) * 1000, 1)
            )
        if not wait:
            model = self.world.calibration.operations.services[service]
            self.world.set_state(service, "killed")
            self.world.clock.after(model.restart_s, lambda: self._back(service), name=f"restart:{service}")
            return ServiceHealth(service=service, healthy=False, error="starting")
        self.world.restart(service)
        return ServiceHealth(
            service=service, healthy=True, latency_ms=round((self.world.clock.monotonic() - t0) * 1000, 1)
        )

    def _back(self, service: str) -> None:
        if self.world.services[service].state == "killed":
            svc = self.world.services[service]
            self.world.set_state(service, "running")
            svc.restarts += 1
            svc.log.extend(self.world._start_log(service))

    def health(self, service: str, *, timeout: float = PROBE_TIMEOUT_S) -> ServiceHealth:
        self._check(service)
        if service not in SERVICES:
            return self._sources().service_health(service, timeout=timeout)
        world = self.world
        model = world.calibration.operations.services[service]
        state = world.services[service].state
        if service == "prefect-worker":
            healthy = state == "running" and world.services["prefect-server"].state == "running"
            world.clock.charge(model.health_ms / 1000.0)
            if not healthy:
                return ServiceHealth(
                    service=service, healthy=False, latency_ms=model.health_ms, error="worker not online"
                )
            return ServiceHealth(service=service, healthy=True, latency_ms=model.health_ms)
        if state == "killed":
            world.clock.charge(0.001)
            return ServiceHealth(service=service, healthy=False, error=model.down_error.text)
        if state == "frozen":
            world.clock.charge(timeout)
            return ServiceHealth(
                service=service, healthy=False, error=model.frozen_error.text.format(seconds=timeout)
            )
        latency = model.health_ms / 1000.0
        ep = world.endpoints.get(service)
        if ep is not None:
            if not ep.enabled:
                world.clock.charge(0.001)
                return ServiceHealth(service=service, healthy=False, error=model.down_error.text)
            blocking = ep.blocking()
            if blocking is not None:
                kind, after = blocking
                if kind == "timeout" and (after == 0 or after >= timeout):
                    world.clock.charge(timeout)
                    return ServiceHealth(
                        service=service, healthy=False, error=model.frozen_error.text.format(seconds=timeout)
                    )
                world.clock.charge(after)
                return ServiceHealth(
                    service=service,
                    healthy=False,
                    error="RemoteProtocolError: Server disconnected without sending a response.",
                )
            latency += ep.latency_s(world.rng)
        if latency >= timeout:
            world.clock.charge(timeout)
            return ServiceHealth(
                service=service, healthy=False, error=model.frozen_error.text.format(seconds=timeout)
            )
        world.clock.charge(latency)
        return ServiceHealth(service=service, healthy=True, latency_ms=round(latency * 1000, 1))

    def logs(self, service: str, tail: int = 50) -> str:
        self._check(service)
        if service not in SERVICES:
            return self._sources().logs(service, tail)
        lines = self.world.services[service].log
        chosen = lines if tail <= 0 else lines[-tail:]
        return "".join(line + "\n" for line in chosen)


class SimNetwork:
    """Network faults on the client-facing endpoints (see the module docstring)."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    def endpoints(self) -> list[str]:
        return list(ENDPOINTS)

    def _endpoint(self, endpoint: str) -> Any:
        if endpoint not in self.world.endpoints:
            raise ValueError(f"unknown endpoint {endpoint!r}; endpoints: {', '.join(ENDPOINTS)}")
        return self.world.endpoints[endpoint]

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        ep = self._endpoint(endpoint)
        if kind not in TOXIC_KINDS:
            raise Unsupported(
                f"fault:{kind}",
                "sim",
                f"the simulated network has {', '.join(TOXIC_KINDS)} and endpoint_down only",
            )
        ep.toxics[name] = (kind, {**attributes, "stream": stream})
        self.world.endpoint_changed(endpoint)

    def remove_toxic(self, endpoint: str, name: str) -> None:
        ep = self._endpoint(endpoint)
        if ep.toxics.pop(name, None) is not None:
            self.world.endpoint_changed(endpoint)

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        ep = self._endpoint(endpoint)
        if ep.enabled != enabled:
            ep.enabled = enabled
            self.world.endpoint_changed(endpoint)

    def reset(self) -> None:
        for name, ep in self.world.endpoints.items():
            if ep.toxics or not ep.enabled:
                ep.toxics.clear()
                ep.enabled = True
                self.world.endpoint_changed(name)


@dataclass
class _Contention:
    target: str
    workers: int
    pin: bool
    caught: set[str] = field(default_factory=set)

    @property
    def share(self) -> float:
        if self.pin:
            return 1.0 / (1 + self.workers)
        return min(1.0, MACHINE_CPUS / (1 + self.workers))


class SimFaultControl:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.FaultControl`)."""

    def __init__(
        self,
        world: SimWorld,
        store: MemoryObjectStore,
        jobs: SimJobs,
        http: HttpTargets,
        sources: Callable[[], SimSourceHosting],
    ) -> None:
        self.world = world
        self.store = store
        self.jobs = jobs
        self.http = http
        self._services = SimServiceControl(world, sources)
        self._network = SimNetwork(world)
        self.quotas: set[str] = set()
        self.limits: dict[str, tuple[float, int]] = {}
        """Job -> its limits before a fault cut them."""
        self.contention: dict[str, _Contention] = {}
        self.http_faults: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return "SimFaultControl()"

    @property
    def services(self) -> SimServiceControl:
        return self._services

    @property
    def network(self) -> SimNetwork:
        return self._network

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        if quota_bytes is None:
            self.store.quotas.pop(bucket, None)
            self.quotas.discard(bucket)
            return
        if bucket not in self.store.buckets:
            raise KeyError(f"bucket {bucket!r} does not exist")
        self.store.quotas[bucket] = int(quota_bytes)
        self.quotas.add(bucket)

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        job = self.jobs.jobs.get(job_id)
        if job is None:
            raise KeyError(f"job {job_id!r} does not exist")
        self.limits.setdefault(job_id, (job.cpus, job.memory_mb))
        self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        self.limits.pop(job_id, None)
        job = self.jobs.jobs.get(job_id)
        if job is None:
            return
        try:
            self.jobs.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        except (KeyError, ValueError):
            return  # it has ended

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        found = self.http.get(episode_id, target)
        if found is None:
            names = ", ".join(self.http.names(episode_id)) or "none"
            raise NoSuchTarget(f"no HTTP service {target!r} in this episode (HTTP services: {names})")
        found.set(fault, fault.seed)
        self.http_faults.add((episode_id, target))

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        found = self.http.get(episode_id, target)
        if found is not None:
            found.fault = None
        self.http_faults.discard((episode_id, target))

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        found = self.http.get(episode_id, target)
        return found is not None and found.fault is not None and (episode_id, target) in self.http_faults

    def start_contention(self, key: str, target: str, workers: int, *, pin: bool = True) -> None:
        if key in self.contention:
            return
        if target != "jobs" and not target.startswith("service:"):
            raise ValueError(f"contention target must be 'jobs' or 'service:NAME', got {target!r}")
        if target.startswith("service:"):
            service = target.split(":", 1)[1]
            if service not in SERVICES:
                raise ValueError(f"unknown service {service!r}; services: {', '.join(SERVICES)}")
        c = _Contention(target, max(1, int(workers)), pin)
        self.contention[key] = c
        if target.startswith("service:"):
            self.world.slowdown[target.split(":", 1)[1]] = 1.0 / c.share

    def refresh_contention(self, key: str, jobs: Sequence[str] = ()) -> list[str]:
        c = self.contention.get(key)
        if c is None or c.target != "jobs":
            return []
        new = []
        for job_id in dict.fromkeys(jobs):
            if job_id in c.caught:
                continue
            if self.jobs.set_share(job_id, c.share):
                c.caught.add(job_id)
                new.append(job_id)
        return new

    def stop_contention(self, key: str) -> None:
        c = self.contention.pop(key, None)
        if c is None:
            return
        if c.target.startswith("service:"):
            self.world.slowdown.pop(c.target.split(":", 1)[1], None)
            return
        for job_id in c.caught:
            self.jobs.set_share(job_id, float("inf"))

    def recover_all(self) -> list[str]:
        done: list[str] = []
        for key in list(self.contention):
            self.stop_contention(key)
            done.append(f"contention {key} stopped")
        for bucket in sorted(self.quotas):
            self.set_bucket_quota(bucket, None)
            done.append(f"quota of bucket {bucket} removed")
        for job_id, (cpus, memory_mb) in list(self.limits.items()):
            self.restore_job_limits(job_id, cpus, memory_mb)
            done.append(f"limits of job {job_id} restored")
        for episode_id, target in sorted(self.http_faults):
            self.clear_http_fault(target, episode_id=episode_id)
            done.append(f"HTTP fault on {target} cleared")
        for name, ep in self.world.endpoints.items():
            if ep.toxics or not ep.enabled:
                done.append(f"network faults on {name} removed")
        self._network.reset()
        for service, svc in self.world.services.items():
            if svc.state == "frozen":
                self.world.set_state(service, "running")
                done.append(f"{service} thawed")
        return done

    def unavailable(self) -> dict[str, str]:
        return {}


__all__ = ["HttpTarget", "HttpTargets", "SimFaultControl", "SimNetwork", "SimServiceControl"]
