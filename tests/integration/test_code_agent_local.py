"""The code-writing baseline (``--agent code``) through the normal episode runner on local: it writes its
script from the data's profile, runs it in the workspace, retries a job a real deadline killed, and
delivers either a registered model or, for a ``predictions_file`` goal, a predictions file."""

from __future__ import annotations

from typing import Any

import pytest

from mlsandbox.agents.code_agent import CodeAgent
from mlsandbox.agents.runner import run_episode
from mlsandbox.backends.local.workspaces import unavailable_reason
from mlsandbox.env import MLSandboxEnv
from mlsandbox.scenario import Scenario, load_builtin

pytestmark = [
    pytest.mark.services,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


def _play(sandbox: Any, sc: Scenario) -> Any:
    env = MLSandboxEnv(sc, sandbox=sandbox.name, start_sandbox=False)
    try:
        return run_episode(env, CodeAgent(sc.seed), seed=sc.seed, scenario=sc)
    finally:
        env.close()


def test_the_code_agent_retries_a_job_killed_by_a_deadline_and_succeeds(sandbox: Any) -> None:
    res = _play(sandbox, load_builtin("churn-deadline-outliers"))
    actions = [s.observation.get("action") for s in res.steps]
    states = [
        s.observation["result"].get("state") for s in res.steps if s.observation.get("action") == "get_job"
    ]
    assert actions.count("run_python") == 2 and "failed" in states, actions
    script = next(s.action["content"] for s in res.steps if s.observation.get("action") == "write_file")
    assert "IMPUTE_INDICATORS, CLIP_OUTLIERS, BALANCED = False, True, False" in script  # outliers, no gaps
    finished = [s.observation["result"] for s in res.steps if s.observation.get("action") == "get_job"]
    # Its CPU seconds are the sandbox's processes' (its cgroup), not the first process's few milliseconds.
    assert max(r.get("cpu_seconds") or 0.0 for r in finished if r.get("state") == "succeeded") > 1.0
    assert res.success, res.grade


def test_the_code_agent_delivers_a_predictions_file_graded_on_the_holdout(sandbox: Any) -> None:
    base = load_builtin("tabular-quality-basic").model_dump(mode="json")
    base["goal"] = {"type": "predictions_file", "dataset": "customers", "path": "out/predictions.csv",
                    "metric": "roc_auc", "threshold": 0.75}  # fmt: skip
    # Room for a slow, shared machine: what is tested is the file's path from the script to the grade.
    base["max_steps"], base["budget"] = 60, {**base["budget"], "credits": 300, "max_job_seconds": 900}
    res = _play(sandbox, Scenario.model_validate(base))
    actions = [s.observation.get("action") for s in res.steps]
    assert "register_model" not in actions, actions
    logs = [s.observation.get("result") for s in res.steps if s.observation.get("action") == "get_logs"]
    assert res.success, (res.grade["reason"], logs)
    assert res.grade["predictions_file"] == "out/predictions.csv" and res.grade["holdout_metric"] >= 0.75
