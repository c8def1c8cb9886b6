"""The gateway's telemetry in the audit log, without services: real episodes on the in-process ``sim``
backend with its audit log in files (labels and limits in the start record, jobs with their CPU-seconds,
memory and log tail written until they end, registered models, the fault ground truth once the episode is
done), the serving pack's part over the real monitor (metric points between scrapes, only the scrapes since
the previous step, alerts on the runtime's clock), and none of it when the audit log stays in the runtime's
memory. (On a real sandbox, through the console: test_console_browser.)"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import Runtime
from mlsandbox.gateway import Gateway
from mlsandbox.gateway.packs.serving.handlers import ServingState, World
from mlsandbox.gateway.packs.serving.telemetry import interval_point
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.serving import AlertRule, Serving
from mlsandbox.world.serving.monitoring import Alert, Monitor, Snapshot

FAULTS_SCENARIO = "tabular-ops-tracker-outage"


def _snap(t: float, total: float, errors: float, slow: float) -> Snapshot:
    """``total`` requests so far, ``slow`` of them above 0.5 s."""
    buckets = {0.01: total - slow, 0.5: total - slow, float("inf"): total}
    return Snapshot(t, total, errors, buckets, 12.5, 101.0, 2)


def _runtime(tmp_path: Path, name: str = "telemetry") -> Runtime:
    """A sim sandbox whose audit log is files under ``tmp_path`` (readable by a console)."""
    rt: Runtime = get_backend("sim", name, audit_dir=str(tmp_path)).runtime()
    return rt


def _play(gw: Gateway, seed: int) -> None:
    """The scenario's reference agent, to the end of the episode."""
    agent = make_agent(gw.scenario.reference_agent, seed=seed)
    obs = gw.start()
    agent.reset(obs, seed=seed)
    for _ in range(gw.scenario.max_steps):
        res = gw.step(agent.act(obs))
        obs = res.observation
        if res.terminated or res.truncated:
            return
    pytest.fail("the reference agent did not end the episode")


def test_interval_point_is_the_difference_of_two_scrapes() -> None:
    p = interval_point(_snap(10, 100, 1, 0), _snap(12, 300, 11, 100), t0=1000.0)
    assert p["t"] == 1012.0 and p["rps"] == pytest.approx(100.0)
    assert p["error_rate"] == pytest.approx(10 / 200)
    assert p["latency_p50_ms"] is not None and p["latency_p50_ms"] <= 10.0  # half of 200 below 10 ms
    assert p["latency_p99_ms"] == pytest.approx(500.0)  # in +Inf: the highest finite bound
    assert (p["cpu_percent"], p["memory_mb"], p["replicas_up"]) == (12.5, 101.0, 2)
    idle = interval_point(_snap(10, 100, 1, 0), _snap(11, 100, 1, 0), t0=0.0)
    assert idle["rps"] == 0.0 and idle["error_rate"] is None and idle["latency_p50_ms"] is None


def test_an_episode_logs_its_labels_jobs_models_and_ground_truth(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    scenario = load_builtin(FAULTS_SCENARIO)
    gw = Gateway(rt, scenario, seed=7, labels={"interface": "env", "agent": "reference"})
    try:
        _play(gw, 7)
    finally:
        gw.close()
    records = rt.audit.read(gw.state.episode_id)
    start, *steps, close = records
    assert start["event"] == "start" and start["labels"] == {"interface": "env", "agent": "reference"}
    assert (start["title"], start["max_steps"], start["credits"]) == (
        scenario.title,
        scenario.max_steps,
        scenario.budget.credits,
    )
    assert close["event"] == "close" and all(r["event"] == "step" for r in steps)
    telemetry = [r["telemetry"] for r in steps]
    assert all(t["format"] == 1 and isinstance(t["t"], float) for t in telemetry)
    assert [t["t"] for t in telemetry] == sorted(t["t"] for t in telemetry)  # the runtime's clock
    # Jobs: a full row while a job lives and once when it ends, never after.
    rows: dict[str, list[dict[str, Any]]] = {}
    for t in telemetry:
        for row in t.get("jobs", []):
            rows.setdefault(row["job_id"], []).append(row)
    assert rows, "the reference agent trains a model"
    ended = ("succeeded", "failed", "cancelled")
    for job_id, seen in rows.items():
        assert all(r["state"] not in ended for r in seen[:-1]), (job_id, seen)
        assert seen[-1]["state"] in ended, (job_id, seen[-1])
    done = next(seen[-1] for seen in rows.values() if seen[-1]["state"] == "succeeded")
    assert done["run_id"] and done["metrics"]["val_auc"] > 0.5 and done["cpu_seconds"] > 0
    assert done["log_tail"] and all(len(line) <= 300 for line in done["log_tail"])
    # The registered model, and the ground truth once the episode is done (only in the last step).
    assert telemetry[-1]["models"] == [{"name": n, "version": v} for n, v in gw.state.registered]
    assert [("faults" in t) for t in telemetry] == [False] * (len(telemetry) - 1) + [True]
    injected = [f["name"] for f in telemetry[-1]["faults"]]
    assert injected == [f["name"] for f in close["faults"]] and len(injected) == len(scenario.perturbations)
    assert "serving" not in telemetry[-1]  # no serving action: nothing from the serving pack


def test_serving_telemetry_writes_new_scrapes_and_alerts_on_the_runtime_clock(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, "serving")
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3, labels={"interface": "http"})
    gw.start()
    try:
        spec = Serving(dataset="d", traffic=None, alerts=[AlertRule(name="Slow", metric="rps", threshold=1)])
        serving = rt.serving.open(gw.state.episode_id, dict([gw.state.job_label]))
        monitor = Monitor(spec, serving, gw.state.serving, rt.clock, production="churn")
        gw.episode.pack_state(ServingState).world = World(spec, serving, monitor)
        monitor.series["churn"] = deque([_snap(1, 0, 0, 0), _snap(2, 50, 0, 0)])
        monitor.alerts.append(Alert("alert-1", "Slow", "churn", "rps", ">", 1, "page", 1.5, 25.0))
        first = gw.telemetry.step(gw)["serving"]
        assert first["deployments"] == []  # the backend's views: none deployed
        assert [p["rps"] for p in first["series"]["churn"]] == [50.0]
        assert first["series"]["churn"][0]["t"] == pytest.approx(monitor.t0 + 2)
        alert = first["alerts"][0]
        assert alert["alert_id"] == "alert-1" and alert["started_at"] == pytest.approx(monitor.t0 + 1.5)
        assert alert["resolved_at"] is None
        monitor.series["churn"].extend([_snap(3, 150, 5, 0), _snap(4, 150, 5, 0)])
        second = gw.telemetry.step(gw)["serving"]
        assert [p["rps"] for p in second["series"]["churn"]] == [100.0, 0.0]  # only the new ones
        assert gw.telemetry.step(gw)["serving"]["series"] == {}
    finally:
        gw.close()


def test_an_audit_log_kept_in_memory_gets_no_telemetry() -> None:
    rt = get_backend("sim", "in-memory").runtime()
    gw = Gateway(rt, load_builtin("tabular-quality-basic"), seed=3, labels={"interface": "env"})
    try:
        gw.start()
        gw.step({"type": "list_datasets"})
    finally:
        gw.close()
    assert not gw.telemetry.enabled and gw.telemetry.step(gw) == {} and gw.telemetry.start(gw) == {}
    start, step, _ = rt.audit.read(gw.state.episode_id)
    assert "labels" not in start and "telemetry" not in step
