"""Data-source and compute-pool faults injected from a scenario's perturbation plan, on the real sandbox:
each symptom is met through the agent's actions, the ground truth is the engine's record, and recovery
(expiry or the agent's mitigation) brings the source or the pool back."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.helpers import err as _err
from tests.helpers import ok as _ok

from mlsandbox.faults.engine import FaultRecord
from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin
from mlsandbox.scenario.models import Scenario

pytestmark = pytest.mark.services


def _start(runtime: Any, sandbox: Any, scenario: str, plan: list[dict[str, Any]], **extra: Any) -> Gateway:
    data = load_builtin(scenario).model_dump()
    data.update(perturbations=plan, **extra)
    gw = Gateway(runtime, Scenario.model_validate(data), sandbox=sandbox.name)
    gw.start()
    return gw


def _record(gw: Gateway, name: str) -> FaultRecord:
    (rec,) = [r for r in gw.state.ground_truth.faults if isinstance(r, FaultRecord) and r.name == name]
    return rec


def _lake(gw: Gateway) -> dict[str, Any]:
    return next(s for s in _ok(gw, {"type": "list_sources"})["sources"] if s["name"] == "monthly_lake")


def test_plan_lake_faults_hold_back_and_change_batches_until_recovered(runtime: Any, sandbox: Any) -> None:
    # monthly_lake: batches 0-3 at the start, 4 at step 1, 5 at step 2.
    plan = [
        {
            "name": "held-back",
            "when": {"at_step": 1},
            "target": "source:monthly_lake",
            "fault": {"type": "missing_batch", "batch": 5},
            "duration": {"steps": 3},
        },
        {
            "name": "retyped",
            "when": {"at_step": 1},
            "target": "source:monthly_lake",
            "fault": {"type": "schema_change", "batch": 4, "change": "retype", "column": "support_calls"},
        },
    ]
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain", plan)
    try:
        assert [a["batch"] for a in _lake(gw)["arrived"]] == [0, 1, 2, 3, 4]  # step 1
        held, retyped = _record(gw, "held-back"), _record(gw, "retyped")
        assert held.target == "source:monthly_lake" and held.active and retyped.active
        assert _lake(gw)["overdue"] == [5] and held.detected_step == 2  # step 2: batch 5 is due
        err = _err(gw, {"type": "ingest_source", "source": "monthly_lake", "batches": [5]})
        assert err["code"] == "not_found" and "[5]" in err["message"]
        err = _err(gw, {"type": "ingest_source", "source": "monthly_lake", "batches": [0, 4]})
        assert err["code"] == "schema_mismatch" and "support_calls" in err["message"]
        assert retyped.detected_step == 3  # the first ingest from the source addressed it
        # the tick of step 4 ended the hold (3 steps): batch 5 arrived at that step boundary
        lake = _lake(gw)  # step 5
        assert held.recovered_by == "expiry" and held.recovered_step == 4
        assert [a["batch"] for a in lake["arrived"]][-1] == 5 and "overdue" not in lake
        out = _ok(gw, {"type": "ingest_source", "source": "monthly_lake", "batches": [3, 5]})
        assert out["rows"] == 3000
    finally:
        gw.close()
    assert retyped.recovered_by == "episode_end" and not held.active


def test_plan_database_outage_and_rotated_password(runtime: Any, sandbox: Any) -> None:
    plan = [
        {
            "name": "db-down",
            "when": {"at_step": 1},
            "target": "source:history_db",
            "fault": {"type": "database_down"},
            "duration": {"steps": 2},
        },
        {
            "name": "rotated",
            "when": {"at_step": 4},
            "target": "source:history_db",
            "fault": {"type": "rotated_credentials"},
            "recovery": "manual",
        },
    ]
    gw = _start(runtime, sandbox, "data-monthly-drift-retrain", plan)
    try:
        services = runtime.faults.services  # the data-source servers are services of the sandbox too
        err = _err(gw, {"type": "preview_source", "source": "history_db"})  # step 1
        assert err["code"] == "source_unavailable" and "cannot connect" in err["message"]
        down = _record(gw, "db-down")
        assert down.detected_step == 1 and not services.health("postgres").healthy
        _ok(gw, {"type": "wait", "seconds": 0})  # step 2
        rows = _ok(gw, {"type": "preview_source", "source": "history_db", "rows": 2})  # step 3: recovered
        assert (
            len(rows["rows"]) == 2 and down.recovered_by == "expiry" and services.health("postgres").healthy
        )
        err = _err(gw, {"type": "preview_source", "source": "history_db"})  # step 4: rotated
        assert err["code"] == "auth_failed"
        rotated = _record(gw, "rotated")
        assert rotated.detected_step == 4 and rotated.active
        ok = _ok(gw, {"type": "preview_source", "source": "history_db", "refresh_credentials": True})
        assert ok["credentials_refreshed"] and rotated.mitigated_step == 5
        _ok(gw, {"type": "list_sources"})  # step 6: the engine ends the manual fault
        assert rotated.recovered_by == "agent"
    finally:
        gw.close()


def test_plan_pool_shrink_queues_jobs_until_capacity_returns(runtime: Any, sandbox: Any) -> None:
    compute = {
        "machines": [{"name": "cpu-small", "cpus": 1, "memory_mb": 2048, "credits_per_second": 0.5}],
        "capacity_cpus": 2,
        "capacity_memory_mb": 4096,
    }
    plan = [
        {
            "name": "lost-node",
            "when": {"at_step": 1},
            "fault": {"type": "pool_shrink", "cpus": 1.5},
            "duration": {"steps": 3},
        }
    ]
    gw = _start(runtime, sandbox, "tabular-quality-basic", plan, compute=compute)
    try:
        err = _err(gw, {"type": "request_resources", "machine": "cpu-small"})  # step 1
        assert err["code"] == "insufficient_resources" and "0.5 of 2 free" in err["message"]
        train = {
            "type": "train_model",
            "dataset": "raw/customers.parquet",
            "algorithm": "gradient_boosting",
        }
        assert _ok(gw, {**train, "machine": "cpu-small"})["state"] == "queued"  # step 2
        listed = _ok(gw, {"type": "list_machines"})  # step 3
        assert listed["pool"]["unavailable_cpus"] == 1.5 and gw.state.jobs["job-1"].state == "queued"
        rec = _record(gw, "lost-node")
        assert rec.target == "pool" and rec.detected_step == 1 and rec.affected_jobs == ["job-1"]
        job = _ok(gw, {"type": "get_job", "job_id": "job-1"})  # step 4: capacity is back, the job starts
        assert rec.recovered_by == "expiry" and job["state"] in ("running", "succeeded")
        assert _ok(gw, {"type": "list_machines"})["pool"]["unavailable_cpus"] == 0
        deadline = time.monotonic() + 300
        while gw.state.jobs["job-1"].state == "running" and time.monotonic() < deadline:
            _ok(gw, {"type": "wait", "seconds": 10})
        assert gw.state.jobs["job-1"].state == "succeeded"
    finally:
        gw.close()
