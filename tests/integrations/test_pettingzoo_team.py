"""The multi-agent env: PettingZoo's own API test, roles that limit actions, the team/own reward split, and
the built-in team scenario solved by its reference team."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from integration_helpers import run_example
from pettingzoo.test import parallel_api_test
from pydantic import ValidationError

from mlsandbox.env import decode_observation
from mlsandbox.errors import ScenarioError
from mlsandbox.integrations.pettingzoo import MLSandboxParallelEnv, parallel_env
from mlsandbox.integrations.team import DEFAULT_TEAM, ReferenceTeam, TeamEpisode, TeamError, role_actions
from mlsandbox.scenario import load_builtin, parse_scenario
from mlsandbox.scenario.team import Team

pytestmark = pytest.mark.integrations

TEAM_SCENARIO = "team-orders-release"


@pytest.fixture()
def team_env(sandbox: Any) -> Any:
    env = parallel_env(scenario=TEAM_SCENARIO, sandbox=sandbox.name)
    yield env
    env.close()


def _decode(obs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a: decode_observation(o) for a, o in obs.items()}


@pytest.mark.services
def test_pettingzoo_parallel_api_test_passes(team_env: MLSandboxParallelEnv) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="reset options")  # the API test passes an unknown option
        parallel_api_test(team_env, num_cycles=100)  # random Text actions: error observations, then the limit
    assert team_env.possible_agents == ["data", "training", "oncall"]
    assert team_env.observation_space("data") is team_env.observation_space("data")


@pytest.mark.services
def test_roles_limit_actions_and_rewards_split_into_team_and_own(team_env: MLSandboxParallelEnv) -> None:
    obs, infos = team_env.reset(seed=3)
    first = _decode(obs)
    assert first["data"]["result"]["actions"] == list(team_env.actions_of("data"))
    assert "ingest_source" in first["data"]["result"]["actions"]
    assert "train_model" not in first["data"]["result"]["actions"]
    assert first["oncall"]["result"]["role"]["name"] == "oncall" and infos["oncall"]["role"] == "oncall"

    actions = {
        "data": json.dumps({"type": "train_model", "dataset": "raw/orders.csv", "algorithm": "mlp"}),
        "training": {"type": "list_datasets"},
        "oncall": {"type": "clean_dataset", "dataset": "raw/orders.csv", "strategy": "drop_na"},
    }
    obs, rewards, *_, infos = team_env.step(actions)
    seen = _decode(obs)
    # One round, three steps of the one episode, in the team's order.
    assert [seen[a]["step"] for a in ("data", "training", "oncall")] == [1, 2, 3]
    for agent, action in (("data", "train_model"), ("oncall", "clean_dataset")):
        err = seen[agent]["error"]
        assert not seen[agent]["ok"] and err["code"] == "forbidden", seen[agent]
        assert f"the {agent} agent's role does not include {action}" in err["message"]
    assert (
        seen["training"]["ok"] and seen["training"]["result"]["datasets"] == []
    )  # the orders are at the API
    # Nothing was done by the refused actions: no job, no dataset.
    gw = team_env.episode.env.gateway
    assert gw is not None and not gw.state.jobs and not gw.state.datasets
    assert gw.state.invalid_actions == 2
    # Rewards: the team's share is the same for everyone; each pays for its own actions.
    team_share = {k: v for k, v in infos["data"]["reward_components"].items() if k.startswith("team/")}
    for agent in team_env.possible_agents:
        comps = infos[agent]["reward_components"]
        assert {k: v for k, v in comps.items() if k.startswith("team/")} == team_share
        assert rewards[agent] == pytest.approx(sum(comps.values()))
    assert infos["data"]["reward_components"]["own/invalid_action"] == pytest.approx(-0.5)
    assert infos["training"]["reward_components"]["own/invalid_action"] == 0.0
    assert rewards["data"] == pytest.approx(rewards["training"] - 0.5)
    assert [s["agent"] for s in seen["training"]["team"]] == ["data", "oncall"]  # what the others did
    assert seen["training"]["team"][0]["error"] == "forbidden"

    # An idle agent takes no step and earns nothing of its own; an unknown agent is an error.
    obs, rewards, *_, infos = team_env.step({"data": None, "training": {"type": "list_sources"}})
    seen = _decode(obs)
    assert seen["data"]["ok"] and seen["data"]["action"] is None and infos["data"]["idle"]
    assert seen["training"]["error"]["code"] == "forbidden" and seen["training"]["step"] == 4
    assert infos["oncall"]["own_reward"] == 0.0 and gw.state.step == 4
    with pytest.raises(ValueError, match=r"unknown agents \['qa'\]"):
        team_env.step({"qa": {"type": "list_datasets"}})


@pytest.mark.slow
@pytest.mark.services
def test_the_reference_team_solves_the_team_scenario(team_env: MLSandboxParallelEnv) -> None:
    scenario = load_builtin(TEAM_SCENARIO)
    obs, _ = team_env.reset(seed=scenario.seed)
    seen = _decode(obs)
    team = ReferenceTeam()
    team.reset(seen)
    acted: dict[str, list[str]] = {a: [] for a in team_env.possible_agents}
    totals = dict.fromkeys(team_env.possible_agents, 0.0)
    infos: dict[str, Any] = {}
    while team_env.agents:
        actions = team.act(seen)
        for agent, action in actions.items():
            if action is not None:
                acted[agent].append(action["type"])
        obs, rewards, term, trunc, infos = team_env.step(actions)
        seen = _decode(obs)
        for agent, r in rewards.items():
            totals[agent] += r
    assert all(term.values()) and not any(trunc.values())
    grade = infos["training"]["grade"]
    assert grade["success"] and grade == infos["data"]["grade"] == infos["oncall"]["grade"]
    # Each did its part: the data agent ingested and cleaned, the on-call agent repaired the tracker the
    # fault took down (detected and mitigated, in the episode's metrics), the training agent shipped.
    assert "ingest_source" in acted["data"] and "clean_dataset" in acted["data"]
    assert "restart_service" in acted["oncall"] and acted["training"][-1] == "submit"
    assert "retry_job" in acted["training"]
    metrics = infos["training"]["metrics"]
    assert metrics["faults_detected"] == metrics["faults_injected"] == 1 and metrics["faults_mitigated"] == 1
    assert all(t > 10 for t in totals.values()), totals  # the shared task reward dominates
    assert team_env.episode.env.gateway.state.invalid_actions == 0


def test_roles_are_checked_against_the_catalog_and_the_team_section_is_validated() -> None:
    roles = role_actions(DEFAULT_TEAM)
    assert set(roles) == {"data", "training", "oncall"}
    assert "restart_service" in roles["oncall"] and "restart_service" not in roles["data"]
    assert "submit" in roles["training"] and "submit" not in roles["oncall"]
    bad = Team.model_validate({"roles": {"data": {"packs": ["nope"]}}})
    with pytest.raises(TeamError, match="team role 'data': unknown action pack 'nope'"):
        role_actions(bad)
    with pytest.raises(TeamError, match="unknown action 'fly'"):
        role_actions(Team.model_validate({"roles": {"pilot": {"actions": ["fly"]}}}))
    with pytest.raises(ValidationError, match="must list each role once"):
        Team.model_validate({"roles": {"a": {"actions": ["wait"]}}, "order": ["a", "b"]})
    with pytest.raises(ValidationError, match="at least one pack or action"):
        Team.model_validate({"roles": {"a": {}}})
    data = load_builtin(TEAM_SCENARIO).model_dump(mode="json")
    data["team"]["roles"]["data"]["colour"] = "blue"
    with pytest.raises(ScenarioError, match=r"team\.roles\.data\.colour"):
        parse_scenario(data, "team.yaml")
    # A scenario without a team section is played by the default team.
    episode = TeamEpisode("churn-clean-small", sandbox="not-started")
    assert episode.agents == ["data", "training", "oncall"] and episode.active_team is DEFAULT_TEAM


@pytest.mark.services
def test_readme_example(sandbox: Any) -> None:
    done = run_example("pettingzoo", {"MLSANDBOX_NAME": sandbox.name})
    assert "forbidden" in done.stdout and "data" in done.stdout
