"""The ``tracking`` pack: search and compare runs, read model versions, move aliases (MLflow server).

Everything is scoped to the episode: runs of its own experiment only, models under its own name prefix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import ModelName, RunId

AliasName = Literal["staging", "production", "champion", "challenger", "canary", "shadow"]


class SearchRuns(ActionModel):
    """Search this episode's runs with an MLflow filter expression and ordering, e.g. filter
    ``metrics.val_auc > 0.8 and params.algorithm = 'random_forest'``, order_by ``["metrics.val_auc DESC"]``.
    Returns run id, name, status, parameters and metrics of each match (at most ``max_results``)."""

    type: Literal["search_runs"] = "search_runs"
    filter: str = Field(default="", max_length=500, description="MLflow search filter ('' = all runs)")
    order_by: list[str] = Field(
        default_factory=list,
        max_length=5,
        description="Orderings such as 'metrics.val_auc DESC' or 'attributes.start_time ASC'",
    )
    max_results: int = Field(default=20, ge=1, le=200)


class GetRun(ActionModel):
    """One run of this episode: status, start and end time, parameters, metrics and tags."""

    type: Literal["get_run"] = "get_run"
    run_id: RunId


class CompareRuns(ActionModel):
    """Compare 2-10 runs side by side: each parameter and metric with its value per run, the parameters
    that differ, and for each metric the best run (highest; lowest for losses and errors)."""

    type: Literal["compare_runs"] = "compare_runs"
    run_ids: list[RunId] = Field(min_length=2, max_length=10)


class GetModelVersions(ActionModel):
    """The versions of a registered model of this episode: version, source run, status and aliases."""

    type: Literal["get_model_versions"] = "get_model_versions"
    name: ModelName


class SetModelAlias(ActionModel):
    """Point an alias of a registered model at one of its versions (the alias moves off any other
    version): how a version is promoted to ``staging`` or ``production`` or rolled back."""

    type: Literal["set_model_alias"] = "set_model_alias"
    name: ModelName
    version: int = Field(ge=1, description="Model version number")
    alias: AliasName


class DeleteModelAlias(ActionModel):
    """Remove an alias from a registered model (no version carries it afterwards)."""

    type: Literal["delete_model_alias"] = "delete_model_alias"
    name: ModelName
    alias: AliasName


PACK = ActionPack(
    name="tracking",
    actions=(
        PackAction(SearchRuns, capability="tracking", read_only=True),
        PackAction(GetRun, capability="tracking", read_only=True),
        PackAction(CompareRuns, capability="tracking", read_only=True),
        PackAction(GetModelVersions, capability="tracking", read_only=True),
        PackAction(SetModelAlias, capability="tracking"),
        PackAction(DeleteModelAlias, capability="tracking"),
    ),
    implementation="mlsandbox.gateway.packs.tracking.handlers",
    description="Experiment tracking and model registry: search and compare runs, versions and aliases.",
)
