"""Lifecycle limits for real: model-server replicas under their machine's kernel limits, named Python
environments for deployments and flows, flow runs charged in credits, the training flow's completeness
check, and the rlimit fallback of the compute pool."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pytest
from tests.helpers import err, ok

from mlsandbox.backends.local.jobs import (
    LIMITS_ENV,
    OWNER_ENV,
    LocalJobs,
    cgroups_available,
    remove_stale_cgroups,
    sandbox_cgroup_dirs,
)
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.compute import ComputePool, Machine
from mlsandbox.scenario.models import Budget, Scenario
from mlsandbox.world import compute as P

pytestmark = pytest.mark.services

OLD_SKLEARN = "1.5.2"
ENV = "sklearn-15"  # the same requirement set as test_environment_conflict: built once, from uv's cache
SMALL = Machine(name="cpu-small", cpus=1, memory_mb=2048, credits_per_second=0.05)
TIGHT = Machine(name="cpu-tight", cpus=0.5, memory_mb=640, credits_per_second=0.02)
LIBRARY_ERRORS = (
    "skops.io.exceptions.",
    "UntrustedTypesFoundException",
    "AttributeError",
    "ModuleNotFoundError",
    "ValueError",
    "TypeError",
)
TERMINAL = ("Completed", "Failed", "Crashed", "Cancelled")


def wait_job(gw: Gateway, job_id: str, timeout: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gw.episode.refresh_jobs()
        if gw.state.jobs[job_id].state in ("succeeded", "failed", "cancelled"):
            return ok(gw, {"type": "get_job", "job_id": job_id})
        time.sleep(0.5)
    raise AssertionError(f"{job_id} did not finish")


def train_and_register(gw: Gateway, name: str, environment: str | None = None) -> str:
    action: dict[str, Any] = {
        "type": "train_model",
        "dataset": "raw/customers.parquet",
        "algorithm": "gradient_boosting",
    }
    if environment is not None:
        action["environment"] = environment
    done = wait_job(gw, ok(gw, action)["job_id"])
    assert done["state"] == "succeeded", done.get("log_tail")
    return str(ok(gw, {"type": "register_model", "run_id": done["run_id"], "name": name})["version"])


def replicas(gw: Gateway, deployment: str) -> list[Any]:
    from mlsandbox.gateway.packs.serving.handlers import ServingState

    world = gw.episode.pack_state(ServingState).world
    assert world is not None
    return list(world.serving.deployments.get(deployment).replicas)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------- serving


@pytest.fixture(scope="module")
def gw(runtime: Any, sandbox: Any) -> Iterator[Gateway]:
    sc = load_builtin("tabular-quality-basic").model_copy(
        update={
            "compute": ComputePool(machines=[SMALL, TIGHT]),
            "max_steps": 300,
            "budget": Budget(credits=5000, max_job_seconds=900),
        }
    )
    g = Gateway(runtime, sc, seed=7, sandbox=sandbox.name)
    g.start()
    try:
        yield g
    finally:
        g.close()


@pytest.fixture(scope="module")
def model(gw: Gateway) -> str:
    """churn version 1, trained in the sandbox's own environment (the current scikit-learn)."""
    return train_and_register(gw, "churn")


@pytest.mark.skipif(not cgroups_available(), reason="replica cgroups need root and cgroup v1")
def test_replicas_run_in_cgroups_with_the_machine_limits_and_an_oom_kill_shows(
    gw: Gateway, model: str, sandbox: Any
) -> None:
    dep = ok(
        gw,
        {
            "type": "deploy_model",
            "name": "churn",
            "version": model,
            "machine": TIGHT.name,
            "deployment": "tight",
        },
    )
    assert dep["replicas_up"] == 1 and dep["limits"] == {"cpus": 0.5, "memory_mb": TIGHT.memory_mb}
    (replica,) = replicas(gw, "tight")
    cg = replica.cgroup
    assert cg is not None
    # The kernel's own knobs: memory without swap, CPU quota of half a CPU per 100 ms period.
    assert int((cg.memory / "memory.limit_in_bytes").read_text()) == TIGHT.memory_mb << 20
    memsw = cg.memory / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        assert int(memsw.read_text()) == TIGHT.memory_mb << 20
    assert int((cg.cpu / "cpu.cfs_quota_us").read_text()) == 50_000
    assert int((cg.cpu / "cpu.cfs_period_us").read_text()) == 100_000
    assert replica.record.pid in cg.pids()  # the server itself (the shim exec'd into it)
    # Where `mlsandbox gc` looks: under the sandbox's job cgroups, owner-marked like jobs.
    assert cg.memory.parent.parent == sandbox_cgroup_dirs(sandbox.name)[0]  # <sandbox>/<owner>/<replica>
    assert OWNER_ENV in psutil.Process(replica.record.pid).environ()

    # A client sends a batch far bigger than the replica's memory: the kernel kills it.
    holdout = gw.state.ground_truth.holdouts["customers"].drop(columns=["label"]).head(50)
    rows = holdout.astype(object).where(holdout.notna(), None).values.tolist()
    body = orjson.dumps({"dataframe_split": {"columns": list(holdout.columns), "data": rows * 20_000}})
    assert len(body) > 40 << 20
    with pytest.raises(httpx.HTTPError):
        httpx.post(replica.url + "/predict", content=body, timeout=120).raise_for_status()
    deadline = time.monotonic() + 30
    while replica.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    got = ok(gw, {"type": "get_deployment", "deployment": "tight"})
    assert got["replicas_up"] == 0, got
    state = got["replica_states"][0]
    assert state["state"] == "exited" and state["exit_code"] == 137, state
    assert state["reason"] == "OOMKilled" and f"{TIGHT.memory_mb} MiB" in state["message"], state

    # Scaling replaces the dead replica (its cgroup goes with it); undeploy removes the rest.
    ok(gw, {"type": "scale", "deployment": "tight", "replicas": 1})
    assert not cg.memory.exists() and not cg.cpu.exists()
    (fresh,) = replicas(gw, "tight")
    assert fresh.alive() and fresh.cgroup is not None
    ok(gw, {"type": "undeploy", "deployment": "tight"})
    assert not fresh.cgroup.memory.exists() and not fresh.cgroup.cpu.exists()
    remove_stale_cgroups(sandbox.name)  # what gc runs: nothing of this deployment is left to remove


def test_replicas_under_rlimits_when_cgroups_are_not_used(
    runtime: Any, sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIMITS_ENV, "rlimit")
    sc = load_builtin("tabular-quality-basic").model_copy(
        update={"compute": ComputePool(machines=[SMALL, TIGHT]), "max_steps": 50}
    )
    g = Gateway(runtime, sc, seed=8, sandbox=sandbox.name)
    g.start()
    try:
        version = train_and_register(g, "churn")
        ok(g, {"type": "deploy_model", "name": "churn", "version": version, "machine": SMALL.name})
        (replica,) = replicas(g, "churn")
        assert replica.cgroup is None
        limits = Path(f"/proc/{replica.record.pid}/limits").read_text()
        data = next(line for line in limits.splitlines() if line.startswith("Max data size"))
        assert data.split()[3:5] == [str(SMALL.memory_mb << 20)] * 2, data
        space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert int(space.split()[3]) == (SMALL.memory_mb + 768) << 20, space
    finally:
        g.close()


# -------------------------------------------------------------------------------------- environments


def test_deployment_in_an_environment_serves_its_models_and_fails_on_another_release(
    gw: Gateway, model: str
) -> None:
    ok(gw, {"type": "create_environment", "name": ENV, "requirements": [f"scikit-learn=={OLD_SKLEARN}"]})
    # A model made by the current release does not load under the old one: the library's own error.
    e = err(
        gw,
        {"type": "deploy_model", "name": "churn", "version": model, "environment": ENV, "deployment": "old"},
    )
    assert e["code"] == "deploy_failed" and f"in environment {ENV!r}" in e["message"], e
    assert any(name in e["message"] for name in LIBRARY_ERRORS), e["message"]
    assert "old" not in [d["deployment"] for d in ok(gw, {"type": "get_deployment"})["deployments"]]

    # A model made in the environment is served from it, by its interpreter.
    old = train_and_register(gw, "churn-old", environment=ENV)
    dep = ok(gw, {"type": "deploy_model", "name": "churn-old", "version": old, "environment": ENV})
    assert dep["environment"] == ENV and dep["replicas_up"] == 1
    (replica,) = replicas(gw, "churn-old")
    proc = psutil.Process(replica.record.pid)
    assert "/envs/" in proc.cmdline()[0], proc.cmdline()
    # scikit-learn's compiled modules are mapped from the environment's site-packages, not ours.
    mapped = [m.path for m in proc.memory_maps() if "sklearn" in m.path]
    assert mapped and all("/envs/" in path for path in mapped), mapped[:3]
    holdout = gw.state.ground_truth.holdouts["customers"].drop(columns=["label"]).head(5)
    rows = [{k: (None if v != v else v) for k, v in r.items()} for r in holdout.to_dict("records")]
    out = ok(gw, {"type": "predict", "deployment": "churn-old", "instances": rows})
    assert out["status"] == 200 and len(out["predictions"]) == 5, out
    ok(gw, {"type": "undeploy", "deployment": "churn-old"})
    obs = gw.step(
        {"type": "deploy_model", "name": "churn", "version": model, "environment": "nope"}
    ).observation
    assert obs["error"]["code"] == "not_found" and "create_environment" in obs["error"]["message"]


# -------------------------------------------------------------------------------------------- flows


def _flow_scenario() -> Scenario:
    """pipeline-failure-upstream with every batch already in the lake, no runs of the past."""
    data = load_builtin("pipeline-failure-upstream").model_dump(mode="json")
    data["pipelines"]["upstream"] = [
        {"dataset": "customers", "batch": b, "ingested": True} for b in ("2026-11-26", "2026-11-27")
    ]
    data["pipelines"]["start_runs"] = []
    data["budget"]["credits"] = 5000
    data["max_steps"] = 200
    return Scenario.model_validate(data)


def finished(gw: Gateway, fr: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = ok(gw, {"type": "get_flow_run", "flow_run_id": fr, "log_lines": 200})
        if run["state"] in TERMINAL or time.monotonic() > deadline:
            return run
        ok(gw, {"type": "wait", "seconds": 10})


def charged(gw: Gateway, fr: str, timeout: float = 60) -> dict[str, Any]:
    """The run (as get_flow_run shows it) once its usage is charged: its last log lines arrive shortly
    after its final state; the pack's step hook picks them up (polled here without spending steps)."""
    from mlsandbox.gateway.packs.flows import handlers as flows_impl

    deadline = time.monotonic() + timeout
    while (
        gw.episode.pack_state(flows_impl.FlowsState).runs[fr].usage_lines == 0 and time.monotonic() < deadline
    ):
        flows_impl.on_step(gw.episode)
        time.sleep(1)
    return ok(gw, {"type": "get_flow_run", "flow_run_id": fr, "log_lines": 5})


def test_flows_in_an_environment_and_flow_runs_are_charged(runtime: Any, sandbox: Any) -> None:
    g = Gateway(runtime, _flow_scenario(), seed=4, sandbox=sandbox.name)
    g.start()
    try:
        ok(g, {"type": "create_environment", "name": ENV, "requirements": [f"scikit-learn=={OLD_SKLEARN}"]})
        e = err(
            g,
            {
                "type": "run_flow",
                "name": "ingestion",
                "parameters": {"dataset": "customers", "batch": "2026-11-26"},
                "environment": ENV,
            },
        )
        assert e["code"] == "invalid_parameters" and "training" in e["message"]
        used0 = g.budget()["credits_used"]

        train = {
            "type": "run_flow",
            "name": "training",
            "parameters": {"dataset": "customers", "model_name": "churn"},
        }
        in_env = ok(g, {**train, "environment": ENV})
        assert in_env["environment"] == ENV
        run = finished(g, in_env["flow_run_id"])
        assert run["state"] == "Completed", run["logs"][-15:]
        assert any("training with " in line and "/envs/" in line for line in run["logs"]), run["logs"][-15:]
        here = finished(g, ok(g, train)["flow_run_id"])
        assert here["state"] == "Completed", here["logs"][-15:]

        # The environment's model scores there; the current release's model fails there, for real.
        score = {"type": "run_flow", "name": "batch-scoring", "environment": ENV}
        params = {"dataset": "customers", "batch": "2026-11-26", "model_name": "churn"}
        good = finished(g, ok(g, {**score, "parameters": {**params, "version": 1}})["flow_run_id"])
        assert good["state"] == "Completed", good["logs"][-15:]
        fr_bad = ok(g, {**score, "parameters": {**params, "version": 2}})["flow_run_id"]
        bad = finished(g, fr_bad)
        assert bad["state"] == "Failed", bad["logs"][-15:]
        assert "scoring failed in the environment" in (bad["message"] or "") or any(
            "scoring failed in the environment" in line for line in bad["logs"]
        ), bad
        # Its last log lines (the library's traceback) reach the server shortly after its final state.
        deadline = time.monotonic() + 60
        while not any(any(n in line for n in LIBRARY_ERRORS) for line in bad["logs"]):
            if time.monotonic() > deadline:
                break
            time.sleep(2)
            bad = ok(g, {"type": "get_flow_run", "flow_run_id": fr_bad, "log_lines": 200})
        assert any(any(n in line for n in LIBRARY_ERRORS) for line in bad["logs"]), bad["logs"][-15:]

        # Every run is charged its CPU seconds at the budget's price, failed ones too.
        price = g.scenario.budget.credits_per_cpu_second
        runs = [charged(g, f"fr-{i}") for i in range(1, 5)]
        for r in runs:
            assert r["cpu_seconds"] > 0, r
            assert abs(r["credits"] - round(r["cpu_seconds"] * price, 4)) < 1e-3, r
        total = sum(r["credits"] for r in runs)
        assert abs(g.state.charges.flow_credits - total) < 0.01
        # ... and the budget the agent sees includes them.
        assert g.budget()["credits_used"] - used0 >= total - 0.01
        obs = g.step({"type": "list_flows"}).observation
        # The observation rounds credits to 3 decimals; the runs' sum is not rounded.
        assert obs["budget"]["credits_used"] >= total - 1e-3
    finally:
        g.close()


def test_training_flow_refuses_to_run_before_the_upstream_is_repaired(runtime: Any, sandbox: Any) -> None:
    g = Gateway(runtime, load_builtin("pipeline-failure-upstream"), sandbox=sandbox.name)
    g.start()
    try:
        started = ok(
            g,
            {
                "type": "run_flow",
                "name": "training",
                "parameters": {"dataset": "customers", "model_name": "churn"},
            },
        )
        run = finished(g, started["flow_run_id"], timeout=300)
        assert run["state"] == "Failed", run
        assert "completeness check failed" in (run["message"] or "") or any(
            "completeness check failed" in line for line in run["logs"]
        ), run["logs"][-10:]
        assert any(
            "completeness check failed" in line and "2026-11-28" in line and "2026-11-29" in line
            for line in run["logs"]
        ), run["logs"][-10:]
        tasks = [t["task"] for t in run["task_runs"]]
        assert tasks and all(t.startswith("load-lake") for t in tasks), tasks  # it stopped before training
        # Nothing was registered.
        assert err(g, {"type": "get_model_versions", "name": "churn"})["code"] == "not_found"
    finally:
        g.close()


# -------------------------------------------------------------------------------------- compute pool


def test_a_pool_job_under_rlimits_cannot_allocate_past_its_machine_memory(
    runtime: Any, sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIMITS_ENV, "rlimit")
    jobs = LocalJobs(sandbox.dir, sandbox.name, runtime.endpoints)
    assert jobs.limits == "rlimit"
    tiny = Machine(name="cpu-tiny", cpus=0.5, memory_mb=256, credits_per_second=0.1)
    pool = P.Pool(ComputePool(machines=[tiny]), jobs, clock=runtime.clock)
    label = ("mlsandbox.test", "rlimit-oom")
    over = JobSpec(
        job_id="rlimit-oom-1",
        workload="burn",
        args=["--mem-mb", "600", "--sleep", "5"],
        cpus=tiny.cpus,
        memory_mb=tiny.memory_mb,
        labels={label[0]: label[1], P.MACHINE_LABEL: tiny.name},
    )
    under = over.model_copy(update={"job_id": "rlimit-ok-1", "args": ["--mem-mb", "100"]})
    try:
        pool.submit(over)
        pool.submit(under)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            pool.get(j).state not in ("succeeded", "failed", "cancelled") for j in (over.job_id, under.job_id)
        ):
            time.sleep(0.2)
        failed, fine = pool.get(over.job_id), pool.get(under.job_id)
        assert failed.state == "failed" and failed.exit_code == 1, failed
        log = pool.logs(over.job_id, tail=0)
        assert "MemoryError" in log and "allocated 600 MiB" not in log, log[-500:]
        assert fine.state == "succeeded", pool.logs(under.job_id)
    finally:
        pool.cleanup(label)
