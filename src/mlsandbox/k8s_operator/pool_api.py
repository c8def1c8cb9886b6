"""The custom-object operations the warm pool needs, behind a protocol (:class:`PoolApi`).

The pool binds a claim with an *optimistic lock*: a merge patch carrying the member's
``metadata.resourceVersion`` succeeds only if nobody changed the member since it was read, so of two
claims racing for one Ready Sandbox exactly one wins (the other gets :class:`Conflict` and tries the next
member). :class:`KubePoolApi` implements the protocol over the ``kubernetes`` client's
``CustomObjectsApi`` (merge patches, the status subresource); retryable failures become
:class:`~mlsandbox.backends.kube.client.TransientApiError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mlsandbox.backends.kube.client import TransientApiError
from mlsandbox.errors import BackendError

from .model import GROUP, VERSION

Object = dict[str, Any]


class Conflict(BackendError):
    """The object changed since it was read (HTTP 409): read it again before deciding."""


class Refused(BackendError):
    """The API server refused the request for good (403 by RBAC or a quota, 422 invalid): its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PoolApi(Protocol):
    def get(self, plural: str, namespace: str, name: str) -> Object | None:
        """The object, or ``None`` when it does not exist."""
        ...

    def list(self, plural: str, namespace: str, selector: str = "") -> list[Object]:
        """The objects of ``namespace`` matching the label selector."""
        ...

    def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Object:
        """Create the object (``metadata.generateName`` allowed); the stored object. :class:`Refused`
        when admission refuses it (an exhausted quota, a forbidden request, an invalid object)."""
        ...

    def patch(self, plural: str, namespace: str, name: str, body: Mapping[str, Any]) -> Object | None:
        """JSON merge patch; :class:`Conflict` when ``body`` names a ``metadata.resourceVersion`` that is
        no longer current; ``None`` when the object does not exist."""
        ...

    def patch_status(self, plural: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the status subresource (nothing when the object is gone)."""
        ...

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Ask for deletion (background propagation); False when it did not exist."""
        ...


def _message(exc: Any) -> str:
    """The API server's own message (``Status.message``) when the body is one, else the reason."""
    import json

    try:
        return str(json.loads(exc.body)["message"])
    except (TypeError, ValueError, KeyError):
        return f"{exc.status} {exc.reason}"


class KubePoolApi:
    """:class:`PoolApi` over a real API server (``api_client``, else in-cluster or kubeconfig)."""

    def __init__(self, api_client: Any | None = None) -> None:
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self._api = client.CustomObjectsApi(api_client)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise Conflict(f"{exc.reason}: {exc.body}") from exc
            if exc.status is not None and (exc.status >= 500 or exc.status == 429):
                raise TransientApiError(f"API server answered {exc.status}: {exc.reason}") from exc
            raise Refused(int(exc.status or 0), _message(exc)) from exc
        except (HTTPError, TimeoutError, ConnectionError) as exc:
            raise TransientApiError(f"API server unreachable: {exc}") from exc

    def get(self, plural: str, namespace: str, name: str) -> Object | None:
        return self._call(self._api.get_namespaced_custom_object, GROUP, VERSION, namespace, plural, name)

    def list(self, plural: str, namespace: str, selector: str = "") -> list[Object]:
        found = self._call(
            self._api.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            label_selector=selector,
        )
        return list((found or {}).get("items") or [])

    def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Object:
        created = self._call(
            self._api.create_namespaced_custom_object, GROUP, VERSION, namespace, plural, dict(body)
        )
        if created is None:  # 404: the namespace is gone
            raise BackendError(f"cannot create {plural} in {namespace}: the namespace does not exist")
        return dict(created)

    def patch(self, plural: str, namespace: str, name: str, body: Mapping[str, Any]) -> Object | None:
        return self._call(
            self._api.patch_namespaced_custom_object, GROUP, VERSION, namespace, plural, name, dict(body)
        )

    def patch_status(self, plural: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._call(
            self._api.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            {"status": dict(status)},
        )

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        from kubernetes import client

        done = self._call(
            self._api.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            body=client.V1DeleteOptions(propagation_policy="Background"),
        )
        return done is not None
