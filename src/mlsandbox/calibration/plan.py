"""The calibration sweep's plan: every point it measures, as typed models with stable ids.

A point is one measurement: a real training job (:class:`JobPoint`, through the runtime's jobs), the
trainer's own pipeline fitted in this process on the same rows (:class:`FitPoint`, a dense grid for the
AUC surface), production traffic against a real model server at one rate (:class:`ServingPoint`) or a
real flow run (:class:`FlowPoint`). Each point's id is a hash of its content, so a sweep that stops can
resume: points whose id is already in the records are skipped.

Datasets come from the scenario catalog (:class:`DataRef`: a scenario's dataset spec, optionally with
its defect rates scaled the way suite variants scale them, another row count, or a lake source's
batches), so the sweep covers what episodes really train on.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.data.clean import Strategy

Algorithm = Literal["logistic_regression", "random_forest", "gradient_boosting", "mlp"]
ALGORITHMS: tuple[Algorithm, ...] = ("logistic_regression", "random_forest", "gradient_boosting", "mlp")

TRAINER_DEFAULTS: dict[str, dict[str, float]] = {
    "logistic_regression": {"C": 1.0, "max_iter": 1000.0},
    "random_forest": {"n_estimators": 100.0, "max_depth": 30.0, "min_samples_leaf": 1.0},
    "gradient_boosting": {"max_iter": 100.0, "learning_rate": 0.1, "max_depth": 30.0},
    "mlp": {"learning_rate_init": 0.01, "max_iter": 30.0, "alpha": 0.0001},
}
"""The trainer's defaults of the numeric hyperparameters the models may use (``max_depth``: None is a
deep tree, counted as 30)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataRef(_Model):
    """Training rows as an episode would have them: a catalog scenario's dataset, generated with the
    episode's seed rule, its defect rates scaled by ``defect_scale`` (0: clean), optionally resized, and
    read back from ``fmt`` the way the trainer reads it. With ``source``, the rows are the concatenated
    ``batches`` of that lake source (drifting data), graded on the source's holdout."""

    scenario: str
    dataset: str
    seed: int = Field(ge=0)
    """The episode seed (the dataset is generated with ``seed * 1000 + index``, as episodes do)."""
    rows: int | None = Field(default=None, ge=50)
    """Another size of the data: the spec's size field (:func:`size_field`: its rows, or a series' days
    of history)."""
    defect_scale: float = Field(default=1.0, ge=0, le=3)
    fmt: Literal["parquet", "csv"] = "parquet"
    source: str | None = None
    batches: tuple[int, ...] | None = None


class _Point(_Model):
    def id(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class JobPoint(_Point):
    """A real training job: the trainer workload through ``rt.jobs`` with these limits, on rows prepared
    with the real cleaning code, then registered and scored on the hidden holdout as the grader does."""

    kind: Literal["job"] = "job"
    purpose: str
    """Why it is in the sweep: ``base``, ``hyperparams``, ``cleaning``, ``size``, ``cpus``, ``kind`` (a
    family of another kind of work than binary classification, trained as its kind says), ``oom``,
    ``divergence``, ``missing_values``, ``unknown_hyperparameter``, ``invalid_hyperparameter``,
    ``timeout``, ``missing_object``."""
    data: DataRef
    cleaning: tuple[str, ...] = ()
    """Preparation steps in order: the table cleaning strategies (:data:`~mlsandbox.data.clean.Strategy`),
    or for a ``kind`` point the kind's own (``TaskKind.preparations``, such as ``fill_gaps``)."""
    algorithm: str
    """One of the trainer's algorithms for the data's kind (:data:`Algorithm` for binary classification;
    ``kind`` points: the kind's own, such as ``ridge``)."""
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    cpus: float = Field(default=1.0, gt=0, le=1.0)
    """At most one CPU: the sweep never takes more than one core of a shared machine."""
    memory_mb: int = Field(default=1024, ge=16)
    timeout_s: float | None = 240.0
    missing_key: bool = False
    """Point the job at an object that does not exist (the unreadable-data failure)."""


class FitPoint(_Point):
    """The trainer's own pipeline (``make_pipeline``/``fit``/``evaluate`` of the trainer workload) fitted
    in this process on the rows a job would read, scored on the holdout: the AUC grid (no MLflow, no
    process start; the jobs of the sweep check that both give the same AUCs)."""

    kind: Literal["fit"] = "fit"
    data: DataRef
    cleaning: tuple[Strategy, ...] = ()
    algorithm: Algorithm
    hyperparams: dict[str, Any] = Field(default_factory=dict)


class ServingPoint(_Point):
    """Production traffic (the world's own traffic generator) against a real model server replica at one
    rate, for ``duration_s`` seconds."""

    kind: Literal["serving"] = "serving"
    rate_rps: float = Field(gt=0)
    rows_per_request: int = Field(default=1, ge=1)
    by_entity: bool = True
    duration_s: float = Field(default=8.0, gt=0)
    replicas: int = Field(default=1, ge=1, le=2)


FlowCase = Literal["complete", "missing_upstream", "schema_change", "incomplete_lake", "unknown_model"]


class FlowPoint(_Point):
    """A real Prefect flow run of the episode's flows: one success or failure case."""

    kind: Literal["flow"] = "flow"
    flow: Literal["ingestion", "training", "batch-scoring"]
    case: FlowCase
    algorithm: Algorithm = "gradient_boosting"


Point = Annotated[JobPoint | FitPoint | ServingPoint | FlowPoint, Field(discriminator="kind")]
SECTIONS: tuple[str, ...] = ("job", "fit", "serving", "flow", "kinds")


# ------------------------------------------------------------------------------------------ the plan

CLEANINGS: tuple[tuple[Strategy, ...], ...] = (
    (),
    ("drop_na",),
    ("impute_mean",),
    ("impute_median",),
    ("clip_outliers",),
    ("impute_median", "clip_outliers"),
    ("clip_outliers", "impute_median"),
    ("drop_na", "clip_outliers"),
)
"""Cleaning chains (strategies applied in order, each on the previous one's output, as agents chain
``clean_dataset``)."""

HYPERPARAMS: dict[Algorithm, tuple[dict[str, Any], ...]] = {
    "logistic_regression": ({}, {"C": 0.01}, {"C": 100.0}),
    "random_forest": ({}, {"n_estimators": 20, "max_depth": 4}, {"n_estimators": 300}),
    "gradient_boosting": (
        {},
        {"max_iter": 30, "learning_rate": 0.05},
        {"max_iter": 300, "max_depth": 8},
        {"learning_rate": 1.0},
    ),
    "mlp": ({}, {"learning_rate_init": 0.001}, {"hidden_layer_sizes": [64, 64]}, {"max_iter": 100}),
}
"""Representative hyperparameters per algorithm (the first: the trainer's defaults)."""

DATASETS: tuple[tuple[str, str, int | None], ...] = (
    ("tabular-quality-basic", "customers", None),
    ("churn-clean-small", "customers", None),
    ("churn-imbalanced-missing", "customers", None),
    ("serving-deploy-slo", "customers", None),
    ("pipeline-failure-upstream", "customers", None),
    ("data-csv-batch-missing-outliers", "orders", None),
    ("data-parquet-schema-change", "sales", None),
    ("data-monthly-drift-retrain", "customers", None),
)
"""The catalog's distinct training tables (scenario, dataset, rows override)."""

LAKE_BATCHES: tuple[tuple[str, str, str, tuple[int, ...]], ...] = (
    ("data-monthly-drift-retrain", "customers", "monthly_lake", (5,)),
    ("data-monthly-drift-retrain", "customers", "monthly_lake", (4, 5)),
    ("data-monthly-drift-retrain", "customers", "monthly_lake", (0, 1, 2)),
    ("data-parquet-schema-change", "sales", "sales_lake", (0, 1, 2)),
)
"""Lake batches agents train on (the newest after drift, several, the old ones)."""

DEFECT_SCALES = (0.0, 0.5, 1.0, 1.6)
"""Defect rates as suite variants scale them (x0.5 to x1.6), and clean."""
SIZES = (500, 1000, 2000, 8000, 16000)
OOM_LIMITS_MB = (64, 96, 128, 160, 192, 224, 256, 320)
DIVERGENT_RATES = (1e6, 100.0, 10.0, 1.0)
TIMEOUTS_S = (2.0, 5.0)
SERVING_RATES = (2.0, 5.0, 10.0, 20.0, 40.0)


def _seed(*parts: object) -> int:
    """A seed per combination (different data for each, reproducible)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return 1 + int.from_bytes(digest[:4], "big") % 100_000


def job_points(quick: bool = False) -> list[JobPoint]:
    """Real jobs: defaults of every algorithm on every catalog table, hyperparameters, cleaning chains,
    sizes, a CPU quota below one, and every failure mode."""
    base = DataRef(scenario="tabular-quality-basic", dataset="customers", seed=7)
    ready: tuple[Strategy, ...] = ("impute_median", "clip_outliers")
    points: list[JobPoint] = []
    tables = DATASETS[:2] if quick else DATASETS
    algorithms: tuple[Algorithm, ...] = ("gradient_boosting", "logistic_regression") if quick else ALGORITHMS
    for scenario, dataset, rows in tables:
        ref = DataRef(scenario=scenario, dataset=dataset, rows=rows, seed=_seed(scenario, dataset))
        points += [JobPoint(purpose="base", data=ref, cleaning=ready, algorithm=a) for a in algorithms]
    if not quick:
        for algorithm, settings in HYPERPARAMS.items():
            points += [
                JobPoint(purpose="hyperparams", data=base, cleaning=ready, algorithm=algorithm, hyperparams=h)
                for h in settings[1:]
            ]
        trees: tuple[Algorithm, ...] = ("gradient_boosting", "random_forest")
        for cleaning, algorithm in itertools.product(CLEANINGS, trees):
            if cleaning != ready:
                points.append(JobPoint(purpose="cleaning", data=base, cleaning=cleaning, algorithm=algorithm))
        points.append(JobPoint(purpose="cleaning", data=base.model_copy(update={"fmt": "csv"}),
                               algorithm="gradient_boosting"))  # fmt: skip
        for rows, algorithm in itertools.product(SIZES, ALGORITHMS):
            ref = base.model_copy(update={"rows": rows, "seed": _seed("size", rows)})
            points.append(JobPoint(purpose="size", data=ref, cleaning=ready, algorithm=algorithm))
        points += [
            JobPoint(purpose="cpus", data=base, cleaning=ready, algorithm=a, cpus=0.5) for a in ALGORITHMS
        ]
    points += failure_points(base, ready, quick)
    return points


def failure_points(base: DataRef, ready: tuple[Strategy, ...], quick: bool) -> list[JobPoint]:
    """Every failure mode with its real log lines: out of memory under a limit, divergence, missing
    values into models that refuse them, bad hyperparameters, deadlines, an object that does not exist."""
    limits = (64, 192) if quick else OOM_LIMITS_MB
    rates = (1e6,) if quick else DIVERGENT_RATES
    oom: tuple[Algorithm, ...] = ("gradient_boosting",) if quick else ("gradient_boosting", "random_forest")
    refuse_nan: tuple[Algorithm, ...] = ("logistic_regression",) if quick else ("logistic_regression", "mlp")
    points = [
        JobPoint(purpose="oom", data=base, cleaning=ready, algorithm=a, memory_mb=m)
        for a in oom
        for m in limits
    ]
    points += [
        JobPoint(purpose="divergence", data=base, cleaning=ready, algorithm="mlp",
                 hyperparams={"learning_rate_init": r})
        for r in rates
    ]  # fmt: skip
    points += [JobPoint(purpose="missing_values", data=base, algorithm=a) for a in refuse_nan]
    points.append(
        JobPoint(purpose="unknown_hyperparameter", data=base, cleaning=ready, algorithm="gradient_boosting",
                 hyperparams={"n_trees": 50})
    )  # fmt: skip
    if not quick:
        points.append(
            JobPoint(purpose="unknown_hyperparameter", data=base, cleaning=ready,
                     algorithm="logistic_regression", hyperparams={"alpha": 0.1})
        )  # fmt: skip
        points.append(
            JobPoint(purpose="invalid_hyperparameter", data=base, cleaning=ready, algorithm="random_forest",
                     hyperparams={"n_estimators": -5})
        )  # fmt: skip
        points.append(JobPoint(purpose="missing_object", data=base, algorithm="gradient_boosting",
                               missing_key=True))  # fmt: skip
    points += [
        JobPoint(purpose="timeout", data=base, cleaning=ready, algorithm="gradient_boosting", timeout_s=t)
        for t in (TIMEOUTS_S[:1] if quick else TIMEOUTS_S)
    ]
    return points


def size_field(spec: Any) -> str | None:
    """The field of a dataset spec (model or class) holding its size, as its kind declares it
    (``TaskKind.size_field``: rows, or a series' days of history), or None when it has none (then a
    :class:`DataRef` of it cannot be resized)."""
    from mlsandbox.tasks.registry import DEFAULT_KIND, get

    model = spec if isinstance(spec, type) else type(spec)
    fields = getattr(model, "model_fields", {})
    if isinstance(spec, type):
        kind = fields["kind"].default if "kind" in fields else DEFAULT_KIND
    else:
        kind = getattr(spec, "kind", DEFAULT_KIND)
    field = get(str(kind)).size_field
    return field if field in fields else None


def _runnable(task: Any, algorithm: str) -> bool:
    """Whether the kind trains ``algorithm`` here (the image CNN needs PyTorch installed)."""
    try:
        task.check_algorithm(algorithm)
    except ValueError:
        return False
    return True


def kind_points(quick: bool = False) -> list[JobPoint]:
    """Real jobs of every installed kind but binary classification (whose jobs are the ``job`` section):
    per kind, its built-in families without production traffic or lake sources (two; one when
    ``quick``), each of the kind's algorithms that can run here on the family's dataset prepared as the
    kind's rule policy prepares it (the kind's own profile and preparation steps), at each of the kind's
    sizes (``TaskKind.calibration_sizes``, when its spec has a :func:`size_field`), and (not when
    ``quick``) at half a CPU (the CPU limit's stretch). The table kinds' points are the ones sweeps
    measured before the other kinds joined (same ids)."""
    from mlsandbox.data.spec import TabularDataset
    from mlsandbox.scenario import catalog_ids, load_builtin
    from mlsandbox.tasks.registry import DEFAULT_KIND, kind_of

    by_kind: dict[str, list[tuple[int, str]]] = {}
    for sid in catalog_ids():
        sc = load_builtin(sid)
        kind = sc.work()[0]
        if kind != DEFAULT_KIND and sc.serving is None and not sc.sources:
            by_kind.setdefault(kind, []).append((sc.difficulty, sid))
    points: list[JobPoint] = []
    for _kind, found in sorted(by_kind.items()):
        for _, sid in sorted(found)[: 1 if quick else 2]:
            sc = load_builtin(sid)
            spec = sc.dataset(sc.goal.dataset)
            task = kind_of(spec)
            target = task.target(spec)
            generated = task.generate(spec, 0)
            frame = generated.train_table.to_pandas()
            cleaning = tuple(task.policy(task.profile(frame, target)).preparations)
            sizes = task.calibration_sizes if size_field(spec) else (None,)
            # The raw file as the family stores it: its first format when that is CSV (the table kinds'
            # points were measured on Parquet, and stay so).
            csv = not isinstance(spec, TabularDataset) and spec.formats[0] == "csv"
            ref = DataRef(scenario=sid, dataset=spec.name, fmt="csv" if csv else "parquet", seed=0)
            for algorithm in task.algorithms:
                if not _runnable(task, algorithm):
                    continue
                for rows in sizes:
                    at = ref.model_copy(update={"rows": rows, "seed": _seed("kind", sid, rows)})
                    points.append(JobPoint(purpose="kind", data=at, cleaning=cleaning, algorithm=algorithm))
                if not quick:
                    at = ref.model_copy(update={"seed": _seed("kind", sid, "cpus")})
                    points.append(
                        JobPoint(purpose="kind", data=at, cleaning=cleaning, algorithm=algorithm, cpus=0.5)
                    )
    return points


def _has_defects(ref: DataRef) -> bool:
    from mlsandbox.scenario import load_builtin

    spec = load_builtin(ref.scenario).dataset(ref.dataset)
    d = spec.defects
    return d.missing_rate > 0 or d.outlier_rate > 0 or bool(d.injections)


def fit_points(quick: bool = False) -> list[FitPoint]:
    """The AUC grid: every catalog table and lake-batch choice x defect scale x cleaning chain with the
    default hyperparameters of every algorithm, and every representative hyperparameter setting on two
    cleanings; one seed per combination (seeds differ between combinations)."""
    points: list[FitPoint] = []
    tables: list[DataRef] = [
        DataRef(scenario=s, dataset=d, rows=r, seed=0) for s, d, r in (DATASETS[:2] if quick else DATASETS)
    ]
    if not quick:
        tables += [
            DataRef(scenario=s, dataset=d, source=src, batches=b, seed=0) for s, d, src, b in LAKE_BATCHES
        ]
    scales = (0.0, 1.0) if quick else DEFECT_SCALES
    cleanings = CLEANINGS[:1] + CLEANINGS[5:6] if quick else CLEANINGS
    for table, scale in itertools.product(tables, scales):
        if scale > 0 and not _has_defects(table):
            continue  # the clean table again
        ref = table.model_copy(
            update={"defect_scale": scale, "seed": _seed(table.scenario, table.source, table.batches, scale)}
        )
        for cleaning in cleanings:
            if scale == 0.0 and cleaning:
                continue  # nothing to clean: the same rows as without cleaning
            for algorithm in ALGORITHMS:
                points.append(FitPoint(data=ref, cleaning=cleaning, algorithm=algorithm))
            if quick or cleaning not in ((), ("impute_median", "clip_outliers")):
                continue
            for algorithm, settings in HYPERPARAMS.items():
                points += [
                    FitPoint(data=ref, cleaning=cleaning, algorithm=algorithm, hyperparams=h)
                    for h in settings[1:]
                ]
    if not quick:  # the same combinations again with other seeds, on the table most scenarios use
        for k, cleaning in itertools.product(range(1, 4), ((), ("impute_median", "clip_outliers"))):
            ref = DataRef(scenario="tabular-quality-basic", dataset="customers", seed=_seed("repeat", k))
            points += [FitPoint(data=ref, cleaning=cleaning, algorithm=a) for a in ALGORITHMS]
    return points


def serving_points(quick: bool = False) -> list[ServingPoint]:
    rates = (2.0, 20.0) if quick else SERVING_RATES
    points = [ServingPoint(rate_rps=r, duration_s=5.0 if quick else 8.0) for r in rates]
    if not quick:
        points += [ServingPoint(rate_rps=r, rows_per_request=8) for r in (3.0, 10.0)]
        points += [ServingPoint(rate_rps=r, by_entity=False) for r in (5.0, 20.0)]
        points.append(ServingPoint(rate_rps=40.0, replicas=2))
    return points


def flow_points(quick: bool = False) -> list[FlowPoint]:
    points = [
        FlowPoint(flow="ingestion", case="complete"),
        FlowPoint(flow="training", case="complete"),
        FlowPoint(flow="batch-scoring", case="complete"),
        FlowPoint(flow="ingestion", case="missing_upstream"),
    ]
    if not quick:
        points += [
            FlowPoint(flow="ingestion", case="schema_change"),
            FlowPoint(flow="training", case="incomplete_lake"),
            FlowPoint(flow="batch-scoring", case="unknown_model"),
            FlowPoint(flow="training", case="complete", algorithm="logistic_regression"),
            FlowPoint(flow="training", case="complete", algorithm="random_forest"),
        ]
    return points


def build_plan(quick: bool = False, sections: tuple[str, ...] = SECTIONS) -> list[Any]:
    """Every point of the sweep, section by section (``--quick``: a small one for a smoke run)."""
    makers: dict[str, Callable[[bool], Sequence[Any]]] = {
        "job": job_points,
        "fit": fit_points,
        "serving": serving_points,
        "flow": flow_points,
        "kinds": kind_points,
    }
    unknown = sorted(set(sections) - set(makers))
    if unknown:
        raise ValueError(f"unknown sweep sections {unknown}: expected some of {list(SECTIONS)}")
    points: list[Any] = []
    for section in SECTIONS:
        if section in sections:
            points += makers[section](quick)
    return points


__all__ = [
    "ALGORITHMS",
    "CLEANINGS",
    "HYPERPARAMS",
    "SECTIONS",
    "Algorithm",
    "DataRef",
    "FitPoint",
    "FlowPoint",
    "JobPoint",
    "Point",
    "ServingPoint",
    "build_plan",
    "kind_points",
    "size_field",
]
