"""The calibration the ``sim`` backend reads: what real runs on the ``local`` backend measured, fitted.

One :class:`Calibration` document (JSON, shipped in the package under ``calibration/data/``, one
file per data generator version: ``generator-<GENERATOR_VERSION>.json``, read by :mod:`.shipped`) holds
every figure and text the simulator uses instead of running something: how a training job's outcome
(validation and holdout AUC), CPU-seconds, wall time and peak memory follow from its algorithm,
hyperparameters, resources and the rows it reads; when and how a job fails (divergence, missing values,
bad hyperparameters, out of memory, timeouts, unreachable services) and the log lines it leaves; how a
model server's latency grows with load; how long flow runs and their tasks take and what they log; how
long each operation on a service takes; and the error texts the real services and clients produce.
``mlsandbox calibrate`` rebuilds it from a sweep of real jobs (``meta.command`` says how).

Nothing here is code: the simulator (``backends/sim/surrogate.py`` and friends) evaluates the models.

Linear models
-------------
Most figures are a :class:`LinearModel` over named **features** the simulator computes for the case at
hand; a feature a model names but the simulator does not know is an error when the calibration loads
(:data:`JOB_FEATURES`, :data:`SERVING_FEATURES`, :data:`FLOW_FEATURES` list them). A feature absent from
``coefficients`` has coefficient 0. ``link = "log"`` means the linear predictor is the natural log of
the figure (``exp`` is applied). ``residual_sd`` is the standard deviation of what the fit leaves
unexplained, on the link's scale: the simulator adds a seeded normal draw of that size, so two runs with
the same seed give the same figure and different seeds spread like real runs. ``minimum``/``maximum``
clip the result.

Hyperparameters enter job models as features ``hp:<name>`` (the value) and ``log10_hp:<name>`` (its
base-10 logarithm); a hyperparameter the job does not set takes its value from
:attr:`AlgorithmModel.defaults` (the trainer's own defaults), and a non-numeric value counts as its
default.

Templates
---------
Log lines and error texts are ``str.format`` templates with named placeholders (``{job_id}``,
``{rows}``, ``{memory_mb}``, ...). Each template lists the placeholders it may use
(:class:`TextTemplate`), so a calibration with a placeholder the simulator does not fill fails when it
loads, not in the middle of an episode. Captured texts must not carry machine paths: the sweep replaces
the interpreter's site-packages directory by ``{site_packages}`` and the sandbox's directory by
``{sandbox_dir}``; the simulator fills in its own.
"""

from __future__ import annotations

import math
import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
"""Bumped when a calibration document written for the previous schema can no longer be read."""

ALGORITHMS: tuple[str, ...] = ("logistic_regression", "random_forest", "gradient_boosting", "mlp")
"""The trainer's algorithms (``mlsandbox.workloads.trainer.ALGORITHMS``)."""

SERVICES: tuple[str, ...] = ("minio", "mlflow", "prefect-server", "prefect-worker")
"""The sandbox's core services (what ``get_service_health`` and ``restart_service`` name)."""

FLOWS: tuple[str, ...] = ("ingestion", "training", "batch-scoring")

JOB_FEATURES: frozenset[str] = frozenset(
    {
        "one",  # 1.0: an explicit intercept term where a model wants one per feature set
        "proxy_val_auc",  # the proxy model's AUC on the job's validation split (20 %)
        "rows",  # training rows the job reads (before its validation split)
        "log10_rows",
        "columns",  # feature columns (the target excluded)
        "numeric_columns",
        "categorical_columns",
        "onehot_width",  # columns after one-hot encoding the categoricals (what the estimator sees)
        "missing_fraction",  # share of feature cells that are missing in what the job reads
        "rows_with_missing_fraction",  # share of rows with at least one missing feature
        "outlier_fraction",  # share of numeric cells beyond 1.5 IQR in what the job reads
        "positive_rate",  # share of positive labels
        "cpus",  # the job's CPU limit
        "threads",  # floor(cpus), at least 1: the threads native libraries get
        "memory_mb",  # the job's memory limit
    }
)
"""Features a job model may use, besides ``hp:<name>`` and ``log10_hp:<name>``."""

SERVING_FEATURES: frozenset[str] = frozenset(
    {
        "one",
        "rows_per_request",  # rows in one /predict request
        "by_entity",  # 1.0 when the request names entity ids (features fetched from the feature service)
        "cpus",  # the replica's CPU limit
        "onehot_width",  # the served model's input width
        "rows",  # rows the model was trained on
        "log10_rows",
    }
)
"""Features the serving models may use."""

FLOW_FEATURES: frozenset[str] = frozenset(
    {
        "one",
        "rows",  # rows the flow reads (an upstream batch, the lake batches, the batch to score)
        "log10_rows",
        "batches",  # lake batches a training run reads
        "columns",
    }
)
"""Features the flow models may use."""

PLACEHOLDERS: frozenset[str] = frozenset(
    {
        # jobs
        "job_id",  # the backend's job id
        "run_name",  # the agent's job name (job-N), the MLflow run name
        "run_id",
        "experiment_id",
        "bucket",
        "key",
        "algorithm",
        "rows",
        "columns",
        "train_rows",
        "val_rows",
        "seconds",  # a duration, formatted by the template (``{seconds:.2f}``)
        "val_auc",
        "val_accuracy",
        "val_log_loss",
        "epoch",
        "epochs",
        "loss",
        "learning_rate",
        "param",  # a hyperparameter's name
        "value",  # a value (a hyperparameter's, a config value)
        "estimator",  # the estimator's class name (LogisticRegression, ...)
        "valid_params",  # the estimator's valid parameter names as sklearn lists them
        "target",
        "memory_mb",
        "cpus",
        "timeout_s",
        "config_prefix",
        "s3_url",
        "mlflow_url",
        "url",  # the URL a client tried
        "host",
        "port",
        "site_packages",
        "package_dir",  # the mlsandbox package's directory (where the workloads' files are)
        "sandbox_dir",
        "operation",  # an S3 operation (GetObject, PutObject) or an API path
        "what",  # what the client was doing (put_object, list_runs)
        # services, sources, flows, serving
        "service",
        "endpoint",
        "flow",
        "flow_run_name",
        "task",
        "batch",
        "dataset",
        "model_name",
        "version",
        "deployment",
        "replica",
        "status",
        "detail",
        "quota_bytes",
        "size",
        "role",
        "database",
        "time",  # HH:MM:SS of the virtual clock
    }
)
"""Every placeholder a template may use (what the simulator knows how to fill)."""


class Model(BaseModel):
    """Base of the calibration's models: unknown fields are errors (a typo never passes silently)."""

    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------ building blocks


class LinearModel(Model):
    """``value = inverse_link(intercept + sum(coefficients[f] * feature(f)) + residual_sd * N(0, 1))``,
    clipped to [``minimum``, ``maximum``] (see the module docstring)."""

    intercept: float = 0.0
    coefficients: dict[str, float] = Field(default_factory=dict)
    link: Literal["identity", "log"] = "identity"
    residual_sd: float = Field(default=0.0, ge=0.0)
    minimum: float | None = None
    maximum: float | None = None
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Per feature, the range the fit saw: a value outside is clamped to it (the model does not
    extrapolate); a feature not listed is used as it is."""

    def features(self) -> set[str]:
        return set(self.coefficients)

    def check_features(self, allowed: frozenset[str], where: str, *, hyperparameters: bool = False) -> None:
        """:class:`ValueError` for a feature outside ``allowed`` (``hp:`` features only where
        ``hyperparameters``)."""
        for name in self.coefficients:
            if name.startswith(("hp:", "log10_hp:")):
                if not hyperparameters:
                    raise ValueError(f"{where}: hyperparameter feature {name!r} is for job models only")
                continue
            if name not in allowed:
                known = ", ".join(sorted(allowed))
                extra = ", hp:<name>, log10_hp:<name>" if hyperparameters else ""
                raise ValueError(f"{where}: unknown feature {name!r} (features: {known}{extra})")

    def mean(self, values: dict[str, float]) -> float:
        """The figure without the residual draw (a missing feature counts as 0)."""
        return self.value(values, 0.0)

    def value(self, values: dict[str, float], z: float) -> float:
        """The figure for feature ``values`` and a standard normal draw ``z``."""
        eta = self.intercept + self.residual_sd * z
        bounds = self.bounds
        for name, coef in self.coefficients.items():
            x = values.get(name, 0.0)
            if bounds:
                lo_hi = bounds.get(name)
                if lo_hi is not None:
                    x = min(max(x, lo_hi[0]), lo_hi[1])
            eta += coef * x
        out = math.exp(min(eta, 700.0)) if self.link == "log" else eta
        if self.minimum is not None:
            out = max(self.minimum, out)
        if self.maximum is not None:
            out = min(self.maximum, out)
        return out


def constant(value: float, *, minimum: float | None = None) -> LinearModel:
    """A model that always gives ``value`` (no features, no residual)."""
    return LinearModel(intercept=value, minimum=minimum)


class TextTemplate(Model):
    """A log line (or a multi-line text) with named placeholders from :data:`PLACEHOLDERS`."""

    text: str
    captured: bool = False
    """True when the sweep copied it from a real run; False when it was written by hand."""

    @model_validator(mode="after")
    def _known_placeholders(self) -> TextTemplate:
        for name in placeholders(self.text):
            if name not in PLACEHOLDERS:
                raise ValueError(f"template {self.text[:60]!r}: unknown placeholder {{{name}}}")
        return self


def placeholders(text: str) -> set[str]:
    """The named placeholders of a ``str.format`` template (``{seconds:.2f}`` names ``seconds``)."""
    out = set()
    for _, field_name, _, _ in string.Formatter().parse(text):
        if field_name:
            out.add(field_name.split(".", 1)[0].split("[", 1)[0])
    return out


Lines = list[TextTemplate]
"""Log lines, oldest first."""


class FitQuality(Model):
    """How well a fitted model explains the sweep's points (for the fidelity report and for people)."""

    points: int = Field(ge=0)
    r2: float | None = None
    residual_sd: float | None = None
    mean_abs_error: float | None = None
    note: str | None = None


# ------------------------------------------------------------------------------------------------- jobs


class AucModel(Model):
    """The AUC an algorithm reaches, as the proxy's AUC plus a correction.

    The simulator fits a cheap proxy (a few Newton steps of an L2-regularised logistic regression on the
    standardised, one-hot encoded, median-imputed rows the job reads), scores it on the job's validation
    split and on the grade's holdout, and adds ``val_delta`` / ``holdout_delta`` (linear models over
    :data:`JOB_FEATURES` and hyperparameters, their residual drawn with the job's seed). The model it
    registers is the proxy with seeded noise on its scores sized so that its holdout AUC is the proxy's
    plus ``holdout_delta`` (noise only lowers an AUC: a positive delta on the holdout is capped at 0)."""

    val_delta: LinearModel = Field(default_factory=LinearModel)
    holdout_delta: LinearModel = Field(default_factory=LinearModel)
    accuracy_offset: LinearModel = Field(default_factory=lambda: constant(0.0))
    """Validation accuracy minus the proxy's accuracy at a 0.5 threshold."""
    log_loss_offset: LinearModel = Field(default_factory=lambda: constant(0.0))
    """Validation log loss minus the proxy's."""


class ResourceModel(Model):
    """CPU-seconds, wall time and peak memory of one algorithm's job.

    ``cpu_s = overhead_cpu_s + fit_cpu_s``; the fit runs with ``threads`` threads at a speed-up of
    ``1 / ((1 - parallel_fraction) + parallel_fraction / threads)`` and at most ``cpus`` CPUs of rate
    (a CPU limit below 1 stretches it: ``fit wall = fit cpu / min(cpus, speed-up)``);
    ``wall_s = overhead_wall_s + fit wall``. ``peak_rss_mb`` is the largest resident memory the job
    reaches (a memory limit below it OOM-kills the job at ``oom_at_fraction`` of its run)."""

    overhead_cpu_s: LinearModel
    """Interpreter start, imports, reading the data, logging the model to the tracker."""
    overhead_wall_s: LinearModel
    fit_cpu_s: LinearModel
    parallel_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    peak_rss_mb: LinearModel
    oom_at_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    """Where in its run (share of its wall time) a job over its memory limit is killed."""
    import_rss_mb: float = Field(default=150.0, ge=0.0)
    """Resident memory once the workload has imported its libraries: a limit below it kills the job
    before it reads anything."""


class AlgorithmModel(Model):
    """Everything the simulator knows of one algorithm of the trainer."""

    estimator: str
    """The scikit-learn estimator's class name (``LogisticRegression``, ``HistGradientBoostingClassifier``)."""
    defaults: dict[str, float] = Field(default_factory=dict)
    """The trainer's default of each numeric hyperparameter that a model uses (``C``: 1.0, ...)."""
    accepts_missing: bool
    """Whether the estimator takes missing values (otherwise a job on rows with missing values fails
    with ``failures.missing_values``)."""
    auc: AucModel = Field(default_factory=AucModel)
    resources: ResourceModel
    fit_quality: dict[str, FitQuality] = Field(default_factory=dict)
    """Per fitted model (``auc.val_delta``, ``resources.fit_cpu_s``, ...): how well it fits the sweep."""


class Divergence(Model):
    """An algorithm trained epoch by epoch diverges at high learning rates (the ``mlp`` here).

    ``P(diverge) = 1 / (1 + exp(-(log10(lr) - log10_threshold) / scale))`` with ``lr`` the hyperparameter
    ``param`` (its default when unset); the epoch the loss stops being finite is ``first_epoch`` at the
    threshold and earlier above it (``epoch_slope`` epochs per decade, at least 1)."""

    algorithm: str
    param: str
    log10_threshold: float
    scale: float = Field(gt=0.0)
    first_epoch: float = Field(ge=1.0)
    epoch_slope: float = 0.0
    epochs_param: str = "max_iter"
    """The hyperparameter that sets the number of epochs."""
    default_epochs: int = Field(default=30, ge=1)
    initial_loss: float = Field(default=0.6, gt=0.0)
    """The loss printed for the first epoch of a run that converges; each later epoch's is the previous
    one times ``loss_decay``."""
    loss_decay: float = Field(default=0.97, gt=0.0, le=1.0)


class FailureMode(Model):
    """How a job fails in one way: its exit code, when (a share of its normal run), the CPU it burns
    meanwhile and the last lines of its log (appended after the lines it printed until then)."""

    exit_code: int
    at_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of the job's normal wall time at which it fails."""
    at_seconds: float | None = Field(default=None, ge=0.0)
    """An absolute time instead (seconds after its start), e.g. client retries that give up."""
    cpu_fraction: float = Field(default=1.0, ge=0.0)
    """CPU-seconds used per second of that time, on average."""
    log_tail: Lines
    run_status: Literal["FAILED", "none"] = "FAILED"
    """What the job's tracker run ends as: ``FAILED`` (a run was started and marked failed) or no run
    at all (it failed before it could start one)."""


class Failures(Model):
    """The job failure modes the simulator reproduces (each real-run's texts)."""

    missing_values: FailureMode
    """An estimator that does not take missing values got some (placeholders: estimator, ...)."""
    divergence: FailureMode
    """The training loss stopped being finite (placeholders: epoch, epochs, loss, learning_rate)."""
    unknown_hyperparameter: FailureMode
    """A hyperparameter the estimator does not have (param, estimator, valid_params)."""
    invalid_hyperparameter: FailureMode
    """A value the estimator refuses; ``{detail}`` is scikit-learn's own message (the simulator asks
    scikit-learn's parameter validation, which does not fit anything)."""
    missing_target: FailureMode
    """The target column is not in the data (target)."""
    unreadable_data: FailureMode
    """The object cannot be read as its format (key, detail)."""
    out_of_memory: FailureMode
    """Killed by the kernel over its memory limit (memory_mb); exit code 137."""
    timeout: FailureMode
    """Killed at its wall-clock limit (timeout_s)."""
    storage_unreachable: FailureMode
    """The object store cannot be reached (url: the endpoint it tried)."""
    storage_credentials: FailureMode
    """The object store refuses its credentials (SignatureDoesNotMatch / InvalidAccessKeyId)."""
    tracker_unreachable: FailureMode
    """The tracking server cannot be reached (url)."""
    config_missing: FailureMode
    """A key of its config is missing from the config store (config_prefix, value: the key)."""
    config_unreachable: FailureMode
    """The config store itself cannot be reached (url)."""
    cancelled: FailureMode
    """Cancelled by its owner (SIGTERM): exit code 143."""


class JobLog(Model):
    """The lines a successful trainer job prints, in order (the result line is added by the simulator:
    ``MLSANDBOX_RESULT {json}``, the job contract). ``per_epoch`` is printed once per epoch by
    algorithms trained epoch by epoch (placeholders: epoch, epochs, loss)."""

    config_line: TextTemplate
    """Printed first when the job reads its config from the config store."""
    start: Lines
    """From the start to the fit (run_name, experiment_id, bucket, key, rows, columns, ...)."""
    per_epoch: TextTemplate
    after_fit: Lines
    """From the end of the fit to the model logged (seconds, val_auc, val_accuracy, val_log_loss)."""
    start_fraction: float = Field(default=0.3, ge=0.0, le=1.0)
    """Share of the job's wall time spent before the fit starts (the rest of the overhead comes after)."""


class TrainerModel(Model):
    """What the trainer logs to the tracker and prints: the names every backend shows."""

    params: list[str]
    """Parameters logged to every run besides the hyperparameters (``algorithm``, ``seed``, ``data``,
    ``target``, ``features``)."""
    metrics: list[str]
    """Metrics logged by a successful run (``val_auc``, ``val_accuracy``, ``val_log_loss``,
    ``train_rows``, ``train_seconds``)."""
    validation_fraction: float = Field(gt=0.0, lt=1.0)
    log: JobLog


class JobsModel(Model):
    """Training jobs: per algorithm, the failure modes, the divergence rule and the trainer's names."""

    algorithms: dict[str, AlgorithmModel]
    tasks: dict[str, dict[str, ResourceModel]] = Field(default_factory=dict)
    """Per trainer task other than ``binary`` (``multiclass``, ``regression``: a kind's ``fit_task``), per
    algorithm, its jobs' resources measured on real runs of that task (``mlsandbox calibrate --section
    kinds``). An algorithm of a task not listed is timed as its binary namesake or its kind's stand-in
    (``TaskKind.calibration_stand_ins``). A calibration without it (written before kinds) still loads."""
    divergence: list[Divergence] = Field(default_factory=list)
    failures: Failures
    trainer: TrainerModel
    queue_start_s: float = Field(default=0.05, ge=0.0)
    """Seconds from submit to the job running (process start on local, pod start on kube)."""
    burn_cpu_s_per_s: float = Field(default=1.0, ge=0.0)
    """CPU-seconds per second a ``burn`` workload uses per CPU it is given."""

    @model_validator(mode="after")
    def _every_algorithm(self) -> JobsModel:
        missing = [a for a in ALGORITHMS if a not in self.algorithms]
        if missing:
            raise ValueError(f"jobs.algorithms lacks {', '.join(missing)}")
        for name, alg in self.algorithms.items():
            for where, m in (
                ("auc.val_delta", alg.auc.val_delta),
                ("auc.holdout_delta", alg.auc.holdout_delta),
                ("auc.accuracy_offset", alg.auc.accuracy_offset),
                ("auc.log_loss_offset", alg.auc.log_loss_offset),
                ("resources.overhead_cpu_s", alg.resources.overhead_cpu_s),
                ("resources.overhead_wall_s", alg.resources.overhead_wall_s),
                ("resources.fit_cpu_s", alg.resources.fit_cpu_s),
                ("resources.peak_rss_mb", alg.resources.peak_rss_mb),
            ):
                m.check_features(JOB_FEATURES, f"jobs.algorithms.{name}.{where}", hyperparameters=True)
        for task, by_algorithm in self.tasks.items():
            for name, res in by_algorithm.items():
                for where, m in (
                    ("overhead_cpu_s", res.overhead_cpu_s),
                    ("overhead_wall_s", res.overhead_wall_s),
                    ("fit_cpu_s", res.fit_cpu_s),
                    ("peak_rss_mb", res.peak_rss_mb),
                ):
                    m.check_features(JOB_FEATURES, f"jobs.tasks.{task}.{name}.{where}", hyperparameters=True)
        for d in self.divergence:
            if d.algorithm not in self.algorithms:
                raise ValueError(f"jobs.divergence: unknown algorithm {d.algorithm!r}")
        return self


# ---------------------------------------------------------------------------------------------- serving


class ServingModel(Model):
    """Model servers and the feature service under load (a queueing model per replica).

    Each replica serves one request at a time (``workers`` of them at once); a request's service time is
    ``service_ms`` (features :data:`SERVING_FEATURES`, residual drawn per request), plus
    ``feature_lookup_ms`` when it names entity ids; a request that arrives while the replica is busy
    waits. CPU percent of a replica is its busy share times ``cpu_percent_busy``."""

    service_ms: dict[str, LinearModel]
    """Per algorithm: milliseconds to answer one request once it is taken."""
    feature_lookup_ms: LinearModel
    """What a lookup in the feature service adds to a request by entity ids."""
    workers: int = Field(default=1, ge=1)
    replica_start_s: LinearModel
    """Seconds from deploy to a replica ready (interpreter start, loading the version from the registry)."""
    feature_service_start_s: float = Field(ge=0.0)
    replica_rss_mb: dict[str, LinearModel]
    """Per algorithm: resident memory of a replica serving a model (a machine below it OOM-kills it)."""
    feature_service_rss_mb: float = Field(ge=0.0)
    cpu_percent_busy: float = Field(default=100.0, ge=0.0)
    scrape_ms: float = Field(default=1.7, ge=0.0)
    """Time to answer a ``/metrics`` scrape."""
    health_ms: float = Field(default=1.0, ge=0.0)
    deploy_failed_log: Lines
    """The log tail of a replica that did not become ready (deployment, version, model_name, detail)."""
    oom_message: TextTemplate
    """``ReplicaView.message`` of a replica killed for memory (memory_mb)."""

    @model_validator(mode="after")
    def _features(self) -> ServingModel:
        for name, m in self.service_ms.items():
            m.check_features(SERVING_FEATURES, f"serving.service_ms.{name}")
        for name, m in self.replica_rss_mb.items():
            m.check_features(SERVING_FEATURES, f"serving.replica_rss_mb.{name}")
        self.feature_lookup_ms.check_features(SERVING_FEATURES, "serving.feature_lookup_ms")
        self.replica_start_s.check_features(SERVING_FEATURES, "serving.replica_start_s")
        return self


# ------------------------------------------------------------------------------------------------ flows


class FlowModel(Model):
    """One flow: its tasks in order, how long each takes, the CPU it uses and the lines it logs.

    A run is ``SCHEDULED`` then ``PENDING`` for ``pickup_s`` (the worker's poll and the process start),
    ``RUNNING`` through its tasks, then final. ``logs`` maps a moment of the run to its lines: ``start``,
    ``task_start`` / ``task_end`` (per task: task), ``completed``, ``failed`` (detail) and ``usage``
    (the ``resource usage: cpu_seconds=`` line the sandbox charges; seconds)."""

    tasks: list[str]
    task_s: dict[str, LinearModel]
    """Per task: wall seconds (features :data:`FLOW_FEATURES`)."""
    cpu_s: LinearModel
    """CPU-seconds a whole run logs in its usage line."""
    logs: dict[str, Lines]
    retries: dict[str, int] = Field(default_factory=dict)
    """Per task: how many times the flow retries it before failing (Prefect's task retries)."""
    retry_delay_s: float = Field(default=1.0, ge=0.0)

    @model_validator(mode="after")
    def _tasks(self) -> FlowModel:
        for name, m in self.task_s.items():
            if name not in self.tasks:
                raise ValueError(f"flows: task_s names an unknown task {name!r}")
            m.check_features(FLOW_FEATURES, f"flows.task_s.{name}")
        self.cpu_s.check_features(FLOW_FEATURES, "flows.cpu_s")
        return self


class FlowsModel(Model):
    pickup_s: float = Field(ge=0.0)
    """Seconds from a run's creation to its process running."""
    flows: dict[str, FlowModel]
    logger_names: dict[str, str] = Field(default_factory=dict)
    """Logger names the lines carry (``flow_runs``, ``task_runs``), as ``HH:MM:SS LEVEL logger: msg``."""

    @model_validator(mode="after")
    def _every_flow(self) -> FlowsModel:
        missing = [f for f in FLOWS if f not in self.flows]
        if missing:
            raise ValueError(f"flows.flows lacks {', '.join(missing)}")
        return self


# ----------------------------------------------------------------------------------- services, operations


class ServiceModel(Model):
    """One core service: its health answer, its restart, its log."""

    health_ms: float = Field(ge=0.0)
    restart_s: float = Field(ge=0.0)
    """Seconds from a restart to healthy again."""
    log_lines: Lines = Field(default_factory=list)
    """What its log shows after a (re)start (service, time)."""
    down_error: TextTemplate
    """``ServiceHealth.error`` when it is killed (connection refused)."""
    frozen_error: TextTemplate
    """``ServiceHealth.error`` when it is frozen (the probe times out)."""


class OperationsModel(Model):
    """How long operations on the services take (virtual seconds charged to the clock), and the
    services themselves."""

    call_s: dict[str, float] = Field(default_factory=dict)
    """Per runtime operation (``object_store.get_object``, ``tracking.list_runs``, ...): seconds; an
    operation not listed takes ``default_call_s``."""
    default_call_s: float = Field(default=0.002, ge=0.0)
    bytes_per_s: float = Field(default=200e6, gt=0.0)
    """Object store throughput: a get or put of N bytes adds N / bytes_per_s."""
    services: dict[str, ServiceModel]
    network_requests: dict[str, float] = Field(default_factory=dict)
    """Per operation: how many requests it makes to its endpoint (what a latency fault multiplies)."""

    @model_validator(mode="after")
    def _every_service(self) -> OperationsModel:
        missing = [s for s in SERVICES if s not in self.services]
        if missing:
            raise ValueError(f"operations.services lacks {', '.join(missing)}")
        return self


class Portability(Model):
    """A trainer's model (``algorithm``) made under scikit-learn ``made`` and loaded under ``loaded``:
    ``error`` is the library's own last line when loading or predicting fails, None when it works."""

    made: str
    loaded: str
    algorithm: str
    error: str | None = None


PORTABILITY: tuple[Portability, ...] = (
    Portability(
        made="1.9.1",
        loaded="1.5.2",
        algorithm="gradient_boosting",
        error="skops.io.exceptions.UntrustedTypesFoundException: Untrusted types found in the file: "
        "['sklearn._loss._loss.CyHalfBinomialLoss'].",
    ),
    Portability(
        made="1.9.1",
        loaded="1.5.2",
        algorithm="logistic_regression",
        error="AttributeError: 'LogisticRegression' object has no attribute 'multi_class'",
    ),
    Portability(made="1.9.1", loaded="1.5.2", algorithm="random_forest"),
    Portability(made="1.9.1", loaded="1.5.2", algorithm="mlp"),
)
"""Measured on this kind of machine: the sandbox's release against 1.5.2 (skops models, as the trainer
saves them, loaded with ``mlflow.sklearn.load_model`` and asked ``predict_proba``)."""


class EnvironmentsModel(Model):
    """Named Python environments: what the default holds and what a build costs."""

    default_packages: dict[str, str]
    """Distribution -> version of the workloads' environment (scikit-learn, numpy, pandas, mlflow, ...)."""
    build_s: float = Field(default=3.0, ge=0.0)
    serving_build_s: float = Field(default=6.0, ge=0.0)
    known_versions: dict[str, list[str]] = Field(default_factory=dict)
    """Distribution -> versions that exist (a pin outside them fails like the resolver does)."""
    resolution_error: TextTemplate
    """The resolver's message for requirements that cannot be installed (detail)."""
    score_s: float = Field(default=8.0, ge=0.0)
    """Scoring a registered model in a named environment (a production scorer): its interpreter starts,
    imports MLflow and scikit-learn, downloads, loads and predicts (7-9 s on this kind of machine, warm)."""
    portability: list[Portability] = Field(default_factory=lambda: list(PORTABILITY))
    """What a model made under one scikit-learn release does under another, per algorithm of the trainer
    (measured on real pipelines); a pin of scikit-learn with no record here is refused in ``sim``."""


# --------------------------------------------------------------------------------------------- errors


ERROR_KEYS: tuple[str, ...] = (
    "storage.quota_exceeded",  # a put over the bucket quota (MinIO's XMinioAdminBucketQuotaExceeded)
    "storage.unreachable",  # the object store refuses connections (endpoint down, killed)
    "storage.timeout",  # the object store does not answer in time (frozen, timeout toxic)
    "storage.reset",  # the connection is reset (reset_peer)
    "storage.no_such_key",
    "storage.signature_mismatch",  # the S3 error detail of a wrong secret key
    "storage.invalid_access_key",  # the S3 error detail of an unknown access key
    "tracking.unreachable",
    "tracking.timeout",
    "tracking.reset",
    "tracking.run_not_found",
    "tracking.bad_filter",  # detail: the parser's message
    "sources.api_unreachable",  # host, port
    "sources.postgres_unreachable",  # host, port
    "sources.postgres_auth",  # role
    "sources.postgres_no_role",  # role
    "flows.orchestrator_unreachable",  # url
)
"""The errors the simulator raises with a real client's text (what :attr:`Calibration.errors` holds)."""


# ------------------------------------------------------------------------------------------- the document


class CalibrationMeta(Model):
    """Where a calibration comes from."""

    schema_version: int = SCHEMA_VERSION
    generator_version: int
    """The synthetic data generator's version the sweep ran with (``GENERATOR_VERSION``)."""
    provisional: bool
    """True for a calibration not fitted on a full sweep of real jobs (to be replaced)."""
    source: str
    """How it was made, in a sentence."""
    command: str
    """The command that rebuilds it."""
    created: str
    """ISO 8601 date."""
    machine: dict[str, str | int | float | None] = Field(default_factory=dict)
    """The machine the sweep ran on (CPU count and model, reference workload time)."""
    sweep: dict[str, int | float | str] = Field(default_factory=dict)
    """What the sweep covered (jobs run, algorithms, dataset sizes, defect rates, seeds)."""
    notes: list[str] = Field(default_factory=list)


class Calibration(Model):
    """Every figure and text the ``sim`` backend reads (see the module docstring)."""

    meta: CalibrationMeta
    jobs: JobsModel
    serving: ServingModel
    flows: FlowsModel
    operations: OperationsModel
    environments: EnvironmentsModel
    errors: dict[str, TextTemplate]

    @model_validator(mode="after")
    def _errors(self) -> Calibration:
        missing = [k for k in ERROR_KEYS if k not in self.errors]
        if missing:
            raise ValueError(f"errors lacks {', '.join(missing)}")
        unknown = [k for k in self.errors if k not in ERROR_KEYS]
        if unknown:
            raise ValueError(f"errors: unknown keys {', '.join(unknown)} (keys: {', '.join(ERROR_KEYS)})")
        if self.meta.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"calibration schema version {self.meta.schema_version}; this simulator reads {SCHEMA_VERSION}"
            )
        return self


__all__ = [
    "ALGORITHMS",
    "ERROR_KEYS",
    "FLOWS",
    "FLOW_FEATURES",
    "JOB_FEATURES",
    "PLACEHOLDERS",
    "SCHEMA_VERSION",
    "SERVICES",
    "SERVING_FEATURES",
    "AlgorithmModel",
    "AucModel",
    "Calibration",
    "CalibrationMeta",
    "Divergence",
    "EnvironmentsModel",
    "FailureMode",
    "Failures",
    "FitQuality",
    "FlowModel",
    "FlowsModel",
    "JobLog",
    "JobsModel",
    "LinearModel",
    "OperationsModel",
    "ResourceModel",
    "ServiceModel",
    "ServingModel",
    "TextTemplate",
    "TrainerModel",
    "constant",
    "placeholders",
]
