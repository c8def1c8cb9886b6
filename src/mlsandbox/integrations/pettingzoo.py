"""A PettingZoo parallel env: several agents with roles in one mlsandbox episode (``mlsandbox[pettingzoo]``).

.. code-block:: python

    from mlsandbox.integrations.pettingzoo import parallel_env

    env = parallel_env(scenario="team-orders-release", sandbox="rl")
    observations, infos = env.reset(seed=7)
    actions = {"data": '{"type": "list_sources"}', "training": None, "oncall": None}
    observations, rewards, terminations, truncations, infos = env.step(actions)

Agents are the team's roles (``env.possible_agents``): the scenario's ``team`` section, else a data, a
training and an on-call agent. How a round of simultaneous actions becomes steps of the one episode, what
each agent sees and how the reward is split between the team and each agent is
:mod:`mlsandbox.integrations.team`'s. Each agent's spaces are the Gymnasium env's (a ``Dict`` observation
with ``step``, ``ok``, ``credits_left`` and ``text``, the whole observation as JSON; a ``Text`` action of
one JSON object). An action outside the agent's role is a ``forbidden`` error observation for that agent;
``None`` (or leaving the agent out) idles it for the round. Reset options: ``scenario`` (a built-in id or a
file); others are ignored with a warning (PettingZoo's API test passes one).
"""

from __future__ import annotations

import warnings
from typing import Any

from gymnasium import spaces

from mlsandbox.env.spaces import action_space, encode_observation, observation_space
from mlsandbox.integrations import require
from mlsandbox.integrations.team import TeamEpisode
from mlsandbox.scenario import Scenario
from mlsandbox.scenario.team import Team

_pz = require("pettingzoo", "pettingzoo")


class MLSandboxParallelEnv(_pz.ParallelEnv):  # type: ignore[name-defined]
    metadata = {"name": "mlsandbox_team_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        scenario: str | Scenario = "team-orders-release",
        *,
        backend: str = "local",
        sandbox: str | None = None,
        start_sandbox: bool = False,
        team: Team | None = None,
        max_cycles: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.render_mode = render_mode
        self.episode = TeamEpisode(
            scenario,
            backend=backend,
            sandbox=sandbox,
            start_sandbox=start_sandbox,
            team=team,
            max_cycles=max_cycles,
            render_mode=render_mode,
        )
        self.possible_agents: list[str] = list(self.episode.agents)
        self.agents: list[str] = []
        self._observation_spaces: dict[str, spaces.Dict] = {}
        self._action_spaces: dict[str, spaces.Text] = {}

    # ---------------------------------------------------------------------------------------- spaces

    def observation_space(self, agent: str) -> spaces.Dict:
        """The same object every time for an agent (PettingZoo's API test checks it)."""
        return self._observation_spaces.setdefault(agent, observation_space())

    def action_space(self, agent: str) -> spaces.Text:
        return self._action_spaces.setdefault(agent, action_space())

    @property
    def max_cycles(self) -> int | None:
        return self.episode.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int | None) -> None:
        self.episode.max_cycles = value

    # -------------------------------------------------------------------------------------- episodes

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        options = dict(options or {})
        scenario = options.pop("scenario", None)
        if options:
            warnings.warn(f"reset options {sorted(options)} ignored; supported: ['scenario']", stacklevel=2)
        observations, infos = self.episode.reset(seed=seed, scenario=scenario)
        self.possible_agents = list(self.episode.agents)
        self.agents = list(self.possible_agents)
        return {a: encode_observation(o) for a, o in observations.items()}, infos

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        if not self.agents:
            raise RuntimeError("the episode is over: call reset()")
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:
            raise ValueError(f"unknown agents {unknown}; the live agents are {self.agents}")
        res = self.episode.round({a: actions.get(a) for a in self.agents})
        observations = {a: encode_observation(o) for a, o in res.observations.items()}
        if any(res.terminated.values()) or any(res.truncated.values()):
            self.agents = []
        return observations, res.rewards, res.terminated, res.truncated, res.infos

    def actions_of(self, agent: str) -> tuple[str, ...]:
        """The action types ``agent``'s role may use."""
        return self.episode.actions_of(agent)

    def render(self) -> str | None:
        return self.episode.env.render() if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.episode.close()


def parallel_env(**kwargs: Any) -> MLSandboxParallelEnv:
    """PettingZoo's constructor convention: ``parallel_env(scenario=..., sandbox=..., ...)``."""
    return MLSandboxParallelEnv(**kwargs)


__all__ = ["MLSandboxParallelEnv", "parallel_env"]
