"""The MCP server on real services, through the SDK's own client: stdio, streamable HTTP, in-process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from tests.helpers import run_async

from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.gateway import ACTION_TYPES
from mlsandbox.gateway.mcp_server import (
    OBSERVATION_JSON_URI,
    OBSERVATION_URI,
    TASK_URI,
    EpisodeHost,
    build_server,
)
from mlsandbox.gateway.packs.core.actions import TrainModel
from mlsandbox.gateway.tools import parameters_schema
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services

SCENARIO = "tabular-quality-basic"
TERMINAL = {"succeeded", "failed", "cancelled"}


def _episode_buckets(s3: Any) -> set[str]:
    return {b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"].startswith("ep-")}


def _sandbox_env() -> dict[str, str]:
    """What a stdio server needs from this process's environment to find the same sandbox: the SDK starts
    it with a few safe variables only (HOME, PATH, ...), not ``MLSANDBOX_HOME``."""
    return {k: v for k, v in os.environ.items() if k.startswith("MLSANDBOX_")}


def _mcp_cmd(sandbox: Any, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mlsandbox.cli.interfaces", "mcp", "--sandbox", sandbox.name, "--no-start",
            "--scenario", SCENARIO, "--seed", "3", *extra]  # fmt: skip


async def _exercise(client: Client) -> None:
    """What every transport must do: tools from the action models, steps, tool errors, resources."""
    listed = await client.list_tools()
    assert [t.name for t in listed.tools] == list(ACTION_TYPES)
    by_name = {t.name: t for t in listed.tools}
    assert by_name["train_model"].input_schema == parameters_schema(TrainModel)
    assert "Start a training job" in (by_name["train_model"].description or "")

    ok = await client.call_tool("list_datasets", {})
    assert not ok.is_error
    text = ok.content[0].text  # type: ignore[union-attr]
    assert text.startswith("[step 1] list_datasets: ok") and "raw/customers.parquet" in text
    obs = ok.structured_content["observation"]  # type: ignore[index]
    assert [d["name"] for d in obs["result"]["datasets"]] == ["raw/customers.csv", "raw/customers.parquet"]

    bad = await client.call_tool("wait", {"seconds": "soon"})
    assert bad.is_error
    assert bad.content[0].text.startswith("invalid_parameters: invalid parameters for wait: seconds:")  # type: ignore[union-attr]
    assert bad.structured_content["observation"]["error"]["details"][0]["field"] == "seconds"  # type: ignore[index]
    missing = await client.call_tool("check_data_quality", {"dataset": "raw/nope.csv"})
    assert missing.is_error and missing.content[0].text.startswith(
        "not_found: dataset 'raw/nope.csv' does not exist"
    )  # type: ignore[union-attr]

    with pytest.raises(MCPError, match="unknown tool 'drop_tables'"):
        await client.call_tool("drop_tables", {})

    resources = await client.list_resources()
    assert [r.uri for r in resources.resources] == [TASK_URI, OBSERVATION_URI, OBSERVATION_JSON_URI]
    task = await client.read_resource(TASK_URI)
    assert load_builtin(SCENARIO).task.strip().splitlines()[0] in task.contents[0].text  # type: ignore[union-attr]
    current = await client.read_resource(OBSERVATION_URI)
    assert current.contents[0].text.startswith("[step 3] check_data_quality: ERROR not_found")  # type: ignore[union-attr]
    current_json = json.loads((await client.read_resource(OBSERVATION_JSON_URI)).contents[0].text)  # type: ignore[union-attr]
    assert current_json["step"] == 3 and current_json["error"]["code"] == "not_found"
    with pytest.raises(MCPError):
        await client.read_resource("mlsandbox://episode/secrets")


def test_stdio_transport(sandbox: Any, s3: Any) -> None:
    before = _episode_buckets(s3)

    async def main() -> None:
        cmd = _mcp_cmd(sandbox)
        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=_sandbox_env())
        async with Client(params) as client:
            assert client.server_info is not None and client.server_info.name == "mlsandbox"
            await _exercise(client)
            assert len(_episode_buckets(s3) - before) == 1

    run_async(main)
    deadline = time.monotonic() + 30
    while _episode_buckets(s3) - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _episode_buckets(s3) - before == set(), "the server closed its episode when the client left"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def mcp_http(sandbox: Any) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(_mcp_cmd(sandbox, "--transport", "streamable-http", "--port", str(port)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            assert time.monotonic() < deadline, "the MCP HTTP server did not start"
            time.sleep(0.3)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.communicate(timeout=60)


def test_streamable_http_transport(mcp_http: str) -> None:
    async def main() -> None:
        async with Client(mcp_http) as client:
            await _exercise(client)

    run_async(main)


# ---------------------------------------------------------------------------------------------- episodes

Step = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def drive(step: Step) -> dict[str, Any]:
    """A fixed script with three invalid actions; its only inputs from the world are job and run ids."""
    trace = []

    async def act(action: dict[str, Any]) -> dict[str, Any]:
        obs = await step(action)
        if action["type"] != "wait":
            trace.append((obs["action"], obs["ok"], (obs["error"] or {}).get("code")))
        return obs

    await act({"type": "list_datasets"})
    await act({"type": "wait", "seconds": "soon"})
    await act({"type": "check_data_quality", "dataset": "raw/nope.csv"})
    await act(
        {
            "type": "clean_dataset",
            "dataset": "raw/customers.parquet",
            "strategy": "impute_median",
            "output": "clean/c.parquet",
        }
    )
    o = await act({"type": "train_model", "dataset": "clean/c.parquet", "algorithm": "gradient_boosting"})
    job = o["result"]["job_id"]
    for _ in range(40):
        o = await act({"type": "wait", "seconds": 15})
        if all(j["state"] in TERMINAL for j in o["result"]["jobs"]):
            break
    o = await act({"type": "get_job", "job_id": job})
    assert o["result"]["state"] == "succeeded", o
    await act({"type": "register_model", "run_id": o["result"]["run_id"], "name": "churn"})
    await act({"type": "register_model", "run_id": "0" * 32, "name": "churn"})
    listed = await act({"type": "list_datasets"})
    final = await act({"type": "submit"})
    return {
        "trace": trace,
        "datasets": listed["result"]["datasets"],
        "registered": final["result"]["registered_models"],
    }


def test_mcp_episode_reaches_the_same_final_state_as_in_process(sandbox: Any) -> None:
    env = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        env.reset(seed=8)

        async def local_step(action: dict[str, Any]) -> dict[str, Any]:
            return decode_observation(env.step(action)[0])

        expected = run_async(drive, local_step)
        local = env.gateway.state  # type: ignore[union-attr]
        local_grade = env.gateway.grade  # type: ignore[union-attr]
    finally:
        env.close()

    host = EpisodeHost(sandbox.runtime(), load_builtin(SCENARIO), seed=8, sandbox=sandbox.name)
    try:

        async def main() -> dict[str, Any]:
            async with Client(build_server(host)) as client:

                async def mcp_step(action: dict[str, Any]) -> dict[str, Any]:
                    args = {k: v for k, v in action.items() if k != "type"}
                    res = await client.call_tool(action["type"], args)
                    obs = res.structured_content["observation"]  # type: ignore[index]
                    assert res.is_error is (not obs["ok"])
                    return obs

                return await drive(mcp_step)

        got = run_async(main)
        remote = host.gateway.state
        assert sorted(remote.datasets) == sorted(local.datasets)
        assert len(remote.registered) == len(local.registered) == 1
        assert remote.invalid_actions == local.invalid_actions == 3
        assert remote.submitted and local.submitted
        assert host.gateway.grade is not None and local_grade is not None
        assert host.gateway.grade.success == local_grade.success
    finally:
        host.close()
    assert got == expected
