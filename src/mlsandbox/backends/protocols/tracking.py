"""Experiment tracking and the model registry (the MLflow server on local and kube, memory on sim)."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field

from mlsandbox.backends.protocols.common import Model


class RunInfo(Model):
    run_id: str
    experiment_id: str
    status: str
    start_time: float | None = None
    end_time: float | None = None
    params: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)


class ModelVersionInfo(Model):
    name: str
    version: str
    run_id: str | None
    source: str
    status: str
    aliases: list[str] = Field(default_factory=list)
    """Names pointing at this version (e.g. ``staging``, ``production``)."""
    created_at: float | None = None


class Tracking(Protocol):
    """Experiment tracking and model registry (the MLflow server on every backend)."""

    def create_experiment(self, name: str, tags: dict[str, str] | None = None) -> str: ...
    def delete_experiment(self, experiment_id: str) -> None: ...
    def list_runs(self, experiment_id: str) -> list[RunInfo]: ...
    def get_run(self, run_id: str) -> RunInfo:
        """Raise :class:`KeyError` when the run does not exist."""
        ...

    def search_runs(
        self,
        experiment_id: str,
        filter_string: str = "",
        order_by: list[str] | None = None,
        max_results: int = 100,
    ) -> list[RunInfo]:
        """Runs of one experiment matching an MLflow filter expression; :class:`ValueError` for a bad one."""
        ...

    def register_model(self, run_id: str, name: str, artifact_path: str = "model") -> ModelVersionInfo: ...
    def list_model_versions(self, name_prefix: str) -> list[ModelVersionInfo]: ...
    def set_model_alias(self, name: str, alias: str, version: str) -> ModelVersionInfo:
        """Point an alias (``staging``, ``production``) of a registered model at a version."""
        ...

    def delete_model_alias(self, name: str, alias: str) -> None: ...
    def delete_registered_model(self, name: str) -> None: ...
    def load_model(self, name: str, version: str) -> Any:
        """Load a registered model version as a Python object with ``predict_proba``/``predict``."""
        ...
