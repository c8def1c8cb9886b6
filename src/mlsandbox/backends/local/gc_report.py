"""What a garbage collection removed: one :class:`GcItem` per thing, for a table or ``--json``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

GcKind = Literal[
    "sandbox",
    "processes",
    "cgroup",
    "fault",
    "service",
    "bucket",
    "experiment",
    "registered_model",
    "flows",
    "config",
    "api_dataset",
    "database",
    "postgres_data",
    "workspace",
    "control_plane",
]


class GcItem(BaseModel):
    """One thing a garbage collection removed, undid or restarted (``ok`` False: it tried and failed)."""

    model_config = ConfigDict(extra="forbid")

    kind: GcKind
    sandbox: str | None = None
    """The sandbox it belonged to (None: no sandbox, e.g. a control plane)."""
    what: str
    """What it was, as people name it (a sandbox, a bucket's name, a job's cgroup, a toxic)."""
    detail: str = ""
    """What was done, or why it failed."""
    ok: bool = True

    @property
    def line(self) -> str:
        """One line of text (what the command printed before it had a table)."""
        text = f"{self.what}: {self.detail}" if self.detail else self.what
        return text if self.ok else f"{text} (FAILED)"


__all__ = ["GcItem", "GcKind"]
