"""Validity gates: an instance is kept only when its reference agent succeeds in ``sim`` and the random
and no-op agents fail; the rule agent's result and the reference margin estimate its difficulty."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import EpisodeResult, run_episode
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.instances.models import (
    AgentRun,
    Difficulty,
    Instance,
    Rejection,
    instance_id,
    materialize,
    params_hash,
    scenario_hash,
)
from mlsandbox.scenario import Scenario
from mlsandbox.tasks.registry import kind_of

MARGIN_SCALE = 0.10
"""A reference margin of this much or more counts as easy (difficulty contribution 0)."""


def sim_env(name: str) -> MLSandboxEnv:
    """A ``sim`` sandbox for gate episodes (in memory: nothing to start or clean up on disk)."""
    return MLSandboxEnv(backend="sim", sandbox=name, start_sandbox=True)


def margin(scenario: Scenario, grade: dict[str, Any] | None) -> float | None:
    """How far past the goal's bar a graded outcome is (None when the goal has no such number): the
    holdout AUC minus ``min_auc`` for an AUC goal; for a goal on another metric (``holdout_metric``
    against its ``bar``), the distance past the bar in the metric's direction, relative to the bar
    (0.1: ten per cent better than asked)."""
    if not grade:
        return None
    threshold = getattr(scenario.goal, "min_auc", None)
    auc = grade.get("holdout_auc")
    if isinstance(threshold, int | float) and isinstance(auc, int | float):
        return round(float(auc) - float(threshold), 6)
    value, bar, name = grade.get("holdout_metric"), grade.get("bar"), grade.get("metric")
    if not (
        isinstance(value, int | float) and isinstance(bar, int | float) and bar and isinstance(name, str)
    ):
        return None
    spec = scenario.dataset(scenario.goal.dataset)
    past = (
        float(value) - float(bar)
        if kind_of(spec).metric(name).direction == "max"
        else float(bar) - float(value)
    )
    return round(past / abs(float(bar)), 6)


def _run(env: MLSandboxEnv, scenario: Scenario, agent: str, label: str) -> AgentRun:
    res: EpisodeResult = run_episode(
        env, make_agent(agent, seed=scenario.seed), seed=scenario.seed, scenario=scenario
    )
    grade = res.grade or {}
    violation = res.final_info.get("constraint_violation") or {}
    reason = str(grade.get("reason", "not graded"))
    if violation:
        reason = f"constraint broken: {violation.get('message')}"
    return AgentRun(
        agent=label,
        success=res.success and not violation,
        score=float(grade.get("score") or 0.0),
        reason=reason,
        steps=len(res.steps),
        margin=margin(scenario, grade) if res.success else None,
    )


def difficulty(reference: AgentRun, rule: AgentRun) -> Difficulty:
    m = reference.margin
    from_margin = 0.5 if m is None else 1.0 - min(max(m, 0.0) / MARGIN_SCALE, 1.0)
    return Difficulty(
        estimate=round(0.5 * from_margin + (0.0 if rule.success else 0.5), 3),
        reference_margin=m,
        rule_success=rule.success,
    )


def check(env: MLSandboxEnv, family: Scenario, params: dict[str, Any]) -> Instance | Rejection:
    """Build the instance and run its gates (cheapest first; the first failure rejects it). Native
    thread pools are held to one thread: gates run side by side, and on a busy machine the default
    pools spin more than they compute (grading a boosted model slows about fourfold)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _check(env, family, params)


def _check(env: MLSandboxEnv, family: Scenario, params: dict[str, Any]) -> Instance | Rejection:
    iid = instance_id(family.id, params)

    def reject(gate: Any, reason: str) -> Rejection:
        return Rejection(id=iid, family=family.id, params=params, gate=gate, reason=reason)

    try:
        scenario = materialize(family, params)
    except (ValidationError, ValueError) as e:
        return reject("builds", " ".join(str(e).split())[:500])
    noop = _run(env, scenario, "do-nothing", "no-op")
    if noop.success:
        return reject("no-op", f"the no-op agent succeeds ({noop.reason})")
    ref = _run(env, scenario, scenario.reference_agent, "reference")
    if not ref.success:
        return reject("reference", f"the reference agent fails: {ref.reason}")
    rnd = _run(env, scenario, "random", "random")
    if rnd.success:
        return reject("random", f"the random agent succeeds ({rnd.reason})")
    rule = _run(env, scenario, "rule", "rule")
    return Instance(
        id=iid,
        family=family.id,
        params=params,
        params_sha256=params_hash(family.id, params),
        scenario_sha256=scenario_hash(scenario),
        difficulty=difficulty(ref, rule),
        gates=[noop, ref, rnd, rule],
    )


__all__ = ["MARGIN_SCALE", "check", "difficulty", "margin", "sim_env"]
