"""Benchmark runs and trajectories as the console reads them, without services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlsandbox.agents.runner import EpisodeResult, StepRecord
from mlsandbox.agents.trajectory import write_trajectory
from mlsandbox.console.benchmarks import (
    bench_detail,
    bench_overview,
    discover,
    pass_at_k,
    replay_view,
    trajectory_path,
)
from mlsandbox.evaluation.results import EpisodeRow, rows_jsonl, summary_json


def _row(agent: str, seed: int, success: bool, reward: float, **kw: Any) -> EpisodeRow:
    base: dict[str, Any] = dict(suite="builtin", family="tabular-quality-basic", scenario="tabular-quality-basic",
                                difficulty=1, split="builtin", agent=agent, seed=seed, episode_id=f"{seed}-{agent}",
                                reward=reward, reward_vector={"task": reward}, reward_components={"task": reward},
                                success=success, score=float(success), steps=8, terminated=True, truncated=False,
                                credits_used=2.0, invalid_actions=0, wall_s=1.0)  # fmt: skip
    base.update(kw)
    return EpisodeRow(**base)


def _result(seed: int) -> EpisodeResult:
    res = EpisodeResult("tabular-quality-basic", "rule", seed, f"{seed}-rule")
    res.first_observation = {"step": 0, "ok": True, "action": None, "result": {"task": "do it"}, "error": None,
                             "budget": {"credits": 60, "credits_used": 0, "steps_left": 2}}  # fmt: skip
    for n, action in enumerate([{"type": "list_datasets"}, {"type": "submit"}], 1):
        obs = {"step": n, "ok": True, "action": action["type"], "result": {"n": n}, "error": None,
               "budget": {"credits": 60, "credits_used": 0, "steps_left": 2 - n}}  # fmt: skip
        res.steps.append(StepRecord(n, action, obs, -0.02 + 5 * (n == 2), {"step_cost": -0.02}, None,
                                    previous=res.first_observation if n == 1 else res.steps[-1].observation))  # fmt: skip
    res.total_reward = sum(s.reward for s in res.steps)
    res.grade = {"success": True, "reason": "ok"}
    return res


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "results" / "20260101-000000"
    rows = [_row("rule", 1, True, 5.0), _row("rule", 2, False, 1.0), _row("random", 1, False, -3.0)]
    traj = write_trajectory(_result(1), d / "trajectories" / "tabular-quality-basic__rule__1.jsonl")
    rows[0] = rows[0].model_copy(update={"trajectory": str(Path("elsewhere") / traj.name)})
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.jsonl").write_text(rows_jsonl(rows))
    return d


def test_pass_at_k_is_read_from_the_shapes_a_summary_may_use() -> None:
    assert pass_at_k({"agent": "a"}) == []
    assert pass_at_k({"pass@1": 0.5, "pass_at_3": {"value": 0.8, "low": 0.6, "high": 0.9}}) == [
        {"k": 1, "value": 0.5, "low": None, "high": None},
        {"k": 3, "value": 0.8, "low": 0.6, "high": 0.9},
    ]
    assert [p["k"] for p in pass_at_k({"pass_at_k": {"5": 0.9, "pass@2": 0.7, "x": 1}})] == [2, 5]
    assert pass_at_k({"pass_at_k": {"1": {"value": float("nan")}}}) == []  # not a number: left out


def test_a_run_in_progress_is_summarised_from_its_rows(run_dir: Path) -> None:
    with (run_dir / "results.jsonl").open("a") as f:
        f.write('{"suite": "builtin", "fam')  # the row being written
    [run] = discover([run_dir.parent])
    assert discover([run_dir]) == [run]  # a root may be the run itself
    detail = bench_detail(run)
    assert not detail["complete"] and detail["summary_source"] == "rows"
    assert len(detail["rows"]) == 3 and "results.jsonl:4: not a benchmark row" in detail["problems"][0]
    top = detail["summary"]["agents"][0]
    assert top["agent"] == "rule" and top["success_rate"]["value"] == 0.5
    # pass@k from the rows as the benchmark's own summary computes it: one task run twice, one success.
    assert [(p["k"], p["value"]) for p in top["pass_at_k"]] == [(1, 0.5), (2, 1.0)]
    assert detail["rows"][0]["trajectory_file"] == "tabular-quality-basic__rule__1.jsonl"  # found by its name
    assert detail["rows"][1]["trajectory_file"] is None
    overview = bench_overview(run)
    assert overview["agents"] == ["rule", "random"] and overview["trajectories"] == 1
    json.dumps(detail, allow_nan=False)  # no NaN reaches the browser


def test_a_finished_run_reads_its_summary_with_pass_at_k(run_dir: Path) -> None:
    rows = [
        EpisodeRow.model_validate_json(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    summary = json.loads(summary_json(rows))
    summary["agents"][0]["pass_at_k"] = {"1": {"value": 0.5, "low": 0.1, "high": 0.9}, "2": 1.0}
    summary["agents"][1]["mean_reward"]["low"] = float("nan")
    (run_dir / "summary.json").write_text(json.dumps(summary))
    detail = bench_detail(discover([run_dir])[0])
    assert detail["complete"] and detail["summary_source"] == "summary.json"
    assert [p["k"] for p in detail["summary"]["agents"][0]["pass_at_k"]] == [1, 2]
    assert detail["summary"]["agents"][1]["mean_reward"]["low"] is None
    json.dumps(detail, allow_nan=False)


def test_trajectories_are_replayed_step_by_step_and_names_are_checked(run_dir: Path) -> None:
    [run] = discover([run_dir])
    path = trajectory_path(run, "tabular-quality-basic__rule__1.jsonl")
    view = replay_view(path.read_text(), path.name)
    assert view["episode"]["agent"] == "rule" and view["initial"]["text"].startswith("== episode 1-rule")
    assert [s["step"] for s in view["steps"]] == [1, 2]
    assert view["steps"][0]["text"].startswith("-- step 1 · action list_datasets")
    assert view["steps"][1]["total_reward"] == pytest.approx(4.96)
    assert view["end"]["success"] and view["end"]["text"].startswith("== end: success")
    for bad in ("../summary.json", "x/../../y.jsonl", "results.jsonl.txt", ""):
        with pytest.raises(ValueError):
            trajectory_path(run, bad)
    with pytest.raises(FileNotFoundError):
        trajectory_path(run, "missing.jsonl")
    with pytest.raises(ValueError, match=r"upload:1: not JSON"):
        replay_view("{not json\n", "upload")
    with pytest.raises(ValueError, match="starts with an 'episode' record"):
        replay_view('{"kind": "step"}\n', "upload")
