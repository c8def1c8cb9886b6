"""Pipelines of a scenario: the upstream batches that arrive for ingestion and the flow runs that start
with the episode (see the ``flows`` action pack)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FlowName = Literal["ingestion", "training", "batch-scoring"]
_BATCH = r"^[0-9A-Za-z][0-9A-Za-z._-]{0,39}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpstreamBatch(_Model):
    """A batch of a dataset delivered by an upstream system to ``upstream/<dataset>/<batch>.csv``.

    The batches of a dataset share its rows (row i goes to batch i mod n). ``problem`` is what is wrong
    with the delivery: ``renamed_column`` (the upstream renamed ``column`` to ``renamed_to``: the schema
    check of the ingestion fails), ``not_delivered`` (no object until ``delivered_at_step``)."""

    dataset: str
    batch: str = Field(pattern=_BATCH)
    ingested: bool = False
    """Already in the lake when the episode starts (an earlier day's successful ingestion)."""
    problem: Literal["none", "renamed_column", "not_delivered"] = "none"
    column: str | None = None
    renamed_to: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    delivered_at_step: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _problem(self) -> UpstreamBatch:
        if self.problem == "renamed_column" and not (self.column and self.renamed_to):
            raise ValueError("a renamed_column batch needs `column` and `renamed_to`")
        if self.problem != "not_delivered" and self.delivered_at_step is not None:
            raise ValueError("delivered_at_step is for a not_delivered batch")
        if self.ingested and self.problem != "none":
            raise ValueError("an ingested batch has no problem")
        return self


class FlowRunSpec(_Model):
    """A flow run started when the episode starts (with the agent-facing parameters of run_flow)."""

    flow: FlowName
    parameters: dict[str, Any] = Field(default_factory=dict)
    wait: bool = True
    """Finished before the agent's first step (a run of the past: "last night's run failed")."""


class Pipelines(_Model):
    upstream: list[UpstreamBatch] = Field(default_factory=list)
    start_runs: list[FlowRunSpec] = Field(default_factory=list)
