"""MinIO's admin API (what ``mc admin`` does), used to put a hard quota on a bucket: the same server on
every backend that runs MinIO."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlencode

import httpx

from mlsandbox import httpclients
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import BackendError


def minio_admin(
    endpoints: Endpoints, method: str, path: str, params: dict[str, str], body: bytes
) -> httpx.Response:
    """One SigV4-signed call of MinIO's admin API (what ``mc admin`` does), direct to the server."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{endpoints.s3_url}/minio/admin/v3/{path}?{urlencode(params)}"
    request = AWSRequest(method=method, url=url, data=body)
    request.headers["X-Amz-Content-Sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(Credentials(endpoints.s3_access_key, endpoints.s3_secret_key), "s3", "us-east-1").add_auth(
        request
    )
    with httpclients.client(10.0) as client:
        return client.request(method, url, content=body, headers=dict(request.headers.items()))


def set_bucket_quota(endpoints: Endpoints, bucket: str, quota_bytes: int | None) -> None:
    body = json.dumps({"size": quota_bytes or 0, "quota": quota_bytes or 0, "quotatype": "hard"}).encode()
    resp = minio_admin(endpoints, "PUT", "set-bucket-quota", {"bucket": bucket}, body)
    if resp.status_code != 200:
        raise BackendError(
            f"setting the quota of bucket {bucket!r} failed: {resp.status_code} {resp.text[:300]}"
        )
