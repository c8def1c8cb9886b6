"""Reward v2 without services: components, objectives, faults, shaping, constraints, the MO wrapper."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pydantic import ValidationError

from mlsandbox.env.reward_vector import MultiObjectiveReward
from mlsandbox.evaluation.constraints import check_action, check_budget, wrong_mitigation
from mlsandbox.evaluation.metrics import fault_metrics
from mlsandbox.evaluation.reward import (
    COMPONENTS,
    OBJECTIVES,
    Grade,
    RewardTracker,
    grade_episode,
    objective_vector,
)
from mlsandbox.faults.engine import FaultRecord
from mlsandbox.scenario import load_builtin
from mlsandbox.world.episode import DatasetRecord, EpisodeState, JobRecord

BASE = "tabular-quality-basic"


def _scenario(**update: Any) -> Any:
    base = load_builtin(BASE)
    data = base.model_dump(mode="json")
    for k, v in update.items():
        data[k] = {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
    return type(base).model_validate(data)


def _state(sc: Any = None) -> EpisodeState:
    return EpisodeState(episode_id="1-abc", scenario=sc or load_builtin(BASE), seed=1, sandbox="t")


def _grade(score: float, success: bool) -> Grade:
    return Grade("churn", "1", 0.8, score, success, "test")


def test_defaults_keep_the_v1_reward_of_existing_scenarios() -> None:
    st = _state()
    tr = RewardTracker()
    st.jobs["job-1"] = JobRecord("job-1", "b", "raw/x", "rf", 1, "succeeded", cpu_seconds=4.0)
    comps = tr.step(st, invalid=True, grade=None)
    w = st.scenario.reward
    assert comps["step_cost"] == -w.step_cost
    assert comps["compute"] == pytest.approx(-w.compute * 4.0)
    assert comps["invalid_action"] == -w.invalid_action
    # Nothing new is paid by default for job CPU-seconds, faults or shaping.
    assert comps["cpu_seconds"] == 0 and comps["fault_detected"] == 0 and comps["shaping"] == 0
    final = tr.step(st, invalid=False, grade=_grade(0.8, True), done=True)
    assert final["task"] == pytest.approx(w.task * 0.8) and final["success_bonus"] == w.success_bonus
    assert final["compute"] == 0.0  # no new credits since the last step


def test_every_component_is_named_and_the_vector_sums_to_the_reward() -> None:
    sc = _scenario(reward={"cpu_second": 0.1, "fault_detected": 1.0, "fault_mitigated": 2.0})
    st = _state(sc)
    st.serving.slo_violation_s, st.serving.risky_deployments = 30.0, 1
    st.charges.idle_reserved_credits = 4.0
    st.extra_credits = 2.0
    comps = RewardTracker().step(st, invalid=False, grade=_grade(1.0, True), done=True)
    assert list(comps) == list(COMPONENTS)
    vec = objective_vector(comps)
    assert list(vec) == list(OBJECTIVES)
    assert math.isclose(sum(vec.values()), sum(comps.values()))
    w = sc.reward
    assert comps["slo_violations"] == pytest.approx(-30 * w.slo_violation)
    assert comps["risky_deployments"] == pytest.approx(-w.risky_deployment)
    assert comps["idle_capacity"] == pytest.approx(-4 * w.idle_capacity)
    assert comps["compute"] == pytest.approx(-2 * w.compute)  # extra credits are credits
    assert vec["stability"] == pytest.approx(comps["slo_violations"] + comps["risky_deployments"])


def test_counters_are_paid_once_as_deltas() -> None:
    st = _state()
    tr = RewardTracker()
    st.serving.risky_deployments = 1
    assert tr.step(st, invalid=False, grade=None)["risky_deployments"] < 0
    assert tr.step(st, invalid=False, grade=None)["risky_deployments"] == 0
    st.serving.risky_deployments = 2
    assert tr.step(st, invalid=False, grade=None)["risky_deployments"] < 0


def _fault(**kw: Any) -> FaultRecord:
    base = dict(
        name="f",
        fault="kill_service",
        target="service:mlflow",
        params={},
        injected_step=2,
        injected_at=0.0,
        recovery="manual",
    )
    return FaultRecord(**{**base, **kw})


def test_problem_solving_pays_detection_and_mitigation_once_decaying_with_time() -> None:
    sc = _scenario(reward={"fault_detected": 1.0, "fault_mitigated": 2.0, "detect_half_life_steps": 2})
    st = _state(sc)
    tr = RewardTracker()
    rec = _fault()
    st.ground_truth.faults.append(rec)
    assert tr.step(st, invalid=False, grade=None)["fault_detected"] == 0
    rec.detected_step, rec.time_to_detect_s = 4, 3.0  # two steps after injection: half of the bonus
    c = tr.step(st, invalid=False, grade=None)
    assert c["fault_detected"] == pytest.approx(0.5) and c["fault_mitigated"] == 0
    rec.mitigated_step, rec.recovered_by, rec.recovered_step, rec.time_to_mitigate_s = 6, "agent", 6, 8.0
    c = tr.step(st, invalid=False, grade=None)
    assert c["fault_mitigated"] == pytest.approx(2.0 * 0.25) and c["fault_detected"] == 0
    assert tr.step(st, invalid=False, grade=None)["fault_mitigated"] == 0
    m = fault_metrics(st)
    assert m["faults_detected"] == 1 and m["faults_mitigated"] == 1
    assert (
        m["time_to_detect_steps"] == 2 and m["time_to_mitigate_steps"] == 4 and m["time_to_mitigate_s"] == 8
    )


def test_a_fault_that_merely_expired_is_not_the_agents_mitigation() -> None:
    sc = _scenario(reward={"fault_mitigated": 2.0})
    st = _state(sc)
    rec = _fault(recovery="auto", detected_step=3, mitigated_step=5, recovered_step=5, recovered_by="expiry")
    st.ground_truth.faults.append(rec)
    assert RewardTracker().step(st, invalid=False, grade=None)["fault_mitigated"] == 0
    # Not injected (unavailable here): nothing either way.
    st.ground_truth.faults[0] = _fault(error="unavailable", detected_step=3)
    assert RewardTracker().step(st, invalid=False, grade=None)["fault_detected"] == 0


def test_shaping_is_potential_based_and_sums_to_zero_over_an_episode() -> None:
    sc = _scenario(reward={"shaping": {"data_inspected": 0.5, "data_cleaned": 0.5, "model_registered": 1.0}})
    st = _state(sc)
    tr = RewardTracker()
    total = tr.step(st, action_type="check_data_quality", ok=True, invalid=False, grade=None)["shaping"]
    assert total == pytest.approx(0.5)
    total += tr.step(st, action_type="check_data_quality", ok=True, invalid=False, grade=None)["shaping"]
    assert total == pytest.approx(0.5)  # repeating a milestone pays nothing more
    st.datasets["clean/x.parquet"] = DatasetRecord("clean/x.parquet", "parquet", 1, "label", "clean_dataset")
    st.registered.append(("churn", "1"))
    total += tr.step(st, action_type="register_model", ok=True, invalid=False, grade=None)["shaping"]
    assert total == pytest.approx(2.0)
    total += tr.step(st, invalid=False, grade=_grade(1, True), done=True)["shaping"]
    assert total == pytest.approx(0.0)


def test_a_served_model_is_a_milestone_of_the_shaping() -> None:
    sc = _scenario(reward={"shaping": {"model_registered": 1.0, "model_served": 1.0}})
    st = _state(sc)
    tr = RewardTracker()
    st.registered.append(("churn", "1"))
    total = tr.step(st, action_type="register_model", ok=True, invalid=False, grade=None)["shaping"]
    assert total == pytest.approx(1.0)
    st.serving.served_version = "1"
    total += tr.step(st, action_type="deploy_model", ok=True, invalid=False, grade=None)["shaping"]
    assert total == pytest.approx(2.0)
    total += tr.step(st, invalid=False, grade=_grade(1, True), done=True)["shaping"]
    assert total == pytest.approx(0.0)


def test_unknown_shaping_milestone_is_a_scenario_error() -> None:
    with pytest.raises(ValidationError, match="shaping"):
        _scenario(reward={"shaping": {"free_points": 1.0}})


def test_a_violation_forfeits_the_task_reward() -> None:
    st = _state()
    c = RewardTracker().step(st, invalid=False, grade=_grade(1.0, True), violation=True, done=True)
    assert c["task"] == 0 and c["success_bonus"] == 0
    assert c["constraint_violation"] == -st.scenario.reward.constraint_violation


def test_forbidden_action_patterns() -> None:
    sc = _scenario(
        constraints={
            "forbidden_actions": [
                {"action": "delete_*", "params": {"dataset": "raw/*"}, "reason": "production data"},
                {"action": "restart_service", "params": {"service": "minio"}},
                {"action": "undeploy*"},
            ]
        }
    )
    assert check_action(sc, {"type": "delete_dataset", "dataset": "raw/customers.csv"}) is not None
    assert check_action(sc, {"type": "delete_dataset", "dataset": "clean/a.parquet"}) is None
    v = check_action(sc, {"type": "restart_service", "service": "minio"})
    assert v is not None and v.kind == "forbidden_action" and "service=minio" in v.message
    assert check_action(sc, {"type": "restart_service", "service": "mlflow"}) is None
    assert check_action(sc, {"type": "undeploy_model", "name": "churn"}) is not None
    assert check_action(sc, {"type": "list_datasets"}) is None
    # A parameter the action does not have does not match.
    assert check_action(sc, {"type": "delete_dataset"}) is None


def test_hard_budget_only_when_the_scenario_asks() -> None:
    soft = _state(_scenario(budget={"credits": 1.0}))
    soft.extra_credits = 5
    assert check_budget(soft) is None
    hard = _state(_scenario(budget={"credits": 1.0}, constraints={"budget": True}))
    hard.extra_credits = 0.5
    assert check_budget(hard) is None
    hard.extra_credits = 1.5
    v = check_budget(hard)
    assert v is not None and v.kind == "budget" and "1.50" in v.message


def test_unknown_goal_type_is_graded_zero_with_a_reason() -> None:
    st = _state()
    object.__setattr__(st.scenario.goal, "type", "nonexistent")
    try:
        g = grade_episode(st, tracking=None)  # type: ignore[arg-type]
    finally:
        object.__setattr__(st.scenario.goal, "type", "registered_model_auc")
    assert g.score == 0 and not g.success and "nonexistent" in g.reason


class _FakeEnv(gym.Env[int, int]):
    """An edge fake: returns fixed components, as the gateway's info does."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[int, dict[str, Any]]:
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        comps = dict.fromkeys(COMPONENTS, 0.0)
        comps.update(task=8.0, compute=-0.5, step_cost=-0.02, slo_violations=-0.3)
        return 0, float(sum(comps.values())), True, False, {"reward_components": comps}


def test_multi_objective_wrapper_vector_and_space() -> None:
    env = MultiObjectiveReward(_FakeEnv())
    env.reset()
    _, vec, *_, info = env.step(0)
    assert vec.shape == (len(OBJECTIVES),) and env.reward_space.contains(vec)
    assert dict(zip(env.reward_names, vec.tolist(), strict=True))["stability"] == pytest.approx(-0.3)
    assert float(vec.sum()) == pytest.approx(info["scalar_reward"], abs=1e-5)
    comp = MultiObjectiveReward(_FakeEnv(), level="components")
    comp.reset()
    _, v2, *_ = comp.step(0)
    assert v2.shape == (len(COMPONENTS),) and v2[COMPONENTS.index("task")] == 8.0
    assert np.isclose(v2.sum(), vec.sum())
    with pytest.raises(ValueError, match="level"):
        MultiObjectiveReward(_FakeEnv(), level="nope")  # type: ignore[arg-type]


def test_a_wrong_mitigation_is_matched_carried_out_and_paid_for_once() -> None:
    sc = load_builtin("serving-alert-feature-service-down")
    assert wrong_mitigation(sc, {"type": "scale", "deployment": "churn", "replicas": 3}) is not None
    assert wrong_mitigation(sc, {"type": "scale", "deployment": "churn", "replicas": 1}) is None
    assert wrong_mitigation(sc, {"type": "restart_service", "service": "feature-service"}) is None
    assert check_action(sc, {"type": "scale", "deployment": "churn", "replicas": 3}) is None  # not hard
    st, tr = _state(sc), RewardTracker()
    st.wrong_mitigations.append("scale(replicas=3)")
    assert tr.step(st, invalid=False, grade=None)["wrong_mitigations"] == -sc.reward.wrong_mitigation
    assert tr.step(st, invalid=False, grade=None)["wrong_mitigations"] == 0
    assert st.tallies()["wrong_mitigations"] == 1
