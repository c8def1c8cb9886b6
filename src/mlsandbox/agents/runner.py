"""Run one episode of an agent in the Gymnasium env and collect what happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.agents.base import Agent
from mlsandbox.env.gym_env import MLSandboxEnv, decode_observation
from mlsandbox.scenario import Scenario


@dataclass
class StepRecord:
    step: int
    action: dict[str, Any] | str
    observation: dict[str, Any]
    reward: float
    components: dict[str, float]
    error: str | None
    info: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] = field(default_factory=dict)
    """The observation the action was chosen on."""
    terminated: bool = False
    truncated: bool = False


@dataclass
class EpisodeResult:
    scenario: str
    agent: str
    seed: int
    episode_id: str
    steps: list[StepRecord] = field(default_factory=list)
    total_reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    grade: dict[str, Any] | None = None
    terminated: bool = False
    truncated: bool = False
    wall_s: float = 0.0
    first_observation: dict[str, Any] = field(default_factory=dict)
    reset_info: dict[str, Any] = field(default_factory=dict)
    final_info: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return bool(self.grade and self.grade.get("success"))

    @property
    def invalid_actions(self) -> int:
        return sum(1 for s in self.steps if s.error)


def run_episode(
    env: MLSandboxEnv,
    agent: Agent,
    *,
    seed: int,
    scenario: str | Scenario | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> EpisodeResult:
    t0 = time.perf_counter()
    options = {"scenario": scenario, "agent": agent.name} if scenario else {"agent": agent.name}
    obs, info = env.reset(seed=seed, options=options)
    first = decode_observation(obs)
    agent.reset(first, seed=seed)
    res = EpisodeResult(scenario=info["scenario"], agent=agent.name, seed=seed, episode_id=info["episode_id"])
    res.first_observation, res.reset_info = first, dict(info)
    current = first
    while True:
        action = agent.act(current)
        current_before = current
        obs, reward, terminated, truncated, info = env.step(action)
        current = decode_observation(obs)
        rec = StepRecord(
            step=current["step"],
            action=action,
            observation=current,
            reward=float(reward),
            components=dict(info.get("reward_components", {})),
            error=info.get("error"),
            info=dict(info),
            previous=current_before,
            terminated=bool(terminated),
            truncated=bool(truncated),
        )
        res.steps.append(rec)
        res.total_reward += float(reward)
        for k, v in rec.components.items():
            res.components[k] = res.components.get(k, 0.0) + v
        if on_step:
            on_step(rec)
        if terminated or truncated:
            res.terminated, res.truncated = bool(terminated), bool(truncated)
            res.grade = info.get("grade")
            res.final_info = dict(info)
            break
    res.wall_s = time.perf_counter() - t0
    return res
