"""RL on real services: the masked wrapper never offers an action the gateway rejects; PPO learns.

The PPO test trains Stable-Baselines3's PPO (the ``mlsandbox[rl]`` extra, PyTorch on the CPU) on the
``rl-fast`` scenario (300 rows with gaps, 10 steps) with a small discrete action set, for a fixed budget of steps,
then compares the learnt policy with the uniform random policy over the same action space on the same
seeds. The budget is a step count, never a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlsandbox.env.wrappers import DiscreteActions, FlatObservation, make_rl_env
from mlsandbox.errors import ActionError
from mlsandbox.gateway.dispatcher import parse_action
from mlsandbox.gateway.registry import get_catalog

pytestmark = pytest.mark.services

FAST = str(Path(__file__).parents[2] / "src" / "mlsandbox" / "env" / "scenarios" / "rl-fast.yaml")
FAST_TYPES = ["list_datasets", "train_model", "wait", "register_model", "submit"]


def _check_read_only_slots(env: DiscreteActions) -> int:
    """Carry out every unmasked read-only slot on the real gateway (they change nothing): none may fail."""
    gw = env.unwrapped.gateway  # type: ignore[attr-defined]
    read_only = get_catalog().read_only
    checked = 0
    for action, ok in env.slots():
        if ok and action["type"] in read_only:
            model = parse_action(action)
            try:
                gw._packs.handlers[action["type"]](gw.episode, model)
            except ActionError as e:  # pragma: no cover - the assertion below reports it
                raise AssertionError(f"unmasked {action} rejected: {e.code}: {e.message}") from None
            checked += 1
    return checked


def test_masked_wrapper_never_unmasks_an_action_the_gateway_rejects(sandbox: Any) -> None:
    env = make_rl_env(FAST, sandbox=sandbox.name, start_sandbox=False, max_jobs=3, wait_seconds=(1.0,))
    rng = np.random.default_rng(0)
    taken: set[str] = set()
    try:
        assert isinstance(env.observation_space.shape, tuple)
        for seed in range(4):
            obs, info = env.reset(seed=seed)
            assert env.observation_space.contains(obs)
            done = False
            while not done:
                mask = info["action_mask"]
                assert mask.dtype == bool and mask.shape == (env.action_space.n,)
                assert not any(
                    ok for (a, ok) in env.slots() if a["type"] in ("restart_service", "set_job_resources")
                )
                assert _check_read_only_slots(env) > 0
                # Random among the valid slots, preferring action types not tried yet (submit last).
                valid = np.flatnonzero(mask)
                fresh = [i for i in valid if env.slot_types[i] not in taken | {"submit"}]
                choice = int(rng.choice(fresh or valid))
                obs, _r, terminated, truncated, info = env.step(choice)
                assert info["error"] is None, (env.slot_types[choice], info)
                assert not info["masked_choice"]
                assert env.observation_space.contains(obs)
                taken.add(env.slot_types[choice])
                done = terminated or truncated
        # A masked choice sends nothing to the sandbox: an unknown-action error observation, penalised.
        env.reset(seed=9)
        masked = int(np.flatnonzero(~env.action_masks())[0])
        _, reward, _, _, info = env.step(masked)
        assert info["masked_choice"] and info["error"] == "unknown_action" and reward < 0
    finally:
        env.close()
    assert {"train_model", "clean_dataset", "check_data_quality"} <= taken


def test_unknown_pack_actions_stay_masked(sandbox: Any) -> None:
    from mlsandbox.env.gym_env import MLSandboxEnv

    env = DiscreteActions(
        FlatObservation(MLSandboxEnv(FAST, sandbox=sandbox.name, start_sandbox=False)),
        templates={},
    )
    try:
        env.reset(seed=1)
        fallback = [t for t in env.slot_types if t not in env.curated]
        assert "set_job_resources" in fallback
        masks = env.action_masks()
        assert not any(m for t, m in zip(env.slot_types, masks, strict=True) if t in fallback)
    finally:
        env.close()


def _rollout_return(env: DiscreteActions, policy: Any, seeds: list[int]) -> float:
    total = 0.0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, r, terminated, truncated, _ = env.step(policy(obs))
            total += r
            done = terminated or truncated
    return total / len(seeds)


def test_ppo_improves_over_the_random_policy(sandbox: Any) -> None:
    torch = pytest.importorskip("torch", reason="the mlsandbox[rl] extra is installed by make setup")
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    env = make_rl_env(
        FAST,
        sandbox=sandbox.name,
        start_sandbox=False,
        action_types=FAST_TYPES,
        max_datasets=1,
        max_jobs=2,
        wait_seconds=(1.0,),
    )
    try:
        rng = np.random.default_rng(0)
        eval_seeds = list(range(100, 106))
        random_return = _rollout_return(env, lambda _obs: int(rng.integers(env.action_space.n)), eval_seeds)
        model = PPO("MlpPolicy", env, n_steps=48, batch_size=48, n_epochs=10, learning_rate=3e-3,
                    ent_coef=0.0, seed=0, device="cpu", verbose=0)  # fmt: skip
        model.learn(total_timesteps=48 * 6)
        ppo_return = _rollout_return(
            env, lambda obs: int(model.predict(obs, deterministic=True)[0]), eval_seeds
        )
    finally:
        env.close()
    print(
        f"random policy {random_return:+.3f}  PPO {ppo_return:+.3f} (mean return over {len(eval_seeds)} episodes)"
    )
    assert ppo_return > random_return + 0.2
