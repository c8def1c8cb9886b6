"""The OpenEnv server: ``openenv-core``'s own FastAPI app around :class:`MLSandboxEnvironment`.

Every route is OpenEnv's (``openenv.core.env_server.http_server.create_app``): ``POST /reset``, ``POST
/step``, ``GET /state`` (stateless: a fresh environment per request), ``GET /schema``, ``GET /metadata``,
``GET /health``, the ``/ws`` WebSocket (one session = one environment = its episodes; at most
``max_concurrent_envs`` at a time, the next connection gets OpenEnv's ``CAPACITY_REACHED`` error), and MCP
(``POST /mcp`` JSON-RPC with ``openenv/session/create``, the ``/mcp`` WebSocket, the WebSocket ``mcp``
message). What mlsandbox adds is the environment, its types and the shared sandbox.

Run it with ``python -m mlsandbox.integrations.openenv --sandbox NAME`` (see ``--help``), with ``uvicorn
mlsandbox.integrations.openenv.app:app`` (configured by ``MLSANDBOX_OPENENV_*`` variables, as the
repository's ``openenv.yaml`` does), or build the app in Python with :func:`create_openenv_app`.
"""

from __future__ import annotations

import functools
from typing import Any

from mlsandbox.integrations import require
from mlsandbox.integrations.host import SandboxHost
from mlsandbox.integrations.openenv.environment import MLSandboxEnvironment
from mlsandbox.integrations.openenv.models import MLSandboxAction, MLSandboxObservation
from mlsandbox.scenario import Scenario, load_scenario

_http = require("openenv.core.env_server.http_server", "openenv")
_types = require("openenv.core.env_server.types", "openenv")

ENV_NAME = "mlsandbox"
DEFAULT_MAX_SESSIONS = 8


def create_openenv_app(
    *,
    scenario: str | Scenario = "tabular-quality-basic",
    backend: str = "local",
    sandbox: str | None = None,
    start_sandbox: bool = False,
    max_concurrent_envs: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = None,
    allow_restart: bool = False,
    host: SandboxHost | None = None,
) -> Any:
    """OpenEnv's FastAPI app serving mlsandbox episodes of ``scenario`` (the default of each reset) on the
    sandbox ``sandbox`` of ``backend``. The sandbox is attached at the first reset; with ``start_sandbox``
    one is started if none runs, and stopped when the app shuts down. On an in-process backend (``sim``)
    each session gets a sandbox of its own instead. ``session_timeout_s`` closes
    WebSocket-less sessions idle for that long (OpenEnv's reaper)."""
    if isinstance(scenario, str):
        load_scenario(scenario)  # a broken scenario fails here, not at the first reset
    host = host or SandboxHost(backend, sandbox, start=start_sandbox)
    factory = functools.partial(
        MLSandboxEnvironment, host=host, scenario=scenario, allow_restart=allow_restart
    )
    app = _http.create_app(
        factory,
        MLSandboxAction,
        MLSandboxObservation,
        env_name=ENV_NAME,
        concurrency_config=_types.ConcurrencyConfig(
            max_concurrent_envs=max_concurrent_envs, session_timeout=session_timeout_s
        ),
    )
    app.state.mlsandbox_host = host
    app.router.on_shutdown.append(host.close)
    return app


def serve(
    *,
    host_address: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    **app_options: Any,
) -> None:
    """Run :func:`create_openenv_app` under uvicorn until interrupted, attached to the sandbox first (so a
    sandbox that is not running is reported, or started, before the server listens; one started here is
    stopped at the end)."""
    import uvicorn

    app = create_openenv_app(**app_options)
    try:
        host = app.state.mlsandbox_host
        if not host.in_process:  # an in-process backend gives each session a sandbox of its own
            host.runtime()
        uvicorn.run(app, host=host_address, port=port, log_level=log_level)
    finally:
        app.state.mlsandbox_host.close()


__all__ = ["DEFAULT_MAX_SESSIONS", "ENV_NAME", "create_openenv_app", "serve"]
