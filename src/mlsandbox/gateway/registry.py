"""The action catalog, assembled from action packs.

An action pack is a named group of actions: pydantic models (light, imported to build tool schemas) and an
implementation module (imported only when a gateway runs an episode) that holds the handlers and optional
episode hooks. The built-in packs are listed in :mod:`mlsandbox.gateway.packs`; third-party packs are
found through the ``mlsandbox.action_packs`` entry-point group, each entry pointing at an
:class:`ActionPack` object. Every pack is loaded by name (:data:`BUILTIN_PACKS`, entry points): nothing in
the gateway core imports a pack.

The implementation module defines:

- ``HANDLERS: dict[str, Callable[[Gateway, Action], dict]]`` -- one per action type of the pack;
- optionally ``on_start(gw)`` (after the episode's bucket, experiment and datasets exist),
  ``on_step(gw)`` (at every step boundary, after due faults and before the action runs) and
  ``on_close(gw)`` (when the episode's resources are removed; must be idempotent);
- optionally the suppliers ``fault_behaviours(gw)`` (faults on targets whose mechanism lives in the pack,
  e.g. ``source:NAME``: ``(fault type, target kind) -> behaviour``), ``episode_services(gw)`` (services
  the pack runs for the episode besides the sandbox's: name -> an object with ``health()``,
  ``restart()`` and ``logs(tail)``) and ``telemetry(gw)`` (what the pack adds to each step's record in the
  audit log for people watching, never to an observation: key -> JSON-able value, see
  :mod:`mlsandbox.gateway.telemetry`).

A handler returns the observation's ``result`` (JSON-able) or raises
:class:`mlsandbox.errors.ActionError`, which becomes an error observation.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, Field, TypeAdapter

from mlsandbox.faultkinds import FAULT_TYPES
from mlsandbox.scenario.perturbations import plugin_fault_types

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "mlsandbox.action_packs"
BUILTIN_PACKS: tuple[str, ...] = (
    "mlsandbox.gateway.packs.core.actions:PACK",
    "mlsandbox.gateway.packs.compute.actions:PACK",
    "mlsandbox.gateway.packs.tracking.actions:PACK",
    "mlsandbox.gateway.packs.flows.actions:PACK",
    "mlsandbox.gateway.packs.sources.actions:PACK",
    "mlsandbox.gateway.packs.serving.actions:PACK",
    "mlsandbox.gateway.packs.config.actions:PACK",
)
"""The built-in packs, in catalog order (``module:attribute`` of each :class:`ActionPack`), loaded by name:
the gateway core imports no pack."""

Handler = Callable[["Gateway", Any], dict[str, Any]]
HOOKS = ("on_start", "on_step", "on_close")
SUPPLIERS = ("fault_behaviours", "episode_services", "telemetry")


class PackError(Exception):
    """A pack that cannot be loaded or clashes with another (a precise message, naming the pack)."""


@dataclass(frozen=True)
class ActionPack:
    """A named group of actions; see the module docstring."""

    name: str
    models: tuple[type[BaseModel], ...]
    implementation: str
    """Dotted module path of the handlers and hooks."""
    description: str = ""
    read_only: frozenset[str] = field(default_factory=frozenset)
    """Action types that change nothing (MCP read-only hint)."""
    destructive: frozenset[str] = field(default_factory=frozenset)
    """Action types that may destroy or interrupt something (MCP destructive hint)."""
    capabilities: Mapping[str, str] = field(default_factory=dict)
    """Action type -> the Runtime capability it needs, as a key of
    :class:`~mlsandbox.backends.protocols.Support` (``serving``, ``serving.scale``,
    ``environments.build``): a backend that refuses it answers the action with an ``unsupported`` error,
    and ``mlsandbox tools --backend NAME`` marks it. An action absent here needs only what every backend
    has (the world's own services)."""
    addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Action type -> the fault kinds it addresses (it looks at or acts on what such a fault breaks: the
    first one of them after an injection is the fault's time to detect). The perturbation engine is given
    these declarations; each fault's behaviour then checks the action is about its target."""
    origin: str = "builtin"

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(str(m.model_fields["type"].default) for m in self.models)

    def module(self) -> ModuleType:
        try:
            return importlib.import_module(self.implementation)
        except ImportError as e:
            raise PackError(f"action pack {self.name!r}: cannot import {self.implementation!r}: {e}") from e


@dataclass(frozen=True)
class Catalog:
    packs: tuple[ActionPack, ...]
    models: tuple[type[BaseModel], ...]
    types: tuple[str, ...]
    adapter: TypeAdapter[Any]

    def pack_of(self, action_type: str) -> ActionPack:
        for p in self.packs:
            if action_type in p.types:
                return p
        raise KeyError(action_type)

    @property
    def read_only(self) -> frozenset[str]:
        return frozenset().union(*(p.read_only for p in self.packs))

    @property
    def destructive(self) -> frozenset[str]:
        return frozenset().union(*(p.destructive for p in self.packs))

    def capability(self, action_type: str) -> str | None:
        """The Runtime capability ``action_type`` needs (None: none a backend may refuse)."""
        return self.pack_of(action_type).capabilities.get(action_type)

    def describe(self) -> list[dict[str, Any]]:
        """Every action with its description and the JSON Schema of its parameters."""
        return [
            {
                "type": str(m.model_fields["type"].default),
                "description": " ".join((m.__doc__ or "").split()),
                "parameters": m.model_json_schema(),
            }
            for m in self.models
        ]


def _load_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _check_pack(pack: Any, where: str) -> ActionPack:
    if not isinstance(pack, ActionPack):
        raise PackError(f"{where}: expected an ActionPack, got {type(pack).__name__}")
    for m in pack.models:
        f = m.model_fields.get("type")
        if f is None or not isinstance(f.default, str):
            raise PackError(f"action pack {pack.name!r}: model {m.__name__} has no literal 'type' field")
    unknown = sorted(set(pack.capabilities) - set(pack.types))
    if unknown:
        raise PackError(
            f"action pack {pack.name!r}: capabilities name actions it lacks: {', '.join(unknown)}"
        )
    unknown = sorted(set(pack.addresses) - set(pack.types))
    if unknown:
        raise PackError(f"action pack {pack.name!r}: addresses name actions it lacks: {', '.join(unknown)}")
    unknown = sorted({k for named in pack.addresses.values() for k in named} - set(FAULT_TYPES))
    if unknown:  # a plug-in's fault kinds, or none
        unknown = sorted(set(unknown) - set(plugin_fault_types()))
    if unknown:
        raise PackError(
            f"action pack {pack.name!r}: addresses name unknown fault kinds: {', '.join(unknown)}"
        )
    return pack


PLUGIN_ERRORS: list[str] = []
"""Why plug-in packs were left out of this process's catalog (``mlsandbox plugins`` shows them too)."""


def discover_packs(*, plugins: bool = True) -> tuple[ActionPack, ...]:
    """The built-in packs, then the installed plug-in packs (sorted by entry-point name).

    A broken built-in pack is an error. A plug-in pack that does not load, is not an ActionPack or
    clashes with a pack already in the catalog is left out with a logged warning (kept in
    :data:`PLUGIN_ERRORS`): one broken plug-in does not take the sandbox down.
    """
    packs = [_check_pack(_load_ref(ref), ref) for ref in BUILTIN_PACKS]
    if plugins:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            try:
                try:
                    pack = _check_pack(ep.load(), f"entry point {ep.name!r} ({ep.value})")
                except PackError:
                    raise
                except Exception as e:
                    raise PackError(f"plug-in {ep.name!r} ({ep.value}) cannot be loaded: {e}") from e
                dist = getattr(ep, "dist", None)
                origin = f"plugin:{dist.name}" if dist is not None else f"plugin:{ep.name}"
                candidate = ActionPack(**{**pack.__dict__, "origin": origin})
                build_catalog((*packs, candidate))  # clashes with what is already there
            except PackError as e:
                msg = f"action pack plug-in {ep.name!r} left out: {e}"
                log.warning(msg)
                PLUGIN_ERRORS.append(msg)
                continue
            packs.append(candidate)
    return tuple(packs)


def build_catalog(packs: tuple[ActionPack, ...]) -> Catalog:
    seen: dict[str, str] = {}
    names: set[str] = set()
    models: list[type[BaseModel]] = []
    for p in packs:
        if p.name in names:
            raise PackError(f"two action packs are named {p.name!r}")
        names.add(p.name)
        for t, m in zip(p.types, p.models, strict=True):
            if t in seen:
                raise PackError(
                    f"action type {t!r} of pack {p.name!r} is already defined by pack {seen[t]!r}"
                )
            seen[t] = p.name
            models.append(m)
    union: Any = Union[tuple(models)] if len(models) > 1 else models[0]  # noqa: UP007
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[union, Field(discriminator="type")])
    return Catalog(tuple(packs), tuple(models), tuple(seen), adapter)


@functools.cache
def get_catalog() -> Catalog:
    """The catalog of this process (built-in packs and installed plug-ins), built once."""
    return build_catalog(discover_packs())


@dataclass
class PackRuntime:
    """The loaded implementation of every pack, for one gateway."""

    handlers: dict[str, Handler]
    hooks: dict[str, list[tuple[str, Callable[[Gateway], None]]]]
    suppliers: dict[str, list[tuple[str, Callable[[Gateway], dict[Any, Any]]]]] = field(default_factory=dict)
    """Each of :data:`SUPPLIERS` -> the packs that define it, in catalog order."""

    def supplied(self, what: str, gw: Gateway) -> dict[Any, Any]:
        """What every pack supplies of ``what`` (one of :data:`SUPPLIERS`) for ``gw``, merged."""
        out: dict[Any, Any] = {}
        for _, supply in self.suppliers.get(what, []):
            out.update(supply(gw))
        return out

    @classmethod
    def load(cls, catalog: Catalog) -> PackRuntime:
        handlers: dict[str, Handler] = {}
        hooks: dict[str, list[tuple[str, Callable[[Gateway], None]]]] = {h: [] for h in HOOKS}
        suppliers: dict[str, list[tuple[str, Callable[[Gateway], dict[Any, Any]]]]] = {
            s: [] for s in SUPPLIERS
        }
        for p in catalog.packs:
            mod = p.module()
            table = getattr(mod, "HANDLERS", None)
            if not isinstance(table, dict):
                raise PackError(f"action pack {p.name!r}: {p.implementation} has no HANDLERS dict")
            missing = set(p.types) - set(table)
            if missing:
                raise PackError(f"action pack {p.name!r}: no handler for {', '.join(sorted(missing))}")
            for t in p.types:
                handlers[t] = table[t]
            for hook in hooks:
                fn = getattr(mod, hook, None)
                if fn is not None:
                    hooks[hook].append((p.name, fn))
            for what in suppliers:
                supply = getattr(mod, what, None)
                if supply is not None:
                    suppliers[what].append((p.name, supply))
        return cls(handlers, hooks, suppliers)
