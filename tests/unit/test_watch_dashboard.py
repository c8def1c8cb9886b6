"""The episode dashboard replayed from audit records (what `mlsandbox watch` shows), without services."""

from __future__ import annotations

import json
from pathlib import Path

from mlsandbox.env.dashboard import from_audit, latest_episode, read_audit, render_dashboard


def _step(step: int, action: str, result: dict | None, *, ok: bool = True, error: dict | None = None,
          grade: dict | None = None, used: float = 0.0) -> dict:  # fmt: skip
    info = {"reward_components": {"step_cost": -0.02}, "invalid_actions": 0 if ok else 1}
    if grade is not None:
        info["grade"] = grade
    obs = {"step": step, "ok": ok, "action": action, "result": result, "error": error,
           "budget": {"credits": 60, "credits_used": used, "steps_left": 30 - step}}  # fmt: skip
    return {"event": "step", "episode": "7-abc", "observation": obs, "info": info, "reward": -0.02}


RECORDS = [
    {"event": "start", "episode": "7-abc", "scenario": "tabular-quality-basic", "seed": 7},
    _step(1, "train_model", {"job_id": "job-1", "state": "running", "dataset": "raw/c.csv", "algorithm": "random_forest"}),
    _step(2, "wait", {"jobs": [{"job_id": "job-1", "state": "failed"}]}, used=50.0),
    _step(3, "register_model", None, ok=False, error={"code": "not_found", "message": "run x does not exist"}, used=50.0),
    _step(4, "register_model", {"name": "churn", "version": "1", "run_id": "r"}),
]  # fmt: skip


def test_replay_shows_jobs_models_alerts_budget_and_reward() -> None:
    d = from_audit(RECORDS[:4], [("minio", "running"), ("mlflow", "stopped")])
    text = render_dashboard(d)
    assert text.splitlines()[0] == "scenario tabular-quality-basic  episode 7-abc  step 3/30  (running)"
    assert "services  minio:running  mlflow:stopped" in text
    assert "  job-1    failed     random_forest" in text
    assert "last      register_model: ERROR not_found: run x does not exist" in text
    alerts = next(line for line in text.splitlines() if line.startswith("alerts"))
    assert "service mlflow is stopped" in alerts and "job-1 failed" in alerts and "budget 83% spent" in alerts
    assert "reward    step_cost=-0.020" in text and "return    -0.060" in text
    assert text.isascii()
    done = from_audit([*RECORDS, _step(5, "submit", {}, grade={"success": True})])
    assert done.done and done.registered == [("churn", "1")]
    assert "models    churn v1" in render_dashboard(done) and "grade     success=True" in render_dashboard(
        done
    )


def test_audit_files(tmp_path: Path) -> None:
    assert latest_episode(tmp_path / "missing") is None
    log = tmp_path / "7-abc.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in RECORDS) + '\n{"partly written')
    assert len(read_audit(log)) == len(RECORDS)
    assert latest_episode(tmp_path) == log
