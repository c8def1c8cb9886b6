"""The ``flows`` pack: the episode's pipelines as real Prefect flow runs (ingestion, training, scoring)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.packs.compute.actions import EnvName
from mlsandbox.gateway.registry import ActionPack, PackAction
from mlsandbox.gateway.safety import ModelName

FlowRunId = Annotated[str, Field(pattern=r"^fr-[0-9]{1,6}$", description="A flow run id such as fr-1")]
_NAME = r"^[a-z][a-z0-9_]{0,63}$"
_BATCH = r"^[0-9A-Za-z][0-9A-Za-z._-]{0,39}$"
_COLUMN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IngestionParams(_Params):
    """Pull ``upstream/<dataset>/<batch>.csv`` -> validate its schema -> write ``lake/<dataset>/<batch>.parquet``."""

    dataset: str = Field(pattern=_NAME, description="Dataset name, e.g. customers")
    batch: str = Field(pattern=_BATCH, description="Batch name, e.g. 2026-11-29")
    rename: dict[Annotated[str, Field(pattern=_COLUMN)], Annotated[str, Field(pattern=_COLUMN)]] = Field(
        default_factory=dict, max_length=20, description="Columns to rename before validation (old -> new)"
    )


class TrainingParams(_Params):
    """Read every lake batch of a dataset -> train -> evaluate (validation AUC gate) -> register."""

    dataset: str = Field(pattern=_NAME)
    model_name: ModelName
    algorithm: Literal["logistic_regression", "random_forest", "gradient_boosting"] = "gradient_boosting"
    hyperparams: dict[
        Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,39}$")], float | int | str | bool | None
    ] = Field(default_factory=dict, max_length=20)
    min_auc: float = Field(default=0.7, ge=0.5, le=1.0)


class BatchScoringParams(_Params):
    """Score ``lake/<dataset>/<batch>.parquet`` with a registered model version or alias ->
    ``scores/<dataset>/<batch>.parquet``."""

    dataset: str = Field(pattern=_NAME)
    batch: str = Field(pattern=_BATCH)
    model_name: ModelName
    version: int | None = Field(default=None, ge=1)
    alias: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_-]{0,31}$")


FLOW_PARAMS: dict[str, type[_Params]] = {
    "ingestion": IngestionParams,
    "training": TrainingParams,
    "batch-scoring": BatchScoringParams,
}


class ListFlows(ActionModel):
    """The pipelines (ingestion, training, batch-scoring) with their parameters, and this episode's flow
    runs with their states."""

    type: Literal["list_flows"] = "list_flows"


class RunFlow(ActionModel):
    """Start a run of a pipeline on the orchestrator (Prefect); returns its flow run id at once. Follow it
    with get_flow_run. Parameters per flow are listed by list_flows. ``environment`` (training and
    batch-scoring; from list_environments) does the flow's work with that environment's libraries. A
    flow run costs the CPU seconds its work used at the budget's price per CPU second."""

    type: Literal["run_flow"] = "run_flow"
    name: Literal["ingestion", "training", "batch-scoring"]
    parameters: dict[str, Any] = Field(default_factory=dict)
    environment: EnvName | None = Field(
        default=None, description="A Python environment for the flow's work (default: the sandbox's own)"
    )


class GetFlowRun(ActionModel):
    """A flow run: its state (Scheduled, Pending, Running, Completed, Failed, Crashed, Cancelled,
    AwaitingRetry), the state message, its task runs and the last lines of its log."""

    type: Literal["get_flow_run"] = "get_flow_run"
    flow_run_id: FlowRunId
    log_lines: int = Field(default=30, ge=1, le=200)


class RetryFlowRun(ActionModel):
    """Run a finished flow run again with the same parameters (same id; its run count goes up): for a
    run that failed on something since fixed."""

    type: Literal["retry_flow_run"] = "retry_flow_run"
    flow_run_id: FlowRunId


PACK = ActionPack(
    name="flows",
    actions=(
        PackAction(ListFlows, capability="flows", read_only=True),
        PackAction(RunFlow, capability="flows"),
        PackAction(GetFlowRun, capability="flows", read_only=True),
        PackAction(RetryFlowRun, capability="flows"),
    ),
    implementation="mlsandbox.gateway.packs.flows.handlers",
    description="Pipelines on Prefect: list, run, inspect and retry flow runs.",
)
