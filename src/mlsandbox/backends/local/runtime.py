"""The operations over a running local sandbox (handed out by ``LocalBackend.runtime()``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlsandbox.backends.common.clients import ServiceClients
from mlsandbox.backends.local.jobs import LocalJobs
from mlsandbox.backends.protocols import Endpoints
from mlsandbox.errors import BackendError

if TYPE_CHECKING:
    from mlsandbox.backends.local.faults.control import LocalFaultControl


class LocalRuntime(ServiceClients):
    """Object store, tracking and jobs of the sandbox ``sandbox_name``; each client is created on first use."""

    def __init__(self, endpoints: Endpoints, sandbox_dir: Path, sandbox_name: str) -> None:
        super().__init__(endpoints)
        self.sandbox_dir = Path(sandbox_dir)
        self.sandbox_name = sandbox_name
        self._jobs: LocalJobs | None = None
        self._faults: LocalFaultControl | None = None

    def __repr__(self) -> str:
        return f"LocalRuntime(sandbox_name={self.sandbox_name!r}, sandbox_dir={str(self.sandbox_dir)!r})"

    @property
    def jobs(self) -> LocalJobs:
        with self._lock:
            if self._jobs is None:
                self._jobs = LocalJobs(self.sandbox_dir, self.sandbox_name, self._endpoints)
            return self._jobs

    @property
    def faults(self) -> LocalFaultControl:
        """Fault mechanisms on this sandbox (signals, cgroups, Toxiproxy, MinIO quotas); made on first use."""
        with self._lock:
            if self._faults is None:
                from mlsandbox.backends.local.backend import LocalBackend
                from mlsandbox.backends.local.faults.control import LocalFaultControl

                backend = LocalBackend(self.sandbox_name)
                if backend.dir.resolve() != self.sandbox_dir.resolve():
                    raise BackendError(f"sandbox {self.sandbox_name!r} does not live in {self.sandbox_dir}")
                self._faults = LocalFaultControl(backend, self._endpoints, None)
            faults = self._faults
        faults.jobs = self.jobs
        return faults

    def close(self) -> None:
        """Kill the sandbox's running jobs (when any were started). The services are the backend's."""
        with self._lock:
            jobs = self._jobs
        if jobs is not None:
            jobs.close()
