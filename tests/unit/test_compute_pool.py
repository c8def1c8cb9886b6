"""The compute pool's scheduling rules over a fake backend (the real one is in the integration tests)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlsandbox.backends.protocols import JobSpec, JobStatus
from mlsandbox.scenario.compute import ComputePool, Machine
from mlsandbox.world import compute as P


class FakeJobs:
    """Jobs that run until told to finish."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.submitted: list[JobSpec] = []

    def submit(self, spec: JobSpec) -> JobStatus:
        self.submitted.append(spec)
        self.states[spec.job_id] = "running"
        return JobStatus(job_id=spec.job_id, state="running")

    def get(self, job_id: str) -> JobStatus:
        return JobStatus(job_id=job_id, state=self.states[job_id])  # type: ignore[arg-type]

    def cancel(self, job_id: str) -> JobStatus:
        self.states[job_id] = "cancelled"
        return self.get(job_id)

    def logs(self, job_id: str, tail: int = 50) -> str:
        return "real log\n"

    def list(self, label=None):
        return [self.get(j) for j in self.states]

    def cleanup(self, label) -> None:
        self.states.clear()

    def set_resources(self, job_id, cpus=None, memory_mb=None):
        return self.get(job_id)


class ManualClock:
    """Time that moves only when the test says so (the pool's charges are exact)."""

    virtual = True

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def every(self, interval_s: float, fn: Callable[[], None], *, name: str) -> object:
        raise AssertionError("the pool schedules nothing")

    def after(self, delay_s: float, fn: Callable[[], None], *, name: str) -> object:
        raise AssertionError("the pool schedules nothing")


SMALL = Machine(name="cpu-small", cpus=1, memory_mb=2048, credits_per_second=1.0)
LARGE = Machine(name="cpu-large", cpus=2, memory_mb=4096, credits_per_second=2.0)


def _spec(n: int, cpus: float = 1, mem: int = 1024) -> JobSpec:
    return JobSpec(job_id=f"j{n}", workload="burn", args=[], cpus=cpus, memory_mb=mem)


CLOCK = ManualClock()


def _pool(**kw) -> tuple[P.Pool, FakeJobs, list[float]]:
    charged: list[float] = []
    inner = FakeJobs()
    cfg = ComputePool(machines=[SMALL, LARGE], capacity_cpus=2, capacity_memory_mb=4096)
    return P.Pool(cfg, inner, clock=CLOCK, charge=charged.append, **kw), inner, charged


def test_a_job_that_does_not_fit_waits_and_starts_when_capacity_frees() -> None:
    pool, inner, _ = _pool()
    assert pool.submit(_spec(1, cpus=2)).state == "running"
    assert pool.submit(_spec(2, cpus=1)).state == "queued"
    assert pool.get("j2").state == "queued"
    (row,) = pool.queue_view()
    assert row["job"] == "j2" and "1 CPU requested, 0 of 2 free" in row["reason"]
    assert "queued" in pool.logs("j2")
    inner.states["j1"] = "succeeded"
    assert pool.get("j2").state == "running"
    assert [s.job_id for s in inner.submitted] == ["j1", "j2"]
    assert pool.queue_view() == []


def test_queue_is_fifo_and_a_cancelled_queued_job_never_starts() -> None:
    pool, inner, _ = _pool()
    pool.submit(_spec(1, cpus=2))
    pool.submit(_spec(2, cpus=1))
    pool.submit(_spec(3, cpus=1))
    assert pool.cancel("j2").state == "cancelled"
    inner.states["j1"] = "failed"
    pool.pump()
    assert [s.job_id for s in inner.submitted] == ["j1", "j3"]
    assert pool.get("j2").state == "cancelled"


def test_reservation_holds_capacity_costs_when_idle_and_runs_its_machine_jobs() -> None:
    pool, inner, charged = _pool()
    res = pool.reserve(SMALL)
    with pytest.raises(P.InsufficientResources, match="insufficient resources"):
        pool.reserve(LARGE)  # 2 CPU do not fit next to a held cpu-small
    CLOCK.sleep(20)
    pool.pump()
    assert sum(charged) == pytest.approx(20 * SMALL.credits_per_second)
    assert pool.view(res)["held_s"] == 20 and pool.view(res)["idle_s"] == 20
    spent = sum(charged)
    spec = _spec(1).model_copy(update={"labels": {P.RESERVATION_LABEL: res.reservation_id}})
    assert pool.submit(spec).state == "running"
    CLOCK.sleep(10)
    pool.pump()
    assert sum(charged) == pytest.approx(spent)  # busy: no idle charge
    with pytest.raises(ValueError, match="runs a job"):
        pool.release(res.reservation_id)
    inner.states["j1"] = "succeeded"
    pool.release(res.reservation_id)
    assert pool.free() == (2, 4096)


def test_blocked_pool_cancels_queued_work_and_drops_reservations() -> None:
    reason: list[str] = []
    pool, _inner, _ = _pool(blocked=lambda: reason[0] if reason else None)
    pool.reserve(SMALL)
    pool.submit(_spec(1, cpus=1))
    pool.submit(_spec(2, cpus=1))
    reason.append("compute budget exhausted")
    assert pool.get("j2").state == "cancelled"
    assert "budget exhausted" in pool.logs("j2")
    assert pool.reservations == {}


def test_shrink_pool_makes_jobs_queue_until_restored() -> None:
    pool, _inner, _ = _pool()
    pool.shrink(cpus=1.5)
    assert pool.submit(_spec(1, cpus=1)).state == "queued"
    pool.restore()
    assert pool.get("j1").state == "running"


def test_unlimited_pool_never_queues() -> None:
    pool = P.Pool(ComputePool(), FakeJobs(), clock=CLOCK)
    assert all(pool.submit(_spec(i, cpus=2, mem=8192)).state == "running" for i in range(5))


def test_pool_config_rejects_machines_larger_than_the_pool() -> None:
    with pytest.raises(ValueError, match="larger than the pool"):
        ComputePool(machines=[LARGE], capacity_cpus=1)


def _count_polls(inner: FakeJobs) -> list[str]:
    """The job ids the backend is asked about, in order (``inner.get`` counted from now on)."""
    polls: list[str] = []
    real_get = inner.get

    def counted(job_id: str) -> JobStatus:
        polls.append(job_id)
        return real_get(job_id)

    inner.get = counted  # type: ignore[method-assign]
    return polls


def test_get_polls_a_running_job_once_and_answers_what_the_backend_does() -> None:
    pool, inner, _ = _pool()
    polls = _count_polls(inner)
    pool.submit(_spec(1))
    polls.clear()
    assert pool.get("j1").state == "running"
    assert polls == ["j1"]  # the pump's poll is the answer: not a second one
    inner.states["j1"] = "succeeded"
    assert pool.get("j1").state == "succeeded"
    assert pool.get("j1").state == "succeeded"  # no longer running: asked of the backend itself
    assert polls == ["j1", "j1", "j1"]


def test_get_many_pumps_once_and_polls_each_running_job_once() -> None:
    pool, inner, _ = _pool()
    polls = _count_polls(inner)
    pool.submit(_spec(1))
    pool.submit(_spec(2))
    assert pool.submit(_spec(3, cpus=2)).state == "queued"
    polls.clear()
    got = pool.get_many(["j1", "j2", "j3", "nope"])
    assert sorted(polls) == [
        "j1",
        "j2",
        "nope",
    ]  # each running job once; the unknown one asked of the backend
    assert {k: v.state for k, v in got.items() if isinstance(v, JobStatus)} == {
        "j1": "running",
        "j2": "running",
        "j3": "queued",
    }
    assert isinstance(got["nope"], KeyError)
    inner.states["j1"] = inner.states["j2"] = "succeeded"
    got = pool.get_many(["j1", "j2", "j3"])
    assert got["j1"].state == "succeeded" and got["j3"].state == "running"  # type: ignore[union-attr]
