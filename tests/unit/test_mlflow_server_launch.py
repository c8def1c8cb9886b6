"""The one-process ``mlflow server`` launcher: the server launch becomes an ``exec``, nothing else does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from mlsandbox.backends.local import mlflow_server


class Became(Exception):
    pass


@pytest.fixture
def became(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    calls: list[tuple[Any, Any]] = []

    def fake(cmd: Any, extra_env: Any) -> None:
        calls.append((cmd, extra_env))
        raise Became

    monkeypatch.setattr(mlflow_server, "become", fake)
    return calls


def original(cmd: Any, **kwargs: Any) -> tuple[str, Any, dict[str, Any]]:
    return ("original", cmd, kwargs)


def test_the_background_server_launch_becomes_the_process(became: list[tuple[Any, Any]]) -> None:
    run = mlflow_server.exec_instead(original)
    cmd = [sys.executable, "-m", "uvicorn", "--port", "5000", "mlflow.server.fastapi_app:app"]
    with pytest.raises(Became):
        run(
            cmd,
            extra_env={"_MLFLOW_SERVER_FILE_STORE": "sqlite:///x.db"},
            capture_output=False,
            synchronous=False,
        )
    assert became == [(cmd, {"_MLFLOW_SERVER_FILE_STORE": "sqlite:///x.db"})]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # synchronous, captured: a helper command MLflow waits for
        {"capture_output": False},
        {"synchronous": False},
        {"capture_output": False, "synchronous": False, "stream_output": True},
        {"capture_output": False, "synchronous": False, "cwd": "/"},
    ],
)
def test_every_other_call_goes_to_mlflow(became: list[tuple[Any, Any]], kwargs: dict[str, Any]) -> None:
    run = mlflow_server.exec_instead(original)
    assert run(["true"], extra_env={"A": "1"}, **kwargs) == (
        "original",
        ["true"],
        {"extra_env": {"A": "1"}, **kwargs},
    )
    assert became == []


def test_a_command_string_is_not_execed(became: list[tuple[Any, Any]]) -> None:
    run = mlflow_server.exec_instead(original)
    assert run("uvicorn app", capture_output=False, synchronous=False)[0] == "original"
    assert became == []


def test_become_keeps_the_pid_and_passes_the_environment() -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from mlsandbox.backends.local.mlflow_server import become
        print(os.getpid(), flush=True)
        become([sys.executable, "-c", "import os; print(os.getpid(), os.environ['EXTRA'])"], {"EXTRA": "yes"})
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    before, after = out.stdout.splitlines()
    assert after == f"{before} yes"


def test_without_the_hook_the_cli_runs_unchanged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow
    import mlflow.server

    monkeypatch.delattr(mlflow.server, mlflow_server.HOOK)
    with pytest.raises(SystemExit) as exited:
        mlflow_server.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr()
    assert mlflow.__version__ in out.out
    assert f"mlflow.server.{mlflow_server.HOOK} not found" in out.err


def test_the_hook_exists_in_the_pinned_mlflow() -> None:
    import mlflow.server

    assert callable(getattr(mlflow.server, mlflow_server.HOOK, None))
