"""The calibration sweep: every point of the plan measured on a real backend through the declared
Runtime, one JSON line per point.

- **jobs**: the trainer workload through ``rt.jobs`` (one at a time, at most one CPU each, so the sweep
  takes at most one core), its rows in ``rt.object_store``, tracked in ``rt.tracking``; a successful job's
  model is registered and scored on the hidden holdout exactly as the grader does
  (``tracking.load_model`` then ``predict_proba``). Every state, exit code, CPU-second, peak memory, log
  line (the runner's ``[mlsandbox]`` notes included) and MLflow param and metric name is recorded.
- **fits**: the trainer's own pipeline functions in this process on the same rows (one thread).
- **serving**: the world's production traffic generator against real model-server replicas
  (``rt.serving``), one rate per point.
- **flows**: real runs of the episode flows (``rt.flows``), success and failure cases, every state seen.

Nothing is left behind: the session's bucket, experiment, registered models, jobs, deployments and flow
runs are removed at the end (and on Ctrl-C).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from mlsandbox.backends.protocols import (
    DeploymentSpec,
    EpisodeFlows,
    EpisodeServing,
    JobSpec,
    JobStatus,
    Machine,
    Runtime,
)
from mlsandbox.calibration import records as R
from mlsandbox.calibration.datasets import Prepared, prepare
from mlsandbox.calibration.plan import Algorithm, DataRef, FitPoint, FlowPoint, JobPoint, ServingPoint
from mlsandbox.data.clean import Strategy
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.tabular import GENERATOR_VERSION
from mlsandbox.scenario import load_builtin
from mlsandbox.tasks.registry import kind_of
from mlsandbox.workloads.contract import NOTE_PREFIX

log = logging.getLogger(__name__)

LABEL = "mlsandbox.dev/calibration"
LOG_LINES_KEPT = 200
_TERMINAL = ("succeeded", "failed", "cancelled")
_FLOW_TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
SERVING_DATA = DataRef(scenario="serving-deploy-slo", dataset="customers", seed=11)
FLOW_DATA = DataRef(scenario="pipeline-failure-upstream", dataset="customers", seed=13)
FLOW_BATCHES = ("2026-11-26", "2026-11-27", "2026-11-28")


def holdout_auc(model: Any, prepared: Prepared) -> float:
    """The grader's figure: ``predict_proba`` of the model on the holdout's features, ROC AUC."""
    from sklearn.metrics import roc_auc_score

    holdout = prepared.holdout
    x, y = holdout.drop(columns=[prepared.target]), holdout[prepared.target].to_numpy()
    return float(roc_auc_score(y, np.asarray(model.predict_proba(x))[:, 1]))


def split_log(text: str) -> dict[str, Any]:
    """A job's log as lines, with the runner's notes and the last error line apart."""
    lines = text.splitlines()
    notes = [line for line in lines if line.startswith(NOTE_PREFIX)]
    own = [line for line in lines if not line.startswith(NOTE_PREFIX) and line.strip()]
    error = next((line for line in reversed(own) if not line.startswith((" ", "\t", "^"))), None)
    return {"lines": lines[-LOG_LINES_KEPT:], "line_count": len(lines), "notes": notes, "last_line": error}


# ------------------------------------------------------------------------------------------- context


@dataclass
class Context:
    """What a session made on the runtime (removed by :meth:`close`)."""

    rt: Runtime
    session: str
    bucket: str
    experiment_id: str
    labels: dict[str, str]
    registered: list[str] = field(default_factory=list)
    jobs: int = 0
    serving: EpisodeServing | None = None
    serving_model: tuple[str, str] | None = None
    serving_population: Any = None
    flows: EpisodeFlows | None = None
    flow_model: str | None = None
    flow_runs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, rt: Runtime, session: str) -> Context:
        bucket = f"calib-{session}"
        rt.object_store.create_bucket(bucket)
        experiment = rt.tracking.create_experiment(f"calibration-{session}", tags={LABEL: session})
        return cls(rt, session, bucket, experiment, {LABEL: session})

    def close(self) -> None:
        rt = self.rt
        steps: list[Callable[[], Any]] = []
        if self.serving is not None:
            steps.append(self.serving.close)
        if self.flows is not None:
            steps.append(self.flows.close)
        steps.append(lambda: rt.jobs.cleanup((LABEL, self.session)))
        steps += [functools.partial(rt.tracking.delete_registered_model, name) for name in self.registered]
        steps.append(lambda: rt.tracking.delete_experiment(self.experiment_id))
        steps.append(lambda: rt.object_store.delete_bucket(self.bucket))
        for step in steps:
            try:
                step()
            except Exception as e:  # the rest is still removed
                log.warning("calibration cleanup: %s", e)

    def wait_job(self, job_id: str, poll_s: float = 0.25) -> JobStatus:
        status = self.rt.jobs.get(job_id)
        while status.state not in _TERMINAL:
            self.rt.clock.sleep(poll_s)
            status = self.rt.jobs.get(job_id)
        return status


# ---------------------------------------------------------------------------------------------- jobs


def trainer_args(ctx: Context, key: str, target: str, point: JobPoint, run_name: str, seed: int) -> list[str]:
    """The trainer's command line, as ``train_model`` builds it (with the data's kind's arguments)."""
    return [
        "--bucket", ctx.bucket, "--key", key, "--target", target,
        "--algorithm", point.algorithm, "--hyperparams", json.dumps(point.hyperparams, sort_keys=True),
        "--experiment-id", ctx.experiment_id, "--run-name", run_name, "--seed", str(seed),
        *kind_of(_spec(point.data)).trainer_args(_spec(point.data)),
    ]  # fmt: skip


def _spec(ref: DataRef) -> Any:
    """The dataset spec a data reference names."""
    return load_builtin(ref.scenario).dataset(ref.dataset)


def run_job(ctx: Context, point: JobPoint) -> dict[str, Any]:
    rt = ctx.rt
    pid = point.id()
    prepared = prepare(point.data, point.cleaning, name=pid)
    key = f"{pid}/{prepared.key}"
    rt.object_store.put_object(ctx.bucket, key, prepared.payload)
    ctx.jobs += 1
    job_id = f"calib-{ctx.session}-{ctx.jobs}"
    run_name = f"calib-{pid}"
    spec = JobSpec(
        job_id=job_id,
        workload="trainer",
        args=trainer_args(
            ctx,
            f"{pid}/missing.parquet" if point.missing_key else key,
            prepared.target,
            point,
            run_name,
            point.data.seed,
        ),
        cpus=point.cpus,
        memory_mb=point.memory_mb,
        labels=dict(ctx.labels),
        timeout_s=point.timeout_s,
    )
    t0 = rt.clock.monotonic()
    submitted = rt.jobs.submit(spec)
    status = ctx.wait_job(job_id)
    observed = rt.clock.monotonic() - t0
    text = rt.jobs.logs(job_id, tail=0)
    result: dict[str, Any] = {
        "state": status.state,
        "submitted_state": submitted.state,
        "exit_code": status.exit_code,
        "cpu_seconds": status.cpu_seconds,
        "peak_rss_mb": None if status.peak_rss_bytes is None else status.peak_rss_bytes / 2**20,
        "wall_s": (status.finished_at or 0) - (status.started_at or 0) if status.started_at else None,
        "observed_s": observed,
        "metrics": dict(status.result.get("metrics") or {}),
        "result_keys": sorted(status.result),
        "log": split_log(text),
        "data": prepared.features,
    }
    run = _run_named(ctx, run_name)
    if run is not None:
        result["run"] = {
            "status": run.status,
            "params": dict(run.params),
            "metric_names": sorted(run.metrics),
            "tags": sorted(k for k in run.tags if not k.startswith("mlflow.log-model")),
        }
    if status.state == "succeeded" and status.result.get("run_id"):
        name = f"calib-{ctx.session}-{pid}"
        t1 = time.perf_counter()
        mv = rt.tracking.register_model(str(status.result["run_id"]), name)
        ctx.registered.append(name)
        model = rt.tracking.load_model(name, mv.version)
        spec = _spec(point.data)
        kind = kind_of(spec)
        if point.purpose == "kind":  # another kind of work: its default metric, as its grader computes it
            metric = kind.metric()
            result["kind"] = kind.name
            result["task"] = kind.fit_task
            result["holdout_metric"] = {metric.name: kind.score(metric.name, model, prepared.holdout, spec)}
            result["grade_s"] = time.perf_counter() - t1
            return result
        result["holdout_auc"] = holdout_auc(model, prepared)
        result["grade_s"] = time.perf_counter() - t1
        # The same pipeline fitted in this process on the same rows: the fits' grid must agree with jobs.
        # (A binary job's steps are the table cleaning strategies.)
        same = run_fit(FitPoint(data=point.data, cleaning=cast("tuple[Strategy, ...]", point.cleaning),
                                algorithm=cast(Algorithm, point.algorithm), hyperparams=point.hyperparams))  # fmt: skip
        result["in_process"] = {k: same.get(k) for k in ("metrics", "holdout_auc", "fit_cpu_s", "fit_wall_s")}
    return result


def _run_named(ctx: Context, run_name: str) -> Any:
    try:
        runs = ctx.rt.tracking.search_runs(
            ctx.experiment_id, filter_string=f"tags.mlflow.runName = '{run_name}'", max_results=1
        )
    except Exception as e:
        log.warning("run %s: %s", run_name, e)
        return None
    return runs[0] if runs else None


# ---------------------------------------------------------------------------------------------- fits


def run_fit(point: FitPoint) -> dict[str, Any]:
    """The trainer's pipeline on the rows a job would read, in this process (one thread)."""
    from sklearn.model_selection import train_test_split
    from threadpoolctl import threadpool_limits

    from mlsandbox.workloads import trainer as T

    prepared = prepare(point.data, point.cleaning)
    table, target = prepared.frame, prepared.target
    result: dict[str, Any] = {"data": prepared.features}
    seed = point.data.seed
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        with threadpool_limits(1), contextlib.redirect_stdout(io.StringIO()) as out:
            y = table[target]
            x = table.drop(columns=[target])
            x_train, x_val, y_train, y_val = train_test_split(
                x, y, test_size=T.VALIDATION_FRACTION, random_state=seed, stratify=y
            )
            pipeline = T.make_pipeline(x, point.algorithm, point.hyperparams, seed)
            fit_cpu0, fit_wall0 = time.process_time(), time.perf_counter()
            T.fit(pipeline, x_train, y_train)
            result["fit_cpu_s"] = time.process_time() - fit_cpu0
            result["fit_wall_s"] = time.perf_counter() - fit_wall0
            result["metrics"] = T.evaluate(pipeline, x_val, y_val)
            result["holdout_auc"] = holdout_auc(pipeline, prepared)
        result["epochs"] = sum(1 for line in out.getvalue().splitlines() if line.startswith("epoch "))
        result["state"] = "succeeded"
    except Exception as e:
        result["state"] = "failed"
        result["error"] = {"type": type(e).__name__, "message": str(e).splitlines()[0] if str(e) else ""}
    result["cpu_s"] = time.process_time() - cpu0
    result["wall_s"] = time.perf_counter() - wall0
    return result


# ------------------------------------------------------------------------------------------- serving


def _serving_setup(ctx: Context) -> None:
    """A registered model (a real job of the serving scenario's table), the feature service on the
    traffic's population, the episode's serving handle."""
    if ctx.serving is not None:
        return
    from mlsandbox.scenario import load_builtin
    from mlsandbox.world.serving.traffic import ID_COLUMN, make_population

    point = JobPoint(
        purpose="serving-setup", data=SERVING_DATA, cleaning=("impute_median",), algorithm="gradient_boosting"
    )
    out = run_job(ctx, point)
    if out["state"] != "succeeded":
        raise RuntimeError(f"the serving setup job failed: {out['log']['last_line']}")
    name = ctx.registered[-1]
    scenario = load_builtin(SERVING_DATA.scenario)
    assert scenario.serving is not None and scenario.serving.traffic is not None
    population = make_population(scenario.dataset(SERVING_DATA.dataset), scenario.serving.traffic, 11)
    ctx.rt.object_store.put_object(
        ctx.bucket, "online/features.parquet", to_bytes(population.features, "parquet")
    )
    serving = ctx.rt.serving.open(f"calib-{ctx.session}", dict(ctx.labels))
    ctx.serving = serving
    serving.start_feature_service(ctx.bucket, "online/features.parquet", ID_COLUMN)
    ctx.serving_model, ctx.serving_population = (name, "1"), population


def _probe(serving: EpisodeServing, deployment: str, population: Any) -> dict[str, Any]:
    """One request by entity ids before the traffic starts: its status and latency, or the error (what
    the traffic generator's clients do not keep)."""
    import orjson

    body = orjson.dumps({"entity_ids": population.phases[0][:1]})
    t0 = time.perf_counter()
    try:
        resp = serving.request(deployment, "/predict", body, timeout_s=10.0)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:500], "seconds": time.perf_counter() - t0}
    return {
        "status": resp.status,
        "seconds": time.perf_counter() - t0,
        "body": resp.body[:300].decode(errors="replace"),
    }


def run_serving(ctx: Context, point: ServingPoint) -> dict[str, Any]:
    from mlsandbox.scenario import load_builtin
    from mlsandbox.world.serving.traffic import TrafficGenerator

    _serving_setup(ctx)
    assert ctx.serving is not None and ctx.serving_model is not None
    scenario = load_builtin(SERVING_DATA.scenario)
    machine = scenario.compute.machines[0]
    name, version = ctx.serving_model
    deployment = "churn"
    t0 = time.perf_counter()
    view, created = ctx.serving.deploy(
        DeploymentSpec(
            deployment=deployment,
            model="churn",
            registry_name=name,
            version=version,
            replicas=point.replicas,
            machine=Machine(
                name=machine.name,
                cpus=machine.cpus,
                memory_mb=machine.memory_mb,
                credits_per_second=machine.credits_per_second,
            ),
        )
    )
    deploy_s = time.perf_counter() - t0
    probe = _probe(ctx.serving, deployment, ctx.serving_population)
    assert scenario.serving is not None and scenario.serving.traffic is not None
    traffic = scenario.serving.traffic.model_copy(
        update={"rate_rps": point.rate_rps, "rows_per_request": point.rows_per_request,
                "by_entity": point.by_entity, "spikes": [], "daily_amplitude": 0.0}
    )  # fmt: skip
    gen = TrafficGenerator(traffic, ctx.serving_population, ctx.serving, deployment, 5, ctx.rt.clock)
    for ref in ctx.serving.replicas().get(deployment, []):  # CPU is a share since the previous call
        ctx.serving.stats(ref)
    gen.start()
    ctx.rt.clock.sleep(point.duration_s)
    gen.stop()
    outcomes = list(gen.log.outcomes)
    answered = [o for o in outcomes if o.status != 0]
    latencies = sorted(o.latency_s * 1000 for o in answered)
    statuses: dict[str, int] = {}
    for o in outcomes:
        statuses[str(o.status)] = statuses.get(str(o.status), 0) + 1
    refs = ctx.serving.replicas().get(deployment, [])
    scrape = ctx.serving.scrape(refs[0], timeout_s=5.0) if refs else ""
    stats = [ctx.serving.stats(r).model_dump() for r in refs]
    ctx.serving.undeploy(deployment)

    def q(p: float) -> float | None:
        return float(np.percentile(latencies, p)) if latencies else None

    return {
        "created": created,
        "deploy_s": deploy_s,
        "probe": probe,
        "replicas_up": view.replicas_up,
        "sent": gen.log.sent,
        "dropped": gen.log.dropped,
        "answered": len(answered),
        "statuses": statuses,
        "achieved_rps": len(answered) / point.duration_s,
        "latency_ms": {"p50": q(50), "p90": q(90), "p95": q(95), "p99": q(99), "max": q(100),
                       "mean": float(np.mean(latencies)) if latencies else None},
        "latencies_ms": [round(v, 2) for v in latencies],
        "metric_names": sorted({line.split("{")[0].split(" ")[0] for line in scrape.splitlines()
                                if line and not line.startswith("#")}),
        "replica_stats": stats,
    }  # fmt: skip


# --------------------------------------------------------------------------------------------- flows


def _flows_setup(ctx: Context) -> EpisodeFlows:
    """Upstream batches of the pipeline scenario's table (one with a renamed column), the lake with the
    first batches ingested, the episode's flows."""
    if ctx.flows is not None:
        return ctx.flows
    prepared = prepare(FLOW_DATA, ())
    df = prepared.frame
    store = ctx.rt.object_store
    parts = [df.iloc[i :: len(FLOW_BATCHES)].reset_index(drop=True) for i in range(len(FLOW_BATCHES))]
    for batch, part in zip(FLOW_BATCHES, parts, strict=True):
        store.put_object(ctx.bucket, f"upstream/customers/{batch}.csv", to_bytes(part, "csv"))
        store.put_object(ctx.bucket, f"lake/customers/{batch}.parquet", to_bytes(part, "parquet"))
    renamed = parts[0].rename(columns={"tenure_months": "tenure_mo"})
    store.put_object(ctx.bucket, "upstream/customers/2026-11-30.csv", to_bytes(renamed, "csv"))
    ctx.flows = ctx.rt.flows.open(f"calib-{ctx.session}", dict(ctx.labels))
    ctx.flow_model = f"calib-{ctx.session}-flow-churn"
    return ctx.flows


def _flow_parameters(ctx: Context, point: FlowPoint) -> dict[str, Any]:
    prepared = prepare(FLOW_DATA, ())
    target = prepared.target
    columns = [c for c in prepared.frame.columns if c != target]
    numeric = [c for c in columns if str(prepared.frame[c].dtype)[0] in "biuf"]
    if point.flow == "ingestion":
        batch = {"complete": FLOW_BATCHES[0], "missing_upstream": "2026-12-01", "schema_change": "2026-11-30"}
        return {"bucket": ctx.bucket, "dataset": "customers", "batch": batch[point.case],
                "required_columns": [*columns, target], "numeric_columns": numeric, "rename": {}}  # fmt: skip
    if point.flow == "training":
        expected = list(FLOW_BATCHES) + (["2026-12-02"] if point.case == "incomplete_lake" else [])
        return {"bucket": ctx.bucket, "dataset": "customers", "target": target,
                "experiment_id": ctx.experiment_id, "model_name": ctx.flow_model,
                "algorithm": point.algorithm, "hyperparams": {}, "min_auc": 0.7, "seed": FLOW_DATA.seed,
                "expected_batches": expected}  # fmt: skip
    ref = "1" if point.case == "complete" else "99"
    return {"bucket": ctx.bucket, "dataset": "customers", "batch": FLOW_BATCHES[0],
            "model_name": ctx.flow_model, "model_ref": ref}  # fmt: skip


def run_flow(ctx: Context, point: FlowPoint, timeout_s: float = 600.0) -> dict[str, Any]:
    flows = _flows_setup(ctx)
    clock = ctx.rt.clock
    params = _flow_parameters(ctx, point)
    t0 = clock.monotonic()
    view = flows.run(point.flow, params, name=f"calib-{point.id()}")
    states = [{"t": 0.0, "type": view.state_type, "name": view.state_name}]
    while view.state_type not in _FLOW_TERMINAL and clock.monotonic() - t0 < timeout_s:
        clock.sleep(0.5)
        view = flows.get(view.id)
        if (view.state_type, view.state_name) != (states[-1]["type"], states[-1]["name"]):
            states.append({"t": clock.monotonic() - t0, "type": view.state_type, "name": view.state_name})
    observed = clock.monotonic() - t0
    clock.sleep(2.0)  # the usage line is the flow's last log line: let it arrive
    logs = flows.logs(view.id, limit=200)
    usage = flows.log_lines_containing(view.id, "resource usage: cpu_seconds=")
    if point.flow == "training" and view.state_type == "COMPLETED":
        ctx.registered.append(str(ctx.flow_model))
    duration = (
        (view.end_time - view.start_time).total_seconds() if view.start_time and view.end_time else None
    )
    return {
        "state_type": view.state_type,
        "state_name": view.state_name,
        "message": view.message,
        "run_count": view.run_count,
        "states": states,
        "observed_s": observed,
        "duration_s": duration,
        "task_runs": [t.model_dump() for t in flows.task_runs(view.id)],
        "logs": logs[-LOG_LINES_KEPT:],
        "usage_lines": usage,
    }


# --------------------------------------------------------------------------------------------- sweep


@dataclass
class SweepSummary:
    planned: int
    done_before: int
    measured: int = 0
    failed_points: list[str] = field(default_factory=list)
    seconds: float = 0.0


def command_line() -> str:
    argv = [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv else ["mlsandbox", "calibrate"]
    return shlex.join(argv)


def session_header(session: str, backend: str, quick: bool) -> R.Session:
    import sklearn

    from mlsandbox import __version__
    from mlsandbox.machine import describe

    return R.Session(
        session=session,
        started_at=time.time(),
        machine=describe(),
        generator_version=GENERATOR_VERSION,
        mlsandbox_version=__version__,
        sklearn_version=sklearn.__version__,
        backend=backend,
        quick=quick,
        command=command_line(),
    )


@contextlib.contextmanager
def _runtime(backend: str, sandbox: str) -> Iterator[Runtime]:
    """A running sandbox of ``backend`` for the sweep: started for it and stopped after, or attached to
    when it is already running (then left as it is: the session's own jobs and objects are removed by
    :meth:`Context.close`)."""
    from mlsandbox.backends.registry import get_backend

    be = get_backend(backend, sandbox)
    started = not be.is_alive()
    if started:
        be.up(ephemeral=True)
    rt = be.runtime()
    try:
        yield rt
    finally:
        if started:
            rt.close()
            be.down()


def run_sweep(
    points: list[Any],
    path: Path,
    *,
    backend: str = "local",
    sandbox: str = "calibrate",
    quick: bool = False,
    on_progress: Callable[[int, int, str], None] | None = None,
    runtime: Runtime | None = None,
    redo: bool = False,
) -> SweepSummary:
    """Measure every point not yet in ``path`` (appending as each finishes); a point that raises is
    recorded with its error and the sweep goes on. ``runtime``: measure on this one (else a sandbox
    ``sandbox`` of ``backend`` is started, or attached to when it runs). ``redo``: measure every point
    again (the new record replaces the old one)."""
    done = set() if redo else {r.id for r in R.records(path)}
    todo = [p for p in points if p.id() not in done]
    summary = SweepSummary(planned=len(points), done_before=len(points) - len(todo))
    if not todo:
        return summary
    session = secrets.token_hex(4)
    R.append(path, session_header(session, runtime.backend if runtime is not None else backend, quick))
    t_start = time.perf_counter()
    needs_runtime = any(not isinstance(p, FitPoint) for p in todo)
    with contextlib.ExitStack() as stack:
        ctx: Context | None = None
        if needs_runtime:
            rt = runtime if runtime is not None else stack.enter_context(_runtime(backend, sandbox))
            ctx = Context.open(rt, session)
            stack.callback(ctx.close)
        for i, point in enumerate(todo):
            label = _label(point)
            if on_progress:
                on_progress(i, len(todo), label)
            t0 = time.perf_counter()
            started_at, load = time.time(), os.getloadavg()[0]
            try:
                result = _measure(ctx, point)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                log.warning("calibration point %s failed: %s", label, e)
                result = {"state": "sweep_error", "error": f"{type(e).__name__}: {e}"}
                summary.failed_points.append(f"{label}: {type(e).__name__}: {e}")
            R.append(
                path,
                R.Record(
                    id=point.id(),
                    session=session,
                    point=point,
                    started_at=started_at,
                    load_average_1m=round(load, 2),
                    elapsed_s=round(time.perf_counter() - t0, 3),
                    result=result,
                ),
            )
            summary.measured += 1
        if on_progress:
            on_progress(len(todo), len(todo), "done")
    summary.seconds = time.perf_counter() - t_start
    return summary


def _measure(ctx: Context | None, point: Any) -> dict[str, Any]:
    if isinstance(point, FitPoint):
        return run_fit(point)
    assert ctx is not None
    if isinstance(point, JobPoint):
        return run_job(ctx, point)
    if isinstance(point, ServingPoint):
        return run_serving(ctx, point)
    if isinstance(point, FlowPoint):
        return run_flow(ctx, point)
    raise TypeError(f"unknown point {point!r}")


def _label(point: Any) -> str:
    if isinstance(point, JobPoint | FitPoint):
        d = point.data
        what = f"{d.scenario}/{d.dataset}" + (f"[{d.source}{list(d.batches or ())}]" if d.source else "")
        extra = f" {point.purpose}" if isinstance(point, JobPoint) else ""
        return f"{point.kind}{extra} {point.algorithm} {what} x{d.defect_scale} {'+'.join(point.cleaning) or 'raw'}"
    if isinstance(point, ServingPoint):
        return f"serving {point.rate_rps:g} rps x{point.rows_per_request} rows"
    return f"flow {point.flow} {point.case}"


__all__ = ["Context", "SweepSummary", "holdout_auc", "run_fit", "run_job", "run_sweep", "split_log"]
