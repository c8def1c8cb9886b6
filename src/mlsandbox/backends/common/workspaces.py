"""What the backends that run agent code share of workspaces: the rules of a workspace path and id, the
unprivileged uid a workspace's scripts run as, their process limit, and the scoped store credentials a run
gets (MinIO STS ``AssumeRole`` with an inline session policy allowing the episode's bucket only).

``local`` keeps a workspace in a directory and runs its scripts under bubblewrap
(:mod:`mlsandbox.backends.local.workspaces`); ``kube`` keeps it in the episode's bucket and runs its scripts
in a locked-down pod (:mod:`mlsandbox.backends.kube.workspaces`). Both refuse the same paths with the same
messages and give a script the same kind of credentials.
"""

from __future__ import annotations

import json
import zlib
from pathlib import PurePosixPath
from typing import Any

from mlsandbox.backends.protocols import MAX_FILE_BYTES, Endpoints, WorkspaceError
from mlsandbox.errors import BackendError

UID_BASE = 61000
UID_SPAN = 3000
MAX_PROCS = 256
"""Processes (threads included) a workspace's uid may have at once: a fork bomb stops there."""
MAX_LISTED = 500
"""The most entries ``list_files`` returns."""
_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
ROLE_ARN = "arn:minio:iam:::role/mlsandbox-workspace"


def uid_of(workspace_id: str) -> int:
    """The unprivileged uid a workspace's scripts run as."""
    return UID_BASE + zlib.crc32(workspace_id.encode()) % UID_SPAN


def check_id(workspace_id: str) -> None:
    """:class:`WorkspaceError` for a workspace id that is not a plain name."""
    if not workspace_id or set(workspace_id) - _ID_OK or workspace_id.startswith("."):
        raise WorkspaceError("invalid_parameters", f"invalid workspace id {workspace_id!r}")


def clean_path(path: str) -> tuple[str, ...]:
    """The components of a workspace path; :class:`WorkspaceError` for one that leaves the workspace."""
    if "\x00" in path:
        raise WorkspaceError("invalid_parameters", "a path cannot contain a NUL byte")
    p = PurePosixPath(path)
    if p.is_absolute():
        raise WorkspaceError(
            "invalid_parameters", f"{path!r}: give a path relative to the workspace (e.g. train.py)"
        )
    parts = tuple(x for x in p.parts if x not in ("", "."))
    if any(x == ".." for x in parts):
        raise WorkspaceError("invalid_parameters", f"{path!r} leaves the workspace ('..' is not allowed)")
    if any(len(x) > 255 for x in parts) or len(parts) > 32:
        raise WorkspaceError("invalid_parameters", f"{path!r}: path too long")
    return parts


def file_path(path: str, data: bytes | None = None) -> tuple[str, ...]:
    """The components of a file's path (:func:`clean_path`, and not the workspace itself); with ``data``,
    also :class:`WorkspaceError` for a file over :data:`MAX_FILE_BYTES`."""
    parts = clean_path(path)
    if not parts:
        raise WorkspaceError("invalid_parameters", "give a file path, not the workspace itself")
    if data is not None and len(data) > MAX_FILE_BYTES:
        raise WorkspaceError(
            "invalid_parameters",
            f"{path!r}: {len(data)} bytes is over the {MAX_FILE_BYTES} byte limit of a file",
        )
    return parts


def quota_error(quota_bytes: int) -> WorkspaceError:
    """What a write past the workspace's quota is answered."""
    return WorkspaceError("quota_exceeded", f"the workspace is full ({quota_bytes} bytes)")


def bucket_policy(bucket: str) -> dict[str, Any]:
    """The session policy of a run's credentials: everything on ``bucket`` and its objects, nothing else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["s3:*"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }


def scoped_credentials(
    endpoints: Endpoints, bucket: str, session: str, timeout_s: float | None
) -> dict[str, str]:
    """Temporary store credentials limited to ``bucket`` (MinIO STS ``AssumeRole`` with the keys of
    ``endpoints``, valid for the run's timeout and five minutes more): ``AccessKeyId``,
    ``SecretAccessKey``, ``SessionToken``. :class:`BackendError` when the store refuses."""
    import boto3

    duration = int(min(43200, max(900, (timeout_s or 3600) + 300)))
    sts = boto3.client(
        "sts",
        endpoint_url=endpoints.s3_url,
        aws_access_key_id=endpoints.s3_access_key,
        aws_secret_access_key=endpoints.s3_secret_key,
        region_name="us-east-1",
    )
    try:
        answer: dict[str, Any] = sts.assume_role(
            RoleArn=ROLE_ARN,
            RoleSessionName=session[:64],
            Policy=json.dumps(bucket_policy(bucket)),
            DurationSeconds=duration,
        )
    except Exception as e:
        raise BackendError(f"could not mint the workspace's store credentials (MinIO STS): {e}") from e
    c = answer["Credentials"]
    return {k: str(c[k]) for k in ("AccessKeyId", "SecretAccessKey", "SessionToken")}


__all__ = [
    "MAX_LISTED",
    "MAX_PROCS",
    "UID_BASE",
    "UID_SPAN",
    "bucket_policy",
    "check_id",
    "clean_path",
    "file_path",
    "quota_error",
    "scoped_credentials",
    "uid_of",
]
