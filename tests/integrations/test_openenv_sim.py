"""The OpenEnv server on the in-process ``sim`` backend (no services): each WebSocket session has a sim
sandbox of its own in the server's process, an episode reaches the same grade as the in-process env on
sim, and a session's restarts concern its own sandbox only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from integration_helpers import free_port, server_process

from mlsandbox.agents.rule_agent import RuleAgent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.integrations.openenv import MLSandboxAction, MLSandboxClient

pytestmark = pytest.mark.integrations

SCENARIO = "churn-clean-small"
OBS_KEYS = ("step", "ok", "action", "result", "error", "budget")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    args = ["mlsandbox.integrations.openenv", "--port", str(port), "--backend", "sim", "--sandbox", "oe-sim"]
    with server_process([*args, "--no-start", "--max-sessions", "2", "--scenario", SCENARIO], port) as url:
        yield url


def _client(url: str) -> Any:
    return MLSandboxClient(base_url=url, message_timeout_s=120).sync()


def _as_dict(observation: Any) -> dict[str, Any]:
    return observation.model_dump(mode="json", include=set(OBS_KEYS))


def test_a_sim_episode_reaches_the_same_grade_as_in_process(server: str) -> None:
    local = MLSandboxEnv(SCENARIO, backend="sim", sandbox="oe-sim-local")
    try:
        expected = run_episode(local, RuleAgent(), seed=7, scenario=SCENARIO)
    finally:
        local.close()
    assert expected.success, expected.grade
    agent = RuleAgent()
    with _client(server) as env:
        result = env.reset(seed=7, scenario=SCENARIO)
        first = _as_dict(result.observation)
        assert first == {k: expected.first_observation[k] for k in OBS_KEYS}
        agent.reset(first, seed=7)
        while not result.done:
            result = env.step(MLSandboxAction(**agent.act(_as_dict(result.observation))))
        state = env.state()
    grade = result.observation.info["grade"]
    assert grade["success"] and grade["score"] == pytest.approx(expected.grade["score"])  # type: ignore[index]
    assert grade["holdout_auc"] == pytest.approx(expected.grade["holdout_auc"], abs=1e-9)  # type: ignore[index]
    assert state.backend == "sim" and state.sandbox.startswith("oe-sim-")  # the session's own sandbox


def test_sessions_have_sandboxes_of_their_own(server: str) -> None:
    a, b = _client(server), _client(server)
    try:
        a.reset(seed=1)
        b.reset(seed=1)
        sa, sb = a.state(), b.state()
        assert sa.sandbox != sb.sandbox
        # Not shared: restarting a service is the session's own business (not forbidden as on local).
        restarted = a.step({"type": "restart_service", "service": "minio"})
        assert restarted.observation.ok, restarted.observation.error
        cleaned = b.step({"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na"})
        assert cleaned.observation.ok, cleaned.observation.error
        mine = {d["name"] for d in b.step({"type": "list_datasets"}).observation.result["datasets"]}
        theirs = {d["name"] for d in a.step({"type": "list_datasets"}).observation.result["datasets"]}
        assert cleaned.observation.result["dataset"] in mine - theirs
    finally:
        a.close()
        b.close()
