"""The fidelity tier: the rule, reference and random agents on the real local sandbox and on the sim
backend with the same seeds, on a couple of scenarios; the two must agree (success, holdout AUC within a
tolerance, every episode run on both), and the reports are written. The benchmark
(benchmarks/bench_fidelity.py) measures the same over every built-in scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsandbox.backends.local import LocalBackend
from mlsandbox.fidelity.suite import run_fidelity

pytestmark = pytest.mark.fidelity

SCENARIOS = ["tabular-quality-basic", "churn-deadline-outliers"]
"""The flagship scenario, and one whose first jobs hit a deadline (a failure mode and its recovery)."""
AUC_TOLERANCE = 0.03
"""Largest |holdout AUC difference| accepted on one episode (the benchmark's target is on the median)."""


def test_local_and_sim_agree(sandbox: LocalBackend, tmp_path: Path) -> None:
    index = run_fidelity(SCENARIOS, tmp_path, seeds=1, sandbox=sandbox.name)
    assert index.figures.triples == len(SCENARIOS) * 3
    triples = [t for sid in SCENARIOS for t in _triples(tmp_path, sid)]
    for t in triples:
        where = f"{t['scenario']} {t['agent']} seed {t['seed']}"
        assert t["local"]["error"] is None and t["sim"]["error"] is None, where
        assert t["success_agrees"], f"{where}: local {t['local']['success']}, sim {t['sim']['success']}"
        if t["auc_diff"] is not None:
            assert abs(t["auc_diff"]) <= AUC_TOLERANCE, (
                f"{where}: AUC {t['local']['holdout_auc']} vs {t['sim']['holdout_auc']}"
            )
    solved = [t for t in triples if t["agent"] == "reference"]
    assert all(t["local"]["success"] for t in solved)  # the tier compares episodes that reach the goal
    assert index.figures.success_agreement == 1.0
    page = (tmp_path / "tabular-quality-basic.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "KS" in page
    assert (tmp_path / "index.html").exists()
    assert json.loads((tmp_path / "index.json").read_text())["pages"]["churn-deadline-outliers"]


def _triples(out: Path, scenario: str) -> list[dict]:
    return json.loads((out / f"{scenario}.json").read_text())["triples"]


DEGENERATE_PROBES = ("probe:rf-stump", "probe:mlp-one-epoch", "probe:gb-lr-zero", "probe:lr-c-tiny")
"""Off the scripted path: a one-stump forest and an MLP trained one epoch (poor models), gradient
boosting with a learning rate near zero and a logistic regression regularised to almost nothing (whose
ranking survives: AUC measures the order of the scores)."""


def test_off_path_probes_agree(sandbox: LocalBackend, tmp_path: Path) -> None:
    """The probes the old surrogate got wrong (a stump that succeeded in sim and failed in real) give the
    same success on both backends, their holdout AUCs within the tolerance."""
    index = run_fidelity(
        ["tabular-quality-basic"], tmp_path, seeds=1, agents=DEGENERATE_PROBES, sandbox=sandbox.name
    )
    triples = _triples(tmp_path, "tabular-quality-basic")
    assert len(triples) == len(DEGENERATE_PROBES)
    for t in triples:
        where = f"{t['agent']} seed {t['seed']}"
        assert t["local"]["error"] is None and t["sim"]["error"] is None, where
        assert t["success_agrees"], f"{where}: local {t['local']['success']}, sim {t['sim']['success']}"
        assert t["auc_diff"] is not None and abs(t["auc_diff"]) <= AUC_TOLERANCE, (
            f"{where}: AUC {t['local']['holdout_auc']} vs {t['sim']['holdout_auc']}"
        )
    stump = next(t for t in triples if t["agent"] == "probe:rf-stump")
    assert not stump["local"]["success"] and not stump["sim"]["success"]
    assert index.figures.success_flips == 0 and index.figures.flips_by_margin == 0
