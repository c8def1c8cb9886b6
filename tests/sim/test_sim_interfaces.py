"""The sim backend through every interface: the HTTP gateway (a session option), MCP (in-process and
stdio), the command line (run, faults catalog, tools). Nothing needs a service."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters
from tests.helpers import run_async
from typer.testing import CliRunner

from mlsandbox.backends import get_backend
from mlsandbox.cli.main import app as cli_app
from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.gateway.http import create_app
from mlsandbox.gateway.mcp_server import EpisodeHost, build_server
from mlsandbox.gateway.sessions import SessionManager
from mlsandbox.scenario import load_builtin

SCENARIO = "tabular-quality-basic"
SCRIPT: list[dict[str, Any]] = [
    {"type": "list_datasets"},
    {"type": "check_data_quality", "dataset": "raw/nope.csv"},
    {"type": "clean_dataset", "dataset": "raw/customers.parquet", "strategy": "impute_median"},
    {
        "type": "train_model",
        "dataset": "clean/customers-impute-median.parquet",
        "algorithm": "gradient_boosting",
    },
    {"type": "wait", "seconds": 30},
    {"type": "get_job", "job_id": "job-1"},
]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_an_http_session_asks_for_the_sim_backend_and_runs_an_episode() -> None:
    # The gateway itself runs on a sim sandbox here; a session asking for sim gets a sandbox of its own.
    backend = get_backend("sim", "http-gw")
    manager = SessionManager(backend.runtime(), "http-gw")
    with TestClient(create_app(manager)) as http:
        made = http.post("/sessions", json={"scenario": SCENARIO, "seed": 4, "backend": "sim"})
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["backend"] == "sim" and body["info"]["backend"] == "sim"
        sid, headers = body["session_id"], _auth(body["token"])
        obs = []
        for action in SCRIPT:
            r = http.post(f"/sessions/{sid}/step", json=action, headers=headers)
            assert r.status_code == 200, r.text
            obs.append(r.json()["observation"])
        assert obs[1]["error"]["code"] == "not_found"
        assert obs[-1]["result"]["state"] == "succeeded"
        # Two sessions with the same seed and actions see the same episode (each its own sandbox).
        other = http.post("/sessions", json={"scenario": SCENARIO, "seed": 4, "backend": "sim"}).json()
        again = [
            http.post(f"/sessions/{other['session_id']}/step", json=a, headers=_auth(other["token"])).json()[
                "observation"
            ]
            for a in SCRIPT
        ]
        assert again == obs
        implicit = http.post("/sessions", json={"scenario": SCENARIO, "seed": 4}).json()
        assert implicit["backend"] == "sim"  # a sim gateway gives every session a sandbox of its own
        assert implicit["info"]["sandbox"] not in (body["info"]["sandbox"], "http-gw")
        refused = http.post("/sessions", json={"backend": "local"})
        assert refused.status_code == 422
        assert "lives in the gateway's process" in refused.text
        assert http.delete(f"/sessions/{sid}", headers=headers).status_code == 200


async def _mcp_steps(client: Client) -> list[dict[str, Any]]:
    out = []
    for action in SCRIPT:
        args = {k: v for k, v in action.items() if k != "type"}
        res = await client.call_tool(action["type"], args)
        obs = res.structured_content["observation"]  # type: ignore[index]
        assert res.is_error is (not obs["ok"])
        out.append(obs)
    return out


def _env_steps(seed: int) -> list[dict[str, Any]]:
    env = MLSandboxEnv(SCENARIO, backend="sim", sandbox="mcp-ref")
    try:
        env.reset(seed=seed)
        return [decode_observation(env.step(a)[0]) for a in SCRIPT]
    finally:
        env.close()


def test_mcp_on_sim_gives_the_in_process_trajectory() -> None:
    host = EpisodeHost(get_backend("sim", "mcp").runtime(), load_builtin(SCENARIO), seed=5, sandbox="mcp")
    try:

        async def main() -> list[dict[str, Any]]:
            async with Client(build_server(host)) as client:
                return await _mcp_steps(client)

        got = run_async(main)
    finally:
        host.close()
    assert got == _env_steps(5)
    assert got[-1]["result"]["state"] == "succeeded"


def test_mcp_over_stdio_on_sim() -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mlsandbox.cli.interfaces", "mcp", "--backend", "sim", "--sandbox", "stdio-sim",
              "--scenario", SCENARIO, "--seed", "5"],
    )  # fmt: skip

    async def main() -> list[dict[str, Any]]:
        async with Client(params) as client:
            return await _mcp_steps(client)

    assert run_async(main) == _env_steps(5)


def test_cli_run_and_bench_on_sim(tmp_path: Any) -> None:
    run = CliRunner().invoke(
        cli_app, ["run", "--backend", "sim", "--agent", "rule", "--episodes", "2", "--seed", "3", "-q"]
    )
    assert run.exit_code == 0, run.output
    assert run.output.count("success: holdout AUC") == 2, run.output
    out = tmp_path / "bench"
    bench = CliRunner().invoke(
        cli_app,
        ["bench", "--backend", "sim", "--suite", "builtin", "--family", "tabular-quality-basic",
         "--family", "churn-clean-small", "--agent", "rule", "--agent", "random", "--episodes", "2",
         "--out", str(out)],
    )  # fmt: skip
    assert bench.exit_code == 0, bench.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    rule = [r for r in rows if r["agent"] == "rule"]
    assert all(r["success"] for r in rule), rule
    assert (out / "report.html").is_file()


def test_faults_catalog_and_tools_on_sim() -> None:
    res = CliRunner().invoke(cli_app, ["faults", "catalog", "--backend", "sim", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["backend"] == "sim"
    assert {row["available"] for row in doc["faults"]} == {"yes"}
    tools = CliRunner().invoke(
        cli_app, ["tools", "--backend", "sim", "--omit-unsupported", "--format", "json-schema"]
    )
    assert tools.exit_code == 0, tools.output
    assert "train_model" in tools.output and "deploy_model" in tools.output


def test_cli_status_of_a_sim_sandbox() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mlsandbox.cli.main", "status", "--backend", "sim"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "minio" in res.stdout and "mlflow" in res.stdout


@pytest.mark.parametrize("requirements", [["scikit-learn==1.3.2"], ["numpy<1.0"]])
def test_an_environment_changing_a_modelled_library_is_refused_as_unsupported(
    requirements: list[str],
) -> None:
    env = MLSandboxEnv(SCENARIO, backend="sim", sandbox="env-refusal")
    try:
        env.reset(seed=1)
        obs = decode_observation(
            env.step({"type": "create_environment", "name": "old", "requirements": requirements})[0]
        )
        assert not obs["ok"]
        assert obs["error"]["code"] == "unsupported"
        assert obs["error"]["details"]["capability"] == "environments.build"
        assert obs["error"]["details"]["backend"] == "sim"
        listed = decode_observation(env.step({"type": "list_environments"})[0])
        assert [e["name"] for e in listed["result"]["environments"]] == ["default"]  # nothing was made
        made = decode_observation(
            env.step({"type": "create_environment", "name": "extra", "requirements": ["packaging>=20"]})[0]
        )
        assert made["ok"], made
    finally:
        env.close()
