"""Episodes on the sim backend: determinism by seed, every built-in scenario's reference (and rule)
episode, the Gymnasium checker, vectorised envs. No service is started: the sim backend runs in-process."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.scenario import catalog_ids, load_builtin

RULE_SOLVES = (
    "tabular-quality-basic",
    "churn-clean-small",
    "churn-imbalanced-missing",
    "churn-compliance-guardrails",
)
"""Scenarios the rule agent solves on local (no fault in its way, no data source to fetch from)."""


def _env(scenario: str = "tabular-quality-basic", **kw: Any) -> MLSandboxEnv:
    return MLSandboxEnv(scenario, backend="sim", sandbox="sim-test", **kw)


def _trajectory(scenario: str, seed: int, actions: list[Any] | None = None) -> list[dict[str, Any]]:
    """Every (observation, reward, flags, info without wall-clock timings) of one episode on a fresh sim
    sandbox: a fixed action list, or the scenario's reference agent."""
    env = _env(scenario)
    out: list[dict[str, Any]] = []
    try:
        obs, info = env.reset(seed=seed)
        info.pop("timings", None)
        out.append({"obs": obs["text"], "info": info})
        agent = None if actions is not None else make_agent(load_builtin(scenario).reference_agent, seed=seed)
        current = decode_observation(obs)
        if agent is not None:
            agent.reset(current, seed=seed)
        for k in range(200):
            if actions is not None:
                if k >= len(actions):
                    break
                action = actions[k]
            else:
                assert agent is not None
                action = agent.act(current)
            obs, reward, terminated, truncated, info = env.step(action)
            info.pop("timings", None)
            current = decode_observation(obs)
            out.append({"obs": obs["text"], "reward": reward, "done": [terminated, truncated], "info": info})
            if terminated or truncated:
                break
    finally:
        env.close()
    return out


SCRIPT: list[Any] = [
    {"type": "list_datasets"},
    {"type": "wait", "seconds": "soon"},
    "not json",
    {"type": "check_data_quality", "dataset": "raw/customers.parquet"},
    {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "drop_na"},
    {"type": "train_model", "dataset": "clean/customers-drop-na.parquet", "algorithm": "mlp",
     "hyperparams": {"learning_rate_init": 1000.0}},
    {"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "logistic_regression"},
    {"type": "train_model", "dataset": "clean/customers-drop-na.parquet", "algorithm": "random_forest",
     "hyperparams": {"n_estimators": 20}},
    {"type": "wait", "seconds": 60},
    {"type": "wait", "seconds": 60},
    {"type": "wait", "seconds": 60},
    {"type": "get_job", "job_id": "job-1"},
    {"type": "get_job", "job_id": "job-2"},
    {"type": "get_job", "job_id": "job-3"},
    {"type": "list_runs"},
    {"type": "search_runs", "filter": "metrics.val_auc > 0.5", "order_by": ["metrics.val_auc DESC"]},
]  # fmt: skip


def test_two_runs_with_the_same_seed_and_actions_are_identical_ids_included() -> None:
    first = _trajectory("tabular-quality-basic", 11, SCRIPT)
    second = _trajectory("tabular-quality-basic", 11, SCRIPT)
    assert first == second
    obs = [json.loads(s["obs"]) for s in first]
    assert obs[6]["result"]["job_id"] == "job-1"
    # What happened is visible in the trajectory, ids and all: a diverged mlp, a refused NaN, a forest.
    jobs = {o["result"]["job_id"]: o["result"] for o in obs[12:15]}
    assert jobs["job-1"]["state"] == "failed" and "TrainingDiverged" in jobs["job-1"]["log_tail"]
    assert jobs["job-2"]["state"] == "failed" and "contains NaN" in jobs["job-2"]["log_tail"]
    assert jobs["job-3"]["state"] == "succeeded" and len(jobs["job-3"]["run_id"]) == 32
    assert first[0]["info"]["episode_id"] == second[0]["info"]["episode_id"]
    assert obs[-1]["result"]["count"] == 1


def test_another_seed_gives_another_episode() -> None:
    a = _trajectory("tabular-quality-basic", 11, SCRIPT[:5])
    b = _trajectory("tabular-quality-basic", 12, SCRIPT[:5])
    assert a[0]["info"]["episode_id"] != b[0]["info"]["episode_id"]
    assert a[4]["obs"] != b[4]["obs"]  # other rows: another profile


@pytest.mark.parametrize("scenario", catalog_ids())
def test_every_scenario_reference_episode_succeeds_and_is_reproducible(scenario: str) -> None:
    sc = load_builtin(scenario)
    first = _trajectory(scenario, sc.seed)
    last = first[-1]
    assert last["done"][0] or last["done"][1]
    assert last["info"]["grade"]["success"], last["info"]["grade"]
    assert not last["info"].get("constraint_violation")
    assert _trajectory(scenario, sc.seed) == first


@pytest.mark.parametrize("scenario", catalog_ids())
def test_every_scenario_rule_episode_runs(scenario: str) -> None:
    sc = load_builtin(scenario)
    env = _env(scenario)
    try:
        res = run_episode(env, make_agent("rule", seed=sc.seed), seed=sc.seed, scenario=sc)
    finally:
        env.close()
    assert res.terminated or res.truncated
    assert res.grade is not None
    if scenario in RULE_SOLVES:
        assert res.success, res.grade


def test_the_env_passes_gymnasiums_checker_on_sim() -> None:
    # Registered as nondeterministic (info carries wall-clock timings; on local, steps run real
    # processes); the determinism of sim episodes themselves is the first test of this module.
    env = gym.make("mlsandbox/MLSandbox-v0", backend="sim", sandbox="sim-check")
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_make_vec_runs_independent_sim_episodes() -> None:
    envs = gym.make_vec(
        "mlsandbox/MLSandbox-v0", num_envs=3, vectorization_mode="async", backend="sim", sandbox="sim-vec"
    )
    try:
        obs, infos = envs.reset(seed=[1, 2, 3])
        assert len(set(infos["episode_id"])) == 3
        assert list(obs["step"]) == [0, 0, 0]
        actions = [json.dumps({"type": "list_datasets"}), json.dumps({"type": "wait", "seconds": 5}), "{"]
        obs, rewards, _, _, infos = envs.step(actions)
        assert list(obs["ok"]) == [1, 1, 0]
        assert list(obs["step"]) == [1, 1, 1]
        assert rewards[2] < rewards[0]  # the malformed action's penalty
    finally:
        envs.close()
