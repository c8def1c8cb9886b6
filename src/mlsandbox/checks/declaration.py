"""The declaration check: the runtime offers every capability of the declared Runtime with every operation
of its protocol, callable as the protocol says, or refuses it with :class:`~mlsandbox.errors.Unsupported`
and lists it in ``support()``; ``support()`` names only capabilities and fault types; the clock ticks."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Any

from mlsandbox.backends.protocols import (
    CAPABILITIES,
    AuditLog,
    Backend,
    Clock,
    ConfigStore,
    DeploymentSpec,
    EnvironmentInfo,
    Environments,
    EpisodeFlows,
    EpisodeServing,
    EpisodeSources,
    FaultControl,
    Flows,
    HttpFault,
    Jobs,
    Machine,
    ModelServing,
    NetworkControl,
    NoSuchTarget,
    ObjectStore,
    Runtime,
    ServiceControl,
    ServingEnvironment,
    SourceHosting,
    Support,
    Tracking,
    Workspaces,
)
from mlsandbox.checks.report import Finding
from mlsandbox.errors import Unsupported
from mlsandbox.scenario.perturbations import FAULT_TYPES, plugin_fault_types

CAPABILITY_PROTOCOLS: dict[str, type[Any]] = {
    "object_store": ObjectStore,
    "tracking": Tracking,
    "jobs": Jobs,
    "serving": ModelServing,
    "sources": SourceHosting,
    "flows": Flows,
    "config": ConfigStore,
    "environments": Environments,
    "workspaces": Workspaces,
    "faults": FaultControl,
    "clock": Clock,
    "audit": AuditLog,
}
"""Each capability of the declared Runtime and its protocol."""
assert set(CAPABILITY_PROTOCOLS) == set(CAPABILITIES), "every capability has its protocol here"


def check_declaration(rt: Runtime, backend: Backend | None = None) -> list[Finding]:
    """The runtime's (and backend's) declaration: capabilities, operations, support keys, the clock."""
    out: list[Finding] = []

    def bad(where: str, message: str) -> None:
        out.append(Finding("declaration", where, message))

    try:
        support = rt.support()
    except Exception as e:
        bad("support()", f"raised {type(e).__name__}: {e}")
        return out
    if not isinstance(support, Support):
        bad("support()", f"returned {type(support).__name__}, not a Support")
        return out
    if support.backend != rt.backend:
        bad("support()", f"names backend {support.backend!r}, the runtime is {rt.backend!r}")
    known_faults = {*FAULT_TYPES, *plugin_fault_types()}
    for key in support.unsupported:
        if key.startswith("fault:"):
            if key.removeprefix("fault:") not in known_faults:
                bad(
                    "support()",
                    f"refuses {key!r}, which is no fault type (fault types: {', '.join(sorted(known_faults))})",
                )
        elif key.split(".", 1)[0] not in CAPABILITIES:
            bad(
                "support()",
                f"refuses {key!r}, which is no capability (capabilities: {', '.join(CAPABILITIES)})",
            )
    if backend is not None:
        try:
            static = backend.support()
        except Exception as e:
            bad("Backend.support()", f"raised {type(e).__name__}: {e}")
        else:
            for key in static.unsupported:
                if support.reason(key) is None:
                    bad("Backend.support()", f"refuses {key!r} but the running runtime's support() does not")

    out.extend(_members(rt, Runtime, "rt"))
    objects: dict[str, Any] = {}
    for name, proto in CAPABILITY_PROTOCOLS.items():
        try:
            obj = _capability(rt, name)
        except Unsupported as e:
            if support.reason(name) is None and support.reason(e.capability) is None:
                bad(f"rt.{name}", f"raised Unsupported({e.capability!r}) but support() does not refuse it")
            continue
        except Exception as e:
            bad(
                f"rt.{name}",
                f"raised {type(e).__name__}: {e} (a capability is there, or refused with Unsupported)",
            )
            continue
        objects[name] = obj
        out.extend(_members(obj, proto, f"rt.{name}"))

    episode = f"conformance-{uuid.uuid4().hex[:8]}"
    labels = {"mlsandbox.world.episode": episode}
    opened: list[tuple[str, Callable[[], Any], type[Any]]] = [
        ("serving", lambda: objects["serving"].open(episode, labels), EpisodeServing),
        ("flows", lambda: objects["flows"].open(episode, labels), EpisodeFlows),
        ("sources", lambda: objects["sources"].open(episode), EpisodeSources),
    ]
    for name, open_, proto in opened:
        if name not in objects:
            continue
        where = f"rt.{name}.open(...)"
        try:
            handle = open_()
        except Unsupported as e:
            if support.reason(e.capability) is None:
                bad(where, f"raised Unsupported({e.capability!r}) but support() does not refuse it")
            continue
        except Exception as e:
            bad(where, f"raised {type(e).__name__}: {e}")
            continue
        out.extend(_members(handle, proto, where))
        try:
            handle.close()
        except Exception as e:
            bad(f"{where}.close()", f"raised {type(e).__name__}: {e}")

    faults = objects.get("faults")
    if faults is not None:
        out.extend(_check_faults(faults, support, known_faults))
    clock = objects.get("clock")
    if clock is not None:
        out.extend(_check_clock(clock))
    out.extend(check_refusals(rt, support))
    out.extend(check_declared_errors(objects, support))
    return out


_NO_SUCH = "conformance-no-such"
_NO_FLOW_RUN = "00000000-0000-4000-8000-000000000000"
ErrorProbe = tuple[str, str, Callable[[dict[str, Any], str], object], tuple[type[BaseException], ...] | None]


def _error_probes() -> list[ErrorProbe]:
    """What the protocols say an operation does with a name that does not exist: (capability, call shown,
    the call, the exception it raises or None for none). The world relies on these to tell an agent's
    mistake (``not_found``) from a failing backend."""

    def flows_get(o: dict[str, Any], ep: str) -> object:
        handle = o["flows"].open(ep, {"mlsandbox.world.episode": ep})
        try:
            return handle.get(_NO_FLOW_RUN)
        finally:
            handle.close()

    return [
        ("jobs", f"jobs.get({_NO_SUCH!r})", lambda o, ep: o["jobs"].get(_NO_SUCH), (KeyError,)),
        ("jobs", f"jobs.list(label of {_NO_SUCH!r})", lambda o, ep: _empty(o["jobs"].list(("mlsandbox.world.episode", ep))), None),
        ("environments", f"environments.get({_NO_SUCH!r})", lambda o, ep: o["environments"].get(_NO_SUCH), (KeyError,)),
        ("tracking", "tracking.get_run(<32 zeros>)", lambda o, ep: o["tracking"].get_run("0" * 32), (KeyError,)),
        ("tracking", f"tracking.list_model_versions({_NO_SUCH!r})", lambda o, ep: _empty(o["tracking"].list_model_versions(_NO_SUCH)), None),
        ("config", f"config.get({_NO_SUCH!r})", lambda o, ep: _none(o["config"].get(_NO_SUCH)), None),
        ("config", f"config.delete({_NO_SUCH!r})", lambda o, ep: o["config"].delete(_NO_SUCH), None),
        ("object_store", f"object_store.bucket_exists({_NO_SUCH!r})", lambda o, ep: _false(o["object_store"].bucket_exists(_NO_SUCH)), None),
        ("object_store", f"object_store.delete_bucket({_NO_SUCH!r})", lambda o, ep: o["object_store"].delete_bucket(_NO_SUCH), None),
        ("audit", "audit.read(<an episode without a log>)", lambda o, ep: _empty(o["audit"].read(ep)), None),
        ("flows", "flows.open(...).get(<a flow run id that does not exist>)", flows_get, (KeyError,)),
        ("faults", f"faults.services.health({_NO_SUCH!r})", lambda o, ep: o["faults"].services.health(_NO_SUCH), (ValueError,)),
        ("faults", f"faults.set_http_fault({_NO_SUCH!r}, ...)", lambda o, ep: o["faults"].set_http_fault(_NO_SUCH, HttpFault(error_rate=0.5, status=503), episode_id=ep), (NoSuchTarget,)),
        ("faults", f"faults.clear_http_fault({_NO_SUCH!r})", lambda o, ep: o["faults"].clear_http_fault(_NO_SUCH, episode_id=ep), None),
        ("faults", f"faults.refresh_contention({_NO_SUCH!r})", lambda o, ep: _empty(o["faults"].refresh_contention(_NO_SUCH)), None),
        ("faults", f"faults.stop_contention({_NO_SUCH!r})", lambda o, ep: o["faults"].stop_contention(_NO_SUCH), None),
    ]  # fmt: skip


class _Unexpected(Exception):
    """A call that returned something other than what the protocol says for a name that does not exist."""


def _empty(found: Any) -> object:
    if found:
        raise _Unexpected(f"returned {found!r}, not nothing")
    return found


def _none(found: Any) -> object:
    if found is not None:
        raise _Unexpected(f"returned {found!r}, not None")
    return found


def _false(found: Any) -> object:
    if found is not False:
        raise _Unexpected(f"returned {found!r}, not False")
    return found


def check_declared_errors(objects: dict[str, Any], support: Support) -> list[Finding]:
    """The protocols' answers for names that do not exist (:func:`_error_probes`): the declared exception
    (KeyError, ValueError, NoSuchTarget), or nothing, or a refusal ``support()`` lists."""
    out = []
    episode = f"conformance-{uuid.uuid4().hex[:8]}"
    for capability, shown, call, expected in _error_probes():
        if capability not in objects:
            continue
        where = f"rt.{shown}"
        try:
            call(objects, episode)
        except Unsupported as e:
            if support.reason(e.capability) is None:
                out.append(
                    Finding(
                        "declaration",
                        where,
                        f"raised Unsupported({e.capability!r}) but support() does not refuse it",
                    )
                )
        except _Unexpected as e:
            out.append(Finding("declaration", where, str(e)))
        except Exception as e:
            if expected is None or not isinstance(e, expected):
                wanted = "no error" if expected is None else " or ".join(t.__name__ for t in expected)
                out.append(
                    Finding(
                        "declaration", where, f"raised {type(e).__name__}: {e} (the protocol says {wanted})"
                    )
                )
        else:
            if expected is not None:
                out.append(
                    Finding(
                        "declaration", where, f"returned; the protocol says it raises {expected[0].__name__}"
                    )
                )
    return out


def _refusal_probes(episode: str) -> dict[str, Callable[[Runtime], object]]:
    """For a support key, a call that must raise :class:`Unsupported` when the key is refused (each touches
    nothing that exists: an unknown job, deployment or dataset, a throwaway episode's handles)."""
    labels = {"mlsandbox.world.episode": episode}
    env = EnvironmentInfo(key="conformance", requirements=["numpy"], packages={})
    spec = DeploymentSpec(
        deployment="conformance",
        model="conformance",
        registry_name=f"{episode}.conformance",
        version="1",
        replicas=1,
        machine=Machine(name="conformance", cpus=0.5, memory_mb=256, credits_per_second=0.0),
        environment=ServingEnvironment(name="conformance", env=env),
    )

    def on(open_: Callable[[], Any], call: Callable[[Any], object]) -> object:
        handle = open_()
        try:
            return call(handle)
        finally:
            handle.close()

    return {
        "environments.build": lambda rt: rt.environments.build(["numpy"]),
        "faults.network": lambda rt: rt.faults.network,
        "jobs.set_resources": lambda rt: rt.jobs.set_resources(f"{episode}-job-1", cpus=1.0),
        "sources.api": lambda rt: on(
            lambda: rt.sources.open(episode), lambda h: h.api_get("conformance", {}, None, timeout_s=2.0)
        ),
        "sources.postgres": lambda rt: on(
            lambda: rt.sources.open(episode),
            lambda h: h.query("conformance", "conformance", None, "conformance", limit=1),
        ),
        "flows.environment": lambda rt: on(
            lambda: rt.flows.open(episode, labels),
            lambda h: h.run("ingestion", {}, name=f"{episode}-probe", environment="conformance"),
        ),
        "serving.environment": lambda rt: on(
            lambda: rt.serving.open(episode, labels), lambda h: h.deploy(spec)
        ),
        "serving.scale": lambda rt: on(
            lambda: rt.serving.open(episode, labels), lambda h: h.scale("conformance", 1)
        ),
    }


def check_refusals(rt: Runtime, support: Support) -> list[Finding]:
    """Each refused support key that has a probe (:func:`_refusal_probes`) is refused by the operation
    itself, with :class:`Unsupported` naming it (not an AttributeError, a NotImplementedError or success)."""
    out = []
    probes = _refusal_probes(f"conformance-{uuid.uuid4().hex[:8]}")
    for key in sorted(support.unsupported):
        probe = probes.get(key)
        if probe is None:
            continue
        where = f"support() refuses {key}"
        try:
            probe(rt)
        except Unsupported as e:
            if not (e.capability == key or key.startswith(e.capability + ".")):
                out.append(Finding("refusal", where, f"the operation raised Unsupported({e.capability!r})"))
        except Exception as e:
            out.append(
                Finding(
                    "refusal", where, f"the operation raised {type(e).__name__}: {e} instead of Unsupported"
                )
            )
        else:
            out.append(Finding("refusal", where, "but the operation went through"))
    return out


def _capability(rt: Runtime, name: str) -> Any:
    accessors: dict[str, Callable[[], Any]] = {
        "object_store": lambda: rt.object_store,
        "tracking": lambda: rt.tracking,
        "jobs": lambda: rt.jobs,
        "serving": lambda: rt.serving,
        "sources": lambda: rt.sources,
        "flows": lambda: rt.flows,
        "config": lambda: rt.config,
        "environments": lambda: rt.environments,
        "workspaces": lambda: rt.workspaces,
        "faults": lambda: rt.faults,
        "clock": lambda: rt.clock,
        "audit": lambda: rt.audit,
    }
    return accessors[name]()


def protocol_members(proto: type[Any]) -> dict[str, Any]:
    """The public operations and properties a protocol declares (name -> its function or property)."""
    return {
        name: value
        for name, value in vars(proto).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


def _members(obj: Any, proto: type[Any], where: str) -> list[Finding]:
    """Every operation and property of ``proto`` on ``obj``, callable as the protocol declares it."""
    out = []
    kind = type(obj).__name__
    for name, declared in protocol_members(proto).items():
        is_property = isinstance(declared, property)
        shown = f"{where}.{name}" if is_property else f"{where}.{name}()"
        try:
            impl = getattr(obj, name)
        except Unsupported:
            continue  # a refused property (``faults.network``): checked against support() on its own
        except AttributeError:
            what = name if is_property else f"{name}()"
            out.append(Finding("declaration", shown, f"{kind} lacks {what} of {proto.__name__}"))
            continue
        except Exception as e:
            out.append(Finding("declaration", shown, f"{kind}.{name} raised {type(e).__name__}: {e}"))
            continue
        if is_property:
            continue
        if not callable(impl):
            out.append(Finding("declaration", shown, f"{kind}.{name} is not callable"))
            continue
        for problem in signature_problems(declared, impl):
            out.append(Finding("declaration", shown, f"{kind}.{name} {problem}"))
    return out


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def signature_problems(declared: Callable[..., Any], impl: Callable[..., Any]) -> list[str]:
    """How an implementation cannot be called as the protocol's operation is (by the world): a parameter
    it lacks, one the protocol does not pass but it requires. Empty when it can."""
    try:
        want = [p for p in inspect.signature(declared).parameters.values() if p.name != "self"]
        have = list(inspect.signature(impl).parameters.values())
    except (TypeError, ValueError):
        return []
    var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in have)
    var_pos = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in have)
    by_name = {p.name: p for p in have}
    have_pos = [p for p in have if p.kind in _POSITIONAL]
    want_pos = [p for p in want if p.kind in _POSITIONAL and p.default is inspect.Parameter.empty]
    problems = []
    for i, p in enumerate(want):
        if p.kind in _VARIADIC:
            continue
        if p.kind == inspect.Parameter.KEYWORD_ONLY or p.default is not inspect.Parameter.empty:
            q = by_name.get(p.name)  # callers may pass it by name
            if q is None and not var_kw:
                problems.append(f"takes no parameter {p.name!r}")
            elif q is not None and q.kind == inspect.Parameter.POSITIONAL_ONLY:
                problems.append(f"takes {p.name!r} by position only")
        elif i >= len(have_pos) and not var_pos:
            problems.append(f"takes no positional parameter for {p.name!r}")
    given = {p.name for p in want}
    for q in have:
        if q.kind in _VARIADIC or q.default is not inspect.Parameter.empty or q.name in given:
            continue
        if q.kind in _POSITIONAL and have_pos.index(q) < len(want_pos):
            continue  # filled by a required positional argument of the protocol
        problems.append(f"requires {q.name!r}, which the protocol does not pass")
    return problems


def _check_faults(faults: Any, support: Support, known: set[str]) -> list[Finding]:
    out = []
    try:
        out.extend(_members(faults.services, ServiceControl, "rt.faults.services"))
    except Exception as e:
        out.append(Finding("declaration", "rt.faults.services", f"raised {type(e).__name__}: {e}"))
    try:
        network = faults.network
    except Unsupported as e:
        if support.reason(e.capability) is None and support.reason("faults.network") is None:
            out.append(
                Finding(
                    "declaration",
                    "rt.faults.network",
                    f"raised Unsupported({e.capability!r}) but support() does not refuse it",
                )
            )
    except Exception as e:
        out.append(Finding("declaration", "rt.faults.network", f"raised {type(e).__name__}: {e}"))
    else:
        out.extend(_members(network, NetworkControl, "rt.faults.network"))
    try:
        unavailable = faults.unavailable()
    except Exception as e:
        out.append(Finding("declaration", "rt.faults.unavailable()", f"raised {type(e).__name__}: {e}"))
        return out
    for kind in unavailable:
        if kind not in known:
            out.append(
                Finding("declaration", "rt.faults.unavailable()", f"names {kind!r}, which is no fault type")
            )
        elif support.reason(f"fault:{kind}") is None:
            out.append(
                Finding(
                    "declaration",
                    "rt.faults.unavailable()",
                    f"says {kind} cannot be made real but support() does not refuse fault:{kind}",
                )
            )
    return out


def _check_clock(clock: Any) -> list[Finding]:
    out = []

    def bad(message: str) -> None:
        out.append(Finding("declaration", "rt.clock", message))

    try:
        if not isinstance(clock.virtual, bool):
            bad(f"virtual is {type(clock.virtual).__name__}, not bool")
        t, m1 = clock.time(), clock.monotonic()
        if not isinstance(t, float | int) or t <= 0:
            bad(f"time() gave {t!r}: seconds since the epoch")
        clock.sleep(0.0)
        if clock.monotonic() < m1:
            bad("monotonic() went back")
        fired: list[bool] = []
        ticker = clock.after(3600.0, lambda: fired.append(True), name="conformance-check")
        ticker.cancel()
        ticker.cancel()  # idempotent
        if fired:
            bad("a ticker due in an hour ran at once")
    except Exception as e:
        bad(f"raised {type(e).__name__}: {e}")
    return out


__all__ = [
    "CAPABILITY_PROTOCOLS",
    "check_declaration",
    "check_refusals",
    "protocol_members",
    "signature_problems",
]
