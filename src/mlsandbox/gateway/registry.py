"""The action catalog, assembled from action packs.

An action pack is a named group of actions, each declared once as a :class:`PackAction`: its pydantic
model (light, imported to build tool schemas), the Runtime capability it needs, its MCP hints and the name
of its handler in the pack's implementation module (imported only when a gateway runs an episode), which
also holds the pack's optional episode hooks and suppliers. The built-in packs are listed in
:mod:`mlsandbox.gateway.packs`; third-party packs are found through the ``mlsandbox.action_packs``
entry-point group, each entry pointing at an :class:`ActionPack` object. Every pack is loaded by name
(:data:`BUILTIN_PACKS`, entry points): nothing in the gateway core imports a pack.

The implementation module defines, each taking the episode's
:class:`~mlsandbox.gateway.context.EpisodeContext` (``ctx``):

- one handler per action, ``handle_<type>(ctx, action) -> dict`` (or the name a :class:`PackAction`
  gives as ``handler``);
- optionally ``on_start(ctx)`` (after the episode's bucket, experiment and datasets exist),
  ``on_step(ctx)`` (at every step boundary, after due faults and before the action runs),
  ``on_end(ctx)`` (when the episode is over, before it is graded: what the grader reads is collected
  then) and ``on_close(ctx)`` (when the episode's resources are removed; must be idempotent);
- optionally the suppliers ``fault_behaviours(ctx)`` (faults on targets whose mechanism lives in the
  pack, e.g. ``source:NAME``: ``(fault type, target kind) -> behaviour``), ``episode_services(ctx)``
  (services the pack runs for the episode besides the sandbox's: name -> an
  :class:`~mlsandbox.gateway.context.EpisodeService`) and ``telemetry(ctx)`` (what the pack adds to each
  step's record in the audit log for people watching, never to an observation: key -> JSON-able value,
  see :mod:`mlsandbox.gateway.telemetry`).

A handler returns the observation's ``result`` (JSON-able) or raises
:class:`mlsandbox.errors.ActionError`, which becomes an error observation.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import EntryPoint
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, Field, TypeAdapter

from mlsandbox.faultkinds import FAULT_TYPES
from mlsandbox.plugins import entry_points_of, load_plugin, plugin_origin
from mlsandbox.scenario.perturbations import plugin_fault_types

if TYPE_CHECKING:
    from mlsandbox.gateway.context import EpisodeContext, Handler, Hook, Supplier

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
    "mlsandbox.gateway.packs.workspace.actions:PACK",
)
"""The built-in packs, in catalog order (``module:attribute`` of each :class:`ActionPack`), loaded by name:
the gateway core imports no pack."""

HOOKS = ("on_start", "on_step", "on_end", "on_close")
SUPPLIERS = ("fault_behaviours", "episode_services", "telemetry")


class PackError(Exception):
    """A pack that cannot be loaded or clashes with another (a precise message, naming the pack)."""


def action_type(model: type[BaseModel]) -> str:
    """An action model's ``type`` (the literal default of its ``type`` field)."""
    return str(model.model_fields["type"].default)


@dataclass(frozen=True)
class PackAction:
    """One action of a pack, declared once: everything the catalog, the tool schemas and the gateway
    know of it besides its model's fields and docstring."""

    model: type[BaseModel]
    """The action's pydantic model (a subclass of :class:`~mlsandbox.gateway.actions.ActionModel` with a
    literal ``type`` field); its docstring is what the agent reads about the action."""
    capability: str | None = None
    """The Runtime capability the action needs, as a key of
    :class:`~mlsandbox.backends.protocols.Support` (``serving``, ``serving.scale``,
    ``environments.build``): a backend that refuses it answers the action with an ``unsupported`` error,
    and ``mlsandbox tools --backend NAME`` marks it. None: it needs only what every backend has (the
    world's own services)."""
    read_only: bool = False
    """The action changes nothing (MCP read-only hint)."""
    destructive: bool = False
    """The action may destroy or interrupt something (MCP destructive hint)."""
    handler: str | None = None
    """The name of its handler in the pack's implementation module (default ``handle_<type>``)."""
    addresses: tuple[str, ...] = ()
    """The fault kinds the action addresses (it looks at or acts on what such a fault breaks: the first
    one of them after an injection is the fault's time to detect). The perturbation engine is given these
    declarations; each fault's behaviour then checks the action is about its target."""

    @property
    def type(self) -> str:
        return action_type(self.model)

    @property
    def handler_name(self) -> str:
        return self.handler or f"handle_{self.type}"


@dataclass(frozen=True)
class ActionPack:
    """A named group of actions; see the module docstring."""

    name: str
    actions: tuple[PackAction, ...]
    """The pack's actions, in catalog order (one declaration each)."""
    implementation: str
    """Dotted module path of the handlers, hooks and suppliers."""
    description: str = ""
    origin: str = "builtin"

    @property
    def models(self) -> tuple[type[BaseModel], ...]:
        return tuple(a.model for a in self.actions)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(a.type for a in self.actions)

    @property
    def read_only(self) -> frozenset[str]:
        """Action types that change nothing (MCP read-only hint)."""
        return frozenset(a.type for a in self.actions if a.read_only)

    @property
    def destructive(self) -> frozenset[str]:
        """Action types that may destroy or interrupt something (MCP destructive hint)."""
        return frozenset(a.type for a in self.actions if a.destructive)

    @property
    def capabilities(self) -> Mapping[str, str]:
        """Action type -> the Runtime capability it needs (actions that need none are absent)."""
        return {a.type: a.capability for a in self.actions if a.capability is not None}

    @property
    def addresses(self) -> Mapping[str, tuple[str, ...]]:
        """Action type -> the fault kinds it addresses (actions that address none are absent)."""
        return {a.type: a.addresses for a in self.actions if a.addresses}

    def action(self, action_type: str) -> PackAction:
        for a in self.actions:
            if a.type == action_type:
                return a
        raise KeyError(action_type)

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
        return self.pack_of(action_type).action(action_type).capability

    def describe(self) -> list[dict[str, Any]]:
        """Every action with its description and the JSON Schema of its parameters."""
        return [
            {
                "type": action_type(m),
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
    for a in pack.actions:
        if not isinstance(a, PackAction):
            raise PackError(f"action pack {pack.name!r}: expected PackAction declarations, got {a!r}")
        m = a.model
        f = m.model_fields.get("type") if isinstance(m, type) and issubclass(m, BaseModel) else None
        if f is None or not isinstance(f.default, str):
            name = getattr(m, "__name__", repr(m))
            raise PackError(f"action pack {pack.name!r}: model {name} has no literal 'type' field")
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
        for ep in entry_points_of(ENTRY_POINT_GROUP):

            def check(obj: Any, ep: EntryPoint = ep) -> ActionPack:
                pack = _check_pack(obj, f"entry point {ep.name!r}")
                candidate = replace(pack, origin=plugin_origin(ep))
                build_catalog((*packs, candidate))  # clashes with what is already there
                return candidate

            record = load_plugin(ep, check, kind="action pack", refused=(PackError,))
            if record.obj is None:
                PLUGIN_ERRORS.append(record.detail)
                continue
            packs.append(record.obj)
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
    hooks: dict[str, list[tuple[str, Hook]]]
    suppliers: dict[str, list[tuple[str, Supplier]]] = field(default_factory=dict)
    """Each of :data:`SUPPLIERS` -> the packs that define it, in catalog order."""

    def supplied(self, what: str, ctx: EpisodeContext) -> dict[Any, Any]:
        """What every pack supplies of ``what`` (one of :data:`SUPPLIERS`) for the episode, merged."""
        out: dict[Any, Any] = {}
        for _, supply in self.suppliers.get(what, []):
            out.update(supply(ctx))
        return out

    @classmethod
    def load(cls, catalog: Catalog) -> PackRuntime:
        handlers: dict[str, Handler] = {}
        hooks: dict[str, list[tuple[str, Hook]]] = {h: [] for h in HOOKS}
        suppliers: dict[str, list[tuple[str, Supplier]]] = {s: [] for s in SUPPLIERS}
        for p in catalog.packs:
            mod = p.module()
            missing = [a.handler_name for a in p.actions if not callable(getattr(mod, a.handler_name, None))]
            if missing:
                raise PackError(
                    f"action pack {p.name!r}: {p.implementation} has no handler {', '.join(missing)}"
                )
            for a in p.actions:
                handlers[a.type] = getattr(mod, a.handler_name)
            for hook in hooks:
                fn = getattr(mod, hook, None)
                if fn is not None:
                    hooks[hook].append((p.name, fn))
            for what in suppliers:
                supply = getattr(mod, what, None)
                if supply is not None:
                    suppliers[what].append((p.name, supply))
        return cls(handlers, hooks, suppliers)
