"""The fault hook of the sandbox's own HTTP services on the kube backend, and the registry of the
``http:NAME`` targets an episode has.

An HTTP service the kube backend runs as a pod (an API data source, the feature service) serves its fault
hook's control routes (:mod:`mlsandbox.workloads.fault_control`) on its pod's loopback address, beside its
public port. :class:`ControlListener` reaches that port through a port-forward of the API server
(:class:`~mlsandbox.backends.kube.portforward.PortForwarder`): the agent's role has no
``pods/portforward`` right and the port is behind no Service, so only the sandbox can write the fault.
The pod is found at each connection (a running pod, ready or not: a pod the fault made unready must
still be reachable to clear it). The hook's control file lives in the pod's ``/tmp`` emptyDir, so a new
pod of the service starts without the fault, as a restarted process does on ``local``.

:class:`PodFaultHook` is what ``set_http_fault``, ``clear_http_fault`` and ``http_fault_active`` of
:class:`~mlsandbox.backends.kube.faults.control.KubeFaultControl` drive for one target; whoever starts
the service registers it with :func:`register_http_target` under the episode's id and the target's name,
and unregisters it when the episode closes the service.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import httpx

from mlsandbox.backends.protocols.faults import HttpFault

from .portforward import PortForwarder


def running_pod(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The name of the first running pod of ``pods`` that is not being deleted, ready or not (a fault
    makes a service's pod unready: its control listener must still be reachable to clear it)."""
    for pod in pods:
        if (
            not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
        ):
            return str(pod["metadata"]["name"])
    return None


class ControlUnreachable(Exception):
    """The control listener could not be reached, or answered with an error status."""


class ControlListener:
    """Requests to the control listener on ``port`` of the pod ``find_pod`` names (``what`` says whose, in
    errors)."""

    def __init__(
        self, api_client: Any, namespace: str, find_pod: Callable[[], str | None], port: int, what: str
    ) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.find_pod = find_pod
        self.port = port
        self.what = what
        self._lock = threading.Lock()
        self._forward: PortForwarder | None = None
        self._http: httpx.Client | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"ControlListener({self.what}, port {self.port})"

    def request(
        self, method: str, path: str, body: bytes = b"", *, timeout_s: float = 30.0
    ) -> httpx.Response:
        """The listener's answer (status < 300); :class:`ControlUnreachable` otherwise."""
        with self._lock:
            if self._closed:
                raise ControlUnreachable(f"{self.what}'s control listener: closed with its episode")
            if self._forward is None:
                self._forward = PortForwarder(self.api_client, self.namespace, self.find_pod, self.port)
            if self._http is None:
                self._http = httpx.Client(timeout=10.0, trust_env=False)
            host, port = self._forward.address
            client = self._http
        try:
            resp = client.request(method, f"http://{host}:{port}{path}", content=body, timeout=timeout_s)
        except httpx.HTTPError as e:
            raise ControlUnreachable(f"{self.what}'s control listener: {type(e).__name__}: {e}") from None
        if resp.status_code >= 300:
            raise ControlUnreachable(
                f"{self.what}'s control listener answered {resp.status_code}: {resp.text[:200]}"
            )
        return resp

    def close(self) -> None:
        """Stop the port-forward (idempotent); later requests are :class:`ControlUnreachable`."""
        with self._lock:
            self._closed = True
            forward, self._forward = self._forward, None
            client, self._http = self._http, None
        if forward is not None:
            forward.close()
        if client is not None:
            client.close()


class PodFaultHook:
    """The fault hook of one HTTP service's pod, through its control listener."""

    def __init__(self, listener: ControlListener) -> None:
        self.listener = listener
        self._set = False

    def set(self, fault: HttpFault) -> None:
        body = {"error_rate": fault.error_rate, "status": fault.status, "delay_ms": fault.delay_ms}
        self.listener.request("PUT", "/fault", json.dumps({**body, "seed": fault.seed}).encode())
        self._set = True

    def clear(self) -> None:
        """Remove the fault (no error when the pod is gone: a new pod starts without it)."""
        self._set = False
        with contextlib.suppress(ControlUnreachable):
            self.listener.request("DELETE", "/fault", timeout_s=10.0)

    def active(self) -> bool:
        """Whether the fault this hook set is still in the service's pod (False once cleared, and when the
        pod that held it was replaced or no pod runs)."""
        if not self._set:
            return False
        try:
            answer = self.listener.request("GET", "/fault", timeout_s=10.0).json()
        except (ControlUnreachable, ValueError):
            return False
        return bool(isinstance(answer, Mapping) and answer.get("active"))


class HttpFaultTarget(Protocol):
    """What an ``http:NAME`` target of an episode offers the fault control."""

    def set_http_fault(self, fault: HttpFault) -> None: ...

    def clear_http_fault(self) -> None: ...

    def http_fault_active(self) -> bool: ...


_TARGETS: dict[tuple[str, str], HttpFaultTarget] = {}
_TARGETS_LOCK = threading.Lock()


def register_http_target(episode_id: str, name: str, target: HttpFaultTarget) -> None:
    """Make ``http:NAME`` of the episode resolve to ``target``."""
    with _TARGETS_LOCK:
        _TARGETS[(episode_id, name)] = target


def unregister_http_target(episode_id: str, name: str, target: HttpFaultTarget) -> None:
    """Forget ``http:NAME`` of the episode if it is still ``target``."""
    with _TARGETS_LOCK:
        if _TARGETS.get((episode_id, name)) is target:
            del _TARGETS[(episode_id, name)]


def http_target(name: str, episode_id: str) -> HttpFaultTarget | None:
    """The episode's HTTP service ``name`` (an ``http:NAME`` fault target), if one is registered."""
    with _TARGETS_LOCK:
        return _TARGETS.get((episode_id, name))


def http_targets(episode_id: str) -> list[str]:
    """The names ``http:NAME`` can target in the episode."""
    with _TARGETS_LOCK:
        return sorted(n for (e, n) in _TARGETS if e == episode_id)


__all__ = [
    "ControlListener",
    "ControlUnreachable",
    "HttpFaultTarget",
    "PodFaultHook",
    "http_target",
    "http_targets",
    "register_http_target",
    "running_pod",
    "unregister_http_target",
]
