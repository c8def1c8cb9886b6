"""Episodes end to end on real services: the rule agent, bad input, determinism, isolation, check_env."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from mlflow import MlflowClient

import mlsandbox  # noqa: F401  (registers the env)
from mlsandbox.agents import RandomAgent, RuleAgent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.perturbations import Perturbation

pytestmark = pytest.mark.services

SCENARIO = "tabular-quality-basic"


@pytest.fixture()
def env(sandbox: Any):
    e = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    yield e
    e.close()


@pytest.fixture(scope="module")
def mlflow_client(sandbox: Any) -> MlflowClient:
    url = sandbox.endpoints().mlflow_url
    return MlflowClient(tracking_uri=url, registry_uri=url)


def _keys(s3: Any, bucket: str) -> list[str]:
    resp = s3.list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in resp.get("Contents", []))


def _snapshot(env: MLSandboxEnv, s3: Any, client: MlflowClient) -> dict[str, Any]:
    st = env.gateway.state
    buckets = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
    objects = {
        b: [(o["Key"], o["ETag"]) for o in s3.list_objects_v2(Bucket=b).get("Contents", [])] for b in buckets
    }
    runs = sorted(r.info.run_id for r in client.search_runs([st.experiment_id]))
    models = sorted(m.name for m in client.search_registered_models())
    return {"buckets": buckets, "objects": objects, "runs": runs, "models": models}


def test_rule_agent_full_episode(env: MLSandboxEnv, s3: Any, mlflow_client: MlflowClient) -> None:
    res = run_episode(env, RuleAgent(), seed=7)
    st = env.gateway.state
    assert res.terminated and not res.truncated
    assert res.grade is not None and res.grade["success"], res.grade
    assert res.grade["holdout_auc"] >= 0.75
    # A registered model version exists in the real MLflow registry.
    versions = mlflow_client.search_model_versions(f"name='{st.registry_name('churn')}'")
    assert len(versions) == 1 and versions[0].status == "READY"
    # Cleaned data exists in the real MinIO bucket, next to the untouched raw data.
    keys = _keys(s3, st.bucket)
    assert "raw/customers.csv" in keys and "raw/customers.parquet" in keys
    assert any(k.startswith("clean/") for k in keys), keys
    # The reward components add up to the reward, every step.
    assert abs(sum(res.components.values()) - res.total_reward) < 1e-9
    assert res.components["task"] > 0 and res.components["compute"] < 0
    # Closing the episode removes its bucket and registered model.
    env.close()
    assert st.bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert mlflow_client.search_model_versions(f"name='{st.registry_name('churn')}'") == []


@pytest.mark.slow
def test_rule_agent_beats_random_agent_on_the_same_seeds(env: MLSandboxEnv) -> None:
    seeds = [11, 12]
    rule = [run_episode(env, RuleAgent(), seed=s).total_reward for s in seeds]
    rand = [run_episode(env, RandomAgent(seed=s), seed=s).total_reward for s in seeds]
    assert min(rule) > max(rand), (rule, rand)


BAD_ACTIONS: list[tuple[Any, str]] = [
    ("{this is not json", "invalid_json"),
    ("[1, 2, 3]", "invalid_json"),
    ({"type": "drop_all_tables"}, "unknown_action"),
    ({"type": "train_model", "dataset": "raw/customers.csv", "algorithm": "svm"}, "invalid_parameters"),
    ({"type": "wait", "seconds": "a while"}, "invalid_parameters"),
    ({"type": "check_data_quality", "dataset": "raw/does-not-exist.csv"}, "not_found"),
    ({"type": "train_model", "dataset": "raw/nope.parquet", "algorithm": "random_forest"}, "not_found"),
    ({"type": "get_job", "job_id": "job-99"}, "not_found"),
    ({"type": "register_model", "run_id": "0" * 32, "name": "churn"}, "not_found"),
    ({"type": "check_data_quality", "dataset": "../other/raw/customers.csv"}, "invalid_parameters"),
    (
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.csv",
            "strategy": "drop_na",
            "output": "../../escape.csv",
        },
        "invalid_parameters",
    ),
    (
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.csv",
            "strategy": "drop_na",
            "output": "raw/customers.csv",
        },
        "forbidden_name",
    ),
    (
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.csv",
            "strategy": "drop_na",
            "output": "clean/x.txt",
        },
        "invalid_parameters",
    ),
]


def test_bad_inputs_give_error_observations_and_change_nothing(
    env: MLSandboxEnv, s3: Any, mlflow_client: MlflowClient
) -> None:
    env.reset(seed=3)
    before = _snapshot(env, s3, mlflow_client)
    weight = env.scenario.reward.invalid_action
    for raw, code in BAD_ACTIONS:
        obs, reward, terminated, _truncated, info = env.step(raw)
        o = decode_observation(obs)
        assert o["ok"] is False and obs["ok"] == 0, raw
        assert o["error"]["code"] == code, (raw, o["error"])
        assert o["error"]["message"]
        assert info["error"] == code
        assert info["reward_components"]["invalid_action"] == -weight
        assert reward < 0 and not terminated
    assert _snapshot(env, s3, mlflow_client) == before
    assert env.gateway.state.invalid_actions == len(BAD_ACTIONS)
    # The field path of a wrong type is in the observation.
    o = decode_observation(env.step({"type": "wait", "seconds": "x"})[0])
    assert o["error"]["details"][0]["field"] == "seconds"


def test_failed_training_job_shows_the_real_error(env: MLSandboxEnv) -> None:
    env.reset(seed=4)
    o = decode_observation(
        env.step({"type": "train_model", "dataset": "raw/customers.csv", "algorithm": "logistic_regression"})[
            0
        ]
    )
    job = o["result"]["job_id"]
    for _ in range(12):
        o = decode_observation(env.step({"type": "wait", "seconds": 10})[0])
        if all(j["state"] in ("failed", "succeeded") for j in o["result"]["jobs"]):
            break
    o = decode_observation(env.step({"type": "get_job", "job_id": job})[0])
    assert o["result"]["state"] == "failed", o
    assert o["result"]["exit_code"] not in (0, None)
    assert "Input X contains NaN" in o["result"]["log_tail"]


def test_same_seed_same_first_observation_and_data(env: MLSandboxEnv, s3: Any) -> None:
    def episode(seed: int) -> tuple[dict, str, str, str, str]:
        obs, info = env.reset(seed=seed)
        st = env.gateway.state
        pq = hashlib.sha256(
            s3.get_object(Bucket=st.bucket, Key="raw/customers.parquet")["Body"].read()
        ).hexdigest()
        csv = hashlib.sha256(
            s3.get_object(Bucket=st.bucket, Key="raw/customers.csv")["Body"].read()
        ).hexdigest()
        truth = json.dumps(st.ground_truth.manifests, sort_keys=True, default=str)
        return obs, pq, csv, truth, info["episode_id"]

    a_obs, a_pq, a_csv, a_truth, a_id = episode(21)
    b_obs, b_pq, b_csv, b_truth, b_id = episode(21)
    _, c_pq, c_csv, c_truth, _ = episode(22)
    assert a_obs == b_obs  # identical first observation: ids live in info only
    assert a_id != b_id
    assert (a_pq, a_csv, a_truth) == (b_pq, b_csv, b_truth)  # hash-equal data, identical ground truth
    assert c_pq != a_pq and c_csv != a_csv and c_truth != a_truth


def test_observations_never_contain_ground_truth(env: MLSandboxEnv) -> None:
    obs, _ = env.reset(seed=5)
    texts = [obs["text"]]
    for a in (
        {"type": "list_datasets"},
        {"type": "check_data_quality", "dataset": "raw/customers.csv"},
        {"type": "list_runs"},
    ):
        texts.append(env.step(a)[0]["text"])
    blob = "\n".join(texts)
    for secret in ("holdout", "manifest", "bayes", "injected", "row_indices", "ground_truth"):
        assert secret not in blob.lower(), secret


def test_episodes_are_isolated(sandbox: Any, s3: Any) -> None:
    a = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    b = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        a.reset(seed=1)
        b.reset(seed=1)
        sa, sb = a.gateway.state, b.gateway.state
        assert sa.bucket != sb.bucket and sa.experiment_id != sb.experiment_id
        a.step(
            {
                "type": "clean_dataset",
                "dataset": "raw/customers.csv",
                "strategy": "drop_na",
                "output": "clean/only-a.csv",
            }
        )
        o = decode_observation(b.step({"type": "check_data_quality", "dataset": "clean/only-a.csv"})[0])
        assert o["error"]["code"] == "not_found"
        assert "clean/only-a.csv" not in _keys(s3, sb.bucket)
    finally:
        a.close()
        b.close()


def test_check_env_passes(sandbox: Any) -> None:
    env = gym.make("mlsandbox/MLSandbox-v0", scenario=SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_scenario_with_a_perturbation_plan_runs(env: MLSandboxEnv) -> None:
    sc = load_builtin(SCENARIO).model_copy(
        update={
            "perturbations": [
                Perturbation.model_validate(
                    {"name": "x", "when": {"at_step": 1}, "fault": {"type": "job_timeout", "timeout_s": 5}}
                )
            ]
        }
    )
    env.reset(seed=1, options={"scenario": sc})
    env.step({"type": "list_datasets"})
    assert env.gateway is not None
    assert [r.name for r in env.gateway.state.ground_truth.faults] == ["x"]
