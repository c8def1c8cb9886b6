"""The Kubernetes operations the kube backend's runtime needs (more than the operator's :class:`ClusterApi`).

:class:`Cluster` wraps one ``kubernetes.client.ApiClient``: get/list/create/apply/patch/delete of any kind
through the dynamic client, pod logs and in-place pod resize through CoreV1. Retryable failures (5xx, 429,
unreachable) become :class:`~mlsandbox.backends.kube.client.TransientApiError`; a missing object is
``None``/``False``, never an exception.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from typing import Any, Literal

from mlsandbox.errors import BackendError

from .client import FIELD_MANAGER, TransientApiError, _translated

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
LOG_TIMEOUT_S = 5.0


class ApiRefused(BackendError):
    """The API server refused a request (4xx other than 404): ``status`` and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _message(exc: Any) -> str:
    import json

    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)
    return str(getattr(exc, "reason", exc))


class Cluster:
    """One API server, through ``api_client`` (or the kubeconfig / in-cluster configuration)."""

    def __init__(self, api_client: Any | None = None, *, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config

        if api_client is None:
            if kubeconfig is not None:
                api_client = config.new_client_from_config(config_file=kubeconfig)
            else:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    # $KUBECONFIG as it is now: the client library reads it once, when first imported.
                    config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
                api_client = client.ApiClient()
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self._dynamic: Any = None

    @property
    def dynamic(self) -> Any:
        if self._dynamic is None:
            from kubernetes import dynamic

            with _refused():
                self._dynamic = dynamic.DynamicClient(self.api_client)
        return self._dynamic

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise ApiRefused(404, f"the cluster does not serve {kind} ({api_version})") from None

    # ------------------------------------------------------------------------------------ discovery

    def version(self) -> str:
        """The API server's version (``v1.x.y``); :class:`TransientApiError` when it does not answer."""
        from kubernetes import client

        with _refused():
            return str(client.VersionApi(self.api_client).get_code(_request_timeout=10).git_version)

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the cluster serves ``kind`` (e.g. the Chaos Mesh CRDs are installed)."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            with _refused():
                self.dynamic.resources.invalidate_cache()
                self.dynamic.resources.get(api_version=api_version, kind=kind)
        except (ResourceNotFoundError, ApiRefused):
            return False
        return True

    # ----------------------------------------------------------------------------------------- CRUD

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            with _refused():
                obj = self._resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        with _refused():
            objs = self._resource(api_version, kind).get(namespace=namespace, label_selector=selector or "")
        return [dict(item) for item in objs.to_dict().get("items") or []]

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object; :class:`ApiRefused` with status 409 when it exists."""
        meta = manifest["metadata"]
        with _refused():
            obj = self._resource(manifest["apiVersion"], manifest["kind"]).create(
                body=dict(manifest), namespace=meta.get("namespace")
            )
        return dict(obj.to_dict())

    def apply(self, manifest: Mapping[str, Any]) -> None:
        """Server-side apply (create or bring to ``manifest``; idempotent)."""
        meta = manifest["metadata"]
        with _refused():
            self._resource(manifest["apiVersion"], manifest["kind"]).server_side_apply(
                body=dict(manifest),
                name=meta["name"],
                namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        content_type: str = STRATEGIC,
    ) -> dict[str, Any] | None:
        """Patch the object (strategic merge by default; :data:`MERGE` for custom resources); None if absent."""
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            with _refused():
                obj = self._resource(api_version, kind).patch(
                    body=dict(body), name=name, namespace=namespace, content_type=content_type
                )
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        grace_period_s: int | None = None,
    ) -> bool:
        """Ask for deletion (dependents removed per ``propagation``); False when it did not exist."""
        from kubernetes.dynamic.exceptions import NotFoundError

        body: dict[str, Any] = {"propagationPolicy": propagation}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        try:
            with _refused():
                self._resource(api_version, kind).delete(name=name, namespace=namespace, body=body)
        except NotFoundError:
            return False
        return True

    # ----------------------------------------------------------------------------------------- pods

    def pod_log(
        self, name: str, namespace: str, *, tail: int | None = None, container: str | None = None
    ) -> str:
        """The log of a pod's container (raises :class:`ApiRefused`/:class:`TransientApiError` when the
        API server cannot get it: no kubelet behind a simulated node, a container never started)."""
        kwargs: dict[str, Any] = {"_request_timeout": LOG_TIMEOUT_S}
        if tail is not None and tail > 0:
            kwargs["tail_lines"] = tail
        if container is not None:
            kwargs["container"] = container
        with _refused():
            text = self.core.read_namespaced_pod_log(name, namespace, **kwargs)
        return "" if text is None else str(text)

    def resize_pod(
        self, name: str, namespace: str, containers: builtins.list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Change running containers' resources in place (the ``pods/resize`` subresource)."""
        with _refused():
            pod = self.core.patch_namespaced_pod_resize(name, namespace, {"spec": {"containers": containers}})
        return dict(self.api_client.sanitize_for_serialization(pod))


class _refused(_translated):
    """As :class:`_translated`, and a 4xx other than 404 becomes :class:`ApiRefused` (404 propagates as
    the dynamic client's ``NotFoundError`` / the client's ``ApiException`` for callers to map)."""

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None:
            return False
        super().__exit__(exc_type, exc, tb)  # raises TransientApiError for retryable failures
        from kubernetes.client.exceptions import ApiException

        status = getattr(exc, "status", None)
        if (
            isinstance(exc, ApiException)
            and isinstance(status, int)
            and 400 <= status < 500
            and status != 404
        ):
            raise ApiRefused(status, f"API server refused ({status}): {_message(exc)}") from exc
        if isinstance(exc, ApiException) and status == 404 and exc.__class__ is ApiException:
            raise ApiRefused(404, f"not found: {_message(exc)}") from exc
        return False


__all__ = ["MERGE", "STRATEGIC", "ApiRefused", "Cluster", "TransientApiError"]
