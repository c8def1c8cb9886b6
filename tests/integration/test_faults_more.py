"""The newer faults on the local backend, for real: inject -> measure the symptom -> recover -> gone.

Config store (Prefect variables) faults failing real training jobs, CPU contention slowing a running job,
5xx and slow answers from a real uvicorn app through its fault hook, a time trigger firing during a step,
the rlimit fallback, and a SIGKILLed episode with six concurrent faults cleaned up by ``gc``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlsandbox.backends.local import collect_garbage
from mlsandbox.backends.local.faults.control import LocalFaultControl
from mlsandbox.backends.local.jobs import LocalJobs
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.faults.engine import PerturbationEngine, UnavailableFaultError
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.packs.config.handlers import episode_prefix
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.loader import parse_scenario
from mlsandbox.workloads import fault_hook
from mlsandbox.world.episode import EpisodeState, JobRecord

pytestmark = pytest.mark.services
TRAIN = {
    "type": "train_model",
    "dataset": "raw/customers.csv",
    "algorithm": "random_forest",
    "hyperparams": {"n_estimators": 10},
}


def _scenario(plan: list[dict[str, Any]]) -> Any:
    data = load_builtin("tabular-quality-basic").model_dump()
    data["perturbations"] = plan
    return parse_scenario(data)


@pytest.fixture()
def episode(sandbox: Any, runtime: Any) -> Iterator[Any]:
    made: list[Gateway] = []

    def make(plan: list[dict[str, Any]], seed: int = 5) -> Gateway:
        gw = Gateway(runtime, _scenario(plan), seed=seed, sandbox=sandbox.name)
        made.append(gw)
        gw.start()
        return gw

    yield make
    for gw in made:
        gw.close()


def _wait_job(gw: Gateway, job_id: str, timeout: float = 600.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gw.episode.refresh_jobs()
        state = gw.state.jobs[job_id].state
        if state in ("succeeded", "failed", "cancelled"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {gw.state.jobs[job_id].state}")


# -------------------------------------------------------------------------------------------- config


def test_rotated_credentials_fail_jobs_until_the_agent_fixes_the_config(episode: Any, runtime: Any) -> None:
    gw = episode(
        [
            {
                "name": "stale",
                "when": {"at_step": 1},
                "fault": {"type": "rotated_credentials"},
                "recovery": "manual",
            }
        ]
    )
    store, prefix = runtime.config, episode_prefix(gw.episode)
    secret = runtime.endpoints.s3_secret_key
    assert gw.step(TRAIN).observation["ok"]
    assert store.get(prefix + "s3_secret_access_key") not in (None, secret)  # the store holds a stale key
    assert _wait_job(gw, "job-1") == "failed"
    obs = gw.step({"type": "get_job", "job_id": "job-1"}).observation
    assert "SignatureDoesNotMatch" in obs["result"]["log_tail"], obs["result"]["log_tail"]
    obs = gw.step({"type": "get_config"}).observation
    shown = obs["result"]["config"]
    assert shown["s3_secret_access_key"].startswith("****") and secret not in json.dumps(obs)
    assert shown["s3_endpoint_url"] == runtime.endpoints.s3_url
    obs = gw.step({"type": "set_config", "key": "s3_secret_access_key", "value": "@secret:minio-secret-key"})
    assert obs.observation["ok"] and obs.observation["result"]["value"] == "****" + secret[-4:]
    assert store.get(prefix + "s3_secret_access_key") == secret
    gw.step({"type": "retry_job", "job_id": "job-1"})
    state = _wait_job(gw, "job-2")
    assert state == "succeeded", runtime.jobs.logs(gw.state.jobs["job-2"].backend_id, tail=30)
    gw.step({"type": "list_runs"})  # a step boundary: the engine sees the symptom gone
    rec = gw.state.ground_truth.faults[0]
    assert rec.detected_step == 4 and rec.recovered_by == "agent" and rec.time_to_mitigate_s is not None
    bad = gw.step({"type": "set_config", "key": "s3_endpoint_url", "value": "minio:9000"}).observation
    assert (
        bad["error"]["code"] == "invalid_parameters"
        and store.get(prefix + "s3_endpoint_url") == runtime.endpoints.s3_url
    )
    gw.close()
    assert store.names(prefix) == []  # the episode's config is gone with it


def test_wrong_endpoint_fails_jobs_with_the_connection_error_until_recovered(
    episode: Any, runtime: Any
) -> None:
    gw = episode([{"name": "moved", "when": {"at_step": 1}, "fault": {"type": "wrong_endpoint"}}])
    store, prefix = runtime.config, episode_prefix(gw.episode)
    gw.step(TRAIN)
    wrong = store.get(prefix + "s3_endpoint_url")
    assert wrong != runtime.endpoints.s3_url and wrong.startswith("http://127.0.0.1:")
    assert _wait_job(gw, "job-1") == "failed"
    log = runtime.jobs.logs(gw.state.jobs["job-1"].backend_id, tail=30)
    assert "Could not connect to the endpoint URL" in log and wrong in log
    assert gw.faults is not None
    gw.faults.recover_all()
    gw.faults.recover_all()  # idempotent
    assert store.get(prefix + "s3_endpoint_url") == runtime.endpoints.s3_url


# ----------------------------------------------------------------------------------------- contention


def test_cpu_contention_slows_a_running_job_then_goes_away(sandbox: Any, runtime: Any) -> None:
    jid = f"contended-{os.getpid()}"
    runtime.jobs.submit(
        JobSpec(job_id=jid, workload="burn", args=["--cpu-seconds", "120"], labels={"t": "cc"})
    )
    sc = _scenario(
        [{"name": "noisy", "when": {"at_step": 1}, "fault": {"type": "cpu_contention", "workers": 6}}]
    )
    st = EpisodeState(episode_id="cc-1", scenario=sc, seed=1, sandbox=sandbox.name)
    st.jobs["job-1"] = JobRecord("job-1", jid, "x", "burn", 0, state="running")
    eng = PerturbationEngine(list(sc.perturbations), st, runtime, runtime.faults, seed=1)

    def rate(seconds: float = 3.0) -> float:
        a = runtime.jobs.get(jid).cpu_seconds
        time.sleep(seconds)
        return (runtime.jobs.get(jid).cpu_seconds - a) / seconds

    try:
        time.sleep(1.0)
        pid = runtime.jobs.pids(jid)[0]
        affinity = os.sched_getaffinity(pid)
        before = rate()
        st.step = 1
        eng.tick()
        assert eng.records[0].error is None and eng.records[0].affected_jobs == ["job-1"]
        burners = [
            p for p in psutil.process_iter(["cmdline"]) if "86400" in " ".join(p.info["cmdline"] or [])
        ]
        assert len(burners) >= 6
        cpu = next(iter(os.sched_getaffinity(burners[0].pid)))
        assert os.sched_getaffinity(pid) == {cpu}
        during = rate()
        eng.recover_all()
        assert os.sched_getaffinity(pid) == affinity
        assert not any(b.is_running() and b.status() != psutil.STATUS_ZOMBIE for b in burners)
        after = rate()
        # On one CPU with six burners the job gets at most a seventh of it. The machine may be busy with
        # other work (the job's share before is then well below one CPU): compare, with a margin.
        assert during < 0.2 and during < 0.75 * before and after > 1.3 * during, (before, during, after)
    finally:
        eng.recover_all()
        runtime.jobs.cleanup(("t", "cc"))


# ------------------------------------------------------------------------------------------ http hook

_APP = textwrap.dedent(
    """
    from fastapi import FastAPI
    from mlsandbox.workloads.fault_hook import FaultHookMiddleware

    app = FastAPI()
    app.add_middleware(FaultHookMiddleware)

    @app.get("/predict")
    def predict() -> dict:
        return {"label": 1}
    """
)


@pytest.fixture()
def demo_api(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real uvicorn server of a FastAPI app with the fault hook mounted (a subprocess)."""
    (tmp_path / "demo_app.py").write_text(_APP)
    hook = tmp_path / "hooks" / "demo-api.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, fault_hook.ENV_VAR: str(hook)}
    argv = [sys.executable, "-m", "uvicorn", "demo_app:app", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env)
    url = f"http://127.0.0.1:{port}/predict"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "demo app did not start"
                time.sleep(0.1)
        yield url, hook
    finally:
        proc.terminate()
        proc.wait(10)


def test_http_errors_make_a_real_service_answer_5xx_slowly_then_recover(
    sandbox: Any, runtime: Any, demo_api: tuple[str, Path]
) -> None:
    url, hook = demo_api
    sc = _scenario(
        [
            {
                "name": "sick-api",
                "when": {"at_step": 1},
                "target": "http:demo-api",
                "fault": {"type": "http_errors", "error_rate": 0.5, "status": 503, "delay_ms": 300},
            }
        ]
    )
    st = EpisodeState(episode_id="http-1", scenario=sc, seed=3, sandbox=sandbox.name)
    fault_hook.register_hook("demo-api", hook, scope=st.episode_id)
    eng = PerturbationEngine(list(sc.perturbations), st, runtime, runtime.faults, seed=3)

    def sample(n: int) -> list[tuple[int, float]]:
        out = []
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            for _ in range(n):
                t0 = time.perf_counter()
                out.append((client.get(url).status_code, time.perf_counter() - t0))
        return out

    try:
        assert all(code == 200 for code, _ in sample(5))
        st.step = 1
        eng.tick()
        time.sleep(0.25)  # the hook re-reads its file within 100 ms
        sick = sample(12)
        codes = [c for c, _ in sick]
        assert set(codes) == {200, 503} and 2 <= codes.count(503) <= 10, codes
        assert min(t for _, t in sick) >= 0.3
        eng.recover_all()
        time.sleep(0.25)
        healthy = sample(5)
        assert all(c == 200 for c, _ in healthy) and max(t for _, t in healthy) < 0.25
        assert not hook.exists()
    finally:
        eng.recover_all()
        fault_hook.unregister_hook("demo-api", scope=st.episode_id)


# ----------------------------------------------------------------------------------------------- timer


def test_time_trigger_fires_between_steps_not_at_the_next_one(sandbox: Any, runtime: Any) -> None:
    control = runtime.faults
    if "latency" in control.unavailable():
        pytest.skip(control.unavailable()["latency"])
    sc = _scenario(
        [
            {
                "name": "later",
                "when": {"at_time": 1.5},
                "target": "endpoint:minio",
                "fault": {"type": "latency", "latency_ms": 300},
                "duration": {"seconds": 2.0},
            }
        ]
    )
    st = EpisodeState(episode_id="timer-1", scenario=sc, seed=1, sandbox=sandbox.name)
    eng = PerturbationEngine(list(sc.perturbations), st, runtime, control, seed=1)
    url = f"{runtime.endpoints.s3_url}/minio/health/live"
    try:
        st.step = 1
        eng.tick()  # step 1 begins; the next boundary never comes in this test
        assert control.network.toxics("minio") == []
        deadline = time.monotonic() + 10
        while not eng.active_faults and time.monotonic() < deadline:  # (waits for an injection under way)
            time.sleep(0.05)
        assert eng.records and eng.records[0].error is None, eng.records
        assert [t["name"] for t in control.network.toxics("minio")] == ["mlsandbox-later"]
        t0 = time.perf_counter()
        httpx.get(url, timeout=5.0)
        assert time.perf_counter() - t0 >= 0.3  # the symptom, between steps
        rec = eng.records[0]
        assert rec.injected_step == 1 and rec.injected_at - st.started_at >= 1.5
        time.sleep(rec.injected_at + 2.3 - time.time())  # the timer ends it too
        assert control.network.toxics("minio") == [] and rec.recovered_by == "expiry"
    finally:
        eng.recover_all()


# --------------------------------------------------------------------------------------------- rlimits


def test_rlimit_fallback_refuses_cpu_quota_faults_and_cuts_memory(
    sandbox: Any, runtime: Any, tmp_path: Path
) -> None:
    jobs = LocalJobs(tmp_path, sandbox.name, runtime.endpoints, limits="rlimit")
    control = LocalFaultControl(sandbox, runtime.endpoints, jobs)
    try:
        assert "cpu_throttle" in control.unavailable() and "memory_limit" not in control.unavailable()
        sc = _scenario([{"name": "cut", "when": {"at_step": 1}, "fault": {"type": "cpu_throttle"}}])
        st = EpisodeState(episode_id="rl-1", scenario=sc, seed=1, sandbox=sandbox.name)
        with pytest.raises(UnavailableFaultError, match=r"'cut' uses fault 'cpu_throttle': .*rlimits"):
            PerturbationEngine(list(sc.perturbations), st, runtime, control, seed=1)
        sc = _scenario(
            [{"name": "tight", "when": {"at_step": 1}, "fault": {"type": "memory_limit", "memory_mb": 64}}]
        )
        st = EpisodeState(episode_id="rl-2", scenario=sc, seed=1, sandbox=sandbox.name)
        eng = PerturbationEngine(list(sc.perturbations), st, runtime, control, seed=1)
        st.step = 1
        eng.tick()
        spec = JobSpec(job_id="rl-hog", workload="burn", args=["--mem-mb", "150"], memory_mb=512)
        jobs.submit(eng.adjust_job(spec, "job-1"))
        deadline = time.monotonic() + 60
        while jobs.get("rl-hog").state == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert jobs.get("rl-hog").exit_code == 1 and "MemoryError" in jobs.logs("rl-hog")
        eng.recover_all()
        jobs.submit(eng.adjust_job(spec.model_copy(update={"job_id": "rl-ok"}), "job-2"))
        while jobs.get("rl-ok").state == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert jobs.get("rl-ok").state == "succeeded"
    finally:
        jobs.close()


# ------------------------------------------------------------------------------------------------- gc

_CRASHER = textwrap.dedent(
    """
    import json, sys, time
    from mlsandbox.backends.local import LocalBackend
    from mlsandbox.gateway import Gateway
    from mlsandbox.gateway.packs.config.handlers import episode_prefix
    from mlsandbox.scenario import load_builtin
    from mlsandbox.scenario.loader import parse_scenario
    from mlsandbox.workloads.fault_hook import register_hook

    name, hook = sys.argv[1], sys.argv[2]
    rt = LocalBackend(name).runtime()
    data = load_builtin("tabular-quality-basic").model_dump()
    at1 = {"at_step": 1}
    data["perturbations"] = [
        {"name": "slow", "when": at1, "target": "endpoint:minio", "fault": {"type": "latency", "latency_ms": 900}},
        {"name": "full", "when": at1, "fault": {"type": "disk_full"}},
        {"name": "stale", "when": at1, "fault": {"type": "rotated_credentials"}},
        {"name": "noisy", "when": at1, "fault": {"type": "cpu_contention", "workers": 2}},
        {"name": "sick", "when": at1, "target": "http:crash-api", "fault": {"type": "http_errors"}},
        {"name": "stuck", "when": at1, "target": "service:minio", "fault": {"type": "freeze_service"}},
    ]
    gw = Gateway(rt, parse_scenario(data), seed=11, sandbox=name)
    register_hook("crash-api", hook, scope=gw.state.episode_id)
    gw.start()
    gw.state.step = 1  # the first step boundary (not a whole step: MinIO is frozen from here on)
    gw.faults.tick()
    errors = [r.error for r in gw.state.ground_truth.faults if r.error]
    info = {"bucket": gw.state.bucket, "prefix": episode_prefix(gw.episode), "errors": errors}
    print("READY " + json.dumps(info), flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_episode_with_six_concurrent_faults_leaves_nothing_after_gc(
    sandbox: Any, runtime: Any, tmp_path: Path
) -> None:
    control = runtime.faults
    if "latency" in control.unavailable():
        pytest.skip(control.unavailable()["latency"])
    hook = tmp_path / "crash-api.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHER, sandbox.name, str(hook)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY "), line
        info = json.loads(line.removeprefix("READY "))
        assert info["errors"] == []
        minio = sandbox.state().services["minio"].process
        assert psutil.Process(minio.pid).status() == psutil.STATUS_STOPPED
        assert hook.exists() and control.network.toxics("minio")
        assert runtime.config.get(info["prefix"] + "s3_secret_access_key") != runtime.endpoints.s3_secret_key
        burners = [p for p in psutil.process_iter(["environ"]) if _owned_by(p, proc.pid)]
        assert len(burners) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        collect_garbage()  # also when an assertion above failed: later tests share the sandbox
    assert control.network.toxics("minio") == []
    assert psutil.Process(minio.pid).status() != psutil.STATUS_STOPPED
    # The episode's bucket (its quota with it) is the dead episode's own: gc deleted it from the journal.
    assert not runtime.object_store.bucket_exists(info["bucket"])
    assert not hook.exists()
    assert runtime.config.names(info["prefix"]) == []
    assert not [p for p in psutil.process_iter(["environ"]) if _owned_by(p, proc.pid)]
    assert not [p for p in (Path(sandbox.dir) / "faults").glob("*.json") if p.name.startswith(f"{proc.pid}-")]


def _owned_by(proc: psutil.Process, owner_pid: int) -> bool:
    env = proc.info.get("environ") or {}
    return (
        env.get("MLSANDBOX_JOB_OWNER", "").startswith(f"{owner_pid}-")
        and proc.status() != psutil.STATUS_ZOMBIE
    )
