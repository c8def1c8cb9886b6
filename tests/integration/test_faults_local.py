"""Every fault on the local backend, for real: inject -> measure the symptom -> recover -> symptom gone.

Shares the session sandbox; a test that breaks a shared service brings it back and waits until it is
healthy before it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlsandbox.backends.local.gc import collect_garbage_report
from mlsandbox.backends.local.jobs import cgroups_available
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.errors import BackendError
from mlsandbox.gateway import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services
needs_cgroups = pytest.mark.skipif(not cgroups_available(), reason="job limits need root and cgroup v1")


@pytest.fixture(scope="module")
def control(runtime: Any) -> Any:
    c = runtime.faults
    if "latency" in c.unavailable():
        pytest.skip(c.unavailable()["latency"])
    return c


def _timed_get(url: str, timeout: float = 10.0) -> float:
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        t0 = time.perf_counter()
        client.get(url)
        return time.perf_counter() - t0


def _median_get(url: str, n: int = 3) -> float:
    return sorted(_timed_get(url) for _ in range(n))[n // 2]


def test_latency_through_the_proxy_grows_by_the_configured_amount(runtime: Any, control: Any) -> None:
    url = f"{runtime.endpoints.s3_url}/minio/health/live"
    base = _median_get(url)
    control.network.add_toxic("minio", "t-latency", "latency", {"latency": 400, "jitter": 0})
    try:
        slow = _median_get(url)
        assert slow - base >= 0.4 * 0.95, (base, slow)
    finally:
        control.network.remove_toxic("minio", "t-latency")
    assert _median_get(url) < base + 0.2
    assert control.network.toxics("minio") == []


def test_endpoint_down_refuses_connections_then_comes_back(runtime: Any, control: Any) -> None:
    control.network.set_enabled("mlflow", False)
    try:
        with pytest.raises(httpx.TransportError):
            _timed_get(f"{runtime.endpoints.mlflow_url}/health", timeout=3)
        assert not control.services.health("mlflow").healthy
    finally:
        control.network.set_enabled("mlflow", True)
    assert control.services.health("mlflow").healthy


def test_reset_peer_and_timeout_toxics(runtime: Any, control: Any) -> None:
    url = f"{runtime.endpoints.s3_url}/minio/health/live"
    for kind in ("reset_peer", "timeout"):
        control.network.add_toxic("minio", f"t-{kind}", kind, {"timeout": 100})
        try:
            with pytest.raises(httpx.TransportError):
                _timed_get(url, timeout=2)
        finally:
            control.network.remove_toxic("minio", f"t-{kind}")
        assert control.services.health("minio").healthy


def test_disk_full_write_fails_with_the_quota_error(runtime: Any, control: Any) -> None:
    store, bucket = runtime.object_store, "faults-quota-test"
    store.create_bucket(bucket)
    try:
        control.set_bucket_quota(bucket, 1)
        with pytest.raises(BackendError, match="XMinioAdminBucketQuotaExceeded"):
            store.put_object(bucket, "x", b"payload")
        control.set_bucket_quota(bucket, None)
        store.put_object(bucket, "x", b"payload")
    finally:
        control.set_bucket_quota(bucket, None)
        store.delete_bucket(bucket)


def test_killed_service_fails_its_health_check_until_restarted(control: Any) -> None:
    control.services.kill("minio")
    try:
        h = control.services.health("minio", timeout=2)
        assert not h.healthy and h.error
        assert "minio" in control.services.names()
    finally:
        assert control.services.restart("minio", timeout=60).healthy
    assert control.services.health("minio").healthy


def test_frozen_service_hangs_until_thawed(control: Any) -> None:
    control.services.freeze("minio")
    try:
        h = control.services.health("minio", timeout=1.5)
        assert not h.healthy and "timed out" in (h.error or "")
    finally:
        control.services.thaw("minio")
    assert control.services.health("minio").healthy


def test_recover_all_undoes_what_this_process_changed(runtime: Any, control: Any) -> None:
    """The backstop of the engine's own recovery: every journaled change of this process, undone."""
    store, bucket = runtime.object_store, "faults-recover-all"
    store.create_bucket(bucket)
    journal = control.journal.path
    try:
        control.network.add_toxic("minio", "t-all", "latency", {"latency": 300})
        control.network.set_enabled("mlflow", False)
        control.set_bucket_quota(bucket, 1)
        control.services.freeze("prefect-worker")
        control.start_contention("t-all", "service:prefect-server", 1)
        burners = [
            p
            for p in psutil.Process().children()
            if "mlsandbox.workloads.burn" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
        ]
        assert len(burners) == 1 and journal.exists()
        done = control.recover_all()
        assert {"toxic:minio:t-all", "proxy:mlflow", f"quota:{bucket}", "frozen:prefect-worker"} <= set(done)
        assert "contention:t-all" in done
        assert control.network.toxics("minio") == [] and control.services.health("mlflow").healthy
        worker = control.services._record("prefect-worker")
        assert psutil.Process(worker.pid).status() != psutil.STATUS_STOPPED
        store.put_object(bucket, "x", b"payload")  # no quota left
        assert not any(b.is_running() and b.status() != psutil.STATUS_ZOMBIE for b in burners)
        # (what was made, like the bucket, stays journaled until it is deleted: it is no fault change)
        assert [k for k in control.journal.entry_keys() if not k.startswith(("config:", "bucket:"))] == []
        assert control.recover_all() == []  # (episodes' config scopes are their config store's)
    finally:
        control.recover_all()
        store.delete_bucket(bucket)


def _burn(runtime: Any, job_id: str, *args: str, memory_mb: int = 512, cpus: float = 1.0) -> Any:
    spec = JobSpec(
        job_id=job_id,
        workload="burn",
        args=list(args),
        memory_mb=memory_mb,
        cpus=cpus,
        labels={"test": "faults"},
    )
    return runtime.jobs.submit(spec)


def _wait_done(runtime: Any, job_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = runtime.jobs.get(job_id)
        if st.state in ("succeeded", "failed", "cancelled"):
            return st
        time.sleep(0.2)
    raise AssertionError(f"{job_id} still {st.state}")


@needs_cgroups
def test_memory_limit_cut_on_a_running_job_oom_kills_it(runtime: Any, control: Any) -> None:
    jid = f"oom-{os.getpid()}"
    # It holds 150 MiB, spins for 4 CPU-seconds, then starts two Python children (more memory).
    _burn(runtime, jid, "--mem-mb", "150", "--cpu-seconds", "4", "--children", "2", "--sleep", "5")
    time.sleep(2.0)
    control.set_job_limits(jid, memory_mb=50)  # below its usage: cut to what it uses now
    st = _wait_done(runtime, jid)
    assert st.exit_code == 137 and st.state == "failed"
    assert "OOMKilled" in runtime.jobs.logs(jid, tail=5)
    control.restore_job_limits(jid, None, 512)
    ok = f"ok-{os.getpid()}"
    _burn(runtime, ok, "--mem-mb", "150")
    assert _wait_done(runtime, ok).exit_code == 0
    runtime.jobs.cleanup(("test", "faults"))


@needs_cgroups
def test_cpu_throttle_cuts_a_running_jobs_cpu_rate(runtime: Any, control: Any) -> None:
    jid = f"cpu-{os.getpid()}"
    _burn(runtime, jid, "--cpu-seconds", "60")
    try:
        time.sleep(1.0)

        def rate(seconds: float = 1.5) -> float:
            a = runtime.jobs.get(jid).cpu_seconds
            time.sleep(seconds)
            return (runtime.jobs.get(jid).cpu_seconds - a) / seconds

        before = rate()
        control.set_job_limits(jid, cpus=0.03)
        time.sleep(0.3)
        throttled = rate()
        _, cpu_dir = runtime.jobs.cgroup_dirs(jid)
        assert int((cpu_dir / "cpu.cfs_quota_us").read_text()) == 3_000
        try:
            # The quota caps the job whatever else runs; before and after, a busy machine may leave it
            # well under one CPU: compare with a margin.
            assert throttled < 0.05 and before > 2 * throttled, (before, throttled)
        finally:
            control.restore_job_limits(jid, 1.0, None)
        assert int((cpu_dir / "cpu.cfs_quota_us").read_text()) == 100_000
        assert rate() > 2 * throttled
    finally:
        runtime.jobs.cleanup(("test", "faults"))


def test_episode_with_a_plan_injects_records_and_recovers_on_close(
    sandbox: Any, runtime: Any, control: Any
) -> None:
    data = load_builtin("tabular-quality-basic").model_dump()
    data["perturbations"] = [
        {
            "name": "slow",
            "when": {"at_step": 1},
            "target": "endpoint:minio",
            "fault": {"type": "latency", "latency_ms": 300},
        },
        {"name": "full", "when": {"at_step": 2}, "fault": {"type": "disk_full"}},
        {
            "name": "no-tenure",
            "when": {"at_step": 1},
            "target": "dataset:customers",
            "fault": {"type": "missing_column", "column": "tenure_months"},
        },
    ]
    from mlsandbox.scenario.loader import parse_scenario

    gw = Gateway(runtime, parse_scenario(data), seed=3, sandbox=sandbox.name)
    gw.start()
    try:
        obs = gw.step({"type": "check_data_quality", "dataset": "raw/customers.csv"}).observation
        assert "tenure_months" not in obs["result"]["profile"]["column_profiles"]
        assert [t["name"] for t in control.network.toxics("minio")] == ["mlsandbox-slow"]
        obs = gw.step(
            {"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na"}
        ).observation
        assert obs["ok"] is False and "XMinioAdminBucketQuotaExceeded" in obs["error"]["message"]
        obs = gw.step({"type": "get_service_health", "service": "minio"}).observation
        assert obs["ok"] and obs["result"]["latency_ms"] >= 300
        assert "injected" not in str(obs) and "mlsandbox-slow" not in str(obs)
        truth = {r.name: r for r in gw.state.ground_truth.faults}
        assert truth["full"].detected_step == 3 and truth["slow"].detected_step == 3
    finally:
        gw.close()
    assert control.network.toxics("minio") == []
    assert all(r.recovered_by == "episode_end" for r in gw.state.ground_truth.faults)


_CRASHER = textwrap.dedent(
    """
    import sys, time
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.backends.protocols import JobSpec
    rt = LocalBackend(sys.argv[1]).runtime()
    c = rt.faults
    rt.object_store.create_bucket("faults-gc-test")
    rt.jobs.submit(JobSpec(job_id="gc-burn", workload="burn", args=["--cpu-seconds", "120"], labels={"t": "gc"}))
    time.sleep(0.5)
    c.network.add_toxic("minio", "gc-latency", "latency", {"latency": 2000})
    c.network.add_toxic("mlflow", "gc-bandwidth", "bandwidth", {"rate": 1})
    c.network.set_enabled("mlflow", False)
    c.set_bucket_quota("faults-gc-test", 1)
    c.services.freeze("prefect-worker")
    c.set_job_limits("gc-burn", cpus=0.05)
    print("READY", flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_episode_leaves_nothing_after_gc(sandbox: Any, runtime: Any, control: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CRASHER, sandbox.name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        worker = sandbox.state().services["prefect-worker"].process
        assert psutil.Process(worker.pid).status() == psutil.STATUS_STOPPED
        journals = list((Path(sandbox.dir) / "faults").glob("*.json"))
        assert journals
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    had_journal = journals[0].exists()
    items = collect_garbage_report()
    # (A concurrent garbage collection of another test session may have done it first.)
    mine = [i for i in items if i.sandbox == sandbox.name and f"process {proc.pid}" in i.detail]
    assert not had_journal or sorted(i.kind for i in mine) == ["bucket"] + ["fault"] * 6, items
    assert all(i.ok for i in mine), mine
    assert control.network.toxics("minio") == [] and control.network.toxics("mlflow") == []
    assert control.services.health("mlflow").healthy  # proxy enabled again
    assert psutil.Process(worker.pid).status() != psutil.STATUS_STOPPED
    assert not runtime.object_store.bucket_exists("faults-gc-test")  # what the gone process made goes too
    assert not any(
        "gc-burn" in " ".join(p.info["cmdline"] or [])
        or (p.info["environ"] or {}).get("MLSANDBOX_JOB_ID") == "gc-burn"
        for p in psutil.process_iter(["cmdline", "environ"])
    )
    assert not list((Path(sandbox.dir) / "faults").glob("*.json"))
