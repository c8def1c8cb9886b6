"""``mlsandbox watch``: the dashboard of a running episode, live, from its audit log.

Every interface (in-process env, HTTP gateway sessions, MCP server) appends each step of each episode to
the runtime's audit log (on local ``<sandbox dir>/episodes/<episode>.jsonl``). ``watch`` follows one of
these logs (the most recently written one unless ``--episode`` names another), replays it into a
:class:`~mlsandbox.env.dashboard.Dashboard` and adds the sandbox's service states, so it needs no access to
the process running the episode and never changes anything: it reads the log only.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import AuditLog

from mlsandbox.backends import get_backend
from mlsandbox.cli.common import BackendOpt, sandbox_option
from mlsandbox.errors import MLSandboxError

CLEAR = "\x1b[H\x1b[2J"


def audit_log(sandbox: str, backend: str = "local") -> AuditLog:
    """The audit log of the running sandbox's episodes."""
    try:
        return get_backend(backend, sandbox).runtime().audit
    except (MLSandboxError, ValueError) as e:
        raise typer.BadParameter(str(e)) from None


def _services(sandbox: str, backend: str) -> list[tuple[str, str]]:
    try:
        return [(s.name, s.state) for s in get_backend(backend, sandbox).status()]
    except Exception:
        return []


def snapshot(sandbox: str, episode: str | None = None, backend: str = "local") -> str:
    """The dashboard text of an episode of ``sandbox`` now (the latest episode when ``episode`` is None)."""
    audit = audit_log(sandbox, backend)
    if episode is None:
        logged = audit.episodes()
        episode = logged[-1] if logged else None
    records = audit.read(episode) if episode is not None else []
    if episode is None or not records:
        what = f"episode {episode!r}" if episode else "no episode"
        return f"sandbox {sandbox}: {what} has been logged\n"
    from mlsandbox.env.dashboard import from_audit, render_dashboard  # pandas: imported when needed

    where = audit.location(episode) or episode
    return f"{where.rsplit('/', 1)[-1]}\n" + render_dashboard(
        from_audit(records, _services(sandbox, backend))
    )


def watch(
    sandbox: Annotated[str, sandbox_option("Sandbox whose episodes to watch.")] = "default",
    episode: Annotated[
        str | None, typer.Option("--episode", "-e", help="Episode id (default: the latest one, followed).")
    ] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between refreshes.")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="Print the dashboard once and exit.")] = False,
    backend: BackendOpt = "local",
) -> None:
    """Show the dashboard of a running episode, live (services, jobs, models, alerts, budget, reward)."""
    if once:
        typer.echo(snapshot(sandbox, episode, backend), nl=False)
        return
    tty = sys.stdout.isatty()
    last = None
    try:
        while True:
            text = snapshot(sandbox, episode, backend)
            if text != last:
                typer.echo((CLEAR if tty else "") + text, nl=False)
                last = text
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


__all__ = ["audit_log", "snapshot", "watch"]
