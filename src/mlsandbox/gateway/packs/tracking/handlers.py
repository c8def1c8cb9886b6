"""Handlers of the ``tracking`` pack (see :mod:`mlsandbox.gateway.packs.tracking.actions`)."""

from __future__ import annotations

from typing import Any

from mlsandbox.backends.protocols import ModelVersionInfo, RunInfo
from mlsandbox.errors import ActionError
from mlsandbox.gateway.context import EpisodeContext
from mlsandbox.gateway.packs.tracking import actions as T

_LOWER_IS_BETTER = ("loss", "error", "rmse", "mae", "mse", "latency")


def _row(r: RunInfo) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "run_name": r.tags.get("mlflow.runName"),
        "status": r.status,
        "params": dict(sorted(r.params.items())),
        "metrics": {k: round(v, 6) for k, v in sorted(r.metrics.items())},
    }


def episode_run(ctx: EpisodeContext, run_id: str) -> RunInfo:
    """A run of this episode's experiment; ``not_found`` for any other (other episodes' runs included)."""
    try:
        run = ctx.runtime.tracking.get_run(run_id)
    except KeyError:
        raise ActionError("not_found", f"run {run_id} does not exist") from None
    except Exception as e:
        raise ActionError("backend_error", f"{type(e).__name__}: {e}") from None
    if run.experiment_id != ctx.state.experiment_id:
        raise ActionError("not_found", f"run {run_id} does not exist in this episode's experiment")
    return run


def model_versions(ctx: EpisodeContext, name: str) -> list[ModelVersionInfo]:
    """The versions of the episode's model ``name`` (agent-visible name); ``not_found`` when none."""
    full = ctx.state.registry_name(name)
    versions = ctx.backend_call(lambda: ctx.runtime.tracking.list_model_versions(full))
    versions = [v for v in versions if v.name == full]
    if not versions:
        raise ActionError("not_found", f"registered model {name!r} does not exist in this episode")
    return versions


def _version_row(ctx: EpisodeContext, v: ModelVersionInfo) -> dict[str, Any]:
    return {
        "name": v.name.removeprefix(ctx.state.model_prefix),
        "version": int(v.version),
        "run_id": v.run_id,
        "status": v.status,
        "aliases": v.aliases,
    }


def handle_search_runs(ctx: EpisodeContext, a: T.SearchRuns) -> dict[str, Any]:
    try:
        runs = ctx.runtime.tracking.search_runs(
            ctx.state.experiment_id, a.filter, list(a.order_by) or None, a.max_results
        )
    except ValueError as e:
        raise ActionError("invalid_parameters", f"the tracking server rejected the search: {e}") from None
    except Exception as e:
        raise ActionError("backend_error", f"{type(e).__name__}: {e}") from None
    return {"count": len(runs), "runs": [_row(r) for r in runs]}


def handle_get_run(ctx: EpisodeContext, a: T.GetRun) -> dict[str, Any]:
    r = episode_run(ctx, a.run_id)
    tags = {k: v for k, v in sorted(r.tags.items()) if not k.startswith("mlflow.") or k == "mlflow.runName"}
    return {
        **_row(r),
        "start_time": r.start_time,
        "end_time": r.end_time,
        "duration_s": None
        if r.end_time is None or r.start_time is None
        else round(r.end_time - r.start_time, 3),
        "tags": tags,
    }


def handle_compare_runs(ctx: EpisodeContext, a: T.CompareRuns) -> dict[str, Any]:
    ids = list(dict.fromkeys(a.run_ids))
    if len(ids) < 2:
        raise ActionError("invalid_parameters", "compare_runs needs at least two different run ids")
    runs = [episode_run(ctx, i) for i in ids]
    params = sorted({k for r in runs for k in r.params})
    metrics = sorted({k for r in runs for k in r.metrics})
    best: dict[str, str] = {}
    for m in metrics:
        have = [(r.metrics[m], r.run_id) for r in runs if m in r.metrics]
        lower = any(s in m.lower() for s in _LOWER_IS_BETTER)
        best[m] = (min(have) if lower else max(have))[1]
    return {
        "run_ids": ids,
        "params": {k: {r.run_id: r.params.get(k) for r in runs} for k in params},
        "differing_params": [k for k in params if len({r.params.get(k) for r in runs}) > 1],
        "metrics": {k: {r.run_id: _round(r.metrics.get(k)) for r in runs} for k in metrics},
        "best_run_by_metric": best,
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def handle_get_model_versions(ctx: EpisodeContext, a: T.GetModelVersions) -> dict[str, Any]:
    versions = model_versions(ctx, a.name)
    return {"name": a.name, "versions": [_version_row(ctx, v) for v in versions]}


def handle_set_model_alias(ctx: EpisodeContext, a: T.SetModelAlias) -> dict[str, Any]:
    versions = model_versions(ctx, a.name)
    if str(a.version) not in {v.version for v in versions}:
        known = ", ".join(v.version for v in versions)
        raise ActionError("not_found", f"model {a.name!r} has no version {a.version} (versions: {known})")
    previous = next((int(v.version) for v in versions if a.alias in v.aliases), None)
    full = ctx.state.registry_name(a.name)
    mv = ctx.backend_call(lambda: ctx.runtime.tracking.set_model_alias(full, a.alias, str(a.version)))
    return {**_version_row(ctx, mv), "alias": a.alias, "previous_version": previous}


def handle_delete_model_alias(ctx: EpisodeContext, a: T.DeleteModelAlias) -> dict[str, Any]:
    versions = model_versions(ctx, a.name)
    holder = next((int(v.version) for v in versions if a.alias in v.aliases), None)
    if holder is None:
        raise ActionError("not_found", f"model {a.name!r} has no alias {a.alias!r}")
    full = ctx.state.registry_name(a.name)
    ctx.backend_call(lambda: ctx.runtime.tracking.delete_model_alias(full, a.alias))
    return {"name": a.name, "alias": a.alias, "removed_from_version": holder}
