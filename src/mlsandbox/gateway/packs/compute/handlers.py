"""Handlers of the ``compute`` pack (see :mod:`mlsandbox.gateway.packs.compute.actions`).

The compute pool itself is a core service of the world: the gateway owns the episode's
:class:`~mlsandbox.world.compute.Pool` (``ctx.pool``) and every job goes through it; this pack gives the
agent its machines, reservations and queue, and the episode's named Python environments.
"""

from __future__ import annotations

from typing import Any

from mlsandbox.backends.protocols import EnvironmentBuildError
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.compute import actions as C
from mlsandbox.world import compute as P
from mlsandbox.world.episode import ScoredModel

NAME = "compute"


# ---------------------------------------------------------------------------------------- handlers


def handle_list_machines(ctx: EpisodeContext, _: C.ListMachines) -> dict[str, Any]:
    p = ctx.pool
    p.pump()
    return {
        "machines": [m.model_dump() for m in ctx.scenario.compute.machines],
        "pool": p.capacity(),
        "reservations": [p.view(r) for r in p.reservations.values()],
    }


def handle_request_resources(ctx: EpisodeContext, a: C.RequestResources) -> dict[str, Any]:
    p = ctx.pool
    m = ctx.machine(a.machine)
    refused = ctx.start_refusal("nothing can be reserved")
    if refused is not None:
        raise refused
    try:
        res = p.reserve(m)
    except P.InsufficientResources as e:
        raise ActionError("insufficient_resources", str(e)) from None
    return {**p.view(res), "pool": p.capacity()}


def handle_release_resources(ctx: EpisodeContext, a: C.ReleaseResources) -> dict[str, Any]:
    p = ctx.pool
    try:
        res = p.release(a.reservation_id)
    except KeyError:
        raise ActionError("not_found", f"reservation {a.reservation_id!r} does not exist") from None
    except ValueError as e:
        raise ActionError("conflict", str(e)) from None
    return {"released": p.view(res), "pool": p.capacity()}


def handle_cancel_job(ctx: EpisodeContext, a: C.CancelJob) -> dict[str, Any]:
    job = ctx.job(a.job_id)
    if job.state in ("succeeded", "failed", "cancelled"):
        raise ActionError("conflict", f"{a.job_id} is already {job.state}")
    status = ctx.backend_call(lambda: ctx.pool.cancel(job.backend_id))
    ctx.update_job(job, status)
    return {"job_id": a.job_id, "state": status.state}


def handle_get_queue(ctx: EpisodeContext, _: C.GetQueue) -> dict[str, Any]:
    p = ctx.pool
    by_backend = {j.backend_id: j.job_id for j in ctx.state.jobs.values()}
    queue = [{**q, "job": by_backend.get(q["job"], q["job"])} for q in p.queue_view()]
    return {"queue": queue, "pool": p.capacity()}


DEFAULT_SHOWN = ("scikit-learn", "numpy", "pandas", "mlflow")
"""Packages list_environments shows of the default environment."""
NAMED_SHOWN = ("scikit-learn", "numpy", "pandas", "scipy", "mlflow")
"""Packages list_environments shows of a named environment."""
CREATED_SHOWN = ("scikit-learn", "numpy", "pandas")
"""Packages create_environment shows of the environment it made."""


def handle_list_environments(ctx: EpisodeContext, _: C.ListEnvironments) -> dict[str, Any]:
    default = ctx.backend_call(ctx.runtime.environments.default)
    rows: list[dict[str, Any]] = [
        {
            "name": "default",
            "requirements": [],
            "packages": {k: v for k, v in default.packages.items() if k in DEFAULT_SHOWN},
        }
    ]
    for name, info in sorted(ctx.state.environments.items()):
        rows.append(
            {
                "name": name,
                "requirements": list(info.requirements),
                "packages": {k: v for k, v in info.packages.items() if k in NAMED_SHOWN},
            }
        )
    return {"environments": rows}


def handle_create_environment(ctx: EpisodeContext, a: C.CreateEnvironment) -> dict[str, Any]:
    """Build the environment through the runtime (uv on local; refused with ``unsupported`` where
    named environments do not exist) and name it in the episode."""
    table = ctx.state.environments
    if a.name == "default" or a.name in table:
        raise ActionError("conflict", f"environment {a.name!r} already exists")
    try:
        info = ctx.runtime.environments.build(list(a.requirements))
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


# ------------------------------------------------------------------------------------------- hooks


def on_end(ctx: EpisodeContext) -> None:
    """For a goal whose model a production scorer grades (``goal.scorer_environment``): the latest version
    registered on time is scored in that environment, and what the scorer answered (the holdout's
    probabilities, or the library's error) is kept for the grader (:attr:`EpisodeState.scored`)."""
    goal = ctx.scenario.goal
    requirements = getattr(goal, "scorer_environment", None)
    if not requirements:
        return
    st = ctx.state
    versions, _ = st.graded_versions(goal.model_name)
    if not versions:
        return
    version = versions[-1]
    target = ctx.scenario.dataset(goal.dataset).target
    rows = st.ground_truth.holdouts[goal.dataset].drop(columns=[target])
    envs = ctx.runtime.environments
    try:
        env = envs.build(list(requirements))
        proba = envs.score(env.key, st.registry_name(goal.model_name), version, rows)
    except Unsupported as e:
        st.scored[(goal.model_name, version)] = ScoredModel(None, f"unsupported on this backend: {e}")
    except Exception as e:  # the library's error (ModelScoreError), a build that failed, ...
        st.scored[(goal.model_name, version)] = ScoredModel(None, str(e))
    else:
        st.scored[(goal.model_name, version)] = ScoredModel(proba)
