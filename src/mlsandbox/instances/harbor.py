"""Export instances as Harbor tasks: one folder per instance that Harbor's task loader reads.

Each task folder holds

- ``instruction.md``: the scenario's task text, how to reach the sandbox (its MCP server) and the deliverable;
- ``task.toml``: metadata (family, split, instance hashes, difficulty), the agent's and verifier's timeouts,
  the container's resources, and the sandbox's MCP server (streamable HTTP inside the container);
- ``environment/Dockerfile``: built FROM the project's gateway image, with the instance's scenario and an
  entrypoint that starts the episode's MCP server (``sim`` backend) before the container's command;
- ``tests/test.sh``: grades through the sandbox's grader (``harbor_task verify``) and writes
  ``/logs/verifier/reward.json`` with the reward and its components;
- ``solution/solve.sh``: the reference agent plays the episode through the MCP server.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import yaml

from mlsandbox.instances.harbor_task import DEFAULT_PORT
from mlsandbox.instances.models import Instance
from mlsandbox.scenario import Scenario

DEFAULT_IMAGE = "mlsandbox/gateway:0.1.0"
"""The project's gateway image (workloads/Dockerfile.gateway): Python, the package and its dependencies."""
TASK_ORG = "mlsandbox"
SCENARIO_PATH = "/opt/mlsandbox-task/scenario.yaml"
AGENT_SECONDS_PER_STEP = 30.0
"""The agent's timeout: this much per step the scenario allows, plus a fixed start-up allowance."""


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return _toml_str(str(value))


def task_toml(instance: Instance, scenario: Scenario, split: str) -> str:
    agent_timeout = round(120.0 + AGENT_SECONDS_PER_STEP * scenario.max_steps)
    meta = {
        "family": instance.family,
        "instance": instance.id,
        "split": split,
        "params_sha256": instance.params_sha256,
        "scenario_sha256": instance.scenario_sha256,
        "difficulty": instance.difficulty.estimate,
        "reference_margin": instance.difficulty.reference_margin
        if instance.difficulty.reference_margin is not None
        else "",
        "rule_success": instance.difficulty.rule_success,
        "max_steps": scenario.max_steps,
    }
    lines = [
        'schema_version = "1.4"',
        "",
        "[task]",
        f"name = {_toml_str(f'{TASK_ORG}/{instance.id}')}",
        f"description = {_toml_str(scenario.title)}",
        f"keywords = {json.dumps(['mlops', 'ml-engineering', instance.family, split])}",
        "",
        "[metadata]",
        *(f"{k} = {_toml_value(v)}" for k, v in meta.items()),
        "",
        "[agent]",
        f"timeout_sec = {float(agent_timeout)}",
        "",
        "[verifier]",
        "timeout_sec = 300.0",
        "# The grader's state (the episode, the hidden holdout) lives in the task container's episode server:",
        "# the verifier runs there and asks it.",
        'environment_mode = "shared"',
        "",
        "[environment]",
        "build_timeout_sec = 900.0",
        "cpus = 1",
        "memory_mb = 2048",
        "storage_mb = 4096",
        "",
        "[environment.healthcheck]",
        f'command = "python3 -c \\"import urllib.request; urllib.request.urlopen('
        f"'http://127.0.0.1:{DEFAULT_PORT}/episode', timeout=5)\\\"\"",
        "interval_sec = 2.0",
        "timeout_sec = 10.0",
        "start_period_sec = 60.0",
        "retries = 30",
        "",
        "[[environment.mcp_servers]]",
        'name = "mlsandbox"',
        'transport = "streamable-http"',
        f'url = "http://127.0.0.1:{DEFAULT_PORT}/mcp"',
        "",
    ]
    return "\n".join(lines)


def instruction_md(scenario: Scenario) -> str:
    return (
        f"# {scenario.title}\n\n"
        f"{scenario.task.strip()}\n\n"
        "## How to work\n\n"
        f"The sandbox is the MCP server `mlsandbox` (streamable HTTP at `http://127.0.0.1:{DEFAULT_PORT}/mcp`"
        " inside this environment). Each tool is one action and costs one step (at most "
        f"{scenario.max_steps}); the resource `mlsandbox://episode/task` repeats this task and "
        "`mlsandbox://episode/observation` shows the latest observation. Tool errors say what was wrong.\n\n"
        f"Deliverable: a model registered as `{scenario.goal.model_name}`; call the `submit` tool when done. "
        "If you do not, the episode is submitted for you when time is up, and what was delivered is graded.\n"
    )


def dockerfile(image: str) -> str:
    return (
        f"FROM {image}\n"
        "# The instance's scenario and the entrypoint that serves its episode (sim backend) over MCP.\n"
        "USER root\n"
        "RUN mkdir -p /opt/mlsandbox-task /logs/verifier /logs/agent && chmod 0777 /logs /logs/verifier "
        "/logs/agent\n"
        "COPY scenario.yaml entrypoint.sh /opt/mlsandbox-task/\n"
        "RUN chmod 0755 /opt/mlsandbox-task/entrypoint.sh && chmod 0644 /opt/mlsandbox-task/scenario.yaml\n"
        "USER 10001:10001\n"
        "WORKDIR /tmp\n"
        'ENTRYPOINT ["/opt/mlsandbox-task/entrypoint.sh"]\n'
        'CMD ["sh", "-c", "sleep infinity"]\n'
    )


ENTRYPOINT = f"""#!/bin/sh
# Start the episode's MCP server, then run the container's command (Harbor's keep-alive).
set -eu
python -m mlsandbox.instances.harbor_task serve --scenario {SCENARIO_PATH} --port {DEFAULT_PORT} \\
  >/tmp/mlsandbox-mcp.log 2>&1 &
exec "$@"
"""

TEST_SH = """#!/bin/sh
# Grade through the sandbox's grader: submit the episode if the agent did not, read the grade and the
# reward components, write /logs/verifier/reward.json.
set -eu
mkdir -p /logs/verifier
python -m mlsandbox.instances.harbor_task verify --out /logs/verifier/reward.json
"""

SOLVE_SH = f"""#!/bin/sh
# The reference agent plays the episode through the sandbox's MCP server.
set -eu
python -m mlsandbox.instances.harbor_task solve --scenario {SCENARIO_PATH}
"""


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(0o755)


def write_task(instance: Instance, scenario: Scenario, root: Path, *, split: str, image: str) -> Path:
    """One task folder under ``root``, written beside and renamed into place (never half-written)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / instance.id
    tmp = Path(tempfile.mkdtemp(prefix=f".{instance.id}.", dir=root))
    try:
        _write(tmp / "instruction.md", instruction_md(scenario))
        _write(tmp / "task.toml", task_toml(instance, scenario, split))
        data = scenario.model_dump(mode="json", exclude={"space"})
        _write(tmp / "environment" / "scenario.yaml", yaml.safe_dump(data, sort_keys=False))
        _write(tmp / "environment" / "entrypoint.sh", ENTRYPOINT, executable=True)
        _write(tmp / "environment" / "Dockerfile", dockerfile(image))
        _write(tmp / "tests" / "test.sh", TEST_SH, executable=True)
        _write(tmp / "solution" / "solve.sh", SOLVE_SH, executable=True)
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def export_suite(
    pairs: list[tuple[Instance, Scenario]], directory: Path, *, split: str, image: str = DEFAULT_IMAGE
) -> list[Path]:
    return [write_task(inst, sc, directory, split=split, image=image) for inst, sc in pairs]


__all__ = ["DEFAULT_IMAGE", "export_suite", "instruction_md", "task_toml", "write_task"]
