"""The situation families on local, where their mechanisms are real: a neural network whose loss really
becomes NaN (the trainer's own log line), an object store that really refuses a stale secret
(``SignatureDoesNotMatch``), an API source that really answers 401 to a rotated token, a PostgreSQL
server really stopped. Each family's reference agent solves it, reading what a real service said."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents import make_agent
from mlsandbox.agents.runner import run_episode
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import load_builtin

pytestmark = pytest.mark.services


def _reference_episode(sandbox: Any, family: str) -> tuple[Any, list[dict[str, Any]]]:
    sc = load_builtin(family)
    env = MLSandboxEnv(family, sandbox=sandbox.name, start_sandbox=False)
    try:
        res = run_episode(env, make_agent(sc.reference_agent, seed=sc.seed), seed=sc.seed, scenario=sc)
    finally:
        env.close()
    return res, [s.observation for s in res.steps]


def _text(observations: list[dict[str, Any]]) -> str:
    return "\n".join(str(o.get("result") or "") + str(o.get("error") or "") for o in observations)


def test_diverging_mlp_real_nan_log_then_a_lower_learning_rate_converges(sandbox: Any) -> None:
    res, seen = _reference_episode(sandbox, "churn-diverging-mlp")
    text = _text(seen)
    assert "training diverged" in text and "lower the learning rate" in text
    assert res.success, res.grade


def test_rotated_credentials_real_401_and_signature_mismatch(sandbox: Any) -> None:
    res, seen = _reference_episode(sandbox, "orders-rotated-credentials")
    codes = [(o.get("error") or {}).get("code") for o in seen]
    assert "auth_failed" in codes
    assert "SignatureDoesNotMatch" in _text(seen)
    assert res.success, res.grade


@pytest.mark.latency  # graded on the deployment's SLO: it runs alone, not beside the other lanes
def test_feature_service_down_real_503_then_a_real_restart_on_the_same_address(sandbox: Any) -> None:
    res, seen = _reference_episode(sandbox, "serving-alert-feature-service-down")
    health = [o["result"] for o in seen if o.get("action") == "get_service_health" and o.get("ok")]
    assert any(not h["healthy"] and "HTTP 503" in str(h["error"]) for h in health), health
    restarts = [o for o in seen if o.get("action") == "restart_service"]
    assert restarts and restarts[0]["ok"] and restarts[0]["result"]["healthy"]
    assert res.success, res.grade
    assert res.components["fault_mitigated"] > 0
