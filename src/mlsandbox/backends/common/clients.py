"""The service clients every runtime hands out the same way, whatever runs the services."""

from __future__ import annotations

import threading

from mlsandbox.backends.common.mlflow_tracking import MLflowTracking
from mlsandbox.backends.common.s3 import S3ObjectStore
from mlsandbox.backends.protocols import Endpoints


class ServiceClients:
    """``endpoints``, and the S3 object store and MLflow tracker on them, each made on first use.

    Runtimes (local, kube) derive from it and add their jobs and fault control under the same lock.
    """

    def __init__(self, endpoints: Endpoints) -> None:
        self._endpoints = endpoints
        self._lock = threading.Lock()
        self._object_store: S3ObjectStore | None = None
        self._tracking: MLflowTracking | None = None

    @property
    def endpoints(self) -> Endpoints:
        return self._endpoints

    @property
    def object_store(self) -> S3ObjectStore:
        with self._lock:
            if self._object_store is None:
                e = self._endpoints
                self._object_store = S3ObjectStore(e.s3_url, e.s3_access_key, e.s3_secret_key)
            return self._object_store

    @property
    def tracking(self) -> MLflowTracking:
        with self._lock:
            if self._tracking is None:
                self._tracking = MLflowTracking(self._endpoints.mlflow_url)
            return self._tracking
