"""What an exported Harbor task runs in its container, run here on sim: the episode's MCP server, the
reference agent playing through it (solve.sh) and the verifier writing reward.json (test.sh)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mlsandbox.scenario import load_builtin


def _run(*args: str) -> int:
    """solve.sh and test.sh run the module as a program in the task's container; so does this test (in its
    own process, whatever event loop another test left in this one)."""
    cmd = [sys.executable, "-m", "mlsandbox.instances.harbor_task", *args]
    done = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.returncode


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    sc = load_builtin("churn-clean-small").model_dump(mode="json", exclude={"space"})
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(sc, sort_keys=False))
    port = _free_port()
    cmd = [sys.executable, "-m", "mlsandbox.instances.harbor_task", "serve", "--scenario", str(f)]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        yield f"http://127.0.0.1:{port}", f
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_reference_solution_earns_the_reward(served: tuple[str, Path], tmp_path: Path) -> None:
    url, scenario = served
    assert _run("solve", "--url", url, "--scenario", str(scenario)) == 0
    out = tmp_path / "logs" / "reward.json"
    assert _run("verify", "--url", url, "--out", str(out)) == 0
    reward = json.loads(out.read_text())
    assert reward["reward"] == 1.0 and reward["grade_holdout_auc"] >= 0.75
    assert reward["component_task"] > 0 and reward["component_success_bonus"] > 0


def test_an_agent_that_does_nothing_earns_nothing(served: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = served
    out = tmp_path / "reward.json"
    assert _run("verify", "--url", url, "--out", str(out)) == 0  # submits for the agent, then grades
    reward = json.loads(out.read_text())
    assert reward["reward"] == 0.0 and reward["score"] == 0.0 and reward["steps"] == 1.0
