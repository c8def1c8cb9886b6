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
``mlsandbox.kinds``        a :class:`~mlsandbox.tasks.kind.TaskKind` (instance  the task-kind registry
                           or class): a kind of ML work, its dataset spec,      (``kind: NAME`` in a
                           generator, trainer algorithms, metrics, policy       scenario's dataset)
=========================  ===================================================  ==========================

Any other ``mlsandbox.*`` group is listed by ``mlsandbox plugins`` as ``unsupported``.

Discovery never lets one broken plug-in take the rest down: each entry point loads on its own and a
failure becomes a :class:`PluginRecord` with status ``error`` and a message naming the plug-in, its
package and what went wrong (listed by ``mlsandbox plugins``, logged once). Every reader of a group does
this the same way: :func:`entry_points_of` lists a group's entry points, :func:`load_plugin` loads one and
checks it with the reader's own check (the backend registry's ``BackendType`` check, the action catalog's
``ActionPack`` check and clash test, this module's checks of the other groups), and :func:`left_out`
records a plug-in refused before it is loaded (a bad name, a clash). A built-in backend or action pack
that does not load is an error: those are the package's own, loaded by name, not discovered.
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
from typing import Any, Generic, Literal, TypeVar

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
    "mlsandbox.kinds": "kinds of ML work (TaskKind: dataset spec, generator, algorithms, metrics)",
}
RESERVED_GROUPS: dict[str, str] = {}
"""Groups named but not read yet (listed as ``unsupported``)."""
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,40}$"
"""Names of plug-in services and fault types."""
FAULT_TARGET_KINDS: tuple[str, ...] = ("service", "endpoint", "jobs", "bucket", "dataset", "http", "pool")
"""Target kinds a plug-in fault may act on (those whose mechanism is the engine's own)."""

RewardTerm = Callable[[Any], dict[str, float]]
_OWN_DISTRIBUTION = "mlsandbox"
T = TypeVar("T")


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
class PluginRecord(Generic[T]):
    """One entry point: where it comes from and whether it loaded (``obj``: what it names, checked)."""

    group: str
    name: str
    value: str
    origin: str
    """The distribution (package) that declares it, with its version."""
    status: str
    """``ok``, ``error`` or ``unsupported``."""
    detail: str = ""
    """Why it was left out (status ``error``: the message names the plug-in, its package and the reason)."""
    obj: T | None = None

    def checked(self) -> T:
        """What the entry point names, as its check returned it (:class:`PluginError` when left out)."""
        if self.obj is None:
            raise PluginError(self.detail or f"plug-in {self.name!r} is {self.status}")
        return self.obj

    def as_dict(self) -> dict[str, str]:
        return {
            "group": self.group,
            "name": self.name,
            "value": self.value,
            "origin": self.origin,
            "status": self.status,
            "detail": self.detail,
        }


def origin(ep: EntryPoint) -> str:
    """The distribution that declares ``ep``, with its version (``unknown`` when not known)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown"
    return f"{dist.name} {dist.version}"


def plugin_origin(ep: EntryPoint) -> str:
    """What a loaded plug-in's ``origin`` says: ``plugin:<distribution>`` (or ``plugin:<entry point>``)."""
    dist = getattr(ep, "dist", None)
    return f"plugin:{dist.name}" if dist is not None else f"plugin:{ep.name}"


def entry_points_of(group: str | None = None, *, own: bool = True) -> list[EntryPoint]:
    """The ``mlsandbox.*`` entry points of the installed distributions (of one ``group``), each once,
    sorted by group, name and value. ``own=False`` leaves out this package's own (those it loads by
    name)."""
    seen: set[tuple[str, str, str]] = set()
    out: list[EntryPoint] = []
    for dist in distributions():
        name = dist.metadata["Name"] or ""
        if not own and name == _OWN_DISTRIBUTION:
            continue
        for ep in dist.entry_points:
            if not ep.group.startswith(PREFIX) or (group is not None and ep.group != group):
                continue
            key = (name, ep.group, ep.name)
            if key not in seen:  # a distribution found twice on sys.path counts once
                seen.add(key)
                out.append(ep)
    return sorted(out, key=lambda e: (e.group, e.name, e.value))


def _base(ep: EntryPoint) -> dict[str, str]:
    return {"group": ep.group, "name": ep.name, "value": ep.value, "origin": origin(ep)}


def left_out(ep: EntryPoint, why: str, *, kind: str = "") -> PluginRecord[Any]:
    """The record of a plug-in left out (status ``error``), logged as a warning: ``why`` prefixed by the
    plug-in's ``kind`` (``backend``, ``action pack``, ...), entry point, value and distribution."""
    what = f"{kind} plug-in" if kind else "plug-in"
    msg = f"{what} {ep.name!r} left out ({ep.value} in {ep.group}, from {origin(ep)}): {why}"
    log.warning("%s", msg)
    return PluginRecord(**_base(ep), status="error", detail=msg)


def load_plugin(
    ep: EntryPoint,
    check: Callable[[Any], T],
    *,
    kind: str = "",
    refused: tuple[type[Exception], ...] = (PluginError,),
) -> PluginRecord[T]:
    """Load one entry point and ``check`` what it names (the check returns the object to use, or raises).

    Never raises for a broken plug-in: the record says ``ok`` with the checked object, or ``error`` with
    why (:func:`left_out`): ``cannot be loaded: <exception>`` when importing fails, the check's message
    when it raises one of ``refused``, ``<exception type>: <message>`` for anything else it raises."""
    try:
        obj = ep.load()
    except Exception as e:
        return left_out(ep, f"cannot be loaded: {type(e).__name__}: {e}", kind=kind)
    try:
        checked = check(obj)
    except refused as e:
        return left_out(ep, str(e), kind=kind)
    except Exception as e:
        return left_out(ep, f"{type(e).__name__}: {e}", kind=kind)
    return PluginRecord(**_base(ep), status="ok", obj=checked)


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
    if group == "mlsandbox.kinds":  # checked fully by mlsandbox.tasks.registry (a layer above)
        if not all(hasattr(obj, attr) for attr in ("name", "spec", "metrics", "algorithms")):
            raise PluginError(f"expected a TaskKind, got {type(obj).__name__}")
        return obj
    if group == "mlsandbox.action_packs":  # checked fully by mlsandbox.gateway.registry (a layer above)
        if not (hasattr(obj, "models") and hasattr(obj, "implementation")):
            raise PluginError(f"expected an ActionPack, got {type(obj).__name__}")
        return obj
    return obj


def _load(ep: EntryPoint) -> PluginRecord[Any]:
    if ep.group in RESERVED_GROUPS:
        return PluginRecord(**_base(ep), status="unsupported", detail=RESERVED_GROUPS[ep.group])
    if ep.group not in GROUPS:
        return PluginRecord(**_base(ep), status="unsupported", detail=f"unknown group {ep.group!r}")
    if ep.group in ("mlsandbox.services", "mlsandbox.faults") and not re.match(NAME_PATTERN, ep.name):
        return left_out(
            ep, f"the entry point's name must match {NAME_PATTERN} (it names the {ep.group[10:-1]})"
        )
    return load_plugin(ep, functools.partial(_check, ep.group))


@functools.cache
def discover(group: str | None = None) -> tuple[PluginRecord[Any], ...]:
    """The ``mlsandbox.*`` entry points of the installed packages (of one ``group``), each loaded once."""
    if group is None:
        groups = sorted({ep.group for ep in entry_points_of(None)})
        return tuple(r for g in groups for r in discover(g))
    return tuple(_load(ep) for ep in entry_points_of(group))


def loaded(group: str) -> list[PluginRecord[Any]]:
    """The plug-ins of ``group`` that loaded (status ``ok``)."""
    return [r for r in discover(group) if r.status == "ok"]


def scenario_dirs() -> list[tuple[str, Path]]:
    """``(origin, directory)`` of every plug-in scenario catalog, in entry-point order."""
    return [(f"plugin:{r.origin.split()[0]}", r.checked()) for r in loaded("mlsandbox.scenarios")]


def reward_terms() -> dict[str, RewardTerm]:
    """The installed reward terms by entry-point name: each a callable ``(EpisodeState) -> dict[str, float]``.

    A reward module calls them with the episode state and adds the returned components (their names are
    the plug-in's; prefix them to avoid clashes). See :func:`evaluate_reward_terms`."""
    return {r.name: r.checked() for r in loaded("mlsandbox.reward_terms")}


def services() -> dict[str, ServiceSpec]:
    """The plug-in services by entry-point name (started by the local backend as processes, see
    :mod:`mlsandbox.backends.local.plugin_services`, and by the kube backend as pods)."""
    return {r.name: r.checked() for r in loaded("mlsandbox.services")}


def start_up_services(specs: dict[str, ServiceSpec], ensure: Callable[[str], object]) -> dict[str, str]:
    """``ensure(name)`` for each ``start: up`` service of ``specs``: ``{name: "running" | <why it failed>}``.
    A failure is logged as a warning naming the service, never raised: a broken plug-in service is left
    out, and the sandbox and the other services keep working."""
    out: dict[str, str] = {}
    for name, spec in specs.items():
        if spec.start != "up":
            continue
        try:
            ensure(name)
            out[name] = "running"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
            log.warning("plug-in service %r left out: %s", name, out[name])
    return out


def fault_types() -> dict[str, type]:
    """The plug-in fault types by entry-point name (the ``type`` a plan names): each a behaviour class
    with ``targets`` (target kinds), optional ``default_target``, ``Params`` (a pydantic model of the
    fault's parameters), ``instant``, and the :class:`~mlsandbox.faults.behaviours.Behaviour` methods."""
    return {r.name: r.checked() for r in loaded("mlsandbox.faults")}


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
    "entry_points_of",
    "evaluate_reward_terms",
    "fault_types",
    "left_out",
    "load_plugin",
    "loaded",
    "origin",
    "plugin_origin",
    "reward_terms",
    "scenario_dirs",
    "services",
    "start_up_services",
]
