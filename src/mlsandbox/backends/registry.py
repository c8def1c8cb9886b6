"""Backends as plug-ins: the ``mlsandbox.backends`` entry-point group.

Each entry point names a :class:`~mlsandbox.backends.protocols.BackendType`: the backend's name (the
entry point's name must be the same), a description, its typed config model (deriving
:class:`~mlsandbox.backends.protocols.BackendConfig`, with ``type: Literal["<name>"]``) and a factory that
makes the backend from a config without starting anything. ``local``, ``kube`` and ``sim`` are declared by this
package the same way (``pyproject.toml``); :data:`BUILTIN_BACKENDS` names them too, so a checkout whose
installed metadata is older than its code still finds them.

Every interface (the Gymnasium env, the HTTP gateway, MCP, the command line) gets its backend through
:func:`get_backend`. A plug-in that does not load, or is not a ``BackendType``, or clashes with a backend
already registered is left out and reported (:func:`broken_backends`, ``mlsandbox plugins``): one broken
plug-in never takes the others down (the discovery of :mod:`mlsandbox.plugins`; a plug-in is loaded when
first asked for). A built-in backend that does not load is an error.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mlsandbox import paths
from mlsandbox.errors import ConfigError
from mlsandbox.plugins import PluginError, PluginRecord, entry_points_of, left_out, load_plugin, plugin_origin

if TYPE_CHECKING:  # the protocols load with the first backend: listing names stays light (CLI start-up)
    from mlsandbox.backends.protocols import Backend, BackendConfig, BackendType, SandboxListing

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "mlsandbox.backends"
BUILTIN_BACKENDS: dict[str, str] = {
    "local": "mlsandbox.backends.local.backend:BACKEND_TYPE",
    "kube": "mlsandbox.backends.kube.backend:BACKEND_TYPE",
    "sim": "mlsandbox.backends.sim:BACKEND_TYPE",
}
"""The backends this package ships (``name -> module:attribute``), in the order they are listed."""
DEFAULT_BACKEND = "local"
_KIND = "backend"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class BackendPluginError(PluginError):
    """A backend plug-in that cannot be used (the message says why)."""


@dataclass(frozen=True)
class BrokenBackend:
    """A backend plug-in left out of the registry, and why."""

    name: str
    value: str
    origin: str
    error: str

    @classmethod
    def of(cls, record: PluginRecord[Any], ep: EntryPoint) -> BrokenBackend:
        return cls(ep.name, ep.value, plugin_origin(ep), record.detail)


def _plugin_entry_points() -> list[EntryPoint]:
    """The group's entry points of other distributions (this package's own are :data:`BUILTIN_BACKENDS`)."""
    return entry_points_of(ENTRY_POINT_GROUP, own=False)


def _check(obj: Any, name: str) -> BackendType:
    from mlsandbox.backends.protocols import BackendConfig, BackendType

    if not isinstance(obj, BackendType):
        raise BackendPluginError(f"expected a BackendType, got {type(obj).__name__}")
    if obj.name != name:
        raise BackendPluginError(f"the entry point is named {name!r} but its backend {obj.name!r}")
    if not (isinstance(obj.config, type) and issubclass(obj.config, BackendConfig)):
        raise BackendPluginError("its config must be a BackendConfig subclass")
    literal = obj.config.model_fields["type"].default
    if literal != name:
        raise BackendPluginError(
            f"its config's type must default to {name!r} (type: Literal[{name!r}]), got {literal!r}"
        )
    if not callable(obj.create):
        raise BackendPluginError("its create is not callable")
    return obj


def _load_builtin(name: str) -> BackendType:
    ref = BUILTIN_BACKENDS[name]
    module, _, attr = ref.partition(":")
    try:
        return _check(getattr(importlib.import_module(module), attr), name)
    except BackendPluginError as e:
        raise BackendPluginError(f"built-in backend {name!r} ({ref}): {e}") from None


@functools.cache
def _plugins() -> tuple[dict[str, EntryPoint], tuple[BrokenBackend, ...]]:
    """The plug-in entry points by name (not loaded), and those refused by their name alone."""
    usable: dict[str, EntryPoint] = {}
    broken: list[BrokenBackend] = []
    for ep in _plugin_entry_points():
        why = None
        if not _NAME_RE.match(ep.name):
            why = f"the entry point's name must match {_NAME_RE.pattern}"
        elif ep.name in BUILTIN_BACKENDS or ep.name in usable:
            why = f"a backend named {ep.name!r} is already registered"
        if why is not None:
            broken.append(BrokenBackend.of(left_out(ep, why, kind=_KIND), ep))
            continue
        usable[ep.name] = ep
    return usable, tuple(broken)


_LOAD_ERRORS: dict[str, BrokenBackend] = {}


@functools.cache
def _load_plugin(name: str) -> BackendType | None:
    ep = _plugins()[0][name]
    record = load_plugin(ep, functools.partial(_check, name=name), kind=_KIND)
    if record.obj is None:
        _LOAD_ERRORS[name] = BrokenBackend.of(record, ep)
        return None
    return replace(record.obj, origin=plugin_origin(ep))


def backend_names() -> tuple[str, ...]:
    """Every registered backend's name (built-in first), without loading any of them."""
    plugins = [n for n in _plugins()[0] if n not in _LOAD_ERRORS]
    return (*BUILTIN_BACKENDS, *plugins)


def backend_type(name: str) -> BackendType:
    """The registered backend ``name``; :class:`ValueError` naming the registered ones otherwise (or
    saying why a plug-in of that name was left out)."""
    if name in BUILTIN_BACKENDS:
        return _load_builtin(name)
    if name in _plugins()[0]:
        found = _load_plugin(name)
        if found is not None:
            return found
    broken = {b.name: b for b in broken_backends()}
    if name in broken:
        raise ValueError(f"backend {name!r} is not available: {broken[name].error}")
    raise ValueError(f"unknown backend {name!r}; backends: {', '.join(backend_names())}")


def backend_types() -> dict[str, BackendType]:
    """Every backend that loads, by name (each plug-in loaded once; broken ones left out)."""
    out: dict[str, BackendType] = {}
    for name in backend_names():
        try:
            out[name] = backend_type(name)
        except ValueError:
            continue
    return out


def sandbox_listings() -> list[tuple[str, SandboxListing]]:
    """Every sandbox known on this machine of every backend that can list its own (``BackendType.
    sandboxes``), as ``(backend, listing)``, backends in registry order; a backend whose listing fails is
    left out (logged)."""
    out: list[tuple[str, SandboxListing]] = []
    for name, bt in backend_types().items():
        if bt.sandboxes is None:
            continue
        try:
            found = bt.sandboxes()
        except Exception as e:
            log.warning("listing the sandboxes of backend %r failed: %s", name, e)
            continue
        out.extend((name, listing) for listing in found)
    return out


def broken_backends() -> list[BrokenBackend]:
    """Backend plug-ins left out so far, and why (a plug-in that fails to load shows once it was tried:
    :func:`backend_types` tries them all)."""
    return [*_plugins()[1], *_LOAD_ERRORS.values()]


def backend_config(kind: str, name: str | None = None, **config: Any) -> BackendConfig:
    """The typed config of backend ``kind`` for the sandbox ``name`` (the default sandbox name when
    None); :class:`~mlsandbox.errors.ConfigError` naming each bad field."""
    bt = backend_type(kind)
    values = {**config, "type": kind, "name": name or paths.default_sandbox_name()}
    try:
        return bt.config.model_validate(values)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<config>'}: {err['msg']}"
            for err in e.errors(include_url=False)
        )
        raise ConfigError(f"invalid config for the {kind} backend: {problems}") from None


def get_backend(kind: str = DEFAULT_BACKEND, name: str | None = None, **config: Any) -> Backend:
    """The backend ``kind`` for the sandbox ``name``, configured with ``config`` (its config model's
    fields); nothing is started. :class:`ValueError` for an unknown backend, :class:`~mlsandbox.errors.
    ConfigError` for a bad config."""
    bt = backend_type(kind)
    return bt.create(backend_config(kind, name, **config))


def reset() -> None:
    """Forget what was discovered (after installing or removing a plug-in in this process; tests)."""
    _plugins.cache_clear()
    _load_plugin.cache_clear()
    _LOAD_ERRORS.clear()


__all__ = [
    "BUILTIN_BACKENDS",
    "DEFAULT_BACKEND",
    "ENTRY_POINT_GROUP",
    "BackendPluginError",
    "BrokenBackend",
    "backend_config",
    "backend_names",
    "backend_type",
    "backend_types",
    "broken_backends",
    "get_backend",
    "reset",
    "sandbox_listings",
]
