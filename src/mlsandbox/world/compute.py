"""A compute pool with capacity in front of a backend's :class:`~mlsandbox.backends.protocols.Jobs`.

:class:`Pool` implements the ``Jobs`` protocol itself: a job whose CPU and memory request fits in what is
free starts at once on the backend (where its limits are enforced by the kernel: cgroups on the local
backend); one that does not fit waits in a FIFO queue (state ``queued``) and starts as soon as capacity
frees — the pool is pumped on every ``get``/``list``/``pump``, so a gateway's ``wait`` or step boundary
starts it. A job submitted with the label :data:`RESERVATION_LABEL` runs on that reservation (a machine
held for the episode) instead of taking new capacity.

The gateway owns one pool per episode, a core service of the world: every job the episode starts goes
through it, whatever pack asks for it; the episode's fault engine is handed the same pool (the
``pool_shrink`` fault acts on it). Nothing finds a pool by the episode's id: whoever needs it is given it.

Reservations (``reserve``/``release``) hold a whole machine's CPU and memory. A reservation with no job
on it is idle and costs its machine's ``credits_per_second`` (seconds on the runtime's clock), charged
through the ``charge`` callback.
When ``blocked()`` says new work may not start (budget exhausted), queued jobs are cancelled and
reservations released. :meth:`Pool.shrink` takes capacity away (a fault: jobs queue) until
:meth:`Pool.restore`.
"""

from __future__ import annotations

import builtins
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlsandbox.backends.protocols import Clock, Jobs, JobSpec, JobStatus
from mlsandbox.scenario.compute import ComputePool, Machine

MACHINE_LABEL = "mlsandbox.machine"
RESERVATION_LABEL = "mlsandbox.reservation"
_TERMINAL = ("succeeded", "failed", "cancelled")


class InsufficientResources(Exception):
    """A reservation does not fit in the pool's free capacity."""


@dataclass
class Reservation:
    reservation_id: str
    machine: Machine
    created_at: float
    job_id: str | None = None
    """The backend job running on it (None: idle)."""
    idle_s: float = 0.0
    credits: float = 0.0
    _accrued_to: float = 0.0

    def as_dict(self, now: float) -> dict[str, Any]:
        """The reservation as the agent sees it, at time ``now`` (the pool's clock)."""
        return {
            "reservation_id": self.reservation_id,
            "machine": self.machine.name,
            "cpus": self.machine.cpus,
            "memory_mb": self.machine.memory_mb,
            "state": "busy" if self.job_id else "idle",
            "job": self.job_id,
            "held_s": round(now - self.created_at, 1),
            "idle_s": round(self.idle_s, 1),
            "idle_credits": round(self.credits, 4),
        }


@dataclass
class _Queued:
    spec: JobSpec
    queued_at: float
    position_note: str = ""


@dataclass
class _Running:
    cpus: float
    memory_mb: int
    reservation: str | None


@dataclass
class Pool:
    """See the module docstring. ``charge(credits)`` is called for idle reservations; ``blocked()``
    returns why no new work may start (None: it may); ``clock`` is the runtime's."""

    config: ComputePool
    inner: Jobs
    clock: Clock = field(kw_only=True)
    charge: Callable[[float], None] = lambda _c: None
    blocked: Callable[[], str | None] = lambda: None
    shrink_cpus: float = 0.0
    shrink_memory_mb: int = 0
    queue: list[_Queued] = field(default_factory=list)
    running: dict[str, _Running] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    finished: dict[str, JobStatus] = field(default_factory=dict)
    """Jobs that ended without ever reaching the backend (cancelled in the queue, refused at start)."""
    notes: dict[str, str] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _polled: dict[str, JobStatus] = field(default_factory=dict)
    """The running jobs' statuses the last :meth:`pump` read (``get`` hands its job's on)."""

    # ------------------------------------------------------------------------------------ capacity

    @property
    def limited(self) -> bool:
        return self.config.capacity_cpus is not None or self.config.capacity_memory_mb is not None

    def used(self) -> tuple[float, int]:
        cpus = sum(r.cpus for r in self.running.values() if r.reservation is None)
        mem = sum(r.memory_mb for r in self.running.values() if r.reservation is None)
        cpus += sum(r.machine.cpus for r in self.reservations.values())
        mem += sum(r.machine.memory_mb for r in self.reservations.values())
        return cpus, mem

    def free(self) -> tuple[float | None, int | None]:
        """Free CPU and memory (None: that dimension has no limit)."""
        cpus, mem = self.used()
        cap_c, cap_m = self.config.capacity_cpus, self.config.capacity_memory_mb
        free_c = None if cap_c is None else round(cap_c - self.shrink_cpus - cpus, 6)
        free_m = None if cap_m is None else cap_m - self.shrink_memory_mb - mem
        return free_c, free_m

    def fits(self, cpus: float, memory_mb: int) -> bool:
        free_c, free_m = self.free()
        return (free_c is None or cpus <= free_c + 1e-9) and (free_m is None or memory_mb <= free_m)

    def why_not(self, cpus: float, memory_mb: int) -> str:
        free_c, free_m = self.free()
        cap = self.config
        parts = []
        if free_c is not None and cpus > free_c + 1e-9:
            parts.append(f"{cpus:g} CPU requested, {max(0.0, free_c):g} of {cap.capacity_cpus:g} free")
        if free_m is not None and memory_mb > free_m:
            parts.append(f"{memory_mb} MiB requested, {max(0, free_m)} of {cap.capacity_memory_mb} MiB free")
        return "insufficient resources in the pool: " + "; ".join(parts)

    def capacity(self) -> dict[str, Any]:
        used_c, used_m = self.used()
        free_c, free_m = self.free()
        return {
            "capacity_cpus": self.config.capacity_cpus,
            "capacity_memory_mb": self.config.capacity_memory_mb,
            "used_cpus": round(used_c, 3),
            "used_memory_mb": used_m,
            "free_cpus": None if free_c is None else max(0.0, free_c),
            "free_memory_mb": None if free_m is None else max(0, free_m),
            "unavailable_cpus": self.shrink_cpus,
            "unavailable_memory_mb": self.shrink_memory_mb,
        }

    # ------------------------------------------------------------------------------- reservations

    def reserve(self, machine: Machine) -> Reservation:
        with self.lock:
            self.pump()
            reason = self.blocked()
            if reason:
                raise InsufficientResources(reason)
            if len(self.reservations) >= self.config.max_reservations:
                raise InsufficientResources(
                    f"at most {self.config.max_reservations} reservations may be held at once"
                )
            if self.queue:
                raise InsufficientResources(
                    f"{len(self.queue)} job(s) wait in the queue: capacity goes to them first"
                )
            if not self.fits(machine.cpus, machine.memory_mb):
                raise InsufficientResources(self.why_not(machine.cpus, machine.memory_mb))
            now = self.clock.time()
            res = Reservation(f"res-{next(self._ids)}", machine, now, _accrued_to=now)
            self.reservations[res.reservation_id] = res
            return res

    def release(self, reservation_id: str) -> Reservation:
        """Give a reservation back (KeyError when unknown; ValueError while a job runs on it)."""
        with self.lock:
            self.pump()
            res = self.reservations[reservation_id]
            if res.job_id is not None:
                raise ValueError(f"{reservation_id} runs a job ({res.job_id}): cancel it or let it finish")
            self._accrue(self.clock.time())
            del self.reservations[reservation_id]
            self.pump()
            return res

    def view(self, res: Reservation) -> dict[str, Any]:
        """A reservation as the agent sees it, now."""
        return res.as_dict(self.clock.time())

    def idle_reservation(self, machine: str) -> Reservation | None:
        with self.lock:
            self.pump()
            return next(
                (r for r in self.reservations.values() if r.machine.name == machine and r.job_id is None),
                None,
            )

    def _accrue(self, now: float) -> None:
        total = 0.0
        for res in self.reservations.values():
            dt = max(0.0, now - res._accrued_to)
            res._accrued_to = now
            if res.job_id is None and dt > 0:
                cost = dt * res.machine.credits_per_second
                res.idle_s += dt
                res.credits += cost
                total += cost
        if total > 0:
            self.charge(total)

    # --------------------------------------------------------------------------------- scheduling

    def pump(self) -> None:
        """Account idle reservations, notice finished jobs, start queued jobs that fit (in order)."""
        with self.lock:
            now = self.clock.time()
            self._accrue(now)
            self._polled = {}
            for job_id in list(self.running):
                try:
                    status = self.inner.get(job_id)
                except KeyError:
                    state = "cancelled"
                else:
                    self._polled[job_id] = status
                    state = status.state
                if state in _TERMINAL:
                    self._forget_running(job_id)
            reason = self.blocked()
            if reason:
                for q in self.queue:
                    self.finished[q.spec.job_id] = JobStatus(job_id=q.spec.job_id, state="cancelled")
                    q.position_note = f"not started: {reason}"
                    self.notes[q.spec.job_id] = q.position_note
                self.queue.clear()
                for rid in [r for r, res in self.reservations.items() if res.job_id is None]:
                    del self.reservations[rid]
                return
            waiting = list(self.queue)
            self.queue.clear()
            for q in waiting:
                if self.fits(q.spec.cpus, q.spec.memory_mb):
                    self._start(q.spec, None)
                else:
                    q.position_note = self.why_not(q.spec.cpus, q.spec.memory_mb)
                    self.queue.append(q)

    def _forget_running(self, job_id: str) -> None:
        run = self.running.pop(job_id, None)
        if run is not None and run.reservation is not None:
            res = self.reservations.get(run.reservation)
            if res is not None and res.job_id == job_id:
                res.job_id = None

    def _start(self, spec: JobSpec, reservation: Reservation | None) -> JobStatus:
        if reservation is not None:
            reservation.job_id = spec.job_id
        self.running[spec.job_id] = _Running(
            spec.cpus, spec.memory_mb, reservation.reservation_id if reservation else None
        )
        try:
            return self.inner.submit(spec)
        except Exception as e:
            self._forget_running(spec.job_id)
            self.finished[spec.job_id] = JobStatus(job_id=spec.job_id, state="failed", exit_code=None)
            self.notes[spec.job_id] = f"could not start: {type(e).__name__}: {e}"
            raise

    # ------------------------------------------------------------------------------ Jobs protocol

    def submit(self, spec: JobSpec) -> JobStatus:
        with self.lock:
            self.pump()
            rid = spec.labels.get(RESERVATION_LABEL)
            if rid is not None:
                res = self.reservations.get(rid)
                if res is None:
                    raise KeyError(f"reservation {rid!r} does not exist")
                if res.job_id is not None:
                    raise ValueError(f"reservation {rid} already runs {res.job_id}")
                self._accrue(self.clock.time())
                return self._start(spec, res)
            if not self.queue and self.fits(spec.cpus, spec.memory_mb):
                return self._start(spec, None)
            note = (
                self.why_not(spec.cpus, spec.memory_mb)
                if not self.fits(spec.cpus, spec.memory_mb)
                else ("waiting behind earlier jobs in the queue")
            )
            self.queue.append(_Queued(spec, self.clock.time(), note))
            return JobStatus(job_id=spec.job_id, state="queued")

    def get(self, job_id: str) -> JobStatus:
        status = self.get_many([job_id])[job_id]
        if isinstance(status, Exception):
            raise status
        return status

    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobStatus | Exception]:
        """The statuses of several jobs after one :meth:`pump` (each running job polled once, not once
        per job asked about); a job whose status cannot be read maps to the exception it raised."""
        out: dict[str, JobStatus | Exception] = {}
        with self.lock:
            self.pump()
            polled, self._polled = self._polled, {}
            queued = {q.spec.job_id for q in self.queue}
            for job_id in job_ids:
                if job_id in self.finished:
                    out[job_id] = self.finished[job_id]
                elif job_id in queued:
                    out[job_id] = JobStatus(job_id=job_id, state="queued")
                elif job_id in polled:
                    out[job_id] = polled[job_id]
        for job_id in job_ids:
            if job_id not in out:
                try:
                    out[job_id] = self.inner.get(job_id)
                except Exception as e:  # the caller decides (a refresh tries again later)
                    out[job_id] = e
        return out

    def logs(self, job_id: str, tail: int = 50) -> str:
        with self.lock:
            q = next((q for q in self.queue if q.spec.job_id == job_id), None)
            if q is not None:
                return f"[mlsandbox] queued for {self.clock.time() - q.queued_at:.0f} s: {q.position_note}\n"
            if job_id in self.finished:
                return f"[mlsandbox] {self.notes.get(job_id, 'never started')}\n"
        return self.inner.logs(job_id, tail)

    def cancel(self, job_id: str) -> JobStatus:
        with self.lock:
            for q in self.queue:
                if q.spec.job_id == job_id:
                    self.queue.remove(q)
                    self.notes[job_id] = "cancelled while queued"
                    status = JobStatus(job_id=job_id, state="cancelled")
                    self.finished[job_id] = status
                    return status
            if job_id in self.finished:
                return self.finished[job_id]
        status = self.inner.cancel(job_id)
        with self.lock:
            self.pump()
        return status

    def list(self, label: tuple[str, str] | None = None) -> list[JobStatus]:
        self.pump()
        with self.lock:
            extra = [
                JobStatus(job_id=q.spec.job_id, state="queued")
                for q in self.queue
                if label is None or q.spec.labels.get(label[0]) == label[1]
            ]
        return [*self.inner.list(label), *extra]

    def cleanup(self, label: tuple[str, str]) -> None:
        with self.lock:
            self.queue = [q for q in self.queue if q.spec.labels.get(label[0]) != label[1]]
        self.inner.cleanup(label)
        with self.lock:
            for job_id in list(self.running):
                self._forget_running(job_id)
            self._accrue(self.clock.time())

    def set_resources(
        self, job_id: str, cpus: float | None = None, memory_mb: int | None = None
    ) -> JobStatus:
        with self.lock:
            for q in self.queue:
                if q.spec.job_id == job_id:
                    update = {k: v for k, v in (("cpus", cpus), ("memory_mb", memory_mb)) if v is not None}
                    q.spec = q.spec.model_copy(update=update)
                    self.pump()
                    return self.get(job_id)
        status = self.inner.set_resources(job_id, cpus=cpus, memory_mb=memory_mb)
        with self.lock:
            run = self.running.get(job_id)
            if run is not None and run.reservation is None:
                run.cpus = cpus if cpus is not None else run.cpus
                run.memory_mb = memory_mb if memory_mb is not None else run.memory_mb
        return status

    def queue_view(self) -> builtins.list[dict[str, Any]]:
        with self.lock:
            self.pump()
            now = self.clock.time()
            return [
                {
                    "job": q.spec.job_id,
                    "position": i + 1,
                    "machine": q.spec.labels.get(MACHINE_LABEL),
                    "cpus": q.spec.cpus,
                    "memory_mb": q.spec.memory_mb,
                    "waiting_s": round(now - q.queued_at, 1),
                    "reason": q.position_note,
                }
                for i, q in enumerate(self.queue)
            ]

    def shrink(self, cpus: float = 0.0, memory_mb: int = 0) -> None:
        """Fault mechanism: hold ``cpus`` and ``memory_mb`` out of the pool (replacing what was held before;
        running work goes on, new jobs queue, reservations are refused)."""
        with self.lock:
            self.shrink_cpus, self.shrink_memory_mb = max(0.0, cpus), max(0, memory_mb)

    def restore(self) -> None:
        """Give back what :meth:`shrink` held out; queued jobs that now fit start."""
        with self.lock:
            self.shrink_cpus, self.shrink_memory_mb = 0.0, 0
            self.pump()

    def close(self) -> None:
        """Final accounting; drop the queue and the reservations."""
        with self.lock:
            self._accrue(self.clock.time())
            self.queue.clear()
            self.reservations.clear()
