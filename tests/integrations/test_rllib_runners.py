"""RLlib on a local Ray cluster: PPO on the new API stack with two EnvRunner actors, each running its own
episodes on the session's shared sandbox, or on in-process sim sandboxes of its own, trained for a few
iterations; the env config and its errors."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import ray
from integration_helpers import run_example
from pydantic import ValidationError

from mlsandbox.integrations.rllib import (
    FAST_ACTIONS,
    ActionMaskObservation,
    RLlibEnvConfig,
    describe_runner,
    env_creator,
    ppo_config,
)

pytestmark = pytest.mark.integrations


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """One local Ray cluster for the module (2 CPUs: the machine's), shut down at its end; its address (the
    README example joins it rather than starting one of its own)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.services
def test_ppo_trains_with_two_env_runners_on_a_shared_sandbox(sandbox: Any, ray_cluster: str) -> None:
    config = ppo_config(sandbox=sandbox.name, num_env_runners=2, rollout_fragment_length=12, seed=3)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        views = algo.env_runner_group.foreach_env_runner(describe_runner, local_env_runner=False)
    finally:
        algo.stop()
    steps = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in results]
    assert steps == [24, 48, 72]  # 12 steps per runner per iteration, two runners
    last = results[-1]
    assert last["env_runners"]["num_episodes_lifetime"] >= 6
    assert np.isfinite(last["env_runners"]["episode_return_mean"])
    learner = last["learners"]["default_policy"]
    assert np.isfinite(learner["policy_loss"]) and learner["num_module_steps_trained"] > 0
    # Two Ray actors (processes of their own), each with its own episodes on the one shared sandbox; the
    # action mask kept every sampled action valid.
    assert (
        len(views) == 2
        and len({v["pid"] for v in views}) == 2
        and os.getpid() not in {v["pid"] for v in views}
    )
    assert {v["worker_index"] for v in views} == {1, 2}
    envs = [e for v in views for e in v["envs"]]
    assert {e["sandbox"] for e in envs} == {sandbox.name} and len({e["episode"] for e in envs}) == 2
    assert all(e["invalid_actions"] == 0 for e in envs), views


@pytest.mark.slow
def test_ppo_trains_with_two_env_runners_on_in_process_sim_envs(ray_cluster: str) -> None:
    config = ppo_config(
        backend="sim", sandbox="rl-sim", num_env_runners=2, rollout_fragment_length=12, seed=3
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        views = algo.env_runner_group.foreach_env_runner(describe_runner, local_env_runner=False)
    finally:
        algo.stop()
    steps = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in results]
    assert steps == [24, 48, 72]  # 12 steps per runner per iteration, two runners
    last = results[-1]
    assert last["env_runners"]["num_episodes_lifetime"] >= 6
    assert np.isfinite(last["env_runners"]["episode_return_mean"])
    assert np.isfinite(last["learners"]["default_policy"]["policy_loss"])
    # Two Ray actors, each with its env on a sim sandbox in its own process (no service anywhere).
    assert len({v["pid"] for v in views}) == 2 and os.getpid() not in {v["pid"] for v in views}
    envs = [e for v in views for e in v["envs"]]
    assert len(envs) == 2 and {e["backend"] for e in envs} == {"sim"}
    assert all(e["episode"] is not None and e["invalid_actions"] == 0 for e in envs), views


def test_env_config_spaces_and_errors() -> None:
    env = env_creator({"sandbox": "not-started"})  # nothing touches the sandbox before reset
    assert isinstance(env, ActionMaskObservation)
    space = env.observation_space
    n = env.action_space.n
    assert space["action_mask"].shape == (n,) and space["observations"].shape[0] > 0
    assert len(RLlibEnvConfig().action_types or []) == len(FAST_ACTIONS)
    env.close()
    with pytest.raises(ValidationError, match="colour"):
        env_creator({"colour": "red"})
    with pytest.raises(ValueError, match="needs backend='kube'"):
        env_creator({"sandbox_per_runner": True})
    with pytest.raises(ValueError, match="needs backend='kube'"):
        env_creator({"backend": "sim", "sandbox_per_runner": True})
    with pytest.raises(ValidationError, match="claim_prefix"):
        RLlibEnvConfig(claim_prefix="Bad_Prefix")


def test_readme_example(ray_cluster: str) -> None:  # on sim (its default); it joins the module's Ray
    done = run_example("rllib", {"MLSANDBOX_BACKEND": "sim", "RAY_ADDRESS": ray_cluster}, timeout=900)
    assert re.search(r"^env steps 12(\.0)? episode_return_mean -?\d", done.stdout, re.M), done.stdout
