"""The surrogate of the ``sim`` backend's jobs: what a training job would do, from the calibration.

:func:`plan_trainer` turns a trainer job (its arguments, limits, the rows it reads, the episode's config)
into a :class:`JobPlan`: the phases of its run (the start before the fit, the fit, the end after it), each
with the CPU-seconds it needs and the wall time it takes at full speed; the moments of its run at which
it needs a service (the tracker when it starts its run and when it logs the model, the object store when
it reads); its memory profile; the log lines it prints and where; and, when it fails for a reason known
at its start (bad hyperparameters, missing values into an estimator that refuses them, divergence, a
wrong config), where and how. :mod:`mlsandbox.backends.sim.jobs` plays the plan on the virtual clock.

Outcome. The job's rows are the real rows (read from the sim's object store), and what it learns is the
real thing: :func:`mlsandbox.backends.sim.realfit.real_fit` runs the trainer's own parse, split, pipeline,
fit and metrics in this process with the job's algorithm and hyperparameters, so its validation metrics,
its epoch lines, its failures (missing values, an invalid hyperparameter, divergence) and the model it
registers are the real ones. Durations, CPU-seconds and memory come from the calibration (their residuals
drawn with the job's seed), which keeps the virtual clock deterministic.
"""

from __future__ import annotations

import json
import math
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar, cast

from mlsandbox.calibration.model import AlgorithmModel, Calibration, FailureMode, LinearModel

_R = TypeVar("_R")

PRE, FIT, POST = 0, 1, 2
"""The phases of a trainer job (its position runs from 0 to 3: phase index + fraction done)."""


@dataclass
class Phase:
    name: str
    cpu: float
    """CPU-seconds it needs."""
    wall: float
    """Seconds it takes with all the CPU it can use."""


@dataclass(order=True)
class Event:
    pos: float
    order: int
    kind: str = field(compare=False)
    """``line`` (print ``text``), ``need`` (a service: ``service``; ``values["read"]``: the read of the
    job's data object through it), ``fail`` (``mode``)."""
    text: str = field(default="", compare=False)
    service: str = field(default="", compare=False)
    mode: str = field(default="", compare=False)
    values: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class Outcome:
    """What a successful run reports and leaves in the tracker."""

    metrics: dict[str, float]
    params: dict[str, Any]
    model: Any
    experiment_id: str
    run_name: str


@dataclass
class JobPlan:
    phases: list[Phase]
    events: list[Event]
    import_rss_mb: float
    peak_rss_mb: float
    peak_at: float
    """Position at which the job reaches its peak memory (it ramps from ``import_rss_mb`` through the
    fit)."""
    exit_code: int = 0
    outcome: Outcome | None = None
    result_line: str | None = None
    tracker_run: bool = True
    """Whether the job starts a tracker run (a trainer does; a burn job does not)."""
    failures: dict[str, FailureMode] = field(default_factory=dict)
    fill: dict[str, Any] = field(default_factory=dict)
    """Placeholders the failure texts use."""

    @property
    def end(self) -> float:
        return float(len(self.phases))

    def memory_at(self, pos: float) -> float:
        """Resident MiB at position ``pos``."""
        if pos < 0.1:
            return 30.0 + (self.import_rss_mb - 30.0) * pos / 0.1
        start = 1.0 if len(self.phases) > 1 else 0.1
        if pos <= start:
            return self.import_rss_mb
        if pos >= self.peak_at:
            return self.peak_rss_mb
        span = max(1e-9, self.peak_at - start)
        return self.import_rss_mb + (self.peak_rss_mb - self.import_rss_mb) * (pos - start) / span

    def oom_position(self, limit_mb: float, after: float = 0.0) -> float | None:
        """The first position at or after ``after`` where memory exceeds ``limit_mb`` (None: never)."""
        if self.memory_at(after) > limit_mb:
            return after
        if self.peak_rss_mb <= limit_mb:
            return None
        lo, hi = after, self.peak_at
        for _ in range(40):
            mid = (lo + hi) / 2
            if self.memory_at(mid) > limit_mb:
                hi = mid
            else:
                lo = mid
        return hi


# ------------------------------------------------------------------------------------------ arguments


@dataclass
class TrainerArgs:
    bucket: str
    key: str
    target: str
    algorithm: str
    hyperparams: dict[str, Any]
    experiment_id: str
    run_name: str | None
    seed: int
    config_prefix: str | None
    task: str = "binary"
    """The trainer's ``--task``: what its dataset's kind asks for (binary, multiclass, regression, ...)."""
    column: str | None = None
    """The trainer's ``--column`` (forecasting: the date column; text: the document column)."""


class UsageError(ValueError):
    """The trainer's own argument parser refuses the command line (exit status 2)."""


def parse_trainer(args: list[str]) -> TrainerArgs:
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        name = args[i]
        if not name.startswith("--") or i + 1 >= len(args):
            raise UsageError(f"unrecognized arguments: {' '.join(args[i:])}")
        values[name[2:].replace("-", "_")] = args[i + 1]
        i += 2
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("bucket", "key", "target", "algorithm", "experiment_id")
        if k not in values
    ]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    try:
        hyperparams = json.loads(values.get("hyperparams", "{}"))
    except json.JSONDecodeError as e:
        raise UsageError(f"argument --hyperparams: invalid loads value: {e}") from None
    if not isinstance(hyperparams, dict):
        raise UsageError(f"--hyperparams must be a JSON object, got {values.get('hyperparams')!r}")
    return TrainerArgs(
        bucket=values["bucket"],
        key=values["key"],
        target=values["target"],
        algorithm=values["algorithm"],
        hyperparams=hyperparams,
        experiment_id=values["experiment_id"],
        run_name=values.get("run_name"),
        seed=int(values.get("seed", "0")),
        config_prefix=values.get("config_prefix"),
        task=_task(values.get("task", "binary")),
        column=values.get("column"),
    )


def _task(value: str) -> str:
    from mlsandbox.workloads.trainer import TASKS

    if value not in TASKS:
        choices = ", ".join(repr(t) for t in TASKS)
        raise UsageError(f"argument --task: invalid choice: {value!r} (choose from {choices})")
    return value


# ------------------------------------------------------------------------------------- scikit-learn's own


@cache
def _sklearn_nan_message(algorithm: str) -> str:
    """The message scikit-learn gives when this algorithm's estimator gets missing values."""
    import numpy as np

    from mlsandbox.workloads.trainer import make_estimator

    estimator = make_estimator(algorithm, {}, 0)
    if algorithm == "mlp":
        estimator.set_params(max_iter=1)
    x = np.array([[0.0], [np.nan], [1.0], [2.0]])
    try:
        estimator.fit(x, [0, 1, 0, 1])
    except ValueError as e:
        return str(e)
    return "Input X contains NaN."


def _stand_in(algorithm: str) -> str:
    """The calibrated algorithm a kind times ``algorithm`` as (see ``TaskKind.calibration_stand_ins``)."""
    from mlsandbox.tasks.registry import kinds

    for kind in kinds().values():
        if algorithm in kind.calibration_stand_ins:
            return kind.calibration_stand_ins[algorithm]
    return ""


def modelled_columns(table: Any, task: str, target: str) -> Any:
    """The columns of ``table`` the calibration's job model reads for the trainer's ``task`` (its
    ``--task``) with the ``target`` column: all of them for a table, the target and the numeric columns
    for a task with a learner of its own (a date or a document is not one-hot encoded there: a forecaster
    builds its own few lag and calendar features, a text model a sparse TF-IDF whose linear fit costs
    about what a logistic regression on the table's numbers does)."""
    from mlsandbox.workloads.trainer import OWN_LEARNERS

    if task not in OWN_LEARNERS:
        return table
    from mlsandbox.backends.sim.proxy import is_numeric_type

    keep = [n for n in table.column_names if n == target or is_numeric_type(table.schema.field(n).type)]
    return table.select(keep)


def hyperparameter_problem(
    algorithm: str, hyperparams: dict[str, Any], seed: int, task: str = "binary"
) -> tuple[str, str] | None:
    """(``unknown_hyperparameter`` | ``invalid_hyperparameter``, scikit-learn's message) when the
    estimator refuses the hyperparameters; scikit-learn's own validation (nothing is fitted)."""
    from mlsandbox.workloads.trainer import OWN_LEARNERS, make_estimator

    if task in OWN_LEARNERS:
        import importlib

        problems = importlib.import_module(OWN_LEARNERS[task]).hyperparameter_problems(algorithm, hyperparams)
        return ("unknown_hyperparameter", problems[0]) if problems else None

    try:
        estimator = make_estimator(algorithm, hyperparams, seed, task)
    except ValueError as e:
        return "unknown_hyperparameter", str(e)
    except TypeError as e:
        return "invalid_hyperparameter", str(e)
    try:
        estimator._validate_params()
    except ValueError as e:  # InvalidParameterError derives from ValueError and TypeError
        return "invalid_hyperparameter", str(e)
    return None


# -------------------------------------------------------------------------------------------- features


def hp_features(model: AlgorithmModel, hyperparams: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, default in model.defaults.items():
        value = hyperparams.get(name, default)
        try:
            x = float(value) if value is not None else float(default)
        except (TypeError, ValueError):
            x = float(default)
        if not math.isfinite(x):
            x = float(default)
        out[f"hp:{name}"] = x
        out[f"log10_hp:{name}"] = math.log10(x) if x > 0 else math.log10(max(float(default), 1e-12))
    return out


def draw(model: LinearModel, values: dict[str, float], rng: random.Random) -> float:
    return model.value(values, rng.gauss(0.0, 1.0))


# ------------------------------------------------------------------------------------------------ plans


@dataclass
class ConfigView:
    """What the job's config says (or why it cannot be read), against the right values."""

    s3_url: str
    mlflow_url: str
    storage_problem: tuple[str, dict[str, Any]] | None = None
    """(failure mode, its placeholders) when the object store will refuse the job."""
    tracker_problem: tuple[str, dict[str, Any]] | None = None
    config_problem: tuple[str, dict[str, Any]] | None = None


def plan_trainer(
    cal: Calibration,
    args: TrainerArgs,
    *,
    job_seed: int,
    cpus: float,
    memory_mb: int,
    table: Any,
    read_error: str | None,
    data_key: str | None = None,
    data: bytes | None = None,
    fit: Any = None,
    config: ConfigView | None,
    package_dir: str,
) -> JobPlan:
    """The plan of a trainer job (see the module docstring). ``table`` is the Arrow table the job reads
    (None when it cannot be read: ``read_error`` says why)."""
    from mlsandbox.backends.sim import realfit
    from mlsandbox.backends.sim.proxy import feature_summary

    jobs = cal.jobs
    rng = random.Random(job_seed)
    alg = jobs.algorithms.get(args.algorithm) or jobs.algorithms.get(_stand_in(args.algorithm))
    if alg is None:  # the trainer's parser refuses it before anything else
        raise UsageError(
            f"argument --algorithm: invalid choice: {args.algorithm!r} (choose from "
            f"{', '.join(repr(a) for a in jobs.algorithms)})"
        )
    threads = max(1, math.floor(cpus))
    features: dict[str, float] = {
        "one": 1.0,
        "cpus": cpus,
        "threads": float(threads),
        "memory_mb": float(memory_mb),
    }
    if table is not None:
        read = modelled_columns(table, args.task, args.target)
        features.update(
            _cached(
                ("features", data_key, args.target, args.task), lambda: feature_summary(read, args.target)
            )
        )
    features.update(hp_features(alg, args.hyperparams))
    res = jobs.tasks.get(args.task, {}).get(args.algorithm) or alg.resources
    over_cpu = draw(res.overhead_cpu_s, features, rng)
    over_wall = max(over_cpu, draw(res.overhead_wall_s, features, rng))
    fit_cpu = draw(res.fit_cpu_s, features, rng) if table is not None else 0.0
    p = res.parallel_fraction
    fit_wall = fit_cpu * ((1 - p) + p / threads)
    fit_cpu_used = fit_cpu * (1.0 + 0.05 * (threads - 1) * p)
    sf = jobs.trainer.log.start_fraction
    phases = [
        Phase("start", over_cpu * sf, over_wall * sf),
        Phase("fit", fit_cpu_used, fit_wall),
        Phase("end", over_cpu * (1 - sf), over_wall * (1 - sf)),
    ]
    peak = (
        max(res.import_rss_mb, draw(res.peak_rss_mb, features, rng))
        if table is not None
        else res.import_rss_mb
    )
    plan = JobPlan(
        phases,
        [],
        import_rss_mb=res.import_rss_mb,
        peak_rss_mb=peak,
        peak_at=1.0 + max(0.05, res.oom_at_fraction),
        failures=dict(jobs.failures),
    )
    fill: dict[str, Any] = {
        "run_name": args.run_name or "(unnamed)",
        "experiment_id": args.experiment_id,
        "bucket": args.bucket,
        "key": args.key,
        "algorithm": args.algorithm,
        "target": args.target,
        "memory_mb": memory_mb,
        "cpus": cpus,
        "package_dir": package_dir,
        "estimator": alg.estimator,
        "hyperparams": dict(args.hyperparams),
    }
    plan.fill = fill
    seq = iter(range(1_000_000))

    def line(pos: float, template: str | None, **values: Any) -> None:
        if template is not None:  # a calibration with fewer lines: nothing printed there
            plan.events.append(Event(pos, next(seq), "line", text=template.format(**{**fill, **values})))

    def need(pos: float, service: str, **values: Any) -> None:
        plan.events.append(Event(pos, next(seq), "need", service=service, values=values))

    def fail(pos: float, mode: str, **values: Any) -> None:
        plan.events.append(Event(pos, next(seq), "fail", mode=mode, values=values))

    log = jobs.trainer.log
    if args.config_prefix:
        assert config is not None
        fill.update(config_prefix=args.config_prefix, s3_url=config.s3_url, mlflow_url=config.mlflow_url)
        if config.config_problem is not None:
            mode, values = config.config_problem
            fail(0.05, mode, **values)
            plan.events.sort()
            return plan
        line(0.05, log.config_line.text)
    start = iter(log.start)
    # starting run ... (the tracker must answer), reading s3://... (the object store must), loaded ...
    need(0.45, "mlflow")
    if config is not None and config.tracker_problem is not None:
        mode, values = config.tracker_problem
        fail(0.45, mode, **values)
    line(0.5, _next_text(start))
    # the read of the data object through the endpoint (one the config points elsewhere never reaches it)
    need(0.9, "minio", read=config is None or config.storage_problem is None)
    line(0.9, _next_text(start))
    if config is not None and config.storage_problem is not None:
        mode, values = config.storage_problem
        fail(0.95, mode, **values)
    if table is None:
        fail(0.95, "unreadable_data", detail=read_error or "unreadable")
        plan.events.sort()
        return plan
    rows, columns = table.num_rows, table.num_columns
    fill.update(rows=rows, columns=columns)
    line(0.97, _next_text(start))
    if args.target not in table.column_names:
        fail(0.98, "missing_target")
        plan.events.sort()
        return plan
    problem = _cached(
        (
            "hyperparameters",
            args.algorithm,
            json.dumps(args.hyperparams, sort_keys=True, default=str),
            args.seed,
            args.task,
        ),
        lambda: hyperparameter_problem(args.algorithm, args.hyperparams, args.seed, args.task),
    )
    if problem is not None and problem[0] == "unknown_hyperparameter":
        fail(0.99, problem[0], detail=problem[1])
        plan.events.sort()
        return plan
    try:
        if fit is None:  # a job: the trainer's fit on the object's bytes (a flow passes its own fit)
            if data is None or data_key is None:
                raise realfit.SplitError(read_error or "the rows were read without their bytes")
            fit = realfit.real_fit(
                data,
                args.key,
                args.target,
                args.algorithm,
                args.hyperparams,
                args.seed,
                digest=data_key,
                task=args.task,
                column=args.column,
            )
    except realfit.SplitError as e:
        # The trainer's stratified split refuses a target without two classes.
        fail(0.99, "unreadable_data", detail=str(e))
        plan.events.sort()
        return plan
    fill.update(train_rows=fit.train_rows, val_rows=fit.val_rows)
    line(1.0, _next_text(start))
    for extra in start:  # what a calibration captured beyond the trainer's own four lines
        line(1.0, extra.text)
    if problem is not None:
        fail(1.0, problem[0], detail=problem[1])
        plan.events.sort()
        return plan
    # The fit's own lines (an mlp's loss per epoch) spread over the fit phase, and how it failed.
    n = len(fit.epoch_lines)
    total = n + (1 if fit.diverged_at is not None else 0)
    for k, text in enumerate(fit.epoch_lines, start=1):
        pos = 1.0 + k / (max(total, n) + 1)
        plan.events.append(Event(pos, next(seq), "line", text=text))
    if fit.failure is not None:
        mode, detail = fit.failure
        pos = 1.0 + (n / (n + 1) if n else 0.5)
        if mode == "divergence":
            lr = _number(
                args.hyperparams.get("learning_rate_init"), alg.defaults.get("learning_rate_init", 0.01)
            )
            fail(pos, mode, epoch=fit.diverged_at, epochs=n, loss="nan", learning_rate=lr)
        else:
            fail(pos, mode, detail=detail)
        plan.events.sort()
        return plan
    model = fit.model
    if args.task == "binary":
        metrics = {
            "val_auc": float(fit.metrics["val_auc"]),
            "val_accuracy": float(fit.metrics["val_accuracy"]),
            "val_log_loss": float(fit.metrics["val_log_loss"]),
            "train_rows": float(fit.train_rows),
            "train_seconds": round(fit_wall, 3),
        }
        val_auc, accuracy, log_loss = metrics["val_auc"], metrics["val_accuracy"], metrics["val_log_loss"]
        fill.update(seconds=fit_wall, val_auc=val_auc, val_accuracy=accuracy, val_log_loss=log_loss)
        after = iter(log.after_fit)
        line(2.0, _next_text(after))
        for tmpl in after:
            line(2.02, tmpl.text)
    else:  # the trainer prints each of its task's metrics between "fitted in" and the model's logging
        metrics = {
            **{k: float(v) for k, v in fit.metrics.items()},
            "train_rows": float(fit.train_rows),
            "train_seconds": round(fit_wall, 3),
        }
        fill.update(seconds=fit_wall)
        templates = list(log.after_fit)
        if templates:
            line(2.0, templates[0].text)
        for name, value in fit.metrics.items():
            line(2.01, f"{name}={value:.4f}")
        if len(templates) > 1:
            line(2.02, templates[-1].text)
    need(2.05, "mlflow")  # logging the metrics and the model
    need(2.98, "mlflow")  # ending the run
    plan.outcome = Outcome(
        metrics=metrics,
        params={"target": args.target, "features": fit.features},
        model=model,
        experiment_id=args.experiment_id,
        run_name=args.run_name or "",
    )
    # A job over its memory limit is killed where its usage crosses it (see JobPlan.memory_at).
    plan.events.sort()
    return plan


_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_KEPT = 128


def _cached(key: tuple[Any, ...], compute: Callable[[], _R]) -> _R:
    """``compute()``, kept by ``key`` when the key names its inputs (``None`` in it: not kept). What is
    kept is only read afterwards (a fit's model is copied before a job changes it)."""
    if any(k is None for k in key):
        return compute()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return cast(_R, _CACHE[key])
    value = compute()
    _CACHE[key] = value
    while len(_CACHE) > _CACHE_KEPT:
        _CACHE.popitem(last=False)
    return value


def _next_text(lines: Any) -> str | None:
    """The next template of a calibration's line list, None when it has no more."""
    found = next(lines, None)
    return None if found is None else str(found.text)


def _with(features: dict[str, float], proxy_val_auc: float) -> dict[str, float]:
    return {**features, "proxy_val_auc": proxy_val_auc}


def _number(value: Any, default: float) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return float(default)
    return x if math.isfinite(x) else float(default)


def plan_burn(args: list[str], *, job_seed: int) -> JobPlan:
    """The plan of a ``burn`` job (allocate, spin, sleep, exit with a status)."""
    values = {"mem_mb": 0.0, "cpu_seconds": 0.0, "children": 0.0, "sleep": 0.0, "exit_code": 0.0}
    i = 0
    while i + 1 < len(args):
        name = args[i].removeprefix("--").replace("-", "_")
        if name in values:
            values[name] = float(args[i + 1])
        i += 2
    mem = values["mem_mb"]
    phases = [
        Phase("allocate", 0.02 + mem * 0.0005, 0.05 + mem * 0.0005),
        Phase("spin", values["cpu_seconds"], values["cpu_seconds"]),
        Phase("sleep", 0.0, values["sleep"]),
    ]
    plan = JobPlan(
        phases, [], import_rss_mb=12.0 + mem, peak_rss_mb=12.0 + mem, peak_at=0.1, tracker_run=False
    )
    seq = iter(range(1000))
    lines: list[tuple[float, str]] = []
    for k in range(50, int(mem) + 1, 50):
        lines.append((0.1 + 0.8 * k / max(mem, 1), f"allocated {k} MiB"))
    if mem:
        lines.append((0.95, f"allocated {int(mem)} MiB"))
    if values["cpu_seconds"]:
        lines.append((2.0, f"burned {values['cpu_seconds']:.2f} CPU s"))
    if values["sleep"]:
        lines.append((2.0, f"sleeping {values['sleep']} s"))
    for pos, text in lines:
        plan.events.append(Event(pos, next(seq), "line", text=text))
    plan.exit_code = int(values["exit_code"])
    if plan.exit_code == 0:
        plan.result_line = "MLSANDBOX_RESULT " + json.dumps(
            {"mem_mb": int(mem), "cpu_seconds": values["cpu_seconds"]}
        )
    else:
        plan.events.append(Event(3.0, next(seq), "line", text=f"exiting with status {plan.exit_code}"))
    plan.events.sort()
    return plan


__all__ = [
    "ConfigView",
    "Event",
    "JobPlan",
    "Outcome",
    "Phase",
    "TrainerArgs",
    "UsageError",
    "hyperparameter_problem",
    "modelled_columns",
    "parse_trainer",
    "plan_burn",
    "plan_trainer",
]
