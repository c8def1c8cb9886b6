"""The benchmark runner end to end on real services: a held-out suite run, its files, replay, and a search of
every observation for hidden ground truth."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlsandbox.agents.trajectory import read_trajectory
from mlsandbox.cli.main import app
from mlsandbox.data.tabular import generate_tabular
from mlsandbox.evaluation.results import read_rows
from mlsandbox.scenario.suites import suite

pytestmark = pytest.mark.services

FAMILY = "churn-clean-small"
SECRET_KEYS = (
    "holdout",
    "manifest",
    "bayes",
    "generator_version",
    "intercept",
    "row_indices",
    "ground_truth",
)


def _float_forms(x: float) -> set[str]:
    return {repr(float(x)), f"{x:.6f}", f"{x:.5f}", f"{x:.4f}", f"{x:.6g}"}


def _secrets(scenario: Any, seed: int) -> set[str]:
    """Strings that only the hidden ground truth holds: the holdout's column means, manifest figures."""
    out: set[str] = set()
    for i, spec in enumerate(scenario.datasets):
        data = generate_tabular(spec, seed * 1000 + i)  # exactly what the gateway generated
        for col in data.holdout.select_dtypes("number").columns:
            out |= _float_forms(float(data.holdout[col].mean()))
        signal = data.manifest["signal"]
        out |= _float_forms(float(signal["intercept"]))
        if signal.get("bayes_auc_holdout") is not None:
            out |= _float_forms(float(signal["bayes_auc_holdout"]))
    return {s for s in out if len(s.strip("-0.")) >= 4}  # only distinctive numbers


def test_bench_on_the_test_suite_writes_results_report_trajectories(sandbox: Any, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--suite",
            "test",
            "--family",
            FAMILY,
            "--variants",
            "1",
            "--agent",
            "reference",
            "--agent",
            "do-nothing",
            "--episodes",
            "1",
            "--seed",
            "3",
            "--out",
            str(out),
            "--name",
            sandbox.name,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "leaderboard" in result.output and "per scenario family" in result.output

    rows = read_rows(out / "results.jsonl")
    (entry,) = suite("test", families=[FAMILY], variants_per_family=1)
    assert [(r.agent, r.scenario, r.seed) for r in rows] == [
        ("reference", entry.id, 3),  # --seed is absolute, as in `mlsandbox run`
        ("do-nothing", entry.id, 3),
    ]
    ref, idle = rows
    assert ref.error is None and ref.success and ref.score == 1.0
    assert ref.reward > idle.reward
    assert not idle.success and idle.steps == 1
    assert ref.credits_used > 0 and ref.wall_s > 0 and ref.split == "test"
    assert sum(ref.reward_vector.values()) == pytest.approx(ref.reward, abs=1e-4)
    table = list(csv.DictReader((out / "results.csv").open()))
    assert [t["agent"] for t in table] == ["reference", "do-nothing"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agents"][0]["agent"] == "reference"
    # One episode per task: pass@1 and pass^1 are the success rate; the reference solves it, do-nothing not.
    assert summary["agents"][0]["pass_at_k"] == {"1": 1.0} == summary["agents"][0]["pass_all_k"]
    assert summary["agents"][1]["pass_at_k"] == {"1": 0.0} and "pass@k" in result.output
    page = (out / "report.html").read_text()
    # pass@k, per-family success, rewards, cost vs success, the actions histogram, one timeline per episode
    assert page.count("<svg") == 5 + len(rows) and entry.id in page

    # Trajectories: one per episode, replayable, and no observation holds hidden ground truth.
    secrets = _secrets(entry.scenario, ref.seed)
    assert secrets
    for row in rows:
        assert row.trajectory is not None
        recs = read_trajectory(Path(row.trajectory))
        assert recs[-1]["kind"] == "end" and len(recs) == row.steps + 2
        observations = [recs[0]["observation"]] + [r["next_observation"] for r in recs if r["kind"] == "step"]
        for obs in observations:
            text = json.dumps(obs).lower()
            for key in SECRET_KEYS:
                assert key not in text, (key, obs)
            for s in secrets:
                assert s not in text, (s, obs)
    # The grade (hidden) is in the info of the last step, not in any observation.
    recs = read_trajectory(Path(ref.trajectory))  # type: ignore[arg-type]
    auc = recs[-2]["info"]["grade"]["holdout_auc"]
    assert auc is not None and all(str(auc) not in json.dumps(r.get("next_observation")) for r in recs[1:-1])

    replay = CliRunner().invoke(app, ["replay", ref.trajectory])
    assert replay.exit_code == 0, replay.output
    assert "check_data_quality" in replay.output and "== end: success" in replay.output
