"""A kind's RL slot templates on ``sim``: the image kind's third ``train_model`` position trains its
pixel-feature model with the classes weighted (what a rare class needs), and the observation tells that
job's position apart from the plain model's."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsandbox.env.wrappers import (
    ALGORITHMS,
    STRATEGY_FLAGS,
    FlatObservation,
    in_process_env,
    make_rl_env,
)


def _flat(env: Any) -> FlatObservation:
    while not isinstance(env, FlatObservation):
        env = env.env
    return env


def _job_algorithm_bits(env: Any, obs: np.ndarray) -> list[float]:
    """The first job slot's algorithm one-hot (its ``train_model`` position) in a flat observation."""
    flat = _flat(env)
    n = 6 + len(flat.types) + 3 * flat.max_datasets + (len(flat.JOB_STATES) + 2) * flat.max_jobs
    n += (4 + len(STRATEGY_FLAGS)) * flat.max_datasets
    return [float(v) for v in obs[n : n + len(ALGORITHMS)]]


def _train_at(scenario: str, hyperparams: dict[str, Any] | None) -> tuple[dict[str, Any], list[float], Any]:
    env = make_rl_env(scenario, backend="sim", sandbox="rl-kind-slots")
    try:
        env.reset(seed=3)
        slots = env.slots()  # type: ignore[attr-defined]
        index = next(
            i
            for i, (a, ok) in enumerate(slots)
            if ok and a["type"] == "train_model" and a.get("hyperparams") == hyperparams
        )
        obs, _, _, _, _ = env.step(np.int64(index))
        observation = in_process_env(env).last_observation or {}
        return slots[index][0], _job_algorithm_bits(env, obs), observation
    finally:
        env.close()


def test_the_image_kinds_weighted_slot_trains_balanced_and_is_observed_at_its_position() -> None:
    action, bits, observation = _train_at("images-rare-parts", {"class_weight": "balanced"})
    assert action["algorithm"] == "logistic_regression", action
    assert observation["ok"], observation
    assert observation["result"]["job_id"] == "job-1"
    assert bits == [0.0, 0.0, 1.0, 0.0], bits

    plain_action, plain_bits, plain_observation = _train_at("images-rare-parts", None)
    assert plain_action["algorithm"] == "logistic_regression" and "hyperparams" not in plain_action
    assert plain_observation["ok"], plain_observation
    assert plain_bits == [1.0, 0.0, 0.0, 0.0], plain_bits
