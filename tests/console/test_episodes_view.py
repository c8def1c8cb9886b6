"""Episodes from audit logs without services: the incremental index over each sandbox's audit log, the
list's summaries and the episode view's deltas (what a live page merges)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlsandbox.backends.common.audit import FileAuditLog
from mlsandbox.console.episodes import AuditSource, EpisodeIndex, EpisodeSummary, step_view, view_delta


def _step(step: int, action: str, result: dict | None, *, ok: bool = True, reward: float = -0.02,
          telemetry: dict | None = None, grade: dict | None = None, raw: Any = None) -> dict:  # fmt: skip
    obs = {"step": step, "ok": ok, "action": action, "result": result if ok else None,
           "error": None if ok else {"code": "not_found", "message": "nope"},
           "budget": {"credits": 60, "credits_used": 0.5 * step, "steps_left": 30 - step}}  # fmt: skip
    info: dict[str, Any] = {"step": step, "action": action, "reward_components": {"step_cost": -0.02},
                            "invalid_actions": 0 if ok else 1}  # fmt: skip
    if grade is not None:
        info["grade"] = grade
        info["metrics"] = {"faults_injected": 1}
    rec: dict[str, Any] = {"t": 100.0 + step, "event": "step", "episode": "7-abc", "observation": obs,
                           "info": info, "reward": reward, "raw": raw or {"type": action}}  # fmt: skip
    if telemetry is not None:
        rec["telemetry"] = telemetry
    return rec


START = {"t": 100.0, "event": "start", "episode": "7-abc", "scenario": "tabular-quality-basic", "seed": 7,
         "labels": {"interface": "http", "agent": "rule"}, "title": "T", "max_steps": 30, "credits": 60}  # fmt: skip
JOB_RUNNING = {
    "job_id": "job-1",
    "state": "running",
    "cpu_seconds": 1.0,
    "peak_rss_mb": 80.0,
    "log_tail": ["a"],
}
JOB_DONE = {"job_id": "job-1", "state": "succeeded", "cpu_seconds": 4.0, "peak_rss_mb": 120.0, "run_id": "r1",
            "metrics": {"val_auc": 0.8}, "log_tail": ["a", "b"]}  # fmt: skip
FAULT = {"name": "kill-tracker", "fault": "kill_service", "target": "service:mlflow", "injected_step": 2,
         "detected_step": 3, "mitigated_step": 3, "recovered_step": 3, "recovered_by": "agent"}  # fmt: skip
RECORDS = [
    START,
    _step(1, "train_model", {"job_id": "job-1", "state": "running"}, telemetry={"t": 101.0, "jobs": [JOB_RUNNING]}),
    _step(2, "get_job", None, ok=False, telemetry={"t": 102.0, "jobs": [JOB_DONE],
          "serving": {"deployments": [{"deployment": "churn", "replicas": 1}],
                      "series": {"churn": [{"t": 101.5, "rps": 3.0}, {"t": 102.0, "rps": 4.0}]},
                      "alerts": [{"alert_id": "alert-1", "state": "firing"}]}}),
    _step(3, "register_model", {"name": "churn", "version": "1", "run_id": "r1"},
          telemetry={"t": 103.0, "models": [{"name": "churn", "version": "1"}],
                     "serving": {"deployments": [], "series": {"churn": [{"t": 103.0, "rps": 0.0}]}, "alerts": []}}),
    _step(4, "submit", {"submitted": True}, reward=10.0, grade={"success": True, "reason": "ok"},
          telemetry={"t": 104.0, "faults": [FAULT]}),
    {"t": 105.0, "event": "close", "episode": "7-abc", "faults": [FAULT]},
]  # fmt: skip


def _write(path: Path, records: list[dict]) -> None:
    with path.open("a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def _source(root: Path, sandbox: str, *, running: bool = True) -> AuditSource:
    return AuditSource("local", sandbox, FileAuditLog(root / sandbox / "episodes"), running)


def test_index_reads_complete_records_only_and_starts_again_when_a_log_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "sb" / "episodes" / "7-abc.jsonl"
    index = EpisodeIndex(lambda: [_source(tmp_path, "sb")])
    assert index.scan() == []  # no log yet
    path.parent.mkdir(parents=True)
    _write(path, RECORDS[:2])
    with path.open("a") as f:
        f.write('{"event": "step", "ha')  # a line being written
    [row] = index.scan()
    assert (row.scenario, row.steps) == ("tabular-quality-basic", 1)
    with path.open("a") as f:
        f.write('lf": 1, "observation": {"step": 2}}\n\nnot json\n')
    [row] = index.scan()
    assert row.steps == 2  # the completed line counts; the blank and the broken line are skipped
    path.unlink()
    _write(path, [dict(START, scenario="other")])
    [again] = index.scan()
    assert (again.scenario, again.steps) == ("other", 0)  # shorter than what was read: summarised afresh


def test_summary_follows_an_episode_from_live_to_its_outcome() -> None:
    s = EpisodeSummary("sb", "7-abc")
    for rec in RECORDS[:3]:
        s.add(rec)
    row = s.as_dict(True)
    assert (row["agent"], row["interface"], row["steps"], row["max_steps"]) == ("rule", "http", 2, 30)
    assert (row["status"], row["outcome"]) == ("live", "running")
    assert s.as_dict(False)["status"] == "stopped" and s.as_dict(False)["outcome"] == "incomplete"
    assert row["invalid_actions"] == 1 and row["credits_used"] == 1.0
    for rec in RECORDS[3:]:
        s.add(rec)
    row = s.as_dict(False)
    assert (row["status"], row["outcome"], row["reason"]) == ("finished", "success", "ok")
    assert abs(row["reward"] - (10.0 - 0.06)) < 1e-9 and row["faults_injected"] == 1
    closed_early = EpisodeSummary("sb", "e")
    for rec in [START, RECORDS[1], {"event": "close", "faults": []}]:
        closed_early.add(rec)
    assert (
        closed_early.as_dict(True)["status"] == "ended"
        and closed_early.as_dict(True)["outcome"] == "incomplete"
    )


def test_view_delta_appends_steps_and_points_and_replaces_state() -> None:
    whole = view_delta(RECORDS)
    assert (
        whole["meta"]["labels"] == {"interface": "http", "agent": "rule"} and whole["meta"]["max_steps"] == 30
    )
    assert [s["step"] for s in whole["steps"]] == [1, 2, 3, 4]
    assert (
        whole["steps"][1]["error"] == {"code": "not_found", "message": "nope"} and not whole["steps"][1]["ok"]
    )
    assert whole["jobs"]["job-1"]["state"] == "succeeded"  # the latest row of the job wins
    assert [p["cpu_seconds"] for p in whole["job_samples"]] == [1.0, 4.0]
    assert whole["registrations"] == [{"name": "churn", "version": "1", "run_id": "r1", "step": 3}]
    assert [p["rps"] for p in whole["series"]["churn"]] == [3.0, 4.0, 0.0]
    assert whole["deployments"] == [] and whole["alerts"] == []  # replaced by the later step
    assert whole["faults"] == [FAULT] and whole["grade"]["success"] and whole["closed"]
    # The same view, built from two deltas the way a live page merges them.
    first, second = view_delta(RECORDS[:3]), view_delta(RECORDS[3:])
    assert "meta" not in second and "grade" not in first
    assert first["steps"] + second["steps"] == whole["steps"]
    assert first["series"]["churn"] + second["series"]["churn"] == whole["series"]["churn"]


def test_step_view_renders_the_observation_as_the_agent_reads_it() -> None:
    v = step_view(RECORDS[3])
    assert v["text"].startswith("[step 3] register_model: ok") and "churn" in v["text"]
    assert v["components"] == {"step_cost": -0.02} and v["credits_used"] == 1.5 and v["steps_left"] == 27
    odd = step_view({"event": "step", "observation": {"weird": object.__name__}, "raw": "not json {"})
    assert odd["raw"] == "not json {" and isinstance(odd["text"], str)


def test_audit_logs_without_telemetry_still_give_jobs() -> None:
    old = [START, *(dict(r, telemetry=None) for r in RECORDS[1:2])]
    old[1].pop("telemetry")
    view = view_delta(old)
    assert view["jobs"]["job-1"]["state"] == "running" and view["job_samples"] == []


def test_index_scans_every_sandbox_incrementally(tmp_path: Path) -> None:
    ep = tmp_path / "sb-a" / "episodes"
    ep.mkdir(parents=True)
    (tmp_path / "sb-b" / "episodes").mkdir(parents=True)
    (tmp_path / "sb-b" / "episodes" / "notes.txt").write_text("not an episode log")
    _write(ep / "7-abc.jsonl", RECORDS[:2])
    _write(tmp_path / "sb-b" / "episodes" / "8-def.jsonl", [dict(START, t=200.0, episode="8-def")])
    index = EpisodeIndex(lambda: [_source(tmp_path, "sb-a"), _source(tmp_path, "sb-b", running=False)])
    rows = index.scan()
    assert [(r.sandbox, r.episode, r.steps) for r in rows] == [("sb-b", "8-def", 0), ("sb-a", "7-abc", 1)]
    assert index.running("sb-a") and not index.running("sb-b")
    assert rows[0].as_dict(index.running("sb-b"))["status"] == "stopped"
    _write(ep / "7-abc.jsonl", RECORDS[2:])
    assert index.find("7-abc") is not None
    assert next(r for r in index.scan() if r.episode == "7-abc").done
    os.remove(ep / "7-abc.jsonl")
    assert [r.episode for r in index.scan()] == ["8-def"]
    assert EpisodeIndex(lambda: [_source(tmp_path / "missing", "sb")]).scan() == []


def test_a_closed_episode_is_final_and_not_read_again(tmp_path: Path) -> None:
    reads: list[str] = []

    class Counting(FileAuditLog):
        def read(self, episode_id: str) -> list[dict[str, Any]]:
            reads.append(episode_id)
            return super().read(episode_id)

    ep = tmp_path / "sb" / "episodes"
    ep.mkdir(parents=True)
    _write(ep / "7-abc.jsonl", RECORDS)
    _write(ep / "8-def.jsonl", [dict(START, episode="8-def")])
    index = EpisodeIndex(lambda: [AuditSource("local", "sb", Counting(ep), True)])
    assert {r.episode: r.closed for r in index.scan()} == {"7-abc": True, "8-def": False}
    reads.clear()
    index.scan()
    assert reads == ["8-def"]  # the live one only


def test_view_delta_shows_the_workspace_files_and_the_scripts_run() -> None:
    script = "import json\nprint(json.dumps({'run_id': 'r9'}))\n"
    records = [
        START,
        _step(1, "write_file", {"path": "train.py", "bytes": len(script)},
              raw={"type": "write_file", "path": "train.py", "content": script}),
        _step(2, "run_python", {"job_id": "job-1", "state": "running", "script": "train.py"},
              raw={"type": "run_python", "path": "train.py"}),
        _step(3, "run_python", {"job_id": "job-2", "state": "running", "script": "run_2.py"},
              raw={"type": "run_python", "code": "print('hi')"}),
        _step(4, "write_file", None, ok=False, raw={"type": "write_file", "path": "../x", "content": "no"}),
    ]  # fmt: skip
    first = view_delta(records[:3])
    assert [(f["path"], f["bytes"], f["step"], f["content"]) for f in first["workspace_files"]] == [
        ("train.py", len(script), 1, script)
    ]
    assert first["scripts"] == {"job-1": {"job_id": "job-1", "script": "train.py", "step": 2, "state": "running",
                                          "cpu_seconds": None}}  # fmt: skip
    later = view_delta(records[3:])  # a later delta: the code a run_python carried is a file too
    assert [f["path"] for f in later["workspace_files"]] == ["run_2.py"]
    assert later["scripts"]["job-2"]["script"] == "run_2.py"
    assert view_delta(RECORDS)["workspace_files"] == [] and view_delta(RECORDS)["scripts"] == {}
