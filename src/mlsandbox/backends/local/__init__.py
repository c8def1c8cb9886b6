"""The local backend: every service of a sandbox is a supervised child process of this machine."""

from __future__ import annotations

from .backend import LocalBackend
from .gc import SandboxInfo, collect_garbage, list_sandboxes
from .sandbox import SandboxState

__all__ = ["LocalBackend", "SandboxInfo", "SandboxState", "collect_garbage", "list_sandboxes"]
