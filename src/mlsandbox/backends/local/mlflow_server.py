"""``mlflow server`` in one process: the CLI's own checks and environment, then ``exec`` into uvicorn.

``mlflow server`` prepares the server's environment (backend store, artifact proxy, boot id), then starts
``python -m uvicorn ... mlflow.server.fastapi_app:app`` as a child and waits for it, forwarding signals.
The waiting parent keeps every module the CLI imported: about 240 MiB of resident memory that serves no
request, a quarter of an idle sandbox. Run as a script, by its path,

    python -P .../mlflow_server.py server --backend-store-uri ... --port ...

this file runs the same CLI with the same arguments, but the child is not spawned: this process becomes it
(``os.execve`` with the command and environment MLflow built). So the sandbox's MLflow is one process, its
pid is the server's, and a signal reaches the server directly. By path, not ``-m``: the process then
imports MLflow alone, not the sandbox's packages (about 0.7 s of start-up); ``-P`` keeps this folder off
``sys.path``. The file imports nothing of the project.

The hook is MLflow's private ``mlflow.server._exec_cmd`` (the one call that spawns the server). If a
future MLflow has no such name, the CLI runs unchanged (two processes) and a line on stderr says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

HOOK = "_exec_cmd"


def become(cmd: Sequence[Any], extra_env: dict[str, str] | None) -> NoReturn:
    """Replace this process with ``cmd`` under this environment plus ``extra_env``."""
    argv = [str(part) for part in cmd]
    env = {**os.environ, **(extra_env or {})}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)  # argv[0] is MLflow's sys.executable: an absolute path


def exec_instead(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_exec_cmd`` that becomes the server when asked to start it in the background (the server
    launch: ``capture_output=False, synchronous=False``); any other call goes to ``original``."""

    def run(cmd: Any, *, extra_env: dict[str, str] | None = None, **kwargs: Any) -> Any:
        if kwargs == {"capture_output": False, "synchronous": False} and not isinstance(cmd, str):
            become(cmd, extra_env)
        return original(cmd, extra_env=extra_env, **kwargs)

    return run


def main(args: Sequence[str]) -> None:
    import mlflow.server
    from mlflow.cli import cli

    original = getattr(mlflow.server, HOOK, None)
    if callable(original):
        setattr(mlflow.server, HOOK, exec_instead(original))
    else:
        print(
            f"mlsandbox: mlflow.server.{HOOK} not found in this MLflow; "
            "the server runs as a child of the mlflow CLI",
            file=sys.stderr,
            flush=True,
        )
    cli.main(args=list(args), prog_name="mlflow")


if __name__ == "__main__":
    main(sys.argv[1:])
