"""Anti reward-hacking and scenario validation on real episodes.

Degenerate strategies -- do nothing, repeat one cheap action, spam many tiny training jobs, deploy without
evaluating -- must score below the baseline on every scenario they apply to. The baseline is the rule agent
where it solves the scenario, else the scenario's reference solution (``scenarios validate`` checks that one
solves it). Every built-in scenario is validated here too (slow: one real episode per scenario and agent).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers import reference_episode

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import EpisodeResult, run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.sample import catalog_sample

pytestmark = pytest.mark.services

QUICK = "churn-clean-small"
CHEAP_STRATEGIES = ("do-nothing", "repeat-cheap")
"""Strategies that apply to every scenario (no training: quick to run)."""


@pytest.fixture()
def env(sandbox: Any):
    e = MLSandboxEnv(QUICK, sandbox=sandbox.name, start_sandbox=False)
    yield e
    e.close()


def _validated(env: MLSandboxEnv, scenario: str) -> Any:
    return reference_episode(env, scenario)[0]


def _run(env: MLSandboxEnv, agent: str, scenario: str, seed: int) -> EpisodeResult:
    return run_episode(env, make_agent(agent, seed=seed), seed=seed, scenario=load_builtin(scenario))


@pytest.mark.slow
def test_degenerate_strategies_score_below_the_rule_baseline(env: MLSandboxEnv) -> None:
    seed = 21
    rule = _run(env, "rule", QUICK, seed)
    assert rule.success, rule.grade
    scores = {"rule": rule.total_reward}
    results = {}
    for agent in (*CHEAP_STRATEGIES, "spam-jobs"):
        res = results[agent] = _run(env, agent, QUICK, seed)
        scores[agent] = res.total_reward
        assert res.total_reward < rule.total_reward, (agent, scores)
    # The job spammer did start its jobs and was charged for them -- it did not merely fail to act.
    spam = results["spam-jobs"]
    started = [s for s in spam.steps if isinstance(s.action, dict) and s.action["type"] == "train_model"]
    assert len(started) == 8 and not any(s.error for s in started)
    assert spam.components["compute"] < 0, spam.components


SAMPLE = catalog_sample()
"""The catalogue's representative sample (every kind, goal, fault, source, reference agent; see
mlsandbox.scenario.sample): the whole catalogue is validated by benchmarks/bench_catalog.py."""
SERVING = [sid for sid in SAMPLE if load_builtin(sid).goal.type == "deployment_slo"]
"""Scenarios graded on an SLO: their episodes run alone (``latency``), a loaded machine would break it."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario", [pytest.param(s, marks=pytest.mark.latency) if s in SERVING else s for s in SAMPLE]
)
def test_builtin_scenario_is_solved_by_its_reference_and_beats_cheap_strategies(
    env: MLSandboxEnv, scenario: str
) -> None:
    sc = load_builtin(scenario)
    if sc.reference_agent == "reference" and sc.goal.type != "registered_model_auc":
        pytest.skip(
            f"{scenario}: no reference solution declared for goal type {sc.goal.type!r} (reference_agent)"
        )
    v = _validated(env, scenario)
    assert v.solved, f"{scenario}: reference {v.reference} did not solve it: {v.reason}"
    for agent in CHEAP_STRATEGIES:
        res = _run(env, agent, scenario, sc.seed)
        assert res.total_reward < v.reward, (scenario, agent, res.total_reward, v.reward)
        assert not res.success


@pytest.mark.slow
@pytest.mark.latency
@pytest.mark.parametrize("scenario", SERVING)
def test_deploying_without_evaluation_scores_below_the_reference(env: MLSandboxEnv, scenario: str) -> None:
    sc = load_builtin(scenario)
    if sc.reference_agent == "reference":
        pytest.skip(
            f"{scenario}: no reference solution declared for goal type {sc.goal.type!r} (reference_agent)"
        )
    v = _validated(env, scenario)
    assert v.solved, f"{scenario}: reference {v.reference} did not solve it: {v.reason}"
    res = _run(env, "deploy-unevaluated", scenario, sc.seed)
    assert res.total_reward < v.reward, (scenario, res.total_reward, v.reward, res.components)
