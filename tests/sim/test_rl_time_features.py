"""The RL wrappers' vector carries, when asked (``time_features``), the deadline and the compute window
the JSON observation shows: a policy trained on the vector can see time running out and the window spent.
Training asks for them when a family has either."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlsandbox.agents.training import timed
from mlsandbox.env.wrappers import FlatObservation, make_rl_env
from mlsandbox.scenario import load_builtin

TIME = slice(6, 6 + len(FlatObservation.TIME_FEATURES))


def _env(family: str) -> Any:
    return make_rl_env(
        family, backend="sim", sandbox=f"sim-time-{family}", wait_seconds=(20.0,), time_features=True
    )


def _slot(env: Any, action_type: str) -> int:
    return next(i for i, (a, ok) in enumerate(env.slots()) if ok and a["type"] == action_type)


def test_the_deadline_share_left_falls_as_the_clock_runs() -> None:
    env = _env("churn-lake-bandwidth-deadline")
    try:
        obs, _ = env.reset(seed=61)
        has, left, has_window, credits, frees = obs[TIME]
        assert (has, has_window, credits, frees) == (1.0, 0.0, 0.0, 0.0)
        assert left == pytest.approx(1.0)
        obs, *_ = env.step(_slot(env, "wait"))
        assert obs[TIME][1] == pytest.approx(0.8, abs=0.02)  # 20 of the 100 seconds waited
    finally:
        env.close()


def test_the_window_credits_left_and_when_they_free() -> None:
    env = _env("churn-upsell-priority-window")
    try:
        obs, _ = env.reset(seed=71)
        assert list(obs[TIME]) == [0.0, 0.0, 1.0, 1.0, 0.0]
        seen = env.unwrapped.last_observation
        assert seen["budget"]["window_credits_left"] == 2.0
        for _ in range(2):  # two jobs on the first datasets spend the window's credits
            obs, *_ = env.step(_slot(env, "train_model"))
        for _ in range(6):
            obs, *_ = env.step(_slot(env, "wait"))
            if obs[TIME][4] > 0:
                break
        budget = env.unwrapped.last_observation["budget"]
        assert budget["window_credits_left"] == 0 and obs[TIME][3] == 0.0
        assert obs[TIME][4] == pytest.approx(budget["window_frees_in_s"] / 120, abs=1e-3) and obs[TIME][4] > 0
    finally:
        env.close()


def test_an_episode_without_them_leaves_the_features_at_zero() -> None:
    env = _env("churn-clean-small")
    try:
        obs, _ = env.reset(seed=11)
        assert not np.any(obs[TIME])
    finally:
        env.close()


def test_they_are_asked_for_and_training_asks_for_them_where_a_family_has_either() -> None:
    plain = make_rl_env("churn-clean-small", backend="sim", sandbox="sim-time-plain")
    timed_env = _env("churn-clean-small")
    try:
        n = len(FlatObservation.TIME_FEATURES)
        assert timed_env.observation_space.shape[0] == plain.observation_space.shape[0] + n  # type: ignore[index]
    finally:
        plain.close()
        timed_env.close()
    assert timed([load_builtin("churn-lake-bandwidth-deadline")])
    assert timed([load_builtin("churn-clean-small"), load_builtin("churn-upsell-priority-window")])
    assert not timed([load_builtin("churn-clean-small"), load_builtin("tabular-quality-basic")])
