"""What each fault of the catalog does: ``inject``/``recover`` (both idempotent), its per-step effect, how
it changes jobs started while it is active, which agent actions address it, and when its symptom is gone.
Each fault kind names its behaviour class in its declaration (:mod:`mlsandbox.faultkinds`);
:data:`BEHAVIOURS` is derived from those.

The mechanisms themselves belong to the backend: behaviours call the declared operations of
:class:`~mlsandbox.backends.protocols.FaultControl` (``ctx.control``, the runtime's ``faults``) and of the
runtime's other capabilities only: the object-level faults (a missing column) act through its object
store, the config faults through its config store; a pool shrink through the episode's compute pool
(:mod:`mlsandbox.world.compute`). A mechanism the backend refuses
(:class:`~mlsandbox.errors.Unsupported`) makes the fault unavailable, with the backend's reason. Faults on a data source (``source:NAME``) need a
mechanism of the layer above: whoever makes the engine supplies a :data:`Supplied` registry of behaviours
for them (the gateway's sources pack does); without one they are unavailable. Which action types address
a fault kind is declared by the action packs and handed to the engine (:data:`Addresses`); a behaviour
only checks that the action is about its target (the service, the job, the config key it acts on).
Nothing here is shown to the agent: it sees symptoms only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mlsandbox.backends.protocols import (
    ConfigStore,
    FaultControl,
    HttpFault,
    JobSpec,
    NetworkControl,
    NoSuchTarget,
    Runtime,
)
from mlsandbox.data.formats import from_bytes, to_bytes
from mlsandbox.errors import Unsupported
from mlsandbox.faultkinds import BY_NAME, KINDS, NetworkEffect
from mlsandbox.scenario import perturbations as P
from mlsandbox.world.compute import Pool
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)
_T = TypeVar("_T")

LEARNING_RATE_PARAMS: dict[str, str] = {"mlp": "learning_rate_init"}
"""Trainer algorithms with a learning rate, and the name of its hyperparameter."""

Addresses = Mapping[str, Sequence[str]]
"""What an action pack declares (its ``addresses``): action type -> the fault kinds it addresses (looks
at or acts on the faulty component of)."""


def addressed_by(declarations: Iterable[Addresses]) -> dict[str, frozenset[str]]:
    """Fault kind -> the action types addressing it, from the packs' declarations."""
    out: dict[str, set[str]] = {}
    for declared in declarations:
        for action_type, kinds in declared.items():
            for kind in kinds:
                out.setdefault(kind, set()).add(action_type)
    return {kind: frozenset(actions) for kind, actions in out.items()}


@dataclass
class FaultContext:
    """What a fault acts on: the episode, the runtime, the backend's fault mechanisms (``runtime.faults``
    unless the engine was given another control)."""

    state: EpisodeState
    runtime: Runtime
    control: FaultControl
    job_resources: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Backend job id -> (cpus, memory_mb) as requested, before any fault cut them."""
    pool: Pool | None = None
    """The episode's compute pool (None: the episode has none)."""


class FaultUnavailable(Exception):
    """The fault cannot be made real on this backend or machine (the reason is the message)."""


def _supported(fn: Callable[[], _T]) -> _T:
    """``fn()``, a refusal of the backend (:class:`Unsupported`) as :class:`FaultUnavailable`."""
    try:
        return fn()
    except Unsupported as e:
        raise FaultUnavailable(e.reason) from None


class Behaviour:
    """The base: a fault with no effect. Subclasses override what they need."""

    def __init__(self, entry: P.Perturbation) -> None:
        self.entry = entry
        self.fault: Any = entry.fault
        self.affected_jobs: list[str] = []
        """Agent-visible job ids this fault touched (for detection)."""
        self.injected_step: int | None = None
        """The step at whose boundary the engine injected it."""
        self.addressed_by: frozenset[str] = frozenset()
        """The action types declared to address this fault's kind (:func:`behaviour_for` sets them)."""

    @property
    def target_name(self) -> str:
        return self.entry.target_name

    def inject(self, ctx: FaultContext) -> None: ...
    def recover(self, ctx: FaultContext) -> None: ...
    def on_tick(self, ctx: FaultContext) -> None:
        """Called at every step boundary while active (a crash loop kills again)."""

    def adjust_job(self, spec: JobSpec) -> JobSpec:
        """A job started while the fault is active (limits cut, a deadline tightened)."""
        return spec

    def addresses(self, action: dict[str, Any]) -> bool:
        """Whether the agent's action looks at or acts on the faulty component: an action type declared
        to address the fault's kind (:attr:`addressed_by`), about the fault's target."""
        return False

    def _declared(self, action: dict[str, Any]) -> bool:
        return action.get("type") in self.addressed_by

    def _about_service(self, action: dict[str, Any], service: str) -> bool:
        return self._declared(action) and _service_arg(action) == service

    def symptom_gone(self, ctx: FaultContext) -> bool:
        """Whether the symptom has gone while the fault is still injected (the agent mitigated it)."""
        return False


# ------------------------------------------------------------------------------------------------ services


def _service_arg(action: dict[str, Any]) -> str | None:
    value = action.get("service") or action.get("target")
    if not isinstance(value, str):
        return None
    return value.split(":", 1)[1] if value.startswith("service:") else value


class _ServiceBehaviour(Behaviour):
    def addresses(self, action: dict[str, Any]) -> bool:
        return self._about_service(action, self.target_name)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        return ctx.control.services.health(self.target_name, timeout=1.0).healthy


class KillService(_ServiceBehaviour):
    def inject(self, ctx: FaultContext) -> None:
        ctx.control.services.kill(self.target_name)

    def recover(self, ctx: FaultContext) -> None:
        services = ctx.control.services
        if not services.health(self.target_name, timeout=2.0).healthy:
            services.restart(self.target_name, wait=True)


class FreezeService(_ServiceBehaviour):
    def inject(self, ctx: FaultContext) -> None:
        ctx.control.services.freeze(self.target_name)

    def recover(self, ctx: FaultContext) -> None:
        ctx.control.services.thaw(self.target_name)


class RestartService(_ServiceBehaviour):
    def inject(self, ctx: FaultContext) -> None:
        ctx.control.services.restart(self.target_name, wait=False)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        return True


class CrashLoop(KillService):
    def on_tick(self, ctx: FaultContext) -> None:
        services = ctx.control.services
        if services.health(self.target_name, timeout=1.0).healthy:  # brought back: it dies again
            services.kill(self.target_name)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        return False


# ---------------------------------------------------------------------------------------------------- jobs


class _JobBehaviour(Behaviour):
    def addresses(self, action: dict[str, Any]) -> bool:
        return self._declared(action) and self._about_affected_job(action)

    def _about_affected_job(self, action: dict[str, Any]) -> bool:
        return action.get("job_id") in self.affected_jobs or action.get("target") in self.affected_jobs

    def symptom_gone(self, ctx: FaultContext) -> bool:
        """A job started after the injection succeeded."""
        return any(
            j.state == "succeeded" and j.submitted_step >= self._injected_step(ctx)
            for j in ctx.state.jobs.values()
        )

    def _injected_step(self, ctx: FaultContext) -> int:
        return ctx.state.step if self.injected_step is None else self.injected_step

    def _running(self, ctx: FaultContext) -> list[Any]:
        return [j for j in ctx.state.jobs.values() if j.state in ("queued", "running")]


class _LimitBehaviour(_JobBehaviour):
    def limits(self) -> dict[str, Any]:
        raise NotImplementedError

    def inject(self, ctx: FaultContext) -> None:
        control = ctx.control
        for job in self._running(ctx):
            try:
                control.set_job_limits(job.backend_id, **self.limits())
                if job.job_id not in self.affected_jobs:
                    self.affected_jobs.append(job.job_id)
            except (KeyError, ValueError) as e:
                log.debug("limits of %s not cut: %s", job.job_id, e)

    def recover(self, ctx: FaultContext) -> None:
        control = ctx.control
        for job in ctx.state.jobs.values():
            if job.job_id in self.affected_jobs and job.backend_id in ctx.job_resources:
                cpus, memory_mb = ctx.job_resources[job.backend_id]
                keys = self.limits()
                control.restore_job_limits(
                    job.backend_id,
                    cpus if "cpus" in keys else None,
                    memory_mb if "memory_mb" in keys else None,
                )


class MemoryLimit(_LimitBehaviour):
    def limits(self) -> dict[str, Any]:
        return {"memory_mb": self.fault.memory_mb}

    def adjust_job(self, spec: JobSpec) -> JobSpec:
        return spec.model_copy(update={"memory_mb": min(spec.memory_mb, self.fault.memory_mb)})


class CpuThrottle(_LimitBehaviour):
    def limits(self) -> dict[str, Any]:
        return {"cpus": self.fault.cpus}

    def adjust_job(self, spec: JobSpec) -> JobSpec:
        return spec.model_copy(update={"cpus": min(spec.cpus, self.fault.cpus)})


class JobTimeout(_JobBehaviour):
    def adjust_job(self, spec: JobSpec) -> JobSpec:
        limit = self.fault.timeout_s
        return spec.model_copy(update={"timeout_s": min(spec.timeout_s or limit, limit)})


# -------------------------------------------------------------------------------------------------- bucket


class DiskFull(Behaviour):
    def inject(self, ctx: FaultContext) -> None:
        ctx.control.set_bucket_quota(ctx.state.bucket, self.fault.quota_bytes)

    def recover(self, ctx: FaultContext) -> None:
        ctx.control.set_bucket_quota(ctx.state.bucket, None)

    def addresses(self, action: dict[str, Any]) -> bool:
        return self._about_service(action, "minio")


# ------------------------------------------------------------------------------------------------- network


class Network(Behaviour):
    """A network fault on an endpoint: its kind's toxic, or the endpoint's proxy disabled
    (:attr:`~mlsandbox.faultkinds.FaultKind.network`)."""

    @property
    def toxic_name(self) -> str:
        return f"mlsandbox-{self.entry.name}"

    def _network(self, ctx: FaultContext) -> NetworkControl:
        return _supported(lambda: ctx.control.network)

    @property
    def effect(self) -> NetworkEffect:
        effect = BY_NAME[self.fault.type].network
        assert effect is not None, f"fault kind {self.fault.type!r} declares no network effect"
        return effect

    def inject(self, ctx: FaultContext) -> None:
        net = self._network(ctx)
        effect = self.effect
        if effect.toxic is None:
            net.set_enabled(self.target_name, False)
            return
        values = {k: getattr(self.fault, v) for k, v in effect.attributes.items()}
        net.add_toxic(self.target_name, self.toxic_name, effect.toxic, values, stream=self.fault.stream)

    def recover(self, ctx: FaultContext) -> None:
        net = self._network(ctx)
        if self.effect.toxic is None:
            net.set_enabled(self.target_name, True)
        else:
            net.remove_toxic(self.target_name, self.toxic_name)

    def addresses(self, action: dict[str, Any]) -> bool:
        return self._about_service(action, self.target_name)


# ---------------------------------------------------------------------------------------------------- task


class MissingColumn(_JobBehaviour):
    """Rewrites the dataset's raw objects without the column; the originals are kept to restore them."""

    def __init__(self, entry: P.Perturbation) -> None:
        super().__init__(entry)
        self.originals: dict[str, bytes] = {}

    def _keys(self, ctx: FaultContext) -> list[str]:
        return [
            r.key
            for r in ctx.state.datasets.values()
            if r.origin == "scenario" and r.key.rsplit("/", 1)[-1].rsplit(".", 1)[0] == self.target_name
        ]

    def inject(self, ctx: FaultContext) -> None:
        store = ctx.runtime.object_store
        for key in self._keys(ctx):
            if key in self.originals:
                continue
            rec = ctx.state.datasets[key]
            fmt = rec.fmt  # the format the dataset was written in
            original = store.get_object(ctx.state.bucket, key)
            df = from_bytes(original, fmt)
            if self.fault.column not in df.columns:
                continue
            payload = to_bytes(df.drop(columns=[self.fault.column]), fmt)
            store.put_object(ctx.state.bucket, key, payload)
            self.originals[key] = original
            rec.size = len(payload)

    def recover(self, ctx: FaultContext) -> None:
        store = ctx.runtime.object_store
        for key, original in list(self.originals.items()):
            store.put_object(ctx.state.bucket, key, original)
            if key in ctx.state.datasets:
                ctx.state.datasets[key].size = len(original)
            del self.originals[key]

    def addresses(self, action: dict[str, Any]) -> bool:
        dataset = action.get("dataset")
        return self._declared(action) and dataset in self.originals


# ---------------------------------------------------------------------------------------------- contention


class CpuContention(_JobBehaviour):
    """CPU burners competing with the target (a service, or the episode's running jobs, caught as they
    start) for one CPU; the backend keeps the burners and what it pinned under the fault's key."""

    @property
    def key(self) -> str:
        return f"{id(self):x}-{self.entry.name}"

    @property
    def target(self) -> str:
        return f"service:{self.target_name}" if self.entry.target_kind == "service" else "jobs"

    def inject(self, ctx: FaultContext) -> None:
        control = ctx.control
        _supported(
            lambda: control.start_contention(self.key, self.target, self.fault.workers, pin=self.fault.pin)
        )
        self._catch(ctx)

    def on_tick(self, ctx: FaultContext) -> None:
        self._catch(ctx)

    def _catch(self, ctx: FaultContext) -> None:
        """Processes of the target that started since (the episode's jobs that run now)."""
        jobs = (
            {}
            if self.entry.target_kind == "service"
            else {j.backend_id: j.job_id for j in self._running(ctx)}
        )
        for backend_id in ctx.control.refresh_contention(self.key, list(jobs)):
            job_id = jobs.get(backend_id)
            if job_id is not None and job_id not in self.affected_jobs:
                self.affected_jobs.append(job_id)

    def recover(self, ctx: FaultContext) -> None:
        ctx.control.stop_contention(self.key)

    def addresses(self, action: dict[str, Any]) -> bool:
        if self.entry.target_kind == "service":
            return self._about_service(action, self.target_name)
        return super().addresses(action)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        return False  # the burners compete until the fault ends


# ------------------------------------------------------------------------------------------ http services


class HttpErrors(Behaviour):
    """One of the sandbox's own HTTP services (``http:NAME``) answers errors, or slowly, through the fault
    mechanism the backend has for it (the service's fault hook on local)."""

    def inject(self, ctx: FaultContext) -> None:
        f = self.fault
        fault = HttpFault(error_rate=f.error_rate, status=f.status, delay_ms=f.delay_ms, seed=ctx.state.seed)
        try:
            _supported(
                lambda: ctx.control.set_http_fault(self.target_name, fault, episode_id=ctx.state.episode_id)
            )
        except NoSuchTarget as e:
            raise FaultUnavailable(str(e)) from None

    def recover(self, ctx: FaultContext) -> None:
        ctx.control.clear_http_fault(self.target_name, episode_id=ctx.state.episode_id)

    def addresses(self, action: dict[str, Any]) -> bool:
        return self._about_service(action, self.target_name)

    def symptom_gone(self, ctx: FaultContext) -> bool:
        """The fault is no longer in effect while still planned: a restart of a service whose own state
        it was (the feature service) cleared it."""
        return not ctx.control.http_fault_active(self.target_name, episode_id=ctx.state.episode_id)


# -------------------------------------------------------------------------------------------------- config


def _closed_port_url() -> str:
    """A local address nothing listens on (a port the kernel handed out, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class ConfigValue(Behaviour):
    """A wrong value in the episode's config store; the original is written back on recovery."""

    def __init__(self, entry: P.Perturbation) -> None:
        super().__init__(entry)
        self.original: str | None = None
        self.bad: str | None = None

    def _store(self, ctx: FaultContext) -> ConfigStore:
        return _supported(lambda: ctx.runtime.config)

    def _name(self, ctx: FaultContext) -> str:
        return P.config_prefix(ctx.state.episode_id) + self.target_name

    def bad_value(self, seed: int) -> str:
        """A wrong value: for a credential, one drawn from the episode's seed and the entry's name (the
        same episode shows the same stale value, masked, on every run)."""
        if self.fault.type == "wrong_endpoint":
            return self.fault.url or _closed_port_url()
        digest = hashlib.blake2b(f"{seed}:{self.entry.name}".encode(), digest_size=18).digest()
        if self.target_name == "s3_secret_access_key":
            return base64.urlsafe_b64encode(digest).decode()
        return f"mls-{digest[:6].hex()}"

    def inject(self, ctx: FaultContext) -> None:
        store, name = self._store(ctx), self._name(ctx)
        if self.original is None:
            self.original = store.get(name)
            if self.original is None:
                raise FaultUnavailable(f"the episode's config store has no {self.target_name!r}")
        self.bad = self.bad or self.bad_value(ctx.state.seed)
        store.set(name, self.bad)

    def recover(self, ctx: FaultContext) -> None:
        if self.original is None:
            return
        store, name = self._store(ctx), self._name(ctx)
        if store.get(name) != self.original:
            store.set(name, self.original)

    def addresses(self, action: dict[str, Any]) -> bool:
        return self._declared(action) and action.get("key") == self.target_name

    def symptom_gone(self, ctx: FaultContext) -> bool:
        return self.original is not None and self._store(ctx).get(self._name(ctx)) == self.original


# --------------------------------------------------------------------------------------- learning rate


class DivergentLearningRate(_JobBehaviour):
    """Jobs started while active get a too high default learning rate (unless they set one)."""

    def adjust_job(self, spec: JobSpec) -> JobSpec:
        args = list(spec.args)
        if spec.workload != "trainer" or "--algorithm" not in args:
            return spec
        param = LEARNING_RATE_PARAMS.get(args[args.index("--algorithm") + 1])
        if param is None:
            return spec
        if "--hyperparams" in args:
            i = args.index("--hyperparams") + 1
            hyperparams = json.loads(args[i])
        else:
            args += ["--hyperparams", "{}"]
            i, hyperparams = len(args) - 1, {}
        if param in hyperparams:
            return spec
        hyperparams[param] = self.fault.learning_rate
        args[i] = json.dumps(hyperparams, sort_keys=True)
        return spec.model_copy(update={"args": args})


# ---------------------------------------------------------------------------------------------- pool


class PoolShrink(_JobBehaviour):
    """Takes capacity out of the episode's compute pool (on top of what other shrinks took) and gives
    exactly that back on recovery. Jobs that queued while it was active are the affected jobs."""

    def __init__(self, entry: P.Perturbation) -> None:
        super().__init__(entry)
        self.taken: tuple[float, int] | None = None

    def _pool(self, ctx: FaultContext) -> Pool:
        if ctx.pool is None:
            raise FaultUnavailable("the episode has no compute pool (the compute pack is not loaded)")
        return ctx.pool

    def inject(self, ctx: FaultContext) -> None:
        if self.taken is not None:
            return
        pool = self._pool(ctx)
        with pool.lock:
            cpus, memory_mb = self.fault.cpus, self.fault.memory_mb
            pool.shrink(pool.shrink_cpus + cpus, pool.shrink_memory_mb + memory_mb)
            self.taken = (cpus, memory_mb)
        self.on_tick(ctx)

    def on_tick(self, ctx: FaultContext) -> None:
        for job in ctx.state.jobs.values():
            if job.state == "queued" and job.job_id not in self.affected_jobs:
                self.affected_jobs.append(job.job_id)

    def recover(self, ctx: FaultContext) -> None:
        if self.taken is None:
            return
        pool = ctx.pool
        if pool is not None:
            with pool.lock:
                cpus = max(0.0, round(pool.shrink_cpus - self.taken[0], 6))
                memory_mb = max(0, pool.shrink_memory_mb - self.taken[1])
                if cpus == 0 and memory_mb == 0:
                    pool.restore()
                else:
                    pool.shrink(cpus, memory_mb)
                    pool.pump()
        self.taken = None

    def addresses(self, action: dict[str, Any]) -> bool:
        """An action declared to address it (the pool's), or any action about a job it held back."""
        return self._declared(action) or self._about_affected_job(action)


# ------------------------------------------------------------------------------------------ supplied


class NotSupplied(Behaviour):
    """A fault whose mechanism lives above the engine, on an engine not given it: unavailable."""

    def inject(self, ctx: FaultContext) -> None:
        raise FaultUnavailable(
            f"fault {self.fault.type!r} on {self.entry.target} needs a mechanism the gateway supplies "
            "(its sources pack); this engine was made without it"
        )


BehaviourFactory = Callable[[P.Perturbation], Behaviour]
Supplied = Mapping[tuple[str, str], BehaviourFactory]
"""(fault type, target kind) -> a factory of the behaviour, for the targets of
:data:`~mlsandbox.scenario.perturbations.SUPPLIED_TARGET_KINDS`."""


def _behaviour_class(name: str) -> type[Behaviour]:
    found = globals().get(name)
    if not (isinstance(found, type) and issubclass(found, Behaviour)):
        raise LookupError(f"no behaviour class {name!r} in {__name__}")
    return found


BEHAVIOURS: dict[str, type[Behaviour]] = {k.name: _behaviour_class(k.behaviour) for k in KINDS}
"""The engine's own behaviour of each fault kind, as its declaration names it (:class:`NotSupplied` where
only a supplied one works)."""


def supplied_missing(entry: P.Perturbation, supplied: Supplied | None) -> bool:
    """Whether ``entry`` needs a supplied behaviour that ``supplied`` lacks."""
    return entry.target_kind in P.SUPPLIED_TARGET_KINDS and (
        (entry.fault.type, entry.target_kind) not in (supplied or {})
    )


def behaviour_for(
    entry: P.Perturbation,
    supplied: Supplied | None = None,
    addressed: Mapping[str, frozenset[str]] | None = None,
) -> Behaviour:
    """The behaviour of ``entry``'s fault: a supplied one, a plug-in's, or the engine's own; ``addressed``
    (fault kind -> action types, :func:`addressed_by`) says which actions address it."""
    behaviour = _make(entry, supplied)
    behaviour.addressed_by = (addressed or {}).get(entry.fault.type, frozenset())
    return behaviour


def _make(entry: P.Perturbation, supplied: Supplied | None) -> Behaviour:
    factory = (supplied or {}).get((entry.fault.type, entry.target_kind))
    if factory is not None:
        return factory(entry)
    if isinstance(entry.fault, P.PluginFault):  # a plug-in's fault type (entry point mlsandbox.faults)
        behaviour: Behaviour = entry.fault.behaviour(entry)
        return behaviour
    if entry.target_kind in P.SUPPLIED_TARGET_KINDS:
        return NotSupplied(entry)
    return BEHAVIOURS[entry.fault.type](entry)
