"""Where mlsandbox keeps its state: binaries, sandboxes (service data, logs, pid registries)."""

from __future__ import annotations

import os
import re
from pathlib import Path

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def home() -> Path:
    """Root of everything mlsandbox writes outside a checkout (``$MLSANDBOX_HOME``, default ~/.cache/mlsandbox)."""
    return Path(os.environ.get("MLSANDBOX_HOME") or Path.home() / ".cache" / "mlsandbox")


def bin_dir() -> Path:
    return home() / "bin"


def sandboxes_dir() -> Path:
    return home() / "sandboxes"


def validate_sandbox_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(
            f"invalid sandbox name {name!r}: use 1-40 lowercase letters, digits and dashes, starting with a letter or digit"
        )
    return name


def sandbox_dir(name: str) -> Path:
    return sandboxes_dir() / validate_sandbox_name(name)


def default_sandbox_name() -> str:
    return os.environ.get("MLSANDBOX_NAME", "default")
