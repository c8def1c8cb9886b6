"""Sandboxes as the console shows them, and starting and stopping them from the page.

The list is every sandbox the backend registry knows on this machine (each backend that can list its own:
:func:`~mlsandbox.backends.registry.sandbox_listings`), each with its services (state from the health
checks, URL, port, pid, memory, uptime: the backend's ``status()``) when it has been started. Starting
(``up``, persistent, as ``mlsandbox up`` does) and stopping (``down``) take seconds, so each runs in a
thread of its own and the list reports it as an operation in progress, then its outcome (an error with
its message).

The episodes of a running sandbox are read from its runtime's audit log (:class:`AuditSource`); the log
is kept once found, so the episodes of a sandbox whose services died are still shown (as ``stopped``)
while the sandbox is listed.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from mlsandbox import paths
from mlsandbox.backends.protocols import AuditLog, SandboxListing
from mlsandbox.backends.registry import DEFAULT_BACKEND, backend_type, get_backend, sandbox_listings
from mlsandbox.console.episodes import AuditSource

log = logging.getLogger(__name__)
Operation = Literal["start", "stop"]


@dataclass
class OperationState:
    op: Operation
    backend: str
    started_at: float
    finished_at: float | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "backend": self.backend,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "running": self.finished_at is None,
            "error": self.error,
        }


def _running(listing: SandboxListing) -> bool:
    """Started and every service's process alive (no health probe: cheap enough for each poll)."""
    return listing.phase == "running" and listing.services_running is True


class Sandboxes:
    """The sandboxes of this machine and the start/stop operations the console launched."""

    def __init__(self) -> None:
        self._ops: dict[str, OperationState] = {}
        self._audits: dict[tuple[str, str], AuditLog] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------- episodes

    def audit_sources(self) -> list[AuditSource]:
        """The audit log of each listed sandbox that has one here (see the module docstring)."""
        out = []
        listed = set()
        for kind, listing in sandbox_listings():
            key = (kind, listing.name)
            listed.add(key)
            running = _running(listing)
            with self._lock:
                audit = self._audits.get(key)
            if audit is None and running:
                try:
                    audit = get_backend(kind, listing.name).runtime().audit
                except Exception as e:  # not running after all: tried again at the next scan
                    log.debug("sandbox %s (%s): no audit log: %s", listing.name, kind, e)
                    continue
                with self._lock:
                    self._audits[key] = audit
            if audit is not None:
                out.append(AuditSource(kind, listing.name, audit, running))
        with self._lock:
            for gone in set(self._audits) - listed:
                del self._audits[gone]
        return out

    # ------------------------------------------------------------------------------------ the page

    def list(self) -> list[dict[str, Any]]:
        listings = sandbox_listings()
        episodes: dict[str, int] = {}
        for src in self.audit_sources():
            try:
                episodes.setdefault(src.sandbox, len(src.audit.episodes()))
            except Exception:
                continue
        with ThreadPoolExecutor(max_workers=4) as pool:
            rows = list(pool.map(lambda kl: self._row(*kl), listings))
        for r in rows:
            r["episodes"] = episodes.get(r["name"], 0)
        with self._lock:
            known = {r["name"] for r in rows}
            for name, op in self._ops.items():  # a sandbox being started is not listed at first
                if name not in known and op.finished_at is None:
                    rows.append(_empty_row(name, op.backend))
            for r in rows:
                found = self._ops.get(r["name"])
                r["operation"] = found.as_dict() if found is not None else None
        return sorted(rows, key=lambda r: r["name"])

    def _row(self, kind: str, listing: SandboxListing) -> dict[str, Any]:
        row = _empty_row(listing.name, kind)
        row.update(
            phase=listing.phase,
            ephemeral=listing.ephemeral,
            owner_pid=listing.owner_pid,
            owner_alive=listing.owner_alive,
            created_at=listing.created_at,
        )
        if listing.phase != "unknown":
            try:
                services = [s.model_dump() for s in get_backend(kind, listing.name).status()]
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
            else:
                row["services"] = services
                row["rss_bytes"] = sum(s.get("rss_bytes") or 0 for s in services)
                row["running"] = listing.phase == "running" and all(s["state"] == "running" for s in services)
        return row

    # ---------------------------------------------------------------------------------- operations

    def start(self, name: str, backend: str | None = None) -> OperationState:
        return self._launch(name, "start", backend)

    def stop(self, name: str, backend: str | None = None) -> OperationState:
        return self._launch(name, "stop", backend)

    def _backend_of(self, name: str, backend: str | None) -> str:
        """The backend of the listed sandbox ``name``, else ``backend`` (the default one when None); it
        must be able to list its sandboxes (ValueError otherwise: nothing the console could show)."""
        for kind, listing in sandbox_listings():
            if listing.name == name and (backend is None or backend == kind):
                return kind
        kind = backend or DEFAULT_BACKEND
        if backend_type(kind).sandboxes is None:
            raise ValueError(f"the {kind} backend's sandboxes cannot be listed: start them elsewhere")
        return kind

    def _launch(self, name: str, op: Operation, backend: str | None) -> OperationState:
        paths.validate_sandbox_name(name)
        kind = self._backend_of(name, backend)
        with self._lock:
            current = self._ops.get(name)
            if current is not None and current.finished_at is None:
                raise RuntimeError(f"sandbox {name!r}: a {current.op} is already in progress")
            state = OperationState(op, kind, time.time())
            self._ops[name] = state
        threading.Thread(
            target=self._run, args=(name, state), name=f"console-{op}-{name}", daemon=True
        ).start()
        return state

    def _run(self, name: str, state: OperationState) -> None:
        try:
            backend = get_backend(state.backend, name)
            if state.op == "start":
                backend.up()
            else:
                backend.down()
        except Exception as e:  # reported on the page
            state.error = f"{type(e).__name__}: {e}"
        finally:
            state.finished_at = time.time()


def _empty_row(name: str, backend: str) -> dict[str, Any]:
    return {
        "name": name,
        "backend": backend,
        "phase": "unknown",
        "ephemeral": None,
        "owner_pid": None,
        "owner_alive": None,
        "created_at": None,
        "services": [],
        "rss_bytes": None,
        "running": False,
        "episodes": 0,
        "error": None,
    }


__all__ = ["OperationState", "Sandboxes"]
