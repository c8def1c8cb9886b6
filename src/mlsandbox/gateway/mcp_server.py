"""The MCP server: one episode of a scenario, its actions as MCP tools (official ``mcp`` SDK, low-level API).

- Tools: one per action, generated from the action models (:mod:`mlsandbox.gateway.tools`): name = the
  action type, description = its docstring, input schema = its parameters' JSON Schema. A call becomes one
  gateway step; the result's text is the rendered observation (:mod:`mlsandbox.gateway.render`) and its
  structured content ``{observation, reward, terminated, truncated}`` (:class:`StepOutput`, every tool's
  declared output schema; its observation is the gateway's one
  :class:`~mlsandbox.gateway.observations.Observation`). An action the gateway rejects comes
  back as a tool error (``isError``) carrying the gateway's code and message, and costs its penalty as it
  does everywhere else. A tool name that is no action is a protocol error (no step is taken).
- Resources: ``mlsandbox://episode/task`` (the scenario's task, Markdown), ``mlsandbox://episode/observation``
  (the latest observation as text) and ``mlsandbox://episode/observation.json``.

One server process serves one episode, created at start (``--scenario``/``--seed``) and closed at exit.
Transports: stdio (:func:`serve_stdio`) and streamable HTTP (:func:`streamable_http_app`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette

from mlsandbox import __version__
from mlsandbox.backends.protocols import Runtime
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.gateway.observations import Observation, StepResult
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.gateway.render import DEFAULT_MAX_CHARS, render_observation
from mlsandbox.gateway.tools import action_description, action_type, parameters_schema, tool_call_to_action
from mlsandbox.scenario import Scenario

TASK_URI = "mlsandbox://episode/task"
OBSERVATION_URI = "mlsandbox://episode/observation"
OBSERVATION_JSON_URI = "mlsandbox://episode/observation.json"
RESOURCE_NOT_FOUND = -32002


class StepOutput(BaseModel):
    """A tool call's structured content (every tool's ``outputSchema``): the step the call made."""

    model_config = ConfigDict(extra="forbid")

    observation: Observation
    reward: float = Field(description="The step's reward (the sum of its components).")
    terminated: bool = Field(description="The episode ended (submitted, or a hard constraint was broken).")
    truncated: bool = Field(description="The episode reached its step limit.")


STEP_OUTPUT_SCHEMA: dict[str, Any] = StepOutput.model_json_schema(mode="serialization")
"""The JSON Schema of :class:`StepOutput`, declared as each tool's output schema."""


class EpisodeHost:
    """The one episode an MCP server serves: a started :class:`Gateway` behind a lock."""

    def __init__(
        self,
        runtime: Runtime,
        scenario: Scenario,
        *,
        seed: int | None = None,
        sandbox: str = "default",
    ) -> None:
        self.scenario = scenario
        self.gateway = Gateway(runtime, scenario, seed=seed, sandbox=sandbox, labels={"interface": "mcp"})
        self._lock = threading.Lock()
        try:
            self.observation: dict[str, Any] = self.gateway.start()
        except BaseException:
            self.gateway.close()
            raise

    @property
    def seed(self) -> int:
        return self.gateway.seed

    def step(self, action: Any) -> StepResult:
        with self._lock:
            res = self.gateway.step(action)
            self.observation = res.observation
            return res

    def task_markdown(self) -> str:
        sc = self.scenario
        path = getattr(sc.goal, "path", None) if sc.goal.type == "predictions_file" else None
        deliverable = (
            f"a predictions file `{path}` written in the workspace by your script"
            if path
            else f"a model registered as `{sc.goal.model_name}`"
        )
        return (
            f"# {sc.title}\n\nscenario `{sc.id}` · seed {self.seed} · at most {sc.max_steps} steps · "
            f"{sc.budget.credits:g} compute credits\n\n{sc.task.strip()}\n\n"
            f"Deliverable: {deliverable}, then call the `submit` tool.\n"
        )

    def close(self) -> None:
        with self._lock:
            self.gateway.close()


def mcp_tools() -> list[types.Tool]:
    """One MCP tool per action, generated from the action models."""
    catalog = get_catalog()
    tools = []
    for model in catalog.models:
        name = action_type(model)
        tools.append(
            types.Tool(
                name=name,
                description=action_description(model),
                input_schema=parameters_schema(model),
                output_schema=STEP_OUTPUT_SCHEMA,
                annotations=types.ToolAnnotations(
                    read_only_hint=name in catalog.read_only,
                    destructive_hint=name in catalog.destructive,
                    open_world_hint=False,
                ),
            )
        )
    return tools


def build_server(host: EpisodeHost, *, max_chars: int = DEFAULT_MAX_CHARS) -> Server[Any]:
    """A low-level MCP server exposing ``host``'s episode."""
    tools = mcp_tools()
    tool_names = {t.name for t in tools}

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in tool_names:
            raise MCPError(
                types.INVALID_PARAMS, f"unknown tool {params.name!r}; tools: {', '.join(sorted(tool_names))}"
            )
        action = tool_call_to_action(params.name, params.arguments)
        res = await anyio.to_thread.run_sync(host.step, action)
        return tool_result(res, max_chars=max_chars)

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=TASK_URI,
                    name="task",
                    title=f"Task: {host.scenario.title}",
                    description="The scenario's task and deliverable.",
                    mime_type="text/markdown",
                ),
                types.Resource(
                    uri=OBSERVATION_URI,
                    name="observation",
                    title="Latest observation",
                    description="The latest observation of the episode, as text.",
                    mime_type="text/plain",
                ),
                types.Resource(
                    uri=OBSERVATION_JSON_URI,
                    name="observation.json",
                    title="Latest observation (JSON)",
                    description="The latest observation of the episode, structured.",
                    mime_type="application/json",
                ),
            ]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == TASK_URI:
            text, mime = host.task_markdown(), "text/markdown"
        elif uri == OBSERVATION_URI:
            text, mime = render_observation(host.observation, max_chars=max_chars), "text/plain"
        elif uri == OBSERVATION_JSON_URI:
            text, mime = json.dumps(host.observation, sort_keys=True), "application/json"
        else:
            raise MCPError(RESOURCE_NOT_FOUND, f"unknown resource {uri!r}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    sc = host.scenario
    return Server(
        "mlsandbox",
        version=__version__,
        title="mlsandbox episode",
        instructions=(
            f"You are working in an ML-engineering sandbox (scenario {sc.id}: {sc.title}). Read the resource "
            f"{TASK_URI} for the task. Each tool is one action and costs one step (at most {sc.max_steps}); "
            "tool errors explain what was wrong. Call `submit` when the work is done."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


def tool_result(res: StepResult, *, max_chars: int = DEFAULT_MAX_CHARS) -> types.CallToolResult:
    """A gateway step as an MCP tool result; a rejected action is a tool error with the gateway's message."""
    obs = res.observation
    text = render_observation(obs, max_chars=max_chars)
    if res.terminated or res.truncated:
        text += f"\n(episode over: {'submitted' if res.terminated else 'step limit reached'})"
    structured = {
        "observation": obs,
        "reward": res.reward,
        "terminated": res.terminated,
        "truncated": res.truncated,
    }
    if obs.get("ok"):
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)
    err = obs.get("error") or {}
    message = f"{err.get('code')}: {err.get('message')}"
    return types.CallToolResult(
        content=[types.TextContent(text=message), types.TextContent(text=text)],
        structured_content=structured,
        is_error=True,
    )


# ---------------------------------------------------------------------------------------------- transports


async def serve_stdio(make_host: Callable[[], EpisodeHost], *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
    """Serve one episode over stdin/stdout until the client disconnects; the episode is closed at the end.

    ``make_host`` runs once the transport owns the standard streams, so nothing it or the processes it
    starts print can reach the protocol stream.
    """
    async with stdio_server() as (read_stream, write_stream):
        host = await anyio.to_thread.run_sync(make_host)
        try:
            server = build_server(host, max_chars=max_chars)
            await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await anyio.to_thread.run_sync(host.close)


def streamable_http_app(
    host: EpisodeHost,
    *,
    bind_host: str = "127.0.0.1",
    path: str = "/mcp",
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Starlette:
    """A Starlette app serving the episode over MCP streamable HTTP at ``path`` (run it with uvicorn)."""
    server = build_server(host, max_chars=max_chars)
    return server.streamable_http_app(streamable_http_path=path, host=bind_host)


__all__ = [
    "OBSERVATION_JSON_URI",
    "OBSERVATION_URI",
    "STEP_OUTPUT_SCHEMA",
    "TASK_URI",
    "EpisodeHost",
    "StepOutput",
    "build_server",
    "mcp_tools",
    "serve_stdio",
    "streamable_http_app",
    "tool_result",
]
