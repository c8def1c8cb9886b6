"""What a benchmark ran: the mlsandbox version, the source commit when the package runs from a git
checkout, and the machine (CPU count and model, Python, platform). Recorded in every result row, in
``summary.json`` and in the report's header."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from mlsandbox import __version__

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


@cache
def source_commit() -> str | None:
    """The commit of the checkout the package runs from (``-dirty`` when it has uncommitted changes to
    tracked files), or None when it is not a git checkout of this project (an installed wheel)."""
    try:
        top = subprocess.run(
            ["git", "-C", str(_PACKAGE_DIR), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
        if len(top) != 2 or Path(top[0]).resolve() / "src" / "mlsandbox" != _PACKAGE_DIR:
            return None
        dirty = subprocess.run(
            ["git", "-C", top[0], "diff", "--quiet", "HEAD", "--", "src"],
            capture_output=True,
            timeout=30,
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return top[1][:12] + ("-dirty" if dirty == 1 else "")


def machine() -> dict[str, Any]:
    from mlsandbox.machine import cpu_model

    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def provenance() -> dict[str, Any]:
    """``{"version", "commit", "machine": {...}}`` of this process."""
    return {"version": __version__, "commit": source_commit(), "machine": machine()}
