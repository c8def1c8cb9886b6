"""Handlers of the ``core`` pack (see :mod:`mlsandbox.gateway.packs.core.actions`): datasets, training,
tracking, registry, operations and submit."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, get_args

import orjson

from mlsandbox.backends.protocols import JobSpec
from mlsandbox.data.formats import SUFFIX, format_of, to_bytes
from mlsandbox.errors import ActionError
from mlsandbox.gateway.context import EpisodeContext, EpisodeService
from mlsandbox.gateway.packs.core import actions as C
from mlsandbox.tasks.kind import TaskKind
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world.episode import DatasetRecord, JobRecord

_TERMINAL_JOB_STATES = {"succeeded", "failed", "cancelled"}
_LOG_TAIL_LINES = 15
_T = TypeVar("_T")


@dataclass
class CoreState:
    """What the core pack remembers of an episode (``ctx.pack_state(CoreState)``)."""

    job_requests: dict[str, C.TrainModel] = field(default_factory=dict)
    """Each job's ``train_model`` request (``retry_job`` submits it again, with changes)."""


RESULTS_KEPT = 4096
RESULTS_MAX_BYTES = 256 * 2**20
_RESULTS: OrderedDict[tuple[Any, ...], tuple[bytes | None, bytes]] = OrderedDict()
"""Results of the data actions by the content of what they read (a digest of the object's bytes) and
their parameters: profiling or cleaning the same bytes again gives the same answer (they are pure
functions of the bytes), so it is not computed again, in this episode or another of this process
(:data:`RESULTS_KEPT` results and :data:`RESULTS_MAX_BYTES` of them at most, least recently used out
first: a training run over a split of instances keeps meeting the same tables). Kept as bytes: each use
gets a fresh copy."""
_RESULTS_BYTES = [0]
_RESULTS_LOCK = threading.Lock()


def _memo(key: tuple[Any, ...], compute: Callable[[], tuple[bytes | None, _T]]) -> tuple[bytes | None, _T]:
    """``compute()`` (an optional payload and a JSON-able result), or what it gave for ``key`` before."""
    with _RESULTS_LOCK:
        hit = _RESULTS.get(key)
        if hit is not None:
            _RESULTS.move_to_end(key)
    if hit is not None:
        return hit[0], cast(_T, orjson.loads(hit[1]))
    payload, result = compute()
    entry = (payload, orjson.dumps(result))
    with _RESULTS_LOCK:
        old = _RESULTS.pop(key, None)
        if old is not None:
            _RESULTS_BYTES[0] -= _size(old)
        _RESULTS[key] = entry
        _RESULTS_BYTES[0] += _size(entry)
        while len(_RESULTS) > RESULTS_KEPT or (_RESULTS_BYTES[0] > RESULTS_MAX_BYTES and len(_RESULTS) > 1):
            _RESULTS_BYTES[0] -= _size(_RESULTS.popitem(last=False)[1])
    return payload, result


def _size(entry: tuple[bytes | None, bytes]) -> int:
    return len(entry[0] or b"") + len(entry[1])


def _read_bytes(ctx: EpisodeContext, rec: DatasetRecord) -> tuple[bytes, str]:
    """The object's bytes and their digest (what the data actions' results are remembered by)."""
    data: bytes = ctx.backend_call(lambda: ctx.runtime.object_store.get_object(ctx.state.bucket, rec.key))
    return data, hashlib.blake2b(data, digest_size=16).hexdigest()


def _requests(ctx: EpisodeContext) -> dict[str, C.TrainModel]:
    return ctx.pack_state(CoreState).job_requests


def _service(ctx: EpisodeContext, name: str) -> EpisodeService | None:
    """A pack's service ``name`` of this episode (None for a core service of the sandbox); ``not_found``
    for an optional service this episode does not use, naming the services it has."""
    core = get_args(C.ServiceName)
    if name in core:
        return None
    extra = ctx.episode_services()
    if name not in extra:
        known = ", ".join([*core, *extra])
        raise ActionError(
            "not_found",
            f"service {name!r} is not in use in this episode (it runs only for a scenario with such a "
            f"data source); services: {known}",
        )
    return extra[name]


def dataset_kind(ctx: EpisodeContext, rec: DatasetRecord) -> tuple[TaskKind, Any]:
    """The kind of a dataset of the episode and the scenario dataset spec it comes from: the one its
    lineage (``parent``) leads to under ``raw/``, else the goal's dataset."""
    root = rec
    while root.parent is not None and root.parent in ctx.state.datasets:
        root = ctx.state.datasets[root.parent]
    stem = root.key.rsplit("/", 1)[-1].split(".", 1)[0]
    by_name = {d.name: d for d in ctx.scenario.datasets}
    spec = by_name.get(stem) if root.key.startswith("raw/") else None
    if spec is None:
        spec = by_name.get(ctx.scenario.goal.dataset, ctx.scenario.datasets[0])
    return kind_of(spec), spec


def handle_list_datasets(ctx: EpisodeContext, _: C.ListDatasets) -> dict[str, Any]:
    return {"datasets": ctx.dataset_list()}


def handle_check_data_quality(ctx: EpisodeContext, a: C.CheckDataQuality) -> dict[str, Any]:
    rec = ctx.dataset(a.dataset)
    data, digest = _read_bytes(ctx, rec)

    def profile() -> tuple[None, dict[str, Any]]:
        df = rec.frame(data)
        target = rec.target if rec.target in df.columns else None
        return None, kind.profile(df, target)

    kind, _ = dataset_kind(ctx, rec)
    _, found = _memo(("profile", kind.name, digest, rec.fmt, rec.target), profile)
    return {"dataset": rec.key, "format": rec.fmt, "profile": found}


def handle_clean_dataset(ctx: EpisodeContext, a: C.CleanDataset) -> dict[str, Any]:
    rec = ctx.dataset(a.dataset)
    stem = rec.key.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    out_key = a.output or f"clean/{stem}-{a.strategy.replace('_', '-')}.parquet"
    if out_key.split("/", 1)[0] == "raw":
        raise ActionError(
            "forbidden_name", f"{out_key!r}: the raw/ prefix holds source data and is read-only"
        )
    try:
        out_fmt = format_of(out_key)
    except ValueError:
        raise ActionError(
            "invalid_parameters",
            f"output {out_key!r} must end in one of {', '.join(sorted(set(SUFFIX.values())))}",
        ) from None
    kind, _ = dataset_kind(ctx, rec)
    if a.strategy not in kind.preparations:
        raise ActionError(
            "invalid_parameters",
            f"strategy {a.strategy!r} does not fit dataset {rec.key!r} of kind {kind.name!r} "
            f"(its strategies: {', '.join(kind.preparations)})",
        )
    if a.strategy == "drop_conflicting_duplicates" and rec.target is None:
        raise ActionError("invalid_parameters", f"{a.strategy} needs a dataset with a target column")
    data, digest = _read_bytes(ctx, rec)

    def clean() -> tuple[bytes, dict[str, Any]]:
        df = rec.frame(data)
        try:
            cleaned, summary = kind.prepare(df, a.strategy, rec.target if rec.target in df.columns else None)
        except (KeyError, ValueError) as e:  # the strategy does not apply to this table: the agent's error
            why = e.args[0] if isinstance(e, KeyError) and e.args else e
            raise ActionError(
                "invalid_parameters", f"strategy {a.strategy!r} cannot clean dataset {rec.key!r}: {why}"
            ) from None
        return to_bytes(cleaned, out_fmt), {"rows": len(cleaned), "summary": summary}

    payload, facts = _memo(("clean", kind.name, digest, rec.fmt, rec.target, a.strategy, out_fmt), clean)
    assert payload is not None
    summary = facts["summary"]
    ctx.backend_call(lambda: ctx.runtime.object_store.put_object(ctx.state.bucket, out_key, payload))
    ctx.state.datasets[out_key] = DatasetRecord(
        out_key, out_fmt, len(payload), rec.target, "clean_dataset", rec.key
    )
    return {
        "dataset": out_key,
        "source": rec.key,
        "strategy": a.strategy,
        "rows": facts["rows"],
        "changes": summary,
    }


def handle_train_model(ctx: EpisodeContext, a: C.TrainModel) -> dict[str, Any]:
    st = ctx.state
    rec = ctx.dataset(a.dataset)
    if rec.target is None:
        raise ActionError("invalid_parameters", f"dataset {rec.key!r} has no target column to train on")
    kind, spec_of = dataset_kind(ctx, rec)
    try:
        kind.check_algorithm(a.algorithm, a.hyperparams)
    except ValueError as e:
        raise ActionError("invalid_parameters", f"dataset {rec.key!r}: {e}") from None
    refused = ctx.start_refusal()
    if refused is not None:
        raise refused
    job_id = f"job-{len(st.jobs) + 1}"
    backend_id = f"{st.episode_id}-{job_id}"
    spec = JobSpec(
        job_id=backend_id,
        workload="trainer",
        args=[
            "--bucket",
            st.bucket,
            "--key",
            rec.key,
            "--target",
            rec.target,
            "--algorithm",
            a.algorithm,
            "--hyperparams",
            json.dumps(a.hyperparams, sort_keys=True),
            "--experiment-id",
            st.experiment_id,
            "--run-name",
            job_id,
            "--seed",
            str(ctx.seed),
            *kind.trainer_args(spec_of),
        ],
        cpus=a.resources.cpus,
        memory_mb=a.resources.memory_mb,
        labels=dict([st.job_label]),
        timeout_s=ctx.scenario.budget.max_job_seconds,
    )
    if a.machine is not None or a.environment is not None:
        spec = ctx.place_job(spec, machine=a.machine, environment=a.environment)
    from mlsandbox.gateway.packs.config.handlers import episode_prefix

    prefix = episode_prefix(ctx)
    if prefix:  # the job reads its endpoints and credentials from the episode's config store
        spec = spec.model_copy(update={"args": [*spec.args, "--config-prefix", prefix]})
    spec = ctx.adjust_job(spec, job_id)
    status = ctx.backend_call(lambda: ctx.pool.submit(spec))
    _requests(ctx)[job_id] = a
    st.jobs[job_id] = JobRecord(job_id, backend_id, rec.key, a.algorithm, st.step, state=status.state)
    return {"job_id": job_id, "state": status.state, "dataset": rec.key, "algorithm": a.algorithm}


def handle_get_job(ctx: EpisodeContext, a: C.GetJob) -> dict[str, Any]:
    job = ctx.job(a.job_id)
    status = ctx.backend_call(lambda: ctx.pool.get(job.backend_id))
    ctx.update_job(job, status)
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "state": status.state,
        "dataset": job.dataset,
        "algorithm": job.algorithm,
        "exit_code": status.exit_code,
        "cpu_seconds": round(status.cpu_seconds, 3),
    }
    if status.state == "succeeded":
        out["run_id"] = status.result.get("run_id")
        out["metrics"] = _round_metrics(status.result.get("metrics", {}))
    elif status.state in ("failed", "cancelled"):
        out["log_tail"] = ctx.backend_call(lambda: ctx.pool.logs(job.backend_id, tail=_LOG_TAIL_LINES))
    return out


def handle_list_runs(ctx: EpisodeContext, _: C.ListRuns) -> dict[str, Any]:
    runs = ctx.backend_call(lambda: ctx.runtime.tracking.list_runs(ctx.state.experiment_id))
    rows = [
        {
            "run_id": r.run_id,
            "run_name": r.tags.get("mlflow.runName"),
            "status": r.status,
            "params": dict(sorted(r.params.items())),
            "metrics": _round_metrics(r.metrics),
        }
        for r in sorted(runs, key=lambda r: (r.start_time or 0, r.run_id))
    ]
    return {"runs": rows}


def handle_register_model(ctx: EpisodeContext, a: C.RegisterModel) -> dict[str, Any]:
    st = ctx.state
    try:
        run = ctx.runtime.tracking.get_run(a.run_id)
    except KeyError:
        raise ActionError("not_found", f"run {a.run_id} does not exist") from None
    except Exception as e:  # the tracker is down or failing: an error observation, not a crash
        raise ActionError("backend_error", f"{type(e).__name__}: {e}") from None
    if run.experiment_id != st.experiment_id:
        raise ActionError("not_found", f"run {a.run_id} does not exist in this episode's experiment")
    if run.status != "FINISHED":
        raise ActionError(
            "conflict", f"run {a.run_id} is {run.status}: only a FINISHED run's model can be registered"
        )
    mv = ctx.backend_call(lambda: ctx.runtime.tracking.register_model(a.run_id, st.registry_name(a.name)))
    st.note_registered(a.name, mv.version, ctx.runtime.clock.time())
    return {"name": a.name, "version": mv.version, "run_id": a.run_id, "status": mv.status}


def handle_wait(ctx: EpisodeContext, a: C.Wait) -> dict[str, Any]:
    clock = ctx.runtime.clock
    deadline = clock.monotonic() + a.seconds
    before = {j.job_id: j.state for j in ctx.state.jobs.values()}
    while True:
        ctx.refresh_jobs()
        changed = [j for j in ctx.state.jobs.values() if j.state != before[j.job_id]]
        if changed or clock.monotonic() >= deadline:
            break
        if not any(s not in _TERMINAL_JOB_STATES for s in before.values()):
            # Nothing running that could change: time passes all the same.
            clock.sleep(max(0.0, deadline - clock.monotonic()))
            break
        clock.sleep(min(0.25, max(0.0, deadline - clock.monotonic())))
    return {"jobs": [{"job_id": j.job_id, "state": j.state} for j in ctx.state.jobs.values()]}


def handle_get_logs(ctx: EpisodeContext, a: C.GetLogs) -> dict[str, Any]:
    if a.target.startswith("job-"):
        job = ctx.job(a.target)
        text = ctx.backend_call(lambda: ctx.pool.logs(job.backend_id, tail=a.tail))
        return {"target": a.target, "lines": text.splitlines()[-a.tail :]}
    service = a.target.removeprefix("service:")
    extra = _service(ctx, service)
    if extra is not None:  # a pack's service of the episode reads its own log
        text = ctx.backend_call(lambda: extra.logs(a.tail))
        return {"target": service, "lines": text.splitlines()[-a.tail :]}
    text = ctx.backend_call(lambda: ctx.runtime.faults.services.logs(service, tail=a.tail))
    return {"target": service, "lines": text.splitlines()[-a.tail :]}


def handle_get_service_health(ctx: EpisodeContext, a: C.GetServiceHealth) -> dict[str, Any]:
    extra = _service(ctx, a.service)
    if extra is not None:
        return ctx.backend_call(extra.health).model_dump()
    health = ctx.backend_call(lambda: ctx.runtime.faults.services.health(a.service))
    return health.model_dump()


def handle_restart_service(ctx: EpisodeContext, a: C.RestartService) -> dict[str, Any]:
    extra = _service(ctx, a.service)
    if extra is not None:
        health = ctx.backend_call(extra.restart)
    else:
        health = ctx.backend_call(lambda: ctx.runtime.faults.services.restart(a.service, wait=True))
    return {"restarted": a.service, **health.model_dump()}


def handle_retry_job(ctx: EpisodeContext, a: C.RetryJob) -> dict[str, Any]:
    job = ctx.job(a.job_id)
    if job.state not in _TERMINAL_JOB_STATES:
        raise ActionError("conflict", f"{a.job_id} is {job.state}: only a finished job can be retried")
    original = _requests(ctx).get(a.job_id)
    if original is None:
        raise ActionError("not_found", f"{a.job_id} cannot be retried: its parameters are unknown")
    changes = a.changes.model_dump(exclude_none=True)
    if a.changes.resources is not None:
        changes["resources"] = a.changes.resources
    retry = original.model_copy(update=changes)
    out = handle_train_model(ctx, C.TrainModel.model_validate(retry.model_dump()))
    return {**out, "retry_of": a.job_id}


def handle_set_job_resources(ctx: EpisodeContext, a: C.SetJobResources) -> dict[str, Any]:
    job = ctx.job(a.job_id)
    if a.cpus is None and a.memory_mb is None:
        raise ActionError("invalid_parameters", "give cpus and/or memory_mb")
    if job.state in _TERMINAL_JOB_STATES:
        raise ActionError("conflict", f"{a.job_id} is {job.state}: limits apply to a running job")
    try:
        status = ctx.pool.set_resources(job.backend_id, cpus=a.cpus, memory_mb=a.memory_mb)
    except KeyError:
        raise ActionError("not_found", f"job {a.job_id!r} does not exist") from None
    except ValueError as e:
        raise ActionError("conflict", str(e)) from None
    ctx.update_job(job, status)
    request = _requests(ctx).get(a.job_id)
    if request is not None:
        res = request.resources.model_copy(
            update={k: v for k, v in (("cpus", a.cpus), ("memory_mb", a.memory_mb)) if v is not None}
        )
        _requests(ctx)[a.job_id] = request.model_copy(update={"resources": res})
    ctx.job_resources_set(job.backend_id, cpus=a.cpus, memory_mb=a.memory_mb)
    return {"job_id": a.job_id, "state": status.state, "cpus": a.cpus, "memory_mb": a.memory_mb}


def handle_submit(ctx: EpisodeContext, _: C.Submit) -> dict[str, Any]:
    ctx.state.submitted = True
    registered = [{"name": n, "version": v} for (n, v) in ctx.state.registered]
    return {"submitted": True, "registered_models": registered}


def _round_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in sorted(metrics.items())}
