"""An S3-compatible :class:`~mlsandbox.backends.protocols.ObjectStore` over boto3 (MinIO on every backend).

Errors: a missing bucket or object raises :class:`KeyError` (``get_object``, ``list_objects``,
``put_object``); an unreachable or failing server raises :class:`~mlsandbox.errors.BackendError` within a
few seconds (short timeouts, two attempts) instead of hanging in retries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    ParamValidationError,
    ReadTimeoutError,
)

from mlsandbox.backends.protocols import ObjectInfo
from mlsandbox.errors import BackendError

_NOT_FOUND_CODES = frozenset({"NoSuchBucket", "NoSuchKey", "404", "NotFound"})
_BAD_REQUEST_CODES = frozenset(
    {"InvalidBucketName", "KeyTooLongError", "InvalidArgument", "BucketAlreadyExists"}
)
_DELETE_BATCH = 1000  # the S3 DeleteObjects limit

_CLIENT_CONFIG = Config(
    region_name="us-east-1",
    signature_version="s3v4",
    s3={"addressing_style": "path"},
    connect_timeout=3,
    read_timeout=30,
    retries={"max_attempts": 2, "mode": "standard"},
)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3ObjectStore:
    """Object storage at ``url`` (e.g. ``http://127.0.0.1:9000``) with static credentials."""

    def __init__(self, url: str, access_key: str, secret_key: str) -> None:
        self.url = url
        self._access_key = access_key
        self._secret_key = secret_key
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3ObjectStore(url={self.url!r})"

    # ------------------------------------------------------------------------------------------ client

    @property
    def client(self) -> Any:
        """The underlying boto3 S3 client (thread safe; created on first use)."""
        with self._lock:
            if self._client is None:
                session = boto3.session.Session()
                self._client = session.client(
                    "s3",
                    endpoint_url=self.url,
                    aws_access_key_id=self._access_key,
                    aws_secret_access_key=self._secret_key,
                    config=_CLIENT_CONFIG,
                )
            return self._client

    @contextmanager
    def _call(self, what: str, missing: str | None = None) -> Iterator[None]:
        """Translate boto errors: not found -> KeyError (when ``missing`` says what is missing), invalid
        request -> ValueError, anything else (server down, server error) -> BackendError."""
        try:
            yield
        except ClientError as exc:
            code = _error_code(exc)
            if missing is not None and code in _NOT_FOUND_CODES:
                raise KeyError(f"{missing} ({code})") from exc
            if code in _BAD_REQUEST_CODES:
                raise ValueError(f"S3 {what}: {exc}") from exc
            raise BackendError(f"S3 {what} failed at {self.url}: {exc}") from exc
        except ParamValidationError as exc:
            raise ValueError(f"S3 {what}: {exc}") from exc
        except (ConnectionError, ConnectTimeoutError, ReadTimeoutError) as exc:
            raise BackendError(f"S3 {what} failed: object store at {self.url} unreachable: {exc}") from exc
        except BotoCoreError as exc:
            raise BackendError(f"S3 {what} failed at {self.url}: {exc}") from exc

    # ----------------------------------------------------------------------------------------- buckets

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket``; no error when this store already owns it."""
        try:
            with self._call(f"create_bucket {bucket!r}"):
                self.client.create_bucket(Bucket=bucket)
        except BackendError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _error_code(cause) == "BucketAlreadyOwnedByYou":
                return
            raise

    def delete_bucket(self, bucket: str) -> None:
        """Delete a bucket and every object in it; no error when it does not exist."""
        try:
            with self._call(f"delete_bucket {bucket!r}", missing=f"bucket {bucket!r} does not exist"):
                self._abort_uploads(bucket)
                self._delete_all_objects(bucket)
                self.client.delete_bucket(Bucket=bucket)
        except KeyError:
            return

    def _delete_all_objects(self, bucket: str) -> None:
        keys = [info.key for info in self._iter_objects(bucket, "")]
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": k} for k in keys[start : start + _DELETE_BATCH]]
            response = self.client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
            errors = response.get("Errors") or []
            if errors:
                raise BackendError(f"S3 could not delete {len(errors)} objects of {bucket!r}: {errors[:3]}")

    def _abort_uploads(self, bucket: str) -> None:
        paginator = self.client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=bucket):
            for upload in page.get("Uploads") or []:
                self.client.abort_multipart_upload(
                    Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )

    def bucket_exists(self, bucket: str) -> bool:
        try:
            with self._call(f"head_bucket {bucket!r}", missing=f"bucket {bucket!r} does not exist"):
                self.client.head_bucket(Bucket=bucket)
        except KeyError:
            return False
        return True

    def list_buckets(self) -> list[str]:
        with self._call("list_buckets"):
            response = self.client.list_buckets()
        return sorted(b["Name"] for b in response.get("Buckets") or [])

    # ----------------------------------------------------------------------------------------- objects

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        with self._call(f"put_object {bucket}/{key}", missing=f"bucket {bucket!r} does not exist"):
            self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def get_object(self, bucket: str, key: str) -> bytes:
        """Return the object's bytes; raise :class:`KeyError` when the object (or bucket) does not exist."""
        with self._call(f"get_object {bucket}/{key}", missing=f"object s3://{bucket}/{key} does not exist"):
            response = self.client.get_object(Bucket=bucket, Key=key)
            body = response["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete an object; no error when it (or its bucket) does not exist."""
        try:
            with self._call(f"delete_object {bucket}/{key}", missing=f"bucket {bucket!r} does not exist"):
                self.client.delete_object(Bucket=bucket, Key=key)
        except KeyError:
            return

    def object_exists(self, bucket: str, key: str) -> bool:
        try:
            with self._call(f"head_object {bucket}/{key}", missing=f"s3://{bucket}/{key}"):
                self.client.head_object(Bucket=bucket, Key=key)
        except KeyError:
            return False
        return True

    def list_objects(self, bucket: str, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix``, sorted by key; :class:`KeyError` when the bucket does not exist."""
        with self._call(f"list_objects {bucket}/{prefix}", missing=f"bucket {bucket!r} does not exist"):
            return list(self._iter_objects(bucket, prefix))

    def _iter_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents") or []:
                yield ObjectInfo(
                    key=obj["Key"], size=int(obj["Size"]), last_modified=obj["LastModified"].timestamp()
                )
