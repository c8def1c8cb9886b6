"""Families of the forecasting and text kinds on the sim backend, through real fits: the reference agent
succeeds from what it observes, the random and do-nothing agents fail."""

from __future__ import annotations

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

FAMILIES = (
    "forecast-store-sales-late-data",
    "forecast-demand-level-shift",
    "text-support-ticket-routing",
    "text-clinical-notes-drift",
    "forecast-web-visits-basic",
    "forecast-warehouse-tracker-outage",
    "text-ticket-triage-slow-lake",
    "text-clinical-notes-tracker-outage",
)


def _grade(scenario: str, agent: str, seed: int = 0) -> dict[str, object]:
    env = MLSandboxEnv(scenario, backend="sim", sandbox="sim-kinds2")
    try:
        res = run_episode(env, make_agent(agent, seed=seed), seed=seed)
    finally:
        env.close()
    assert res.grade is not None
    return res.grade


@pytest.mark.parametrize("scenario", FAMILIES)
def test_reference_succeeds_and_random_and_do_nothing_fail(scenario: str) -> None:
    reference = _grade(scenario, load_builtin(scenario).reference_agent)
    assert reference["success"], reference
    for agent in ("random", "do-nothing"):
        grade = _grade(scenario, agent)
        assert not grade["success"], (agent, grade)


def test_a_preparation_that_does_not_apply_is_the_agents_error_and_writes_nothing() -> None:
    """``drop_unsettled`` on a table whose ingestion column an earlier step removed (``fill_gaps`` writes
    only dates and values) is an ``invalid_parameters`` error that names the column; no dataset appears."""
    env = MLSandboxEnv("forecast-web-visits-basic", backend="sim", sandbox="sim-kinds2-prep")
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(
            {"type": "clean_dataset", "dataset": "raw/visits.csv", "strategy": "fill_gaps"}
        )
        assert info["error"] is None, info
        assert env.gateway is not None
        before = set(env.gateway.episode.state.datasets)
        _, _, _, _, info = env.step(
            {
                "type": "clean_dataset",
                "dataset": "clean/visits-fill-gaps.parquet",
                "strategy": "drop_unsettled",
            }
        )
        assert info["error"] == "invalid_parameters", info
        error = (env.last_observation or {})["error"]
        assert error["code"] == "invalid_parameters" and "ingested_at" in error["message"], error
        assert set(env.gateway.episode.state.datasets) == before
    finally:
        env.close()
