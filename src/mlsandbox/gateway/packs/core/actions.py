"""The ``core`` pack's actions: datasets, training, tracking, registry, operations and submit.

Each model's docstring is what the agent reads about the action (tool descriptions, the catalog).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import DatasetName, JobId, ModelName, RunId
from mlsandbox.tasks.registry import kinds

HyperparameterName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")]
Algorithm = Literal[
    "logistic_regression", "random_forest", "gradient_boosting", "mlp", "ridge", "cnn", "linear_svc",
    "naive_bayes", "seasonal_naive",
]  # fmt: skip
"""The trainer's algorithms over every kind; which fit a dataset is its kind's (``train_model`` refuses the
others with an error observation)."""


def check_hyperparameters(algorithm: str | None, hyperparams: Mapping[str, object] | None) -> None:
    """A :class:`ValueError` naming each hyperparameter the algorithm's estimator does not have (for any
    kind the algorithm fits; the dataset's own kind is checked when the job starts)."""
    if algorithm is None or not hyperparams:
        return
    known = frozenset[str]().union(*(k.algorithms.get(algorithm, frozenset()) for k in kinds().values()))
    unknown = sorted(set(hyperparams) - known)
    if unknown:
        raise ValueError(
            f"unknown hyperparameter(s) for {algorithm}: {', '.join(unknown)} "
            f"(its estimator's parameters: {', '.join(sorted(known))})"
        )


class ListDatasets(ActionModel):
    """List the datasets in this episode's data lake: name (object key), format and size in bytes."""

    type: Literal["list_datasets"] = "list_datasets"


class CheckDataQuality(ActionModel):
    """Profile a dataset as stored in the data lake: rows, duplicate rows, and per column its dtype,
    missing count and rate, summary statistics and outlier count (1.5 IQR rule); for the target
    column the class counts and balance."""

    type: Literal["check_data_quality"] = "check_data_quality"
    dataset: DatasetName = Field(
        description="Dataset name as listed by list_datasets, e.g. raw/customers.csv"
    )


class CleanDataset(ActionModel):
    """Write a cleaned copy of a dataset as a new object (the source is never modified).

    Strategies of tables: drop_na (drop rows with any missing value), impute_mean / impute_median (fill
    missing numeric values with the column mean / median and missing categories with the most frequent
    one), clip_outliers (clip numeric values to the 1.5 IQR fences), drop_conflicting_duplicates (drop rows
    whose features repeat an earlier row's with another label; the first-seen label stays). Other kinds of data have their own
    (a time series: dedupe_dates, drop_unsettled, fill_gaps; documents: drop_empty, dedupe, drop_short;
    images: drop_unreadable, resize, augment_brightness, augment_blur);
    a strategy the dataset's kind has not is refused. The output defaults to
    ``clean/<name>-<strategy>.parquet``; it may not be under ``raw/``."""

    type: Literal["clean_dataset"] = "clean_dataset"
    dataset: DatasetName
    strategy: Literal[
        "drop_na",
        "impute_mean",
        "impute_median",
        "clip_outliers",
        "drop_conflicting_duplicates",
        "dedupe_dates",
        "drop_unsettled",
        "fill_gaps",
        "drop_empty",
        "dedupe",
        "drop_short",
        "drop_unreadable",
        "resize",
        "augment_brightness",
        "augment_blur",
    ]
    output: DatasetName | None = Field(
        default=None, description="Name of the new dataset, ending in .csv, .parquet, .avro, .jsonl or .xlsx"
    )


class Resources(BaseModel):
    """Compute requested by a job. Limits are enforced by the backend (cgroups on the local backend)."""

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(default=1.0, gt=0, le=2, description="CPU cores (a quota; 0.5 = half a core)")
    memory_mb: int = Field(default=1024, ge=128, le=8192, description="Memory limit in MiB")


class TrainModel(ActionModel):
    """Start a training job (a real scikit-learn process) on a dataset; returns a job id at once.

    The job reads the dataset from the data lake, holds out 20% for validation, fits the algorithm
    and logs parameters, validation metrics (val_auc, val_accuracy, val_log_loss) and the model to
    the experiment tracker. Jobs consume compute credits by CPU-seconds. Follow it with get_job / wait.
    Hyperparameters are passed to the scikit-learn estimator (LogisticRegression,
    RandomForestClassifier, HistGradientBoostingClassifier, MLPClassifier for ``mlp``: SGD with
    momentum, ``learning_rate_init`` 0.01 and ``max_iter`` 30 epochs by default, loss logged per epoch).
    A multi-class dataset adds val_macro_f1; a regression dataset trains regressors (``ridge``,
    RandomForestRegressor, HistGradientBoostingRegressor, MLPRegressor) and logs val_rmse, val_mae,
    val_r2. An algorithm that does not fit the dataset's kind is refused."""

    type: Literal["train_model"] = "train_model"
    dataset: DatasetName
    algorithm: Algorithm
    hyperparams: dict[HyperparameterName, float | int | str | bool | None] = Field(
        default_factory=dict,
        max_length=20,
        description="Estimator parameters as scikit-learn spells them (LogisticRegression's C, "
        "RandomForestClassifier's n_estimators, ...); a name the algorithm's estimator does not have is refused",
    )
    resources: Resources = Field(default_factory=Resources)
    machine: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="A machine type from list_machines (its CPU and memory replace `resources`); the job "
        "runs on an idle reservation of that type when one is held, else waits in the queue if the pool is full",
    )
    environment: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="A Python environment from list_environments / create_environment (default: the "
        "sandbox's own)",
    )

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> TrainModel:
        check_hyperparameters(self.algorithm, self.hyperparams)
        return self


class GetJob(ActionModel):
    """Status of a job: state (running, succeeded, failed, cancelled), exit code, CPU-seconds, the
    tracking run id and metrics when it succeeded, the tail of its log when it failed."""

    type: Literal["get_job"] = "get_job"
    job_id: JobId


class ListRuns(ActionModel):
    """List the runs in this episode's experiment with their status, parameters and metrics."""

    type: Literal["list_runs"] = "list_runs"


class RegisterModel(ActionModel):
    """Register the model logged by a finished run in the model registry under a name; returns the
    new version. Registering again under the same name adds a version."""

    type: Literal["register_model"] = "register_model"
    run_id: RunId
    name: ModelName


class Wait(ActionModel):
    """Let time pass (at most 60 s); returns early as soon as a job finishes."""

    type: Literal["wait"] = "wait"
    seconds: float = Field(default=5.0, ge=0, le=60)


# --------------------------------------------------------------- operations (what goes wrong shows here)

ServiceName = Literal["minio", "mlflow", "prefect-server", "prefect-worker"]
"""The services every episode has."""
SourceServiceName = Literal["postgres", "api-source"]
"""The data-source servers, services of an episode only when its scenario has such a source."""
AnyServiceName = Literal[
    "minio", "mlflow", "prefect-server", "prefect-worker", "postgres", "api-source", "feature-service"
]
"""Every service an operations action may name: ``feature-service`` once a deployment runs (scenarios
with production traffic)."""


class GetLogs(ActionModel):
    """The last lines of a log: a job's (target ``job-N``) or a service's (target ``minio``, ``mlflow``,
    ``prefect-server``, ``prefect-worker``, ``postgres`` / ``api-source`` when the episode has such a
    data source, ``feature-service`` once a deployment runs; also written ``service:NAME``)."""

    type: Literal["get_logs"] = "get_logs"
    target: str = Field(
        pattern=r"^(job-[0-9]{1,6}|(service:)?(minio|mlflow|prefect-server|prefect-worker|postgres|api-source|feature-service))$",
        description="job-N or a service name",
    )
    tail: int = Field(default=50, ge=1, le=500, description="How many lines, from the end")


class GetServiceHealth(ActionModel):
    """Probe a service the way the sandbox's clients reach it: healthy or not, the response time in ms,
    and the error when it does not answer. ``postgres`` and ``api-source`` (the data-source servers) are
    services of an episode whose scenario has such a source: probed as the episode's client (a SQL
    ``SELECT 1`` as its role, an authenticated GET); ``feature-service`` (its ``/health``) once a
    deployment runs."""

    type: Literal["get_service_health"] = "get_service_health"
    service: AnyServiceName


class RestartService(ActionModel):
    """Restart a service on its data (stop it if it runs, start it, wait until it answers its health
    check, at most 90 s). Requests to it fail while it restarts. ``postgres`` and ``api-source`` only in
    an episode whose scenario has such a source; ``feature-service`` once a deployment runs (a fresh
    process on the same address)."""

    type: Literal["restart_service"] = "restart_service"
    service: AnyServiceName


class JobChanges(BaseModel):
    """What to change when retrying a job; anything left out is as in the original job."""

    model_config = ConfigDict(extra="forbid")

    dataset: DatasetName | None = None
    algorithm: Algorithm | None = None
    hyperparams: dict[HyperparameterName, float | int | str | bool | None] | None = Field(
        default=None, max_length=20
    )
    resources: Resources | None = None

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> JobChanges:
        check_hyperparameters(self.algorithm, self.hyperparams)
        return self


class RetryJob(ActionModel):
    """Start a finished (failed, cancelled or succeeded) training job again as a new job, with the same
    parameters except the given changes; returns the new job id."""

    type: Literal["retry_job"] = "retry_job"
    job_id: JobId
    changes: JobChanges = Field(default_factory=JobChanges)


class SetJobResources(ActionModel):
    """Change the CPU quota and/or memory limit of a running job, at once. A memory limit below what the
    job already uses makes the kernel kill it (out of memory)."""

    type: Literal["set_job_resources"] = "set_job_resources"
    job_id: JobId
    cpus: float | None = Field(default=None, gt=0, le=2)
    memory_mb: int | None = Field(default=None, ge=128, le=8192)


class Submit(ActionModel):
    """Declare the work done: ends the episode and grades it."""

    type: Literal["submit"] = "submit"


_SERVICE_FAULTS = (
    "kill_service",
    "freeze_service",
    "restart_service",
    "crash_loop",
    "disk_full",
    "latency",
    "bandwidth",
    "timeout",
    "reset_peer",
    "endpoint_down",
    "cpu_contention",
    "http_errors",
)
"""The fault kinds the service actions address: a service's, an endpoint's, the bucket's (on minio), an
HTTP service's."""
_JOB_FAULTS = ("memory_limit", "cpu_throttle", "job_timeout", "cpu_contention", "divergent_learning_rate")
"""The fault kinds the job actions address (on the jobs they touched)."""
_LOG_FAULTS = tuple(dict.fromkeys((*_SERVICE_FAULTS, *_JOB_FAULTS)))
"""The fault kinds reading logs addresses (a service's or a job's)."""

PACK = ActionPack(
    name="core",
    actions=(
        PackAction(ListDatasets, capability="object_store", read_only=True),
        PackAction(
            CheckDataQuality, capability="object_store", read_only=True, addresses=("missing_column",)
        ),
        PackAction(CleanDataset, capability="object_store", addresses=("missing_column",)),
        PackAction(TrainModel, capability="jobs"),
        PackAction(GetJob, capability="jobs", read_only=True, addresses=_JOB_FAULTS),
        PackAction(ListRuns, capability="tracking", read_only=True),
        PackAction(RegisterModel, capability="tracking"),
        PackAction(Wait),
        PackAction(GetLogs, capability="jobs", read_only=True, addresses=_LOG_FAULTS),
        PackAction(GetServiceHealth, capability="faults.services", read_only=True, addresses=_SERVICE_FAULTS),
        PackAction(RestartService, capability="faults.services", destructive=True, addresses=_SERVICE_FAULTS),
        PackAction(RetryJob, capability="jobs", addresses=_JOB_FAULTS),
        PackAction(SetJobResources, capability="jobs.set_resources", addresses=_JOB_FAULTS),
        PackAction(Submit),
    ),
    implementation="mlsandbox.gateway.packs.core.handlers",
    description="Datasets, training, tracking, registry, operations and submit.",
)

CoreAction = Annotated[
    ListDatasets
    | CheckDataQuality
    | CleanDataset
    | TrainModel
    | GetJob
    | ListRuns
    | RegisterModel
    | Wait
    | GetLogs
    | GetServiceHealth
    | RestartService
    | RetryJob
    | SetJobResources
    | Submit,
    Field(discriminator="type"),
]
