"""The sandbox's S3 credentials as a Secret in its namespace, shared by its Jobs and model servers."""

from __future__ import annotations

import threading

from mlsandbox.backends.protocols import Endpoints

from . import manifests as M
from .cluster import Cluster


class S3Secret:
    """Applied on first need, once, from any thread; the training Jobs and the model-server pods read
    their S3 credentials from it. One object per runtime, so deleting it (``down``) is seen by both."""

    def __init__(self, cluster: Cluster, *, namespace: str, sandbox: str, endpoints: Endpoints) -> None:
        self.cluster, self.namespace, self.sandbox, self.endpoints = cluster, namespace, sandbox, endpoints
        self._lock = threading.Lock()
        self._ready = False

    def ensure(self) -> None:
        with self._lock:
            if self._ready:
                return
        manifest = M.s3_secret(
            M.S3_SECRET_NAME, namespace=self.namespace, sandbox=self.sandbox, endpoints=self.endpoints
        )
        self.cluster.apply(manifest)  # idempotent: two threads applying it at once is harmless
        with self._lock:
            self._ready = True

    def delete(self) -> None:
        self.cluster.delete("v1", "Secret", M.S3_SECRET_NAME, self.namespace)
        with self._lock:
            self._ready = False
