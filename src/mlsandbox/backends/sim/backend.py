"""The ``sim`` backend: :class:`SimBackend` (its lifecycle) and :class:`SimRuntime` (every capability of the
declared Runtime over one in-memory world).

``up`` makes the world (nothing starts: no process, thread or socket), ``down`` forgets it; a sim sandbox
is always alive (its world is made on first use), so an env, a gateway or a command can use it without
``mlsandbox up``. Each :class:`SimBackend` object has a world of its own: two envs never share one, and a
run is a function of the sandbox's seed and of what was done to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mlsandbox.backends.protocols import AuditLog, BackendConfig, ServiceStatus, Support, Workspaces
from mlsandbox.backends.protocols.workspaces import RefusedWorkspaces
from mlsandbox.backends.sim import fitstore
from mlsandbox.backends.sim.audit import MemoryAuditLog
from mlsandbox.backends.sim.clock import VirtualClock
from mlsandbox.backends.sim.config import MemoryConfigStore
from mlsandbox.backends.sim.environments import SimEnvironments
from mlsandbox.backends.sim.faults import HttpTargets, SimFaultControl
from mlsandbox.backends.sim.flows import SimFlows
from mlsandbox.backends.sim.jobs import SimJobs
from mlsandbox.backends.sim.serving import SimServing
from mlsandbox.backends.sim.sources import SimSourceHosting
from mlsandbox.backends.sim.storage import MemoryObjectStore
from mlsandbox.backends.sim.tracking import MemoryTracking
from mlsandbox.backends.sim.world import SERVICES, SimWorld, addresses_for
from mlsandbox.calibration.shipped import load_calibration
from mlsandbox.errors import NotRunningError

BACKEND = "sim"
AUDIT_DIR_ENV = "MLSANDBOX_SIM_AUDIT_DIR"


class SimConfig(BackendConfig):
    """The ``sim`` backend's config."""

    type: Literal["sim"] = "sim"
    seed: int = Field(default=0, ge=0)
    """The sandbox's seed: the ids it hands out (episodes, runs, flow runs) follow from it."""
    calibration: str | None = None
    """A calibration file to use instead of the shipped one (``mlsandbox calibrate --out``)."""
    audit_dir: str | None = Field(default_factory=lambda: os.environ.get(AUDIT_DIR_ENV) or None)
    """Write each episode's audit log as a JSON-lines file in this directory (for ``mlsandbox watch
    --backend sim``, which reads the same directory); kept in memory when None. Default:
    ``$MLSANDBOX_SIM_AUDIT_DIR``."""
    step_cost_s: float = Field(default=0.0, ge=0.0)
    """Virtual seconds each step of an episode takes besides its operations (an agent's think time)."""
    fit_store: str | None = Field(default_factory=fitstore.default_directory)
    """The directory of the machine's fit store (:mod:`mlsandbox.backends.sim.fitstore`): real fits kept
    on disk, shared by every process and run; None keeps fits in memory only. Default:
    ``$MLSANDBOX_SIM_FIT_STORE`` (``off`` for none), else ``sim-fits`` under the mlsandbox home."""
    fit_store_mib: int = Field(default=fitstore.DEFAULT_MAX_MIB, ge=1)
    """The fit store's bound in MiB (the files read least recently go first)."""


class SimRuntime:
    """Every capability over one in-memory world (see the package docstring)."""

    def __init__(self, config: SimConfig) -> None:
        self.settings = config
        fitstore.configure(config.fit_store, config.fit_store_mib << 20)
        self.world = SimWorld(
            load_calibration(config.calibration),
            seed=config.seed,
            name=config.name,
            step_cost_s=config.step_cost_s,
        )
        w = self.world
        self._audit = _audit(config, w)
        self._http = HttpTargets()
        self._store = MemoryObjectStore(w)
        self._tracking = MemoryTracking(w, pump=self.pump)
        self._config = MemoryConfigStore(w)
        self._environments = SimEnvironments(w, self._tracking)
        self._jobs = SimJobs(w, self._store, self._tracking, self._config, environment=self._environments.get)
        self._sources = SimSourceHosting(w, self._http)
        self._serving = SimServing(w, self._tracking, self._store, self._http)
        self._flows = SimFlows(w, self._store, self._tracking, self._environments.get)
        self._faults = SimFaultControl(w, self._store, self._jobs, self._http, lambda: self._sources)
        self._pumping = False

    def __repr__(self) -> str:
        return f"SimRuntime(sandbox={self.settings.name!r}, seed={self.settings.seed}, t={self.world.clock.now:.3f})"

    # ------------------------------------------------------------------------------------ identity

    @property
    def backend(self) -> str:
        return BACKEND

    @property
    def sandbox(self) -> str:
        return self.settings.name

    @property
    def clock(self) -> VirtualClock:
        return self.world.clock

    @property
    def audit(self) -> AuditLog:
        return self._audit

    def support(self) -> Support:
        return static_support()

    def new_episode_id(self, seed: int) -> str:
        """Derived from the sandbox's seed and the episodes made so far: reproducible runs."""
        return f"{seed % 100000}-{self.world.ids.hex(8)}"

    # -------------------------------------------------------------------------------- capabilities

    @property
    def object_store(self) -> MemoryObjectStore:
        return self._store

    @property
    def tracking(self) -> MemoryTracking:
        return self._tracking

    @property
    def jobs(self) -> SimJobs:
        return self._jobs

    @property
    def serving(self) -> SimServing:
        return self._serving

    @property
    def sources(self) -> SimSourceHosting:
        return self._sources

    @property
    def flows(self) -> SimFlows:
        return self._flows

    @property
    def config(self) -> MemoryConfigStore:
        return self._config

    @property
    def environments(self) -> SimEnvironments:
        return self._environments

    @property
    def faults(self) -> SimFaultControl:
        return self._faults

    @property
    def workspaces(self) -> Workspaces:
        """Refused: every call raises the typed ``Unsupported`` (see :data:`WORKSPACES_REFUSAL`)."""
        return RefusedWorkspaces(BACKEND, WORKSPACES_REFUSAL)

    def pump(self) -> None:
        """Bring the simulated jobs and flow runs up to the clock's time (what the tracker, the object
        store and the services show depends on what they did)."""
        if self._pumping:
            return
        self._pumping = True
        try:
            self._jobs.pump()
            self._flows.pump()
        finally:
            self._pumping = False

    def close(self) -> None:
        self._jobs.close()


def _audit(config: SimConfig, world: SimWorld) -> AuditLog:
    if config.audit_dir:
        from mlsandbox.backends.common.audit import FileAuditLog

        log: AuditLog = FileAuditLog(Path(config.audit_dir).expanduser())
    else:
        log = MemoryAuditLog()
    return _StepCost(log, world) if config.step_cost_s > 0 else log


class _StepCost:
    """The audit log, charging the step cost to the clock at every step the gateway records."""

    def __init__(self, log: AuditLog, world: SimWorld) -> None:
        self._log = log
        self._world = world

    def append(self, episode_id: str, record: dict[str, Any]) -> None:
        if record.get("event") == "step":
            self._world.clock.charge(self._world.step_cost_s)
        self._log.append(episode_id, record)

    def read(self, episode_id: str) -> list[dict[str, Any]]:
        return list(self._log.read(episode_id))

    def episodes(self) -> list[str]:
        return list(self._log.episodes())

    def location(self, episode_id: str) -> str | None:
        found: str | None = self._log.location(episode_id)
        return found


WORKSPACES_REFUSAL = (
    "sim executes no code: an agent's own scripts run on local (isolated with bubblewrap); sim never "
    "fakes their execution"
)


def static_support() -> Support:
    """Everything but the workspaces is supported: each other capability and fault type has a simulated
    mechanism."""
    return Support(backend=BACKEND, unsupported={"workspaces": WORKSPACES_REFUSAL})


class SimBackend:
    """See the module docstring (:class:`~mlsandbox.backends.protocols.Backend`)."""

    def __init__(self, config: SimConfig) -> None:
        self.settings = config
        fitstore.configure(config.fit_store, config.fit_store_mib << 20)
        self._runtime: SimRuntime | None = None

    def __repr__(self) -> str:
        return f"SimBackend(name={self.settings.name!r})"

    @property
    def kind(self) -> str:
        return BACKEND

    @property
    def name(self) -> str:
        return self.settings.name

    def up(self, *, ephemeral: bool = False) -> None:
        if self._runtime is None:
            self._runtime = SimRuntime(self.settings)

    def down(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
        self._runtime = None

    def is_alive(self) -> bool:
        """Always: the world is made on first use."""
        return True

    def status(self) -> list[ServiceStatus]:
        rt = self._runtime
        address = addresses_for(self.settings.name) if rt is None else rt.world.address
        out = []
        for service in SERVICES:
            state = "running" if rt is None else rt.world.services[service].state
            shown = {"running": "running", "killed": "stopped", "frozen": "unhealthy"}[state]
            uptime = (
                None if rt is None else rt.world.clock.monotonic() - rt.world.services[service].started_at
            )
            out.append(
                ServiceStatus(
                    name=service,
                    state=shown,  # type: ignore[arg-type]
                    url=address.urls.get(service),
                    port=address.ports.get(service),
                    uptime_s=None if uptime is None else round(uptime, 3),
                )
            )
        return out

    def runtime(self) -> SimRuntime:
        if self._runtime is None:
            self.up()
        if self._runtime is None:  # pragma: no cover - up() makes it
            raise NotRunningError(f"sim sandbox {self.name!r} has no world")
        return self._runtime

    def support(self) -> Support:
        return static_support()


def create(config: SimConfig) -> SimBackend:
    return SimBackend(config)


__all__ = ["BACKEND", "SimBackend", "SimConfig", "SimRuntime", "create", "static_support"]
