"""The operations over a running local sandbox (handed out by ``LocalBackend.runtime()``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.backends.common.clients import ServiceClients
from mlsandbox.backends.common.clock import RealClock
from mlsandbox.backends.local.jobs import LocalJobs
from mlsandbox.backends.local.sandbox import LocalSandbox
from mlsandbox.backends.protocols import Endpoints, Support
from mlsandbox.backends.protocols.runtime import random_episode_id
from mlsandbox.errors import BackendError, Unsupported

if TYPE_CHECKING:
    from mlsandbox.backends.common.config_store import PrefectConfigStore
    from mlsandbox.backends.common.mlflow_tracking import MLflowTracking
    from mlsandbox.backends.common.s3 import S3ObjectStore
    from mlsandbox.backends.local.episode_journal import JournaledFlows
    from mlsandbox.backends.local.faults.control import LocalFaultControl
    from mlsandbox.backends.local.faults.journal import Journal
    from mlsandbox.backends.local.serving.episode import LocalServing
    from mlsandbox.backends.local.sources import LocalSourceHosting
    from mlsandbox.backends.local.venvs import LocalEnvironments
    from mlsandbox.backends.local.workspaces import LocalWorkspaces


BACKEND = "local"


def static_support() -> Support:
    """What a local sandbox on this machine refuses, known without starting one: fault types whose
    mechanism is missing here (no Toxiproxy binary, jobs without cgroups)."""
    from mlsandbox.backends.local.faults.control import unavailable_here
    from mlsandbox.backends.local.workspaces import unavailable_reason

    refused = {f"fault:{k}": v for k, v in unavailable_here().items()}
    why = unavailable_reason()
    if why is not None:
        refused["workspaces"] = why
    return Support(backend=BACKEND, unsupported=refused)


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
        self._flows: JournaledFlows | None = None
        self._journal: Journal | None = None
        self._config: PrefectConfigStore | None = None
        self._workspaces: LocalWorkspaces | None = None

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

    def new_episode_id(self, seed: int) -> str:
        """Random: several processes share the sandbox's services."""
        return random_episode_id(seed)

    def support(self) -> Support:
        """The backend's support (what this machine lacks: binaries, cgroups), refined by the running
        sandbox's fault control (a Toxiproxy that did not start)."""
        refused = dict(static_support().unsupported)
        refused.update({f"fault:{k}": v for k, v in self.faults.unavailable().items()})
        return Support(backend=BACKEND, unsupported=refused)

    # -------------------------------------------------------------------------------- capabilities

    @property
    def journal(self) -> Journal:
        """This process's undo journal of the sandbox (faults, and what episodes make on the services)."""
        from mlsandbox.backends.local.faults.journal import Journal

        with self._lock:
            if self._journal is None:
                self._journal = Journal(self.sandbox_dir)
            return self._journal

    @property
    def object_store(self) -> S3ObjectStore:
        """MinIO; buckets made here are journaled until deleted (the garbage collector deletes those of a
        process that died)."""
        from mlsandbox.backends.local.episode_journal import JournaledObjectStore

        journal = self.journal
        with self._lock:
            if self._object_store is None:
                e = self._endpoints
                self._object_store = JournaledObjectStore(e.s3_url, e.s3_access_key, e.s3_secret_key, journal)
            return self._object_store

    @property
    def tracking(self) -> MLflowTracking:
        """MLflow; experiments and registered models made here are journaled until deleted."""
        from mlsandbox.backends.local.episode_journal import JournaledTracking

        journal = self.journal
        with self._lock:
            if self._tracking is None:
                self._tracking = JournaledTracking(self._endpoints.mlflow_url, journal)
            return self._tracking

    @property
    def jobs(self) -> LocalJobs:
        with self._lock:
            if self._jobs is None:
                self._jobs = LocalJobs(self.sandbox_dir, self.sandbox_name, self._endpoints)
                self._jobs.workspaces = self._workspaces
            return self._jobs

    @property
    def workspaces(self) -> LocalWorkspaces:
        """The episodes' code workspaces; their scripts run as ``script`` jobs isolated with bubblewrap
        (:mod:`mlsandbox.backends.local.workspaces`). Refused without ``bwrap``."""
        from mlsandbox.backends.local.workspaces import LocalWorkspaces, unavailable_reason

        why = unavailable_reason()
        if why is not None:
            raise Unsupported("workspaces", BACKEND, why)
        with self._lock:
            if self._workspaces is None:
                self._workspaces = LocalWorkspaces(self.sandbox_dir, self._endpoints)
            if self._jobs is not None:
                self._jobs.workspaces = self._workspaces
            return self._workspaces

    @property
    def serving(self) -> LocalServing:
        """Model deployments: each episode's replicas as supervised processes under their machine's
        cgroup limits (see :mod:`mlsandbox.backends.local.serving.episode`)."""
        from mlsandbox.backends.local.serving.episode import LocalServing

        return LocalServing(self.sandbox_dir, self.sandbox_name, self._endpoints, lambda: self.environments)

    @property
    def faults(self) -> LocalFaultControl:
        """Fault mechanisms on this sandbox (signals, cgroups, Toxiproxy, MinIO quotas, CPU burners, HTTP
        fault hooks); made on first use."""
        jobs = self.jobs
        with self._lock:
            if self._faults is None:
                from mlsandbox.backends.local.faults.control import LocalFaultControl

                sandbox = LocalSandbox(self.sandbox_name)
                if sandbox.dir.resolve() != self.sandbox_dir.resolve():
                    raise BackendError(f"sandbox {self.sandbox_name!r} does not live in {self.sandbox_dir}")
                self._faults = LocalFaultControl(sandbox, self._endpoints, jobs)
            return self._faults

    # ------------------------------------------------- sources, flows, config store, environments

    @property
    def sources(self) -> LocalSourceHosting:
        """The API source and PostgreSQL as on-demand processes of the sandbox."""
        from mlsandbox.backends.local.sources import LocalSourceHosting

        return LocalSourceHosting(LocalSandbox(self.sandbox_name), journal=self.journal)

    @property
    def flows(self) -> JournaledFlows:
        """The sandbox's Prefect server and process worker; runs reach the services as this process does
        and work in a named environment's interpreter when given one. An episode's flows are journaled
        until closed."""
        from mlsandbox.backends.common.prefect import WORK_POOL, FlowPlacement
        from mlsandbox.backends.local import venvs
        from mlsandbox.backends.local.episode_journal import JournaledFlows
        from mlsandbox.workloads.contract import endpoint_env

        journal, home = self.journal, self.jobs.home
        with self._lock:
            if self._flows is None:
                placement = FlowPlacement(WORK_POOL, endpoint_env(**self._endpoints.model_dump()))
                self._flows = JournaledFlows(
                    self._endpoints.prefect_api_url,
                    journal,
                    lambda labels: placement,
                    interpreter=lambda key: str(venvs.interpreter(key)),
                    sandbox=self.sandbox_name,
                    home=home,
                )
            return self._flows

    @property
    def config(self) -> PrefectConfigStore:
        """Prefect variables of the sandbox's Prefect server; each episode's scope is journaled (the
        garbage collector deletes the scope of a process that died; a close that failed is retried when
        the next scope opens)."""
        from mlsandbox.backends.common.config_store import job_config_of
        from mlsandbox.backends.local.episode_journal import JournaledConfigStore

        journal = self.journal
        with self._lock:
            if self._config is None:
                self._config = JournaledConfigStore(
                    self._endpoints.prefect_api_url, journal, job_config=job_config_of(self._endpoints)
                )
            return self._config

    @property
    def environments(self) -> LocalEnvironments:
        """uv venvs of this machine, shared by its sandboxes."""
        from mlsandbox.backends.local.venvs import LocalEnvironments

        return LocalEnvironments(self._endpoints.mlflow_url)

    def close(self) -> None:
        """Kill the sandbox's running jobs (when any were started). The services are the backend's."""
        with self._lock:
            jobs, workspaces = self._jobs, self._workspaces
        if jobs is not None:
            jobs.close()
        if workspaces is not None:
            workspaces.close_all()
