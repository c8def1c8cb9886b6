"""Faults of the sandbox itself, not the agent's (the ``sandbox_faults`` tier):

- the HTTP gateway's process is SIGKILLed in the middle of a step and started again: the client gets a
  clear error (the gateway did not answer; sessions do not survive a restart), the old session's token a
  401 that says so, a new session works, and one ``gc`` leaves nothing of the dead gateway's episodes;
- the sandbox's disk fills up (a small tmpfs mounted as ``MLSANDBOX_HOME``, unmounted after): the writes
  fail with a clear error observation, a job that cannot write its output says why, the episode is graded
  and closed without an exception, and once there is room again nothing of it is left;
- a service that will not start at ``mlsandbox up``: the command fails naming it with the tail of its log,
  and the services already started are stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlsandbox import paths
from mlsandbox.backends.local import LocalBackend
from mlsandbox.backends.local.gc import collect_garbage_report
from mlsandbox.backends.local.jobs import OWNER_ENV
from mlsandbox.env import decode_observation
from mlsandbox.env.gym_env import MLSandboxEnv
from mlsandbox.gateway.client import GatewayClient, GatewayHTTPError, GatewayUnavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_soak

pytestmark = pytest.mark.sandbox_faults


def _marked(sandbox: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("MLSANDBOX_SANDBOX") == sandbox and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _owned_by(pid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            owner = p.environ().get(OWNER_ENV, "")
            if owner.startswith(f"{pid}-") and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


# ------------------------------------------------------------------------------------- the gateway


@pytest.mark.services
def test_gateway_killed_mid_step_and_restarted(sandbox: LocalBackend) -> None:
    probe = bench_soak.Probe(sandbox)
    # What earlier tests of the shared sandbox left to a dead owner is collected first: the counts below
    # compare what this gateway's crash leaves, and the collection after it would take those too.
    collect_garbage_report()
    before = probe.snapshot()["counts"]
    port = bench_soak.free_port()
    with bench_soak.gateway(sandbox.name, port=port) as (url, proc):
        gw = GatewayClient(url, timeout=60)
        a = gw.create_session("tabular-quality-basic", seed=1)
        b = gw.create_session("churn-clean-small", seed=2)
        job = gw.step(a.session_id, {"type": "train_model", "dataset": "raw/customers.parquet",
                                     "algorithm": "random_forest", "hyperparams": {"n_estimators": 2000}})  # fmt: skip
        assert job.observation.ok and job.observation.result["state"] in ("queued", "running")
        assert _owned_by(proc.pid), "the job runs, owned by the gateway"
        outcome: dict[str, Any] = {}

        def long_step() -> None:
            try:
                outcome["response"] = gw.step(b.session_id, {"type": "wait", "seconds": 30})
            except Exception as e:
                outcome["error"] = e

        stepping = threading.Thread(target=long_step)
        stepping.start()
        time.sleep(2.0)  # the wait is in flight
        assert stepping.is_alive()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stepping.join(timeout=30)
        assert not stepping.is_alive()
        error = outcome.get("error")
        assert isinstance(error, GatewayUnavailable), outcome
        message = str(error)
        assert url in message and f"/sessions/{b.session_id}/step" in message
        assert "sessions are gone" in message and "create a new session" in message
        with pytest.raises(GatewayUnavailable):  # nothing answers until it is started again
            gw.step(a.session_id, {"type": "list_datasets"})
    crashed = probe.snapshot()["counts"]
    assert crashed["buckets"] == before["buckets"] + 2 and crashed["experiments"] == before["experiments"] + 2

    with bench_soak.gateway(sandbox.name, port=port) as (url2, proc2):
        assert url2 == url
        with pytest.raises(GatewayHTTPError) as refused:
            gw.step(a.session_id, {"type": "list_datasets"})
        assert refused.value.status_code == 401
        assert "survives a restart" in str(refused.value.detail)
        fresh = gw.create_session("churn-clean-small", seed=3)
        assert gw.step(fresh.session_id, {"type": "list_datasets"}).observation.ok
        gw.close(fresh.session_id)
        items = collect_garbage_report()  # the dead gateway's episodes; the live one is left alone
        assert proc2.poll() is None and gw.health().sessions == 0
    gw.shutdown()

    mine = [i for i in items if i.sandbox == sandbox.name and f"process {proc.pid}" in f"{i.what} {i.detail}"]
    assert {"bucket", "experiment", "config"} <= {i.kind for i in mine} or not mine, items
    assert all(i.ok for i in items), [i for i in items if not i.ok]
    assert _owned_by(proc.pid) == []
    assert probe.snapshot()["counts"] == before


# ------------------------------------------------------------------------------------ the disk full


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 160 MiB tmpfs as the sandbox home (the binaries and database templates linked from the real one;
    bytecode kept in the real home's cache); unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    real = paths.home()
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(mount)], check=True)
    try:
        home = mount / "home"
        home.mkdir()
        for name in ("bin", "templates"):
            (home / name).symlink_to(real / name)
        monkeypatch.setenv("MLSANDBOX_HOME", str(home))
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(real / "pycache"))
        yield home
    finally:
        monkeypatch.undo()
        result = subprocess.run(["umount", str(mount)], capture_output=True, text=True)
        if result.returncode != 0:  # something still holds it: detach it now, it goes once released
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    return filler


def _until_minio_takes_writes(backend: LocalBackend, timeout: float = 120.0) -> None:
    """MinIO reads its drive's free space periodically: it refuses writes ('minimum free drive
    threshold') for a while after room was made. Waits until a bucket can be made (and removes it)."""
    store = backend.runtime().object_store
    probe = f"room-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            store.create_bucket(probe)
            store.delete_bucket(probe)
            return
        except Exception as e:
            if "minimum free drive threshold" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


@pytest.mark.services
@pytest.mark.slow
def test_disk_full_gives_a_clear_error_and_the_episode_ends_cleanly(small_disk: Path) -> None:
    backend = LocalBackend(f"disk{os.getpid()}-{uuid.uuid4().hex[:4]}")
    backend.up(ephemeral=True)
    try:
        probe = bench_soak.Probe(backend)
        before = probe.snapshot()["counts"]
        env = MLSandboxEnv("tabular-quality-basic", sandbox=backend.name, start_sandbox=False)
        env.reset(seed=1)

        def step(action: dict[str, Any]) -> tuple[dict[str, Any], bool, dict[str, Any]]:
            raw, _, terminated, _, info = env.step(action)
            return decode_observation(raw), terminated, info

        assert step({"type": "check_data_quality", "dataset": "raw/customers.csv"})[0]["ok"]
        filler = _fill(small_disk)
        try:
            obs, _, _ = step({"type": "clean_dataset", "dataset": "raw/customers.csv", "strategy": "drop_na"})
            assert not obs["ok"]
            assert "minimum free drive threshold" in obs["error"]["message"], obs["error"]
            obs, _, _ = step({"type": "train_model", "dataset": "raw/customers.parquet",
                              "algorithm": "logistic_regression"})  # fmt: skip
            assert obs["ok"], obs["error"]
            deadline = time.monotonic() + 180
            while True:
                job, _, _ = step({"type": "get_job", "job_id": "job-1"})
                if job["result"]["state"] not in ("queued", "running") or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert job["result"]["state"] == "failed", job
            assert "no space left on the sandbox's disk" in job["result"]["log_tail"], job["result"]
            obs, terminated, info = step({"type": "submit"})
            assert terminated and info["grade"]["success"] is False
            env.close()  # the episode ends without an exception, whatever could not be removed yet
        finally:
            filler.unlink()
        _until_minio_takes_writes(backend)
        # Room again: the next episode starts by removing what the last one could not, then ends.
        env.reset(seed=2)
        assert step({"type": "list_datasets"})[0]["ok"]
        env.close()
        assert probe.snapshot()["counts"] == before
    finally:
        backend.down()
    assert _marked(backend.name) == []


# ---------------------------------------------------------------------- a service that will not start


@pytest.mark.services
def test_up_with_a_service_that_will_not_start_stops_the_others_and_shows_its_log(tmp_path: Path) -> None:
    real = paths.home()
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "templates").symlink_to(real / "templates")
    minio = home / "bin" / "minio"  # starts, says why it cannot go on, and exits (the others are starting)
    minio.write_text(
        "#!/bin/sh\necho 'starting the object store'\nsleep 8\n"
        "echo 'FATAL: unable to open the drive: input/output error' >&2\nexit 3\n"
    )
    minio.chmod(minio.stat().st_mode | stat.S_IEXEC)
    name = f"nostart{os.getpid()}"
    env = {**os.environ, "MLSANDBOX_HOME": str(home), "PYTHONPYCACHEPREFIX": str(real / "pycache")}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "mlsandbox"), "up", "--name", name],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "minio failed to start" in out and "exited (code 3)" in out, out
    assert "FATAL: unable to open the drive: input/output error" in out, out  # the log's tail
    assert "starting the object store" in out, out
    logs = home / "sandboxes" / name / "logs"
    assert (logs / "mlflow.log").exists() and (logs / "prefect-server.log").exists()  # they were started
    assert _marked(name) == []  # ... and stopped
    assert not (home / "sandboxes" / name / "state.json").exists()
    shutil.rmtree(home / "sandboxes", ignore_errors=True)
