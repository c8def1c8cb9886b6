"""Object storage: S3-compatible buckets and objects (MinIO on local and kube, memory on sim)."""

from __future__ import annotations

from typing import Protocol

from mlsandbox.backends.protocols.common import Model


class ObjectInfo(Model):
    key: str
    size: int
    last_modified: float  # unix seconds


class ObjectStore(Protocol):
    """S3-compatible object storage (MinIO on every backend)."""

    def create_bucket(self, bucket: str) -> None: ...
    def delete_bucket(self, bucket: str) -> None:
        """Delete a bucket and every object in it; no error when it does not exist."""
        ...

    def bucket_exists(self, bucket: str) -> bool: ...
    def list_buckets(self) -> list[str]: ...
    def put_object(self, bucket: str, key: str, data: bytes) -> None: ...
    def get_object(self, bucket: str, key: str) -> bytes:
        """Raise :class:`KeyError` when the object does not exist."""
        ...

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete an object; no error when it does not exist."""
        ...

    def object_exists(self, bucket: str, key: str) -> bool: ...
    def list_objects(self, bucket: str, prefix: str = "") -> list[ObjectInfo]: ...
