"""Code workspaces on ``kube``: the files live in the episode's bucket, the scripts run in locked-down pods.

A workspace's files are the objects under :data:`~.workspace_manifests.WORKSPACE_PREFIX` of its episode's
bucket (on the sandbox's MinIO), so every process of the sandbox (a gateway, a restarted CLI) sees the
same files, and they go with the bucket at the episode's end. ``write_file``, ``read_file``,
``list_files`` and ``usage`` are S3 calls of this process, with the paths, sizes, quota and messages of
``local`` (:mod:`mlsandbox.backends.common.workspaces`).

A ``run_python`` job (:meth:`mlsandbox.backends.kube.jobs.KubeJobs.submit`, workload ``script``) is a Job
whose pod fetches the workspace's files into a memory-backed ``emptyDir`` of the quota's size, runs the
script under a supervisor as the workspace's own unprivileged uid, and writes the files the script made,
changed or removed back to the bucket when it ends (see :mod:`.workspace_manifests` for the pod's
lock-down: no service-account token, read-only root file system, every capability dropped, a
NetworkPolicy allowing DNS, MinIO and MLflow only). The run's store credentials come from MinIO's STS
``AssumeRole`` with a session policy for the episode's bucket alone.
"""

from __future__ import annotations

import threading

from mlsandbox.backends.common.workspaces import (
    MAX_LISTED,
    check_id,
    clean_path,
    file_path,
    quota_error,
    scoped_credentials,
)
from mlsandbox.backends.protocols import (
    MAX_FILE_BYTES,
    QUOTA_BYTES,
    Endpoints,
    ObjectStore,
    WorkspaceEntry,
    WorkspaceError,
    WorkspaceUsage,
)

from .workspace_manifests import WORKSPACE_PREFIX


class KubeWorkspaces:
    """The :class:`~mlsandbox.backends.protocols.Workspaces` of a kube sandbox (see the module docstring):
    ``store`` is the sandbox's object store as this process reaches it, ``endpoints`` its keys (for the
    runs' scoped credentials)."""

    def __init__(self, store: ObjectStore, endpoints: Endpoints, quota_bytes: int = QUOTA_BYTES) -> None:
        self.store = store
        self.endpoints = endpoints
        self.quota_bytes = quota_bytes
        self._lock = threading.Lock()
        self._buckets: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"KubeWorkspaces(open={len(self._buckets)})"

    # ------------------------------------------------------------------------------------------ files

    def open(self, workspace_id: str, bucket: str) -> None:
        check_id(workspace_id)
        with self._lock:
            self._buckets.setdefault(workspace_id, bucket)

    def bucket_of(self, workspace_id: str) -> str:
        """The bucket of an open workspace; :class:`WorkspaceError` (``not_found``) otherwise."""
        with self._lock:
            bucket = self._buckets.get(workspace_id)
        if bucket is None:
            raise WorkspaceError("not_found", f"workspace {workspace_id!r} is not open")
        return bucket

    def _objects(self, bucket: str, parts: tuple[str, ...] = ()) -> dict[str, int]:
        """Workspace path -> size of the files under ``parts`` (all when empty)."""
        prefix = WORKSPACE_PREFIX + "".join(f"{p}/" for p in parts)
        return {
            o.key[len(WORKSPACE_PREFIX) :]: o.size
            for o in self.store.list_objects(bucket, prefix)
            if len(o.key) > len(WORKSPACE_PREFIX)
        }

    def write_file(self, workspace_id: str, path: str, data: bytes) -> int:
        bucket = self.bucket_of(workspace_id)
        parts = file_path(path, data)
        files = self._objects(bucket)
        rel = "/".join(parts)
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                raise WorkspaceError(
                    "invalid_parameters", f"{'/'.join(parts[:i])!r} is not a directory: cannot go through it"
                )
        if any(p.startswith(rel + "/") for p in files):
            raise WorkspaceError("invalid_parameters", f"{path!r}: cannot write: Is a directory")
        if sum(files.values()) - files.get(rel, 0) + len(data) > self.quota_bytes:
            raise quota_error(self.quota_bytes)
        self.store.put_object(bucket, WORKSPACE_PREFIX + rel, data)
        return len(data)

    def read_file(self, workspace_id: str, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, int]:
        bucket = self.bucket_of(workspace_id)
        parts = file_path(path)
        rel = "/".join(parts)
        try:
            data = self.store.get_object(bucket, WORKSPACE_PREFIX + rel)
        except KeyError:
            if self._objects(bucket, parts):
                raise WorkspaceError("invalid_parameters", f"{path!r} is not a regular file") from None
            raise WorkspaceError("not_found", f"{path!r} does not exist in the workspace") from None
        return data[:max_bytes], len(data)

    def list_files(self, workspace_id: str, path: str = ".") -> list[WorkspaceEntry]:
        bucket = self.bucket_of(workspace_id)
        parts = clean_path(path)
        files = self._objects(bucket, parts)
        if parts and not files:
            rel = "/".join(parts)
            if self.store.object_exists(bucket, WORKSPACE_PREFIX + rel):
                raise WorkspaceError(
                    "invalid_parameters", f"{rel!r} is not a directory: cannot go through it"
                )
            raise WorkspaceError("not_found", f"{rel!r} does not exist in the workspace")
        entries: dict[str, WorkspaceEntry] = {}
        for rel, size in files.items():
            names = rel.split("/")
            for i in range(len(parts) + 1, len(names)):
                d = "/".join(names[:i])
                entries.setdefault(d, WorkspaceEntry(path=d, kind="dir", size=0))
            entries[rel] = WorkspaceEntry(path=rel, kind="file", size=size)
        return sorted(entries.values(), key=lambda e: e.path)[:MAX_LISTED]

    def usage(self, workspace_id: str) -> WorkspaceUsage:
        used = sum(self._objects(self.bucket_of(workspace_id)).values())
        return WorkspaceUsage(used_bytes=used, quota_bytes=self.quota_bytes)

    def close(self, workspace_id: str) -> None:
        """Forget the workspace and delete its files (the bucket's other objects stay)."""
        with self._lock:
            bucket = self._buckets.pop(workspace_id, None)
        if bucket is None or not self.store.bucket_exists(bucket):
            return
        for key in self._objects(bucket):
            self.store.delete_object(bucket, WORKSPACE_PREFIX + key)

    # ------------------------------------------------------------------------------------------ runs

    def credentials(self, workspace_id: str, timeout_s: float | None) -> dict[str, str]:
        """A run's store credentials: temporary, for the workspace's bucket only (MinIO STS)."""
        bucket = self.bucket_of(workspace_id)
        return scoped_credentials(self.endpoints, bucket, f"ws-{workspace_id}", timeout_s)


__all__ = ["KubeWorkspaces"]
