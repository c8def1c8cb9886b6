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
:mod:`mlsandbox.faults` gives them effect. The faults' parameters models are declared with their fault
kinds (:mod:`mlsandbox.faultkinds`). Every model forbids unknown fields; every fault
has a ``type``.
Faults on a data source (``source:NAME``, a source the scenario declares under ``sources:``) act through
mechanisms of the layer above the engine: the gateway's sources pack supplies them to the engine
(:data:`SUPPLIED_TARGET_KINDS`).
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from mlsandbox.faultkinds import FAULT_MODELS, FAULT_TYPES, SOURCE_KINDS, FaultParams, TargetKind
from mlsandbox.faultkinds.base import SOURCE_NAME_RE
from mlsandbox.faultkinds.data import LateBatchFault, SchemaChangeFault, _LakeBatchFault
from mlsandbox.faultkinds.resources import PoolShrinkFault
from mlsandbox.faultkinds.task import MissingColumnFault

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


CONDITIONS: tuple[str, ...] = (
    "job_submitted",
    "job_running",
    "job_succeeded",
    "model_registered",
    "model_served",
)
"""Conditions on episode state a ``when: {condition: ...}`` trigger may wait for."""
SUPPLIED_TARGET_KINDS: frozenset[str] = frozenset({"source"})
"""Target kinds whose fault mechanisms live above the fault engine (the gateway supplies them when it
makes the engine); a plan using them runs only on an engine given those mechanisms."""
_HTTP_NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_log = logging.getLogger(__name__)


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

    condition: Literal["job_submitted", "job_running", "job_succeeded", "model_registered", "model_served"]


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


BuiltinFault: TypeAlias = FaultParams
"""A built-in fault: statically any parameters model; at run time the union of every declared kind's
(:data:`~mlsandbox.faultkinds.FAULT_MODELS`), told apart by ``type``."""
if not TYPE_CHECKING:
    BuiltinFault = Annotated[Union[FAULT_MODELS], Field(discriminator="type")]  # noqa: UP007


def plugin_fault_types() -> dict[str, type]:
    """Fault types added by installed plug-ins (entry points ``mlsandbox.faults``), by type name; a name
    that is also a built-in type is left out (logged)."""
    from mlsandbox.plugins import fault_types

    found = fault_types()
    clash = sorted(set(found) & set(FAULT_TYPES))
    if clash:
        _log.warning("plug-in fault types %s clash with built-in ones and are left out", clash)
    return {k: v for k, v in found.items() if k not in FAULT_TYPES}


class PluginFault(FaultParams):
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
        if kind == "source" and not re.match(SOURCE_NAME_RE, name):
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


def _check_source_fault(
    p: Perturbation, where: str, sources: dict[str, Any], datasets: dict[str, list[str]], max_steps: int
) -> None:
    fault = p.fault
    src = sources.get(p.target_name)
    if src is None:
        known = ", ".join(sorted(sources)) or "the scenario declares none"
        raise ValueError(f"{where} targets source {p.target_name!r}, which is not a source ({known})")
    kinds = SOURCE_KINDS[fault.type]
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
