"""The episode's context: what the gateway gives a pack (:class:`Episode`, an
:class:`~mlsandbox.gateway.context.EpisodeContext`).

It holds the episode's scenario, state, runtime, seed and compute pool, the packs' typed states, and the
services a handler asks for by name (datasets, jobs, machines, environments, backend calls as the agent's
errors, the fault plan's hold on jobs). The gateway (:mod:`mlsandbox.gateway.dispatcher`) owns one per
episode and runs the step loop around it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mlsandbox.backends.protocols import EnvironmentInfo, JobSpec, JobStatus, Runtime
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.gateway.context import EpisodeService
from mlsandbox.gateway.registry import PackRuntime
from mlsandbox.scenario.compute import Machine
from mlsandbox.scenario.models import Scenario
from mlsandbox.world import compute as P
from mlsandbox.world.episode import DatasetRecord, EpisodeState, JobRecord

if TYPE_CHECKING:
    from mlsandbox.faults.engine import PerturbationEngine

log = logging.getLogger(__name__)
_S = TypeVar("_S")
_T = TypeVar("_T")

TERMINAL_JOB_STATES = frozenset({"succeeded", "failed", "cancelled"})


class Episode:
    """One episode's context (see the module docstring); implements
    :class:`~mlsandbox.gateway.context.EpisodeContext`."""

    def __init__(
        self,
        runtime: Runtime,
        scenario: Scenario,
        *,
        seed: int,
        sandbox: str,
        packs: PackRuntime,
    ) -> None:
        self.runtime = runtime
        self.scenario = scenario
        self.seed = seed
        self.state = EpisodeState(
            episode_id=runtime.new_episode_id(seed),
            scenario=scenario,
            seed=seed,
            sandbox=sandbox,
            started_at=runtime.clock.time(),
        )
        self.pool = P.Pool(
            scenario.compute,
            runtime.jobs,
            clock=runtime.clock,
            charge=self._charge_idle,
            blocked=self._blocked,
        )
        """The episode's compute pool: every job goes through it."""
        self.faults: PerturbationEngine | None = None
        """The perturbation engine (None when the scenario has no plan, or before the episode starts)."""
        self._packs = packs
        self._pack_states: dict[type[Any], Any] = {}

    def pack_state(self, kind: type[_S]) -> _S:
        found = self._pack_states.get(kind)
        if found is None:
            found = self._pack_states[kind] = kind()
        return found

    # ------------------------------------------------------------------------------ datasets, jobs

    def dataset(self, name: str) -> DatasetRecord:
        rec = self.state.datasets.get(name)
        if rec is None:
            known = ", ".join(sorted(self.state.datasets)) or "none"
            raise ActionError("not_found", f"dataset {name!r} does not exist (datasets: {known})")
        return rec

    def dataset_list(self) -> list[dict[str, Any]]:
        return [
            {"name": r.key, "format": r.fmt, "size_bytes": r.size}
            for r in sorted(self.state.datasets.values(), key=lambda r: r.key)
        ]

    def read(self, rec: DatasetRecord) -> Any:
        data = self.backend_call(lambda: self.runtime.object_store.get_object(self.state.bucket, rec.key))
        return rec.frame(data)

    def job(self, job_id: str) -> JobRecord:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise ActionError("not_found", f"job {job_id!r} does not exist")
        return job

    def update_job(self, job: JobRecord, status: JobStatus) -> None:
        job.state = status.state
        job.cpu_seconds = float(status.cpu_seconds)
        if status.state == "succeeded":
            job.run_id = status.result.get("run_id")

    def refresh_jobs(self) -> None:
        pending = [job for job in self.state.jobs.values() if job.state not in TERMINAL_JOB_STATES]
        if not pending:
            return
        try:  # one pump of the pool for all of them
            statuses = self.pool.get_many([job.backend_id for job in pending])
        except Exception as e:  # the next refresh tries again
            log.debug("refresh of the episode's jobs failed: %s", e)
            return
        for job in pending:
            status = statuses[job.backend_id]
            try:
                if isinstance(status, Exception):
                    raise status
                self.update_job(job, status)
            except Exception as e:  # the next refresh tries again
                log.debug("refresh of %s failed: %s", job.job_id, e)

    def stop_running_jobs(self) -> None:
        """Cancel every unfinished job of the episode (it is over)."""
        for job in self.state.jobs.values():
            if job.state not in TERMINAL_JOB_STATES:
                try:
                    self.update_job(job, self.pool.cancel(job.backend_id))
                except Exception as e:
                    log.warning("cancel of %s failed: %s", job.job_id, e)

    def machine(self, name: str) -> Machine:
        try:
            return self.scenario.compute.machine(name)
        except KeyError:
            known = ", ".join(m.name for m in self.scenario.compute.machines)
            raise ActionError("not_found", f"machine {name!r} does not exist (machines: {known})") from None

    def environment(self, name: str | None) -> EnvironmentInfo | None:
        if name is None or name == "default":
            return None
        info = self.state.environments.get(name)
        if info is None:
            known = ", ".join(["default", *sorted(self.state.environments)])
            raise ActionError(
                "not_found",
                f"environment {name!r} does not exist (environments: {known}); create it with "
                "create_environment",
            )
        return info

    def place_job(self, spec: JobSpec, *, machine: str | None, environment: str | None) -> JobSpec:
        update: dict[str, Any] = {}
        labels = dict(spec.labels)
        if machine is not None:
            m = self.machine(machine)
            update.update(cpus=m.cpus, memory_mb=m.memory_mb)
            labels[P.MACHINE_LABEL] = m.name
            res = self.pool.idle_reservation(m.name)
            if res is not None:
                labels[P.RESERVATION_LABEL] = res.reservation_id
        info = self.environment(environment)
        if info is not None:
            update["environment"] = info.key
        update["labels"] = labels
        return spec.model_copy(update=update)

    def backend_call(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except ActionError:
            raise
        except Unsupported as e:
            raise unsupported_error(e) from None
        except KeyError as e:
            raise ActionError("not_found", f"not found: {e}") from None
        except Exception as e:
            raise ActionError("backend_error", f"{type(e).__name__}: {e}") from None

    def episode_services(self) -> dict[str, EpisodeService]:
        return self._packs.supplied("episode_services", self)

    # --------------------------------------------------------------------------------- the fault plan

    def adjust_job(self, spec: JobSpec, job_id: str) -> JobSpec:
        return spec if self.faults is None else self.faults.adjust_job(spec, job_id)

    def job_resources_set(self, backend_id: str, *, cpus: float | None, memory_mb: int | None) -> None:
        if self.faults is not None:
            self.faults.job_resources_set(backend_id, cpus=cpus, memory_mb=memory_mb)

    # ----------------------------------------------------------------------- the budget, the pool

    def budget(self) -> dict[str, Any]:
        """What every observation says of the episode's budget."""
        st = self.state
        out: dict[str, Any] = {
            "credits": st.scenario.budget.credits,
            "credits_used": round(st.credits_used, 4),
            "steps_left": max(0, st.scenario.max_steps - st.step),
        }
        if st.deadline_at is not None:
            out["seconds_left"] = round(max(0.0, st.deadline_at - self.runtime.clock.time()), 1)
        window = st.scenario.budget.window
        if window is not None:
            now = self.runtime.clock.time()
            used = st.window_used(now, window.seconds)
            out["window_credits_left"] = round(max(0.0, window.credits - used), 4)
            if used >= window.credits:
                frees = st.window_frees_at(now, window.seconds, window.credits)
                out["window_frees_in_s"] = round(max(0.0, frees - now), 1)
        return out

    def start_refusal(self, what: str = "no new job can start") -> ActionError | None:
        """The error of starting new work now (no credits left, or the compute window spent), or None."""
        if self.state.credits_left <= 0:
            return ActionError("budget_exhausted", f"no compute credits left: {what}")
        return self.window_refusal()

    def window_refusal(self) -> ActionError | None:
        """The error of a start while the rolling compute window is spent (None when work may start)."""
        window = self.state.scenario.budget.window
        if window is None:
            return None
        now = self.runtime.clock.time()
        used = self.state.window_used(now, window.seconds)
        if used < window.credits:
            return None
        after = self.state.window_frees_at(now, window.seconds, window.credits) - now
        return ActionError(
            "budget_exhausted",
            f"compute window spent: {used:.2f} of {window.credits:g} credits used in the last "
            f"{window.seconds:g} s; new work can start in about {after:.0f} s",
            details={
                "window_credits": window.credits,
                "window_s": window.seconds,
                "retry_after_s": round(after, 1),
            },
        )

    def _charge_idle(self, credits: float) -> None:
        """What idle reserved machines cost (the pool's charge)."""
        self.state.extra_credits += credits
        self.state.charges.idle_reserved_credits += credits

    def _blocked(self) -> str | None:
        """Why no new work may start (the pool's guard): the compute budget or its window is spent."""
        refused = self.start_refusal()
        return None if refused is None else refused.message


def unsupported_error(e: Unsupported) -> ActionError:
    """The agent's ``unsupported`` error for a capability the backend refuses (nothing was changed)."""
    return ActionError(
        "unsupported",
        str(e),
        details={"capability": e.capability, "backend": e.backend, "reason": e.reason},
    )


__all__ = ["TERMINAL_JOB_STATES", "Episode", "unsupported_error"]
