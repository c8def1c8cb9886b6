"""In-memory fakes for the perturbation engine's unit tests: a :class:`FakeControl` that implements the
whole :class:`~mlsandbox.backends.protocols.FaultControl` (recording what is in effect), a manual
:class:`ManualClock` (time moves in ``sleep`` only, tickers run inside it) and a :class:`FakeRuntime` with
the capabilities the behaviours use (clock, faults, config, object store, support)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from mlsandbox.backends.protocols import HttpFault, NoSuchTarget, ServiceHealth, Support, Unsupported


class FakeServices:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.down: set[str] = set()

    def names(self) -> list[str]:
        return ["minio", "mlflow", "prefect-server", "prefect-worker"]

    def _check(self, service: str) -> None:
        if service not in self.names():
            raise ValueError(f"unknown service {service!r}")

    def kill(self, service: str) -> None:
        self._check(service)
        self.calls.append(("kill", service))
        self.down.add(service)

    def freeze(self, service: str) -> None:
        self._check(service)
        self.calls.append(("freeze", service))
        self.down.add(service)

    def thaw(self, service: str) -> None:
        self.calls.append(("thaw", service))
        self.down.discard(service)

    def restart(self, service: str, *, wait: bool = True, timeout: float = 90.0) -> ServiceHealth:
        self._check(service)
        self.calls.append(("restart", service))
        self.down.discard(service)
        return ServiceHealth(service=service, healthy=True)

    def health(self, service: str, *, timeout: float = 5.0) -> ServiceHealth:
        return ServiceHealth(service=service, healthy=service not in self.down)

    def logs(self, service: str, tail: int = 50) -> str:
        return ""


class FakeNetwork:
    def __init__(self) -> None:
        self.toxics: dict[tuple[str, str], dict[str, Any]] = {}
        self.disabled: set[str] = set()

    def endpoints(self) -> list[str]:
        return ["minio", "mlflow"]

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        self.toxics[(endpoint, name)] = {"type": kind, **attributes}

    def remove_toxic(self, endpoint: str, name: str) -> None:
        self.toxics.pop((endpoint, name), None)

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        (self.disabled.discard if enabled else self.disabled.add)(endpoint)

    def reset(self) -> None:
        self.toxics.clear()
        self.disabled.clear()


class FakeControl:
    """Every fault mechanism, in memory. ``refuse``: fault type -> reason, said by :meth:`unavailable`
    (the ``bandwidth`` default mirrors a backend lacking one mechanism); ``no_network``: the network as a
    whole refused. HTTP services are the names in ``http_services`` (or a ``hooks`` object with
    ``set``/``clear``, the local backend's real hook files)."""

    def __init__(
        self,
        refuse: dict[str, str] | None = None,
        *,
        no_network: str | None = None,
        http_services: Sequence[str] = (),
        hooks: Any = None,
        running_jobs: Sequence[str] = (),
    ) -> None:
        self.services = FakeServices()
        self._network = FakeNetwork()
        self._no_network = no_network
        self.refuse = {"bandwidth": "not here"} if refuse is None else dict(refuse)
        self.quotas: dict[str, int | None] = {}
        self.limits: dict[str, dict[str, Any]] = {}
        self.http: dict[tuple[str, str], HttpFault] = {}
        self.http_services = set(http_services)
        self.hooks = hooks
        self.contention: dict[str, tuple[str, int, set[str]]] = {}
        self.running_jobs = set(running_jobs)

    @property
    def network(self) -> FakeNetwork:
        if self._no_network is not None:
            raise Unsupported("faults.network", "fake", self._no_network)
        return self._network

    def set_bucket_quota(self, bucket: str, quota_bytes: int | None) -> None:
        self.quotas[bucket] = quota_bytes

    def set_job_limits(self, job_id: str, cpus: float | None = None, memory_mb: int | None = None) -> None:
        self.limits[job_id] = {"cpus": cpus, "memory_mb": memory_mb}

    def restore_job_limits(self, job_id: str, cpus: float | None, memory_mb: int | None) -> None:
        self.limits.pop(job_id, None)

    def set_http_fault(self, target: str, fault: HttpFault, *, episode_id: str) -> None:
        if self.hooks is not None:
            self.hooks.set(target, fault, episode_id=episode_id)
            return
        if target not in self.http_services:
            raise NoSuchTarget(f"no HTTP service {target!r} has registered a fault hook")
        self.http[(episode_id, target)] = fault

    def clear_http_fault(self, target: str, *, episode_id: str) -> None:
        if self.hooks is not None:
            self.hooks.clear(target, episode_id=episode_id)
            return
        self.http.pop((episode_id, target), None)

    def http_fault_active(self, target: str, *, episode_id: str) -> bool:
        if self.hooks is not None:
            return bool(self.hooks.active(target, episode_id=episode_id))
        return (episode_id, target) in self.http

    def start_contention(self, key: str, target: str, workers: int, *, pin: bool = True) -> None:
        if "cpu_contention" in self.refuse:
            raise Unsupported("fault:cpu_contention", "fake", self.refuse["cpu_contention"])
        self.contention.setdefault(key, (target, workers, set()))

    def refresh_contention(self, key: str, jobs: Sequence[str] = ()) -> list[str]:
        found = self.contention.get(key)
        if found is None or found[0] != "jobs":
            return []
        new = [j for j in dict.fromkeys(jobs) if j in self.running_jobs and j not in found[2]]
        found[2].update(new)
        return new

    def stop_contention(self, key: str) -> None:
        self.contention.pop(key, None)

    def recover_all(self) -> list[str]:
        done = [*self.contention, *(f"quota:{b}" for b, q in self.quotas.items() if q)]
        self.contention.clear()
        self.quotas = {b: None for b in self.quotas}
        self._network.reset()
        return done

    def unavailable(self) -> dict[str, str]:
        return dict(self.refuse)

    def snapshot(self) -> Any:
        """What is in effect (to compare before and after)."""
        return (
            {k: (t, w, set(c)) for k, (t, w, c) in self.contention.items()},
            dict(self.limits),
            dict(self.http),
            {k: v for k, v in self.quotas.items() if v is not None},
            dict(self._network.toxics),
            set(self._network.disabled),
            set(self.services.down),
        )


class FakeStore:
    """A config store in memory (what the config faults use)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.writes = 0

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        self.writes += 1
        self.values[name] = value

    def delete(self, name: str) -> None:
        self.values.pop(name, None)

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self.values if n.startswith(prefix))

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        for k, v in values.items():
            self.set(prefix + k, v)

    def close_scope(self, prefix: str) -> None:
        for name in self.names(prefix):
            self.delete(name)

    def references(self) -> dict[str, str]:
        return {}


class _Ticker:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A virtual clock: time moves only in :meth:`sleep`, which runs the tickers due meanwhile in time
    order (each at its own time)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self._due: list[tuple[float, int, Callable[[], None], _Ticker, float | None]] = []
        self._order = itertools.count()

    @property
    def virtual(self) -> bool:
        return True

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        end = self.now + max(0.0, seconds)
        while self._due and self._due[0][0] <= end:
            at, _, fn, ticker, every = heapq.heappop(self._due)
            if ticker.cancelled:
                continue
            self.now = max(self.now, at)
            fn()
            if every is not None and not ticker.cancelled:
                heapq.heappush(self._due, (at + every, next(self._order), fn, ticker, every))
        self.now = end

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> _Ticker:
        ticker = _Ticker()
        heapq.heappush(self._due, (self.now + interval_s, next(self._order), fn, ticker, interval_s))
        return ticker

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> _Ticker:
        ticker = _Ticker()
        heapq.heappush(self._due, (self.now + delay_s, next(self._order), fn, ticker, None))
        return ticker

    def pending(self) -> int:
        """Tickers not yet run nor cancelled."""
        return sum(1 for *_, t, _e in self._due if not t.cancelled)


class FakeRuntime:
    """The capabilities the engine and the behaviours use. ``unsupported``: what :meth:`support` refuses
    (a capability, or ``fault:TYPE``)."""

    backend = "fake"
    sandbox = "t"

    def __init__(
        self,
        control: Any = None,
        *,
        clock: Any = None,
        unsupported: dict[str, str] | None = None,
        object_store: Any = None,
    ) -> None:
        self.faults = control if control is not None else FakeControl()
        self.clock = clock if clock is not None else ManualClock()
        self.unsupported = dict(unsupported or {})
        self._config = FakeStore()
        self._object_store = object_store

    @property
    def config(self) -> FakeStore:
        if "config" in self.unsupported:
            raise Unsupported("config", self.backend, self.unsupported["config"])
        return self._config

    @property
    def object_store(self) -> Any:
        if self._object_store is None:
            raise Unsupported("object_store", self.backend, "no object store in this fake")
        return self._object_store

    def support(self) -> Support:
        return Support(backend=self.backend, unsupported=self.unsupported)
