"""Reward v2: a vector of named components per step, weighted by the scenario into the scalar reward.

Components (each already weighted by the scenario's ``reward`` section) and the objective each belongs to:

=====================  ===============  ==========================================================
component              objective        what it measures
=====================  ===============  ==========================================================
task                   task             the goal's grade in [0, 1] on hidden ground truth (last step)
success_bonus          task             once, when the goal is met
cpu_seconds            efficiency       CPU-seconds the episode's jobs used this step
idle_capacity          efficiency       credits of reserved capacity that sat idle (a pack counter)
compute                cost             credits consumed this step (jobs and anything packs charge)
slo_violations         stability        seconds of SLO violation of deployments (a pack counter)
risky_deployments      stability        risky deployments, e.g. without an evaluation (a pack counter)
fault_detected         problem_solving  a fault addressed for the first time (decays with time)
fault_mitigated        problem_solving  a fault whose symptom the agent made go away (decays)
wrong_mitigations      problem_solving  actions the scenario names wrong mitigations (scaling out while a
                                        dependency is down): carried out, and paid for here
step_cost              process          every step
invalid_action         process          every rejected action
constraint_violation   constraint       a hard constraint broken (the episode ends)
shaping                shaping          optional potential-based shaping (zero-sum per episode)
=====================  ===============  ==========================================================

``sum(components.values()) == reward`` always holds, and so does ``sum(vector.values()) == reward`` for
the per-objective vector (:func:`objective_vector`). A broken hard constraint forfeits the task reward.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsandbox.backends.protocols import Tracking
from mlsandbox.evaluation import holdout_memo
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)

COMPONENT_OBJECTIVE: dict[str, str] = {
    "task": "task",
    "success_bonus": "task",
    "cpu_seconds": "efficiency",
    "idle_capacity": "efficiency",
    "compute": "cost",
    "slo_violations": "stability",
    "risky_deployments": "stability",
    "fault_detected": "problem_solving",
    "fault_mitigated": "problem_solving",
    "wrong_mitigations": "problem_solving",
    "step_cost": "process",
    "invalid_action": "process",
    "constraint_violation": "constraint",
    "shaping": "shaping",
}
COMPONENTS: tuple[str, ...] = tuple(COMPONENT_OBJECTIVE)
OBJECTIVES: tuple[str, ...] = tuple(dict.fromkeys(COMPONENT_OBJECTIVE.values()))
MILESTONES: tuple[str, ...] = (
    "data_inspected",
    "data_cleaned",
    "job_succeeded",
    "model_registered",
    "model_served",
)
"""Milestones the optional shaping potential is made of (``reward.shaping`` weights)."""


def objective_vector(components: dict[str, float]) -> dict[str, float]:
    """The per-objective sums of a components dict (every objective present, in :data:`OBJECTIVES` order)."""
    out = dict.fromkeys(OBJECTIVES, 0.0)
    for name, value in components.items():
        out[COMPONENT_OBJECTIVE.get(name, "process")] += value
    return out


# ------------------------------------------------------------------------------------------------ grade


@dataclass(frozen=True)
class Grade:
    """The task grade at episode end (hidden ground truth: goes to ``info``, never to observations)."""

    model: str | None
    version: str | None
    auc: float | None
    score: float
    success: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    """Goal-type specific figures (added to :meth:`as_dict`)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "holdout_auc": None if self.auc is None else round(self.auc, 6),
            "score": round(self.score, 6),
            "success": self.success,
            "reason": self.reason,
            **self.details,
        }


Grader = Callable[[EpisodeState, Tracking], Grade]


def grade_registered_model_auc(state: EpisodeState, tracking: Tracking) -> Grade:
    """Grade the latest registered version of the goal's model on the hidden holdout."""
    goal = state.scenario.goal
    min_auc: float = getattr(goal, "min_auc", 0.75)  # every AUC goal has one
    scorer = getattr(goal, "scorer_environment", None)
    return grade_model_auc(state, tracking, goal.model_name, goal.dataset, min_auc, scorer=scorer)


def grade_model_auc(
    state: EpisodeState,
    tracking: Tracking,
    name: str,
    dataset: str,
    min_auc: float,
    own_deadline_s: float | None = None,
    scorer: list[str] | None = None,
) -> Grade:
    """The latest version of model ``name`` registered by its deadline, scored by ROC AUC on
    ``dataset``'s hidden holdout against ``min_auc``; with ``scorer`` (a production scorer's
    requirements), the probabilities are those the scorer answered at the episode's end."""
    versions, late = state.graded_versions(name, own_deadline_s)
    if not versions:
        reason = state.late_reason(name, late, own_deadline_s) if late else f"no model registered as {name!r}"
        return Grade(name, None, None, 0.0, False, reason)
    version = versions[-1]
    holdout = state.ground_truth.holdouts[dataset]
    target = state.scenario.dataset(dataset).target
    if scorer is not None:
        return _graded_by_scorer(state, name, version, holdout, target, min_auc, scorer)
    try:
        model = tracking.load_model(state.registry_name(name), version)
        # Imported after the load (and so when grading: importing this module stays quick): a tracker
        # may still be importing scikit-learn in a background thread until its load returns, and a
        # second import of it under way at the same time sees a partially initialised package.
        from sklearn.metrics import roc_auc_score

        def holdout_auc() -> float:
            x, y = holdout.drop(columns=[target]), holdout[target].to_numpy()
            proba = np.asarray(model.predict_proba(x))[:, 1]
            return float(roc_auc_score(y, proba))

        auc = holdout_memo.score(model, holdout, ("auc", target), holdout_auc)
    except Exception as e:  # a model that cannot score the holdout earns nothing
        log.info("grading failed: %s", e)
        return Grade(name, version, None, 0.0, False, f"model could not score the holdout: {e}")
    return _auc_grade(name, version, auc, min_auc)


def _auc_grade(name: str, version: str, auc: float, min_auc: float, how: str = "") -> Grade:
    """The grade of a holdout AUC against ``min_auc``: 0 at chance, 1 at the bar (``how`` ends the reason)."""
    if not np.isfinite(auc):
        return Grade(name, version, None, 0.0, False, "holdout AUC is not finite")
    score = float(np.clip((auc - 0.5) / (min_auc - 0.5), 0.0, 1.0))
    success = auc >= min_auc
    reason = f"holdout AUC {auc:.4f} {'>=' if success else '<'} {min_auc}{how}"
    return Grade(name, version, auc, score, success, reason)


def _graded_by_scorer(
    state: EpisodeState, name: str, version: str, holdout: Any, target: str, min_auc: float, scorer: list[str]
) -> Grade:
    from sklearn.metrics import roc_auc_score

    where = "the production scorer (" + ", ".join(scorer) + ")"
    scored = state.scored.get((name, version))
    if scored is None:
        return Grade(name, version, None, 0.0, False, f"{where} did not score the model")
    if scored.proba is None:
        return Grade(name, version, None, 0.0, False, f"{where} could not score the model: {scored.problem}")
    auc = float(roc_auc_score(holdout[target].to_numpy(), np.asarray(scored.proba)))
    return _auc_grade(name, version, auc, min_auc, f", scored by {where}")


def _grade_deployment_slo(state: EpisodeState, tracking: Tracking) -> Grade:
    from mlsandbox.evaluation.serving_grade import grade_deployment_slo  # imports Grade from here

    return grade_deployment_slo(state, tracking)


def _grade_registered_model_metric(state: EpisodeState, tracking: Tracking) -> Grade:
    from mlsandbox.evaluation.metric_grade import grade_registered_model_metric  # imports Grade from here

    return grade_registered_model_metric(state, tracking)


def _grade_registered_models(state: EpisodeState, tracking: Tracking) -> Grade:
    from mlsandbox.evaluation.models_grade import grade_registered_models  # imports Grade from here

    return grade_registered_models(state, tracking)


def _grade_predictions_file(state: EpisodeState, tracking: Tracking) -> Grade:
    from mlsandbox.evaluation.predictions_grade import grade_predictions_file  # imports Grade from here

    return grade_predictions_file(state, tracking)


GRADERS: dict[str, Grader] = {
    "registered_model_auc": grade_registered_model_auc,
    "registered_model_metric": _grade_registered_model_metric,
    "predictions_file": _grade_predictions_file,
    "deployment_slo": _grade_deployment_slo,
    "registered_models": _grade_registered_models,
}
"""One grader per goal ``type`` (a new goal type adds its grader here)."""


def grade_episode(state: EpisodeState, tracking: Tracking) -> Grade:
    """Grade the episode by its goal's type."""
    goal = state.scenario.goal
    grader = GRADERS.get(goal.type)
    if grader is None:
        return Grade(None, None, None, 0.0, False, f"no grader for goal type {goal.type!r}")
    return grader(state, tracking)


# ----------------------------------------------------------------------------------------------- faults


def _decay(rec: Any, step: int | None, half_life: float) -> float:
    if step is None:
        return 0.0
    return float(0.5 ** (max(0, step - rec.injected_step) / half_life))


def agent_mitigated(rec: Any) -> bool:
    """Whether the agent made a fault's symptom go away (not merely outlasted its duration)."""
    if rec.error is not None or rec.mitigated_step is None or rec.detected_step is None:
        return False
    return not (rec.recovered_by == "expiry" and rec.recovered_step == rec.mitigated_step)


# ------------------------------------------------------------------------------------------- the tracker


@dataclass
class RewardTracker:
    """Turns the episode state after each step into weighted components (remembers what it has paid)."""

    credits: float = 0.0
    cpu_seconds: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)
    detected: set[int] = field(default_factory=set)
    mitigated: set[int] = field(default_factory=set)
    milestones: set[str] = field(default_factory=set)
    potential: float = 0.0

    def _counter_delta(self, name: str, now: float) -> float:
        """How much the episode's tally ``name`` (now ``now``) grew since the last step."""
        delta = now - self.counters.get(name, 0.0)
        self.counters[name] = now
        return max(0.0, delta)

    def step(
        self,
        state: EpisodeState,
        *,
        action_type: str | None = None,
        ok: bool = True,
        invalid: bool,
        grade: Grade | None,
        violation: bool = False,
        done: bool = False,
    ) -> dict[str, float]:
        """The weighted components of one step. ``grade`` is given on the final step only."""
        w = state.scenario.reward
        credits, cpu = state.credits_used, state.cpu_seconds
        credits_delta, cpu_delta = max(0.0, credits - self.credits), max(0.0, cpu - self.cpu_seconds)
        self.credits, self.cpu_seconds = credits, cpu
        comps = dict.fromkeys(COMPONENTS, 0.0)
        comps["step_cost"] = -w.step_cost
        comps["compute"] = -w.compute * credits_delta
        comps["cpu_seconds"] = -w.cpu_second * cpu_delta
        idle = self._counter_delta("idle_reserved_credits", state.charges.idle_reserved_credits)
        comps["idle_capacity"] = -w.idle_capacity * idle
        slo = self._counter_delta("slo_violation_s", state.serving.slo_violation_s)
        comps["slo_violations"] = -w.slo_violation * slo
        risky = self._counter_delta("risky_deployments", float(state.serving.risky_deployments))
        comps["risky_deployments"] = -w.risky_deployment * risky
        comps["invalid_action"] = -w.invalid_action if invalid else 0.0
        wrong = self._counter_delta("wrong_mitigations", float(len(state.wrong_mitigations)))
        comps["wrong_mitigations"] = -w.wrong_mitigation * wrong
        for i, rec in enumerate(state.ground_truth.faults):
            if rec.error is not None:
                continue
            if i not in self.detected and rec.detected_step is not None:
                self.detected.add(i)
                comps["fault_detected"] += w.fault_detected * _decay(
                    rec, rec.detected_step, w.detect_half_life_steps
                )
            if i not in self.mitigated and agent_mitigated(rec):
                self.mitigated.add(i)
                comps["fault_mitigated"] += w.fault_mitigated * _decay(
                    rec, rec.mitigated_step, w.detect_half_life_steps
                )
        if violation:
            comps["constraint_violation"] = -w.constraint_violation
        elif grade is not None:
            comps["task"] = w.task * grade.score
            comps["success_bonus"] = w.success_bonus if grade.success else 0.0
        self._reach(state, action_type, ok)
        if w.shaping:
            reached = sum(v for m, v in w.shaping.items() if m in self.milestones)
            new = 0.0 if (done or grade is not None) else reached
            comps["shaping"] = new - self.potential
            self.potential = new
        return comps

    def _reach(self, state: EpisodeState, action_type: str | None, ok: bool) -> None:
        if action_type == "check_data_quality" and ok:
            self.milestones.add("data_inspected")
        if any(d.origin != "scenario" for d in state.datasets.values()):
            self.milestones.add("data_cleaned")
        if any(j.state == "succeeded" for j in state.jobs.values()):
            self.milestones.add("job_succeeded")
        if any(n == state.scenario.goal.model_name for n, _ in state.registered):
            self.milestones.add("model_registered")
        if state.serving.served_version is not None:
            self.milestones.add("model_served")


def step_components(
    state: EpisodeState, *, invalid: bool, credits_delta: float, grade: Grade | None
) -> dict[str, float]:
    """The v1 components of one step (task, success bonus, step cost, compute, invalid action)."""
    w = state.scenario.reward
    comps = {
        "task": 0.0,
        "success_bonus": 0.0,
        "step_cost": -w.step_cost,
        "compute": -w.compute * max(0.0, credits_delta),
        "invalid_action": -w.invalid_action if invalid else 0.0,
    }
    if grade is not None:
        comps["task"] = w.task * grade.score
        comps["success_bonus"] = w.success_bonus if grade.success else 0.0
    return comps
