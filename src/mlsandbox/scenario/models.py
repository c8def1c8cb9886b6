"""Scenario spec: what the agent is asked to do, on what data, with what budget, scored how.

Every model forbids unknown fields, so a typo in a scenario file is an error that names the field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from mlsandbox.data.spec import (
    CategoricalColumn,
    Defects,
    NumericColumn,
    TabularDataset,
)
from mlsandbox.scenario.compute import ComputePool
from mlsandbox.scenario.metric_goal import MetricGoal, check_metric_goal, goal_metric
from mlsandbox.scenario.models_goal import RegisteredModelsGoal, check_models_goal
from mlsandbox.scenario.perturbations import Perturbation, check_plan
from mlsandbox.scenario.pipelines import Pipelines
from mlsandbox.scenario.predictions_goal import PredictionsFileGoal
from mlsandbox.scenario.serving import DeploymentSLOGoal, Serving
from mlsandbox.scenario.sources import Source, check_sources, refuse_non_table
from mlsandbox.scenario.space import ParameterSpace, read_parameter
from mlsandbox.scenario.stages import Loosening, check_harder, with_declared
from mlsandbox.scenario.team import Team
from mlsandbox.tasks.registry import DEFAULT_KIND, DatasetSpec

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
    scorer_environment: list[str] | None = Field(default=None, min_length=1, max_length=20)
    """Requirements of the production scorer's environment (``["scikit-learn==1.5.2"]``): the registered
    model is loaded and asked for its probabilities there, as that scorer would, not in the sandbox's
    own interpreter; a model that does not load or predict under it earns nothing."""


def _goal_type(v: Any) -> str:
    return str((v.get("type") if isinstance(v, dict) else getattr(v, "type", None)) or "registered_model_auc")


AnyGoal = Annotated[
    Annotated[Goal, Tag("registered_model_auc")]
    | Annotated[MetricGoal, Tag("registered_model_metric")]
    | Annotated[PredictionsFileGoal, Tag("predictions_file")]
    | Annotated[DeploymentSLOGoal, Tag("deployment_slo")]
    | Annotated[RegisteredModelsGoal, Tag("registered_models")],
    Discriminator(_goal_type),
]
"""A goal by ``type`` (``registered_model_auc`` when absent); ``registered_model_metric``: see
scenario.metric_goal; ``predictions_file``: see scenario.predictions_goal; ``deployment_slo``: see
scenario.serving; ``registered_models``: see scenario.models_goal."""


class ComputeWindow(_Model):
    """A rolling compute budget: at most ``credits`` used in any ``seconds`` of the episode's clock."""

    seconds: float = Field(gt=0)
    credits: float = Field(gt=0)


DEADLINE_GOALS: tuple[str, ...] = ("registered_model_auc", "registered_model_metric", "registered_models")
"""Goal types a ``budget.deadline_s`` applies to (their grade reads the registration's time)."""


class Budget(_Model):
    credits: float = Field(default=100.0, gt=0)
    """Compute credits for the episode (jobs consume them by CPU-seconds)."""
    credits_per_cpu_second: float = Field(default=1.0, ge=0)
    max_job_seconds: float = Field(default=300.0, gt=0)
    """A training job running longer than this is stopped."""
    deadline_s: float | None = Field(default=None, gt=0)
    """Seconds of the episode's clock (virtual on sim), from the first observation, by which the goal's
    model must be registered: a version registered later is not graded. Observations show
    ``seconds_left``. Only for goals that grade a registered model."""
    window: ComputeWindow | None = None
    """A rolling compute budget on top of ``credits``: no new work starts while the credits used in the
    last ``window.seconds`` of the episode's clock reach ``window.credits``."""


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
    # -- resource efficiency, stability, problem solving, constraints (mlsandbox.evaluation.reward) --
    cpu_second: float = 0.0
    """Subtracted per CPU-second the episode's jobs use (on top of the credits they cost)."""
    idle_capacity: float = 0.05
    """Subtracted per credit of reserved capacity that sat idle (counter ``idle_reserved_credits``)."""
    slo_violation: float = 0.01
    """Subtracted per second of SLO violation of a deployment (counter ``slo_violation_s``)."""
    risky_deployment: float = 2.0
    """Subtracted per risky deployment, e.g. one without an evaluation (counter ``risky_deployments``)."""
    fault_detected: float = 0.0
    """Added once per injected fault when the agent first addresses the faulty component; halves every
    ``detect_half_life_steps`` steps after the injection."""
    fault_mitigated: float = 0.0
    """Added once per injected fault whose symptom the agent made go away; halves every
    ``detect_half_life_steps`` steps after the injection."""
    detect_half_life_steps: float = Field(default=5.0, gt=0)
    wrong_mitigation: float = 0.0
    """Subtracted per action matching one of ``constraints.wrong_mitigations`` (carried out all the same)."""
    constraint_violation: float = Field(default=10.0, ge=0)
    """Subtracted when a hard constraint is violated (the episode ends; task reward is forfeited)."""
    shaping: dict[
        Literal["data_inspected", "data_cleaned", "job_succeeded", "model_registered", "model_served"], float
    ] = Field(default_factory=dict)
    """Optional dense shaping: potential-based terms (weight of each milestone reached). They sum to
    zero over a finished episode, so they guide learning without changing which policy is best."""


class ForbiddenAction(_Model):
    """An action pattern that violates a hard constraint: ``action`` is a glob on the action type,
    ``params`` globs on parameter values (all must match; a nested value is matched as JSON text)."""

    action: str = Field(min_length=1)
    params: dict[str, str] = Field(default_factory=dict)
    reason: str = "forbidden by the scenario"


class Constraints(_Model):
    """Hard constraints: a violation ends the episode with the ``constraint_violation`` penalty."""

    budget: bool = False
    """When true, using more credits than ``budget.credits`` is a violation (not only a blocked job)."""
    forbidden_actions: list[ForbiddenAction] = Field(default_factory=list)
    wrong_mitigations: list[ForbiddenAction] = Field(default_factory=list)
    """Not hard: actions that treat a cause the situation does not have (scaling out while a dependency
    is down). Each one that succeeds costs ``reward.wrong_mitigation``; the episode goes on."""


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
    goal: AnyGoal
    budget: Budget = Budget()
    max_steps: int = Field(default=40, ge=1, le=10_000)
    reward: RewardWeights = RewardWeights()
    constraints: Constraints = Constraints()
    reference_agent: str = "reference"
    """The scripted agent that solves this scenario (a name in ``mlsandbox.agents.AGENTS`` or
    ``module:attribute``); ``mlsandbox scenarios validate`` runs it."""
    compute: ComputePool = ComputePool()
    """Machine catalog and pool capacity (default: two machine types, no capacity limit)."""
    pipelines: Pipelines = Pipelines()
    """Upstream batches for the ingestion pipeline and flow runs started with the episode."""
    perturbations: list[Perturbation] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    """Where data comes from besides the lake's raw/ files (see mlsandbox.scenario.sources)."""
    serving: Serving | None = None
    """Production traffic, monitoring, alerts and SLO for deployments (see mlsandbox.scenario.serving)."""
    team: Team | None = None
    """Roles for a multi-agent episode of this scenario (see mlsandbox.scenario.team)."""
    space: ParameterSpace | None = None
    """The family's parameter space: what its generated instances vary (see mlsandbox.scenario.space)."""
    curriculum: list[Loosening] = Field(default_factory=list, max_length=8)
    """The stages ``mlsandbox train``'s curriculum plays before the family as declared, easiest first,
    in place of its default ones (``--stage`` overrides them): each a ``Loosening`` of the family
    (``{budget: 2, defects: 0, faults: 0}``; see mlsandbox.scenario.stages). Declared when the default
    stages would teach a dead end, a loosened bar a weaker solution meets. The stages must get strictly
    harder; the family as declared is the last stage, added when they do not end with it."""

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
        check_metric_goal(self.goal, {d.name: d for d in self.datasets})
        if isinstance(self.goal, RegisteredModelsGoal):
            check_models_goal(self.goal, {d.name: d for d in self.datasets}, DEFAULT_KIND)
        if self.budget.deadline_s is not None and self.goal.type not in DEADLINE_GOALS:
            raise ValueError(
                f"budget.deadline_s: a deadline applies to a goal that grades a registered model "
                f"({', '.join(DEADLINE_GOALS)}), not to goal type {self.goal.type!r}"
            )
        check_plan(
            self.perturbations,
            max_steps=self.max_steps,
            datasets={d.name: [c.name for c in getattr(d, "columns", ())] for d in self.datasets},
            sources=self.sources,
            compute=self.compute,
        )
        check_sources(self.sources, {d.name: d for d in self.datasets}, self.max_steps)
        if self.serving is not None:
            if self.serving.dataset not in names:
                raise ValueError(
                    f"serving.dataset {self.serving.dataset!r} is not one of the datasets {names}"
                )
            if self.serving.traffic is not None:
                try:
                    refuse_non_table(self.dataset(self.serving.dataset), "serving.traffic")
                except ValueError as e:
                    raise ValueError(f"serving.dataset: {e}") from None
        try:
            check_harder(with_declared(self.curriculum))
        except ValueError as e:
            raise ValueError(f"curriculum: {e}") from None
        if self.space is not None:
            data = self.model_dump(mode="json", exclude={"space"})
            for path in self.space.parameters:
                read_parameter(data, path)
        return self

    def work(self) -> tuple[str, str]:
        """The kind of work the goal asks for (its dataset's kind) and the metric it is graded by."""
        spec = self.dataset(self.goal.dataset)
        return str(getattr(spec, "kind", DEFAULT_KIND)), goal_metric(self.goal, spec)

    def dataset(self, name: str) -> DatasetSpec:
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(name)
