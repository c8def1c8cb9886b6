"""The OpenEnv server on real services, driven by ``openenv-core``'s own clients and validator.

The server runs as ``python -m mlsandbox.integrations.openenv`` (a real uvicorn process) on the session's
sandbox, with two WebSocket sessions at most.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from integration_helpers import free_port, run_example, server_process
from openenv.cli._validation import validate_running_environment
from openenv.core import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from websockets.sync.client import connect as ws_connect

from mlsandbox.agents.rule_agent import RuleAgent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.gateway import action_catalog
from mlsandbox.integrations.openenv import MLSandboxAction, MLSandboxClient

pytestmark = [pytest.mark.integrations, pytest.mark.services]

SCENARIO = "churn-clean-small"
OBS_KEYS = ("step", "ok", "action", "result", "error", "budget")


@pytest.fixture(scope="module")
def server(sandbox: Any) -> Iterator[str]:
    port = free_port()
    args = ["mlsandbox.integrations.openenv", "--port", str(port), "--sandbox", sandbox.name, "--no-start"]
    with server_process([*args, "--max-sessions", "2", "--scenario", SCENARIO], port) as url:
        yield url


def _client(url: str) -> Any:
    return MLSandboxClient(base_url=url, message_timeout_s=300).sync()


def _as_dict(observation: Any) -> dict[str, Any]:
    return observation.model_dump(mode="json", include=set(OBS_KEYS))


def test_openenv_validator_passes_and_schema_carries_the_catalog(server: str) -> None:
    report = validate_running_environment(server)
    assert report["passed"], json.dumps(report["criteria"], indent=1)
    assert report["mode"] == "simulation"
    schema = httpx.get(server + "/schema").json()
    types = [a["type"] for a in action_catalog()]
    assert schema["action"]["properties"]["type"]["enum"] == types
    branch = next(b for b in schema["action"]["oneOf"] if b["title"] == "check_data_quality")
    assert branch["required"] == ["type", "dataset"] and "dataset" in branch["properties"]
    assert {"step", "ok", "result", "error", "budget", "text", "info", "reward", "done"} <= set(
        schema["observation"]["properties"]
    )
    assert httpx.get(server + "/metadata").json()["name"] == "mlsandbox"


def test_a_full_episode_reaches_the_same_grade_as_in_process(server: str, sandbox: Any) -> None:
    local = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        expected = run_episode(local, RuleAgent(), seed=7, scenario=SCENARIO)
    finally:
        local.close()
    assert expected.success, expected.grade

    agent = RuleAgent()
    total = 0.0
    with _client(server) as env:
        result = env.reset(seed=7, scenario=SCENARIO)
        first = _as_dict(result.observation)
        assert first == {k: expected.first_observation[k] for k in OBS_KEYS}  # the same seeded episode
        assert result.reward is None and not result.done
        agent.reset(first, seed=7)
        while not result.done:
            result = env.step(MLSandboxAction(**agent.act(_as_dict(result.observation))))
            assert result.reward is not None
            total += result.reward
        info = result.observation.info
        state = env.state()
    grade = info["grade"]
    assert grade["success"] and grade["score"] == pytest.approx(expected.grade["score"])  # type: ignore[index]
    assert grade["holdout_auc"] == pytest.approx(expected.grade["holdout_auc"], abs=1e-9)  # type: ignore[index]
    assert info["terminated"] and sum(info["reward_components"].values()) == pytest.approx(result.reward)
    assert state.done and state.grade == grade and state.total_reward == pytest.approx(total, abs=1e-4)
    # The episode is in the sandbox's audit log, labelled with its interface (what the console shows).
    start = sandbox.runtime().audit.read(state.episode_id)[0]
    assert start["event"] == "start" and start["labels"] == {"interface": "openenv"}


def test_bad_actions_are_error_observations_and_nothing_breaks(server: str) -> None:
    with _client(server) as env:
        env.reset(seed=3)
        cases = [
            ({"type": "teleport"}, "unknown_action"),
            ({"type": "check_data_quality", "dataset": 5}, "invalid_parameters"),
            ({"type": "check_data_quality", "dataset": "raw/missing.csv"}, "not_found"),
            ({"type": "list_datasets", "surprise": 1}, "invalid_parameters"),
            ({"type": "restart_service", "service": "minio"}, "forbidden"),  # sessions share the sandbox
        ]
        for step, (action, code) in enumerate(cases, 1):
            result = env.step(action)
            obs = result.observation
            assert not obs.ok and obs.error.code == code, (action, obs.error)
            assert obs.step == step and not result.done and result.reward < 0  # the invalid-action penalty
            assert f"[step {step}]" in obs.text and code in obs.text
        # A body without a `type` is not an action at all: the transport says so, and the session goes on.
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"dataset": "raw/customers.csv"})
        result = env.step(MLSandboxAction(type="list_datasets"))
        assert result.observation.ok and result.observation.step == len(cases) + 1
        assert env.state().invalid_actions == len(cases)
        with pytest.raises(RuntimeError, match="unknown scenario 'nope'"):
            env.reset(scenario="nope")
        with pytest.raises(RuntimeError, match=r"unknown reset parameters \['colour'\]"):
            env.reset(colour="red")


def test_concurrent_sessions_are_isolated_and_capped(server: str) -> None:
    a, b = _client(server), _client(server)
    results: dict[str, Any] = {}
    try:
        threads = [
            threading.Thread(target=lambda c=c, n=n, s=s: results.__setitem__(n, c.reset(seed=s)))
            for c, n, s in ((a, "a", 1), (b, "b", 2))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert set(results) == {"a", "b"}
        cleaned = a.step({"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na"})
        assert cleaned.observation.ok, cleaned.observation.error
        mine = {d["name"] for d in a.step({"type": "list_datasets"}).observation.result["datasets"]}
        theirs = {d["name"] for d in b.step({"type": "list_datasets"}).observation.result["datasets"]}
        assert (
            cleaned.observation.result["dataset"] in mine
            and cleaned.observation.result["dataset"] not in theirs
        )
        sa, sb = a.state(), b.state()
        assert sa.episode_id != sb.episode_id and (sa.seed, sb.seed) == (1, 2)
        assert (sa.step_count, sb.step_count) == (2, 1)
        # The server holds two sessions: a third connection gets OpenEnv's capacity error frame, then is
        # closed (read on the wire: openenv-core 0.3.0's client races that close with its first send).
        with ws_connect(server.replace("http://", "ws://") + "/ws") as ws:
            frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED"
        assert (frame["data"]["active_sessions"], frame["data"]["max_sessions"]) == (2, 2)
    finally:
        a.close()
        b.close()
    with _client(server) as c:  # a slot is free again once a session closes
        assert c.reset(seed=4).observation.step == 0


def test_generic_client_stateless_http_and_mcp(server: str) -> None:
    with GenericEnvClient(base_url=server).sync() as env:  # plain dicts, no mlsandbox code on the client
        first = env.reset(seed=5)
        assert first.observation["step"] == 0 and "task" in first.observation["result"]
        step = env.step({"type": "list_datasets"})
        assert step.observation["ok"] and step.reward == pytest.approx(-0.02)

    # HTTP /reset and /step are stateless in OpenEnv: a step outside a session is an error observation.
    r = httpx.post(server + "/reset", json={"seed": 5}, timeout=120)
    assert r.status_code == 200 and r.json()["observation"]["step"] == 0
    r = httpx.post(server + "/step", json={"action": {"type": "list_datasets"}}, timeout=60)
    assert r.status_code == 200 and r.json()["done"] is True
    assert r.json()["observation"]["error"]["code"] == "no_episode"

    # MCP over HTTP sessions (production mode) and over the WebSocket (simulation mode).
    production = MCPToolClient(base_url=server)
    production.use_production_mode = True
    for mcp in (production.sync(), MCPToolClient(base_url=server).sync()):
        with mcp:
            tools = {t.name: t for t in mcp.list_tools()}
            assert list(tools) == [a["type"] for a in action_catalog()]
            assert tools["check_data_quality"].input_schema["required"] == ["dataset"]
            listed = mcp.call_tool("list_datasets")
            data = listed.get("data", listed) if isinstance(listed, dict) else listed
            assert data["ok"] and data["step"] == 1 and data["action"] == "list_datasets"
            bad = mcp.call_tool("check_data_quality", dataset="raw/missing.csv")
            bad = bad.get("data", bad)
            assert not bad["ok"] and bad["error"]["code"] == "not_found" and bad["step"] == 2


def test_readme_example(server: str) -> None:
    done = run_example("openenv", {"OPENENV_URL": server})
    assert "check_data_quality" in done.stdout and "reward" in done.stdout
