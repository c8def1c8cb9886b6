"""The few cluster operations the operator and the kube backend need, behind a protocol.

:class:`ClusterApi` is what callers depend on (tests pass an in-memory fake); :class:`KubernetesApi`
implements it over the ``kubernetes`` client's dynamic API with server-side apply, so applying the same
manifest twice is a no-op and a partial failure is repaired by the next reconcile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from mlsandbox.errors import BackendError

FIELD_MANAGER = "mlsandbox"


class TransientApiError(BackendError):
    """The API server could not be reached or asked to retry (5xx, 429, timeouts): try again later."""


class ClusterApi(Protocol):
    def apply(self, manifest: Mapping[str, Any]) -> None:
        """Create the object or bring it to ``manifest`` (server-side apply; idempotent)."""
        ...

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Ask for deletion (background propagation); False when it did not exist."""
        ...

    def delete_collection(self, api_version: str, kind: str, namespace: str, label_selector: str) -> int:
        """Delete every object of ``kind`` in ``namespace`` matching the selector (background
        propagation); the number asked for. 0 when the kind is not served (a CRD not installed)."""
        ...


class KubernetesApi:
    """:class:`ClusterApi` over a real API server (kubeconfig or in-cluster configuration)."""

    def __init__(self, client: Any | None = None) -> None:
        from kubernetes import config, dynamic
        from kubernetes.client import ApiClient

        if client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                # $KUBECONFIG as it is now: the client library reads it once, when first imported.
                config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
            client = ApiClient()
        self._dynamic = dynamic.DynamicClient(client)

    def _resource(self, api_version: str, kind: str) -> Any:
        return self._dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, manifest: Mapping[str, Any]) -> None:
        meta = manifest["metadata"]
        with _translated():
            self._resource(manifest["apiVersion"], manifest["kind"]).server_side_apply(
                body=dict(manifest),
                name=meta["name"],
                namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        with _translated():
            try:
                obj = self._resource(api_version, kind).get(name=name, namespace=namespace)
            except NotFoundError:
                return None
        return dict(obj.to_dict())

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        from kubernetes.dynamic.exceptions import NotFoundError

        with _translated():
            try:
                self._resource(api_version, kind).delete(
                    name=name, namespace=namespace, body={"propagationPolicy": "Background"}
                )
            except NotFoundError:
                return False
        return True

    def delete_collection(self, api_version: str, kind: str, namespace: str, label_selector: str) -> int:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with _translated():
            try:
                resource = self._resource(api_version, kind)
            except ResourceNotFoundError:
                return 0
            found = resource.get(namespace=namespace, label_selector=label_selector)
            count = len(found.items or [])
            if count:
                resource.delete(
                    namespace=namespace,
                    label_selector=label_selector,
                    body={"propagationPolicy": "Background"},
                )
        return count


class _translated:
    """Turn the client's retryable failures into :class:`TransientApiError` (others propagate)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None:
            return False
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        status = getattr(exc, "status", None)
        if isinstance(exc, ApiException) and isinstance(status, int) and (status >= 500 or status == 429):
            raise TransientApiError(f"API server answered {status}: {getattr(exc, 'reason', '')}") from exc
        if isinstance(exc, (HTTPError, TimeoutError, ConnectionError)):
            raise TransientApiError(f"API server unreachable: {exc}") from exc
        return False
