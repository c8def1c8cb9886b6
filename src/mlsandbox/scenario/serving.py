"""The serving part of a scenario: production traffic, alert rules and the SLO.

A scenario with a ``serving`` section gets an online feature service with the production population (drawn
from the distribution of ``serving.dataset``, drifting as ``traffic.drift`` says), a traffic generator that
sends it to the deployment of the goal's model once there is one, and monitoring that keeps the time
series and evaluates ``alerts``. Replicas run on the machine types of the scenario's ``compute`` catalog
(each replica costs its machine's ``credits_per_second``). Time is wall-clock time.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlsandbox.data.drift import Drift

Metric = Literal[
    "rps",
    "error_rate",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "cpu_percent",
    "memory_mb",
    "replicas_up",
    "live_accuracy",
    "feature_drift_psi",
    "client_rps",
    "client_error_rate",
    "client_latency_p99_ms",
]

METRICS: tuple[str, ...] = get_args(Metric)
"""Metric names of a target's time series. Every target has the first eight (server side); the deployment
taking production traffic also has live accuracy, feature drift and the clients' view (``client_*``:
every request sent, including those no replica answered)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Spike(_Model):
    at_s: float = Field(ge=0)
    """Seconds after traffic starts."""
    duration_s: float = Field(gt=0)
    multiplier: float = Field(gt=0)
    """Request rate multiplier while the spike lasts."""


class Traffic(_Model):
    """The production request stream (open loop: requests arrive whatever the answers)."""

    rate_rps: float = Field(default=5.0, gt=0, le=500)
    day_length_s: float = Field(default=0.0, ge=0)
    """Length of one simulated day; 0: no daily pattern."""
    daily_amplitude: float = Field(default=0.0, ge=0, lt=1)
    """The rate is ``rate * (1 + amplitude * sin(2 pi t / day))``."""
    spikes: list[Spike] = Field(default_factory=list)
    rows_per_request: int = Field(default=1, ge=1, le=256)
    by_entity: bool = True
    """Requests carry entity ids (features from the feature service) rather than the features."""
    label_delay_s: float = Field(default=5.0, ge=0)
    """True labels arrive this long after the prediction (live accuracy)."""
    phase_s: float = Field(default=30.0, gt=0)
    """Length of one drift phase: ``drift`` schedules count phases (batch b = t // phase_s)."""
    phases: int = Field(default=4, ge=1, le=24)
    """Phases generated; the last one lasts for the rest of the episode."""
    population_per_phase: int = Field(default=1500, ge=50, le=100_000)
    drift: list[Drift] = Field(default_factory=list)
    concurrency: int = Field(default=4, ge=1, le=32)
    timeout_s: float = Field(default=2.0, gt=0, le=30)


class AlertRule(_Model):
    """Fires when ``metric op threshold`` holds for ``for_s`` seconds (over a ``window_s`` window)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    metric: Metric
    op: Literal[">", "<"] = ">"
    threshold: float
    for_s: float = Field(default=5.0, ge=0)
    window_s: float = Field(default=10.0, gt=0, le=600)
    target: str = "*"
    """A deployment name, ``feature-service``, or ``*`` for every deployment."""
    severity: Literal["info", "warning", "critical"] = "warning"


class SLO(_Model):
    """What the production deployment must hold (checked every scrape over ``window_s``)."""

    latency_p99_ms: float = Field(default=250.0, gt=0)
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    window_s: float = Field(default=10.0, gt=0, le=600)


class Serving(_Model):
    dataset: str
    """The dataset whose distribution production traffic follows."""
    max_replicas: int = Field(default=4, ge=1, le=16)
    traffic: Traffic | None = Traffic()
    alerts: list[AlertRule] = Field(default_factory=list)
    slo: SLO = SLO()
    scrape_interval_s: float = Field(default=1.0, ge=0.2, le=30)
    min_eval_auc: float | None = Field(default=None, gt=0.5, le=1.0)
    """A version whose run logged ``val_auc`` below this (or none) is a risky deployment; default: the
    goal's ``min_auc``."""

    def required_observation_s(self) -> float:
        """Seconds of production traffic the SLO must have been watched for before it can be judged: one
        SLO window, and through the end of the last spike (a burst the agent submits before proves nothing).
        0 without traffic."""
        if self.traffic is None:
            return 0.0
        ends = [spike.at_s + spike.duration_s for spike in self.traffic.spikes]
        return max([self.slo.window_s, *ends])

    @model_validator(mode="after")
    def _check(self) -> Serving:
        names = [a.name for a in self.alerts]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate alert names: {names}")
        return self


class DeploymentSLOGoal(_Model):
    """Success: at the end a deployment named after the model serves a version of it (registered in this
    episode) whose holdout ROC AUC is at least ``min_auc``, and the SLO was violated for at most
    ``max_violation_fraction`` of the time production traffic ran.

    A dataset of another kind (a regression, multi-class labels) names its bar as the
    ``registered_model_metric`` goal does: ``metric`` (default: the kind's first) with ``threshold`` or
    ``baseline_ratio``; ``min_auc`` is then not used."""

    type: Literal["deployment_slo"] = "deployment_slo"
    dataset: str
    """The dataset whose hidden holdout grades the served model."""
    model_name: str = Field(default="model", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    """The registered model to serve; its deployment has the same name."""
    min_auc: float = Field(default=0.75, gt=0.5, le=1.0)
    holdout: Literal["dataset", "production"] = "dataset"
    """``production``: graded on the latest drift phase of production traffic instead of the dataset's
    holdout."""
    max_violation_fraction: float = Field(default=0.2, ge=0, le=1)
    metric: str | None = None
    """A metric of the dataset's kind that grades the served version (with ``threshold`` or
    ``baseline_ratio``); without a bar the served version is graded by ROC AUC against ``min_auc``."""
    threshold: float | None = None
    """The metric's value that counts as success (its direction is the metric's)."""
    baseline_ratio: float | None = Field(default=None, gt=0)
    """The bar as a multiple of the kind's trivial predictor's figure on the holdout."""

    @property
    def by_metric(self) -> bool:
        """Whether the served version is graded by the kind's metric (a bar is set) rather than ROC AUC."""
        return self.threshold is not None or self.baseline_ratio is not None

    @model_validator(mode="after")
    def _one_bar(self) -> DeploymentSLOGoal:
        if self.threshold is not None and self.baseline_ratio is not None:
            raise ValueError("goal: give at most one of threshold or baseline_ratio")
        if self.metric is not None and not self.by_metric:
            raise ValueError(f"goal.metric {self.metric!r}: give its bar, threshold or baseline_ratio")
        return self
