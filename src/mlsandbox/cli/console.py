"""``mlsandbox console``: serve the web console (see :mod:`mlsandbox.console.server`)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

TOKEN_ENV = "MLSANDBOX_CONSOLE_TOKEN"
DEFAULT_BENCH_ROOT = Path("bench-results")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def console(
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0: a free one).")] = 8780,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (anyone who can reach it needs the token).")
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar=TOKEN_ENV,
            help="Access token (at least 16 characters; default: a new random one, printed at start).",
            show_envvar=True,
        ),
    ] = None,
    bench: Annotated[
        list[Path] | None,
        typer.Option(
            "--bench",
            "-b",
            help="A benchmark output directory, or a directory of them (repeatable; default ./bench-results).",
        ),
    ] = None,
) -> None:
    """Serve the web console: sandboxes, live and finished episodes, replays, benchmark results."""
    import uvicorn

    from mlsandbox.console.server import ConsoleConfig, check_token, create_app, new_token

    try:
        secret = check_token(token) if token is not None else new_token()
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--token") from None
    roots = [p.resolve() for p in (bench or [DEFAULT_BENCH_ROOT])]
    if port == 0:
        port = _free_port(host)
    app = create_app(ConsoleConfig(token=secret, bench_roots=roots))
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"mlsandbox console on http://{shown}:{port}/")
    typer.echo(f"open http://{shown}:{port}/?token={secret}")
    if token is None:
        typer.echo(f"access token: {secret} (pass --token or set {TOKEN_ENV} to choose one)")
    typer.echo("benchmarks from: " + ", ".join(str(r) for r in roots))
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
