"""The operations over a running local sandbox (handed out by ``LocalBackend.runtime()``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.backends.common.clients import ServiceClients
from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.local.jobs import LocalJobs
from mlsandbox.backends.protocols import Endpoints, Support
from mlsandbox.errors import BackendError

if TYPE_CHECKING:
    from mlsandbox.backends.local.faults.control import LocalFaultControl


BACKEND = "local"


class LocalRuntime(ServiceClients):
    """Every capability over the sandbox ``sandbox_name``; each client is created on first use.

    The clock is the wall clock; the audit log of an episode is ``<sandbox dir>/episodes/<episode>.jsonl``.
    """

    def __init__(self, endpoints: Endpoints, sandbox_dir: Path, sandbox_name: str) -> None:
        super().__init__(endpoints)
        self.sandbox_dir = Path(sandbox_dir)
        self.sandbox_name = sandbox_name
        self._clock = RealClock()
        self._audit = FileAuditLog(self.sandbox_dir / "episodes")
        self._jobs: LocalJobs | None = None
        self._faults: LocalFaultControl | None = None

    def __repr__(self) -> str:
        return f"LocalRuntime(sandbox_name={self.sandbox_name!r}, sandbox_dir={str(self.sandbox_dir)!r})"

    # ------------------------------------------------------------------------------------ identity

    @property
    def backend(self) -> str:
        return BACKEND

    @property
    def sandbox(self) -> str:
        return self.sandbox_name

    @property
    def clock(self) -> RealClock:
        return self._clock

    @property
    def audit(self) -> FileAuditLog:
        return self._audit

    def support(self) -> Support:
        """The backend's support (what this machine lacks: binaries, cgroups), refined by the running
        sandbox's fault control (a Toxiproxy that did not start)."""
        from mlsandbox.backends.local.backend import static_support

        refused = dict(static_support().unsupported)
        refused.update({f"fault:{k}": v for k, v in self.faults.unavailable().items()})
        return Support(backend=BACKEND, unsupported=refused)

    # -------------------------------------------------------------------------------- capabilities

    @property
    def jobs(self) -> LocalJobs:
        with self._lock:
            if self._jobs is None:
                self._jobs = LocalJobs(self.sandbox_dir, self.sandbox_name, self._endpoints)
            return self._jobs

    @property
    def faults(self) -> LocalFaultControl:
        """Fault mechanisms on this sandbox (signals, cgroups, Toxiproxy, MinIO quotas, CPU burners, HTTP
        fault hooks); made on first use."""
        jobs = self.jobs
        with self._lock:
            if self._faults is None:
                from mlsandbox.backends.local.backend import LocalBackend
                from mlsandbox.backends.local.faults.control import LocalFaultControl

                backend = LocalBackend(self.sandbox_name)
                if backend.dir.resolve() != self.sandbox_dir.resolve():
                    raise BackendError(f"sandbox {self.sandbox_name!r} does not live in {self.sandbox_dir}")
                self._faults = LocalFaultControl(backend, self._endpoints, jobs)
            return self._faults

    def close(self) -> None:
        """Kill the sandbox's running jobs (when any were started). The services are the backend's."""
        with self._lock:
            jobs = self._jobs
        if jobs is not None:
            jobs.close()
