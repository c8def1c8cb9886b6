"""Plug-ins: installed packages extend mlsandbox through Python entry points in groups named ``mlsandbox.*``.

=========================  ===================================================  ==========================
group                      an entry point names                                 read by
=========================  ===================================================  ==========================
``mlsandbox.action_packs`` an :class:`~mlsandbox.gateway.registry.ActionPack`   the action catalog
``mlsandbox.scenarios``    a catalog directory: a ``pathlib.Path`` / str, or a  the scenario catalog
                           callable returning one, or a package (its            (``scenarios list``, ids
                           directory) holding ``<id>.yaml`` files               by name everywhere)
``mlsandbox.reward_terms`` a callable ``(EpisodeState) -> dict[str, float]``    :func:`reward_terms`
=========================  ===================================================  ==========================

``mlsandbox.services`` and ``mlsandbox.faults`` are reserved: nothing reads them yet, and ``mlsandbox
plugins`` lists an entry point there as ``unsupported``.

Discovery never lets one broken plug-in take the rest down: each entry point loads on its own and a
failure becomes a :class:`PluginRecord` with status ``error`` and a message naming the plug-in, its
package and what went wrong (listed by ``mlsandbox plugins``, logged once). The action catalog is the
exception by design: a broken action pack is an error at catalog build time
(:mod:`mlsandbox.gateway.registry`) because the catalog must be the same for every interface.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "mlsandbox."
GROUPS: dict[str, str] = {
    "mlsandbox.action_packs": "action packs (the action catalog)",
    "mlsandbox.scenarios": "scenario catalog directories",
    "mlsandbox.reward_terms": "reward terms: (EpisodeState) -> dict[str, float]",
}
RESERVED_GROUPS: dict[str, str] = {
    "mlsandbox.services": "services (not supported yet)",
    "mlsandbox.faults": "fault types (not supported yet)",
}

RewardTerm = Callable[[Any], dict[str, float]]


class PluginError(Exception):
    """A plug-in that cannot be loaded or is not what its group expects."""


@dataclass(frozen=True)
class PluginRecord:
    """One entry point: where it comes from and whether it loaded."""

    group: str
    name: str
    value: str
    origin: str
    """The distribution (package) that declares it, with its version."""
    status: str
    """``ok``, ``error`` or ``unsupported``."""
    detail: str = ""
    obj: Any = None

    def as_dict(self) -> dict[str, str]:
        return {
            "group": self.group,
            "name": self.name,
            "value": self.value,
            "origin": self.origin,
            "status": self.status,
            "detail": self.detail,
        }


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown"
    return f"{dist.name} {dist.version}"


def _entry_points(group: str | None) -> list[EntryPoint]:
    seen: set[tuple[str, str, str]] = set()
    out: list[EntryPoint] = []
    for dist in distributions():
        for ep in dist.entry_points:
            if not ep.group.startswith(PREFIX) or (group is not None and ep.group != group):
                continue
            key = (dist.metadata["Name"] or "", ep.group, ep.name)
            if key not in seen:  # a distribution found twice on sys.path counts once
                seen.add(key)
                out.append(ep)
    return sorted(out, key=lambda e: (e.group, e.name, e.value))


def _scenario_dir(obj: Any) -> Path:
    if callable(obj) and not isinstance(obj, ModuleType):
        obj = obj()
    if isinstance(obj, ModuleType):
        files = getattr(obj, "__file__", None)
        if files is None:
            raise PluginError(f"module {obj.__name__} has no directory")
        obj = Path(files).parent
    if not isinstance(obj, str | Path):
        raise PluginError(f"expected a directory (Path or str), got {type(obj).__name__}")
    path = Path(obj)
    if not path.is_dir():
        raise PluginError(f"{path} is not a directory")
    if not any(path.glob("*.yaml")):
        raise PluginError(f"{path} holds no .yaml scenario")
    return path


def _check(group: str, obj: Any) -> Any:
    if group == "mlsandbox.scenarios":
        return _scenario_dir(obj)
    if group == "mlsandbox.reward_terms":
        if not callable(obj):
            raise PluginError(
                f"expected a callable (EpisodeState) -> dict[str, float], got {type(obj).__name__}"
            )
        return obj
    if group == "mlsandbox.action_packs":  # checked fully by mlsandbox.gateway.registry (a layer above)
        if not (hasattr(obj, "models") and hasattr(obj, "implementation")):
            raise PluginError(f"expected an ActionPack, got {type(obj).__name__}")
        return obj
    return obj


def _load(ep: EntryPoint) -> PluginRecord:
    base = {"group": ep.group, "name": ep.name, "value": ep.value, "origin": _origin(ep)}
    if ep.group in RESERVED_GROUPS:
        return PluginRecord(**base, status="unsupported", detail=RESERVED_GROUPS[ep.group])
    if ep.group not in GROUPS:
        return PluginRecord(**base, status="unsupported", detail=f"unknown group {ep.group!r}")
    try:
        obj = _check(ep.group, ep.load())
    except Exception as e:  # a broken plug-in is reported, never fatal to the others
        msg = (
            f"plug-in {ep.name!r} ({ep.value}, from {base['origin']}) in {ep.group}: {type(e).__name__}: {e}"
        )
        log.warning("%s", msg)
        return PluginRecord(**base, status="error", detail=msg)
    return PluginRecord(**base, status="ok", obj=obj)


@functools.cache
def discover(group: str | None = None) -> tuple[PluginRecord, ...]:
    """The ``mlsandbox.*`` entry points of the installed packages (of one ``group``), each loaded once."""
    if group is None:
        groups = sorted({ep.group for ep in _entry_points(None)})
        return tuple(r for g in groups for r in discover(g))
    return tuple(_load(ep) for ep in _entry_points(group))


def loaded(group: str) -> list[PluginRecord]:
    """The plug-ins of ``group`` that loaded (status ``ok``)."""
    return [r for r in discover(group) if r.status == "ok"]


def scenario_dirs() -> list[tuple[str, Path]]:
    """``(origin, directory)`` of every plug-in scenario catalog, in entry-point order."""
    return [(f"plugin:{r.origin.split()[0]}", r.obj) for r in loaded("mlsandbox.scenarios")]


def reward_terms() -> dict[str, RewardTerm]:
    """The installed reward terms by entry-point name: each a callable ``(EpisodeState) -> dict[str, float]``.

    A reward module calls them with the episode state and adds the returned components (their names are
    the plug-in's; prefix them to avoid clashes). See :func:`evaluate_reward_terms`."""
    return {r.name: r.obj for r in loaded("mlsandbox.reward_terms")}


def evaluate_reward_terms(state: Any) -> dict[str, float]:
    """Every installed reward term applied to ``state``: ``{"<entry point>.<component>": value}``.

    A term that raises or returns something else than a mapping of numbers is logged and skipped for this
    call (it never breaks a step)."""
    out: dict[str, float] = {}
    for name, fn in reward_terms().items():
        try:
            comps = fn(state)
            out.update({f"{name}.{k}": float(v) for k, v in dict(comps).items()})
        except Exception as e:
            log.warning("reward term %r failed: %s: %s", name, type(e).__name__, e)
    return out


__all__ = [
    "GROUPS",
    "RESERVED_GROUPS",
    "PluginError",
    "PluginRecord",
    "discover",
    "evaluate_reward_terms",
    "loaded",
    "reward_terms",
    "scenario_dirs",
]
