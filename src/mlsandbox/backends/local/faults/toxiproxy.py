"""Network faults of a local sandbox: toxics and proxy switches on its Toxiproxy.

Toxiproxy sits in front of MinIO and MLflow (the endpoints the agent's and the workloads' clients use);
its proxies are named after the services. Every toxic and every disabled proxy is journaled before it is
made, and :func:`undo_network` undoes a journal entry for a process that is gone.
"""

from __future__ import annotations

from typing import Any

import httpx

from mlsandbox import httpclients
from mlsandbox.backends.local import services as svc
from mlsandbox.backends.local.faults.journal import Journal, UndoProxyDisabled, UndoToxic
from mlsandbox.errors import BackendError
from mlsandbox.faultkinds import TOXIC_TYPES

TOXIC_KINDS = TOXIC_TYPES
"""The Toxiproxy toxic types the network faults declare (the sandbox's network makes no others)."""


class ToxiproxyControl:
    """The :class:`~mlsandbox.backends.protocols.NetworkControl` of a local sandbox."""

    def __init__(self, api_url: str, journal: Journal) -> None:
        self.api_url = api_url
        self.journal = journal

    def endpoints(self) -> list[str]:
        return list(svc.PROXIED)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            with httpclients.client(10.0) as client:
                return client.request(method, f"{self.api_url}{path}", json=body)
        except httpx.HTTPError as e:
            raise BackendError(f"toxiproxy at {self.api_url}: {type(e).__name__}: {e}") from e

    def add_toxic(
        self, endpoint: str, name: str, kind: str, attributes: dict[str, Any], *, stream: str = "downstream"
    ) -> None:
        self._check(endpoint)
        if kind not in TOXIC_KINDS:
            raise ValueError(f"unknown toxic type {kind!r}; types: {', '.join(TOXIC_KINDS)}")
        self.journal.add(f"toxic:{endpoint}:{name}", UndoToxic(endpoint=endpoint, name=name))
        self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        resp = self._call("POST", f"/proxies/{endpoint}/toxics", body)
        if resp.status_code not in (200, 201):
            raise BackendError(
                f"toxiproxy refused toxic {name!r} on {endpoint}: {resp.status_code} {resp.text}"
            )

    def remove_toxic(self, endpoint: str, name: str) -> None:
        self._check(endpoint)
        resp = self._call("DELETE", f"/proxies/{endpoint}/toxics/{name}")
        if resp.status_code not in (200, 204, 404):
            raise BackendError(f"toxiproxy: removing toxic {name!r} failed: {resp.status_code} {resp.text}")
        self.journal.remove(f"toxic:{endpoint}:{name}")

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        self._check(endpoint)
        if not enabled:
            self.journal.add(f"proxy:{endpoint}", UndoProxyDisabled(endpoint=endpoint))
        resp = self._call("POST", f"/proxies/{endpoint}", {"enabled": enabled})
        if resp.status_code != 200:
            raise BackendError(f"toxiproxy: switching {endpoint} failed: {resp.status_code} {resp.text}")
        if enabled:
            self.journal.remove(f"proxy:{endpoint}")

    def toxics(self, endpoint: str) -> list[dict[str, Any]]:
        """The toxics on an endpoint's proxy, as Toxiproxy lists them (local only: for tests and tools)."""
        resp = self._call("GET", f"/proxies/{endpoint}/toxics")
        resp.raise_for_status()
        return list(resp.json())

    def reset(self) -> None:
        """Every toxic removed, every proxy enabled (Toxiproxy's own ``POST /reset``)."""
        resp = self._call("POST", "/reset")
        if resp.status_code not in (200, 204):
            raise BackendError(f"toxiproxy reset failed: {resp.status_code} {resp.text}")
        for key in self.journal.entry_keys():
            if key.startswith(("toxic:", "proxy:")):
                self.journal.remove(key)

    def _check(self, endpoint: str) -> None:
        if endpoint not in svc.PROXIED:
            raise ValueError(f"unknown endpoint {endpoint!r}; endpoints: {', '.join(svc.PROXIED)}")


def undo_network(entry: UndoToxic | UndoProxyDisabled, api_url: str | None) -> None:
    """Undo one journaled network change on the Toxiproxy at ``api_url`` (None: none runs, nothing to do)."""
    if api_url is None:
        return
    with httpclients.client(5.0) as client:
        if isinstance(entry, UndoToxic):
            client.delete(f"{api_url}/proxies/{entry.endpoint}/toxics/{entry.name}")
        else:
            client.post(f"{api_url}/proxies/{entry.endpoint}", json={"enabled": True})
