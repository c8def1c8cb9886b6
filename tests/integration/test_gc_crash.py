"""A crashed episode leaves nothing after one ``gc``: an env process playing ``tabular-ops-tracker-outage``
is SIGKILLed while its training job runs (the tracker killed by the scenario's fault, the lake slowed by a
Toxiproxy toxic, a Prefect flow deployed), then one garbage collection, then everything the episode had is
gone: its processes, its job's memory and cpu cgroups, the toxics, its bucket, MLflow experiment, Prefect
deployments, flow runs and config variables; the tracker it killed is running again.

Two cases: the episode on a sandbox that lives on (the session's; the env attached to it), and the issue's
own case, an env that started its own (ephemeral) sandbox: then the whole sandbox goes, cgroups included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlsandbox.backends.local import LocalBackend
from mlsandbox.backends.local import cgroups as cgroup_layout
from mlsandbox.backends.local.gc import collect_garbage_report
from mlsandbox.backends.local.jobs import OWNER_ENV, cgroups_available

pytestmark = pytest.mark.services
READY_TIMEOUT_S = 240.0

# The crashing episode: the tracker-outage scenario up to a running training job with the tracker killed
# under it and the lake's latency toxic in place, and a training flow deployed; then it prints what it
# made and waits to be killed.
_EPISODE = textwrap.dedent(
    """
    import json, sys, time
    from mlsandbox.env import decode_observation
    from mlsandbox.backends.local.jobs import owner_marker
    from mlsandbox.env.gym_env import MLSandboxEnv

    name, own = sys.argv[1], sys.argv[2] == "own"
    env = MLSandboxEnv("tabular-ops-tracker-outage", sandbox=name, start_sandbox=own)
    env.reset(seed=5)
    gw = env.gateway

    def step(action):
        obs = decode_observation(env.step(action)[0])
        assert obs["ok"], (action, obs["error"])
        return obs["result"]

    step({"type": "check_data_quality", "dataset": "raw/customers.csv"})
    flow = step({"type": "run_flow", "name": "training",
                 "parameters": {"dataset": "customers", "model_name": "churn"}})
    step({"type": "train_model", "dataset": "raw/customers.parquet", "algorithm": "random_forest",
          "hyperparams": {"n_estimators": 3000}})
    deadline = time.monotonic() + 180
    while True:
        job = step({"type": "get_job", "job_id": "job-1"})
        killed = any(r.name == "tracker-kill" for r in gw.state.ground_truth.faults)
        if job["state"] == "running" and killed:
            break
        assert job["state"] in ("queued", "running") and time.monotonic() < deadline, job
        time.sleep(0.5)
    rt, backend_id = gw.runtime, gw.state.jobs["job-1"].backend_id
    print("READY " + json.dumps({
        "episode": gw.state.episode_id,
        "bucket": gw.state.bucket,
        "experiment": gw.state.experiment_name,
        "job_pids": rt.jobs.pids(backend_id),
        "cgroups": [str(d) for d in rt.jobs.cgroup_dirs(backend_id)],
        "owner": owner_marker(),
        "flow_run": flow["flow_run_id"],
    }), flush=True)
    time.sleep(900)
    """
)


def _play_until_ready(sandbox: str, own: bool) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _EPISODE, sandbox, "own" if own else "attach"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    for line in proc.stdout:
        if line.startswith("READY "):
            return proc, json.loads(line.split(" ", 1)[1])
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise AssertionError(f"the episode process did not get ready (exit {proc.wait()})")


def _owner_processes(owner: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(OWNER_ENV) == owner and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _episode_processes(episode: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("MLSANDBOX_EPISODE") == episode and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _owner_cgroups(sandbox: str, pid: int) -> list[Path]:
    """Every cgroup directory of the process ``pid`` for ``sandbox``, wherever it is nested."""
    return [
        d
        for root in cgroup_layout.find_roots()
        if (root / sandbox).is_dir()
        for d in (root / sandbox).iterdir()
        if d.name.startswith(f"{pid}-")
    ]


def _prefect(api: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = httpx.post(f"{api}{path}", json=body, timeout=10, trust_env=False)
    resp.raise_for_status()
    result: list[dict[str, Any]] = resp.json()
    return result


def _experiment_active(mlflow_url: str, name: str) -> bool | None:
    """Whether the experiment is active (None: the tracker does not answer)."""
    try:
        resp = httpx.get(
            f"{mlflow_url}/api/2.0/mlflow/experiments/get-by-name",
            params={"experiment_name": name},
            timeout=10,
            trust_env=False,
        )
    except httpx.TransportError:
        return None
    if resp.status_code == 404:
        return False
    resp.raise_for_status()
    return bool(resp.json()["experiment"]["lifecycle_stage"] == "active")


def _what_the_episode_has(backend: LocalBackend, made: dict[str, Any]) -> dict[str, Any]:
    """The episode's things on the sandbox's services (direct endpoints, not through the proxy)."""
    from mlsandbox.backends.common.s3 import S3ObjectStore

    state = backend.state()
    assert state is not None
    ep = state.endpoints
    s3 = S3ObjectStore(ep.s3_url, ep.s3_access_key, ep.s3_secret_key)
    episode = made["episode"]
    toxics = httpx.get(f"http://127.0.0.1:{state.ports.toxiproxy}/proxies/minio/toxics", timeout=10).json()
    return {
        "bucket": s3.bucket_exists(made["bucket"]),
        "experiment": _experiment_active(ep.mlflow_url, made["experiment"]),
        "deployments": len(
            _prefect(
                ep.prefect_api_url,
                "/deployments/filter",
                {"deployments": {"tags": {"all_": [f"episode:{episode}"]}}},
            )
        ),
        "variables": len(
            [
                v
                for v in _prefect(
                    ep.prefect_api_url, "/variables/filter", {"variables": {"name": {"like_": episode}}}
                )
                if episode in v["name"]
            ]
        ),
        "toxics": len(toxics),
    }


def _wait_healthy(backend: LocalBackend, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not backend.is_alive():
        assert time.monotonic() < deadline, backend.status()
        time.sleep(1)


@pytest.mark.skipif(not cgroups_available(), reason="job cgroups need root and cgroup v1")
def test_sigkilled_episode_on_a_shared_sandbox_leaves_nothing_after_one_gc(sandbox: LocalBackend) -> None:
    proc, made = _play_until_ready(sandbox.name, own=False)
    try:
        owner_pid = int(made["owner"].split("-")[0])
        assert owner_pid == proc.pid
        # What there is before the crash: the job runs in its cgroups, the tracker is down, the toxic is on.
        assert made["job_pids"] and all(psutil.pid_exists(p) for p in made["job_pids"])
        assert made["cgroups"] and all(Path(d).is_dir() for d in made["cgroups"])
        before = _what_the_episode_has(sandbox, made)
        assert before["bucket"] and before["deployments"] > 0 and before["experiment"] is None, before
        assert before["variables"] > 0 and before["toxics"] > 0, before
        assert "mlflow" in [s.name for s in sandbox.status() if s.state == "stopped"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    journal = Path(sandbox.dir) / "faults" / f"{proc.pid}-"
    had_journal = any(p.name.startswith(journal.name) for p in (Path(sandbox.dir) / "faults").glob("*.json"))

    items = collect_garbage_report()

    # (A garbage collection of another test session may have done part of it first.)
    if had_journal:
        kinds = {i.kind for i in items if i.sandbox == sandbox.name}
        assert {"bucket", "experiment", "flows", "config", "fault", "service"} <= kinds, items
    assert all(i.ok for i in items), [i for i in items if not i.ok]
    assert _owner_processes(made["owner"]) == []
    assert _episode_processes(made["episode"]) == []
    assert not any(Path(d).exists() for d in made["cgroups"])
    assert _owner_cgroups(sandbox.name, proc.pid) == []
    _wait_healthy(sandbox)  # the tracker the episode killed is running again
    after = _what_the_episode_has(sandbox, made)
    assert after == {"bucket": False, "experiment": False, "deployments": 0, "variables": 0, "toxics": 0}, (
        after
    )
    assert not any(p.name.startswith(journal.name) for p in (Path(sandbox.dir) / "faults").glob("*.json"))


@pytest.fixture
def own_sandbox_name() -> Iterator[str]:
    name = f"crash{os.getpid()}-{uuid.uuid4().hex[:6]}"
    yield name
    LocalBackend(name).down()


@pytest.mark.slow
@pytest.mark.skipif(not cgroups_available(), reason="job cgroups need root and cgroup v1")
def test_sigkilled_env_that_owns_its_sandbox_leaves_nothing_after_one_gc(own_sandbox_name: str) -> None:
    backend = LocalBackend(own_sandbox_name)
    proc, made = _play_until_ready(own_sandbox_name, own=True)
    try:
        assert made["cgroups"] and all(Path(d).is_dir() for d in made["cgroups"])
        assert backend.dir.is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # What the crash leaves until a collection: the services, the job and its cgroups.
    assert _owner_cgroups(own_sandbox_name, proc.pid)

    items = collect_garbage_report()

    mine = [i for i in items if i.sandbox and own_sandbox_name in i.sandbox]
    assert (
        any(i.kind == "sandbox" and "owner process" in i.detail for i in mine) or not backend.dir.exists()
    ), items
    assert all(i.ok for i in items), [i for i in items if not i.ok]
    assert not backend.dir.exists()
    assert _owner_processes(made["owner"]) == []
    assert not [p for p in psutil.process_iter() if _marker(p) == own_sandbox_name]
    assert not any(Path(d).exists() for d in made["cgroups"])
    assert _owner_cgroups(own_sandbox_name, proc.pid) == []
    assert not any((root / own_sandbox_name).exists() for root in cgroup_layout.find_roots())


def _marker(p: psutil.Process) -> str | None:
    try:
        return p.environ().get("MLSANDBOX_SANDBOX")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None
