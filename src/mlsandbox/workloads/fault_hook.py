"""The internal fault hook of the sandbox's own HTTP services (model servers, the API data source, ...).

A service mounts :class:`FaultHookMiddleware` on its ASGI app. The hook is driven through a control file
whose path the sandbox passes to the service in ``MLSANDBOX_FAULT_HOOK_FILE``; it lives under the
sandbox's state directory, never behind any port, so the agent cannot reach it. The file holds JSON::

    {"error_rate": 0.3, "status": 503, "delay_ms": 200, "seed": 7}

``error_rate`` of the requests get ``status`` with a short JSON error body; every request is delayed by
``delay_ms`` first. Paths in ``exempt`` (``/health`` by default is *not* exempt: a sick server answers
its health check badly too) pass untouched. A missing or empty file means no fault. The file is re-read
when its modification time changes (one ``stat`` per request), so injecting and recovering need no
restart and take effect with the next request.

Which file belongs to which service: a service (or whatever starts it) registers its control file under a
target name with :func:`register_hook`; a perturbation ``{target: http:NAME, fault: {type: http_errors}}``
resolves NAME through :func:`hook_file` (the episode's own registrations first, then global ones).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from pathlib import Path
from typing import Any

ENV_VAR = "MLSANDBOX_FAULT_HOOK_FILE"


_REGISTRY: dict[tuple[str | None, str], Path] = {}
_REGISTRY_LOCK = threading.Lock()


def register_hook(name: str, path: str | os.PathLike[str], *, scope: str | None = None) -> None:
    """Make ``http:NAME`` targets resolve to ``path`` (``scope``: an episode id, or None for every one)."""
    with _REGISTRY_LOCK:
        _REGISTRY[(scope, name)] = Path(path)


def unregister_hook(name: str, *, scope: str | None = None) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop((scope, name), None)


def hook_file(name: str, *, scope: str | None = None) -> Path | None:
    """The control file registered for ``name`` (the scope's own first, then a global one)."""
    with _REGISTRY_LOCK:
        return _REGISTRY.get((scope, name)) or _REGISTRY.get((None, name))


def registered_hooks(*, scope: str | None = None) -> list[str]:
    """Names ``http:NAME`` can target in ``scope`` (global registrations included)."""
    with _REGISTRY_LOCK:
        return sorted({n for (s, n) in _REGISTRY if s is None or s == scope})


def write_fault(
    path: Path, *, error_rate: float = 0.0, status: int = 503, delay_ms: int = 0, seed: int = 0
) -> None:
    """Set the fault of the service behind ``path`` (atomically; idempotent)."""
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must be within [0, 1], got {error_rate}")
    if not 500 <= status <= 599:
        raise ValueError(f"status must be a 5xx code, got {status}")
    if delay_ms < 0:
        raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(
        json.dumps({"error_rate": error_rate, "status": status, "delay_ms": delay_ms, "seed": seed})
    )
    os.replace(tmp, path)


def write_fault_from(path: Path, fault: Any) -> None:
    """:func:`write_fault` of a fault as the control routes and the kube backend's fault Secret spell it
    (a mapping of ``error_rate``, ``status``, ``delay_ms``, ``seed``; absent keys take the defaults);
    ``ValueError``/``TypeError``/``AttributeError`` for one that is not a fault."""
    write_fault(
        path,
        error_rate=float(fault.get("error_rate", 0.0)),
        status=int(fault.get("status", 503)),
        delay_ms=int(fault.get("delay_ms", 0)),
        seed=int(fault.get("seed", 0)),
    )


def clear_fault(path: Path) -> None:
    """Remove the fault (idempotent)."""
    path.unlink(missing_ok=True)


class FaultHookMiddleware:
    """Pure ASGI middleware; ``control_file`` defaults to ``$MLSANDBOX_FAULT_HOOK_FILE`` (no file: no-op)."""

    def __init__(
        self, app: Any, control_file: str | os.PathLike[str] | None = None, exempt: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        path = control_file if control_file is not None else os.environ.get(ENV_VAR)
        self.path = Path(path) if path else None
        self.exempt = exempt
        self._mtime: int | None = None
        self._fault: dict[str, Any] = {}
        self._rng = random.Random(0)

    def _current(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._fault = None, {}
            return self._fault
        if mtime != self._mtime:
            try:
                fault = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                fault = {}
            self._mtime, self._fault = mtime, fault if isinstance(fault, dict) else {}
            self._rng = random.Random(int(self._fault.get("seed", 0)))
        return self._fault

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        fault = self._current()
        if fault:
            delay = float(fault.get("delay_ms", 0)) / 1000.0
            if delay > 0:
                await asyncio.sleep(delay)
            if self._rng.random() < float(fault.get("error_rate", 0.0)):
                status = int(fault.get("status", 503))
                body = json.dumps({"error": "internal fault", "status": status}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
