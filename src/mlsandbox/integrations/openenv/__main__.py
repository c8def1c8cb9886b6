"""``python -m mlsandbox.integrations.openenv``: serve mlsandbox episodes to OpenEnv clients (what the gateway
image and ``openenv.yaml`` run; ``mlsandbox openenv`` is the same server from the command line)."""

from __future__ import annotations

from typing import Annotated

import typer

from mlsandbox.errors import MLSandboxError
from mlsandbox.paths import default_sandbox_name

cli = typer.Typer(add_completion=False)


@cli.command()
def main(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535)] = 8000,
    scenario: Annotated[
        str, typer.Option("--scenario", help="Scenario of a reset that names none (id or file).")
    ] = "tabular-quality-basic",
    backend: Annotated[
        str, typer.Option("--backend", help="A registered backend: local, kube, sim, or a plug-in.")
    ] = "local",
    sandbox: Annotated[str, typer.Option("--sandbox", "--name", "-n", help="Sandbox to serve.")] = (
        default_sandbox_name()
    ),
    start: Annotated[
        bool, typer.Option("--start/--no-start", help="Start the sandbox if it is not running.")
    ] = True,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, help="Concurrent WebSocket sessions.")
    ] = 8,
    session_timeout: Annotated[
        float | None, typer.Option("--session-timeout", help="Close sessions idle this many seconds.")
    ] = None,
    allow_restart: Annotated[
        bool, typer.Option("--allow-restart", help="Let sessions restart the shared services.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """Serve mlsandbox episodes over OpenEnv (HTTP, WebSocket sessions, MCP) for a sandbox."""
    from mlsandbox.integrations.openenv.server import serve

    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: binding {host}: anyone who reaches it can run episodes", err=True)
    try:
        serve(
            host_address=host,
            port=port,
            log_level=log_level,
            scenario=scenario,
            backend=backend,
            sandbox=sandbox,
            start_sandbox=start,
            max_concurrent_envs=max_sessions,
            session_timeout_s=session_timeout,
            allow_restart=allow_restart,
        )
    except (MLSandboxError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    cli()
