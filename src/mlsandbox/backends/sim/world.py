"""The in-memory world of one ``sim`` sandbox: its clock, calibration, ids, and the state of its services
and their client-facing endpoints, which every capability consults.

Services (``minio``, ``mlflow``, ``prefect-server``, ``prefect-worker``) are ``running``, ``killed`` or
``frozen``; the client-facing endpoints ``minio`` and ``mlflow`` (the sandbox's proxy on local) carry
network faults in Toxiproxy's terms (latency, bandwidth, timeout, reset_peer, disabled). Every call a
capability makes to a service goes through :meth:`SimWorld.call`: it charges the operation's time to the
virtual clock (the calibration's figures plus what the endpoint's faults add) and fails the way the real
client does when the service cannot answer (the texts are the calibration's). Each change of a service or
an endpoint is kept with its time (an endpoint's with the bandwidth cap and mean latency its toxics put on
it), so a job can ask what a service was at any moment of its run: whether it could reach it
(:meth:`SimWorld.reachable_at`) and how long a read through the endpoint took (:meth:`SimWorld.transfer`,
:meth:`SimWorld.transfer_s`). Jobs are brought up to the clock lazily, so they ask about moments already
past; the clock's now is not the state of their reads.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from mlsandbox.backends.sim.clock import VirtualClock
from mlsandbox.calibration.model import Calibration
from mlsandbox.errors import BackendError

UPLOADS = frozenset({"object_store.put_object"})
"""Operations whose bytes travel from the client to the service (a bandwidth cap counts on ``upstream``)."""
ServiceState = Literal["running", "killed", "frozen"]
SERVICES: tuple[str, ...] = ("minio", "mlflow", "prefect-server", "prefect-worker")
ENDPOINTS: tuple[str, ...] = ("minio", "mlflow")
"""The client-facing endpoints that network faults act on."""


@dataclass(frozen=True)
class Addresses:
    """Where the simulated services are, as the episode's config, health checks and error messages name
    them. They read as the ``local`` backend's do (the loopback address, a port of the ephemeral range
    for each service, an access key and a secret in the shape the local sandbox generates), so nothing an
    agent reads tells it that it is in ``sim``; they are drawn from the sandbox's name, so a sandbox
    keeps them across its episodes as a local one keeps its ports. Nothing listens there: ``sim`` opens
    no socket."""

    hosts: dict[str, str]
    ports: dict[str, int]
    urls: dict[str, str]
    access_key: str
    secret_key: str


ADDRESSED = ("minio", "mlflow", "prefect-server", "api-source", "postgres")
"""The services that have an address (the worker has none)."""


def addresses_for(name: str) -> Addresses:
    """The addresses of sandbox ``name``'s services (see :class:`Addresses`)."""
    rng = random.Random(stable_seed("addresses", name))
    ports: dict[str, int] = {}
    for service in ADDRESSED:
        port = rng.randrange(32768, 61000)
        while port in ports.values():
            port = rng.randrange(32768, 61000)
        ports[service] = port
    hosts = {service: "127.0.0.1" for service in ADDRESSED}
    urls = {service: f"http://127.0.0.1:{ports[service]}" for service in ADDRESSED}
    urls["prefect-server"] += "/api"
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return Addresses(
        hosts=hosts,
        ports=ports,
        urls=urls,
        access_key=f"mls-{rng.getrandbits(48):012x}",
        secret_key="".join(rng.choice(alphabet) for _ in range(32)),
    )


S3_TIMEOUT_S = 30.0 * 2
"""A frozen object store: the S3 client's read timeout, for each of its 2 attempts."""
MLFLOW_TIMEOUT_S = 30.0 * 3 + 3.0
"""A frozen tracker: MLflow's 30 s request timeout for each of its 3 attempts, plus its backoff."""
MLFLOW_REFUSED_S = 3.0
"""A tracker that refuses connections: MLflow's 2 retries with backoff factor 1."""
PREFECT_TIMEOUT_S = 15.0


class Unreachable(BackendError):
    """A service the client cannot reach: ``kind`` is ``unreachable``, ``timeout`` or ``reset``."""

    def __init__(self, service: str, kind: str, message: str) -> None:
        super().__init__(message)
        self.service = service
        self.kind = kind


@dataclass
class Endpoint:
    enabled: bool = True
    toxics: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)

    def mean_latency_s(self) -> float:
        """The latency its toxics add to a request, without jitter (a jittered draw averages to it)."""
        total = sum(float(a.get("latency", 0) or 0) for k, a in self.toxics.values() if k == "latency")
        return max(0.0, total / 1000.0)

    def latency_s(self, rng: random.Random) -> float:
        total = 0.0
        for kind, attrs in self.toxics.values():
            if kind == "latency":
                jitter = float(attrs.get("jitter", 0) or 0)
                total += (float(attrs.get("latency", 0) or 0) + rng.uniform(-jitter, jitter)) / 1000.0
        return max(0.0, total)

    def bandwidth_kbps(self, stream: str = "downstream") -> float | None:
        """The tightest bandwidth cap on ``stream`` (Toxiproxy's direction: ``downstream`` carries what
        the service sends, a download; ``upstream`` what the client sends, an upload's body)."""
        rates = [
            float(a.get("rate", 0) or 0)
            for k, a in self.toxics.values()
            if k == "bandwidth" and a.get("stream", "downstream") == stream
        ]
        rates = [r for r in rates if r > 0]
        return min(rates) if rates else None

    def blocking(self) -> tuple[str, float] | None:
        """(``timeout`` | ``reset``, after seconds) when a toxic stops the connection."""
        for kind, attrs in self.toxics.values():
            if kind == "timeout":
                return "timeout", float(attrs.get("timeout", 0) or 0) / 1000.0
            if kind == "reset_peer":
                return "reset", float(attrs.get("timeout", 0) or 0) / 1000.0
        return None


class EndpointChange(NamedTuple):
    """What an endpoint was from ``at`` on (monotonic time), until its next change."""

    at: float
    enabled: bool
    blocked: bool
    """A toxic that stops the connection (``timeout``, ``reset_peer``)."""
    rate_kbps: float | None
    """The bandwidth cap in KB/s (None: none)."""
    latency_s: float
    """The mean latency its toxics add to a request."""


NO_FAULT = EndpointChange(0.0, True, False, None, 0.0)
"""An endpoint that has never changed."""


@dataclass
class Service:
    state: ServiceState = "running"
    history: list[tuple[float, ServiceState]] = field(default_factory=lambda: [(0.0, "running")])
    started_at: float = 0.0
    restarts: int = 0
    log: list[str] = field(default_factory=list)

    def at(self, t: float) -> ServiceState:
        """The state at monotonic time ``t``."""
        state: ServiceState = "running"
        for when, s in self.history:
            if when <= t:
                state = s
            else:
                break
        return state


class Ids:
    """Ids derived from the sandbox's seed: the same seed gives the same ids in the same order."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"mlsandbox-sim-ids/{seed}")
        self._counters: dict[str, int] = {}

    def hex(self, n: int = 32) -> str:
        return f"{self._rng.getrandbits(4 * n):0{n}x}"

    def uuid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def count(self, kind: str, start: int = 1) -> int:
        value = self._counters.get(kind, start - 1) + 1
        self._counters[kind] = value
        return value


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from any values (stable across processes, unlike ``hash``)."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class SimWorld:
    """See the module docstring."""

    def __init__(self, calibration: Calibration, *, seed: int, name: str, step_cost_s: float = 0.0) -> None:
        self.calibration = calibration
        self.seed = seed
        self.name = name
        self.address = addresses_for(name)
        """Where its services are (see :class:`Addresses`)."""
        self.step_cost_s = step_cost_s
        self.clock = VirtualClock()
        self.ids = Ids(seed)
        self.rng = random.Random(stable_seed("world", seed))
        self.services: dict[str, Service] = {s: Service() for s in SERVICES}
        self.endpoints: dict[str, Endpoint] = {e: Endpoint() for e in ENDPOINTS}
        self.endpoint_history: dict[str, list[EndpointChange]] = {e: [] for e in ENDPOINTS}
        """Per endpoint: its state after each change, in time order."""
        self.slowdown: dict[str, float] = {}
        """Service -> factor its answers take longer (CPU contention on it)."""
        self._call_s = calibration.operations.call_s
        self._default_call_s = calibration.operations.default_call_s
        self._bytes_per_s = calibration.operations.bytes_per_s
        self._requests = calibration.operations.network_requests
        for service in SERVICES:
            self.services[service].log = self._start_log(service)

    # ---------------------------------------------------------------------------------- services

    def set_state(self, service: str, state: ServiceState) -> None:
        svc = self.services[service]
        if svc.state == state:
            return
        now = self.clock.monotonic()
        svc.state = state
        svc.history.append((now, state))

    def restart(self, service: str) -> None:
        """The service starts again on its data (charged its restart time)."""
        model = self.calibration.operations.services[service]
        svc = self.services[service]
        self.set_state(service, "killed")
        self.clock.charge(model.restart_s)
        self.set_state(service, "running")
        svc.restarts += 1
        svc.started_at = self.clock.monotonic()
        svc.log.extend(self._start_log(service))

    def _start_log(self, service: str) -> list[str]:
        model = self.calibration.operations.services[service]
        stamp = self.timestamp()
        values = {
            "service": service,
            "url": self.address.urls.get(service, ""),
            "time": stamp,
            "sandbox_dir": self.name,
        }
        return [f"{stamp} {line.text.format(**values)}" for line in model.log_lines]

    def timestamp(self) -> str:
        import datetime as dt

        return dt.datetime.fromtimestamp(self.clock.time(), tz=dt.UTC).strftime("%H:%M:%S")

    def reachable_at(self, service: str, t: float) -> bool:
        """Whether clients could reach ``service`` at monotonic time ``t`` (running, endpoint enabled,
        no blocking toxic)."""
        if self.services[service].at(t) != "running":
            return False
        if service not in self.endpoint_history:
            return True
        state = self.endpoint_at(service, t)
        return state.enabled and not state.blocked

    def endpoint_changed(self, endpoint: str) -> None:
        """Record the endpoint's state now (every change of its toxics or of its being enabled calls it)."""
        ep = self.endpoints[endpoint]
        self.endpoint_history[endpoint].append(
            EndpointChange(
                self.clock.monotonic(),
                ep.enabled,
                ep.blocking() is not None,
                ep.bandwidth_kbps(),
                ep.mean_latency_s(),
            )
        )

    def endpoint_at(self, endpoint: str, t: float) -> EndpointChange:
        """The state of ``endpoint`` at monotonic time ``t`` (the last change at or before it)."""
        history = self.endpoint_history.get(endpoint)
        if not history:
            return NO_FAULT
        i = bisect.bisect_right(history, t, key=lambda c: c.at) - 1
        return history[i] if i >= 0 else NO_FAULT

    def requests(self, operation: str) -> float:
        """How many requests ``operation`` makes to its endpoint (what a latency toxic multiplies)."""
        return max(1.0, float(self._requests.get(operation, 1)))

    def transfer(self, endpoint: str, t: float, nbytes: float, stop: float = math.inf) -> tuple[float, float]:
        """A transfer of ``nbytes`` through ``endpoint`` from monotonic time ``t``, played on the endpoint's
        history up to ``stop``: (the time it got to, the bytes still to move). Each span of the history
        moves its bytes at its bandwidth cap, so a cap changed or lifted in the middle of a transfer counts
        from then on; where the endpoint has no cap the rest moves at once (what a transfer takes without
        faults is not this method's: the caller's figures already hold it). Only the history up to the
        clock's now is known: a span beyond it is taken to last."""
        history = self.endpoint_history.get(endpoint) or []
        times = [c.at for c in history]
        left = float(nbytes)
        while left > 0:
            i = bisect.bisect_right(times, t) - 1
            rate = history[i].rate_kbps if i >= 0 else None
            if rate is None:
                return t, 0.0
            if t >= stop:
                break
            end = min(stop, times[i + 1] if i + 1 < len(times) else math.inf)
            speed = rate * 1024.0
            if left <= (end - t) * speed:
                return t + left / speed, 0.0
            left -= (end - t) * speed
            t = end
        return t, max(0.0, left)

    def transfer_s(self, endpoint: str, t: float, nbytes: float, requests: float = 1.0) -> float:
        """The seconds ``endpoint``'s faults add to a read of ``nbytes`` in ``requests`` requests that
        starts at monotonic time ``t``: the mean latency at ``t`` for each request, then the bytes at the
        bandwidth caps of the history from there (see :meth:`transfer`)."""
        start = t + requests * self.endpoint_at(endpoint, t).latency_s
        end, _ = self.transfer(endpoint, start, nbytes)
        return end - t

    # -------------------------------------------------------------------------------------- calls

    def call(
        self, service: str, operation: str, *, nbytes: int = 0, what: str | None = None, **fill: Any
    ) -> None:
        """One operation of a client on ``service``: charge its time, or fail as the client does.
        ``operation`` is the runtime operation (``object_store.put_object``) naming its figures."""
        clock = self.clock
        base = self._call_s.get(operation, self._default_call_s)
        if nbytes:
            base += nbytes / self._bytes_per_s
        state = self.services[service].state
        ep = self.endpoints.get(service)
        requests = self.requests(operation)
        if state == "killed":
            clock.charge(MLFLOW_REFUSED_S if service == "mlflow" else 0.05)
            raise self.error(service, "unreachable", operation, what=what, **fill)
        if state == "frozen":
            clock.charge({"minio": S3_TIMEOUT_S, "mlflow": MLFLOW_TIMEOUT_S}.get(service, PREFECT_TIMEOUT_S))
            raise self.error(service, "timeout", operation, what=what, **fill)
        if ep is not None:
            if not ep.enabled:
                clock.charge(MLFLOW_REFUSED_S if service == "mlflow" else 0.05)
                raise self.error(service, "unreachable", operation, what=what, **fill)
            blocking = ep.blocking()
            if blocking is not None:
                kind, after = blocking
                clock.charge(after if kind == "reset" else max(after, 1.0))
                raise self.error(service, kind, operation, what=what, **fill)
            if ep.toxics:
                base += requests * ep.latency_s(self.rng)
                rate = ep.bandwidth_kbps("upstream" if operation in UPLOADS else "downstream")
                if rate is not None and nbytes:
                    base += nbytes / (rate * 1024.0)
        factor = self.slowdown.get(service)
        clock.charge(base * factor if factor else base)

    def error(
        self, service: str, kind: str, operation: str, *, what: str | None = None, **fill: Any
    ) -> BackendError:
        """The error a client of ``service`` gets (``kind``: unreachable, timeout, reset)."""
        errors = self.calibration.errors
        op = operation.split(".", 1)[-1]
        values = {
            "what": what or op,
            "operation": fill.pop("s3_operation", None) or _s3_operation(op),
            "url": self.address.urls.get(service, ""),
            "host": self.address.hosts.get(service, service),
            "port": self.address.ports.get(service, 0),
            "bucket": "",
            "key": "",
            "detail": "",
            "dataset": "",
            "role": "",
            "value": "",
            **fill,
        }
        if service == "minio":
            return Unreachable(service, kind, errors[f"storage.{kind}"].text.format(**values))
        if service == "mlflow":
            values["operation"] = _mlflow_path(op)
            return Unreachable(service, kind, errors[f"tracking.{kind}"].text.format(**values))
        values["url"] = self.address.urls["prefect-server"]
        return Unreachable(service, kind, errors["flows.orchestrator_unreachable"].text.format(**values))

    def charge(self, operation: str) -> None:
        """An operation that needs no service (or whose service was checked): its time only."""
        self.clock.charge(self._call_s.get(operation, self._default_call_s))


def _s3_operation(op: str) -> str:
    return {
        "put_object": "PutObject",
        "get_object": "GetObject",
        "list_objects": "ListObjectsV2",
        "create_bucket": "CreateBucket",
        "delete_bucket": "DeleteBucket",
        "delete_object": "DeleteObject",
        "bucket_exists": "HeadBucket",
        "object_exists": "HeadObject",
        "list_buckets": "ListBuckets",
    }.get(op, op)


def _mlflow_path(op: str) -> str:
    return {
        "create_experiment": "/api/2.0/mlflow/experiments/create",
        "delete_experiment": "/api/2.0/mlflow/experiments/delete",
        "list_runs": "/api/2.0/mlflow/runs/search",
        "search_runs": "/api/2.0/mlflow/runs/search",
        "get_run": "/api/2.0/mlflow/runs/get",
        "register_model": "/api/2.0/mlflow/model-versions/create",
        "list_model_versions": "/api/2.0/mlflow/model-versions/search",
        "set_model_alias": "/api/2.0/mlflow/registered-models/alias",
        "delete_model_alias": "/api/2.0/mlflow/registered-models/alias",
        "delete_registered_model": "/api/2.0/mlflow/registered-models/delete",
        "load_model": "/api/2.0/mlflow-artifacts/artifacts",
    }.get(op, f"/api/2.0/mlflow/{op}")


__all__ = [
    "ADDRESSED",
    "ENDPOINTS",
    "SERVICES",
    "Addresses",
    "Endpoint",
    "EndpointChange",
    "Ids",
    "Service",
    "SimWorld",
    "Unreachable",
    "addresses_for",
    "stable_seed",
]
