"""The goal for work whose model cannot be loaded for grading: a predictions file the agent's script
writes in its workspace, graded on the hidden holdout.

At the episode's start the holdout's features (no labels) are put in the episode's bucket at
:func:`features_key` (CSV, with an ``id`` column); the agent's script predicts them and writes ``path`` in
the workspace: a CSV with ``id`` and ``prediction`` columns (and ``probability``, the positive class's,
for a probability metric such as ``roc_auc``), one row per holdout id. The grader joins the file on ``id``
against the holdout and scores it with the dataset's kind's ``metric`` against a bar that is absolute
(``threshold``) or relative to the kind's trivial predictor (``baseline_ratio``), as
:mod:`mlsandbox.scenario.metric_goal`'s. A malformed file (missing or unknown ids, duplicates, a missing
column, values that are not numbers) earns nothing, with a grade message that says what is wrong.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ID_COLUMN = "id"
PREDICTION_COLUMN = "prediction"
PROBABILITY_COLUMN = "probability"


def features_key(dataset: str) -> str:
    """The store key of a dataset's holdout features (what the agent predicts)."""
    return f"test/{dataset}-features.csv"


class PredictionsFileGoal(BaseModel):
    """A predictions file written in the workspace, graded by the dataset's kind's metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["predictions_file"] = "predictions_file"
    dataset: str
    """The dataset whose hidden holdout grades the predictions (its kind names the metrics)."""
    path: str = Field(default="predictions.csv", min_length=1, max_length=512)
    """The file's path in the workspace (relative)."""
    metric: str | None = None
    """A metric of the dataset's kind (None: the kind's default)."""
    threshold: float | None = None
    """The metric's value that counts as success (its direction is the metric's)."""
    baseline_ratio: float | None = Field(default=None, gt=0)
    """The bar as a multiple of the kind's trivial predictor's figure on the holdout."""
    model_name: str = Field(default="model", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    """The name a script may register its model under (tracked, not graded)."""

    @field_validator("path")
    @classmethod
    def _inside(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or ".." in p.parts or "\x00" in v or not p.name:
            raise ValueError(f"goal.path {v!r}: give a file path relative to the workspace")
        return v

    @model_validator(mode="after")
    def _one_bar(self) -> PredictionsFileGoal:
        if (self.threshold is None) == (self.baseline_ratio is None):
            raise ValueError("goal: give exactly one of threshold or baseline_ratio")
        return self


__all__ = [
    "ID_COLUMN",
    "PREDICTION_COLUMN",
    "PROBABILITY_COLUMN",
    "PredictionsFileGoal",
    "features_key",
]
