"""The calibration sweep on the real local sandbox: trainer jobs through the runtime (a success graded as
the grader does, the kernel's out-of-memory kill, a deadline, a bad hyperparameter), resumable records,
nothing left behind, and the fit capturing their texts."""

from __future__ import annotations

from pathlib import Path

import mlsandbox
from mlsandbox.backends.protocols import Runtime
from mlsandbox.calibration import records as R
from mlsandbox.calibration.fit import fit_calibration
from mlsandbox.calibration.plan import DataRef, JobPoint
from mlsandbox.calibration.sweep import run_sweep

BASE = DataRef(scenario="churn-clean-small", dataset="customers", seed=5)
READY = ("impute_median",)


def test_sweep_of_real_jobs(runtime: Runtime, tmp_path: Path) -> None:
    points = [
        JobPoint(purpose="base", data=BASE, cleaning=READY, algorithm="gradient_boosting"),
        JobPoint(purpose="oom", data=BASE, cleaning=READY, algorithm="gradient_boosting", memory_mb=64),
        JobPoint(purpose="timeout", data=BASE, cleaning=READY, algorithm="gradient_boosting", timeout_s=2.0),
        JobPoint(
            purpose="unknown_hyperparameter",
            data=BASE,
            cleaning=READY,
            algorithm="gradient_boosting",
            hyperparams={"n_trees": 5},
        ),
    ]
    path = tmp_path / "records.jsonl"
    summary = run_sweep(points, path, runtime=runtime)
    assert summary.measured == 4 and not summary.failed_points
    assert run_sweep(points, path, runtime=runtime).measured == 0  # resumed: nothing left to measure

    by_purpose = {r.point.purpose: r.result for r in R.records(path) if isinstance(r.point, JobPoint)}
    ok = by_purpose["base"]
    assert ok["state"] == "succeeded" and ok["exit_code"] == 0
    assert 0.7 < ok["holdout_auc"] < 0.95
    # The in-process pipeline on the same rows gives the job's figures exactly (the AUC grid stands for jobs).
    assert abs(ok["in_process"]["holdout_auc"] - ok["holdout_auc"]) < 1e-9
    assert abs(ok["in_process"]["metrics"]["val_auc"] - ok["metrics"]["val_auc"]) < 1e-9
    assert ok["cpu_seconds"] > 1.0 and ok["peak_rss_mb"] > 100
    assert {"algorithm", "seed", "data", "target", "features"} <= set(ok["run"]["params"])
    assert "val_auc" in ok["run"]["metric_names"] and ok["run"]["status"] == "FINISHED"

    oom = by_purpose["oom"]
    assert oom["state"] == "failed" and oom["exit_code"] == 137
    assert "[mlsandbox] killed: out of memory (OOMKilled, memory limit 64 MiB)" in oom["log"]["notes"]
    late = by_purpose["timeout"]
    assert late["exit_code"] == 137
    assert "[mlsandbox] timed out after 2 s; killing the job" in late["log"]["notes"]
    bad = by_purpose["unknown_hyperparameter"]
    assert bad["exit_code"] == 1 and "Invalid parameter 'n_trees'" in bad["log"]["last_line"]
    assert bad["run"]["status"] == "FAILED"

    session = R.sessions(path)[0].session
    assert not runtime.object_store.bucket_exists(f"calib-{session}")  # the session's data is gone
    assert runtime.jobs.list(("mlsandbox.dev/calibration", session)) == []

    calibration, _ = fit_calibration(path)
    failures = calibration.jobs.failures
    assert failures.out_of_memory.log_tail[0].captured
    assert failures.out_of_memory.log_tail[0].text.format(memory_mb=96) == (
        "[mlsandbox] killed: out of memory (OOMKilled, memory limit 96 MiB)"
    )
    assert (
        failures.timeout.log_tail[0]
        .text.format(timeout_s=5.0)
        .endswith("timed out after 5 s; killing the job")
    )
    tail = [t.text for t in failures.unknown_hyperparameter.log_tail]
    assert tail[-1] == "ValueError: {detail}" and "Traceback (most recent call last):" in tail
    assert not [t for t in tail if "View run" in t]  # MLflow's links to the run are left out
    package = str(Path(mlsandbox.__file__).resolve().parent)
    assert all(package not in t for t in tail)  # no machine path in what ships
