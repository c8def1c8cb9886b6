"""What a fault kind is made of: its parameters model (:class:`FaultParams`, the pydantic model of a plan's
``fault:``) and its declaration (:class:`FaultKind`): the symptom, the mechanism of each backend, its
behaviour in the fault engine, and what the Runtime boundary needs to know of it (the capabilities it acts
through, the Toxiproxy toxic of a network fault, the kinds of data source it acts on)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

TargetKind = Literal["service", "endpoint", "jobs", "bucket", "dataset", "config", "http", "source", "pool"]
SOURCE_NAME_RE = r"^[a-z][a-z0-9_]{0,39}$"
BACKENDS: tuple[str, ...] = ("local", "kube", "sim")
"""The built-in backends every declaration gives a mechanism (or a refusal) for."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultParams(_Model):
    """The base of every fault's parameters model: a ``type`` literal (the fault kind's name), its
    parameters, and what a plan entry may do with it (class variables)."""

    targets: ClassVar[tuple[TargetKind, ...]] = ()
    """Target kinds this fault acts on."""
    default_target: ClassVar[str | None] = None
    category: ClassVar[str] = ""
    instant: ClassVar[bool] = False
    """An instant fault (a restart) has no duration: it happens and is over."""
    if TYPE_CHECKING:  # each model declares it (a literal), after the fields of its bases
        type: str


@dataclass(frozen=True)
class Mechanism:
    """How one backend makes a fault kind real: ``via`` names the mechanism (``signal``, ``cgroup``,
    ``toxiproxy``, ``native``, ``chaos-mesh``, ``simulated``, ...), ``detail`` what it does. Whether it
    is there on a given machine or cluster is the backend's to say (``FaultControl.unavailable``)."""

    via: str
    detail: str = ""
    qdiscs: tuple[str, ...] = ()
    """Queueing disciplines of the nodes' kernel the mechanism needs (``netem``, ``tbf``): a cluster
    whose nodes say they have none of one refuses the fault kind (``FaultControl.unavailable``)."""


@dataclass(frozen=True)
class Refused:
    """A backend that cannot make the fault kind real whatever it has, and why (its ``Unsupported``
    reason for ``fault:TYPE``)."""

    reason: str


@dataclass(frozen=True)
class NetworkEffect:
    """What a network fault does to a client-facing endpoint, in Toxiproxy's terms: the toxic ``toxic``,
    each of its ``attributes`` taken from a parameter of the fault (toxic attribute -> parameter), or,
    without a toxic, the endpoint's proxy disabled (connections refused)."""

    toxic: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultKind:
    """The one declaration of a fault kind; every table about fault kinds is derived from these."""

    params: type[FaultParams]
    """The parameters model (its ``type`` literal is the kind's name; its class variables say the target
    kinds, the default target, the category; its docstring is the catalog's description)."""
    symptom: str
    """What an engineer observes while the fault is active."""
    behaviour: str
    """The name of its behaviour class in :mod:`mlsandbox.faults.behaviours` (inject, recover, effect on
    jobs, how an action addresses it, when its symptom is gone)."""
    backends: Mapping[str, Mechanism | Refused]
    """Each built-in backend (:data:`BACKENDS`) -> its mechanism, or its refusal."""
    needs: tuple[str, ...] = ("faults",)
    """The Runtime capabilities (keys of ``Support``) its mechanism acts through, besides its own
    ``fault:TYPE``, on targets that bring none of their own (:data:`TARGET_CAPABILITIES`)."""
    network: NetworkEffect | None = None
    """A network fault: what it does through ``FaultControl.network``."""
    sources: tuple[str, ...] = ()
    """The kinds of data source (``lake``, ``api``, ``postgres``) it acts on, when it targets
    ``source:NAME``."""

    def __post_init__(self) -> None:
        missing = [b for b in BACKENDS if b not in self.backends]
        if missing:
            raise ValueError(f"fault kind {self.name!r} declares no mechanism for {', '.join(missing)}")
        if ("source" in self.params.targets) != bool(self.sources):
            raise ValueError(f"fault kind {self.name!r}: the kinds of source go with a source target")

    @property
    def name(self) -> str:
        name = self.params.model_fields["type"].default
        assert isinstance(name, str), f"{self.params.__name__} has no literal type"
        return name


TARGET_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "source": ("sources",),
    "config": ("config",),
    "dataset": ("object_store",),
    "pool": (),
}
"""Target kinds reached through a Runtime capability of their own (a fault on one needs that instead of
its kind's :attr:`FaultKind.needs`); a pool is the world's own, needing nothing of a backend."""
