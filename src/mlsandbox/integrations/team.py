"""Several agents with roles in one episode: how a round of simultaneous actions becomes episode steps.

This module needs no optional dependency; :mod:`mlsandbox.integrations.pettingzoo` puts a PettingZoo API on
it. The rules:

- **Roles.** The scenario's ``team`` (see :mod:`mlsandbox.scenario.team`), else :data:`DEFAULT_TEAM`: a
  ``data`` agent (the data actions and the ``sources`` pack), a ``training`` agent (training, the
  ``compute``, ``tracking`` and ``flows`` packs, ``submit``) and an ``oncall`` agent (service health and
  logs, restarts, the ``serving`` and ``config`` packs). An action outside the agent's role goes to the
  gateway refused: a ``forbidden`` error observation for that agent, its invalid-action penalty, nothing
  done (the gateway's own policy mechanism, so the audit log and trajectories record it like any step).
- **Rounds.** All agents act at once; the round's actions are carried out one after the other in the
  team's ``order``, each as one step of the shared episode (so ``max_steps`` counts every agent's actions).
  An agent with no action this round (``None``, or left out of the dict) idles: no step, no reward. If the
  episode ends during a round (someone submitted, a hard constraint broke, the step limit), the remaining
  actions of that round are not carried out.
- **Observations.** Each agent sees the observation of its own step, with ``role`` and ``team``: what the
  others did this round before and after it (action, ok, error code and result). The first observation
  lists the agent's own actions and role.
- **Rewards.** Each step's reward components are split by objective: the team's outcome (task, success
  bonus, cost, efficiency, stability, problem solving, constraint) goes to every agent, as ``team/<name>``,
  summed over the round's steps; the process components of a step (step cost, invalid action) and its
  shaping go to the agent who acted, as ``own/<name>``. An agent's reward is the sum of both. ``info`` holds
  them, and at the end the grade and metrics (the same for all).
- **Ends.** Every agent terminates (or is truncated) together, when the episode does, or after
  ``max_cycles`` rounds (truncated, ungraded).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.errors import ConfigError
from mlsandbox.evaluation.reward import COMPONENT_OBJECTIVE
from mlsandbox.gateway.registry import Catalog, get_catalog
from mlsandbox.scenario import Scenario, load_scenario
from mlsandbox.scenario.team import Team, TeamRole

OWN_OBJECTIVES = frozenset({"process", "shaping"})
"""Objectives whose components go to the agent who acted; the others go to the whole team."""

DEFAULT_TEAM = Team(
    roles={
        "data": TeamRole(
            description="Brings the data in (sources), inspects it and cleans it for training.",
            packs=["sources"],
            actions=["list_datasets", "check_data_quality", "clean_dataset", "wait"],
        ),
        "training": TeamRole(
            description="Trains, tracks and registers the model, runs the pipelines, and submits the work.",
            packs=["compute", "tracking", "flows"],
            actions=[
                "list_datasets",
                "train_model",
                "get_job",
                "list_runs",
                "register_model",
                "retry_job",
                "set_job_resources",
                "wait",
                "submit",
            ],
        ),
        "oncall": TeamRole(
            description="Keeps the platform healthy (health, logs, restarts, configuration) and runs serving.",
            packs=["serving", "config"],
            actions=["list_datasets", "get_logs", "get_service_health", "restart_service", "wait"],
        ),
    },
)


class TeamError(ConfigError):
    """A team whose roles name packs or actions the catalog does not have."""


def role_actions(team: Team, catalog: Catalog | None = None) -> dict[str, tuple[str, ...]]:
    """Each role's action types, in catalog order; :class:`TeamError` naming the role for an unknown name."""
    catalog = catalog or get_catalog()
    packs = {p.name: p for p in catalog.packs}
    out: dict[str, tuple[str, ...]] = {}
    for name, role in team.roles.items():
        allowed: set[str] = set()
        for pack in role.packs:
            if pack not in packs:
                raise TeamError(
                    f"team role {name!r}: unknown action pack {pack!r}; packs: {', '.join(packs)}"
                )
            allowed |= set(packs[pack].types)
        for action in role.actions:
            if action not in catalog.types:
                raise TeamError(f"team role {name!r}: unknown action {action!r}; see `mlsandbox tools`")
            allowed.add(action)
        out[name] = tuple(t for t in catalog.types if t in allowed)
    return out


@dataclass
class RoundResult:
    observations: dict[str, dict[str, Any]]
    rewards: dict[str, float]
    terminated: dict[str, bool]
    truncated: dict[str, bool]
    infos: dict[str, dict[str, Any]]


@dataclass
class _Step:
    agent: str
    observation: dict[str, Any]
    components: dict[str, float]
    info: dict[str, Any]
    executed: bool = True


@dataclass
class TeamEpisode:
    """The episodes of a team on one in-process env (``backend``/``sandbox`` as for the Gymnasium env)."""

    scenario: str | Scenario = "team-orders-release"
    backend: str = "local"
    sandbox: str | None = None
    start_sandbox: bool = False
    team: Team | None = None
    """The roles; default: the scenario's ``team``, else :data:`DEFAULT_TEAM`."""
    max_cycles: int | None = None
    """Rounds before every agent is truncated (default: four times the scenario's ``max_steps``)."""
    render_mode: str | None = None
    env: MLSandboxEnv = field(init=False)
    rounds: int = field(init=False, default=0)
    done: bool = field(init=False, default=False)
    _terminated: bool = field(init=False, default=False)
    _roles: dict[str, tuple[str, ...]] = field(init=False, default_factory=dict)
    _denied: dict[str, dict[str, str]] = field(init=False, default_factory=dict)
    _last: dict[str, dict[str, Any]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.scenario, str):
            self.scenario = load_scenario(self.scenario)
        self.env = MLSandboxEnv(
            self.scenario,
            backend=self.backend,
            sandbox=self.sandbox,
            start_sandbox=self.start_sandbox,
            render_mode=self.render_mode,
        )
        self._configure(self.scenario)

    # ------------------------------------------------------------------------------------------ roles

    @property
    def active_team(self) -> Team:
        assert isinstance(self.scenario, Scenario)
        return self.team or self.scenario.team or DEFAULT_TEAM

    @property
    def agents(self) -> list[str]:
        """Every agent, in the order a round's actions are carried out."""
        return self.active_team.agents

    def actions_of(self, agent: str) -> tuple[str, ...]:
        return self._roles[agent]

    def _configure(self, scenario: Scenario) -> None:
        self.scenario = scenario
        catalog = get_catalog()
        self._roles = role_actions(self.active_team, catalog)
        self._denied = {
            agent: {
                t: f"the {agent} agent's role does not include {t}; its actions: {', '.join(allowed)}"
                for t in catalog.types
                if t not in allowed
            }
            for agent, allowed in self._roles.items()
        }

    # ---------------------------------------------------------------------------------------- episode

    def reset(
        self, seed: int | None = None, scenario: str | Scenario | None = None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        if scenario is not None:
            self._configure(scenario if isinstance(scenario, Scenario) else load_scenario(scenario))
        options = {"scenario": self.scenario}
        obs, info = self.env.reset(seed=seed, options=options)
        first = decode_observation(obs)
        self.rounds = 0
        self.done = self._terminated = False
        observations: dict[str, dict[str, Any]] = {}
        team = self.active_team
        for agent in self.agents:
            result = dict(first.get("result") or {})
            result["actions"] = list(self._roles[agent])
            result["role"] = {"name": agent, "description": team.roles[agent].description}
            result["teammates"] = {a: team.roles[a].description for a in self.agents if a != agent}
            observations[agent] = {**first, "result": result, "role": agent, "team": []}
        self._last = observations
        return observations, {agent: {**info, "role": agent} for agent in self.agents}

    def round(self, actions: Mapping[str, Any]) -> RoundResult:
        """Carry out one round of actions (see the module docstring); every agent gets a result."""
        if not self.env.episode_running:
            raise RuntimeError("call reset() before a round")
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:
            raise ValueError(f"unknown agents {unknown}; the team is {self.agents}")
        steps: list[_Step] = []
        for agent in self.agents:
            action = actions.get(agent)
            if action is None:
                continue
            if self.done:
                steps.append(_Step(agent, {}, {}, {}, executed=False))
                continue
            with self.env.refusing(self._denied[agent]):  # the gateway refuses what the role lacks
                obs, _, terminated, truncated, info = self.env.step(action)
            steps.append(_Step(agent, decode_observation(obs), dict(info.get("reward_components", {})), info))
            if terminated or truncated:
                self.done = True
                self._terminated = bool(terminated)
        self.rounds += 1
        limit = self.max_cycles or 4 * self._scenario.max_steps
        cycles_out = not self.done and self.rounds >= limit
        return self._result(steps, cycles_out)

    def close(self) -> None:
        self.env.close()

    # ---------------------------------------------------------------------------------------- helpers

    @property
    def _scenario(self) -> Scenario:
        assert isinstance(self.scenario, Scenario)
        return self.scenario

    def _result(self, steps: list[_Step], cycles_out: bool) -> RoundResult:
        team_comps: dict[str, float] = {}
        for s in steps:
            for name, value in s.components.items():
                if COMPONENT_OBJECTIVE.get(name, "process") not in OWN_OBJECTIVES:
                    team_comps[name] = team_comps.get(name, 0.0) + value
        final = next((s.info for s in reversed(steps) if s.executed and s.info.get("grade")), None)
        episode = self.env.episode
        observations, rewards, infos = {}, {}, {}
        for agent in self.agents:
            mine = next((s for s in steps if s.agent == agent), None)
            comps = {f"team/{k}": v for k, v in team_comps.items()}
            if mine is not None and mine.executed:
                for name, value in mine.components.items():
                    if COMPONENT_OBJECTIVE.get(name, "process") in OWN_OBJECTIVES:
                        comps[f"own/{name}"] = value
                obs = mine.observation
                info: dict[str, Any] = {
                    k: v for k, v in mine.info.items() if k not in ("reward_components", "reward_vector")
                }
            else:
                obs = {
                    "step": episode.step,
                    "ok": mine is None,
                    "action": None,
                    "result": None,
                    "error": None
                    if mine is None
                    else {"code": "not_carried_out", "message": "the episode ended before this action"},
                    "budget": self.env.budget(),
                }
                info = {"idle": mine is None, "step": episode.step}
            others = [
                {
                    "agent": s.agent,
                    "action": s.observation.get("action"),
                    "ok": s.observation.get("ok"),
                    "error": (s.observation.get("error") or {}).get("code"),
                    "result": s.observation.get("result"),
                }
                for s in steps
                if s.agent != agent and s.executed
            ]
            observations[agent] = {**obs, "role": agent, "team": others}
            rewards[agent] = float(sum(comps.values()))
            info.update(
                role=agent,
                reward_components=comps,
                team_reward=float(sum(team_comps.values())),
                own_reward=float(sum(v for k, v in comps.items() if k.startswith("own/"))),
                round=self.rounds,
            )
            if final is not None:
                info["grade"], info["metrics"] = final["grade"], final.get("metrics")
            infos[agent] = info
        terminated = self.done and self._terminated
        truncated = (self.done and not terminated) or cycles_out
        if cycles_out:
            self.done = True
            for agent in self.agents:
                infos[agent]["max_cycles"] = True
        self._last = observations
        return RoundResult(
            observations,
            rewards,
            dict.fromkeys(self.agents, terminated),
            dict.fromkeys(self.agents, truncated),
            infos,
        )


# -------------------------------------------------------------------------------------- reference team

Action = dict[str, Any] | None
RoleScript = Generator[Action, dict[str, Any], None]
_TERMINAL_JOB = ("succeeded", "failed", "cancelled")


class ReferenceTeam:
    """A reference solution played by the default roles (``data``, ``training``, ``oncall``): the data agent
    ingests the scenario's source (or takes its raw dataset), inspects and cleans it; the training agent
    waits for it, trains, and when a job fails reports it and waits for the on-call agent, who probes the
    services and restarts what is down, then retries; it registers the model and submits. Agents idle
    (``None``) while they wait. A team policy: ``act(observations)`` gives every agent's action."""

    name = "reference-team"
    max_attempts = 4

    def __init__(self, seed: int | None = None) -> None:
        self.board: dict[str, Any] = {}
        self._scripts: dict[str, RoleScript] = {}
        self._started: set[str] = set()

    def reset(self, observations: Mapping[str, dict[str, Any]]) -> None:
        self.board = {"trouble": 0, "fixed": 0}
        makers = {"data": self._data, "training": self._training, "oncall": self._oncall}
        unknown = sorted(set(observations) - set(makers))
        if unknown:
            raise ValueError(f"the reference team plays the roles {sorted(makers)}, not {unknown}")
        self._scripts = {agent: makers[agent](obs) for agent, obs in observations.items()}
        self._started = set()

    def act(self, observations: Mapping[str, dict[str, Any]]) -> dict[str, Action]:
        actions: dict[str, Action] = {}
        for agent, script in self._scripts.items():
            if agent not in observations:
                continue
            try:
                if agent in self._started:
                    actions[agent] = script.send(observations[agent])
                else:
                    self._started.add(agent)
                    actions[agent] = next(script)
            except StopIteration:
                actions[agent] = None
        return actions

    # -------------------------------------------------------------------------------------- the roles

    def _data(self, first: dict[str, Any]) -> RoleScript:
        from mlsandbox.agents.scripted import cleaning_plan, deliverable

        _, names = deliverable(first)
        dataset: str | None = names[0] if names else None
        obs = yield {"type": "list_sources"}
        sources = (obs.get("result") or {}).get("sources") or []
        if sources:
            action: dict[str, Any] = {"type": "ingest_source", "source": sources[0]["name"]}
            dataset = None
            for _ in range(self.max_attempts):
                obs = yield action
                if obs.get("ok"):
                    dataset = str(obs["result"]["dataset"])
                    break
                code = (obs.get("error") or {}).get("code")
                if code == "auth_failed":
                    action = {**action, "refresh_credentials": True}
                elif code in ("source_unavailable", "rate_limited", "backend_error"):
                    yield {"type": "wait", "seconds": 10}
                else:
                    break
        if dataset is not None:
            obs = yield {"type": "check_data_quality", "dataset": dataset}
            if obs.get("ok"):
                for strategy in cleaning_plan((obs.get("result") or {}).get("profile") or {}):
                    obs = yield {"type": "clean_dataset", "dataset": dataset, "strategy": strategy}
                    if obs.get("ok"):
                        dataset = str(obs["result"]["dataset"])
        self.board["dataset"] = dataset
        self.board["data_done"] = True
        while True:
            yield None

    def _training(self, first: dict[str, Any]) -> RoleScript:
        from mlsandbox.agents.scripted import deliverable

        model, _ = deliverable(first)
        while not self.board.get("data_done"):
            yield None
        dataset = self.board.get("dataset")
        run_id: str | None = None
        job: str | None = None
        for _ in range(self.max_attempts if dataset else 0):
            if job is None:
                action: dict[str, Any] = {
                    "type": "train_model",
                    "dataset": dataset,
                    "algorithm": "gradient_boosting",
                    "resources": {"cpus": 1, "memory_mb": 1024},
                }
            else:
                action = {"type": "retry_job", "job_id": job}
            obs = yield action
            if obs.get("ok"):
                job = str(obs["result"]["job_id"])
                for _ in range(30):
                    yield {"type": "wait", "seconds": 60}  # returns as soon as the job changes state
                    obs = yield {"type": "get_job", "job_id": job}
                    if obs.get("ok") and (obs.get("result") or {}).get("state") in _TERMINAL_JOB:
                        break
                result = obs.get("result") or {}
                if result.get("state") == "succeeded" and result.get("run_id"):
                    run_id = str(result["run_id"])
                    break
            yield from self._report_trouble()
        if run_id is not None:
            for _ in range(self.max_attempts):
                obs = yield {"type": "register_model", "run_id": run_id, "name": model}
                if obs.get("ok") or (obs.get("error") or {}).get("code") != "backend_error":
                    break
                yield from self._report_trouble()
        yield {"type": "submit"}

    def _report_trouble(self) -> RoleScript:
        """Tell the on-call agent something failed; idle until it has looked at the platform."""
        self.board["trouble"] += 1
        while self.board["fixed"] < self.board["trouble"]:
            yield None

    def _oncall(self, first: dict[str, Any]) -> RoleScript:
        while True:
            if self.board["fixed"] >= self.board["trouble"]:
                yield None
                continue
            reported = self.board["trouble"]
            for service in ("mlflow", "minio"):
                obs = yield {"type": "get_service_health", "service": service}
                if obs.get("ok") and not (obs.get("result") or {}).get("healthy", True):
                    yield {"type": "restart_service", "service": service}
            self.board["fixed"] = reported


__all__ = [
    "DEFAULT_TEAM",
    "OWN_OBJECTIVES",
    "ReferenceTeam",
    "RoundResult",
    "TeamEpisode",
    "TeamError",
    "role_actions",
]
