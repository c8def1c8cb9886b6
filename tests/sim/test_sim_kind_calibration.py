"""A sim job of the forecasting, text and image kinds is timed by its own entry of the calibration's
``jobs.tasks`` (fitted from real jobs of that kind: ``mlsandbox calibrate --section kinds``), not by the
binary algorithm its kind names as a stand-in, with the features the fit computed for such a job."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import job_until_done as _until_done

from mlsandbox.backends import get_backend
from mlsandbox.backends.protocols import JobSpec
from mlsandbox.calibration.datasets import prepare
from mlsandbox.calibration.fit import _task_features, _timed_as
from mlsandbox.calibration.model import LinearModel
from mlsandbox.calibration.plan import JobPoint, kind_points
from mlsandbox.calibration.shipped import default_path
from mlsandbox.scenario import load_builtin
from mlsandbox.tasks.registry import kind_of

CASES = (
    ("forecast-web-visits-basic", "ridge"),
    ("forecast-web-visits-basic", "gradient_boosting"),
    ("text-support-ticket-routing", "linear_svc"),
    ("images-parts-sorting", "logistic_regression"),
)


def _point(scenario: str, algorithm: str) -> JobPoint:
    return next(
        p
        for p in kind_points(quick=True)
        if p.data.scenario == scenario and p.algorithm == algorithm and p.data.rows is None
    )


def _job(tmp_path: Path, doc: dict[str, Any], point: JobPoint, name: str) -> Any:
    """A trainer job of ``point``'s rows on a sim sandbox with the calibration ``doc``, run to its end."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    rt = get_backend("sim", f"kind-calibration-{name}", calibration=str(path)).runtime()
    spec = load_builtin(point.data.scenario).dataset(point.data.dataset)
    prepared = prepare(point.data, point.cleaning)
    rt.object_store.create_bucket("bk1")
    rt.object_store.put_object("bk1", prepared.key, prepared.payload)
    experiment = rt.tracking.create_experiment(f"e-{name}")
    args = ["--bucket", "bk1", "--key", prepared.key, "--target", prepared.target]
    args += ["--algorithm", point.algorithm, "--hyperparams", "{}", "--experiment-id", experiment]
    args += ["--run-name", "same", "--seed", "1", *kind_of(spec).trainer_args(spec)]
    spec_ = JobSpec(job_id=name, workload="trainer", args=args, cpus=1.0, memory_mb=1024, labels={"t": "k"})
    rt.jobs.submit(spec_)
    done = _until_done(rt, name)
    assert done.state == "succeeded", rt.jobs.logs(name)
    return done


@pytest.mark.parametrize(("scenario", "algorithm"), CASES)
def test_a_job_of_another_kind_is_timed_by_its_own_calibrated_entry(
    tmp_path: Path, scenario: str, algorithm: str
) -> None:
    point = _point(scenario, algorithm)
    task = kind_of(load_builtin(scenario).dataset(point.data.dataset)).fit_task
    doc = json.loads(default_path().read_text())
    assert algorithm in doc["jobs"]["tasks"][task], "the shipped calibration measured this kind's jobs"
    timed = _timed_as(algorithm, doc["jobs"]["algorithms"])
    shipped = _job(tmp_path, doc, point, "shipped")

    # the stand-in's own resources do not time it
    stand_in = copy.deepcopy(doc)
    stand_in["jobs"]["algorithms"][timed]["resources"]["overhead_cpu_s"]["intercept"] += 50.0
    assert _job(tmp_path, stand_in, point, "stand-in").cpu_seconds == shipped.cpu_seconds
    # its entry does: the same draws, 50 CPU-seconds more
    own = copy.deepcopy(doc)
    own["jobs"]["tasks"][task][algorithm]["overhead_cpu_s"]["intercept"] += 50.0
    assert _job(tmp_path, own, point, "own").cpu_seconds == pytest.approx(
        shipped.cpu_seconds + 50.0, abs=0.01
    )

    # without the residual draws, its CPU-seconds and peak memory are the entry's figures at the features
    # the fit computed for this job (the sim computes the same ones)
    exact = copy.deepcopy(doc)
    entry = exact["jobs"]["tasks"][task][algorithm]
    for name in ("overhead_cpu_s", "fit_cpu_s", "peak_rss_mb"):
        entry[name]["residual_sd"] = 0.0
    done = _job(tmp_path, exact, point, "exact")
    x = _task_features(point, task, dict(doc["jobs"]["algorithms"][timed].get("defaults") or {}))
    cpu = LinearModel.model_validate(entry["overhead_cpu_s"]).mean(x) + LinearModel.model_validate(
        entry["fit_cpu_s"]
    ).mean(x)
    assert done.cpu_seconds == pytest.approx(cpu, abs=0.01)
    peak = max(float(entry["import_rss_mb"]), LinearModel.model_validate(entry["peak_rss_mb"]).mean(x))
    assert done.peak_rss_bytes / 2**20 == pytest.approx(peak, abs=0.01)
