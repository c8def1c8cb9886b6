"""CLI commands of the agent interfaces: ``serve`` (HTTP gateway), ``mcp`` (MCP server), ``openenv`` (the
OpenEnv server, with the ``openenv`` extra), ``tools`` (schemas).

``register(app)`` adds them to the main ``mlsandbox`` Typer app; ``python -m mlsandbox.cli.interfaces``
runs them on their own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mlsandbox.backends import get_backend
from mlsandbox.cli.common import (
    BackendOpt,
    NoStartOpt,
    OptionalNameOpt,
    backend_help,
    check_backend,
    sandbox_option,
)
from mlsandbox.errors import MLSandboxError, NotRunningError
from mlsandbox.gateway.tools import TOOL_FORMATS, tools_json
from mlsandbox.paths import default_sandbox_name

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Backend, Runtime

SandboxOpt = Annotated[
    str,
    sandbox_option(
        "Sandbox to attach to (started for this command if it is not running, unless --no-start)."
    ),
]
McpSandboxOpt = Annotated[
    str | None,
    sandbox_option(
        "Sandbox to attach to. Default: $MLSANDBOX_NAME or 'default' when it runs, else the only running "
        "(non-ephemeral) sandbox of the backend; with none running, one is started for this command."
    ),
]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_SANDBOX = default_sandbox_name()


def running_sandbox(backend: str) -> str:
    """The sandbox an interface attaches to when none is named: the default one (``$MLSANDBOX_NAME`` or
    ``default``) when it runs, else the only running, non-ephemeral sandbox the backend lists (so a client
    configured without a name joins the sandbox ``mlsandbox up --name X`` started instead of starting a
    second one); the default name when none runs. ``ValueError`` when several run and none is the default.
    """
    from mlsandbox.backends.registry import backend_type

    default = default_sandbox_name()
    lister = backend_type(backend).sandboxes
    if lister is None or get_backend(backend, default).is_alive():
        return default
    running = [
        s.name
        for s in lister()
        if s.phase == "running" and s.services_running and not s.ephemeral and s.name != default
    ]
    if len(running) > 1:
        raise ValueError(
            f"sandbox {default!r} is not running and several others are ({', '.join(sorted(running))}): "
            "choose one with --name"
        )
    return running[0] if running else default


def _err(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)


@contextmanager
def attached_sandbox(
    name: str, backend: str = "local", *, start: bool = True
) -> Iterator[tuple[Backend, Runtime]]:
    """The running sandbox ``name``; with ``start``, an ephemeral one started now and stopped on exit."""
    b = get_backend(backend, name)
    owns = False
    if not b.is_alive():
        if not start:
            raise NotRunningError(
                f"sandbox {name!r} is not running: start it with `mlsandbox up --name {name}`"
            )
        typer.echo(f"starting sandbox {name!r} (stopped on exit) ...", err=True)
        b.up(ephemeral=True)
        owns = True
    try:
        yield b, b.runtime()
    finally:
        if owns:
            typer.echo(f"stopping sandbox {name!r} ...", err=True)
            b.down()


# ---------------------------------------------------------------------------------------------- commands


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="Port to bind.")] = 8765,
    sandbox: SandboxOpt = DEFAULT_SANDBOX,
    backend: BackendOpt = "local",
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, help="Concurrent sessions at most.")
    ] = 16,
    no_start: NoStartOpt = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    allow_restart: Annotated[
        bool,
        typer.Option(
            "--allow-restart",
            help="Let sessions restart shared services (denied by default: a restart hits every session).",
        ),
    ] = False,
) -> None:
    """Serve the HTTP gateway (sessions, steps, tools; OpenAPI at /docs) for a running sandbox."""
    import uvicorn

    from mlsandbox.gateway.http import create_app
    from mlsandbox.gateway.sessions import SessionManager

    if host not in LOOPBACK:
        typer.echo(
            f"warning: binding {host}: anyone who reaches it can create sessions, and tokens travel in clear text",
            err=True,
        )
    try:
        with attached_sandbox(sandbox, backend, start=not no_start) as (_, runtime):
            manager = SessionManager(
                runtime,
                sandbox,
                max_sessions=max_sessions,
                restart_policy="allow" if allow_restart else "deny",
            )
            app = create_app(manager)
            typer.echo(
                f"gateway for sandbox {sandbox!r} on http://{host}:{port} (OpenAPI: /openapi.json)", err=True
            )
            try:
                uvicorn.run(app, host=host, port=port, log_level=log_level)
            finally:
                manager.close_all()
    except (MLSandboxError, ValueError, NotImplementedError) as e:
        _err(str(e))
        raise typer.Exit(code=1) from None


def mcp(
    scenario: Annotated[
        str, typer.Option("--scenario", "-s", help="Scenario id or YAML file.")
    ] = "tabular-quality-basic",
    seed: Annotated[
        int | None, typer.Option("--seed", help="Episode seed (default: the scenario's).")
    ] = None,
    transport: Annotated[str, typer.Option("--transport", "-t", help="stdio | streamable-http")] = "stdio",
    host: Annotated[str, typer.Option("--host", help="Address to bind (streamable-http).")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", min=1, max=65535, help="Port (streamable-http).")
    ] = 8766,
    sandbox: McpSandboxOpt = None,
    backend: BackendOpt = "local",
    no_start: NoStartOpt = False,
    max_chars: Annotated[int, typer.Option("--max-chars", min=200, help="Longest observation text.")] = 6000,
) -> None:
    """Serve one episode of a scenario as an MCP server (one tool per action; task and observation resources)."""
    import anyio

    from mlsandbox.gateway.mcp_server import EpisodeHost, serve_stdio, streamable_http_app
    from mlsandbox.scenario import load_scenario

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if transport not in ("stdio", "streamable-http"):
        _err(f"unknown transport {transport!r}: use stdio or streamable-http")
        raise typer.Exit(code=2)
    try:
        sc = load_scenario(scenario)
        name = sandbox if sandbox is not None else running_sandbox(backend)
        if transport == "stdio":
            stack: list[Any] = []

            def make_host() -> EpisodeHost:
                # Runs once stdio_server owns fd 0/1: nothing printed here reaches the protocol stream.
                cm = attached_sandbox(name, backend, start=not no_start)
                _, runtime = cm.__enter__()
                stack.append(cm)
                return EpisodeHost(runtime, sc, seed=seed, sandbox=name)

            try:
                anyio.run(lambda: serve_stdio(make_host, max_chars=max_chars))
            finally:
                for cm in reversed(stack):
                    cm.__exit__(None, None, None)
            return
        import uvicorn

        with attached_sandbox(name, backend, start=not no_start) as (_, runtime):
            episode = EpisodeHost(runtime, sc, seed=seed, sandbox=name)
            try:
                app = streamable_http_app(episode, bind_host=host, max_chars=max_chars)
                typer.echo(f"MCP (streamable HTTP) for {sc.id} on http://{host}:{port}/mcp", err=True)
                uvicorn.run(app, host=host, port=port, log_level="warning")
            finally:
                episode.close()
    except (MLSandboxError, ValueError, NotImplementedError) as e:
        _err(str(e))
        raise typer.Exit(code=1) from None


def openenv(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="Port to bind.")] = 8000,
    scenario: Annotated[
        str, typer.Option("--scenario", "-s", help="Scenario of a reset that names none (id or YAML file).")
    ] = "tabular-quality-basic",
    sandbox: SandboxOpt = DEFAULT_SANDBOX,
    backend: BackendOpt = "local",
    no_start: NoStartOpt = False,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, help="Concurrent WebSocket sessions at most.")
    ] = 8,
    session_timeout: Annotated[
        float | None, typer.Option("--session-timeout", help="Close sessions idle this many seconds.")
    ] = None,
    allow_restart: Annotated[
        bool,
        typer.Option(
            "--allow-restart",
            help="Let sessions restart shared services (denied by default: a restart hits every session).",
        ),
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Serve episodes to OpenEnv clients (openenv-core's HTTP routes, WebSocket sessions and MCP); needs
    the openenv extra. On an in-process backend (sim) each session has a sandbox of its own."""
    if host not in LOOPBACK:
        typer.echo(f"warning: binding {host}: anyone who reaches it can run episodes", err=True)
    try:
        from mlsandbox.integrations.openenv.server import serve as serve_openenv

        typer.echo(f"OpenEnv server for sandbox {sandbox!r} ({backend}) on http://{host}:{port}", err=True)
        serve_openenv(
            host_address=host,
            port=port,
            log_level=log_level,
            scenario=scenario,
            backend=backend,
            sandbox=sandbox,
            start_sandbox=not no_start,
            max_concurrent_envs=max_sessions,
            session_timeout_s=session_timeout,
            allow_restart=allow_restart,
        )
    except (MLSandboxError, ValueError) as e:
        _err(str(e))
        raise typer.Exit(code=1) from None


def tools(
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="openai | responses | anthropic | json-schema")
    ] = "openai",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to a file instead of stdout.")
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(
            "--scenario",
            "-s",
            help="Only the actions useful in this scenario (id or YAML file): its packs, less what it forbids.",
        ),
    ] = None,
    pack: Annotated[
        list[str] | None, typer.Option("--pack", help="Only the actions of this pack (repeatable).")
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="OpenAI strict function calling: closed objects, every property required, optional ones "
            "nullable, no default/patternProperties (openai, responses, anthropic formats).",
        ),
    ] = False,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            callback=lambda v: None if v is None else check_backend(v),
            metavar="BACKEND",
            help=backend_help("Mark the actions this backend refuses (asked without starting anything)"),
        ),
    ] = None,
    omit_unsupported: Annotated[
        bool,
        typer.Option("--omit-unsupported", help="With --backend: leave out the actions it refuses."),
    ] = False,
    name: OptionalNameOpt = None,
) -> None:
    """The action catalog as function-calling tool schemas (or one JSON Schema for an action)."""
    from mlsandbox.gateway.tools import STRICT_FORMATS, pack_actions, scenario_actions
    from mlsandbox.scenario import load_scenario

    if fmt not in TOOL_FORMATS:
        _err(f"unknown format {fmt!r}: use one of {', '.join(TOOL_FORMATS)}")
        raise typer.Exit(code=2)
    if strict and fmt not in STRICT_FORMATS:
        _err(f"--strict applies to the formats {', '.join(STRICT_FORMATS)}, not {fmt!r}")
        raise typer.Exit(code=2)
    if omit_unsupported and backend is None:
        _err("--omit-unsupported needs --backend")
        raise typer.Exit(code=2)
    actions: list[str] | None = None
    try:
        if scenario is not None:
            actions = scenario_actions(load_scenario(scenario))
        if pack:
            chosen = pack_actions(pack)
            actions = chosen if actions is None else [a for a in actions if a in chosen]
    except (MLSandboxError, ValueError) as e:
        _err(str(e))
        raise typer.Exit(code=1) from None
    if actions is not None and not actions:
        _err("the selection has no action")
        raise typer.Exit(code=1)
    support = None
    if backend is not None:
        try:
            support = get_backend(backend, name).support()
        except (MLSandboxError, ValueError) as e:
            _err(str(e))
            raise typer.Exit(code=1) from None
    text = tools_json(fmt, support=support, omit_unsupported=omit_unsupported, actions=actions, strict=strict)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n")
        typer.echo(f"wrote {output}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``mcp``, ``openenv`` and ``tools`` to a Typer app (the main ``mlsandbox`` CLI)."""
    app.command("serve")(serve)
    app.command("mcp")(mcp)
    app.command("openenv")(openenv)
    app.command("tools")(tools)


app = typer.Typer(
    help="mlsandbox agent interfaces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register(app)

if __name__ == "__main__":
    app()
