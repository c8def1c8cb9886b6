"""What the sim twin learns is the real thing: a degenerate model fails in sim as it fails in real, the
trainer's hyperparameters are scikit-learn's own names, and nothing an agent reads names the twin.
(No services: the sim backend only. The fidelity tier compares the same probes with real local runs.)"""

from __future__ import annotations

import json

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.probes import PROBES
from mlsandbox.agents.runner import run_episode
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.fidelity.run import model_families
from mlsandbox.scenario import load_scenario

DEGENERATE = ("rf-stump", "mlp-one-epoch", "mlp-lr-tiny")
"""Models that are poor in real on the catalogue's tables: a forest of one stump, one epoch of an MLP, an
MLP whose learning rate is 1e-7 (the real trainer's holdout AUCs on the flagship family: 0.53, 0.66, 0.53)."""
SUCCEEDS_IN_REAL = {("churn-lake-bandwidth-deadline", "mlp-one-epoch"): 0.8194}
"""Where a probe is not poor in real, measured on local at the family's seed: one epoch of Adam over the
family's 20,000 rows is a hundred updates. There sim must agree that it succeeds."""


@pytest.fixture(scope="module")
def env():
    e = MLSandboxEnv(backend="sim", sandbox="probes-test")
    yield e
    e.close()


def binary_families() -> list[str]:
    """The model families of binary classification: the probes' premise (poor whatever the data) is
    measured there; on other kinds one epoch of an MLP can be a fair regressor, in sim as in real (the
    same real fit), which the per-kind fidelity figures compare."""
    return [f for f in model_families() if load_scenario(f).work()[0] == "tabular"]


@pytest.mark.parametrize("family", binary_families())
def test_degenerate_models_fail_in_sim_on_every_family(env: MLSandboxEnv, family: str) -> None:
    scenario = load_scenario(family)
    for probe in DEGENERATE:
        res = run_episode(
            env, make_agent(f"probe:{probe}", seed=scenario.seed), seed=scenario.seed, scenario=scenario
        )
        grade = res.grade or {}
        real = SUCCEEDS_IN_REAL.get((family, probe))
        if real is not None:
            assert grade.get("success") and grade["holdout_auc"] == pytest.approx(real, abs=0.01), grade
            continue
        assert not grade.get("success"), (
            f"{family}: {probe} succeeded in sim (holdout AUC {grade.get('holdout_auc')})"
        )


def test_a_good_model_on_the_same_data_succeeds(env: MLSandboxEnv) -> None:
    scenario = load_scenario("tabular-quality-basic")
    res = run_episode(env, make_agent("probe:gb-default", seed=7), seed=7, scenario=scenario)
    assert (res.grade or {}).get("success"), res.grade


def test_hyperparameters_as_scikit_learn_spells_them(env: MLSandboxEnv) -> None:
    from mlsandbox.env import decode_observation

    env.reset(seed=7, options={"scenario": "tabular-quality-basic"})
    train = {"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "logistic_regression"}
    obs, *_ = env.step({**train, "hyperparams": {"C": 0.5}})
    assert decode_observation(obs)["ok"], decode_observation(obs)
    obs, *_ = env.step({**train, "hyperparams": {"n_estimators": 5}})
    refused = decode_observation(obs)
    assert not refused["ok"]
    assert (
        "unknown hyperparameter" in refused["error"]["message"]
        and "n_estimators" in refused["error"]["message"]
    )


def test_config_reads_as_a_local_sandbox(env: MLSandboxEnv) -> None:
    from mlsandbox.env import decode_observation

    env.reset(seed=7, options={"scenario": "tabular-quality-basic"})
    obs, *_ = env.step({"type": "get_config"})
    text = json.dumps(decode_observation(obs))
    assert "sim" not in text.lower().replace("similar", ""), text
    assert "127.0.0.1:" in text


def test_every_probe_is_a_valid_agent() -> None:
    for name in PROBES:
        assert make_agent(f"probe:{name}").name == f"probe:{name}"
    with pytest.raises(ValueError, match="unknown probe"):
        make_agent("probe:nope")
