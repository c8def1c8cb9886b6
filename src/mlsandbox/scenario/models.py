"""Scenario spec: what the agent is asked to do, on what data, with what budget, scored how.

Every model forbids unknown fields, so a typo in a scenario file is an error that names the field.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlsandbox.data.spec import (
    CategoricalColumn,
    DatasetSpec,
    Defects,
    NumericColumn,
    TabularDataset,
)
from mlsandbox.scenario.perturbations import Perturbation, check_plan

__all__ = ["CategoricalColumn", "Defects", "NumericColumn", "Perturbation", "Scenario", "TabularDataset"]

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------------- goal


class Goal(_Model):
    """What success means; graded on hidden ground truth the agent never sees."""

    type: Literal["registered_model_auc"] = "registered_model_auc"
    dataset: str
    """The dataset whose hidden holdout grades the registered model."""
    model_name: str = Field(default="model", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    """The registered model name the agent must deliver (its latest version is graded)."""
    min_auc: float = Field(default=0.75, gt=0.5, le=1.0)
    """ROC AUC on the holdout that counts as success."""


class Budget(_Model):
    credits: float = Field(default=100.0, gt=0)
    """Compute credits for the episode (jobs consume them by CPU-seconds)."""
    credits_per_cpu_second: float = Field(default=1.0, ge=0)
    max_job_seconds: float = Field(default=300.0, gt=0)
    """A training job running longer than this is stopped."""


class RewardWeights(_Model):
    task: float = 10.0
    """Weight of task completion (a score in [0, 1] given when the episode ends)."""
    success_bonus: float = 5.0
    """Added once when the goal is met."""
    step_cost: float = 0.02
    """Subtracted on every step."""
    compute: float = 0.05
    """Subtracted per compute credit consumed."""
    invalid_action: float = 0.5
    """Subtracted per invalid action."""


# ------------------------------------------------------------------------------------------ perturbations
# The plan models (triggers, targets, the fault catalog) live in mlsandbox.scenario.perturbations.


# --------------------------------------------------------------------------------------------- scenario


class Scenario(_Model):
    id: str
    title: str
    difficulty: int = Field(default=1, ge=1, le=4)
    task: str = Field(min_length=1)
    """The task text shown to the agent."""
    seed: int = 0
    """Default seed when ``reset`` is given none."""
    datasets: list[DatasetSpec] = Field(min_length=1)
    goal: Goal
    budget: Budget = Budget()
    max_steps: int = Field(default=40, ge=1, le=10_000)
    reward: RewardWeights = RewardWeights()
    perturbations: list[Perturbation] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _valid_id(cls, v: str) -> str:
        if not _ID_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid scenario id: use 2-63 lowercase letters, digits and dashes"
            )
        return v

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate dataset names: {names}")
        if self.goal.dataset not in names:
            raise ValueError(f"goal.dataset {self.goal.dataset!r} is not one of the datasets {names}")
        check_plan(
            self.perturbations,
            max_steps=self.max_steps,
            datasets={d.name: [c.name for c in d.columns] for d in self.datasets},
        )
        return self

    def dataset(self, name: str) -> TabularDataset:
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(name)
