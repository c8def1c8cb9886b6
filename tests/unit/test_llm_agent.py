"""The LLM agent against a real local HTTP server that speaks the chat-completions protocol (scripted)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mlsandbox.agents.llm import LLMAgent, LLMConfig, LLMError
from mlsandbox.gateway.tools import openai_tools


class ScriptedChatServer:
    """Answers POST /v1/chat/completions with the next scripted reply; records every request."""

    def __init__(self, replies: list[dict[str, Any]], *, usage: bool = True, key: str | None = None) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.usage = usage
        self.key = key
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if outer.key and self.headers.get("Authorization") != f"Bearer {outer.key}":
                    self._send(401, {"error": {"message": "bad key"}})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if not outer.replies:
                    self._send(500, {"error": {"message": "script exhausted"}})
                    return
                message = outer.replies.pop(0)
                resp: dict[str, Any] = {
                    "id": f"chatcmpl-{len(outer.requests)}",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                }
                if outer.usage:
                    resp["usage"] = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
                self._send(200, resp)

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def first_observation() -> dict[str, Any]:
    return {
        "step": 0,
        "ok": True,
        "action": None,
        "result": {
            "scenario": "tabular-quality-basic",
            "task": "Train a churn model and register it as `churn`.",
            "datasets": [{"name": "raw/customers.csv", "format": "csv", "size_bytes": 1000}],
        },
        "error": None,
        "budget": {"credits": 60, "credits_used": 0, "steps_left": 30},
    }


def step_observation(step: int, action: str, result: dict[str, Any]) -> dict[str, Any]:
    budget = {"credits": 60, "credits_used": 0.5, "steps_left": 30 - step}
    return {"step": step, "ok": True, "action": action, "result": result, "error": None, "budget": budget}


@pytest.fixture()
def server() -> Iterator[ScriptedChatServer]:
    s = ScriptedChatServer(
        [
            {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "list_datasets", {})]},
            {
                "role": "assistant",
                "content": "Inspecting first.",
                "tool_calls": [
                    tool_call("c2", "check_data_quality", {"dataset": "raw/customers.csv"}),
                    tool_call("c3", "list_runs", {}),
                ],
            },
            {"role": "assistant", "content": "I think I am done."},
            {"role": "assistant", "content": None, "tool_calls": [tool_call("c4", "submit", {})]},
        ],
        key="sk-test",
    )
    yield s
    s.close()


def test_agent_turns_tool_calls_into_actions_and_observations_into_messages(
    server: ScriptedChatServer,
) -> None:
    cfg = LLMConfig(base_url=server.url, model="scripted-1", api_key="sk-test")
    agent = LLMAgent(cfg, seed=7)
    first = first_observation()
    agent.reset(first, seed=7)
    a1 = agent.act(first)
    assert a1 == {"type": "list_datasets"}
    req = server.requests[0]
    assert req["model"] == "scripted-1" and req["seed"] == 7
    assert req["tools"] == openai_tools()
    assert req["messages"][0]["role"] == "system"
    assert "Train a churn model" in req["messages"][1]["content"]
    assert "raw/customers.csv" in req["messages"][1]["content"]  # the rendered first observation

    obs1 = step_observation(1, "list_datasets", {"datasets": [{"name": "raw/customers.csv"}]})
    a2 = agent.act(obs1)
    assert a2 == {"type": "check_data_quality", "dataset": "raw/customers.csv"}  # the first of two calls
    msgs = server.requests[1]["messages"]
    assert msgs[2]["role"] == "assistant" and msgs[2]["tool_calls"][0]["id"] == "c1"
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": msgs[3]["content"]}
    assert msgs[3]["content"].startswith("[step 1] list_datasets: ok")

    obs2 = step_observation(
        2, "check_data_quality", {"dataset": "raw/customers.csv", "profile": {"rows": 10}}
    )
    a3 = agent.act(obs2)
    assert a3 == "I think I am done."  # no tool call: handed to the gateway as text (it rejects it)
    msgs = server.requests[2]["messages"]
    answers = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
    assert answers["c2"].startswith("[step 2] check_data_quality: ok")
    assert "not carried out" in answers["c3"]  # every call of a reply is answered

    err = {
        "step": 3,
        "ok": False,
        "action": None,
        "result": None,
        "error": {"code": "invalid_json", "message": "the action is not valid JSON"},
        "budget": {"credits": 60, "credits_used": 0.5, "steps_left": 27},
    }
    a4 = agent.act(err)
    assert a4 == {"type": "submit"}
    last = server.requests[3]["messages"][-1]
    assert (
        last["role"] == "user"
        and "invalid_json" in last["content"]
        and "Call one of the tools" in last["content"]
    )
    assert agent.usage.requests == 4 and agent.usage.total_tokens == 4 * 1050
    agent.close()


def test_cost_cap_makes_the_agent_submit(server: ScriptedChatServer) -> None:
    cfg = LLMConfig(
        base_url=server.url,
        api_key="sk-test",
        max_cost_usd=0.002,
        usd_per_million_prompt=1.0,
        usd_per_million_completion=2.0,
    )
    agent = LLMAgent(cfg)
    first = first_observation()
    agent.reset(first)
    assert agent.act(first) == {"type": "list_datasets"}  # $0.0011 spent
    assert agent.act(step_observation(1, "list_datasets", {})) == {
        "type": "check_data_quality",
        "dataset": "raw/customers.csv",
    }
    assert agent.usage.cost_usd == pytest.approx(0.0022)
    assert agent.act(step_observation(2, "check_data_quality", {})) == {"type": "submit"}
    assert agent.stopped is not None and "cost cap" in agent.stopped
    assert len(server.requests) == 2  # no request after the cap


def test_token_count_is_estimated_when_the_server_sends_no_usage() -> None:
    s = ScriptedChatServer(
        [{"role": "assistant", "tool_calls": [tool_call("x", "list_runs", {})]}], usage=False
    )
    try:
        agent = LLMAgent(LLMConfig(base_url=s.url, max_total_tokens=100))
        agent.reset(first_observation())
        assert agent.act(first_observation()) == {"type": "list_runs"}
        assert agent.usage.prompt_tokens > 1000  # the tool schemas alone are thousands of characters
        assert agent.act(step_observation(1, "list_runs", {"runs": []})) == {"type": "submit"}
        assert agent.stopped and "token cap" in agent.stopped
    finally:
        s.close()


def test_endpoint_errors_are_precise() -> None:
    s = ScriptedChatServer([], key="right")
    try:
        agent = LLMAgent(LLMConfig(base_url=s.url, api_key="wrong"))
        agent.reset(first_observation())
        with pytest.raises(LLMError, match="HTTP 401"):
            agent.act(first_observation())
    finally:
        s.close()
    agent = LLMAgent(LLMConfig(base_url="http://127.0.0.1:9/v1", timeout_s=2))
    agent.reset(first_observation())
    with pytest.raises(LLMError, match=r"request to http://127\.0\.0\.1:9/v1 failed"):
        agent.act(first_observation())


def test_config_from_environment() -> None:
    cfg = LLMConfig.from_env(
        {
            "MLSANDBOX_LLM_BASE_URL": "http://localhost:8000/v1",
            "MLSANDBOX_LLM_MODEL": "qwen",
            "OPENAI_API_KEY": "k",
            "MLSANDBOX_LLM_MAX_COST_USD": "0.5",
            "MLSANDBOX_LLM_USD_PER_MTOK_PROMPT": "0.15",
        }
    )
    assert (cfg.base_url, cfg.model, cfg.api_key, cfg.max_cost_usd) == (
        "http://localhost:8000/v1",
        "qwen",
        "k",
        0.5,
    )
    assert cfg.usd_per_million_prompt == 0.15
