"""Plug-ins: installed packages extend mlsandbox through Python entry points in groups named ``mlsandbox.*``.

=========================  ===================================================  ==========================
group                      an entry point names                                 read by
=========================  ===================================================  ==========================
``mlsandbox.action_packs`` an :class:`~mlsandbox.gateway.registry.ActionPack`   the action catalog
``mlsandbox.scenarios``    a catalog directory: a ``pathlib.Path`` / str, or a  the scenario catalog
                           callable returning one, or a package (its            (``scenarios list``, ids
                           directory) holding ``<id>.yaml`` files               by name everywhere)
``mlsandbox.reward_terms`` a callable ``(EpisodeState) -> dict[str, float]``    :func:`reward_terms`
``mlsandbox.services``     a :class:`ServiceSpec` (or a mapping of its fields,  the local backend
                           or a callable returning either): a process the       (``up`` starts the
                           local backend starts with its own services           ``start: up`` ones)
``mlsandbox.faults``       a fault type, named by the entry point: a class      the perturbation engine
                           with ``targets``, ``inject`` and ``recover`` (a      (plans name it in
                           :class:`mlsandbox.faults.behaviours.Behaviour`       ``fault: {type: NAME}``)
                           subclass; ``Params``: a pydantic model of its
                           parameters)
``mlsandbox.backends``     a :class:`~mlsandbox.backends.protocols.BackendType` the backend registry
                           (name, description, typed config, factory), named    (``--backend NAME``
                           by the entry point                                   everywhere)
=========================  ===================================================  ==========================

Any other ``mlsandbox.*`` group is listed by ``mlsandbox plugins`` as ``unsupported``.

Discovery never lets one broken plug-in take the rest down: each entry point loads on its own and a
failure becomes a :class:`PluginRecord` with status ``error`` and a message naming the plug-in, its
package and what went wrong (listed by ``mlsandbox plugins``, logged once). The action catalog is the
exception by design: a broken action pack is an error at catalog build time
(:mod:`mlsandbox.gateway.registry`) because the catalog must be the same for every interface.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

PREFIX = "mlsandbox."
GROUPS: dict[str, str] = {
    "mlsandbox.action_packs": "action packs (the action catalog)",
    "mlsandbox.scenarios": "scenario catalog directories",
    "mlsandbox.reward_terms": "reward terms: (EpisodeState) -> dict[str, float]",
    "mlsandbox.services": "services the local backend starts (ServiceSpec)",
    "mlsandbox.faults": "fault types of the perturbation engine (Behaviour subclasses)",
    "mlsandbox.backends": "backends (BackendType: name, typed config, factory)",
}
RESERVED_GROUPS: dict[str, str] = {}
"""Groups named but not read yet (listed as ``unsupported``)."""
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,40}$"
"""Names of plug-in services and fault types."""
FAULT_TARGET_KINDS: tuple[str, ...] = ("service", "endpoint", "jobs", "bucket", "dataset", "http", "pool")
"""Target kinds a plug-in fault may act on (those whose mechanism is the engine's own)."""

RewardTerm = Callable[[Any], dict[str, float]]


class PluginError(Exception):
    """A plug-in that cannot be loaded or is not what its group expects."""


class ServiceSpec(BaseModel):
    """A service a plug-in adds to the local backend: a command line, how to probe its health, its env.

    ``argv``, ``health_url`` and the ``env`` values may use ``{port}`` (a free TCP port on 127.0.0.1
    chosen for it), ``{python}`` (the sandbox's interpreter), ``{dir}`` (a working directory of its own
    inside the sandbox directory), ``{sandbox}`` (the sandbox name) and ``{s3_url}``, ``{mlflow_url}``,
    ``{prefect_api_url}`` (the sandbox's endpoints). The process runs in its own process group with the
    sandbox's marker, so ``down`` and garbage collection stop it like the built-in services.
    """

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    health_url: str | None = None
    """Healthy when a GET answers below 500; None: healthy while the process runs."""
    env: dict[str, str] = Field(default_factory=dict)
    start: Literal["up", "on_demand"] = "up"
    """``up``: started by ``mlsandbox up`` (a failure is a warning, never a failed ``up``); ``on_demand``:
    started by whoever needs it (``PluginServices.ensure``: a plug-in action or fault)."""
    start_timeout_s: float = Field(default=30.0, gt=0, le=600)
    description: str = ""

    def render(self, values: dict[str, str]) -> ServiceSpec:
        """The spec with its placeholders filled in (an unknown placeholder is a :class:`PluginError`)."""

        def fill(text: str) -> str:
            try:
                return text.format(**values)
            except (KeyError, IndexError, ValueError) as e:
                raise PluginError(
                    f"{text!r}: unknown placeholder {e} (known: {', '.join(sorted(values))})"
                ) from None

        return self.model_copy(
            update={
                "argv": [fill(a) for a in self.argv],
                "health_url": fill(self.health_url) if self.health_url else None,
                "env": {k: fill(v) for k, v in self.env.items()},
            }
        )


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


def _service_spec(obj: Any) -> ServiceSpec:
    if callable(obj) and not isinstance(obj, type):
        obj = obj()
    if isinstance(obj, ServiceSpec):
        return obj
    if isinstance(obj, dict):
        return ServiceSpec.model_validate(obj)
    raise PluginError(f"expected a ServiceSpec (or a mapping of its fields), got {type(obj).__name__}")


def _fault_type(obj: Any) -> type:
    if not isinstance(obj, type):
        raise PluginError(f"expected a fault behaviour class, got {type(obj).__name__}")
    for attr in ("inject", "recover"):
        if not callable(getattr(obj, attr, None)):
            raise PluginError(f"fault class {obj.__name__} has no {attr}() method")
    targets = getattr(obj, "targets", None)
    if not (isinstance(targets, tuple) and targets) or any(t not in FAULT_TARGET_KINDS for t in targets):
        raise PluginError(
            f"fault class {obj.__name__}: targets must be a non-empty tuple of "
            f"{', '.join(FAULT_TARGET_KINDS)}; got {targets!r}"
        )
    params = getattr(obj, "Params", None)
    if params is not None and not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise PluginError(f"fault class {obj.__name__}: Params must be a pydantic model class")
    return obj


def _check(group: str, obj: Any) -> Any:
    if group == "mlsandbox.scenarios":
        return _scenario_dir(obj)
    if group == "mlsandbox.services":
        return _service_spec(obj)
    if group == "mlsandbox.faults":
        return _fault_type(obj)
    if group == "mlsandbox.reward_terms":
        if not callable(obj):
            raise PluginError(
                f"expected a callable (EpisodeState) -> dict[str, float], got {type(obj).__name__}"
            )
        return obj
    if group == "mlsandbox.backends":  # checked fully by mlsandbox.backends.registry (a layer above)
        if not all(hasattr(obj, attr) for attr in ("name", "config", "create")):
            raise PluginError(f"expected a BackendType, got {type(obj).__name__}")
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
        if ep.group in ("mlsandbox.services", "mlsandbox.faults") and not re.match(NAME_PATTERN, ep.name):
            raise PluginError(
                f"the entry point's name must match {NAME_PATTERN} (it names the {ep.group[10:-1]})"
            )
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


def services() -> dict[str, ServiceSpec]:
    """The plug-in services by entry-point name (started by the local backend, see
    :mod:`mlsandbox.backends.local.plugin_services`)."""
    return {r.name: r.obj for r in loaded("mlsandbox.services")}


def fault_types() -> dict[str, type]:
    """The plug-in fault types by entry-point name (the ``type`` a plan names): each a behaviour class
    with ``targets`` (target kinds), optional ``default_target``, ``Params`` (a pydantic model of the
    fault's parameters), ``instant``, and the :class:`~mlsandbox.faults.behaviours.Behaviour` methods."""
    return {r.name: r.obj for r in loaded("mlsandbox.faults")}


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
    "ServiceSpec",
    "discover",
    "evaluate_reward_terms",
    "fault_types",
    "loaded",
    "reward_terms",
    "scenario_dirs",
    "services",
]
