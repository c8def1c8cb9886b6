"""uv, as the backends use it to build named environments: the binary, the requirements a set may hold,
what every job's environment needs, and running uv with a clear error.

The local backend makes venvs of them (:mod:`mlsandbox.backends.local.venvs`), the kube backend archives
for the workload image (:mod:`mlsandbox.backends.kube.environments`).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlsandbox import paths
from mlsandbox.backends.protocols.environments import EnvironmentBuildError

BUILD_TIMEOUT_S = 600.0
NETWORK_HINTS = ("Failed to fetch", "dns error", "Could not connect", "error sending request", "timed out")
"""Words of uv's errors when the package index is out of reach (then the cache is tried, ``--offline``)."""


def base_requirements() -> list[str]:
    """What a job needs besides the task's pins (matching the sandbox's MLflow server)."""
    return [
        f"mlflow=={importlib.metadata.version('mlflow')}",
        "boto3",
        "pandas",
        "pyarrow",
        "skops",
    ]


def uv_binary() -> str:
    """uv from ``$MLSANDBOX_HOME/tools`` (installed by setup), else from PATH."""
    local = paths.home() / "tools" / "bin" / "uv"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("uv")
    if found is None:
        raise EnvironmentBuildError(f"uv is not installed (expected {local}): run `make setup`")
    return found


def normalise(requirements: list[str]) -> list[str]:
    """Parse each requirement (PEP 508 name, extras and version specifiers only: no URLs, no options)."""
    out = []
    for text in requirements:
        if text.strip().startswith("-") or "://" in text or "@" in text:
            raise ValueError(f"requirement {text!r}: only names with version specifiers are allowed")
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise ValueError(f"invalid requirement {text!r}: {e}") from None
        out.append(str(req))
    return sorted(set(out), key=str.lower)


def run(argv: list[str], what: str) -> str:
    """Run uv; its stdout, or :class:`EnvironmentBuildError` with what could not be done and uv's message."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PYTHON")}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(
            f"could not {what}: uv took longer than {BUILD_TIMEOUT_S:.0f} s"
        ) from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        raise EnvironmentBuildError(f"could not {what}:\n{message[-3000:]}")
    return proc.stdout


def dead_builds(root: Path, pattern: str) -> list[Path]:
    """The half-made builds under ``root`` matching ``pattern`` (named ``.<key>.<pid>.<suffix>``) whose
    builder process is gone (a name without a pid is left alone)."""
    if not root.is_dir():
        return []
    found = []
    for child in root.glob(pattern):
        try:
            os.kill(int(child.name.rsplit(".", 2)[-2]), 0)
        except ProcessLookupError:
            found.append(child)
        except (ValueError, PermissionError):
            continue
    return found


def install(argv: list[str], what: str = "install the requirements") -> str:
    """Run a ``uv pip install``; when the index is out of reach, again from uv's cache (``--offline``)."""
    try:
        return run(argv, what)
    except EnvironmentBuildError as e:
        if not any(h in str(e) for h in NETWORK_HINTS):
            raise
        return run([*argv, "--offline"], f"{what} (offline, from the cache)")


__all__ = ["BUILD_TIMEOUT_S", "base_requirements", "dead_builds", "install", "normalise", "run", "uv_binary"]
