"""The conformance script: short episodes of scripted actions that every backend must answer alike.

The script is data. Each :class:`Episode` runs a built-in scenario (with room for its steps: more steps
and credits, nothing else changed) and a list of :class:`Step`: an action (a literal, or made from what
earlier steps returned, e.g. a run id), what the agent must get back (success, or an error code), and what
of the environment the step needs besides the declared Runtime:

- ``workloads``: jobs run their workload and report its result (a trainer logs a run): not so on a node
  that runs no container (kwok);
- ``replicas_answer``: model-server replicas answer requests;
- ``flow_runs``: flow runs execute.

A step may poll (repeat its action, with a ``wait`` in between, until its result says so) and may ask a
:data:`JobDriver` to end a job with an outcome (on a node that runs no container, the driver is how a job
ends; elsewhere the workload decides and the driver is not needed).

What the checks compare is derived, not written here: every action of the catalog must be run by some
step (:func:`uncovered_actions`), and each step's observation is compared with the same step's on the
reference backend. The expected error codes are the meaning of the bad inputs (an unknown dataset is
``not_found`` everywhere); a backend that refuses the action's capability may answer ``unsupported``
instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mlsandbox.scenario import Scenario, load_builtin

Need = Literal["workloads", "replicas_answer", "flow_runs"]
NEEDS: tuple[Need, ...] = ("workloads", "replicas_answer", "flow_runs")
"""What a step may need of the environment besides the declared Runtime (see the module docstring)."""
Outcome = Literal["succeeded", "failed", "oom_killed"]
JobDriver = Callable[[str, Outcome], None]
"""Ends a job (its backend id) with an outcome, for a backend whose jobs do not run their workload here."""

SEED = 3
MAX_STEPS = 400
CREDITS = 10_000.0
POLL_SECONDS = 20.0
TERMINAL_JOB_STATES = ("succeeded", "failed", "cancelled")
TERMINAL_FLOW_STATES = ("Completed", "Failed", "Crashed", "Cancelled")

Results = Mapping[str, Any]
"""The results of the episode's steps so far, by label (what an action made from results reads)."""
ActionSource = Any | Callable[[Results], Any]


@dataclass(frozen=True)
class Step:
    label: str
    """Unique in its episode: what the step's observation is known by across backends."""
    action: ActionSource
    """The raw action (a dict, or any value the gateway must refuse), or a function of earlier results."""
    expect: str | None = None
    """None: the action succeeds; else the error code the agent gets."""
    needs: frozenset[Need] = frozenset()
    until: Callable[[Any], bool] | None = None
    """Poll: run the action again (with a ``wait`` between) until ``until(result)`` holds."""
    poll_timeout_s: float = 300.0
    poll_s: float = POLL_SECONDS
    """How long each ``wait`` between polls lasts (it returns early when a job changes state)."""
    drive: tuple[str, Outcome] | None = None
    """After the step: end the agent's job ``job-N`` with this outcome through the job driver (if any)."""

    def raw(self, results: Results) -> Any:
        return self.action(results) if callable(self.action) else self.action

    def action_type(self) -> str | None:
        """The action's type when it is a literal dict (what the catalog coverage counts)."""
        if isinstance(self.action, dict):
            kind = self.action.get("type")
            return kind if isinstance(kind, str) else None
        return None


@dataclass(frozen=True)
class Episode:
    name: str
    scenario: str
    """A built-in scenario id."""
    steps: tuple[Step, ...]
    description: str = ""
    requires: tuple[str, ...] = ()
    """Support keys the scenario needs from its start (``sources.api``): a backend refusing one must refuse
    the episode at ``start`` with :class:`~mlsandbox.errors.Unsupported` naming it, and leave nothing."""
    action_types: tuple[str, ...] = field(default=())
    """Action types of steps whose action is built from results (for the catalog coverage)."""
    needs: frozenset[Need] = frozenset()
    """What the whole episode needs of the environment from its start (a source's server runs as a
    program: ``workloads``); on an environment without it the episode is skipped, not run."""

    def load(self) -> Scenario:
        """The scenario with room for the script: more steps and credits, nothing else changed."""
        data = load_builtin(self.scenario).model_dump(mode="json")
        data["max_steps"] = MAX_STEPS
        data["budget"]["credits"] = CREDITS
        return Scenario.model_validate(data)

    def covered(self) -> set[str]:
        return {t for t in (s.action_type() for s in self.steps) if t} | set(self.action_types)


def _s(label: str, action: ActionSource, expect: str | None = None, **kw: Any) -> Step:
    return Step(label, action, expect, **kw)


WORK: frozenset[Need] = frozenset({"workloads"})
RAW = "raw/customers.parquet"
RAW_CSV = "raw/customers.csv"
CLEAN = "clean/customers-drop-na.parquet"
NO_RUN = "0" * 32


def _job_ended(result: Any) -> bool:
    return isinstance(result, dict) and result.get("state") in TERMINAL_JOB_STATES


def _flow_ended(result: Any) -> bool:
    return isinstance(result, dict) and result.get("state") in TERMINAL_FLOW_STATES


def _run_id(results: Results) -> str:
    return str(results["get_job: a training job that succeeds"]["run_id"])


def _instances(results: Results) -> list[dict[str, Any]]:
    rows = results["sample_dataset: rows to predict on"]["rows"][:2]
    return [{k: v for k, v in row.items() if k != "label"} for row in rows]


PROBES = Episode(
    name="probes",
    scenario="tabular-quality-basic",
    description="every action once: the read-only ones and the bad inputs of each (no job runs)",
    steps=(
        _s("malformed: not JSON", "not json", "invalid_json"),
        _s("malformed: not an object", [1, 2], "invalid_json"),
        _s("malformed: unknown action", {"type": "fly_to_the_moon"}, "unknown_action"),
        _s("malformed: a parameter of the wrong type", {"type": "wait", "seconds": "soon"}, "invalid_parameters"),
        _s("malformed: an unknown parameter", {"type": "list_datasets", "verbose": True}, "invalid_parameters"),
        _s("list_datasets", {"type": "list_datasets"}),
        _s("check_data_quality", {"type": "check_data_quality", "dataset": RAW_CSV}),
        _s("check_data_quality: unknown dataset", {"type": "check_data_quality", "dataset": "raw/nope.csv"}, "not_found"),
        _s("clean_dataset", {"type": "clean_dataset", "dataset": RAW, "strategy": "drop_na"}),
        _s("clean_dataset: output under raw/", {"type": "clean_dataset", "dataset": RAW, "strategy": "drop_na", "output": "raw/mine.parquet"}, "forbidden_name"),
        _s("clean_dataset: unknown dataset", {"type": "clean_dataset", "dataset": "raw/nope.csv", "strategy": "drop_na"}, "not_found"),
        _s("sample_dataset", {"type": "sample_dataset", "dataset": CLEAN, "rows": 3}),
        _s("sample_dataset: unknown dataset", {"type": "sample_dataset", "dataset": "raw/nope.csv"}, "not_found"),
        _s("schema_diff", {"type": "schema_diff", "reference": RAW_CSV, "current": CLEAN}),
        _s("drift_check", {"type": "drift_check", "reference": RAW, "current": CLEAN}),
        _s("drift_check: unknown dataset", {"type": "drift_check", "reference": RAW, "current": "raw/nope.csv"}, "not_found"),
        _s("train_model: unknown dataset", {"type": "train_model", "dataset": "raw/nope.csv", "algorithm": "random_forest"}, "not_found"),
        _s("train_model: unknown algorithm", {"type": "train_model", "dataset": RAW, "algorithm": "xgboost"}, "invalid_parameters"),
        _s("train_model: memory out of range", {"type": "train_model", "dataset": RAW, "algorithm": "random_forest", "resources": {"memory_mb": 100000}}, "invalid_parameters"),
        _s("train_model: unknown machine", {"type": "train_model", "dataset": RAW, "algorithm": "random_forest", "machine": "gpu-huge"}, "not_found"),
        _s("train_model: unknown environment", {"type": "train_model", "dataset": RAW, "algorithm": "random_forest", "environment": "nope"}, "not_found"),
        _s("get_job: unknown job", {"type": "get_job", "job_id": "job-99"}, "not_found"),
        _s("get_logs: unknown job", {"type": "get_logs", "target": "job-99"}, "not_found"),
        _s("retry_job: unknown job", {"type": "retry_job", "job_id": "job-99"}, "not_found"),
        _s("set_job_resources: unknown job", {"type": "set_job_resources", "job_id": "job-99", "cpus": 0.5}, "not_found"),
        _s("cancel_job: unknown job", {"type": "cancel_job", "job_id": "job-99"}, "not_found"),
        _s("list_runs", {"type": "list_runs"}),
        _s("search_runs", {"type": "search_runs", "filter": "metrics.val_auc > 0.5"}),
        _s("search_runs: malformed filter", {"type": "search_runs", "filter": "metrics.val_auc >>> 1"}, "invalid_parameters"),
        _s("get_run: unknown run", {"type": "get_run", "run_id": NO_RUN}, "not_found"),
        _s("get_run: malformed run id", {"type": "get_run", "run_id": "run-1"}, "invalid_parameters"),
        _s("compare_runs: unknown runs", {"type": "compare_runs", "run_ids": [NO_RUN, "1" * 32]}, "not_found"),
        _s("register_model: unknown run", {"type": "register_model", "run_id": NO_RUN, "name": "churn"}, "not_found"),
        _s("get_model_versions: unknown model", {"type": "get_model_versions", "name": "churn"}, "not_found"),
        _s("set_model_alias: unknown model", {"type": "set_model_alias", "name": "churn", "version": 1, "alias": "production"}, "not_found"),
        _s("delete_model_alias: unknown model", {"type": "delete_model_alias", "name": "churn", "alias": "production"}, "not_found"),
        _s("wait", {"type": "wait", "seconds": 1}),
        _s("get_service_health: minio", {"type": "get_service_health", "service": "minio"}),
        _s("get_service_health: mlflow", {"type": "get_service_health", "service": "mlflow"}),
        _s("get_service_health: prefect-server", {"type": "get_service_health", "service": "prefect-server"}),
        _s("get_service_health: a source server not in use", {"type": "get_service_health", "service": "postgres"}, "not_found"),
        _s("get_service_health: unknown service", {"type": "get_service_health", "service": "redis"}, "invalid_parameters"),
        _s("get_logs: a service", {"type": "get_logs", "target": "service:mlflow", "tail": 5}),
        _s("get_logs: unknown service", {"type": "get_logs", "target": "service:redis"}, "invalid_parameters"),
        _s("restart_service: a source server not in use", {"type": "restart_service", "service": "api-source"}, "not_found"),
        _s("list_machines", {"type": "list_machines"}),
        _s("request_resources: unknown machine", {"type": "request_resources", "machine": "gpu-huge"}, "not_found"),
        _s("request_resources", {"type": "request_resources", "machine": "cpu-small"}),
        _s("release_resources", {"type": "release_resources", "reservation_id": "res-1"}),
        _s("release_resources: unknown reservation", {"type": "release_resources", "reservation_id": "res-99"}, "not_found"),
        _s("get_queue", {"type": "get_queue"}),
        _s("list_environments", {"type": "list_environments"}),
        _s("create_environment: name taken", {"type": "create_environment", "name": "default", "requirements": ["numpy"]}, "conflict"),
        _s("create_environment: malformed requirement", {"type": "create_environment", "name": "broken", "requirements": ["numpy==="]}, "invalid_parameters"),
        _s("write_file", {"type": "write_file", "path": "hello.py", "content": "print('hello')\n"}),
        _s("read_file", {"type": "read_file", "path": "hello.py"}),
        _s("read_file: a path leaving the workspace", {"type": "read_file", "path": "../hello.py"}, "invalid_parameters"),
        _s("list_files", {"type": "list_files"}),
        _s("run_python: a script that is not there", {"type": "run_python", "path": "nope.py"}, "not_found"),
        _s("get_config", {"type": "get_config"}),
        _s("get_config: one key", {"type": "get_config", "key": "s3_endpoint_url"}),
        _s("get_config: unknown key", {"type": "get_config", "key": "nope"}, "invalid_parameters"),
        _s("set_config: not a URL", {"type": "set_config", "key": "s3_endpoint_url", "value": "minio"}, "invalid_parameters"),
        _s("set_config: unknown reference", {"type": "set_config", "key": "s3_endpoint_url", "value": "@service:redis"}, "invalid_parameters"),
        _s("set_config: a reference", {"type": "set_config", "key": "s3_endpoint_url", "value": "@service:minio"}),
        _s("list_sources", {"type": "list_sources"}),
        _s("preview_source: unknown source", {"type": "preview_source", "source": "nope"}, "not_found"),
        _s("ingest_source: unknown source", {"type": "ingest_source", "source": "nope"}, "not_found"),
        _s("list_flows", {"type": "list_flows"}),
        _s("run_flow: unknown flow", {"type": "run_flow", "name": "deploy"}, "invalid_parameters"),
        _s("run_flow: malformed parameters", {"type": "run_flow", "name": "ingestion", "parameters": {"dataset": "customers"}}, "invalid_parameters"),
        _s("get_flow_run: unknown run", {"type": "get_flow_run", "flow_run_id": "fr-99"}, "not_found"),
        _s("retry_flow_run: unknown run", {"type": "retry_flow_run", "flow_run_id": "fr-99"}, "not_found"),
        _s("get_deployment: none yet", {"type": "get_deployment"}),
        _s("get_deployment: unknown deployment", {"type": "get_deployment", "deployment": "nope"}, "not_found"),
        _s("deploy_model: unregistered model", {"type": "deploy_model", "name": "churn", "version": "1"}, "not_found"),
        _s("scale: unknown deployment", {"type": "scale", "deployment": "nope", "replicas": 2}, "not_found"),
        _s("rollback: unknown deployment", {"type": "rollback", "deployment": "nope", "version": "1"}, "not_found"),
        _s("undeploy: unknown deployment", {"type": "undeploy", "deployment": "nope"}, "not_found"),
        _s("predict: unknown deployment", {"type": "predict", "deployment": "nope", "instances": [{"x": 1}]}, "not_found"),
        _s("predict: neither instances nor entity ids", {"type": "predict", "deployment": "nope"}, "invalid_parameters"),
        _s("get_metrics: unknown target", {"type": "get_metrics", "target": "nope"}, "not_found"),
        _s("get_alerts", {"type": "get_alerts"}),
        _s("ack_alert: unknown alert", {"type": "ack_alert", "alert_id": "alert-99"}, "not_found"),
        _s("submit", {"type": "submit"}),
    ),
)  # fmt: skip

WORK_EPISODE = Episode(
    name="work",
    scenario="tabular-quality-basic",
    description="jobs that fail and succeed, runs, the registry, a deployment's life, a flow run",
    steps=(
        _s("train_model: a job that fails (out of memory)", {"type": "train_model", "dataset": RAW, "algorithm": "logistic_regression", "resources": {"memory_mb": 128}}, drive=("job-1", "oom_killed")),
        _s("clean_dataset", {"type": "clean_dataset", "dataset": RAW, "strategy": "drop_na"}),
        _s("sample_dataset: rows to predict on", {"type": "sample_dataset", "dataset": CLEAN, "rows": 2}),
        _s("train_model: a job that succeeds", {"type": "train_model", "dataset": CLEAN, "algorithm": "random_forest", "hyperparams": {"n_estimators": 30}}),
        _s("get_job: a job that failed", {"type": "get_job", "job_id": "job-1"}, until=_job_ended),
        _s("get_logs: a job", {"type": "get_logs", "target": "job-1", "tail": 5}),
        _s("set_job_resources: a finished job", {"type": "set_job_resources", "job_id": "job-1", "cpus": 0.5}, "conflict"),
        _s("cancel_job: a finished job", {"type": "cancel_job", "job_id": "job-1"}, "conflict"),
        _s("retry_job", {"type": "retry_job", "job_id": "job-1", "changes": {"dataset": CLEAN}}),
        _s("cancel_job", {"type": "cancel_job", "job_id": "job-3"}),
        _s("train_model: a long job", {"type": "train_model", "dataset": CLEAN, "algorithm": "random_forest", "hyperparams": {"n_estimators": 600}}),
        _s("set_job_resources: a running job", {"type": "set_job_resources", "job_id": "job-4", "cpus": 0.5}),
        _s("get_queue", {"type": "get_queue"}),
        _s("cancel_job: the long job", {"type": "cancel_job", "job_id": "job-4"}),
        _s("get_job: a training job that succeeds", {"type": "get_job", "job_id": "job-2"}, until=_job_ended, needs=WORK),
        _s("list_runs", {"type": "list_runs"}),
        _s("search_runs", {"type": "search_runs", "filter": "metrics.val_auc > 0.5", "order_by": ["metrics.val_auc DESC"]}),
        _s("get_run", lambda r: {"type": "get_run", "run_id": _run_id(r)}, needs=WORK),
        _s("compare_runs: one run twice", lambda r: {"type": "compare_runs", "run_ids": [_run_id(r), _run_id(r)]}, "invalid_parameters", needs=WORK),
        _s("register_model", lambda r: {"type": "register_model", "run_id": _run_id(r), "name": "churn"}, needs=WORK),
        _s("register_model: a second version", lambda r: {"type": "register_model", "run_id": _run_id(r), "name": "churn"}, needs=WORK),
        _s("get_model_versions", {"type": "get_model_versions", "name": "churn"}, needs=WORK),
        _s("set_model_alias", {"type": "set_model_alias", "name": "churn", "version": 1, "alias": "production"}, needs=WORK),
        _s("set_model_alias: unknown version", {"type": "set_model_alias", "name": "churn", "version": 9, "alias": "production"}, "not_found", needs=WORK),
        _s("delete_model_alias", {"type": "delete_model_alias", "name": "churn", "alias": "production"}, needs=WORK),
        _s("delete_model_alias: alias not set", {"type": "delete_model_alias", "name": "churn", "alias": "production"}, "not_found", needs=WORK),
        _s("deploy_model: unknown version", {"type": "deploy_model", "name": "churn", "version": "9"}, "not_found", needs=WORK),
        _s("deploy_model: unknown machine", {"type": "deploy_model", "name": "churn", "version": "1", "machine": "gpu-huge"}, "invalid_parameters", needs=WORK),
        _s("deploy_model: too many replicas", {"type": "deploy_model", "name": "churn", "version": "1", "replicas": 9}, "invalid_parameters", needs=WORK),
        _s("deploy_model", {"type": "deploy_model", "name": "churn", "version": "1", "replicas": 1}, needs=WORK),
        _s("get_deployment", {"type": "get_deployment", "deployment": "churn"}, needs=WORK),
        _s("predict", lambda r: {"type": "predict", "deployment": "churn", "instances": _instances(r)}, needs=frozenset({"workloads", "replicas_answer"})),
        _s("scale: to the replicas it has", {"type": "scale", "deployment": "churn", "replicas": 1}, needs=WORK),
        _s("deploy_model: a new version", {"type": "deploy_model", "name": "churn", "version": "2", "replicas": 1}, needs=WORK),
        _s("rollback", {"type": "rollback", "deployment": "churn", "version": "1"}, needs=WORK),
        _s("rollback: the version served", {"type": "rollback", "deployment": "churn", "version": "1"}, "conflict", needs=WORK),
        _s("get_metrics", {"type": "get_metrics", "target": "churn", "window_s": 30}, needs=WORK),
        _s("get_alerts", {"type": "get_alerts"}),
        _s("undeploy", {"type": "undeploy", "deployment": "churn"}, needs=WORK),
        _s("get_deployment: none left", {"type": "get_deployment"}),
        _s("run_flow", {"type": "run_flow", "name": "ingestion", "parameters": {"dataset": "customers", "batch": "2026-01-01"}}),
        _s("get_flow_run: a run that fails (no such batch)", {"type": "get_flow_run", "flow_run_id": "fr-1", "log_lines": 5}, until=_flow_ended, poll_s=2.0, needs=frozenset({"flow_runs"})),
        _s("retry_flow_run", {"type": "retry_flow_run", "flow_run_id": "fr-1"}, needs=frozenset({"flow_runs"})),
        _s("list_flows", {"type": "list_flows"}),
        _s("submit", {"type": "submit"}),
    ),
    action_types=("get_run", "compare_runs", "register_model", "predict"),
)  # fmt: skip

LAKE = Episode(
    name="lake",
    scenario="data-parquet-schema-change",
    description="a lake source: batches in the object store, a renamed column",
    steps=(
        _s("list_sources", {"type": "list_sources"}),
        _s("preview_source", {"type": "preview_source", "source": "sales_lake", "rows": 3}),
        _s("ingest_source", {"type": "ingest_source", "source": "sales_lake", "batches": [0, 1, 2]}),
        _s("ingest_source: a batch it does not have", {"type": "ingest_source", "source": "sales_lake", "batches": [7]}, "not_found"),
        _s("ingest_source: output under lake/", {"type": "ingest_source", "source": "sales_lake", "output": "lake/mine.parquet"}, "forbidden_name"),
        _s("schema_diff", {"type": "schema_diff", "reference": "lake/sales_lake/batch-00.parquet", "current": "lake/sales_lake/batch-02.parquet"}),
        _s("submit", {"type": "submit"}),
    ),
)  # fmt: skip

API = Episode(
    name="api-source",
    scenario="data-csv-batch-missing-outliers",
    description="an HTTP API source: its server as a service of the episode",
    requires=("sources.api",),
    needs=frozenset({"workloads"}),  # the source's server is a program (a pod on kube)
    steps=(
        _s("list_sources", {"type": "list_sources"}),
        _s("preview_source", {"type": "preview_source", "source": "orders_api", "rows": 3}),
        _s("ingest_source", {"type": "ingest_source", "source": "orders_api"}),
        _s("get_service_health: api-source", {"type": "get_service_health", "service": "api-source"}),
        _s("get_logs: api-source", {"type": "get_logs", "target": "api-source", "tail": 5}),
        _s("restart_service: api-source", {"type": "restart_service", "service": "api-source"}),
        _s("get_service_health: a source server not in use", {"type": "get_service_health", "service": "postgres"}, "not_found"),
        _s("submit", {"type": "submit"}),
    ),
)  # fmt: skip

POSTGRES = Episode(
    name="postgres-source",
    scenario="data-monthly-drift-retrain",
    description="a PostgreSQL source and a lake source",
    requires=("sources.postgres",),
    needs=frozenset({"workloads"}),  # the database server is a program (a pod on kube)
    steps=(
        _s("list_sources", {"type": "list_sources"}),
        _s("preview_source", {"type": "preview_source", "source": "history_db", "rows": 3}),
        _s("ingest_source", {"type": "ingest_source", "source": "history_db"}),
        _s("get_service_health: postgres", {"type": "get_service_health", "service": "postgres"}),
        _s("get_logs: postgres", {"type": "get_logs", "target": "service:postgres", "tail": 5}),
        _s("submit", {"type": "submit"}),
    ),
)  # fmt: skip

KIND_FAMILIES: dict[str, tuple[str, str]] = {
    "tabular_multiclass": ("multiclass-ticket-priority", "ridge"),
    "tabular_regression": ("regression-delivery-times", "logistic_regression"),
    "timeseries_forecasting": ("forecast-web-visits-basic", "mlp"),
    "text_classification": ("text-support-ticket-routing", "ridge"),
    "image_classification": ("images-parts-sorting", "gradient_boosting"),
}
"""Each kind of work beyond binary classification: its difficulty-1 family, and an algorithm of another
kind (what its datasets refuse)."""
CLEANINGS = 4
"""Cleaning steps of a kind episode (the kind's policy may ask for fewer; the rest list the datasets)."""


def _raw_dataset(results: Results) -> str:
    return next(d["name"] for d in results["list_datasets"]["datasets"] if d["name"].startswith("raw/"))


def _policy(kind: str, results: Results) -> Any:
    from mlsandbox.tasks.registry import get

    return get(kind).policy(results["check_data_quality"]["profile"])


def _prepared(results: Results, before: int) -> str:
    """The dataset the kind episode's cleanings made last, of the first ``before`` (the raw one if none)."""
    made = [results.get(f"clean_dataset {i}") or {} for i in range(before)]
    return next((m["dataset"] for m in reversed(made) if "dataset" in m), _raw_dataset(results))


def _clean_step(kind: str, i: int) -> Step:
    def action(results: Results) -> dict[str, Any]:
        plan = _policy(kind, results).preparations
        if i >= len(plan):
            return {"type": "list_datasets"}
        return {"type": "clean_dataset", "dataset": _prepared(results, i), "strategy": plan[i]}

    return _s(f"clean_dataset {i}", action)


def _train_step(kind: str) -> Step:
    def action(results: Results) -> dict[str, Any]:
        policy = _policy(kind, results)
        out = {"type": "train_model", "dataset": _prepared(results, CLEANINGS), "algorithm": policy.algorithm}
        return {**out, "hyperparams": dict(policy.hyperparams)} if policy.hyperparams else out

    return _s("train_model: the kind's algorithm", action)


def _kind_episode(kind: str, scenario: str, foreign: str) -> Episode:
    """A kind's family: profile, the kind's cleanings and algorithm, a foreign algorithm refused, the
    registered model graded with the kind's metric."""
    return Episode(
        name=f"kind-{kind}",
        scenario=scenario,
        description=f"{kind.replace('_', ' ')}: its profile, cleanings, algorithm, metric and a foreign algorithm",
        steps=(
            _s("list_datasets", {"type": "list_datasets"}),
            _s("check_data_quality", lambda r: {"type": "check_data_quality", "dataset": _raw_dataset(r)}),
            _s("train_model: an algorithm of another kind",
               lambda r: {"type": "train_model", "dataset": _raw_dataset(r), "algorithm": foreign},
               "invalid_parameters"),
            *(_clean_step(kind, i) for i in range(CLEANINGS)),
            _train_step(kind),
            _s("get_job: the kind's training", {"type": "get_job", "job_id": "job-1"}, until=_job_ended, needs=WORK),
            _s("register_model", lambda r: {"type": "register_model", "run_id": str(r["get_job: the kind's training"]["run_id"]),
                                            "name": load_builtin(scenario).goal.model_name}, needs=WORK),
            _s("submit", {"type": "submit"}),
        ),
        action_types=("check_data_quality", "clean_dataset", "train_model", "register_model"),
    )  # fmt: skip


KIND_EPISODES: tuple[Episode, ...] = tuple(_kind_episode(k, s, f) for k, (s, f) in KIND_FAMILIES.items())
"""One episode per kind of work beyond binary classification (whose episodes are the ones above)."""

EPISODES: tuple[Episode, ...] = (PROBES, WORK_EPISODE, LAKE, API, POSTGRES, *KIND_EPISODES)
"""The whole script, in the order it runs."""


def episodes(names: list[str] | tuple[str, ...] | None = None) -> tuple[Episode, ...]:
    """The script's episodes (all, or those named); :class:`ValueError` for an unknown name."""
    if names is None:
        return EPISODES
    known = {e.name: e for e in EPISODES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown conformance episodes {unknown}; episodes: {', '.join(known)}")
    return tuple(known[n] for n in names)


def covered_actions(script: tuple[Episode, ...] = EPISODES) -> set[str]:
    """Every action type some step of ``script`` runs."""
    return set().union(*(e.covered() for e in script))


def uncovered_actions(catalog_types: tuple[str, ...], script: tuple[Episode, ...] = EPISODES) -> list[str]:
    """Action types of the catalog no step runs (a plug-in pack's actions, or a gap in the script)."""
    covered = covered_actions(script)
    return [t for t in catalog_types if t not in covered]


__all__ = [
    "EPISODES",
    "KIND_EPISODES",
    "KIND_FAMILIES",
    "NEEDS",
    "SEED",
    "Episode",
    "JobDriver",
    "Need",
    "Outcome",
    "Step",
    "covered_actions",
    "episodes",
    "uncovered_actions",
]
