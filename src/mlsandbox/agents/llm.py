"""An agent that drives any OpenAI-compatible chat-completions endpoint with tool calling.

The gateway's actions become the request's ``tools`` (:func:`mlsandbox.gateway.tools.openai_tools`); every
observation is rendered as text (:func:`mlsandbox.gateway.render.render_observation`) and sent back as the
``tool`` message answering the call that produced it. The first tool call of each reply becomes the action
(:func:`~mlsandbox.gateway.tools.tool_call_to_action`); a reply without one is sent to the gateway as
text, which rejects it with an error observation the model then reads.

Works with hosted APIs and local servers (vLLM, Ollama, llama.cpp): base URL, model and key come from
:class:`LLMConfig` (or ``MLSANDBOX_LLM_*`` environment variables). Tokens are counted from each reply's
``usage`` (estimated from the text when a server sends none); when the token or cost cap is reached the
agent submits and says why in :attr:`LLMAgent.stopped`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlsandbox.gateway.render import estimate_tokens, render_observation
from mlsandbox.gateway.tools import openai_tools, tool_call_to_action

SYSTEM_PROMPT = """You are an ML engineer working in a sandboxed MLOps platform (object storage, an \
experiment tracker and model registry, an orchestrator, compute with costs). Each turn, call exactly one \
tool: it is carried out and you see the result. Inspect before you act, read errors and logs when \
something fails, keep compute costs low, and call `submit` when the task is done. Where the tools \
include `write_file` and `run_python`, you also have a workspace: write your own Python there and run it \
as a job (follow it with `get_job`, `wait` and `get_logs`); it runs isolated with the sandbox's real \
services configured (`boto3.client("s3")` on your bucket `$MLSANDBOX_BUCKET`, `mlflow` on your experiment \
`$MLSANDBOX_EXPERIMENT_ID`; log models with `mlflow.sklearn.log_model(..., serialization_format="skops")`), \
and `read_file` shows what it wrote."""


class LLMError(Exception):
    """The endpoint failed or answered something that is not a chat completion."""


@dataclass
class LLMConfig:
    base_url: str = "http://localhost:11434/v1"
    model: str = "llama3.1"
    api_key: str | None = None
    temperature: float = 0.0
    max_reply_tokens: int = 512
    max_total_tokens: int | None = 200_000
    """Prompt plus completion tokens over the episode; the agent submits when it is reached."""
    max_cost_usd: float | None = None
    """Cost cap over the episode (needs the prices below); the agent submits when it is reached."""
    usd_per_million_prompt: float = 0.0
    usd_per_million_completion: float = 0.0
    max_observation_chars: int = 4000
    history_turns: int = 12
    """Past turns (a call and its result) kept in each request, besides the task."""
    timeout_s: float = 120.0
    system_prompt: str = SYSTEM_PROMPT
    extra_headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LLMConfig:
        """``MLSANDBOX_LLM_BASE_URL``, ``_MODEL``, ``_API_KEY`` (or ``OPENAI_API_KEY``), ``_MAX_COST_USD``,
        ``_MAX_TOKENS``, ``_USD_PER_MTOK_PROMPT``, ``_USD_PER_MTOK_COMPLETION``."""
        e = os.environ if env is None else env
        cfg = cls()
        cfg.base_url = e.get("MLSANDBOX_LLM_BASE_URL", cfg.base_url)
        cfg.model = e.get("MLSANDBOX_LLM_MODEL", cfg.model)
        cfg.api_key = e.get("MLSANDBOX_LLM_API_KEY") or e.get("OPENAI_API_KEY")
        if "MLSANDBOX_LLM_MAX_COST_USD" in e:
            cfg.max_cost_usd = float(e["MLSANDBOX_LLM_MAX_COST_USD"])
        if "MLSANDBOX_LLM_MAX_TOKENS" in e:
            cfg.max_total_tokens = int(e["MLSANDBOX_LLM_MAX_TOKENS"])
        cfg.usd_per_million_prompt = float(e.get("MLSANDBOX_LLM_USD_PER_MTOK_PROMPT", 0) or 0)
        cfg.usd_per_million_completion = float(e.get("MLSANDBOX_LLM_USD_PER_MTOK_COMPLETION", 0) or 0)
        return cfg


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMAgent:
    """One chat per episode; one tool call per step."""

    name = "llm"

    def __init__(
        self, config: LLMConfig | None = None, *, seed: int | None = None, client: httpx.Client | None = None
    ) -> None:
        self.config = config or LLMConfig()
        self.seed = seed
        headers = {"Content-Type": "application/json", **self.config.extra_headers}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        self._client = client or httpx.Client(
            base_url=self.config.base_url.rstrip("/"), headers=headers, timeout=self.config.timeout_s
        )
        self._tools = openai_tools()
        self._head: list[dict[str, Any]] = []
        self._turns: list[list[dict[str, Any]]] = []
        self._pending: list[str] = []
        """Tool call ids of the last reply still waiting for their result."""
        self.usage = Usage()
        self.stopped: str | None = None
        """Why the agent stopped asking the model (a cap was reached), if it did."""

    # -------------------------------------------------------------------------------------- Agent API

    def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
        self.seed = seed
        self.usage = Usage()
        self.stopped = None
        self._pending = []
        self._turns = []
        task = str((observation.get("result") or {}).get("task") or "")
        self._head = [
            {"role": "system", "content": self.config.system_prompt},
            {"role": "user", "content": f"Task:\n{task}\n\nThe sandbox so far:\n{self._render(observation)}"},
        ]

    def act(self, observation: dict[str, Any]) -> dict[str, Any] | str:
        if self._turns:
            self._answer(observation)
        cap = self._cap_reached()
        if cap:
            self.stopped = cap
            return {"type": "submit"}
        reply = self._complete()
        message = reply.get("message") or {}
        calls = message.get("tool_calls") or []
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if calls:
            assistant["tool_calls"] = calls
        self._turns.append([assistant])
        if not calls:
            self._pending = []
            return str(message.get("content") or "")
        self._pending = [str(c.get("id")) for c in calls]
        fn = calls[0].get("function") or {}
        return tool_call_to_action(str(fn.get("name")), fn.get("arguments"))

    def close(self) -> None:
        self._client.close()

    # --------------------------------------------------------------------------------------- helpers

    def _render(self, observation: dict[str, Any]) -> str:
        return render_observation(observation, max_chars=self.config.max_observation_chars)

    def _answer(self, observation: dict[str, Any]) -> None:
        """The last turn's result: a tool message for the call carried out, a note for any further call."""
        text = self._render(observation)
        turn = self._turns[-1]
        if not self._pending:
            turn.append({"role": "user", "content": f"{text}\n\nCall one of the tools."})
            return
        turn.append({"role": "tool", "tool_call_id": self._pending[0], "content": text})
        for extra in self._pending[1:]:
            turn.append(
                {"role": "tool", "tool_call_id": extra, "content": "not carried out: one tool call per turn"}
            )

    def _messages(self) -> list[dict[str, Any]]:
        turns = self._turns[-self.config.history_turns :] if self.config.history_turns > 0 else []
        return [*self._head, *(m for t in turns for m in t)]

    def _cap_reached(self) -> str | None:
        c, u = self.config, self.usage
        if c.max_total_tokens is not None and u.total_tokens >= c.max_total_tokens:
            return f"token cap reached ({u.total_tokens} >= {c.max_total_tokens})"
        if c.max_cost_usd is not None and u.cost_usd >= c.max_cost_usd:
            return f"cost cap reached (${u.cost_usd:.4f} >= ${c.max_cost_usd:.4f})"
        return None

    def _complete(self) -> dict[str, Any]:
        messages = self._messages()
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "tools": self._tools,
            "tool_choice": "auto",
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_reply_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        try:
            resp = self._client.post("/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise LLMError(f"chat completions request to {self.config.base_url} failed: {e}") from e
        if resp.status_code != 200:
            raise LLMError(f"chat completions returned HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            data = resp.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError(f"not a chat completion: {resp.text[:300]}") from None
        usage = data.get("usage") or {}
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        if not isinstance(prompt, int):
            prompt = estimate_tokens(json.dumps(messages)) + estimate_tokens(json.dumps(self._tools))
        if not isinstance(completion, int):
            completion = estimate_tokens(json.dumps(choice.get("message") or {}))
        u, c = self.usage, self.config
        u.requests += 1
        u.prompt_tokens += prompt
        u.completion_tokens += completion
        u.cost_usd += (prompt * c.usd_per_million_prompt + completion * c.usd_per_million_completion) / 1e6
        return dict(choice)


def from_env(seed: int | None = None) -> LLMAgent:
    """An LLM agent configured from ``MLSANDBOX_LLM_*`` environment variables."""
    return LLMAgent(LLMConfig.from_env(), seed=seed)
