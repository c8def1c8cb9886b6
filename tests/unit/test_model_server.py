"""The model server's HTTP surface on a real MLflow model directory (in-process ASGI, no services)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from starlette.testclient import TestClient

from mlsandbox.workloads.fault_hook import clear_fault, write_fault
from mlsandbox.workloads.model_server import LOAD_FAILED_EXIT, LoadError, create_app, load_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, Any]:
    import mlflow.models
    import mlflow.sklearn

    from mlsandbox.workloads.trainer import make_pipeline

    rng = np.random.default_rng(0)
    x = pd.DataFrame(
        {
            "a": rng.normal(size=300),
            "b": rng.normal(size=300),
            "plan": rng.choice(["basic", "premium"], size=300),
        }
    )
    y = ((x["a"] + (x["plan"] == "basic") + rng.normal(scale=0.5, size=300)) > 0.5).astype(int)
    pipe = make_pipeline(x, "logistic_regression", {}, 0).fit(x, y)
    path = tmp_path_factory.mktemp("model") / "m"
    mlflow.sklearn.save_model(
        pipe, str(path), signature=mlflow.models.infer_signature(x.head(10), pipe.predict(x.head(10)))
    )
    return path, x, pipe


@pytest.fixture()
def client(model_dir: Any, tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    fault = tmp_path / "fault.json"
    app = create_app(
        model_path=str(model_dir[0]), fault_file=str(fault), port_file=str(tmp_path / "port"), port=1
    )
    with TestClient(app) as c:
        yield c, fault


def _rows(x: pd.DataFrame) -> list[dict[str, Any]]:
    return x.to_dict("records")


def test_predictions_match_the_model(client: Any, model_dir: Any) -> None:
    c, _ = client
    _, x, pipe = model_dir
    sample = x.head(40)
    r = c.post("/predict", json={"instances": _rows(sample)})
    assert r.status_code == 200
    body = r.json()
    assert body["predictions"] == pipe.predict(sample).tolist()
    np.testing.assert_allclose(body["probabilities"], pipe.predict_proba(sample)[:, 1])
    split = {"columns": list(sample.columns), "data": sample.astype(object).values.tolist()}
    assert c.post("/predict", json={"dataframe_split": split}).json()["predictions"] == body["predictions"]
    h = c.get("/health").json()
    assert h["status"] == "ok" and h["version"] == "0"


def test_bad_requests_get_422_with_the_field(client: Any, model_dir: Any) -> None:
    c, _ = client
    row = _rows(model_dir[1].head(1))[0]
    bad = {**row, "a": "high", "extra": 1}
    del bad["plan"]
    r = c.post("/predict", json={"instances": [row, bad]})
    assert r.status_code == 422
    locs = {tuple(d["loc"]): d["type"] for d in r.json()["detail"]}
    assert locs == {
        ("body", "instances", 1, "a"): "number_type",
        ("body", "instances", 1, "extra"): "extra_forbidden",
        ("body", "instances", 1, "plan"): "missing",
    }
    assert c.post("/predict", content=b"{not json").status_code == 422
    assert c.post("/predict", json={"rows": []}).status_code == 422
    assert c.post("/predict", json={"instances": []}).status_code == 422
    r = c.post("/predict", json={"dataframe_split": {"columns": ["a", "b"], "data": [[1, 2]]}})
    assert r.status_code == 422 and "missing column 'plan'" in r.text
    r = c.post("/predict", json={"entity_ids": ["e1"]})
    assert r.status_code == 400 and "no feature service" in r.text


def test_metrics_count_requests_and_injected_faults(client: Any, model_dir: Any) -> None:
    c, fault = client
    row = _rows(model_dir[1].head(1))
    for _ in range(3):
        assert c.post("/predict", json={"instances": row}).status_code == 200
    write_fault(fault, error_rate=1.0, status=503)
    try:
        import time

        time.sleep(0.15)  # the hook re-reads its file at most every 100 ms
        assert c.post("/predict", json={"instances": row}).status_code == 503
        text = c.get("/metrics").text  # /metrics is exempt from the hook
    finally:
        clear_fault(fault)
    assert 'http_requests_total{code="200",path="/predict"} 3.0' in text
    assert 'http_errors_total{kind="server",path="/predict"} 1.0' in text
    assert "model_rows_total 3.0" in text
    assert 'model_info{model="local",version="0"} 1.0' in text


def test_load_failures_are_load_errors(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="not models:/NAME/VERSION"):
        load_model("runs:/abc/model", None, None)
    with pytest.raises(LoadError, match="cannot load the model"):
        load_model(None, str(tmp_path / "missing"), None)
    assert LOAD_FAILED_EXIT == 3
