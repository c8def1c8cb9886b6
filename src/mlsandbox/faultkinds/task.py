"""Faults of the ML task itself: its data and its training jobs' settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlsandbox.faultkinds.base import FaultKind, FaultParams, Mechanism


class MissingColumnFault(FaultParams):
    """A feature column disappears from the dataset's raw objects (every format); restored on recovery."""

    targets = ("dataset",)
    category = "task"
    type: Literal["missing_column"] = "missing_column"
    column: str = Field(min_length=1)


MISSING_COLUMN = FaultKind(
    params=MissingColumnFault,
    symptom="a feature column is gone from the dataset: training on it fails, quality checks show it",
    behaviour="MissingColumn",
    backends={
        "local": Mechanism("object-store", "the dataset's objects rewritten without the column"),
        "kube": Mechanism("object-store", "the dataset's objects rewritten without the column"),
        "sim": Mechanism("object-store", "the dataset's objects rewritten without the column"),
    },
)


class JobTimeoutFault(FaultParams):
    """Jobs started while active are killed after ``timeout_s`` seconds (a too tight deadline)."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "task"
    type: Literal["job_timeout"] = "job_timeout"
    timeout_s: float = Field(default=3.0, gt=0)


JOB_TIMEOUT = FaultKind(
    params=JobTimeoutFault,
    symptom="jobs are killed before they finish (timed out)",
    behaviour="JobTimeout",
    needs=("jobs",),
    backends={
        "local": Mechanism("job-spec", "the deadline of jobs started while active"),
        "kube": Mechanism("job-spec", "the deadline of jobs started while active"),
        "sim": Mechanism("job-spec", "the deadline of jobs started while active"),
    },
)


class DivergentLearningRateFault(FaultParams):
    """Jobs started while active get a default learning rate of ``learning_rate`` (the training defaults
    went bad): an ``mlp`` job's loss diverges (inf, then NaN) and it fails with its log saying so. A job
    whose hyperparameters set the learning rate explicitly is left alone; algorithms without a learning
    rate are unaffected."""

    targets = ("jobs",)
    default_target = "jobs"
    category = "task"
    type: Literal["divergent_learning_rate"] = "divergent_learning_rate"
    learning_rate: float = Field(default=1e6, gt=0)


DIVERGENT_LEARNING_RATE = FaultKind(
    params=DivergentLearningRateFault,
    symptom="training diverges: the loss goes to inf, then NaN, and the job fails",
    behaviour="DivergentLearningRate",
    needs=("jobs",),
    backends={
        "local": Mechanism("job-spec", "the default learning rate of jobs started while active"),
        "kube": Mechanism("job-spec", "the default learning rate of jobs started while active"),
        "sim": Mechanism("job-spec", "the default learning rate of jobs started while active"),
    },
)
