"""The LLM agent plays a whole real episode against a local server that speaks chat completions.

The server is a real HTTP server; its "model" is a script that reads the conversation (the rendered
observations in the tool messages) and answers with the next tool call, as a model would.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services

SCENARIO = "churn-clean-small"


def policy(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The next tool call, from what the conversation shows."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    last = results[-1] if results else ""
    started = [r for r in results if "train_model: ok" in r or "retry_job: ok" in r]
    job = re.search(r"job_id: (job-[0-9]+)", started[-1]).group(1) if started else "job-1"  # type: ignore[union-attr]
    if not results:
        return {"name": "check_data_quality", "arguments": {"dataset": "raw/customers.parquet"}}
    if "check_data_quality: ok" in last:
        return {
            "name": "train_model",
            "arguments": {"dataset": "raw/customers.parquet", "algorithm": "logistic_regression"},
        }
    if "register_model: ok" in last:
        return {"name": "submit", "arguments": {}}
    run = re.search(r"run_id: ([0-9a-f]{32})", last)
    if "get_job: ok" in last and "state: succeeded" in last and run:
        return {"name": "register_model", "arguments": {"run_id": run.group(1), "name": "churn"}}
    if "get_job: ok" in last and "state: failed" in last:
        return {"name": "retry_job", "arguments": {"job_id": job}}
    if "wait: ok" in last:
        return {"name": "get_job", "arguments": {"job_id": job}}
    return {"name": "wait", "arguments": {"seconds": 30}}


class PolicyServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                call = policy(body["messages"])
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{len(outer.requests)}",
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                        }
                    ],
                }
                payload = {
                    "id": "x",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930},
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server() -> Iterator[PolicyServer]:
    s = PolicyServer()
    yield s
    s.close()


def test_llm_agent_solves_an_episode_through_a_chat_completions_server(
    sandbox: Any, server: PolicyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSANDBOX_LLM_BASE_URL", server.url)
    monkeypatch.setenv("MLSANDBOX_LLM_MODEL", "scripted")
    agent = make_agent("llm", seed=9)
    env = MLSandboxEnv(SCENARIO, sandbox=sandbox.name, start_sandbox=False)
    try:
        res = run_episode(env, agent, seed=9, scenario=load_builtin(SCENARIO))
    finally:
        env.close()
        agent.close()  # type: ignore[attr-defined]
    assert res.success, (res.grade, [s.action for s in res.steps])
    assert res.invalid_actions == 0
    kinds = [s.action["type"] for s in res.steps if isinstance(s.action, dict)]
    assert kinds[:2] == ["check_data_quality", "train_model"] and kinds[-2:] == ["register_model", "submit"]
    assert set(kinds) <= {
        "check_data_quality",
        "train_model",
        "wait",
        "get_job",
        "retry_job",
        "register_model",
        "submit",
    }
    assert len(server.requests) == len(res.steps)
    # Every request carried the tools and the rendered observations; tokens were counted.
    assert all(len(r["tools"]) > 10 for r in server.requests)
    assert "`churn`" in server.requests[0]["messages"][1]["content"]  # the task, then the observation
    assert agent.usage.total_tokens == 930 * len(server.requests)  # type: ignore[attr-defined]
