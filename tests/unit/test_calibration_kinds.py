"""Calibration per kind of work: the sweep's ``kinds`` section (real jobs of every kind but binary
classification, trained as the kind says), the per-task resources it fits into ``jobs.tasks``, the sim's
use of them, and a calibration written before kinds still loading."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlsandbox.calibration import records as R
from mlsandbox.calibration.datasets import prepare, scaled_spec
from mlsandbox.calibration.fit import _task_features, fit_task_resources
from mlsandbox.calibration.model import Calibration
from mlsandbox.calibration.plan import (
    SECTIONS,
    DataRef,
    JobPoint,
    build_plan,
    kind_points,
    size_field,
)
from mlsandbox.calibration.shipped import default_path
from mlsandbox.scenario import load_builtin
from mlsandbox.tasks.registry import DEFAULT_KIND, kind_of, kinds
from mlsandbox.workloads.image_classifier import torch_available

OTHER_KINDS = {
    "tabular_multiclass": "multiclass",
    "tabular_regression": "regression",
    "timeseries_forecasting": "forecasting",
    "text_classification": "text",
    "image_classification": "images",
}
"""Every built-in kind but binary classification, with its trainer task."""


def _kind(point: JobPoint) -> str:
    return kind_of(load_builtin(point.data.scenario).dataset(point.data.dataset)).name


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


@pytest.mark.parametrize("quick", [True, False])
def test_the_kinds_section_covers_every_kind_but_binary_with_its_runnable_algorithms(quick: bool) -> None:
    points = kind_points(quick=quick)
    by_kind: dict[str, set[str]] = {}
    for p in points:
        by_kind.setdefault(_kind(p), set()).add(p.algorithm)
    assert set(OTHER_KINDS) <= set(by_kind) and DEFAULT_KIND not in by_kind
    for name in OTHER_KINDS:
        runnable = set(kinds()[name].algorithms) - (set() if torch_available() else {"cnn"})
        assert by_kind[name] == runnable, name
    assert ("cnn" in by_kind["image_classification"]) == torch_available()
    # each kind's own preparation steps, and its own sizes in its spec's size field
    for p in points:
        kind = kinds()[_kind(p)]
        assert set(p.cleaning) <= set(kind.preparations)
        assert p.data.rows in kind.calibration_sizes
    cleanings = {_kind(p): p.cleaning for p in points}
    assert "fill_gaps" in cleanings["timeseries_forecasting"]
    assert "drop_empty" in cleanings["text_classification"]
    assert "drop_unreadable" in cleanings["image_classification"]
    ids = [p.id() for p in points]
    assert len(set(ids)) == len(ids)


def test_every_kind_declares_a_size_field_its_spec_has_and_sizes_a_data_ref_takes() -> None:
    """The sweep resizes a kind's dataset in the field its kind declares (``TaskKind.size_field``), to the
    sizes it declares (``TaskKind.calibration_sizes``): the field is one of its spec's, and each size is
    the family's own (None) or a size a :class:`DataRef` accepts."""
    smallest = DataRef.model_fields["rows"].metadata[0].ge
    for name, kind in kinds().items():
        assert kind.size_field is not None and kind.size_field in kind.spec.model_fields, name
        assert size_field(kind.spec) == kind.size_field, name
        assert kind.calibration_sizes and kind.calibration_sizes[0] is None, name
        assert all(s is None or (isinstance(s, int) and s >= smallest) for s in kind.calibration_sizes), name
    # what the sweep has measured: each kind's sizes and field as they were when the sweep had them in
    # tables of its own (a change here changes the points' ids, and a sweep no longer resumes)
    declared = {n: (k.size_field, k.calibration_sizes) for n, k in kinds().items() if n in OTHER_KINDS}
    assert declared == {
        "tabular_multiclass": ("rows", (None, 6000)),
        "tabular_regression": ("rows", (None, 6000)),
        "timeseries_forecasting": ("history_days", (None, 2100)),
        "text_classification": ("rows", (None, 6000)),
        "image_classification": ("rows", (None, 3000)),
    }
    assert kinds()[DEFAULT_KIND].size_field == "rows"
    # a spec instance is resized in its kind's field too
    forecast = load_builtin("forecast-web-visits-basic").datasets[0]
    assert size_field(forecast) == "history_days"


def test_the_table_kinds_points_are_the_ones_measured_before_the_other_kinds_joined() -> None:
    """Their ids are their records' keys: a sweep of the section resumes from records taken before."""
    points = kind_points()
    tables = [p for p in points if _kind(p) in ("tabular_multiclass", "tabular_regression")]
    assert len(tables) == 48 and all(p.data.fmt == "parquet" for p in tables)
    first = tables[0]
    assert (first.data.scenario, first.algorithm, first.cleaning) == (
        "multiclass-ticket-priority", "logistic_regression", ("clip_outliers",)
    )  # fmt: skip
    assert first.id() == "03aa3e3e94ded1b1"


@pytest.mark.parametrize(
    ("scenario", "task", "size_field"),
    [
        ("forecast-web-visits-basic", "forecasting", "history_days"),
        ("text-support-ticket-routing", "text", "rows"),
        ("images-parts-sorting", "images", "rows"),
    ],
)
def test_prepare_makes_another_kinds_rows_with_its_own_steps(
    scenario: str, task: str, size_field: str
) -> None:
    point = next(p for p in kind_points(quick=True) if p.data.scenario == scenario and p.data.rows is None)
    spec = load_builtin(scenario).dataset(point.data.dataset)
    kind = kind_of(spec)
    prepared = prepare(point.data, point.cleaning)
    assert point.cleaning and prepared.key.startswith("clean/") and prepared.payload[:4] == b"PAR1"
    assert prepared.target == kind.target(spec) and prepared.target in prepared.frame.columns
    assert prepared.features["rows"] == len(prepared.frame) > 0
    # the kind's profile of the prepared rows finds nothing left that its policy would prepare
    assert kind.policy(kind.profile(prepared.frame, prepared.target)).preparations == ()
    assert len(prepared.holdout) > 0
    # resized in the spec's own size field (a series' days of history, documents, images)
    bigger = prepare(point.data.model_copy(update={"rows": 2 * getattr(spec, size_field)}), point.cleaning)
    assert 1.8 * len(prepared.frame) < len(bigger.frame) < 2.2 * len(prepared.frame)
    # the features the fit times such a job with are the ones the sim computes: the target and the
    # numeric columns (a date, a document or an image is not one-hot encoded)
    x = _task_features(point, task, {})
    assert x["rows"] == len(prepared.frame)
    assert x["onehot_width"] == x["numeric_columns"] <= 1 and x["categorical_columns"] == 0


def test_scaled_spec_resizes_another_kinds_spec_and_refuses_to_scale_defects_it_has_not() -> None:
    forecast = load_builtin("forecast-web-visits-basic").datasets[0]
    assert scaled_spec(forecast, 1.0, None) == forecast
    assert scaled_spec(forecast, 1.0, 900).history_days == 900
    with pytest.raises(ValueError, match="no defect rates"):
        scaled_spec(forecast, 0.5, None)
    images = load_builtin("images-parts-sorting").datasets[0]
    assert scaled_spec(images, 1.0, 300).rows == 300
    ref = DataRef(scenario="images-parts-sorting", dataset=images.name, seed=1, defect_scale=0.0)
    with pytest.raises(ValueError, match="no defect rates"):
        prepare(ref, ())


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
    timed = doc["jobs"]["algorithms"]["logistic_regression"]["resources"]
    # the overhead (start, reading, logging) keeps the timed algorithm's shape, its wall time too, and its
    # CPU level is the measured jobs' CPU-seconds less the trainer's own fit time
    assert res["overhead_cpu_s"]["coefficients"] == timed["overhead_cpu_s"]["coefficients"]
    assert res["overhead_wall_s"] == timed["overhead_wall_s"]
    x = _task_features(
        ridge[0], "regression", dict(doc["jobs"]["algorithms"]["logistic_regression"]["defaults"])
    )
    assert abs(model.overhead_cpu_s.mean(x) - (5.0 - 0.2)) < 1e-6
    assert report["regression/ridge"]["overhead_cpu_s"] == pytest.approx(4.8, abs=1e-3)
    assert abs(model.peak_rss_mb.mean({"rows": 2000.0}) - 181.0) < 1.0
    # the fitted fit-CPU level is the measured 0.2 s once the timed algorithm's features are in
    assert model.fit_cpu_s.link == "log" and model.fit_cpu_s.intercept != (
        cal.jobs.algorithms["logistic_regression"].resources.fit_cpu_s.intercept
    )
    assert model.fit_cpu_s.mean(x) == pytest.approx(0.2, rel=1e-6)


def test_the_modelled_columns_are_a_tables_all_and_an_own_learners_target_and_numbers() -> None:
    """What the sim's job model (and the fit, through ``_task_features``) reads of a job's rows, by the
    trainer's task and the target alone."""
    import pyarrow as pa

    from mlsandbox.backends.sim.surrogate import modelled_columns

    table = pa.table({"date": ["2024-01-01"], "text": ["a b"], "x": [1.0], "n": [2]})
    for task in ("binary", "multiclass", "regression"):
        assert modelled_columns(table, task, "n") is table
    assert modelled_columns(table, "forecasting", "n").column_names == ["x", "n"]
    assert modelled_columns(table, "text", "text").column_names == ["text", "x", "n"]
