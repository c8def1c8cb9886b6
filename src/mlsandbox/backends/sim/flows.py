"""Flows of a ``sim`` sandbox: simulated Prefect runs with Prefect's states, doing the flows' work on the
real rows (:class:`SimFlows`, :class:`SimEpisodeFlows`).

A run is ``SCHEDULED`` until the worker picks it up (the calibrated pickup time, while the worker and the
orchestrator run; ``Late`` once overdue), ``RUNNING`` through its tasks (each taking its calibrated time,
retried as the flow's tasks are), then ``COMPLETED`` or ``FAILED`` with the message Prefect gives. The
work is the flows' own (:mod:`mlsandbox.workloads.flows`), done at the virtual time each task ends:

- ``ingestion``: pull ``upstream/<dataset>/<batch>.csv`` (botocore's ``NoSuchKey`` when it is missing, after
  one retry), validate its schema (renames, required and numeric columns: the flow's own messages), write
  ``lake/<dataset>/<batch>.parquet``;
- ``training``: read every lake batch (the completeness check), train through the job surrogate (a
  tracker run ``training-flow``), gate on the validation AUC, register the model;
- ``batch-scoring``: score a lake batch with a registered version or alias into ``scores/...``.

Every run ends by logging ``resource usage: cpu_seconds=`` (the calibrated CPU), as the real flows do.
Runs are brought up to the clock's time lazily (every call, and whenever the tracker or the object store
is read through the runtime).
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlsandbox.backends.protocols.flows import FLOWS, TERMINAL_STATES, FlowRunView, TaskRunView
from mlsandbox.backends.sim.world import SimWorld, stable_seed
from mlsandbox.errors import BackendError

if TYPE_CHECKING:
    from mlsandbox.backends.sim.storage import MemoryObjectStore
    from mlsandbox.backends.sim.tracking import MemoryTracking

LATE_AFTER_S = 15.0
"""A scheduled run not picked up this long after its start time shows as ``Late``."""
POLL_S = 5.0
"""How often a stopped worker's runs are looked at again."""


class TaskFailed(Exception):
    """A task's exception (``type_name: message``, as Prefect reports it)."""

    def __init__(self, type_name: str, message: str, *, log: list[str] | None = None) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message
        self.log = log or []

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


@dataclass
class _Task:
    name: str
    state_type: str = "PENDING"
    state_name: str = "Pending"
    run_count: int = 0


@dataclass
class _Run:
    id: str
    name: str
    flow: str
    parameters: dict[str, Any]
    environment: str | None
    created: float
    state_type: str = "SCHEDULED"
    state_name: str = "Scheduled"
    message: str | None = None
    run_count: int = 0
    start_time: float | None = None
    end_time: float | None = None
    next_at: float = 0.0
    step: int = -1
    """-1: waiting for the worker; k: the k-th task is next; len(tasks): finishing."""
    attempt: int = 0
    tasks: list[_Task] = field(default_factory=list)
    logs: list[tuple[float, str, str, str]] = field(default_factory=list)
    """(time, level, logger, message)."""
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state_type in TERMINAL_STATES


class SimFlows:
    """The flows capability (:class:`~mlsandbox.backends.protocols.Flows`)."""

    def __init__(
        self, world: SimWorld, store: MemoryObjectStore, tracking: MemoryTracking, environment: Any
    ) -> None:
        self.world = world
        self.store = store
        self.tracking = tracking
        self.environment = environment
        self.episodes: list[SimEpisodeFlows] = []

    def open(self, episode_id: str, labels: dict[str, str]) -> SimEpisodeFlows:
        flows = SimEpisodeFlows(self, episode_id)
        self.episodes.append(flows)
        return flows

    def pump(self) -> None:
        for ep in [e for e in self.episodes if not e.closed]:
            ep.pump()


class SimEpisodeFlows:
    """The flows of one episode (:class:`~mlsandbox.backends.protocols.EpisodeFlows`)."""

    def __init__(self, owner: SimFlows, episode_id: str) -> None:
        self.owner = owner
        self.world = owner.world
        self.store = owner.store
        self.tracking = owner.tracking
        self.episode_id = episode_id
        self.runs: dict[str, _Run] = {}
        self.closed = False
        self.cal = self.world.calibration.flows

    def __repr__(self) -> str:
        return f"SimEpisodeFlows(episode={self.episode_id!r}, runs={len(self.runs)})"

    # ------------------------------------------------------------------------------------- protocol

    def _reach(self, what: str) -> None:
        if self.closed:
            raise BackendError(f"the flows of episode {self.episode_id} are closed")
        self.world.call("prefect-server", f"flows.{what}", what=what)

    def run(
        self, flow: str, parameters: dict[str, Any], *, name: str, environment: str | None = None
    ) -> FlowRunView:
        if flow not in FLOWS:
            raise ValueError(f"unknown flow {flow!r}; flows: {', '.join(FLOWS)}")
        if environment is not None:
            self.owner.environment(environment)  # KeyError for an unknown key
        self._reach("run")
        self.pump()
        now = self.world.clock.monotonic()
        run = _Run(
            id=self.world.ids.uuid(),
            name=name,
            flow=flow,
            parameters=dict(parameters),
            environment=environment,
            created=now,
            next_at=now + self.cal.pickup_s,
        )
        self.runs[run.id] = run
        return self._view(run)

    def get(self, flow_run_id: str) -> FlowRunView:
        self._reach("get")
        self.pump()
        return self._view(self._run(flow_run_id))

    def logs(self, flow_run_id: str, limit: int = 200) -> list[str]:
        self._reach("logs")
        self.pump()
        run = self._run(flow_run_id)
        return [self._format(x) for x in run.logs[:limit]]

    def log_lines_containing(self, flow_run_id: str, text: str) -> list[str]:
        self._reach("logs")
        self.pump()
        return [m for (_, _, _, m) in self._run(flow_run_id).logs if text in m]

    def task_runs(self, flow_run_id: str) -> list[TaskRunView]:
        self._reach("task_runs")
        self.pump()
        run = self._run(flow_run_id)
        if not self.cal.flows[run.flow].tasks:  # a flow whose work is not split into tasks
            return []
        return [
            TaskRunView(
                name=f"{t.name}-0", state_type=t.state_type, state_name=t.state_name, run_count=t.run_count
            )
            for t in run.tasks
        ]

    def retry(self, flow_run_id: str) -> FlowRunView:
        self._reach("retry")
        self.pump()
        run = self._run(flow_run_id)
        now = self.world.clock.monotonic()
        run.state_type, run.state_name, run.message = "SCHEDULED", "AwaitingRetry", None
        run.step, run.attempt, run.next_at = -1, 0, now + self.cal.pickup_s
        run.tasks = []
        run.context = {}
        return self._view(run)

    def cancel(self, flow_run_id: str) -> None:
        self._reach("cancel")
        self.pump()
        run = self._run(flow_run_id)
        if not run.finished:
            run.state_type, run.state_name = "CANCELLED", "Cancelled"
            run.end_time = self.world.clock.monotonic()

    def close(self) -> None:
        if self.closed:
            return
        for run in self.runs.values():
            if not run.finished:
                run.state_type, run.state_name = "CANCELLED", "Cancelled"
        self.runs.clear()
        self.closed = True
        if self in self.owner.episodes:
            self.owner.episodes.remove(self)

    # -------------------------------------------------------------------------------------- engine

    def _run(self, flow_run_id: str) -> _Run:
        run = self.runs.get(flow_run_id)
        if run is None:
            raise KeyError(f"flow run {flow_run_id} does not exist")
        return run

    def _view(self, run: _Run) -> FlowRunView:
        epoch = self.world.clock.epoch

        def stamp(t: float | None) -> dt.datetime | None:
            return None if t is None else dt.datetime.fromtimestamp(epoch + t, tz=dt.UTC)

        return FlowRunView(
            id=run.id,
            name=run.name,
            flow=run.flow,
            state_type=run.state_type,
            state_name=run.state_name,
            message=run.message,
            run_count=run.run_count,
            parameters=dict(run.parameters),
            start_time=stamp(run.start_time),
            end_time=stamp(run.end_time),
        )

    def _format(self, entry: tuple[float, str, str, str]) -> str:
        t, level, logger, message = entry
        clock = dt.datetime.fromtimestamp(self.world.clock.epoch + t, tz=dt.UTC)
        return f"{clock:%H:%M:%S} {level} {logger}: {message}"

    def _log(self, run: _Run, t: float, message: str, *, level: str = "INFO", task: bool = False) -> None:
        names = self.cal.logger_names
        logger = (
            names.get("task_runs", "prefect.task_runs")
            if task
            else names.get("flow_runs", "prefect.flow_runs")
        )
        run.logs.append((t, level, logger, message))

    def _lines(
        self, run: _Run, t: float, moment: str, *, in_task: bool = False, level: str = "INFO", **values: Any
    ) -> None:
        model = self.cal.flows[run.flow]
        fill = {
            "flow": run.flow,
            "flow_run_name": run.name,
            "task": "",
            "detail": "",
            "seconds": 0.0,
            **values,
        }
        for line in model.logs.get(moment, []):
            self._log(run, t, line.text.format(**fill), level=level, task=in_task)

    def pump(self) -> None:
        now = self.world.clock.monotonic()
        for run in list(self.runs.values()):
            guard = 0
            while not run.finished and run.next_at <= now and guard < 1000:
                guard += 1
                self._step(run, now)

    def _worker_up(self, t: float) -> bool:
        return (
            self.world.reachable_at("prefect-server", t)
            and self.world.services["prefect-worker"].at(t) == "running"
        )

    def _step(self, run: _Run, now: float) -> None:
        model = self.cal.flows[run.flow]
        t = run.next_at
        if run.step == -1:  # the worker picks it up
            if not self._worker_up(t):
                run.next_at = t + POLL_S
                if t - run.created >= LATE_AFTER_S and run.state_name == "Scheduled":
                    run.state_name = "Late"
                return
            run.state_type, run.state_name = "RUNNING", "Running"
            run.run_count += 1
            run.start_time = run.start_time or t
            run.step = 0
            self._lines(run, t, "start")
            run.context["cpu_start"] = t
            tasks = model.tasks or [run.flow]
            run.tasks = []
            run.next_at = t + self._task_s(run, tasks[0])
            run.tasks.append(_Task(tasks[0], "RUNNING", "Running", 1))
            return
        tasks = model.tasks or [run.flow]
        if run.step >= len(tasks):
            return
        task = run.tasks[-1]
        try:
            self._work(run, task.name, t)
        except TaskFailed as e:
            for line in e.log:
                self._log(run, t, line, level="ERROR", task=True)
            retries = model.retries.get(task.name, 0)
            if task.run_count <= retries:
                task.state_type, task.state_name = "SCHEDULED", "AwaitingRetry"
                self._log(
                    run,
                    t,
                    f"Task run failed with exception: {e} - Retry {task.run_count}/{retries} will start {model.retry_delay_s:g} second(s) from now",
                    level="ERROR",
                    task=True,
                )
                task.run_count += 1
                task.state_type, task.state_name = "RUNNING", "Running"
                run.next_at = t + model.retry_delay_s + self._task_s(run, task.name)
                return
            task.state_type, task.state_name = "FAILED", "Failed"
            self._log(
                run, t, f"Task run failed with exception: {e} - No retries left.", level="ERROR", task=True
            )
            self._finish(run, t, failed=str(e))
            return
        task.state_type, task.state_name = "COMPLETED", "Completed"
        if model.tasks:
            self._lines(run, t, "task_end", in_task=True, task=task.name)
        run.step += 1
        if run.step >= len(tasks):
            self._finish(run, t)
            return
        nxt = tasks[run.step]
        run.tasks.append(_Task(nxt, "RUNNING", "Running", 1))
        run.next_at = t + self._task_s(run, nxt)

    def _finish(self, run: _Run, t: float, *, failed: str | None = None) -> None:
        model = self.cal.flows[run.flow]
        feats = {"one": 1.0, **run.context.get("features", {})}
        z = self._z(run, "cpu")
        cpu = model.cpu_s.value(feats, z) + float(run.context.get("train_cpu", 0.0))
        self._lines(run, t, "usage", seconds=max(0.0, cpu))
        run.end_time = t
        if failed is None:
            run.state_type, run.state_name, run.message = "COMPLETED", "Completed", None
            self._lines(run, t, "completed")
        else:
            run.state_type, run.state_name = "FAILED", "Failed"
            run.message = f"Flow run encountered an exception: {failed}"
            self._lines(run, t, "failed", level="ERROR", detail=failed)

    def _z(self, run: _Run, what: str) -> float:
        import random

        return random.Random(stable_seed("flow", self.world.seed, run.id, run.run_count, what)).gauss(
            0.0, 1.0
        )

    def _task_s(self, run: _Run, task: str) -> float:
        model = self.cal.flows[run.flow]
        m = model.task_s.get(task)
        if m is None:
            return 0.5
        feats = {"one": 1.0, **run.context.get("features", {})}
        return max(0.0, m.value(feats, self._z(run, task)))

    # ---------------------------------------------------------------------------------- the work

    def _work(self, run: _Run, task: str, t: float) -> None:
        p = run.parameters
        getattr(self, "_" + run.flow.replace("-", "_"))(run, task, p, t)

    def _get(self, bucket: str, key: str, t: float) -> bytes:
        if not self.world.reachable_at("minio", t):
            raise TaskFailed(
                "botocore.exceptions.EndpointConnectionError",
                f'Could not connect to the endpoint URL: "{self.world.address.urls["minio"]}/{bucket}/{key}"',
            )
        data = self.store.peek(bucket, key)
        if data is None:
            raise TaskFailed(
                "botocore.errorfactory.NoSuchKey",
                "An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not exist.",
            )
        return data

    def _put(self, bucket: str, key: str, data: bytes, t: float) -> None:
        if not self.world.reachable_at("minio", t):
            raise TaskFailed(
                "botocore.exceptions.EndpointConnectionError",
                f'Could not connect to the endpoint URL: "{self.world.address.urls["minio"]}/{bucket}/{key}"',
            )
        quota = self.store.quotas.get(bucket)
        if quota is not None and self.store.usage(bucket) + len(data) > quota:
            raise TaskFailed(
                "botocore.exceptions.ClientError",
                "An error occurred (XMinioAdminBucketQuotaExceeded) when calling the PutObject operation: Bucket quota exceeded",
            )
        objects = self.store.buckets.get(bucket)
        if objects is None:
            raise TaskFailed(
                "botocore.errorfactory.NoSuchBucket",
                "An error occurred (NoSuchBucket) when calling the PutObject operation: The specified bucket does not exist",
            )
        from mlsandbox.backends.sim.storage import _Object

        objects[key] = _Object(data, self.world.clock.epoch + t)

    def _ingestion(self, run: _Run, task: str, p: dict[str, Any], t: float) -> None:
        import pandas as pd

        bucket, dataset, batch = p["bucket"], p["dataset"], p["batch"]
        if task == "pull":
            key = f"upstream/{dataset}/{batch}.csv"
            self._log(run, t, f"pulling s3://{bucket}/{key}", task=True)
            try:
                raw = self._get(bucket, key, t)
            except TaskFailed as e:
                if "NoSuchKey" in e.type_name:
                    prefix = key.rsplit("/", 1)[0] + "/"
                    listed = ", ".join(self.store.keys(bucket, prefix)) or "none"
                    e.log = [f"upstream object {key} is missing; objects under {prefix}: {listed}"]
                raise
            self._log(run, t, f"pulled {len(raw)} bytes", task=True)
            run.context["raw"] = raw
            return
        if task == "validate":
            df = pd.read_csv(io.BytesIO(run.context["raw"]))
            run.context["features"] = {"rows": float(len(df)), "columns": float(df.shape[1])}
            rename = p.get("rename") or {}
            if rename:
                unknown = sorted(set(rename) - set(df.columns))
                if unknown:
                    raise TaskFailed(
                        "ValueError",
                        f"rename: column(s) {unknown} are not in the batch (columns: {list(df.columns)})",
                    )
                df = df.rename(columns=rename)
                self._log(run, t, f"renamed columns {rename}", task=True)
            required = list(p.get("required_columns") or [])
            missing = [c for c in required if c not in df.columns]
            extra = [c for c in df.columns if c not in required]
            if missing:
                raise TaskFailed(
                    "ValueError",
                    f"schema check failed: missing required column(s) {missing}; unexpected column(s) {extra}",
                )
            if len(df) == 0:
                raise TaskFailed("ValueError", "schema check failed: the batch has no rows")
            wrong = [c for c in (p.get("numeric_columns") or []) if df[c].dtype.kind not in "biuf"]
            if wrong:
                kinds = {c: str(df[c].dtype) for c in wrong}
                raise TaskFailed("ValueError", f"schema check failed: column(s) {kinds} should be numeric")
            self._log(run, t, f"validated {len(df)} rows x {df.shape[1]} columns", task=True)
            run.context["frame"] = df[required]
            return
        df = run.context["frame"]
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        key = f"lake/{dataset}/{batch}.parquet"
        self._put(bucket, key, buf.getvalue(), t)
        self._log(run, t, f"wrote s3://{bucket}/{key} ({len(df)} rows)", task=True)

    def _training(self, run: _Run, task: str, p: dict[str, Any], t: float) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        bucket, dataset = p["bucket"], p["dataset"]
        if task == "load-lake":
            if not self.world.reachable_at("minio", t):
                self._get(bucket, f"lake/{dataset}/", t)
            prefix = f"lake/{dataset}/"
            keys = [k for k in self.store.keys(bucket, prefix) if k.endswith(".parquet")]
            if not keys:
                raise TaskFailed(
                    "FileNotFoundError",
                    f"no lake batches under s3://{bucket}/{prefix}: run the ingestion first",
                )
            missing = [b for b in (p.get("expected_batches") or []) if f"{prefix}{b}.parquet" not in keys]
            if missing:
                raise TaskFailed(
                    "FileNotFoundError",
                    f"completeness check failed: the lake has no batch(es) {missing} of {dataset} "
                    f"(present: {', '.join(keys)}): ingest them first",
                )
            tables = [pq.read_table(pa.BufferReader(self._get(bucket, k, t))) for k in keys]
            try:
                table = pa.concat_tables(tables, promote_options="default")
            except pa.ArrowInvalid as e:
                raise TaskFailed("ValueError", str(e)) from None
            run.context["table"] = table
            run.context["features"] = {
                "rows": float(table.num_rows),
                "batches": float(len(keys)),
                "columns": float(table.num_columns),
            }
            self._log(run, t, f"loaded {len(keys)} batch(es): {', '.join(keys)}", task=True)
            return
        if task == "train":
            self._train(run, p, t)
            return
        if task == "evaluate":
            auc = run.context["result"]["metrics"]["val_auc"]
            if auc < float(p.get("min_auc", 0.7)):
                raise TaskFailed(
                    "ValueError",
                    f"evaluation gate failed: val_auc {auc:.4f} < min_auc {p.get('min_auc', 0.7)}",
                )
            self._log(
                run, t, f"evaluation gate passed: val_auc {auc:.4f} >= {p.get('min_auc', 0.7)}", task=True
            )
            return
        if not self.world.reachable_at("mlflow", t):
            raise TaskFailed(
                "mlflow.exceptions.MlflowException",
                "API request to endpoint /api/2.0/mlflow/registered-models/create failed with error code 111 != 200",
            )
        mv = self.tracking.register_model(run.context["result"]["run_id"], p["model_name"])
        self._log(run, t, f"registered {p['model_name']} version {mv.version}", task=True)

    def _train(self, run: _Run, p: dict[str, Any], t: float) -> None:
        from mlsandbox.backends.sim import realfit
        from mlsandbox.backends.sim.jobs import PACKAGE_DIR
        from mlsandbox.backends.sim.surrogate import TrainerArgs, plan_trainer

        if not self.world.reachable_at("mlflow", t):
            raise TaskFailed(
                "mlflow.exceptions.MlflowException",
                "API request to endpoint /api/2.0/mlflow/runs/create failed with error code 111 != 200",
            )
        args = TrainerArgs(
            bucket=p["bucket"],
            key="(lake batches)",
            target=p["target"],
            algorithm=p.get("algorithm", "gradient_boosting"),
            hyperparams=dict(p.get("hyperparams") or {}),
            experiment_id=str(p["experiment_id"]),
            run_name="training-flow",
            seed=int(p.get("seed", 0)),
            config_prefix=None,
        )
        table = run.context["table"]
        try:
            fit = realfit.real_fit_frame(
                table.to_pandas(),
                args.target,
                args.algorithm,
                args.hyperparams,
                args.seed,
                digest=_table_digest(table),
            )
        except realfit.SplitError as e:
            raise TaskFailed("ValueError", str(e).removeprefix("ValueError: ").splitlines()[0]) from None
        if fit.failure is not None or fit.model is None:
            detail = fit.failure[1] if fit.failure is not None else "training failed"
            raise TaskFailed("ValueError", (str(detail).splitlines() or ["training failed"])[0])
        plan = plan_trainer(
            self.world.calibration,
            args,
            job_seed=stable_seed("flow-train", self.world.seed, run.id, run.run_count),
            cpus=1.0,
            memory_mb=8192,
            table=table,
            read_error=None,
            config=None,
            package_dir=PACKAGE_DIR,
            fit=fit,
        )
        failure = next((e for e in plan.events if e.kind == "fail"), None)
        if failure is not None or plan.outcome is None:
            detail = failure.values.get("detail", failure.mode) if failure is not None else "training failed"
            raise TaskFailed("ValueError", str(detail).splitlines()[0])
        out = plan.outcome
        params = {"algorithm": args.algorithm, "seed": args.seed, "pipeline": "training", **args.hyperparams}
        try:
            run_id = self.tracking.start_run(args.experiment_id, "training-flow", params)
        except KeyError as e:
            raise TaskFailed(
                "mlflow.exceptions.RestException", f"RESOURCE_DOES_NOT_EXIST: {e.args[0]}"
            ) from None
        metrics = {k: out.metrics[k] for k in ("val_auc", "val_accuracy", "val_log_loss")}
        self.tracking.end_run(
            run_id, "FINISHED", at=self.world.clock.epoch + t, metrics=metrics, model=out.model
        )
        run.context["train_cpu"] = sum(ph.cpu for ph in plan.phases[1:2])
        run.context["result"] = {"run_id": run_id, "metrics": metrics}
        self._log(run, t, f"run {run_id}: { ({k: round(v, 4) for k, v in metrics.items()}) }", task=True)

    def _batch_scoring(self, run: _Run, task: str, p: dict[str, Any], t: float) -> None:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        bucket, dataset, batch = p["bucket"], p["dataset"], p["batch"]
        ref = str(p["model_ref"])
        name = p["model_name"]
        key = f"lake/{dataset}/{batch}.parquet"
        table = pq.read_table(pa.BufferReader(self._get(bucket, key, t)))
        if not self.world.reachable_at("mlflow", t):
            raise TaskFailed(
                "mlflow.exceptions.MlflowException",
                "API request to endpoint /api/2.0/mlflow/model-versions/get-download-uri failed with error code 111 != 200",
            )
        reg = self.tracking.models.get(name)
        version = ref if ref.isdigit() else (None if reg is None else reg.aliases.get(ref))
        found = (
            None
            if reg is None or version is None
            else next((v for v in reg.versions if v.version == version), None)
        )
        if found is None:
            what = (
                f"Model Version (name={name}, version={ref}) not found"
                if ref.isdigit()
                else f"Registered model alias {ref} not found."
            )
            raise TaskFailed("mlflow.exceptions.RestException", f"RESOURCE_DOES_NOT_EXIST: {what}")
        model = found.model
        names = [str(n) for n in getattr(model, "feature_names_in_", table.column_names)]
        features = table.select([c for c in table.column_names if c in names])
        scores = model.predict_proba(features)[:, 1]
        out = pd.DataFrame({"row": range(table.num_rows), "score": scores})
        buf = io.BytesIO()
        out.to_parquet(buf, index=False)
        out_key = f"scores/{dataset}/{batch}.parquet"
        self._put(bucket, out_key, buf.getvalue(), t)
        run.context["features"] = {"rows": float(table.num_rows)}
        self._log(run, t, f"scored {table.num_rows} rows of {key} with {name} {ref} -> {out_key}")


__all__ = ["SimEpisodeFlows", "SimFlows"]


def _table_digest(table: Any) -> str:
    """A digest of an Arrow table's contents (its IPC stream)."""
    import hashlib

    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).hexdigest()
