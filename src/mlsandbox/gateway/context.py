"""What an action pack may read and do during an episode: the :class:`EpisodeContext` protocol.

A pack's handlers, hooks (``on_start``, ``on_step``, ``on_close``) and suppliers (``fault_behaviours``,
``episode_services``, ``telemetry``) receive the episode's context and nothing else: the scenario, the
episode state, the declared :class:`~mlsandbox.backends.protocols.Runtime`, the seed, the compute pool,
the pack's own typed state, and a few named services (datasets, jobs, machines, environments, backend
calls as the agent's errors, the fault plan's hold on jobs). The gateway implements it
(:class:`mlsandbox.gateway.episode.Episode`); a pack imports this module only, never the dispatcher.

A handler is ``def handle_x(ctx: EpisodeContext, action: XAction) -> dict[str, Any]``: it returns the
observation's ``result`` (JSON-able) or raises :class:`mlsandbox.errors.ActionError`, which becomes an
error observation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import EnvironmentInfo, JobSpec, JobStatus, Runtime, ServiceHealth
    from mlsandbox.errors import ActionError
    from mlsandbox.scenario.compute import Machine
    from mlsandbox.scenario.models import Scenario
    from mlsandbox.world.compute import Pool
    from mlsandbox.world.episode import DatasetRecord, EpisodeState, JobRecord

_S = TypeVar("_S")
_T = TypeVar("_T")


class EpisodeService(Protocol):
    """A service a pack runs for an episode besides the sandbox's own (``episode_services``): probed,
    restarted and read the way the agent's operations actions do."""

    def health(self) -> ServiceHealth: ...

    def restart(self) -> ServiceHealth: ...

    def logs(self, tail: int) -> str: ...


class EpisodeContext(Protocol):
    """The episode as a pack sees it; see the module docstring."""

    @property
    def scenario(self) -> Scenario:
        """The episode's scenario."""
        ...

    @property
    def state(self) -> EpisodeState:
        """The episode state (ground truth included: a pack writes what the grader reads there)."""
        ...

    @property
    def runtime(self) -> Runtime:
        """The sandbox's declared Runtime (its protocols only; never a concrete backend)."""
        ...

    @property
    def seed(self) -> int:
        """The episode's seed (what every random choice of a pack derives from)."""
        ...

    @property
    def pool(self) -> Pool:
        """The episode's compute pool: every job of the episode is submitted, read and cancelled here."""
        ...

    def pack_state(self, kind: type[_S]) -> _S:
        """The episode's state of type ``kind`` (a pack's dataclass or model, made with ``kind()`` on first
        use): what a pack's handlers and hooks remember between steps, typed."""
        ...

    # ------------------------------------------------------------------------------ datasets, jobs

    def dataset(self, name: str) -> DatasetRecord:
        """The episode's dataset by name; ``not_found`` error for anything else."""
        ...

    def dataset_list(self) -> list[dict[str, Any]]:
        """The episode's datasets as the agent sees them (name, format, size)."""
        ...

    def read(self, rec: DatasetRecord) -> Any:
        """The dataset's table, read from the object store; ``unreadable_data`` when it cannot be parsed."""
        ...

    def job(self, job_id: str) -> JobRecord:
        """The episode's job ``job-N``; ``not_found`` error for anything else."""
        ...

    def update_job(self, job: JobRecord, status: JobStatus) -> None:
        """Record what the backend says of a job (state, CPU seconds, its run once it succeeded)."""
        ...

    def refresh_jobs(self) -> None:
        """Bring every unfinished job of the episode up to date (a failing read is tried again later)."""
        ...

    def machine(self, name: str) -> Machine:
        """The scenario's machine type ``name``; ``not_found`` (naming the machines) otherwise."""
        ...

    def environment(self, name: str | None) -> EnvironmentInfo | None:
        """The episode's named environment (None for ``default`` or None: the sandbox's own);
        ``not_found`` for a name the episode has not created."""
        ...

    def place_job(self, spec: JobSpec, *, machine: str | None, environment: str | None) -> JobSpec:
        """``spec`` on ``machine`` (its limits; an idle reservation of that type when the episode holds
        one) and in ``environment``; ``not_found`` for an unknown machine or environment."""
        ...

    def backend_call(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, its failures as the agent's errors: ``unsupported`` (a capability the backend
        refuses), ``not_found`` (a :class:`KeyError`), ``backend_error`` (anything else)."""
        ...

    def episode_services(self) -> dict[str, EpisodeService]:
        """The services the packs run for this episode besides the sandbox's (each pack's
        ``episode_services`` supplier, merged), e.g. the data-source servers in use."""
        ...

    # --------------------------------------------------------------------------------- the fault plan

    def start_refusal(self, what: str = "no new job can start") -> ActionError | None:
        """The error of starting new work now (no credits left, or the compute window spent), or None."""
        ...

    def adjust_job(self, spec: JobSpec, job_id: str) -> JobSpec:
        """A job about to start, as the episode's active faults change it (cut limits, a tighter
        deadline); ``spec`` itself when the scenario has no perturbation plan."""
        ...

    def job_resources_set(self, backend_id: str, *, cpus: float | None, memory_mb: int | None) -> None:
        """The agent set a running job's limits (None: unchanged): what a fault's recovery restores."""
        ...


Handler = Callable[[EpisodeContext, Any], dict[str, Any]]
"""An action's handler: the episode's context and the validated action model -> the observation's result."""
Hook = Callable[[EpisodeContext], None]
"""An episode hook of a pack (``on_start``, ``on_step``, ``on_close``)."""
Supplier = Callable[[EpisodeContext], dict[Any, Any]]
"""What a pack supplies to the episode (``fault_behaviours``, ``episode_services``, ``telemetry``)."""

__all__ = ["EpisodeContext", "EpisodeService", "Handler", "Hook", "Supplier"]
