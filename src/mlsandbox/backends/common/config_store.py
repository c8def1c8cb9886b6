"""The config store of the backends that run a real Prefect server (local, kube): Prefect variables, over
the server's REST API (:class:`PrefectConfigStore`, the :class:`~mlsandbox.backends.protocols.ConfigStore`).

An episode's config lives under a name prefix (a *scope*): :meth:`PrefectConfigStore.open_scope` writes
it, :meth:`~PrefectConfigStore.close_scope` deletes every variable of the scope. What must outlive a
crash of the writer is the backend's: ``on_open``/``on_close`` let the local backend journal each scope
(its garbage collector deletes the scope of a gone process), and ``tags`` mark every variable the store
creates (the kube backend's ``down`` deletes the variables of its sandbox by tag, see
:meth:`~PrefectConfigStore.delete_tagged`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from mlsandbox import httpclients
from mlsandbox.backends.protocols.config import JOB_CONFIG_KEYS, REFERENCES
from mlsandbox.backends.protocols.runtime import Endpoints
from mlsandbox.errors import BackendError

PAGE = 200
"""Variables per filter request (the server's maximum)."""


def job_config_of(endpoints: Endpoints) -> dict[str, str]:
    """The job config (:data:`~mlsandbox.backends.protocols.config.JOB_CONFIG_KEYS`) of jobs that reach the
    services at ``endpoints``."""
    values = {
        "s3_endpoint_url": endpoints.s3_url,
        "s3_access_key_id": endpoints.s3_access_key,
        "s3_secret_access_key": endpoints.s3_secret_key,
        "mlflow_tracking_uri": endpoints.mlflow_url,
    }
    assert tuple(values) == JOB_CONFIG_KEYS
    return values


class PrefectConfigStore:
    """Key/value config in Prefect variables of the Prefect server at ``api_url`` (``.../api``).

    ``job_config``: the right values for this sandbox's jobs (:meth:`job_config`, :meth:`references`);
    ``tags``: put on every variable this store creates; ``on_open``/``on_close``: called with a scope's
    prefix before it is written and after it is deleted.
    """

    RETRIES = (0.2, 0.5, 1.0)
    """Pauses before retrying a call the server refused as busy (503) or that could not connect."""

    def __init__(
        self,
        api_url: str,
        *,
        job_config: Mapping[str, str] | None = None,
        tags: Sequence[str] = (),
        on_open: Callable[[str], None] | None = None,
        on_close: Callable[[str], None] | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._job_config = dict(job_config or {})
        self.tags = list(tags)
        self._on_open = on_open
        self._on_close = on_close
        # One client (and its connection pool) for every call: a new client per call loaded the CA
        # bundle each time (about 30 ms), which made up most of an episode's start and end.
        self._client = httpclients.client(10.0)

    def __repr__(self) -> str:
        return f"PrefectConfigStore({self.api_url!r})"

    def close(self) -> None:
        self._client.close()

    # ---------------------------------------------------------------------------------- the protocol

    def get(self, name: str) -> str | None:
        resp = self._call("GET", f"/variables/name/{name}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise BackendError(f"config store: reading {name!r} failed: {resp.status_code} {resp.text[:200]}")
        value = resp.json().get("value")
        return None if value is None else str(value)

    def set(self, name: str, value: str) -> None:
        resp = self._call("PATCH", f"/variables/name/{name}", {"value": value})
        if resp.status_code == 404:
            resp = self._call("POST", "/variables/", {"name": name, "value": value, "tags": self.tags})
        if resp.status_code not in (200, 201, 204):
            raise BackendError(f"config store: writing {name!r} failed: {resp.status_code} {resp.text[:200]}")

    def delete(self, name: str) -> None:
        resp = self._call("DELETE", f"/variables/name/{name}")
        if resp.status_code not in (200, 204, 404):
            raise BackendError(
                f"config store: deleting {name!r} failed: {resp.status_code} {resp.text[:200]}"
            )

    def names(self, prefix: str) -> list[str]:
        # The server matches LIKE '%<like_>%' (and "_" is a wildcard there): the prefix is checked here.
        found = self._filter({"name": {"like_": prefix}})
        return sorted(name for name in found if name.startswith(prefix))

    def open_scope(self, prefix: str, values: dict[str, str]) -> None:
        if self._on_open is not None:
            self._on_open(prefix)
        for key, value in values.items():
            self.set(prefix + key, value)

    def close_scope(self, prefix: str) -> None:
        for name in self.names(prefix):
            self.delete(name)
        if self._on_close is not None:
            self._on_close(prefix)

    def job_config(self) -> dict[str, str]:
        if not self._job_config:
            raise BackendError(f"config store at {self.api_url}: no job config was given to it")
        return dict(self._job_config)

    def references(self) -> dict[str, str]:
        config = self.job_config()
        return {ref: config[key] for ref, key in REFERENCES.items()}

    # ------------------------------------------------------------------------------------ the backend's

    def tagged(self, *, patient: bool = True) -> list[str]:
        """Names of every variable carrying all of this store's tags (none without tags). Not
        ``patient``: a server that cannot be reached fails at once (no retries)."""
        if not self.tags:
            return []
        return sorted(self._filter({"tags": {"all_": self.tags}}, patient=patient))

    def delete_tagged(self) -> int:
        """Delete every variable carrying all of this store's tags; how many were deleted (a server that
        cannot be reached fails at once with :class:`~mlsandbox.errors.BackendError`)."""
        names = self.tagged(patient=False)
        for name in names:
            self.delete(name)
        return len(names)

    # ------------------------------------------------------------------------------------------ helpers

    def _filter(self, criteria: dict[str, Any], *, patient: bool = True) -> list[str]:
        names: list[str] = []
        offset = 0
        while True:
            body = {"variables": criteria, "limit": PAGE, "offset": offset}
            resp = self._call("POST", "/variables/filter", body, patient=patient)
            if resp.status_code != 200:
                raise BackendError(f"config store: listing failed: {resp.status_code} {resp.text[:200]}")
            page = resp.json()
            names += [str(v.get("name", "")) for v in page]
            if len(page) < PAGE:
                return names
            offset += PAGE

    def _call(self, method: str, path: str, body: Any = None, *, patient: bool = True) -> httpx.Response:
        for pause in (*(self.RETRIES if patient else ()), None):
            try:
                resp = self._client.request(method, f"{self.api_url}{path}", json=body)
                if resp.status_code != 503 or pause is None:
                    return resp
            # Read/write errors: a pooled connection the server closed (a restarted Prefect).
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
                if pause is None:
                    raise BackendError(
                        f"config store (Prefect at {self.api_url}): {type(e).__name__}: {e}"
                    ) from e
            except httpx.HTTPError as e:
                raise BackendError(
                    f"config store (Prefect at {self.api_url}): {type(e).__name__}: {e}"
                ) from e
            time.sleep(pause)
        raise AssertionError("unreachable")


__all__ = ["PrefectConfigStore", "job_config_of"]
