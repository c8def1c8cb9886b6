"""One running sandbox shared by the episodes of a server: attached on first use, stopped only if started here.

A :class:`SandboxHost` is what the OpenEnv server's sessions share (as ``mlsandbox serve``'s sessions share a
sandbox): the backend (``local``, ``kube``, ``sim``, or any backend :func:`mlsandbox.backends.get_backend`
knows) and the sandbox's name. ``runtime()`` attaches to the sandbox the first time an episode needs it;
with ``start=True`` it starts an ephemeral one when none is running (stopped by :meth:`close`), otherwise
it raises :class:`~mlsandbox.errors.NotRunningError` saying how to start it. Thread-safe.

A backend whose sandbox lives in the calling process (``BackendType.in_process``: ``sim``) has nothing to
share between sessions but a clock: each session asks :meth:`own_sandbox` for a sandbox of its own
instead, as ``mlsandbox serve``'s sessions do.
"""

from __future__ import annotations

import itertools
import threading

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import Backend, Runtime
from mlsandbox.backends.registry import backend_type
from mlsandbox.errors import NotRunningError
from mlsandbox.paths import default_sandbox_name


class SandboxHost:
    def __init__(self, backend: str = "local", sandbox: str | None = None, *, start: bool = False) -> None:
        self.backend_kind = backend
        self.sandbox = sandbox or default_sandbox_name()
        self.start = start
        self.backend: Backend = get_backend(backend, self.sandbox)
        self.in_process = backend_type(backend).in_process
        """Each session gets a sandbox of its own (:meth:`own_sandbox`): no two share a virtual clock."""
        self._runtime: Runtime | None = None
        self._owns = False
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)

    def __repr__(self) -> str:
        return f"SandboxHost(backend={self.backend_kind!r}, sandbox={self.sandbox!r})"

    @property
    def owns_sandbox(self) -> bool:
        """Whether this host started the sandbox (and stops it on :meth:`close`)."""
        return self._owns

    def runtime(self) -> Runtime:
        with self._lock:
            if self._runtime is None:
                if not self.backend.is_alive():
                    if not self.start:
                        raise NotRunningError(
                            f"sandbox {self.sandbox!r} ({self.backend_kind}) is not running: start it with "
                            f"`mlsandbox up --name {self.sandbox}`, or let the server start one (start=True)"
                        )
                    self.backend.up(ephemeral=True)
                    self._owns = True
                self._runtime = self.backend.runtime()
            return self._runtime

    def own_sandbox(self) -> Backend:
        """A new sandbox of the host's in-process backend for one session (``<sandbox>-<n>``), started;
        the session brings it ``down`` when it ends."""
        if not self.in_process:
            raise ValueError(f"the {self.backend_kind} backend's sandboxes are shared, not one per session")
        own = get_backend(self.backend_kind, f"{self.sandbox}-{next(self._sessions)}")
        own.up(ephemeral=True)
        return own

    def close(self) -> None:
        """Forget the runtime; stop the sandbox if this host started it. Idempotent."""
        with self._lock:
            self._runtime = None
            if self._owns:
                self._owns = False
                self.backend.down()


__all__ = ["SandboxHost"]
