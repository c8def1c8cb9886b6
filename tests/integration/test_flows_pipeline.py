"""Pipelines on the sandbox's real Prefect server and worker: failing flow runs with Prefect's own states
and logs, and the scripted solution of the built-in scenario "pipeline failure: find the broken upstream
and recover the run"."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.helpers import ok

from mlsandbox.gateway.dispatcher import Gateway
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services

SCENARIO = "pipeline-failure-upstream"
TERMINAL = ("Completed", "Failed", "Crashed", "Cancelled")


def _finished(gw: Gateway, fr: str, timeout: float = 240) -> dict[str, Any]:
    """Wait (with the agent's own actions) until the flow run is in a final state."""
    deadline = time.monotonic() + timeout
    while True:
        run = ok(gw, {"type": "get_flow_run", "flow_run_id": fr, "log_lines": 200})
        if run["state"] in TERMINAL or time.monotonic() > deadline:
            return run
        ok(gw, {"type": "wait", "seconds": 15})


def _logged(gw: Gateway, fr: str, text: str, timeout: float = 60) -> str:
    """The flow run's log line holding ``text``, read with the agent's own actions: Prefect's run logger
    ships its lines in batches, so a line can reach the server a few seconds after the run's final
    state. "" when it has not arrived within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        run = ok(gw, {"type": "get_flow_run", "flow_run_id": fr, "log_lines": 200})
        found = [line for line in run["logs"] if text in line]
        if found or time.monotonic() > deadline:
            return found[0] if found else ""
        ok(gw, {"type": "wait", "seconds": 3})


@pytest.fixture()
def gw(runtime: Any, sandbox: Any) -> Any:
    g = Gateway(runtime, load_builtin(SCENARIO), sandbox=sandbox.name)
    g.start()
    yield g
    g.close()


def test_pipeline_failure_scenario_scripted_solution(gw: Gateway, runtime: Any) -> None:
    flows = ok(gw, {"type": "list_flows"})
    assert {f["name"] for f in flows["flows"]} == {"ingestion", "training", "batch-scoring"}
    assert [r["flow_run_id"] for r in flows["runs"]] == ["fr-1", "fr-2"]
    assert {"lake/customers/2026-11-26.parquet", "upstream/customers/2026-11-28.csv"} <= set(
        gw.state.datasets
    )

    # 1. Both of last night's runs failed for real: Prefect's failed state, message and logs.
    schema = _finished(gw, "fr-1")
    assert schema["state"] == "Failed", schema
    assert "schema check failed" in schema["message"]
    assert any("missing required column(s) ['tenure_months']" in line for line in schema["logs"])
    assert any("unexpected column(s) ['tenure_mo']" in line for line in schema["logs"])
    tasks = {t["task"].split("-")[0]: t["state"] for t in schema["task_runs"]}
    assert tasks.items() >= {"pull": "Completed", "validate": "Failed"}.items(), tasks
    missing = _finished(gw, "fr-2")
    assert missing["state"] == "Failed"
    assert any("NoSuchKey" in line for line in missing["logs"]), missing["logs"][-5:]
    assert any("upstream object upstream/customers/2026-11-29.csv is missing" in m for m in missing["logs"])

    # 2. The upstream inspected: the 28th's batch renamed a column.
    profile = ok(gw, {"type": "check_data_quality", "dataset": "upstream/customers/2026-11-28.csv"})
    assert "tenure_mo" in profile["profile"]["column_profiles"]

    # 3. Recover: the late batch arrives (at step 3): retry its run; re-run the 28th with the mapping.
    assert gw.state.step >= 3 and "upstream/customers/2026-11-29.csv" in gw.state.datasets
    retried = ok(gw, {"type": "retry_flow_run", "flow_run_id": "fr-2"})
    assert retried["previous_state"] == "Failed" and retried["state"] != "Failed"
    fixed = ok(
        gw,
        {
            "type": "run_flow",
            "name": "ingestion",
            "parameters": {
                "dataset": "customers",
                "batch": "2026-11-28",
                "rename": {"tenure_mo": "tenure_months"},
            },
        },
    )
    assert fixed["flow_run_id"] == "fr-3"
    again = _finished(gw, "fr-2")
    assert again["state"] == "Completed" and again["run_count"] >= 2, again
    assert _finished(gw, "fr-3")["state"] == "Completed"
    lake = sorted(k for k in gw.state.datasets if k.startswith("lake/customers/"))
    assert lake == [f"lake/customers/2026-11-{d}.parquet" for d in (26, 27, 28, 29)]

    # 4. Train -> evaluate -> register through the training pipeline.
    started = ok(
        gw,
        {
            "type": "run_flow",
            "name": "training",
            "parameters": {"dataset": "customers", "model_name": "churn"},
        },
    )
    trained = _finished(gw, started["flow_run_id"], timeout=300)
    assert trained["state"] == "Completed", trained["logs"][-10:]
    assert "evaluation gate passed" in _logged(gw, started["flow_run_id"], "evaluation gate passed")
    versions = ok(gw, {"type": "get_model_versions", "name": "churn"})["versions"]
    assert [v["version"] for v in versions] == [1]
    ok(gw, {"type": "set_model_alias", "name": "churn", "version": 1, "alias": "production"})

    res = gw.step({"type": "submit"})
    assert res.terminated and res.info["grade"]["success"], res.info["grade"]
    deployment_name = f"ep-{gw.state.episode_id}"
    gw.close()
    from mlsandbox.backends.common.prefect import PrefectPipelines

    api = PrefectPipelines(runtime.endpoints.prefect_api_url)
    try:
        left = api._client.read_deployments()
        assert all(d.name != deployment_name for d in left)
    finally:
        api.close()


def test_flow_parameters_are_checked_and_runs_are_per_episode(
    gw: Gateway, runtime: Any, sandbox: Any
) -> None:
    bad = gw.step(
        {"type": "run_flow", "name": "ingestion", "parameters": {"dataset": "customers"}}
    ).observation
    assert bad["error"]["code"] == "invalid_parameters" and "batch" in bad["error"]["message"]
    bad = gw.step(
        {
            "type": "run_flow",
            "name": "ingestion",
            "parameters": {"dataset": "customers", "batch": "x", "bucket": "b"},
        }
    ).observation
    assert bad["error"]["code"] == "invalid_parameters" and "bucket" in bad["error"]["message"]
    started = ok(
        gw, {"type": "run_flow", "name": "ingestion", "parameters": {"dataset": "customers", "batch": "x"}}
    )
    bad = gw.step({"type": "retry_flow_run", "flow_run_id": started["flow_run_id"]}).observation
    assert bad["error"]["code"] == "conflict"  # not finished yet
    other = Gateway(runtime, load_builtin("tabular-quality-basic"), sandbox=sandbox.name)
    other.start()
    try:
        obs = other.step({"type": "get_flow_run", "flow_run_id": "fr-1"}).observation
        assert obs["error"]["code"] == "not_found"
        assert ok(other, {"type": "list_flows"})["runs"] == []
    finally:
        other.close()
