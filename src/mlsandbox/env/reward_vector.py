"""A Gymnasium wrapper for multi-objective learners: the reward is the whole vector, not the scalar.

``MultiObjectiveReward(env)`` returns, from ``step``, a ``numpy`` vector with one entry per objective
(:data:`mlsandbox.evaluation.reward.OBJECTIVES`: task, efficiency, cost, stability, problem_solving,
process, constraint, shaping) or, with ``level="components"``, one per named component
(:data:`~mlsandbox.evaluation.reward.COMPONENTS`). ``reward_space`` describes it and ``reward_names``
names its entries (the convention of MO-Gymnasium). The vector sums to the env's scalar reward, which stays
available as ``info["scalar_reward"]``. Works on the in-process and the remote env alike: it reads
``info["reward_components"]``.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mlsandbox.evaluation.reward import COMPONENTS, OBJECTIVES, objective_vector


class MultiObjectiveReward(gym.Wrapper[Any, Any, Any, Any]):
    """The reward as a float32 vector over objectives (default) or components."""

    def __init__(self, env: gym.Env[Any, Any], level: Literal["objectives", "components"] = "objectives"):
        super().__init__(env)
        if level not in ("objectives", "components"):
            raise ValueError(f"level must be 'objectives' or 'components', got {level!r}")
        self.level = level
        self.reward_names: tuple[str, ...] = OBJECTIVES if level == "objectives" else COMPONENTS
        self.reward_space = spaces.Box(
            low=-np.inf, high=np.inf, shape=(len(self.reward_names),), dtype=np.float32
        )
        self.reward_dim = len(self.reward_names)

    def vector(self, components: dict[str, float]) -> np.ndarray:
        values = objective_vector(components) if self.level == "objectives" else components
        return np.array([float(values.get(n, 0.0)) for n in self.reward_names], dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, np.ndarray, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["scalar_reward"] = float(reward)
        return obs, self.vector(info.get("reward_components") or {}), terminated, truncated, info


__all__ = ["MultiObjectiveReward"]
