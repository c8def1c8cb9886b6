"""Benchmark rows, summaries with confidence intervals, CSV, the HTML report, trajectories and replay."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlsandbox.agents.runner import EpisodeResult, StepRecord
from mlsandbox.agents.trajectory import read_trajectory, replay_lines, write_trajectory
from mlsandbox.cli.main import app
from mlsandbox.evaluation.report import render_html
from mlsandbox.evaluation.results import (
    CSV_COLUMNS,
    EpisodeRow,
    leaderboard,
    read_rows,
    rows_csv,
    rows_jsonl,
    summarize,
    summary_json,
)
from mlsandbox.evaluation.reward import OBJECTIVES
from mlsandbox.evaluation.stats import k_values, mean_ci, pass_all_k, pass_at_k, wilson


def _row(
    agent: str, family: str, seed: int, success: bool, reward: float, credits: float = 1.0
) -> EpisodeRow:
    vec = dict.fromkeys(OBJECTIVES, 0.0)
    vec["task"] = reward
    return EpisodeRow(
        suite="test", family=family, scenario=f"{family}-abc", difficulty=1, split="test", agent=agent, seed=seed,
        episode_id=f"{seed}-x", reward=reward, reward_vector=vec, reward_components={"task": reward},
        success=success, score=1.0 if success else 0.2, steps=5, terminated=True, truncated=False,
        credits_used=credits, invalid_actions=0, wall_s=1.0, time_to_detect_steps=2.0 if success else None,
    )  # fmt: skip


ROWS = [
    _row("rule", "a", 1, True, 14.0),
    _row("rule", "a", 2, True, 13.0),
    _row("rule", "b", 1, False, 1.0),
    _row("random", "a", 1, False, -2.0, 0.1),
    _row("random", "a", 2, False, -3.0, 0.2),
    _row("random", "b", 1, False, -1.0, 0.3),
]


def test_intervals() -> None:
    w = wilson(3, 4)
    assert w.low < 0.75 < w.high and w.low >= 0 and w.high <= 1
    assert wilson(0, 5).low == 0 and wilson(5, 5).high == pytest.approx(1)
    m = mean_ci([1.0, 2.0, 3.0])
    assert m.value == 2 and m.low < 2 < m.high
    single = mean_ci([4.0])  # one episode: no Student's t interval
    assert single.value == 4.0 and not single.defined and single.text("{:+.2f}") == "+4.00 [n/a]"
    assert single.as_dict() == {"value": 4.0, "low": None, "high": None, "n": 1}
    assert mean_ci([]).text() == "n/a" and mean_ci([]).as_dict()["value"] is None
    with pytest.raises(ValueError):
        wilson(5, 3)


def test_summary_per_agent_and_family_and_leaderboard() -> None:
    agents, families = summarize(ROWS)
    by = {g.agent: g for g in agents}
    assert by["rule"].episodes == 3 and by["rule"].success_rate["value"] == pytest.approx(2 / 3)
    assert by["rule"].mean_reward["value"] == pytest.approx(28 / 3)
    assert by["random"].success_rate["value"] == 0
    assert [(g.agent, g.family) for g in families] == [
        ("rule", "a"),
        ("rule", "b"),
        ("random", "a"),
        ("random", "b"),
    ]
    assert [g.agent for g in leaderboard(agents)] == ["rule", "random"]
    assert by["rule"].mean_time_to_detect_steps == 2.0


def test_jsonl_and_csv_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(rows_jsonl(ROWS))
    assert read_rows(p) == ROWS
    table = list(csv.DictReader(io.StringIO(rows_csv(ROWS))))
    assert len(table) == len(ROWS) and list(table[0]) == list(CSV_COLUMNS)
    assert table[0]["reward_task"] == "14.0" and table[0]["success"] == "True"
    p.write_text('{"suite": 1}\n')
    with pytest.raises(ValueError, match=r"r\.jsonl:1"):
        read_rows(p)


def test_html_report_is_self_contained_with_plots_and_leaderboard() -> None:
    page = render_html(ROWS, meta={"suite": "test"})
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 4  # pass@k, per-family success, reward distribution, cost vs success
    assert "Leaderboard" in page and "1. rule" in page and "2. random" in page
    assert "pass@1" in page and "pass^2" in page and "pass@3" not in page  # family a ran twice per task
    # Nothing fetched from elsewhere: no script, no stylesheet link, no external image.
    assert not re.search(r"<script|<link|<img|src=\"http", page)


def _episode() -> EpisodeResult:
    first = {"step": 0, "ok": True, "action": None, "result": {"task": "do it"}, "error": None,
             "budget": {"credits": 10, "credits_used": 0, "steps_left": 2}}  # fmt: skip
    nxt = {"step": 1, "ok": True, "action": "submit", "result": {"submitted": True}, "error": None,
           "budget": {"credits": 10, "credits_used": 0, "steps_left": 1}}  # fmt: skip
    comps = {"task": 0.0, "step_cost": -0.02}
    res = EpisodeResult("s", "rule", 3, "3-abc", total_reward=-0.02, components=comps)
    res.first_observation, res.reset_info = first, {"scenario": "s"}
    res.steps.append(
        StepRecord(
            1,
            {"type": "submit"},
            nxt,
            -0.02,
            comps,
            None,
            info={"reward_components": comps},
            previous=first,
            terminated=True,
        )
    )
    res.final_info = {"metrics": {"steps": 1}}
    res.grade = {"success": False, "reason": "no model registered as 'churn'"}
    return res


def test_trajectory_file_and_replay(tmp_path: Path) -> None:
    path = write_trajectory(_episode(), tmp_path / "ep.jsonl")
    recs = read_trajectory(path)
    assert [r["kind"] for r in recs] == ["episode", "step", "end"]
    step = recs[1]
    assert step["observation"]["step"] == 0 and step["next_observation"]["step"] == 1
    assert step["action"] == {"type": "submit"} and step["reward_vector"]["process"] == pytest.approx(-0.02)
    blocks = list(replay_lines(recs))
    assert blocks[0].startswith("== episode 3-abc")
    assert "[step 1] submit: ok" in blocks[1] and "step_cost=-0.020" in blocks[1]
    assert "not solved" in blocks[-1]

    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code == 0, result.output
    assert "[step 1] submit: ok" in result.output
    only = CliRunner().invoke(app, ["replay", str(path), "--step", "7"])
    # The error names the file whole, on one line, however long its path.
    assert only.exit_code == 1 and f"error: {path}: no step 7\n" in only.output
    deep = tmp_path / ("run [a]-" + "x" * 120) / "[/tmp]" / "ep.jsonl"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(path.read_bytes())
    only = CliRunner().invoke(app, ["replay", str(deep), "--step", "7"])
    assert only.exit_code == 1 and f"error: {deep}: no step 7\n" in only.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": "step"}) + "\n")
    out = CliRunner().invoke(app, ["replay", str(bad)])
    assert out.exit_code == 1 and "starts with an 'episode' record" in out.output


def test_plan_pairs_agents_on_the_same_episodes_and_rows_come_from_results() -> None:
    from mlsandbox.agents.bench import EpisodeTask, error_row, plan_episodes, row_from_result
    from mlsandbox.scenario.suites import suite

    entries = suite("test", families=["tabular-quality-basic"], variants_per_family=2)
    tasks = plan_episodes(entries, ["rule", "random"], episodes=2, base_seed=5, suite="test")
    assert len(tasks) == 2 * 2 * 2
    first = 5  # --seed is absolute: episode k of every scenario uses 5 + k
    assert [(t.agent, t.seed) for t in tasks[:4]] == [("rule", first), ("random", first), ("rule", first + 1),
                                                      ("random", first + 1)]  # fmt: skip
    task = EpisodeTask(entries[0], "rule", first, "test")
    res = _episode()
    res.final_info = {"metrics": {"credits_used": 2.5, "cpu_seconds": 2.5, "faults_injected": 1,
                                  "faults_detected": 1, "time_to_detect_steps": 3.0},
                      "constraint_violation": {"kind": "budget", "message": "over"}}  # fmt: skip
    row = row_from_result(task, res, None)
    assert (row.family, row.scenario, row.split, row.seed) == (
        "tabular-quality-basic",
        entries[0].id,
        "test",
        first,
    )
    assert row.credits_used == 2.5 and row.faults_detected == 1 and row.time_to_detect_steps == 3.0
    assert row.constraint_violation == "budget" and row.steps == 1 and not row.success
    assert row.reward_vector["process"] == pytest.approx(-0.02)
    err = error_row(task, RuntimeError("sandbox gone"), 1.5)
    assert err.error == "RuntimeError: sandbox gone" and err.steps == 0
    agents, _ = summarize([row, err])
    assert agents[0].episodes == 2 and agents[0].errors == 1 and agents[0].success_rate["n"] == 1


def _brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """pass@k and pass^k by enumerating every k-subset of the n episodes (c successes first)."""
    from itertools import combinations

    outcomes = [True] * c + [False] * (n - c)
    subsets = list(combinations(outcomes, k))
    return (sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets))


def test_pass_at_k_and_pass_all_k_are_the_unbiased_estimators() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at, every = _brute_force(n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(at) and pass_all_k(n, c, k) == pytest.approx(every)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) == pass_all_k(5, 2, 1)  # k = 1: the success rate
    assert pass_at_k(10, 1, 10) == 1.0 and pass_all_k(10, 9, 10) == 0.0
    with pytest.raises(ValueError, match=r"k must be within 1\.\.3"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="successes"):
        pass_all_k(3, 4, 1)
    assert k_values(3) == [1, 2, 3] and k_values(35) == [*range(1, 11), 20, 35]
    assert k_values(100) == [*range(1, 11), 20, 50, 100]


def test_summary_reports_pass_k_per_agent_and_family_over_tasks() -> None:
    # Two tasks of family a with 3 episodes each (2/3 and 0/3 successes), one task of family b with 2 (2/2).
    rows = [
        *(_row("rule", "a", s, s != 3, 1.0) for s in (1, 2, 3)),
        *(_row("rule", "a", s, False, 0.0).model_copy(update={"scenario": "a-other"}) for s in (1, 2, 3)),
        *(_row("rule", "b", s, True, 1.0) for s in (1, 2)),
        _row("rule", "b", 9, True, 1.0).model_copy(update={"error": "RuntimeError: gone"}),  # not counted
    ]
    agents, families = summarize(rows)
    (rule,) = agents
    assert rule.tasks == 3 and rule.episodes_per_task == 2 and list(rule.pass_at_k) == ["1", "2"]
    assert rule.pass_at_k["1"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert rule.pass_at_k["2"] == pytest.approx((1.0 + 0 + 1) / 3)
    assert rule.pass_all_k["2"] == pytest.approx((1 / 3 + 0 + 1) / 3)
    fam = {g.family: g for g in families}
    assert fam["a"].episodes_per_task == 3 and fam["a"].pass_all_k["3"] == 0.0
    assert fam["a"].pass_at_k["3"] == pytest.approx(0.5)
    assert fam["b"].pass_all_k == {"1": 1.0, "2": 1.0}
    summary = json.loads(summary_json(rows))
    assert summary["agents"][0]["pass_at_k"]["2"] == pytest.approx(2 / 3, abs=1e-6)
    assert {f["family"]: f["pass_all_k"] for f in summary["families"]}["b"] == {"1": 1.0, "2": 1.0}


def _steps_episode(rewards: list[float]) -> EpisodeResult:
    obs = {"step": 0, "ok": True, "action": None, "result": {"task": "do it"}, "error": None,
           "budget": {"credits": 10, "credits_used": 0, "steps_left": 9}}  # fmt: skip
    res = EpisodeResult("s", "rule", 3, "3-abc", total_reward=sum(rewards), components={})
    res.first_observation, res.reset_info = obs, {}
    for i, r in enumerate(rewards, 1):
        nxt = {**obs, "step": i, "action": "list_datasets", "result": {"datasets": []}}
        res.steps.append(
            StepRecord(i, {"type": "list_datasets"}, nxt, r, {"step_cost": r}, None, info={}, previous=obs)
        )
    res.final_info = {"metrics": {}}
    return res


def test_replay_one_step_shows_the_running_total_up_to_it(tmp_path: Path) -> None:
    path = write_trajectory(_steps_episode([-0.02, -0.02, -0.5, -0.047]), tmp_path / "ep.jsonl")
    blocks = list(replay_lines(read_trajectory(path), only_step=3))
    assert len(blocks) == 2 and "-- step 3 " in blocks[1]
    assert blocks[1].endswith("reward -0.500 (step_cost=-0.500) · total -0.540")
    out = CliRunner().invoke(app, ["replay", str(path), "--step", "2"])
    assert out.exit_code == 0, out.output
    assert "total -0.040" in out.output and "-- step 1 " not in out.output and "== end" not in out.output
    full = CliRunner().invoke(app, ["replay", str(path)])
    assert "total -0.587" in full.output and "== end" in full.output


def test_one_episode_agent_has_no_interval_and_invalid_actions_are_not_harness_errors() -> None:
    rows = [
        _row("solo", "a", 1, True, 14.29).model_copy(update={"invalid_actions": 0}),
        _row("random", "a", 1, False, -2.0).model_copy(update={"invalid_actions": 3}),
        _row("random", "a", 2, False, -3.0).model_copy(update={"invalid_actions": 2}),
        _row("random", "a", 3, False, 0.0).model_copy(update={"error": "RuntimeError: gone", "steps": 0}),
    ]
    agents, _ = summarize(rows)
    by = {g.agent: g for g in agents}
    assert by["solo"].mean_reward["low"] is None and by["solo"].reward().text("{:+.2f}") == "+14.29 [n/a]"
    assert by["random"].invalid_actions == 5 and by["random"].errors == 1
    assert by["random"].invalid_action_rate == pytest.approx(5 / 10)
    summary = json.loads(summary_json(rows))  # valid JSON: no NaN
    assert {a["agent"]: a["mean_reward"]["high"] for a in summary["agents"]}["solo"] is None
    page = render_html(rows)
    assert "+14.29 [n/a]" in page and "[+14.29, +14.29]" not in page
    assert "<th>invalid actions</th>" in page and "<th>harness errors</th>" in page
    from rich.console import Console

    from mlsandbox.cli.evaluation import _summary_tables

    con = Console(width=250, record=True)
    for t in _summary_tables(rows):
        con.print(t)
    text = con.export_text()
    assert "invalid actions" in text and "harness errors" in text and "+14.29 [n/a]" in text
    line = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith("random"))
    assert line.replace("│", " ").split()[-2:] == ["5", "1"]  # invalid actions, harness errors


def test_report_shows_zero_bars_difficulty_provenance_and_trajectory_links(tmp_path: Path) -> None:
    from mlsandbox.evaluation.provenance import provenance
    from mlsandbox.evaluation.report import plot_family_success

    _, families = summarize(ROWS)
    svg = plot_family_success(families)
    assert svg.count(">0%<") >= 3  # random's 0% bars carry their value (rule b too)
    traj = tmp_path / "trajectories" / "a-abc__rule__1.jsonl"
    rows = [ROWS[0].model_copy(update={"trajectory": str(traj)}), *ROWS[1:]]
    run = provenance()
    page = render_html(rows, meta={"suite": "test"}, provenance=run, base=tmp_path)
    assert f"<dd>{run['version']}</dd>" in page and f"{run['machine']['cpus']} x " in page
    assert (run["commit"] or "not a git checkout") in page
    assert '<a href="trajectories/a-abc__rule__1.jsonl">' in page and f"mlsandbox replay {traj}" in page
    assert "<h2>By difficulty</h2>" in page and "<th>wall s / episode</th>" in page
    assert "class='plots'" in page
    summary = json.loads(summary_json(rows, provenance=run))
    assert summary["provenance"]["version"] == run["version"]


def test_report_draws_episode_timelines_and_action_histograms(tmp_path: Path) -> None:
    res = _steps_episode([-0.02, -0.52, -0.02])
    bad = {**res.steps[1].observation, "ok": False, "error": {"code": "invalid_parameters", "message": "x"}}
    res.steps[1].observation = bad
    path = write_trajectory(res, tmp_path / "trajectories" / "ep.jsonl")
    rows = [ROWS[0].model_copy(update={"trajectory": str(path)}), *ROWS[1:]]
    page = render_html(rows, base=tmp_path)
    assert "<h2>Episode timelines</h2>" in page and "id='episode-0'" in page
    assert '<a href="#episode-0">a-abc</a>' in page  # the episodes table links to the timeline
    timeline = page[page.index("id='episode-0'") :]
    assert timeline.count("<circle") == 3 and timeline.count("fill='#d62728'") == 1  # one invalid step
    assert "step 2 list_datasets: -0.520 (total -0.540) invalid" in timeline
    assert "<h3>Actions per agent</h3>" in page and page.count("<svg") == 4 + 2  # histogram, one timeline
    assert not re.search(r"<script|<link|<img|src=\"http", page)


def test_report_timelines_lay_the_fault_windows_over_the_steps(tmp_path: Path) -> None:
    from mlsandbox.evaluation.results import FaultWindow

    path = write_trajectory(_steps_episode([-0.02] * 6), tmp_path / "trajectories" / "ep.jsonl")
    windows = [
        FaultWindow(name="tracker-down", fault="kill_service", target="mlflow", injected_step=1,
                    detected_step=2, mitigated_step=4, recovered_step=4, recovered_by="agent"),
        FaultWindow(name="slow-lake", fault="latency", target="minio", injected_step=3),
    ]  # fmt: skip
    row = ROWS[0].model_copy(update={"trajectory": str(path), "fault_windows": windows})
    page = render_html([row, *ROWS[1:]], base=tmp_path)
    timeline = page[page.index("id='episode-0'") :]
    timeline = timeline[: timeline.index("</svg>")]
    assert timeline.count("class='fault'") == 2
    assert timeline.count("class='detected'") == 1 and timeline.count("class='mitigated'") == 1
    tip = "kill_service on mlflow: injected after step 1, detected at step 2, mitigated at step 4, ended at step 4 (agent)"
    assert tip in timeline
    assert "latency on minio: injected after step 3<" in timeline  # still active at the end: no end given
    # The bands sit where their steps are: the first from step 2 to step 4, the second from step 4 to the end.
    xs = [float(m) for m in re.findall(r"<rect class='fault' x='([0-9.]+)'", timeline)]
    widths = [float(m) for m in re.findall(r"class='fault' x='[0-9.]+' y='0' width='([0-9.]+)'", timeline)]
    assert xs[0] < xs[1] and xs[0] + widths[0] == pytest.approx(xs[1], abs=0.2)
    assert xs[1] + widths[1] == pytest.approx(420 - 8, abs=0.2)
    # A row read back from JSONL keeps its windows; the CSV has no such column.
    (back,) = read_rows(_write(tmp_path / "rows.jsonl", rows_jsonl([row])))
    assert back.fault_windows == windows and "fault_windows" not in rows_csv([row]).splitlines()[0]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_fault_scenario_on_sim_records_its_fault_windows_in_the_row() -> None:
    from mlsandbox.agents.bench import EpisodeTask, run_task
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario.suites import suite

    (entry,) = suite("builtin", families=["tabular-ops-tracker-outage"])
    env = MLSandboxEnv(backend="sim", sandbox="fault-windows")
    try:
        row, res = run_task(env, EpisodeTask(entry, "reference", 1, "builtin"))
    finally:
        env.close()
    assert row.error is None and res is not None
    assert len(row.fault_windows) == row.faults_injected >= 1
    for w in row.fault_windows:
        assert 0 <= w.injected_step <= row.steps
        assert w.recovered_step is None or w.injected_step <= w.recovered_step <= row.steps
    assert sum(w.mitigated_step is not None for w in row.fault_windows) == row.faults_mitigated
    assert sum(w.detected_step is not None for w in row.fault_windows) == row.faults_detected


def test_token_usage_is_recorded_and_plotted_against_success() -> None:
    from types import SimpleNamespace

    from mlsandbox.agents.bench import EpisodeTask, run_task
    from mlsandbox.env import MLSandboxEnv
    from mlsandbox.scenario.suites import suite

    class Counted:  # an agent that counts its tokens as the LLM agent does
        name = "counted"

        def __init__(self) -> None:
            self.usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0, cost_usd=0.0)

        def reset(self, observation: dict[str, Any], seed: int | None = None) -> None:
            self.usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0, cost_usd=0.0)

        def act(self, observation: dict[str, Any]) -> dict[str, Any]:
            self.usage.prompt_tokens += 100
            self.usage.completion_tokens += 10
            self.usage.cost_usd += 0.001
            return {"type": "submit"}

    (entry,) = suite("builtin", families=["churn-clean-small"])
    env = MLSandboxEnv(backend="sim", sandbox="usage-row")
    try:
        row, _ = run_task(env, EpisodeTask(entry, "counted", 1, "builtin"), agent=Counted())
    finally:
        env.close()
    assert row.error is None and row.extra["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "cost_usd": 0.001,
    }
    page = render_html([row, *ROWS])
    assert "<h3>Tokens against success</h3>" in page and "$0.00 in all" in page
    assert "Tokens against success" not in render_html(ROWS)


def test_replay_shows_the_workspace_files_and_the_scripts_output() -> None:
    from mlsandbox.agents.trajectory import replay_lines

    def step(n: int, action: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        obs = {"step": n, "ok": True, "action": action["type"], "result": result}
        return {"kind": "step", "step": n, "action": action, "next_observation": obs, "reward": -0.02}

    script = "print('validation AUC 0.81')\nprint('{\"run_id\": \"r1\"}')"
    recs = [
        {"kind": "episode", "episode_id": "1-a", "scenario": "s", "agent": "code", "seed": 1, "observation": {}},
        step(1, {"type": "write_file", "path": "train.py", "content": script}, {"path": "train.py", "bytes": 50}),
        step(2, {"type": "run_python", "path": "train.py"}, {"job_id": "job-1", "state": "running", "script": "train.py"}),
        step(3, {"type": "get_job", "job_id": "job-1"}, {"job_id": "job-1", "state": "succeeded", "cpu_seconds": 3.5}),
        step(4, {"type": "get_logs", "target": "job-1"}, {"lines": ["validation AUC 0.81", '{"run_id": "r1"}']}),
        {"kind": "end", "success": True, "grade": {"reason": "ok"}, "steps": 4, "total_reward": 1.0},
    ]  # fmt: skip
    blocks = list(replay_lines(recs))
    assert 'write_file {"path":"train.py"}' in blocks[1] and "    | print('validation AUC 0.81')" in blocks[1]
    assert "validation AUC 0.81" in blocks[4]
    assert "workspace files: train.py" in blocks[-1]
    assert "script job-1: train.py (step 2) succeeded, cpu 3.5 s" in blocks[-1]
