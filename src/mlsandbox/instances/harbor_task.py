"""What runs inside an exported Harbor task's container (``python -m mlsandbox.instances.harbor_task``).

- ``serve``: the episode of the task's scenario as an MCP server (streamable HTTP), started by the image's
  entrypoint; beside ``/mcp`` it answers ``GET /episode`` with the episode's running record (steps, reward
  components, and once it is over, the grade), which lives in the server's memory only.
- ``solve``: the reference agent plays the episode through the MCP server (Harbor's ``solution/solve.sh``).
- ``verify``: ends the episode with ``submit`` when the agent has not, so the sandbox's grader grades what
  was delivered, and writes the reward and its components (``tests/test.sh``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from mlsandbox.backends.protocols import Runtime
from mlsandbox.gateway.mcp_server import OBSERVATION_JSON_URI, EpisodeHost, streamable_http_app
from mlsandbox.gateway.observations import StepResult
from mlsandbox.scenario import Scenario, load_scenario

DEFAULT_PORT = 8766


class RecordedEpisode(EpisodeHost):
    """An episode host that keeps a record of the episode for the verifier."""

    def __init__(
        self, runtime: Runtime, scenario: Scenario, *, seed: int | None = None, sandbox: str
    ) -> None:
        super().__init__(runtime, scenario, seed=seed, sandbox=sandbox)
        self._record_lock = threading.Lock()
        self.record: dict[str, Any] = {
            "scenario": scenario.id,
            "seed": self.seed,
            "steps": 0,
            "over": False,
            "return": 0.0,
            "components": {},
            "grade": None,
        }

    def step(self, action: Any) -> StepResult:
        res = super().step(action)
        with self._record_lock:
            rec = self.record
            rec["steps"] = int(res.info.get("step", rec["steps"] + 1))
            rec["return"] = round(rec["return"] + float(res.reward), 6)
            for k, v in (res.info.get("reward_components") or {}).items():
                rec["components"][k] = round(rec["components"].get(k, 0.0) + float(v), 6)
            if res.terminated or res.truncated:
                rec["over"] = True
                rec["grade"] = res.info.get("grade")
                rec["constraint_violation"] = res.info.get("constraint_violation")
        return res

    def snapshot(self) -> dict[str, Any]:
        with self._record_lock:
            return json.loads(json.dumps(self.record, default=str))


def serve(scenario_file: str, *, host: str, port: int, backend: str, seed: int | None) -> None:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from mlsandbox.backends.registry import get_backend

    sc = load_scenario(scenario_file)
    be = get_backend(backend, "harbor-task")
    be.up(ephemeral=True)
    try:
        episode = RecordedEpisode(be.runtime(), sc, seed=seed, sandbox="harbor-task")
        app = streamable_http_app(episode, bind_host=host)

        async def record(request: Request) -> JSONResponse:
            return JSONResponse(episode.snapshot())

        app.add_route("/episode", record, methods=["GET"])
        print(f"MCP for {sc.id} on http://{host}:{port}/mcp", file=sys.stderr, flush=True)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        be.down()


def _wait(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(f"{url}/episode", timeout=5).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


async def _play(url: str, scenario: Scenario) -> dict[str, Any]:
    from mcp import Client

    from mlsandbox.agents import make_agent

    record = httpx.get(f"{url}/episode", timeout=10).json()
    agent = make_agent(scenario.reference_agent, seed=int(record["seed"]))
    async with Client(f"{url}/mcp") as client:
        first = await client.read_resource(OBSERVATION_JSON_URI)
        obs = json.loads(getattr(first.contents[0], "text", "{}"))
        agent.reset(obs, seed=int(record["seed"]))
        while True:
            action = agent.act(obs)
            payload = json.loads(action) if isinstance(action, str) else dict(action)
            name = payload.pop("type")
            result = await client.call_tool(name, payload)
            out = result.structured_content or {}
            obs = out.get("observation") or {}
            if out.get("terminated") or out.get("truncated"):
                break
    return dict(httpx.get(f"{url}/episode", timeout=10).json())


def solve(url: str, scenario_file: str) -> int:
    _wait(url)
    record = anyio.run(_play, url, load_scenario(scenario_file))
    grade = record.get("grade") or {}
    print(f"reference agent: {grade.get('reason', 'not graded')}")
    return 0


def reward_of(record: dict[str, Any]) -> dict[str, float]:
    """Harbor's reward.json: ``reward`` (1 when the goal is met and no hard constraint broke, else 0), the
    grade's score and figures, the episode's return and each reward component's sum."""
    grade = record.get("grade") or {}
    success = bool(grade.get("success")) and not record.get("constraint_violation")
    out: dict[str, float] = {
        "reward": 1.0 if success else 0.0,
        "score": float(grade.get("score") or 0.0),
        "episode_return": float(record.get("return") or 0.0),
        "steps": float(record.get("steps") or 0),
    }
    for key, value in grade.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and key not in ("score",):
            out[f"grade_{key}"] = float(value)
    for key, value in (record.get("components") or {}).items():
        out[f"component_{key}"] = float(value)
    return out


async def _submit(url: str) -> None:
    from mcp import Client

    async with Client(f"{url}/mcp") as client:
        await client.call_tool("submit", {})


def verify(url: str, out: Path) -> int:
    _wait(url)
    record = httpx.get(f"{url}/episode", timeout=10).json()
    if not record.get("over"):
        anyio.run(_submit, url)  # the grader grades what was delivered so far
        record = httpx.get(f"{url}/episode", timeout=10).json()
    reward = reward_of(record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reward, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"grade": record.get("grade"), "reward": reward["reward"]}, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlsandbox.instances.harbor_task")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--scenario", required=True)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--backend", default="sim")
    s.add_argument("--seed", type=int, default=None)
    for name in ("solve", "verify"):
        c = sub.add_parser(name)
        c.add_argument("--url", default=f"http://127.0.0.1:{DEFAULT_PORT}")
        if name == "solve":
            c.add_argument("--scenario", required=True)
        else:
            c.add_argument("--out", type=Path, default=Path("/logs/verifier/reward.json"))
    a = p.parse_args(argv)
    if a.command == "serve":
        serve(a.scenario, host=a.host, port=a.port, backend=a.backend, seed=a.seed)
        return 0
    if a.command == "solve":
        return solve(a.url, a.scenario)
    return verify(a.url, a.out)


if __name__ == "__main__":
    sys.exit(main())
