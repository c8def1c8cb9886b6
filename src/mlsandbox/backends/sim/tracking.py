"""Experiment tracking and the model registry of a ``sim`` sandbox, in memory (:class:`MemoryTracking`).

It means what MLflow means on the other backends (:mod:`mlsandbox.backends.common.mlflow_tracking`):
experiments, runs with MLflow's states (``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED``), params,
metrics and tags, registered models with versions counted from 1 and aliases. Search filters and
orderings are MLflow's own (its ``SearchUtils`` parses and applies them, so a bad filter is refused
with MLflow's message). Errors are those of the MLflow client wrapper: :class:`KeyError` for what does
not exist, :class:`ValueError` for a bad request, :class:`~mlsandbox.errors.BackendError` when the
tracker cannot be reached (killed, frozen, its endpoint down).

Runs are written by the simulated jobs and flows (:meth:`MemoryTracking.start_run`,
:meth:`MemoryTracking.end_run`), which keep the model a successful run logs: the object
:meth:`MemoryTracking.load_model` returns for a registered version (the proxy model the surrogate fitted,
with ``predict_proba``), so the grading code is the same as on local.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.backends.protocols import ModelVersionInfo, RunInfo
from mlsandbox.backends.sim.world import SimWorld

SERVICE = "mlflow"


@dataclass
class _Run:
    run_id: str
    experiment_id: str
    name: str
    status: str
    start_time: float
    end_time: float | None = None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    model: Any = None
    model_id: str | None = None
    made_with: dict[str, str] = field(default_factory=dict)
    """What the model was made with: the job's algorithm and its environment's scikit-learn release."""

    def info(self) -> RunInfo:
        return RunInfo(
            run_id=self.run_id,
            experiment_id=self.experiment_id,
            status=self.status,
            start_time=self.start_time,
            end_time=self.end_time,
            params=dict(self.params),
            metrics=dict(self.metrics),
            tags=dict(self.tags),
        )


@dataclass
class _Version:
    name: str
    version: str
    run_id: str | None
    source: str
    created_at: float
    model: Any = None
    made_with: dict[str, str] = field(default_factory=dict)


@dataclass
class _Registered:
    name: str
    versions: list[_Version] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)


class MemoryTracking:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.Tracking`). ``pump`` brings the
    simulated jobs up to the clock's time before each operation (they write their runs lazily)."""

    def __init__(self, world: SimWorld, pump: Callable[[], None] = lambda: None) -> None:
        self.world = world
        self.pump = pump
        self.experiments: dict[str, tuple[str, dict[str, str]]] = {}
        self.names: dict[str, str] = {}
        self.runs: dict[str, _Run] = {}
        self.models: dict[str, _Registered] = {}

    def __repr__(self) -> str:
        return f"MemoryTracking(experiments={len(self.experiments)}, runs={len(self.runs)})"

    def _call(self, operation: str, what: str) -> None:
        self.pump()
        self.world.call(SERVICE, f"tracking.{operation}", what=what)

    # ------------------------------------------------------------------------------------ experiments

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str:
        what = f"create experiment {name!r}"
        self._call("create_experiment", what)
        if name in self.names:
            raise ValueError(
                f"{what}: Experiment(name={name}) already exists. Error: (raised as a result of Query-invoked "
                "autoflush; consider using a session.no_autoflush block if this flush is occurring prematurely)"
            )
        experiment_id = str(self.world.ids.count("experiment"))
        self.experiments[experiment_id] = (name, dict(tags or {}))
        self.names[name] = experiment_id
        return experiment_id

    def delete_experiment(self, experiment_id: str) -> None:
        what = f"delete experiment {experiment_id!r}"
        self._call("delete_experiment", what)
        found = self.experiments.pop(experiment_id, None)
        if found is None:
            raise KeyError(f"{what}: No Experiment with id={experiment_id} exists")
        self.names.pop(found[0], None)
        for run_id in [r.run_id for r in self.runs.values() if r.experiment_id == experiment_id]:
            del self.runs[run_id]

    # ------------------------------------------------------------------------------------------- runs

    def list_runs(self, experiment_id: str) -> list[RunInfo]:
        self._call("list_runs", f"list runs of experiment {experiment_id!r}")
        runs = [r for r in self.runs.values() if r.experiment_id == experiment_id]
        runs.sort(key=lambda r: (-r.start_time, r.run_id))
        return [r.info() for r in runs]

    def search_runs(
        self,
        experiment_id: str,
        filter_string: str = "",
        order_by: list[str] | None = None,
        max_results: int = 100,
    ) -> list[RunInfo]:
        what = f"search runs of experiment {experiment_id!r}"
        self._call("search_runs", what)
        from mlflow.exceptions import MlflowException
        from mlflow.utils.search_utils import SearchUtils

        runs = [r for r in self.runs.values() if r.experiment_id == experiment_id]
        by_id = {r.run_id: r for r in runs}
        entities = [_entity(r) for r in runs]
        try:
            if filter_string:
                _validate_filter(filter_string)
                entities = SearchUtils.filter(entities, filter_string)
            entities = SearchUtils.sort(entities, order_by or ["attributes.start_time DESC"])
        except MlflowException as e:
            raise ValueError(f"{what}: {str(e.message).strip().splitlines()[0]}") from None
        if max_results < 1 or max_results > 50000:
            raise ValueError(
                f"{what}: Invalid value {max_results} for parameter 'max_results' supplied. It must be at "
                "most 50000."
            )
        return [by_id[e.info.run_id].info() for e in entities[:max_results]]

    def get_run(self, run_id: str) -> RunInfo:
        self._call("get_run", f"run {run_id!r}")
        return self._run(run_id).info()

    def _run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            raise KeyError(f"run {run_id!r}: Run with id={run_id} not found")
        return run

    # --------------------------------------------------------------------------------------- registry

    def register_model(self, run_id: str, name: str, artifact_path: str = "model") -> ModelVersionInfo:
        self._call("register_model", f"create a version of model {name!r}")
        run = self._run(run_id)
        if run.model is None or artifact_path != "model":
            raise KeyError(f"run {run_id!r} has no model logged under {artifact_path!r}")
        reg = self.models.setdefault(name, _Registered(name))
        version = _Version(
            name,
            str(len(reg.versions) + 1),
            run_id,
            f"models:/{run.model_id}",
            self.world.clock.time(),
            run.model,
            dict(run.made_with),
        )
        reg.versions.append(version)
        return self._view(reg, version)

    def list_model_versions(self, name_prefix: str) -> list[ModelVersionInfo]:
        self._call("list_model_versions", f"list model versions {name_prefix!r}*")
        out = [
            self._view(reg, v)
            for name, reg in self.models.items()
            if name.startswith(name_prefix)
            for v in reg.versions
        ]
        return sorted(out, key=lambda v: (v.name, int(v.version)))

    def set_model_alias(self, name: str, alias: str, version: str) -> ModelVersionInfo:
        what = f"model {name!r} version {version}"
        self._call("set_model_alias", what)
        reg = self.models.get(name)
        if reg is None:
            raise KeyError(f"{what}: Registered Model with name={name} not found")
        found = next((v for v in reg.versions if v.version == str(version)), None)
        if found is None:
            raise KeyError(f"{what}: Model Version (name={name}, version={version}) not found")
        reg.aliases[alias] = found.version
        return self._view(reg, found)

    def delete_model_alias(self, name: str, alias: str) -> None:
        what = f"alias {alias!r} of model {name!r}"
        self._call("delete_model_alias", what)
        reg = self.models.get(name)
        if reg is None:
            raise KeyError(f"{what}: Registered Model with name={name} not found")
        if alias not in reg.aliases:
            raise KeyError(f"{what}: Registered model alias {alias} not found.")
        del reg.aliases[alias]

    def delete_registered_model(self, name: str) -> None:
        what = f"registered model {name!r}"
        self._call("delete_registered_model", what)
        if self.models.pop(name, None) is None:
            raise KeyError(f"{what}: Registered Model with name={name} not found")

    def load_model(self, name: str, version: str) -> Any:
        what = f"model {name!r} version {version}"
        self._call("load_model", what)
        reg = self.models.get(name)
        found = None if reg is None else next((v for v in reg.versions if v.version == str(version)), None)
        if found is None:
            raise KeyError(f"{what}: Model Version (name={name}, version={version}) not found")
        return found.model

    def made_with(self, name: str, version: str) -> dict[str, str]:
        """What version ``version`` of ``name`` was made with (algorithm, scikit-learn release; empty
        when unknown); :class:`KeyError` for an unknown version."""
        reg = self.models.get(name)
        found = None if reg is None else next((v for v in reg.versions if v.version == str(version)), None)
        if found is None:
            raise KeyError(f"model {name!r} version {version}: Model Version not found")
        return dict(found.made_with)

    def _view(self, reg: _Registered, v: _Version) -> ModelVersionInfo:
        return ModelVersionInfo(
            name=v.name,
            version=v.version,
            run_id=v.run_id,
            source=v.source,
            status="READY",
            aliases=sorted(a for a, ver in reg.aliases.items() if ver == v.version),
            created_at=v.created_at,
        )

    # ------------------------------------------------------------------------- what jobs and flows write

    def start_run(self, experiment_id: str, name: str, params: dict[str, Any]) -> str:
        """A run as a workload starts it (``RUNNING``); raises :class:`KeyError` for an unknown experiment."""
        if experiment_id not in self.experiments:
            raise KeyError(f"No Experiment with id={experiment_id} exists")
        run_id = self.world.ids.hex(32)
        self.runs[run_id] = _Run(
            run_id,
            experiment_id,
            name,
            "RUNNING",
            self.world.clock.time(),
            params={k: str(v) for k, v in params.items()},
            tags={"mlflow.runName": name, "mlflow.source.type": "LOCAL", "mlflow.user": "mlsandbox"},
        )
        return run_id

    def end_run(
        self,
        run_id: str,
        status: str,
        *,
        at: float | None = None,
        metrics: dict[str, float] | None = None,
        params: dict[str, Any] | None = None,
        model: Any = None,
        made_with: dict[str, str] | None = None,
    ) -> None:
        run = self.runs.get(run_id)
        if run is None:  # its experiment was deleted meanwhile (the episode closed)
            return
        run.made_with.update(made_with or {})
        run.status = status
        run.end_time = self.world.clock.time() if at is None else at
        run.metrics.update(metrics or {})
        run.params.update({k: str(v) for k, v in (params or {}).items()})
        if model is not None:
            run.model = model
            run.model_id = f"m-{self.world.ids.hex(32)}"

    def log(self, run_id: str, *, params: dict[str, Any] | None = None) -> None:
        run = self.runs.get(run_id)
        if run is not None:
            run.params.update({k: str(v) for k, v in (params or {}).items()})


def _validate_filter(filter_string: str) -> None:
    """Refuse a filter the tracking server refuses (MLflow checks each clause's comparator as it reads
    it, even when there is no run to match: done here on an empty run)."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    empty = _entity(_Run("0" * 32, "0", "", "FINISHED", 0.0))
    for clause in SearchUtils.parse_search_filter(filter_string):
        try:
            SearchUtils._does_run_match_clause(empty, clause)
        except MlflowException:
            raise
        except (TypeError, ValueError) as e:
            raise MlflowException(f"Invalid value in clause {clause}: {e}") from None


def _entity(run: _Run) -> Any:
    from mlflow.entities import Metric, Param, Run, RunData, RunTag
    from mlflow.entities import RunInfo as MlflowRunInfo

    ms = int(run.start_time * 1000)
    info = MlflowRunInfo(
        run_id=run.run_id,
        experiment_id=run.experiment_id,
        user_id="mlsandbox",
        status=run.status,
        start_time=ms,
        end_time=None if run.end_time is None else int(run.end_time * 1000),
        lifecycle_stage="active",
        artifact_uri=f"mlflow-artifacts:/{run.experiment_id}/{run.run_id}/artifacts",
        run_name=run.name,
    )
    data = RunData(
        metrics=[Metric(k, v, ms, 0) for k, v in run.metrics.items()],
        params=[Param(k, v) for k, v in run.params.items()],
        tags=[RunTag(k, v) for k, v in run.tags.items()],
    )
    return Run(info, data)


__all__ = ["MemoryTracking"]
