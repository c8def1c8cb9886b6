"""Handlers and hooks of the ``compute`` pack (see :mod:`mlsandbox.gateway.packs.compute.actions`).

At episode start the gateway's runtime is wrapped so that every job goes through the episode's
:class:`~mlsandbox.world.compute.Pool` (capacity, queue, reservations); the pool is pumped at every step
boundary and whenever a job's state is read (so ``wait`` starts queued jobs as capacity frees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsandbox.backends.local import venvs as envs
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import ActionError
from mlsandbox.gateway.packs.compute import actions as C
from mlsandbox.world import compute as P

if TYPE_CHECKING:
    from mlsandbox.gateway.dispatcher import Gateway

NAME = "compute"


def _ext(gw: Gateway) -> dict[str, Any]:
    return gw.ext.setdefault(NAME, {})


def pool(gw: Gateway) -> P.Pool:
    p = _ext(gw).get("pool")
    if p is None:
        raise ActionError("unsupported", "this episode has no compute pool")
    return p


def _charge(gw: Gateway, credits: float) -> None:
    gw.state.extra_credits += credits
    c = gw.state.counters
    c["idle_reserved_credits"] = c.get("idle_reserved_credits", 0.0) + credits


def _blocked(gw: Gateway) -> str | None:
    if gw.state.credits_left <= 0:
        return "compute budget exhausted: no new work can start"
    return None


# ------------------------------------------------------------------------------------------- hooks


def on_start(gw: Gateway) -> None:
    p = P.Pool(
        gw.scenario.compute,
        gw.runtime.jobs,
        charge=lambda c: _charge(gw, c),
        blocked=lambda: _blocked(gw),
    )
    _ext(gw).update(pool=p, envs={})
    P.register(gw.state.episode_id, p)
    gw.runtime = P.PooledRuntime(gw.runtime, p)


def on_step(gw: Gateway) -> None:
    p = _ext(gw).get("pool")
    if p is not None:
        p.pump()


def on_close(gw: Gateway) -> None:
    p = _ext(gw).get("pool")
    if p is not None:
        p.close()
    P.unregister(gw.state.episode_id)


# ------------------------------------------------------------------------------ train_model hooks


def place_job(gw: Gateway, spec: JobSpec, *, machine: str | None, environment: str | None) -> JobSpec:
    """A job spec on ``machine`` (its limits; an idle reservation of that type when the episode holds
    one) and with ``environment``'s interpreter; ``not_found`` for an unknown machine or environment."""
    update: dict[str, Any] = {}
    labels = dict(spec.labels)
    if machine is not None:
        try:
            m = gw.scenario.compute.machine(machine)
        except KeyError:
            known = ", ".join(x.name for x in gw.scenario.compute.machines)
            raise ActionError(
                "not_found", f"machine {machine!r} does not exist (machines: {known})"
            ) from None
        update.update(cpus=m.cpus, memory_mb=m.memory_mb)
        labels[P.MACHINE_LABEL] = m.name
        p = _ext(gw).get("pool")
        res = p.idle_reservation(m.name) if p is not None else None
        if res is not None:
            labels[P.RESERVATION_LABEL] = res.reservation_id
    info = environment_info(gw, environment)
    if info is not None:
        update["python"] = str(info.python)
    update["labels"] = labels
    return spec.model_copy(update=update)


def environment_info(gw: Gateway, environment: str | None) -> envs.EnvInfo | None:
    """The episode's environment ``environment`` (None for ``default``/None: the sandbox's own);
    ``not_found`` for one that does not exist (used by training, flows and deployments)."""
    if environment is None or environment == "default":
        return None
    table = _ext(gw).get("envs", {})
    info = table.get(environment)
    if info is None:
        known = ", ".join(["default", *sorted(table)])
        raise ActionError(
            "not_found",
            f"environment {environment!r} does not exist (environments: {known}); create it with "
            "create_environment",
        )
    return info


# ---------------------------------------------------------------------------------------- handlers


def list_machines(gw: Gateway, _: C.ListMachines) -> dict[str, Any]:
    p = pool(gw)
    p.pump()
    return {
        "machines": [m.model_dump() for m in gw.scenario.compute.machines],
        "pool": p.capacity(),
        "reservations": [r.as_dict() for r in p.reservations.values()],
    }


def request_resources(gw: Gateway, a: C.RequestResources) -> dict[str, Any]:
    p = pool(gw)
    try:
        m = gw.scenario.compute.machine(a.machine)
    except KeyError:
        known = ", ".join(x.name for x in gw.scenario.compute.machines)
        raise ActionError("not_found", f"machine {a.machine!r} does not exist (machines: {known})") from None
    if gw.state.credits_left <= 0:
        raise ActionError("budget_exhausted", "no compute credits left: nothing can be reserved")
    try:
        res = p.reserve(m)
    except P.InsufficientResources as e:
        raise ActionError("insufficient_resources", str(e)) from None
    return {**res.as_dict(), "pool": p.capacity()}


def release_resources(gw: Gateway, a: C.ReleaseResources) -> dict[str, Any]:
    p = pool(gw)
    try:
        res = p.release(a.reservation_id)
    except KeyError:
        raise ActionError("not_found", f"reservation {a.reservation_id!r} does not exist") from None
    except ValueError as e:
        raise ActionError("conflict", str(e)) from None
    return {"released": res.as_dict(), "pool": p.capacity()}


def cancel_job(gw: Gateway, a: C.CancelJob) -> dict[str, Any]:
    job = gw.job(a.job_id)
    if job.state in ("succeeded", "failed", "cancelled"):
        raise ActionError("conflict", f"{a.job_id} is already {job.state}")
    status = gw.backend_call(lambda: gw.runtime.jobs.cancel(job.backend_id))
    gw.update_job(job, status)
    return {"job_id": a.job_id, "state": status.state}


def get_queue(gw: Gateway, _: C.GetQueue) -> dict[str, Any]:
    p = pool(gw)
    by_backend = {j.backend_id: j.job_id for j in gw.state.jobs.values()}
    queue = [{**q, "job": by_backend.get(q["job"], q["job"])} for q in p.queue_view()]
    return {"queue": queue, "pool": p.capacity()}


def list_environments(gw: Gateway, _: C.ListEnvironments) -> dict[str, Any]:
    import importlib.metadata as md

    rows: list[dict[str, Any]] = [
        {
            "name": "default",
            "requirements": [],
            "packages": {k: md.version(k) for k in ("scikit-learn", "numpy", "pandas", "mlflow")},
        }
    ]
    for name, info in sorted(_ext(gw).get("envs", {}).items()):
        keep = ("scikit-learn", "numpy", "pandas", "scipy", "mlflow")
        rows.append(
            {
                "name": name,
                "requirements": list(info.requirements),
                "packages": {k: v for k, v in info.packages.items() if k in keep},
            }
        )
    return {"environments": rows}


def create_environment(gw: Gateway, a: C.CreateEnvironment) -> dict[str, Any]:
    table = _ext(gw).setdefault("envs", {})
    if a.name == "default" or a.name in table:
        raise ActionError("conflict", f"environment {a.name!r} already exists")
    try:
        info = envs.build(list(a.requirements))
    except ValueError as e:
        raise ActionError("invalid_parameters", str(e)) from None
    except envs.EnvironmentBuildError as e:
        raise ActionError("environment_build_failed", str(e)) from None
    table[a.name] = info
    return {
        "name": a.name,
        "requirements": list(info.requirements),
        "packages": {k: v for k, v in info.packages.items() if k in ("scikit-learn", "numpy", "pandas")},
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
