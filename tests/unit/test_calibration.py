"""The calibration sweep's plan, its rows, the in-process fits and the fit into the sim's schema (no
services: the job, serving and flow parts run against a real sandbox in tests/integration)."""

from __future__ import annotations

import json
import site
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from mlsandbox.calibration import records as R
from mlsandbox.calibration.datasets import prepare
from mlsandbox.calibration.fit import fit_calibration, samples, template, write_calibration
from mlsandbox.calibration.plan import DataRef, FitPoint, JobPoint, build_plan
from mlsandbox.calibration.sweep import run_fit, run_sweep

BASE = DataRef(scenario="tabular-quality-basic", dataset="customers", seed=3)


def test_plan_ids_are_unique_and_stable() -> None:
    full = build_plan()
    ids = [p.id() for p in full]
    assert len(set(ids)) == len(ids)
    assert ids == [p.id() for p in build_plan()]
    quick = build_plan(quick=True)
    assert len(quick) < len(full) / 10
    kinds = {p.kind for p in full}
    assert kinds == {"job", "fit", "serving", "flow"}
    purposes = {p.purpose for p in full if isinstance(p, JobPoint)}
    for failure in (
        "oom",
        "divergence",
        "missing_values",
        "unknown_hyperparameter",
        "timeout",
        "missing_object",
    ):
        assert failure in purposes
    assert all(p.cpus <= 1.0 for p in full if isinstance(p, JobPoint))


def test_plan_refuses_unknown_sections_and_jobs_over_one_cpu() -> None:
    with pytest.raises(ValueError, match="unknown sweep sections"):
        build_plan(sections=("job", "gpu"))
    assert {p.kind for p in build_plan(quick=True, sections=("fit",))} == {"fit"}
    with pytest.raises(ValidationError):
        JobPoint(purpose="base", data=BASE, algorithm="mlp", cpus=2.0)


def test_prepare_cleans_like_clean_dataset() -> None:
    raw = prepare(BASE, ())
    assert raw.key == "raw/train.parquet"
    assert raw.features["missing_cell_share"] > 0.02
    cleaned = prepare(BASE, ("impute_median", "clip_outliers"))
    assert cleaned.key == "clean/train-clip-outliers.parquet"
    assert cleaned.payload[:4] == b"PAR1"
    assert cleaned.features["missing_cell_share"] == 0.0
    assert cleaned.features["outlier_share"] < raw.features["outlier_share"]
    clean_table = prepare(BASE.model_copy(update={"defect_scale": 0.0}), ())
    assert clean_table.features["missing_cell_share"] == 0.0
    assert len(cleaned.holdout) == 2000


def test_in_process_fit_and_its_failures() -> None:
    ok = run_fit(FitPoint(data=BASE, cleaning=("impute_median",), algorithm="gradient_boosting"))
    assert ok["state"] == "succeeded"
    assert 0.7 < ok["holdout_auc"] < 0.95
    assert 0.6 < ok["metrics"]["val_auc"] < 1.0
    assert ok["fit_cpu_s"] > 0
    nan = run_fit(FitPoint(data=BASE, algorithm="logistic_regression"))
    assert nan["state"] == "failed"
    assert nan["error"]["type"] == "ValueError"
    assert "NaN" in nan["error"]["message"]


def test_template_removes_machine_paths_and_escapes_braces() -> None:
    import mlsandbox
    from mlsandbox.calibration.model import TextTemplate

    package = str(Path(mlsandbox.__file__).resolve().parent)
    sp = site.getsitepackages()[0]
    text = f'  File "{package}/workloads/trainer.py", line 3 in {sp}/x.py: {{"C": 1}} at epoch 7'
    out = template(text, {"at epoch 7": "at epoch {epoch}"})
    assert package not in out and sp not in out
    assert out.startswith('  File "{package_dir}/workloads/trainer.py"')
    assert "{site_packages}/x.py" in out and '{{"C": 1}}' in out
    TextTemplate(text=out)  # only known placeholders
    assert out.format(package_dir="P", site_packages="S", epoch=9).endswith('{"C": 1} at epoch 9')


def test_fit_from_in_process_records_is_a_valid_provisional_calibration(tmp_path: Path) -> None:
    tables = [
        DataRef(scenario=s, dataset=d, rows=600, seed=seed)
        for s, d in (
            ("tabular-quality-basic", "customers"),
            ("churn-imbalanced-missing", "customers"),
            ("data-csv-batch-missing-outliers", "orders"),
            ("data-parquet-schema-change", "sales"),
        )
        for seed in (1, 2)
    ]
    points = [
        FitPoint(data=ref, cleaning=cleaning, algorithm=algorithm)
        for ref in tables
        for cleaning in ((), ("impute_median", "clip_outliers"))
        for algorithm in ("gradient_boosting", "random_forest")
    ]
    path = tmp_path / "records.jsonl"
    summary = run_sweep(points, path, quick=True)
    assert summary.measured == len(points) and not summary.failed_points
    again = run_sweep(points, path, quick=True)  # resumable: everything is recorded already
    assert again.measured == 0 and again.done_before == len(points)
    recs = R.records(path)
    assert len(recs) == len(points)
    assert len(R.sessions(path)) == 1
    got = samples(recs)
    assert got and all(np.isfinite(s.proxy_holdout_auc) for s in got)
    calibration, report = fit_calibration(path)
    assert calibration.meta.provisional  # fits only: no jobs, serving or flows
    assert calibration.meta.command == "mlsandbox calibrate"
    gb = calibration.jobs.algorithms["gradient_boosting"]
    assert gb.fit_quality["auc.holdout_delta"].points >= 3
    assert any(k.startswith("holdout AUC proxy+delta") for k in report)
    out = write_calibration(calibration, tmp_path / "calibration.json")
    doc = json.loads(out.read_text())
    assert doc["meta"]["sweep"]["fits"] == len(points)
