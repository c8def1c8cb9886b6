"""Load (the ``load`` tier): N concurrent HTTP sessions playing whole episodes against one gateway whose
session cap is N (``benchmarks/bench_load.py``, here with a small N): no HTTP error at all (no 5xx), every
step ``ok``, no cross-talk between sessions, every grade equal to the AUC computed independently from the
registered model and the regenerated holdout, and the cap answered with 429. The figures go to
``.bench/load.json`` (the benchmark measures N = 1, 4, 16).

``MLSANDBOX_LOAD_SESSIONS`` changes N (4 by default).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_load

pytestmark = [pytest.mark.services, pytest.mark.load]
SESSIONS = int(os.environ.get("MLSANDBOX_LOAD_SESSIONS", "4"))


def test_concurrent_sessions_play_whole_episodes_without_errors_or_cross_talk(sandbox: Any) -> None:
    result = bench_load.run_load(sandbox, SESSIONS)
    bench_load.print_results([result])
    bench_load.save([result])
    assert result["cap"]["status"] == 429, result["cap"]
    assert "at most" in result["cap"]["detail"], result["cap"]
    assert len(result["grades"]) == SESSIONS
    assert result["light_step_ms"]["n"] >= 4 * SESSIONS
    assert bench_load.problems(result) == [], bench_load.problems(result)
    aucs = [g["holdout_auc"] for g in result["grades"]]
    assert len(set(aucs)) == SESSIONS, aucs  # each session graded on its own data (seeds differ)


def test_the_load_check_finds_each_kind_of_problem() -> None:
    clean = {
        "errors": [],
        "crosstalk": [],
        "cap": {"status": 429, "detail": "at most 2"},
        "grades": [{"session": 0, "holdout_auc": 0.8, "expected_auc": 0.8}],
    }
    assert bench_load.problems(clean) == []
    bad = {
        "errors": ["session 1: HTTP 503 the sandbox could not create the episode"],
        "crosstalk": ["session 0: list_runs shows 2 runs"],
        "cap": {"status": 201, "detail": "created past the cap"},
        "grades": [
            {"session": 0, "holdout_auc": 0.8, "expected_auc": 0.79},
            {"session": 1, "holdout_auc": None, "expected_auc": None},
        ],
    }
    found = " | ".join(bench_load.problems(bad))
    assert "HTTP 503" in found and "list_runs shows 2 runs" in found and "cap was answered" in found, found
    assert "graded AUC 0.8 but its model scores 0.79" in found and "session 1: no grade" in found, found
