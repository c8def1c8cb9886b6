"""Perturbation plans: what goes wrong in an episode, on what, when, for how long, and how it ends.

A plan is a list of :class:`Perturbation` entries inside a scenario (``perturbations:``)::

    perturbations:
      - name: tracker-outage
        when: {at_step: 3}                 # or {at_time: 20}, {every: 5}, {probability: 0.2},
                                           #    {condition: job_running}
        target: service:mlflow             # service:NAME | endpoint:NAME | jobs | bucket | dataset:NAME
                                           #   | config:KEY | http:NAME | source:NAME | pool
        fault: {type: kill_service}        # one of the catalog below, with its parameters
        duration: {steps: 4}               # or {seconds: 30}; omitted: until the episode ends
        recovery: auto                     # auto: undone when the duration ends; manual: the agent must
                                           #   mitigate it (the sandbox still undoes it at episode end)

Only the models live here (the scenario layer parses and validates plans); the perturbation engine in
:mod:`mlsandbox.faults` gives them effect. Every model forbids unknown fields; every fault has a ``type``.
Faults on a data source (``source:NAME``, a source the scenario declares under ``sources:``) act through
mechanisms of the layer above the engine: the gateway's sources pack supplies them to the engine
(:data:`SUPPLIED_TARGET_KINDS`).
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Support

SERVICES: tuple[str, ...] = ("minio", "mlflow", "prefect-server", "prefect-worker")
"""Services a service fault may target."""
ENDPOINTS: tuple[str, ...] = ("minio", "mlflow")
"""Client-facing endpoints (behind the sandbox's proxy) a network fault may target."""
CONFIG_KEYS: tuple[str, ...] = (
    "s3_endpoint_url",
    "s3_access_key_id",
    "s3_secret_access_key",
    "mlflow_tracking_uri",
)
"""Keys of an episode's config store (what its training jobs read their endpoints and credentials from)."""
SECRET_CONFIG_KEYS: frozenset[str] = frozenset({"s3_secret_access_key"})
"""Config keys whose values are secrets (masked whenever shown)."""
ENDPOINT_CONFIG_KEYS: tuple[str, ...] = ("s3_endpoint_url", "mlflow_tracking_uri")
CREDENTIAL_CONFIG_KEYS: tuple[str, ...] = ("s3_access_key_id", "s3_secret_access_key")


def config_prefix(episode_id: str) -> str:
    """The name prefix of an episode's entries in the config store (Prefect variable names allow
    lowercase letters, digits, ``-`` and ``_``)."""
    return "mls-" + re.sub(r"[^a-z0-9_-]", "-", episode_id.lower()) + "-"


CONDITIONS: tuple[str, ...] = ("job_submitted", "job_running", "job_succeeded", "model_registered")
"""Conditions on episode state a ``when: {condition: ...}`` trigger may wait for."""
TargetKind = Literal["service", "endpoint", "jobs", "bucket", "dataset", "config", "http", "source", "pool"]
SUPPLIED_TARGET_KINDS: frozenset[str] = frozenset({"source"})
"""Target kinds whose fault mechanisms live above the fault engine (the gateway supplies them when it
makes the engine); a plan using them runs only on an engine given those mechanisms."""
_HTTP_NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_log = logging.getLogger(__name__)
_SOURCE_NAME_RE = r"^[a-z][a-z0-9_]{0,39}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------------ when


class AtStep(_Model):
    """Once, before the action of step ``at_step`` (1 = the first step) is carried out."""

    at_step: int = Field(ge=1)


class AtTime(_Model):
    """Once, ``at_time`` seconds after the episode started: fired by a ticker of the runtime's clock
    between steps (or at the next step boundary, whichever comes first)."""

    at_time: float = Field(gt=0)


class Every(_Model):
    """Before steps ``start``, ``start + every``, ... (while the previous injection is no longer active)."""

    every: int = Field(ge=1)
    start: int = Field(default=1, ge=1)
    max_times: int | None = Field(default=None, ge=1)


class WithProbability(_Model):
    """Before each step with probability ``probability`` (a seeded draw: same seed, same schedule)."""

    probability: float = Field(gt=0, le=1)
    start: int = Field(default=1, ge=1)
    max_times: int | None = Field(default=1, ge=1)


class OnCondition(_Model):
    """Once, at the first step boundary where ``condition`` holds in the episode state."""

    condition: Literal["job_submitted", "job_running", "job_succeeded", "model_registered"]


def _when_tag(value: Any) -> str | None:
    keys = value.keys() if isinstance(value, dict) else getattr(type(value), "model_fields", {}).keys()
    for tag in ("at_step", "at_time", "every", "probability", "condition"):
        if tag in keys:
            return tag
    return None


When = Annotated[
    Annotated[AtStep, Tag("at_step")]
    | Annotated[AtTime, Tag("at_time")]
    | Annotated[Every, Tag("every")]
    | Annotated[WithProbability, Tag("probability")]
    | Annotated[OnCondition, Tag("condition")],
    Discriminator(
        _when_tag,
        custom_error_type="invalid_when",
        custom_error_message=("`when` needs one of at_step, at_time, every, probability or condition"),
    ),
]


class Duration(_Model):
    """How long an injected fault lasts: ``steps`` step boundaries or ``seconds`` of the runtime's clock
    (the wall clock on local and kube, virtual time on sim)."""

    steps: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Duration:
        if (self.steps is None) == (self.seconds is None):
            raise ValueError("a duration is either {steps: N} or {seconds: T}")
        return self


# ---------------------------------------------------------------------------------------------- faults


class _Fault(_Model):
    targets: ClassVar[tuple[TargetKind, ...]] = ()
    """Target kinds this fault acts on."""
    default_target: ClassVar[str | None] = None
    category: ClassVar[str] = ""
    instant: ClassVar[bool] = False
    """An instant fault (a restart) has no duration: it happens and is over."""


class KillServiceFault(_Fault):
    """SIGKILL of the service's process group; recovery restarts it."""

    targets = ("service",)
    category = "service"
    type: Literal["kill_service"] = "kill_service"


class FreezeServiceFault(_Fault):
    """SIGSTOP of the service's process group (it hangs: connections open, nothing answers); SIGCONT."""

    targets = ("service",)
    category = "service"
    type: Literal["freeze_service"] = "freeze_service"


class RestartServiceFault(_Fault):
    """An unplanned restart: SIGTERM, then the service starts again (requests fail meanwhile)."""

    targets = ("service",)
    category = "service"
    instant = True
    type: Literal["restart_service"] = "restart_service"


class CrashLoopFault(_Fault):
    """The service dies again at every step boundary while active, even after a restart."""

    targets = ("service",)
    category = "service"
    type: Literal["crash_loop"] = "crash_loop"


class MemoryLimitFault(_Fault):
    """The memory limit of the episode's jobs is cut to ``memory_mb``: a job needing more is OOM-killed
    by the kernel (exit 137). Applies to running jobs and to jobs started while the fault is active."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "resource"
    type: Literal["memory_limit"] = "memory_limit"
    memory_mb: int = Field(default=64, ge=8, le=8192)


class CpuThrottleFault(_Fault):
    """The CPU quota (cgroup ``cpu.cfs_quota_us``) of the episode's jobs is cut to ``cpus`` cores."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "resource"
    type: Literal["cpu_throttle"] = "cpu_throttle"
    cpus: float = Field(default=0.05, ge=0.01, le=2)


class DiskFullFault(_Fault):
    """A hard quota of ``quota_bytes`` on the episode's bucket (MinIO admin API): writes fail with the
    real ``XMinioAdminBucketQuotaExceeded`` error."""

    targets = ("bucket",)
    default_target = "bucket"
    category = "resource"
    type: Literal["disk_full"] = "disk_full"
    quota_bytes: int = Field(default=1, ge=1)


class _NetworkFault(_Fault):
    targets = ("endpoint",)
    category = "network"
    stream: Literal["upstream", "downstream"] = "downstream"


class LatencyFault(_NetworkFault):
    """Toxiproxy ``latency``: every chunk through the endpoint's proxy is delayed."""

    type: Literal["latency"] = "latency"
    latency_ms: int = Field(default=500, ge=1, le=60_000)
    jitter_ms: int = Field(default=0, ge=0, le=60_000)


class BandwidthFault(_NetworkFault):
    """Toxiproxy ``bandwidth``: the endpoint's throughput is capped at ``rate_kbps`` KB/s."""

    type: Literal["bandwidth"] = "bandwidth"
    rate_kbps: int = Field(default=16, ge=1)


class TimeoutFault(_NetworkFault):
    """Toxiproxy ``timeout``: data stops flowing; connections close after ``timeout_ms`` (0: never)."""

    type: Literal["timeout"] = "timeout"
    timeout_ms: int = Field(default=0, ge=0)


class ResetPeerFault(_NetworkFault):
    """Toxiproxy ``reset_peer``: connections are reset (TCP RST) after ``timeout_ms``."""

    type: Literal["reset_peer"] = "reset_peer"
    timeout_ms: int = Field(default=0, ge=0)


class EndpointDownFault(_NetworkFault):
    """The endpoint's proxy is disabled: connections are refused."""

    type: Literal["endpoint_down"] = "endpoint_down"


class MissingColumnFault(_Fault):
    """A feature column disappears from the dataset's raw objects (every format); restored on recovery."""

    targets = ("dataset",)
    category = "task"
    type: Literal["missing_column"] = "missing_column"
    column: str = Field(min_length=1)


class JobTimeoutFault(_Fault):
    """Jobs started while active are killed after ``timeout_s`` seconds (a too tight deadline)."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "task"
    type: Literal["job_timeout"] = "job_timeout"
    timeout_s: float = Field(default=3.0, gt=0)


class CpuContentionFault(_Fault):
    """``workers`` CPU burners (``mlsandbox.workloads.burn``) compete for the target's CPU: the burners and
    the target's processes are pinned to one CPU (``pin``; else the burners spread over every CPU), so the
    target gets a fraction of it and its work slows. Jobs started while active are pinned too."""

    targets = ("jobs", "service")
    default_target = "jobs"
    category = "resource"
    type: Literal["cpu_contention"] = "cpu_contention"
    workers: int = Field(default=3, ge=1, le=32)
    pin: bool = True


class HttpErrorsFault(_Fault):
    """One of the sandbox's own HTTP services (a model server, an API data source) answers ``error_rate``
    of its requests with ``status`` and delays every request by ``delay_ms``, through the service's
    internal fault hook (a control file the agent cannot reach). Targets: ``http:NAME`` of a service that
    registered its hook."""

    targets = ("http",)
    category = "service"
    type: Literal["http_errors"] = "http_errors"
    error_rate: float = Field(default=0.5, ge=0, le=1)
    status: int = Field(default=503, ge=500, le=599)
    delay_ms: int = Field(default=0, ge=0, le=60_000)


class WrongEndpointFault(_Fault):
    """The episode's config store points an endpoint key (``config:s3_endpoint_url`` or
    ``config:mlflow_tracking_uri``) at a wrong address (``url``; default: a closed local port): clients
    reading their config fail with the real connection error."""

    targets = ("config",)
    default_target = "config:s3_endpoint_url"
    category = "config"
    type: Literal["wrong_endpoint"] = "wrong_endpoint"
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")


class RotatedCredentialsFault(_Fault):
    """The credentials were rotated and the episode's config store holds a stale one
    (``config:s3_secret_access_key`` or ``config:s3_access_key_id``): clients fail with the object
    store's real authentication error (``SignatureDoesNotMatch`` / ``InvalidAccessKeyId``). On an api or
    postgres ``source:NAME``: the source's token or password is changed on the server and in the secret
    store; the agent's connector keeps the old one (HTTP 401 / login refused) until it refreshes its
    credentials. A rotation is not undone: on a source it takes no duration."""

    targets = ("config", "source")
    default_target = "config:s3_secret_access_key"
    category = "config"
    type: Literal["rotated_credentials"] = "rotated_credentials"


class DivergentLearningRateFault(_Fault):
    """Jobs started while active get a default learning rate of ``learning_rate`` (the training defaults
    went bad): an ``mlp`` job's loss diverges (inf, then NaN) and it fails with its log saying so. A job
    whose hyperparameters set the learning rate explicitly is left alone; algorithms without a learning
    rate are unaffected."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "task"
    type: Literal["divergent_learning_rate"] = "divergent_learning_rate"
    learning_rate: float = Field(default=1e6, gt=0)


class _LakeBatchFault(_Fault):
    targets = ("source",)
    category = "data"
    batch: int = Field(ge=0, description="The lake batch (0 = the first) the fault acts on.")


class LateBatchFault(_LakeBatchFault):
    """A lake source's ``batch`` arrives ``steps`` steps later than scheduled (``list_sources`` shows it
    overdue meanwhile). Recovery before it arrived puts its schedule back: it arrives at the next step."""

    type: Literal["late_batch"] = "late_batch"
    steps: int = Field(default=3, ge=1, le=10_000)


class MissingBatchFault(_LakeBatchFault):
    """A lake source's ``batch`` does not arrive while the fault is active (overdue in ``list_sources``,
    ``not_found`` when ingested); on recovery it arrives at the next step boundary."""

    type: Literal["missing_batch"] = "missing_batch"


class SchemaChangeFault(_LakeBatchFault):
    """A lake source's ``batch`` arrives with ``column`` renamed (to ``new_name``), dropped or retyped (to
    ``new_type``): ingesting it with the earlier batches fails with ``schema_mismatch``. Recovery before
    the batch arrived cancels the change; a batch that arrived changed stays as it arrived."""

    type: Literal["schema_change"] = "schema_change"
    change: Literal["rename", "drop", "retype"]
    column: str = Field(min_length=1)
    new_name: str | None = Field(default=None, pattern=_SOURCE_NAME_RE)
    new_type: Literal["string", "float", "int"] = "string"

    @model_validator(mode="after")
    def _new_name(self) -> SchemaChangeFault:
        if self.change == "rename" and self.new_name is None:
            raise ValueError("a schema_change rename needs new_name")
        if self.change != "rename" and self.new_name is not None:
            raise ValueError(f"new_name applies to a rename, not a {self.change}")
        return self


class DatabaseDownFault(_Fault):
    """The PostgreSQL server of a postgres ``source:NAME`` is stopped (a real outage: every connection is
    refused); recovery starts it again on the same data. The server is shared by the sandbox's
    episodes."""

    targets = ("source",)
    category = "data"
    type: Literal["database_down"] = "database_down"


class PoolShrinkFault(_Fault):
    """``cpus`` cores and ``memory_mb`` MiB are taken out of the episode's compute pool (lost capacity):
    running jobs go on, new jobs queue and reservations are refused while they do not fit; recovery gives
    the capacity back and queued jobs that fit start. Needs a pool with a capacity in that dimension."""

    targets = ("pool",)
    default_target = "pool"
    category = "resource"
    type: Literal["pool_shrink"] = "pool_shrink"
    cpus: float = Field(default=0.0, ge=0, le=1024)
    memory_mb: int = Field(default=0, ge=0, le=16_777_216)

    @model_validator(mode="after")
    def _something(self) -> PoolShrinkFault:
        if self.cpus <= 0 and self.memory_mb <= 0:
            raise ValueError("pool_shrink takes cpus or memory_mb (or both) greater than 0")
        return self


FAULT_MODELS: tuple[type[_Fault], ...] = (
    KillServiceFault,
    FreezeServiceFault,
    RestartServiceFault,
    CrashLoopFault,
    MemoryLimitFault,
    CpuThrottleFault,
    DiskFullFault,
    LatencyFault,
    BandwidthFault,
    TimeoutFault,
    ResetPeerFault,
    EndpointDownFault,
    MissingColumnFault,
    JobTimeoutFault,
    CpuContentionFault,
    HttpErrorsFault,
    WrongEndpointFault,
    RotatedCredentialsFault,
    DivergentLearningRateFault,
    LateBatchFault,
    MissingBatchFault,
    SchemaChangeFault,
    DatabaseDownFault,
    PoolShrinkFault,
)
FAULT_TYPES: tuple[str, ...] = tuple(m.model_fields["type"].default for m in FAULT_MODELS)

BuiltinFault = Annotated[
    KillServiceFault
    | FreezeServiceFault
    | RestartServiceFault
    | CrashLoopFault
    | MemoryLimitFault
    | CpuThrottleFault
    | DiskFullFault
    | LatencyFault
    | BandwidthFault
    | TimeoutFault
    | ResetPeerFault
    | EndpointDownFault
    | MissingColumnFault
    | JobTimeoutFault
    | CpuContentionFault
    | HttpErrorsFault
    | WrongEndpointFault
    | RotatedCredentialsFault
    | DivergentLearningRateFault
    | LateBatchFault
    | MissingBatchFault
    | SchemaChangeFault
    | DatabaseDownFault
    | PoolShrinkFault,
    Field(discriminator="type"),
]


def plugin_fault_types() -> dict[str, type]:
    """Fault types added by installed plug-ins (entry points ``mlsandbox.faults``), by type name; a name
    that is also a built-in type is left out (logged)."""
    from mlsandbox.plugins import fault_types

    found = fault_types()
    clash = sorted(set(found) & set(FAULT_TYPES))
    if clash:
        _log.warning("plug-in fault types %s clash with built-in ones and are left out", clash)
    return {k: v for k, v in found.items() if k not in FAULT_TYPES}


class PluginFault(_Fault):
    """A fault type of a plug-in (:func:`plugin_fault_types`); its parameters sit next to ``type`` and
    are checked by the plug-in's ``Params`` model (:attr:`params`)."""

    model_config = ConfigDict(extra="allow")
    category = "plugin"
    type: str

    @model_validator(mode="after")
    def _known(self) -> PluginFault:
        cls = plugin_fault_types().get(self.type)
        if cls is None:
            known = ", ".join([*FAULT_TYPES, *plugin_fault_types()])
            raise ValueError(f"unknown fault type {self.type!r}; the catalog has: {known}")
        params = getattr(cls, "Params", None)
        extra = dict(self.model_extra or {})
        if params is not None:
            params.model_validate(extra)
        elif extra:
            raise ValueError(f"fault {self.type!r} takes no parameters, got {sorted(extra)}")
        return self

    @property
    def behaviour(self) -> builtins.type[Any]:
        """The plug-in's behaviour class."""
        return plugin_fault_types()[self.type]

    @property
    def params(self) -> Any:
        """The parameters as the plug-in's ``Params`` model (a dict when it has none)."""
        params = getattr(self.behaviour, "Params", None)
        extra = dict(self.model_extra or {})
        return params.model_validate(extra) if params is not None else extra

    # A plug-in's fault reads what the built-in ones declare as class variables from its behaviour class.

    @property
    def targets(self) -> tuple[TargetKind, ...]:  # type: ignore[override]
        return tuple(self.behaviour.targets)

    @property
    def default_target(self) -> str | None:  # type: ignore[override]
        return getattr(self.behaviour, "default_target", None)

    @property
    def instant(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.behaviour, "instant", False))


def _fault_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "plugin" if isinstance(value, PluginFault) or kind not in FAULT_TYPES else "builtin"


Fault = Annotated[
    Annotated[BuiltinFault, Tag("builtin")] | Annotated[PluginFault, Tag("plugin")],
    Discriminator(_fault_tag),
]
"""A built-in fault (by its ``type``) or a plug-in's."""


# ----------------------------------------------------------------------------------------------- entry


def parse_target(target: str) -> tuple[str, str]:
    """``"service:mlflow"`` -> ``("service", "mlflow")``; ``"jobs"`` -> ``("jobs", "")``."""
    kind, _, name = target.partition(":")
    return kind, name


class Perturbation(_Model):
    """One entry of a perturbation plan: what goes wrong, on what, when, for how long."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    when: When
    target: str | None = None
    """``service:NAME``, ``endpoint:NAME``, ``jobs``, ``bucket``, ``dataset:NAME``, ``config:KEY``,
    ``http:NAME``, ``source:NAME`` or ``pool``; faults with an obvious target (``jobs``, ``bucket``, a
    config key, ``pool``) default to it."""
    fault: Fault
    duration: Duration | None = None
    """None: the fault lasts until the agent mitigates it or the episode ends."""
    recovery: Literal["auto", "manual"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _known_fault(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fault = data.get("fault")
            kind = fault.get("type") if isinstance(fault, dict) else None
            if isinstance(fault, dict) and kind not in FAULT_TYPES and kind not in plugin_fault_types():
                known = ", ".join([*FAULT_TYPES, *plugin_fault_types()])
                raise ValueError(f"unknown fault type {kind!r}; the catalog has: {known}")
        return data

    @model_validator(mode="after")
    def _check(self) -> Perturbation:
        fault = self.fault
        kind_name = fault.type
        target = self.target if self.target is not None else fault.default_target
        if target is None:
            raise ValueError(
                f"fault {kind_name!r} needs a target: {' or '.join(k + ':NAME' for k in fault.targets)}"
            )
        if self.target is None:
            object.__setattr__(self, "target", target)
        kind, name = parse_target(target)
        if kind not in fault.targets:
            raise ValueError(
                f"fault {kind_name!r} acts on a {' or '.join(fault.targets)} target, got {target!r}"
            )
        allowed = {
            "service": SERVICES,
            "endpoint": ENDPOINTS,
            "config": ENDPOINT_CONFIG_KEYS
            if kind_name == "wrong_endpoint"
            else CREDENTIAL_CONFIG_KEYS
            if kind_name == "rotated_credentials"
            else CONFIG_KEYS,
        }.get(kind)
        if allowed is not None and name not in allowed:
            raise ValueError(f"unknown {kind} {name!r} in target {target!r}; {kind}s: {', '.join(allowed)}")
        if kind == "http" and not re.match(_HTTP_NAME_RE, name):
            raise ValueError(
                f"target {target!r} names no HTTP service: use http:NAME (lowercase letters, digits, . _ -)"
            )
        if kind == "dataset" and not name:
            raise ValueError(f"target {target!r} names no dataset: use dataset:NAME")
        if kind == "source" and not re.match(_SOURCE_NAME_RE, name):
            raise ValueError(
                f"target {target!r} names no source: use source:NAME (a source the scenario declares)"
            )
        if kind == "source" and kind_name == "rotated_credentials" and self.duration is not None:
            raise ValueError(
                "a rotation of a source's credentials is not undone: it takes no duration (use "
                "recovery: manual to end it when the agent refreshes its credentials)"
            )
        if kind in ("jobs", "bucket", "pool") and name:
            raise ValueError(f"target {target!r}: {kind!r} takes no name")
        if fault.instant and (self.duration is not None or self.recovery == "manual"):
            raise ValueError(f"fault {kind_name!r} is instant: it takes no duration and no manual recovery")
        if self.recovery == "manual" and self.duration is not None:
            raise ValueError("a manual recovery means no duration: the agent has to mitigate the fault")
        return self

    @property
    def target_kind(self) -> str:
        return parse_target(self.target or "")[0]

    @property
    def target_name(self) -> str:
        return parse_target(self.target or "")[1]


def check_plan(
    plan: list[Perturbation],
    *,
    max_steps: int,
    datasets: dict[str, list[str]],
    sources: Sequence[Any] = (),
    compute: Any = None,
) -> None:
    """Checks across a plan and its scenario; raises ValueError naming the entry.

    ``datasets`` maps each dataset name to its column names; ``sources`` are the scenario's source models
    (:mod:`mlsandbox.scenario.sources`); ``compute`` is its :class:`~mlsandbox.scenario.compute.ComputePool`.
    """
    names = [p.name for p in plan]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate perturbation names: {dupes}")
    max_seconds = max_steps * 60.0
    for p in plan:
        w = p.when
        where = f"perturbation {p.name!r}"
        if isinstance(w, AtStep) and w.at_step > max_steps:
            raise ValueError(f"{where} is at step {w.at_step}, which never comes (max_steps={max_steps})")
        if isinstance(w, Every | WithProbability) and w.start > max_steps:
            raise ValueError(f"{where} starts at step {w.start}, which never comes (max_steps={max_steps})")
        if isinstance(w, Every) and w.every >= max_steps and w.max_times not in (None, 1):
            raise ValueError(f"{where} repeats every {w.every} steps: it cannot happen {w.max_times} times")
        if isinstance(w, AtTime) and w.at_time > max_seconds:
            raise ValueError(
                f"{where} is at {w.at_time:g} s, later than any episode can last "
                f"({max_steps} steps of at most 60 s = {max_seconds:g} s)"
            )
        if p.duration is not None and p.duration.steps is not None and p.duration.steps > max_steps:
            raise ValueError(f"{where} lasts {p.duration.steps} steps, longer than max_steps={max_steps}")
        if p.target_kind == "dataset":
            if p.target_name not in datasets:
                raise ValueError(
                    f"{where} targets dataset {p.target_name!r}, which is not one of {sorted(datasets)}"
                )
            if isinstance(p.fault, MissingColumnFault):
                columns = datasets[p.target_name]
                if p.fault.column not in columns:
                    raise ValueError(
                        f"{where}: column {p.fault.column!r} is not a column of dataset "
                        f"{p.target_name!r} ({', '.join(columns)})"
                    )
        if p.target_kind == "source":
            _check_source_fault(p, where, {x.name: x for x in sources}, datasets, max_steps)
        if p.target_kind == "http":
            declared = {x.name: x for x in sources}
            src = declared.get(p.target_name)
            if src is not None and src.type != "api":
                raise ValueError(
                    f"{where} targets http:{p.target_name}, a {src.type} source: only api sources have an "
                    "HTTP fault hook"
                )
        if isinstance(p.fault, PoolShrinkFault):
            _check_pool_shrink(p.fault, where, compute)


# ------------------------------------------------------------------------------------ what a backend does


def capabilities_of(fault_type: str, target_kind: str) -> tuple[str, ...]:
    """The runtime capabilities a fault of ``fault_type`` on a ``target_kind`` target acts through, besides
    the backend's mechanism for the fault type itself (``fault:TYPE``): a source fault needs the data
    sources, a config fault the config store, a dataset fault the object store, a job fault the jobs, the
    others fault control; a pool shrink acts on the world's compute pool and a plug-in's fault on what it
    chooses, so they need nothing declared here."""
    if target_kind == "source":
        return ("sources",)
    if target_kind == "config":
        return ("config",)
    if target_kind == "dataset":
        return ("object_store",)
    if target_kind == "pool" or fault_type not in FAULT_TYPES:
        return ()
    if fault_type in ("job_timeout", "divergent_learning_rate"):
        return ("jobs",)
    return ("faults",)


def refusal(fault_type: str, target_kind: str, support: Support) -> str | None:
    """Why the backend described by ``support`` cannot make a ``fault_type`` fault on a ``target_kind``
    target real, or None when it can."""
    why = support.reason(f"fault:{fault_type}")
    if why is not None:
        return why
    for capability in capabilities_of(fault_type, target_kind):
        why = support.reason(capability)
        if why is not None:
            return f"it needs {capability}, which the {support.backend} backend refuses: {why}"
    return None


def unsupported_reason(entry: Perturbation, support: Support) -> str | None:
    """Why the backend described by ``support`` cannot make ``entry``'s fault real, or None."""
    return refusal(entry.fault.type, entry.target_kind, support)


_SOURCE_KINDS: dict[str, tuple[str, ...]] = {
    "late_batch": ("lake",),
    "missing_batch": ("lake",),
    "schema_change": ("lake",),
    "database_down": ("postgres",),
    "rotated_credentials": ("api", "postgres"),
}
"""Fault type -> the kinds of source it acts on."""


def _check_source_fault(
    p: Perturbation, where: str, sources: dict[str, Any], datasets: dict[str, list[str]], max_steps: int
) -> None:
    fault = p.fault
    src = sources.get(p.target_name)
    if src is None:
        known = ", ".join(sorted(sources)) or "the scenario declares none"
        raise ValueError(f"{where} targets source {p.target_name!r}, which is not a source ({known})")
    kinds = _SOURCE_KINDS[fault.type]
    if src.type not in kinds:
        raise ValueError(
            f"{where}: fault {fault.type!r} acts on {' or '.join(kinds)} sources; "
            f"{p.target_name!r} is a {src.type} source"
        )
    if not isinstance(fault, _LakeBatchFault):
        return
    if fault.batch >= src.batches:
        raise ValueError(
            f"{where}: source {src.name!r} has no batch {fault.batch} (batches 0..{src.batches - 1})"
        )
    arrival = src.arrivals[fault.batch]
    if arrival == 0:
        raise ValueError(
            f"{where}: batch {fault.batch} of {src.name!r} arrives when the episode starts (step 0), "
            "before any fault can act on it"
        )
    first = (
        p.when.at_step
        if isinstance(p.when, AtStep)
        else p.when.start
        if isinstance(p.when, Every | WithProbability)
        else None
    )
    if first is not None and first > arrival:
        raise ValueError(
            f"{where} fires at step {first} at the earliest, but batch {fault.batch} of {src.name!r} "
            f"has arrived at step {arrival} by then"
        )
    if isinstance(fault, LateBatchFault) and arrival + fault.steps > max_steps:
        raise ValueError(
            f"{where}: batch {fault.batch} of {src.name!r} would arrive at step {arrival + fault.steps}, "
            f"after max_steps={max_steps} (use missing_batch for a batch that never arrives)"
        )
    if isinstance(fault, SchemaChangeFault):
        declared = {c.batch for c in src.schema_changes}
        if fault.batch in declared:
            raise ValueError(
                f"{where}: batch {fault.batch} of {src.name!r} already has a schema change in the scenario"
            )
        columns = datasets.get(src.dataset, [])
        if fault.column not in columns:
            raise ValueError(
                f"{where}: column {fault.column!r} is not a feature column of {src.name!r} "
                f"({', '.join(columns)})"
            )
        if fault.new_name is not None and fault.new_name in columns:
            raise ValueError(f"{where}: new_name {fault.new_name!r} is already a column of {src.name!r}")


def _check_pool_shrink(fault: PoolShrinkFault, where: str, compute: Any) -> None:
    if compute is None:
        return
    for amount, capacity, what, field in (
        (fault.cpus, compute.capacity_cpus, "CPUs", "capacity_cpus"),
        (fault.memory_mb, compute.capacity_memory_mb, "MiB", "capacity_memory_mb"),
    ):
        if amount <= 0:
            continue
        if capacity is None:
            raise ValueError(
                f"{where} takes {amount:g} {what} from a pool without a limit on them (set "
                f"compute.{field}): nothing would change"
            )
        if amount > capacity:
            raise ValueError(f"{where} takes {amount:g} {what} from a pool of {capacity:g} {what}")
