"""Every interface drives the same episode to the same final state; shared-gateway restart policy;
vectorised envs; the dashboard and ``mlsandbox watch``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters
from tests.helpers import run_async

import mlsandbox  # noqa: F401  (registers the envs)
from mlsandbox.cli.watch import snapshot
from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.env.dashboard import from_audit, read_audit, render_dashboard
from mlsandbox.env.remote import RemoteMLSandboxEnv
from mlsandbox.gateway.client import GatewayClient
from mlsandbox.gateway.http import create_app
from mlsandbox.gateway.sessions import SHARED_RESTART_DENIED, SessionManager

pytestmark = pytest.mark.services

SCENARIO = "tabular-quality-basic"
SEED = 5
TERMINAL = {"succeeded", "failed", "cancelled"}


def script() -> list[dict[str, Any] | str]:
    """The fixed part of the episode (job and run ids are filled in as they appear)."""
    return [
        {"type": "list_datasets"},
        "{not json",
        {"type": "check_data_quality", "dataset": "raw/customers.parquet"},
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.parquet",
            "strategy": "drop_na",
            "output": "clean/d.parquet",
        },
        {"type": "train_model", "dataset": "clean/d.parquet", "algorithm": "logistic_regression"},
    ]


def run_script(step: Any) -> list[dict[str, Any]]:
    """Drive one episode with ``step(action) -> observation``; the observations, waits left out."""
    seen = [step(a) for a in script()]
    job = seen[-1]["result"]["job_id"]
    for _ in range(40):
        o = step({"type": "wait", "seconds": 60})
        if all(j["state"] in TERMINAL for j in o["result"]["jobs"]):
            break
    got = step({"type": "get_job", "job_id": job})
    assert got["result"]["state"] == "succeeded", got["result"]
    seen.append({k: v for k, v in got.items() if k != "result"} | {"state": got["result"]["state"]})
    seen.append(step({"type": "register_model", "run_id": got["result"]["run_id"], "name": "churn"}))
    seen.append(step({"type": "list_datasets"}))
    seen.append(step({"type": "submit"}))
    return seen


def comparable(obs: dict[str, Any]) -> dict[str, Any]:
    """What must be equal across interfaces: everything but ids, step numbers (the number of waits
    depends on how long the real job runs) and credits (CPU-seconds of real processes)."""
    out = {"ok": obs["ok"], "action": obs["action"],
           "error": (obs.get("error") or {}).get("code")}  # fmt: skip
    res = obs.get("result") or {}
    if obs["action"] == "list_datasets":
        out["datasets"] = [d["name"] for d in res["datasets"]]
    if obs["action"] == "clean_dataset":
        out["rows"] = res["rows"]
    if obs["action"] == "check_data_quality":
        out["profile_rows"] = res["profile"]["rows"]
    if obs["action"] == "register_model":
        out["registered"] = (res["name"], res["version"])
    if obs["action"] == "submit":
        out["registered_models"] = res["registered_models"]
    if "state" in obs:
        out["state"] = obs["state"]
    return out


def final_state_from_audit(path: Path) -> dict[str, Any]:
    records = read_audit(path)
    last = [r for r in records if r.get("event") == "step"][-1]
    return {
        "grade_success": last["info"]["grade"]["success"],
        "invalid": last["info"]["invalid_actions"],
        "registered": last["observation"]["result"]["registered_models"],
        "terminated": last["observation"]["action"] == "submit",
    }


def episode_log(sandbox: Any, episode_id: str) -> Path:
    return Path(sandbox.dir) / "episodes" / f"{episode_id}.jsonl"


def test_in_process_http_and_mcp_stdio_reach_the_same_final_state(sandbox: Any) -> None:
    # In-process.
    env = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        _, info = env.reset(seed=SEED)
        local = run_script(lambda a: decode_observation(env.step(a)[0]))
        local_episode = info["episode_id"]
        local_datasets = sorted(env.gateway.state.datasets)  # type: ignore[union-attr]
    finally:
        env.close()
    # HTTP gateway (typed client under the remote env).
    manager = SessionManager(sandbox.runtime(), sandbox.name)
    with TestClient(create_app(manager, close_sessions_on_shutdown=True)) as tc:
        remote = RemoteMLSandboxEnv(
            client=GatewayClient("http://testserver", http=tc), scenario=SCENARIO, render_mode="ansi"
        )
        try:
            _, rinfo = remote.reset(seed=SEED)
            over_http = run_script(lambda a: decode_observation(remote.step(a)[0]))
            shown = remote.render()  # the dashboard, replayed from the steps seen over HTTP
            assert shown is not None and "models    churn v1" in shown and "(done)" in shown
            http_datasets = sorted(manager._sessions[remote.session_id].gateway.state.datasets)  # type: ignore[index]
        finally:
            remote.close()
    # MCP over a real stdio transport (a server subprocess).
    cmd = [sys.executable, "-m", "mlsandbox.cli.interfaces", "mcp", "--sandbox", sandbox.name,
           "--no-start", "--scenario", SCENARIO, "--seed", str(SEED)]  # fmt: skip

    async def mcp_episode() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        # The SDK starts a stdio server with a few safe variables only: MLSANDBOX_HOME must go along.
        env = {k: v for k, v in os.environ.items() if k.startswith("MLSANDBOX_")}
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)) as client:

            async def step(action: Any) -> dict[str, Any]:
                if isinstance(action, str):  # raw text: MCP tools take arguments, not text
                    res = await client.call_tool("wait", {"seconds": "not json"})
                    return {**res.structured_content["observation"], "error": {"code": "invalid_json"}}  # type: ignore[index]
                args = {k: v for k, v in action.items() if k != "type"}
                res = await client.call_tool(action["type"], args)
                return res.structured_content["observation"]  # type: ignore[index,no-any-return]

            seen = [await step(a) for a in script()]
            job = seen[-1]["result"]["job_id"]
            for _ in range(40):
                o = await step({"type": "wait", "seconds": 60})
                if all(j["state"] in TERMINAL for j in o["result"]["jobs"]):
                    break
            got = await step({"type": "get_job", "job_id": job})
            seen.append({k: v for k, v in got.items() if k != "result"} | {"state": got["result"]["state"]})
            seen.append(
                await step({"type": "register_model", "run_id": got["result"]["run_id"], "name": "churn"})
            )
            seen.append(await step({"type": "list_datasets"}))
            seen.append(await step({"type": "submit"}))
            out = seen
        return out

    over_mcp = run_async(mcp_episode)

    expected = [comparable(o) for o in local]
    assert [comparable(o) for o in over_http] == expected
    # The MCP script sends the raw-text step as a malformed tool call: the same step, also an error.
    mcp_cmp = [comparable(o) for o in over_mcp]
    assert [c for i, c in enumerate(mcp_cmp) if i != 1] == [c for i, c in enumerate(expected) if i != 1]
    assert not mcp_cmp[1]["ok"] and not expected[1]["ok"]
    assert http_datasets == local_datasets
    # Final state, as each episode's audit log recorded it (the MCP server ran in another process).
    finals = [final_state_from_audit(episode_log(sandbox, local_episode)),
              final_state_from_audit(episode_log(sandbox, rinfo["episode_id"]))]  # fmt: skip
    mcp_logs = sorted((Path(sandbox.dir) / "episodes").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    finals.append(final_state_from_audit(mcp_logs[-1]))
    assert finals[0] == finals[1] == finals[2]
    assert finals[0]["invalid"] == 1 and finals[0]["grade_success"] is True


def test_restart_service_is_denied_on_a_shared_gateway_unless_allowed(sandbox: Any) -> None:
    manager = SessionManager(sandbox.runtime(), sandbox.name)
    assert manager.restart_policy == "deny"
    with TestClient(create_app(manager)) as tc:
        gw = GatewayClient("http://testserver", http=tc)
        assert gw.health().restart_service == "deny"
        s = gw.create_session(SCENARIO, seed=1)
        before = {x.name: x.pid for x in sandbox.status()}
        r = gw.step(s.session_id, {"type": "restart_service", "service": "minio"})
        assert not r.observation.ok and r.observation.error is not None
        assert r.observation.error.code == "forbidden"
        assert r.observation.error.message == SHARED_RESTART_DENIED
        assert r.reward < 0 and r.info["invalid_actions"] == 1
        assert {x.name: x.pid for x in sandbox.status()} == before  # nothing was restarted
        ok = gw.step(s.session_id, {"type": "get_service_health", "service": "minio"})
        assert ok.observation.ok
        gw.close_all()
    with pytest.raises(ValueError, match="restart_policy"):
        SessionManager(sandbox.runtime(), sandbox.name, restart_policy="maybe")  # type: ignore[arg-type]
    allowed = SessionManager(sandbox.runtime(), sandbox.name, restart_policy="allow")
    try:
        created = allowed.create()
        session = allowed._sessions[created.session_id]
        assert session.gateway.denied_actions == {}
    finally:
        allowed.close_all()


def test_make_vec_async_runs_isolated_episodes_on_one_sandbox(sandbox: Any, s3: Any) -> None:
    envs = gym.make_vec("mlsandbox/MLSandbox-v0", num_envs=2, vectorization_mode="async",
                        scenario=SCENARIO, sandbox=sandbox.name, start_sandbox=False)  # fmt: skip
    try:
        obs, info = envs.reset(seed=[3, 3])
        ids = list(info["episode_id"])
        assert len(set(ids)) == 2
        first = [decode_observation(t) for t in obs["text"]]
        assert first[0] == first[1]  # same seed, same first observation, separate episodes
        clean = {"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na",
                 "output": "clean/only-in-env-0.parquet"}  # fmt: skip
        obs, _r, _te, _tr, info = envs.step([clean, {"type": "list_datasets"}])
        listed = decode_observation(obs["text"][1])["result"]["datasets"]
        assert "clean/only-in-env-0.parquet" not in [d["name"] for d in listed]
        buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
        assert {"ep-" + i.lower() for i in ids} <= buckets
    finally:
        envs.close()
    buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert not ({"ep-" + i.lower() for i in ids} & buckets), "closing the vector env removed both episodes"


def test_ansi_dashboard_and_watch_follow_an_episode(sandbox: Any) -> None:
    env = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False, render_mode="ansi")
    try:
        _, info = env.reset(seed=2)
        env.step({"type": "check_data_quality", "dataset": "raw/nope.csv"})
        live = env.render()
        assert live is not None
        assert (
            "services  minio:running" in live
            and "alerts    last action check_data_quality failed: not_found" in live
        )
        assert "reward    " in live and "invalid_action=-0.500" in live
        log = episode_log(sandbox, info["episode_id"])
        replayed = render_dashboard(
            from_audit(read_audit(log), [(s.name, s.state) for s in sandbox.status()])
        )
        for line in ("budget    credits 0.00/60  steps left 29  invalid actions 1", "jobs      0 (none)"):
            assert line in live and line in replayed
        shown = snapshot(sandbox.name, info["episode_id"])
        assert shown.splitlines()[0] == log.name and "step 1/30  (running)" in shown
        cli = subprocess.run([sys.executable, "-m", "mlsandbox.cli.main", "watch", "--name", sandbox.name, "--once",
                              "--episode", info["episode_id"]], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert "last      check_data_quality: ERROR not_found" in cli.stdout
    finally:
        env.close()
    assert "(done)" in snapshot(sandbox.name, info["episode_id"])
