"""The compute pool on the local backend: kernel-enforced machine limits, a real queue, idle-cost."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.helpers import ok

from mlsandbox.backends.local.jobs import cgroups_available
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.compute import ComputePool, Machine
from mlsandbox.scenario.models import Budget
from mlsandbox.world import compute as P

pytestmark = pytest.mark.services

TINY = Machine(name="cpu-tiny", cpus=0.5, memory_mb=256, credits_per_second=0.1)
SMALL = Machine(name="cpu-small", cpus=1, memory_mb=2048, credits_per_second=0.5)


def _gateway(runtime: Any, sandbox: Any, compute: ComputePool, **update: Any) -> Gateway:
    sc = load_builtin("tabular-quality-basic").model_copy(update={"compute": compute, **update})
    gw = Gateway(runtime, sc, seed=5, sandbox=sandbox.name)
    gw.start()
    return gw


@pytest.mark.skipif(not cgroups_available(), reason="memory limits need root and cgroup v1")
def test_a_job_on_a_machine_cannot_exceed_its_memory(runtime: Any) -> None:
    pool = P.Pool(ComputePool(machines=[TINY]), runtime.jobs, clock=runtime.clock)
    label = {"mlsandbox.test": "compute-oom"}
    spec = JobSpec(
        job_id="compute-oom-1",
        workload="burn",
        args=["--mem-mb", "600", "--sleep", "5"],
        cpus=TINY.cpus,
        memory_mb=TINY.memory_mb,
        labels={**label, P.MACHINE_LABEL: TINY.name},
    )
    try:
        pool.submit(spec)
        deadline = time.monotonic() + 60
        while (status := pool.get(spec.job_id)).state not in ("succeeded", "failed", "cancelled") and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert status.state == "failed" and status.exit_code == 137
        assert status.peak_rss_bytes is not None and status.peak_rss_bytes < 300 << 20
        assert "OOMKilled" in pool.logs(spec.job_id)
    finally:
        pool.cleanup(("mlsandbox.test", "compute-oom"))


def test_a_job_that_does_not_fit_waits_in_the_queue_and_starts_when_capacity_frees(
    runtime: Any, sandbox: Any
) -> None:
    gw = _gateway(runtime, sandbox, ComputePool(machines=[SMALL], capacity_cpus=1, capacity_memory_mb=4096))
    try:
        train = {"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "gradient_boosting"}
        first = ok(gw, {**train, "machine": "cpu-small", "hyperparams": {"max_iter": 50}})
        second = ok(gw, {**train, "machine": "cpu-small"})
        assert first["state"] == "running" and second["state"] == "queued"
        queue = ok(gw, {"type": "get_queue"})
        assert [q["job"] for q in queue["queue"]] == ["job-2"]
        assert "1 CPU requested, 0 of 1 free" in queue["queue"][0]["reason"]
        assert queue["pool"]["used_cpus"] == 1
        assert ok(gw, {"type": "get_job", "job_id": "job-2"})["state"] == "queued"
        assert gw.runtime.jobs.list(gw.state.job_label)[0].state == "running"  # one real process
        deadline = time.monotonic() + 240
        while gw.state.jobs["job-2"].state == "queued" and time.monotonic() < deadline:
            ok(gw, {"type": "wait", "seconds": 10})
        assert gw.state.jobs["job-1"].state == "succeeded"
        assert gw.state.jobs["job-2"].state in ("running", "succeeded")
        assert ok(gw, {"type": "get_queue"})["queue"] == []
        # Cancelling a queued job: it never starts.
        ok(gw, {**train, "machine": "cpu-small"})
        if gw.state.jobs["job-3"].state == "queued":
            assert ok(gw, {"type": "cancel_job", "job_id": "job-3"})["state"] == "cancelled"
            assert gw.state.jobs["job-3"].state == "cancelled"
    finally:
        gw.close()
    assert runtime.jobs.list(gw.state.job_label) == []


def test_idle_reservations_cost_credits_and_an_exhausted_budget_stops_new_work(
    runtime: Any, sandbox: Any
) -> None:
    pool = ComputePool(machines=[SMALL], capacity_cpus=2, capacity_memory_mb=4096)
    gw = _gateway(runtime, sandbox, pool, budget=Budget(credits=2.0, max_job_seconds=60))
    try:
        res = ok(gw, {"type": "request_resources", "machine": "cpu-small"})
        assert res["reservation_id"] == "res-1" and res["state"] == "idle"
        bad = gw.step({"type": "request_resources", "machine": "cpu-large"}).observation
        assert bad["error"]["code"] == "not_found"
        ok(gw, {"type": "wait", "seconds": 2})
        listed = ok(gw, {"type": "list_machines"})
        (held,) = listed["reservations"]
        assert held["idle_credits"] >= 2 * SMALL.credits_per_second * 0.9
        assert gw.state.charges.idle_reserved_credits == pytest.approx(gw.state.extra_credits)
        assert listed["pool"]["free_cpus"] == 1
        ok(gw, {"type": "wait", "seconds": 3})  # 2.5+ credits by now: the budget is gone
        obs = gw.step({"type": "request_resources", "machine": "cpu-small"}).observation
        assert obs["error"]["code"] == "budget_exhausted"
        obs = gw.step(
            {"type": "train_model", "dataset": "raw/customers.csv", "algorithm": "gradient_boosting"}
        ).observation
        assert obs["error"]["code"] == "budget_exhausted"
        assert ok(gw, {"type": "list_machines"})["reservations"] == []  # released when credits ran out
    finally:
        gw.close()
