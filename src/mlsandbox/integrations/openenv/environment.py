"""mlsandbox as an OpenEnv ``Environment``: one episode at a time on a shared running sandbox.

An :class:`MLSandboxEnvironment` is cheap to make: OpenEnv's server makes one per WebSocket session and one
per stateless HTTP request, so nothing touches the sandbox before ``reset``. ``reset`` starts an isolated
episode (its own bucket, experiment, job label, model names) on the host's sandbox and ends the previous
one; ``step`` carries out one catalog action through the gateway and returns the observation with that
step's reward and ``done``; ``close`` ends the episode and removes what it made.

Bad input never raises out of ``step``: an unknown action, wrong parameters, a dataset that does not exist,
or a step with no episode running are error observations (with the gateway's penalty where an episode
runs). ``reset`` raises ``ValueError`` for an unknown scenario or reset parameter, which OpenEnv's WebSocket
turns into an error message and its HTTP route into a 500 with the message.

Sessions share the sandbox's services, so ``restart_service`` is refused with a ``forbidden`` error
observation unless the server allows it (as ``mlsandbox serve --allow-restart``). On a backend whose sandbox
lives in the server's process (``sim``), each session has a sandbox of its own instead (no two share a
virtual clock), brought down when the session closes; its restarts concern it alone.

Every episode is labelled ``interface: openenv`` in the audit log (what the console filters on).

MCP: the environment also exposes the catalog as MCP tools (``mcp_server``, read by OpenEnv's ``/mcp``
routes and the WebSocket ``mcp`` message): ``tools/list`` needs no episode; ``tools/call`` carries the
action out as a step of the session's episode, starting one (the server's scenario) if none runs yet.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from mlsandbox import __version__
from mlsandbox.backends.protocols import Backend, Runtime
from mlsandbox.errors import ActionError
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.observations import error_observation
from mlsandbox.gateway.render import render_observation
from mlsandbox.integrations import require
from mlsandbox.integrations.host import SandboxHost
from mlsandbox.integrations.openenv.models import MLSandboxAction, MLSandboxObservation, MLSandboxState
from mlsandbox.scenario import Scenario, catalog_ids, load_builtin, load_scenario

_interfaces = require("openenv.core.env_server.interfaces", "openenv")
_types = require("openenv.core.env_server.types", "openenv")

SHARED_RESTART_DENIED = (
    "restart_service is denied on this server: its sessions share one sandbox, so a restart would interrupt "
    "every session's episode (start the server with allow_restart / --allow-restart to permit it)"
)
NO_EPISODE = (
    "no episode is running in this environment: reset first. OpenEnv's HTTP /reset and /step are stateless "
    "(each request gets a fresh environment whose episode ends with the request): play an episode over a "
    "WebSocket session (/ws, e.g. MLSandboxClient or openenv's GenericEnvClient)"
)
RESET_PARAMETERS = ("seed", "episode_id", "scenario", "max_steps")
MAX_SEED = 2**31 - 1
NO_BUDGET = {"credits": 0.0, "credits_used": 0.0, "steps_left": 0}
"""The budget of a step with no episode running: nothing to spend, no step left."""
TEXT_MAX_CHARS = 6000


class MLSandboxEnvironment(_interfaces.Environment):  # type: ignore[name-defined]
    """One OpenEnv session: episodes of mlsandbox scenarios on the host's sandbox."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # episodes are isolated on the shared services

    def __init__(
        self,
        host: SandboxHost | None = None,
        *,
        scenario: str | Scenario = "tabular-quality-basic",
        allow_restart: bool = False,
        text_max_chars: int = TEXT_MAX_CHARS,
    ) -> None:
        super().__init__()
        self.host = host or SandboxHost()
        self.default_scenario = scenario
        self.allow_restart = allow_restart
        self.text_max_chars = text_max_chars
        self.gateway: Gateway | None = None
        self._own: Backend | None = None
        """This session's own sandbox, on an in-process backend (see the module docstring)."""
        self._lock = threading.RLock()  # reset inside a tool call takes it again
        self._requested_episode_id: str | None = None
        self._total_reward = 0.0
        self._mcp_server: Any | None = None
        self.mcp_client = None  # tools are called on the server object directly (OpenEnv's /mcp routes)

    # ------------------------------------------------------------------------------------ OpenEnv API

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> MLSandboxObservation:
        """A new episode: ``scenario`` (a built-in id; the server's own by default), ``seed`` (the
        scenario's by default), ``max_steps`` (overrides the scenario's step limit)."""
        unknown = sorted(set(kwargs) - set(RESET_PARAMETERS))
        if unknown:
            raise ValueError(f"unknown reset parameters {unknown}; supported: {list(RESET_PARAMETERS)}")
        scenario = self._scenario(kwargs.get("scenario"), kwargs.get("max_steps"))
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
        ):
            raise ValueError(f"seed must be an integer in 0..{MAX_SEED}, got {seed!r}")
        with self._lock:
            self._end_episode()
            runtime, shared = self._runtime()
            denied = {"restart_service": SHARED_RESTART_DENIED} if shared and not self.allow_restart else None
            gateway = Gateway(
                runtime,
                scenario,
                seed=seed,
                sandbox=self.sandbox,
                denied_actions=denied,
                labels={"interface": "openenv"},
            )
            try:
                first = gateway.start()
            except Exception:
                gateway.close()
                raise
            self.gateway = gateway
            self._requested_episode_id = episode_id
            self._total_reward = 0.0
            info = {
                "episode_id": gateway.state.episode_id,
                "scenario": scenario.id,
                "seed": gateway.seed,
                "sandbox": self.sandbox,
            }
            return self._observation(first, reward=None, done=False, info=info)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Carry out one catalog action (an :class:`MLSandboxAction`, a dict or JSON text).

        OpenEnv's MCP-style actions are understood too (what ``MCPToolClient`` sends over the WebSocket):
        ``list_tools`` gives a ``ListToolsObservation`` of the catalog and takes no step; ``call_tool``
        carries the tool's action out as a step (an episode is started if none runs) and gives a
        ``CallToolObservation`` whose ``result`` is the observation."""
        raw = action.as_action() if isinstance(action, MLSandboxAction) else action
        if isinstance(raw, dict) and raw.get("type") in ("list_tools", "call_tool"):
            return self._mcp_step(raw)
        with self._lock:
            return self._step(raw)

    @property
    def state(self) -> MLSandboxState:
        gw = self.gateway
        if gw is None:
            return MLSandboxState(sandbox=self.sandbox, backend=self.host.backend_kind)
        st = gw.state
        return MLSandboxState(
            episode_id=st.episode_id,
            step_count=st.step,
            scenario=gw.scenario.id,
            seed=gw.seed,
            sandbox=self.sandbox,
            backend=self.host.backend_kind,
            done=st.done,
            credits_used=round(st.credits_used, 4),
            invalid_actions=st.invalid_actions,
            total_reward=round(self._total_reward, 6),
            grade=gw.grade.as_dict() if gw.grade is not None else None,
            requested_episode_id=self._requested_episode_id,
        )

    def get_metadata(self) -> Any:
        scenario = self.default_scenario
        name = scenario.id if isinstance(scenario, Scenario) else str(scenario)
        return _types.EnvironmentMetadata(
            name="mlsandbox",
            description=(
                "Real-execution MLOps episodes (data, training, tracking, registry, serving, incidents) on "
                f"sandbox {self.host.sandbox!r} ({self.host.backend_kind}); default scenario {name!r}; "
                f"built-in scenarios: {', '.join(catalog_ids())}."
            ),
            version=__version__,
        )

    def close(self) -> None:
        with self._lock:
            self._end_episode()
            if self._own is not None:
                own, self._own = self._own, None
                own.down()

    @property
    def sandbox(self) -> str:
        """The sandbox this session's episodes run on."""
        return self._own.name if self._own is not None else self.host.sandbox

    # ------------------------------------------------------------------------------------------- MCP

    @property
    def mcp_server(self) -> Any:
        """A FastMCP server with one tool per catalog action, bound to this session (built on first use)."""
        if self._mcp_server is None:
            self._mcp_server = _build_mcp_server(self)
        return self._mcp_server

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One MCP tool call: the action ``name`` with ``arguments`` as a step (an episode is started if
        none runs); the observation as JSON with ``reward`` and ``done``."""
        from mlsandbox.gateway.tools import tool_call_to_action

        raw = tool_call_to_action(name, arguments)

        def run() -> MLSandboxObservation:
            with self._lock:
                if self.gateway is None:
                    self.reset()
                return self._step(raw)

        obs = await asyncio.to_thread(run)
        return obs.model_dump(mode="json")

    def _mcp_step(self, raw: dict[str, Any]) -> Any:
        from mlsandbox.gateway.tools import tool_call_to_action, tool_specs

        mcp = require("openenv.core.env_server.mcp_types", "openenv")
        if raw["type"] == "list_tools":
            tools = [
                mcp.Tool(name=s["name"], description=s["description"], input_schema=s["parameters"])
                for s in tool_specs()
            ]
            return mcp.ListToolsObservation(tools=tools)
        name = raw.get("tool_name")
        arguments = raw.get("arguments")
        with self._lock:
            if self.gateway is None:
                self.reset()
            obs = self._step(
                tool_call_to_action(str(name), arguments if isinstance(arguments, dict) else None)
            )
        return mcp.CallToolObservation(
            tool_name=str(name),
            result=obs.model_dump(mode="json", exclude={"reward", "done", "metadata"}),
            reward=obs.reward,
            done=obs.done,
        )

    # --------------------------------------------------------------------------------------- helpers

    def _scenario(self, ref: Any, max_steps: Any) -> Scenario:
        if ref is None:
            base = self.default_scenario
            scenario = base if isinstance(base, Scenario) else load_scenario(base)
        elif isinstance(ref, str):
            scenario = load_builtin(ref)  # a client names built-in scenarios only, never a file
        else:
            raise ValueError(f"scenario must be a built-in scenario id, got {type(ref).__name__}")
        if max_steps is not None:
            if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= 10_000:
                raise ValueError(f"max_steps must be an integer in 1..10000, got {max_steps!r}")
            scenario = scenario.model_copy(update={"max_steps": max_steps})
        return scenario

    def _runtime(self) -> tuple[Runtime, bool]:
        """The runtime of this session's next episode, and whether its sandbox is shared."""
        if not self.host.in_process:
            return self.host.runtime(), True
        if self._own is None:
            self._own = self.host.own_sandbox()
        return self._own.runtime(), False

    def _step(self, raw: Any) -> MLSandboxObservation:
        gw = self.gateway
        if gw is None:
            obs = error_observation(0, None, ActionError("no_episode", NO_EPISODE), NO_BUDGET)
            return self._observation(obs, reward=0.0, done=True, info={"error": "no_episode"})
        res = gw.step(raw)
        self._total_reward += res.reward
        info = {**res.info, "terminated": res.terminated, "truncated": res.truncated}
        info.pop("timings", None)
        return self._observation(
            res.observation, reward=res.reward, done=res.terminated or res.truncated, info=info
        )

    def _observation(
        self, obs: dict[str, Any], *, reward: float | None, done: bool, info: dict[str, Any]
    ) -> MLSandboxObservation:
        # The gateway's observation (the fields of its one Observation model), OpenEnv's and our own.
        return MLSandboxObservation.model_validate(
            {
                **obs,
                "text": render_observation(obs, max_chars=self.text_max_chars),
                "info": info,
                "reward": reward,
                "done": done,
            }
        )

    def _end_episode(self) -> None:
        if self.gateway is not None:
            gw, self.gateway = self.gateway, None
            gw.close()


def _build_mcp_server(env: MLSandboxEnvironment) -> Any:
    fastmcp = require("fastmcp", "openenv")
    from fastmcp.tools import FunctionTool

    from mlsandbox.gateway.tools import tool_specs

    server = fastmcp.FastMCP("mlsandbox")
    for spec in tool_specs():
        server.add_tool(
            FunctionTool(
                name=spec["name"],
                description=spec["description"],
                parameters=spec["parameters"],
                fn=_tool_function(env, spec["name"]),
            )
        )
    return server


def _tool_function(env: MLSandboxEnvironment, name: str) -> Any:
    async def call(**arguments: Any) -> dict[str, Any]:
        return await env.call_tool(name, arguments)

    call.__name__ = name
    return call


__all__ = ["NO_EPISODE", "SHARED_RESTART_DENIED", "MLSandboxEnvironment"]
