"""Validity gates in sim: kept instances pass them, broken ranges are rejected with the reason, files are
written whole, and `scenarios validate` reports a broken family declaration with its failing instances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mlsandbox.cli.main import app
from mlsandbox.instances.gates import difficulty, margin
from mlsandbox.instances.generate import Gates, candidates, generate
from mlsandbox.instances.models import AgentRun, Instance, materialize
from mlsandbox.instances.space_check import check_space
from mlsandbox.scenario import catalog_ids, load_builtin, parse_scenario


@pytest.fixture(scope="module")
def gates() -> Gates:
    with Gates() as g:
        yield g


def _broken_family() -> dict:
    """churn-clean-small whose space makes the signal vanish: no model can reach the AUC asked for."""
    data = load_builtin("churn-clean-small").model_dump(mode="json")
    data["id"] = "churn-broken-space"
    data["space"] = {
        "parameters": {
            "seed": {"type": "int", "low": 1, "high": 10_000},
            "datasets.customers.signal_strength": {"type": "float", "low": 0.0, "high": 0.05},
        }
    }
    return data


def test_generated_instances_pass_the_gates_and_are_reproducible(gates: Gates) -> None:
    fam = load_builtin("churn-clean-small")
    g = generate(fam, 2, gates=gates, seed=5)
    assert g.complete and not g.rejected
    for inst in g.instances:
        by = {r.agent: r for r in inst.gates}
        assert by["reference"].success and not by["random"].success and not by["no-op"].success
        assert by["reference"].margin is not None and by["reference"].margin >= 0
        assert 0 <= inst.difficulty.estimate <= 1
    again = generate(fam, 2, gates=gates, seed=5)
    assert [i.id for i in again.instances] == [i.id for i in g.instances]


def test_a_range_that_makes_unsolvable_instances_is_rejected_with_the_reason(gates: Gates) -> None:
    fam = parse_scenario(_broken_family())
    rejected = check_space(fam, 2, gates=gates)
    assert len(rejected) == 2
    assert all(r.gate == "reference" and "holdout AUC" in r.reason for r in rejected)


def test_difficulty_estimate() -> None:
    def run(success: bool, margin: float | None) -> AgentRun:
        return AgentRun(agent="x", success=success, score=1.0, reason="", steps=3, margin=margin)

    assert difficulty(run(True, 0.2), run(True, None)).estimate == 0.0
    assert difficulty(run(True, 0.0), run(False, None)).estimate == 1.0
    assert difficulty(run(True, 0.05), run(True, None)).estimate == 0.25


def test_margin_of_a_metric_goal_is_relative_to_the_bar_in_the_metrics_direction() -> None:
    forecast = load_builtin("forecast-web-visits-basic")  # MASE: lower is better
    assert margin(forecast, {"metric": "mase", "holdout_metric": 0.9, "bar": 1.0}) == pytest.approx(0.1)
    assert margin(forecast, {"metric": "mase", "holdout_metric": 1.2, "bar": 1.0}) == pytest.approx(-0.2)
    text = load_builtin("text-support-ticket-routing")  # macro-F1: higher is better
    assert margin(text, {"metric": "macro_f1", "holdout_metric": 0.88, "bar": 0.8}) == pytest.approx(0.1)
    assert margin(text, {"metric": "macro_f1", "holdout_metric": None, "bar": 0.8}) is None
    churn = load_builtin("churn-clean-small")
    assert margin(churn, {"holdout_auc": 0.83}) == pytest.approx(0.83 - churn.goal.min_auc)


def test_every_family_declares_a_space_whose_instances_keep_the_family_kind() -> None:
    for fid in catalog_ids():
        fam = load_builtin(fid)
        assert fam.space is not None, f"{fid} declares no space"
        assert "seed" in fam.space.parameters, fid
        sc = materialize(fam, next(candidates(fam, seed=1)))
        assert sc.space is None
        assert type(sc.dataset(sc.goal.dataset)) is type(fam.dataset(fam.goal.dataset)), fid


def test_scenarios_validate_reports_the_failing_instances(tmp_path: Path) -> None:
    f = tmp_path / "churn-broken-space.yaml"
    f.write_text(yaml.safe_dump(_broken_family(), sort_keys=False))
    res = CliRunner().invoke(
        app, ["scenarios", "validate", str(f), "--backend", "sim", "--instances", "2", "--json"]
    )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout[res.stdout.index("[") :])
    bad = [d for d in doc if d.get("rejected_instances")]
    assert bad and len(bad[0]["rejected_instances"]) == 2
    assert bad[0]["rejected_instances"][0]["gate"] == "reference"
    assert "fail the gates" in res.stderr


def test_tasks_generate_writes_whole_files(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["tasks", "generate", "churn-clean-small", "--n", "2", "--out", str(tmp_path), "-j", "1"]
    )
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "churn-clean-small.instances.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert all(Instance.model_validate_json(line).family == "churn-clean-small" for line in lines)
    assert (tmp_path / "churn-clean-small.rejected.jsonl").exists()
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
    assert "valid instances/min" in res.stdout


def test_tasks_generate_reports_a_family_that_gives_too_few_instances(tmp_path: Path) -> None:
    f = tmp_path / "churn-broken-space.yaml"
    f.write_text(yaml.safe_dump(_broken_family(), sort_keys=False))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["tasks", "generate", str(f), "--n", "1", "--out", str(out), "-j", "1"])
    assert res.exit_code == 1
    assert "fewer than 1 valid instances of churn-broken-space" in res.stderr
    rejected = (out / "churn-broken-space.rejected.jsonl").read_text().splitlines()
    assert len(rejected) == 21  # the most a family gates for one instance asked for: max(4 * n, n + 20)
    assert (out / "churn-broken-space.instances.jsonl").read_text() == ""
