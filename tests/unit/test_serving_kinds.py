"""Serving of every kind: the model server answers in the kind's declared response shape (a number for a
regressor, a class label and its probability for a multi-class classifier), the deployment goal of another
kind names its metric and bar, production populations and drifting batches keep the dataset's kind, and a
kind whose data is not a table is refused behind a drifting source or production traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from mlsandbox.data.drift import DriftingDataset, batch_spec
from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.serving import Traffic
from mlsandbox.scenario.sources import refuse_non_table
from mlsandbox.tasks import registry
from mlsandbox.tasks.tabular_multiclass import MulticlassDataset
from mlsandbox.tasks.tabular_regression import RegressionDataset
from mlsandbox.workloads.model_server import LoadedModel, LoadError, create_app
from mlsandbox.world.serving.traffic import make_population

COLUMNS = [
    {"type": "numeric", "name": "a", "weight": 1.5},
    {"type": "boolean", "name": "flag", "probability": 0.3, "weight": 1.0},
    {"type": "categorical", "name": "c", "categories": ["x", "y", "z"], "weights": [0.0, 0.5, 1.0]},
]


def _dataset(**kw: Any) -> dict[str, Any]:
    return {"name": "t", "rows": 600, "holdout_rows": 300, "target": "y", "columns": COLUMNS, **kw}


def _frame(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {"a": rng.normal(size=n), "b": rng.normal(size=n), "plan": rng.choice(["basic", "premium"], size=n)}
    )


def _fit(task: str) -> tuple[Any, pd.DataFrame]:
    from mlsandbox.workloads.trainer import make_pipeline

    x = _frame()
    score = x["a"] + (x["plan"] == "basic")
    if task == "regression":
        y: Any = 3.0 * score
    elif task == "multiclass":
        y = np.asarray(["low", "mid", "high"], dtype=object)[np.digitize(score, [0.0, 1.0])]
    else:
        y = (score > 0.5).astype(int)
    algorithm = "ridge" if task == "regression" else "logistic_regression"
    return make_pipeline(x, algorithm, {}, 0, task).fit(x, y), x


COLS = [("a", "number"), ("b", "number"), ("plan", "string")]


def test_each_kind_declares_a_response_shape_the_server_takes() -> None:
    shapes = {k.name: k.serving.shape for k in registry.kinds().values()}
    assert shapes["tabular"] == "binary"
    assert shapes["tabular_multiclass"] == "multiclass"
    assert shapes["tabular_regression"] == "number"
    assert registry.get("tabular").metric().logged == "val_auc"
    assert registry.get("tabular_regression").metric().logged == "val_rmse"


def test_a_regressor_answers_plain_numbers() -> None:
    model, x = _fit("regression")
    loaded = LoadedModel(model, "m", "1", COLS, None, "number")
    predictions, proba = loaded.predict(x.head(5))
    assert proba is None and all(isinstance(v, float) for v in predictions)
    assert predictions == pytest.approx(model.predict(x.head(5)).tolist())
    # What the model is decides without a shape: the same numbers.
    assert LoadedModel(model, "m", "1", COLS).predict(x.head(5))[0] == pytest.approx(predictions)


def test_a_multiclass_classifier_answers_a_label_and_its_probability() -> None:
    model, x = _fit("multiclass")
    loaded = LoadedModel(model, "m", "1", COLS, list(model.classes_), "multiclass")
    labels, proba = loaded.predict(x.head(20))
    assert labels == model.predict(x.head(20)).tolist()
    assert proba is not None
    assert proba == pytest.approx(model.predict_proba(x.head(20)).max(axis=1).tolist())
    # The binary shape of a two-class model is unchanged: the positive class's probability.
    binary, xb = _fit("binary")
    labels, proba = LoadedModel(binary, "m", "1", COLS, list(binary.classes_), "binary").predict(xb.head(5))
    assert proba == pytest.approx(binary.predict_proba(xb.head(5))[:, 1].tolist())


def test_a_classifier_shape_for_a_regressor_does_not_load() -> None:
    model, _ = _fit("regression")
    with pytest.raises(LoadError, match="needs a classifier"):
        LoadedModel(model, "m", "1", COLS, None, "multiclass")
    with pytest.raises(LoadError, match="unknown response shape"):
        LoadedModel(model, "m", "1", COLS, None, "horizon")


def test_the_server_answers_a_regression_request_with_numbers(tmp_path: Path) -> None:
    import mlflow.models
    import mlflow.sklearn

    model, x = _fit("regression")
    path = tmp_path / "m"
    mlflow.sklearn.save_model(
        model, str(path), signature=mlflow.models.infer_signature(x.head(10), model.predict(x.head(10)))
    )
    with TestClient(create_app(model_path=str(path), response="number")) as client:
        rows = x.head(3).to_dict(orient="records")
        out = client.post("/predict", json={"instances": rows}).json()
    assert "probabilities" not in out
    assert out["predictions"] == pytest.approx(model.predict(x.head(3)).tolist())


def test_a_deployment_goal_of_another_kind_names_its_metric_and_bar() -> None:
    base = {"id": "serve-kinds", "title": "t", "task": "t", "serving": {"dataset": "t"}}
    ok = Scenario.model_validate(
        {
            **base,
            "datasets": [_dataset(kind="tabular_regression")],
            "goal": {"type": "deployment_slo", "dataset": "t", "metric": "mae", "baseline_ratio": 0.7},
        }
    )
    assert ok.work() == ("tabular_regression", "mae+slo")
    with pytest.raises(ValidationError, match=r"goal\.min_auc .*metric 'roc_auc' does not fit"):
        Scenario.model_validate(
            {
                **base,
                "datasets": [_dataset(kind="tabular_regression")],
                "goal": {"type": "deployment_slo", "dataset": "t"},
            }
        )
    with pytest.raises(ValidationError, match="give its bar"):
        Scenario.model_validate(
            {
                **base,
                "datasets": [_dataset(kind="tabular_regression")],
                "goal": {"type": "deployment_slo", "dataset": "t", "metric": "mae"},
            }
        )
    binary = Scenario.model_validate(
        {**base, "datasets": [_dataset()], "goal": {"type": "deployment_slo", "dataset": "t"}}
    )
    assert binary.work() == ("tabular", "roc_auc+slo")


def test_drifting_batches_and_production_populations_keep_the_kind() -> None:
    spec = RegressionDataset.model_validate(_dataset(kind="tabular_regression"))
    drifting = DriftingDataset(base=spec, batches=3, batch_rows=100, time_column=None)
    batch, _ = batch_spec(drifting, 1)
    assert isinstance(batch, RegressionDataset) and batch.kind == "tabular_regression"
    traffic = Traffic(phases=1, population_per_phase=100)
    population = make_population(spec, traffic, 3)
    assert all(isinstance(v, float) for v in population.labels.values())
    classes = MulticlassDataset.model_validate(_dataset(kind="tabular_multiclass", classes=["p", "q", "r"]))
    labels = set(make_population(classes, traffic, 3).labels.values())
    assert labels <= {"p", "q", "r"} and len(labels) == 3


def test_a_kind_whose_data_is_not_a_table_is_refused_behind_drift_or_traffic() -> None:
    class Series:
        name, kind = "s", "timeseries"

    with pytest.raises(ValueError, match="dataset 's' is of kind 'timeseries'"):
        refuse_non_table(Series(), "a drifting lake source")


def test_the_sim_types_a_boolean_feature_as_the_real_signature_does() -> None:
    from mlsandbox.backends.sim.realfit import boolean_columns, numeric_columns
    from mlsandbox.workloads.trainer import make_pipeline

    rng = np.random.default_rng(0)
    x = pd.DataFrame(
        {"a": rng.normal(size=200), "flag": rng.random(200) < 0.2, "c": rng.choice(["p", "q"], 200)}
    )
    for task, y in (("multiclass", rng.choice(["l", "m", "h"], 200)), ("regression", rng.normal(size=200))):
        model = make_pipeline(x, "gradient_boosting", {}, 0, task).fit(x, y)
        assert boolean_columns(model) == ["flag"] and numeric_columns(model) == ["a"]
