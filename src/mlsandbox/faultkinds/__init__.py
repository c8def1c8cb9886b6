"""The fault kinds: one :class:`~mlsandbox.faultkinds.base.FaultKind` declaration per fault, grouped by
what it acts on (one module per group), and every table about fault kinds derived from them.

Every layer reads what it needs here: the scenario layer the parameters models (its plans' ``fault:``)
and the kinds of source, the backends the Toxiproxy toxics and their own mechanisms or refusals, the
fault engine each kind's behaviour, the catalog what a backend must support for a fault. A fault kind
is added by writing its parameters model and its declaration in its group's module, listing it in
:data:`KINDS` (the catalog order), and giving each backend its mechanism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsandbox.faultkinds import config, data, network, resources, services, task
from mlsandbox.faultkinds.base import (
    BACKENDS,
    TARGET_CAPABILITIES,
    FaultKind,
    FaultParams,
    Mechanism,
    NetworkEffect,
    Refused,
    TargetKind,
)

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Support

KINDS: tuple[FaultKind, ...] = (
    services.KILL_SERVICE,
    services.FREEZE_SERVICE,
    services.RESTART_SERVICE,
    services.CRASH_LOOP,
    resources.MEMORY_LIMIT,
    resources.CPU_THROTTLE,
    resources.DISK_FULL,
    network.LATENCY,
    network.BANDWIDTH,
    network.TIMEOUT,
    network.RESET_PEER,
    network.ENDPOINT_DOWN,
    task.MISSING_COLUMN,
    task.JOB_TIMEOUT,
    resources.CPU_CONTENTION,
    services.HTTP_ERRORS,
    config.WRONG_ENDPOINT,
    config.ROTATED_CREDENTIALS,
    task.DIVERGENT_LEARNING_RATE,
    data.LATE_BATCH,
    data.MISSING_BATCH,
    data.SCHEMA_CHANGE,
    data.DATABASE_DOWN,
    resources.POOL_SHRINK,
)
"""Every built-in fault kind, in catalog order."""

BY_NAME: dict[str, FaultKind] = {k.name: k for k in KINDS}
assert len(BY_NAME) == len(KINDS), "two fault kinds share a name"
FAULT_MODELS: tuple[type[FaultParams], ...] = tuple(k.params for k in KINDS)
"""The parameters model of each fault kind (catalog order)."""
FAULT_TYPES: tuple[str, ...] = tuple(BY_NAME)
"""The name (``type``) of each fault kind (catalog order)."""

NETWORK_FAULTS: tuple[str, ...] = tuple(k.name for k in KINDS if k.network is not None)
"""The fault kinds acting through ``FaultControl.network``."""
TOXICS: dict[str, NetworkEffect] = {
    k.name: k.network for k in KINDS if k.network is not None and k.network.toxic is not None
}
"""Network fault kind -> its Toxiproxy toxic (the kinds that disable the endpoint's proxy have none)."""
TOXIC_TYPES: tuple[str, ...] = tuple(dict.fromkeys(e.toxic for e in TOXICS.values() if e.toxic))
"""The Toxiproxy toxic types the fault kinds use: what a backend's network must make real."""
SOURCE_KINDS: dict[str, tuple[str, ...]] = {k.name: k.sources for k in KINDS if k.sources}
"""Fault kind -> the kinds of source it acts on (the kinds that target ``source:NAME``)."""


def refused_on(backend: str) -> dict[str, str]:
    """Fault kind -> why ``backend`` refuses it whatever it has (its declared refusals)."""
    return {k.name: m.reason for k in KINDS if isinstance(m := k.backends.get(backend), Refused)}


def made_by(backend: str, via: str) -> tuple[str, ...]:
    """The fault kinds ``backend`` makes real through the mechanism ``via`` (catalog order)."""
    return tuple(
        k.name for k in KINDS if isinstance(m := k.backends.get(backend), Mechanism) and m.via == via
    )


def qdiscs_needed(backend: str) -> dict[str, tuple[str, ...]]:
    """Fault kind -> the kernel's queueing disciplines ``backend``'s mechanism for it needs (the kinds
    that need any)."""
    return {
        k.name: m.qdiscs for k in KINDS if isinstance(m := k.backends.get(backend), Mechanism) and m.qdiscs
    }


def capabilities_of(fault_type: str, target_kind: str) -> tuple[str, ...]:
    """The runtime capabilities a fault of ``fault_type`` on a ``target_kind`` target acts through, besides
    the backend's mechanism for the fault type itself (``fault:TYPE``): a target reached through a
    capability of its own needs that (:data:`TARGET_CAPABILITIES`: the data sources, the config store,
    the object store; a pool needs nothing of a backend), the others what the kind declares it needs
    (:attr:`FaultKind.needs`); a plug-in's fault acts on what it chooses, so it needs nothing declared
    here."""
    if target_kind in TARGET_CAPABILITIES:
        return TARGET_CAPABILITIES[target_kind]
    kind = BY_NAME.get(fault_type)
    return () if kind is None else kind.needs


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


__all__ = [
    "BACKENDS",
    "BY_NAME",
    "FAULT_MODELS",
    "FAULT_TYPES",
    "KINDS",
    "NETWORK_FAULTS",
    "SOURCE_KINDS",
    "TARGET_CAPABILITIES",
    "TOXICS",
    "TOXIC_TYPES",
    "FaultKind",
    "FaultParams",
    "Mechanism",
    "NetworkEffect",
    "Refused",
    "TargetKind",
    "capabilities_of",
    "made_by",
    "qdiscs_needed",
    "refusal",
    "refused_on",
]
