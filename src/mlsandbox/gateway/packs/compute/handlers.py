"""Handlers of the ``compute`` pack (see :mod:`mlsandbox.gateway.packs.compute.actions`).

The compute pool itself is a core service of the world: the gateway owns the episode's
:class:`~mlsandbox.world.compute.Pool` (``gw.pool``) and every job goes through it; this pack gives the
agent its machines, reservations and queue, and the episode's named Python environments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsandbox.backends.protocols import EnvironmentBuildError
from mlsandbox.errors import ActionError
from mlsandbox.gateway.packs.compute import actions as C
from mlsandbox.world import compute as P

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway

NAME = "compute"


# ---------------------------------------------------------------------------------------- handlers


def list_machines(gw: Gateway, _: C.ListMachines) -> dict[str, Any]:
    p = gw.pool
    p.pump()
    return {
        "machines": [m.model_dump() for m in gw.scenario.compute.machines],
        "pool": p.capacity(),
        "reservations": [p.view(r) for r in p.reservations.values()],
    }


def request_resources(gw: Gateway, a: C.RequestResources) -> dict[str, Any]:
    p = gw.pool
    m = gw.machine(a.machine)
    if gw.state.credits_left <= 0:
        raise ActionError("budget_exhausted", "no compute credits left: nothing can be reserved")
    try:
        res = p.reserve(m)
    except P.InsufficientResources as e:
        raise ActionError("insufficient_resources", str(e)) from None
    return {**p.view(res), "pool": p.capacity()}


def release_resources(gw: Gateway, a: C.ReleaseResources) -> dict[str, Any]:
    p = gw.pool
    try:
        res = p.release(a.reservation_id)
    except KeyError:
        raise ActionError("not_found", f"reservation {a.reservation_id!r} does not exist") from None
    except ValueError as e:
        raise ActionError("conflict", str(e)) from None
    return {"released": p.view(res), "pool": p.capacity()}


def cancel_job(gw: Gateway, a: C.CancelJob) -> dict[str, Any]:
    job = gw.job(a.job_id)
    if job.state in ("succeeded", "failed", "cancelled"):
        raise ActionError("conflict", f"{a.job_id} is already {job.state}")
    status = gw.backend_call(lambda: gw.jobs.cancel(job.backend_id))
    gw.update_job(job, status)
    return {"job_id": a.job_id, "state": status.state}


def get_queue(gw: Gateway, _: C.GetQueue) -> dict[str, Any]:
    p = gw.pool
    by_backend = {j.backend_id: j.job_id for j in gw.state.jobs.values()}
    queue = [{**q, "job": by_backend.get(q["job"], q["job"])} for q in p.queue_view()]
    return {"queue": queue, "pool": p.capacity()}


DEFAULT_SHOWN = ("scikit-learn", "numpy", "pandas", "mlflow")
"""Packages list_environments shows of the default environment."""
NAMED_SHOWN = ("scikit-learn", "numpy", "pandas", "scipy", "mlflow")
"""Packages list_environments shows of a named environment."""
CREATED_SHOWN = ("scikit-learn", "numpy", "pandas")
"""Packages create_environment shows of the environment it made."""


def list_environments(gw: Gateway, _: C.ListEnvironments) -> dict[str, Any]:
    default = gw.backend_call(gw.runtime.environments.default)
    rows: list[dict[str, Any]] = [
        {
            "name": "default",
            "requirements": [],
            "packages": {k: v for k, v in default.packages.items() if k in DEFAULT_SHOWN},
        }
    ]
    for name, info in sorted(gw.state.environments.items()):
        rows.append(
            {
                "name": name,
                "requirements": list(info.requirements),
                "packages": {k: v for k, v in info.packages.items() if k in NAMED_SHOWN},
            }
        )
    return {"environments": rows}


def create_environment(gw: Gateway, a: C.CreateEnvironment) -> dict[str, Any]:
    """Build the environment through the runtime (uv on local; refused with ``unsupported`` where
    named environments do not exist) and name it in the episode."""
    table = gw.state.environments
    if a.name == "default" or a.name in table:
        raise ActionError("conflict", f"environment {a.name!r} already exists")
    try:
        info = gw.runtime.environments.build(list(a.requirements))
    except ValueError as e:
        raise ActionError("invalid_parameters", str(e)) from None
    except EnvironmentBuildError as e:
        raise ActionError("environment_build_failed", str(e)) from None
    table[a.name] = info
    return {
        "name": a.name,
        "requirements": list(info.requirements),
        "packages": {k: v for k, v in info.packages.items() if k in CREATED_SHOWN},
    }


HANDLERS = {
    "list_machines": list_machines,
    "request_resources": request_resources,
    "release_resources": release_resources,
    "cancel_job": cancel_job,
    "get_queue": get_queue,
    "list_environments": list_environments,
    "create_environment": create_environment,
}
