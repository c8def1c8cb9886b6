"""Workspaces: a directory of files per episode where an agent writes its own code, which runs as a job of
the episode (``JobSpec(workload="script", workspace=...)``) sandboxed from everything but the sandbox's
own services (bubblewrap namespaces on local; refused on sim, which executes nothing).

Paths are relative, ``/``-separated, inside the workspace: one that leaves it (``..``, an absolute path, a
symbolic link pointing out) is a :class:`WorkspaceError`, as is a file over the size limit or a workspace
over its disk quota. Nothing is changed by a refused call.
"""

from __future__ import annotations

from typing import Literal, Protocol

from mlsandbox.backends.protocols.common import Model, Unsupported

MAX_FILE_BYTES = 1 << 20
"""The largest file ``write_file`` writes and ``read_file`` returns (1 MiB)."""
QUOTA_BYTES = 256 << 20
"""A workspace's disk quota (what its files and the scripts' output may take, 256 MiB)."""


class WorkspaceError(ValueError):
    """A bad path, a file too large, a workspace over its quota, a workspace that does not exist:
    the agent's ``invalid_parameters`` error (or ``not_found`` for a missing file)."""

    def __init__(self, code: Literal["invalid_parameters", "not_found", "quota_exceeded"], message: str):
        super().__init__(message)
        self.code = code


class WorkspaceEntry(Model):
    """One entry of a workspace directory."""

    path: str
    """Relative to the workspace's root."""
    kind: Literal["file", "dir", "other"]
    size: int
    """Bytes (0 for a directory)."""


class WorkspaceUsage(Model):
    used_bytes: int
    quota_bytes: int


class Workspaces(Protocol):
    """The episodes' workspaces; ``workspace_id`` is the episode's id."""

    def open(self, workspace_id: str, bucket: str) -> None:
        """Make the workspace (empty) for an episode whose data lives in ``bucket`` (the only bucket the
        scripts' store credentials reach). Idempotent."""
        ...

    def write_file(self, workspace_id: str, path: str, data: bytes) -> int:
        """Write a file (its directories made); returns its size."""
        ...

    def read_file(self, workspace_id: str, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, int]:
        """The first ``max_bytes`` of a file and its full size."""
        ...

    def list_files(self, workspace_id: str, path: str = ".") -> list[WorkspaceEntry]:
        """The entries under ``path`` (recursively, at most a few hundred), sorted by path."""
        ...

    def usage(self, workspace_id: str) -> WorkspaceUsage: ...

    def close(self, workspace_id: str) -> None:
        """Remove the workspace, its files and its credentials (episode end). Idempotent."""
        ...


class RefusedWorkspaces:
    """The workspaces of a backend that refuses them: every call raises the typed :class:`Unsupported`
    (the runtime still has the attribute, so it satisfies the declared Runtime and a check finds it)."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason

    def _refuse(self) -> Unsupported:
        return Unsupported("workspaces", self.backend, self.reason)

    def open(self, workspace_id: str, bucket: str) -> None:
        raise self._refuse()

    def write_file(self, workspace_id: str, path: str, data: bytes) -> int:
        raise self._refuse()

    def read_file(self, workspace_id: str, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, int]:
        raise self._refuse()

    def list_files(self, workspace_id: str, path: str = ".") -> list[WorkspaceEntry]:
        raise self._refuse()

    def usage(self, workspace_id: str) -> WorkspaceUsage:
        raise self._refuse()

    def close(self, workspace_id: str) -> None:
        raise self._refuse()


__all__ = [
    "MAX_FILE_BYTES",
    "QUOTA_BYTES",
    "RefusedWorkspaces",
    "WorkspaceEntry",
    "WorkspaceError",
    "WorkspaceUsage",
    "Workspaces",
]
