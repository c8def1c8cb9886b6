"""Batch jobs of a ``sim`` sandbox (:class:`SimJobs`): the surrogate's plans played on the virtual clock.

A job starts at once (as a process does on local) and runs through its plan's phases at the rate its
limits allow: a phase takes ``max(its wall time, its CPU-seconds / effective CPUs)``, where the effective
CPUs are the job's CPU limit, cut by CPU contention. Nothing runs on its own: each job is brought up to
the clock's time lazily (every ``get``, ``list`` and ``logs``, and before any change of its limits), so a
job is a pure function of the clock and of what happened to it. What it needs from the services is
checked against their history at the moment it needed them (the tracker when it starts its run and when
it logs its model, the object store when it reads); a job over its memory limit is killed by the
"kernel" when its usage crosses the limit (exit code 137 and the runner's line, as on local); a job over
its wall-clock limit is killed at the limit.

A trainer reads its data object through the object store's client-facing endpoint, as on local where the
read goes through Toxiproxy, so the endpoint's network faults slow it: at the read the job waits the
endpoint's mean latency for each request of a ``get_object`` (the calibration's count), then moves the
object's bytes at the bandwidth caps the endpoint had over the time of the read (a cap changed or lifted
in the middle counts from then on; see :meth:`~mlsandbox.backends.sim.world.SimWorld.transfer`). The
calibrated start phase already holds the read without faults, so the wait is what the faults add (none
when the read begins with neither a cap nor a latency). It is I/O wait: the job's time moves, its
CPU-seconds do not, and its wall-clock limit still applies (a read stuck past it is killed at the limit).
A latency or a block that comes after the read has begun does not touch it; only whether the endpoint
could be reached when the read began decides whether it fails.

The tracker run a trainer job starts is real in the sim's tracking: ``RUNNING`` while it runs,
``FINISHED`` with its metrics and model on success, ``FAILED`` when the trainer fails with an exception
(a killed job leaves it ``RUNNING``, as on MLflow).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsandbox.backends.protocols import JobSpec, JobStatus
from mlsandbox.backends.protocols.config import JOB_CONFIG_KEYS
from mlsandbox.backends.sim.surrogate import (
    ConfigView,
    JobPlan,
    TrainerArgs,
    UsageError,
    parse_trainer,
    plan_burn,
    plan_trainer,
)
from mlsandbox.backends.sim.world import SimWorld, stable_seed
from mlsandbox.workloads.contract import result_line

if TYPE_CHECKING:
    from mlsandbox.backends.sim.config import MemoryConfigStore
    from mlsandbox.backends.sim.storage import MemoryObjectStore
    from mlsandbox.backends.sim.tracking import MemoryTracking

_TERMINAL = ("succeeded", "failed", "cancelled")
_CLIENT_FAILURES = frozenset(
    {
        "storage_unreachable",
        "storage_credentials",
        "tracker_unreachable",
        "config_missing",
        "config_unreachable",
    }
)
"""Failures of a client that tries for a while (``FailureMode.at_seconds``) before the job gives up."""
PACKAGE_DIR = str(Path(__file__).resolve().parents[2])
MACHINE_CPUS = 2.0
"""The CPUs of the machine the calibration ran on (what unpinned CPU burners spread over)."""


@dataclass
class SimJob:
    spec: JobSpec
    plan: JobPlan
    submitted_at: float
    started_at: float
    cpus: float
    memory_mb: int
    state: str = "running"
    pos: float = 0.0
    t: float = 0.0
    """Monotonic time the job has been brought up to."""
    event: int = 0
    """Index of the next event of the plan."""
    cpu: float = 0.0
    peak_mb: float = 0.0
    exit_code: int | None = None
    finished_at: float | None = None
    lines: list[str] = field(default_factory=list)
    run_id: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    share: float = math.inf
    """CPUs left to it by contention (inf: none)."""
    oom_pos: float | None = None
    reading: tuple[float, float] | None = None
    """A read of its data under way: (latency seconds still to wait, bytes still to move)."""

    @property
    def finished(self) -> bool:
        return self.state in _TERMINAL

    @property
    def rate(self) -> float:
        return max(1e-6, min(self.cpus, self.share))


class SimJobs:
    """:class:`~mlsandbox.backends.protocols.Jobs` of a ``sim`` sandbox (see the module docstring)."""

    def __init__(
        self,
        world: SimWorld,
        store: MemoryObjectStore,
        tracking: MemoryTracking,
        config: MemoryConfigStore,
        environment: Any = None,
    ) -> None:
        self.world = world
        self._environment = environment
        self.store = store
        self.tracking = tracking
        self.config = config
        self.jobs: dict[str, SimJob] = {}

    def __repr__(self) -> str:
        return f"SimJobs(jobs={len(self.jobs)})"

    # ------------------------------------------------------------------------------------- protocol

    def submit(self, spec: JobSpec) -> JobStatus:
        """Start the job now; :class:`ValueError` for an invalid spec or an already used job id."""
        if spec.job_id in self.jobs:
            raise ValueError(f"job {spec.job_id!r} already exists")
        if spec.cpus <= 0 or spec.memory_mb <= 0:
            raise ValueError(f"job {spec.job_id!r}: cpus and memory_mb must be positive")
        if spec.timeout_s is not None and spec.timeout_s <= 0:
            raise ValueError(f"job {spec.job_id!r}: timeout_s must be positive")
        if spec.environment not in (None, "default"):
            self._environments_get(spec.environment)  # KeyError for an unknown key
        _refuse_torch(spec)
        self.world.charge("jobs.submit")
        self.pump()
        now = self.world.clock.monotonic()
        plan = self._plan(spec)
        start = now + self.world.calibration.jobs.queue_start_s
        job = SimJob(spec, plan, now, start, spec.cpus, spec.memory_mb, t=start)
        job.oom_pos = plan.oom_position(spec.memory_mb)
        self.jobs[spec.job_id] = job
        self._advance(job, now)
        return self._status(job)

    def get(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        self.world.charge("jobs.get")
        self._advance(job, self.world.clock.monotonic())
        return self._status(job)

    def logs(self, job_id: str, tail: int = 50) -> str:
        job = self._job(job_id)
        self.world.charge("jobs.logs")
        self._advance(job, self.world.clock.monotonic())
        lines = job.lines if tail <= 0 else job.lines[-tail:]
        return "".join(line + "\n" for line in lines)

    def cancel(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        self._advance(job, self.world.clock.monotonic())
        if not job.finished:
            mode = self.world.calibration.jobs.failures.cancelled
            self._end(job, job.t, "cancelled", mode.exit_code, [line.text for line in mode.log_tail], {})
        return self._status(job)

    def list(self, label: tuple[str, str] | None = None) -> builtins.list[JobStatus]:
        now = self.world.clock.monotonic()
        out = []
        for job in self.jobs.values():
            if label is None or job.spec.labels.get(label[0]) == label[1]:
                self._advance(job, now)
                out.append(self._status(job))
        return out

    def cleanup(self, label: tuple[str, str]) -> None:
        for job_id in [j for j, job in self.jobs.items() if job.spec.labels.get(label[0]) == label[1]]:
            self.cancel(job_id)
            del self.jobs[job_id]

    def set_resources(
        self, job_id: str, cpus: float | None = None, memory_mb: int | None = None
    ) -> JobStatus:
        """Change a running job's limits at once (see the module docstring); :class:`KeyError` for an
        unknown job, :class:`ValueError` for a finished one."""
        if (cpus is not None and cpus <= 0) or (memory_mb is not None and memory_mb <= 0):
            raise ValueError("cpus and memory_mb must be positive")
        job = self._job(job_id)
        now = self.world.clock.monotonic()
        self._advance(job, now)
        if job.finished:
            raise ValueError(f"job {job_id!r} is {job.state}: limits apply to a queued or running job")
        update: dict[str, Any] = {}
        if cpus is not None:
            job.cpus = cpus
            update["cpus"] = cpus
        if memory_mb is not None:
            job.memory_mb = memory_mb
            update["memory_mb"] = memory_mb
            job.oom_pos = job.plan.oom_position(memory_mb, after=job.pos)
            if job.oom_pos is not None and job.oom_pos <= job.pos:
                self._oom(job, max(job.t, now))
        job.spec = job.spec.model_copy(update=update)
        return self._status(job)

    def close(self) -> None:
        for job_id in builtins.list(self.jobs):
            self.cancel(job_id)

    # ---------------------------------------------------------------------------------- the simulator

    def pump(self) -> None:
        """Bring every running job up to now (what the tracker and the services show depends on it)."""
        now = self.world.clock.monotonic()
        for job in self.jobs.values():
            if not job.finished and job.t < now:
                self._advance(job, now)

    def set_share(self, job_id: str, share: float) -> bool:
        """CPU contention on a running job (``inf``: none); False when it is not running."""
        job = self.jobs.get(job_id)
        if job is None:
            return False
        self._advance(job, self.world.clock.monotonic())
        if job.finished:
            return False
        job.share = share
        return True

    def running(self) -> builtins.list[str]:
        self.pump()
        return [j for j, job in self.jobs.items() if not job.finished]

    def _made_with(self, job: SimJob) -> dict[str, str]:
        """The algorithm of a trainer job and the scikit-learn release of its environment."""
        out = {"algorithm": str(job.plan.fill.get("algorithm", ""))}
        if job.spec.environment not in (None, "default"):
            release = self._environments_get(job.spec.environment).packages.get("scikit-learn")
            if release:
                out["scikit-learn"] = release
        return out

    def _environments_get(self, key: str) -> Any:
        if self._environment is None:
            raise KeyError(f"environment {key!r} does not exist")
        return self._environment(key)

    def _job(self, job_id: str) -> SimJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"job {job_id!r} does not exist")
        return job

    def _status(self, job: SimJob) -> JobStatus:
        epoch = self.world.clock.epoch
        return JobStatus(
            job_id=job.spec.job_id,
            state=job.state,  # type: ignore[arg-type]
            exit_code=job.exit_code,
            started_at=epoch + job.started_at,
            finished_at=None if job.finished_at is None else epoch + job.finished_at,
            cpu_seconds=round(job.cpu, 3),
            peak_rss_bytes=int(job.peak_mb * 1024 * 1024) if job.peak_mb else None,
            result=dict(job.result),
        )

    # ------------------------------------------------------------------------------------------ plans

    def _plan(self, spec: JobSpec) -> JobPlan:
        """The job's plan. Its draws are seeded by what the job does (its seed, data, algorithm,
        hyperparameters, name, limits), not by where: the same job on the same rows gives the same run in
        any episode."""
        cal = self.world.calibration
        if spec.workload == "burn":
            return plan_burn(spec.args, job_seed=stable_seed("burn", *spec.args))
        try:
            args = parse_trainer(spec.args)
        except (UsageError, ValueError) as e:
            return _usage_plan(str(e))
        seed = stable_seed(
            "job",
            args.seed,
            args.key,
            args.target,
            args.algorithm,
            json.dumps(args.hyperparams, sort_keys=True),
            args.run_name,
            spec.cpus,
            spec.memory_mb,
        )
        config = self._config_view(args) if args.config_prefix else None
        table, error, data_key = self._read(args)
        try:
            return plan_trainer(
                cal,
                args,
                job_seed=seed,
                cpus=spec.cpus,
                memory_mb=spec.memory_mb,
                table=table,
                read_error=error,
                data_key=data_key,
                data=self.store.peek(args.bucket, args.key) if table is not None else None,
                config=config,
                package_dir=PACKAGE_DIR,
            )
        except UsageError as e:
            return _usage_plan(str(e))

    def _read(self, args: TrainerArgs) -> tuple[Any, str | None, str | None]:
        """The table the job will read (as the trainer reads it) and a digest of its bytes, or why it
        cannot be read."""
        data = self.store.peek(args.bucket, args.key)
        if data is None:
            if args.bucket not in self.store.buckets:
                return (
                    None,
                    (
                        "botocore.errorfactory.NoSuchBucket: An error occurred (NoSuchBucket) when calling the "
                        "GetObject operation: The specified bucket does not exist"
                    ),
                    None,
                )
            return (
                None,
                (
                    "botocore.errorfactory.NoSuchKey: An error occurred (NoSuchKey) when calling the GetObject "
                    "operation: The specified key does not exist."
                ),
                None,
            )
        name = args.key.lower()
        if name.endswith((".parquet", ".pq")):
            kind = "parquet"
        elif name.endswith((".csv", ".csv.gz")):
            kind = "csv.gz" if name.endswith(".gz") else "csv"
        else:
            return (
                None,
                (
                    f"ValueError: cannot read {args.key!r}: unsupported file type (expected .csv, .csv.gz, "
                    ".parquet or .pq)"
                ),
                None,
            )
        digest = f"{kind}:{hashlib.blake2b(data, digest_size=16).hexdigest()}"
        try:
            return _parsed(digest, data, kind), None, digest
        except Exception as e:
            return None, f"{type(e).__name__}: {e}", None

    def _config_view(self, args: TrainerArgs) -> ConfigView:
        """What the job reads from the config store at its start, against the right values."""
        prefix = args.config_prefix or ""
        address = self.world.address
        view = ConfigView(s3_url=address.urls["minio"], mlflow_url=address.urls["mlflow"])
        if not self.world.reachable_at("prefect-server", self.world.clock.monotonic()):
            view.config_problem = ("config_unreachable", {"url": address.urls["prefect-server"]})
            return view
        values: dict[str, str] = {}
        for key in JOB_CONFIG_KEYS:
            value = self.config.values.get(prefix + key)
            if value is None:
                view.config_problem = ("config_missing", {"value": prefix + key})
                return view
            values[key] = value
        view.s3_url = values["s3_endpoint_url"]
        view.mlflow_url = values["mlflow_tracking_uri"]
        if values["mlflow_tracking_uri"].rstrip("/") != address.urls["mlflow"]:
            host, port = _host_port(values["mlflow_tracking_uri"])
            view.tracker_problem = (
                "tracker_unreachable",
                {"url": values["mlflow_tracking_uri"].rstrip("/"), "host": host, "port": port},
            )
        if values["s3_endpoint_url"].rstrip("/") != address.urls["minio"]:
            url = f"{values['s3_endpoint_url'].rstrip('/')}/{args.bucket}/{args.key}"
            view.storage_problem = ("storage_unreachable", {"url": url})
        elif values["s3_access_key_id"] != address.access_key:
            detail = self.world.calibration.errors["storage.invalid_access_key"].text
            view.storage_problem = (
                "storage_credentials",
                {"operation": "InvalidAccessKeyId", "detail": detail},
            )
        elif values["s3_secret_access_key"] != address.secret_key:
            detail = self.world.calibration.errors["storage.signature_mismatch"].text
            view.storage_problem = (
                "storage_credentials",
                {"operation": "SignatureDoesNotMatch", "detail": detail},
            )
        return view

    # ------------------------------------------------------------------------------------ the engine

    def _advance(self, job: SimJob, until: float) -> None:
        plan = job.plan
        events = plan.events
        end = plan.end
        deadline = None if job.spec.timeout_s is None else job.started_at + job.spec.timeout_s
        while not job.finished and job.t < until:
            if job.reading is not None:
                stop = until if deadline is None else min(until, deadline)
                self._wait(job, stop)
                if job.reading is not None:
                    if deadline is not None and job.t >= deadline - 1e-12:
                        self._timeout(job, deadline)
                    return
            # the events due where the job is (a read begun among them is waited for after them all)
            while job.event < len(events) and events[job.event].pos <= job.pos + 1e-12:
                ev = events[job.event]
                job.event += 1
                self._event(job, ev)
                if job.finished:
                    return
            if job.reading is not None:
                continue
            if job.oom_pos is not None and job.oom_pos <= job.pos + 1e-12:
                self._oom(job, job.t)
                return
            if job.pos >= end - 1e-12:
                self._succeed(job)
                return
            k = min(int(job.pos + 1e-12), len(plan.phases) - 1)
            phase = plan.phases[k]
            duration = max(phase.wall, phase.cpu / job.rate)
            target = float(k + 1)
            if job.event < len(events):
                target = min(target, events[job.event].pos)
            if job.oom_pos is not None and job.oom_pos > job.pos:
                target = min(target, job.oom_pos)
            target = max(target, job.pos)
            dt = (target - job.pos) * duration
            stop = until if deadline is None else min(until, deadline)
            if job.t + dt > stop:
                frac = (stop - job.t) / duration if duration > 0 else 0.0
                job.pos = min(target, job.pos + frac)
                job.cpu += frac * phase.cpu
                job.t = stop
                job.peak_mb = max(job.peak_mb, plan.memory_at(job.pos))
                if deadline is not None and stop >= deadline:
                    self._timeout(job, deadline)
                return
            job.cpu += (target - job.pos) * phase.cpu
            job.pos = target
            job.t += dt
            job.peak_mb = max(job.peak_mb, plan.memory_at(job.pos))

    def _wait(self, job: SimJob, stop: float) -> None:
        """Bring a job in the middle of its read up to ``stop`` at most (see the module docstring)."""
        assert job.reading is not None
        latency, left = job.reading
        if latency > 0:
            step = min(latency, max(0.0, stop - job.t))
            job.t += step
            latency -= step
            if latency > 1e-12:
                job.reading = (latency, left)
                return
        job.t, left = self.world.transfer("minio", job.t, left, stop)
        job.reading = (0.0, left) if left > 0 else None

    def _begin_read(self, job: SimJob) -> None:
        """The job reads its data object now: what the endpoint's faults add is waited for from here."""
        fill = job.plan.fill
        data = self.store.peek(str(fill.get("bucket", "")), str(fill.get("key", "")))
        state = self.world.endpoint_at("minio", job.t)
        latency = self.world.requests("object_store.get_object") * state.latency_s
        nbytes = float(len(data)) if data is not None else 0.0
        if latency > 0 or (nbytes > 0 and state.rate_kbps is not None):
            job.reading = (latency, nbytes)

    def _event(self, job: SimJob, ev: Any) -> None:
        if ev.kind == "line":
            job.lines.append(ev.text)
            return
        if ev.kind == "fail":
            self._fail(job, ev.mode, ev.values)
            return
        # a service the job needs now
        service = ev.service
        if not self.world.reachable_at(service, job.t):
            if service == "minio":
                url = f"{self.world.address.urls['minio']}/{job.plan.fill.get('bucket', '')}/{job.plan.fill.get('key', '')}"
                self._fail(job, "storage_unreachable", {"url": url})
            else:
                self._fail(
                    job,
                    "tracker_unreachable",
                    {
                        "url": self.world.address.urls["mlflow"],
                        "host": self.world.address.hosts["mlflow"],
                        "port": self.world.address.ports["mlflow"],
                    },
                )
            return
        if service == "minio" and ev.values.get("read"):
            self._begin_read(job)
            return
        if service == "mlflow" and job.run_id is None and job.plan.tracker_run:
            fill = job.plan.fill
            try:
                hp = job.plan.fill.get("hyperparams") or {}
                job.run_id = self.tracking.start_run(
                    str(fill.get("experiment_id", "")),
                    str(fill.get("run_name", "")),
                    {
                        "algorithm": fill.get("algorithm", ""),
                        "seed": self._seed_of(job),
                        "data": f"s3://{fill.get('bucket', '')}/{fill.get('key', '')}",
                        **hp,
                    },
                )
            except KeyError as e:
                self._fail(
                    job,
                    "unreadable_data",
                    {"detail": f"mlflow.exceptions.RestException: RESOURCE_DOES_NOT_EXIST: {e.args[0]}"},
                    run_status="none",
                )

    def _seed_of(self, job: SimJob) -> str:
        args = job.spec.args
        return args[args.index("--seed") + 1] if "--seed" in args else "0"

    def _fail(
        self, job: SimJob, mode_name: str, values: dict[str, Any], *, run_status: str | None = None
    ) -> None:
        mode = getattr(self.world.calibration.jobs.failures, mode_name)
        fill = {
            **job.plan.fill,
            "url": "",
            "host": "",
            "port": "",
            "detail": "",
            "value": "",
            "operation": "",
            **values,
        }
        lines = [_format(line.text, fill) for line in mode.log_tail]
        retried = mode_name in _CLIENT_FAILURES
        delay = (mode.at_seconds or 0.0) if retried else 0.0
        at = job.t + delay
        job.cpu += delay * mode.cpu_fraction * min(1.0, job.rate)
        status = run_status or mode.run_status
        if job.run_id is not None and status == "FAILED" and self.world.reachable_at("mlflow", at):
            self.tracking.end_run(job.run_id, "FAILED", at=self.world.clock.epoch + at)
        self._end(job, at, "failed", mode.exit_code, lines, {})

    def _oom(self, job: SimJob, at: float) -> None:
        mode = self.world.calibration.jobs.failures.out_of_memory
        fill = {**job.plan.fill, "memory_mb": job.memory_mb}
        job.peak_mb = max(job.peak_mb, float(job.memory_mb))
        self._end(job, at, "failed", mode.exit_code, [_format(line.text, fill) for line in mode.log_tail], {})

    def _timeout(self, job: SimJob, at: float) -> None:
        mode = self.world.calibration.jobs.failures.timeout
        fill = {**job.plan.fill, "timeout_s": job.spec.timeout_s}
        self._end(job, at, "failed", mode.exit_code, [_format(line.text, fill) for line in mode.log_tail], {})

    def _succeed(self, job: SimJob) -> None:
        plan = job.plan
        if plan.exit_code != 0:
            self._end(job, job.t, "failed", plan.exit_code, [], {})
            return
        result: dict[str, Any] = {}
        out = plan.outcome
        if out is not None:
            epoch = self.world.clock.epoch
            if job.run_id is not None:
                self.tracking.end_run(
                    job.run_id,
                    "FINISHED",
                    at=epoch + job.t,
                    metrics=out.metrics,
                    params=out.params,
                    model=out.model,
                    made_with=self._made_with(job),
                )
                run = self.tracking.runs.get(job.run_id)
                model_id = run.model_id if run is not None else None
                result = {
                    "run_id": job.run_id,
                    "experiment_id": out.experiment_id,
                    "model_id": model_id,
                    "model_uri": f"models:/{model_id}",
                    "metrics": dict(out.metrics),
                }
            job.lines.append(result_line(result))
        elif plan.result_line is not None:
            job.lines.append(plan.result_line)
            from mlsandbox.workloads.contract import parse_result

            result = parse_result(plan.result_line)
        self._end(job, job.t, "succeeded", 0, [], result)

    def _end(
        self,
        job: SimJob,
        at: float,
        state: str,
        exit_code: int,
        lines: builtins.list[str],
        result: dict[str, Any],
    ) -> None:
        job.lines.extend(lines)
        job.state = state
        job.exit_code = exit_code
        job.finished_at = at
        job.result = result
        job.t = max(job.t, at)


def _format(template: str, values: dict[str, Any]) -> str:
    try:
        return template.format(**values)
    except (KeyError, ValueError, IndexError):
        return template


def _host_port(url: str) -> tuple[str, int | str]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or url, parts.port or ""


_TABLES: OrderedDict[str, Any] = OrderedDict()
_TABLES_KEPT = 32


def _parsed(digest: str, data: bytes, kind: str) -> Any:
    """The Arrow table of ``data`` (kept by the digest of its bytes: tables are never changed)."""
    found = _TABLES.get(digest)
    if found is None:
        found = _TABLES[digest] = _parse(data, kind)
        while len(_TABLES) > _TABLES_KEPT:
            _TABLES.popitem(last=False)
    else:
        _TABLES.move_to_end(digest)
    return found


def _parse(data: bytes, kind: str) -> Any:
    import pyarrow as pa

    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(pa.BufferReader(data))
    import gzip

    from mlsandbox.data.formats import from_bytes

    raw = gzip.decompress(data) if kind == "csv.gz" else data
    return pa.Table.from_pandas(from_bytes(raw, "csv"), preserve_index=False)


TORCH_REFUSAL = (
    "the simulator fits every model for real in its own process on one core, and a network trained with "
    "PyTorch takes minutes there; train it on the local backend (with PyTorch installed)"
)


def _refuse_torch(spec: JobSpec) -> None:
    """:class:`~mlsandbox.errors.Unsupported` for a trainer job whose algorithm trains with PyTorch."""
    from mlsandbox.errors import Unsupported
    from mlsandbox.workloads.trainer import torch_algorithm

    algorithm = torch_algorithm(spec.workload, spec.args)
    if algorithm is not None:
        raise Unsupported(f"jobs.{algorithm}", "sim", TORCH_REFUSAL)


def _usage_plan(message: str) -> JobPlan:
    """A trainer whose command line its parser refuses: exit status 2 at once."""
    from mlsandbox.backends.sim.surrogate import Event, Phase

    plan = JobPlan(
        [Phase("start", 0.3, 0.4)], [], import_rss_mb=20.0, peak_rss_mb=20.0, peak_at=0.1, tracker_run=False
    )
    plan.events.append(
        Event(
            1.0,
            0,
            "line",
            text="usage: python -m mlsandbox.workloads.trainer [-h] --bucket BUCKET --key KEY ...",
        )
    )
    plan.events.append(Event(1.0, 1, "line", text=f"python -m mlsandbox.workloads.trainer: error: {message}"))
    plan.exit_code = 2
    return plan


__all__ = ["MACHINE_CPUS", "SimJob", "SimJobs"]
