"""A sim job's read of its data object pays what the object store endpoint's network faults cost at the
moment of the read (the job's time, not the clock's now), as on local where the read goes through
Toxiproxy: the bytes at the bandwidth cap, the latency per request, under the job's wall-clock limit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.helpers import job_until_done as _until_done

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.data.formats import to_bytes
from mlsandbox.data.tabular import generate_tabular
from mlsandbox.scenario import load_builtin

RATE_KBPS = 10.0


@pytest.fixture
def rt() -> Any:
    rt = get_backend("sim", "job-bandwidth-test").runtime()
    rt.object_store.create_bucket("bk1")
    spec = load_builtin("churn-clean-small").datasets[0]
    rt.object_store.put_object("bk1", "d.parquet", to_bytes(generate_tabular(spec, 5).train_table, "parquet"))
    return rt


def _size(rt: Any) -> int:
    return len(rt.object_store.get_object("bk1", "d.parquet"))


def _train(rt: Any, job_id: str, *, timeout_s: float | None = None) -> Any:
    """The same job each time (its run name, seed and limits draw its plan), under a new id."""
    experiment = rt.tracking.create_experiment(f"e-{job_id}")
    args = ["--bucket", "bk1", "--key", "d.parquet", "--target", "label", "--algorithm", "gradient_boosting"]
    args += ["--hyperparams", json.dumps({}), "--experiment-id", experiment]
    args += ["--run-name", "same", "--seed", "1"]
    spec = JobSpec(
        job_id=job_id,
        workload="trainer",
        args=args,
        cpus=1.0,
        memory_mb=1024,
        labels={"episode": "t"},
        timeout_s=timeout_s,
    )
    return rt.jobs.submit(spec)


def _wall(status: Any) -> float:
    return float(status.finished_at - status.started_at)


def _read_at(rt: Any, job_id: str) -> float:
    """The monotonic time the job reads its data (the plan's read event, in its first phase)."""
    job = rt.jobs.jobs[job_id]
    phase = job.plan.phases[0]
    read = next(e for e in job.plan.events if e.kind == "need" and e.service == "minio")
    return float(job.started_at + read.pos * max(phase.wall, phase.cpu / job.rate))


def test_a_bandwidth_cap_on_the_lake_slows_a_jobs_read_by_its_bytes_over_the_rate(rt: Any) -> None:
    base = _until_done(rt, _train(rt, "base").job_id)
    assert base.state == "succeeded"
    rt.faults.network.add_toxic("minio", "slow", "bandwidth", {"rate": RATE_KBPS})
    slow = _until_done(rt, _train(rt, "slow").job_id)
    rt.faults.network.remove_toxic("minio", "slow")
    assert slow.state == "succeeded"
    expected = _size(rt) / (RATE_KBPS * 1024)
    assert expected > 1.0  # long enough to cross several of the polls that bring the job up to the clock
    assert 0.9 * expected <= _wall(slow) - _wall(base) <= 1.1 * expected + 0.01
    assert slow.cpu_seconds == pytest.approx(base.cpu_seconds, abs=1e-3)  # I/O wait: no CPU
    assert "reading s3://bk1/d.parquet" in rt.jobs.logs("slow")


def test_a_latency_on_the_lake_adds_its_mean_to_each_request_of_the_read(rt: Any) -> None:
    base = _until_done(rt, _train(rt, "base").job_id)
    rt.faults.network.add_toxic("minio", "lag", "latency", {"latency": 1500, "jitter": 200})
    lagged = _until_done(rt, _train(rt, "lagged").job_id)
    rt.faults.network.remove_toxic("minio", "lag")
    requests = rt.world.requests("object_store.get_object")
    assert _wall(lagged) - _wall(base) == pytest.approx(1.5 * requests, abs=0.01)


def test_a_cap_added_after_the_jobs_read_does_not_slow_it_even_before_the_job_is_brought_up(rt: Any) -> None:
    base = _until_done(rt, _train(rt, "base").job_id)
    _train(rt, "late")
    read_at = _read_at(rt, "late")
    # The clock passes the read without anything asking about the job, then the lake collapses: the job,
    # brought up to the clock only now, read before the collapse.
    rt.clock.sleep(read_at - rt.clock.monotonic() + 0.5)
    rt.faults.network.add_toxic("minio", "slow", "bandwidth", {"rate": 1})
    late = _until_done(rt, "late")
    rt.faults.network.remove_toxic("minio", "slow")
    assert late.state == "succeeded"
    assert _wall(late) == pytest.approx(_wall(base), abs=1e-6)


def test_a_cap_lifted_in_the_middle_of_the_read_counts_only_until_then(rt: Any) -> None:
    base = _until_done(rt, _train(rt, "base").job_id)
    _train(rt, "lifted")
    read_at = _read_at(rt, "lifted")
    rt.clock.sleep(read_at - rt.clock.monotonic() - 0.5)
    rt.faults.network.add_toxic("minio", "slow", "bandwidth", {"rate": RATE_KBPS})  # before the read
    rt.clock.sleep(0.5 + 1.0)
    rt.jobs.get("lifted")  # brought up in the middle of its read
    rt.faults.network.remove_toxic("minio", "slow")  # a second of capped transfer, then the rest at once
    lifted = _until_done(rt, "lifted")
    assert _size(rt) / (RATE_KBPS * 1024) > 1.5
    assert _wall(lifted) - _wall(base) == pytest.approx(1.0, abs=0.01)


def test_a_read_under_a_tiny_bandwidth_past_the_jobs_timeout_is_killed_at_the_limit(rt: Any) -> None:
    base = _until_done(rt, _train(rt, "base").job_id)
    timeout_s = 20.0
    assert _wall(base) < timeout_s < _wall(base) + _size(rt) / 1024  # only the read at 1 KB/s outlasts it
    rt.faults.network.add_toxic("minio", "slow", "bandwidth", {"rate": 1})
    stuck = _until_done(rt, _train(rt, "stuck", timeout_s=timeout_s).job_id)
    rt.faults.network.remove_toxic("minio", "slow")
    assert stuck.state == "failed" and stuck.exit_code == 137
    assert _wall(stuck) == pytest.approx(timeout_s)
    log = rt.jobs.logs("stuck")
    assert "timed out after 20 s" in log and "reading s3://bk1/d.parquet" in log
    assert stuck.cpu_seconds < base.cpu_seconds  # killed while waiting on the network, before its fit


def test_the_worlds_transfer_integrates_the_endpoints_history(rt: Any) -> None:
    from mlsandbox.backends.sim.world import SimWorld

    world = SimWorld(rt.world.calibration, seed=1, name="w")
    net = world.endpoints["minio"]
    world.clock.charge(10.0)
    net.toxics["bw"] = ("bandwidth", {"rate": 2})
    world.endpoint_changed("minio")
    world.clock.charge(3.0)
    net.toxics["bw"] = ("bandwidth", {"rate": 1})
    world.endpoint_changed("minio")
    world.clock.charge(3.0)
    net.toxics.clear()
    world.endpoint_changed("minio")
    # 4 KiB from t=11: 2 s at 2 KB/s (4 KiB) -> done at 13 s
    assert world.transfer("minio", 11.0, 4096) == (13.0, 0.0)
    # 6 KiB from t=11: 4 KiB by 13 s, 2 KiB at 1 KB/s -> 15 s
    assert world.transfer("minio", 11.0, 6144) == (15.0, 0.0)
    # stopped at 12 s: 2 KiB moved, 4 KiB left
    assert world.transfer("minio", 11.0, 6144, stop=12.0) == (12.0, 4096.0)
    # the cap is gone at 16 s: the rest moves at once
    assert world.transfer("minio", 15.0, 10_000) == (16.0, 0.0)
    assert world.transfer_s("minio", 5.0, 10_000) == 0.0  # no fault before 10 s
    assert world.transfer_s("minio", 11.0, 4096) == 2.0
    assert world.reachable_at("minio", 12.0)


@pytest.mark.parametrize(("stream", "slowed"), [("downstream", False), ("upstream", True)])
def test_an_upload_pays_the_cap_of_the_upstream_direction_only(rt: Any, stream: str, slowed: bool) -> None:
    """Toxiproxy caps one direction: a download is the service's bytes (``downstream``), an upload's
    body is the client's (``upstream``), so a download cap leaves a ``put_object`` as fast as without it."""
    payload = b"x" * 64_000

    def put_s() -> float:
        t0 = rt.clock.monotonic()
        rt.object_store.put_object("bk1", "up.bin", payload)
        return float(rt.clock.monotonic() - t0)

    free = put_s()
    rt.faults.network.add_toxic("minio", "cap", "bandwidth", {"rate": RATE_KBPS}, stream=stream)
    capped = put_s()
    expected = len(payload) / (RATE_KBPS * 1024)
    if slowed:
        assert capped - free == pytest.approx(expected, rel=0.05)
    else:
        assert capped == pytest.approx(free, abs=0.01)
