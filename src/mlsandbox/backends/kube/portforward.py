"""A TCP path from this machine to a port of a pod, through the API server (``pods/portforward``), as
``kubectl port-forward`` makes one: a listener on ``127.0.0.1`` whose every accepted connection becomes a
port-forward stream to the pod's port. Any client (psycopg, httpx) then connects to a local address.

The pod is found by a label selector at each new connection (the first running, ready one), so a pod
replaced by its Deployment is reached at the same local address. When none is there, or the API server
refuses the stream, the connection is closed at once: the client sees the server go away, as it would
if the server were down. What is forwarded goes to the pod's own loopback address, so a port the pod
serves on ``127.0.0.1`` only is reachable this way and from nowhere else in the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

PodFinder = Callable[[], "str | None"]
"""Gives the name of the pod to forward to now (None: no pod is there)."""

_CHUNK = 256 * 1024


class PortForwarder:
    """Forward ``127.0.0.1:<port>`` (an ephemeral port) to ``port`` of the pod ``find_pod`` names in
    ``namespace``; :meth:`close` stops listening and ends every open connection."""

    def __init__(self, api_client: Any, namespace: str, find_pod: PodFinder, port: int) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.find_pod = find_pod
        self.remote_port = port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(
            target=self._accept, name=f"port-forward {namespace}:{port}", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        return f"PortForwarder(127.0.0.1:{self.local_port} -> {self.namespace}/*:{self.remote_port})"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.local_port)

    def close(self) -> None:
        """Stop accepting and close every forwarded connection (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            open_now, self._open = set(self._open), set()
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.close()

    # ------------------------------------------------------------------------------------ internals

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _stream(self) -> Any | None:
        """A port-forward stream's socket to the pod, or None when there is no pod or it is refused."""
        from kubernetes import client as k8s
        from kubernetes.stream import portforward

        pod = self.find_pod()
        if pod is None:
            return None
        api = k8s.CoreV1Api(self.api_client)
        try:
            forward = portforward(
                api.connect_get_namespaced_pod_portforward,
                pod,
                self.namespace,
                ports=str(self.remote_port),
            )
        except Exception as e:  # the API server's refusal, a pod that just went away
            log.debug("port-forward to %s/%s:%s refused: %s", self.namespace, pod, self.remote_port, e)
            return None
        return forward.socket(self.remote_port)

    def _serve(self, client: socket.socket) -> None:
        remote = self._stream()
        if remote is None:
            client.close()
            return
        with self._lock:
            if self._closed.is_set():
                client.close()
                remote.close()
                return
            self._open.update((client, remote._socket))
        try:
            _pump(client, remote._socket)
        finally:
            with self._lock:
                self._open.discard(client)
                self._open.discard(remote._socket)
            for sock in (client, remote):
                with contextlib.suppress(OSError):
                    sock.close()


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    peers = {a: b, b: a}
    while True:
        try:
            ready, _, _ = select.select(list(peers), [], [], 60.0)
        except (OSError, ValueError):
            return
        for sock in ready:
            try:
                data = sock.recv(_CHUNK)
            except OSError:
                return
            if not data:
                return
            try:
                peers[sock].sendall(data)
            except OSError:
                return


__all__ = ["PodFinder", "PortForwarder"]
