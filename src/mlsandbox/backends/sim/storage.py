"""The object store of a ``sim`` sandbox: buckets of bytes in memory (:class:`MemoryObjectStore`).

It means what the S3 store of the other backends means (:mod:`mlsandbox.backends.common.s3`): a missing
bucket or object is a :class:`KeyError` with the same message, a bucket over its quota refuses a put with
MinIO's own error, and a store the client cannot reach (killed, frozen, its endpoint down or cut by a
network fault) fails with the client's error after the time the client would wait (charged to the
virtual clock). Each call costs the calibrated time of the operation plus its bytes over the store's
throughput.

Objects are kept as the bytes written; :meth:`MemoryObjectStore.parsed` caches a parse of an object's
bytes (what the simulated jobs and flows read) keyed by the bytes' identity, so a dataset read many
times is parsed once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlsandbox.backends.protocols import ObjectInfo
from mlsandbox.backends.sim.world import SimWorld
from mlsandbox.errors import BackendError

SERVICE = "minio"


@dataclass
class _Object:
    data: bytes
    last_modified: float


class MemoryObjectStore:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.ObjectStore`)."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self.buckets: dict[str, dict[str, _Object]] = {}
        self.quotas: dict[str, int] = {}
        self._parsed: dict[tuple[int, str], tuple[bytes, Any]] = {}

    def __repr__(self) -> str:
        return f"MemoryObjectStore(buckets={len(self.buckets)})"

    def _call(self, operation: str, what: str, *, nbytes: int = 0, bucket: str = "", key: str = "") -> None:
        path = f"{bucket}/{key}" if key else bucket
        self.world.call(SERVICE, f"object_store.{operation}", nbytes=nbytes, what=what, bucket=path, key=key)

    def _bucket(self, bucket: str, missing: str) -> dict[str, _Object]:
        found = self.buckets.get(bucket)
        if found is None:
            raise KeyError(f"{missing} (NoSuchBucket)")
        return found

    # ------------------------------------------------------------------------------------------ buckets

    def create_bucket(self, bucket: str) -> None:
        self._call("create_bucket", f"create_bucket {bucket!r}", bucket=bucket)
        _check_bucket_name(bucket)
        self.buckets.setdefault(bucket, {})

    def delete_bucket(self, bucket: str) -> None:
        self._call("delete_bucket", f"delete_bucket {bucket!r}", bucket=bucket)
        objects = self.buckets.pop(bucket, None)
        self.quotas.pop(bucket, None)
        if objects:
            ids = {id(o.data) for o in objects.values()}
            self._parsed = {k: v for k, v in self._parsed.items() if k[0] not in ids}

    def bucket_exists(self, bucket: str) -> bool:
        self._call("bucket_exists", f"head_bucket {bucket!r}", bucket=bucket)
        return bucket in self.buckets

    def list_buckets(self) -> list[str]:
        self._call("list_buckets", "list_buckets")
        return sorted(self.buckets)

    # ------------------------------------------------------------------------------------------ objects

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        what = f"put_object {bucket}/{key}"
        self._call("put_object", what, nbytes=len(data), bucket=bucket, key=key)
        objects = self._bucket(bucket, f"bucket {bucket!r} does not exist")
        quota = self.quotas.get(bucket)
        if quota is not None:
            used = sum(len(o.data) for k, o in objects.items() if k != key)
            if used + len(data) > quota:
                text = self.world.calibration.errors["storage.quota_exceeded"].text
                raise BackendError(
                    text.format(what=what, url=self.world.address.urls[SERVICE], operation="PutObject")
                )
        old = objects.get(key)
        if old is not None:
            self._forget(old.data)
        objects[key] = _Object(bytes(data), self.world.clock.time())

    def get_object(self, bucket: str, key: str) -> bytes:
        missing = f"object s3://{bucket}/{key} does not exist"
        obj = self._bucket(bucket, missing).get(key)
        self._call(
            "get_object",
            f"get_object {bucket}/{key}",
            nbytes=len(obj.data) if obj else 0,
            bucket=bucket,
            key=key,
        )
        if obj is None:
            raise KeyError(f"{missing} (NoSuchKey)")
        return obj.data

    def delete_object(self, bucket: str, key: str) -> None:
        self._call("delete_object", f"delete_object {bucket}/{key}", bucket=bucket, key=key)
        objects = self.buckets.get(bucket)
        if objects is not None:
            old = objects.pop(key, None)
            if old is not None:
                self._forget(old.data)

    def object_exists(self, bucket: str, key: str) -> bool:
        self._call("object_exists", f"head_object {bucket}/{key}", bucket=bucket, key=key)
        return key in self.buckets.get(bucket, {})

    def list_objects(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        self._call("list_objects", f"list_objects {bucket}/{prefix}", bucket=bucket)
        objects = self._bucket(bucket, f"bucket {bucket!r} does not exist")
        return [
            ObjectInfo(key=k, size=len(o.data), last_modified=o.last_modified)
            for k, o in sorted(objects.items())
            if k.startswith(prefix)
        ]

    # ------------------------------------------------------------------------------- for the simulator

    def peek(self, bucket: str, key: str) -> bytes | None:
        """An object's bytes without a client's call (the simulator's own bookkeeping)."""
        obj = self.buckets.get(bucket, {}).get(key)
        return None if obj is None else obj.data

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        return sorted(k for k in self.buckets.get(bucket, {}) if k.startswith(prefix))

    def parsed(self, data: bytes, kind: str, parse: Callable[[bytes], Any]) -> Any:
        """``parse(data)``, cached while the object holding ``data`` lives (``kind`` names the parse)."""
        k = (id(data), kind)
        hit = self._parsed.get(k)
        if hit is not None and hit[0] is data:
            return hit[1]
        value = parse(data)
        self._parsed[k] = (data, value)
        return value

    def _forget(self, data: bytes) -> None:
        for k in [k for k in self._parsed if k[0] == id(data)]:
            del self._parsed[k]

    def usage(self, bucket: str) -> int:
        return sum(len(o.data) for o in self.buckets.get(bucket, {}).values())


def _check_bucket_name(bucket: str) -> None:
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise ValueError(
            f'S3 create_bucket {bucket!r}: Parameter validation failed:\nInvalid bucket name "{bucket}"'
        )


__all__ = ["MemoryObjectStore"]
