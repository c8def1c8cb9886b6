"""The perturbation engine: runs a scenario's plan against a live episode.

The gateway calls :meth:`PerturbationEngine.tick` at every step boundary, before the step's action is
carried out. A tick (1) notices faults whose symptom the agent made go away (a killed service restarted,
a job that succeeded after a limit was cut) — a ``manual`` fault then counts as mitigated and is over;
(2) recovers faults whose duration has run out (``auto``); (3) lets active faults act again (a crash loop
kills the service it finds up); (4) injects the entries whose trigger fires. :meth:`observe_action` records
the first action that addresses each fault (time to detect): the action packs declare which action types
address which fault kinds, and whoever makes the engine hands their declarations over (``addresses``). :meth:`recover_all` undoes everything (episode
end, close, reset); every ``inject``/``recover`` is idempotent and a failing one never breaks a step.

Triggers are deterministic by seed: the draw of a probability trigger at step ``s`` is a function of
``(seed, entry name, s)`` only, so the same seed gives the same schedule whatever the agent does. Time
triggers (``at_time``, seconds after ``state.started_at``) and second-based durations are also one-shot
tickers of the runtime's clock (``runtime.clock.after``), so they fire between steps (during a long
``wait``, while a job runs), not only at the next step boundary; on a virtual clock they fire inside the
clock's ``sleep``. Every entry point (tick, the tickers, observe_action, adjust_job, recover_all) holds the
engine's lock.

A plan that uses a fault the backend refuses (its ``support()`` and its fault control's
``unavailable()``: no Toxiproxy, no cgroups, no Chaos Mesh, no config store) is refused when the engine
is made (:class:`UnavailableFaultError`, naming each entry and the reason) unless ``strict=False``, which
records the entry as not injected instead. The same holds for a fault on a target whose mechanism lives
above this layer (``source:NAME``) when the engine was made without a ``supplied`` behaviour for it (the
gateway passes those of its packs).

Ground truth goes to ``state.ground_truth.faults`` (one :class:`FaultRecord` per injection); it is never
part of an observation.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from mlsandbox.backends.protocols import FaultControl, JobSpec, Runtime, Support, Ticker
from mlsandbox.errors import ConfigError, Unsupported
from mlsandbox.faultkinds import refusal
from mlsandbox.faults.behaviours import (
    Addresses,
    Behaviour,
    FaultContext,
    FaultUnavailable,
    Supplied,
    addressed_by,
    behaviour_for,
    supplied_missing,
)
from mlsandbox.scenario import perturbations as P
from mlsandbox.world.compute import Pool
from mlsandbox.world.episode import EpisodeState

log = logging.getLogger(__name__)


class UnavailableFaultError(ConfigError):
    """The plan uses faults that cannot be made real on this backend or machine."""


@dataclass
class FaultRecord:
    """Ground truth of one injection, for grading (time to detect, time to mitigate)."""

    name: str
    fault: str
    target: str
    params: dict[str, Any]
    injected_step: int
    injected_at: float
    recovery: str
    recovered_step: int | None = None
    recovered_at: float | None = None
    recovered_by: str | None = None
    """``expiry`` (its duration ran out), ``agent`` (a manual fault the agent mitigated), ``episode_end``."""
    detected_step: int | None = None
    time_to_detect_s: float | None = None
    mitigated_step: int | None = None
    time_to_mitigate_s: float | None = None
    affected_jobs: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the fault could not be injected (unavailable here, or the mechanism failed)."""

    @property
    def active(self) -> bool:
        return self.recovered_at is None and self.error is None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def draw(seed: int, name: str, step: int) -> float:
    """The uniform draw in [0, 1) of entry ``name`` at step ``step`` for episode seed ``seed``."""
    digest = hashlib.sha256(f"{seed}/{name}/{step}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).random()


def _condition_holds(condition: str, state: EpisodeState) -> bool:
    jobs = state.jobs.values()
    if condition == "job_submitted":
        return bool(state.jobs)
    if condition == "job_running":
        return any(j.state == "running" for j in jobs)
    if condition == "job_succeeded":
        return any(j.state == "succeeded" for j in jobs)
    if condition == "model_registered":
        return bool(state.registered)
    if condition == "model_served":  # the goal's model serves production traffic
        return state.serving.served_version is not None
    raise ValueError(f"unknown condition {condition!r}")


@dataclass
class _Slot:
    """The runtime state of one plan entry."""

    entry: P.Perturbation
    times: int = 0
    fired_once: bool = False
    active: Behaviour | None = None
    record: FaultRecord | None = None


class PerturbationEngine:
    """Injects and recovers the faults of a plan over one episode."""

    def __init__(
        self,
        plan: list[P.Perturbation],
        state: EpisodeState,
        runtime: Runtime,
        control: FaultControl | None = None,
        *,
        seed: int,
        strict: bool = True,
        timer: bool = True,
        supplied: Supplied | None = None,
        pool: Pool | None = None,
        addresses: Iterable[Addresses] = (),
    ) -> None:
        """``control``: the fault mechanisms to use (default: ``runtime.faults``). ``timer``: time
        triggers and second durations also act between steps (tickers of ``runtime.clock``); without it
        only at step boundaries. ``supplied``: behaviours of faults whose mechanism lives above this
        layer, keyed by (fault type, target kind) (see :data:`~mlsandbox.faults.behaviours.Supplied`).
        ``pool``: the episode's compute pool (what a ``pool_shrink`` fault acts on; None: it has none).
        ``addresses``: the action packs' declarations of the fault kinds their actions address (see
        :data:`~mlsandbox.faults.behaviours.Addresses`); without them no action addresses a fault."""
        self.state = state
        self.supplied: Supplied = dict(supplied or {})
        self.addressed = addressed_by(addresses)
        """Fault kind -> the action types addressing it."""
        self.seed = seed
        self.clock = runtime.clock
        self.control = runtime.faults if control is None else control
        self.ctx = FaultContext(state=state, runtime=runtime, control=self.control, pool=pool)
        self.slots = [_Slot(entry) for entry in plan]
        self.records: list[FaultRecord] = []
        self._lock = threading.RLock()
        self._stopped = False
        self._timer = timer
        self._tickers: list[Ticker] = []
        self.support = self._support(runtime)
        """What the backend refuses (its runtime's support and the control's unavailable faults)."""
        self._unavailable: dict[str, str] = {}
        """Entry name -> why its fault cannot be made real here."""
        for entry in plan:
            why = refusal(entry.fault.type, entry.target_kind, self.support)
            if why is not None:
                self._unavailable[entry.name] = why
        if strict:
            bad = [
                f"perturbation {e.name!r} uses fault {e.fault.type!r}: {self._unavailable[e.name]}"
                for e in plan
                if e.name in self._unavailable
            ]
            bad += [
                f"perturbation {e.name!r} uses fault {e.fault.type!r} on {e.target}: its mechanism is "
                "supplied by the gateway's packs, and this engine was made without it"
                for e in plan
                if supplied_missing(e, self.supplied)
            ]
            if bad:
                raise UnavailableFaultError(
                    f"faults unavailable on the {self.support.backend} backend: " + "; ".join(bad)
                )
        if timer:
            now = self.clock.time()
            for slot in self.slots:
                w = slot.entry.when
                if isinstance(w, P.AtTime):
                    self._schedule(state.started_at + w.at_time - now, slot, None, "at")

    def _support(self, runtime: Runtime) -> Support:
        refused = {f"fault:{k}": v for k, v in self.control.unavailable().items()}
        try:
            base = runtime.support()
        except Exception as e:  # a runtime that cannot say: only the control's refusals count
            log.warning("the runtime cannot say what it supports: %s", e)
            return Support(backend="unknown", unsupported=refused)
        return Support(backend=base.backend, unsupported={**base.unsupported, **refused})

    # ------------------------------------------------------------------------------------------ timer

    def _schedule(self, delay_s: float, slot: _Slot, record: FaultRecord | None, what: str) -> None:
        """A one-shot ticker of the clock: ``at`` injects ``slot`` (its at_time came), ``expiry`` recovers
        ``record`` (its seconds ran out). Call with the lock held (or before any ticker runs)."""
        if self._stopped or not self._timer:
            return

        def fire() -> None:
            self._fire(slot, record, what)

        name = f"fault:{self.state.episode_id}:{slot.entry.name}:{what}"
        self._tickers.append(self.clock.after(max(0.0, delay_s), fire, name=name))

    def _fire(self, slot: _Slot, record: FaultRecord | None, what: str) -> None:
        with self._lock:
            if self._stopped:
                return
            now = self.clock.time()
            if what == "at":
                w = slot.entry.when
                if slot.active is not None or slot.fired_once or not isinstance(w, P.AtTime):
                    return
                due = self.state.started_at + w.at_time
                if now < due:  # the ticker woke a little early (another clock's rounding): wait on
                    self._schedule(due - now, slot, None, what)
                    return
                self._inject(slot, now)
                return
            if record is None or slot.record is not record or slot.active is None:
                return  # recovered meanwhile (a step boundary, the agent), or injected again since
            d = slot.entry.duration
            if d is None or d.seconds is None:
                return
            due = record.injected_at + d.seconds
            if now < due:
                self._schedule(due - now, slot, record, what)
                return
            self._recover(slot, "expiry")

    def stop_timer(self) -> None:
        """Cancel the tickers (idempotent); no fault fires between steps any more."""
        with self._lock:
            self._stopped = True
            tickers, self._tickers = self._tickers, []
        for ticker in tickers:  # outside the lock: a ticker waiting for it then sees _stopped and returns
            ticker.cancel()

    # ------------------------------------------------------------------------------------------ ticks

    def tick(self) -> None:
        """One step boundary (call before the action of ``state.step`` is carried out)."""
        with self._lock:
            self._tick()

    def _tick(self) -> None:
        now = self.clock.time()
        for slot in self.slots:
            if slot.active is not None:
                self._check_mitigated(slot, now)
        for slot in self.slots:
            if slot.active is not None and self._expired(slot, now):
                self._recover(slot, "expiry")
        for slot in self.slots:
            if slot.active is not None:
                try:
                    slot.active.on_tick(self.ctx)
                except Exception as e:
                    log.warning("fault %s: tick failed: %s", slot.entry.name, e)
                if slot.record is not None:
                    slot.record.affected_jobs = list(slot.active.affected_jobs)
        for slot in self.slots:
            if slot.active is None and self._due(slot, now):
                self._inject(slot, now)

    def observe_action(self, action: dict[str, Any]) -> None:
        """Record the first action that addresses each injected fault (time to detect)."""
        with self._lock:
            self._observe_action(action)

    def _observe_action(self, action: dict[str, Any]) -> None:
        now = self.clock.time()
        for slot in self.slots:
            rec, beh = slot.record, slot.active
            if rec is None or rec.error is not None or rec.detected_step is not None or beh is None:
                continue
            try:
                hit = beh.addresses(action)
            except Exception:
                hit = False
            if hit:
                rec.detected_step = self.state.step
                rec.time_to_detect_s = round(now - rec.injected_at, 3)

    def adjust_job(self, spec: JobSpec, job_id: str) -> JobSpec:
        """A job about to start: every active fault may change it (cut limits, a tighter deadline)."""
        with self._lock:
            return self._adjust_job(spec, job_id)

    def job_resources_set(self, backend_id: str, *, cpus: float | None, memory_mb: int | None) -> None:
        """The agent set a running job's limits (None: unchanged): what a fault's recovery restores them
        to. A job the engine never saw start (none of its faults cut it) is not recorded."""
        with self._lock:
            known = self.ctx.job_resources.get(backend_id)
            if known is not None:
                self.ctx.job_resources[backend_id] = (
                    known[0] if cpus is None else cpus,
                    known[1] if memory_mb is None else memory_mb,
                )

    def _adjust_job(self, spec: JobSpec, job_id: str) -> JobSpec:
        self.ctx.job_resources[spec.job_id] = (spec.cpus, spec.memory_mb)
        for slot in self.slots:
            if slot.active is None:
                continue
            changed = slot.active.adjust_job(spec)
            if changed != spec:
                slot.active.affected_jobs.append(job_id)
                if slot.record is not None:
                    slot.record.affected_jobs = list(slot.active.affected_jobs)
                spec = changed
        return spec

    def recover_all(self, reason: str = "episode_end") -> None:
        """Stop the tickers, then undo every active fault, newest first. Idempotent."""
        self.stop_timer()
        with self._lock:
            for slot in reversed(self.slots):
                if slot.active is not None:
                    self._recover(slot, reason)

    @property
    def active_faults(self) -> list[FaultRecord]:
        with self._lock:
            return [s.record for s in self.slots if s.active is not None and s.record is not None]

    # -------------------------------------------------------------------------------------- internals

    def _due(self, slot: _Slot, now: float) -> bool:
        w, step = slot.entry.when, self.state.step
        if isinstance(w, P.AtStep):
            return not slot.fired_once and step >= w.at_step
        if isinstance(w, P.AtTime):
            return not slot.fired_once and now - self.state.started_at >= w.at_time
        if isinstance(w, P.OnCondition):
            return not slot.fired_once and _condition_holds(w.condition, self.state)
        if isinstance(w, P.Every):
            if w.max_times is not None and slot.times >= w.max_times:
                return False
            return step >= w.start and (step - w.start) % w.every == 0
        if isinstance(w, P.WithProbability):
            if w.max_times is not None and slot.times >= w.max_times:
                return False
            return step >= w.start and draw(self.seed, slot.entry.name, step) < w.probability
        raise TypeError(f"unknown trigger {w!r}")

    def _expired(self, slot: _Slot, now: float) -> bool:
        rec, d = slot.record, slot.entry.duration
        if rec is None or d is None or slot.entry.recovery == "manual":
            return False
        if d.steps is not None:
            return self.state.step >= rec.injected_step + d.steps
        return d.seconds is not None and now >= rec.injected_at + d.seconds

    def _inject(self, slot: _Slot, now: float) -> None:
        entry = slot.entry
        slot.fired_once = True
        slot.times += 1
        rec = FaultRecord(
            name=entry.name,
            fault=entry.fault.type,
            target=entry.target or "",
            params=entry.fault.model_dump(exclude={"type"}),
            injected_step=self.state.step,
            injected_at=now,
            recovery=entry.recovery,
        )
        self.records.append(rec)
        self.state.ground_truth.faults.append(rec)
        slot.record = rec
        beh = behaviour_for(entry, self.supplied, self.addressed)
        beh.injected_step = self.state.step
        if entry.name in self._unavailable:
            rec.error = f"unavailable: {self._unavailable[entry.name]}"
            log.warning("fault %s (%s) not injected: %s", entry.name, entry.fault.type, rec.error)
            return
        try:
            beh.inject(self.ctx)
        except FaultUnavailable as e:
            rec.error = f"unavailable: {e}"
        except Unsupported as e:
            rec.error = f"unavailable: {e.reason}"
        except Exception as e:
            rec.error = f"injection failed: {type(e).__name__}: {e}"
            log.warning("fault %s: injection failed: %s", entry.name, e)
            try:  # leave nothing half-done
                beh.recover(self.ctx)
            except Exception as e2:
                log.warning("fault %s: undoing a failed injection failed: %s", entry.name, e2)
        rec.affected_jobs = list(beh.affected_jobs)
        if rec.error is not None:
            return
        slot.active = beh
        if entry.fault.instant:
            self._finish(slot, "expiry", now)
            return
        d = entry.duration
        if d is not None and d.seconds is not None and entry.recovery == "auto":
            self._schedule(d.seconds, slot, rec, "expiry")

    def _recover(self, slot: _Slot, reason: str) -> None:
        beh = slot.active
        if beh is None:
            return
        try:
            beh.recover(self.ctx)
        except Exception as e:
            log.warning("fault %s: recovery failed: %s", slot.entry.name, e)
            if slot.record is not None and slot.record.error is None:
                slot.record.error = f"recovery failed: {type(e).__name__}: {e}"
        self._finish(slot, reason, self.clock.time())

    def _finish(self, slot: _Slot, reason: str, now: float) -> None:
        rec = slot.record
        slot.active = None
        if rec is None:
            return
        rec.recovered_step, rec.recovered_at, rec.recovered_by = self.state.step, now, reason
        if rec.mitigated_step is None and reason in ("agent", "expiry"):
            rec.mitigated_step = self.state.step
            rec.time_to_mitigate_s = round(now - rec.injected_at, 3)

    def _check_mitigated(self, slot: _Slot, now: float) -> None:
        beh, rec = slot.active, slot.record
        if beh is None or rec is None or rec.injected_step >= self.state.step:
            return
        if rec.mitigated_step is None:
            try:
                gone = beh.symptom_gone(self.ctx)
            except Exception:
                gone = False
            if not gone:
                return
            rec.mitigated_step = self.state.step
            rec.time_to_mitigate_s = round(now - rec.injected_at, 3)
        # (a pack may mark the record mitigated itself, when an action worked around the symptom)
        if slot.entry.recovery == "manual":
            self._recover(slot, "agent")


def preview_schedule(plan: list[P.Perturbation], seed: int, max_steps: int) -> list[tuple[int, str]]:
    """The (step, entry name) injections of the step-driven triggers (at_step, every, probability),
    assuming each fault lasts its ``steps`` duration (one step when it has none). Time and condition
    triggers depend on the run and are left out."""
    out: list[tuple[int, str]] = []
    for entry in plan:
        w = entry.when
        busy_until, times, fired = 0, 0, False
        length = entry.duration.steps if entry.duration and entry.duration.steps else 1
        for step in range(1, max_steps + 1):
            if step < busy_until:
                continue
            if isinstance(w, P.AtStep):
                due = not fired and step >= w.at_step
            elif isinstance(w, P.Every):
                due = (
                    (w.max_times is None or times < w.max_times)
                    and step >= w.start
                    and (step - w.start) % w.every == 0
                )
            elif isinstance(w, P.WithProbability):
                due = (
                    (w.max_times is None or times < w.max_times)
                    and step >= w.start
                    and draw(seed, entry.name, step) < w.probability
                )
            else:
                break
            if due:
                fired, times, busy_until = True, times + 1, step + length
                out.append((step, entry.name))
    return sorted(out)
