"""Calibration per kind of work: the sweep's ``kinds`` section (real jobs of every kind but binary
classification, trained as the kind says), the per-task resources it fits into ``jobs.tasks``, the sim's
use of them, and a calibration written before kinds still loading."""

from __future__ import annotations

import json
from typing import Any

from mlsandbox.calibration import records as R
from mlsandbox.calibration.fit import fit_task_resources
from mlsandbox.calibration.model import Calibration
from mlsandbox.calibration.plan import SECTIONS, JobPoint, build_plan, kind_points
from mlsandbox.calibration.shipped import default_path


def test_the_kinds_section_trains_each_kinds_algorithms() -> None:
    assert "kinds" in SECTIONS
    points = kind_points(quick=True)
    assert points and all(p.purpose == "kind" for p in points)
    algorithms = {(p.data.scenario.split("-")[0], p.algorithm) for p in points}
    assert ("regression", "ridge") in algorithms
    assert ("multiclass", "logistic_regression") in algorithms
    assert build_plan(quick=True, sections=("kinds",)) == points
    # A binary job point's id is what it was before kinds (records of earlier sweeps still count).
    binary = JobPoint.model_validate(
        {"purpose": "base", "data": {"scenario": "tabular-quality-basic", "dataset": "customers", "seed": 7},
         "algorithm": "gradient_boosting"}
    )  # fmt: skip
    assert json.loads(binary.model_dump_json())["algorithm"] == "gradient_boosting"


def _record(point: JobPoint, i: int, cpu: float, train: float, peak: float) -> R.Record:
    result: dict[str, Any] = {
        "state": "succeeded",
        "task": "regression",
        "kind": "tabular_regression",
        "cpu_seconds": cpu,
        "wall_s": cpu + 1.0,
        "peak_rss_mb": peak,
        "metrics": {"train_seconds": train},
        "data": {"rows": 1000.0 * (i + 1)},
    }
    return R.Record(id=f"r{i}", session="s", point=point, started_at=0.0, load_average_1m=1.0, elapsed_s=1.0,
                    result=result)  # fmt: skip


def test_task_resources_are_fitted_from_the_kind_jobs_and_the_sim_reads_them() -> None:
    doc = json.loads(default_path().read_text())
    doc["jobs"].pop("tasks", None)
    assert Calibration.model_validate(doc).jobs.tasks == {}  # a calibration written before kinds
    ridge = [p for p in kind_points(quick=True) if p.algorithm == "ridge"][:1]
    recs = [_record(ridge[0], i, cpu=4.0 + i, train=0.2, peak=180.0 + i) for i in range(3)]
    tasks, report = fit_task_resources(recs, doc)
    res = tasks["regression"]["ridge"]
    assert report["regression/ridge"]["timed_as"] == "logistic_regression"
    doc["jobs"]["tasks"] = tasks
    cal = Calibration.model_validate(doc)
    model = cal.jobs.tasks["regression"]["ridge"]
    # the overheads (the same trainer's start, reading and logging) stay the timed algorithm's
    assert (
        res["overhead_cpu_s"]
        == doc["jobs"]["algorithms"]["logistic_regression"]["resources"]["overhead_cpu_s"]
    )
    assert abs(model.peak_rss_mb.mean({"rows": 2000.0}) - 181.0) < 1.0
    features = {"rows": 2000.0}
    # the fitted fit-CPU level is the measured 0.2 s once the timed algorithm's features are in
    assert model.fit_cpu_s.link == "log" and model.fit_cpu_s.intercept != (
        cal.jobs.algorithms["logistic_regression"].resources.fit_cpu_s.intercept
    )
    assert model.overhead_cpu_s.mean(features) > 0
